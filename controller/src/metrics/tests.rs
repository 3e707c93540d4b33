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

/// Every family the provider registers, in the order `Metrics::new`
/// registers them: what the exposition below must show.
const FAMILIES: &[&str] = &[
    "karpenter_scaleway_catalog_revision",
    "karpenter_scaleway_catalog_instance_types",
    "karpenter_scaleway_catalog_age_seconds",
    "karpenter_scaleway_catalog_unavailable_offerings",
    "karpenter_scaleway_leader",
    "karpenter_scaleway_install_phase_duration_seconds",
    "karpenter_scaleway_install_outcomes",
    "karpenter_scaleway_installs_in_progress",
    "karpenter_scaleway_list_failures",
    "karpenter_scaleway_sweeper_passes",
    "karpenter_scaleway_sweeper_decisions",
    "karpenter_scaleway_sweeper_delete_failures",
    "karpenter_scaleway_api_requests",
    "karpenter_scaleway_api_request_duration_seconds",
    "karpenter_scaleway_api_retries",
    "karpenter_scaleway_api_rate_limit_quota",
    "karpenter_scaleway_api_rate_limit_window_seconds",
    "karpenter_scaleway_api_rate_limit_reset_seconds",
    "karpenter_scaleway_api_paced_calls",
    "karpenter_scaleway_api_pacing_wait_seconds",
    "karpenter_scaleway_api_refused_calls",
    "karpenter_scaleway_api_skipped_reads",
    "karpenter_scaleway_api_throttled",
    "karpenter_scaleway_churn_orders",
    "karpenter_scaleway_churn_euros",
    "karpenter_scaleway_nodepool_churn_risk",
    "karpenter_scaleway_churn_refused",
    "karpenter_scaleway_churn_held_nodes",
    "karpenter_scaleway_churn_holds_released",
    "karpenter_scaleway_standby_servers",
    "karpenter_scaleway_standby_idle_euros_per_hour",
    "karpenter_scaleway_standby_savings_euros",
    "karpenter_scaleway_standby_orders",
    "karpenter_scaleway_standby_releases",
    "karpenter_scaleway_standby_recycling",
    "karpenter_scaleway_standby_adoption_seconds",
    "karpenter_scaleway_planner_target_servers",
    "karpenter_scaleway_planner_needed_servers",
    "karpenter_scaleway_planner_sustained_cpu_cores",
    "karpenter_scaleway_planner_sustained_memory_bytes",
    "karpenter_scaleway_planner_vm_euros_per_hour",
    "karpenter_scaleway_planner_metal_euros_per_hour",
    "karpenter_scaleway_planner_target_changes",
    "karpenter_scaleway_reboots",
];

/// Every family with a series, as a scrape shows them once each has been
/// counted (a family without a series is not written at all): the
/// exposition CI hands to `promtool check metrics` and to
/// `hack/dashboard-check.py --provider-metrics` (with
/// `KPS_METRICS_EXPOSITION=<file>`, the test writes it there).
#[test]
fn every_family_is_exposed_once_counted() {
    let m = Metrics::new();
    let catalog = CatalogStore::new(Duration::from_secs(600));
    catalog.set_base(Vec::new());
    catalog.mark_unavailable_for("EM-A115X-SSD", "fr-par-2", Unavailability::OutOfStock);
    m.install.observe_phase("imaging", "completed", 42.0);
    m.install.count_outcome("joined");
    m.safety.count_list_failure("timeout");
    m.safety.count_sweeper_pass("completed");
    m.safety.count_sweeper_decision("spared", "claimed");
    m.safety.count_sweeper_delete_failure();
    let t = api_telemetry();
    let api = crate::scaleway::Api::ElasticMetal;
    let endpoint = "GET /servers/{server_id}";
    t.attempt(api, endpoint, Duration::from_millis(80), Ok(()));
    t.retry(api, endpoint);
    t.throttled(
        api,
        endpoint,
        br#"{"limit": {"quota": 100, "window_seconds": 60}, "reset_seconds": 12}"#,
    );
    t.paced(endpoint, Turn::Waited(Duration::from_millis(200)));
    t.paced(endpoint, Turn::Refused);
    t.skipped(endpoint);
    m.churn.count("metal", "EM-A115X-SSD", Some(0.091));
    m.churn.refused("metal", "EM-A115X-SSD");
    m.churn.set_held(1);
    m.churn.released("used");
    m.churn
        .set_risks(BTreeMap::from([("metal".to_string(), true)]));
    let pool = |s: &str| {
        (
            "default".to_string(),
            "EM-A115X-SSD".to_string(),
            "fr-par-2".to_string(),
            s.to_string(),
        )
    };
    m.standby.set_servers(BTreeMap::from([(pool("idle"), 1)]));
    m.standby
        .set_idle_cost(BTreeMap::from([("default".to_string(), 0.091)]));
    m.standby.count_order("default");
    m.standby.count_release("default");
    m.standby.count_recycling("default", "recycled");
    m.standby.add_savings("default", 0.5);
    m.standby.observe_adoption(2.3);
    m.planner.set_pools(BTreeMap::from([(
        (
            "default".to_string(),
            "EM-A115X-SSD".to_string(),
            "fr-par-2".to_string(),
        ),
        PlannerFigures {
            target: 1,
            needed: Some(1),
            sustained_cpu_cores: Some(3.3),
            sustained_memory_bytes: Some(3 << 30),
            vm_euros_per_hour: 0.2205,
            metal_euros_per_hour: 0.091,
        },
    )]));
    m.planner.count_change("default", "raised");
    m.reboot.count("baremetal", "accepted");
    let out = m.scrape(&sources(catalog)).unwrap();
    let typed: Vec<&str> = out
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split(' ').next())
        .collect();
    assert_eq!(typed, FAMILIES, "\n{out}");
    assert!(out.ends_with("# EOF\n"), "{out}");
    if let Ok(path) = std::env::var("KPS_METRICS_EXPOSITION") {
        std::fs::write(&path, &out).unwrap();
    }
}
