//! `karpenter-scaleway plan`: what the demand planner (docs/planner.md) does
//! now, for every standby pool that has one. Two views side by side:
//! - the leader's decision, from the NodeClass's `status.planner`: target,
//!   servers adopted and standby, the sustained load and the servers it
//!   needs, EUR per hour on VMs and on metal, and why;
//! - the load now, read from the cluster by this command with the planner's
//!   own rules (pods on the planner's NodePools and on the pool's adopted
//!   nodes, DaemonSets left out), and the servers it would need if it stayed
//!   for the whole window.
//!
//! Only the Kubernetes API is read (no Scaleway credentials needed); nothing
//! secret is printed.

use std::collections::BTreeSet;
use std::fmt::Write as _;

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::api::{Api, ListParams};
use serde_json::{Value, json};

use crate::catalog::{bytes_quantity, parse_quantity_milli, reservation_id};
use crate::k8s::planner::{node_view, pod_view};
use crate::nodeclass::ScalewayElasticMetalNodeClass;
use crate::provider::standby::planner::{self, NodeView, PlannerSpec, PodView};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Table,
    Json,
}

#[derive(Debug, Clone, Args)]
pub struct PlanArgs {
    /// Only this NodeClass.
    #[arg(long)]
    pub nodeclass: Option<String>,
    /// A table, or JSON (every field).
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    pub output: Output,
    #[command(subcommand)]
    pub command: Option<PlanCommand>,
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum PlanCommand {
    /// Replays a load trace (or the shipped ones) through the planner,
    /// standby and billing code offline, and prints what it costs against
    /// VMs only, metal sized for the peak and the hindsight optimum.
    Replay(super::plan_replay::ReplayArgs),
}

/// One planned pool: the leader's status and the load now.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub nodeclass: String,
    pub offer: String,
    pub zone: String,
    pub node_pools: Vec<String>,
    pub dry_run: bool,
    /// The NodeClass's `status.planner` entry (`None`: no leader wrote one).
    pub status: Option<crate::nodeclass::PlannerStatus>,
    pub cpu_millis: u64,
    pub memory_bytes: u64,
    pub pods: usize,
    /// Servers the load now needs if it stayed, within the planner's bound
    /// (`None` when no status says what one server holds).
    pub would_need: Option<u32>,
}

fn quantity(text: &str) -> Option<u64> {
    parse_quantity_milli(text).map(|v| v.min(u128::from(u64::MAX)) as u64)
}

/// The planned pools of `classes` with the load of `nodes` and `pods` now.
pub fn rows(
    classes: &[ScalewayElasticMetalNodeClass],
    nodes: &[NodeView],
    pods: &[PodView],
) -> Vec<Row> {
    let mut out = Vec::new();
    for class in classes {
        let name = class.metadata.name.clone().unwrap_or_default();
        for pool in class.spec.standby.iter().flat_map(|s| &s.pools) {
            let Ok(Some(config)) = planner::config_of(pool) else {
                continue;
            };
            let rid = reservation_id(&name, &pool.offer, &pool.zone);
            let load = planner::load_of(nodes, pods, &config.node_pools, &rid);
            let status = class
                .status
                .as_ref()
                .and_then(|s| {
                    s.planner
                        .iter()
                        .find(|p| p.offer == pool.offer && p.zone == pool.zone)
                })
                .cloned();
            let would_need = status.as_ref().and_then(|s| {
                let spec = PlannerSpec {
                    window: config.window,
                    at_least: config.at_least,
                    hold: config.hold,
                    ahead: config.ahead,
                    max: config.max_servers,
                    server_cpu_millis: quantity(&s.server_cpu)?,
                    server_memory_bytes: quantity(&s.server_memory)? / 1000,
                };
                Some(
                    planner::servers_for(&spec, load.cpu_millis, load.memory_bytes)
                        .min(config.max_servers),
                )
            });
            out.push(Row {
                nodeclass: name.clone(),
                offer: pool.offer.clone(),
                zone: pool.zone.clone(),
                node_pools: config
                    .node_pools
                    .iter()
                    .cloned()
                    .collect::<BTreeSet<_>>()
                    .into_iter()
                    .collect(),
                dry_run: config.dry_run,
                status,
                cpu_millis: load.cpu_millis,
                memory_bytes: load.memory_bytes,
                pods: load.pods,
                would_need,
            });
        }
    }
    out
}

/// The table `plan` prints.
pub fn table(rows: &[Row]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<16} {:<14} {:<9} {:>6} {:>6} {:>7} {:>7} {:<22} {:<22} {:>9} {:>8} {:>8}  REASON",
        "NODECLASS",
        "OFFER",
        "ZONE",
        "TARGET",
        "NEEDED",
        "ADOPTED",
        "STANDBY",
        "SUSTAINED",
        "NOW",
        "NOW-NEEDS",
        "VM-EUR/H",
        "EM-EUR/H"
    );
    for r in rows {
        let dash = || "-".to_string();
        let s = r.status.as_ref();
        let sustained = s
            .and_then(|s| {
                Some(format!(
                    "{}/{}",
                    s.sustained_cpu.clone()?,
                    s.sustained_memory.clone()?
                ))
            })
            .unwrap_or_else(dash);
        let reason = s.map_or_else(
            || "no status yet: is the provider running and leading?".to_string(),
            |s| s.reason.clone(),
        );
        let _ = writeln!(
            out,
            "{:<16} {:<14} {:<9} {:>6} {:>6} {:>7} {:>7} {:<22} {:<22} {:>9} {:>8} {:>8}  {}{}",
            r.nodeclass,
            r.offer,
            r.zone,
            s.map_or_else(dash, |s| s.target.to_string()),
            s.and_then(|s| s.needed)
                .map_or_else(dash, |n| n.to_string()),
            s.map_or_else(dash, |s| s.adopted.to_string()),
            s.map_or_else(dash, |s| s.standby.to_string()),
            sustained,
            format!(
                "{}m/{} ({} pods)",
                r.cpu_millis,
                bytes_quantity(r.memory_bytes),
                r.pods
            ),
            r.would_need.map_or_else(dash, |n| n.to_string()),
            s.map_or_else(dash, |s| format!("{:.4}", s.vm_euros_per_hour)),
            s.map_or_else(dash, |s| format!("{:.4}", s.metal_euros_per_hour)),
            if r.dry_run { "[dry run] " } else { "" },
            reason,
        );
    }
    if rows.is_empty() {
        out.push_str("no standby pool has a planner (spec.standby.pools[].planner)\n");
    }
    out
}

/// Every field of every row.
pub fn json_rows(rows: &[Row]) -> Value {
    Value::Array(
        rows.iter()
            .map(|r| {
                json!({
                    "nodeclass": r.nodeclass,
                    "offer": r.offer,
                    "zone": r.zone,
                    "nodePools": r.node_pools,
                    "dryRun": r.dry_run,
                    "status": r.status,
                    "now": {
                        "cpu": format!("{}m", r.cpu_millis),
                        "memory": bytes_quantity(r.memory_bytes),
                        "pods": r.pods,
                        "wouldNeed": r.would_need,
                    },
                })
            })
            .collect(),
    )
}

pub async fn run(args: PlanArgs) -> anyhow::Result<()> {
    if let Some(PlanCommand::Replay(replay)) = args.command {
        return super::plan_replay::run(replay);
    }
    let client = kube::Client::try_default()
        .await
        .context("connecting to the Kubernetes API")?;
    let classes: Api<ScalewayElasticMetalNodeClass> = Api::all(client.clone());
    let mut classes = classes
        .list(&ListParams::default())
        .await
        .context("listing ScalewayElasticMetalNodeClasses")?
        .items;
    if let Some(only) = &args.nodeclass {
        classes.retain(|c| c.metadata.name.as_deref() == Some(only));
    }
    let nodes = Api::<Node>::all(client.clone())
        .list(&ListParams::default())
        .await
        .context("listing nodes")?;
    let pods = Api::<Pod>::all(client)
        .list(&ListParams::default().fields("status.phase!=Succeeded,status.phase!=Failed"))
        .await
        .context("listing pods")?;
    let nodes: Vec<NodeView> = nodes.items.iter().map(node_view).collect();
    let pods: Vec<PodView> = pods.items.iter().filter_map(pod_view).collect();
    let rows = rows(&classes, &nodes, &pods);
    match args.output {
        Output::Table => print!("{}", table(&rows)),
        Output::Json => println!("{}", serde_json::to_string_pretty(&json_rows(&rows))?),
    }
    Ok(())
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
