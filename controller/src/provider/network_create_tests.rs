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
