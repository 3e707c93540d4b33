//! The Instance and Block calls against wiremock: paths, bodies, paging by
//! `X-Total-Count`, error classes, retries.

use std::time::Duration;

use serde_json::{Value, json};
use wiremock::matchers::{body_json, body_string, header, method, path, query_param};
use wiremock::{Mock, MockServer, ResponseTemplate};

use super::*;
use crate::scaleway::block::{Block, VolumeStatus};
use crate::scaleway::instance::fake::{recorded_availability, recorded_types};
use crate::scaleway::instance::{Arch, ImageFilter, ImageState, ServerState, USER_DATA_KEY};
use crate::scaleway::{ClientConfig, RetryPolicy, SecretKey};

const ZONE: &str = "fr-par-2";
const CREATED: &str =
    include_str!("../../../testdata/instance/server-create-L40S-1-48G-fr-par-2.json");

fn client(server: &MockServer) -> ScalewayClient {
    ScalewayClient::new(ClientConfig {
        api_url: server.uri(),
        secret_key: SecretKey::new("secret-token"),
        // Far above any answer of a local mock, even on a loaded machine: a
        // timeout here would be retried and skew the tests' call counts.
        request_timeout: Duration::from_secs(30),
        retry: RetryPolicy {
            max_attempts: 3,
            base_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(5),
        },
    })
    .unwrap()
}

fn servers_path() -> String {
    format!("/instance/v1/zones/{ZONE}/servers")
}

fn server_json(id: &str, name: &str, tags: &[&str]) -> Value {
    let mut s: Value = serde_json::from_str::<Value>(CREATED).unwrap()["server"].clone();
    s["id"] = json!(id);
    s["name"] = json!(name);
    s["tags"] = json!(tags);
    s["project"] = json!("proj");
    s
}

/// One page of a list: the items, and the total only in the header.
fn page(field: &str, items: Value, total: u64) -> ResponseTemplate {
    ResponseTemplate::new(200)
        .insert_header("X-Total-Count", total.to_string().as_str())
        .set_body_json(json!({ field: items }))
}

#[tokio::test]
async fn lists_types_across_three_pages_by_the_header_total() {
    let mock = MockServer::start().await;
    let p = format!("/instance/v1/zones/{ZONE}/products/servers");
    let recorded: Value = serde_json::to_value(recorded_types()).unwrap();
    for (n, name) in ["POP2-2C-8G", "L4-1-24G", "H100-SXM-2-80G"]
        .iter()
        .enumerate()
    {
        Mock::given(method("GET"))
            .and(path(p.clone()))
            .and(query_param("page", (n + 1).to_string()))
            .and(query_param("per_page", "100"))
            .and(header("X-Auth-Token", "secret-token"))
            .respond_with(page("servers", json!({ *name: recorded[*name] }), 3))
            .expect(1)
            .mount(&mock)
            .await;
    }
    let types = client(&mock).list_server_types(ZONE).await.unwrap();
    assert_eq!(types, recorded_types());
    assert_eq!(types["L4-1-24G"].arch, Arch::X86_64);
}

#[tokio::test]
async fn lists_availability_by_the_header_total() {
    let mock = MockServer::start().await;
    let body: Value = serde_json::from_str(include_str!(
        "../../../testdata/instance/products-servers-availability-fr-par-2.excerpt.json"
    ))
    .unwrap();
    Mock::given(method("GET"))
        .and(path(format!(
            "/instance/v1/zones/{ZONE}/products/servers/availability"
        )))
        .respond_with(
            ResponseTemplate::new(200)
                .insert_header("X-Total-Count", "6")
                .set_body_json(body),
        )
        .expect(1)
        .mount(&mock)
        .await;
    let got = client(&mock).list_server_availability(ZONE).await.unwrap();
    assert_eq!(got, recorded_availability());
}

#[tokio::test]
async fn lists_servers_across_three_pages_and_refilters_name_and_tags() {
    let mock = MockServer::start().await;
    let pages = [
        json!([
            server_json("a", "node-a", &["k=1", "c=x"]),
            server_json("b", "node-a", &["k=1", "c=x"])
        ]),
        // The API's name filter is a substring match.
        json!([server_json("c", "node-ab", &["k=1", "c=x"])]),
        json!([server_json("d", "node-a", &["k=1", "c=x"])]),
    ];
    for (n, items) in pages.into_iter().enumerate() {
        Mock::given(method("GET"))
            .and(path(servers_path()))
            .and(query_param("page", (n + 1).to_string()))
            .and(query_param("tags", "k=1,c=x"))
            .and(query_param("name", "node-a"))
            .and(query_param("project", "proj"))
            .respond_with(page("servers", items, 4))
            .expect(1)
            .mount(&mock)
            .await;
    }
    let filter = ServerFilter {
        tags: vec!["k=1".into(), "c=x".into()],
        name: Some("node-a".into()),
        project: Some("proj".into()),
    };
    let servers = client(&mock).list_servers(ZONE, &filter).await.unwrap();
    let ids: Vec<&str> = servers.iter().map(|s| s.id.as_str()).collect();
    assert_eq!(ids, ["a", "b", "d"], "node-ab is not node-a");
}

#[tokio::test]
async fn a_short_page_is_inconsistent_never_a_shorter_list() {
    let mock = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(servers_path()))
        .and(query_param("page", "1"))
        .respond_with(page(
            "servers",
            json!([server_json("a", "n", &[]), server_json("b", "n", &[])]),
            3,
        ))
        .mount(&mock)
        .await;
    Mock::given(method("GET"))
        .and(path(servers_path()))
        .and(query_param("page", "2"))
        .respond_with(page("servers", json!([]), 3))
        .mount(&mock)
        .await;
    let err = client(&mock)
        .list_servers(ZONE, &ServerFilter::default())
        .await
        .unwrap_err();
    assert!(matches!(err, ApiError::Inconsistent(_)), "{err:?}");
}

#[tokio::test]
async fn a_list_disagreeing_with_its_header_is_inconsistent() {
    let cases: Vec<(&str, ResponseTemplate, ResponseTemplate)> = vec![
        (
            "no header",
            ResponseTemplate::new(200).set_body_json(json!({"servers": []})),
            ResponseTemplate::new(200).set_body_json(json!({"servers": []})),
        ),
        (
            "more items than announced",
            page(
                "servers",
                json!([server_json("a", "n", &[]), server_json("b", "n", &[])]),
                1,
            ),
            page("servers", json!([]), 1),
        ),
        (
            "total moved while paging",
            page("servers", json!([server_json("a", "n", &[])]), 2),
            page("servers", json!([server_json("b", "n", &[])]), 3),
        ),
    ];
    for (what, first, second) in cases {
        let mock = MockServer::start().await;
        Mock::given(method("GET"))
            .and(query_param("page", "1"))
            .respond_with(first)
            .mount(&mock)
            .await;
        Mock::given(method("GET"))
            .and(query_param("page", "2"))
            .respond_with(second)
            .mount(&mock)
            .await;
        let err = client(&mock)
            .list_servers(ZONE, &ServerFilter::default())
            .await
            .unwrap_err();
        assert!(matches!(err, ApiError::Inconsistent(_)), "{what}: {err:?}");
    }
}

#[tokio::test]
async fn a_type_listed_on_two_pages_is_inconsistent() {
    let mock = MockServer::start().await;
    let recorded: Value = serde_json::to_value(recorded_types()).unwrap();
    let one = json!({"POP2-2C-8G": recorded["POP2-2C-8G"]});
    for n in ["1", "2"] {
        Mock::given(method("GET"))
            .and(query_param("page", n))
            .respond_with(page("servers", one.clone(), 2))
            .mount(&mock)
            .await;
    }
    let err = client(&mock).list_server_types(ZONE).await.unwrap_err();
    assert!(matches!(err, ApiError::Inconsistent(_)), "{err:?}");
}

async fn get_error(status: u16, body: Value) -> ApiError {
    let mock = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(status).set_body_json(body))
        .mount(&mock)
        .await;
    client(&mock).get_server(ZONE, "abc").await.unwrap_err()
}

type Check = fn(&ApiError) -> bool;

#[tokio::test]
async fn classifies_every_instance_error_body() {
    let cases: Vec<(u16, Value, Check)> = vec![
        (
            404,
            json!({"type": "not_found", "message": "resource is not found", "resource": "instance_server", "resource_id": "abc"}),
            |e| matches!(e, ApiError::NotFound(m) if m.contains("resource_id=abc")),
        ),
        (
            403,
            json!({"type": "invalid_request_error", "message": "Quota exceeded for this resource.", "resource": "compute_servers_type_pop2_2c_8g_available"}),
            |e| matches!(e, ApiError::QuotaExceeded(m) if m.contains("pop2_2c_8g")),
        ),
        (
            403,
            json!({"type": "quotas_exceeded", "message": "quota(s) exceeded for this resource", "details": [{"resource": "instances_servers", "quota": 2, "current": 2}]}),
            |e| matches!(e, ApiError::QuotaExceeded(_)),
        ),
        (
            412,
            json!({"type": "out_of_stock", "resource": "L40S-1-48G", "message": "resource is out of stock"}),
            |e| matches!(e, ApiError::OutOfStock(_)),
        ),
        (
            400,
            json!({"type": "invalid_arguments", "message": "invalid argument(s)", "details": [{"argument_name": "commercial_type", "reason": "required", "help_message": "required key not provided"}]}),
            |e| matches!(e, ApiError::Invalid(m) if m.contains("commercial_type") && m.contains("required")),
        ),
        (
            400,
            json!({"type": "invalid_request_error", "message": "server should be running"}),
            |e| matches!(e, ApiError::TransientState(_)),
        ),
        (
            400,
            json!({"type": "invalid_request_error", "message": "Volume size is too small"}),
            |e| matches!(e, ApiError::Invalid(_)),
        ),
        (
            409,
            json!({"type": "transient_state", "message": "resource is in a transient state", "resource": "instance_server", "resource_id": "abc", "current_state": "starting"}),
            |e| matches!(e, ApiError::TransientState(_)),
        ),
        (
            403,
            json!({"type": "locked", "message": "resource is locked", "resource": "instance_server", "resource_id": "abc"}),
            |e| matches!(e, ApiError::Invalid(m) if m.contains("locked")),
        ),
        (
            403,
            json!({"type": "permissions_denied", "message": "insufficient permissions", "details": [{"resource": "instance", "action": "read"}]}),
            |e| matches!(e, ApiError::Unauthorized(_)),
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
async fn an_action_in_the_wrong_state_is_retried_then_reported_transient() {
    let mock = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(format!("{}/abc/action", servers_path())))
        .and(body_json(json!({"action": "terminate"})))
        .respond_with(ResponseTemplate::new(400).set_body_json(
            json!({"type": "invalid_request_error", "message": "server should be running"}),
        ))
        .expect(3)
        .mount(&mock)
        .await;
    let err = client(&mock)
        .server_action(ZONE, "abc", ServerAction::Terminate)
        .await
        .unwrap_err();
    assert!(matches!(err, ApiError::TransientState(_)), "{err:?}");
}

#[tokio::test]
async fn poweron_answers_the_pending_task() {
    let mock = MockServer::start().await;
    Mock::given(method("POST"))
        .and(path(format!("{}/abc/action", servers_path())))
        .and(body_json(json!({"action": "poweron"})))
        .respond_with(ResponseTemplate::new(202).set_body_json(json!({"task": {
            "id": "t-1", "description": "server_batch_poweron", "status": "pending",
            "href_from": "/servers/abc/action", "href_result": "/servers/abc",
            "progress": 0, "started_at": "2026-07-30T12:53:20.000000+00:00",
            "terminated_at": null, "zone": ZONE}})))
        .expect(1)
        .mount(&mock)
        .await;
    let task = client(&mock)
        .server_action(ZONE, "abc", ServerAction::Poweron)
        .await
        .unwrap();
    assert_eq!((task.id.as_str(), task.status.as_str()), ("t-1", "pending"));
}

#[tokio::test]
async fn user_data_travels_raw_as_text_plain() {
    let mock = MockServer::start().await;
    let p = format!("{}/abc/user_data/{USER_DATA_KEY}", servers_path());
    let config = "version: v1alpha1\nmachine:\n  token: abc.0123456789abcdef\n";
    Mock::given(method("PATCH"))
        .and(path(p.clone()))
        .and(header("content-type", "text/plain"))
        .and(header("X-Auth-Token", "secret-token"))
        .and(body_string(config))
        .respond_with(ResponseTemplate::new(204))
        .expect(1)
        .mount(&mock)
        .await;
    Mock::given(method("GET"))
        .and(path(p.clone()))
        .respond_with(
            ResponseTemplate::new(200)
                .insert_header("content-type", "text/plain")
                .set_body_string(config),
        )
        .expect(1)
        .mount(&mock)
        .await;
    Mock::given(method("DELETE"))
        .and(path(p))
        .respond_with(ResponseTemplate::new(204))
        .expect(1)
        .mount(&mock)
        .await;
    let c = client(&mock);
    c.set_user_data(ZONE, "abc", USER_DATA_KEY, config)
        .await
        .unwrap();
    assert_eq!(
        c.get_user_data(ZONE, "abc", USER_DATA_KEY).await.unwrap(),
        config
    );
    c.delete_user_data(ZONE, "abc", USER_DATA_KEY)
        .await
        .unwrap();
}

#[tokio::test]
async fn missing_user_data_is_not_found() {
    let mock = MockServer::start().await;
    // The API answers an empty 404.
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(404))
        .mount(&mock)
        .await;
    let err = client(&mock)
        .get_user_data(ZONE, "abc", USER_DATA_KEY)
        .await
        .unwrap_err();
    assert!(matches!(err, ApiError::NotFound(_)), "{err:?}");
}

#[tokio::test]
async fn create_sends_the_request_and_reads_the_201() {
    let mock = MockServer::start().await;
    let req =
        CreateServerRequest::new("node-a", "L40S-1-48G", "proj").with_sbs_root(20_000_000_000);
    Mock::given(method("POST"))
        .and(path(servers_path()))
        .and(body_json(serde_json::to_value(&req).unwrap()))
        .respond_with(
            ResponseTemplate::new(201)
                .insert_header("Location", "/servers/6bc4b49b-bd60-4d64-8ffc-9346f18ef88b")
                .set_body_raw(CREATED, "application/json"),
        )
        .expect(1)
        .mount(&mock)
        .await;
    let server = client(&mock).create_server(ZONE, &req).await.unwrap();
    assert_eq!(server.state, ServerState::Stopped);
    assert_eq!(server.commercial_type, "L40S-1-48G");
}

#[tokio::test]
async fn create_is_not_retried_on_5xx_but_is_on_429() {
    let req = CreateServerRequest::new("node-a", "POP2-2C-8G", "proj");
    let mock = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(502))
        .expect(1)
        .mount(&mock)
        .await;
    let err = client(&mock).create_server(ZONE, &req).await.unwrap_err();
    assert!(matches!(err, ApiError::Unavailable(_)), "{err:?}");

    let mock = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(429))
        .up_to_n_times(1)
        .expect(1)
        .mount(&mock)
        .await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(201).set_body_raw(CREATED, "application/json"))
        .expect(1)
        .mount(&mock)
        .await;
    assert!(client(&mock).create_server(ZONE, &req).await.is_ok());
}

#[tokio::test]
async fn reads_are_retried_on_429_and_5xx() {
    let mock = MockServer::start().await;
    let p = format!("{}/abc", servers_path());
    Mock::given(method("GET"))
        .and(path(p.clone()))
        .respond_with(ResponseTemplate::new(429))
        .up_to_n_times(1)
        .expect(1)
        .mount(&mock)
        .await;
    Mock::given(method("GET"))
        .and(path(p.clone()))
        .respond_with(ResponseTemplate::new(503).set_body_string("upstream down"))
        .up_to_n_times(1)
        .expect(1)
        .mount(&mock)
        .await;
    Mock::given(method("GET"))
        .and(path(p))
        .respond_with(ResponseTemplate::new(200).set_body_raw(CREATED, "application/json"))
        .expect(1)
        .mount(&mock)
        .await;
    let server = client(&mock).get_server(ZONE, "abc").await.unwrap();
    assert_eq!(server.id, "6bc4b49b-bd60-4d64-8ffc-9346f18ef88b");

    // A list page is retried the same way.
    let mock = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(ResponseTemplate::new(500))
        .up_to_n_times(2)
        .expect(2)
        .mount(&mock)
        .await;
    Mock::given(method("GET"))
        .respond_with(page("servers", json!([]), 0))
        .expect(1)
        .mount(&mock)
        .await;
    let servers = client(&mock)
        .list_servers(ZONE, &ServerFilter::default())
        .await
        .unwrap();
    assert!(servers.is_empty());
}

#[tokio::test]
async fn patches_deletes_and_releases() {
    let mock = MockServer::start().await;
    Mock::given(method("PATCH"))
        .and(path(format!("{}/abc", servers_path())))
        .and(body_json(json!({"tags": ["a", "b"]})))
        .respond_with(ResponseTemplate::new(200).set_body_raw(CREATED, "application/json"))
        .expect(1)
        .mount(&mock)
        .await;
    Mock::given(method("DELETE"))
        .and(path(format!("{}/abc", servers_path())))
        .respond_with(ResponseTemplate::new(204))
        .expect(1)
        .mount(&mock)
        .await;
    Mock::given(method("DELETE"))
        .and(path(format!("/instance/v1/zones/{ZONE}/ips/ip-1")))
        .respond_with(ResponseTemplate::new(204))
        .expect(1)
        .mount(&mock)
        .await;
    let c = client(&mock);
    let patch = ServerPatch {
        tags: Some(vec!["a".into(), "b".into()]),
        ..Default::default()
    };
    c.update_server(ZONE, "abc", &patch).await.unwrap();
    c.delete_server(ZONE, "abc").await.unwrap();
    c.delete_ip(ZONE, "ip-1").await.unwrap();
    let err = c.get_user_data(ZONE, "abc", "../x").await.unwrap_err();
    assert!(matches!(err, ApiError::Invalid(_)), "{err:?}");
}

#[tokio::test]
async fn block_volumes_are_read_and_deleted_and_an_attached_one_is_transient() {
    let mock = MockServer::start().await;
    let p = format!("/block/v1/zones/{ZONE}/volumes/vol-1");
    Mock::given(method("GET"))
        .and(path(p.clone()))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "id": "vol-1", "name": "node-a-root", "type": "sbs_5k", "size": 20_000_000_000u64,
            "project_id": "proj", "created_at": "2026-07-30T12:53:15Z", "updated_at": "2026-07-30T12:53:15Z",
            "references": [{"id": "r1", "product_resource_type": "instance_server",
                            "product_resource_id": "abc", "created_at": "2026-07-30T12:53:15Z",
                            "type": "exclusive", "status": "attached"}],
            "parent_snapshot_id": "snap-1", "status": "in_use", "tags": [], "zone": ZONE,
            "specs": {"perf_iops": 5000, "class": "sbs"}, "last_detached_at": null})))
        .expect(1)
        .mount(&mock)
        .await;
    Mock::given(method("DELETE"))
        .and(path(p.clone()))
        .respond_with(ResponseTemplate::new(412).set_body_json(json!({
            "type": "precondition_failed", "precondition": "resource_still_in_use",
            "help_message": "detach the volume first", "message": "precondition is not respected"})))
        .up_to_n_times(1)
        .expect(1)
        .mount(&mock)
        .await;
    Mock::given(method("DELETE"))
        .and(path(p))
        .respond_with(ResponseTemplate::new(204))
        .expect(1)
        .mount(&mock)
        .await;
    let c = client(&mock);
    let v = c.get_volume(ZONE, "vol-1").await.unwrap();
    assert_eq!(v.status, VolumeStatus::InUse);
    assert_eq!(v.references[0].product_resource_id, "abc");
    assert_eq!(v.size, 20_000_000_000);
    // Still attached at first: transient, retried, then deleted.
    c.delete_volume(ZONE, "vol-1").await.unwrap();
}

#[test]
fn a_user_data_body_never_shows_in_debug() {
    let secret = "token: abc.0123456789abcdef";
    let printed = format!("{:?}", crate::scaleway::http::Body::Text(secret));
    assert!(!printed.contains("0123456789abcdef"), "{printed}");
    assert!(printed.contains(&secret.len().to_string()), "{printed}");
}

fn image_json(id: &str, name: &str, arch: &str, tags: &[&str]) -> Value {
    json!({
        "id": id, "name": name, "arch": arch, "state": "available", "tags": tags,
        "project": "proj", "public": false, "zone": ZONE,
        "creation_date": "2026-07-01T10:00:00.000000+00:00",
        "root_volume": {"id": "snap", "name": "talos", "size": 10000000000u64, "volume_type": "sbs_snapshot"},
        "extra_volumes": {}, "from_server": null, "organization": "org"
    })
}

#[tokio::test]
async fn lists_images_across_pages_by_the_header_total_and_refilters() {
    let mock = MockServer::start().await;
    let p = format!("/instance/v1/zones/{ZONE}/images");
    let pages = [
        json!([
            image_json("i1", "talos-v1.13.9", "x86_64", &["talos", "v1.13.9"]),
            // The API's name filter matches more than the exact name.
            image_json("i2", "talos-v1.13.9-old", "x86_64", &["talos", "v1.13.9"]),
        ]),
        json!([image_json("i3", "talos-v1.13.9", "x86_64", &["talos"])]),
    ];
    for (n, items) in pages.into_iter().enumerate() {
        Mock::given(method("GET"))
            .and(path(p.clone()))
            .and(query_param("page", (n + 1).to_string()))
            .and(query_param("name", "talos-v1.13.9"))
            .and(query_param("tags", "talos,v1.13.9"))
            .and(query_param("project", "proj"))
            .and(query_param("arch", "x86_64"))
            .respond_with(page("images", items, 3))
            .expect(1)
            .mount(&mock)
            .await;
    }
    let filter = ImageFilter {
        name: Some("talos-v1.13.9".into()),
        tags: vec!["talos".into(), "v1.13.9".into()],
        project: Some("proj".into()),
        arch: Some(Arch::X86_64),
    };
    let images = client(&mock).list_images(ZONE, &filter).await.unwrap();
    let ids: Vec<&str> = images.iter().map(|i| i.id.as_str()).collect();
    assert_eq!(ids, ["i1"], "only the exact name carrying both tags");
    assert_eq!(images[0].state, ImageState::Available);
    assert_eq!(
        images[0].creation_date.as_deref(),
        Some("2026-07-01T10:00:00.000000+00:00")
    );
}

#[tokio::test]
async fn an_image_list_short_of_its_header_is_inconsistent() {
    let mock = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(format!("/instance/v1/zones/{ZONE}/images")))
        .and(query_param("page", "1"))
        .respond_with(page(
            "images",
            json!([image_json("i1", "talos", "arm64", &[])]),
            2,
        ))
        .mount(&mock)
        .await;
    Mock::given(method("GET"))
        .and(path(format!("/instance/v1/zones/{ZONE}/images")))
        .and(query_param("page", "2"))
        .respond_with(page("images", json!([]), 2))
        .mount(&mock)
        .await;
    let err = client(&mock)
        .list_images(ZONE, &ImageFilter::default())
        .await
        .unwrap_err();
    assert!(matches!(err, ApiError::Inconsistent(_)), "{err:?}");
}

#[tokio::test]
async fn gets_an_image_and_a_security_group_or_not_found() {
    let mock = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(format!("/instance/v1/zones/{ZONE}/images/i1")))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(json!({"image": image_json("i1", "talos", "arm64", &[])})),
        )
        .mount(&mock)
        .await;
    Mock::given(method("GET"))
        .and(path(format!("/instance/v1/zones/{ZONE}/security_groups/sg1")))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"security_group": {
            "id": "sg1", "name": "nodes", "project": "proj", "zone": ZONE,
            "inbound_default_policy": "accept", "outbound_default_policy": "accept", "stateful": true
        }})))
        .mount(&mock)
        .await;
    Mock::given(method("GET"))
        .and(path(format!(
            "/instance/v1/zones/{ZONE}/security_groups/gone"
        )))
        .respond_with(ResponseTemplate::new(404).set_body_json(json!({
            "type": "not_found", "message": "resource is not found",
            "resource": "instance_security_group", "resource_id": "gone"
        })))
        .mount(&mock)
        .await;
    let c = client(&mock);
    let image = c.get_image(ZONE, "i1").await.unwrap();
    assert_eq!((image.name.as_str(), image.arch), ("talos", Arch::Arm64));
    let group = c.get_security_group(ZONE, "sg1").await.unwrap();
    assert_eq!(group.name, "nodes");
    let err = c.get_security_group(ZONE, "gone").await.unwrap_err();
    assert!(matches!(err, ApiError::NotFound(_)), "{err:?}");
    // Unmatched path: wiremock answers 404 without a body.
    let err = c.get_image(ZONE, "other").await.unwrap_err();
    assert!(matches!(err, ApiError::NotFound(_)), "{err:?}");
}
