#![forbid(unsafe_code)]
//! `kps-bench-scale` (`just bench-scale`): many installs at once against
//! emsim with its per-endpoint rate limit on, time-scaled.
//!
//! A one-pod-per-node Deployment is created with `--nodes` replicas (or
//! grown by `--batch` every `--batch-every`), so Karpenter creates that many
//! NodeClaims within a minute. The benchmark reports whether every node
//! joined (or exactly which did not and why), the Scaleway API calls per node
//! by endpoint (emsim's counters), the 429s emsim answered and how the
//! provider absorbed them (its log), the peak RSS and CPU of the provider, the
//! bridge and the simulators (`/proc`), and the time from the first NodeClaim
//! to the last Node Ready. See `docs/figures.md`, "Scale".

mod benchkit;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use clap::Parser;
use e2e::scenario;
use e2e::stack::{BRIDGE, PROVIDER, Stack, StackOptions};
use e2e::{kubeutil, progress::ClaimWatch};

use benchkit::api::{self, Calls};
use benchkit::logs::Throttling;
use benchkit::procstat::{Sampler, Usage};

#[derive(Parser, Debug)]
#[command(
    name = "kps-bench-scale",
    about = "Many installs at once against the simulators, with emsim's rate limit on"
)]
struct Args {
    /// Nodes to provision (one pod per node).
    #[arg(long, default_value_t = 100)]
    nodes: u32,
    /// emsim time scale (real seconds per simulated second).
    #[arg(long, default_value_t = 0.25)]
    time_scale: f64,
    /// Provider status-poll interval (`--poll-interval`), in milliseconds.
    /// Real time, like the rate limit: the request rates the API sees are
    /// those of a real cluster with this many installs in flight.
    #[arg(long, default_value_t = 5000)]
    poll_ms: u64,
    /// emsim's per-endpoint rate limit, calls per second (0: off).
    #[arg(long, default_value_t = 10.0)]
    rate_limit: f64,
    /// The offer to order (the NodePool allows only this one; its quota is lifted).
    #[arg(long, default_value = "EM-B112X-SSD")]
    offer: String,
    /// Replicas added per step (default: all at once).
    #[arg(long)]
    batch: Option<u32>,
    /// Pause between two steps, in seconds.
    #[arg(long, default_value_t = 10)]
    batch_every: u64,
    /// Uncompressed size of the Talos image each server downloads and writes.
    #[arg(long, default_value = "8MiB")]
    image_size: String,
    /// Give up waiting for the nodes after this many seconds (default: from
    /// the time scale: twice the slowest simulated flow, plus 5 minutes).
    #[arg(long)]
    timeout_s: Option<u64>,
    /// Leave the stack running at the end (Ctrl-C to stop).
    #[arg(long)]
    keep: bool,
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
    if args.nodes == 0 || !(args.time_scale.is_finite() && args.time_scale > 0.0) {
        bail!("--nodes and --time-scale must be positive");
    }
    let mut opts = StackOptions::for_test("bench-scale")?;
    opts.time_scale = args.time_scale;
    opts.poll_interval = Duration::from_millis(args.poll_ms);
    opts.image_size = args.image_size.clone();
    println!(
        "kps-bench-scale: {} node(s) of {}, time scale {}, poll interval {} ms, emsim rate limit {} per endpoint, image {}",
        args.nodes,
        args.offer,
        args.time_scale,
        args.poll_ms,
        if args.rate_limit > 0.0 {
            format!("{}/s", args.rate_limit)
        } else {
            "off".into()
        },
        args.image_size
    );
    println!("logs: {}", opts.work_dir.join("logs").display());
    println!("machine: {} cores, load {}", cores(), loadavg());
    let mut stack = Stack::up(opts).await?;
    let mut pids: Vec<(String, u32)> = [PROVIDER, BRIDGE, "emsim", "talos-sim"]
        .into_iter()
        .filter_map(|name| Some((name.to_string(), stack.proc_mut(name)?.pid())))
        .collect();
    // The control plane, by its process names (etcd, kube-apiserver, ...).
    for pid in stack.cp.pids() {
        let comm = std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
        pids.push((comm.trim().to_string(), pid));
    }
    let result = run(&stack, &args, &pids).await;
    if let Err(e) = &result {
        eprintln!("benchmark failed: {e:#}\n{}", stack.diagnostics());
    }
    if args.keep {
        println!("--keep: stack left running; Ctrl-C to stop");
        let _ = tokio::signal::ctrl_c().await;
    }
    stack.stop().await;
    result
}

/// What the run saw, for the report.
struct Outcome {
    claims: e2e::progress::Claims,
    ready: BTreeMap<String, Instant>,
    first_claim: Option<Instant>,
    calls: Calls,
    usage: BTreeMap<String, Usage>,
    /// The whole machine's CPU use over the run, in cores (every process,
    /// other jobs on the machine included).
    machine_busy: f64,
    /// Its busiest 5 s.
    machine_busiest: f64,
    throttling: Throttling,
    install_outcomes: BTreeMap<String, f64>,
    /// The provider's API counters: calls by result, retries, pacing, 429s
    /// (`karpenter_scaleway_api_*`).
    pacing: Vec<String>,
    servers_ordered: u64,
    joined: usize,
    timed_out: bool,
    elapsed: Duration,
}

async fn run(stack: &Stack, args: &Args, pids: &[(String, u32)]) -> Result<()> {
    api::set_quota(&stack.emsim, &args.offer, None).await?;
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
    // The limit comes on once the stack is up, so that only the benchmark's
    // own calls meet it (the provider's first catalog read included in
    // every later refresh).
    let limit = (args.rate_limit > 0.0).then_some(args.rate_limit);
    api::set_rate_limit(&stack.emsim, limit).await?;
    let before = Calls::read(&stack.emsim).await?;
    let sampler = Sampler::start(pids)?;
    let machine = benchkit::procstat::MachineCpu::read()?;
    let claims = ClaimWatch::start(&stack.client);
    let (ready, ready_task) = watch_node_ready(stack);
    let started = Instant::now();

    let step = args.batch.unwrap_or(args.nodes).clamp(1, args.nodes);
    let mut replicas = step;
    kubeutil::apply_yaml(
        &stack.client,
        &scenario::inflate_yaml_on(
            "bench",
            replicas,
            "1",
            &[("karpenter.sh/nodepool", "bench")],
            true,
        ),
    )
    .await?;
    let timeout = Duration::from_secs(
        args.timeout_s
            .unwrap_or((300.0 + 2.0 * 400.0 * args.time_scale) as u64),
    );
    let mut next_step = Instant::now() + Duration::from_secs(args.batch_every);
    let mut next_report = Instant::now();
    let target = args.nodes as usize;
    let timed_out = loop {
        let now = Instant::now();
        if replicas < args.nodes && now >= next_step {
            replicas = (replicas + step).min(args.nodes);
            scenario::scale(stack, "bench", replicas).await?;
            next_step = now + Duration::from_secs(args.batch_every);
        }
        let n_ready = ready.lock().unwrap_or_else(|e| e.into_inner()).len();
        if now >= next_report {
            report_progress(stack, &claims, n_ready, started, &sampler).await;
            next_report = now + Duration::from_secs(10);
        }
        if n_ready >= target {
            break false;
        }
        if started.elapsed() > timeout {
            break true;
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    };
    let elapsed = started.elapsed();
    let calls = Calls::read(&stack.emsim).await?.since(&before);
    let machine_busiest = sampler.machine_busiest();
    let usage = sampler.stop();
    let machine_busy = machine.busy_since()?;
    ready_task.abort();
    let ready = ready.lock().unwrap_or_else(|e| e.into_inner()).clone();
    let claims_view = claims.snapshot();
    let first_claim = claims_view.values().map(|c| c.first_seen).min();
    let metrics = stack.provider_metrics(0).await.unwrap_or_default();
    let install_outcomes = outcomes(&metrics);
    let pacing = metrics
        .lines()
        // The API families; the duration histograms' buckets left out.
        .filter(|l| l.starts_with("karpenter_scaleway_api_") && !l.contains("_bucket{"))
        .map(str::to_string)
        .collect();
    let log = stack
        .opts
        .work_dir
        .join("logs")
        .join(format!("{PROVIDER}.log"));
    let outcome = Outcome {
        joined: ready.len(),
        claims: claims_view,
        ready,
        first_claim,
        servers_ordered: calls.ok("POST /baremetal/v1/zones/{zone}/servers"),
        calls,
        usage,
        machine_busy,
        machine_busiest,
        throttling: Throttling::read(&log),
        install_outcomes,
        pacing,
        timed_out,
        elapsed,
    };
    let failures = failures(stack, &outcome).await;
    print_report(args, &outcome, &failures);
    if outcome.timed_out {
        bail!(
            "{} of {} nodes Ready after {:?}",
            outcome.joined,
            args.nodes,
            timeout
        );
    }
    Ok(())
}

/// Every Node's first `Ready=True`, by a watch (an `Instant`, comparable
/// with the NodeClaim watch's).
fn watch_node_ready(
    stack: &Stack,
) -> (
    Arc<Mutex<BTreeMap<String, Instant>>>,
    tokio::task::JoinHandle<()>,
) {
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::Node;
    use kube::runtime::watcher;
    let log = Arc::new(Mutex::new(BTreeMap::new()));
    let out = log.clone();
    let api: kube::Api<Node> = kube::Api::all(stack.client.clone());
    let task = tokio::spawn(async move {
        let mut stream = std::pin::pin!(watcher(api, watcher::Config::default()));
        while let Some(ev) = stream.next().await {
            let now = Instant::now();
            if let Ok(watcher::Event::Apply(n) | watcher::Event::InitApply(n)) = ev
                && kubeutil::node_ready(&n)
            {
                out.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .entry(kube::ResourceExt::name_any(&n))
                    .or_insert(now);
            }
        }
    });
    (log, task)
}

async fn report_progress(
    stack: &Stack,
    claims: &ClaimWatch,
    ready: usize,
    started: Instant,
    sampler: &Sampler,
) {
    let view = claims.snapshot();
    let mut phases: BTreeMap<String, usize> = BTreeMap::new();
    for c in view.values().filter(|c| !c.gone) {
        let phase = c.phase.clone().unwrap_or_else(|| "launching".into());
        *phases.entry(phase).or_default() += 1;
    }
    let throttled = stack
        .emsim
        .counters()
        .await
        .map(|c| Calls::from_counters(&c).with_status(429))
        .unwrap_or(0);
    let rss = sampler.peak_kib(PROVIDER).unwrap_or(0) as f64 / 1024.0;
    println!(
        "[{:>5.0} s] NodeClaims {} ({} gone), phases {phases:?}, Nodes Ready {ready}, 429s so far {throttled}, provider peak RSS {rss:.1} MiB, load {}",
        started.elapsed().as_secs_f64(),
        view.len(),
        view.values().filter(|c| c.gone).count(),
        loadavg()
    );
}

/// `karpenter_scaleway_install_outcomes_total{result}`.
fn outcomes(metrics: &str) -> BTreeMap<String, f64> {
    let name = "karpenter_scaleway_install_outcomes_total{result=\"";
    metrics
        .lines()
        .filter_map(|l| l.strip_prefix(name))
        .filter_map(|rest| {
            let (result, value) = rest.split_once("\"} ")?;
            Some((result.to_string(), value.trim().parse().ok()?))
        })
        .collect()
}

/// Every NodeClaim that did not end with a Ready Node, and why, as far as
/// the cluster and the simulators tell.
async fn failures(stack: &Stack, o: &Outcome) -> Vec<String> {
    let mut out = Vec::new();
    for c in o.claims.values() {
        if o.ready.contains_key(&c.name) {
            continue;
        }
        let events = kubeutil::nodeclaim_events(&stack.client, &c.name)
            .await
            .unwrap_or_default();
        let last_warning = events
            .iter()
            .rev()
            .find(|e| e.type_ == "Warning")
            .map(|e| format!("{}: {}", e.reason, e.message))
            .unwrap_or_default();
        out.push(format!(
            "{} phase {} server {} {}{}",
            c.name,
            c.phase.as_deref().unwrap_or("none"),
            c.server_id().unwrap_or_else(|| "-".into()),
            if c.gone { "(deleted) " } else { "" },
            last_warning
        ));
    }
    out
}

fn print_report(args: &Args, o: &Outcome, failures: &[String]) {
    println!();
    let claims = o.claims.len();
    println!(
        "nodes Ready: {} of {} ({} NodeClaims seen, {} servers ordered){}",
        o.joined,
        args.nodes,
        claims,
        o.servers_ordered,
        if o.timed_out { " — TIMED OUT" } else { "" }
    );
    println!(
        "install outcomes (provider metrics): {:?}",
        o.install_outcomes
    );
    for f in failures {
        println!("not joined: {f}");
    }
    let last_ready = o.ready.values().max();
    if let (Some(first), Some(last)) = (o.first_claim, last_ready) {
        let span = last.saturating_duration_since(first).as_secs_f64();
        println!(
            "first NodeClaim -> last Node Ready: {span:.1} s ({:.1} simulated s)",
            span / args.time_scale
        );
    }
    if let Some(first) = o.first_claim {
        let mut claims: Vec<Instant> = o.claims.values().map(|c| c.first_seen).collect();
        claims.sort();
        if let Some(last) = claims.last() {
            println!(
                "NodeClaims created within {:.1} s",
                last.saturating_duration_since(first).as_secs_f64()
            );
        }
    }
    println!();
    println!(
        "Scaleway API calls during the run ({:.0} s), per joined node:",
        o.elapsed.as_secs_f64()
    );
    print!("{}", o.calls.table(o.joined));
    println!();
    println!("429s and how the provider absorbed them (its log):");
    println!("  client retries after a 429: {:?}", o.throttling.retried);
    println!(
        "  calls still throttled after the client's retries: {:?}",
        o.throttling.gave_up
    );
    println!(
        "  gRPC calls from Karpenter that failed (any cause): {:?}",
        o.throttling.rpc_failures
    );
    println!("  client-side pacing (provider /metrics):");
    for line in &o.pacing {
        println!("    {line}");
    }
    println!();
    println!(
        "{:<22} {:>7} {:>13} {:>9} {:>11} {:>13}",
        "process", "pid", "peak RSS MiB", "CPU s", "mean cores", "busiest 5 s"
    );
    for (name, u) in &o.usage {
        println!(
            "{:<22} {:>7} {:>13.1} {:>9.1} {:>11.2} {:>13.2}{}",
            name,
            u.pid,
            u.last.hwm_kib as f64 / 1024.0,
            u.cpu_s(),
            u.mean_cores(),
            u.busiest,
            if u.lost { " (exited)" } else { "" }
        );
    }
    let stack_cores: f64 = o.usage.values().map(Usage::mean_cores).sum();
    println!(
        "the machine: {:.2} of {} cores busy on average over the run ({:.2} of them the processes above), {:.2} in its busiest 5 s",
        o.machine_busy,
        cores(),
        stack_cores,
        o.machine_busiest
    );
    println!();
    let provider_rss = o
        .usage
        .get(PROVIDER)
        .map_or(0.0, |u| u.last.hwm_kib as f64 / 1024.0);
    let per_node = o.calls.total() as f64 / o.joined.max(1) as f64;
    println!(
        "targets: all join {}; <= 25 API calls per node {} ({per_node:.1}); provider RSS <= 128 MiB {} ({provider_rss:.1} MiB)",
        verdict(o.joined >= args.nodes as usize),
        verdict(per_node <= 25.0),
        verdict(provider_rss <= 128.0),
    );
    println!("machine: {} cores, load {}", cores(), loadavg());
}

fn verdict(ok: bool) -> &'static str {
    if ok { "met" } else { "MISSED" }
}

fn cores() -> usize {
    std::thread::available_parallelism().map_or(0, |n| n.get())
}

fn loadavg() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .ok()
        .and_then(|s| {
            let v: Vec<&str> = s.split_whitespace().take(3).collect();
            (v.len() == 3).then(|| v.join(" "))
        })
        .context("/proc/loadavg")
        .unwrap_or_default()
}
