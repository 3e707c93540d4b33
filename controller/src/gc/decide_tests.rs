//! Every branch of the sweeper's decision (contracts: "Orphan sweeper").

use std::collections::HashSet;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::*;

const HOUR: Duration = Duration::from_secs(3600);

fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-11-22T12:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

fn policy(dry_run: bool) -> SweepPolicy {
    SweepPolicy {
        cluster_name: "prod".into(),
        project_id: "proj-1".into(),
        grace: 2 * HOUR,
        dry_run,
    }
}

/// A server of cluster `prod`, tagged for NodeClaim `claim`, created `age` ago.
fn server(id: &str, claim: &str, age: Duration) -> Server {
    let created = now() - chrono::Duration::from_std(age).unwrap();
    serde_json::from_value(json!({
        "id": id, "project_id": "proj-1", "name": claim, "status": "ready",
        "offer_id": "o", "offer_name": "EM-A115X-SSD", "zone": "fr-par-2",
        "created_at": created.to_rfc3339(),
        "tags": [
            "karpenter.scaleway.com/cluster=prod",
            format!("karpenter.sh/nodeclaim={claim}"),
            "karpenter.scaleway.com/nodeclass=default",
        ]
    }))
    .unwrap()
}

fn nodeclaim(name: &str, provider_id: Option<&str>) -> Value {
    let mut c = json!({"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": name}});
    if let Some(pid) = provider_id {
        c["status"] = json!({"providerID": pid});
    }
    c
}

fn one(server: Server, claims: &[Value], in_flight: &[&str], dry_run: bool) -> Decision {
    let in_flight: HashSet<String> = in_flight.iter().map(|s| s.to_string()).collect();
    let mut out = decide(
        &[server],
        claims,
        &HashSet::new(),
        &in_flight,
        now(),
        &policy(dry_run),
    );
    assert_eq!(out.len(), 1);
    out.remove(0)
}

fn verdict(d: &Decision) -> (Verdict, Reason) {
    (d.verdict, d.reason)
}

#[test]
fn an_old_unclaimed_owned_server_is_deleted() {
    let d = one(server("s1", "np-gone", 3 * HOUR), &[], &[], false);
    assert_eq!(verdict(&d), (Verdict::Deleted, Reason::Orphaned));
    assert_eq!(d.age, Some(3 * HOUR));
    assert_eq!(d.claim, None);
    assert!(d.needs_event());
    assert_eq!(d.verdict.event_reason(), "OrphanDeleted");
    assert!(d.verdict.is_warning());
    let note = d.note();
    for part in ["s1", "np-gone", "fr-par-2", "3h0m", "deleted", "orphaned"] {
        assert!(note.contains(part), "{part} in {note}");
    }
}

#[test]
fn dry_run_only_says_it_would_delete() {
    let d = one(server("s1", "np-gone", 3 * HOUR), &[], &[], true);
    assert_eq!(verdict(&d), (Verdict::WouldDelete, Reason::Orphaned));
    assert_eq!(d.verdict.event_reason(), "OrphanWouldDelete");
    assert!(d.note().contains("dry run"));
}

#[test]
fn a_young_unclaimed_server_waits_for_the_grace() {
    let d = one(server("s1", "np-gone", HOUR), &[], &[], false);
    assert_eq!(verdict(&d), (Verdict::Spared, Reason::WithinGrace));
    assert!(!d.verdict.is_warning());
    assert_eq!(d.verdict.event_reason(), "OrphanSpared");
    // Exactly at the grace it is old enough.
    let d = one(server("s1", "np-gone", 2 * HOUR), &[], &[], false);
    assert_eq!(verdict(&d), (Verdict::Deleted, Reason::Orphaned));
}

#[test]
fn a_server_of_unknown_age_is_never_old_enough() {
    let mut s = server("s1", "np-gone", 30 * HOUR);
    s.created_at = "yesterday".into();
    let d = one(s, &[], &[], false);
    assert_eq!(verdict(&d), (Verdict::Spared, Reason::WithinGrace));
    assert_eq!(d.age, None);
    assert!(d.note().contains("age unknown"));
}

#[test]
fn a_server_claimed_by_provider_id_or_by_tag_is_spared_without_an_event() {
    let s = server("s1", "np-a", 30 * HOUR);
    let by_pid = one(
        s.clone(),
        &[nodeclaim(
            "renamed",
            Some("scaleway://baremetal/fr-par-2/s1"),
        )],
        &[],
        false,
    );
    assert_eq!(verdict(&by_pid), (Verdict::Spared, Reason::Claimed));
    assert_eq!(by_pid.claim.as_deref(), Some("renamed"));
    assert!(!by_pid.needs_event());

    // Create tags the server before its NodeClaim has a providerID.
    let by_tag = one(s.clone(), &[nodeclaim("np-a", None)], &[], false);
    assert_eq!(verdict(&by_tag), (Verdict::Spared, Reason::Claimed));
    assert_eq!(by_tag.claim.as_deref(), Some("np-a"));

    // A NodeClaim pointing at another server does not claim this one.
    let other = one(
        s,
        &[nodeclaim("np-b", Some("scaleway://baremetal/fr-par-2/s2"))],
        &[],
        false,
    );
    assert_eq!(verdict(&other), (Verdict::Deleted, Reason::Orphaned));
}

#[test]
fn an_install_in_flight_is_spared_even_when_claimed() {
    let s = server("s1", "np-a", 30 * HOUR);
    let d = one(s.clone(), &[], &["s1"], false);
    assert_eq!(verdict(&d), (Verdict::Spared, Reason::InFlight));
    assert!(d.needs_event());
    // Checked before `claimed`.
    let d = one(s, &[nodeclaim("np-a", None)], &["s1"], false);
    assert_eq!(verdict(&d), (Verdict::Spared, Reason::InFlight));
}

#[test]
fn a_server_being_deleted_is_left_to_finish() {
    let mut s = server("s1", "np-gone", 30 * HOUR);
    s.status = ServerStatus::Deleting;
    let d = one(s, &[], &[], false);
    assert_eq!(verdict(&d), (Verdict::Spared, Reason::Deleting));
}

#[test]
fn ownership_must_be_proven_before_anything_else() {
    let base = server("s1", "np-gone", 30 * HOUR);
    let mut no_cluster = base.clone();
    no_cluster
        .tags
        .retain(|t| !t.starts_with("karpenter.scaleway.com/cluster="));
    let mut other_cluster = base.clone();
    other_cluster.tags[0] = "karpenter.scaleway.com/cluster=staging".into();
    let mut other_project = base.clone();
    other_project.project_id = "proj-2".into();
    let mut no_claim_tag = base.clone();
    no_claim_tag
        .tags
        .retain(|t| !t.starts_with("karpenter.sh/nodeclaim="));
    let mut empty_claim_tag = base.clone();
    empty_claim_tag.tags[1] = "karpenter.sh/nodeclaim=".into();
    for (s, why) in [
        (no_cluster, "no karpenter.scaleway.com/cluster tag"),
        (other_cluster, "\"staging\""),
        (other_project, "project \"proj-2\""),
        (no_claim_tag, "no karpenter.sh/nodeclaim tag"),
        (empty_claim_tag, "no karpenter.sh/nodeclaim tag"),
    ] {
        // Old, unclaimed, not in flight: only ownership stops the deletion.
        let d = one(s, &[], &[], false);
        assert_eq!(
            verdict(&d),
            (Verdict::Refused, Reason::OwnershipUnproven),
            "{why}"
        );
        assert!(d.detail.contains(why), "{why} in {}", d.detail);
        assert_eq!(d.verdict.event_reason(), "OrphanRefused");
        assert!(d.verdict.is_warning());
    }
}

#[test]
fn each_server_gets_its_own_decision_in_order() {
    let claims = [nodeclaim("np-a", Some("scaleway://baremetal/fr-par-2/s1"))];
    let servers = [
        server("s1", "np-a", 5 * HOUR),
        server("s2", "np-gone", 5 * HOUR),
        server("s3", "np-new", Duration::from_secs(60)),
    ];
    let in_flight = HashSet::new();
    let out = decide(
        &servers,
        &claims,
        &HashSet::new(),
        &in_flight,
        now(),
        &policy(false),
    );
    let got: Vec<_> = out
        .iter()
        .map(|d| (d.server.id.as_str(), d.verdict, d.reason))
        .collect();
    assert_eq!(
        got,
        vec![
            ("s1", Verdict::Spared, Reason::Claimed),
            ("s2", Verdict::Deleted, Reason::Orphaned),
            ("s3", Verdict::Spared, Reason::WithinGrace),
        ]
    );
}

#[test]
fn labels_and_ages_read_well() {
    assert_eq!(Verdict::WouldDelete.as_str(), "would_delete");
    assert_eq!(Reason::OwnershipUnproven.as_str(), "ownership_unproven");
    assert_eq!(Reason::InFlight.as_str(), "in_flight");
    assert_eq!(Reason::WithinGrace.as_str(), "within_grace");
    assert_eq!(format_age(Duration::from_secs(12)), "12s");
    assert_eq!(format_age(Duration::from_secs(250)), "4m10s");
    assert_eq!(format_age(Duration::from_secs(2 * 3600 + 300)), "2h5m");
    assert_eq!(
        format_age(Duration::from_secs(3 * 86_400 + 4 * 3600)),
        "3d4h"
    );
}

/// A standby server of cluster `prod` (no NodeClaim tag), created `age` ago.
fn standby_server(id: &str, age: Duration) -> Server {
    let mut s = server(id, "unused", age);
    s.tags = vec![
        "karpenter.scaleway.com/cluster=prod".into(),
        "karpenter.scaleway.com/nodeclass=warm".into(),
        "karpenter.scaleway.com/standby=warm".into(),
        "install.karpenter.scaleway.com/phase=standby".into(),
    ];
    s
}

#[test]
fn a_standby_server_is_spared_however_old_and_a_foreign_one_still_refused() {
    for dry_run in [false, true] {
        let d = one(standby_server("s1", 30 * HOUR), &[], &[], dry_run);
        assert_eq!(verdict(&d), (Verdict::Spared, Reason::Standby));
        assert_eq!(d.reason.as_str(), "standby");
        assert!(d.detail.contains("warm"), "{}", d.detail);
        assert_eq!(d.nodeclass(), Some("warm"));
        assert!(!d.verdict.is_warning());
    }

    // The standby tag proves nothing on a server this cluster cannot prove
    // it owns.
    let mut other_cluster = standby_server("s2", 30 * HOUR);
    other_cluster.tags[0] = "karpenter.scaleway.com/cluster=staging".into();
    let mut no_cluster = standby_server("s3", 30 * HOUR);
    no_cluster.tags.remove(0);
    let mut other_project = standby_server("s4", 30 * HOUR);
    other_project.project_id = "proj-2".into();
    for s in [other_cluster, no_cluster, other_project] {
        let id = s.id.clone();
        let d = one(s, &[], &[], false);
        assert_eq!(
            verdict(&d),
            (Verdict::Refused, Reason::OwnershipUnproven),
            "{id}"
        );
    }

    // Adopted (a NodeClaim tag) and its NodeClaim gone: an orphan like any
    // node's server, whatever standby tag it kept.
    let mut adopted = server("s5", "np-gone", 30 * HOUR);
    adopted
        .tags
        .push("karpenter.scaleway.com/standby=warm".into());
    let d = one(adopted, &[], &[], false);
    assert_eq!(verdict(&d), (Verdict::Deleted, Reason::Orphaned));
}

#[test]
fn a_deleted_nodeclaim_releases_its_server_after_minutes_not_the_grace() {
    let deleted: HashSet<String> = ["np-lost".to_string()].into();
    let decide_with = |age: Duration, in_flight: &[&str], dry_run: bool| {
        let in_flight: HashSet<String> = in_flight.iter().map(|s| s.to_string()).collect();
        let out = decide(
            &[server("srv", "np-lost", age)],
            &[],
            &deleted,
            &in_flight,
            now(),
            &policy(dry_run),
        );
        verdict(&out[0])
    };
    let old_enough = CLAIM_DELETED_GRACE + Duration::from_secs(1);
    assert_eq!(
        decide_with(old_enough, &[], false),
        (Verdict::Deleted, Reason::ClaimDeleted)
    );
    assert_eq!(
        decide_with(old_enough, &[], true),
        (Verdict::WouldDelete, Reason::ClaimDeleted)
    );
    assert_eq!(
        decide_with(Duration::from_secs(30), &[], false),
        (Verdict::Spared, Reason::WithinGrace)
    );
    assert_eq!(
        decide_with(old_enough, &["srv"], false),
        (Verdict::Spared, Reason::InFlight)
    );
    // Not confirmed deleted: the grace as before.
    let out = decide(
        &[server("srv", "np-other", old_enough)],
        &[],
        &deleted,
        &HashSet::new(),
        now(),
        &policy(false),
    );
    assert_eq!(verdict(&out[0]), (Verdict::Spared, Reason::WithinGrace));
}

#[test]
fn only_owned_unclaimed_servers_name_claims_to_read_again() {
    let mut foreign = server("f", "np-f", HOUR);
    foreign.tags[0] = "karpenter.scaleway.com/cluster=staging".into();
    let servers = [
        server("a", "np-a", HOUR),
        server("b", "np-b", HOUR),
        server("b2", "np-b", HOUR),
        foreign,
    ];
    let claims = [nodeclaim("np-a", None)];
    assert_eq!(
        unlisted_claims(&servers, &claims, &policy(false)),
        vec!["np-b".to_string()]
    );
}
