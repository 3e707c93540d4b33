//! `/healthz` and Prometheus metrics over HTTP: catalog gauges, leadership,
//! the install engine's phase durations and outcomes, failed Lists and the
//! orphan sweeper's passes and decisions, the Scaleway client's pacing. API
//! calls by class come with the observability issue.

use std::collections::BTreeMap;
use std::fmt::Write;
use std::net::SocketAddr;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::SystemTime;

use axum::Router;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use axum::routing::get;
use tracing::info;

use crate::catalog::CatalogStore;

#[derive(Clone)]
struct AppState {
    catalog: Arc<CatalogStore>,
    is_leader: Arc<dyn Fn() -> bool + Send + Sync>,
}

async fn healthz() -> &'static str {
    "ok"
}

async fn metrics(State(state): State<AppState>) -> impl IntoResponse {
    let snapshot = state.catalog.snapshot();
    let age = snapshot
        .refreshed_at
        .and_then(|t| SystemTime::now().duration_since(t).ok())
        .map(|d| d.as_secs_f64());
    let mut out = String::new();
    let mut gauge = |name: &str, help: &str, value: f64| {
        let _ = writeln!(
            out,
            "# HELP {name} {help}\n# TYPE {name} gauge\n{name} {value}"
        );
    };
    gauge(
        "karpenter_scaleway_catalog_revision",
        "Revision of the published catalog.",
        snapshot.revision as f64,
    );
    gauge(
        "karpenter_scaleway_catalog_instance_types",
        "Instance types in the default catalog.",
        snapshot.default.len() as f64,
    );
    if let Some(age) = age {
        gauge(
            "karpenter_scaleway_catalog_age_seconds",
            "Seconds since the last successful offer refresh.",
            age,
        );
    }
    gauge(
        "karpenter_scaleway_leader",
        "1 when the bridge reported this replica as leader.",
        f64::from(u8::from((state.is_leader)())),
    );
    install_metrics().render(&mut out);
    safety_metrics().render(&mut out);
    render_pacing(&crate::scaleway::pacer::stats(), &mut out);
    render_churn(&churn_metrics().snapshot(), &mut out);
    standby_metrics().render(&mut out);
    planner_metrics().render(&mut out);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out)
}

/// `is_leader` answers whether the bridge last reported this replica as the
/// leader (`main` wires it to the gRPC service's `Leadership`, so that this
/// module, which the domain modules use, does not depend on `grpc`).
pub async fn serve(
    addr: SocketAddr,
    catalog: Arc<CatalogStore>,
    is_leader: Arc<dyn Fn() -> bool + Send + Sync>,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let app = Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .with_state(AppState { catalog, is_leader });
    let listener = tokio::net::TcpListener::bind(addr).await?;
    info!(%addr, "serving /healthz and /metrics");
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await?;
    Ok(())
}

/// The Scaleway client's pacing (`scaleway/pacer.rs`): calls that waited for
/// their turn and how long, calls not sent because the wait was too long for
/// their caller, and the 429s received anyway, per endpoint.
fn render_pacing(stats: &BTreeMap<&'static str, crate::scaleway::pacer::Stats>, out: &mut String) {
    type Field = fn(&crate::scaleway::pacer::Stats) -> f64;
    let families: [(&str, &str, Field); 5] = [
        (
            "karpenter_scaleway_api_paced_calls_total",
            "Scaleway API calls that waited for their turn (client-side pacing), by endpoint.",
            |s| s.waited as f64,
        ),
        (
            "karpenter_scaleway_api_pacing_wait_seconds_total",
            "Time Scaleway API calls waited for their turn, by endpoint.",
            |s| s.wait_seconds,
        ),
        (
            "karpenter_scaleway_api_refused_calls_total",
            "Scaleway API calls not sent: their turn was further away than their caller could wait (answered as throttled), by endpoint.",
            |s| s.refused as f64,
        ),
        (
            "karpenter_scaleway_api_skipped_reads_total",
            "Optional status reads (the install engine's fast reads near a delivery's expected end) not made: the pace had no free turn, by endpoint.",
            |s| s.skipped as f64,
        ),
        (
            "karpenter_scaleway_api_throttled_total",
            "429 answers of the Scaleway API, by endpoint (each retried with backoff by the client).",
            |s| s.throttled as f64,
        ),
    ];
    for (name, help, value) in families {
        let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
        for (endpoint, s) in stats {
            let _ = writeln!(out, "{name}{{endpoint=\"{endpoint}\"}} {}", value(s));
        }
    }
}

/// Upper bounds (seconds) of the install phase-duration buckets: phases last
/// from seconds (ready) to tens of minutes (delivery, imaging).
const PHASE_BUCKETS: [f64; 12] = [
    1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1200.0, 1800.0, 3600.0,
];

#[derive(Default, Clone)]
struct Histogram {
    /// Cumulative counts per bucket of [`PHASE_BUCKETS`].
    buckets: [u64; PHASE_BUCKETS.len()],
    count: u64,
    sum: f64,
}

#[derive(Default)]
struct InstallCounters {
    /// By (phase, outcome).
    phases: BTreeMap<(String, String), Histogram>,
    /// By result: `joined` or the failure class.
    outcomes: BTreeMap<String, u64>,
}

/// The install engine's metrics: how long each phase took and how installs
/// ended. Process-wide, like a Prometheus default registry.
#[derive(Default)]
pub struct InstallMetrics {
    inner: Mutex<InstallCounters>,
}

static INSTALL_METRICS: LazyLock<InstallMetrics> = LazyLock::new(InstallMetrics::default);

/// The process-wide install metrics.
pub fn install_metrics() -> &'static InstallMetrics {
    &INSTALL_METRICS
}

impl InstallMetrics {
    /// A phase ended: `outcome` is `completed`, `retried` (left for an earlier
    /// phase to try again) or `failed`.
    pub fn observe_phase(&self, phase: &str, outcome: &str, seconds: f64) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let h = inner
            .phases
            .entry((phase.to_string(), outcome.to_string()))
            .or_default();
        for (bound, count) in PHASE_BUCKETS.iter().zip(h.buckets.iter_mut()) {
            if seconds <= *bound {
                *count += 1;
            }
        }
        h.count += 1;
        h.sum += seconds;
    }

    /// An install ended: `joined`, or the class of its failure.
    pub fn count_outcome(&self, result: &str) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        *inner.outcomes.entry(result.to_string()).or_default() += 1;
    }

    /// Appends the Prometheus text form.
    pub fn render(&self, out: &mut String) {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let name = "karpenter_scaleway_install_phase_duration_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} Time spent in each install phase, by how the phase ended.\n# TYPE {name} histogram"
        );
        for ((phase, outcome), h) in &inner.phases {
            let labels = format!("phase=\"{phase}\",outcome=\"{outcome}\"");
            for (bound, count) in PHASE_BUCKETS.iter().zip(h.buckets.iter()) {
                let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{bound}\"}} {count}");
            }
            let _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {}", h.count);
            let _ = writeln!(out, "{name}_sum{{{labels}}} {}", h.sum);
            let _ = writeln!(out, "{name}_count{{{labels}}} {}", h.count);
        }
        let name = "karpenter_scaleway_install_outcomes_total";
        let _ = writeln!(
            out,
            "# HELP {name} Installs that ended, by result: joined or the failure class.\n# TYPE {name} counter"
        );
        for (result, count) in &inner.outcomes {
            let _ = writeln!(out, "{name}{{result=\"{result}\"}} {count}");
        }
    }
}

/// Consolidation churn counters (`karpenter_scaleway_churn_*`), counted by
/// the churn watch (`churn/watch.rs`).
#[derive(Debug, Default)]
pub struct ChurnMetrics {
    inner: Mutex<ChurnCounts>,
}

#[derive(Debug, Default, Clone)]
pub struct ChurnCounts {
    /// (nodepool, offer) → orders that churned.
    pub orders: BTreeMap<(String, String), u64>,
    /// (nodepool, offer) → EUR those orders cost at the least.
    pub euros: BTreeMap<(String, String), f64>,
    /// nodepool → 1 when set up to churn (absent: not an EM NodePool).
    pub at_risk: BTreeMap<String, bool>,
    /// (nodepool, offer) → orders refused by the churn guard.
    pub refused: BTreeMap<(String, String), u64>,
    /// Nodes held from disruption by the churn guard, at the last pass.
    pub held: u64,
    /// Holds lifted, by outcome (`used`: the node runs pods; `expired`: its
    /// paid hour ended first; `gone`: the node went).
    pub released: BTreeMap<String, u64>,
}

impl ChurnMetrics {
    /// One order that churned, of `offer` in `nodepool`.
    pub fn count(&self, nodepool: &str, offer: &str, euros: Option<f64>) {
        let mut c = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let key = (nodepool.to_string(), offer.to_string());
        *c.orders.entry(key.clone()).or_default() += 1;
        *c.euros.entry(key).or_default() += euros.unwrap_or(0.0);
    }

    /// One order refused by the churn guard.
    pub fn refused(&self, nodepool: &str, offer: &str) {
        let mut c = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        *c.refused
            .entry((nodepool.to_string(), offer.to_string()))
            .or_default() += 1;
    }

    pub fn set_held(&self, held: u64) {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).held = held;
    }

    pub fn released(&self, outcome: &str) {
        let mut c = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        *c.released.entry(outcome.to_string()).or_default() += 1;
    }

    pub fn set_risks(&self, risks: BTreeMap<String, bool>) {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).at_risk = risks;
    }

    pub fn snapshot(&self) -> ChurnCounts {
        self.inner.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }
}

static CHURN_METRICS: LazyLock<ChurnMetrics> = LazyLock::new(ChurnMetrics::default);

pub fn churn_metrics() -> &'static ChurnMetrics {
    &CHURN_METRICS
}

/// Consolidation churn on Elastic Metal (`churn/`): orders made while
/// a sibling of the same NodePool and offer stood idle, what they cost at the
/// least, and which NodePools are set up for it.
pub fn render_churn(c: &ChurnCounts, out: &mut String) {
    let name = "karpenter_scaleway_churn_orders_total";
    let _ = writeln!(
        out,
        "# HELP {name} Servers ordered while an Initialized, empty node of the same NodePool and offer, ordered less than an hour before, stood idle.\n# TYPE {name} counter"
    );
    for ((pool, offer), n) in &c.orders {
        let _ = writeln!(out, "{name}{{nodepool=\"{pool}\",offer=\"{offer}\"}} {n}");
    }
    let name = "karpenter_scaleway_churn_euros_total";
    let _ = writeln!(
        out,
        "# HELP {name} The least those orders cost, in EUR (an hour at the hourly price, a month under monthly billing).\n# TYPE {name} counter"
    );
    for ((pool, offer), eur) in &c.euros {
        let _ = writeln!(out, "{name}{{nodepool=\"{pool}\",offer=\"{offer}\"}} {eur}");
    }
    let name = "karpenter_scaleway_nodepool_churn_risk";
    let _ = writeln!(
        out,
        "# HELP {name} 1 when an Elastic Metal NodePool's disruption settings can start consolidation replaces that outlast Karpenter's 10-minute window.\n# TYPE {name} gauge"
    );
    for (pool, risk) in &c.at_risk {
        let _ = writeln!(out, "{name}{{nodepool=\"{pool}\"}} {}", u8::from(*risk));
    }
    let name = "karpenter_scaleway_churn_refused_total";
    let _ = writeln!(
        out,
        "# HELP {name} Orders refused during a disruption command because an idle, Initialized node of the same NodePool, offer and zone could take their pods.\n# TYPE {name} counter"
    );
    for ((pool, offer), n) in &c.refused {
        let _ = writeln!(out, "{name}{{nodepool=\"{pool}\",offer=\"{offer}\"}} {n}");
    }
    let name = "karpenter_scaleway_churn_held_nodes";
    let _ = writeln!(
        out,
        "# HELP {name} Idle nodes kept from disruption (karpenter.sh/do-not-disrupt) until consolidation moves pods onto them or their paid hour ends.\n# TYPE {name} gauge\n{name} {}",
        c.held
    );
    let name = "karpenter_scaleway_churn_holds_released_total";
    let _ = writeln!(
        out,
        "# HELP {name} Holds lifted, by outcome: used (the node runs pods), expired (its paid hour ended first), gone (the node went).\n# TYPE {name} counter"
    );
    for outcome in ["used", "expired", "gone"] {
        let n = c.released.get(outcome).copied().unwrap_or(0);
        let _ = writeln!(out, "{name}{{outcome=\"{outcome}\"}} {n}");
    }
}

/// Why a List failed (`karpenter_scaleway_list_failures_total{reason}`).
pub const LIST_FAILURE_REASONS: [&str; 6] = [
    "api_unavailable",
    "rate_limited",
    "timeout",
    "auth",
    "inconsistent",
    "kube_unavailable",
];

/// How a sweeper pass ended (`karpenter_scaleway_sweeper_passes_total{result}`).
pub const SWEEPER_PASS_RESULTS: [&str; 2] = ["completed", "list_failed"];

#[derive(Default)]
struct SafetyCounters {
    list_failures: BTreeMap<String, u64>,
    sweeper_passes: BTreeMap<String, u64>,
    /// By (decision, reason).
    sweeper_decisions: BTreeMap<(String, String), u64>,
    sweeper_delete_failures: u64,
}

/// The garbage-collection safety metrics: Lists that failed rather than
/// answer a partial list, and every decision of the orphan sweeper. Process-
/// wide, like [`InstallMetrics`].
#[derive(Default)]
pub struct SafetyMetrics {
    inner: Mutex<SafetyCounters>,
}

static SAFETY_METRICS: LazyLock<SafetyMetrics> = LazyLock::new(SafetyMetrics::default);

/// The process-wide GC safety metrics.
pub fn safety_metrics() -> &'static SafetyMetrics {
    &SAFETY_METRICS
}

impl SafetyMetrics {
    /// A List answered an error; `reason` is one of [`LIST_FAILURE_REASONS`].
    pub fn count_list_failure(&self, reason: &str) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        *inner.list_failures.entry(reason.to_string()).or_default() += 1;
    }

    /// A sweeper pass ended; `result` is one of [`SWEEPER_PASS_RESULTS`].
    pub fn count_sweeper_pass(&self, result: &str) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        *inner.sweeper_passes.entry(result.to_string()).or_default() += 1;
    }

    /// One server's decision in one pass.
    pub fn count_sweeper_decision(&self, decision: &str, reason: &str) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        *inner
            .sweeper_decisions
            .entry((decision.to_string(), reason.to_string()))
            .or_default() += 1;
    }

    /// A deletion the sweeper decided was refused by the API (retried next pass).
    pub fn count_sweeper_delete_failure(&self) {
        let mut inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        inner.sweeper_delete_failures += 1;
    }

    /// Appends the Prometheus text form. Known label values are written at
    /// zero so that a rate() or an alert sees the series before the first
    /// failure.
    pub fn render(&self, out: &mut String) {
        let inner = self.inner.lock().unwrap_or_else(|e| e.into_inner());
        let name = "karpenter_scaleway_list_failures_total";
        let _ = writeln!(
            out,
            "# HELP {name} List calls that failed rather than answer a partial list, by reason.\n# TYPE {name} counter"
        );
        for reason in LIST_FAILURE_REASONS {
            let count = inner.list_failures.get(reason).copied().unwrap_or(0);
            let _ = writeln!(out, "{name}{{reason=\"{reason}\"}} {count}");
        }
        let name = "karpenter_scaleway_sweeper_passes_total";
        let _ = writeln!(
            out,
            "# HELP {name} Orphan sweeper passes, by result (list_failed: no decision was taken).\n# TYPE {name} counter"
        );
        for result in SWEEPER_PASS_RESULTS {
            let count = inner.sweeper_passes.get(result).copied().unwrap_or(0);
            let _ = writeln!(out, "{name}{{result=\"{result}\"}} {count}");
        }
        let name = "karpenter_scaleway_sweeper_decisions_total";
        let _ = writeln!(
            out,
            "# HELP {name} Orphan sweeper decisions, one per server per pass.\n# TYPE {name} counter"
        );
        for ((decision, reason), count) in &inner.sweeper_decisions {
            let _ = writeln!(
                out,
                "{name}{{decision=\"{decision}\",reason=\"{reason}\"}} {count}"
            );
        }
        let name = "karpenter_scaleway_sweeper_delete_failures_total";
        let _ = writeln!(
            out,
            "# HELP {name} Deletions decided by the orphan sweeper that the API refused (retried next pass).\n# TYPE {name} counter\n{name} {}",
            inner.sweeper_delete_failures
        );
    }
}

/// Adoption (Create of a reserved NodeClaim) to Node Ready, in seconds.
const ADOPTION_BUCKETS: [f64; 10] = [
    10.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0, 180.0, 300.0, 600.0,
];

/// Standby servers (warm metal, `provider/standby`): how many in each state,
/// what the idle ones cost, what recycling saved, how fast adoption is.
#[derive(Default)]
pub struct StandbyMetrics {
    inner: Mutex<StandbyCounters>,
}

#[derive(Default)]
struct StandbyCounters {
    /// (nodeclass, offer, zone, state) → servers, as of the last pass.
    servers: BTreeMap<(String, String, String, String), usize>,
    /// nodeclass → EUR per hour of its idle standby servers.
    idle_cost: BTreeMap<String, f64>,
    /// nodeclass → EUR saved by adopting recycled servers.
    savings: BTreeMap<String, f64>,
    /// nodeclass → standby servers ordered.
    orders: BTreeMap<String, u64>,
    /// nodeclass → standby servers released.
    releases: BTreeMap<String, u64>,
    /// (nodeclass, decision) → deleted nodes' servers recycled or deleted.
    recycling: BTreeMap<(String, String), u64>,
    adoption_buckets: [u64; ADOPTION_BUCKETS.len()],
    adoption_count: u64,
    adoption_sum: f64,
}

static STANDBY_METRICS: LazyLock<StandbyMetrics> = LazyLock::new(StandbyMetrics::default);

/// The process-wide standby metrics.
pub fn standby_metrics() -> &'static StandbyMetrics {
    &STANDBY_METRICS
}

impl StandbyMetrics {
    fn lock(&self) -> std::sync::MutexGuard<'_, StandbyCounters> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Servers per (nodeclass, offer, zone, state) as of a pass (replaces
    /// the previous pass's figures).
    pub fn set_servers(&self, servers: BTreeMap<(String, String, String, String), usize>) {
        self.lock().servers = servers;
    }

    /// EUR per hour of the idle standby servers, per NodeClass.
    pub fn set_idle_cost(&self, cost: BTreeMap<String, f64>) {
        self.lock().idle_cost = cost;
    }

    pub fn count_order(&self, class: &str) {
        *self.lock().orders.entry(class.to_string()).or_default() += 1;
    }

    pub fn count_release(&self, class: &str) {
        *self.lock().releases.entry(class.to_string()).or_default() += 1;
    }

    /// A deleted node's server: `recycled` or `deleted`.
    pub fn count_recycling(&self, class: &str, decision: &str) {
        *self
            .lock()
            .recycling
            .entry((class.to_string(), decision.to_string()))
            .or_default() += 1;
    }

    pub fn add_savings(&self, class: &str, euros: f64) {
        if euros > 0.0 {
            *self.lock().savings.entry(class.to_string()).or_default() += euros;
        }
    }

    /// An adoption ended with the Node Ready after `seconds`.
    pub fn observe_adoption(&self, seconds: f64) {
        let mut inner = self.lock();
        for (bound, count) in ADOPTION_BUCKETS
            .iter()
            .zip(inner.adoption_buckets.iter_mut())
        {
            if seconds <= *bound {
                *count += 1;
            }
        }
        inner.adoption_count += 1;
        inner.adoption_sum += seconds;
    }

    /// Appends the Prometheus text form.
    pub fn render(&self, out: &mut String) {
        let inner = self.lock();
        let name = "karpenter_scaleway_standby_servers";
        let _ = writeln!(
            out,
            "# HELP {name} Standby servers by NodeClass, offer, zone and state (installing, idle, wiping).\n# TYPE {name} gauge"
        );
        for ((class, offer, zone, state), n) in &inner.servers {
            let _ = writeln!(
                out,
                "{name}{{nodeclass=\"{class}\",offer=\"{offer}\",zone=\"{zone}\",state=\"{state}\"}} {n}"
            );
        }
        let name = "karpenter_scaleway_standby_idle_euros_per_hour";
        let _ = writeln!(
            out,
            "# HELP {name} What the idle standby servers of a NodeClass cost per hour (monthly billing: the monthly price over 730 h).\n# TYPE {name} gauge"
        );
        for (class, euros) in &inner.idle_cost {
            let _ = writeln!(out, "{name}{{nodeclass=\"{class}\"}} {euros}");
        }
        let name = "karpenter_scaleway_standby_savings_euros_total";
        let _ = writeln!(
            out,
            "# HELP {name} EUR saved by adopting recycled servers instead of ordering: a monthly order's setup fee, or the paid rest of an hourly server's hour.\n# TYPE {name} counter"
        );
        for (class, euros) in &inner.savings {
            let _ = writeln!(out, "{name}{{nodeclass=\"{class}\"}} {euros}");
        }
        for (name, help, map) in [
            (
                "karpenter_scaleway_standby_orders_total",
                "Standby servers ordered.",
                &inner.orders,
            ),
            (
                "karpenter_scaleway_standby_releases_total",
                "Standby servers released (deleted) at the end of their paid period or when no pool wanted them.",
                &inner.releases,
            ),
        ] {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} counter");
            for (class, n) in map {
                let _ = writeln!(out, "{name}{{nodeclass=\"{class}\"}} {n}");
            }
        }
        let name = "karpenter_scaleway_standby_recycling_total";
        let _ = writeln!(
            out,
            "# HELP {name} Servers of deleted nodes, by decision: recycled (wiped back to standby) or deleted.\n# TYPE {name} counter"
        );
        for ((class, decision), n) in &inner.recycling {
            let _ = writeln!(
                out,
                "{name}{{nodeclass=\"{class}\",decision=\"{decision}\"}} {n}"
            );
        }
        let name = "karpenter_scaleway_standby_adoption_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} From the adoption of a standby server to its Node Ready.\n# TYPE {name} histogram"
        );
        for (bound, count) in ADOPTION_BUCKETS.iter().zip(inner.adoption_buckets.iter()) {
            let _ = writeln!(out, "{name}_bucket{{le=\"{bound}\"}} {count}");
        }
        let _ = writeln!(out, "{name}_bucket{{le=\"+Inf\"}} {}", inner.adoption_count);
        let _ = writeln!(out, "{name}_sum {}", inner.adoption_sum);
        let _ = writeln!(out, "{name}_count {}", inner.adoption_count);
    }
}

#[cfg(test)]
mod pacing_metrics_tests {
    use super::*;
    use crate::scaleway::pacer::Stats;

    #[test]
    fn pacing_renders_per_endpoint() {
        let stats = BTreeMap::from([(
            "GET /servers/{server_id}",
            Stats {
                waited: 3,
                wait_seconds: 1.5,
                refused: 0,
                skipped: 4,
                throttled: 2,
            },
        )]);
        let mut out = String::new();
        render_pacing(&stats, &mut out);
        let has = |line: &str| assert!(out.lines().any(|l| l == line), "{line}\n{out}");
        has("karpenter_scaleway_api_paced_calls_total{endpoint=\"GET /servers/{server_id}\"} 3");
        has(
            "karpenter_scaleway_api_pacing_wait_seconds_total{endpoint=\"GET /servers/{server_id}\"} 1.5",
        );
        has("karpenter_scaleway_api_refused_calls_total{endpoint=\"GET /servers/{server_id}\"} 0");
        has("karpenter_scaleway_api_throttled_total{endpoint=\"GET /servers/{server_id}\"} 2");
        has("karpenter_scaleway_api_skipped_reads_total{endpoint=\"GET /servers/{server_id}\"} 4");
        has("# TYPE karpenter_scaleway_api_throttled_total counter");
    }
}

#[cfg(test)]
mod safety_metrics_tests {
    use super::*;

    #[test]
    fn list_failures_and_sweeper_decisions_render_as_prometheus_text() {
        let m = SafetyMetrics::default();
        m.count_list_failure("inconsistent");
        m.count_list_failure("inconsistent");
        m.count_sweeper_pass("list_failed");
        m.count_sweeper_decision("spared", "claimed");
        m.count_sweeper_decision("would_delete", "orphaned");
        m.count_sweeper_decision("spared", "claimed");
        m.count_sweeper_delete_failure();
        let mut out = String::new();
        m.render(&mut out);
        let has = |line: &str| assert!(out.lines().any(|l| l == line), "{line}\n{out}");
        has("# TYPE karpenter_scaleway_list_failures_total counter");
        has("karpenter_scaleway_list_failures_total{reason=\"inconsistent\"} 2");
        has("karpenter_scaleway_list_failures_total{reason=\"rate_limited\"} 0");
        has("karpenter_scaleway_sweeper_passes_total{result=\"list_failed\"} 1");
        has("karpenter_scaleway_sweeper_passes_total{result=\"completed\"} 0");
        has("karpenter_scaleway_sweeper_decisions_total{decision=\"spared\",reason=\"claimed\"} 2");
        has(
            "karpenter_scaleway_sweeper_decisions_total{decision=\"would_delete\",reason=\"orphaned\"} 1",
        );
        has("karpenter_scaleway_sweeper_delete_failures_total 1");
    }
}

#[cfg(test)]
mod install_metrics_tests {
    use super::*;

    #[test]
    fn phase_durations_and_outcomes_render_as_prometheus_text() {
        let m = InstallMetrics::default();
        m.observe_phase("imaging", "completed", 42.0);
        m.observe_phase("imaging", "completed", 400.0);
        m.observe_phase("booting", "retried", 600.0);
        m.count_outcome("joined");
        m.count_outcome("joined");
        m.count_outcome("out_of_stock");
        let mut out = String::new();
        m.render(&mut out);
        let has = |line: &str| assert!(out.lines().any(|l| l == line), "{line}\n{out}");
        has("# TYPE karpenter_scaleway_install_phase_duration_seconds histogram");
        has(
            "karpenter_scaleway_install_phase_duration_seconds_bucket{phase=\"imaging\",outcome=\"completed\",le=\"30\"} 0",
        );
        has(
            "karpenter_scaleway_install_phase_duration_seconds_bucket{phase=\"imaging\",outcome=\"completed\",le=\"60\"} 1",
        );
        has(
            "karpenter_scaleway_install_phase_duration_seconds_bucket{phase=\"imaging\",outcome=\"completed\",le=\"600\"} 2",
        );
        has(
            "karpenter_scaleway_install_phase_duration_seconds_bucket{phase=\"imaging\",outcome=\"completed\",le=\"+Inf\"} 2",
        );
        has(
            "karpenter_scaleway_install_phase_duration_seconds_sum{phase=\"imaging\",outcome=\"completed\"} 442",
        );
        has(
            "karpenter_scaleway_install_phase_duration_seconds_count{phase=\"booting\",outcome=\"retried\"} 1",
        );
        has("karpenter_scaleway_install_outcomes_total{result=\"joined\"} 2");
        has("karpenter_scaleway_install_outcomes_total{result=\"out_of_stock\"} 1");
    }
}

#[cfg(test)]
mod churn_metrics_tests {
    use super::*;

    #[test]
    fn churn_orders_cost_and_risks_render_as_prometheus_text() {
        let m = ChurnMetrics::default();
        m.count("metal", "EM-A115X-SSD", Some(0.091));
        m.count("metal", "EM-A115X-SSD", Some(0.091));
        m.refused("metal", "EM-A115X-SSD");
        m.set_held(1);
        m.released("used");
        m.set_risks(BTreeMap::from([
            ("metal".to_string(), true),
            ("safe".to_string(), false),
        ]));
        let mut out = String::new();
        render_churn(&m.snapshot(), &mut out);
        let has = |line: &str| assert!(out.lines().any(|l| l == line), "{line}\n{out}");
        has("# TYPE karpenter_scaleway_churn_orders_total counter");
        has("karpenter_scaleway_churn_refused_total{nodepool=\"metal\",offer=\"EM-A115X-SSD\"} 1");
        has("karpenter_scaleway_churn_held_nodes 1");
        has("karpenter_scaleway_churn_holds_released_total{outcome=\"used\"} 1");
        has("karpenter_scaleway_churn_holds_released_total{outcome=\"expired\"} 0");
        has("karpenter_scaleway_churn_orders_total{nodepool=\"metal\",offer=\"EM-A115X-SSD\"} 2");
        has(
            "karpenter_scaleway_churn_euros_total{nodepool=\"metal\",offer=\"EM-A115X-SSD\"} 0.182",
        );
        has("# TYPE karpenter_scaleway_nodepool_churn_risk gauge");
        has("karpenter_scaleway_nodepool_churn_risk{nodepool=\"metal\"} 1");
        has("karpenter_scaleway_nodepool_churn_risk{nodepool=\"safe\"} 0");
    }
}

/// One planned pool's figures as of the last standby pass.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PlannerFigures {
    pub target: u32,
    /// `None` while the load has not been watched for the whole window.
    pub needed: Option<u32>,
    pub sustained_cpu_cores: Option<f64>,
    pub sustained_memory_bytes: Option<u64>,
    pub vm_euros_per_hour: f64,
    pub metal_euros_per_hour: f64,
}

/// The demand planner (`provider/standby/demand.rs`): per pool, its target
/// and the numbers behind it; per NodeClass, the changes of target.
#[derive(Default)]
pub struct PlannerMetrics {
    inner: Mutex<PlannerCounters>,
}

#[derive(Default)]
struct PlannerCounters {
    /// (nodeclass, offer, zone) → figures, as of the last pass.
    pools: BTreeMap<(String, String, String), PlannerFigures>,
    /// (nodeclass, direction) → changes of target.
    changes: BTreeMap<(String, String), u64>,
}

static PLANNER_METRICS: LazyLock<PlannerMetrics> = LazyLock::new(PlannerMetrics::default);

/// The process-wide planner metrics.
pub fn planner_metrics() -> &'static PlannerMetrics {
    &PLANNER_METRICS
}

impl PlannerMetrics {
    fn lock(&self) -> std::sync::MutexGuard<'_, PlannerCounters> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The planned pools' figures (replaces the previous pass's).
    pub fn set_pools(&self, pools: BTreeMap<(String, String, String), PlannerFigures>) {
        self.lock().pools = pools;
    }

    /// A change of target, `raised` or `lowered`.
    pub fn count_change(&self, class: &str, direction: &str) {
        *self
            .lock()
            .changes
            .entry((class.to_string(), direction.to_string()))
            .or_default() += 1;
    }

    /// Appends the Prometheus text form.
    pub fn render(&self, out: &mut String) {
        let inner = self.lock();
        type Pick = fn(&PlannerFigures) -> Option<f64>;
        let gauges: [(&str, &str, Pick); 6] = [
            (
                "karpenter_scaleway_planner_target_servers",
                "Servers of a standby pool the demand planner stages for the migratable load (adopted and standby).",
                |f| Some(f64::from(f.target)),
            ),
            (
                "karpenter_scaleway_planner_needed_servers",
                "Servers the sustained load needs, before the bounds (absent until the load was watched for the whole window).",
                |f| f.needed.map(f64::from),
            ),
            (
                "karpenter_scaleway_planner_sustained_cpu_cores",
                "CPU requested by the sustained part of the migratable load.",
                |f| f.sustained_cpu_cores,
            ),
            (
                "karpenter_scaleway_planner_sustained_memory_bytes",
                "Memory requested by the sustained part of the migratable load.",
                |f| f.sustained_memory_bytes.map(|b| b as f64),
            ),
            (
                "karpenter_scaleway_planner_vm_euros_per_hour",
                "EUR per hour of the nodes the planner counts that are not the pool's servers (typically VMs).",
                |f| Some(f.vm_euros_per_hour),
            ),
            (
                "karpenter_scaleway_planner_metal_euros_per_hour",
                "EUR per hour of the planner's target in servers of the pool's offer.",
                |f| Some(f.metal_euros_per_hour),
            ),
        ];
        for (name, help, pick) in gauges {
            let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} gauge");
            for ((class, offer, zone), figures) in &inner.pools {
                if let Some(v) = pick(figures) {
                    let _ = writeln!(
                        out,
                        "{name}{{nodeclass=\"{class}\",offer=\"{offer}\",zone=\"{zone}\"}} {v}"
                    );
                }
            }
        }
        let name = "karpenter_scaleway_planner_target_changes_total";
        let _ = writeln!(
            out,
            "# HELP {name} Changes of a planner target by NodeClass and direction (raised, lowered; dry runs included).\n# TYPE {name} counter"
        );
        for ((class, direction), n) in &inner.changes {
            let _ = writeln!(
                out,
                "{name}{{nodeclass=\"{class}\",direction=\"{direction}\"}} {n}"
            );
        }
    }
}
