//! Every branch of the VM and volume decisions.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::*;
use crate::scaleway::block::Reference;

const MIN: Duration = Duration::from_secs(60);
const GRACE: Duration = Duration::from_secs(300);

fn now() -> DateTime<Utc> {
    DateTime::parse_from_rfc3339("2026-11-24T12:00:00Z")
        .unwrap()
        .with_timezone(&Utc)
}

fn ago(age: Duration) -> String {
    (now() - chrono::Duration::from_std(age).unwrap())
        .to_rfc3339_opts(chrono::SecondsFormat::Micros, false)
}

fn policy(dry_run: bool) -> SweepPolicy {
    SweepPolicy {
        cluster_name: "prod".into(),
        project_id: "proj-1".into(),
        // The Elastic Metal grace: never the one VMs are judged by.
        grace: Duration::from_secs(3 * 3600),
        dry_run,
    }
}

fn owned_tags(claim: &str) -> Vec<String> {
    vec![
        "karpenter.scaleway.com/cluster=prod".into(),
        format!("karpenter.sh/nodeclaim={claim}"),
        "karpenter.scaleway.com/nodeclass=gpu".into(),
        "karpenter.sh/nodepool=default".into(),
    ]
}

/// A VM of cluster `prod` for NodeClaim `claim`, created `age` ago, with an
/// SBS root `<id>-root`.
fn vm(id: &str, claim: &str, state: &str, age: Duration) -> Server {
    serde_json::from_value(json!({
        "id": id, "name": claim, "commercial_type": "POP2-2C-8G", "state": state,
        "zone": "fr-par-2", "project": "proj-1", "tags": owned_tags(claim),
        "creation_date": ago(age),
        "volumes": {"0": {"id": format!("{id}-root"), "volume_type": "sbs_volume", "zone": "fr-par-2"}}
    }))
    .unwrap()
}

/// A detached volume of cluster `prod` for NodeClaim `claim`.
fn volume(id: &str, claim: &str, age: Duration) -> Volume {
    serde_json::from_value(json!({
        "id": id, "name": format!("{claim}-root"), "type": "sbs_5k", "size": 20000000000u64,
        "project_id": "proj-1", "status": "available", "references": [],
        "tags": owned_tags(claim), "zone": "fr-par-2", "created_at": ago(age)
    }))
    .unwrap()
}

fn nodeclaim(name: &str, provider_id: Option<&str>) -> Value {
    let mut c = json!({"metadata": {"name": name}});
    if let Some(pid) = provider_id {
        c["status"] = json!({"providerID": pid});
    }
    c
}

fn decide_all(
    servers: &[Server],
    volumes: &[Volume],
    claims: &[Value],
    dry_run: bool,
) -> Vec<InstanceDecision> {
    decide_instances(servers, volumes, claims, now(), &policy(dry_run), GRACE)
}

fn one_vm(server: Server, claims: &[Value]) -> InstanceDecision {
    let mut out = decide_all(&[server], &[], claims, false);
    assert_eq!(out.len(), 1);
    out.remove(0)
}

fn one_volume(v: Volume, servers: &[Server], claims: &[Value]) -> InstanceDecision {
    let out = decide_all(servers, &[v], claims, false);
    out.into_iter()
        .find(|d| matches!(d.subject, Subject::Volume(_)))
        .unwrap()
}

fn what(d: &InstanceDecision) -> (Verdict, Reason, Option<Step>) {
    (d.verdict, d.reason, d.step)
}

#[test]
fn an_old_unclaimed_running_vm_is_terminated_and_a_stopped_one_deleted() {
    let d = one_vm(vm("i1", "np-gone", "running", 6 * MIN), &[]);
    assert_eq!(
        what(&d),
        (Verdict::Deleted, Reason::Orphaned, Some(Step::Terminate))
    );
    assert_eq!(d.age, Some(6 * MIN));
    assert_eq!(d.nodeclass(), Some("gpu"));
    assert!(d.needs_event());
    let note = d.note();
    for part in [
        "instance",
        "i1",
        "np-gone",
        "fr-par-2",
        "6m0s",
        "deleted",
        "orphaned",
        "terminate",
    ] {
        assert!(note.contains(part), "{part} in {note}");
    }
    let d = one_vm(vm("i2", "np-gone", "stopped", 6 * MIN), &[]);
    assert_eq!(
        what(&d),
        (Verdict::Deleted, Reason::Orphaned, Some(Step::DeleteServer))
    );
    let d = one_vm(vm("i3", "np-gone", "stopped in place", 6 * MIN), &[]);
    assert_eq!(
        what(&d),
        (Verdict::Deleted, Reason::Orphaned, Some(Step::Poweroff))
    );
}

#[test]
fn a_vm_starting_or_stopping_is_left_until_it_settles() {
    for state in ["starting", "stopping", "locked"] {
        let d = one_vm(vm("i1", "np-gone", state, 6 * MIN), &[]);
        assert_eq!(
            what(&d),
            (Verdict::Spared, Reason::Transitioning, None),
            "{state}"
        );
        assert!(d.detail.contains(state), "{}", d.detail);
    }
}

#[test]
fn a_nodeclaim_that_exists_keeps_its_vm_by_tag_or_by_provider_id() {
    // By the nodeclaim tag (no providerID yet).
    let d = one_vm(
        vm("i1", "np-a", "running", 60 * MIN),
        &[nodeclaim("np-a", None)],
    );
    assert_eq!(what(&d), (Verdict::Spared, Reason::Claimed, None));
    assert_eq!(d.claim.as_deref(), Some("np-a"));
    assert!(!d.needs_event(), "the steady state makes no Event");
    // By providerID, whatever the tag says.
    let d = one_vm(
        vm("i1", "np-renamed", "running", 60 * MIN),
        &[nodeclaim("np-a", Some("scaleway://instance/fr-par-2/i1"))],
    );
    assert_eq!(what(&d), (Verdict::Spared, Reason::Claimed, None));
    assert_eq!(d.claim.as_deref(), Some("np-a"));
    // An Elastic Metal providerID with the same id claims nothing here.
    let d = one_vm(
        vm("i1", "np-renamed", "running", 60 * MIN),
        &[nodeclaim("np-a", Some("scaleway://baremetal/fr-par-2/i1"))],
    );
    assert_eq!(d.verdict, Verdict::Deleted);
}

#[test]
fn a_young_vm_or_one_of_unknown_age_is_spared_by_the_vm_grace() {
    let d = one_vm(vm("i1", "np-new", "running", 4 * MIN), &[]);
    assert_eq!(what(&d), (Verdict::Spared, Reason::WithinGrace, None));
    assert!(d.detail.contains("5m0s"), "{}", d.detail);
    let mut unknown = vm("i1", "np-new", "running", 60 * MIN);
    unknown.creation_date = None;
    let d = one_vm(unknown, &[]);
    assert_eq!(what(&d), (Verdict::Spared, Reason::WithinGrace, None));
    assert_eq!(d.age, None);
}

#[test]
fn a_foreign_vm_is_never_touched() {
    let mut untagged = vm("i1", "np-x", "running", 60 * MIN);
    untagged
        .tags
        .retain(|t| !t.starts_with("karpenter.scaleway.com/cluster="));
    let mut other_cluster = vm("i2", "np-x", "running", 60 * MIN);
    other_cluster.tags[0] = "karpenter.scaleway.com/cluster=staging".into();
    let mut other_project = vm("i3", "np-x", "running", 60 * MIN);
    other_project.project = "proj-2".into();
    let mut no_claim_tag = vm("i4", "np-x", "running", 60 * MIN);
    no_claim_tag
        .tags
        .retain(|t| !t.starts_with("karpenter.sh/nodeclaim="));
    for (server, why) in [
        (untagged, "no karpenter.scaleway.com/cluster tag"),
        (other_cluster, "\"staging\""),
        (other_project, "proj-2"),
        (no_claim_tag, "no karpenter.sh/nodeclaim tag"),
    ] {
        let d = one_vm(server, &[]);
        assert_eq!(
            what(&d),
            (Verdict::Refused, Reason::OwnershipUnproven, None)
        );
        assert!(d.detail.contains(why), "{why} in {}", d.detail);
        assert!(d.needs_event());
    }
}

#[test]
fn dry_run_only_says_it_would_delete() {
    let out = decide_all(
        &[vm("i1", "np-gone", "running", 60 * MIN)],
        &[volume("v1", "np-old", 60 * MIN)],
        &[],
        true,
    );
    for d in &out {
        assert_eq!(d.verdict, Verdict::WouldDelete, "{}", d.note());
        assert!(d.detail.contains("dry run"), "{}", d.detail);
    }
    assert_eq!(out[0].step, Some(Step::Terminate));
    assert_eq!(out[1].step, Some(Step::DeleteVolume));
}

#[test]
fn an_old_detached_unclaimed_volume_is_deleted() {
    let d = one_volume(volume("v1", "np-gone", 6 * MIN), &[], &[]);
    assert_eq!(
        what(&d),
        (Verdict::Deleted, Reason::Orphaned, Some(Step::DeleteVolume))
    );
    let note = d.note();
    for part in ["volume", "v1", "np-gone-root", "6m0s", "detached"] {
        assert!(note.contains(part), "{part} in {note}");
    }
}

#[test]
fn a_volume_still_attached_is_kept() {
    let mut attached = volume("v1", "np-gone", 60 * MIN);
    attached.status = VolumeStatus::InUse;
    attached.references = vec![Reference {
        id: "ref".into(),
        product_resource_type: "instance_server".into(),
        product_resource_id: "i9".into(),
        status: "attached".into(),
    }];
    let d = one_volume(attached, &[], &[]);
    assert_eq!(what(&d), (Verdict::Spared, Reason::Attached, None));
    assert!(d.detail.contains("i9"), "{}", d.detail);
    // Available but still referenced (detaching): kept too.
    let mut detaching = volume("v1", "np-gone", 60 * MIN);
    detaching.references = vec![Reference {
        id: "ref".into(),
        product_resource_type: "instance_server".into(),
        product_resource_id: "i9".into(),
        status: "detaching".into(),
    }];
    assert_eq!(
        what(&one_volume(detaching, &[], &[])),
        (Verdict::Spared, Reason::Attached, None)
    );
    // Detached, but a listed VM still names it.
    let server = vm("i1", "np-gone", "stopping", 60 * MIN);
    let d = one_volume(volume("i1-root", "np-gone", 60 * MIN), &[server], &[]);
    assert_eq!(what(&d), (Verdict::Spared, Reason::Attached, None));
    let mut deleting = volume("v1", "np-gone", 60 * MIN);
    deleting.status = VolumeStatus::Deleting;
    assert_eq!(
        what(&one_volume(deleting, &[], &[])),
        (Verdict::Spared, Reason::Deleting, None)
    );
}

#[test]
fn a_volume_whose_nodeclaim_exists_or_young_or_foreign_is_kept() {
    let d = one_volume(
        volume("v1", "np-a", 60 * MIN),
        &[],
        &[nodeclaim("np-a", None)],
    );
    assert_eq!(what(&d), (Verdict::Spared, Reason::Claimed, None));
    let d = one_volume(volume("v1", "np-gone", 4 * MIN), &[], &[]);
    assert_eq!(what(&d), (Verdict::Spared, Reason::WithinGrace, None));
    // Created long ago but detached a moment ago: young.
    let mut just_detached = volume("v1", "np-gone", 60 * MIN);
    just_detached.last_detached_at = Some(ago(MIN));
    let d = one_volume(just_detached, &[], &[]);
    assert_eq!(what(&d), (Verdict::Spared, Reason::WithinGrace, None));
    assert_eq!(d.age, Some(MIN));
    let mut foreign = volume("v1", "np-gone", 60 * MIN);
    foreign.tags[0] = "karpenter.scaleway.com/cluster=staging".into();
    assert_eq!(
        what(&one_volume(foreign, &[], &[])),
        (Verdict::Refused, Reason::OwnershipUnproven, None)
    );
    let mut other_project = volume("v1", "np-gone", 60 * MIN);
    other_project.project_id = "proj-2".into();
    assert_eq!(
        what(&one_volume(other_project, &[], &[])),
        (Verdict::Refused, Reason::OwnershipUnproven, None)
    );
}
