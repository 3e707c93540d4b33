//! Elastic Metal on a Private Network, the engine end to end in-process: the
//! fake Elastic Metal API and the fake Private Network clients.

use std::sync::Arc;
use std::time::Duration;

use super::super::driver_fakes::*;
use super::super::tests_support::spec;
use super::super::*;
use crate::install::node_network::NodeNetwork;
use crate::scaleway::OfferOption;
use crate::scaleway::fake::{Op as EmOp, sample_offers};
use crate::scaleway::private_network::fake::{FakePrivateNetworks, Op, private_network_option};
use crate::scaleway::private_network::{
    AttachmentStatus, BookIpRequest, Ipam, MetalPrivateNetworks, PrivateNetworks,
};

const PN_OPTION: &str = "opt-pn";

fn pn_option() -> OfferOption {
    private_network_option(PN_OPTION)
}

struct Net {
    w: World,
    pn: Arc<FakePrivateNetworks>,
    network: NodeNetwork,
}

/// Server `srv-1` of offer `offer-1` (which sells the private_network
/// option) in fr-par-2, and a Private Network `prod` of fr-par.
fn networked(booked: usize) -> Net {
    let pn = Arc::new(FakePrivateNetworks::new());
    let network = pn.add_private_network("fr-par", "prod", "172.16.0.0/22", &[]);
    pn.add_metal_server("fr-par-2", "srv-1");
    pn.set_offer_options("fr-par-2", vec![pn_option()]);
    pn.set_requires_option(true);
    let booked: Vec<String> = (0..booked)
        .map(|_| {
            let req = BookIpRequest::new("proj", &network.id, vec![]);
            futures::executor::block_on(pn.book_ip("fr-par", &req))
                .unwrap()
                .id
        })
        .collect();
    let w = world_of(
        FakeRescue::reachable(),
        FakeTalos::default(),
        false,
        Some(pn.clone() as Arc<dyn PrivateNetworks>),
    );
    let mut offer = sample_offers("fr-par-2").remove(0);
    offer.id = "offer-1".into();
    offer.options = vec![pn_option()];
    w.em.set_offers("fr-par-2", vec![offer]);
    Net {
        w,
        network: NodeNetwork {
            region: "fr-par".into(),
            id: network.id,
            subnets: vec!["172.16.0.0/22".into()],
            booked,
            internal_ip: true,
        },
        pn,
    }
}

fn networked_spec(n: &Net) -> InstallSpec {
    InstallSpec {
        private_network: Some(n.network.clone()),
        ..spec(URL)
    }
}

async fn until(mut done: impl FnMut() -> bool) {
    for _ in 0..3600 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    panic!("never happened");
}

#[tokio::test(start_paused = true)]
async fn the_server_is_attached_before_the_rescue_boot_and_its_vlan_and_address_are_rendered() {
    let n = networked(0);
    n.w.engine.start(networked_spec(&n));
    n.w.em.deliver("srv-1");
    // The option first; while it is being enabled, no attachment is asked.
    until(|| n.pn.count(Op::AddServerOption) == 1).await;
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert_eq!(
        n.pn.count(Op::Attach),
        0,
        "attached before the option was on"
    );
    n.pn.finish();
    until(|| n.pn.count(Op::Attach) == 1).await;
    // Attaching: nothing else happens until it is attached.
    tokio::time::sleep(Duration::from_secs(120)).await;
    assert_eq!(n.w.engine.phase("srv-1"), Some(Phase::Ready));
    assert!(
        n.w.reboots().is_empty(),
        "no rescue boot before the attachment"
    );
    assert_eq!(n.pn.count(Op::AddServerOption), 1, "the option first");
    n.pn.finish();
    wait_for(&n.w.engine, Phase::Joined).await;

    assert_eq!(n.pn.count(Op::Attach), 1, "attached once");
    let a = n.pn.attachments().remove(0);
    assert_eq!(a.status, AttachmentStatus::Attached);
    let vlan = a.vlan.unwrap();
    let address =
        n.pn.get_ip("fr-par", &a.ipam_ip_ids[0])
            .await
            .unwrap()
            .address;
    let applied = n.w.talos.applied.lock().unwrap().clone();
    assert_eq!(applied.len(), 1);
    let config = &applied[0].1;
    assert!(config.contains("kind: VLANConfig"), "{config}");
    assert!(config.contains(&format!("name: net0.{vlan}")), "{config}");
    assert!(config.contains(&format!("vlanID: {vlan}")), "{config}");
    assert!(config.contains(&address), "{address} in {config}");
    assert!(config.contains("172.16.0.0/22"), "validSubnets: {config}");
}

#[tokio::test(start_paused = true)]
async fn an_attachment_in_error_fails_the_install_and_deletes_the_server() {
    let n = networked(0);
    n.pn.fail_attachments_to(&n.network.id);
    n.w.engine.start(networked_spec(&n));
    n.w.em.deliver("srv-1");
    until(|| n.pn.count(Op::AddServerOption) == 1).await;
    n.pn.finish();
    until(|| n.pn.count(Op::Attach) == 1).await;
    n.pn.finish();
    wait_for(&n.w.engine, Phase::Failed).await;
    settle().await;
    assert!(n.w.reboots().is_empty(), "never booted into rescue");
    assert_eq!(
        n.w.em.count(EmOp::DeleteServer),
        1,
        "the server is not kept"
    );
    assert!(n.w.talos.applied.lock().unwrap().is_empty());
    let failed = n.w.nodes.saved_phases();
    assert_eq!(failed.last(), Some(&Phase::Failed), "{failed:?}");
}

#[tokio::test(start_paused = true)]
async fn a_booked_address_in_use_is_passed_over() {
    let n = networked(2);
    // The first booked address is another server's.
    n.pn.add_metal_server("fr-par-2", "srv-0");
    n.pn.add_server_option("fr-par-2", "srv-0", PN_OPTION)
        .await
        .unwrap();
    n.pn.attach_private_network("fr-par-2", "srv-0", &n.network.id, &n.network.booked[..1])
        .await
        .unwrap();
    n.pn.set_auto_finish(true);
    n.w.engine.start(networked_spec(&n));
    n.w.em.deliver("srv-1");
    wait_for(&n.w.engine, Phase::Joined).await;
    let mine =
        n.pn.attachments()
            .into_iter()
            .find(|a| a.server_id == "srv-1")
            .unwrap();
    assert_eq!(mine.ipam_ip_ids, vec![n.network.booked[1].clone()]);
}

#[tokio::test(start_paused = true)]
async fn no_free_booked_address_fails_the_install_saying_what_to_do() {
    let n = networked(1);
    n.pn.add_metal_server("fr-par-2", "srv-0");
    n.pn.add_server_option("fr-par-2", "srv-0", PN_OPTION)
        .await
        .unwrap();
    n.pn.attach_private_network("fr-par-2", "srv-0", &n.network.id, &n.network.booked)
        .await
        .unwrap();
    n.w.engine.start(networked_spec(&n));
    n.w.em.deliver("srv-1");
    wait_for(&n.w.engine, Phase::Failed).await;
    settle().await;
    assert_eq!(n.pn.count(Op::Attach), 1, "only srv-0's");
    assert_eq!(n.w.em.count(EmOp::DeleteServer), 1);
}

#[tokio::test(start_paused = true)]
async fn failed_calls_are_retried_and_never_attach_twice() {
    let n = networked(0);
    n.pn.set_auto_finish(true);
    n.pn.fail_next(
        Op::ListAttachments,
        crate::scaleway::ApiError::Unavailable("503".into()),
    );
    // The attach answer is lost after the attachment was made: the next
    // look finds it instead of attaching again.
    n.w.engine.start(networked_spec(&n));
    n.w.em.deliver("srv-1");
    wait_for(&n.w.engine, Phase::Joined).await;
    assert_eq!(n.pn.count(Op::Attach), 1);
    assert!(
        n.pn.count(Op::ListAttachments) >= 3,
        "retried, then read for the config"
    );
}

#[tokio::test(start_paused = true)]
async fn a_resumed_install_finds_its_attachment_instead_of_attaching_again() {
    let n = networked(0);
    n.w.em.deliver("srv-1");
    n.pn.add_server_option("fr-par-2", "srv-1", PN_OPTION)
        .await
        .unwrap();
    n.pn.attach_private_network("fr-par-2", "srv-1", &n.network.id, &[])
        .await
        .unwrap();
    n.pn.finish();
    let progress = Progress {
        phase: Some(Phase::Ready),
        ..Progress::default()
    };
    n.w.engine.resume(networked_spec(&n), progress);
    wait_for(&n.w.engine, Phase::Joined).await;
    assert_eq!(n.pn.count(Op::Attach), 1, "the one made before the restart");
    assert_eq!(n.pn.count(Op::AddServerOption), 1);
}

#[tokio::test(start_paused = true)]
async fn a_server_on_another_network_leaves_it_for_the_nodeclass_one() {
    let n = networked(0);
    n.pn.set_auto_finish(true);
    // Recycled from a NodeClass that selected another network.
    let old =
        n.pn.add_private_network("fr-par", "old", "172.20.0.0/24", &[]);
    n.pn.add_server_option("fr-par-2", "srv-1", PN_OPTION)
        .await
        .unwrap();
    n.pn.attach_private_network("fr-par-2", "srv-1", &old.id, &[])
        .await
        .unwrap();
    n.w.engine.start(networked_spec(&n));
    n.w.em.deliver("srv-1");
    wait_for(&n.w.engine, Phase::Joined).await;
    let mine: Vec<String> =
        n.pn.attachments()
            .into_iter()
            .filter(|a| a.server_id == "srv-1")
            .map(|a| a.private_network_id)
            .collect();
    assert_eq!(
        mine,
        vec![n.network.id.clone()],
        "only the NodeClass's network"
    );
    assert_eq!(n.pn.count(Op::Detach), 1);
}
