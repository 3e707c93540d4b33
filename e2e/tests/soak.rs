//! The soak, by hand (`just soak`, about an hour and a quarter; not in
//! CI): the hybrid setup at time scale 1 with real Scaleway timings (emsim
//! and talos-sim `--timings real`: Elastic Metal delivery 225-287 s, every
//! reboot 180-300 s, the disk written at 150 MB/s; VMs boot in 45-75 s) and
//! the provider's production defaults (poll 15 s, standby pass 15 s).
//!
//! - `soak_warm_*`: VM NodePool (weight 10), reserved-only metal NodePool
//!   (weight 50) and a planner with a 10-minute window: the burst on VMs,
//!   the staging, core's consolidation onto the staged server (inside its
//!   10 minutes: `karpenter_voluntary_disruption_queue_failures_total` stays
//!   0), pod
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
//! - `soak_reboot_*` (issue 29): repair by reboot at Elastic Metal's real
//!   reboot durations with the provider's production tolerations: a node
//!   made unhealthy is rebooted in place inside core's windows (issuance
//!   5 min, observation 20 min), nothing ordered; a fault that survives is
//!   rebooted twice, then replaced with one server ordered.
//!
//! Each prints a timeline and core's disruption commands; docs/figures.md
//! ("The hybrid soak", "Repair by reboot at real timings") holds a run.

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
/// time): `karpenter_voluntary_disruption_queue_failures_total` (v1.14 and
/// v1.15). The family is absent from a scrape until a command fails (a
/// counter vector with no series is not exposed), which reads 0; a name
/// core does not declare fails (`scenario::core_counter`).
async fn queue_failures(stack: &Stack) -> Result<f64> {
    const NAME: &str = "karpenter_voluntary_disruption_queue_failures_total";
    let text = stack.bridge_metrics(0).await?;
    scenario::core_counter(&text, NAME, &[], scenario::core_families()?)
}

fn report(stack: &Stack, timeline: &Timeline) -> Result<()> {
    println!("\n{}", timeline.table());
    report_commands(stack)
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

// ---- Repair by reboot at Elastic Metal's real reboot durations (issue 29) --

/// Core v1.15's clocks that a repair at real timings has to fit in: a
/// reboot's issuance (provider acceptance after the drain) within 5 min, the
/// rebooted node back (new boot id, Ready) within 20 min of the issuance, a
/// replacement initialized within 10 min of the disruption command. The
/// toleration before the first action is the provider's
/// (`--repair-reboot-after`, production default 10 min), the drain bound its
/// Ready=False policy's (5 min).
const TOLERATION_MIN: f64 = 10.0;
const DRAIN_MIN: f64 = 5.0;
const ISSUANCE_MIN: f64 = 5.0;
const OBSERVATION_MIN: f64 = 20.0;

/// Elastic Metal only, at real timings, with the provider's production
/// repair defaults (no `reboot::provider_args()` here).
fn real_metal(name: &str) -> Result<StackOptions> {
    let mut o = StackOptions::for_test(name)?;
    o.time_scale = 1.0;
    o.real_timings = true;
    o.poll_interval = Duration::from_secs(15);
    o.image_size = "256MiB".into();
    Ok(o)
}

/// Steps of a repair, each with the minute it was first seen (sampled every
/// second) and the window it belongs in.
#[derive(Default)]
struct Steps {
    start: Option<Instant>,
    rows: Vec<(f64, String, String)>,
}

impl Steps {
    fn now(&mut self) -> f64 {
        self.start
            .get_or_insert_with(Instant::now)
            .elapsed()
            .as_secs_f64()
            / 60.0
    }

    fn mark(&mut self, what: &str, window: String) -> f64 {
        let at = self.now();
        println!("[{at:6.2} min] {what} {window}");
        self.rows.push((at, what.to_string(), window));
        at
    }

    /// Polls `probe` every second until it returns Some; marks the step.
    async fn until<T, F, Fut>(
        &mut self,
        what: &str,
        timeout: Duration,
        probe: F,
    ) -> Result<(f64, T)>
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Result<Option<T>>>,
    {
        self.now();
        let t = Instant::now();
        loop {
            if let Some(v) = probe().await? {
                return Ok((self.mark(what, String::new()), v));
            }
            ensure!(
                t.elapsed() < timeout,
                "waited {:.1} min for: {what}\n{}",
                timeout.as_secs_f64() / 60.0,
                self.table()
            );
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }

    fn annotate(&mut self, window: String) {
        if let Some(last) = self.rows.last_mut() {
            last.2 = window;
        }
    }

    fn table(&self) -> String {
        let mut out = String::from("| min | step | against |\n|---:|---|---|\n");
        for (at, what, window) in &self.rows {
            out.push_str(&format!("| {at:.2} | {what} | {window} |\n"));
        }
        out
    }
}

/// The NodeClaim's `Rebooting` condition as (status, reason), if any.
async fn rebooting_state(stack: &Stack, claim: &str) -> Result<Option<(String, String)>> {
    Ok(kubeutil::nodeclaims(&stack.client)
        .get_opt(claim)
        .await?
        .and_then(|nc| e2e::reboot::rebooting(&nc)))
}

/// The Node's Ready status and boot id.
async fn node_state(stack: &Stack, node: &str) -> Result<Option<(String, String)>> {
    let nodes: kube::Api<k8s_openapi::api::core::v1::Node> = kube::Api::all(stack.client.clone());
    Ok(nodes.get_opt(node).await?.and_then(|n| {
        let status = n.status?;
        let ready = status
            .conditions
            .unwrap_or_default()
            .into_iter()
            .find(|c| c.type_ == "Ready")
            .map(|c| c.status)
            .unwrap_or_default();
        Some((
            ready,
            status.node_info.map(|i| i.boot_id).unwrap_or_default(),
        ))
    }))
}

/// Some(()) once the Node is not Ready.
async fn not_ready(stack: &Stack, node: &str) -> Result<Option<()>> {
    Ok(node_state(stack, node)
        .await?
        .filter(|(ready, _)| ready != "True")
        .map(|_| ()))
}

/// Some(()) once the NodeClaim's `Rebooting` condition is (`status`, and
/// `reason` unless it is empty).
async fn rebooting_is(
    stack: &Stack,
    claim: &str,
    status: &str,
    reason: &str,
) -> Result<Option<()>> {
    Ok(rebooting_state(stack, claim)
        .await?
        .filter(|(s, r)| s == status && (reason.is_empty() || r == reason))
        .map(|_| ()))
}

/// One reboot of `claim`/`node`, from a node made unhealthy to core's
/// RebootSucceeded, each step checked against its window. `boot` is the
/// boot id before; returns the boot id after.
async fn one_reboot(
    stack: &Stack,
    steps: &mut Steps,
    n: usize,
    claim: &str,
    node: &str,
    boot: &str,
) -> Result<String> {
    let (not_ready, _) = steps
        .until(
            &format!("reboot {n}: Node NotReady"),
            Duration::from_secs(10 * MIN),
            || not_ready(stack, node),
        )
        .await?;
    let (committed, _) = steps
        .until(
            &format!("reboot {n}: core commits the reboot (Rebooting=True)"),
            Duration::from_secs(30 * MIN),
            || rebooting_is(stack, claim, "True", ""),
        )
        .await?;
    steps.annotate(format!(
        "{:.1} min after NotReady; toleration {TOLERATION_MIN} min",
        committed - not_ready
    ));
    let (issued, _) = steps
        .until(
            &format!("reboot {n}: the provider's Reboot accepted (RebootIssued)"),
            Duration::from_secs(((DRAIN_MIN + ISSUANCE_MIN) as u64 + 2) * MIN),
            || rebooting_is(stack, claim, "True", "RebootIssued"),
        )
        .await?;
    steps.annotate(format!(
        "{:.1} min after the commit; drain ≤ {DRAIN_MIN} min + issuance ≤ {ISSUANCE_MIN} min",
        issued - committed
    ));
    ensure!(
        issued - committed <= DRAIN_MIN + ISSUANCE_MIN,
        "reboot {n} issued {:.1} min after its commit: outside core's windows\n{}",
        issued - committed,
        steps.table()
    );
    let (back, new_boot) = steps
        .until(
            &format!("reboot {n}: Node Ready with a new boot id"),
            Duration::from_secs(25 * MIN),
            || async {
                Ok(node_state(stack, node)
                    .await?
                    .filter(|(ready, b)| ready == "True" && !b.is_empty() && b != boot)
                    .map(|(_, b)| b))
            },
        )
        .await?;
    steps.annotate(format!(
        "{:.1} min after the issuance; observation window {OBSERVATION_MIN} min",
        back - issued
    ));
    let (succeeded, _) = steps
        .until(
            &format!("reboot {n}: core's RebootSucceeded"),
            Duration::from_secs(25 * MIN),
            || async {
                let state = rebooting_state(stack, claim).await?;
                if let Some((s, r)) = &state {
                    ensure!(
                        !(s == "False" && r == "RebootFailed"),
                        "core failed reboot {n} of {claim}"
                    );
                }
                Ok((state == Some(("False".into(), "RebootSucceeded".into()))).then_some(()))
            },
        )
        .await?;
    steps.annotate(format!(
        "{:.1} min after the issuance; observation window {OBSERVATION_MIN} min",
        succeeded - issued
    ));
    ensure!(
        succeeded - issued <= OBSERVATION_MIN,
        "reboot {n} took {:.1} min from issuance: outside core's window",
        succeeded - issued
    );
    Ok(new_boot)
}

/// One Elastic Metal node (on demand) running the app: (NodeClaim, Node,
/// server id).
async fn one_metal_node(stack: &Stack, steps: &mut Steps) -> Result<(String, String, String)> {
    stack.create_nodeclass(METAL).await?;
    kubeutil::apply_yaml(
        &stack.client,
        &Stack::nodepool_yaml(
            METAL,
            METAL,
            &scenario::instance_types_requirement(&[OFFER]),
        ),
    )
    .await?;
    kubeutil::apply_yaml(&stack.client, &scenario::inflate_yaml(APP, 1, POD_CPU)).await?;
    steps.mark("app applied (1 pod)", String::new());
    scenario::wait_pods_running(stack, APP, 1, Duration::from_secs(30 * MIN)).await?;
    steps.mark("pod Running on a new Elastic Metal node", String::new());
    let (claim, node, pid) = e2e::reboot::the_initialized_claim(stack).await?;
    let (_, server) = scenario::parse_provider_id(&pid)?;
    Ok((claim, node, server))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "by hand: `just soak` (about half an hour at real timings)"]
async fn soak_reboot_cures_an_unhealthy_metal_node_at_real_timings() -> Result<()> {
    scenario::with_stack(real_metal("soak-reboot")?, async |stack: &mut Stack| {
        let mut steps = Steps::default();
        let (claim, node, server) = one_metal_node(stack, &mut steps).await?;
        let before = e2e::reboot::Before::read(stack, &claim, &node, &server).await?;
        e2e::reboot::arm(stack, "not_ready_until_reboot", &node, None).await?;
        steps.mark(
            "fault armed: the kubelet reports NotReady until a reboot",
            String::new(),
        );
        one_reboot(stack, &mut steps, 1, &claim, &node, &before.boot_id).await?;
        before.check_rebooted_in_place(stack, APP, 1).await?;
        steps.mark(
            "pod Running again on the same node; no server ordered",
            String::new(),
        );
        println!(
            "soak reboot, cured in place (commit {}):\n{}",
            git_head(),
            steps.table()
        );
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "by hand: `just soak` (about an hour at real timings)"]
async fn soak_reboot_twice_then_replace_at_real_timings() -> Result<()> {
    scenario::with_stack(real_metal("soak-reboot-twice")?, async |stack: &mut Stack| {
        let mut steps = Steps::default();
        let (claim, node, server) = one_metal_node(stack, &mut steps).await?;
        let orders = scenario::orders_placed(stack).await?;
        let mut boot = e2e::reboot::boot_id(stack, &node).await?;
        // Unhealthy now, and again 2 min after every boot: long enough for
        // core (which polls every 15 s) to see each reboot succeed.
        e2e::reboot::arm(stack, "unhealthy_after_every_boot", &node, Some(120_000)).await?;
        e2e::reboot::arm(stack, "not_ready_until_reboot", &node, None).await?;
        steps.mark("fault armed: NotReady now and 2 min after every boot", String::new());
        for n in 1..=2 {
            boot = one_reboot(stack, &mut steps, n, &claim, &node, &boot).await?;
        }
        ensure!(
            scenario::orders_placed(stack).await? == orders,
            "a server was ordered during the reboots"
        );
        // Unhealthy a third time: core escalates to a replacement.
        let (again, _) = steps
            .until("NotReady after the second reboot", Duration::from_secs(10 * MIN), || not_ready(stack, &node))
            .await?;
        let nodeclaims = kubeutil::nodeclaims(&stack.client);
        let (replacing, _) = steps
            .until(
                "core replaces it: a second NodeClaim launched",
                Duration::from_secs(30 * MIN),
                || async {
                    let ncs = nodeclaims.list(&Default::default()).await?.items;
                    Ok((ncs.iter().any(|nc| nc.metadata.name.as_deref() != Some(claim.as_str())))
                        .then_some(()))
                },
            )
            .await?;
        steps.annotate(format!(
            "{:.1} min after NotReady; toleration {TOLERATION_MIN} min",
            replacing - again
        ));
        let (moved, placed) = steps
            .until(
                "the pod Running on the replacement node",
                Duration::from_secs(40 * MIN),
                || async {
                    let placed = scenario::pods_running(stack, APP).await?;
                    Ok((placed.len() == 1 && placed.values().all(|n| n != &node)).then_some(placed))
                },
            )
            .await?;
        steps.annotate(format!(
            "{:.1} min after the replacement was launched; core's replacement window 10 min",
            moved - replacing
        ));
        scenario::wait_nodeclaim_gone(stack, &claim, Duration::from_secs(15 * MIN)).await?;
        steps.mark("the unhealthy NodeClaim gone", String::new());
        scenario::wait_server_deleted(stack, &server, Duration::from_secs(10 * MIN)).await?;
        steps.mark("its server deleted", String::new());
        let accepted = scenario::provider_metric(
            stack,
            "karpenter_scaleway_reboots_total",
            &[("kind", "baremetal"), ("outcome", "accepted")],
        )
        .await?;
        let ordered = scenario::orders_placed(stack).await? - orders;
        let failures = queue_failures(stack).await?;
        println!(
            "soak reboot, twice then replaced (commit {}): reboots accepted {accepted}; servers ordered for the replacement {ordered}; disruption queue failures {failures}; pod on {placed:?}\n{}",
            git_head(),
            steps.table()
        );
        report_commands(stack)?;
        ensure!(accepted == 2.0, "reboots accepted: {accepted}");
        ensure!(
            ordered == 1,
            "{ordered} servers ordered to replace one node"
        );
        Ok(())
    })
    .await
}

fn report_commands(stack: &Stack) -> Result<()> {
    println!("core's disruption commands:");
    for (at, what) in hybrid::disruption_log(stack)? {
        println!("- {at}: {what}");
    }
    Ok(())
}

fn git_head() -> String {
    std::process::Command::new("git")
        .args(["rev-parse", "--short", "HEAD"])
        .current_dir(e2e::stack::repo_root())
        .output()
        .ok()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default()
}
