//! The reboot deadline: which reboots are watched, and what a pass does
//! with one whose node never came back.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::flow_tests::{OP, Rig, em_node, rig};
use super::watch::{came_back, watched};
use super::*;
use crate::install::NodePortError;
use crate::metrics::reboot_metrics;

fn settings() -> RebootSettings {
    RebootSettings {
        baremetal_deadline: Duration::from_secs(600),
        instance_deadline: Duration::from_secs(300),
        call_timeout: Duration::from_secs(60),
    }
}

fn at(s: &str) -> DateTime<Utc> {
    s.parse().unwrap()
}

fn record(state: RebootState, kind: MachineKind) -> RebootRecord {
    RebootRecord {
        operation: OP.into(),
        state,
        kind,
        zone: "fr-par-2".into(),
        server_id: "srv-1".into(),
        server_stamp: "s".into(),
        pre_boot_id: Some("boot-a".into()),
        issued_at: at("2026-11-22T10:30:00Z"),
        accepted_at: Some(at("2026-11-22T10:30:01Z")),
    }
}

fn claim(record: &RebootRecord, pre_boot: Option<&str>) -> Value {
    let mut annotations = json!({ REBOOT_ANNOTATION: record.to_json() });
    if let Some(p) = pre_boot {
        annotations[PRE_BOOT_ID_ANNOTATION] = json!(p);
    }
    json!({
        "metadata": {"name": "default-a", "annotations": annotations},
        "status": {"nodeName": "node-a"}
    })
}

#[test]
fn only_accepted_reboots_of_cores_current_episode_are_watched() {
    let s = settings();
    let accepted = record(RebootState::Accepted, MachineKind::Baremetal);
    let w = watched(
        &claim(&accepted, Some("boot-a")),
        at("2026-11-22T10:39:59Z"),
        &s,
    )
    .unwrap();
    assert_eq!(w.node, "node-a");
    assert_eq!(w.pre_boot_id, "boot-a");
    assert!(!w.due);
    let w = watched(
        &claim(&accepted, Some("boot-a")),
        at("2026-11-22T10:40:00Z"),
        &s,
    )
    .unwrap();
    assert!(w.due, "the deadline counts from the issuing record");
    assert_eq!(w.deadline, Duration::from_secs(600));

    let late = at("2026-11-22T11:00:00Z");
    let issuing = record(RebootState::Issuing, MachineKind::Baremetal);
    assert_eq!(watched(&claim(&issuing, Some("boot-a")), late, &s), None);
    // Core ended the episode (the annotation is gone) or began another.
    assert_eq!(watched(&claim(&accepted, None), late, &s), None);
    assert_eq!(watched(&claim(&accepted, Some("boot-b")), late, &s), None);
    let mut deleting = claim(&accepted, Some("boot-a"));
    deleting["metadata"]["deletionTimestamp"] = json!("2026-11-22T10:50:00Z");
    assert_eq!(watched(&deleting, late, &s), None);
    assert_eq!(watched(&json!({"metadata": {"name": "x"}}), late, &s), None);

    // A VM's deadline is its own.
    let vm = record(RebootState::Accepted, MachineKind::Instance);
    let mut c = claim(&vm, Some("boot-a"));
    c["status"] = json!({});
    let w = watched(&c, at("2026-11-22T10:35:00Z"), &s).unwrap();
    assert!(w.due);
    assert_eq!(w.node, "default-a", "no nodeName: the NodeClaim's name");
}

#[test]
fn a_node_came_back_when_its_boot_id_changed() {
    assert!(came_back("boot-a", Some("boot-b")));
    assert!(!came_back("boot-a", Some("boot-a")));
    assert!(!came_back("boot-a", Some("")));
    assert!(!came_back("boot-a", None));
}

/// A rig with an Elastic Metal reboot accepted now, its Node on `boot-a`.
async fn accepted(r: &Rig) -> RebootWatch {
    let claim = em_node(r);
    r.provider.reboot(&claim, OP).await.unwrap();
    r.nodes()
        .boots
        .lock()
        .unwrap()
        .insert("default-a".into(), "boot-a".into());
    RebootWatch::new(r.provider.clone(), r.nodes().clone())
}

#[tokio::test]
async fn a_reboot_that_never_returns_deletes_its_nodeclaim_after_the_deadline() {
    let r = rig();
    let watch = accepted(&r).await;
    let before = reboot_metrics().counted("baremetal", "not_returned");
    assert_eq!(
        watch.pass().await.unwrap(),
        [("default-a".to_string(), WatchOutcome::Waiting)]
    );
    r.advance(599);
    assert_eq!(watch.pass().await.unwrap()[0].1, WatchOutcome::Waiting);
    r.advance(1);
    assert_eq!(watch.pass().await.unwrap()[0].1, WatchOutcome::NotReturned);
    assert_eq!(
        *r.nodes().deleted.lock().unwrap(),
        [("default-a".to_string(), "reboot did not return".to_string())]
    );
    let event = r.nodes().last_event().unwrap();
    assert_eq!(event.reason, "RebootNotReturned");
    assert!(event.warning);
    assert!(
        event.message.contains("still reports boot id boot-a"),
        "{}",
        event.message
    );
    assert!(event.message.contains("600s deadline"), "{}", event.message);
    assert!(reboot_metrics().counted("baremetal", "not_returned") > before);
}

#[tokio::test]
async fn a_node_that_came_back_or_an_ended_episode_is_left_to_core() {
    let r = rig();
    let watch = accepted(&r).await;
    r.advance(900);
    r.nodes()
        .boots
        .lock()
        .unwrap()
        .insert("default-a".into(), "boot-b".into());
    assert_eq!(watch.pass().await.unwrap()[0].1, WatchOutcome::Returned);
    // Core ends the episode: nothing left to watch.
    r.claims()
        .set_annotation("default-a", PRE_BOOT_ID_ANNOTATION, None);
    assert!(watch.pass().await.unwrap().is_empty());
    assert!(r.nodes().deleted.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_node_gone_counts_as_not_returned_and_failures_are_retried() {
    let r = rig();
    let watch = accepted(&r).await;
    r.advance(601);
    r.nodes().boots.lock().unwrap().clear();
    *r.nodes().fail_boot.lock().unwrap() = Some(KubeError::Unavailable("503".into()));
    assert!(matches!(
        watch.pass().await.unwrap()[0].1,
        WatchOutcome::Retry(_)
    ));
    *r.nodes().fail_delete.lock().unwrap() = Some(NodePortError::Unavailable("503".into()));
    assert!(matches!(
        watch.pass().await.unwrap()[0].1,
        WatchOutcome::Retry(_)
    ));
    assert_eq!(watch.pass().await.unwrap()[0].1, WatchOutcome::NotReturned);
    assert!(
        r.nodes()
            .last_event()
            .unwrap()
            .message
            .contains("Node default-a is gone")
    );
}

#[tokio::test]
async fn a_vm_gets_the_instance_deadline() {
    let r = rig();
    r.vms.insert_server(
        serde_json::from_value(json!({
            "id": "vm-1", "name": "burst-a", "commercial_type": "POP2-2C-8G",
            "state": "running", "zone": "fr-par-2",
            "tags": ["karpenter.scaleway.com/cluster=test", "karpenter.sh/nodeclaim=burst-a"],
            "modification_date": "2026-11-22T10:00:00.000000+00:00"
        }))
        .unwrap(),
    );
    let claim = json!({
        "metadata": {"name": "burst-a", "annotations": {PRE_BOOT_ID_ANNOTATION: "boot-v"}},
        "status": {
            "providerID": "scaleway://instance/fr-par-2/vm-1",
            "conditions": [{"type": "Initialized", "status": "True"}]
        }
    });
    r.claims().insert(claim.clone());
    r.provider.reboot(&claim, OP).await.unwrap();
    r.nodes()
        .boots
        .lock()
        .unwrap()
        .insert("burst-a".into(), "boot-v".into());
    let watch = RebootWatch::new(r.provider.clone(), r.nodes().clone());
    r.advance(299);
    assert_eq!(watch.pass().await.unwrap()[0].1, WatchOutcome::Waiting);
    r.advance(1);
    assert_eq!(watch.pass().await.unwrap()[0].1, WatchOutcome::NotReturned);
    assert!(
        r.nodes()
            .last_event()
            .unwrap()
            .message
            .starts_with("VM vm-1")
    );
}

#[tokio::test(start_paused = true)]
async fn the_leaders_loop_ends_a_stuck_reboot_on_time() {
    let r = rig();
    // The cluster's clock follows the (paused) runtime clock.
    let base = r.now();
    let start = tokio::time::Instant::now();
    let clock = r.clock.clone();
    let ticker = tokio::spawn(async move {
        loop {
            tokio::time::sleep(Duration::from_secs(1)).await;
            *clock.lock().unwrap() = base + chrono::Duration::from_std(start.elapsed()).unwrap();
        }
    });
    let watch = accepted(&r).await;
    let leader = Arc::new(AtomicBool::new(false));
    let is_leader: Arc<dyn Fn() -> bool + Send + Sync> = {
        let leader = leader.clone();
        Arc::new(move || leader.load(Ordering::SeqCst))
    };
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let looped = tokio::spawn(run_reboot_watch(
        watch,
        Duration::from_secs(15),
        is_leader,
        async {
            let _ = stopped.await;
        },
    ));
    tokio::time::sleep(Duration::from_secs(700)).await;
    assert!(
        r.nodes().deleted.lock().unwrap().is_empty(),
        "a follower does nothing"
    );
    leader.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(20)).await;
    assert_eq!(r.nodes().deleted.lock().unwrap().len(), 1);
    stop.send(()).unwrap();
    looped.await.unwrap();
    ticker.abort();
}
