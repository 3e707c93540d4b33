//! What the repair-by-reboot scenarios (`e2e/tests/reboot*.rs`) share:
//! talos-sim's node faults, core's `Rebooting` condition on a NodeClaim, the
//! Node's boot id and the simulators' records of power cycles.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::core::v1::Node;
use kube::api::{Api, DynamicObject};
use serde_json::{Value, json};

use crate::stack::Stack;
use crate::{kubeutil, wait};

/// The provider flags every reboot scenario runs with: a node unhealthy for
/// 5 s is rebooted (the default is 10 min: core's repair runs on the wall
/// clock), and the provider's pass that watches accepted reboots runs
/// every 2 s.
pub fn provider_args() -> Vec<String> {
    vec![
        "--repair-reboot-after=5s".to_string(),
        "--resume-interval=2s".to_string(),
    ]
}

/// Arms a talos-sim fault aimed at one node (`not_ready_until_reboot`,
/// `silent_until_reboot`, `reboot_never_returns`,
/// `unhealthy_after_every_boot` with `delay_ms`).
pub async fn arm(stack: &Stack, kind: &str, node: &str, delay_ms: Option<u64>) -> Result<Value> {
    let mut body = json!({ "kind": kind, "node_name": node });
    if let Some(ms) = delay_ms {
        body["delay_ms"] = ms.into();
    }
    stack.talossim.add_fault_spec(&body).await
}

/// Core's `Rebooting` condition of a NodeClaim: (status, reason).
pub fn rebooting(claim: &DynamicObject) -> Option<(String, String)> {
    let c = claim.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == "Rebooting")?;
    Some((
        c["status"].as_str().unwrap_or_default().to_string(),
        c["reason"].as_str().unwrap_or_default().to_string(),
    ))
}

/// Waits until core reports the NodeClaim's reboot succeeded (Rebooting
/// False, reason RebootSucceeded) and returns the NodeClaim then.
pub async fn wait_reboot_succeeded(
    stack: &Stack,
    claim: &str,
    timeout: Duration,
) -> Result<DynamicObject> {
    let api = kubeutil::nodeclaims(&stack.client);
    wait::until(
        &format!("NodeClaim {claim} rebooted (Rebooting=False/RebootSucceeded)"),
        timeout,
        Duration::from_millis(250),
        || async {
            let nc = api.get(claim).await?;
            let state = rebooting(&nc);
            if let Some((status, reason)) = &state {
                ensure!(
                    !(status == "False" && reason == "RebootFailed"),
                    "core failed the reboot of {claim}: {:?}",
                    nc.data["status"]["conditions"]
                );
            }
            Ok((state == Some(("False".into(), "RebootSucceeded".into()))).then_some(nc))
        },
    )
    .await
}

/// The Node's `status.nodeInfo.bootID`.
pub async fn boot_id(stack: &Stack, node: &str) -> Result<String> {
    let nodes: Api<Node> = Api::all(stack.client.clone());
    let n = nodes.get(node).await?;
    n.status
        .and_then(|s| s.node_info)
        .map(|i| i.boot_id)
        .filter(|b| !b.is_empty())
        .with_context(|| format!("Node {node} has no bootID"))
}

/// The Elastic Metal server's boots as emsim recorded them (`boot_type` of
/// each power-on, the install's included).
pub async fn em_boots(stack: &Stack, server_id: &str) -> Result<Vec<String>> {
    let server = stack
        .emsim
        .servers_including_deleted()
        .await?
        .into_iter()
        .find(|s| s["id"] == server_id)
        .with_context(|| format!("emsim has no server {server_id}"))?;
    Ok(server["boot_history"]
        .as_array()
        .context("boot_history")?
        .iter()
        .map(|b| b["boot_type"].as_str().unwrap_or_default().to_string())
        .collect())
}

/// The NodeClaims of the stack by name, with their objects.
pub async fn claims(stack: &Stack) -> Result<Vec<DynamicObject>> {
    Ok(kubeutil::nodeclaims(&stack.client)
        .list(&Default::default())
        .await?
        .items)
}

/// The one NodeClaim of the stack once its node is Initialized: (NodeClaim
/// name, Node name, providerID).
pub async fn the_initialized_claim(stack: &Stack) -> Result<(String, String, String)> {
    wait::until(
        "one NodeClaim, Initialized",
        Duration::from_secs(120),
        Duration::from_millis(250),
        || async {
            let ncs = claims(stack).await?;
            if ncs.len() != 1 {
                return Ok(None);
            }
            let nc = &ncs[0];
            if kubeutil::condition(nc, "Initialized").as_deref() != Some("True") {
                return Ok(None);
            }
            let name = nc.metadata.name.clone().unwrap_or_default();
            let node = nc.data["status"]["nodeName"].as_str().unwrap_or_default();
            let pid = nc.data["status"]["providerID"].as_str().unwrap_or_default();
            Ok(Some((name, node.to_string(), pid.to_string())))
        },
    )
    .await
}

/// The distinct boot ids a Node shows while `done` is false, sampled every
/// 250 ms: every boot of a reboot lasts far longer (core polls every 15 s).
/// The Node may disappear (its NodeClaim replaced): then sampling goes on
/// until `done`.
pub async fn boots_seen_until<F, Fut>(
    stack: &Stack,
    node: &str,
    timeout: Duration,
    mut done: F,
) -> Result<BTreeSet<String>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<bool>>,
{
    let nodes: Api<Node> = Api::all(stack.client.clone());
    let start = std::time::Instant::now();
    let mut seen = BTreeSet::new();
    loop {
        if let Some(n) = nodes.get_opt(node).await?
            && let Some(b) = n.status.and_then(|s| s.node_info).map(|i| i.boot_id)
            && !b.is_empty()
        {
            seen.insert(b);
        }
        if done().await? {
            return Ok(seen);
        }
        ensure!(
            start.elapsed() < timeout,
            "timed out after {timeout:?} sampling Node {node}'s boot ids (seen {seen:?})"
        );
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// What an Elastic Metal node looked like before its reboot.
pub struct Before {
    pub claim: String,
    pub node: String,
    pub server: String,
    /// [`em_boots`] of the server.
    pub boots: Vec<String>,
    /// The Node's boot id.
    pub boot_id: String,
    /// [`crate::scenario::orders_placed`].
    pub orders: u64,
}

impl Before {
    pub async fn read(stack: &Stack, claim: &str, node: &str, server: &str) -> Result<Self> {
        Ok(Before {
            claim: claim.to_string(),
            node: node.to_string(),
            server: server.to_string(),
            boots: em_boots(stack, server).await?,
            boot_id: boot_id(stack, node).await?,
            orders: crate::scenario::orders_placed(stack).await?,
        })
    }

    /// Checks, after core reported the reboot succeeded, that it was one in
    /// place: one more normal boot of the same server in emsim's records, a
    /// new boot id on the Node, the `app` pods Running on it again, the same
    /// NodeClaim alone, no server ordered. Returns the boots after.
    pub async fn check_rebooted_in_place(
        &self,
        stack: &Stack,
        app: &str,
        pods: usize,
    ) -> Result<Vec<String>> {
        let (claim, node, server) = (&self.claim, &self.node, &self.server);
        let boots = em_boots(stack, server).await?;
        ensure!(
            boots.len() == self.boots.len() + 1
                && boots.last().map(String::as_str) == Some("normal"),
            "expected one more normal boot of {server}: before {:?}, after {boots:?}",
            self.boots
        );
        ensure!(
            boot_id(stack, node).await? != self.boot_id,
            "Node {node} kept boot id {}",
            self.boot_id
        );
        let placed =
            crate::scenario::wait_pods_running(stack, app, pods, Duration::from_secs(120)).await?;
        ensure!(
            placed.values().all(|n| n == node),
            "pods not back on {node}: {placed:?}"
        );
        let ncs = claims(stack).await?;
        ensure!(
            ncs.len() == 1 && ncs[0].metadata.name.as_deref() == Some(claim.as_str()),
            "NodeClaim {claim} replaced: {:?}",
            ncs.iter()
                .map(|n| n.metadata.name.clone())
                .collect::<Vec<_>>()
        );
        ensure!(
            crate::scenario::orders_placed(stack).await? == self.orders,
            "a server was ordered"
        );
        Ok(boots)
    }
}
