use super::*;

const PN_PAR: &str = "11111111-1111-4111-8111-111111111111";
const PN_PAR_2: &str = "22222222-2222-4222-8222-222222222222";
const PN_AMS: &str = "33333333-3333-4333-8333-333333333333";
const IP_1: &str = "44444444-4444-4444-8444-444444444444";

fn network(id: &str, name: &str, region: &str, tags: &[&str]) -> NetworkSeen {
    NetworkSeen {
        id: id.into(),
        name: name.into(),
        region: region.into(),
        tags: tags.iter().map(|t| t.to_string()).collect(),
        vpc_id: format!("vpc-{region}"),
        subnets: vec!["172.16.0.0/22".into()],
    }
}

fn by_name(name: &str) -> PrivateNetworkSelector {
    PrivateNetworkSelector {
        name: name.into(),
        ..Default::default()
    }
}

fn observed(listings: Vec<(&str, NetworkListing)>) -> PrivateNetworkObservation {
    PrivateNetworkObservation {
        listings: listings
            .into_iter()
            .map(|(r, l)| (r.to_string(), l))
            .collect(),
        booked: Some(Vec::new()),
    }
}

fn invalid_reason(r: &Resolution) -> &'static str {
    match r {
        Resolution::Invalid { reason, .. } => reason,
        other => panic!("expected Invalid, got {other:?}"),
    }
}

#[test]
fn regions_of_zones_keep_first_seen_order_without_repeats() {
    let zones: Vec<String> = ["nl-ams-1", "fr-par-2", "fr-par-1"]
        .iter()
        .map(|z| z.to_string())
        .collect();
    assert_eq!(regions_of(&zones), vec!["nl-ams", "fr-par"]);
}

#[test]
fn a_name_resolves_to_one_network_per_region_matching_exactly() {
    // The API's name filter matches substrings: `prod-old` came back too.
    let listing = observed(vec![
        (
            "fr-par",
            NetworkListing::Listed(vec![
                network(PN_PAR, "prod", "fr-par", &[]),
                network(PN_PAR_2, "prod-old", "fr-par", &[]),
            ]),
        ),
        (
            "nl-ams",
            NetworkListing::Listed(vec![network(PN_AMS, "prod", "nl-ams", &[])]),
        ),
    ]);
    let Resolution::Resolved(got) = resolve_private_network(&by_name("prod"), &listing) else {
        panic!("not resolved");
    };
    let ids: Vec<(&str, &str)> = got
        .iter()
        .map(|r| (r.region.as_str(), r.id.as_str()))
        .collect();
    assert_eq!(ids, vec![("fr-par", PN_PAR), ("nl-ams", PN_AMS)]);
    assert_eq!(got[0].subnets, vec!["172.16.0.0/22"]);
    assert_eq!(got[0].vpc_id, "vpc-fr-par");
}

#[test]
fn tags_must_all_be_carried() {
    let selector = PrivateNetworkSelector {
        tags: vec!["k8s".into(), "prod".into()],
        ..Default::default()
    };
    let listing = observed(vec![(
        "fr-par",
        NetworkListing::Listed(vec![
            network(PN_PAR, "a", "fr-par", &["k8s"]),
            network(PN_PAR_2, "b", "fr-par", &["prod", "k8s"]),
        ]),
    )]);
    let Resolution::Resolved(got) = resolve_private_network(&selector, &listing) else {
        panic!("not resolved");
    };
    assert_eq!(got[0].id, PN_PAR_2);
}

#[test]
fn two_matches_in_a_region_are_ambiguous_and_named() {
    let listing = observed(vec![(
        "fr-par",
        NetworkListing::Listed(vec![
            network(PN_PAR, "prod", "fr-par", &[]),
            network(PN_PAR_2, "prod", "fr-par", &[]),
        ]),
    )]);
    let r = resolve_private_network(&by_name("prod"), &listing);
    assert_eq!(invalid_reason(&r), "PrivateNetworkAmbiguous");
    let Resolution::Invalid { message, .. } = r else {
        unreachable!()
    };
    assert!(
        message.contains(PN_PAR) && message.contains(PN_PAR_2),
        "{message}"
    );
}

#[test]
fn a_region_without_a_match_is_not_found() {
    let listing = observed(vec![
        (
            "fr-par",
            NetworkListing::Listed(vec![network(PN_PAR, "prod", "fr-par", &[])]),
        ),
        ("nl-ams", NetworkListing::Listed(vec![])),
    ]);
    let r = resolve_private_network(&by_name("prod"), &listing);
    assert_eq!(invalid_reason(&r), "PrivateNetworkNotFound");
    let Resolution::Invalid { message, .. } = r else {
        unreachable!()
    };
    assert!(message.contains("nl-ams"), "{message}");
}

#[test]
fn an_id_in_another_region_than_the_zones_is_not_found() {
    let selector = PrivateNetworkSelector {
        id: Some(PN_AMS.into()),
        ..Default::default()
    };
    // The listing of fr-par (the zones' region) does not hold it.
    let listing = observed(vec![(
        "fr-par",
        NetworkListing::Listed(vec![network(PN_PAR, "prod", "fr-par", &[])]),
    )]);
    assert_eq!(
        invalid_reason(&resolve_private_network(&selector, &listing)),
        "PrivateNetworkNotFound"
    );
}

#[test]
fn a_network_without_an_ipv4_subnet_is_refused() {
    let mut n = network(PN_PAR, "prod", "fr-par", &[]);
    n.subnets.clear();
    let listing = observed(vec![("fr-par", NetworkListing::Listed(vec![n]))]);
    assert_eq!(
        invalid_reason(&resolve_private_network(&by_name("prod"), &listing)),
        "PrivateNetworkNoSubnet"
    );
}

#[test]
fn refused_credentials_are_invalid_and_errors_are_unknown() {
    let refused = observed(vec![("fr-par", NetworkListing::Refused("403".into()))]);
    assert_eq!(
        invalid_reason(&resolve_private_network(&by_name("prod"), &refused)),
        "PrivateNetworkAccessRefused"
    );
    let failed = observed(vec![("fr-par", NetworkListing::Error("503".into()))]);
    assert!(matches!(
        resolve_private_network(&by_name("prod"), &failed),
        Resolution::Unknown {
            reason: "PrivateNetworkLookupFailed",
            ..
        }
    ));
}

fn booked(ips: Vec<BookedIpSeen>) -> (PrivateNetworkSelector, PrivateNetworkObservation) {
    let selector = PrivateNetworkSelector {
        name: "prod".into(),
        addresses: AddressPolicy::Booked,
        ipam_ip_ids: vec![IP_1.into()],
        ..Default::default()
    };
    let mut obs = observed(vec![(
        "fr-par",
        NetworkListing::Listed(vec![network(PN_PAR, "prod", "fr-par", &[])]),
    )]);
    obs.booked = Some(ips);
    (selector, obs)
}

#[test]
fn booked_ips_must_exist_be_ipv4_and_belong_to_the_selected_network() {
    let ok = BookedIpSeen {
        id: IP_1.into(),
        private_network_id: Some(PN_PAR.into()),
        is_ipv6: false,
    };
    let (s, o) = booked(vec![ok.clone()]);
    assert!(matches!(
        resolve_private_network(&s, &o),
        Resolution::Resolved(_)
    ));

    let (s, o) = booked(vec![]);
    assert_eq!(
        invalid_reason(&resolve_private_network(&s, &o)),
        "BookedIpInvalid"
    );

    let (s, o) = booked(vec![BookedIpSeen {
        private_network_id: Some(PN_PAR_2.into()),
        ..ok.clone()
    }]);
    let r = resolve_private_network(&s, &o);
    assert_eq!(invalid_reason(&r), "BookedIpInvalid");
    let Resolution::Invalid { message, .. } = r else {
        unreachable!()
    };
    assert!(message.contains(PN_PAR_2), "{message}");

    let (s, o) = booked(vec![BookedIpSeen {
        is_ipv6: true,
        ..ok
    }]);
    assert_eq!(
        invalid_reason(&resolve_private_network(&s, &o)),
        "BookedIpInvalid"
    );

    let (s, mut o) = booked(vec![]);
    o.booked = None;
    assert!(matches!(
        resolve_private_network(&s, &o),
        Resolution::Unknown { .. }
    ));
}

#[test]
fn booked_ids_are_ignored_under_ipam() {
    let selector = PrivateNetworkSelector {
        addresses: AddressPolicy::Ipam,
        ipam_ip_ids: vec![IP_1.into()],
        ..Default::default()
    };
    assert!(selector.booked_ips().is_empty());
}

#[test]
fn the_spec_reads_and_writes_the_documented_names() {
    let yaml = "name: prod\naddresses: booked\nipamIpIds: [\"44444444-4444-4444-8444-444444444444\"]\nnodeIP: public\n";
    let s: PrivateNetworkSelector = serde_yaml_ng::from_str(yaml).unwrap();
    assert_eq!(s.addresses, AddressPolicy::Booked);
    assert_eq!(s.node_ip, NodeIpSource::Public);
    let back = serde_json::to_value(&s).unwrap();
    assert_eq!(back["nodeIP"], "public");
    assert_eq!(back["ipamIpIds"][0], IP_1);
    let defaults: PrivateNetworkSelector = serde_yaml_ng::from_str("id: x").unwrap();
    assert_eq!(defaults.addresses, AddressPolicy::Ipam);
    assert_eq!(defaults.node_ip, NodeIpSource::Private);
}

mod observed_through_the_api {
    use super::super::*;
    use crate::scaleway::ApiError;
    use crate::scaleway::private_network::fake::{FakePrivateNetworks, Op};
    use crate::scaleway::private_network::{BookIpRequest, Ipam};

    fn zones(z: &[&str]) -> Vec<String> {
        z.iter().map(|z| z.to_string()).collect()
    }

    #[tokio::test]
    async fn a_name_is_resolved_per_region_from_the_listing() {
        let api = FakePrivateNetworks::new();
        let par = api.add_private_network("fr-par", "prod", "172.16.0.0/22", &["k8s"]);
        api.add_private_network("fr-par", "prod-old", "172.16.8.0/22", &["k8s"]);
        let ams = api.add_private_network("nl-ams", "prod", "172.17.0.0/22", &[]);
        let selector = PrivateNetworkSelector {
            name: "prod".into(),
            ..Default::default()
        };
        let observed = observe_private_network(
            &api,
            &selector,
            &zones(&["fr-par-1", "fr-par-2", "nl-ams-1"]),
            "proj",
        )
        .await;
        let Resolution::Resolved(got) = resolve_private_network(&selector, &observed) else {
            panic!("{observed:?}");
        };
        let ids: Vec<&str> = got.iter().map(|r| r.id.as_str()).collect();
        assert_eq!(ids, vec![par.id.as_str(), ams.id.as_str()]);
        assert_eq!(got[1].subnets, vec!["172.17.0.0/22"]);
    }

    #[tokio::test]
    async fn booked_ips_are_found_in_their_network_and_failures_say_so() {
        let api = FakePrivateNetworks::new();
        let pn = api.add_private_network("fr-par", "prod", "172.16.0.0/22", &[]);
        let other = api.add_private_network("fr-par", "db", "172.16.4.0/22", &[]);
        let mine = api
            .book_ip("fr-par", &BookIpRequest::new("proj", &pn.id, vec![]))
            .await
            .unwrap();
        let theirs = api
            .book_ip("fr-par", &BookIpRequest::new("proj", &other.id, vec![]))
            .await
            .unwrap();
        let mut selector = PrivateNetworkSelector {
            id: Some(pn.id.clone()),
            addresses: AddressPolicy::Booked,
            ipam_ip_ids: vec![mine.id.clone()],
            ..Default::default()
        };
        let z = zones(&["fr-par-2"]);
        let observed = observe_private_network(&api, &selector, &z, "proj").await;
        assert!(
            matches!(
                resolve_private_network(&selector, &observed),
                Resolution::Resolved(_)
            ),
            "{observed:?}"
        );

        selector.ipam_ip_ids.push(theirs.id.clone());
        let observed = observe_private_network(&api, &selector, &z, "proj").await;
        let r = resolve_private_network(&selector, &observed);
        let Resolution::Invalid { reason, message } = r else {
            panic!("{r:?}");
        };
        assert_eq!(reason, "BookedIpInvalid");
        assert!(
            message.contains(&theirs.id) && message.contains(&other.id),
            "{message}"
        );

        api.fail_next(Op::ListIps, ApiError::Unavailable("503".into()));
        let observed = observe_private_network(&api, &selector, &z, "proj").await;
        assert!(matches!(
            resolve_private_network(&selector, &observed),
            Resolution::Unknown { .. }
        ));

        api.fail_next(
            Op::ListPrivateNetworks,
            ApiError::Unauthorized("403".into()),
        );
        let observed = observe_private_network(&api, &selector, &z, "proj").await;
        assert!(matches!(
            resolve_private_network(&selector, &observed),
            Resolution::Invalid {
                reason: "PrivateNetworkAccessRefused",
                ..
            }
        ));
    }
}
