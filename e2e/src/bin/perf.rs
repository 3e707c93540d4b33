#![forbid(unsafe_code)]
//! `just perf [FOCUS] [KIND]`: Karpenter core's own performance suite
//! (`test/suites/performance` of the `sigs.k8s.io/karpenter` module at the
//! bridge's version, compiled as published by `hack/core-suites.sh`), run
//! twice on one local control plane: first against this provider (the chart
//! on the stack's system node, emsim and talos-sim time-scaled), then
//! against core's own KWOK provider (`sigs.k8s.io/karpenter/kwok` with the
//! KWOK simulator, built by `hack/kwok.sh`), as core's CI runs it. Each
//! run's figures come from the suite's own reports; the table puts them side
//! by side with their ratio (docs/figures.md).
//!
//! What the suite needs of a cluster and how the harness provides it:
//! - Karpenter's leader election Lease in `kube-system`, held by a Pod of
//!   that namespace: each Karpenter runs as a Pod on the system node, whose
//!   processes have the Pod's name as host name.
//! - `pods/proxy` to that Pod's port 8080 for `/metrics`: the API server
//!   proxies only to a non-loopback address, so the system node and its
//!   Pods get the host end of a veth pair into a namespace this run creates
//!   (`e2e::netns`), where each Pod port is forwarded to its stand-in.
//! - `pods/portforward` to port 8080 (the suite's pod-metrics reads and its
//!   profiler): the system node's kubelet endpoint is KWOK's server, which
//!   forwards `kube-system` Pods' port 8080 to the same address.
//!
//! Core's thresholds are for KWOK's instant nodes; an Elastic Metal server
//! is ordered, imaged and booted, so the run lifts them
//! (`KARPENTER_PERF_THRESHOLDS`, which core provides for providers) for
//! both runs alike: every phase runs and is measured, and the figures are
//! compared rather than judged by KWOK's limits.

use std::collections::BTreeMap;
use std::io::{BufRead, Write};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use clap::Parser;
use e2e::conformance::{self, Kind};
use e2e::netns::HostAddress;
use e2e::perf::{self, Sampler, Usage};
use e2e::procs::{Proc, free_port};
use e2e::stack::system_node::NodeAddress;
use e2e::stack::{self, Stack, StackOptions};
use e2e::{kubeutil, wait};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams};

#[derive(Parser)]
#[command(
    about = "Core's performance suite against this provider and against core's KWOK provider"
)]
struct Args {
    /// The specs to run (--ginkgo.focus).
    #[arg(long, default_value = "Basic Deployment")]
    focus: String,
    /// This provider's NodeClass kind: metal (Elastic Metal) or instance.
    #[arg(long, default_value = "metal")]
    kind: String,
    /// Where hack/core-suites.sh put the compiled suites.
    #[arg(long, env = "KPS_CORE_SUITES_DIR")]
    suites_dir: PathBuf,
    /// Where hack/kwok.sh put core's KWOK provider and KWOK.
    #[arg(long, env = "KPS_KWOK_DIR")]
    kwok_dir: PathBuf,
    /// Which runs: both, ours or kwok.
    #[arg(long, default_value = "both")]
    runs: String,
    /// Also write the table and both runs' reports here.
    #[arg(long)]
    out: Option<PathBuf>,
    /// Ginkgo's whole-suite timeout, per run.
    #[arg(long, default_value = "3h")]
    timeout: String,
}

/// The image name the system node runs core's KWOK provider for.
const KWOK_IMAGE: &str = "kps-e2e/karpenter-kwok";
/// Its Pod (and so its host name and Lease holder).
const KWOK_POD: &str = "karpenter-kwok";
/// Lifted for both runs (see the module documentation).
const THRESHOLDS: &str = r#"{
 "basic/scaleOut": {"total_time_minutes": 120, "heap_mb": 100000, "cpu_cores": 100, "cpu_util": 0, "memory_util": 0},
 "basic/consolidation": {"total_time_minutes": 120, "heap_mb": 100000, "cpu_cores": 100},
 "doNotDisrupt/scaleOut": {"total_time_minutes": 120, "heap_mb": 100000, "cpu_cores": 100, "cpu_util": 0, "memory_util": 0},
 "doNotDisrupt/consolidation": {"total_time_minutes": 120, "heap_mb": 100000, "cpu_cores": 100, "cpu_util": 0, "memory_util": 0},
 "drift/initial": {"total_time_minutes": 120, "heap_mb": 100000, "cpu_cores": 100},
 "drift/drift": {"total_time_minutes": 120, "heap_mb": 100000, "cpu_cores": 100},
 "hostNameSpreading/scaleOut": {"total_time_minutes": 120, "heap_mb": 100000, "cpu_cores": 100, "cpu_util": 0, "memory_util": 0},
 "hostNameSpreading/consolidation": {"total_time_minutes": 120, "heap_mb": 100000, "cpu_cores": 100, "cpu_util": 0, "memory_util": 0},
 "interference/scaleOut": {"total_time_minutes": 120, "heap_mb": 100000, "cpu_cores": 100, "cpu_util": 0, "memory_util": 0},
 "interference/interference": {"total_time_minutes": 120, "heap_mb": 100000, "cpu_cores": 100, "cpu_util": 0, "memory_util": 0},
 "interference/consolidation": {"total_time_minutes": 120, "heap_mb": 100000, "cpu_cores": 100, "cpu_util": 0, "memory_util": 0},
 "wideDeployments/scaleOut": {"total_time_minutes": 120, "heap_mb": 100000, "cpu_cores": 100, "cpu_util": 0, "memory_util": 0},
 "wideDeployments/consolidation": {"total_time_minutes": 120, "heap_mb": 100000, "cpu_cores": 100, "cpu_util": 0, "memory_util": 0}
}"#;

/// What the run raises the Elastic Metal quotas to (`conformance::QUOTA_RAISED_OFFERS`):
/// the Basic Deployment spec's 1000 pods.
const RAISED_QUOTA: u64 = 400;

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    e2e::install_crypto();
    let _ = tracing_subscriber::fmt().with_env_filter("warn").try_init();
    let kind = Kind::parse(&args.kind)?;
    let (ours, theirs) = match args.runs.as_str() {
        "both" => (true, true),
        "ours" => (true, false),
        "kwok" => (false, true),
        other => bail!("--runs {other:?}: both, ours or kwok"),
    };
    let binary = args.suites_dir.join("performance.test");
    ensure!(
        binary.is_file(),
        "{} missing: run hack/core-suites.sh (just perf does)",
        binary.display()
    );
    let module_dir = read_line(&args.suites_dir.join("module-dir"))?;
    let suite_dir = PathBuf::from(&module_dir).join("test/suites/performance");
    let karpenter_dir = PathBuf::from(read_line(&args.kwok_dir.join("karpenter-dir"))?);
    let kwok_module = PathBuf::from(read_line(&args.kwok_dir.join("kwok-dir"))?);

    let address = HostAddress::create()
        .context("a non-loopback address for the system node (needs root: ip netns, ip link)")?;
    let kubelet_port = free_port()?;
    let mut opts = StackOptions::for_test(&format!("perf-{}", kind.name()))?;
    opts.instances = kind == Kind::Instance;
    opts.system_node = true;
    opts.system_node_address = Some(NodeAddress {
        ip: address.ip,
        pod_ip: address.inside,
        pod_netns: address.netns_path(),
        kubelet_port,
    });
    opts.system_node_images =
        BTreeMap::from([(KWOK_IMAGE.to_string(), args.kwok_dir.join("karpenter-kwok"))]);
    let work = opts.work_dir.clone();
    println!(
        "kps-perf: core's performance suite ({}) against this provider ({} NodeClasses) and core's KWOK provider; logs in {}",
        args.focus,
        kind.name(),
        work.display()
    );
    let stack = Stack::up(opts).await?;
    let result = run(
        &args,
        &stack,
        kind,
        &address,
        kubelet_port,
        (ours, theirs),
        (&binary, &suite_dir, &karpenter_dir, &kwok_module),
    )
    .await;
    stack.stop().await;
    drop(address);
    let failed = result?;
    // hack/test-summary.py counts this line.
    println!(
        "perf: {} passed, {failed} failed",
        (ours as usize + theirs as usize) - failed
    );
    if failed > 0 {
        std::process::exit(1);
    }
    Ok(())
}

fn read_line(path: &Path) -> Result<String> {
    Ok(std::fs::read_to_string(path)
        .with_context(|| format!("reading {}", path.display()))?
        .trim()
        .to_string())
}

/// Both runs; how many failed.
async fn run(
    args: &Args,
    stack: &Stack,
    kind: Kind,
    address: &HostAddress,
    kubelet_port: u16,
    (ours, theirs): (bool, bool),
    (binary, suite_dir, karpenter_dir, kwok_module): (&Path, &Path, &Path, &Path),
) -> Result<usize> {
    let work = &stack.opts.work_dir;
    let logs = work.join("logs");
    if kind == Kind::Metal {
        conformance::raise_quotas(stack, RAISED_QUOTA).await?;
    }
    // KWOK: the system node's kubelet endpoint (port-forwards), and, in the
    // second run, the simulator of core's KWOK provider's nodes.
    let metrics = SocketAddr::from((address.inside, perf::METRICS_POD_PORT));
    let config = work.join("kwok.yaml");
    std::fs::write(
        &config,
        perf::kwok_config(kwok_module, karpenter_dir, metrics)?,
    )?;
    let kwok_bin = args.kwok_dir.join("kwok");
    let _kwok = Proc::spawn(
        "kwok",
        Command::new(&kwok_bin)
            .arg(format!(
                "--kubeconfig={}",
                stack.cp.kubeconfig_path().display()
            ))
            .arg(format!(
                "--manage-nodes-with-annotation-selector={}=fake",
                perf::KWOK_NODE_ANNOTATION
            ))
            .arg("--node-lease-duration-seconds=40")
            .arg(format!("--node-ip={}", address.ip))
            .arg(format!("--node-port={kubelet_port}"))
            .arg(format!("--server-address={}:{kubelet_port}", address.ip))
            .arg(format!("--config={}", config.display())),
        &logs,
    )?;

    let mut failed = 0;
    let mut results: Vec<Measured> = Vec::new();
    if ours {
        let pod = leader_pod(stack).await?;
        let pids = pids_of_pod(&pod)?;
        let nodeclass = work.join("perf-nodeclass.yaml");
        conformance::write_default_nodeclass(stack, kind, &nodeclass)?;
        let nodepool = stack::repo_root().join("e2e/conformance/nodepool.yaml");
        let suite = Suite {
            binary,
            suite_dir,
            args,
            stack,
        };
        let (ok, run) = suite
            .measure(
                "this provider",
                "perf-ours",
                pids,
                Some((&nodeclass, &nodepool)),
            )
            .await?;
        failed += usize::from(!ok);
        results.push(run);
    }
    if theirs {
        // Our Karpenter stops (the Lease released) before the other starts.
        scale_chart_to_zero(stack).await?;
        start_kwok_provider(stack, karpenter_dir).await?;
        let pids = pids_of_pod(KWOK_POD)?;
        let suite = Suite {
            binary,
            suite_dir,
            args,
            stack,
        };
        let (ok, run) = suite
            .measure("core's KWOK provider", "perf-kwok", pids, None)
            .await?;
        failed += usize::from(!ok);
        results.push(run);
    }

    let empty = BTreeMap::new();
    let mine = results.iter().find(|r| r.0 == "this provider");
    let kwok = results.iter().find(|r| r.0 != "this provider");
    let mut md = format!(
        "core's performance suite, focus {:?}, this provider on {} NodeClasses (the chart, emsim and talos-sim time-scaled) and core's KWOK provider on one control plane\n\n",
        args.focus,
        kind.nodeclass_kind()
    );
    md.push_str(&perf::comparison_table(
        mine.map_or(&empty, |r| &r.1),
        kwok.map_or(&empty, |r| &r.1),
    ));
    md.push_str("\nThe whole run, sampled from /proc every 5 s (every container of the Karpenter Pod: for this provider, Karpenter core in the bridge and the provider):\n\n| run | average CPU (cores) | peak RSS (MB) | seconds |\n|---|---|---|---|\n");
    for (name, _, usage) in &results {
        match usage {
            Some(u) => md.push_str(&format!(
                "| {name} | {:.3} | {:.1} | {:.0} |\n",
                u.avg_cpu_cores, u.max_rss_mb, u.seconds
            )),
            None => md.push_str(&format!("| {name} | – | – | – |\n")),
        }
    }
    let path = work.join("perf.md");
    std::fs::write(&path, &md)?;
    if let Some(out) = &args.out {
        std::fs::create_dir_all(out)?;
        std::fs::copy(&path, out.join("perf.md"))?;
        for dir in ["perf-ours", "perf-kwok"] {
            for entry in std::fs::read_dir(work.join(dir))
                .into_iter()
                .flatten()
                .flatten()
            {
                let name = entry.file_name().to_string_lossy().to_string();
                if name.ends_with(".json") {
                    std::fs::copy(entry.path(), out.join(format!("{dir}-{name}")))?;
                }
            }
        }
    }
    println!("\n{md}\ntable: {}", path.display());
    Ok(failed)
}

/// The Pod holding Karpenter's Lease (`<pod>_<uuid>`), once one holds it.
async fn leader_pod(stack: &Stack) -> Result<String> {
    let holder = wait::until(
        "Karpenter's Lease held",
        Duration::from_secs(120),
        Duration::from_millis(500),
        || async { stack.lease_holder().await },
    )
    .await?;
    Ok(holder.split('_').next().unwrap_or_default().to_string())
}

/// The processes running a Pod's containers on the system node: those whose
/// environment names it (`POD_NAME`, set by the chart and by the KWOK
/// provider's Pod).
fn pids_of_pod(pod: &str) -> Result<Vec<u32>> {
    let want = format!("POD_NAME={pod}");
    let mut pids = Vec::new();
    for entry in std::fs::read_dir("/proc")?.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        if environ.split(|b| *b == 0).any(|v| v == want.as_bytes()) {
            pids.push(pid);
        }
    }
    ensure!(!pids.is_empty(), "no process of Pod {pod} found");
    Ok(pids)
}

async fn scale_chart_to_zero(stack: &Stack) -> Result<()> {
    let api: Api<Deployment> = Api::namespaced(stack.client.clone(), "kube-system");
    api.patch(
        stack::system_node::RELEASE,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"replicas": 0}})),
    )
    .await?;
    let pods: Api<Pod> = Api::namespaced(stack.client.clone(), "kube-system");
    wait::until(
        "this provider's Pods gone",
        Duration::from_secs(120),
        Duration::from_millis(500),
        || async {
            let list = pods
                .list(&ListParams::default().labels("app.kubernetes.io/instance=karpenter"))
                .await?;
            Ok(list.items.is_empty().then_some(()))
        },
    )
    .await
}

/// Core's KWOK provider as a Pod on the system node, as core's CI deploys
/// it (its CRDs, a ServiceAccount with the cluster's admin role).
async fn start_kwok_provider(stack: &Stack, karpenter_dir: &Path) -> Result<()> {
    for dir in ["kwok/charts/crds", "kwok/apis/crds"] {
        for entry in std::fs::read_dir(karpenter_dir.join(dir))? {
            let path = entry?.path();
            if path.extension().is_some_and(|e| e == "yaml") && path.is_file() {
                kubeutil::apply_yaml(&stack.client, &std::fs::read_to_string(&path)?).await?;
            }
        }
    }
    let yaml = format!(
        r#"apiVersion: v1
kind: ServiceAccount
metadata: {{name: {KWOK_POD}, namespace: kube-system}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRoleBinding
metadata: {{name: {KWOK_POD}}}
roleRef: {{apiGroup: rbac.authorization.k8s.io, kind: ClusterRole, name: cluster-admin}}
subjects: [{{kind: ServiceAccount, name: {KWOK_POD}, namespace: kube-system}}]
---
apiVersion: v1
kind: Pod
metadata:
  name: {KWOK_POD}
  namespace: kube-system
  labels: {{app.kubernetes.io/instance: karpenter, app.kubernetes.io/name: karpenter}}
spec:
  nodeName: {node}
  serviceAccountName: {KWOK_POD}
  tolerations: [{{operator: Exists}}]
  containers:
    - name: controller
      image: {KWOK_IMAGE}
      env:
        - {{name: POD_NAME, valueFrom: {{fieldRef: {{fieldPath: metadata.name}}}}}}
        - {{name: LEADER_ELECTION_NAMESPACE, value: kube-system}}
        - {{name: METRICS_PORT, value: "8080"}}
        - {{name: HEALTH_PROBE_PORT, value: "8081"}}
        - {{name: ENABLE_PROFILING, value: "true"}}
        - {{name: LOG_LEVEL, value: info}}
      ports:
        - {{name: http-metrics, containerPort: 8080}}
        - {{name: http, containerPort: 8081}}
      startupProbe:
        httpGet: {{path: /healthz, port: http}}
        periodSeconds: 2
        failureThreshold: 60
"#,
        node = stack::system_node::NODE
    );
    kubeutil::apply_yaml(&stack.client, &yaml).await?;
    let pods: Api<Pod> = Api::namespaced(stack.client.clone(), "kube-system");
    wait::until(
        "core's KWOK provider Ready and leading",
        Duration::from_secs(180),
        Duration::from_millis(500),
        || async {
            let ready = pods.get_opt(KWOK_POD).await?.is_some_and(|p| {
                p.status
                    .and_then(|s| s.conditions)
                    .is_some_and(|c| c.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
            });
            let holder = stack.lease_holder().await?;
            Ok(
                (ready && holder.is_some_and(|h| h.starts_with(&format!("{KWOK_POD}_"))))
                    .then_some(()),
            )
        },
    )
    .await
}

/// One run's name, the suite's reports by phase, and what the sampler saw.
type Measured = (String, BTreeMap<String, perf::PerfReport>, Option<Usage>);

/// The suite binary and where it runs.
struct Suite<'a> {
    binary: &'a Path,
    suite_dir: &'a Path,
    args: &'a Args,
    stack: &'a Stack,
}

impl Suite<'_> {
    /// Runs the suite with its reports in `<work>/<dir>` and its output in
    /// `logs/<dir>.log`, sampling `pids` meanwhile; whether it passed.
    async fn measure(
        &self,
        name: &str,
        dir: &str,
        pids: Vec<u32>,
        defaults: Option<(&Path, &Path)>,
    ) -> Result<(bool, Measured)> {
        let work = &self.stack.opts.work_dir;
        let out = work.join(dir);
        let sampler = Sampler::start(pids, Duration::from_secs(5));
        let ok = invoke(
            self.stack,
            self.binary,
            self.suite_dir,
            self.args,
            defaults,
            &out,
            &work.join("logs").join(format!("{dir}.log")),
        )
        .await?;
        Ok((
            ok,
            (name.to_string(), perf::read_reports(&out)?, sampler.usage()),
        ))
    }
}

/// One run of the suite; whether it passed.
async fn invoke(
    stack: &Stack,
    binary: &Path,
    suite_dir: &Path,
    args: &Args,
    defaults: Option<(&Path, &Path)>,
    out: &Path,
    log_path: &Path,
) -> Result<bool> {
    std::fs::create_dir_all(out)?;
    let mut cmd = Command::new(binary);
    cmd.current_dir(suite_dir)
        .arg("-test.v")
        .arg(format!("-test.timeout={}", args.timeout))
        .arg(format!("-ginkgo.timeout={}", args.timeout))
        .arg("-ginkgo.grace-period=10m")
        .arg("-ginkgo.v")
        .arg("-ginkgo.no-color")
        .arg(format!("-ginkgo.focus={}", args.focus))
        .arg(format!(
            "--kubeconfig={}",
            stack.cp.kubeconfig_path().display()
        ))
        .env("OUTPUT_DIR", out)
        .env("KARPENTER_PERF_THRESHOLDS", THRESHOLDS)
        .env_remove("KUBECONFIG")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit());
    if let Some((nodeclass, nodepool)) = defaults {
        cmd.arg(format!("--default-nodeclass={}", nodeclass.display()))
            .arg(format!("--default-nodepool={}", nodepool.display()));
    }
    let mut child = cmd
        .spawn()
        .with_context(|| format!("starting {}", binary.display()))?;
    let stdout = child.stdout.take().context("no stdout")?;
    println!("the suite's output: {}", log_path.display());
    let log_path = log_path.to_path_buf();
    // Blocking reads off the runtime: the system node's kubelet and its
    // port forwarders keep running on it meanwhile.
    tokio::task::spawn_blocking(move || -> Result<bool> {
        let mut log = std::fs::File::create(&log_path)?;
        let mut progress = conformance::Progress::default();
        for line in std::io::BufReader::new(stdout).lines() {
            let line = line?;
            writeln!(log, "{line}")?;
            if let Some(shown) = progress.line(&line) {
                println!("{shown}");
            }
        }
        Ok(child.wait()?.success())
    })
    .await?
}
