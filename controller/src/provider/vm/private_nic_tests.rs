//! A VM on its NodeClass's Private Network: the private NIC made once, the
//! booked address chosen under the lock, the link rendered into the user
//! data, nothing left behind by a failure or a Delete.

use std::sync::Arc;

use super::super::super::ProviderError;
use super::super::super::tests::ZONE;
use super::super::private_nic_fake::LinkedNetworks;
use super::super::tests::{Vm, delete_until_gone, vm_claim, vm_fixture_with};
use super::super::{InstanceClassRecord, TAG_PRIVATE_NETWORK};
use crate::nodeclass::{
    AddressPolicy, NodeIpSource, PrivateNetworkSelector, ResolvedPrivateNetwork,
};
use crate::scaleway::ApiError;
use crate::scaleway::instance::fake::Op;
use crate::scaleway::instance::{ServerState, USER_DATA_KEY};
use crate::scaleway::private_network::fake::Op as PnOp;
use crate::scaleway::private_network::{
    BookIpRequest, CreatePrivateNicRequest, InstancePrivateNics, Ipam, IpamIp, PrivateNetwork,
};

const CIDR: &str = "172.16.0.0/22";

struct Net {
    v: Vm,
    links: Arc<LinkedNetworks>,
    pn: PrivateNetwork,
}

/// The VM fixture with the Private Network clients and a network resolved
/// in the zone's region, selected by the NodeClass by id.
fn net_fixture(addresses: AddressPolicy, booked: &[String]) -> Net {
    let mut links = None;
    let v = vm_fixture_with(|api| {
        let l = LinkedNetworks::new(api);
        links = Some(l.clone());
        Some(l)
    });
    let links = links.unwrap();
    let pn = links
        .pn
        .add_private_network("fr-par", "vpc-nodes", CIDR, &[]);
    let net = Net { v, links, pn };
    net.select(addresses, booked);
    net
}

impl Net {
    fn class(&self, f: impl FnOnce(&mut InstanceClassRecord)) {
        let mut classes = self.v.classes.0.lock().unwrap();
        f(classes.get_mut("vms").unwrap());
    }

    fn select(&self, addresses: AddressPolicy, booked: &[String]) {
        let pn = self.pn.clone();
        self.class(|c| {
            c.spec.private_network = Some(PrivateNetworkSelector {
                id: Some(pn.id.clone()),
                addresses,
                ipam_ip_ids: booked.to_vec(),
                node_ip: NodeIpSource::Private,
                ..Default::default()
            });
            c.private_networks = vec![ResolvedPrivateNetwork {
                region: "fr-par".into(),
                id: pn.id.clone(),
                name: pn.name.clone(),
                vpc_id: pn.vpc_id.clone(),
                subnets: vec![CIDR.into()],
            }];
        });
    }

    async fn book(&self) -> IpamIp {
        self.links
            .pn
            .book_ip("fr-par", &BookIpRequest::new("proj", &self.pn.id, vec![]))
            .await
            .unwrap()
    }

    /// Puts `ip` to use on another VM, outside the provider.
    async fn take(&self, ip: &IpamIp) {
        self.links.pn.add_vm(ZONE, "someone-else");
        let req = CreatePrivateNicRequest {
            private_network_id: self.pn.id.clone(),
            ipam_ip_ids: vec![ip.id.clone()],
            ..Default::default()
        };
        self.links
            .pn
            .create_private_nic(ZONE, "someone-else", &req)
            .await
            .unwrap();
    }

    fn user_data(&self) -> Option<String> {
        let s = &self.v.api.servers()[0];
        self.v.api.user_data(&s.id, USER_DATA_KEY)
    }

    /// The NICs of the provider's VMs (not `someone-else`'s).
    fn vm_nics(&self) -> Vec<crate::scaleway::private_network::PrivateNic> {
        self.links.sync();
        self.links
            .pn
            .nics()
            .into_iter()
            .filter(|n| n.server_id != "someone-else")
            .collect()
    }
}

fn reason(err: &ProviderError) -> &str {
    match err {
        ProviderError::CreateFailed { reason, .. } => reason,
        other => panic!("not a CreateFailed: {other:?}"),
    }
}

#[tokio::test]
async fn create_adds_one_private_nic_and_renders_its_link_before_the_power_on() {
    let n = net_fixture(AddressPolicy::Ipam, &[]);
    n.v.provider
        .create(vm_claim("burst-a", &["POP2-2C-8G"]))
        .await
        .unwrap();
    let server = &n.v.api.servers()[0];
    assert_eq!(server.state, ServerState::Starting, "powered on");
    let tag = format!("{TAG_PRIVATE_NETWORK}={}", n.pn.id);
    assert!(server.tags.contains(&tag), "{:?}", server.tags);
    let nics = n.vm_nics();
    assert_eq!(nics.len(), 1);
    let nic = &nics[0];
    assert_eq!(
        (nic.server_id.as_str(), nic.private_network_id.as_str()),
        (server.id.as_str(), n.pn.id.as_str())
    );
    assert!(
        nic.tags
            .contains(&"karpenter.sh/nodeclaim=burst-a".to_string())
    );
    let ip = n
        .links
        .pn
        .get_ip("fr-par", &nic.ipam_ip_ids[0])
        .await
        .unwrap();
    assert_eq!(ip.address, "172.16.0.2/22", "IPAM allocated it");

    let config = n.user_data().expect("user data set");
    assert!(config.contains("kind: LinkAliasConfig"), "{config}");
    assert!(
        config.contains(&format!(
            "mac(link.permanent_addr) == \\\"{}\\\"",
            nic.mac_address
        )) || config.contains(&format!(
            "mac(link.permanent_addr) == \"{}\"",
            nic.mac_address
        )),
        "the alias selects the NIC's MAC: {config}"
    );
    assert!(config.contains("name: priv0"));
    assert!(config.contains("172.16.0.2/22"), "the NIC's address");
    assert!(config.contains("validSubnets"), "{config}");
    assert!(config.contains(CIDR));
    assert!(!config.contains("DHCPv4Config"), "the address is known");
}

#[tokio::test]
async fn a_retried_create_finds_the_nic_and_never_makes_a_second() {
    let n = net_fixture(AddressPolicy::Ipam, &[]);
    n.v.api
        .fail_next(Op::Action, ApiError::Timeout("poweron".into()));
    let err =
        n.v.provider
            .create(vm_claim("burst-a", &["POP2-2C-8G"]))
            .await
            .unwrap_err();
    assert_eq!(reason(&err), "ScalewayAPIUnavailable");
    let first = n.user_data().unwrap();
    n.v.provider
        .create(vm_claim("burst-a", &["POP2-2C-8G"]))
        .await
        .unwrap();
    assert_eq!(n.v.api.servers().len(), 1);
    assert_eq!(n.vm_nics().len(), 1);
    assert_eq!(n.links.pn.count(PnOp::CreateNic), 1);
    assert_eq!(n.links.pn.count(PnOp::ListNics), 2, "listed before each");
    assert_eq!(n.user_data().unwrap(), first, "the same link rendered");
}

/// The create call timed out: not repeated; the next Create lists, and
/// whether the NIC was made or not, the VM ends with exactly one.
#[tokio::test]
async fn an_unclear_nic_creation_is_not_repeated_and_the_next_create_adopts_what_was_made() {
    let n = net_fixture(AddressPolicy::Ipam, &[]);
    n.links
        .pn
        .fail_next(PnOp::CreateNic, ApiError::Timeout("private_nics".into()));
    let err =
        n.v.provider
            .create(vm_claim("burst-a", &["POP2-2C-8G"]))
            .await
            .unwrap_err();
    assert_eq!(reason(&err), "ScalewayAPIUnavailable");
    assert_eq!(n.links.pn.count(PnOp::CreateNic), 1, "not retried");
    let server = n.v.api.servers()[0].clone();
    assert_eq!(server.state, ServerState::Stopped, "not powered on");
    assert!(n.user_data().is_none(), "no config without its link");
    // The answer was lost but the NIC was made.
    let req = CreatePrivateNicRequest {
        private_network_id: n.pn.id.clone(),
        ..Default::default()
    };
    let made = n
        .links
        .create_private_nic(ZONE, &server.id, &req)
        .await
        .unwrap();
    n.v.provider
        .create(vm_claim("burst-a", &["POP2-2C-8G"]))
        .await
        .unwrap();
    assert_eq!(n.vm_nics(), vec![made.clone()]);
    assert!(n.user_data().unwrap().contains(&made.mac_address));
    assert_eq!(n.v.api.count(Op::CreateServer), 1);
}

/// Listing fails: nothing made, nothing powered on; core's retry finishes,
/// and core's Delete (had it given up instead) leaves nothing behind.
#[tokio::test]
async fn a_failed_listing_makes_nothing_and_a_delete_leaves_nothing_billed() {
    let n = net_fixture(AddressPolicy::Ipam, &[]);
    n.links
        .pn
        .fail_next(PnOp::ListNics, ApiError::Unavailable("502".into()));
    let err =
        n.v.provider
            .create(vm_claim("burst-a", &["POP2-2C-8G"]))
            .await
            .unwrap_err();
    assert_eq!(reason(&err), "ScalewayAPIUnavailable");
    assert_eq!(n.links.pn.count(PnOp::CreateNic), 0);
    assert_eq!(n.v.api.servers()[0].state, ServerState::Stopped);
    assert!(n.user_data().is_none());
    // Core gives up on the NodeClaim: Delete finds the VM by its tag.
    delete_until_gone(&n.v, &vm_claim("burst-a", &["POP2-2C-8G"])).await;
    assert!(n.v.api.servers().is_empty() && n.v.api.volumes().is_empty());
    assert!(n.vm_nics().is_empty());
    assert!(n.links.pn.ips().is_empty());
}

#[tokio::test]
async fn delete_deletes_the_nic_first_and_ipam_releases_its_address() {
    let n = net_fixture(AddressPolicy::Ipam, &[]);
    let claim =
        n.v.provider
            .create(vm_claim("burst-a", &["POP2-2C-8G"]))
            .await
            .unwrap();
    n.v.api.finish_actions();
    n.links.pn.finish();
    assert_eq!(n.links.pn.ips().len(), 1);
    delete_until_gone(&n.v, &claim).await;
    assert!(n.v.api.servers().is_empty());
    assert!(n.v.api.volumes().is_empty());
    assert!(n.vm_nics().is_empty());
    assert!(
        n.links.pn.ips().is_empty(),
        "the allocated address is released"
    );
    assert_eq!(n.links.pn.count(PnOp::DeleteNic), 1);
}

/// The NIC's deletion fails: the VM is deleted anyway (it is what is
/// billed), and its NIC goes with it.
#[tokio::test]
async fn a_failed_nic_deletion_never_keeps_the_vm() {
    let n = net_fixture(AddressPolicy::Ipam, &[]);
    let claim =
        n.v.provider
            .create(vm_claim("burst-a", &["POP2-2C-8G"]))
            .await
            .unwrap();
    n.v.api.finish_actions();
    n.links
        .pn
        .fail_next(PnOp::DeleteNic, ApiError::Unavailable("502".into()));
    delete_until_gone(&n.v, &claim).await;
    assert!(n.v.api.servers().is_empty());
    assert!(n.vm_nics().is_empty());
    assert!(n.links.pn.ips().is_empty());
}

#[tokio::test]
async fn booked_the_first_free_address_is_taken_and_stays_booked_after_delete() {
    let n = net_fixture(AddressPolicy::Ipam, &[]);
    let (a, b) = (n.book().await, n.book().await);
    n.select(AddressPolicy::Booked, &[a.id.clone(), b.id.clone()]);
    n.take(&a).await;
    let claim =
        n.v.provider
            .create(vm_claim("burst-a", &["POP2-2C-8G"]))
            .await
            .unwrap();
    let nics = n.vm_nics();
    assert_eq!(nics.len(), 1);
    assert_eq!(nics[0].ipam_ip_ids, vec![b.id.clone()]);
    assert!(n.user_data().unwrap().contains(&b.address));
    n.v.api.finish_actions();
    delete_until_gone(&n.v, &claim).await;
    let b_now = n
        .links
        .pn
        .ips()
        .into_iter()
        .find(|ip| ip.id == b.id)
        .expect("still booked");
    assert!(b_now.resource.is_none(), "free for the next node");
}

/// Every booked address in use: no VM is ordered that could not join.
#[tokio::test]
async fn booked_addresses_exhausted_orders_nothing() {
    let n = net_fixture(AddressPolicy::Ipam, &[]);
    let a = n.book().await;
    n.select(AddressPolicy::Booked, std::slice::from_ref(&a.id));
    n.take(&a).await;
    let err =
        n.v.provider
            .create(vm_claim("burst-a", &["POP2-2C-8G"]))
            .await
            .unwrap_err();
    assert_eq!(reason(&err), "PrivateNetworkAddressesExhausted");
    assert!(err.to_string().contains("ipamIpIds"), "{err}");
    assert_eq!(n.v.api.count(Op::CreateServer), 0);
}

/// Two Creates at once never pick the same booked address.
#[tokio::test]
async fn concurrent_creates_take_different_booked_addresses() {
    let n = net_fixture(AddressPolicy::Ipam, &[]);
    let (a, b) = (n.book().await, n.book().await);
    n.select(AddressPolicy::Booked, &[a.id.clone(), b.id.clone()]);
    let (x, y) = tokio::join!(
        n.v.provider.create(vm_claim("burst-a", &["POP2-2C-8G"])),
        n.v.provider.create(vm_claim("burst-b", &["POP2-2C-8G"])),
    );
    x.unwrap();
    y.unwrap();
    let mut taken: Vec<String> = n
        .vm_nics()
        .into_iter()
        .flat_map(|nic| nic.ipam_ip_ids)
        .collect();
    taken.sort();
    let mut want = vec![a.id, b.id];
    want.sort();
    assert_eq!(taken, want);
}

#[tokio::test]
async fn no_network_resolved_in_the_region_is_not_ready_before_any_order() {
    let n = net_fixture(AddressPolicy::Ipam, &[]);
    n.class(|c| c.private_networks[0].region = "nl-ams".into());
    let err =
        n.v.provider
            .create(vm_claim("burst-a", &["POP2-2C-8G"]))
            .await
            .unwrap_err();
    assert!(
        matches!(&err, ProviderError::NodeClassNotReady(m) if m.contains("region fr-par")),
        "{err:?}"
    );
    assert_eq!(n.v.api.count(Op::CreateServer), 0);
}

#[tokio::test]
async fn a_network_without_the_clients_is_not_ready() {
    let n = net_fixture(AddressPolicy::Ipam, &[]);
    let v = super::super::tests::vm_fixture();
    let selector = n.v.classes.0.lock().unwrap()["vms"].clone();
    v.classes.0.lock().unwrap().insert("vms".into(), selector);
    let err = v
        .provider
        .create(vm_claim("burst-a", &["POP2-2C-8G"]))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ProviderError::NodeClassNotReady(m) if m.contains("not configured")),
        "{err:?}"
    );
    assert_eq!(v.api.count(Op::CreateServer), 0);
}

/// Without `spec.privateNetwork` the clients are never called.
#[tokio::test]
async fn a_class_without_a_network_makes_no_call_to_the_network_apis() {
    let n = net_fixture(AddressPolicy::Ipam, &[]);
    n.class(|c| {
        c.spec.private_network = None;
        c.private_networks.clear();
    });
    let claim =
        n.v.provider
            .create(vm_claim("burst-a", &["POP2-2C-8G"]))
            .await
            .unwrap();
    n.v.api.finish_actions();
    delete_until_gone(&n.v, &claim).await;
    let config_calls = n.links.pn.calls();
    assert!(config_calls.is_empty(), "{config_calls:?}");
}

/// The stamp Create writes carries the network: dropping it, or changing
/// it, drifts the VM; keeping it does not.
#[tokio::test]
async fn a_vm_on_a_network_drifts_when_the_network_changes() {
    let n = net_fixture(AddressPolicy::Ipam, &[]);
    let mut claim =
        n.v.provider
            .create(vm_claim("burst-a", &["POP2-2C-8G"]))
            .await
            .unwrap();
    claim["metadata"]["labels"]["kubernetes.io/arch"] = serde_json::json!("amd64");
    assert_eq!(n.v.provider.is_drifted(&claim).unwrap(), "");
    n.class(|c| {
        c.spec.private_network.as_mut().unwrap().node_ip = NodeIpSource::Public;
    });
    assert_eq!(
        n.v.provider.is_drifted(&claim).unwrap(),
        "PrivateNetworkDrift"
    );
    n.class(|c| c.spec.private_network = None);
    assert_eq!(
        n.v.provider.is_drifted(&claim).unwrap(),
        "PrivateNetworkDrift"
    );
}

/// A VM powered on already read its config: a retried Create neither
/// lists nor adds NICs.
#[tokio::test]
async fn a_running_vm_gets_no_nic_from_a_retried_create() {
    let n = net_fixture(AddressPolicy::Ipam, &[]);
    n.v.provider
        .create(vm_claim("burst-a", &["POP2-2C-8G"]))
        .await
        .unwrap();
    n.v.api.finish_actions();
    let calls = n.links.pn.calls().len();
    n.v.provider
        .create(vm_claim("burst-a", &["POP2-2C-8G"]))
        .await
        .unwrap();
    assert_eq!(n.links.pn.calls().len(), calls);
    assert_eq!(n.vm_nics().len(), 1);
}
