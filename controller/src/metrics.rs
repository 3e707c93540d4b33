//! `/healthz` and a few Prometheus gauges over HTTP. The full metrics set
//! (install phases, API calls by class, GC decisions) comes with the
//! observability issue; this serves what the walking skeleton can tell.

use std::fmt::Write;
use std::net::SocketAddr;
use std::sync::Arc;
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
