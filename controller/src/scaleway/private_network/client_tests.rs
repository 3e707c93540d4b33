//! The Private Network calls against wiremock: paths, queries and bodies as
//! scaleway-sdk-go v1.39.0 sends them, all-or-error paging, 404 on deletes,
//! error classes and retries.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use wiremock::matchers::{body_json, header, method, path, query_param, query_param_is_missing};
use wiremock::{Mock, MockServer, Request as Received, ResponseTemplate};

use super::*;
use crate::scaleway::private_network::{AttachmentStatus, IpResourceType, PrivateNicState};
use crate::scaleway::telemetry::{ApiTelemetry, CallLabels};
use crate::scaleway::{ClientConfig, OptionStatus, RetryPolicy, SecretKey};

const ZONE: &str = "fr-par-2";
const REGION: &str = "fr-par";

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

fn pn_json(id: &str, name: &str, tags: &[&str]) -> Value {
    json!({
        "id": id, "name": name, "organization_id": "org", "project_id": "proj",
        "region": REGION, "tags": tags, "created_at": "2026-10-01T10:00:00Z",
        "updated_at": "2026-10-01T10:00:00Z", "vpc_id": "vpc-1", "dhcp_enabled": true,
        "default_route_propagation_enabled": false, "has_s3_integration": false,
        "subnets": [{"id": format!("{id}-s4"), "subnet": "172.16.0.0/22", "project_id": "proj",
                     "private_network_id": id, "vpc_id": "vpc-1", "region": REGION,
                     "created_at": "2026-10-01T10:00:00Z", "updated_at": "2026-10-01T10:00:00Z"}]
    })
}

fn attachment_json(id: &str, server: &str, pn: &str, status: &str, vlan: Option<u32>) -> Value {
    json!({
        "id": id, "project_id": "proj", "server_id": server, "private_network_id": pn,
        "vlan": vlan, "status": status, "created_at": "2026-10-01T10:00:00Z",
        "updated_at": "2026-10-01T10:00:00Z", "ipam_ip_ids": ["ip-1"]
    })
}

fn ip_json(id: &str, address: &str, resource: Option<&str>) -> Value {
    json!({
        "id": id, "address": address, "project_id": "proj", "is_ipv6": false,
        "created_at": "2026-10-01T10:00:00Z", "updated_at": "2026-10-01T10:00:00Z",
        "source": {"private_network_id": "pn-1", "subnet_id": "pn-1-s4"},
        "resource": resource.map(|r| json!({"type": "baremetal_private_nic", "id": r,
                                            "mac_address": null, "name": null})),
        "tags": ["node=a"], "reverses": [], "region": REGION, "zone": ZONE
    })
}

fn nic_json(id: &str, server: &str, state: &str) -> Value {
    json!({
        "id": id, "server_id": server, "private_network_id": "pn-1",
        "mac_address": "02:00:00:00:12:23", "state": state, "tags": [],
        "creation_date": "2026-10-01T10:00:00.000000+00:00", "zone": ZONE,
        "ipam_ip_ids": ["ip-1"]
    })
}

/// The query pairs of a received request, in order.
fn pairs(req: &Received) -> Vec<(String, String)> {
    req.url
        .query_pairs()
        .map(|(k, v)| (k.into_owned(), v.into_owned()))
        .collect()
}

#[tokio::test]
async fn lists_private_networks_across_pages_with_the_sdk_query_and_refilters() {
    let mock = MockServer::start().await;
    let p = format!("/vpc/v2/regions/{REGION}/private-networks");
    let pages = [
        json!([
            pn_json("pn-1", "prod", &["k8s", "a"]),
            // The API's name filter is a substring match, its tags any one.
            pn_json("pn-2", "prod-old", &["k8s", "a"]),
        ]),
        json!([pn_json("pn-3", "prod", &["k8s"])]),
    ];
    for (n, items) in pages.into_iter().enumerate() {
        Mock::given(method("GET"))
            .and(path(p.clone()))
            .and(header("X-Auth-Token", "secret-token"))
            .and(query_param("page", (n + 1).to_string()))
            .and(query_param("page_size", "100"))
            .and(query_param("order_by", "created_at_asc"))
            .and(query_param("name", "prod"))
            .and(query_param("project_id", "proj"))
            .respond_with(
                ResponseTemplate::new(200)
                    .set_body_json(json!({"private_networks": items, "total_count": 3})),
            )
            .expect(1)
            .mount(&mock)
            .await;
    }
    let filter = PrivateNetworkFilter {
        name: Some("prod".into()),
        tags: vec!["k8s".into(), "a".into()],
        project_id: Some("proj".into()),
        ..Default::default()
    };
    let pns = client(&mock)
        .list_private_networks(REGION, &filter)
        .await
        .unwrap();
    let ids: Vec<&str> = pns.iter().map(|p| p.id.as_str()).collect();
    assert_eq!(ids, ["pn-1"]);
    assert_eq!(pns[0].cidrs(), ["172.16.0.0/22"]);
    // Tags are a repeated parameter, as the SDK sends them.
    let received = mock.received_requests().await.unwrap();
    let tags: Vec<String> = pairs(&received[0])
        .into_iter()
        .filter(|(k, _)| k == "tags")
        .map(|(_, v)| v)
        .collect();
    assert_eq!(tags, ["k8s", "a"]);
}

#[tokio::test]
async fn lists_private_networks_by_ids_as_a_repeated_parameter() {
    let mock = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(format!("/vpc/v2/regions/{REGION}/private-networks")))
        .and(query_param_is_missing("name"))
        .and(query_param_is_missing("tags"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "private_networks": [pn_json("pn-1", "a", &[]), pn_json("pn-9", "b", &[])],
            "total_count": 2
        })))
        .expect(1)
        .mount(&mock)
        .await;
    let filter = PrivateNetworkFilter {
        ids: vec!["pn-1".into(), "pn-2".into()],
        ..Default::default()
    };
    let pns = client(&mock)
        .list_private_networks(REGION, &filter)
        .await
        .unwrap();
    assert_eq!(pns.len(), 1, "pn-9 was not asked for");
    let received = mock.received_requests().await.unwrap();
    let ids: Vec<String> = pairs(&received[0])
        .into_iter()
        .filter(|(k, _)| k == "private_network_ids")
        .map(|(_, v)| v)
        .collect();
    assert_eq!(ids, ["pn-1", "pn-2"]);
}

#[tokio::test]
async fn gets_a_private_network_or_not_found() {
    let mock = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(format!(
            "/vpc/v2/regions/{REGION}/private-networks/pn-1"
        )))
        .respond_with(ResponseTemplate::new(200).set_body_json(pn_json("pn-1", "prod", &[])))
        .mount(&mock)
        .await;
    Mock::given(method("GET"))
        .and(path(format!(
            "/vpc/v2/regions/{REGION}/private-networks/gone"
        )))
        .respond_with(ResponseTemplate::new(404).set_body_json(json!({
            "type": "not_found", "message": "resource is not found",
            "resource": "private_network", "resource_id": "gone"})))
        .mount(&mock)
        .await;
    let c = client(&mock);
    assert_eq!(
        c.get_private_network(REGION, "pn-1").await.unwrap().name,
        "prod"
    );
    let err = c.get_private_network(REGION, "gone").await.unwrap_err();
    assert!(matches!(err, ApiError::NotFound(m) if m.contains("resource_id=gone")));
    let err = c.get_private_network("fr/par", "pn-1").await.unwrap_err();
    assert!(matches!(err, ApiError::Invalid(_)), "{err:?}");
}

#[tokio::test]
async fn a_private_network_list_that_breaks_its_total_is_inconsistent() {
    let cases: Vec<(&str, Value, Value)> = vec![
        (
            "short page",
            json!({"private_networks": [pn_json("a", "a", &[])], "total_count": 2}),
            json!({"private_networks": [], "total_count": 2}),
        ),
        (
            "more items than announced",
            json!({"private_networks": [pn_json("a", "a", &[]), pn_json("b", "b", &[])], "total_count": 1}),
            json!({"private_networks": [], "total_count": 1}),
        ),
        (
            "total moved while paging",
            json!({"private_networks": [pn_json("a", "a", &[])], "total_count": 2}),
            json!({"private_networks": [pn_json("b", "b", &[])], "total_count": 3}),
        ),
        (
            "no total",
            json!({"private_networks": []}),
            json!({"private_networks": []}),
        ),
    ];
    for (what, first, second) in cases {
        let mock = MockServer::start().await;
        Mock::given(method("GET"))
            .and(query_param("page", "1"))
            .respond_with(ResponseTemplate::new(200).set_body_json(first))
            .mount(&mock)
            .await;
        Mock::given(method("GET"))
            .and(query_param("page", "2"))
            .respond_with(ResponseTemplate::new(200).set_body_json(second))
            .mount(&mock)
            .await;
        let err = client(&mock)
            .list_private_networks(REGION, &PrivateNetworkFilter::default())
            .await
            .unwrap_err();
        assert!(matches!(err, ApiError::Inconsistent(_)), "{what}: {err:?}");
    }
}

#[tokio::test]
async fn lists_ipam_ips_by_network_resource_and_ids() {
    let mock = MockServer::start().await;
    let p = format!("/ipam/v1/regions/{REGION}/ips");
    Mock::given(method("GET"))
        .and(path(p.clone()))
        .and(query_param("order_by", "created_at_asc"))
        .and(query_param("private_network_id", "pn-1"))
        .and(query_param("resource_id", "a-1"))
        .and(query_param("resource_type", "baremetal_private_nic"))
        .and(query_param("page", "1"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "total_count": 2,
            "ips": [ip_json("ip-1", "172.16.0.7/22", Some("a-1")),
                    ip_json("ip-2", "172.16.0.8/22", Some("a-2"))]
        })))
        .expect(1)
        .mount(&mock)
        .await;
    Mock::given(method("GET"))
        .and(path(p))
        .and(query_param_is_missing("resource_id"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "total_count": 1, "ips": [ip_json("ip-2", "172.16.0.8/22", None)]
        })))
        .expect(1)
        .mount(&mock)
        .await;
    let c = client(&mock);
    let filter = IpFilter {
        private_network_id: Some("pn-1".into()),
        resource_id: Some("a-1".into()),
        resource_type: Some(IpResourceType::BaremetalPrivateNic),
        ..Default::default()
    };
    let ips = c.list_ips(REGION, &filter).await.unwrap();
    assert_eq!(ips.len(), 1, "a-2's address is refiltered out");
    assert_eq!(ips[0].ip(), "172.16.0.7");
    let by_ids = IpFilter {
        ip_ids: vec!["ip-2".into(), "ip-3".into()],
        ..Default::default()
    };
    let ips = c.list_ips(REGION, &by_ids).await.unwrap();
    assert_eq!(ips[0].id, "ip-2");
    let received = mock.received_requests().await.unwrap();
    let ids: Vec<String> = pairs(&received[1])
        .into_iter()
        .filter(|(k, _)| k == "ip_ids")
        .map(|(_, v)| v)
        .collect();
    assert_eq!(ids, ["ip-2", "ip-3"]);
}

#[tokio::test]
async fn books_gets_and_releases_an_address() {
    let mock = MockServer::start().await;
    let p = format!("/ipam/v1/regions/{REGION}/ips");
    Mock::given(method("POST"))
        .and(path(p.clone()))
        .and(body_json(json!({
            "project_id": "proj", "source": {"private_network_id": "pn-1"},
            "is_ipv6": false, "tags": ["node=a"]
        })))
        .respond_with(ResponseTemplate::new(200).set_body_json(ip_json(
            "ip-1",
            "172.16.0.7/22",
            None,
        )))
        .expect(1)
        .mount(&mock)
        .await;
    Mock::given(method("GET"))
        .and(path(format!("{p}/ip-1")))
        .respond_with(ResponseTemplate::new(200).set_body_json(ip_json(
            "ip-1",
            "172.16.0.7/22",
            None,
        )))
        .expect(1)
        .mount(&mock)
        .await;
    Mock::given(method("DELETE"))
        .and(path(format!("{p}/ip-1")))
        .respond_with(ResponseTemplate::new(204))
        .expect(1)
        .mount(&mock)
        .await;
    Mock::given(method("DELETE"))
        .and(path(format!("{p}/gone")))
        .respond_with(ResponseTemplate::new(404).set_body_json(json!({
            "type": "not_found", "message": "resource is not found",
            "resource": "ip", "resource_id": "gone"})))
        .expect(1)
        .mount(&mock)
        .await;
    let c = client(&mock);
    let req = BookIpRequest::new("proj", "pn-1", vec!["node=a".into()]);
    let ip = c.book_ip(REGION, &req).await.unwrap();
    assert!(ip.resource.is_none());
    assert_eq!(
        c.get_ip(REGION, "ip-1").await.unwrap().address,
        "172.16.0.7/22"
    );
    c.release_ip(REGION, "ip-1").await.unwrap();
    c.release_ip(REGION, "gone").await.unwrap();
}

#[tokio::test]
async fn a_booking_is_never_repeated_after_a_5xx_and_quota_is_capacity() {
    let mock = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(500))
        .expect(1)
        .mount(&mock)
        .await;
    let req = BookIpRequest::new("proj", "pn-1", Vec::new());
    let err = client(&mock).book_ip(REGION, &req).await.unwrap_err();
    assert!(matches!(err, ApiError::Unavailable(_)), "{err:?}");

    let mock = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(403).set_body_json(json!({
            "type": "quotas_exceeded", "message": "quota(s) exceeded for this resource",
            "details": [{"resource": "ipam_ips", "quota": 10, "current": 10}]})))
        .expect(1)
        .mount(&mock)
        .await;
    let err = client(&mock).book_ip(REGION, &req).await.unwrap_err();
    assert!(err.is_insufficient_capacity(), "{err:?}");
}

#[tokio::test]
async fn calls_are_counted_under_their_api_and_endpoint_template() {
    let mock = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(format!("/ipam/v1/regions/{REGION}/ips/ip-1")))
        .respond_with(ResponseTemplate::new(200).set_body_json(ip_json(
            "ip-1",
            "172.16.0.7/22",
            None,
        )))
        .mount(&mock)
        .await;
    Mock::given(method("GET"))
        .and(path(format!(
            "/vpc/v2/regions/{REGION}/private-networks/pn-1"
        )))
        .respond_with(ResponseTemplate::new(503))
        .mount(&mock)
        .await;
    let t = Arc::new(ApiTelemetry::default());
    let c = client(&mock).with_telemetry(t.clone());
    c.get_ip(REGION, "ip-1").await.unwrap();
    c.get_private_network(REGION, "pn-1").await.unwrap_err();
    let count = |api, operation, result| {
        t.requests
            .get(&CallLabels {
                api,
                operation,
                result,
            })
            .map_or(0, |c| c.get())
    };
    assert_eq!(count("ipam", "GET /ipam/v1/ips/{ip_id}", "ok"), 1);
    assert_eq!(
        count(
            "vpc",
            "GET /vpc/v2/private-networks/{private_network_id}",
            "unavailable"
        ),
        3
    );
}

#[path = "client_servers_tests.rs"]
mod servers;
