//! Adapter feeding the catalog what registered Nodes really offer: every Node
//! of this provider (providerID `scaleway://baremetal/...`) that is Ready
//! reports its allocatable per offer (its instance-type label), and the
//! catalog never promises more than the lowest report (see
//! `CatalogStore::observe_allocatable`). The kernel's share of memory and the
//! size of Talos' EPHEMERAL partition are only known once a server runs.

use std::sync::Arc;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Node;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use tracing::{debug, info, warn};

use crate::catalog::{CatalogStore, LABEL_INSTANCE_TYPE, Resources};
use crate::provider::PROVIDER_ID_PREFIX;

/// The offer and allocatable of a Node, when it is one of ours and Ready.
pub fn observed_allocatable(node: &Node) -> Option<(String, Resources)> {
    let spec = node.spec.as_ref()?;
    if !spec
        .provider_id
        .as_deref()
        .is_some_and(|p| p.starts_with(PROVIDER_ID_PREFIX))
    {
        return None;
    }
    if node.metadata.deletion_timestamp.is_some() {
        return None;
    }
    let status = node.status.as_ref()?;
    let ready = status
        .conditions
        .as_ref()?
        .iter()
        .any(|c| c.type_ == "Ready" && c.status == "True");
    if !ready {
        return None;
    }
    let offer = node.labels().get(LABEL_INSTANCE_TYPE)?.clone();
    let allocatable = status.allocatable.as_ref()?;
    let resources =
        Resources::from_quantities(allocatable.iter().map(|(k, v)| (k.as_str(), v.0.as_str())))?;
    Some((offer, resources))
}

/// Watches Nodes until `stop` resolves. Errors of the watch are retried with
/// kube's default backoff; they never stop the provider.
pub async fn observe_nodes(
    client: Client,
    store: Arc<CatalogStore>,
    stop: impl Future<Output = ()> + Send,
) {
    let api: Api<Node> = Api::all(client);
    let nodes = watcher(api, watcher::Config::default())
        .default_backoff()
        .touched_objects();
    let run = nodes.for_each(|event| {
        match event {
            Ok(node) => {
                if let Some((offer, allocatable)) = observed_allocatable(&node) {
                    debug!(node = %node.name_any(), %offer, ?allocatable, "Node allocatable observed");
                    store.observe_allocatable(&offer, allocatable);
                }
            }
            Err(error) => warn!(%error, "watching Nodes for their allocatable"),
        }
        futures::future::ready(())
    });
    info!("observing the allocatable of registered Nodes");
    tokio::select! {
        _ = run => {}
        _ = stop => {}
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    fn node(provider_id: &str, ready: &str) -> Node {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "n1", "labels": {"node.kubernetes.io/instance-type": "EM-A115X-SSD"}},
            "spec": {"providerID": provider_id},
            "status": {
                "conditions": [{"type": "Ready", "status": ready}],
                "allocatable": {"cpu": "3870m", "memory": "30504712Ki", "pods": "110",
                                "ephemeral-storage": "921184158784"}
            }
        }))
        .unwrap()
    }

    #[test]
    fn reads_ready_nodes_of_this_provider_only() {
        let (offer, r) =
            observed_allocatable(&node("scaleway://baremetal/fr-par-2/abc", "True")).unwrap();
        assert_eq!(offer, "EM-A115X-SSD");
        assert_eq!(r.cpu_millis, 3_870);
        assert_eq!(r.memory_bytes, 30_504_712 * 1024);
        assert!(
            observed_allocatable(&node("scaleway://baremetal/fr-par-2/abc", "False")).is_none()
        );
        assert!(observed_allocatable(&node("kind://docker/kind/n1", "True")).is_none());
        let mut bad = node("scaleway://baremetal/fr-par-2/abc", "True");
        bad.status
            .as_mut()
            .unwrap()
            .allocatable
            .as_mut()
            .unwrap()
            .insert("memory".into(), Quantity("lots".into()));
        assert!(observed_allocatable(&bad).is_none());
    }
}
