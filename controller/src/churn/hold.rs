//! The kube side of the churn guard: what Create reads of an idle sibling's
//! Node, and the hold that keeps such a Node from being disrupted until core
//! moves pods onto it (see the module documentation of [`super`]).
//!
//! A hold is three marks on the Node: the label [`HOLD_LABEL`] (so that the
//! churn watch finds held Nodes with one list), core's
//! `karpenter.sh/do-not-disrupt: "true"`, and [`HOLD_UNTIL`] with the time it
//! ends. A Node that already carries `do-not-disrupt` without the label is
//! someone else's decision: it is neither held nor released here.

use std::collections::BTreeMap;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::Client;
use kube::api::{Api, ListParams, Patch, PatchParams};
use serde_json::json;

use super::{NodeState, is_workload};
use crate::k8s::nodes::classify_kube;
use crate::provider::{KubeError, SiblingNodes};

/// Label of a Node this provider holds.
pub const HOLD_LABEL: &str = "karpenter.scaleway.com/churn-hold";
/// When the hold ends (RFC 3339).
pub const HOLD_UNTIL: &str = "karpenter.scaleway.com/churn-hold-until";
/// Why the Node is held, for `kubectl describe`.
pub const HOLD_REASON: &str = "karpenter.scaleway.com/churn-hold-reason";
/// Core's annotation that keeps a Node out of every disruption method.
pub const DO_NOT_DISRUPT: &str = "karpenter.sh/do-not-disrupt";
/// Core's taint on a Node that a disruption command is taking away.
pub const DISRUPTED_TAINT: &str = "karpenter.sh/disrupted";

/// A held Node, as listed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    pub node: String,
    /// `None` when the annotation is missing or unreadable: lifted at once.
    pub until: Option<DateTime<Utc>>,
    pub reason: String,
}

#[derive(Clone)]
pub struct KubeSiblingNodes {
    nodes: Api<Node>,
    pods: Api<Pod>,
    nodepools: Api<kube::api::DynamicObject>,
}

impl KubeSiblingNodes {
    pub fn new(client: Client) -> Self {
        KubeSiblingNodes {
            nodes: Api::all(client.clone()),
            pods: Api::all(client.clone()),
            nodepools: Api::all_with(client, &super::watch::node_pool_resource()),
        }
    }

    /// Whether a pod other than a DaemonSet's or a mirror pod runs on `node`.
    pub async fn runs_work(&self, node: &str) -> Result<bool, kube::Error> {
        Ok(self.pods_on(node).await?.0)
    }

    /// Whether a workload pod runs on `node` ([`is_workload`]), and what
    /// all its pods request (see [`NodeState::used`]).
    async fn pods_on(&self, node: &str) -> Result<(bool, BTreeMap<String, u128>), kube::Error> {
        let params = ListParams::default().fields(&format!("spec.nodeName={node}"));
        let pods = self.pods.list(&params).await?;
        let runs_work = pods.items.iter().any(|p| {
            serde_json::to_value(p)
                .map(|v| is_workload(&v))
                .unwrap_or(true)
        });
        Ok((runs_work, requested(&pods.items)))
    }

    /// Every Node this provider holds.
    pub async fn held(&self) -> Result<Vec<Held>, kube::Error> {
        let params = ListParams::default().labels(&format!("{HOLD_LABEL}=true"));
        Ok(self
            .nodes
            .list(&params)
            .await?
            .items
            .into_iter()
            .map(|n| {
                let annotations = n.metadata.annotations.unwrap_or_default();
                Held {
                    node: n.metadata.name.unwrap_or_default(),
                    until: annotations
                        .get(HOLD_UNTIL)
                        .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
                        .map(|t| t.with_timezone(&Utc)),
                    reason: annotations.get(HOLD_REASON).cloned().unwrap_or_default(),
                }
            })
            .collect())
    }

    /// Lifts the hold: the label and the three annotations go. A Node gone is
    /// success.
    pub async fn release(&self, node: &str) -> Result<(), kube::Error> {
        let patch = json!({"metadata": {
            "labels": {HOLD_LABEL: null},
            "annotations": {DO_NOT_DISRUPT: null, HOLD_UNTIL: null, HOLD_REASON: null},
        }});
        match self
            .nodes
            .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => Ok(()),
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(e),
        }
    }

    /// Places the hold; `Ok(false)` when the Node is gone or carries a
    /// `do-not-disrupt` of someone else's (left alone).
    pub async fn place(
        &self,
        node: &str,
        until: DateTime<Utc>,
        reason: &str,
    ) -> Result<bool, kube::Error> {
        let Some(current) = self.nodes.get_opt(node).await? else {
            return Ok(false);
        };
        let labels = current.metadata.labels.unwrap_or_default();
        let annotations = current.metadata.annotations.unwrap_or_default();
        let ours = labels.get(HOLD_LABEL).map(String::as_str) == Some("true");
        if !ours && annotations.get(DO_NOT_DISRUPT).map(String::as_str) == Some("true") {
            return Ok(false);
        }
        // An existing hold is extended, never shortened.
        let until = annotations
            .get(HOLD_UNTIL)
            .filter(|_| ours)
            .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
            .map(|t| t.with_timezone(&Utc))
            .map_or(until, |t| t.max(until));
        let patch = json!({"metadata": {
            "labels": {HOLD_LABEL: "true"},
            "annotations": {
                DO_NOT_DISRUPT: "true",
                HOLD_UNTIL: until.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                HOLD_REASON: reason,
            },
        }});
        self.nodes
            .patch(node, &PatchParams::default(), &Patch::Merge(&patch))
            .await?;
        Ok(true)
    }
}

#[async_trait]
impl SiblingNodes for KubeSiblingNodes {
    async fn state(&self, node: &str) -> Result<Option<NodeState>, KubeError> {
        let Some(n) = self.nodes.get_opt(node).await.map_err(classify_kube)? else {
            return Ok(None);
        };
        let disrupted = n
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|ts| ts.iter().any(|t| t.key == DISRUPTED_TAINT));
        let (runs_work, used) = self.pods_on(node).await.map_err(classify_kube)?;
        Ok(Some(NodeState {
            disrupted,
            runs_work,
            used,
        }))
    }

    async fn hold(
        &self,
        node: &str,
        until: DateTime<Utc>,
        reason: &str,
    ) -> Result<bool, KubeError> {
        self.place(node, until, reason).await.map_err(classify_kube)
    }

    async fn static_pool(&self, nodepool: &str) -> Result<bool, KubeError> {
        let pool = self
            .nodepools
            .get_opt(nodepool)
            .await
            .map_err(classify_kube)?;
        Ok(pool.is_some_and(|p| {
            p.data
                .pointer("/spec/replicas")
                .is_some_and(|r| !r.is_null())
        }))
    }
}

/// What `pods` request together, as the scheduler counts them (containers
/// and sidecars, the init peak, the overhead; finished pods hold nothing),
/// in thousandths: `cpu` in millicores, `memory` in thousandths of a byte,
/// `pods` one thousand each.
pub fn requested(pods: &[Pod]) -> BTreeMap<String, u128> {
    let mut cpu = 0u128;
    let mut memory = 0u128;
    let mut count = 0u128;
    for view in pods.iter().filter_map(crate::k8s::planner::pod_view) {
        cpu += u128::from(view.cpu_millis);
        memory += u128::from(view.memory_bytes) * 1000;
        count += 1000;
    }
    BTreeMap::from([
        ("cpu".to_string(), cpu),
        ("memory".to_string(), memory),
        ("pods".to_string(), count),
    ])
}
