//! Every HTTP attempt is counted by API, operation and result, with its
//! duration, the retries and the rate-limit figures of a 429 body.

use super::*;
use crate::scaleway::telemetry::{ApiLabel, CallLabels, FloatGauge, OperationLabels};

const GET_SERVER: &str = "GET /servers/{server_id}";

fn counted(t: &ApiTelemetry, result: &'static str) -> u64 {
    let labels = CallLabels {
        api: "baremetal",
        operation: GET_SERVER,
        result,
    };
    t.requests.get(&labels).map_or(0, |c| c.get())
}

fn retries(t: &ApiTelemetry) -> u64 {
    let labels = OperationLabels {
        api: "baremetal",
        operation: GET_SERVER,
    };
    t.retries.get(&labels).map_or(0, |c| c.get())
}

/// Attempts timed, read from the histogram's encoded `_count`.
fn timed(t: &ApiTelemetry) -> u64 {
    let mut registry = prometheus_client::registry::Registry::default();
    registry.register("d", "", t.durations.clone());
    let mut text = String::new();
    prometheus_client::encoding::text::encode(&mut text, &registry).unwrap();
    let line = "d_count{api=\"baremetal\",operation=\"GET /servers/{server_id}\"} ";
    text.lines()
        .find_map(|l| l.strip_prefix(line))
        .map_or(0, |n| n.parse().unwrap())
}

fn gauge(family: &FloatGauge) -> Option<f64> {
    family.get(&ApiLabel { api: "baremetal" }).map(|g| g.get())
}

/// A client counting into its own telemetry, and that telemetry.
fn counting(mock: &MockServer) -> (ScalewayClient, Arc<ApiTelemetry>) {
    let t = Arc::new(ApiTelemetry::default());
    (client(mock).with_telemetry(t.clone()), t)
}

#[tokio::test]
async fn an_answered_call_is_counted_once_as_ok_and_timed() {
    let mock = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(200).set_body_json(server_json("abc", &[])))
        .mount(&mock)
        .await;
    let (c, t) = counting(&mock);
    c.get_server(ZONE, "abc").await.unwrap();
    assert_eq!(counted(&t, "ok"), 1);
    assert_eq!(timed(&t), 1);
    assert_eq!(retries(&t), 0);
}

#[tokio::test]
async fn a_404_is_counted_as_not_found_and_not_retried() {
    let mock = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(404).set_body_json(json!({"message": "Not Found"})))
        .expect(1)
        .mount(&mock)
        .await;
    let (c, t) = counting(&mock);
    c.get_server(ZONE, "abc").await.unwrap_err();
    assert_eq!(counted(&t, "not_found"), 1);
    assert_eq!(counted(&t, "ok"), 0);
    assert_eq!(retries(&t), 0);
}

#[tokio::test]
async fn a_retried_503_counts_both_attempts_and_one_retry() {
    let mock = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(503).set_body_json(json!({"message": "busy"})))
        .up_to_n_times(1)
        .mount(&mock)
        .await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(200).set_body_json(server_json("abc", &[])))
        .mount(&mock)
        .await;
    let (c, t) = counting(&mock);
    c.get_server(ZONE, "abc").await.unwrap();
    assert_eq!(counted(&t, "unavailable"), 1);
    assert_eq!(counted(&t, "ok"), 1);
    assert_eq!(retries(&t), 1);
    assert_eq!(timed(&t), 2);
}

#[tokio::test]
async fn a_429_body_reports_the_rate_limit_and_one_without_leaves_it() {
    let mock = MockServer::start().await;
    let throttled = json!({
        "type": "too_many_requests", "message": "rate limit exceeded",
        "limit": {"quota": 100, "window_seconds": 60}, "reset_seconds": 12
    });
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(429).set_body_json(throttled))
        .up_to_n_times(1)
        .mount(&mock)
        .await;
    // The historical 429: no body at all.
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(429))
        .up_to_n_times(1)
        .mount(&mock)
        .await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(200).set_body_json(server_json("abc", &[])))
        .mount(&mock)
        .await;
    let (c, t) = counting(&mock);
    c.get_server(ZONE, "abc").await.unwrap();
    assert_eq!(counted(&t, "throttled"), 2);
    assert_eq!(counted(&t, "ok"), 1);
    assert_eq!(retries(&t), 2);
    assert_eq!(by_endpoint(&t.throttled, GET_SERVER), 2);
    assert_eq!(gauge(&t.rate_limit_quota), Some(100.0));
    assert_eq!(gauge(&t.rate_limit_window_seconds), Some(60.0));
    assert_eq!(gauge(&t.rate_limit_reset_seconds), Some(12.0));
}

#[tokio::test]
async fn iam_calls_are_labelled_iam() {
    let mock = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/iam/v1alpha1/ssh-keys"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(json!({"total_count": 0, "ssh_keys": []})),
        )
        .mount(&mock)
        .await;
    let (c, t) = counting(&mock);
    c.list_ssh_keys("proj").await.unwrap();
    let labels = CallLabels {
        api: "iam",
        operation: "GET /iam/v1alpha1/ssh-keys",
        result: "ok",
    };
    assert_eq!(t.requests.get(&labels).map(|c| c.get()), Some(1));
}
