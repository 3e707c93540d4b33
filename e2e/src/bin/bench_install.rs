#![forbid(unsafe_code)]
//! `kps-bench-install` (`just bench-install`): provisions N nodes against the
//! simulators and prints, per node, how long the install flow took from the
//! order to the Node being Ready, split into the simulated platform's waits
//! and the time the provider added on top of them.
//!
//! Every instant comes from a record of the component that lived it, not from
//! the provider: emsim (order, delivery, reboot requests and power-ons, in
//! simulated time converted to wall time), the image server (transfer start
//! and end), talos-sim (config applied) and the API server (Node Ready, seen
//! through a watch). See `docs/figures.md`, "Install overhead".

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, bail};
use chrono::{DateTime, Utc};
use clap::Parser;
use e2e::image::Transfer;
use e2e::kubeutil;
use e2e::scenario;
use e2e::sims::EmsimEvent;
use e2e::stack::{Stack, StackOptions};

mod benchkit;
use benchkit::api::Calls;

#[derive(Parser, Debug)]
#[command(
    name = "kps-bench-install",
    about = "Install overhead of the provider against the simulators"
)]
struct Args {
    /// Nodes to provision (one pod per node).
    #[arg(long, default_value_t = 5)]
    nodes: u32,
    /// emsim time scale (real seconds per simulated second).
    #[arg(long, default_value_t = 0.1)]
    time_scale: f64,
    /// Provider poll interval (`--poll-interval`), in milliseconds.
    #[arg(long, default_value_t = 100)]
    poll_ms: u64,
    /// The offer to order (the NodePool allows only this one).
    #[arg(long, default_value = "EM-B112X-SSD")]
    offer: String,
    /// Real bytes per second the image is served at (per download).
    #[arg(long, default_value_t = 8 << 20)]
    image_rate: u64,
    /// Nodes of the same offer provisioned first, so that the provider has
    /// seen deliveries of it (the history its delivery cadence follows); the
    /// `--nodes` measured are ordered once it has seen every one of these
    /// delivered. Reported apart, as installs without history.
    #[arg(long, default_value_t = 0)]
    warmup: u32,
    /// The provider's API pace (`--scw-api-rate-limit`, calls per second per
    /// endpoint); default: the provider's own. A time-scaled run polls as
    /// many times faster as the world runs, so its pace should scale too
    /// (8 / time scale), or the pacing, not the platform, sets the waits.
    #[arg(long)]
    provider_pace: Option<f64>,
    /// Leave the stack running at the end (Ctrl-C to stop).
    #[arg(long)]
    keep: bool,
}

/// One node's flow, every instant in wall-clock time.
#[derive(Debug, Clone)]
struct Flow {
    claim: String,
    /// Calls naming this server (emsim): status reads, all.
    reads: u64,
    calls: u64,
    order: DateTime<Utc>,
    delivered: DateTime<Utc>,
    rescue_requested: DateTime<Utc>,
    rescue_up: DateTime<Utc>,
    transfer_start: DateTime<Utc>,
    transfer_end: DateTime<Utc>,
    normal_requested: DateTime<Utc>,
    normal_up: DateTime<Utc>,
    config_applied: DateTime<Utc>,
    node_ready: DateTime<Utc>,
    /// NodeClaim first seen -> order (Karpenter's batch and Create), outside the flow.
    launch: Option<f64>,
}

fn secs(a: DateTime<Utc>, b: DateTime<Utc>) -> f64 {
    (b - a).num_microseconds().unwrap_or(0) as f64 / 1e6
}

impl Flow {
    fn flow(&self) -> f64 {
        secs(self.order, self.node_ready)
    }
    /// The platform's waits: delivery, the two reboots, the image transfer, the join.
    fn platform(&self) -> [f64; 5] {
        [
            secs(self.order, self.delivered),
            secs(self.rescue_requested, self.rescue_up),
            secs(self.transfer_start, self.transfer_end),
            secs(self.normal_requested, self.normal_up),
            secs(self.config_applied, self.node_ready),
        ]
    }
    /// The provider's gaps between them.
    fn added(&self) -> [f64; 4] {
        [
            secs(self.delivered, self.rescue_requested),
            secs(self.rescue_up, self.transfer_start),
            secs(self.transfer_end, self.normal_requested),
            secs(self.normal_up, self.config_applied),
        ]
    }
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    e2e::install_crypto();
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .with_writer(std::io::stderr)
        .try_init();
    if args.nodes == 0 || args.time_scale.is_nan() || args.time_scale <= 0.0 || args.image_rate == 0
    {
        bail!("--nodes, --time-scale and --image-rate must be positive");
    }
    let mut opts = StackOptions::for_test("bench-install")?;
    opts.time_scale = args.time_scale;
    opts.poll_interval = Duration::from_millis(args.poll_ms);
    opts.image_bytes_per_second = Some(args.image_rate);
    if let Some(pace) = args.provider_pace {
        opts.provider_args = vec!["--scw-api-rate-limit".into(), pace.to_string()];
    }
    println!(
        "kps-bench-install: {} node(s) of {} after {} warm-up node(s), time scale {}, provider poll interval {} ms, image {} at {} B/s",
        args.nodes,
        args.offer,
        args.warmup,
        args.time_scale,
        args.poll_ms,
        opts.image_size,
        args.image_rate
    );
    println!(
        "machine: {} cores, load {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        std::fs::read_to_string("/proc/loadavg")
            .unwrap_or_default()
            .trim()
    );
    println!("logs: {}", opts.work_dir.join("logs").display());
    let stack = Stack::up(opts).await?;
    let result = run(&stack, &args).await;
    if let Err(e) = &result {
        eprintln!("benchmark failed: {e:#}\n{}", stack.diagnostics());
    }
    if args.keep && result.is_ok() {
        println!("--keep: stack left running; Ctrl-C to stop");
        let _ = tokio::signal::ctrl_c().await;
    }
    stack.stop().await;
    result
}

async fn run(stack: &Stack, args: &Args) -> Result<()> {
    let (events, events_task) = stack.emsim.follow_events();
    let ready = watch_node_ready(stack);
    let claims = e2e::progress::ClaimWatch::start(&stack.client);
    stack.create_nodeclass("default").await?;
    kubeutil::apply_yaml(
        &stack.client,
        &Stack::nodepool_yaml(
            "bench",
            "default",
            &scenario::instance_types_requirement(&[&args.offer]),
        ),
    )
    .await?;
    if args.warmup > 0 {
        api_quota_for(stack, args).await?;
    }
    let first_wave = if args.warmup > 0 {
        args.warmup
    } else {
        args.nodes
    };
    kubeutil::apply_yaml(
        &stack.client,
        &scenario::inflate_yaml_on(
            "bench",
            first_wave,
            "1",
            &[("karpenter.sh/nodepool", "bench")],
            true,
        ),
    )
    .await?;
    let timeout = Duration::from_secs_f64(120.0 + 600.0 * args.time_scale * 2.0);
    // Orders after this instant are the measured ones.
    let mut measured_from = None;
    if args.warmup > 0 {
        wait_deliveries_seen(stack, args.warmup as usize, timeout).await?;
        measured_from = Some(Utc::now());
        scenario::scale(stack, "bench", args.warmup + args.nodes).await?;
        println!(
            "warm-up: the provider saw {} deliveries; {} more nodes ordered",
            args.warmup, args.nodes
        );
    }
    let total = (args.warmup + args.nodes) as usize;
    scenario::wait_pods_running(stack, "bench", total, timeout * 2).await?;
    // Let the last Ready be recorded by the watch.
    tokio::time::sleep(Duration::from_millis(500)).await;

    // Simulated time -> wall time, calibrated on one clock read.
    let before = Utc::now();
    let (sim_now, scale) = stack.emsim.clock().await?;
    let after = Utc::now();
    let wall_now = before + (after - before) / 2;
    let to_wall = |sim: DateTime<Utc>| -> DateTime<Utc> {
        let behind = (sim_now - sim).num_microseconds().unwrap_or(0) as f64 * scale;
        wall_now - chrono::Duration::microseconds(behind as i64)
    };

    let events: Vec<EmsimEvent> = events.lock().unwrap_or_else(|e| e.into_inner()).clone();
    events_task.abort();
    let (ready_log, ready_task) = ready;
    let ready: BTreeMap<String, DateTime<Utc>> =
        ready_log.lock().unwrap_or_else(|e| e.into_inner()).clone();
    ready_task.abort();
    let transfers: Vec<Transfer> = stack.image.transfers();
    let servers = stack.owned_servers().await?;
    let sims = stack.talossim.servers().await?;
    let counters = stack.emsim.counters().await?;
    let calls = Calls::from_counters(&counters);
    let claim_view = claims.snapshot();
    let first_seen_wall = {
        let now_i = std::time::Instant::now();
        let now_w = Utc::now();
        move |i: std::time::Instant| {
            now_w - chrono::Duration::microseconds(now_i.duration_since(i).as_micros() as i64)
        }
    };

    let mut flows = Vec::new();
    let mut irregular = Vec::new();
    for s in &servers {
        let id = s["id"].as_str().context("server id")?.to_string();
        let claim = s["tags"]
            .as_array()
            .and_then(|t| {
                t.iter()
                    .filter_map(|t| t.as_str())
                    .find_map(|t| t.strip_prefix("karpenter.sh/nodeclaim="))
            })
            .context("server without its NodeClaim tag")?
            .to_string();
        match build_flow(&id, &claim, s, &events, &sims, &ready, &to_wall) {
            Ok(mut f) => {
                let of_server = &counters["servers"][&id];
                f.reads = of_server["GET /baremetal/v1/zones/{zone}/servers/{server_id}"]["total"]
                    .as_u64()
                    .unwrap_or(0);
                f.calls = of_server
                    .as_object()
                    .map(|m| m.values().filter_map(|c| c["total"].as_u64()).sum())
                    .unwrap_or(0);
                f.launch = claim_view
                    .get(&claim)
                    .map(|c| secs(first_seen_wall(c.first_seen), f.order));
                flows.push(f);
            }
            Err(e) => irregular.push(format!("{claim} ({id}): {e:#}")),
        }
    }
    // The image server cannot tell its clients apart (every download comes
    // from the same loopback address): downloads are matched to servers in
    // order, each inside its server's window (rescue up .. normal reboot).
    flows.sort_by_key(|f| f.rescue_up);
    let mut starts: Vec<&Transfer> = transfers.iter().filter(|t| t.complete).collect();
    starts.sort_by_key(|t| t.started);
    if starts.len() != flows.len() {
        irregular.push(format!(
            "{} complete image downloads for {} installs (retries?): breakdown not computed",
            starts.len(),
            flows.len()
        ));
        flows.clear();
    }
    for (f, t) in flows.iter_mut().zip(&starts) {
        let end = t.finished.context("finished")?;
        if t.started < f.rescue_up || end > f.normal_requested {
            bail!(
                "download {} .. {} outside the window of {} ({} .. {})",
                t.started,
                end,
                f.claim,
                f.rescue_up,
                f.normal_requested
            );
        }
        f.transfer_start = t.started;
        f.transfer_end = end;
    }
    let (warm, measured): (Vec<Flow>, Vec<Flow>) = flows
        .into_iter()
        .partition(|f| measured_from.is_some_and(|t| f.order < t));
    print_definitions(args);
    if !warm.is_empty() {
        println!("Warm-up (no delivery seen before: the poll interval throughout):");
        print_group(args, &warm);
        println!();
        println!("Measured (after the warm-up's deliveries):");
    }
    print_group(args, &measured);
    for i in &irregular {
        println!("irregular: {i}");
    }
    println!();
    println!("Scaleway API calls of the whole run (emsim), per node:");
    print!("{}", calls.table(total));
    let metrics = stack.provider_metrics(0).await.unwrap_or_default();
    println!("The provider's pacing (its /metrics):");
    for line in metrics
        .lines()
        // The API families; the duration histograms' buckets left out.
        .filter(|l| l.starts_with("karpenter_scaleway_api_") && !l.contains("_bucket{"))
    {
        println!("  {line}");
    }
    println!("work dir: {}", stack.opts.work_dir.display());
    Ok(())
}

/// The warm-up and the measured nodes together exceed the offer's quota
/// (10 in emsim's catalog) once they are more than that: lifted.
async fn api_quota_for(stack: &Stack, args: &Args) -> Result<()> {
    if args.warmup + args.nodes > 10 {
        benchkit::api::set_quota(&stack.emsim, &args.offer, None).await?;
    }
    Ok(())
}

/// Waits until the provider has asked for the rescue reboot of `n` servers
/// of this cluster: it has seen each of them delivered.
async fn wait_deliveries_seen(stack: &Stack, n: usize, timeout: Duration) -> Result<()> {
    e2e::wait::until(
        &format!("{n} warm-up deliveries seen by the provider"),
        timeout,
        Duration::from_millis(500),
        || async {
            let servers = stack.owned_servers().await?;
            let seen = servers
                .iter()
                .filter(|s| s["boot_history"].as_array().is_some_and(|b| !b.is_empty()))
                .count();
            Ok((seen >= n).then_some(()))
        },
    )
    .await
}

fn build_flow(
    id: &str,
    claim: &str,
    server: &serde_json::Value,
    events: &[EmsimEvent],
    sims: &[serde_json::Value],
    ready: &BTreeMap<String, DateTime<Utc>>,
    to_wall: &dyn Fn(DateTime<Utc>) -> DateTime<Utc>,
) -> Result<Flow> {
    let time = |v: &serde_json::Value| -> Result<DateTime<Utc>> {
        let t = v.as_str().context("time")?;
        Ok(DateTime::parse_from_rfc3339(t)
            .with_context(|| t.to_string())?
            .with_timezone(&Utc))
    };
    let order = to_wall(time(&server["created_at"])?);
    let boots = server["boot_history"].as_array().context("boot_history")?;
    if boots.len() != 2 || boots[0]["boot_type"] != "rescue" || boots[1]["boot_type"] != "normal" {
        bail!("boot history is not [rescue, normal]: {boots:?}");
    }
    let rescue_requested = to_wall(time(&boots[0]["at"])?);
    let normal_requested = to_wall(time(&boots[1]["at"])?);
    let ons: Vec<&EmsimEvent> = events
        .iter()
        .filter(|e| e.server_id == id && e.kind == "power_on")
        .collect();
    if ons.len() != 3 {
        bail!(
            "{} power_on events, expected 3 (delivery, rescue, normal)",
            ons.len()
        );
    }
    let sim = sims
        .iter()
        .find(|s| s["id"] == id)
        .context("no talos-sim record")?;
    let applied = sim["applied_configs"]
        .as_array()
        .filter(|a| a.len() == 1)
        .context("expected exactly one applied config")?;
    Ok(Flow {
        claim: claim.to_string(),
        reads: 0,
        calls: 0,
        order,
        delivered: to_wall(ons[0].at),
        rescue_requested,
        rescue_up: to_wall(ons[1].at),
        transfer_start: rescue_requested,
        transfer_end: rescue_requested,
        normal_requested,
        normal_up: to_wall(ons[2].at),
        config_applied: time(&applied[0]["at"])?,
        node_ready: *ready.get(claim).context("Node never seen Ready")?,
        launch: None,
    })
}

type ReadyLog = (
    Arc<Mutex<BTreeMap<String, DateTime<Utc>>>>,
    tokio::task::JoinHandle<()>,
);

/// First time each Node was seen with Ready=True (wall clock, by a watch).
fn watch_node_ready(stack: &Stack) -> ReadyLog {
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::Node;
    use kube::runtime::watcher;
    let log = Arc::new(Mutex::new(BTreeMap::new()));
    let out = log.clone();
    let api: kube::Api<Node> = kube::Api::all(stack.client.clone());
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(watcher(api, watcher::Config::default()));
        while let Some(ev) = stream.next().await {
            let now = Utc::now();
            if let Ok(watcher::Event::Apply(n) | watcher::Event::InitApply(n)) = ev
                && kubeutil::node_ready(&n)
            {
                let name = kube::ResourceExt::name_any(&n);
                out.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .entry(name)
                    .or_insert(now);
            }
        }
    });
    (log, task)
}

fn print_definitions(args: &Args) {
    let s = args.time_scale;
    println!();
    println!("Definitions (all in real seconds; simulated seconds = real / {s}):");
    println!("  flow      order accepted by emsim -> Node Ready seen by a watch");
    println!("  delivery  order -> server delivered (emsim power_on)");
    println!("  rescue    rescue reboot requested -> rescue system up (emsim)");
    println!(
        "  transfer  image download start -> last byte sent (image server, {} B/s)",
        args.image_rate
    );
    println!("  normal    normal reboot requested -> server up (emsim)");
    println!(
        "  join      config applied (talos-sim) -> Node Ready (Talos install reboot, kubelet TLS bootstrap, registration)"
    );
    println!("  platform  delivery + rescue + transfer + normal + join");
    println!("  added     flow - platform = the provider's four gaps:");
    println!("              a1 delivered -> rescue reboot requested (status poll)");
    println!("              a2 rescue up -> download start (SSH connect poll, lsblk, ip)");
    println!(
        "              a3 download end -> normal reboot requested (write tail, sync, read-back verify)"
    );
    println!("              a4 server up -> config applied (maintenance API poll, render, apply)");
    println!("  launch    NodeClaim seen -> order (Karpenter batch + Create; outside the flow)");
    println!(
        "  reads     status reads of the server (GET /servers/{{id}}); calls: every call naming it"
    );
    println!();
}

fn print_group(args: &Args, flows: &[Flow]) {
    println!(
        "{:<16} {:>7} | {:>8} {:>6} {:>8} {:>6} {:>6} | {:>6} {:>6} {:>6} {:>6} | {:>6} {:>7} | {:>6} | {:>5} {:>5}",
        "node",
        "flow",
        "delivery",
        "rescue",
        "transfer",
        "normal",
        "join",
        "a1",
        "a2",
        "a3",
        "a4",
        "added",
        "added%",
        "launch",
        "reads",
        "calls"
    );
    let mut total_flow = 0.0;
    let mut total_added = 0.0;
    let mut worst: f64 = 0.0;
    for f in flows {
        let p = f.platform();
        let a = f.added();
        let added: f64 = a.iter().sum();
        let pct = 100.0 * added / f.flow();
        total_flow += f.flow();
        total_added += added;
        worst = worst.max(pct);
        println!(
            "{:<16} {:>7.3} | {:>8.3} {:>6.3} {:>8.3} {:>6.3} {:>6.3} | {:>6.3} {:>6.3} {:>6.3} {:>6.3} | {:>6.3} {:>6.2}% | {:>6} | {:>5} {:>5}",
            f.claim,
            f.flow(),
            p[0],
            p[1],
            p[2],
            p[3],
            p[4],
            a[0],
            a[1],
            a[2],
            a[3],
            added,
            pct,
            f.launch.map_or("-".into(), |l| format!("{l:.3}")),
            f.reads,
            f.calls,
        );
        debug_assert!((p.iter().sum::<f64>() + added - f.flow()).abs() < 1e-3);
    }
    if !flows.is_empty() {
        let n = flows.len() as f64;
        println!();
        println!(
            "mean flow {:.3} s, mean added {:.3} s = {:.2}% of the flow (worst node {:.2}%); goal <= 2%",
            total_flow / n,
            total_added / n,
            100.0 * total_added / total_flow,
            worst
        );
        println!(
            "poll interval {} ms: a1, a2 and a4 each start with a poll, so about 1.5 x {} ms = {:.3} s of the mean added time is waiting for the next poll",
            args.poll_ms,
            args.poll_ms,
            1.5 * args.poll_ms as f64 / 1000.0
        );
        let a1: Vec<f64> = flows.iter().map(|f| f.added()[0]).collect();
        println!(
            "a1 (delivery noticed): mean {:.3} s, max {:.3} s; per node: {:.1} status reads, {:.1} calls naming the server",
            a1.iter().sum::<f64>() / n,
            a1.iter().copied().fold(0.0, f64::max),
            flows.iter().map(|f| f.reads as f64).sum::<f64>() / n,
            flows.iter().map(|f| f.calls as f64).sum::<f64>() / n,
        );
    }
}
