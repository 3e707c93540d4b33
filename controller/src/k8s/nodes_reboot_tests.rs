//! The kube side of Reboot: a NodeClaim read fresh, its replay record written
//! under a `resourceVersion` precondition, a Node's boot id, and the Events'
//! action.

use std::sync::Arc;

use serde_json::json;
use wiremock::matchers::{body_json, body_partial_json, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use super::*;
use crate::provider::NodeClaimSource;
use crate::provider::tests::FakeTokens;

async fn client_for(server: &MockServer) -> Client {
    let config = kube::Config::new(server.uri().parse().expect("mock server URI"));
    Client::try_from(config).expect("kube client")
}

const CLAIM: &str = "/apis/karpenter.sh/v1/nodeclaims/default-a";

fn claim_body(rv: &str) -> serde_json::Value {
    json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "default-a", "uid": "u-1", "resourceVersion": rv}
    })
}

fn status(code: u16, reason: &str) -> ResponseTemplate {
    ResponseTemplate::new(code).set_body_json(json!({
        "kind": "Status", "apiVersion": "v1", "status": "Failure",
        "message": reason, "reason": reason, "code": code
    }))
}

#[tokio::test]
async fn get_reads_one_nodeclaim_and_absence_is_none() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(CLAIM))
        .respond_with(ResponseTemplate::new(200).set_body_json(claim_body("42")))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/apis/karpenter.sh/v1/nodeclaims/gone"))
        .respond_with(status(404, "NotFound"))
        .mount(&server)
        .await;
    let claims = NodeClaimList::new(client_for(&server).await);
    let got = NodeClaimSource::get(&claims, "default-a")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(got["metadata"]["resourceVersion"], "42");
    assert_eq!(NodeClaimSource::get(&claims, "gone").await.unwrap(), None);
}

#[tokio::test]
async fn annotate_is_a_merge_patch_guarded_by_the_resource_version() {
    let server = MockServer::start().await;
    Mock::given(method("PATCH"))
        .and(path(CLAIM))
        .and(body_json(json!({"metadata": {
            "annotations": {"karpenter.scaleway.com/reboot": "{}"},
            "resourceVersion": "42"
        }})))
        .respond_with(ResponseTemplate::new(200).set_body_json(claim_body("43")))
        .expect(1)
        .mount(&server)
        .await;
    let claims = NodeClaimList::new(client_for(&server).await);
    claims
        .annotate(
            "default-a",
            "karpenter.scaleway.com/reboot",
            "{}",
            Some("42"),
        )
        .await
        .unwrap();
    let sent = &server.received_requests().await.unwrap()[0];
    assert_eq!(
        sent.headers.get("content-type").unwrap(),
        "application/merge-patch+json"
    );
}

#[tokio::test]
async fn a_nodeclaim_changed_since_it_was_read_is_a_conflict() {
    let server = MockServer::start().await;
    Mock::given(method("PATCH"))
        .and(path(CLAIM))
        .respond_with(status(409, "Conflict"))
        .mount(&server)
        .await;
    let claims = NodeClaimList::new(client_for(&server).await);
    assert!(matches!(
        claims.annotate("default-a", "k", "v", Some("41")).await,
        Err(KubeError::Conflict(_))
    ));
}

#[tokio::test]
async fn an_unguarded_annotation_sends_no_resource_version() {
    let server = MockServer::start().await;
    Mock::given(method("PATCH"))
        .and(path(CLAIM))
        .and(body_json(json!({"metadata": {"annotations": {"k": "v"}}})))
        .respond_with(ResponseTemplate::new(200).set_body_json(claim_body("44")))
        .expect(1)
        .mount(&server)
        .await;
    let claims = NodeClaimList::new(client_for(&server).await);
    claims.annotate("default-a", "k", "v", None).await.unwrap();
}

#[tokio::test]
async fn boot_id_is_the_nodes_and_none_without_a_node() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/api/v1/nodes/default-a"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "apiVersion": "v1", "kind": "Node", "metadata": {"name": "default-a"},
            "status": {"nodeInfo": {
                "bootID": "boot-a", "machineID": "m", "systemUUID": "s",
                "kernelVersion": "6", "osImage": "Talos", "containerRuntimeVersion": "c",
                "kubeletVersion": "v1.35.0", "kubeProxyVersion": "", "operatingSystem": "linux",
                "architecture": "amd64"
            }}
        })))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/api/v1/nodes/gone"))
        .respond_with(status(404, "NotFound"))
        .mount(&server)
        .await;
    let nodes = KubeNodes::new(client_for(&server).await, Arc::new(FakeTokens::default()));
    assert_eq!(
        nodes.boot_id("default-a").await.unwrap().as_deref(),
        Some("boot-a")
    );
    assert_eq!(nodes.boot_id("gone").await.unwrap(), None);
}

#[tokio::test]
async fn reboot_events_carry_the_reboot_action() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(CLAIM))
        .respond_with(ResponseTemplate::new(200).set_body_json(claim_body("7")))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path("/apis/events.k8s.io/v1/namespaces/default/events"))
        .and(body_partial_json(json!({
            "reason": "RebootRequested", "action": "Reboot", "type": "Normal"
        })))
        .respond_with(|req: &wiremock::Request| {
            ResponseTemplate::new(201).set_body_raw(req.body.clone(), "application/json")
        })
        .expect(1)
        .mount(&server)
        .await;
    let nodes = KubeNodes::new(client_for(&server).await, Arc::new(FakeTokens::default()));
    nodes
        .event(
            "default-a",
            InstallEvent {
                warning: false,
                reason: "RebootRequested".into(),
                message: "Elastic Metal server srv-1 in fr-par-2: reboot accepted".into(),
            },
        )
        .await;
}
