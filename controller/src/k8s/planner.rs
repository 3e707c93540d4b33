//! The demand planner's view of the cluster (`provider/standby/demand.rs`):
//! nodes by their labels and running pods by their effective requests, and
//! the NodeClass's `status.planner` it writes back.

use std::collections::BTreeMap;

use async_trait::async_trait;
use k8s_openapi::api::core::v1::{Container, Node, Pod};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

use crate::catalog::{LABEL_RESERVATION_ID, parse_quantity_milli};
use crate::nodeclass::{PlannerStatus, ScalewayElasticMetalNodeClass};
use crate::provider::standby::planner::{NodeView, Observed, PodView};
use crate::provider::standby::{LoadSource, PlannerStatusSink};

const NODEPOOL: &str = "karpenter.sh/nodepool";
const INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
const ZONE: &str = "topology.kubernetes.io/zone";
const CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
/// Static pods' mirrors carry it: they run on their node whatever happens.
const MIRROR: &str = "kubernetes.io/config.mirror";

/// A node as the planner sees it.
pub fn node_view(node: &Node) -> NodeView {
    let labels = node.metadata.labels.clone().unwrap_or_default();
    let get = |k: &str| labels.get(k).cloned();
    NodeView {
        name: node.metadata.name.clone().unwrap_or_default(),
        node_pool: get(NODEPOOL),
        reservation: get(LABEL_RESERVATION_ID),
        instance_type: get(INSTANCE_TYPE),
        zone: get(ZONE),
        capacity_type: get(CAPACITY_TYPE),
    }
}

fn requests(c: &Container) -> (u64, u64) {
    let get = |name: &str| {
        c.resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .and_then(|r| r.get(name))
            .map_or(0, milli)
    };
    (get("cpu"), get("memory") / 1000)
}

fn milli(q: &Quantity) -> u64 {
    parse_quantity_milli(&q.0).map_or(0, |v| v.min(u128::from(u64::MAX)) as u64)
}

/// A pod bound to a node and not finished, with what the scheduler counts
/// for it: its containers and sidecars (init containers that keep running)
/// summed, or its largest other init container if that is more, plus its
/// overhead. `None` for a pod that holds nothing.
pub fn pod_view(pod: &Pod) -> Option<PodView> {
    let spec = pod.spec.as_ref()?;
    let node = spec.node_name.clone().filter(|n| !n.is_empty())?;
    let phase = pod.status.as_ref().and_then(|s| s.phase.as_deref());
    if matches!(phase, Some("Succeeded" | "Failed")) {
        return None;
    }
    let mut running = (0u64, 0u64);
    for c in &spec.containers {
        let r = requests(c);
        running = (running.0 + r.0, running.1 + r.1);
    }
    let mut init_peak = (0u64, 0u64);
    let mut sidecars = (0u64, 0u64);
    for c in spec.init_containers.iter().flatten() {
        let r = requests(c);
        if c.restart_policy.as_deref() == Some("Always") {
            sidecars = (sidecars.0 + r.0, sidecars.1 + r.1);
        } else {
            // An init container runs next to the sidecars started before it.
            init_peak = (
                init_peak.0.max(sidecars.0 + r.0),
                init_peak.1.max(sidecars.1 + r.1),
            );
        }
    }
    running = (running.0 + sidecars.0, running.1 + sidecars.1);
    let overhead: BTreeMap<String, Quantity> = spec.overhead.clone().unwrap_or_default();
    let extra = (
        overhead.get("cpu").map_or(0, milli),
        overhead.get("memory").map_or(0, milli) / 1000,
    );
    let daemon_set = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "DaemonSet")
        || pod
            .metadata
            .annotations
            .as_ref()
            .is_some_and(|a| a.contains_key(MIRROR));
    Some(PodView {
        node,
        cpu_millis: running.0.max(init_peak.0) + extra.0,
        memory_bytes: running.1.max(init_peak.1) + extra.1,
        daemon_set,
    })
}

/// Lists nodes and pods through the API server.
pub struct KubePlannerLoad {
    nodes: Api<Node>,
    pods: Api<Pod>,
}

impl KubePlannerLoad {
    pub fn new(client: Client) -> Self {
        KubePlannerLoad {
            nodes: Api::all(client.clone()),
            pods: Api::all(client),
        }
    }
}

#[async_trait]
impl LoadSource for KubePlannerLoad {
    async fn observe(&self) -> Result<Observed, String> {
        let nodes = self
            .nodes
            .list(&ListParams::default())
            .await
            .map_err(|e| format!("listing nodes: {e}"))?;
        let pods = self
            .pods
            .list(&ListParams::default().fields("status.phase!=Succeeded,status.phase!=Failed"))
            .await
            .map_err(|e| format!("listing pods: {e}"))?;
        Ok((
            nodes.items.iter().map(node_view).collect(),
            pods.items.iter().filter_map(pod_view).collect(),
        ))
    }
}

/// Writes `status.planner` of an Elastic Metal NodeClass.
pub struct KubePlannerStatus {
    classes: Api<ScalewayElasticMetalNodeClass>,
}

impl KubePlannerStatus {
    pub fn new(client: Client) -> Self {
        KubePlannerStatus {
            classes: Api::all(client),
        }
    }
}

#[async_trait]
impl PlannerStatusSink for KubePlannerStatus {
    async fn publish(&self, class: &str, pools: Vec<PlannerStatus>) -> Result<(), String> {
        // A merge patch of `planner` alone: the conditions the status
        // reconciler writes stay as they are.
        let patch = json!({ "status": { "planner": pools } });
        self.classes
            .patch_status(class, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

#[cfg(test)]
#[path = "planner_tests.rs"]
mod tests;
