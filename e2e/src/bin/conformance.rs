#![forbid(unsafe_code)]
//! `just conformance [SUITE] [KIND] [FOCUS]`: Karpenter core's own e2e suites
//! (`test/suites/<suite>` of the `sigs.k8s.io/karpenter` module at the
//! bridge's version, compiled as published by `hack/core-suites.sh`) against
//! this provider on the local stack: a real control plane, Karpenter core in
//! the bridge, the provider from the chart, emsim and talos-sim time-scaled.
//! Our default NodeClass and NodePool are `e2e/conformance/*.yaml`; the
//! specs that cannot apply to Scaleway are skipped by `e2e/conformance/skips.yaml`,
//! each with its reason. Prints one row per spec and ends with
//! `N passed, N failed, N skipped`.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

use anyhow::{Context, Result, bail, ensure};
use clap::Parser;
use e2e::conformance::{self, Kind, Suite};
use e2e::stack::{self, Stack, StackOptions};

#[derive(Parser)]
#[command(about = "Karpenter core's e2e suites against this provider on the local stack")]
struct Args {
    /// regression, disruption or performance.
    #[arg(long, default_value = "regression")]
    suite: String,
    /// The NodeClass kind: metal (Elastic Metal) or instance (Instances).
    #[arg(long, default_value = "metal")]
    kind: String,
    /// Run only the specs matching this regular expression (--ginkgo.focus).
    #[arg(long)]
    focus: Option<String>,
    /// Where hack/core-suites.sh put the compiled suites.
    #[arg(long, env = "KPS_CORE_SUITES_DIR")]
    suites_dir: PathBuf,
    /// Also write the table and the JSON report here.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Run shard K of N (`K/N`, from 1): the specs split by their durations
    /// in e2e/conformance/durations.json, each shard on a stack of its own.
    #[arg(long)]
    shard: Option<String>,
    /// Record the duration of each spec that ran in
    /// e2e/conformance/durations.json (what --shard splits by).
    #[arg(long)]
    record_durations: bool,
    /// Ginkgo's whole-suite timeout.
    #[arg(long, default_value = "3h")]
    timeout: String,
}

/// The node conditions the repair and reboot specs inject, and what the
/// provider's repair policies do with them (controller/src/provider/repair.rs):
/// node-problem-detector's KernelDeadlock is rebooted, ReadonlyFilesystem
/// replaced. Nothing on a node resets either.
const REBOOT_CONDITION: &str = "KernelDeadlock=True";
const REPAIR_CONDITION: &str = "ReadonlyFilesystem=True";

/// The chart's values for the run (docs/conformance.md):
/// - feature gates the chart leaves off and the suites need, turned on as
///   core's own CI turns them on for its kwok provider;
/// - repair tolerations of one minute (production: 10 and 30). The suites
///   backdate their faults (11 minutes, 24 hours) to make them eligible at
///   once, but core counts a toleration from the Node's creation at the
///   latest, so with the production tolerations a fault on a node a spec
///   just launched would wait 10 or 30 minutes, past the specs' 15-minute
///   waits. Core's kwok provider tolerates 30 seconds.
const CHART_VALUES: &str = "settings:
  featureGates:
    nodeRepair: true
    staticCapacity: true
    capacityBuffer: true
provider:
  repairRebootAfter: 1m
  repairReplaceAfter: 1m
";

/// What the run raises the Elastic Metal quotas to (`conformance::QUOTA_RAISED_OFFERS`).
const RAISED_QUOTA: u64 = 120;

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    e2e::install_crypto();
    let _ = tracing_subscriber::fmt().with_env_filter("warn").try_init();
    let suite = Suite::parse(&args.suite)?;
    let kind = Kind::parse(&args.kind)?;
    let root = stack::repo_root();
    let dir = root.join("e2e/conformance");
    let all_skips = conformance::load_skips(&dir.join("skips.yaml"))?;
    let skips = conformance::skips_for(&all_skips, suite, kind);

    let binary = args.suites_dir.join(format!("{}.test", suite.name()));
    ensure!(
        binary.is_file(),
        "{} missing: run hack/core-suites.sh (just conformance does)",
        binary.display()
    );
    let module_dir = std::fs::read_to_string(args.suites_dir.join("module-dir"))
        .context("module-dir missing in the suites dir: run hack/core-suites.sh")?;
    let suite_dir = PathBuf::from(module_dir.trim())
        .join("test/suites")
        .join(suite.name());

    let mut opts =
        StackOptions::for_test(&format!("conformance-{}-{}", suite.name(), kind.name()))?;
    opts.instances = kind == Kind::Instance;
    opts.extra_chart_values = Some(CHART_VALUES.to_string());
    // The chart's Deployment as kube-system/karpenter, its Pods on a tainted
    // system Node: core's suites patch its settings and wait for the rollout.
    opts.system_node = true;
    // The kube-scheduler configuration core's kind cluster runs with (a
    // profile with default topology spread constraints), read from the suite
    // itself: its DefaultTopologySpreadConstraints specs skip themselves
    // without it.
    let scheduler_config = suite_dir.join("testdata/kube-scheduler-config.yaml");
    if scheduler_config.is_file() {
        opts.scheduler_config = Some(std::fs::read_to_string(&scheduler_config)?);
    }
    let work = opts.work_dir.clone();
    println!(
        "kps-conformance: core's {} suite on {} NodeClasses; logs in {}",
        suite.name(),
        kind.name(),
        work.display()
    );
    let stack = Stack::up(opts).await?;
    // The Elastic Metal quotas of a new project (10 servers of a range, as
    // emsim's catalog records them) raised as a customer asks Scaleway to:
    // the regression suite's Utilization spec wants 100 nodes at once.
    conformance::raise_quotas(&stack, RAISED_QUOTA).await?;
    let result = run(
        &args, &stack, suite, kind, &dir, &skips, &binary, &suite_dir,
    )
    .await;
    let leaked = stack.assert_no_secrets().await;
    stack.stop().await;
    let (passed, failed, skipped) = result?;
    leaked?;
    // hack/test-summary.py counts this line.
    println!("conformance: {passed} passed, {failed} failed, {skipped} skipped");
    if failed > 0 {
        std::process::exit(1);
    }
    Ok(())
}

#[allow(clippy::too_many_arguments)]
async fn run(
    args: &Args,
    stack: &Stack,
    suite: Suite,
    kind: Kind,
    dir: &std::path::Path,
    skips: &[conformance::Skip],
    binary: &std::path::Path,
    suite_dir: &std::path::Path,
) -> Result<(usize, usize, usize)> {
    let work = &stack.opts.work_dir;
    let nodeclass = work.join("conformance-nodeclass.yaml");
    conformance::write_default_nodeclass(stack, kind, &nodeclass)?;
    let pins = conformance::pins_for(
        &conformance::load_pins(&dir.join("nodepools.yaml"))?,
        suite,
        kind,
    );
    let output = work.join("outputs");
    std::fs::create_dir_all(&output)?;

    // The specs to run: listed by a dry run (the focus and the skips
    // applied), then this shard's, then grouped by the default NodePool each
    // runs with; one run of the suite per group, on the same stack.
    let listed = dry_run(binary, suite_dir, work, skips, args.focus.as_deref())?;
    conformance::check_skips_exist(skips, &listed)?;
    let every: Vec<String> = listed.iter().map(|r| r.full_text.clone()).collect();
    conformance::check_pins_match(&pins, &every)?;
    let runnable: Vec<String> = listed
        .into_iter()
        .filter(|r| r.passed())
        .map(|r| r.full_text)
        .collect();
    let shard = match &args.shard {
        Some(text) => Some(shard_of(text, suite, kind, &runnable)?),
        None => None,
    };
    let selected = match &shard {
        Some((k, specs)) => {
            println!("shard {k}: {} specs", specs.len());
            specs.clone()
        }
        None => runnable,
    };
    ensure!(!selected.is_empty(), "no spec selected");
    let groups = conformance::group_by_nodepool(&selected, &pins, "nodepool.yaml");

    let started = Instant::now();
    let mut results: Vec<conformance::SpecResult> = Vec::new();
    let mut exit_failures = Vec::new();
    let mut reports = Vec::new();
    for (i, (nodepool, specs)) in groups.iter().enumerate() {
        if groups.len() > 1 {
            println!(
                "group {}/{}: {} specs with --default-nodepool {nodepool}",
                i + 1,
                groups.len(),
                specs.len()
            );
        }
        let suffix = if i == 0 {
            String::new()
        } else {
            format!("-{i}")
        };
        let report = work.join(format!("ginkgo-report{suffix}.json"));
        let log_path = work.join(format!("logs/core-suite{suffix}.log"));
        let focus = conformance::exact_regex(specs.iter().map(String::as_str))
            .context("a group without specs")?;
        let run = Invocation {
            binary,
            suite_dir,
            nodeclass: &nodeclass,
            nodepool: &dir.join(nodepool),
            focus: &focus,
            skips,
            report: &report,
            log_path: &log_path,
            output: &output,
            timeout: &args.timeout,
        };
        let status = invoke(stack, &run).await?;
        let json = std::fs::read_to_string(&report)
            .with_context(|| format!("{} wrote no report ({status})", binary.display()))?;
        // Ginkgo reports every spec; those the focus left out are skipped
        // without a message, and the skip list's rows come in every report.
        for r in conformance::parse_report(&json, skips)? {
            let left_out = r.state == "skipped" && r.note.is_empty();
            let seen = results.iter().any(|o| o.full_text == r.full_text);
            if !left_out && !seen {
                results.push(r);
            }
        }
        if !status.success() {
            exit_failures.push(status);
        }
        reports.push(report);
    }
    let minutes = started.elapsed().as_secs_f64() / 60.0;
    // The skip list's rows go with the first shard.
    let first_shard = shard.as_ref().is_none_or(|(k, _)| *k == 1);
    let results: Vec<_> = results
        .into_iter()
        .filter(|r| first_shard || !skips.iter().any(|k| k.spec == r.full_text))
        .collect();
    let (passed, failed, skipped) = conformance::counts(&results);
    let table = conformance::markdown_table(&results);
    let header = format!(
        "core {} suite, {} NodeClasses ({}), {minutes:.1} min: {passed} passed, {failed} failed, {skipped} skipped\n\n",
        suite.name(),
        kind.name(),
        kind.nodeclass_kind()
    );
    let md = work.join(format!("conformance-{}-{}.md", suite.name(), kind.name()));
    std::fs::write(&md, format!("{header}{table}"))?;
    if let Some(out) = &args.out {
        std::fs::create_dir_all(out)?;
        std::fs::copy(&md, out.join(md.file_name().unwrap_or_default()))?;
        for (i, report) in reports.iter().enumerate() {
            let suffix = if i == 0 {
                String::new()
            } else {
                format!("-{i}")
            };
            std::fs::copy(
                report,
                out.join(format!(
                    "ginkgo-{}-{}{suffix}.json",
                    suite.name(),
                    kind.name()
                )),
            )?;
        }
    }
    if args.record_durations {
        record_durations(suite, kind, &results)?;
    }
    println!("\n{header}{table}");
    println!("table: {}", md.display());
    if failed == 0 && !exit_failures.is_empty() {
        bail!(
            "the suite exited with {} although no spec failed: see its log",
            exit_failures[0]
        );
    }
    Ok((passed, failed, skipped))
}

/// One run of the suite binary.
struct Invocation<'a> {
    binary: &'a std::path::Path,
    suite_dir: &'a std::path::Path,
    nodeclass: &'a std::path::Path,
    nodepool: &'a std::path::Path,
    focus: &'a str,
    skips: &'a [conformance::Skip],
    report: &'a std::path::Path,
    log_path: &'a std::path::Path,
    output: &'a std::path::Path,
    timeout: &'a str,
}

/// Runs the suite binary once against the stack, its whole output to
/// `log_path` and each spec's outcome to the terminal; its exit status.
async fn invoke(stack: &Stack, run: &Invocation<'_>) -> Result<std::process::ExitStatus> {
    let mut cmd = Command::new(run.binary);
    cmd.current_dir(run.suite_dir)
        .arg("-test.v")
        .arg(format!("-test.timeout={}", run.timeout))
        .arg(format!("-ginkgo.timeout={}", run.timeout))
        .arg("-ginkgo.grace-period=5m")
        .arg("-ginkgo.v")
        .arg("-ginkgo.no-color")
        .arg(format!("-ginkgo.json-report={}", run.report.display()))
        .arg(format!(
            "--kubeconfig={}",
            stack.cp.kubeconfig_path().display()
        ))
        .arg(format!("--default-nodeclass={}", run.nodeclass.display()))
        .arg(format!("--default-nodepool={}", run.nodepool.display()))
        .arg(format!("--repair-condition={REPAIR_CONDITION}"))
        .arg(format!("--reboot-condition={REBOOT_CONDITION}"))
        .arg(format!("-ginkgo.focus={}", run.focus))
        .env("OUTPUT_DIR", run.output)
        .env_remove("KUBECONFIG")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if let Some(re) = conformance::skip_regex(run.skips) {
        cmd.arg(format!("-ginkgo.skip={re}"));
    }
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting {}", run.binary.display()))?;
    let stdout = child.stdout.take().context("no stdout")?;
    // The suite's whole output to the log; to the terminal, only each spec's
    // outcome and name and the summary (a blocking copy: the stack's own
    // tasks keep running on the runtime meanwhile).
    println!("the suite's output: {}", run.log_path.display());
    let log_path = run.log_path.to_path_buf();
    let copy = tokio::task::spawn_blocking(move || -> Result<()> {
        let mut log = std::fs::File::create(&log_path)?;
        let mut progress = conformance::Progress::default();
        for line in std::io::BufReader::new(stdout).lines() {
            let line = line?;
            writeln!(log, "{line}")?;
            if let Some(shown) = progress.line(&line) {
                println!("{shown}");
            }
        }
        Ok(())
    });
    // Ctrl-C or SIGTERM: Ginkgo gets SIGINT (it runs the spec's cleanup and
    // writes its report), then the stack stops as after any run; a second
    // signal kills the suite at once.
    let pid = nix::unistd::Pid::from_raw(child.id() as i32);
    let mut wait = tokio::task::spawn_blocking(move || child.wait());
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let mut interrupts = 0;
    let status = loop {
        tokio::select! {
            status = &mut wait => break status??,
            _ = tokio::signal::ctrl_c() => {}
            _ = term.recv() => {}
        }
        interrupts += 1;
        let signal = if interrupts == 1 {
            eprintln!(
                "kps-conformance: interrupted; the suite cleans up, then the stack stops (again to kill)"
            );
            nix::sys::signal::Signal::SIGINT
        } else {
            nix::sys::signal::Signal::SIGKILL
        };
        let _ = nix::sys::signal::kill(pid, signal);
    };
    copy.await??;
    ensure!(interrupts == 0, "interrupted ({status})");
    Ok(status)
}

/// The suite's specs as a dry run of its binary lists them (every spec, the
/// focus and the skips applied: those left out come back skipped).
fn dry_run(
    binary: &std::path::Path,
    suite_dir: &std::path::Path,
    work: &std::path::Path,
    skips: &[conformance::Skip],
    focus: Option<&str>,
) -> Result<Vec<conformance::SpecResult>> {
    let report = work.join("ginkgo-dry-run.json");
    let mut cmd = Command::new(binary);
    cmd.current_dir(suite_dir)
        .arg("-ginkgo.dry-run")
        .arg("-ginkgo.no-color")
        .arg(format!("-ginkgo.json-report={}", report.display()))
        .stdout(Stdio::null());
    if let Some(re) = conformance::skip_regex(skips) {
        cmd.arg(format!("-ginkgo.skip={re}"));
    }
    if let Some(focus) = focus {
        cmd.arg(format!("-ginkgo.focus={focus}"));
    }
    let status = cmd.status()?;
    ensure!(
        status.success(),
        "dry run of {} failed: {status}",
        binary.display()
    );
    conformance::parse_report(&std::fs::read_to_string(&report)?, skips)
}

/// Shard `text` (`K/N`) of `specs`, split by their recorded durations.
fn shard_of(
    text: &str,
    suite: Suite,
    kind: Kind,
    specs: &[String],
) -> Result<(usize, Vec<String>)> {
    let (k, n) = text
        .split_once('/')
        .and_then(|(k, n)| Some((k.parse::<usize>().ok()?, n.parse::<usize>().ok()?)))
        .filter(|(k, n)| *k >= 1 && k <= n)
        .with_context(|| format!("--shard {text}: expected K/N with 1 <= K <= N"))?;
    let path = stack::repo_root().join("e2e/conformance/durations.json");
    let all: BTreeMap<String, BTreeMap<String, f64>> =
        serde_json::from_str(&std::fs::read_to_string(&path)?)
            .with_context(|| format!("parsing {}", path.display()))?;
    let key = format!("{}/{}", suite.name(), kind.name());
    let durations = all.get(&key).cloned().unwrap_or_default();
    let shards = conformance::shards(specs, &durations, 120.0, n);
    Ok((k, shards[k - 1].clone()))
}

fn record_durations(suite: Suite, kind: Kind, results: &[conformance::SpecResult]) -> Result<()> {
    let path = stack::repo_root().join("e2e/conformance/durations.json");
    let mut all: BTreeMap<String, BTreeMap<String, f64>> =
        serde_json::from_str(&std::fs::read_to_string(&path)?)?;
    let entry = all
        .entry(format!("{}/{}", suite.name(), kind.name()))
        .or_default();
    entry.clear();
    for r in results.iter().filter(|r| !r.skipped()) {
        entry.insert(r.full_text.clone(), (r.seconds * 10.0).round() / 10.0);
    }
    std::fs::write(&path, serde_json::to_string_pretty(&all)? + "\n")?;
    println!("durations recorded in {}", path.display());
    Ok(())
}
