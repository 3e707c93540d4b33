//! An optional Prometheus server beside the stack, scraping every replica's
//! provider (`/metrics` of the `http-provider` port) and Karpenter core
//! (the bridge's `http-metrics` port) every 2 s, as a cluster's Prometheus
//! scrapes the pod. Started only when `KPS_PROMETHEUS_BIN` names a
//! Prometheus server binary (`hack/prometheus.sh` builds one); CI does not
//! set it. Used to take the docs' picture of the dashboard
//! (`just dashboard-picture`).
//!
//! Everything lives in `<work dir>/prometheus/`: the generated
//! `prometheus.yml`, the TSDB (`data/`), and `run.json`, which records the
//! run's time range (`start`, and `end` once the stack stopped) so that a
//! second Prometheus opened on `data/` afterwards (as
//! `hack/dashboard-render.py` does) can answer the dashboard's queries for
//! exactly that range.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{Context, Result, bail};

use super::{NAMESPACE, Replica};
use crate::procs::{Proc, free_port};
use crate::wait;

/// The env var naming the Prometheus server binary.
pub const BIN_ENV: &str = "KPS_PROMETHEUS_BIN";
/// Scrape interval of both jobs (the dashboard's `$__rate_interval` is
/// four of them, as Grafana computes it).
pub const SCRAPE_INTERVAL: &str = "2s";
/// Job names, as a ServiceMonitor of the chart would give them.
pub const PROVIDER_JOB: &str = "karpenter-scaleway";
pub const CORE_JOB: &str = "karpenter";

pub struct Prometheus {
    proc: Proc,
    pub url: String,
    pub dir: PathBuf,
    start: f64,
}

fn now() -> f64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| d.as_secs_f64())
        .unwrap_or_default()
}

/// One pod's two metrics endpoints, as `host:port`.
#[derive(Debug, Clone)]
pub struct PodTargets {
    pub pod: String,
    pub provider: (String, String),
    pub core: (String, String),
}

impl PodTargets {
    fn of(r: &Replica) -> Result<PodTargets> {
        let host_port = |url: String| -> Result<String> {
            url.strip_prefix("http://")
                .and_then(|u| u.strip_suffix("/metrics"))
                .map(str::to_string)
                .with_context(|| format!("unexpected metrics URL {url}"))
        };
        Ok(PodTargets {
            pod: r.pod_name.clone(),
            provider: (
                r.provider.container.clone(),
                host_port(r.provider_metrics_url()?)?,
            ),
            core: (
                r.bridge.container.clone(),
                host_port(r.bridge_metrics_url()?)?,
            ),
        })
    }
}

/// The scrape configuration: one job for the providers, one for Karpenter
/// core, each target labelled with its namespace, pod and container (the
/// labels a `kubernetes_sd_configs` relabelling usually keeps).
pub fn config(pods: &[PodTargets]) -> Result<String> {
    let static_config = |pod: &str, (container, target): &(String, String)| {
        serde_json::json!({
            "targets": [target],
            "labels": {"namespace": NAMESPACE, "pod": pod, "container": container},
        })
    };
    let job = |name: &str, targets: Vec<serde_json::Value>| {
        serde_json::json!({
            "job_name": name,
            "metrics_path": "/metrics",
            "scrape_interval": SCRAPE_INTERVAL,
            "scrape_timeout": SCRAPE_INTERVAL,
            // Prometheus 3 refuses a scrape whose Content-Type it cannot
            // read unless given a fallback; the classic text format is what
            // both endpoints write at the least.
            "fallback_scrape_protocol": "PrometheusText0.0.4",
            "static_configs": targets,
        })
    };
    let provider = pods
        .iter()
        .map(|p| static_config(&p.pod, &p.provider))
        .collect();
    let core = pods
        .iter()
        .map(|p| static_config(&p.pod, &p.core))
        .collect();
    let cfg = serde_json::json!({
        "global": {"scrape_interval": SCRAPE_INTERVAL, "evaluation_interval": "15s"},
        "scrape_configs": [job(PROVIDER_JOB, provider), job(CORE_JOB, core)],
    });
    Ok(serde_yaml_ng::to_string(&cfg)?)
}

impl Prometheus {
    /// Starts Prometheus if `KPS_PROMETHEUS_BIN` is set (None otherwise) and
    /// waits until it is ready and has scraped every target once.
    pub async fn start_if_asked(
        work_dir: &Path,
        logs: &Path,
        replicas: &[Replica],
    ) -> Result<Option<Prometheus>> {
        let Some(bin) = std::env::var_os(BIN_ENV).filter(|v| !v.is_empty()) else {
            return Ok(None);
        };
        let dir = work_dir.join("prometheus");
        std::fs::create_dir_all(dir.join("data"))?;
        let cfg = dir.join("prometheus.yml");
        let pods = replicas
            .iter()
            .map(PodTargets::of)
            .collect::<Result<Vec<_>>>()?;
        std::fs::write(&cfg, config(&pods)?)?;
        let port = free_port()?;
        let url = format!("http://127.0.0.1:{port}");
        let proc = Proc::spawn(
            "prometheus",
            Command::new(&bin)
                .arg(format!("--config.file={}", cfg.display()))
                .arg(format!(
                    "--storage.tsdb.path={}",
                    dir.join("data").display()
                ))
                .arg(format!("--web.listen-address=127.0.0.1:{port}"))
                // Its own series are of no use to the picture.
                .arg("--log.level=warn"),
            logs,
        )
        .with_context(|| format!("starting {BIN_ENV}={}", Path::new(&bin).display()))?;
        let start = now();
        let p = Prometheus {
            proc,
            url,
            dir,
            start,
        };
        p.write_run(None)?;
        let targets = 2 * replicas.len();
        let api = format!("{}/api/v1/targets?state=active", p.url);
        wait::until(
            &format!("Prometheus to scrape its {targets} targets"),
            Duration::from_secs(60),
            Duration::from_millis(500),
            || async {
                let Ok((200, body)) = super::http_get(&api).await else {
                    return Ok(None);
                };
                let v: serde_json::Value = serde_json::from_str(&body)?;
                let active = v["data"]["activeTargets"].as_array().cloned();
                let up = active
                    .iter()
                    .flatten()
                    .filter(|t| t["health"] == "up")
                    .count();
                Ok((up == targets).then_some(()))
            },
        )
        .await
        .with_context(|| format!("see {}", p.proc.log_path().display()))?;
        tracing::info!(url = %p.url, dir = %p.dir.display(), "prometheus scraping the stack");
        Ok(Some(p))
    }

    fn write_run(&self, end: Option<f64>) -> Result<()> {
        let run = serde_json::json!({
            "start": self.start,
            "end": end,
            "scrape_interval": SCRAPE_INTERVAL,
            "data": "data",
            "jobs": {"provider": PROVIDER_JOB, "core": CORE_JOB},
        });
        std::fs::write(
            self.dir.join("run.json"),
            serde_json::to_string_pretty(&run)?,
        )?;
        Ok(())
    }

    /// Stops Prometheus (SIGTERM: it closes the TSDB cleanly, the head kept
    /// in its WAL) and records the end of the run.
    pub fn stop(&mut self) {
        let end = now();
        self.proc.stop(Duration::from_secs(20));
        if let Err(e) = self.write_run(Some(end)) {
            tracing::warn!(error = %e, "writing prometheus/run.json");
        }
    }
}

/// Fails early with a clear message when the variable names no executable.
pub fn check_bin() -> Result<()> {
    if let Some(bin) = std::env::var_os(BIN_ENV).filter(|v| !v.is_empty()) {
        let path = Path::new(&bin);
        if !path.is_file() {
            bail!(
                "{BIN_ENV}={} is not a file: run hack/prometheus.sh",
                path.display()
            );
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn config_scrapes_every_pod_of_both_jobs_every_2s() {
        let pod = |i: u16| PodTargets {
            pod: format!("kps-{i}"),
            provider: ("provider".into(), format!("127.0.0.1:{}", 8000 + i)),
            core: ("controller".into(), format!("127.0.0.1:{}", 9000 + i)),
        };
        let text = config(&[pod(0), pod(1)]).unwrap();
        let v: serde_json::Value = serde_yaml_ng::from_str(&text).unwrap();
        assert_eq!(v["global"]["scrape_interval"], "2s");
        let jobs = v["scrape_configs"].as_array().unwrap();
        assert_eq!(jobs.len(), 2);
        for (job, name, port, container) in [
            (&jobs[0], PROVIDER_JOB, 8000, "provider"),
            (&jobs[1], CORE_JOB, 9000, "controller"),
        ] {
            assert_eq!(job["job_name"], name);
            assert_eq!(job["metrics_path"], "/metrics");
            let targets = job["static_configs"].as_array().unwrap();
            assert_eq!(targets.len(), 2);
            for (i, t) in targets.iter().enumerate() {
                assert_eq!(t["targets"][0], format!("127.0.0.1:{}", port + i));
                assert_eq!(t["labels"]["pod"], format!("kps-{i}"));
                assert_eq!(t["labels"]["namespace"], NAMESPACE);
                assert_eq!(t["labels"]["container"], container);
            }
        }
    }
}
