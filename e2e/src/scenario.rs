//! Building blocks of the scenarios: the workload, and the waits that read the
//! cluster, emsim and talos-sim.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};

use crate::stack::Stack;
use crate::{kubeutil, wait};

pub const APP_NAMESPACE: &str = "default";

/// A Deployment of `replicas` pods that request `cpu` each and fit no existing node.
pub fn inflate_yaml(name: &str, replicas: u32, cpu: &str) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
  namespace: {APP_NAMESPACE}
spec:
  replicas: {replicas}
  selector:
    matchLabels: {{app: {name}}}
  template:
    metadata:
      labels: {{app: {name}}}
    spec:
      terminationGracePeriodSeconds: 0
      containers:
        - name: pause
          image: registry.k8s.io/pause:3.10
          resources:
            requests: {{cpu: "{cpu}", memory: 256Mi}}
"#
    )
}

pub async fn scale(stack: &Stack, name: &str, replicas: u32) -> Result<()> {
    let api: Api<Deployment> = Api::namespaced(stack.client.clone(), APP_NAMESPACE);
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"replicas": replicas}})),
    )
    .await?;
    Ok(())
}

/// Waits until every pod of app `name` is Running on a Ready node; returns pod -> node.
pub async fn wait_pods_running(
    stack: &Stack,
    name: &str,
    replicas: usize,
    timeout: Duration,
) -> Result<BTreeMap<String, String>> {
    let pods: Api<Pod> = Api::namespaced(stack.client.clone(), APP_NAMESPACE);
    let nodes: Api<Node> = Api::all(stack.client.clone());
    wait::until(
        &format!("{replicas} pods of {name} Running on Ready nodes"),
        timeout,
        Duration::from_millis(500),
        || {
            let (pods, nodes) = (pods.clone(), nodes.clone());
            async move {
                let list = pods
                    .list(&ListParams::default().labels(&format!("app={name}")))
                    .await?;
                let mut placed = BTreeMap::new();
                for p in list
                    .items
                    .iter()
                    .filter(|p| p.metadata.deletion_timestamp.is_none())
                {
                    let running =
                        p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
                    let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.clone()) else {
                        continue;
                    };
                    if running
                        && nodes
                            .get_opt(&node)
                            .await?
                            .as_ref()
                            .is_some_and(kubeutil::node_ready)
                    {
                        placed.insert(p.name_any(), node);
                    }
                }
                Ok((placed.len() == replicas).then_some(placed))
            }
        },
    )
    .await
}

/// Current NodeClaims (name -> providerID, empty while launching).
pub async fn nodeclaims(stack: &Stack) -> Result<BTreeMap<String, String>> {
    let list = kubeutil::nodeclaims(&stack.client)
        .list(&ListParams::default())
        .await?;
    Ok(list
        .items
        .iter()
        .map(|nc| {
            let pid = nc.data["status"]["providerID"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            (nc.name_any(), pid)
        })
        .collect())
}

/// Waits until the cluster holds no NodeClaim, no Node from this provider and
/// emsim holds no server of this cluster.
pub async fn wait_all_gone(stack: &Stack, timeout: Duration) -> Result<()> {
    let nodes: Api<Node> = Api::all(stack.client.clone());
    wait::until(
        "NodeClaims, Nodes and servers gone",
        timeout,
        Duration::from_secs(1),
        || {
            let nodes = nodes.clone();
            async move {
                let ncs = nodeclaims(stack).await?;
                let ours = nodes
                    .list(&ListParams::default())
                    .await?
                    .items
                    .into_iter()
                    .filter(|n| {
                        n.spec
                            .as_ref()
                            .and_then(|s| s.provider_id.as_deref())
                            .is_some_and(|p| p.starts_with("scaleway://"))
                    })
                    .count();
                let servers = stack.owned_servers().await?.len();
                tracing::info!(
                    nodeclaims = ncs.len(),
                    nodes = ours,
                    servers,
                    "waiting for teardown"
                );
                Ok((ncs.is_empty() && ours == 0 && servers == 0).then_some(()))
            }
        },
    )
    .await
}

/// `scaleway://baremetal/{zone}/{id}` -> (zone, id).
pub fn parse_provider_id(pid: &str) -> Result<(String, String)> {
    let rest = pid
        .strip_prefix("scaleway://baremetal/")
        .context("providerID prefix")?;
    let (zone, id) = rest.split_once('/').context("providerID shape")?;
    Ok((zone.to_string(), id.to_string()))
}
