//! Create for an Elastic Metal NodeClass that selects a Private Network.

use super::tests::{claim, fixture};
use super::*;
use crate::nodeclass::{PrivateNetworkSelector, ResolvedPrivateNetwork};

fn select_network(f: &super::tests::Fixture, resolved: Vec<ResolvedPrivateNetwork>) {
    let mut classes = f.classes.classes.lock().unwrap();
    let class = classes.get_mut("default").unwrap();
    class.spec.private_network = Some(PrivateNetworkSelector {
        name: "prod".into(),
        ..Default::default()
    });
    class.private_networks = resolved;
}

fn prod(region: &str) -> ResolvedPrivateNetwork {
    ResolvedPrivateNetwork {
        region: region.into(),
        id: format!("pn-{region}"),
        name: "prod".into(),
        vpc_id: "vpc".into(),
        subnets: vec!["172.16.0.0/22".into()],
    }
}

#[tokio::test]
async fn the_install_is_handed_the_network_of_the_servers_region() {
    let f = fixture();
    select_network(&f, vec![prod("nl-ams"), prod("fr-par")]);
    let out = f
        .provider
        .create(claim("default-a", &["EM-A115X-SSD"]))
        .await
        .unwrap();
    let started = f.installer.started.lock().unwrap();
    let network = started[0].private_network.clone().expect("a network");
    assert_eq!(network.id, "pn-fr-par");
    assert_eq!(network.subnets, vec!["172.16.0.0/22".to_string()]);
    assert!(network.internal_ip);
    let hash = out["metadata"]["annotations"][HASH_ANNOTATION]
        .as_str()
        .unwrap();
    assert!(hash.contains(",network="), "{hash}");
}

#[tokio::test]
async fn a_region_without_a_resolved_network_orders_nothing() {
    let f = fixture();
    select_network(&f, vec![prod("nl-ams")]);
    let err = f
        .provider
        .create(claim("default-a", &["EM-A115X-SSD"]))
        .await
        .unwrap_err();
    let ProviderError::NodeClassNotReady(message) = &err else {
        panic!("{err:?}")
    };
    assert!(message.contains("region fr-par"), "{message}");
    assert!(f.api.servers().is_empty(), "nothing ordered");
    assert!(f.installer.started.lock().unwrap().is_empty());
}

#[tokio::test]
async fn without_a_network_nothing_changes() {
    let f = fixture();
    let out = f
        .provider
        .create(claim("default-a", &["EM-A115X-SSD"]))
        .await
        .unwrap();
    assert_eq!(f.installer.started.lock().unwrap()[0].private_network, None);
    let hash = out["metadata"]["annotations"][HASH_ANNOTATION]
        .as_str()
        .unwrap();
    assert!(!hash.contains("network"), "{hash}");
}

mod booked {
    use std::sync::Arc;

    use super::*;
    use crate::nodeclass::AddressPolicy;
    use crate::scaleway::private_network::fake::FakePrivateNetworks;
    use crate::scaleway::private_network::{BookIpRequest, Ipam, MetalPrivateNetworks};

    /// The fixture's provider on a fake network `prod` of fr-par with `n`
    /// booked addresses, the first `used` of them held by another server.
    async fn fixture_booked(
        n: usize,
        used: usize,
    ) -> (super::super::tests::Fixture, Arc<Provider>) {
        let f = fixture();
        let pn = Arc::new(FakePrivateNetworks::new());
        let network = pn.add_private_network("fr-par", "prod", "172.16.0.0/24", &[]);
        let mut ids = Vec::new();
        for _ in 0..n {
            let req = BookIpRequest::new("proj", &network.id, vec![]);
            ids.push(pn.book_ip("fr-par", &req).await.unwrap().id);
        }
        pn.add_metal_server("fr-par-2", "other");
        if used > 0 {
            pn.attach_private_network("fr-par-2", "other", &network.id, &ids[..used])
                .await
                .unwrap();
        }
        {
            let mut classes = f.classes.classes.lock().unwrap();
            let class = classes.get_mut("default").unwrap();
            class.spec.private_network = Some(PrivateNetworkSelector {
                name: "prod".into(),
                addresses: AddressPolicy::Booked,
                ipam_ip_ids: ids,
                ..Default::default()
            });
            class.private_networks = vec![ResolvedPrivateNetwork {
                id: network.id.clone(),
                ..prod("fr-par")
            }];
        }
        let provider = Provider::new(
            f.api.clone(),
            f.catalog.clone(),
            f.classes.clone(),
            f.installer.clone(),
            ClusterPorts {
                tokens: f.tokens.clone(),
                nodes: f.nodes.clone(),
            },
            ProviderSettings {
                cluster_name: "test".into(),
                project_id: "proj".into(),
                zones: vec!["fr-par-2".into()],
                instance_zones: vec!["fr-par-2".into()],
            },
        )
        .with_private_networks(pn);
        (f, Arc::new(provider))
    }

    #[tokio::test]
    async fn no_free_booked_address_orders_no_server() {
        let (f, provider) = fixture_booked(1, 1).await;
        let err = provider
            .create(claim("default-a", &["EM-A115X-SSD"]))
            .await
            .unwrap_err();
        let ProviderError::CreateFailed { reason, message } = &err else {
            panic!("{err:?}")
        };
        assert_eq!(reason, "PrivateNetworkAddressesExhausted");
        assert!(message.contains("scw ipam ip create"), "{message}");
        assert!(f.api.servers().is_empty(), "nothing ordered");
    }

    #[tokio::test]
    async fn a_free_booked_address_lets_the_order_go_and_the_install_choose_it() {
        let (f, provider) = fixture_booked(2, 1).await;
        provider
            .create(claim("default-a", &["EM-A115X-SSD"]))
            .await
            .unwrap();
        assert_eq!(f.api.servers().len(), 1);
        let started = f.installer.started.lock().unwrap();
        let network = started[0].private_network.clone().unwrap();
        assert_eq!(network.booked.len(), 2, "the install chooses among them");
    }
}
