//! `/healthz` and Prometheus metrics over HTTP: catalog gauges, leadership,
//! and the install engine's phase durations and outcomes. API calls by class
//! and GC decisions come with the observability issue.

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
use crate::grpc::Leadership;

#[derive(Clone)]
struct AppState {
    catalog: Arc<CatalogStore>,
    leadership: Leadership,
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
        f64::from(u8::from(state.leadership.is_leader())),
    );
    install_metrics().render(&mut out);
    ([(header::CONTENT_TYPE, "text/plain; version=0.0.4")], out)
}

pub async fn serve(
    addr: SocketAddr,
    catalog: Arc<CatalogStore>,
    leadership: Leadership,
    shutdown: impl Future<Output = ()> + Send + 'static,
) -> anyhow::Result<()> {
    let app = Router::new()
        .route("/healthz", get(healthz))
        .route("/metrics", get(metrics))
        .with_state(AppState {
            catalog,
            leadership,
        });
    let listener = tokio::net::TcpListener::bind(addr).await?;
    info!(%addr, "serving /healthz and /metrics");
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await?;
    Ok(())
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
