use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use wiremock::matchers::{body_json, header, method, path, query_param};
use wiremock::{Mock, MockServer, ResponseTemplate};

use super::*;
use crate::scaleway::telemetry::{ApiTelemetry, EndpointLabel};
use crate::scaleway::{ServerStatus, SubscriptionPeriod};

const ZONE: &str = "fr-par-2";

/// A timeout far above any answer of a local mock, even on a loaded
/// machine: one would be retried and skew the tests' call counts.
fn client(server: &MockServer) -> ScalewayClient {
    client_timing_out_after(server, Duration::from_secs(30))
}

fn client_timing_out_after(server: &MockServer, timeout: Duration) -> ScalewayClient {
    ScalewayClient::new(ClientConfig {
        api_url: server.uri(),
        secret_key: SecretKey::new("secret-token"),
        request_timeout: timeout,
        retry: RetryPolicy {
            max_attempts: 3,
            base_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(5),
        },
    })
    .unwrap()
}

fn server_json(id: &str, tags: &[&str]) -> serde_json::Value {
    json!({
        "id": id, "organization_id": "org", "project_id": "proj", "name": format!("node-{id}"),
        "description": "", "status": "ready", "offer_id": "offer-1", "offer_name": "EM-A115X-SSD",
        "tags": tags, "ips": [{"id": "ip1", "address": "127.77.0.10", "reverse": "", "version": "IPv4",
        "reverse_status": "unknown", "reverse_status_message": ""}], "domain": "", "boot_type": "normal",
        "zone": ZONE, "install": null, "ping_status": "ping_status_up", "options": [],
        "rescue_server": null, "protected": false, "user_data": null,
        "created_at": "2025-10-24T13:43:11.051888Z", "updated_at": "2025-10-24T13:43:11.051888Z"
    })
}

async fn get_error(status: u16, body: serde_json::Value) -> ApiError {
    let mock = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(status).set_body_json(body))
        .mount(&mock)
        .await;
    client(&mock).get_server(ZONE, "abc").await.unwrap_err()
}

type Check = fn(&ApiError) -> bool;

#[tokio::test]
async fn classifies_every_error_row() {
    let cases: Vec<(u16, serde_json::Value, Check)> = vec![
        (
            404,
            json!({"type": "not_found", "message": "resource is not found", "resource": "baremetal_server", "resource_id": "abc"}),
            |e| matches!(e, ApiError::NotFound(_)),
        ),
        (404, json!({"message": "Not Found"}), |e| {
            matches!(e, ApiError::NotFound(_))
        }),
        (
            400,
            json!({"type": "invalid_arguments", "message": "invalid argument(s)", "details": [{"argument_name": "name", "reason": "required"}]}),
            |e| matches!(e, ApiError::Invalid(_)),
        ),
        (400, json!({"message": "Server is not delivered"}), |e| {
            matches!(e, ApiError::TransientState(_))
        }),
        (
            403,
            json!({"type": "permissions_denied", "message": "insufficient permissions", "details": [{"resource": "servers", "action": "read"}]}),
            |e| matches!(e, ApiError::Unauthorized(_)),
        ),
        (
            409,
            json!({"type": "transient_state", "message": "resource is in a transient state", "resource": "baremetal_server", "resource_id": "abc", "current_state": "deleting"}),
            |e| matches!(e, ApiError::TransientState(_)),
        ),
        (
            412,
            json!({"type": "precondition_failed", "precondition": "resource_still_in_use", "help_message": "stop it", "message": "precondition failed"}),
            |e| matches!(e, ApiError::Invalid(_)),
        ),
        (
            403,
            json!({"type": "quotas_exceeded", "message": "quota(s) exceeded for this resource", "details": [{"resource": "baremetal_servers", "quota": 2, "current": 2}]}),
            |e| matches!(e, ApiError::QuotaExceeded(_)),
        ),
        (
            412,
            json!({"type": "out_of_stock", "resource": "baremetal_offer", "message": "resource is out of stock"}),
            |e| matches!(e, ApiError::OutOfStock(_)),
        ),
        (
            401,
            json!({"type": "denied_authentication", "method": "api_key", "reason": "invalid_argument"}),
            |e| matches!(e, ApiError::Unauthorized(_)),
        ),
    ];
    for (status, body, check) in cases {
        let err = get_error(status, body.clone()).await;
        assert!(check(&err), "HTTP {status} {body} classified as {err:?}");
    }
}

#[tokio::test]
async fn retryable_errors_are_exhausted_then_reported() {
    let mock = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(503).set_body_string("upstream down"))
        .expect(3)
        .mount(&mock)
        .await;
    let err = client(&mock).get_server(ZONE, "abc").await.unwrap_err();
    assert!(matches!(err, ApiError::Unavailable(_)), "{err:?}");

    let mock = MockServer::start().await;
    // 429 without a body, as the API historically answers.
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(429))
        .expect(3)
        .mount(&mock)
        .await;
    assert_eq!(
        client(&mock).get_server(ZONE, "abc").await.unwrap_err(),
        ApiError::Throttled
    );
}

#[tokio::test]
async fn retries_429_and_503_then_succeeds() {
    let mock = MockServer::start().await;
    let p = format!("/baremetal/v1/zones/{ZONE}/servers/abc");
    Mock::given(method("GET"))
        .and(path(p.clone()))
        .respond_with(ResponseTemplate::new(429))
        .up_to_n_times(1)
        .expect(1)
        .mount(&mock)
        .await;
    Mock::given(method("GET"))
        .and(path(p.clone()))
        .respond_with(ResponseTemplate::new(503).set_body_json(json!({"message": "oops"})))
        .up_to_n_times(1)
        .expect(1)
        .mount(&mock)
        .await;
    Mock::given(method("GET"))
        .and(path(p))
        .respond_with(ResponseTemplate::new(200).set_body_json(server_json("abc", &[])))
        .expect(1)
        .mount(&mock)
        .await;
    let server = client(&mock).get_server(ZONE, "abc").await.unwrap();
    assert_eq!(server.id, "abc");
    assert_eq!(server.status, ServerStatus::Ready);
    assert_eq!(server.ipv4(), Some("127.77.0.10"));
}

#[tokio::test]
async fn timeout_is_a_timeout_and_retryable() {
    let mock = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(server_json("abc", &[]))
                .set_delay(Duration::from_secs(2)),
        )
        .mount(&mock)
        .await;
    let err = client_timing_out_after(&mock, Duration::from_millis(200))
        .get_server(ZONE, "abc")
        .await
        .unwrap_err();
    assert!(matches!(err, ApiError::Timeout(_)), "{err:?}");
    assert!(err.is_retryable());
}

#[tokio::test]
async fn create_is_not_retried_on_5xx_but_is_on_429() {
    let mock = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(502))
        .expect(1)
        .mount(&mock)
        .await;
    let req = CreateServerRequest {
        offer_id: "offer-1".into(),
        project_id: "proj".into(),
        name: "node-a".into(),
        ..Default::default()
    };
    let err = client(&mock).create_server(ZONE, &req).await.unwrap_err();
    assert!(matches!(err, ApiError::Unavailable(_)));

    let mock = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(429))
        .up_to_n_times(1)
        .expect(1)
        .mount(&mock)
        .await;
    Mock::given(method("POST"))
        .and(path(format!("/baremetal/v1/zones/{ZONE}/servers")))
        .and(body_json(
            json!({"offer_id": "offer-1", "project_id": "proj", "name": "node-a",
            "description": "", "tags": [], "install": null}),
        ))
        .respond_with(ResponseTemplate::new(200).set_body_json(server_json("new", &[])))
        .expect(1)
        .mount(&mock)
        .await;
    assert_eq!(
        client(&mock).create_server(ZONE, &req).await.unwrap().id,
        "new"
    );
}

#[tokio::test]
async fn sends_auth_header_and_reboot_body() {
    let mock = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(format!(
            "/baremetal/v1/zones/{ZONE}/servers/abc/reboot"
        )))
        .and(header("X-Auth-Token", "secret-token"))
        .and(body_json(
            json!({"boot_type": "rescue", "ssh_key_ids": ["key-1"]}),
        ))
        .respond_with(ResponseTemplate::new(200).set_body_json(server_json("abc", &[])))
        .expect(1)
        .mount(&mock)
        .await;
    client(&mock)
        .reboot_server(ZONE, "abc", BootType::Rescue, &["key-1".into()])
        .await
        .unwrap();
}

#[tokio::test]
async fn lists_servers_across_pages_and_refilters_tags() {
    let mock = MockServer::start().await;
    let p = format!("/baremetal/v1/zones/{ZONE}/servers");
    let page1: Vec<_> = (0..100)
        .map(|i| server_json(&format!("s{i}"), &["cluster=a"]))
        .collect();
    // The API's tag filter is not trusted: one server without the tag slips in.
    let page2 = vec![
        server_json("s100", &["cluster=a"]),
        server_json("other", &["cluster=b"]),
    ];
    Mock::given(method("GET"))
        .and(path(p.clone()))
        .and(query_param("page", "1"))
        .and(query_param("page_size", "100"))
        .and(query_param("tags", "cluster=a"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(json!({"total_count": 102, "servers": page1})),
        )
        .expect(1)
        .mount(&mock)
        .await;
    Mock::given(method("GET"))
        .and(path(p))
        .and(query_param("page", "2"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(json!({"total_count": 102, "servers": page2})),
        )
        .expect(1)
        .mount(&mock)
        .await;
    let filter = ServerFilter {
        tags: vec!["cluster=a".into()],
        ..Default::default()
    };
    let servers = client(&mock).list_servers(ZONE, &filter).await.unwrap();
    assert_eq!(servers.len(), 101);
    assert!(
        servers
            .iter()
            .all(|s| s.tags.contains(&"cluster=a".to_string()))
    );
}

#[tokio::test]
async fn short_listing_is_an_error() {
    let mock = MockServer::start().await;
    let p = format!("/baremetal/v1/zones/{ZONE}/servers");
    Mock::given(method("GET"))
        .and(path(p.clone()))
        .and(query_param("page", "1"))
        .respond_with(ResponseTemplate::new(200).set_body_json(
            json!({"total_count": 3, "servers": [server_json("a", &[]), server_json("b", &[])]}),
        ))
        .mount(&mock)
        .await;
    Mock::given(method("GET"))
        .and(path(p))
        .and(query_param("page", "2"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(json!({"total_count": 3, "servers": []})),
        )
        .mount(&mock)
        .await;
    let err = client(&mock)
        .list_servers(ZONE, &ServerFilter::default())
        .await
        .unwrap_err();
    assert!(matches!(err, ApiError::Inconsistent(_)), "{err:?}");
}

#[tokio::test]
async fn total_count_mismatch_is_an_error() {
    let mock = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/iam/v1alpha1/ssh-keys"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "total_count": 1,
            "ssh_keys": [
                {"id": "k1", "name": "a", "public_key": "ssh-ed25519 AAAA", "project_id": "proj"},
                {"id": "k2", "name": "b", "public_key": "ssh-ed25519 BBBB", "project_id": "proj"}
            ]
        })))
        .mount(&mock)
        .await;
    let err = client(&mock).list_ssh_keys("proj").await.unwrap_err();
    assert!(matches!(err, ApiError::Inconsistent(_)), "{err:?}");
}

#[tokio::test]
async fn lists_hourly_offers_and_ssh_keys() {
    let mock = MockServer::start().await;
    let offers = crate::scaleway::fake::sample_offers(ZONE);
    Mock::given(method("GET"))
        .and(path(format!("/baremetal/v1/zones/{ZONE}/offers")))
        .and(query_param("subscription_period", "hourly"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(json!({"total_count": offers.len(), "offers": offers})),
        )
        .expect(1)
        .mount(&mock)
        .await;
    Mock::given(method("GET"))
        .and(path("/iam/v1alpha1/ssh-keys"))
        .and(query_param("project_id", "proj"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"total_count": 1, "ssh_keys": [
            {"id": "k1", "name": "rescue", "public_key": "ssh-ed25519 AAAA", "fingerprint": "256 MD5:6b:cd (ssh-ed25519)",
             "created_at": "2025-10-24T13:43:11.051888Z", "updated_at": "2025-10-24T13:43:11.051888Z",
             "organization_id": "org", "project_id": "proj", "disabled": false}]})))
        .mount(&mock)
        .await;
    let c = client(&mock);
    let got = c
        .list_offers(ZONE, SubscriptionPeriod::Hourly)
        .await
        .unwrap();
    assert_eq!(got.len(), 4);
    assert_eq!(got[0].price_per_hour.as_ref().unwrap().as_f64(), 0.091);
    let keys = c.list_ssh_keys("proj").await.unwrap();
    assert_eq!(keys[0].id, "k1");
}

#[tokio::test]
async fn rejects_path_injection() {
    let mock = MockServer::start().await;
    let err = client(&mock)
        .get_server(ZONE, "../offers")
        .await
        .unwrap_err();
    assert!(matches!(err, ApiError::Invalid(_)));
    assert!(format!("{:?}", SecretKey::new("secret-token")) == "<redacted>");
}

#[tokio::test]
async fn a_paced_call_that_cannot_wait_its_turn_is_not_sent() {
    let mock = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(format!("/baremetal/v1/zones/{ZONE}/servers")))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(json!({"total_count": 0, "servers": []})),
        )
        .expect(1)
        .mount(&mock)
        .await;
    // One call every 4 s: the second list's turn is further away than a
    // call made for a Karpenter RPC may wait.
    let t = Arc::new(ApiTelemetry::default());
    let c = client(&mock)
        .with_pacing(Some(0.25))
        .with_telemetry(t.clone());
    let filter = ServerFilter::default();
    assert!(c.list_servers(ZONE, &filter).await.unwrap().is_empty());
    let err = c.list_servers(ZONE, &filter).await.unwrap_err();
    assert_eq!(err, ApiError::Throttled);
    assert_eq!(by_endpoint(&t.refused, "GET /servers"), 1);
}

#[tokio::test]
async fn a_read_made_only_if_idle_is_skipped_when_no_turn_is_free() {
    let mock = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(format!("/baremetal/v1/zones/{ZONE}/servers/abc")))
        .respond_with(ResponseTemplate::new(200).set_body_json(server_json("abc", &[])))
        .expect(1)
        .mount(&mock)
        .await;
    // One call every 4 s: the first read takes the free turn, the second
    // finds none and is not sent.
    let t = Arc::new(ApiTelemetry::default());
    let c = client(&mock)
        .with_pacing(Some(0.25))
        .with_telemetry(t.clone());
    let first = c.get_server_if_idle(ZONE, "abc").await.unwrap();
    assert_eq!(first.map(|s| s.id), Some("abc".to_string()));
    assert_eq!(c.get_server_if_idle(ZONE, "abc").await.unwrap(), None);
    assert_eq!(by_endpoint(&t.skipped, "GET /servers/{server_id}"), 1);
}

/// A per-endpoint counter's value (0 when never counted).
fn by_endpoint(
    family: &prometheus_client::metrics::family::Family<
        EndpointLabel,
        prometheus_client::metrics::counter::Counter,
    >,
    endpoint: &'static str,
) -> u64 {
    family
        .get(&EndpointLabel { endpoint })
        .map_or(0, |c| c.get())
}

#[path = "telemetry_tests.rs"]
mod telemetry;
