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
async fn adds_the_private_network_option_and_reads_server_options() {
    let mock = MockServer::start().await;
    let server = json!({
        "id": "srv", "name": "node-a", "status": "ready", "offer_id": "o", "zone": ZONE,
        "created_at": "2026-10-01T10:00:00Z",
        "options": [{"id": "opt-pn", "name": "Private Network", "status": "option_status_enabling",
                     "manageable": true, "expires_at": null,
                     "private_network": {"bandwidth_in_bps": 1_000_000_000u64}}]
    });
    Mock::given(method("POST"))
        .and(path(format!(
            "/baremetal/v1/zones/{ZONE}/servers/srv/options/opt-pn"
        )))
        .and(body_json(json!({})))
        .respond_with(ResponseTemplate::new(200).set_body_json(server.clone()))
        .expect(1)
        .mount(&mock)
        .await;
    Mock::given(method("GET"))
        .and(path(format!("/baremetal/v1/zones/{ZONE}/servers/srv")))
        .respond_with(ResponseTemplate::new(200).set_body_json(server))
        .expect(1)
        .mount(&mock)
        .await;
    let c = client(&mock);
    let options = c.add_server_option(ZONE, "srv", "opt-pn").await.unwrap();
    assert_eq!(options[0].status, OptionStatus::OptionStatusEnabling);
    assert!(options[0].private_network.is_some());
    let options = c.get_server_options(ZONE, "srv").await.unwrap();
    assert!(options[0].is_on());
}

#[tokio::test]
async fn adding_an_option_is_repeated_on_429_never_on_5xx() {
    let mock = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(502))
        .expect(1)
        .mount(&mock)
        .await;
    let err = client(&mock)
        .add_server_option(ZONE, "srv", "opt-pn")
        .await
        .unwrap_err();
    assert!(matches!(err, ApiError::Unavailable(_)), "{err:?}");

    let mock = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(429))
        .up_to_n_times(1)
        .expect(1)
        .mount(&mock)
        .await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(json!({"id": "srv", "options": null})),
        )
        .expect(1)
        .mount(&mock)
        .await;
    let options = client(&mock)
        .add_server_option(ZONE, "srv", "opt-pn")
        .await
        .unwrap();
    assert!(options.is_empty());
}

#[tokio::test]
async fn attaches_with_a_null_or_a_list_of_ipam_ids() {
    let mock = MockServer::start().await;
    let p = format!("/baremetal/v3/zones/{ZONE}/servers/srv/private-networks");
    Mock::given(method("POST"))
        .and(path(p.clone()))
        .and(body_json(
            json!({"private_network_id": "pn-1", "ipam_ip_ids": null}),
        ))
        .respond_with(ResponseTemplate::new(200).set_body_json(attachment_json(
            "a-1",
            "srv",
            "pn-1",
            "attaching",
            None,
        )))
        .expect(1)
        .mount(&mock)
        .await;
    Mock::given(method("POST"))
        .and(path(p))
        .and(body_json(
            json!({"private_network_id": "pn-2", "ipam_ip_ids": ["ip-7"]}),
        ))
        .respond_with(ResponseTemplate::new(200).set_body_json(attachment_json(
            "a-2",
            "srv",
            "pn-2",
            "attaching",
            None,
        )))
        .expect(1)
        .mount(&mock)
        .await;
    let c = client(&mock);
    let a = c
        .attach_private_network(ZONE, "srv", "pn-1", &[])
        .await
        .unwrap();
    assert_eq!((a.status, a.vlan), (AttachmentStatus::Attaching, None));
    let a = c
        .attach_private_network(ZONE, "srv", "pn-2", &["ip-7".into()])
        .await
        .unwrap();
    assert_eq!(a.id, "a-2");
}

#[tokio::test]
async fn an_attach_is_repeated_on_409_but_never_after_a_5xx() {
    let mock = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(409).set_body_json(json!({
            "type": "transient_state", "message": "resource is in a transient state",
            "resource": "baremetal_server", "resource_id": "srv", "current_state": "locked"})))
        .up_to_n_times(1)
        .expect(1)
        .mount(&mock)
        .await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(503))
        .expect(1)
        .mount(&mock)
        .await;
    let err = client(&mock)
        .attach_private_network(ZONE, "srv", "pn-1", &[])
        .await
        .unwrap_err();
    assert!(matches!(err, ApiError::Unavailable(_)), "{err:?}");
}

#[tokio::test]
async fn lists_attachments_by_server_and_network_across_pages() {
    let mock = MockServer::start().await;
    let p = format!("/baremetal/v3/zones/{ZONE}/server-private-networks");
    let page1: Vec<Value> = (0..100)
        .map(|i| attachment_json(&format!("a{i}"), "srv", "pn-1", "attached", Some(1000)))
        .collect();
    let page2 = vec![
        attachment_json("a100", "srv", "pn-1", "attached", Some(1000)),
        // The API's filter is not trusted: another server's slips in.
        attachment_json("x", "other", "pn-1", "attached", Some(1000)),
    ];
    for (n, items) in [page1, page2].into_iter().enumerate() {
        Mock::given(method("GET"))
            .and(path(p.clone()))
            .and(query_param("page", (n + 1).to_string()))
            .and(query_param("page_size", "100"))
            .and(query_param("order_by", "created_at_asc"))
            .and(query_param("server_id", "srv"))
            .and(query_param("private_network_id", "pn-1"))
            .respond_with(
                ResponseTemplate::new(200)
                    .set_body_json(json!({"server_private_networks": items, "total_count": 102})),
            )
            .expect(1)
            .mount(&mock)
            .await;
    }
    let filter = AttachmentFilter {
        server_id: Some("srv".into()),
        private_network_id: Some("pn-1".into()),
        ..Default::default()
    };
    let got = client(&mock)
        .list_server_private_networks(ZONE, &filter)
        .await
        .unwrap();
    assert_eq!(got.len(), 101);
    assert!(got.iter().all(|a| a.server_id == "srv"));
    assert_eq!(got[0].vlan, Some(1000));
}

#[tokio::test]
async fn a_short_attachment_listing_is_an_error_never_a_shorter_list() {
    let mock = MockServer::start().await;
    Mock::given(method("GET"))
        .and(query_param("page", "1"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "server_private_networks": [attachment_json("a", "srv", "pn-1", "attached", Some(7))],
            "total_count": 2})))
        .mount(&mock)
        .await;
    Mock::given(method("GET"))
        .and(query_param("page", "2"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(json!({"server_private_networks": [], "total_count": 2})),
        )
        .mount(&mock)
        .await;
    let err = client(&mock)
        .list_server_private_networks(ZONE, &AttachmentFilter::default())
        .await
        .unwrap_err();
    assert!(matches!(err, ApiError::Inconsistent(_)), "{err:?}");
}

#[tokio::test]
async fn detach_deletes_and_a_404_is_already_gone() {
    let mock = MockServer::start().await;
    let p = format!("/baremetal/v3/zones/{ZONE}/servers/srv/private-networks/pn-1");
    Mock::given(method("DELETE"))
        .and(path(p.clone()))
        .respond_with(ResponseTemplate::new(204))
        .up_to_n_times(1)
        .expect(1)
        .mount(&mock)
        .await;
    Mock::given(method("DELETE"))
        .and(path(p))
        .respond_with(ResponseTemplate::new(404).set_body_json(json!({
            "type": "not_found", "message": "resource is not found",
            "resource": "server_private_network", "resource_id": "pn-1"})))
        .expect(1)
        .mount(&mock)
        .await;
    let c = client(&mock);
    c.detach_private_network(ZONE, "srv", "pn-1").await.unwrap();
    c.detach_private_network(ZONE, "srv", "pn-1").await.unwrap();
}

type Check = fn(&ApiError) -> bool;

#[tokio::test]
async fn a_detach_refused_is_reported_by_class() {
    let cases: Vec<(u16, Value, Check)> = vec![
        (
            409,
            json!({"type": "transient_state", "message": "resource is in a transient state",
                   "resource": "server_private_network", "current_state": "attaching"}),
            |e| matches!(e, ApiError::TransientState(_)),
        ),
        (429, json!({}), |e| *e == ApiError::Throttled),
        (500, json!({"message": "internal"}), |e| {
            matches!(e, ApiError::Unavailable(_))
        }),
        (
            403,
            json!({"type": "permissions_denied", "message": "insufficient permissions",
                   "details": [{"resource": "baremetal", "action": "write"}]}),
            |e| matches!(e, ApiError::Unauthorized(_)),
        ),
    ];
    for (status, body, check) in cases {
        let mock = MockServer::start().await;
        Mock::given(method("DELETE"))
            .respond_with(ResponseTemplate::new(status).set_body_json(body.clone()))
            .mount(&mock)
            .await;
        let err = client(&mock)
            .detach_private_network(ZONE, "srv", "pn-1")
            .await
            .unwrap_err();
        assert!(check(&err), "HTTP {status} {body}: {err:?}");
        // Retryable classes were retried up to the policy's bound.
        let sent = mock.received_requests().await.unwrap().len();
        let expected = if err.is_retryable() { 3 } else { 1 };
        assert_eq!(sent, expected, "HTTP {status}");
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
async fn private_nics_are_created_listed_read_and_deleted() {
    let mock = MockServer::start().await;
    let p = format!("/instance/v1/zones/{ZONE}/servers/vm/private_nics");
    Mock::given(method("POST"))
        .and(path(p.clone()))
        .and(body_json(
            json!({"private_network_id": "pn-1", "tags": ["node=a"]}),
        ))
        .respond_with(
            ResponseTemplate::new(201)
                .set_body_json(json!({"private_nic": nic_json("nic-1", "vm", "syncing")})),
        )
        .expect(1)
        .mount(&mock)
        .await;
    Mock::given(method("GET"))
        .and(path(format!("{p}/nic-1")))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(json!({"private_nic": nic_json("nic-1", "vm", "available")})),
        )
        .expect(1)
        .mount(&mock)
        .await;
    Mock::given(method("DELETE"))
        .and(path(format!("{p}/nic-1")))
        .respond_with(ResponseTemplate::new(204))
        .up_to_n_times(1)
        .expect(1)
        .mount(&mock)
        .await;
    Mock::given(method("DELETE"))
        .and(path(format!("{p}/nic-1")))
        .respond_with(ResponseTemplate::new(404).set_body_json(json!({
            "type": "not_found", "message": "resource is not found",
            "resource": "instance_private_nic", "resource_id": "nic-1"})))
        .expect(1)
        .mount(&mock)
        .await;
    let c = client(&mock);
    let req = CreatePrivateNicRequest {
        private_network_id: "pn-1".into(),
        tags: vec!["node=a".into()],
        ipam_ip_ids: Vec::new(),
    };
    let nic = c.create_private_nic(ZONE, "vm", &req).await.unwrap();
    assert_eq!(nic.state, PrivateNicState::Syncing);
    let nic = c.get_private_nic(ZONE, "vm", "nic-1").await.unwrap();
    assert_eq!(
        (nic.state, nic.mac_address.as_str()),
        (PrivateNicState::Available, "02:00:00:00:12:23")
    );
    c.delete_private_nic(ZONE, "vm", "nic-1").await.unwrap();
    c.delete_private_nic(ZONE, "vm", "nic-1").await.unwrap();
}

#[tokio::test]
async fn private_nics_page_by_per_page_and_either_total() {
    // The body's total_count.
    let mock = MockServer::start().await;
    let p = format!("/instance/v1/zones/{ZONE}/servers/vm/private_nics");
    for (n, id) in ["nic-1", "nic-2"].iter().enumerate() {
        Mock::given(method("GET"))
            .and(path(p.clone()))
            .and(query_param("page", (n + 1).to_string()))
            .and(query_param("per_page", "100"))
            .and(query_param_is_missing("page_size"))
            .respond_with(ResponseTemplate::new(200).set_body_json(
                json!({"private_nics": [nic_json(id, "vm", "available")], "total_count": 2}),
            ))
            .expect(1)
            .mount(&mock)
            .await;
    }
    let nics = client(&mock).list_private_nics(ZONE, "vm").await.unwrap();
    assert_eq!(nics.len(), 2);

    // Only the X-Total-Count header, as the other Instance lists.
    let mock = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(
            ResponseTemplate::new(200)
                .insert_header("X-Total-Count", "1")
                .set_body_json(json!({"private_nics": [nic_json("nic-1", "vm", "available")]})),
        )
        .expect(1)
        .mount(&mock)
        .await;
    assert_eq!(
        client(&mock)
            .list_private_nics(ZONE, "vm")
            .await
            .unwrap()
            .len(),
        1
    );

    // Both, disagreeing; or neither.
    let cases = [
        ResponseTemplate::new(200)
            .insert_header("X-Total-Count", "2")
            .set_body_json(
                json!({"private_nics": [nic_json("nic-1", "vm", "available")], "total_count": 1}),
            ),
        ResponseTemplate::new(200)
            .set_body_json(json!({"private_nics": [nic_json("nic-1", "vm", "available")]})),
    ];
    for answer in cases {
        let mock = MockServer::start().await;
        Mock::given(method("GET"))
            .respond_with(answer)
            .mount(&mock)
            .await;
        let err = client(&mock)
            .list_private_nics(ZONE, "vm")
            .await
            .unwrap_err();
        assert!(matches!(err, ApiError::Inconsistent(_)), "{err:?}");
    }
}

#[tokio::test]
async fn a_nic_is_never_created_twice_after_a_timeout() {
    let mock = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(201)
                .set_body_json(json!({"private_nic": nic_json("nic-1", "vm", "syncing")}))
                .set_delay(Duration::from_secs(2)),
        )
        .mount(&mock)
        .await;
    let c = ScalewayClient::new(ClientConfig {
        api_url: mock.uri(),
        secret_key: SecretKey::new("secret-token"),
        request_timeout: Duration::from_millis(200),
        retry: RetryPolicy {
            max_attempts: 3,
            base_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(5),
        },
    })
    .unwrap();
    let req = CreatePrivateNicRequest {
        private_network_id: "pn-1".into(),
        ..Default::default()
    };
    let err = c.create_private_nic(ZONE, "vm", &req).await.unwrap_err();
    assert!(matches!(err, ApiError::Timeout(_)), "{err:?}");
    assert_eq!(mock.received_requests().await.unwrap().len(), 1);
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
