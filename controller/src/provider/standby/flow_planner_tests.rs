//! The demand planner in the standby pass (`demand.rs`), over the fixture's
//! fakes: a scripted load source and clock, a recording status sink.

use super::*;
use crate::nodeclass::{PlannerStatus, StandbyPlanner};
use crate::provider::standby::planner::{NodeView, Observed, PodView};
use crate::provider::standby::{Demand, LoadSource, PlannerPorts, PlannerStatusSink};

struct FakeLoad {
    /// What `observe` answers; `Err` = the API server cannot be read.
    now: Mutex<Result<Observed, String>>,
}

impl Default for FakeLoad {
    fn default() -> Self {
        FakeLoad {
            now: Mutex::new(Ok((Vec::new(), Vec::new()))),
        }
    }
}

#[async_trait]
impl LoadSource for FakeLoad {
    async fn observe(&self) -> Result<Observed, String> {
        self.now.lock().unwrap().clone()
    }
}

#[derive(Default)]
struct FakeStatus {
    written: Mutex<Vec<(String, Vec<PlannerStatus>)>>,
}

#[async_trait]
impl PlannerStatusSink for FakeStatus {
    async fn publish(&self, class: &str, pools: Vec<PlannerStatus>) -> Result<(), String> {
        self.written.lock().unwrap().push((class.into(), pools));
        Ok(())
    }
}

struct Planned {
    w: Warm,
    load: Arc<FakeLoad>,
    status: Arc<FakeStatus>,
    clock: Arc<Mutex<DateTime<Utc>>>,
}

impl Planned {
    fn at(&self, when: &str) {
        *self.clock.lock().unwrap() = t(when);
    }

    async fn pass_at(&self, when: &str) -> PassReport {
        self.at(when);
        self.w.provider.standby_pass(t(when)).await.unwrap()
    }

    fn last_status(&self) -> PlannerStatus {
        let written = self.status.written.lock().unwrap();
        let (class, pools) = written.last().expect("a status was written");
        assert_eq!(class, CLASS);
        pools[0].clone()
    }

    fn planner_events(&self) -> Vec<(String, String)> {
        self.w
            .events
            .events
            .lock()
            .unwrap()
            .iter()
            .filter(|e| e.2.starts_with("Planner"))
            .map(|e| (e.2.clone(), e.3.clone()))
            .collect()
    }
}

fn planner(dry_run: bool) -> StandbyPlanner {
    StandbyPlanner {
        node_pools: vec!["vms".into()],
        window: Some("1h".into()),
        at_least: None,
        hold: Some("30m".into()),
        ahead: None,
        max_servers: None,
        dry_run,
    }
}

fn planned(max: i32, dry_run: bool) -> Planned {
    let mut p = pool(OFFER, 0, max, None);
    p.planner = Some(planner(dry_run));
    let w = warm(vec![p]);
    let load = Arc::new(FakeLoad::default());
    let status = Arc::new(FakeStatus::default());
    let clock = Arc::new(Mutex::new(t("2026-11-24T08:00:00Z")));
    let c = clock.clone();
    let provider = Arc::into_inner(w.provider)
        .expect("not shared yet")
        .with_planner(PlannerPorts {
            load: load.clone(),
            status: status.clone(),
            demand: Arc::new(Demand::default()),
            clock: Arc::new(move || *c.lock().unwrap()),
        });
    Planned {
        w: Warm {
            provider: Arc::new(provider),
            ..w
        },
        load,
        status,
        clock,
    }
}

/// What one EM-A115X-SSD holds, from the fixture's catalog.
fn server_cpu(p: &Planned) -> u64 {
    let snap = p.w.f.catalog.snapshot();
    snap.for_class(ClassKind::ElasticMetal, Some(CLASS))
        .iter()
        .find(|t| t.name == OFFER)
        .unwrap()
        .allocatable()
        .cpu_millis
}

fn vm(name: &str) -> NodeView {
    NodeView {
        name: name.into(),
        node_pool: Some("vms".into()),
        instance_type: Some(OFFER.into()),
        zone: Some(ZONE.into()),
        capacity_type: Some("on-demand".into()),
        ..NodeView::default()
    }
}

fn metal(name: &str) -> NodeView {
    NodeView {
        name: name.into(),
        node_pool: Some("metal".into()),
        reservation: Some(rid()),
        instance_type: Some(OFFER.into()),
        zone: Some(ZONE.into()),
        capacity_type: Some("reserved".into()),
    }
}

fn work(node: &str, cpu: u64) -> PodView {
    PodView {
        node: node.into(),
        cpu_millis: cpu,
        memory_bytes: 1 << 30,
        daemon_set: false,
    }
}

fn daemon(node: &str) -> PodView {
    PodView {
        node: node.into(),
        cpu_millis: 100,
        memory_bytes: 1 << 28,
        daemon_set: true,
    }
}

fn set_load(p: &Planned, nodes: Vec<NodeView>, pods: Vec<PodView>) {
    *p.load.now.lock().unwrap() = Ok((nodes, pods));
}

/// Load on two VMs that needs exactly two servers once a node's DaemonSets
/// are set aside.
fn two_servers_on_vms(p: &Planned) {
    let per = server_cpu(p) - 100;
    set_load(
        p,
        vec![vm("vm-1"), vm("vm-2")],
        vec![
            work("vm-1", per),
            work("vm-2", per / 2),
            work("vm-2", per / 2),
            daemon("vm-1"),
            daemon("vm-2"),
        ],
    );
}

#[tokio::test]
async fn sustained_load_on_vms_stages_standby_servers_and_explains_why() {
    let p = planned(3, false);
    two_servers_on_vms(&p);
    // Watched for less than the window: nothing ordered, the target stays 0.
    let report = p.pass_at("2026-11-24T08:00:00Z").await;
    assert!(report.ordered.is_empty(), "{report:?}");
    let report = p.pass_at("2026-11-24T08:59:00Z").await;
    assert!(report.ordered.is_empty(), "{report:?}");
    let s = p.last_status();
    assert_eq!((s.target, s.needed, s.standby), (0, None, 0));
    assert!(s.reason.contains("not enough history"), "{}", s.reason);
    assert!(p.planner_events().is_empty());

    // The whole hour: two servers staged, ordered at once.
    let report = p.pass_at("2026-11-24T09:00:00Z").await;
    assert_eq!(report.ordered.len(), 2, "{report:?}");
    assert_eq!(p.w.f.api.count(Op::CreateServer), 2);
    let s = p.last_status();
    assert_eq!(
        (s.target, s.needed, s.adopted, s.standby),
        (2, Some(2), 0, 2)
    );
    assert_eq!(
        s.sustained_cpu,
        Some(format!("{}m", 2 * (server_cpu(&p) - 100)))
    );
    // Two VMs of 0.091 EUR/h now; two servers of 0.091 EUR/h planned.
    assert_eq!(
        (s.vm_euros_per_hour, s.metal_euros_per_hour),
        (0.182, 0.182)
    );
    let events = p.planner_events();
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0].0, "PlannerTargetRaised");
    for part in [
        "from 0 to 2 server(s)",
        "needs 2 server(s)",
        "NodePools vms cost 0.1820 EUR/h",
    ] {
        assert!(events[0].1.contains(part), "{part:?} in {}", events[0].1);
    }
    // The next pass orders nothing more, explains nothing again.
    for s in p.w.f.api.servers() {
        p.w.engine
            .phases
            .lock()
            .unwrap()
            .insert(s.id.clone(), Phase::Ordered);
    }
    let report = p.pass_at("2026-11-24T09:01:00Z").await;
    assert!(report.ordered.is_empty(), "{report:?}");
    assert_eq!(p.planner_events().len(), 1);
}

#[tokio::test]
async fn adopted_servers_count_toward_the_target_and_the_load_they_carry_stays() {
    let p = planned(3, false);
    two_servers_on_vms(&p);
    p.pass_at("2026-11-24T08:00:00Z").await;
    p.pass_at("2026-11-24T09:00:00Z").await;
    assert_eq!(p.w.f.api.count(Op::CreateServer), 2);
    // Karpenter moved the load: both servers are nodes of the reservation
    // now, the VMs are gone.
    let ids: Vec<String> = p.w.f.api.servers().iter().map(|s| s.id.clone()).collect();
    for (i, id) in ids.iter().enumerate() {
        let tags = vec![
            "karpenter.scaleway.com/cluster=test".to_string(),
            format!("karpenter.sh/nodeclaim=metal-{i}"),
            format!("karpenter.scaleway.com/nodeclass={CLASS}"),
            format!("{TAG_RESERVATION}={}", rid()),
        ];
        p.w.f.api.update_server_tags(ZONE, id, &tags).await.unwrap();
    }
    let per = server_cpu(&p) - 100;
    set_load(
        &p,
        vec![metal("metal-0"), metal("metal-1")],
        vec![
            work("metal-0", per),
            work("metal-1", per),
            daemon("metal-0"),
            daemon("metal-1"),
        ],
    );
    for when in ["2026-11-24T09:10:00Z", "2026-11-24T10:30:00Z"] {
        let report = p.pass_at(when).await;
        assert!(report.ordered.is_empty(), "{when}: {report:?}");
        assert!(report.released.is_empty(), "{when}: {report:?}");
        let s = p.last_status();
        assert_eq!(
            (s.target, s.adopted, s.standby, s.vm_euros_per_hour),
            (2, 2, 0, 0.0),
            "{when}"
        );
    }
    assert_eq!(p.w.f.api.count(Op::CreateServer), 2);
    assert_eq!(p.planner_events().len(), 1, "only the raise");
}

#[tokio::test]
async fn when_the_load_leaves_the_target_falls_after_the_hold_and_idle_servers_go() {
    let p = planned(3, false);
    two_servers_on_vms(&p);
    p.pass_at("2026-11-24T08:00:00Z").await;
    p.pass_at("2026-11-24T09:00:00Z").await;
    // Both standbys installed and idle.
    for s in p.w.f.api.servers() {
        p.w.f.api.insert_server(standby(
            &s.id,
            "2026-11-24T09:00:00Z",
            "hourly",
            &idle_since("2026-11-24T09:12:00Z"),
        ));
    }
    // The load goes.
    set_load(&p, vec![], vec![]);
    let report = p.pass_at("2026-11-24T09:20:00Z").await;
    assert!(report.released.is_empty(), "the hold: {report:?}");
    assert_eq!(p.last_status().target, 2);
    // 30 min after the load left (and the raise): lowered to 0.
    let report = p.pass_at("2026-11-24T09:50:00Z").await;
    let events = p.planner_events();
    assert_eq!(
        events.last().unwrap().0,
        "PlannerTargetLowered",
        "{events:?}"
    );
    assert!(
        events.last().unwrap().1.contains("from 2 to 0"),
        "{events:?}"
    );
    let s = p.last_status();
    assert_eq!((s.target, s.standby), (0, 0));
    // Idle hourly servers above min go at the end of their paid hour (the
    // billing rules of the pool), not before: none at 09:50 (created 09:00,
    // released 2 min before 10:00).
    assert!(report.released.is_empty(), "{report:?}");
    let report =
        p.w.provider
            .standby_pass(t("2026-11-24T09:58:30Z"))
            .await
            .unwrap();
    assert_eq!(report.released.len(), 2, "{report:?}");
}

#[tokio::test]
async fn a_dry_run_explains_and_orders_nothing() {
    let p = planned(3, true);
    two_servers_on_vms(&p);
    p.pass_at("2026-11-24T08:00:00Z").await;
    let report = p.pass_at("2026-11-24T09:00:00Z").await;
    assert!(report.ordered.is_empty(), "{report:?}");
    assert_eq!(p.w.f.api.count(Op::CreateServer), 0);
    let s = p.last_status();
    assert_eq!(
        (s.target, s.needed, s.standby, s.dry_run),
        (2, Some(2), 0, true)
    );
    let events = p.planner_events();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].0, "PlannerDryRun");
    assert!(
        events[0].1.starts_with("dry run: would have raised"),
        "{events:?}"
    );
}

#[tokio::test]
async fn the_target_never_passes_its_bound() {
    let p = planned(1, false);
    two_servers_on_vms(&p);
    p.pass_at("2026-11-24T08:00:00Z").await;
    let report = p.pass_at("2026-11-24T09:00:00Z").await;
    assert_eq!(report.ordered.len(), 1, "max 1: {report:?}");
    let s = p.last_status();
    assert_eq!((s.target, s.needed), (1, Some(2)));
    assert!(s.reason.contains("capped at 1"), "{}", s.reason);
}

#[tokio::test]
async fn an_unreadable_cluster_keeps_the_target_and_orders_nothing() {
    let p = planned(3, false);
    two_servers_on_vms(&p);
    p.pass_at("2026-11-24T08:00:00Z").await;
    *p.load.now.lock().unwrap() = Err("connection refused".into());
    let report = p.pass_at("2026-11-24T09:00:00Z").await;
    assert!(report.ordered.is_empty(), "{report:?}");
    let s = p.last_status();
    assert_eq!(s.target, 0);
    assert!(s.reason.contains("could not be read"), "{}", s.reason);
    assert!(p.planner_events().is_empty());
}

#[tokio::test]
async fn a_new_leader_starts_from_the_servers_the_pool_has() {
    let p = planned(3, false);
    // Two idle standbys from an earlier leader's raise; no history here.
    for id in ["s-1", "s-2"] {
        p.w.f.api.insert_server(standby(
            id,
            "2026-11-24T07:00:00Z",
            "hourly",
            &idle_since("2026-11-24T07:12:00Z"),
        ));
    }
    set_load(&p, vec![], vec![]);
    // Within the hour-long window nothing is known: the target stays at the
    // two servers there are, and none is released, even at the end of
    // their paid hour.
    let report =
        p.w.provider
            .standby_pass(t("2026-11-24T07:57:00Z"))
            .await
            .unwrap();
    assert!(report.released.is_empty(), "{report:?}");
    assert_eq!(p.last_status().target, 2);
    p.w.provider.forget_demand();
    assert_eq!(
        p.w.provider.planner.as_ref().unwrap().demand.target(&key()),
        None
    );
}

#[tokio::test]
async fn a_planner_removed_empties_the_status_once() {
    let p = planned(3, false);
    two_servers_on_vms(&p);
    p.pass_at("2026-11-24T08:00:00Z").await;
    assert_eq!(p.status.written.lock().unwrap().len(), 1);
    set_pools(&p.w.f, vec![pool(OFFER, 0, 3, None)]);
    p.pass_at("2026-11-24T08:01:00Z").await;
    p.pass_at("2026-11-24T08:02:00Z").await;
    let written = p.status.written.lock().unwrap().clone();
    assert_eq!(written.len(), 2, "{written:?}");
    assert_eq!(written[1], (CLASS.to_string(), Vec::new()));
}

#[test]
fn samples_keep_only_what_the_window_needs() {
    use crate::provider::standby::demand::push_sample;
    use crate::provider::standby::planner::Sample;
    let s = |at: &str, cpu: u64| Sample {
        at: t(at),
        cpu_millis: cpu,
        memory_bytes: 0,
    };
    let mut samples = Vec::new();
    let hour = std::time::Duration::from_secs(3600);
    push_sample(&mut samples, s("2026-11-24T08:00:00Z", 1), hour);
    // The same load again changes nothing.
    push_sample(&mut samples, s("2026-11-24T08:10:00Z", 1), hour);
    assert_eq!(samples.len(), 1);
    push_sample(&mut samples, s("2026-11-24T08:30:00Z", 2), hour);
    push_sample(&mut samples, s("2026-11-24T09:20:00Z", 3), hour);
    // 08:00 was still in force at 08:20: kept.
    let at: Vec<u64> = samples.iter().map(|s| s.cpu_millis).collect();
    assert_eq!(at, [1, 2, 3]);
    push_sample(&mut samples, s("2026-11-24T09:40:00Z", 4), hour);
    // 08:00 is out now; 08:30 was in force at 08:40: kept.
    let at: Vec<u64> = samples.iter().map(|s| s.cpu_millis).collect();
    assert_eq!(at, [2, 3, 4]);
}
