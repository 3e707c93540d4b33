//! The mission, told live (docs/planner.md, examples/vm-first-warm-metal.yaml):
//! (1) a burst lands on Scaleway Instances; (2) the load stays and the
//! demand planner stages Elastic Metal; (3) Karpenter core's consolidation
//! moves the pods onto it and deletes the VMs; (4) the bill before and
//! after, and what is left. The provider is configured as a user would
//! (NodeClasses, NodePools, a PodDisruptionBudget); nothing moves a pod
//! by hand. The view is [`e2e::mission`]; every figure is read from the
//! cluster, emsim or the provider's status.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Result, ensure};
use chrono::{DateTime, Utc};
use e2e::hybrid::{self, RunningWatch, VmsFirst};
use e2e::mission::{self, BILL_SOURCE, Leftovers, Phase, Saving, Scene, minutes};
use e2e::stack::{Stack, StackOptions};
use e2e::{kubeutil, scenario};
use serde_json::Value;

const APP: &str = "steady";
/// One pod per POP2-2C-8G (2 vCPU less the kubelet's reservations), three
/// per EM-A115X-SSD (4 cores): the packing of the `hybrid` e2e.
const POD_CPU: &str = "1100m";
/// The planner's window: how long load must stay to count as sustained.
/// Real seconds (the cluster's clock, not emsim's); production: hours.
const WINDOW: Duration = Duration::from_secs(60);
const SETUP: VmsFirst<'static> = VmsFirst {
    vms: "vms",
    vm_type: "POP2-2C-8G",
    metal: "metal",
    offer: "EM-A115X-SSD",
    max: 4,
    window: WINDOW,
    // The planner waits for max(window, hold) of history before its first
    // raise; a dip shorter than this (a pod evicted during the move) lowers
    // nothing.
    hold: WINDOW,
};
/// A look every second.
const EVERY: Duration = Duration::from_secs(1);
/// A look is printed when it changed, or after this long without a line.
const HEARTBEAT: Duration = Duration::from_secs(10);

/// The stack the mission needs: Instances served, Scaleway's real delivery
/// and boot durations, at time scale 0.1 unless `KPS_TIME_SCALE` was set
/// (`scaled`): a VM boots in 5-8 s, an Elastic Metal install takes about
/// 80 s. The planner looks at the load every second.
pub fn options(opts: &mut StackOptions, scaled: bool) {
    opts.instances = true;
    opts.real_timings = true;
    if !scaled {
        opts.time_scale = 0.1;
    }
    opts.provider_args.push("--standby-interval=1s".into());
}

pub async fn run(stack: &Stack, replicas: u32) -> Result<()> {
    ensure!(replicas > 0, "the mission needs at least one pod");
    let n = replicas as usize;
    SETUP.apply(stack, true).await?;
    kubeutil::apply_yaml(&stack.client, &hybrid::pdb_yaml(APP, replicas - 1)).await?;
    let prices = hybrid::prices(stack).await?;
    let price = |kind: &str| prices.get(kind).copied().unwrap_or(f64::NAN);
    println!(
        "\nSet up as docs/planner.md recommends (examples/vm-first-warm-metal.yaml):\n\
         - NodePool {vms} (weight 10): Scaleway Instances {vm}, {vm_price:.4} EUR/h each; consolidates under-used VMs\n\
         - NodePool {metal} (weight 50): Elastic Metal {offer}, {offer_price:.4} EUR/h each, reserved capacity only: adopts staged servers, never orders\n\
         - NodeClass {metal}: a standby pool of {offer} (min 0, max {max}) with a demand planner counting NodePool {vms} over a {window} window (production: hours)\n\
         - PodDisruptionBudget {APP}: minAvailable {pdb}\n\
         Prices: emsim's public catalog (the Elastic Metal offers and Instance products APIs).",
        vms = SETUP.vms,
        vm = SETUP.vm_type,
        vm_price = price(SETUP.vm_type),
        metal = SETUP.metal,
        offer = SETUP.offer,
        offer_price = price(SETUP.offer),
        max = SETUP.max,
        window = minutes(WINDOW.as_secs_f64()),
        pdb = replicas - 1,
    );

    let mut view = View::start(stack, n, &prices).await?;
    kubeutil::apply_yaml(
        &stack.client,
        &scenario::inflate_yaml(APP, replicas, POD_CPU),
    )
    .await?;
    view.banner(Phase::Burst);
    println!(
        "Deployment {APP}: {replicas} pods of {POD_CPU} CPU. Nothing is reserved and the metal NodePool takes reserved capacity only, so Karpenter launches VMs."
    );

    // 1. The burst on VMs.
    let burst = view
        .until(Duration::from_secs(300), "every pod Running on VMs", |s| {
            s.on(SETUP.vms) == n
        })
        .await?;
    let (burst_wall, burst_sim) = view.elapsed().await?;
    let before = burst.euros_per_hour;
    println!(
        "  => {n} pods Running on {} VMs {} after the Deployment ({} on emsim's clock). Billed now: {before:.4} EUR/h = {}.",
        burst.vms.values().sum::<usize>(),
        minutes(burst_wall),
        minutes(burst_sim),
        mission::breakdown(&prices, &burst.billed),
    );
    let watch = RunningWatch::armed(stack, APP, n).await?;

    // 2-4. Staging, the move, the VMs gone.
    view.until(
        Duration::from_secs(900),
        "every pod on metal, no VM and no volume left",
        |s| view_done(s, n),
    )
    .await?;
    let done_at = view.now_text().await?;
    let after = view.last.as_ref().map_or(f64::NAN, |s| s.euros_per_hour);
    let after_billed = view
        .last
        .as_ref()
        .map(|s| s.billed.clone())
        .unwrap_or_default();
    let (running, least, changes) = watch.read();
    let left = Leftovers::take(stack).await?;
    let saving = Saving { before, after };

    println!("\n==================== summary ====================");
    println!(
        "1. burst    {n} pods of {POD_CPU} CPU Running on VMs ({}) {} after the Deployment ({} on emsim's clock, time scale {})",
        SETUP.vm_type,
        minutes(burst_wall),
        minutes(burst_sim),
        stack.opts.time_scale
    );
    if let Some(p) = &view.planner {
        println!(
            "2. planner  target {} × {} at {}, window {}: {}",
            p.status["target"],
            SETUP.offer,
            view.mark_text(p.at, p.sim),
            minutes(WINDOW.as_secs_f64()),
            p.status["reason"].as_str().unwrap_or_default()
        );
    }
    if let (Some(ordered), Some((wall, sim, servers))) = (view.ordered, view.staged) {
        println!(
            "   staged   first server ordered at {}, {servers} installed at {} (delivery, rescue + dd, boot into Talos maintenance mode: {} on emsim's clock)",
            view.mark_text(ordered.0, ordered.1),
            view.mark_text(wall, sim),
            minutes(sim - ordered.1),
        );
    }
    if let Some(moved) = view.first_on_metal {
        println!(
            "3. moved    first pod on metal at {}; every pod on metal and the VMs gone at {done_at}; pods running never fewer than {} of {n} over {changes} changes (PDB minAvailable {}), {running} now",
            view.mark_text(moved.0, moved.1),
            least.map_or("?".into(), |l| l.to_string()),
            replicas - 1,
        );
    }
    for (at, what) in hybrid::disruption_log(stack)? {
        println!("   core     {at} (its log): {what}");
    }
    println!("4. EUR per hour; source: {BILL_SOURCE}");
    println!(
        "   before (VMs)    {before:.4}  {}",
        mission::breakdown(&prices, &burst.billed)
    );
    println!(
        "   after (metal)   {after:.4}  {}",
        mission::breakdown(&prices, &after_billed)
    );
    println!(
        "   saving          {:.4} EUR/h ({}), {:.2} EUR over a {}-hour month",
        saving.per_hour(),
        saving.percent().map_or("-".into(), |p| format!("{p:.1} %")),
        saving.per_month(),
        mission::HOURS_PER_MONTH
    );
    if let Some(p) = &view.planner {
        println!(
            "   the provider's own figures when it staged (status.planner, from the catalog it serves Karpenter): VMs counted {:.4} EUR/h, {} server(s) {:.4} EUR/h",
            euros(&p.status["vmEurosPerHour"]),
            p.status["target"],
            euros(&p.status["metalEurosPerHour"])
        );
    }
    println!(
        "   left in emsim: {} Elastic Metal server(s), each the node of a NodeClaim: {}; {} standby; {} orphan(s){}; VMs {} live of {} created; {} volume(s); {} server(s) ordered in all",
        left.nodes.len(),
        left.nodes
            .iter()
            .map(|(id, offer, claim)| format!("{id} ({offer}, {claim})"))
            .collect::<Vec<_>>()
            .join(", "),
        left.standby,
        left.orphans.len(),
        if left.orphans.is_empty() {
            String::new()
        } else {
            format!(" {:?}", left.orphans)
        },
        left.vms,
        left.vms_created,
        left.volumes,
        left.ordered,
    );
    ensure!(left.clean(), "something is left billed: {left:?}");
    ensure!(
        after < before,
        "the bill did not fall: {before:.4} -> {after:.4} EUR/h"
    );
    Ok(())
}

/// Every pod on metal, and nothing left of the VMs: no VM, no volume, no
/// NodeClaim.
fn view_done(scene: &Scene, n: usize) -> bool {
    Phase::of(scene, &SETUP, n) == Phase::Done
        && scene.volumes == 0
        && !scene.claims.contains_key(SETUP.vms)
}

/// The planner's status when its target first rose, and when.
struct Raised {
    status: Value,
    at: f64,
    sim: f64,
}

/// The live view: a line whenever the look changes, a banner at every new
/// phase, and the moments the summary reports.
struct View<'a> {
    stack: &'a Stack,
    replicas: usize,
    prices: &'a BTreeMap<String, f64>,
    started: Instant,
    sim_started: DateTime<Utc>,
    phase: Phase,
    last: Option<Scene>,
    printed: Instant,
    planner: Option<Raised>,
    /// (wall s, emsim s) since the start.
    ordered: Option<(f64, f64)>,
    /// (wall s, emsim s, servers) once the target's servers are installed.
    staged: Option<(f64, f64, usize)>,
    first_on_metal: Option<(f64, f64)>,
}

impl<'a> View<'a> {
    async fn start(
        stack: &'a Stack,
        replicas: usize,
        prices: &'a BTreeMap<String, f64>,
    ) -> Result<View<'a>> {
        Ok(View {
            stack,
            replicas,
            prices,
            started: Instant::now(),
            sim_started: stack.emsim.clock().await?.0,
            phase: Phase::Burst,
            last: None,
            printed: Instant::now(),
            planner: None,
            ordered: None,
            staged: None,
            first_on_metal: None,
        })
    }

    /// (wall, emsim) seconds since the start.
    async fn elapsed(&self) -> Result<(f64, f64)> {
        let sim = (self.stack.emsim.clock().await?.0 - self.sim_started).num_milliseconds() as f64
            / 1000.0;
        Ok((self.started.elapsed().as_secs_f64(), sim))
    }

    fn mark_text(&self, wall: f64, sim: f64) -> String {
        format!("t+{} (emsim +{})", minutes(wall), minutes(sim))
    }

    async fn now_text(&self) -> Result<String> {
        let (wall, sim) = self.elapsed().await?;
        Ok(self.mark_text(wall, sim))
    }

    fn banner(&self, phase: Phase) {
        println!("\n=== {}/4: {} ===", phase.number(), phase.title());
    }

    /// Looks every [`EVERY`] until `done` holds of a look (returned).
    async fn until(
        &mut self,
        timeout: Duration,
        what: &str,
        done: impl Fn(&Scene) -> bool,
    ) -> Result<Scene> {
        let deadline = Instant::now() + timeout;
        loop {
            let scene = self.look().await?;
            if done(&scene) {
                return Ok(scene);
            }
            ensure!(
                Instant::now() < deadline,
                "no {what} after {}; last look: {}",
                minutes(timeout.as_secs_f64()),
                scene.line(self.replicas)
            );
            tokio::time::sleep(EVERY).await;
        }
    }

    async fn look(&mut self) -> Result<Scene> {
        let scene = Scene::take(self.stack, APP, &SETUP, self.prices).await?;
        let (wall, sim) = self.elapsed().await?;
        let next = self.phase.advance(&scene, &SETUP, self.replicas);
        let jumped: Vec<Phase> = [Phase::Staging, Phase::Moving, Phase::Done]
            .into_iter()
            .filter(|p| *p > self.phase && *p <= next)
            .collect();
        self.phase = next;
        for p in jumped {
            self.banner(p);
            println!("{}", narration(p));
        }
        if let Some(reason) = &scene.planner_reason
            && self.last.as_ref().and_then(|l| l.planner_reason.as_ref()) != Some(reason)
        {
            println!("  planner: {reason}");
        }
        if self.last.as_ref() != Some(&scene) || self.printed.elapsed() >= HEARTBEAT {
            self.printed = Instant::now();
            println!(
                "[t+{:>10} | emsim +{:>10}] {}",
                minutes(wall),
                minutes(sim),
                scene.line(self.replicas)
            );
        }
        self.note(&scene, wall, sim).await?;
        self.last = Some(scene.clone());
        Ok(scene)
    }

    /// Remembers (and tells) the first time of each step the summary
    /// reports.
    async fn note(&mut self, scene: &Scene, wall: f64, sim: f64) -> Result<()> {
        if self.planner.is_none() && scene.target.is_some_and(|t| t > 0) {
            let status = hybrid::planner_status(self.stack, SETUP.metal)
                .await?
                .into_iter()
                .next()
                .unwrap_or_default();
            println!(
                "  planner raised its target to {} × {} (status.planner of NodeClass {}); at the catalog prices the provider serves Karpenter, the VMs counted cost {:.4} EUR/h, {} server(s) {:.4} EUR/h",
                status["target"],
                SETUP.offer,
                SETUP.metal,
                euros(&status["vmEurosPerHour"]),
                status["target"],
                euros(&status["metalEurosPerHour"]),
            );
            self.planner = Some(Raised {
                status,
                at: wall,
                sim,
            });
        }
        if self.ordered.is_none() && !scene.metal.is_empty() {
            self.ordered = Some((wall, sim));
        }
        let target = scene.target.unwrap_or(0);
        let nodes = scene.metal.get("node").copied().unwrap_or(0);
        let installed = scene.idle_standby() + nodes;
        if self.staged.is_none() && target > 0 && installed as i64 >= target {
            self.staged = Some((wall, sim, installed));
            println!(
                "  staged: {installed} Elastic Metal server(s) installed ({} idle in Talos maintenance mode, offered to Karpenter as reserved capacity; {nodes} already adopted)",
                scene.idle_standby()
            );
        }
        if self.first_on_metal.is_none() && scene.on(SETUP.metal) > 0 {
            self.first_on_metal = Some((wall, sim));
        }
        Ok(())
    }
}

/// A figure of the planner's status (NaN when absent: printed, never 0).
fn euros(v: &Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

fn narration(phase: Phase) -> String {
    match phase {
        Phase::Burst => String::new(),
        Phase::Staging => format!(
            "The pods stayed on the VMs for the planner's {} window: it counts their requests as sustained load and raises its target; the provider orders {} servers, installs Talos on each (rescue + dd) and leaves them idle in maintenance mode.",
            minutes(WINDOW.as_secs_f64()),
            SETUP.offer
        ),
        Phase::Moving => "An idle standby server is reserved capacity, cheaper than the VMs: core's consolidation replaces VMs by it (an adoption: the node's config applied, seconds), evicting pods within the PodDisruptionBudget, then deletes the VMs.".to_string(),
        Phase::Done => "Every pod runs on Elastic Metal and no VM is left; nobody moved a pod by hand.".to_string(),
    }
}
