//! The Block calls the sweeper and Create add, against wiremock: listing by
//! the body's `total_count` (never a shorter list) and setting tags.

use std::time::Duration;

use serde_json::{Value, json};
use wiremock::matchers::{body_json, method, path, query_param};
use wiremock::{Mock, MockServer, ResponseTemplate};

use super::*;
use crate::scaleway::{ClientConfig, RetryPolicy, SecretKey};

const ZONE: &str = "fr-par-2";
const CLUSTER: &str = "karpenter.scaleway.com/cluster=prod";

fn client(server: &MockServer) -> ScalewayClient {
    ScalewayClient::new(ClientConfig {
        api_url: server.uri(),
        secret_key: SecretKey::new("secret-token"),
        // Far above any answer of a local mock, even on a loaded machine: a
        // timeout here would be retried and skew the tests' call counts.
        request_timeout: Duration::from_secs(30),
        retry: RetryPolicy {
            max_attempts: 2,
            base_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(5),
        },
    })
    .unwrap()
}

/// A volume as Block v1 answers it (field names of the Go SDK's `Volume`).
fn volume(id: &str, tags: &[&str]) -> Value {
    json!({
        "id": id, "name": format!("{id}-name"), "type": "sbs_5k", "size": 20000000000u64,
        "project_id": "proj", "created_at": "2026-11-24T10:00:00.000000Z",
        "updated_at": "2026-11-24T10:00:00.000000Z", "references": [],
        "parent_snapshot_id": null, "status": "available", "tags": tags, "zone": ZONE,
        "specs": {"perf_iops": 5000, "class": "sbs"},
        "last_detached_at": "2026-11-24T11:00:00.000000Z", "kms_key_id": null
    })
}

fn list_path() -> String {
    format!("/block/v1/zones/{ZONE}/volumes")
}

fn owned() -> VolumeFilter {
    VolumeFilter {
        tags: vec![CLUSTER.into(), "karpenter.sh/nodeclaim=np-a".into()],
        project_id: Some("proj".into()),
    }
}

#[tokio::test]
async fn lists_every_page_by_the_body_total_and_refilters_the_tags() {
    let mock = MockServer::start().await;
    let pages = [
        vec![volume("v1", &[CLUSTER, "karpenter.sh/nodeclaim=np-a"])],
        // Matches only one of the tags: the API's "one or more" filter
        // lets it through, ours does not.
        vec![volume("v2", &[CLUSTER])],
    ];
    for (n, items) in pages.iter().enumerate() {
        Mock::given(method("GET"))
            .and(path(list_path()))
            .and(query_param("page", (n + 1).to_string()))
            .and(query_param("page_size", "100"))
            .and(query_param("tags", CLUSTER))
            .and(query_param("tags", "karpenter.sh/nodeclaim=np-a"))
            .and(query_param("project_id", "proj"))
            .respond_with(
                ResponseTemplate::new(200)
                    .set_body_json(json!({"volumes": items, "total_count": 2})),
            )
            .expect(1)
            .mount(&mock)
            .await;
    }
    let volumes = client(&mock).list_volumes(ZONE, &owned()).await.unwrap();
    let ids: Vec<&str> = volumes.iter().map(|v| v.id.as_str()).collect();
    assert_eq!(ids, ["v1"]);
    let v = &volumes[0];
    assert_eq!(v.status, VolumeStatus::Available);
    assert!(v.is_detached());
    assert_eq!(
        v.last_detached_at.as_deref(),
        Some("2026-11-24T11:00:00.000000Z")
    );
}

#[tokio::test]
async fn a_short_listing_is_an_error_never_a_shorter_list() {
    let mock = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(list_path()))
        .and(query_param("page", "1"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(json!({"volumes": [volume("v1", &[CLUSTER])], "total_count": 3})),
        )
        .mount(&mock)
        .await;
    // Page 2 answers nothing although one more is due.
    Mock::given(method("GET"))
        .and(path(list_path()))
        .and(query_param("page", "2"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(json!({"volumes": [], "total_count": 3})),
        )
        .mount(&mock)
        .await;
    let err = client(&mock)
        .list_volumes(ZONE, &VolumeFilter::default())
        .await
        .unwrap_err();
    assert!(matches!(err, ApiError::Inconsistent(_)), "{err:?}");

    // An answer without its total is refused too.
    mock.reset().await;
    Mock::given(method("GET"))
        .and(path(list_path()))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({"volumes": []})))
        .mount(&mock)
        .await;
    let err = client(&mock)
        .list_volumes(ZONE, &VolumeFilter::default())
        .await
        .unwrap_err();
    assert!(matches!(err, ApiError::Inconsistent(_)), "{err:?}");
}

#[tokio::test]
async fn tags_are_set_with_a_patch_and_an_unknown_volume_is_not_found() {
    let mock = MockServer::start().await;
    let tags = vec![CLUSTER.to_string(), "karpenter.sh/nodeclaim=np-a".into()];
    Mock::given(method("PATCH"))
        .and(path(format!("/block/v1/zones/{ZONE}/volumes/v1")))
        .and(body_json(json!({ "tags": tags })))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(volume("v1", &[CLUSTER, "karpenter.sh/nodeclaim=np-a"])),
        )
        .expect(1)
        .mount(&mock)
        .await;
    Mock::given(method("PATCH"))
        .and(path(format!("/block/v1/zones/{ZONE}/volumes/gone")))
        .respond_with(ResponseTemplate::new(404).set_body_json(json!({
            "type": "not_found", "message": "resource is not found",
            "resource": "volume", "resource_id": "gone"
        })))
        .mount(&mock)
        .await;
    let c = client(&mock);
    let v = c.update_volume_tags(ZONE, "v1", &tags).await.unwrap();
    assert_eq!(v.tags, tags);
    let err = c.update_volume_tags(ZONE, "gone", &tags).await.unwrap_err();
    assert!(matches!(err, ApiError::NotFound(_)), "{err:?}");
    // A path segment that could change the path is refused before sending.
    let err = c.update_volume_tags(ZONE, "../x", &tags).await.unwrap_err();
    assert!(matches!(err, ApiError::Invalid(_)), "{err:?}");
}

#[tokio::test]
async fn a_volume_update_sends_only_the_fields_set() {
    let mock = MockServer::start().await;
    Mock::given(method("PATCH"))
        .and(path(format!("/block/v1/zones/{ZONE}/volumes/v1")))
        .and(wiremock::matchers::body_json(
            json!({"tags": ["a=b"], "perf_iops": 15000}),
        ))
        .respond_with(ResponseTemplate::new(200).set_body_json(volume("v1", &["a=b"])))
        .expect(1)
        .mount(&mock)
        .await;
    Mock::given(method("PATCH"))
        .and(path(format!("/block/v1/zones/{ZONE}/volumes/v2")))
        .and(wiremock::matchers::body_json(json!({"perf_iops": 5000})))
        .respond_with(ResponseTemplate::new(200).set_body_json(volume("v2", &[])))
        .expect(1)
        .mount(&mock)
        .await;
    let c = client(&mock);
    let both = VolumeUpdate {
        tags: Some(vec!["a=b".into()]),
        perf_iops: Some(15000),
    };
    c.update_volume(ZONE, "v1", &both).await.unwrap();
    let class_only = VolumeUpdate {
        tags: None,
        perf_iops: Some(5000),
    };
    c.update_volume(ZONE, "v2", &class_only).await.unwrap();
}
