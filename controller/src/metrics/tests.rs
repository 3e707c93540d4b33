use std::time::Duration;

use axum::body::to_bytes;
use axum::response::IntoResponse;

use super::*;
use crate::catalog::Unavailability;
use crate::scaleway::pacer::Turn;
use crate::scaleway::telemetry::ApiTelemetry;

/// The OpenMetrics text of what `register` registers.
pub(crate) fn encoded(register: impl FnOnce(&mut Registry)) -> String {
    let mut registry = Registry::default();
    register(&mut registry);
    let mut out = String::new();
    encode(&mut out, &registry).unwrap();
    out
}

/// `out` holds exactly the line `line`.
pub(crate) fn has(out: &str, line: &str) {
    assert!(out.lines().any(|l| l == line), "{line}\n{out}");
}

fn sources(catalog: Arc<CatalogStore>) -> Sources {
    Sources {
        catalog,
        is_leader: Arc::new(|| true),
        installs: Arc::new(|| BTreeMap::from([("imaging", 2)])),
    }
}

#[test]
fn pacing_is_exposed_per_endpoint() {
    let t = ApiTelemetry::default();
    let endpoint = "GET /servers/{server_id}";
    for _ in 0..3 {
        t.paced(endpoint, Turn::Waited(Duration::from_millis(500)));
    }
    t.paced(endpoint, Turn::Now);
    t.skipped(endpoint);
    t.throttled(crate::scaleway::Api::ElasticMetal, endpoint, b"");
    let out = encoded(|r| api::register(&t, r));
    let e = "endpoint=\"GET /servers/{server_id}\"";
    has(
        &out,
        &format!("karpenter_scaleway_api_paced_calls_total{{{e}}} 3"),
    );
    has(
        &out,
        &format!("karpenter_scaleway_api_pacing_wait_seconds_total{{{e}}} 1.5"),
    );
    has(
        &out,
        &format!("karpenter_scaleway_api_skipped_reads_total{{{e}}} 1"),
    );
    has(
        &out,
        &format!("karpenter_scaleway_api_throttled_total{{{e}}} 1"),
    );
    has(&out, "# TYPE karpenter_scaleway_api_throttled counter");
    assert!(
        !out.contains("karpenter_scaleway_api_refused_calls_total{"),
        "{out}"
    );
}

#[tokio::test(start_paused = true)]
async fn a_scrape_sets_the_catalog_leader_and_installs_and_drops_expired_marks() {
    let catalog = CatalogStore::new(Duration::from_secs(600));
    let m = Metrics::new();
    let out = m.scrape(&sources(catalog.clone())).unwrap();
    assert!(
        !out.contains("karpenter_scaleway_catalog_age_seconds "),
        "no age before the first refresh\n{out}"
    );
    has(&out, "karpenter_scaleway_leader 1");
    has(
        &out,
        "karpenter_scaleway_installs_in_progress{phase=\"imaging\"} 2",
    );
    has(&out, "# EOF");

    catalog.mark_unavailable_for("EM-A115X-SSD", "fr-par-2", Unavailability::QuotaExceeded);
    catalog.mark_unavailable_until(
        "EM-B112X-SSD",
        "fr-par-1",
        "NodeClaim x stands idle",
        Duration::from_secs(60),
    );
    let out = m.scrape(&sources(catalog.clone())).unwrap();
    has(
        &out,
        "karpenter_scaleway_catalog_unavailable_offerings{offer=\"EM-A115X-SSD\",zone=\"fr-par-2\",reason=\"quota_exceeded\"} 1",
    );
    has(
        &out,
        "karpenter_scaleway_catalog_unavailable_offerings{offer=\"EM-B112X-SSD\",zone=\"fr-par-1\",reason=\"churn_guard\"} 1",
    );
    let revision = catalog.snapshot().revision;
    has(
        &out,
        &format!("karpenter_scaleway_catalog_revision {revision}"),
    );

    tokio::time::advance(Duration::from_secs(61)).await;
    let out = m.scrape(&sources(catalog)).unwrap();
    assert!(
        !out.contains("EM-B112X-SSD"),
        "the expired mark is gone\n{out}"
    );
    assert!(out.contains("EM-A115X-SSD"), "{out}");
}

#[tokio::test]
async fn metrics_are_served_as_openmetrics() {
    let catalog = CatalogStore::new(Duration::from_secs(600));
    let response = metrics(State(sources(catalog))).await.into_response();
    assert_eq!(response.status(), StatusCode::OK);
    assert_eq!(
        response.headers()[header::CONTENT_TYPE],
        "application/openmetrics-text; version=1.0.0; charset=utf-8"
    );
    let body = to_bytes(response.into_body(), usize::MAX).await.unwrap();
    let text = String::from_utf8(body.to_vec()).unwrap();
    assert!(text.ends_with("# EOF\n"), "{text}");
    // Families with series are written once each; empty ones not at all.
    for family in [
        "karpenter_scaleway_catalog_revision gauge",
        "karpenter_scaleway_leader gauge",
        "karpenter_scaleway_list_failures counter",
        "karpenter_scaleway_sweeper_passes counter",
        "karpenter_scaleway_churn_held_nodes gauge",
        "karpenter_scaleway_standby_adoption_seconds histogram",
    ] {
        let line = format!("# TYPE {family}");
        assert_eq!(
            text.lines().filter(|l| *l == line).count(),
            1,
            "{line}\n{text}"
        );
    }
    has(
        &text,
        "# HELP karpenter_scaleway_leader 1 when the bridge reported this replica as leader.",
    );
    assert!(
        !text.contains("karpenter_scaleway_catalog_age_seconds"),
        "{text}"
    );
}
