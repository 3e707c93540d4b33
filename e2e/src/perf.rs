//! The pieces of `kps-perf` (core's performance suite against this provider
//! and against core's own KWOK provider, on one control plane) that do not
//! need a cluster: KWOK's configuration, the forwarder to the measured
//! Karpenter's metrics port, the sampler of the measured processes, and the
//! comparison of the suite's reports.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use serde::Deserialize;

/// The annotation KWOK manages Nodes by (core's KWOK provider puts it on its
/// Nodes; the system node carries it too).
pub const KWOK_NODE_ANNOTATION: &str = "kwok.x-k8s.io/node";
/// The Pod port the suite reads Karpenter's `/metrics` on (proxy and
/// port-forward), fixed by the suite.
pub const METRICS_POD_PORT: u16 = 8080;

/// The stage files of KWOK's "fast" set, then core's own (core's CI applies
/// them in that order, and the later ones replace the same-named earlier
/// ones: its node heartbeat and pod deletion), relative to each module.
pub const KWOK_STAGES: [&str; 3] = [
    "kustomize/stage/node/fast/node-initialize.yaml",
    "kustomize/stage/pod/fast/pod-ready.yaml",
    "kustomize/stage/pod/fast/pod-complete.yaml",
];
pub const CORE_STAGES: [&str; 4] = [
    "hack/kwok/stages/node-heartbeat-with-lease.yaml",
    "hack/kwok/stages/pod-delete.yaml",
    "hack/kwok/stages/node-unhealthy.yaml",
    "hack/kwok/stages/pod-unhealthy.yaml",
];

/// KWOK's `--config` documents: the stages core's CI runs KWOK with, read
/// from the two modules as published, and a ClusterPortForward that sends
/// port-forwards to any `kube-system` Pod's port 8080 to `target`.
pub fn kwok_config(kwok_dir: &Path, karpenter_dir: &Path, target: SocketAddr) -> Result<String> {
    let mut docs = Vec::new();
    for (dir, files) in [
        (kwok_dir, &KWOK_STAGES[..]),
        (karpenter_dir, &CORE_STAGES[..]),
    ] {
        for f in files {
            let path = dir.join(f);
            let text = std::fs::read_to_string(&path)
                .with_context(|| format!("reading {}", path.display()))?;
            ensure!(
                text.contains("kind: Stage"),
                "{} is not a KWOK Stage",
                path.display()
            );
            docs.push(text.trim().trim_start_matches("---").trim().to_string());
        }
    }
    docs.push(format!(
        "apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterPortForward
metadata:
  name: karpenter-metrics
spec:
  selector:
    matchNamespaces: [kube-system]
  forwards:
    - ports: [{METRICS_POD_PORT}]
      target:
        address: \"{}\"
        port: {}",
        target.ip(),
        target.port()
    ));
    Ok(docs.join("\n---\n") + "\n")
}

/// Forwards every connection to `listen` to the current target (switched
/// between the two runs), until dropped.
pub struct Forwarder {
    /// The address it listens on (the port chosen when 0 was asked).
    pub listen: SocketAddr,
    pub target: Arc<Mutex<SocketAddr>>,
    task: tokio::task::JoinHandle<()>,
}

impl Forwarder {
    pub async fn start(listen: SocketAddr, target: SocketAddr) -> Result<Self> {
        Self::start_in(None, listen, target).await
    }

    /// The listener bound in network namespace `netns` (`/run/netns/<name>`)
    /// when given: a socket stays in the namespace it was made in, whichever
    /// thread accepts on it; the connections to `target` are the host's.
    pub async fn start_in(
        netns: Option<&Path>,
        listen: SocketAddr,
        target: SocketAddr,
    ) -> Result<Self> {
        let netns = netns.map(Path::to_path_buf);
        // A thread of its own enters the namespace, so that no thread of
        // the runtime changes namespace.
        let std_listener = std::thread::spawn(move || -> Result<std::net::TcpListener> {
            if let Some(path) = &netns {
                let ns = std::fs::File::open(path)
                    .with_context(|| format!("opening {}", path.display()))?;
                nix::sched::setns(&ns, nix::sched::CloneFlags::CLONE_NEWNET)
                    .with_context(|| format!("entering {}", path.display()))?;
            }
            let l =
                std::net::TcpListener::bind(listen).with_context(|| format!("binding {listen}"))?;
            l.set_nonblocking(true)?;
            Ok(l)
        })
        .join()
        .map_err(|_| anyhow::anyhow!("the thread binding {listen} panicked"))??;
        let listener = tokio::net::TcpListener::from_std(std_listener)?;
        let listen = listener.local_addr()?;
        let target = Arc::new(Mutex::new(target));
        let to = target.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                let dest = *to.lock().unwrap_or_else(|e| e.into_inner());
                tokio::spawn(async move {
                    if let Ok(mut outbound) = tokio::net::TcpStream::connect(dest).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        });
        Ok(Forwarder {
            listen,
            target,
            task,
        })
    }

    pub fn retarget(&self, target: SocketAddr) {
        *self.target.lock().unwrap_or_else(|e| e.into_inner()) = target;
    }
}

impl Drop for Forwarder {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// CPU seconds (user + system) and resident bytes of a process, from
/// `/proc/<pid>/stat` (fields 14, 15, in clock ticks; 24, in pages).
pub fn parse_proc_stat(stat: &str, ticks_per_second: f64, page_bytes: u64) -> Result<(f64, u64)> {
    // The command name (field 2) may hold spaces: fields count after its ')'.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .context("no ')' in /proc/<pid>/stat")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state).
    let field = |n: usize| -> Result<u64> {
        fields
            .get(n - 3)
            .with_context(|| format!("/proc/<pid>/stat has no field {n}"))?
            .parse::<u64>()
            .with_context(|| format!("field {n} of /proc/<pid>/stat"))
    };
    let cpu = (field(14)? + field(15)?) as f64 / ticks_per_second;
    Ok((cpu, field(24)? * page_bytes))
}

/// Samples a set of processes every few seconds: their summed CPU time and
/// resident memory (a process that exits stops counting).
pub struct Sampler {
    samples: Arc<Mutex<Vec<(Instant, f64, u64)>>>,
    task: tokio::task::JoinHandle<()>,
}

/// What a [`Sampler`] saw.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Usage {
    pub avg_cpu_cores: f64,
    pub max_rss_mb: f64,
    pub seconds: f64,
}

impl Sampler {
    pub fn start(pids: Vec<u32>, every: Duration) -> Self {
        let samples = Arc::new(Mutex::new(Vec::new()));
        let into = samples.clone();
        let ticks = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
            .ok()
            .flatten()
            .unwrap_or(100) as f64;
        let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
            .ok()
            .flatten()
            .unwrap_or(4096) as u64;
        let task = tokio::spawn(async move {
            loop {
                let (mut cpu, mut rss) = (0.0, 0);
                for pid in &pids {
                    if let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat"))
                        && let Ok((c, r)) = parse_proc_stat(&stat, ticks, page)
                    {
                        cpu += c;
                        rss += r;
                    }
                }
                into.lock()
                    .unwrap_or_else(|e| e.into_inner())
                    .push((Instant::now(), cpu, rss));
                tokio::time::sleep(every).await;
            }
        });
        Sampler { samples, task }
    }

    pub fn usage(&self) -> Option<Usage> {
        let s = self.samples.lock().unwrap_or_else(|e| e.into_inner());
        let (first, last) = (s.first()?, s.last()?);
        let seconds = last.0.duration_since(first.0).as_secs_f64();
        (seconds > 0.0).then(|| Usage {
            avg_cpu_cores: (last.1 - first.1) / seconds,
            max_rss_mb: s.iter().map(|x| x.2).max().unwrap_or(0) as f64 / 1048576.0,
            seconds,
        })
    }
}

impl Drop for Sampler {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The fields of core's `PerformanceReport` (test/suites/performance/types.go)
/// the comparison shows.
#[derive(Debug, Clone, Deserialize, PartialEq)]
pub struct PerfReport {
    pub test_name: String,
    pub test_type: String,
    pub total_pods: i64,
    pub total_nodes: i64,
    /// A Go `time.Duration`: nanoseconds.
    pub total_time: i64,
    pub total_reserved_cpu_utilization: f64,
    pub total_reserved_memory_utilization: f64,
    pub karpenter_p95_heap_mb: f64,
    pub karpenter_p95_memory_mb: f64,
    pub karpenter_avg_cpu_cores: f64,
    pub metrics_sample_count: i64,
}

/// Every `<prefix>_performance_report.json` in `dir`, by prefix.
pub fn read_reports(dir: &Path) -> Result<BTreeMap<String, PerfReport>> {
    let mut out = BTreeMap::new();
    if !dir.is_dir() {
        return Ok(out);
    }
    for entry in std::fs::read_dir(dir)? {
        let path: PathBuf = entry?.path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default()
            .to_string();
        if let Some(prefix) = name.strip_suffix("_performance_report.json") {
            let text = std::fs::read_to_string(&path)?;
            let report: PerfReport = serde_json::from_str(&text)
                .with_context(|| format!("parsing {}", path.display()))?;
            out.insert(prefix.to_string(), report);
        }
    }
    Ok(out)
}

fn ratio(ours: f64, theirs: f64) -> String {
    if theirs > 0.0 {
        format!("{:.2}×", ours / theirs)
    } else {
        "–".to_string()
    }
}

/// One row per phase and figure: ours, core's KWOK provider's, the ratio.
pub fn comparison_table(
    ours: &BTreeMap<String, PerfReport>,
    kwok: &BTreeMap<String, PerfReport>,
) -> String {
    let mut md = String::from(
        "| phase | figure | this provider | core's KWOK provider | ratio |\n|---|---|---|---|---|\n",
    );
    let phases: std::collections::BTreeSet<&String> = ours.keys().chain(kwok.keys()).collect();
    for phase in phases {
        let (a, b) = (ours.get(phase), kwok.get(phase));
        type Figure = (&'static str, fn(&PerfReport) -> f64, u8);
        let figures: [Figure; 8] = [
            ("total time (s)", |r| r.total_time as f64 / 1e9, 1),
            ("nodes", |r| r.total_nodes as f64, 0),
            ("pods", |r| r.total_pods as f64, 0),
            (
                "reserved CPU utilization",
                |r| r.total_reserved_cpu_utilization,
                3,
            ),
            (
                "reserved memory utilization",
                |r| r.total_reserved_memory_utilization,
                3,
            ),
            (
                "Karpenter p95 live heap (MB)",
                |r| r.karpenter_p95_heap_mb,
                1,
            ),
            ("Karpenter p95 RSS (MB)", |r| r.karpenter_p95_memory_mb, 1),
            (
                "Karpenter average CPU (cores)",
                |r| r.karpenter_avg_cpu_cores,
                3,
            ),
        ];
        for (name, get, digits) in figures {
            let show = |r: Option<&PerfReport>| {
                r.map_or("–".to_string(), |r| {
                    format!("{:.*}", digits as usize, get(r))
                })
            };
            let ratio = match (a, b) {
                (Some(a), Some(b)) => ratio(get(a), get(b)),
                _ => "–".to_string(),
            };
            md.push_str(&format!(
                "| {phase} | {name} | {} | {} | {ratio} |\n",
                show(a),
                show(b)
            ));
        }
    }
    md
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn proc_stat_fields_count_after_the_command_name() {
        // A command name with spaces and parentheses, as the kernel writes it.
        let stat = "4242 (karpenter (x) y) S 1 4242 4242 0 -1 4194560 100 0 0 0 \
                    250 50 0 0 20 0 12 0 1000 123456789 3000 18446744073709551615";
        let (cpu, rss) = parse_proc_stat(stat, 100.0, 4096).unwrap();
        assert_eq!(cpu, 3.0);
        assert_eq!(rss, 3000 * 4096);
        assert!(parse_proc_stat("4242 (x) S 1", 100.0, 4096).is_err());
    }

    fn report(time_s: i64, heap: f64) -> PerfReport {
        PerfReport {
            test_name: "Scale Out Test".into(),
            test_type: "scale-out".into(),
            total_pods: 1000,
            total_nodes: 100,
            total_time: time_s * 1_000_000_000,
            total_reserved_cpu_utilization: 0.6,
            total_reserved_memory_utilization: 0.7,
            karpenter_p95_heap_mb: heap,
            karpenter_p95_memory_mb: 200.0,
            karpenter_avg_cpu_cores: 0.4,
            metrics_sample_count: 10,
        }
    }

    #[test]
    fn the_table_shows_both_figures_and_their_ratio_and_a_dash_for_a_missing_side() {
        let ours = BTreeMap::from([("scale_out".to_string(), report(90, 150.0))]);
        let kwok = BTreeMap::from([
            ("scale_out".to_string(), report(60, 100.0)),
            ("consolidation".to_string(), report(300, 80.0)),
        ]);
        let md = comparison_table(&ours, &kwok);
        assert!(
            md.contains("| scale_out | total time (s) | 90.0 | 60.0 | 1.50× |"),
            "{md}"
        );
        assert!(
            md.contains("| scale_out | Karpenter p95 live heap (MB) | 150.0 | 100.0 | 1.50× |"),
            "{md}"
        );
        assert!(
            md.contains("| consolidation | nodes | – | 100 | – |"),
            "{md}"
        );
    }

    #[test]
    fn reports_are_read_by_prefix_and_a_go_duration_is_nanoseconds() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(
            dir.path().join("scale_out_performance_report.json"),
            r#"{"test_name": "Scale Out Test", "test_type": "scale-out", "total_pods": 1000,
               "total_nodes": 87, "total_time": 95000000000, "change_in_pod_count": 1000,
               "total_reserved_cpu_utilization": 0.61, "total_reserved_memory_utilization": 0.72,
               "karpenter_p95_heap_mb": 101.5, "karpenter_p95_memory_mb": 180.0,
               "karpenter_avg_cpu_cores": 0.31, "metrics_sample_count": 19,
               "timestamp": "2026-11-28T04:00:00Z"}"#,
        )
        .unwrap();
        std::fs::write(
            dir.path().join("karpenter_cpu_profile_scale_out.pb.gz"),
            b"x",
        )
        .unwrap();
        let reports = read_reports(dir.path()).unwrap();
        assert_eq!(reports.len(), 1);
        assert_eq!(reports["scale_out"].total_nodes, 87);
        assert_eq!(reports["scale_out"].total_time, 95_000_000_000);
    }

    #[test]
    fn kwok_config_reads_the_stages_and_forwards_to_the_target() {
        let kwok = tempfile::tempdir().unwrap();
        let core = tempfile::tempdir().unwrap();
        for (dir, files) in [
            (kwok.path(), &KWOK_STAGES[..]),
            (core.path(), &CORE_STAGES[..]),
        ] {
            for f in files {
                let p = dir.join(f);
                std::fs::create_dir_all(p.parent().unwrap()).unwrap();
                std::fs::write(&p, format!("---\napiVersion: kwok.x-k8s.io/v1alpha1\nkind: Stage\nmetadata:\n  name: {f}\n")).unwrap();
            }
        }
        let target: SocketAddr = "198.18.3.1:8080".parse().unwrap();
        let config = kwok_config(kwok.path(), core.path(), target).unwrap();
        assert_eq!(config.matches("kind: Stage").count(), 7);
        assert!(config.contains("kind: ClusterPortForward"));
        assert!(config.contains("address: \"198.18.3.1\""));
        for doc in config.split("\n---\n") {
            let _: serde_yaml_ng::Value = serde_yaml_ng::from_str(doc).unwrap();
        }
        std::fs::write(core.path().join(CORE_STAGES[0]), "kind: Secret\n").unwrap();
        assert!(kwok_config(kwok.path(), core.path(), target).is_err());
    }
}
