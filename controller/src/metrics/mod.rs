//! `/healthz` and `/metrics` over HTTP. One `prometheus-client` registry of
//! typed families, exposed as OpenMetrics text: catalog gauges and the
//! offerings marked unavailable, leadership, the install engine (phase
//! durations, outcomes, installs in progress), failed Lists and the orphan
//! sweeper, every Scaleway API call (by API, operation and result class, with
//! retries, pacing, 429s and the rate-limit figures), consolidation churn,
//! standby pools, the demand planner and reboots.
//!
//! Counters are counted where things happen, into the process-wide families
//! of the `*_metrics()` singletons; figures only known as a snapshot (the
//! catalog, the installs in flight, the last standby and planner passes) are
//! turned into gauges at scrape time, so that a series whose subject went
//! away disappears.
//!
//! Help texts are written without their final period (the registry adds it)
//! and counters without `_total` (the encoder adds it to the samples).

mod api;
mod churn;
mod install;
mod reboot;
mod safety;
mod standby;

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, LazyLock, Mutex};
use std::time::SystemTime;

use axum::Router;
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::IntoResponse;
use axum::routing::get;
use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;
use tracing::{info, warn};

use crate::catalog::CatalogStore;
use crate::scaleway::telemetry::api_telemetry;

pub use churn::ChurnMetrics;
pub use install::InstallMetrics;
pub use reboot::{REBOOT_KINDS, REBOOT_OUTCOMES, RebootMetrics};
pub use safety::{LIST_FAILURE_REASONS, SWEEPER_PASS_RESULTS, SafetyMetrics};
pub use standby::{PlannerFigures, PlannerMetrics, StandbyMetrics};

/// The content type of `/metrics`.
pub const CONTENT_TYPE: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";

/// Installs running in this process by phase (`main` wires it to the install
/// engines, which this module, used by them, cannot name).
pub type InstallsByPhase = Arc<dyn Fn() -> BTreeMap<&'static str, usize> + Send + Sync>;

/// What `/metrics` reads at scrape time.
#[derive(Clone)]
pub struct Sources {
    pub catalog: Arc<CatalogStore>,
    /// Whether the bridge last reported this replica as the leader (`main`
    /// wires it to the gRPC service's `Leadership`, so that this module,
    /// which the domain modules use, does not depend on `grpc`).
    pub is_leader: Arc<dyn Fn() -> bool + Send + Sync>,
    pub installs: InstallsByPhase,
}

/// A gauge that is absent until it has a value.
type Optional = Family<[(&'static str, &'static str); 0], Gauge<f64, AtomicU64>>;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Offering {
    offer: String,
    zone: String,
    reason: &'static str,
}

/// The gauges set from [`Sources`] at scrape time.
#[derive(Debug, Default)]
struct Scraped {
    revision: Gauge,
    instance_types: Gauge,
    age: Optional,
    leader: Gauge,
    unavailable: Family<Offering, Gauge>,
}

impl Scraped {
    fn register(&self, registry: &mut Registry) {
        registry.register(
            "karpenter_scaleway_catalog_revision",
            "Revision of the published catalog",
            self.revision.clone(),
        );
        registry.register(
            "karpenter_scaleway_catalog_instance_types",
            "Instance types in the default catalog",
            self.instance_types.clone(),
        );
        registry.register(
            "karpenter_scaleway_catalog_age_seconds",
            "Seconds since the last successful offer refresh",
            self.age.clone(),
        );
        registry.register(
            "karpenter_scaleway_catalog_unavailable_offerings",
            "1 per offering (offer, zone) marked unavailable now, by reason (out_of_stock, quota_exceeded, not_found, stopped_after_power_on, churn_guard)",
            self.unavailable.clone(),
        );
        registry.register(
            "karpenter_scaleway_leader",
            "1 when the bridge reported this replica as leader",
            self.leader.clone(),
        );
    }

    fn refresh(&self, catalog: &CatalogStore, is_leader: bool) {
        let snapshot = catalog.snapshot();
        self.revision
            .set(i64::try_from(snapshot.revision).unwrap_or(i64::MAX));
        self.instance_types
            .set(i64::try_from(snapshot.default.len()).unwrap_or(i64::MAX));
        self.age.clear();
        if let Some(age) = snapshot
            .refreshed_at
            .and_then(|t| SystemTime::now().duration_since(t).ok())
        {
            self.age.get_or_create(&[]).set(age.as_secs_f64());
        }
        self.leader.set(i64::from(is_leader));
        self.unavailable.clear();
        for o in catalog.unavailable_offerings() {
            let labels = Offering {
                offer: o.offer,
                zone: o.zone,
                reason: o.reason,
            };
            self.unavailable.get_or_create(&labels).set(1);
        }
    }
}

/// Every family, registered once.
struct Metrics {
    registry: Registry,
    scraped: Scraped,
    install: InstallMetrics,
    safety: SafetyMetrics,
    churn: ChurnMetrics,
    standby: StandbyMetrics,
    planner: PlannerMetrics,
    reboot: RebootMetrics,
    /// One scrape at a time: the scrape-time gauges are cleared and refilled.
    scraping: Mutex<()>,
}

impl Metrics {
    fn new() -> Self {
        let mut m = Metrics {
            registry: Registry::default(),
            scraped: Scraped::default(),
            install: InstallMetrics::default(),
            safety: SafetyMetrics::default(),
            churn: ChurnMetrics::default(),
            standby: StandbyMetrics::default(),
            planner: PlannerMetrics::default(),
            reboot: RebootMetrics::default(),
            scraping: Mutex::new(()),
        };
        let r = &mut m.registry;
        m.scraped.register(r);
        m.install.register(r);
        m.safety.register(r);
        api::register(api_telemetry(), r);
        m.churn.register(r);
        m.standby.register(r);
        m.planner.register(r);
        m.reboot.register(r);
        m
    }

    /// The OpenMetrics text of every family, the scrape-time gauges set
    /// from `sources` first.
    fn scrape(&self, sources: &Sources) -> Result<String, std::fmt::Error> {
        let _one = self.scraping.lock().unwrap_or_else(|e| e.into_inner());
        self.scraped
            .refresh(&sources.catalog, (sources.is_leader)());
        self.install.set_in_progress(&(sources.installs)());
        self.churn.refresh();
        self.standby.refresh();
        self.planner.refresh();
        let mut out = String::new();
        encode(&mut out, &self.registry)?;
        Ok(out)
    }
}

static METRICS: LazyLock<Metrics> = LazyLock::new(Metrics::new);

/// The process-wide install metrics.
pub fn install_metrics() -> &'static InstallMetrics {
    &METRICS.install
}

/// The process-wide GC safety metrics.
pub fn safety_metrics() -> &'static SafetyMetrics {
    &METRICS.safety
}

/// The process-wide churn metrics.
pub fn churn_metrics() -> &'static ChurnMetrics {
    &METRICS.churn
}

/// The process-wide standby metrics.
pub fn standby_metrics() -> &'static StandbyMetrics {
    &METRICS.standby
}

/// The process-wide planner metrics.
pub fn planner_metrics() -> &'static PlannerMetrics {
    &METRICS.planner
}

/// The process-wide reboot metrics.
pub fn reboot_metrics() -> &'static RebootMetrics {
    &METRICS.reboot
}

async fn healthz() -> &'static str {
    "ok"
}

async fn metrics(State(sources): State<Sources>) -> impl IntoResponse {
    match METRICS.scrape(&sources) {
        Ok(text) => (StatusCode::OK, [(header::CONTENT_TYPE, CONTENT_TYPE)], text),
        Err(e) => {
            warn!(error = %e, "encoding /metrics failed");
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                [(header::CONTENT_TYPE, "text/plain; charset=utf-8")],
                "encoding the metrics failed\n".to_string(),
            )
        }
    }
}

fn app(sources: Sources) -> Router {
    Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .with_state(sources)
}

pub async fn serve(
    addr: SocketAddr,
    sources: Sources,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let listener = tokio::net::TcpListener::bind(addr).await?;
    info!(%addr, "serving /healthz and /metrics");
    axum::serve(listener, app(sources))
        .with_graceful_shutdown(shutdown)
        .await?;
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests;
