//! Issue 14: sustained load moves from VMs to bare metal by itself. A VM
//! NodePool (weight 10) and an Elastic Metal NodePool limited to reserved
//! capacity (weight 50) share the work; the metal NodeClass's standby pool
//! has a demand planner counting the VM NodePool's load. A Deployment lands
//! on VMs first (nothing is reserved yet); once its load has stayed for the
//! planner's window, the planner stages one server, Karpenter core's own
//! consolidation replaces the VMs by that server (an adoption, seconds),
//! a PodDisruptionBudget holds all along, the VMs and their volumes go, and
//! the cost per hour (from emsim's public prices) is lower. When the
//! Deployment scales to zero, the server goes back to standby, the planner
//! lowers its target after its hold, and the server is released at the end
//! of its paid hour.
//!
//! Planner windows are the cluster's time (real seconds here); emsim runs at
//! the suite's time scale, so a paid hour lasts 36 s.

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use e2e::hybrid::{self, RunningWatch};
use e2e::stack::Stack;
use e2e::standby;
use e2e::{kubeutil, scenario, wait};

use crate::instances::{nothing_billed_left, opts};

const OFFER: &str = "EM-A115X-SSD";
const VM: &str = "POP2-2C-8G";
const METAL: &str = "metal";
const VMS: &str = "vms";
const APP: &str = "steady";
const REPLICAS: u32 = 3;
/// One pod per POP2-2C-8G (2 vCPU less the kubelet's reservations), all
/// three on one EM-A115X-SSD (4 cores).
const POD_CPU: &str = "1100m";
const WINDOW_S: u64 = 40;
const HOLD_S: u64 = 20;

/// The VM NodePool (weight 10) and the metal NodeClass, a standby pool of
/// `OFFER` with no standing server (`min: 0`) and a planner counting the
/// VM NodePool, with its reserved-only NodePool (weight 50).
const SETUP: hybrid::VmsFirst<'static> = hybrid::VmsFirst {
    vms: VMS,
    vm_type: VM,
    metal: METAL,
    offer: OFFER,
    max: 2,
    window: Duration::from_secs(WINDOW_S),
    hold: Duration::from_secs(HOLD_S),
};

/// Waits until every pod of the app runs on a node of NodePool `pool`.
async fn wait_pods_on_pool(stack: &Stack, pool: &str, timeout: Duration) -> Result<()> {
    wait::until(
        &format!("{REPLICAS} pods of {APP} running on NodePool {pool}"),
        timeout,
        Duration::from_secs(1),
        || async {
            let placed =
                scenario::wait_pods_running(stack, APP, REPLICAS as usize, Duration::from_secs(5))
                    .await
                    .ok();
            let Some(placed) = placed else {
                return Ok(None);
            };
            let by_pool = hybrid::nodes_by_pool(stack).await?;
            let nodes: Vec<&String> = by_pool
                .get(pool)
                .map(|n| n.iter().map(|(name, _)| name).collect())
                .unwrap_or_default();
            Ok(placed.values().all(|n| nodes.contains(&n)).then_some(()))
        },
    )
    .await
}

async fn live_vms(stack: &Stack) -> Result<usize> {
    Ok(stack
        .emsim
        .instance_servers_including_deleted()
        .await?
        .iter()
        .filter(|s| s["deleted_at"].is_null())
        .count())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hybrid_sustained_load_moves_from_vms_to_staged_metal_and_back() -> Result<()> {
    let mut options = opts("hybrid")?;
    options.provider_args.extend([
        "--standby-interval=1s".to_string(),
        "--standby-release-margin=300s".to_string(),
    ]);
    scenario::with_stack(options, run).await
}

async fn run(stack: &mut Stack) -> Result<()> {
    SETUP.apply(stack, true).await?;
    kubeutil::apply_yaml(&stack.client, &hybrid::pdb_yaml(APP, REPLICAS - 1)).await?;

    // 1. The burst lands on VMs: nothing is reserved, and the metal
    //    NodePool takes reserved capacity only.
    let burst = Instant::now();
    kubeutil::apply_yaml(
        &stack.client,
        &scenario::inflate_yaml(APP, REPLICAS, POD_CPU),
    )
    .await?;
    scenario::wait_pods_running(stack, APP, REPLICAS as usize, Duration::from_secs(240)).await?;
    let burst_s = burst.elapsed().as_secs_f64();
    let by_pool = hybrid::nodes_by_pool(stack).await?;
    ensure!(
        by_pool.keys().collect::<Vec<_>>() == [VMS]
            && by_pool[VMS].len() == REPLICAS as usize
            && by_pool[VMS].iter().all(|(_, kind)| kind == VM),
        "the burst should run on {REPLICAS} {VM} VMs: {by_pool:?}"
    );
    let prices = hybrid::prices(stack).await?;
    let before = hybrid::billed_per_hour(stack, &prices).await?;

    // Every change of the app's pods from now on.
    let watch = RunningWatch::armed(stack, APP, REPLICAS as usize).await?;

    // 2. After the window, the planner stages one server for the sustained
    //    load, at most the app's 3300m (the VMs' own nodes cost nothing in
    //    this count: pods only).
    let staged = hybrid::wait_planner(
        stack,
        METAL,
        "the planner's target at 1",
        Duration::from_secs(WINDOW_S + 60),
        |s| s["target"] == 1,
    )
    .await?;
    let staged_after_s = burst.elapsed().as_secs_f64();
    ensure!(
        staged_after_s >= WINDOW_S as f64,
        "staged {staged_after_s:.1}s after the burst, before the {WINDOW_S}s window"
    );
    // The sustained load is the least over the window, and the three VMs
    // boot at different times: the target rises as soon as one server's
    // worth of pods has run for the whole window, which may be before the
    // last pod has (a run of 2026-11-27 saw 2200m). Whole pods of the app,
    // never more than it runs, never a VM node's own overhead.
    let sustained = staged["sustainedCpu"]
        .as_str()
        .unwrap_or_default()
        .to_string();
    ensure!(
        staged["needed"] == 1 && ["1100m", "2200m", "3300m"].contains(&sustained.as_str()),
        "planner status: {staged}"
    );
    let raised =
        scenario::wait_provider_events(stack, "PlannerTargetRaised", |e| !e.is_empty()).await?;
    let note = raised
        .first()
        .and_then(|e| e.note.clone())
        .context("no PlannerTargetRaised Event")?;
    // The Event says what the load was at the raise (the status may have
    // been rewritten since).
    ensure!(
        ["1100m", "2200m", "3300m"]
            .iter()
            .any(|cpu| note.contains(&format!("sustained load {cpu} CPU"))),
        "no sustained load of whole app pods in the Event: {note}"
    );
    for part in [
        "from 0 to 1 server(s)",
        "NodePools vms cost 0.2205 EUR/h",
        "1 server(s) of EM-A115X-SSD cost 0.0910 EUR/h",
    ] {
        ensure!(note.contains(part), "{part:?} not in the Event: {note}");
    }
    standby::wait_idle(stack, METAL, 1, Duration::from_secs(180)).await?;
    let ready_s = burst.elapsed().as_secs_f64();

    // 3. Karpenter consolidates the VMs onto the reserved server; the PDB
    //    holds, the VMs and their volumes go.
    wait_pods_on_pool(stack, METAL, Duration::from_secs(300)).await?;
    let moved_s = burst.elapsed().as_secs_f64();
    wait::until(
        "every VM deleted",
        Duration::from_secs(180),
        Duration::from_millis(500),
        || async { Ok((live_vms(stack).await? == 0).then_some(())) },
    )
    .await?;
    wait::until(
        "every SBS volume deleted",
        Duration::from_secs(60),
        Duration::from_millis(500),
        || async {
            Ok(stack
                .emsim
                .instance_volumes()
                .await?
                .is_empty()
                .then_some(()))
        },
    )
    .await?;
    let (running, least, changes) = watch.read();
    ensure!(
        running == REPLICAS as usize && least.is_some_and(|l| l >= REPLICAS as usize - 1),
        "pods running now {running}, least during the move {least:?} (PDB minAvailable {}), {changes} changes seen",
        REPLICAS - 1
    );
    ensure!(changes > 0, "the watch saw no change: it proves nothing");
    let after = hybrid::billed_per_hour(stack, &prices).await?;
    ensure!(
        after < before,
        "cost per hour after ({after:.4} EUR) not below before ({before:.4} EUR)"
    );
    let servers = stack.emsim.servers_including_deleted().await?;
    ensure!(
        servers.len() == 1,
        "exactly one Elastic Metal order expected, got {}",
        servers.len()
    );
    let status = hybrid::wait_planner(
        stack,
        METAL,
        "planner: 1 adopted, no standby",
        Duration::from_secs(30),
        |s| s["target"] == 1 && s["adopted"] == 1 && s["standby"] == 0,
    )
    .await?;
    // The CLI view, against the real API server: the leader's status and the
    // load now, read by the command itself.
    let plan = std::process::Command::new(
        std::env::var_os("KPS_RUST_BIN_DIR")
            .map(std::path::PathBuf::from)
            .unwrap_or_else(|| e2e::stack::repo_root().join("target/debug"))
            .join("karpenter-scaleway"),
    )
    .arg("plan")
    .env("KUBECONFIG", stack.cp.kubeconfig_path())
    .output()?;
    let table = String::from_utf8_lossy(&plan.stdout).to_string();
    println!("karpenter-scaleway plan:\n{table}");
    ensure!(
        plan.status.success(),
        "plan failed: {}",
        String::from_utf8_lossy(&plan.stderr)
    );
    let row = table
        .lines()
        .find(|l| l.starts_with(METAL))
        .with_context(|| format!("no row for {METAL}: {table}"))?;
    let cells: Vec<&str> = row.split_whitespace().collect();
    ensure!(
        cells[1] == OFFER
            && cells[3] == "1"
            && cells[5] == "1"
            && row.contains("3300m/768Mi (3 pods)"),
        "plan row (target 1, adopted 1, 3 pods now): {row}"
    );
    println!(
        "hybrid: burst on VMs in {burst_s:.1}s; target raised at {staged_after_s:.1}s; standby idle at {ready_s:.1}s; pods on metal at {moved_s:.1}s; least running {least:?} of {REPLICAS}; cost {before:.4} -> {after:.4} EUR/h; status {status}"
    );

    // 4. Scaled to zero: the emptied metal node goes, its server back to
    //    standby (wiped); the planner lowers its target after the hold, and
    //    the server is released at the end of its paid hour.
    scenario::scale(stack, APP, 0).await?;
    standby::wait_nodes_gone(stack, Duration::from_secs(180)).await?;
    wait::until(
        "the node's server recycled to standby",
        Duration::from_secs(60),
        Duration::from_millis(500),
        || async {
            let recycled = scenario::provider_metric(
                stack,
                "karpenter_scaleway_standby_recycling_total",
                &[("decision", "recycled")],
            )
            .await?;
            Ok((recycled >= 1.0).then_some(()))
        },
    )
    .await?;
    hybrid::wait_planner(
        stack,
        METAL,
        "the planner's target back at 0",
        Duration::from_secs(HOLD_S + 60),
        |s| s["target"] == 0,
    )
    .await?;
    scenario::wait_provider_events(stack, "PlannerTargetLowered", |e| !e.is_empty())
        .await
        .context("no PlannerTargetLowered Event")?;
    standby::wait_no_live_servers(stack, Duration::from_secs(180)).await?;
    // Recorded once the DELETE returned: emsim may show the server
    // deleted a moment before.
    scenario::wait_provider_events(stack, "StandbyReleased", |e| !e.is_empty())
        .await
        .context("no StandbyReleased Event")?;
    ensure!(
        stack.emsim.servers_including_deleted().await?.len() == 1,
        "a second server was ordered"
    );
    nothing_billed_left(stack).await
}

/// A burst shorter than the window stages nothing; a dry run says what it
/// would stage and orders nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn hybrid_short_burst_stages_nothing_and_dry_run_only_explains() -> Result<()> {
    let mut options = opts("hybrid-safe")?;
    options
        .provider_args
        .extend(["--standby-interval=1s".to_string()]);
    scenario::with_stack(options, safe).await
}

async fn safe(stack: &mut Stack) -> Result<()> {
    SETUP.apply(stack, false).await?;

    // 1. A burst that ends before the window: its load never counts.
    let burst = Instant::now();
    kubeutil::apply_yaml(
        &stack.client,
        &scenario::inflate_yaml(APP, REPLICAS, POD_CPU),
    )
    .await?;
    scenario::wait_pods_running(stack, APP, REPLICAS as usize, Duration::from_secs(120)).await?;
    scenario::scale(stack, APP, 0).await?;
    let lasted = burst.elapsed();
    ensure!(
        lasted < Duration::from_secs(WINDOW_S),
        "the burst lasted {lasted:?}, not shorter than the {WINDOW_S}s window: inconclusive"
    );
    // Well past the window after the burst ended, and a watched window
    // fully covered by the samples.
    let status = hybrid::wait_planner(
        stack,
        METAL,
        "the planner's decision over a whole window",
        Duration::from_secs(WINDOW_S + 60),
        |s| s["needed"].is_number() && burst.elapsed() > Duration::from_secs(WINDOW_S + 10),
    )
    .await?;
    ensure!(
        status["target"] == 0 && status["needed"] == 0,
        "a burst shorter than the window staged metal: {status}"
    );
    ensure!(
        stack.emsim.servers_including_deleted().await?.is_empty(),
        "an Elastic Metal server was ordered for a short burst"
    );
    ensure!(
        scenario::provider_events(stack, "PlannerTargetRaised")
            .await?
            .is_empty(),
        "a PlannerTargetRaised Event for a short burst"
    );

    // 2. Dry run: sustained load, explained, nothing ordered.
    stack
        .apply_nodeclass(METAL, &SETUP.metal_nodeclass_yaml(stack, true))
        .await?;
    scenario::scale(stack, APP, REPLICAS).await?;
    scenario::wait_pods_running(stack, APP, REPLICAS as usize, Duration::from_secs(120)).await?;
    let status = hybrid::wait_planner(
        stack,
        METAL,
        "the dry run's target at 1",
        Duration::from_secs(WINDOW_S + 60),
        |s| s["target"] == 1,
    )
    .await?;
    ensure!(
        status["dryRun"] == true && status["standby"] == 0,
        "dry run status: {status}"
    );
    let events = scenario::wait_provider_events(stack, "PlannerDryRun", |e| !e.is_empty()).await?;
    let note = events
        .first()
        .and_then(|e| e.note.clone())
        .context("no PlannerDryRun Event")?;
    ensure!(
        note.starts_with("dry run: would have raised the target of EM-A115X-SSD"),
        "{note}"
    );
    // A few passes later, still nothing ordered.
    tokio::time::sleep(Duration::from_secs(5)).await;
    ensure!(
        stack.emsim.servers_including_deleted().await?.is_empty(),
        "a dry run ordered an Elastic Metal server"
    );
    scenario::scale(stack, APP, 0).await?;
    nothing_billed_left(stack).await
}
