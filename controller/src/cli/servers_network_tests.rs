//! `servers` shows each server's Private Network link, and still lists the
//! servers when the links cannot be read.

use super::standby::{pool, pool_claims, pool_report};
use super::*;
use crate::scaleway::ApiError;
use crate::scaleway::private_network::fake::{FakePrivateNetworks, Op};
use crate::scaleway::private_network::{MetalPrivateNetworks, PrivateNetworks};

async fn report_with(em: &FakeElasticMetal, pn: &FakePrivateNetworks) -> Report {
    let vms = FakeInstance::new();
    let apis = Apis {
        networks: Some(pn as &dyn PrivateNetworks),
        ..apis(em, &vms)
    };
    collect(
        &apis,
        Kind::ElasticMetal,
        &pool_claims(),
        &["fr-par-2".to_string()],
        &graces(),
        now(),
    )
    .await
    .unwrap()
}

/// The pool's node `s-node` attached to a network of the project.
async fn attached() -> (FakePrivateNetworks, String) {
    let pn = FakePrivateNetworks::new();
    let mut network = pn.add_private_network("fr-par", "prod", "172.16.0.0/24", &[]);
    network.project_id = policy().project_id;
    pn.insert_private_network(network.clone());
    pn.add_metal_server("fr-par-2", "s-node");
    pn.attach_private_network("fr-par-2", "s-node", &network.id, &[])
        .await
        .unwrap();
    pn.finish();
    (pn, network.id)
}

#[tokio::test]
async fn an_attached_server_shows_its_network_vlan_and_address() {
    let em = pool();
    let (pn, network_id) = attached().await;
    let report = report_with(&em, &pn).await;
    assert_eq!(report.networks_note, None);
    let row = report.rows.iter().find(|r| r.id == "s-node").unwrap();
    assert_eq!(row.private_links.len(), 1, "{:?}", row.private_links);
    let link = &row.private_links[0];
    assert_eq!(link.private_network_id, network_id);
    assert_eq!(link.status, "attached");
    assert!(link.vlan.is_some());
    let address = link.address.clone().expect("its IPAM address");
    assert!(address.starts_with("172.16.0."), "{address}");
    // Only the attached server has a link.
    assert!(
        report
            .rows
            .iter()
            .filter(|r| r.id != "s-node")
            .all(|r| r.private_links.is_empty())
    );
    let table = report.table();
    let line = table
        .lines()
        .find(|l| l.trim_start().starts_with("s-node ") && l.contains(&network_id))
        .unwrap_or_else(|| panic!("no link line in\n{table}"));
    assert!(
        line.contains("attached") && line.contains(&address),
        "{line}"
    );
    let json = report.json();
    let node = json["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == "s-node")
        .unwrap();
    assert_eq!(
        node["privateNetworks"][0]["privateNetworkId"],
        network_id.as_str()
    );
    assert_eq!(node["privateNetworks"][0]["address"], address.as_str());
}

#[tokio::test]
async fn links_that_cannot_be_read_leave_a_note_and_every_server_listed() {
    let em = pool();
    let (pn, _) = attached().await;
    pn.fail_next(
        Op::ListIps,
        ApiError::Unauthorized("IPAMReadOnly missing".into()),
    );
    let with_failure = report_with(&em, &pn).await;
    let without = pool_report(&em).await;
    assert_eq!(
        with_failure.rows, without.rows,
        "no server lost, no link half-read"
    );
    let note = with_failure.networks_note.clone().unwrap();
    assert!(note.contains("IPAMReadOnly missing"), "{note}");
    assert!(
        with_failure
            .table()
            .contains("Private Networks: not read (")
    );
    assert!(without.networks_note.is_none() && !without.table().contains("Private Networks"));
}
