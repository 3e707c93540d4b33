//! A sweeper pass over VMs and volumes against the fake Instance and Block
//! APIs: what it terminates, deletes, spares and never sees, the leftovers
//! it deletes once a VM is gone, dry-run, and no decision without a complete
//! listing.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::*;
use crate::gc::tests::{FakeClaims, FakeInFlight, RecordedEvents};
use crate::gc::{Pass, Reason};
use crate::provider::KubeError;
use crate::scaleway::block::Reference;
use crate::scaleway::fake::FakeElasticMetal;
use crate::scaleway::instance::fake::{FakeInstance, Op};

const ZONE: &str = "fr-par-2";
const MIN: Duration = Duration::from_secs(60);

fn ago(age: Duration) -> String {
    (chrono::Utc::now() - chrono::Duration::from_std(age).unwrap())
        .to_rfc3339_opts(chrono::SecondsFormat::Micros, false)
}

fn tags(cluster: &str, claim: &str) -> Vec<String> {
    vec![
        format!("karpenter.scaleway.com/cluster={cluster}"),
        format!("karpenter.sh/nodeclaim={claim}"),
        "karpenter.scaleway.com/nodeclass=vm".into(),
    ]
}

fn volume(
    id: &str,
    cluster: &str,
    claim: &str,
    attached_to: Option<&str>,
    age: Duration,
) -> Volume {
    let mut v: Volume = serde_json::from_value(json!({
        "id": id, "name": format!("{claim}-root"), "type": "sbs_5k", "size": 20000000000u64,
        "project_id": "proj-1", "status": "available", "references": [],
        "tags": tags(cluster, claim), "zone": ZONE, "created_at": ago(age)
    }))
    .unwrap();
    if let Some(server) = attached_to {
        v.status = crate::scaleway::block::VolumeStatus::InUse;
        v.references = vec![Reference {
            id: format!("ref-{id}"),
            product_resource_type: "instance_server".into(),
            product_resource_id: server.into(),
            status: "attached".into(),
        }];
    }
    v
}

/// A VM of `cluster` for NodeClaim `claim` with its tagged SBS root
/// `<id>-root` attached.
fn add_vm(fake: &FakeInstance, id: &str, cluster: &str, claim: &str, state: &str, age: Duration) {
    let server: Server = serde_json::from_value(json!({
        "id": id, "name": claim, "commercial_type": "POP2-2C-8G", "state": state,
        "allowed_actions": if state == "running" { json!(["poweroff", "terminate"]) } else { json!(["poweron"]) },
        "zone": ZONE, "project": "proj-1", "tags": tags(cluster, claim),
        "creation_date": ago(age),
        "volumes": {"0": {"id": format!("{id}-root"), "volume_type": "sbs_volume", "zone": ZONE}}
    }))
    .unwrap();
    fake.insert_server(server);
    fake.insert_volume(volume(&format!("{id}-root"), cluster, claim, Some(id), age));
}

struct Setup {
    vms: Arc<FakeInstance>,
    claims: Arc<FakeClaims>,
    events: Arc<RecordedEvents>,
    sweeper: Sweeper,
}

/// Cluster `prod` with: `orphan` (running, 10 min, no NodeClaim, a
/// flexible IP), `claimed` (NodeClaim np-a), `young` (1 min), a left-over
/// volume `left` (detached, 1 h), and cluster `staging`'s VM and volume.
fn setup(dry_run: bool) -> Setup {
    let vms = Arc::new(FakeInstance::new());
    add_vm(&vms, "orphan", "prod", "np-gone", "running", 10 * MIN);
    add_vm(&vms, "claimed", "prod", "np-a", "running", 60 * MIN);
    add_vm(&vms, "young", "prod", "np-new", "running", MIN);
    add_vm(&vms, "foreign", "staging", "np-z", "running", 60 * MIN);
    vms.insert_volume(volume("left", "prod", "np-old", None, 60 * MIN));
    vms.insert_volume(volume("foreign-left", "staging", "np-old", None, 60 * MIN));
    vms.attach_flexible_ip(ZONE, "orphan");
    let claims = Arc::new(FakeClaims::default());
    claims
        .claims
        .lock()
        .unwrap()
        .push(json!({"metadata": {"name": "np-a"}}));
    let events = Arc::new(RecordedEvents::default());
    let sweeper = Sweeper {
        api: Arc::new(FakeElasticMetal::new()),
        claims: claims.clone(),
        in_flight: Arc::new(FakeInFlight::default()),
        release: None,
        events: events.clone(),
        policy: SweepPolicy {
            cluster_name: "prod".into(),
            project_id: "proj-1".into(),
            grace: Duration::from_secs(3 * 3600),
            dry_run,
        },
        zones: vec![ZONE.into(), "nl-ams-1".into()],
        instance: Some(vms.clone()),
        instance_zones: vec![ZONE.into(), "nl-ams-1".into()],
        block: Some(vms.clone()),
        instance_grace: 5 * MIN,
        teardowns: Teardowns::default(),
    };
    Setup {
        vms,
        claims,
        events,
        sweeper,
    }
}

fn summary(pass: &Pass) -> Vec<(String, &'static str, &'static str)> {
    let mut out: Vec<_> = pass
        .instances
        .iter()
        .map(|d| (d.id().to_string(), d.verdict.as_str(), d.reason.as_str()))
        .collect();
    out.sort();
    out
}

/// Calls that change something, as (op, id).
fn mutations(fake: &FakeInstance) -> Vec<(Op, String)> {
    fake.calls()
        .into_iter()
        .filter(|c| {
            matches!(
                c.op,
                Op::Action | Op::DeleteServer | Op::DeleteVolume | Op::DeleteIp | Op::UpdateServer
            )
        })
        .map(|c| (c.op, c.id.unwrap_or_default()))
        .collect()
}

fn volume_ids(fake: &FakeInstance) -> Vec<String> {
    fake.volumes().into_iter().map(|v| v.id).collect()
}

#[tokio::test]
async fn an_orphan_vm_is_terminated_then_its_volume_and_ip_deleted_once_gone() {
    let s = setup(false);
    let pass = s.sweeper.pass().await.unwrap();
    assert_eq!(pass.instance_error, None);
    assert_eq!(
        summary(&pass),
        vec![
            ("claimed".into(), "spared", "claimed"),
            ("claimed-root".into(), "spared", "attached"),
            ("left".into(), "deleted", "orphaned"),
            ("orphan".into(), "deleted", "orphaned"),
            ("orphan-root".into(), "spared", "attached"),
            ("young".into(), "spared", "within_grace"),
            ("young-root".into(), "spared", "attached"),
        ]
    );
    // Terminated (it was running); the left-over volume deleted; the other
    // cluster's VM and volume never even listed.
    let orphan = s.vms.server("orphan").unwrap();
    assert_eq!(orphan.state_detail, "terminating");
    let ip = orphan.flexible_ip_ids();
    assert_eq!(ip.len(), 1);
    assert_eq!(
        mutations(&s.vms),
        vec![
            (Op::Action, "orphan".to_string()),
            (Op::DeleteVolume, "left".to_string())
        ]
    );
    assert_eq!(s.sweeper.teardowns.pending(), ["orphan"]);
    let mut events: Vec<_> = s
        .events
        .0
        .lock()
        .unwrap()
        .iter()
        .map(|(id, reason, _)| (id.clone(), *reason))
        .collect();
    events.sort();
    assert!(events.contains(&("orphan".into(), "OrphanDeleted")));
    assert!(events.contains(&("left".into(), "OrphanDeleted")));
    assert!(!events.iter().any(|(id, _)| id == "claimed"), "{events:?}");

    // Still terminating at the next pass: nothing more happens.
    s.sweeper.pass().await.unwrap();
    assert_eq!(mutations(&s.vms).len(), 2);
    assert!(volume_ids(&s.vms).contains(&"orphan-root".to_string()));

    // Gone: its SBS root (detached a moment ago, so young to the volume
    // rule) and its flexible IP are deleted by the teardown.
    s.vms.finish_actions();
    assert!(s.vms.server("orphan").is_none());
    let pass = s.sweeper.pass().await.unwrap();
    let root = pass
        .instances
        .iter()
        .find(|d| d.id() == "orphan-root")
        .unwrap();
    assert_eq!(root.reason, Reason::WithinGrace);
    let mut left = volume_ids(&s.vms);
    left.sort();
    assert_eq!(
        left,
        ["claimed-root", "foreign-left", "foreign-root", "young-root"]
    );
    assert!(s.vms.flexible_ips().is_empty());
    assert!(s.sweeper.teardowns.pending().is_empty());
    assert!(s.vms.server("foreign").is_some());
    assert!(s.vms.server("claimed").is_some());
}

/// An orphan VM's kubelet registered a Node under its NodeClaim's name that
/// core never registered: the sweeper deletes it once the VM is gone (not
/// while it runs, when the kubelet would register it again), and again next
/// pass if that fails.
#[tokio::test]
async fn an_orphan_vms_node_is_deleted_once_the_vm_is_gone() {
    let mut s = setup(false);
    let releases = Arc::new(crate::gc::tests::RecordedReleases::default());
    s.sweeper.release = Some(releases.clone());
    s.sweeper.pass().await.unwrap();
    assert!(releases.0.lock().unwrap().is_empty(), "the VM still runs");
    s.vms.finish_actions();
    s.sweeper.pass().await.unwrap();
    assert_eq!(
        *releases.0.lock().unwrap(),
        ["node np-gone scaleway://instance/fr-par-2/orphan"]
    );
    assert!(s.sweeper.teardowns.pending().is_empty());
    s.sweeper.pass().await.unwrap();
    assert_eq!(releases.0.lock().unwrap().len(), 1, "done once");
}

#[tokio::test]
async fn a_stopped_orphan_is_deleted_with_its_volume_in_the_same_pass() {
    let s = setup(false);
    add_vm(&s.vms, "stopped", "prod", "np-stopped", "stopped", 10 * MIN);
    add_vm(
        &s.vms,
        "starting",
        "prod",
        "np-starting",
        "starting",
        10 * MIN,
    );
    let pass = s.sweeper.pass().await.unwrap();
    let step = |id: &str| {
        pass.instances
            .iter()
            .find(|d| d.id() == id)
            .map(|d| (d.reason, d.step))
            .unwrap()
    };
    assert_eq!(
        step("stopped"),
        (Reason::Orphaned, Some(Step::DeleteServer))
    );
    assert_eq!(step("starting"), (Reason::Transitioning, None));
    assert!(s.vms.server("stopped").is_none());
    assert!(!volume_ids(&s.vms).contains(&"stopped-root".to_string()));
    assert!(s.vms.server("starting").is_some());
    assert_eq!(s.sweeper.teardowns.pending(), ["orphan"]);
}

#[tokio::test]
async fn dry_run_deletes_nothing() {
    let s = setup(true);
    let pass = s.sweeper.pass().await.unwrap();
    assert!(
        pass.instances
            .iter()
            .any(|d| d.id() == "orphan" && d.verdict == Verdict::WouldDelete)
    );
    assert!(
        pass.instances
            .iter()
            .any(|d| d.id() == "left" && d.verdict == Verdict::WouldDelete)
    );
    assert_eq!(mutations(&s.vms), vec![]);
    assert!(s.sweeper.teardowns.pending().is_empty());
    assert!(
        s.events
            .0
            .lock()
            .unwrap()
            .iter()
            .any(|(id, reason, _)| id == "orphan" && *reason == "OrphanWouldDelete")
    );
}

#[tokio::test]
async fn a_listing_failure_decides_nothing_for_instances() {
    let s = setup(false);
    // One zone of two fails for the VMs, then for the volumes.
    s.vms.fail_next(Op::ListServers, ApiError::Throttled);
    let pass = s.sweeper.pass().await.unwrap();
    assert!(matches!(
        pass.instance_error,
        Some(SweepError::Instances { .. })
    ));
    assert!(pass.instances.is_empty());
    s.vms
        .fail_next(Op::ListVolumes, ApiError::Unavailable("503".into()));
    let pass = s.sweeper.pass().await.unwrap();
    assert!(matches!(
        pass.instance_error,
        Some(SweepError::Volumes { .. })
    ));
    assert!(pass.instances.is_empty());
    // No NodeClaims, no decision at all.
    *s.claims.fail_next.lock().unwrap() = Some(KubeError::Unavailable("503".into()));
    assert!(matches!(
        s.sweeper.pass().await,
        Err(SweepError::NodeClaims(_))
    ));
    assert_eq!(mutations(&s.vms), vec![]);
    assert!(s.events.0.lock().unwrap().is_empty());
    // The next complete pass acts.
    let pass = s.sweeper.pass().await.unwrap();
    assert_eq!(pass.instance_error, None);
    assert_eq!(mutations(&s.vms).len(), 2);
}

#[tokio::test]
async fn a_failed_step_or_leftover_deletion_is_retried_next_pass() {
    let s = setup(false);
    s.vms
        .fail_next(Op::Action, ApiError::Unavailable("503".into()));
    let pass = s.sweeper.pass().await.unwrap();
    assert!(!pass.instances.iter().any(|d| d.id() == "orphan"));
    assert!(s.sweeper.teardowns.pending().is_empty());
    s.vms.set_auto_finish(true);
    // Terminated and gone at once; its volume refuses once.
    s.vms.fail_next(
        Op::DeleteVolume,
        ApiError::TransientState("detaching".into()),
    );
    s.sweeper.pass().await.unwrap();
    assert!(s.vms.server("orphan").is_none());
    assert!(s.vms.flexible_ips().is_empty(), "the IP went");
    assert!(volume_ids(&s.vms).contains(&"orphan-root".to_string()));
    assert_eq!(s.sweeper.teardowns.pending(), ["orphan"]);
    s.sweeper.pass().await.unwrap();
    assert!(!volume_ids(&s.vms).contains(&"orphan-root".to_string()));
    assert!(s.sweeper.teardowns.pending().is_empty());
}

#[tokio::test]
async fn without_instance_ports_no_instance_call_is_made() {
    let mut s = setup(false);
    s.sweeper.instance = None;
    let pass = s.sweeper.pass().await.unwrap();
    assert!(pass.instances.is_empty());
    assert_eq!(pass.instance_error, None);
    assert!(s.vms.calls().is_empty());
}
