//! Tests of the standby module's tag reading and the book; the pass, the
//! adoption and the recycling are tested in `flow_tests.rs`.

use super::*;
use crate::scaleway::{BootType, ServerStatus};

fn server(id: &str, tags: &[&str]) -> Server {
    Server {
        id: id.into(),
        organization_id: String::new(),
        project_id: "proj-1".into(),
        name: format!("standby-{id}"),
        description: String::new(),
        status: ServerStatus::Ready,
        offer_id: "offer-1".into(),
        offer_name: "EM-A115X-SSD".into(),
        tags: tags.iter().map(|t| t.to_string()).collect(),
        ips: vec![],
        boot_type: BootType::Normal,
        zone: "fr-par-2".into(),
        rescue_server: None,
        created_at: "2026-11-24T09:00:00Z".into(),
        updated_at: String::new(),
    }
}

#[test]
fn tags_say_what_a_standby_server_is() {
    let installing = server(
        "a",
        &[
            "karpenter.scaleway.com/cluster=c",
            "karpenter.scaleway.com/standby=warm",
            "install.karpenter.scaleway.com/phase=imaging",
        ],
    );
    let s = StandbyServer::of(&installing).unwrap();
    assert_eq!((s.class.as_str(), s.state), ("warm", State::Installing));
    assert_eq!(s.progress.phase, Some(Phase::Imaging));

    let idle = server(
        "b",
        &[
            "karpenter.scaleway.com/standby=warm",
            "install.karpenter.scaleway.com/phase=standby",
            "install.karpenter.scaleway.com/phase-since=2026-11-24T09:12:00Z",
            "install.karpenter.scaleway.com/disk=nvme0n1",
            "install.karpenter.scaleway.com/mac=52:54:00:aa:bb:cc",
        ],
    );
    let s = StandbyServer::of(&idle).unwrap();
    assert_eq!(s.state, State::Idle);
    assert_eq!(s.progress.disk.as_deref(), Some("nvme0n1"));
    assert_eq!(s.progress.mac.as_deref(), Some("52:54:00:aa:bb:cc"));
    assert_eq!(
        s.idle_since(),
        Some(
            DateTime::parse_from_rfc3339("2026-11-24T09:12:00Z")
                .unwrap()
                .with_timezone(&Utc)
        )
    );

    let wiping = server(
        "c",
        &[
            "karpenter.scaleway.com/standby=warm",
            "karpenter.scaleway.com/recycled=true",
            "install.karpenter.scaleway.com/phase=rescue",
        ],
    );
    assert_eq!(StandbyServer::of(&wiping).unwrap().state, State::Wiping);

    // Adopted: the NodeClaim tag wins, it is a node.
    let adopted = server(
        "d",
        &[
            "karpenter.scaleway.com/standby=warm",
            "karpenter.sh/nodeclaim=default-x",
        ],
    );
    assert!(StandbyServer::of(&adopted).is_none());
    assert!(StandbyServer::of(&server("e", &["karpenter.sh/nodeclaim=n"])).is_none());
}

#[test]
fn progress_round_trips_through_tags() {
    let progress = Progress {
        phase: Some(Phase::Standby),
        phase_since: Some(
            DateTime::parse_from_rfc3339("2026-11-24T09:12:00Z")
                .unwrap()
                .with_timezone(&Utc),
        ),
        disk: Some("sda".into()),
        mac: Some("52:54:00:00:00:01".into()),
        image_attempts: 1,
        rescue_returns: 0,
        host_key: Some("SHA256:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU".into()),
        started: None,
    };
    let tags = with_progress(
        &[
            "keep=me".to_string(),
            "install.karpenter.scaleway.com/phase=imaging".to_string(),
        ],
        &progress,
    );
    assert!(tags.contains(&"keep=me".to_string()));
    assert!(!tags.iter().any(|t| t.ends_with("phase=imaging")));
    let s = server("a", &[]);
    let back = progress_of(&Server { tags, ..s });
    assert_eq!(back, progress);
}

#[test]
fn billing_comes_from_the_tag_else_the_class() {
    let hourly = server("a", &["karpenter.scaleway.com/billing=hourly"]);
    let monthly = server("b", &["karpenter.scaleway.com/billing=monthly"]);
    let untagged = server("c", &[]);
    assert_eq!(server_billing(&hourly, Billing::Monthly), Billing::Hourly);
    assert_eq!(server_billing(&monthly, Billing::Hourly), Billing::Monthly);
    assert_eq!(
        server_billing(&untagged, Billing::Monthly),
        Billing::Monthly
    );
}

#[test]
fn the_book_keeps_taken_servers_out_until_a_listing_shows_them_claimed() {
    let book = Book::default();
    let key: PoolKey = ("warm".into(), "EM-A115X-SSD".into(), "fr-par-2".into());
    let a = server("a", &[]);
    let b = server("b", &[]);
    book.replace(
        HashMap::from([(key.clone(), vec![a.clone(), b.clone()])]),
        HashMap::from([(key.clone(), 2)]),
        &HashSet::new(),
        &HashSet::new(),
    );
    assert_eq!(book.idle_count(&key), 2);
    book.mark_taken(&key, "a");
    assert_eq!(book.idle_count(&key), 1);
    // A listing that started before the claim still shows it idle.
    book.replace(
        HashMap::from([(key.clone(), vec![a.clone(), b.clone()])]),
        HashMap::from([(key.clone(), 2)]),
        &HashSet::new(),
        &HashSet::new(),
    );
    assert_eq!(book.idle_count(&key), 1, "a taken server stays out");
    // The next listing shows it claimed: forgotten from `taken`.
    book.replace(
        HashMap::from([(key.clone(), vec![b.clone()])]),
        HashMap::from([(key.clone(), 1)]),
        &HashSet::from(["a".to_string()]),
        &HashSet::from(["b".to_string()]),
    );
    assert_eq!(book.idle_count(&key), 1);
    assert!(book.taken.lock().unwrap().is_empty());
    assert_eq!(book.member_count(&key), 1);
    book.add_member(&key, "c");
    assert_eq!(book.member_count(&key), 2);
    // A listing that started before the recycling still counts it...
    book.replace(
        HashMap::from([(key.clone(), vec![b.clone()])]),
        HashMap::from([(key.clone(), 1)]),
        &HashSet::from(["a".to_string()]),
        &HashSet::from(["b".to_string()]),
    );
    assert_eq!(book.member_count(&key), 2, "c is counted until listed");
    // ...once, when the listing shows it.
    book.replace(
        HashMap::from([(key.clone(), vec![b.clone()])]),
        HashMap::from([(key.clone(), 2)]),
        &HashSet::from(["a".to_string()]),
        &HashSet::from(["b".to_string(), "c".to_string()]),
    );
    assert_eq!(book.member_count(&key), 2);
}
