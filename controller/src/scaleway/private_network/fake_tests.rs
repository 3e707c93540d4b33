//! The fake follows the real API where the provider's tests will rely on it.

use super::*;

const ZONE: &str = "fr-par-2";
const REGION: &str = "fr-par";

fn pn_option() -> OfferOption {
    private_network_option("opt-pn")
}

#[tokio::test]
async fn private_networks_are_found_by_id_or_by_name_and_tags_in_their_region() {
    let fake = FakePrivateNetworks::new();
    let prod = fake.add_private_network(REGION, "prod", "127.16.0.0/22", &["k8s", "a"]);
    fake.add_private_network(REGION, "prod-old", "127.17.0.0/22", &["k8s", "a"]);
    fake.add_private_network("nl-ams", "prod", "127.18.0.0/22", &["k8s", "a"]);
    let by_name = PrivateNetworkFilter {
        name: Some("prod".into()),
        tags: vec!["k8s".into()],
        ..Default::default()
    };
    let found = fake.list_private_networks(REGION, &by_name).await.unwrap();
    assert_eq!(found, std::slice::from_ref(&prod));
    let by_id = PrivateNetworkFilter {
        ids: vec![prod.id.clone()],
        ..Default::default()
    };
    assert_eq!(
        fake.list_private_networks(REGION, &by_id)
            .await
            .unwrap()
            .len(),
        1
    );
    assert_eq!(
        fake.get_private_network(REGION, &prod.id)
            .await
            .unwrap()
            .cidrs(),
        ["127.16.0.0/22"]
    );
    let err = fake
        .get_private_network("nl-ams", &prod.id)
        .await
        .unwrap_err();
    assert!(matches!(err, ApiError::NotFound(_)), "{err:?}");
}

#[tokio::test]
async fn an_attachment_goes_attaching_then_attached_with_a_vlan_and_an_ipam_address() {
    let fake = FakePrivateNetworks::new();
    let pn = fake.add_private_network(REGION, "prod", "127.16.0.0/22", &[]);
    let other = fake.add_private_network(REGION, "other", "127.20.0.0/24", &[]);
    fake.add_metal_server(ZONE, "srv");

    let a = fake
        .attach_private_network(ZONE, "srv", &pn.id, &[])
        .await
        .unwrap();
    assert_eq!((a.status, a.vlan), (AttachmentStatus::Attaching, None));
    assert_eq!(a.ipam_ip_ids.len(), 1);
    let ip = fake.get_ip(REGION, &a.ipam_ip_ids[0]).await.unwrap();
    assert_eq!(
        ip.address, "127.16.0.2/22",
        "network and gateway are skipped"
    );
    let resource = ip.resource.as_ref().unwrap();
    assert_eq!(
        (resource.kind, resource.id.as_str()),
        (IpResourceType::BaremetalPrivateNic, a.id.as_str())
    );

    let b = fake
        .attach_private_network(ZONE, "srv", &other.id, &[])
        .await
        .unwrap();
    fake.finish();
    let by_server = AttachmentFilter {
        server_id: Some("srv".into()),
        ..Default::default()
    };
    let attached = fake
        .list_server_private_networks(ZONE, &by_server)
        .await
        .unwrap();
    assert!(
        attached
            .iter()
            .all(|x| x.status == AttachmentStatus::Attached)
    );
    let vlans: Vec<Option<u32>> = attached.iter().map(|x| x.vlan).collect();
    assert_eq!(
        vlans,
        [Some(1000), Some(1001)],
        "one VLAN per network on a server"
    );
    let by_network = AttachmentFilter {
        private_network_id: Some(other.id.clone()),
        ..Default::default()
    };
    let only_b = fake
        .list_server_private_networks(ZONE, &by_network)
        .await
        .unwrap();
    assert_eq!(only_b.len(), 1);
    assert_eq!(only_b[0].id, b.id);
    // Listed in the attachment's zone only.
    assert!(
        fake.list_server_private_networks("fr-par-1", &by_server)
            .await
            .unwrap()
            .is_empty()
    );
}

#[tokio::test]
async fn attaching_refuses_what_the_api_refuses() {
    let fake = FakePrivateNetworks::new();
    let pn = fake.add_private_network(REGION, "prod", "127.16.0.0/22", &[]);
    let amsterdam = fake.add_private_network("nl-ams", "prod", "127.16.0.0/22", &[]);
    fake.add_metal_server(ZONE, "srv");
    fake.add_vm(ZONE, "vm");

    let err = fake
        .attach_private_network(ZONE, "nope", &pn.id, &[])
        .await
        .unwrap_err();
    assert!(matches!(err, ApiError::NotFound(_)), "{err:?}");
    let err = fake
        .attach_private_network(ZONE, "vm", &pn.id, &[])
        .await
        .unwrap_err();
    assert!(
        matches!(err, ApiError::NotFound(_)),
        "a VM is no baremetal server: {err:?}"
    );
    let err = fake
        .attach_private_network(ZONE, "srv", &amsterdam.id, &[])
        .await
        .unwrap_err();
    assert!(
        matches!(err, ApiError::NotFound(_)),
        "another region's network: {err:?}"
    );

    fake.attach_private_network(ZONE, "srv", &pn.id, &[])
        .await
        .unwrap();
    let err = fake
        .attach_private_network(ZONE, "srv", &pn.id, &[])
        .await
        .unwrap_err();
    assert!(
        matches!(err, ApiError::Invalid(_)),
        "attached twice: {err:?}"
    );

    for n in 1..MAX_NETWORKS_PER_SERVER {
        let more =
            fake.add_private_network(REGION, &format!("n{n}"), &format!("127.30.{n}.0/24"), &[]);
        fake.attach_private_network(ZONE, "srv", &more.id, &[])
            .await
            .unwrap();
    }
    let ninth = fake.add_private_network(REGION, "ninth", "127.31.0.0/24", &[]);
    let err = fake
        .attach_private_network(ZONE, "srv", &ninth.id, &[])
        .await
        .unwrap_err();
    assert!(matches!(err, ApiError::Invalid(m) if m.contains('8')));
}

#[tokio::test]
async fn the_option_can_be_required_and_is_added_from_the_offer() {
    let fake = FakePrivateNetworks::new();
    let pn = fake.add_private_network(REGION, "prod", "127.16.0.0/22", &[]);
    fake.add_metal_server(ZONE, "srv");
    fake.set_offer_options(ZONE, vec![pn_option()]);
    fake.set_requires_option(true);

    let err = fake
        .attach_private_network(ZONE, "srv", &pn.id, &[])
        .await
        .unwrap_err();
    assert!(matches!(err, ApiError::Invalid(m) if m.contains("option")));
    let err = fake
        .add_server_option(ZONE, "srv", "opt-unknown")
        .await
        .unwrap_err();
    assert!(matches!(err, ApiError::NotFound(_)), "{err:?}");

    let options = fake.add_server_option(ZONE, "srv", "opt-pn").await.unwrap();
    assert_eq!(options[0].status, OptionStatus::OptionStatusEnabling);
    let err = fake
        .add_server_option(ZONE, "srv", "opt-pn")
        .await
        .unwrap_err();
    assert!(matches!(err, ApiError::Invalid(_)), "added twice: {err:?}");
    fake.finish();
    let options = fake.get_server_options(ZONE, "srv").await.unwrap();
    assert_eq!(options[0].status, OptionStatus::OptionStatusEnable);
    fake.attach_private_network(ZONE, "srv", &pn.id, &[])
        .await
        .unwrap();
}

#[tokio::test]
async fn a_faulty_network_ends_its_attachments_in_error() {
    let fake = FakePrivateNetworks::new();
    let pn = fake.add_private_network(REGION, "prod", "127.16.0.0/22", &[]);
    fake.add_metal_server(ZONE, "srv");
    fake.fail_attachments_to(&pn.id);
    fake.set_auto_finish(true);
    let a = fake
        .attach_private_network(ZONE, "srv", &pn.id, &[])
        .await
        .unwrap();
    assert_eq!((a.status, a.vlan), (AttachmentStatus::Error, None));
}

#[tokio::test]
async fn detaching_releases_the_address_ipam_gave_and_keeps_a_booked_one() {
    let fake = FakePrivateNetworks::new();
    let pn = fake.add_private_network(REGION, "prod", "127.16.0.0/22", &[]);
    let other = fake.add_private_network(REGION, "other", "127.20.0.0/24", &[]);
    fake.add_metal_server(ZONE, "srv");

    let booked = fake
        .book_ip(
            REGION,
            &BookIpRequest::new("proj", &pn.id, vec!["node=a".into()]),
        )
        .await
        .unwrap();
    assert!(booked.resource.is_none());
    let a = fake
        .attach_private_network(ZONE, "srv", &pn.id, std::slice::from_ref(&booked.id))
        .await
        .unwrap();
    assert_eq!(a.ipam_ip_ids, std::slice::from_ref(&booked.id));
    let auto = fake
        .attach_private_network(ZONE, "srv", &other.id, &[])
        .await
        .unwrap();

    // Detaching while attaching is refused for now.
    let err = fake
        .detach_private_network(ZONE, "srv", &pn.id)
        .await
        .unwrap_err();
    assert!(matches!(err, ApiError::TransientState(_)), "{err:?}");
    fake.finish();
    fake.detach_private_network(ZONE, "srv", &pn.id)
        .await
        .unwrap();
    fake.detach_private_network(ZONE, "srv", &other.id)
        .await
        .unwrap();
    assert!(
        fake.attachments()
            .iter()
            .all(|a| a.status == AttachmentStatus::Detaching)
    );
    fake.finish();
    assert!(fake.attachments().is_empty());
    // Gone already: still fine.
    fake.detach_private_network(ZONE, "srv", &pn.id)
        .await
        .unwrap();

    let left = fake.ips();
    assert_eq!(left.len(), 1, "the address IPAM gave {auto:?} is released");
    assert_eq!(left[0].id, booked.id);
    assert!(left[0].resource.is_none(), "the booked one is free again");
    fake.release_ip(REGION, &booked.id).await.unwrap();
    fake.release_ip(REGION, &booked.id).await.unwrap();
    assert!(fake.ips().is_empty());
}

#[tokio::test]
async fn booking_checks_the_address_and_release_refuses_one_in_use() {
    let fake = FakePrivateNetworks::new();
    let pn = fake.add_private_network(REGION, "prod", "127.16.0.0/30", &[]);
    fake.add_metal_server(ZONE, "srv");
    let mut req = BookIpRequest::new("proj", &pn.id, Vec::new());
    req.address = Some("127.99.0.1".into());
    let err = fake.book_ip(REGION, &req).await.unwrap_err();
    assert!(
        matches!(err, ApiError::Invalid(_)),
        "outside the subnet: {err:?}"
    );
    req.address = Some("127.16.0.2".into());
    let ip = fake.book_ip(REGION, &req).await.unwrap();
    assert_eq!(ip.address, "127.16.0.2/30");
    let err = fake.book_ip(REGION, &req).await.unwrap_err();
    assert!(matches!(err, ApiError::Invalid(_)), "booked twice: {err:?}");
    // A /30 has one host beyond the gateway: the subnet is full.
    let err = fake
        .book_ip(REGION, &BookIpRequest::new("proj", &pn.id, Vec::new()))
        .await
        .unwrap_err();
    assert!(matches!(err, ApiError::Invalid(m) if m.contains("no free address")));

    fake.attach_private_network(ZONE, "srv", &pn.id, std::slice::from_ref(&ip.id))
        .await
        .unwrap();
    let err = fake.release_ip(REGION, &ip.id).await.unwrap_err();
    assert!(matches!(err, ApiError::Invalid(_)), "in use: {err:?}");

    let by_resource = IpFilter {
        resource_type: Some(IpResourceType::BaremetalPrivateNic),
        ..Default::default()
    };
    assert_eq!(fake.list_ips(REGION, &by_resource).await.unwrap().len(), 1);
    let err = fake.get_ip("nl-ams", &ip.id).await.unwrap_err();
    assert!(matches!(err, ApiError::NotFound(_)), "{err:?}");
}

#[tokio::test]
async fn a_private_nic_syncs_then_is_available_with_its_mac_and_address() {
    let fake = FakePrivateNetworks::new();
    let pn = fake.add_private_network(REGION, "prod", "127.16.0.0/22", &[]);
    fake.add_vm(ZONE, "vm");
    fake.add_metal_server(ZONE, "srv");
    let req = CreatePrivateNicRequest {
        private_network_id: pn.id.clone(),
        tags: vec!["node=a".into()],
        ipam_ip_ids: Vec::new(),
    };
    let err = fake
        .create_private_nic(ZONE, "srv", &req)
        .await
        .unwrap_err();
    assert!(
        matches!(err, ApiError::NotFound(_)),
        "not an Instance: {err:?}"
    );

    let nic = fake.create_private_nic(ZONE, "vm", &req).await.unwrap();
    assert_eq!(nic.state, PrivateNicState::Syncing);
    assert!(nic.mac_address.starts_with("02:00:00:"));
    let err = fake.create_private_nic(ZONE, "vm", &req).await.unwrap_err();
    assert!(
        matches!(err, ApiError::Invalid(_)),
        "a second NIC on one network: {err:?}"
    );
    fake.finish();
    let nic = fake.get_private_nic(ZONE, "vm", &nic.id).await.unwrap();
    assert_eq!(nic.state, PrivateNicState::Available);
    let ip = fake.get_ip(REGION, &nic.ipam_ip_ids[0]).await.unwrap();
    let resource = ip.resource.unwrap();
    assert_eq!(
        resource.mac_address.as_deref(),
        Some(nic.mac_address.as_str())
    );
    assert_eq!(resource.kind, IpResourceType::InstancePrivateNic);
    assert_eq!(
        fake.list_private_nics(ZONE, "vm").await.unwrap(),
        std::slice::from_ref(&nic)
    );

    fake.delete_private_nic(ZONE, "vm", &nic.id).await.unwrap();
    fake.delete_private_nic(ZONE, "vm", &nic.id).await.unwrap();
    assert!(fake.nics().is_empty());
    assert!(fake.ips().is_empty(), "the address IPAM gave is released");
    let err = fake.get_private_nic(ZONE, "vm", &nic.id).await.unwrap_err();
    assert!(matches!(err, ApiError::NotFound(_)), "{err:?}");
}

#[tokio::test]
async fn deleting_a_server_takes_its_attachments_and_nics_along() {
    let fake = FakePrivateNetworks::new();
    let pn = fake.add_private_network(REGION, "prod", "127.16.0.0/22", &[]);
    fake.add_metal_server(ZONE, "srv");
    fake.add_vm(ZONE, "vm");
    fake.set_auto_finish(true);
    fake.attach_private_network(ZONE, "srv", &pn.id, &[])
        .await
        .unwrap();
    let req = CreatePrivateNicRequest {
        private_network_id: pn.id.clone(),
        ..Default::default()
    };
    fake.create_private_nic(ZONE, "vm", &req).await.unwrap();
    assert_eq!(fake.ips().len(), 2);
    fake.remove_server("srv");
    fake.remove_server("vm");
    assert!(fake.attachments().is_empty());
    assert!(fake.nics().is_empty());
    assert!(fake.ips().is_empty());
}

#[tokio::test]
async fn injected_errors_come_first_and_calls_are_recorded() {
    let fake = FakePrivateNetworks::new();
    let pn = fake.add_private_network(REGION, "prod", "127.16.0.0/22", &[]);
    fake.add_metal_server(ZONE, "srv");
    fake.fail_next(Op::Attach, ApiError::Throttled);
    let err = fake
        .attach_private_network(ZONE, "srv", &pn.id, &[])
        .await
        .unwrap_err();
    assert_eq!(err, ApiError::Throttled);
    assert!(
        fake.attachments().is_empty(),
        "a failed call changes nothing"
    );
    fake.attach_private_network(ZONE, "srv", &pn.id, &[])
        .await
        .unwrap();
    assert_eq!(fake.count(Op::Attach), 2);
    assert_eq!(
        fake.calls()[0],
        Call {
            op: Op::Attach,
            scope: ZONE.into(),
            id: Some("srv".into())
        }
    );
}
