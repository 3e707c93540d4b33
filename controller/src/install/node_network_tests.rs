use super::*;
use crate::scaleway::ApiError;
use crate::scaleway::private_network::fake::FakePrivateNetworks;
use crate::scaleway::private_network::{BookIpRequest, MetalPrivateNetworks};

fn book(fake: &FakePrivateNetworks, pn: &str) -> IpamIp {
    futures::executor::block_on(fake.book_ip("fr-par", &BookIpRequest::new("proj", pn, vec![])))
        .unwrap()
}

#[tokio::test]
async fn the_first_free_booked_address_in_the_nodeclass_order_is_chosen() {
    let fake = FakePrivateNetworks::new();
    let pn = fake.add_private_network("fr-par", "prod", "172.16.0.0/24", &[]);
    fake.add_metal_server("fr-par-1", "srv-1");
    let (a, b, c) = (
        book(&fake, &pn.id),
        book(&fake, &pn.id),
        book(&fake, &pn.id),
    );
    // `a` is taken by a server's attachment.
    fake.attach_private_network("fr-par-1", "srv-1", &pn.id, std::slice::from_ref(&a.id))
        .await
        .unwrap();
    let order = vec![a.id.clone(), c.id.clone(), b.id.clone()];
    let chosen = choose_booked(&fake, "fr-par", &pn.id, &order)
        .await
        .unwrap();
    assert_eq!(chosen.id, c.id, "a is in use, c comes before b");
}

#[tokio::test]
async fn no_free_booked_address_is_an_error_naming_the_fix() {
    let fake = FakePrivateNetworks::new();
    let pn = fake.add_private_network("fr-par", "prod", "172.16.0.0/24", &[]);
    fake.add_metal_server("fr-par-1", "srv-1");
    let a = book(&fake, &pn.id);
    fake.attach_private_network("fr-par-1", "srv-1", &pn.id, std::slice::from_ref(&a.id))
        .await
        .unwrap();
    let err = choose_booked(&fake, "fr-par", &pn.id, &[a.id.clone(), "gone".into()])
        .await
        .unwrap_err();
    assert_eq!(
        err,
        BookedChoiceError::NoneFree {
            named: 2,
            in_use: 1
        }
    );
    assert!(err.to_string().contains("scw ipam ip create"));
}

#[tokio::test]
async fn a_failed_listing_chooses_nothing() {
    let fake = FakePrivateNetworks::new();
    let pn = fake.add_private_network("fr-par", "prod", "172.16.0.0/24", &[]);
    let a = book(&fake, &pn.id);
    fake.fail_next(
        crate::scaleway::private_network::fake::Op::ListIps,
        ApiError::Unavailable("503".into()),
    );
    let err = choose_booked(&fake, "fr-par", &pn.id, &[a.id])
        .await
        .unwrap_err();
    assert!(matches!(err, BookedChoiceError::Api(_)), "{err:?}");
}

fn ip(address: &str) -> IpamIp {
    IpamIp {
        id: "ip".into(),
        address: address.into(),
        project_id: String::new(),
        is_ipv6: false,
        source: None,
        resource: None,
        tags: vec![],
        region: "fr-par".into(),
        zone: None,
        created_at: None,
        updated_at: None,
    }
}

#[test]
fn the_link_keeps_the_prefix_ipam_gives_or_takes_the_subnets() {
    let network = NodeNetwork {
        region: "fr-par".into(),
        id: "pn".into(),
        subnets: vec!["10.0.0.0/16".into(), "172.16.0.0/22".into()],
        booked: vec![],
        internal_ip: true,
    };
    let link = private_link(&network, Some(12), None, Some(&ip("172.16.1.7/22")));
    assert_eq!(link.address.as_deref(), Some("172.16.1.7/22"));
    assert_eq!(link.vlan, Some(12));
    assert!(link.internal_ip);
    assert_eq!(link.subnets, network.subnets);
    let bare = private_link(
        &network,
        None,
        Some("02:00:00:00:00:01".into()),
        Some(&ip("172.16.2.9")),
    );
    assert_eq!(bare.address.as_deref(), Some("172.16.2.9/22"));
    assert_eq!(bare.mac.as_deref(), Some("02:00:00:00:00:01"));
    let outside = private_link(&network, None, None, Some(&ip("192.168.0.1")));
    assert_eq!(outside.address.as_deref(), Some("192.168.0.1/32"));
    assert_eq!(
        private_link(&network, Some(3), None, None).address,
        None,
        "DHCP"
    );
}
