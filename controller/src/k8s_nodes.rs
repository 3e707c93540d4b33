//! kube adapter of the install engine's [`NodePort`]: reads Node readiness and
//! deletes NodeClaims (Karpenter's `karpenter.sh/v1` kind, through the dynamic
//! API so that this crate does not need Karpenter's types).

use async_trait::async_trait;
use k8s_openapi::api::core::v1::Node;
use kube::Client;
use kube::api::{Api, DeleteParams, DynamicObject, Patch, PatchParams};
use kube::core::{ApiResource, GroupVersionKind};
use tracing::info;

use crate::install::{InstallEvent, NodePort, NodePortError, Progress};

/// Nodes and NodeClaims in the cluster the provider serves.
#[derive(Clone)]
pub struct KubeNodes {
    nodes: Api<Node>,
    node_claims: Api<DynamicObject>,
}

impl KubeNodes {
    pub fn new(client: Client) -> Self {
        let gvk = GroupVersionKind::gvk("karpenter.sh", "v1", "NodeClaim");
        let resource = ApiResource::from_gvk_with_plural(&gvk, "nodeclaims");
        KubeNodes {
            nodes: Api::all(client.clone()),
            node_claims: Api::all_with(client, &resource),
        }
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

    // INTERFACE PLACEHOLDER (session 2): the Kubernetes-side work replaces this
    // with a real Event on the NodeClaim.
    async fn event(&self, claim: &str, event: InstallEvent) {
        info!(nodeclaim = %claim, reason = %event.reason, message = %event.message, warning = event.warning, "install event");
    }

    // INTERFACE PLACEHOLDER (session 2): the Kubernetes-side work replaces this
    // with the deletion of the node's bootstrap token.
    async fn joined(&self, claim: &str) -> Result<(), NodePortError> {
        let _ = claim;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use wiremock::matchers::{method, path};
    use wiremock::{Mock, MockServer, ResponseTemplate};

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
        let nodes = KubeNodes::new(client_for(&server).await);

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
        let nodes = KubeNodes::new(client_for(&server).await);

        assert_eq!(nodes.delete_node_claim("np-abc12", "test").await, Ok(()));
        assert_eq!(nodes.delete_node_claim("np-gone", "test").await, Ok(()));
        assert!(matches!(
            nodes.delete_node_claim("np-forbidden", "test").await,
            Err(NodePortError::Refused(_))
        ));
    }
}
