//! Decoding the recorded shapes, tolerance of unknown and null fields, the
//! filters applied on our side, CIDRs and regions.

use serde_json::json;

use super::*;
use crate::scaleway::{Offer, OptionStatus, ServerOption};

#[test]
fn regions_of_zones() {
    assert_eq!(region_of("fr-par-2"), "fr-par");
    assert_eq!(region_of("nl-ams-1"), "nl-ams");
    assert_eq!(region_of("pl-waw-3"), "pl-waw");
    assert_eq!(region_of("fr-par"), "fr-par");
    assert_eq!(region_of("weird-"), "weird-");
}

#[test]
fn ipv4_cidrs_parse_and_contain() {
    assert_eq!(
        parse_ipv4_cidr("172.16.0.7/22"),
        Some(("172.16.0.7".parse().unwrap(), 22))
    );
    for bad in [
        "172.16.0.0",
        "172.16.0.0/33",
        "172.16.0.0/",
        "fd00::/64",
        "x/8",
        "1.2.3.4/+8",
    ] {
        assert_eq!(parse_ipv4_cidr(bad), None, "{bad}");
    }
    assert!(ipv4_in("127.16.0.0/22", "127.16.3.255".parse().unwrap()));
    assert!(!ipv4_in("127.16.0.0/22", "127.16.4.0".parse().unwrap()));
    assert!(ipv4_in("0.0.0.0/0", "10.1.2.3".parse().unwrap()));
    assert!(!ipv4_in("fd00::/64", "10.1.2.3".parse().unwrap()));
}

#[test]
fn a_private_network_decodes_with_unknown_and_null_fields() {
    let pn: PrivateNetwork = serde_json::from_value(json!({
        "id": "pn-1", "name": "prod-pn", "organization_id": "org", "project_id": "proj",
        "region": "fr-par", "tags": null, "created_at": "2026-10-01T10:00:00Z",
        "updated_at": "2026-10-01T10:00:00Z", "vpc_id": "vpc-1", "dhcp_enabled": true,
        "default_route_propagation_enabled": false, "has_s3_integration": false,
        "srn": "srn:...",
        "subnets": [
            {"id": "s4", "subnet": "172.16.0.0/22", "project_id": "proj", "private_network_id": "pn-1",
             "vpc_id": "vpc-1", "region": "fr-par", "created_at": null, "updated_at": null},
            {"id": "s6", "subnet": "fd5f:519c:6d46:2728::/64", "project_id": "proj",
             "private_network_id": "pn-1", "vpc_id": "vpc-1", "region": "fr-par"}
        ]
    }))
    .unwrap();
    assert!(pn.tags.is_empty());
    assert_eq!(pn.cidrs(), ["172.16.0.0/22", "fd5f:519c:6d46:2728::/64"]);
    assert_eq!(pn.ipv4_cidrs(), ["172.16.0.0/22"]);
}

#[test]
fn attachment_statuses_decode_including_unknown_ones() {
    let decode = |status: serde_json::Value| -> ServerPrivateNetwork {
        serde_json::from_value(json!({
            "id": "a", "project_id": "p", "server_id": "s", "private_network_id": "pn",
            "vlan": null, "status": status, "created_at": null, "updated_at": null,
            "ipam_ip_ids": null
        }))
        .unwrap()
    };
    assert_eq!(
        decode(json!("attaching")).status,
        AttachmentStatus::Attaching
    );
    assert_eq!(decode(json!("attached")).status, AttachmentStatus::Attached);
    assert_eq!(decode(json!("error")).status, AttachmentStatus::Error);
    assert_eq!(
        decode(json!("detaching")).status,
        AttachmentStatus::Detaching
    );
    assert_eq!(decode(json!("locked")).status, AttachmentStatus::Locked);
    assert_eq!(
        decode(json!("unknown_status")).status,
        AttachmentStatus::UnknownStatus
    );
    assert_eq!(decode(json!("quarantined")).status, AttachmentStatus::Other);
    let a = decode(json!("attaching"));
    assert_eq!((a.vlan, a.ipam_ip_ids.len()), (None, 0));
    assert!(a.status.is_transient());
    assert!(!AttachmentStatus::Error.is_transient());
}

#[test]
fn offer_and_server_options_decode() {
    let offer: Offer = serde_json::from_value(json!({
        "id": "o", "name": "EM-A115X-SSD", "stock": "available",
        "options": [
            {"id": "opt-lic", "name": "Windows", "enabled": false, "subscription_period": "hourly",
             "price": {"currency_code": "EUR", "units": 0, "nanos": 50_000_000}, "manageable": true,
             "license": {"os_id": "os-1"}},
            {"id": "opt-pn", "name": "Private Network", "enabled": false,
             "subscription_period": "hourly",
             "price": {"currency_code": "EUR", "units": 0, "nanos": 20_000_000},
             "manageable": true, "private_network": {"bandwidth_in_bps": 1_000_000_000u64}}
        ]
    }))
    .unwrap();
    let pn = offer.private_network_option().unwrap();
    assert_eq!(pn.id, "opt-pn");
    assert_eq!(pn.price.as_ref().unwrap().as_f64(), 0.02);
    assert_eq!(
        pn.private_network.as_ref().unwrap().bandwidth_in_bps,
        1_000_000_000
    );
    // An offer listed without options (older answers, `null`).
    let bare: Offer =
        serde_json::from_value(json!({"id": "o", "name": "n", "stock": "empty", "options": null}))
            .unwrap();
    assert!(bare.private_network_option().is_none());

    let options: Vec<ServerOption> = serde_json::from_value(json!([
        {"id": "opt-pn", "name": "Private Network", "status": "option_status_enabling",
         "manageable": true, "expires_at": null, "private_network": {"bandwidth_in_bps": 1}},
        {"id": "opt-x", "name": "X", "status": "option_status_frozen", "manageable": false}
    ]))
    .unwrap();
    assert_eq!(options[0].status, OptionStatus::OptionStatusEnabling);
    assert!(options[0].is_on());
    assert_eq!(options[1].status, OptionStatus::Other);
    assert!(!options[1].is_on());
}

#[test]
fn ipam_ips_and_nics_decode() {
    let ip: IpamIp = serde_json::from_value(json!({
        "id": "ip-1", "address": "172.16.0.7/22", "project_id": "proj", "is_ipv6": false,
        "created_at": "2026-10-01T10:00:00Z", "updated_at": null,
        "source": {"private_network_id": "pn-1", "subnet_id": "s4"},
        "resource": {"type": "baremetal_private_nic", "id": "a-1", "mac_address": null, "name": null},
        "tags": null, "reverses": [], "region": "fr-par", "zone": "fr-par-2"
    }))
    .unwrap();
    assert_eq!(ip.ip(), "172.16.0.7");
    assert_eq!(ip.private_network_id(), Some("pn-1"));
    assert_eq!(
        ip.resource.unwrap().kind,
        IpResourceType::BaremetalPrivateNic
    );
    let odd: IpResource = serde_json::from_value(json!({"type": "k8s_node", "id": "n"})).unwrap();
    assert_eq!(odd.kind, IpResourceType::Other);
    assert_eq!(IpResourceType::Other.as_str(), None);

    let nic: PrivateNic = serde_json::from_value(json!({
        "id": "nic-1", "server_id": "s", "private_network_id": "pn-1",
        "mac_address": "02:00:00:00:12:23", "state": "syncing_error", "tags": null,
        "creation_date": "2022-03-30T06:25:28.155973+00:00",
        "modification_date": "2022-03-30T06:25:28.155973+00:00", "zone": "fr-par-1"
    }))
    .unwrap();
    assert_eq!(nic.state, PrivateNicState::SyncingError);
    assert!(nic.ipam_ip_ids.is_empty());
}

#[test]
fn filters_match_on_our_side() {
    let pn = |id: &str, name: &str, tags: &[&str]| PrivateNetwork {
        id: id.into(),
        name: name.into(),
        organization_id: String::new(),
        project_id: "proj".into(),
        region: "fr-par".into(),
        tags: tags.iter().map(|t| t.to_string()).collect(),
        subnets: Vec::new(),
        vpc_id: String::new(),
        dhcp_enabled: true,
        created_at: None,
        updated_at: None,
    };
    let by_name = PrivateNetworkFilter {
        name: Some("prod".into()),
        tags: vec!["k8s".into(), "a".into()],
        ..Default::default()
    };
    assert!(by_name.matches(&pn("1", "prod", &["k8s", "a", "b"])));
    assert!(
        !by_name.matches(&pn("1", "prod-2", &["k8s", "a"])),
        "substring"
    );
    assert!(!by_name.matches(&pn("1", "prod", &["k8s"])), "one tag only");
    let by_id = PrivateNetworkFilter {
        ids: vec!["2".into()],
        ..Default::default()
    };
    assert!(by_id.matches(&pn("2", "x", &[])));
    assert!(!by_id.matches(&pn("1", "x", &[])));

    let a = ServerPrivateNetwork {
        id: "a".into(),
        project_id: "proj".into(),
        server_id: "s1".into(),
        private_network_id: "pn".into(),
        vlan: Some(1000),
        status: AttachmentStatus::Attached,
        ipam_ip_ids: Vec::new(),
        created_at: None,
        updated_at: None,
    };
    let f = AttachmentFilter {
        server_id: Some("s1".into()),
        ..Default::default()
    };
    assert!(f.matches(&a));
    let f = AttachmentFilter {
        server_id: Some("s1".into()),
        private_network_id: Some("other".into()),
        ..Default::default()
    };
    assert!(!f.matches(&a));

    let ip = IpamIp {
        id: "ip".into(),
        address: "127.16.0.2/22".into(),
        project_id: "proj".into(),
        is_ipv6: false,
        source: Some(IpSource {
            private_network_id: Some("pn".into()),
            ..Default::default()
        }),
        resource: None,
        tags: vec!["node=a".into()],
        region: "fr-par".into(),
        zone: None,
        created_at: None,
        updated_at: None,
    };
    let f = IpFilter {
        private_network_id: Some("pn".into()),
        tags: vec!["node=a".into()],
        ..Default::default()
    };
    assert!(f.matches(&ip));
    let f = IpFilter {
        resource_id: Some("a".into()),
        ..Default::default()
    };
    assert!(!f.matches(&ip), "a booked address is attached to nothing");
}

#[test]
fn requests_encode_as_the_sdk_sends_them() {
    let book = BookIpRequest::new("proj", "pn-1", vec!["node=a".into()]);
    assert_eq!(
        serde_json::to_value(&book).unwrap(),
        json!({"project_id": "proj", "source": {"private_network_id": "pn-1"},
               "is_ipv6": false, "tags": ["node=a"]})
    );
    let nic = CreatePrivateNicRequest {
        private_network_id: "pn-1".into(),
        ..Default::default()
    };
    assert_eq!(
        serde_json::to_value(&nic).unwrap(),
        json!({"private_network_id": "pn-1"})
    );
}
