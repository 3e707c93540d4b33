//! The sweeper's driver against the Elastic Metal fake: what a pass deletes,
//! spares and refuses, and that a failed listing decides nothing.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};

use super::*;
use crate::provider::KubeError;
use crate::scaleway::fake::{FakeElasticMetal, Op};

const ZONE: &str = "fr-par-2";
const HOUR: Duration = Duration::from_secs(3600);

#[derive(Default)]
pub(super) struct FakeClaims {
    pub(super) claims: Mutex<Vec<Value>>,
    pub(super) fail_next: Mutex<Option<KubeError>>,
    /// What a read from the API server finds, when it differs from the
    /// list (a list that lags); `None`: the list.
    pub(super) live: Mutex<Option<Vec<Value>>>,
    /// Every read of one NodeClaim fails.
    pub(super) fail_get: AtomicBool,
}

#[async_trait]
impl NodeClaimSource for FakeClaims {
    async fn list(&self) -> Result<Vec<Value>, KubeError> {
        if let Some(e) = self.fail_next.lock().unwrap().take() {
            return Err(e);
        }
        Ok(self.claims.lock().unwrap().clone())
    }

    async fn get(&self, name: &str) -> Result<Option<Value>, KubeError> {
        if self.fail_get.load(Ordering::SeqCst) {
            return Err(KubeError::Unavailable("503 etcd leader changed".into()));
        }
        let live = self.live.lock().unwrap().clone();
        let all = live.unwrap_or_else(|| self.claims.lock().unwrap().clone());
        Ok(all
            .into_iter()
            .find(|c| c.pointer("/metadata/name").and_then(Value::as_str) == Some(name)))
    }

    async fn annotate(
        &self,
        name: &str,
        _: &str,
        _: &str,
        _: Option<&str>,
    ) -> Result<(), KubeError> {
        Err(KubeError::Refused(format!("read-only fake: {name}")))
    }
}

#[derive(Default)]
pub(super) struct FakeInFlight(pub(super) Mutex<Vec<String>>);

impl InFlight for FakeInFlight {
    fn in_flight(&self, server_id: &str) -> bool {
        self.0.lock().unwrap().iter().any(|s| s == server_id)
    }
}

/// (server, volume or VM id; Event reason; note).
#[derive(Default)]
pub(super) struct RecordedEvents(pub(super) Mutex<Vec<(String, &'static str, String)>>);

#[async_trait]
impl SweepEvents for RecordedEvents {
    async fn record(&self, d: &Decision) {
        self.0
            .lock()
            .unwrap()
            .push((d.server.id.clone(), d.verdict.event_reason(), d.note()));
    }

    async fn record_instance(&self, d: &InstanceDecision) {
        self.0
            .lock()
            .unwrap()
            .push((d.id().to_string(), d.verdict.event_reason(), d.note()));
    }
}

/// A server created `age` ago, tagged for cluster `prod` and NodeClaim `claim`.
fn server(id: &str, zone: &str, claim: &str, age: Duration) -> Server {
    let created = chrono::Utc::now() - chrono::Duration::from_std(age).unwrap();
    serde_json::from_value(json!({
        "id": id, "project_id": "proj-1", "name": claim, "status": "ready",
        "offer_id": "o", "offer_name": "EM-A115X-SSD", "zone": zone,
        "created_at": created.to_rfc3339(),
        "tags": [
            "karpenter.scaleway.com/cluster=prod",
            format!("karpenter.sh/nodeclaim={claim}"),
            "karpenter.scaleway.com/nodeclass=default",
        ]
    }))
    .unwrap()
}

struct Setup {
    api: Arc<FakeElasticMetal>,
    claims: Arc<FakeClaims>,
    in_flight: Arc<FakeInFlight>,
    events: Arc<RecordedEvents>,
    sweeper: Sweeper,
}

/// Cluster `prod` in fr-par-2 and nl-ams-1, with: `claimed` (NodeClaim np-a),
/// `orphan` (old, unclaimed), `young` (unclaimed, recent), `installing` (old,
/// unclaimed, in flight here), and in nl-ams-1 `untagged` (our cluster tag,
/// no nodeclaim tag) plus `foreign` (another cluster, never listed).
fn setup(dry_run: bool) -> Setup {
    let api = Arc::new(FakeElasticMetal::new());
    api.insert_server(server("claimed", ZONE, "np-a", 5 * HOUR));
    api.insert_server(server("orphan", ZONE, "np-gone", 5 * HOUR));
    api.insert_server(server("young", ZONE, "np-new", Duration::from_secs(60)));
    api.insert_server(server("installing", ZONE, "np-slow", 5 * HOUR));
    let mut untagged = server("untagged", "nl-ams-1", "x", 5 * HOUR);
    untagged
        .tags
        .retain(|t| !t.starts_with("karpenter.sh/nodeclaim="));
    api.insert_server(untagged);
    let mut foreign = server("foreign", "nl-ams-1", "np-z", 5 * HOUR);
    foreign.tags[0] = "karpenter.scaleway.com/cluster=staging".into();
    api.insert_server(foreign);

    let claims = Arc::new(FakeClaims::default());
    claims.claims.lock().unwrap().push(json!({
        "metadata": {"name": "np-a"},
        "status": {"providerID": format!("scaleway://baremetal/{ZONE}/claimed")}
    }));
    let in_flight = Arc::new(FakeInFlight::default());
    in_flight.0.lock().unwrap().push("installing".into());
    let events = Arc::new(RecordedEvents::default());
    let sweeper = Sweeper {
        api: api.clone(),
        claims: claims.clone(),
        in_flight: in_flight.clone(),
        release: None,
        events: events.clone(),
        policy: SweepPolicy {
            cluster_name: "prod".into(),
            project_id: "proj-1".into(),
            grace: 2 * HOUR,
            dry_run,
        },
        zones: vec![ZONE.into(), "nl-ams-1".into()],
        instance: None,
        instance_zones: Vec::new(),
        block: None,
        instance_grace: Duration::from_secs(300),
        teardowns: Teardowns::default(),
    };
    Setup {
        api,
        claims,
        in_flight,
        events,
        sweeper,
    }
}

fn deleted(api: &FakeElasticMetal) -> Vec<String> {
    api.calls()
        .into_iter()
        .filter(|c| c.op == Op::DeleteServer)
        .filter_map(|c| c.server_id)
        .collect()
}

fn summary(decisions: &[Decision]) -> Vec<(String, &'static str, &'static str)> {
    let mut out: Vec<_> = decisions
        .iter()
        .map(|d| (d.server.id.clone(), d.verdict.as_str(), d.reason.as_str()))
        .collect();
    out.sort();
    out
}

#[tokio::test]
async fn a_pass_deletes_only_the_orphan_and_reports_every_decision() {
    let s = setup(false);
    let decisions = s.sweeper.pass().await.unwrap().servers;
    assert_eq!(
        summary(&decisions),
        vec![
            ("claimed".into(), "spared", "claimed"),
            ("installing".into(), "spared", "in_flight"),
            // Its NodeClaim np-gone is confirmed gone; without a release
            // port the server is deleted outright.
            ("orphan".into(), "deleted", "claim_deleted"),
            ("untagged".into(), "refused", "ownership_unproven"),
            ("young".into(), "spared", "within_grace"),
        ]
    );
    assert_eq!(deleted(&s.api), vec!["orphan".to_string()]);
    let mut events: Vec<_> = s
        .events
        .0
        .lock()
        .unwrap()
        .iter()
        .map(|(id, reason, _)| (id.clone(), *reason))
        .collect();
    events.sort();
    // No Event for the claimed server.
    assert_eq!(
        events,
        vec![
            ("installing".into(), "OrphanSpared"),
            ("orphan".into(), "OrphanDeleted"),
            ("untagged".into(), "OrphanRefused"),
            ("young".into(), "OrphanSpared"),
        ]
    );
    // Servers are listed by our cluster tag in our project: the other
    // cluster's server is never even seen.
    assert!(!decisions.iter().any(|d| d.server.id == "foreign"));
}

#[tokio::test]
async fn dry_run_deletes_nothing() {
    let s = setup(true);
    let decisions = s.sweeper.pass().await.unwrap().servers;
    let orphan = decisions.iter().find(|d| d.server.id == "orphan").unwrap();
    assert_eq!(orphan.verdict, Verdict::WouldDelete);
    assert!(deleted(&s.api).is_empty());
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
async fn no_decision_without_a_complete_listing() {
    let s = setup(false);
    // One zone of two fails.
    s.api.fail_next(Op::ListServers, ApiError::Throttled);
    assert!(matches!(
        s.sweeper.pass().await,
        Err(SweepError::Servers { .. })
    ));
    *s.claims.fail_next.lock().unwrap() = Some(KubeError::Unavailable("503".into()));
    assert!(matches!(
        s.sweeper.pass().await,
        Err(SweepError::NodeClaims(_))
    ));
    assert!(deleted(&s.api).is_empty());
    assert!(s.events.0.lock().unwrap().is_empty());
    // The next complete pass acts.
    s.sweeper.pass().await.unwrap();
    assert_eq!(deleted(&s.api), vec!["orphan".to_string()]);
}

#[tokio::test]
async fn a_failed_deletion_is_retried_next_pass() {
    let s = setup(false);
    s.api
        .fail_next(Op::DeleteServer, ApiError::Unavailable("503".into()));
    let decisions = s.sweeper.pass().await.unwrap().servers;
    assert!(!decisions.iter().any(|d| d.server.id == "orphan"));
    assert!(
        !s.events
            .0
            .lock()
            .unwrap()
            .iter()
            .any(|(id, _, _)| id == "orphan")
    );
    let decisions = s.sweeper.pass().await.unwrap().servers;
    assert!(
        decisions
            .iter()
            .any(|d| d.server.id == "orphan" && d.verdict == Verdict::Deleted)
    );
    assert_eq!(deleted(&s.api), vec!["orphan".to_string(); 2]);
}

#[tokio::test]
async fn an_install_finished_here_no_longer_protects_its_server() {
    let s = setup(false);
    s.in_flight.0.lock().unwrap().clear();
    s.sweeper.pass().await.unwrap();
    let mut gone = deleted(&s.api);
    gone.sort();
    assert_eq!(gone, vec!["installing".to_string(), "orphan".to_string()]);
}

#[test]
fn the_default_grace_outlasts_the_longest_install() {
    let longest = crate::provider::longest_install(&crate::install::InstallSettings::default());
    // 172 min with the default deadlines: the default grace (3 h) is longer.
    assert_eq!(longest, Duration::from_secs(172 * 60));
    assert_eq!(grace_warning(3 * HOUR, longest), None);
    let warning = grace_warning(2 * HOUR, longest).expect("a warning");
    assert!(warning.contains("2h0m"), "{warning}");
    assert!(warning.contains("2h52m"), "{warning}");
}

#[tokio::test(start_paused = true)]
async fn only_the_leader_sweeps_one_interval_after_taking_the_lead() {
    let s = setup(false);
    let api = s.api.clone();
    let leader = Arc::new(AtomicBool::new(false));
    let is_leader: Arc<dyn Fn() -> bool + Send + Sync> = {
        let leader = leader.clone();
        Arc::new(move || leader.load(Ordering::SeqCst))
    };
    let (stop_tx, mut stop_rx) = tokio::sync::watch::channel(false);
    let task = tokio::spawn(run_orphan_sweeper(
        s.sweeper,
        Duration::from_secs(60),
        is_leader,
        async move {
            let _ = stop_rx.wait_for(|s| *s).await;
        },
    ));
    tokio::time::sleep(Duration::from_secs(300)).await;
    assert_eq!(api.count(Op::ListServers), 0, "a follower never sweeps");
    leader.store(true, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(api.count(Op::ListServers), 0, "not before one interval");
    tokio::time::sleep(Duration::from_secs(40)).await;
    assert_eq!(api.count(Op::ListServers), 2, "one pass, two zones");
    leader.store(false, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_secs(300)).await;
    assert_eq!(api.count(Op::ListServers), 2);
    stop_tx.send(true).unwrap();
    task.await.unwrap();
}

/// The NodeClaims whose servers were released.
#[derive(Default)]
pub(crate) struct RecordedReleases(pub(crate) Mutex<Vec<String>>);

#[async_trait]
impl ClaimRelease for RecordedReleases {
    async fn release(&self, nodeclaim: &str) -> Result<(), String> {
        self.0.lock().unwrap().push(nodeclaim.to_string());
        Ok(())
    }

    async fn forget_node(&self, nodeclaim: &str, provider_id: &str) -> Result<(), String> {
        self.0
            .lock()
            .unwrap()
            .push(format!("node {nodeclaim} {provider_id}"));
        Ok(())
    }
}

/// Core deletes a NodeClaim whose Create answer was lost after the order
/// (it never learnt the providerID) without calling Delete: the sweeper
/// releases its server through the provider within minutes, not after the
/// grace of hours (the regression suite's Utilization spec found 18 such
/// servers left over).
#[tokio::test]
async fn the_server_of_a_nodeclaim_deleted_before_create_answered_is_released() {
    let mut s = setup(false);
    s.api
        .insert_server(server("lost", ZONE, "np-lost", Duration::from_secs(180)));
    let releases = Arc::new(RecordedReleases::default());
    s.sweeper.release = Some(releases.clone());
    let decisions = s.sweeper.pass().await.unwrap().servers;
    let lost: Vec<_> = summary(&decisions)
        .into_iter()
        .filter(|(id, _, _)| id == "lost" || id == "young")
        .collect();
    assert_eq!(
        lost,
        vec![
            ("lost".into(), "deleted", "claim_deleted"),
            // Younger than CLAIM_DELETED_GRACE: a Create may be ordering it
            // for a NodeClaim being deleted right now.
            ("young".into(), "spared", "within_grace"),
        ]
    );
    let mut released = releases.0.lock().unwrap().clone();
    released.sort();
    assert_eq!(released, vec!["np-gone".to_string(), "np-lost".to_string()]);
    // Released through the provider (which recycles an adopted standby),
    // not deleted by the sweeper itself.
    assert!(deleted(&s.api).is_empty(), "{:?}", deleted(&s.api));
}

/// Absent from the list is not enough: a read from the API server must
/// confirm it, and a failed read confirms nothing.
#[tokio::test]
async fn a_nodeclaim_missing_from_the_list_only_is_not_deleted() {
    for lagging in [true, false] {
        let mut s = setup(false);
        s.api
            .insert_server(server("lost", ZONE, "np-lost", Duration::from_secs(180)));
        let releases = Arc::new(RecordedReleases::default());
        s.sweeper.release = Some(releases.clone());
        if lagging {
            let mut live = s.claims.claims.lock().unwrap().clone();
            live.push(json!({"metadata": {"name": "np-lost"}}));
            *s.claims.live.lock().unwrap() = Some(live);
        } else {
            s.claims.fail_get.store(true, Ordering::SeqCst);
        }
        let decisions = s.sweeper.pass().await.unwrap().servers;
        let lost = summary(&decisions)
            .into_iter()
            .find(|(id, _, _)| id == "lost")
            .unwrap();
        assert_eq!(
            lost,
            ("lost".into(), "spared", "within_grace"),
            "lagging={lagging}"
        );
        assert!(
            !releases.0.lock().unwrap().contains(&"np-lost".to_string()),
            "lagging={lagging}"
        );
    }
}
