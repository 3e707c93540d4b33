//! kube adapter of the provider's [`NodeRegistrar`]: creates the Node object
//! of a NodeClaim right after its server is ordered (see the registration
//! deadline in `provider/create.rs`). The kubelet adopts the Node when Talos
//! boots; until then its taints keep every pod off it.

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Node, NodeSpec, Taint as KubeTaint};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::Client;
use kube::api::{Api, DeleteParams, ObjectMeta, PostParams, Preconditions};
use tracing::{debug, info};

use crate::k8s::nodes::classify_kube;
use crate::provider::{KubeError, NodeRegistrar, NodeRegistration};

/// Annotation recording who created the Node before its kubelet did.
pub const ANNOTATION_REGISTERED_BY: &str = "karpenter.scaleway.com/registered-by";

#[derive(Clone)]
pub struct KubeNodeRegistrar {
    nodes: Api<Node>,
}

impl KubeNodeRegistrar {
    pub fn new(client: Client) -> Self {
        KubeNodeRegistrar {
            nodes: Api::all(client),
        }
    }
}

fn node_object(reg: &NodeRegistration) -> Node {
    Node {
        metadata: ObjectMeta {
            name: Some(reg.name.clone()),
            labels: Some(reg.labels.clone()),
            // The reference core's registration sets (same group, kind,
            // uid, blockOwnerDeletion), so core finds it and adds no other.
            owner_references: reg.owner_uid.as_ref().map(|uid| {
                vec![OwnerReference {
                    api_version: "karpenter.sh/v1".to_string(),
                    kind: "NodeClaim".to_string(),
                    name: reg.name.clone(),
                    uid: uid.clone(),
                    block_owner_deletion: Some(true),
                    controller: None,
                }]
            }),
            annotations: Some(
                [(
                    ANNOTATION_REGISTERED_BY.to_string(),
                    "karpenter-scaleway".to_string(),
                )]
                .into(),
            ),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            provider_id: Some(reg.provider_id.clone()),
            taints: Some(
                reg.taints
                    .iter()
                    .map(|t| KubeTaint {
                        key: t.key.clone(),
                        value: t.value.clone(),
                        effect: t.effect.clone(),
                        time_added: None,
                    })
                    .collect(),
            ),
            ..Default::default()
        }),
        status: None,
    }
}

#[async_trait]
impl NodeRegistrar for KubeNodeRegistrar {
    async fn register(&self, reg: &NodeRegistration) -> Result<(), KubeError> {
        match self
            .nodes
            .create(&PostParams::default(), &node_object(reg))
            .await
        {
            Ok(_) => {
                info!(node = %reg.name, provider_id = %reg.provider_id, "registered Node ahead of its kubelet");
                Ok(())
            }
            Err(kube::Error::Api(s)) if s.code == 409 => {
                let existing = self.nodes.get_opt(&reg.name).await.map_err(classify_kube)?;
                let Some(existing) = existing else {
                    // Deleted between our create and get: the retry creates it.
                    return Err(KubeError::Unavailable(format!(
                        "Node {} vanished while being registered",
                        reg.name
                    )));
                };
                let theirs = existing
                    .spec
                    .as_ref()
                    .and_then(|s| s.provider_id.as_deref());
                if theirs == Some(reg.provider_id.as_str()) {
                    debug!(node = %reg.name, "Node already registered");
                    Ok(())
                } else {
                    // Never clobber a Node that belongs to another machine.
                    Err(KubeError::Conflict(format!(
                        "Node {} already exists with providerID {:?}, not {}",
                        reg.name,
                        theirs.unwrap_or(""),
                        reg.provider_id
                    )))
                }
            }
            Err(e) => Err(classify_kube(e)),
        }
    }

    async fn forget(&self, name: &str, provider_id: Option<&str>) -> Result<bool, KubeError> {
        let Some(node) = self.nodes.get_opt(name).await.map_err(classify_kube)? else {
            return Ok(false);
        };
        if let Err(why) = forgettable(&node, provider_id) {
            debug!(node = name, why, "Node of a gone machine left alone");
            return Ok(false);
        }
        // Only the Node just read: one recreated in between is not ours to judge.
        let params = DeleteParams {
            preconditions: Some(Preconditions {
                uid: node.metadata.uid.clone(),
                resource_version: node.metadata.resource_version.clone(),
            }),
            ..DeleteParams::default()
        };
        match self.nodes.delete(name, &params).await {
            Ok(_) => {
                info!(node = name, provider_id = ?node.spec.as_ref().and_then(|s| s.provider_id.as_deref()),
                    reason = "machine gone", "deleted the Node core left behind");
                Ok(true)
            }
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(false),
            Err(kube::Error::Api(s)) if s.code == 409 => Err(KubeError::Unavailable(format!(
                "Node {name} changed while being deleted; asked again"
            ))),
            Err(e) => Err(classify_kube(e)),
        }
    }
}

/// Core's label on a Node it registered for a NodeClaim.
const LABEL_REGISTERED: &str = "karpenter.sh/registered";

/// Whether `forget` may delete this Node (see [`NodeRegistrar::forget`]).
fn forgettable(node: &Node, provider_id: Option<&str>) -> Result<(), String> {
    if node.metadata.deletion_timestamp.is_some() {
        return Err("being deleted already".into());
    }
    let theirs = node
        .spec
        .as_ref()
        .and_then(|s| s.provider_id.as_deref())
        .unwrap_or("");
    match provider_id {
        Some(ours) if theirs == ours => Ok(()),
        Some(ours) => Err(format!("providerID {theirs:?}, not {ours}")),
        None if !theirs.starts_with("scaleway://") => {
            Err(format!("providerID {theirs:?} is not a Scaleway machine's"))
        }
        None if node
            .metadata
            .labels
            .as_ref()
            .is_some_and(|l| l.contains_key(LABEL_REGISTERED)) =>
        {
            Err("registered by core, which deletes it".into())
        }
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use serde_json::json;
    use wiremock::matchers::{body_partial_json, method, path};
    use wiremock::{Mock, MockServer, ResponseTemplate};

    use super::*;
    use crate::install::Taint;

    async fn registrar(server: &MockServer) -> KubeNodeRegistrar {
        let config = kube::Config::new(server.uri().parse().expect("mock server URI"));
        KubeNodeRegistrar::new(Client::try_from(config).expect("kube client"))
    }

    fn registration() -> NodeRegistration {
        NodeRegistration {
            name: "default-abc12".into(),
            provider_id: "scaleway://baremetal/fr-par-2/srv-1".into(),
            owner_uid: Some("0b6f-claim-uid".into()),
            labels: BTreeMap::from([("karpenter.sh/nodepool".into(), "default".into())]),
            taints: vec![
                Taint {
                    key: "karpenter.sh/unregistered".into(),
                    value: None,
                    effect: "NoExecute".into(),
                },
                Taint {
                    key: "node.kubernetes.io/not-ready".into(),
                    value: None,
                    effect: "NoSchedule".into(),
                },
            ],
        }
    }

    fn conflict() -> ResponseTemplate {
        ResponseTemplate::new(409).set_body_json(json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": "nodes \"default-abc12\" already exists", "reason": "AlreadyExists", "code": 409
        }))
    }

    fn existing(provider_id: &str) -> ResponseTemplate {
        ResponseTemplate::new(200).set_body_json(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "default-abc12"},
            "spec": {"providerID": provider_id}
        }))
    }

    #[tokio::test]
    async fn creates_the_node_with_provider_id_labels_and_taints() {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(path("/api/v1/nodes"))
            .and(body_partial_json(json!({
                "metadata": {
                    "name": "default-abc12",
                    "labels": {"karpenter.sh/nodepool": "default"},
                    "ownerReferences": [{
                        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
                        "name": "default-abc12", "uid": "0b6f-claim-uid",
                        "blockOwnerDeletion": true
                    }]
                },
                "spec": {
                    "providerID": "scaleway://baremetal/fr-par-2/srv-1",
                    "taints": [
                        {"key": "karpenter.sh/unregistered", "effect": "NoExecute"},
                        {"key": "node.kubernetes.io/not-ready", "effect": "NoSchedule"}
                    ]
                }
            })))
            .respond_with(existing("scaleway://baremetal/fr-par-2/srv-1"))
            .expect(1)
            .mount(&server)
            .await;
        registrar(&server)
            .await
            .register(&registration())
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn an_existing_node_with_the_same_provider_id_is_success() {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(path("/api/v1/nodes"))
            .respond_with(conflict())
            .mount(&server)
            .await;
        Mock::given(method("GET"))
            .and(path("/api/v1/nodes/default-abc12"))
            .respond_with(existing("scaleway://baremetal/fr-par-2/srv-1"))
            .mount(&server)
            .await;
        assert_eq!(
            registrar(&server).await.register(&registration()).await,
            Ok(())
        );
    }

    #[tokio::test]
    async fn a_node_of_another_machine_is_a_conflict_and_is_not_touched() {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(path("/api/v1/nodes"))
            .respond_with(conflict())
            .mount(&server)
            .await;
        Mock::given(method("GET"))
            .and(path("/api/v1/nodes/default-abc12"))
            .respond_with(existing("scaleway://baremetal/fr-par-2/other"))
            .mount(&server)
            .await;
        // Neither PUT, PATCH nor DELETE may reach the Node.
        for verb in ["PUT", "PATCH", "DELETE"] {
            Mock::given(method(verb))
                .respond_with(ResponseTemplate::new(500))
                .expect(0)
                .mount(&server)
                .await;
        }
        let err = registrar(&server)
            .await
            .register(&registration())
            .await
            .unwrap_err();
        assert!(
            matches!(err, KubeError::Conflict(ref m) if m.contains("other")),
            "{err:?}"
        );
    }

    fn joined(provider_id: &str, labels: serde_json::Value) -> ResponseTemplate {
        ResponseTemplate::new(200).set_body_json(json!({
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": "default-abc12", "uid": "node-uid-1",
                         "resourceVersion": "42", "labels": labels},
            "spec": {"providerID": provider_id}
        }))
    }

    async fn forget_with(
        node: ResponseTemplate,
        provider_id: Option<&str>,
        deletes: u64,
    ) -> Result<bool, KubeError> {
        let server = MockServer::start().await;
        Mock::given(method("GET"))
            .and(path("/api/v1/nodes/default-abc12"))
            .respond_with(node)
            .mount(&server)
            .await;
        Mock::given(method("DELETE"))
            .and(path("/api/v1/nodes/default-abc12"))
            .and(body_partial_json(json!({
                "preconditions": {"uid": "node-uid-1", "resourceVersion": "42"}
            })))
            .respond_with(ResponseTemplate::new(200).set_body_json(json!({
                "kind": "Status", "apiVersion": "v1", "status": "Success"
            })))
            .expect(deletes)
            .mount(&server)
            .await;
        registrar(&server)
            .await
            .forget("default-abc12", provider_id)
            .await
    }

    #[tokio::test]
    async fn forget_deletes_only_the_node_of_that_machine_guarded_by_uid() {
        let pid = "scaleway://instance/fr-par-2/vm-1";
        assert_eq!(
            forget_with(joined(pid, json!({})), Some(pid), 1).await,
            Ok(true)
        );
        assert_eq!(
            forget_with(
                joined("scaleway://instance/fr-par-2/vm-2", json!({})),
                Some(pid),
                0
            )
            .await,
            Ok(false)
        );
    }

    #[tokio::test]
    async fn forget_without_a_provider_id_spares_what_core_registered_or_another_cloud_runs() {
        let pid = "scaleway://instance/fr-par-2/vm-1";
        assert_eq!(forget_with(joined(pid, json!({})), None, 1).await, Ok(true));
        assert_eq!(
            forget_with(
                joined(pid, json!({"karpenter.sh/registered": "true"})),
                None,
                0
            )
            .await,
            Ok(false)
        );
        assert_eq!(
            forget_with(joined("aws:///eu-west-1a/i-1", json!({})), None, 0).await,
            Ok(false)
        );
    }

    #[tokio::test]
    async fn forget_of_an_absent_node_is_nothing_to_do() {
        let absent = ResponseTemplate::new(404).set_body_json(json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure",
            "message": "nodes \"default-abc12\" not found", "reason": "NotFound", "code": 404
        }));
        assert_eq!(
            forget_with(absent, Some("scaleway://instance/fr-par-2/vm-1"), 0).await,
            Ok(false)
        );
    }

    #[tokio::test]
    async fn api_errors_are_classified() {
        let server = MockServer::start().await;
        Mock::given(method("POST"))
            .and(path("/api/v1/nodes"))
            .respond_with(ResponseTemplate::new(403).set_body_json(json!({
                "kind": "Status", "apiVersion": "v1", "status": "Failure",
                "message": "nodes is forbidden", "reason": "Forbidden", "code": 403
            })))
            .mount(&server)
            .await;
        let err = registrar(&server)
            .await
            .register(&registration())
            .await
            .unwrap_err();
        assert!(matches!(err, KubeError::Refused(_)), "{err:?}");
    }
}
