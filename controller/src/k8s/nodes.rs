//! kube adapter of the install engine's [`NodePort`]: reads Node readiness,
//! persists progress on NodeClaims, records Events on them, deletes them, and
//! deletes a node's bootstrap token once it joined. NodeClaims are Karpenter's
//! `karpenter.sh/v1` kind, reached through the dynamic API so that this crate
//! does not need Karpenter's types.

use std::sync::Arc;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Node, ObjectReference};
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, ListParams, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::Value;
use tracing::{info, warn};

use crate::install::{InstallEvent, NodePort, NodePortError, Progress};
pub use crate::k8s::events::REPORTING_CONTROLLER;
use crate::k8s::events::{EventRecorder, NewEvent};
use crate::provider::{BootstrapTokens, KubeError, NodeBoots, UNINITIALIZED_TAINT_KEY};

/// The `karpenter.sh/v1` NodeClaim API resource.
pub fn node_claim_resource() -> ApiResource {
    let gvk = GroupVersionKind::gvk("karpenter.sh", "v1", "NodeClaim");
    ApiResource::from_gvk_with_plural(&gvk, "nodeclaims")
}

/// Classifies kube errors for the provider's Kubernetes ports: 5xx, 429 and
/// transport failures may pass; other API answers will not change on retry.
pub fn classify_kube(err: kube::Error) -> KubeError {
    match err {
        kube::Error::Api(status) if status.code == 429 || status.code >= 500 => {
            KubeError::Unavailable(format!("{} {}", status.code, status.message))
        }
        kube::Error::Api(status) if status.code == 409 => {
            KubeError::Conflict(format!("{} {}", status.code, status.message))
        }
        kube::Error::Api(status) => {
            KubeError::Refused(format!("{} {}", status.code, status.message))
        }
        other => KubeError::Unavailable(other.to_string()),
    }
}

/// Lists every NodeClaim, all pages, or fails: the resume loop and the token
/// sweep act on "every NodeClaim", so a partial list must never pass for one.
#[derive(Clone)]
pub struct NodeClaimList {
    api: Api<DynamicObject>,
}

impl NodeClaimList {
    pub fn new(client: Client) -> Self {
        NodeClaimList {
            api: Api::all_with(client, &node_claim_resource()),
        }
    }

    /// Every NodeClaim as Kubernetes JSON.
    pub async fn list(&self) -> Result<Vec<Value>, kube::Error> {
        let mut params = ListParams::default().limit(500);
        let mut out = Vec::new();
        loop {
            let page = self.api.list(&params).await?;
            for item in page.items {
                out.push(serde_json::to_value(item).map_err(kube::Error::SerdeError)?);
            }
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => return Ok(out),
            }
        }
    }
}

/// The provider's List proves absence against these NodeClaims; Reboot
/// reads one and keeps its replay record on it.
#[async_trait]
impl crate::provider::NodeClaimSource for NodeClaimList {
    async fn list(&self) -> Result<Vec<Value>, KubeError> {
        NodeClaimList::list(self).await.map_err(classify_kube)
    }

    async fn get(&self, name: &str) -> Result<Option<Value>, KubeError> {
        match self.api.get_opt(name).await.map_err(classify_kube)? {
            Some(object) => serde_json::to_value(object)
                .map(Some)
                .map_err(|e| KubeError::Unavailable(format!("decoding NodeClaim {name}: {e}"))),
            None => Ok(None),
        }
    }

    /// A merge patch; the `resourceVersion` in it is a precondition the API
    /// server checks (409 Conflict when the NodeClaim moved on).
    async fn annotate(
        &self,
        name: &str,
        key: &str,
        value: &str,
        resource_version: Option<&str>,
    ) -> Result<(), KubeError> {
        let mut metadata = serde_json::json!({"annotations": {key: value}});
        if let Some(rv) = resource_version {
            metadata["resourceVersion"] = serde_json::json!(rv);
        }
        let patch = serde_json::json!({ "metadata": metadata });
        self.api
            .patch(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(drop)
            .map_err(classify_kube)
    }
}

/// Nodes and NodeClaims in the cluster the provider serves.
#[derive(Clone)]
pub struct KubeNodes {
    nodes: Api<Node>,
    node_claims: Api<DynamicObject>,
    events: EventRecorder,
    tokens: Arc<dyn BootstrapTokens>,
}

impl KubeNodes {
    /// `tokens` are the per-node bootstrap tokens deleted once a node joined.
    pub fn new(client: Client, tokens: Arc<dyn BootstrapTokens>) -> Self {
        KubeNodes {
            nodes: Api::all(client.clone()),
            node_claims: Api::all_with(client.clone(), &node_claim_resource()),
            events: EventRecorder::new(client),
            tokens,
        }
    }

    /// Removes the `uninitialized` taint the early registration put on the
    /// Node, so that Karpenter can mark the NodeClaim Initialized and pods
    /// can land. The replace is guarded by the Node's resourceVersion: a
    /// concurrent change (the kubelet, a user adding a taint) makes it fail
    /// with a conflict, retried from a fresh read, never clobbered.
    async fn remove_uninitialized_taint(&self, node_name: &str) -> Result<(), NodePortError> {
        let Some(node) = self.nodes.get_opt(node_name).await.map_err(classify)? else {
            return Ok(());
        };
        let taints = node
            .spec
            .as_ref()
            .and_then(|s| s.taints.clone())
            .unwrap_or_default();
        let kept: Vec<_> = taints
            .iter()
            .filter(|t| t.key != UNINITIALIZED_TAINT_KEY)
            .cloned()
            .collect();
        if kept.len() == taints.len() {
            return Ok(());
        }
        let patch = serde_json::json!({
            "metadata": {"resourceVersion": node.metadata.resource_version},
            "spec": {"taints": kept},
        });
        self.nodes
            .patch(node_name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(classify)?;
        info!(node = %node_name, taint = UNINITIALIZED_TAINT_KEY, "node initialised: taint removed");
        Ok(())
    }

    async fn record(&self, claim: &str, event: &InstallEvent) -> Result<(), kube::Error> {
        let Some(object) = self.node_claims.get_opt(claim).await? else {
            warn!(nodeclaim = %claim, reason = %event.reason, "NodeClaim gone; event not recorded");
            return Ok(());
        };
        let uid = object.metadata.uid.clone().unwrap_or_default();
        // (NodeClaim uid, type, reason, note): what makes two Events the same.
        let series_key = [
            uid.as_str(),
            if event.warning { "Warning" } else { "Normal" },
            event.reason.as_str(),
            event.message.as_str(),
        ]
        .join("\u{1f}");
        self.events
            .record(NewEvent {
                regarding: ObjectReference {
                    api_version: Some("karpenter.sh/v1".into()),
                    kind: Some("NodeClaim".into()),
                    name: Some(claim.to_string()),
                    uid: Some(uid),
                    resource_version: object.metadata.resource_version.clone(),
                    ..Default::default()
                },
                warning: event.warning,
                action: action_of(&event.reason).into(),
                reason: event.reason.clone(),
                note: event.message.clone(),
                series_key,
            })
            .await
    }
}

/// The Event's `action`: reboots share this port with installs.
fn action_of(reason: &str) -> &'static str {
    if reason.starts_with("Reboot") {
        "Reboot"
    } else {
        "Install"
    }
}

/// The deadline of a reboot reads the Node's boot id.
#[async_trait]
impl NodeBoots for KubeNodes {
    async fn boot_id(&self, node: &str) -> Result<Option<String>, KubeError> {
        let node = self.nodes.get_opt(node).await.map_err(classify_kube)?;
        Ok(node
            .and_then(|n| n.status)
            .and_then(|s| s.node_info)
            .map(|i| i.boot_id)
            .filter(|b| !b.is_empty()))
    }
}

/// Classifies kube errors once: 5xx, 429, 409 and transport failures may pass;
/// other API answers will not change on retry.
fn classify(err: kube::Error) -> NodePortError {
    match err {
        kube::Error::Api(status)
            if status.code == 429 || status.code == 409 || status.code >= 500 =>
        {
            NodePortError::Unavailable(format!("{} {}", status.code, status.message))
        }
        kube::Error::Api(status) => {
            NodePortError::Refused(format!("{} {}", status.code, status.message))
        }
        other => NodePortError::Unavailable(other.to_string()),
    }
}

fn is_ready(node: &Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|conditions| {
            conditions
                .iter()
                .any(|c| c.type_ == "Ready" && c.status == "True")
        })
}

#[async_trait]
impl NodePort for KubeNodes {
    async fn node_ready(&self, node_name: &str) -> Result<Option<bool>, NodePortError> {
        let node = self.nodes.get_opt(node_name).await.map_err(classify)?;
        Ok(node.as_ref().map(is_ready))
    }

    async fn delete_node_claim(&self, name: &str, reason: &str) -> Result<(), NodePortError> {
        match self
            .node_claims
            .delete(name, &DeleteParams::default())
            .await
        {
            Ok(_) => {
                info!(nodeclaim = %name, %reason, "deleted NodeClaim");
                Ok(())
            }
            Err(kube::Error::Api(status)) if status.code == 404 => {
                info!(nodeclaim = %name, %reason, "NodeClaim already gone");
                Ok(())
            }
            Err(err) => Err(classify(err)),
        }
    }

    async fn save_progress(&self, claim: &str, progress: &Progress) -> Result<(), NodePortError> {
        let patch = serde_json::json!({"metadata": {"annotations": progress.to_annotations()}});
        self.node_claims
            .patch(claim, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(|_| ())
            .map_err(classify)
    }

    async fn event(&self, claim: &str, event: InstallEvent) {
        if let Err(error) = self.record(claim, &event).await {
            // Best effort: the install goes on, and the log keeps the event.
            warn!(nodeclaim = %claim, reason = %event.reason, message = %event.message,
                %error, "could not record event");
        }
    }

    async fn initialize_node(&self, node_name: &str) -> Result<(), NodePortError> {
        self.remove_uninitialized_taint(node_name).await
    }

    async fn release_token(&self, claim: &str) -> Result<(), NodePortError> {
        self.tokens.delete(claim).await.map_err(|e| match e {
            KubeError::Unavailable(m) => NodePortError::Unavailable(m),
            KubeError::Refused(m) | KubeError::Conflict(m) => NodePortError::Refused(m),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::provider::tests::FakeTokens;
    use serde_json::json;
    use wiremock::matchers::{body_partial_json, method, path};
    use wiremock::{Mock, MockServer, Request, ResponseTemplate};

    async fn client_for(server: &MockServer) -> Client {
        let config = kube::Config::new(server.uri().parse().expect("mock server URI"));
        Client::try_from(config).expect("kube client")
    }

    fn node(ready: &str) -> serde_json::Value {
        json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "np-abc12"},
            "status": {"conditions": [
                {"type": "MemoryPressure", "status": "False"},
                {"type": "Ready", "status": ready}
            ]}
        })
    }

    #[tokio::test]
    async fn node_ready_reads_the_ready_condition() {
        let server = MockServer::start().await;
        Mock::given(method("GET"))
            .and(path("/api/v1/nodes/np-abc12"))
            .respond_with(ResponseTemplate::new(200).set_body_json(node("True")))
            .mount(&server)
            .await;
        Mock::given(method("GET"))
            .and(path("/api/v1/nodes/np-notready"))
            .respond_with(ResponseTemplate::new(200).set_body_json(node("False")))
            .mount(&server)
            .await;
        Mock::given(method("GET"))
            .and(path("/api/v1/nodes/np-missing"))
            .respond_with(ResponseTemplate::new(404).set_body_json(json!({
                "kind": "Status", "apiVersion": "v1", "status": "Failure",
                "message": "nodes \"np-missing\" not found", "reason": "NotFound", "code": 404
            })))
            .mount(&server)
            .await;
        let nodes = KubeNodes::new(client_for(&server).await, Arc::new(FakeTokens::default()));

        assert_eq!(nodes.node_ready("np-abc12").await, Ok(Some(true)));
        assert_eq!(nodes.node_ready("np-notready").await, Ok(Some(false)));
        assert_eq!(nodes.node_ready("np-missing").await, Ok(None));
    }

    #[tokio::test]
    async fn delete_node_claim_uses_the_karpenter_api_and_tolerates_absence() {
        let server = MockServer::start().await;
        Mock::given(method("DELETE"))
            .and(path("/apis/karpenter.sh/v1/nodeclaims/np-abc12"))
            .respond_with(ResponseTemplate::new(200).set_body_json(json!({
                "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                "metadata": {"name": "np-abc12"}
            })))
            .expect(1)
            .mount(&server)
            .await;
        Mock::given(method("DELETE"))
            .and(path("/apis/karpenter.sh/v1/nodeclaims/np-gone"))
            .respond_with(ResponseTemplate::new(404).set_body_json(json!({
                "kind": "Status", "apiVersion": "v1", "status": "Failure",
                "message": "not found", "reason": "NotFound", "code": 404
            })))
            .mount(&server)
            .await;
        Mock::given(method("DELETE"))
            .and(path("/apis/karpenter.sh/v1/nodeclaims/np-forbidden"))
            .respond_with(ResponseTemplate::new(403).set_body_json(json!({
                "kind": "Status", "apiVersion": "v1", "status": "Failure",
                "message": "forbidden", "reason": "Forbidden", "code": 403
            })))
            .mount(&server)
            .await;
        let nodes = KubeNodes::new(client_for(&server).await, Arc::new(FakeTokens::default()));

        assert_eq!(nodes.delete_node_claim("np-abc12", "test").await, Ok(()));
        assert_eq!(nodes.delete_node_claim("np-gone", "test").await, Ok(()));
        assert!(matches!(
            nodes.delete_node_claim("np-forbidden", "test").await,
            Err(NodePortError::Refused(_))
        ));
    }

    fn claim_object() -> ResponseTemplate {
        ResponseTemplate::new(200).set_body_json(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
            "metadata": {"name": "np-abc12", "uid": "uid-1234", "resourceVersion": "7"}
        }))
    }

    fn echo(code: u16) -> impl Fn(&Request) -> ResponseTemplate {
        move |req: &Request| {
            ResponseTemplate::new(code).set_body_raw(req.body.clone(), "application/json")
        }
    }

    const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/default/events";

    #[tokio::test]
    async fn event_is_recorded_on_the_nodeclaim_and_repeats_are_counted() {
        let server = MockServer::start().await;
        Mock::given(method("GET"))
            .and(path("/apis/karpenter.sh/v1/nodeclaims/np-abc12"))
            .respond_with(claim_object())
            .mount(&server)
            .await;
        Mock::given(method("POST"))
            .and(path(EVENTS))
            .and(body_partial_json(json!({
                "reason": "InstallPhase",
                "note": "imaging: writing the Talos image to /dev/nvme0n1",
                "type": "Normal",
                "action": "Install",
                "reportingController": "karpenter-scaleway",
                "regarding": {
                    "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                    "name": "np-abc12", "uid": "uid-1234"
                }
            })))
            .respond_with(echo(201))
            .expect(1)
            .mount(&server)
            .await;
        Mock::given(method("POST"))
            .and(path(EVENTS))
            .and(body_partial_json(
                json!({"reason": "InstallRetry", "type": "Warning"}),
            ))
            .respond_with(echo(201))
            .expect(1)
            .mount(&server)
            .await;
        Mock::given(method("PATCH"))
            .and(body_partial_json(json!({"series": {"count": 2}})))
            .respond_with(echo(200))
            .expect(1)
            .mount(&server)
            .await;
        let nodes = KubeNodes::new(client_for(&server).await, Arc::new(FakeTokens::default()));
        let phase = InstallEvent {
            warning: false,
            reason: "InstallPhase".into(),
            message: "imaging: writing the Talos image to /dev/nvme0n1".into(),
        };
        nodes.event("np-abc12", phase.clone()).await;
        // The same event again: a series count, not a second object.
        nodes.event("np-abc12", phase).await;
        nodes
            .event(
                "np-abc12",
                InstallEvent {
                    warning: true,
                    reason: "InstallRetry".into(),
                    message: "SSH session lost while imaging; writing again".into(),
                },
            )
            .await;
        let patched = server
            .received_requests()
            .await
            .unwrap()
            .into_iter()
            .find(|r| r.method.as_str() == "PATCH")
            .expect("a PATCH");
        assert!(
            patched
                .url
                .path()
                .starts_with(&format!("{EVENTS}/np-abc12.")),
            "{}",
            patched.url
        );
    }

    #[tokio::test]
    async fn event_of_a_vanished_nodeclaim_is_dropped_quietly() {
        let server = MockServer::start().await;
        Mock::given(method("GET"))
            .and(path("/apis/karpenter.sh/v1/nodeclaims/np-gone"))
            .respond_with(ResponseTemplate::new(404).set_body_json(json!({
                "kind": "Status", "apiVersion": "v1", "status": "Failure",
                "message": "not found", "reason": "NotFound", "code": 404
            })))
            .mount(&server)
            .await;
        Mock::given(method("POST"))
            .respond_with(ResponseTemplate::new(500))
            .expect(0)
            .mount(&server)
            .await;
        let nodes = KubeNodes::new(client_for(&server).await, Arc::new(FakeTokens::default()));
        nodes
            .event(
                "np-gone",
                InstallEvent {
                    warning: false,
                    reason: "InstallPhase".into(),
                    message: "x".into(),
                },
            )
            .await;
    }

    #[tokio::test]
    async fn save_progress_merge_patches_the_annotations() {
        let server = MockServer::start().await;
        Mock::given(method("PATCH"))
            .and(path("/apis/karpenter.sh/v1/nodeclaims/np-abc12"))
            .and(body_partial_json(json!({"metadata": {"annotations": {
                "install.karpenter.scaleway.com/phase": "imaging",
                "install.karpenter.scaleway.com/disk": "sda",
                "install.karpenter.scaleway.com/image-attempts": "2"
            }}})))
            .respond_with(claim_object())
            .expect(1)
            .mount(&server)
            .await;
        let nodes = KubeNodes::new(client_for(&server).await, Arc::new(FakeTokens::default()));
        let progress = Progress {
            phase: Some(crate::install::Phase::Imaging),
            disk: Some("sda".into()),
            image_attempts: 2,
            ..Progress::default()
        };
        assert_eq!(nodes.save_progress("np-abc12", &progress).await, Ok(()));
        let content_type = server.received_requests().await.unwrap()[0]
            .headers
            .get("content-type")
            .map(|v| v.to_str().unwrap().to_string());
        assert_eq!(
            content_type.as_deref(),
            Some("application/merge-patch+json")
        );
    }

    #[tokio::test]
    async fn initialize_leaves_a_node_without_the_taint_alone_and_release_deletes_the_token() {
        let server = MockServer::start().await;
        let tokens = Arc::new(FakeTokens::default());
        tokens
            .tokens
            .lock()
            .unwrap()
            .insert("np-abc12".into(), "abc123.0123456789abcdef".into());
        // A Node without the taint (registered by its kubelet) is not patched.
        Mock::given(method("GET"))
            .and(path("/api/v1/nodes/np-abc12"))
            .respond_with(ResponseTemplate::new(200).set_body_json(json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": "np-abc12", "resourceVersion": "7"},
                "spec": {}
            })))
            .mount(&server)
            .await;
        Mock::given(method("PATCH"))
            .respond_with(ResponseTemplate::new(500))
            .expect(0)
            .mount(&server)
            .await;
        let nodes = KubeNodes::new(client_for(&server).await, tokens.clone());
        assert_eq!(nodes.initialize_node("np-abc12").await, Ok(()));
        assert_eq!(
            tokens.tokens.lock().unwrap().len(),
            1,
            "initializing the Node does not touch the token"
        );
        assert_eq!(nodes.release_token("np-abc12").await, Ok(()));
        assert!(tokens.tokens.lock().unwrap().is_empty());
        assert_eq!(
            *tokens.deleted.lock().unwrap(),
            vec!["np-abc12".to_string()]
        );
    }

    #[tokio::test]
    async fn initialize_removes_only_the_uninitialized_taint_guarded_by_resource_version() {
        let server = MockServer::start().await;
        Mock::given(method("GET"))
            .and(path("/api/v1/nodes/np-abc12"))
            .respond_with(ResponseTemplate::new(200).set_body_json(json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": "np-abc12", "resourceVersion": "42"},
                "spec": {"taints": [
                    {"key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true", "effect": "NoSchedule"},
                    {"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}
                ]}
            })))
            .mount(&server)
            .await;
        Mock::given(method("PATCH"))
            .and(path("/api/v1/nodes/np-abc12"))
            .and(body_partial_json(json!({
                "metadata": {"resourceVersion": "42"},
                "spec": {"taints": [{"key": "dedicated", "value": "gpu", "effect": "NoSchedule"}]}
            })))
            .respond_with(ResponseTemplate::new(200).set_body_json(json!({
                "apiVersion": "v1", "kind": "Node", "metadata": {"name": "np-abc12"}
            })))
            .expect(1)
            .mount(&server)
            .await;
        let tokens = Arc::new(FakeTokens::default());
        let nodes = KubeNodes::new(client_for(&server).await, tokens.clone());
        assert_eq!(nodes.initialize_node("np-abc12").await, Ok(()));
        assert!(tokens.deleted.lock().unwrap().is_empty());
    }

    #[tokio::test]
    async fn initialize_is_retryable_when_the_node_changed_underneath() {
        let server = MockServer::start().await;
        Mock::given(method("GET"))
            .and(path("/api/v1/nodes/np-abc12"))
            .respond_with(ResponseTemplate::new(200).set_body_json(json!({
                "apiVersion": "v1", "kind": "Node",
                "metadata": {"name": "np-abc12", "resourceVersion": "42"},
                "spec": {"taints": [
                    {"key": "node.cloudprovider.kubernetes.io/uninitialized", "value": "true", "effect": "NoSchedule"}
                ]}
            })))
            .mount(&server)
            .await;
        Mock::given(method("PATCH"))
            .and(path("/api/v1/nodes/np-abc12"))
            .respond_with(ResponseTemplate::new(409).set_body_json(json!({
                "kind": "Status", "apiVersion": "v1", "status": "Failure",
                "message": "the object has been modified", "reason": "Conflict", "code": 409
            })))
            .mount(&server)
            .await;
        let tokens = Arc::new(FakeTokens::default());
        let nodes = KubeNodes::new(client_for(&server).await, tokens.clone());
        assert!(matches!(
            nodes.initialize_node("np-abc12").await,
            Err(NodePortError::Unavailable(_))
        ));
    }
}

#[cfg(test)]
#[path = "nodes_reboot_tests.rs"]
mod reboot_tests;
