use super::*;
use crate::clock::secs;

const PROJECT: &str = "22222222-2222-4222-8222-222222222222";

fn t0() -> SimTime {
    "2026-11-28T10:00:00Z".parse().unwrap()
}

fn spec(name: &str, subnet: &str) -> PnSpec {
    PnSpec {
        id: None,
        name: name.into(),
        region: "fr-par".into(),
        subnets: vec![subnet.into()],
        tags: vec![],
        project_id: None,
        vpc_id: None,
        dhcp_enabled: true,
    }
}

fn world() -> PnWorld {
    PnWorld::new(
        vec![spec("prod", "127.80.0.0/29"), spec("dev", "127.81.0.0/24")],
        7,
        PROJECT,
        PROJECT,
        PnTimings::default(),
        t0(),
        Some(("127.77.0.0".parse().unwrap(), 16)),
    )
    .unwrap()
}

fn server(id: &str) -> ServerRef {
    ServerRef {
        id: id.into(),
        zone: "fr-par-2".into(),
        project_id: PROJECT.into(),
        name: format!("node-{id}"),
        mac_address: em_mac(id),
    }
}

fn pn_id(w: &PnWorld, name: &str) -> String {
    w.networks().find(|n| n.name == name).unwrap().id.clone()
}

#[test]
fn cidrs_parse_and_keep_network_gateway_and_broadcast() {
    let c = Cidr::parse("127.80.0.0/29").unwrap();
    let hosts: Vec<String> = c.hosts().map(|h| h.to_string()).collect();
    assert_eq!(
        hosts,
        [
            "127.80.0.2",
            "127.80.0.3",
            "127.80.0.4",
            "127.80.0.5",
            "127.80.0.6"
        ]
    );
    assert!(!c.assignable("127.80.0.1".parse().unwrap()));
    assert!(!c.assignable("127.80.0.7".parse().unwrap()));
    assert!(Cidr::parse("127.80.0.1/24").is_err());
    assert!(Cidr::parse("127.80.0.0/30").is_err());
    assert!(Cidr::parse("nope").is_err());
}

#[test]
fn seeds_are_checked_and_ids_stable() {
    let a = world();
    let b = world();
    assert_eq!(pn_id(&a, "prod"), pn_id(&b, "prod"));
    assert_ne!(pn_id(&a, "prod"), pn_id(&a, "dev"));
    let overlapping = vec![spec("a", "127.80.0.0/24"), spec("b", "127.80.0.0/25")];
    assert!(
        PnWorld::new(
            overlapping,
            0,
            PROJECT,
            PROJECT,
            PnTimings::default(),
            t0(),
            None
        )
        .is_err()
    );
    let mut bad = spec("x", "127.82.0.0/24");
    bad.region = "us-east".into();
    assert!(
        PnWorld::new(
            vec![bad],
            0,
            PROJECT,
            PROJECT,
            PnTimings::default(),
            t0(),
            None
        )
        .is_err()
    );
}

#[test]
fn attach_allocates_then_settles_and_detach_releases() {
    let mut w = world();
    let pn = pn_id(&w, "prod");
    let s = server("s1");
    let req = AttachRequest {
        private_network_id: pn.clone(),
        ipam_ip_ids: vec![],
        fails: false,
    };
    let a = w.attach(t0(), &s, req.clone()).unwrap().clone();
    assert_eq!(a.status, AttachStatus::Attaching);
    let ip = w.ip("fr-par", &a.ipam_ip_ids[0]).unwrap();
    assert_eq!(ip.cidr(), "127.80.0.2/29");
    let resource = ip.resource.clone().unwrap();
    assert_eq!(resource.kind, "baremetal_private_nic");
    assert_eq!(resource.id, "s1");
    assert_eq!(resource.mac_address, em_mac("s1"));
    // Twice on the same network is refused.
    assert!(w.attach(t0(), &s, req).is_err());
    w.advance(t0() + secs(9.9), |_| true, |_| true);
    assert_eq!(w.attachments_of("s1")[0].status, AttachStatus::Attaching);
    w.advance(t0() + secs(10.0), |_| true, |_| true);
    assert_eq!(w.attachments_of("s1")[0].status, AttachStatus::Attached);
    w.detach(t0() + secs(20.0), "s1", &pn).unwrap();
    assert_eq!(w.attachments_of("s1")[0].status, AttachStatus::Detaching);
    w.advance(t0() + secs(25.0), |_| true, |_| true);
    assert!(w.attachments_of("s1").is_empty());
    assert_eq!(w.all_ips().count(), 0, "the allocated address goes with it");
}

#[test]
fn booked_addresses_stay_booked_when_their_holder_goes() {
    let mut w = world();
    let pn = pn_id(&w, "dev");
    let booked = w
        .book(
            t0(),
            "fr-par",
            BookRequest {
                project_id: None,
                private_network_id: pn.clone(),
                address: Some("127.81.0.50".parse().unwrap()),
                tags: vec!["k8s".into()],
            },
        )
        .unwrap()
        .id
        .clone();
    let req = AttachRequest {
        private_network_id: pn.clone(),
        ipam_ip_ids: vec![booked.clone()],
        fails: true,
    };
    w.attach(t0(), &server("s2"), req).unwrap();
    assert!(
        w.release("fr-par", &booked).is_err(),
        "attached addresses are not released"
    );
    w.advance(t0() + secs(10.0), |_| true, |_| true);
    assert_eq!(w.attachments_of("s2")[0].status, AttachStatus::Error);
    // The server went: the attachment goes, the booked address stays.
    w.advance(t0() + secs(11.0), |_| false, |_| true);
    assert!(w.attachments_of("s2").is_empty());
    let ip = w.ip("fr-par", &booked).unwrap();
    assert!(ip.resource.is_none());
    w.release("fr-par", &booked).unwrap();
    assert!(w.ip("fr-par", &booked).is_err());
}

#[test]
fn a_full_subnet_refuses_and_taken_addresses_conflict() {
    let mut w = world();
    let pn = pn_id(&w, "prod");
    let book = |w: &mut PnWorld, address: Option<&str>| {
        w.book(
            t0(),
            "fr-par",
            BookRequest {
                project_id: None,
                private_network_id: pn.clone(),
                address: address.map(|a| a.parse().unwrap()),
                tags: vec![],
            },
        )
        .map(|ip| ip.address.to_string())
    };
    assert_eq!(book(&mut w, None).unwrap(), "127.80.0.2");
    assert!(book(&mut w, Some("127.80.0.2")).is_err());
    assert!(book(&mut w, Some("127.80.0.1")).is_err(), "the gateway's");
    assert!(
        book(&mut w, Some("127.81.0.9")).is_err(),
        "another network's"
    );
    for _ in 0..4 {
        book(&mut w, None).unwrap();
    }
    let err = book(&mut w, None).unwrap_err();
    assert_eq!(err.status(), axum::http::StatusCode::PRECONDITION_FAILED);
}

#[test]
fn nics_sync_and_go_with_their_vm() {
    let mut w = world();
    let pn = pn_id(&w, "dev");
    let vm = VmRef {
        id: "vm1".into(),
        zone: "fr-par-1".into(),
        project_id: PROJECT.into(),
        name: "vm-one".into(),
    };
    let nic = w
        .create_nic(t0(), &vm, &pn, vec![], vec![])
        .unwrap()
        .clone();
    assert!(nic.mac_address.starts_with("02:00:00:"));
    assert_eq!(nic.state, NicState::Syncing);
    assert!(w.create_nic(t0(), &vm, &pn, vec![], vec![]).is_err());
    let ip = w.ip("fr-par", &nic.ipam_ip_ids[0]).unwrap().clone();
    assert_eq!(ip.resource.as_ref().unwrap().kind, "instance_private_nic");
    assert_eq!(ip.resource.as_ref().unwrap().id, nic.id);
    w.advance(t0() + secs(3.0), |_| true, |_| true);
    assert_eq!(w.nics_of("vm1")[0].state, NicState::Available);
    w.advance(t0() + secs(4.0), |_| true, |_| false);
    assert!(w.nics_of("vm1").is_empty());
    assert!(
        w.ip("fr-par", &ip.id).is_err(),
        "allocated addresses are released"
    );
}

#[test]
fn set_replaces_the_whole_list() {
    let mut w = world();
    let (prod, dev) = (pn_id(&w, "prod"), pn_id(&w, "dev"));
    let s = server("s3");
    w.set_attachments(t0(), &s, &[(prod.clone(), vec![])], |_| false)
        .unwrap();
    w.advance(t0() + secs(10.0), |_| true, |_| true);
    let list = w
        .set_attachments(t0() + secs(10.0), &s, &[(dev.clone(), vec![])], |_| false)
        .unwrap();
    assert_eq!(list.len(), 1);
    assert_eq!(list[0].private_network_id, dev);
    let statuses: Vec<(String, AttachStatus)> = w
        .attachments_of("s3")
        .into_iter()
        .map(|a| (a.private_network_id.clone(), a.status))
        .collect();
    assert!(statuses.contains(&(prod.clone(), AttachStatus::Detaching)));
    assert!(statuses.contains(&(dev.clone(), AttachStatus::Attaching)));
    // While `dev` is attaching, leaving it out is refused and changes nothing.
    assert!(
        w.set_attachments(t0() + secs(11.0), &s, &[], |_| false)
            .is_err()
    );
    assert_eq!(w.attachments_of("s3").len(), 2);
}

#[test]
fn reset_keeps_the_seeds_only() {
    let mut w = world();
    let before = pn_id(&w, "prod");
    w.add_network(spec("extra", "127.90.0.0/24"), t0()).unwrap();
    assert!(
        w.add_network(spec("public", "127.77.5.0/24"), t0())
            .is_err(),
        "inside the servers' public range"
    );
    w.reset(t0());
    assert_eq!(w.networks().count(), 2);
    assert_eq!(pn_id(&w, "prod"), before);
}

#[test]
fn vlans_are_unique_per_server_and_per_network_and_stable() {
    let mut w = world();
    let (prod, dev) = (pn_id(&w, "prod"), pn_id(&w, "dev"));
    let attach = |w: &mut PnWorld, id: &str, pn: &str| {
        let req = AttachRequest {
            private_network_id: pn.into(),
            ipam_ip_ids: vec![],
            fails: false,
        };
        w.attach(t0(), &server(id), req).unwrap().vlan
    };
    let a_prod = attach(&mut w, "a", &prod);
    let a_dev = attach(&mut w, "a", &dev);
    let b_prod = attach(&mut w, "b", &prod);
    let b_dev = attach(&mut w, "b", &dev);
    assert_ne!(a_prod, a_dev, "two networks of one server");
    assert_ne!(a_prod, b_prod, "two servers of one network");
    assert_ne!(b_prod, b_dev);
    assert_ne!(a_dev, b_dev);
    w.advance(t0() + secs(10.0), |_| true, |_| true);
    assert_eq!(w.attachments_of("a")[0].to_wire().vlan, Some(a_prod));
    w.detach(t0() + secs(10.0), "a", &prod).unwrap();
    w.advance(t0() + secs(20.0), |_| true, |_| true);
    assert_eq!(attach(&mut w, "a", &prod), a_prod, "kept across re-attach");
    // Null while attaching.
    assert_eq!(
        w.attachments_of("a")
            .iter()
            .find(|x| x.private_network_id == prod)
            .unwrap()
            .to_wire()
            .vlan,
        None
    );
}

#[test]
fn the_seed_file_parses_and_refuses_unknown_fields() {
    let specs = PnFile::parse(
        "private_networks:\n  - name: prod\n    region: fr-par\n    subnets: [127.80.0.0/24]\n    tags: [k8s]\n",
    )
    .unwrap();
    assert_eq!(
        specs,
        vec![spec("prod", "127.80.0.0/24")]
            .into_iter()
            .map(|mut s| {
                s.tags = vec!["k8s".into()];
                s
            })
            .collect::<Vec<_>>()
    );
    assert!(specs[0].dhcp_enabled);
    assert!(
        PnFile::parse(
            "private_networks:\n  - name: x\n    region: fr-par\n    subnets: []\n    colour: red\n"
        )
        .is_err()
    );
}
