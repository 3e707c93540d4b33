use super::*;
use crate::nodeclass::AddressPolicy;

fn resolved(region: &str) -> ResolvedPrivateNetwork {
    ResolvedPrivateNetwork {
        region: region.into(),
        id: format!("pn-{region}"),
        name: "prod".into(),
        vpc_id: "vpc".into(),
        subnets: vec!["172.16.0.0/22".into()],
    }
}

fn selector(policy: AddressPolicy, ids: &[&str], node_ip: NodeIpSource) -> PrivateNetworkSelector {
    PrivateNetworkSelector {
        name: "prod".into(),
        addresses: policy,
        ipam_ip_ids: ids.iter().map(|s| s.to_string()).collect(),
        node_ip,
        ..Default::default()
    }
}

#[test]
fn without_a_selector_a_node_joins_no_network() {
    assert_eq!(
        node_network(None, &[resolved("fr-par")], "fr-par-2"),
        Ok(None)
    );
}

#[test]
fn the_network_of_the_zones_region_is_taken() {
    let sel = selector(AddressPolicy::Ipam, &[], NodeIpSource::Private);
    let got = node_network(
        Some(&sel),
        &[resolved("nl-ams"), resolved("fr-par")],
        "fr-par-2",
    )
    .unwrap()
    .unwrap();
    assert_eq!(got.region, "fr-par");
    assert_eq!(got.id, "pn-fr-par");
    assert_eq!(got.subnets, vec!["172.16.0.0/22".to_string()]);
    assert!(got.booked.is_empty());
    assert!(got.internal_ip);
}

#[test]
fn a_region_with_nothing_resolved_says_what_to_fix() {
    let sel = selector(AddressPolicy::Ipam, &[], NodeIpSource::Public);
    let err = node_network(Some(&sel), &[resolved("nl-ams")], "fr-par-1").unwrap_err();
    assert!(err.contains("region fr-par"), "{err}");
    assert!(err.contains("PrivateNetworkReady"), "{err}");
}

#[test]
fn booked_ids_are_only_read_under_the_booked_policy() {
    let sel = selector(AddressPolicy::Booked, &["a", "b"], NodeIpSource::Public);
    let got = node_network(Some(&sel), &[resolved("fr-par")], "fr-par-1")
        .unwrap()
        .unwrap();
    assert_eq!(got.booked, vec!["a".to_string(), "b".to_string()]);
    assert!(!got.internal_ip);
}
