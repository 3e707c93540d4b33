//! Issue 14's soak, by hand (`just soak`, about an hour and a quarter; not in
//! CI): the hybrid setup at time scale 1 with real Scaleway timings (emsim
//! and talos-sim `--timings real`: Elastic Metal delivery 225-287 s, every
//! reboot 180-300 s, the disk written at 150 MB/s; VMs boot in 45-75 s) and
//! the provider's production defaults (poll 15 s, standby pass 15 s).
//!
//! - `soak_warm_*`: VM NodePool (weight 10), reserved-only metal NodePool
//!   (weight 50) and a planner with a 10-minute window: the burst on VMs,
//!   the staging, core's consolidation onto the staged server (inside its
//!   10 minutes: `karpenter_voluntary_disruption_queue_failures_total`, the
//!   v1.14 name of `karpenter_disruption_queue_failures_total`, stays 0), pod
//!   availability under a PodDisruptionBudget, EUR per hour before and after,
//!   then the way back (recycled to standby, target lowered, released at
//!   the end of the paid hour).
//! - `soak_cold_*`: the same burst, then an on-demand metal NodePool
//!   (weight 50) on a NodeClass without any standby pool: core's
//!   replacement is a cold install that outlasts its 10 minutes. What core
//!   does is recorded; what must hold is that the provider wastes nothing:
//!   one server is ordered and it ends up running the pods (the churn guard
//!   holds the late replacement and refuses core's further orders while it
//!   stands idle, `churn/mod.rs`), and no server is left billed without
//!   being a node.
//!
//! Each prints a timeline (every change, at most every 10 s) and core's
//! disruption commands; docs/figures.md ("The hybrid soak") holds a run.

use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use e2e::hybrid::{self, RunningWatch, Timeline};
use e2e::stack::{Stack, StackOptions};
use e2e::standby;
use e2e::{kubeutil, scenario};

use crate::instances::opts;

const OFFER: &str = "EM-A115X-SSD";
const VM: &str = "POP2-2C-8G";
const METAL: &str = "metal";
const VMS: &str = "vms";
const APP: &str = "steady";
const REPLICAS: u32 = 3;
const POD_CPU: &str = "1100m";
const MIN: u64 = 60;

fn real(name: &str) -> Result<StackOptions> {
    let mut o = opts(name)?;
    o.time_scale = 1.0;
    o.real_timings = true;
    o.poll_interval = Duration::from_secs(15);
    // Random bytes: 256 MiB take 1.7 s to write at 150 MB/s (a real Talos
    // image is about 1.2 GB raw, mostly zeros, written in seconds too).
    o.image_size = "256MiB".into();
    Ok(o)
}

/// The VM NodeClass and NodePool (weight 10, consolidating when
/// underutilized), the PDB and the Deployment; returns once its pods run on
/// VMs, with the seconds that took.
async fn burst_on_vms(stack: &Stack, timeline: &mut Timeline) -> Result<f64> {
    hybrid::vm_pool(stack, VMS, VM, 10, true).await?;
    kubeutil::apply_yaml(&stack.client, &hybrid::pdb_yaml(APP, REPLICAS - 1)).await?;
    let t = Instant::now();
    kubeutil::apply_yaml(
        &stack.client,
        &scenario::inflate_yaml(APP, REPLICAS, POD_CPU),
    )
    .await?;
    let prices = hybrid::prices(stack).await?;
    timeline
        .until(
            stack,
            APP,
            &prices,
            "the burst running on VMs",
            Duration::from_secs(10 * MIN),
            |l| l.pods.get(VMS) == Some(&(REPLICAS as usize)),
        )
        .await?;
    Ok(t.elapsed().as_secs_f64())
}

/// Core's failed disruption commands (replacements not initialized in
/// time): `karpenter_voluntary_disruption_queue_failures_total` in v1.14
/// (the family is declared even before its first sample).
async fn queue_failures(stack: &Stack) -> Result<f64> {
    const NAME: &str = "karpenter_voluntary_disruption_queue_failures_total";
    let text = stack.bridge_metrics(0).await?;
    ensure!(
        text.contains(&format!("# HELP {NAME} ")),
        "core exports no {NAME}: wrong name for this version?"
    );
    Ok(scenario::metric_sum(&text, NAME, &[]))
}

fn report(stack: &Stack, timeline: &Timeline) -> Result<()> {
    println!("\n{}", timeline.table());
    println!("core's disruption commands:");
    for (at, what) in hybrid::disruption_log(stack)? {
        println!("- {at}: {what}");
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "by hand: `just soak` (about an hour at real timings)"]
async fn soak_warm_metal_takes_the_sustained_load_at_real_timings() -> Result<()> {
    scenario::with_stack(real("soak-warm")?, warm).await
}

async fn warm(stack: &mut Stack) -> Result<()> {
    let yaml = hybrid::planner_nodeclass_yaml(
        stack,
        METAL,
        OFFER,
        2,
        Some(&format!(
            "{{nodePools: [{VMS}], window: \"10m\", hold: \"10m\"}}"
        )),
    );
    stack.apply_nodeclass(METAL, &yaml).await?;
    kubeutil::apply_yaml(
        &stack.client,
        &standby::reserved_nodepool_yaml(METAL, METAL, 50, &[OFFER]),
    )
    .await?;
    let mut timeline = Timeline::default();
    let burst_s = burst_on_vms(stack, &mut timeline).await?;
    let prices = hybrid::prices(stack).await?;
    let before = hybrid::billed_per_hour(stack, &prices).await?;
    let watch = RunningWatch::armed(stack, APP, REPLICAS as usize).await?;

    let staged = timeline
        .until(
            stack,
            APP,
            &prices,
            "a standby server ordered",
            Duration::from_secs(20 * MIN),
            |l| l.metal.values().sum::<usize>() > 0,
        )
        .await;
    let staged_at = timeline.elapsed();
    staged?;
    timeline
        .until(
            stack,
            APP,
            &prices,
            "the standby server idle",
            Duration::from_secs(30 * MIN),
            |l| l.metal.get("standby/idle") == Some(&1) || l.metal.get("node") == Some(&1),
        )
        .await?;
    let idle_at = timeline.elapsed();
    timeline
        .until(
            stack,
            APP,
            &prices,
            "the pods on metal, the VMs gone",
            Duration::from_secs(20 * MIN),
            |l| l.pods.get(METAL) == Some(&(REPLICAS as usize)) && l.vms == 0,
        )
        .await?;
    let moved_at = timeline.elapsed();
    let after = hybrid::billed_per_hour(stack, &prices).await?;
    let failures = queue_failures(stack).await?;
    let (running, least, changes) = watch.read();
    let summary = format!(
        "soak warm: burst on VMs in {burst_s:.0} s; standby ordered at {:.1} min, idle at {:.1} min (staging {:.1} min); pods on metal and VMs gone at {:.1} min ({:.1} min after idle); disruption queue failures {failures}; pods running {running}, least {least:?} of {REPLICAS} over {changes} changes; EUR/h {before:.4} -> {after:.4}",
        staged_at / 60.0,
        idle_at / 60.0,
        (idle_at - staged_at) / 60.0,
        moved_at / 60.0,
        (moved_at - idle_at) / 60.0,
    );
    println!("{summary}");
    ensure!(failures == 0.0, "core's disruption queue failed: {summary}");
    ensure!(
        least.is_some_and(|l| l >= REPLICAS as usize - 1),
        "PDB not honoured: {summary}"
    );
    ensure!(after < before, "not cheaper: {summary}");

    // The way back.
    scenario::scale(stack, APP, 0).await?;
    let down = timeline.elapsed();
    timeline
        .until(
            stack,
            APP,
            &prices,
            "the metal node gone, its server standby",
            Duration::from_secs(20 * MIN),
            |l| !l.metal.contains_key("node") && l.metal.keys().any(|k| k.starts_with("standby/")),
        )
        .await?;
    let recycled_at = timeline.elapsed();
    let released = timeline
        .until(
            stack,
            APP,
            &prices,
            "the server released",
            Duration::from_secs(70 * MIN),
            |l| l.metal.is_empty(),
        )
        .await;
    let released_at = timeline.elapsed();
    println!(
        "soak warm, way back: scaled to 0 at {:.1} min; server back to standby at {:.1} min; released at {:.1} min",
        down / 60.0,
        recycled_at / 60.0,
        released_at / 60.0
    );
    report(stack, &timeline)?;
    released?;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "by hand: `just soak` (about an hour at real timings)"]
async fn soak_cold_metal_replacement_outlasts_cores_window() -> Result<()> {
    scenario::with_stack(real("soak-cold")?, cold).await
}

async fn cold(stack: &mut Stack) -> Result<()> {
    // No standby pool: nothing takes back the server of a deleted node.
    stack.create_nodeclass(METAL).await?;
    let mut timeline = Timeline::default();
    let burst_s = burst_on_vms(stack, &mut timeline).await?;
    let prices = hybrid::prices(stack).await?;
    let before = hybrid::billed_per_hour(stack, &prices).await?;
    // Now a metal NodePool above the VMs, on demand: consolidation replaces
    // the VMs by a cold install.
    let pool = Stack::nodepool_yaml(
        METAL,
        METAL,
        &scenario::instance_types_requirement(&[OFFER]),
    )
    .replace("spec:\n  template:\n", "spec:\n  weight: 50\n  template:\n")
    .replace("consolidateAfter: 5s", "consolidateAfter: 30s");
    kubeutil::apply_yaml(&stack.client, &pool).await?;
    let applied = timeline.elapsed();
    // Watch for 45 minutes, or until the pods have moved onto metal and the
    // VMs are gone.
    let moved = timeline
        .until(
            stack,
            APP,
            &prices,
            "the pods on metal, the VMs gone",
            Duration::from_secs(45 * MIN),
            |l| l.pods.get(METAL) == Some(&(REPLICAS as usize)) && l.vms == 0,
        )
        .await;
    let end = timeline.elapsed();
    // Then until every server is a node with pods, or gone.
    let settled = timeline
        .until(
            stack,
            APP,
            &prices,
            "every server a node or standby",
            Duration::from_secs(30 * MIN),
            |l| {
                l.metal.get("node") == Some(&1)
                    && l.claims.values().map(|c| c.0 + c.2).sum::<usize>() == 0
                    && l.vms == 0
            },
        )
        .await;
    let settled_at = timeline.elapsed();
    let after = hybrid::billed_per_hour(stack, &prices).await?;
    let failures = queue_failures(stack).await?;
    let orders = stack.emsim.servers_including_deleted().await?;
    let look = hybrid::Look::take(stack, APP, &prices).await?;
    println!(
        "soak cold: burst on VMs in {burst_s:.0} s; metal NodePool applied at {:.1} min; {} at {:.1} min; disruption queue failures {failures}; {} Elastic Metal server(s) ordered; EUR/h {before:.4} -> {after:.4}; now {look:?}",
        applied / 60.0,
        if moved.is_ok() {
            "pods on metal and VMs gone"
        } else {
            "watch ended"
        },
        end / 60.0,
        orders.len(),
    );
    println!(
        "soak cold: {} at {:.1} min",
        if settled.is_ok() {
            "one metal node, nothing launching"
        } else {
            "not settled"
        },
        settled_at / 60.0
    );
    report(stack, &timeline)?;
    ensure!(
        !look.metal.contains_key("other"),
        "a live server is neither a node's nor a standby one: {look:?}"
    );
    ensure!(moved.is_ok(), "the pods never moved onto metal: {look:?}");
    ensure!(
        orders.len() == 1,
        "{} Elastic Metal servers ordered for one server's worth of pods: the late replacement was not used",
        orders.len()
    );
    Ok(())
}
