//! Warm-metal helpers of the scenarios: NodeClasses with standby pools,
//! NodePools limited to reserved capacity, and reading standby servers from
//! emsim's own records (what the provider wrote on them).

use std::time::Duration;

use anyhow::{Context, Result};
use serde_json::Value;

use crate::stack::Stack;
use crate::wait;

/// One `spec.standby.pools` entry.
pub struct Pool<'a> {
    pub offer: &'a str,
    pub min: u32,
    pub max: u32,
    /// `idleHourlyKeep`, e.g. `"30m"`.
    pub idle_hourly_keep: Option<&'a str>,
}

/// The scenarios' NodeClass ([`Stack::nodeclass_yaml`]) with standby pools in
/// the stack's zone and the given billing.
pub fn nodeclass_yaml(stack: &Stack, name: &str, billing: &str, pools: &[Pool]) -> String {
    let mut yaml = stack
        .nodeclass_yaml(name)
        .replace("  billing: hourly\n", &format!("  billing: {billing}\n"));
    yaml.push_str("  standby:\n    pools:\n");
    for p in pools {
        yaml.push_str(&format!(
            "      - {{offer: {}, zone: {}, min: {}, max: {}{}}}\n",
            p.offer,
            crate::stack::ZONE,
            p.min,
            p.max,
            p.idle_hourly_keep
                .map(|k| format!(", idleHourlyKeep: \"{k}\""))
                .unwrap_or_default()
        ));
    }
    yaml
}

/// A NodePool of `nodeclass` that only adopts standby servers (reserved
/// capacity) of `offers`, at `weight`.
pub fn reserved_nodepool_yaml(name: &str, nodeclass: &str, weight: u32, offers: &[&str]) -> String {
    Stack::nodepool_yaml(
        name,
        nodeclass,
        &crate::scenario::instance_types_requirement(offers),
    )
    .replace(
        "          values: [\"on-demand\"]\n",
        "          values: [\"reserved\"]\n",
    )
    .replace(
        "spec:\n  template:\n",
        &format!("spec:\n  weight: {weight}\n  template:\n"),
    )
}

/// The value of the `key=` tag of an emsim server record.
pub fn tag(server: &Value, key: &str) -> Option<String> {
    server["tags"].as_array()?.iter().find_map(|t| {
        t.as_str()?
            .strip_prefix(key)?
            .strip_prefix('=')
            .map(str::to_string)
    })
}

/// `standby/<state>` of a standby server record (`idle`, `installing`,
/// `wiping`), as the provider's tags say; `None` for anything else.
pub fn state(server: &Value) -> Option<&'static str> {
    tag(server, "karpenter.scaleway.com/standby")?;
    if tag(server, "karpenter.sh/nodeclaim").is_some() {
        return None;
    }
    Some(
        match (
            tag(server, "install.karpenter.scaleway.com/phase").as_deref(),
            tag(server, "karpenter.scaleway.com/recycled").as_deref(),
        ) {
            (Some("standby"), _) => "idle",
            (_, Some("true")) => "wiping",
            _ => "installing",
        },
    )
}

/// emsim's live (not deleted) servers that are standby servers of `class`.
pub async fn standby_servers(stack: &Stack, class: &str) -> Result<Vec<Value>> {
    Ok(stack
        .emsim
        .servers()
        .await?
        .into_iter()
        .filter(|s| s["deleted_at"].is_null() && s["status"] != "deleting")
        .filter(|s| {
            state(s).is_some() && tag(s, "karpenter.scaleway.com/standby").as_deref() == Some(class)
        })
        .collect())
}

/// Waits until `class` has `n` idle standby servers (and returns them).
pub async fn wait_idle(
    stack: &Stack,
    class: &str,
    n: usize,
    timeout: Duration,
) -> Result<Vec<Value>> {
    wait::until(
        &format!("{n} idle standby server(s) of NodeClass {class}"),
        timeout,
        Duration::from_millis(250),
        || async {
            let idle: Vec<Value> = standby_servers(stack, class)
                .await?
                .into_iter()
                .filter(|s| state(s) == Some("idle"))
                .collect();
            Ok((idle.len() == n).then_some(idle))
        },
    )
    .await
}

/// The capacity of the reserved offering `reservation` as core sees it:
/// the provider's catalog through the bridge is not exported, so this reads
/// the provider's `karpenter_scaleway_standby_servers{state="idle"}`.
pub async fn idle_metric(stack: &Stack, class: &str) -> Result<f64> {
    crate::scenario::provider_metric(
        stack,
        "karpenter_scaleway_standby_servers",
        &[("nodeclass", class), ("state", "idle")],
    )
    .await
}

/// The boot history (`boot_type`s in order) of an emsim server record.
pub fn boots(server: &Value) -> Result<Vec<String>> {
    Ok(server["boot_history"]
        .as_array()
        .context("boot_history")?
        .iter()
        .filter_map(|b| b["boot_type"].as_str().map(str::to_string))
        .collect())
}

/// Waits until no NodeClaim and no Node of this provider is left (servers
/// may stay: standby servers outlive their nodes).
pub async fn wait_nodes_gone(stack: &Stack, timeout: Duration) -> Result<()> {
    wait::until(
        "NodeClaims and Nodes gone",
        timeout,
        Duration::from_millis(500),
        || async {
            let claims = crate::scenario::nodeclaims(stack).await?;
            let nodes = crate::scenario::our_nodes(stack).await?;
            Ok((claims.is_empty() && nodes == 0).then_some(()))
        },
    )
    .await
}

/// Waits until emsim has no live server left (every one deleted).
pub async fn wait_no_live_servers(stack: &Stack, timeout: Duration) -> Result<()> {
    wait::until(
        "every server deleted",
        timeout,
        Duration::from_millis(500),
        || async {
            let live: Vec<String> = stack
                .emsim
                .servers_including_deleted()
                .await?
                .into_iter()
                .filter(|s| s["deleted_at"].is_null())
                .map(|s| s["id"].to_string())
                .collect();
            Ok(live.is_empty().then_some(()))
        },
    )
    .await
}
