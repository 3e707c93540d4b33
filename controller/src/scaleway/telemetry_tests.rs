//! Every HTTP attempt is counted by API, operation and result, with its
//! duration, the retries and the rate-limit figures of a 429 body.

use super::*;
use crate::scaleway::Server;
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

/// `GET /servers/{server_id}` answered by `answers`, one per attempt in
/// turn (an attempt beyond them gets wiremock's bare 404).
async fn get_server(
    answers: Vec<ResponseTemplate>,
) -> (Result<Server, ApiError>, Arc<ApiTelemetry>) {
    let mock = MockServer::start().await;
    for answer in answers {
        Mock::given(method("GET"))
            .respond_with(answer)
            .up_to_n_times(1)
            .mount(&mock)
            .await;
    }
    let (c, t) = counting(&mock);
    (c.get_server(ZONE, "abc").await, t)
}

fn ready() -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(server_json("abc", &[]))
}

#[tokio::test]
async fn an_answered_call_is_counted_once_as_ok_and_timed() {
    let (got, t) = get_server(vec![ready()]).await;
    got.unwrap();
    assert_eq!(counted(&t, "ok"), 1);
    assert_eq!(timed(&t), 1);
    assert_eq!(retries(&t), 0);
}

#[tokio::test]
async fn a_404_is_counted_as_not_found_and_not_retried() {
    let not_found = ResponseTemplate::new(404).set_body_json(json!({"message": "Not Found"}));
    let (got, t) = get_server(vec![not_found]).await;
    got.unwrap_err();
    assert_eq!(counted(&t, "not_found"), 1);
    assert_eq!(counted(&t, "ok"), 0);
    assert_eq!(retries(&t), 0);
}

#[tokio::test]
async fn a_retried_503_counts_both_attempts_and_one_retry() {
    let busy = ResponseTemplate::new(503).set_body_json(json!({"message": "busy"}));
    let (got, t) = get_server(vec![busy, ready()]).await;
    got.unwrap();
    assert_eq!(counted(&t, "unavailable"), 1);
    assert_eq!(counted(&t, "ok"), 1);
    assert_eq!(retries(&t), 1);
    assert_eq!(timed(&t), 2);
}

#[tokio::test]
async fn a_429_body_reports_the_rate_limit_and_one_without_leaves_it() {
    let throttled = json!({
        "type": "too_many_requests", "message": "rate limit exceeded",
        "limit": {"quota": 100, "window_seconds": 60}, "reset_seconds": 12
    });
    let answers = vec![
        ResponseTemplate::new(429).set_body_json(throttled),
        // The historical 429: no body at all.
        ResponseTemplate::new(429),
        ready(),
    ];
    let (got, t) = get_server(answers).await;
    got.unwrap();
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
