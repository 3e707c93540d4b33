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

/// The scrape configuration: one job for the providers, one for Karpenter
/// core, each target labelled with its namespace and pod (the labels a
/// `kubernetes_sd_configs` relabelling usually keeps).
pub fn config(replicas: &[Replica]) -> Result<String> {
    let mut provider = Vec::new();
    let mut core = Vec::new();
    for r in replicas {
        let labels = serde_json::json!({"namespace": NAMESPACE, "pod": r.pod_name});
        for (list, url, container) in [
            (
                &mut provider,
                r.provider_metrics_url()?,
                &r.provider.container,
            ),
            (&mut core, r.bridge_metrics_url()?, &r.bridge.container),
        ] {
            let target = url
                .strip_prefix("http://")
                .and_then(|u| u.strip_suffix("/metrics"))
                .with_context(|| format!("unexpected metrics URL {url}"))?
                .to_string();
            let mut labels = labels.clone();
            labels["container"] = serde_json::json!(container);
            list.push(serde_json::json!({"targets": [target], "labels": labels}));
        }
    }
    let job = |name: &str, targets: Vec<serde_json::Value>| {
        serde_json::json!({
            "job_name": name,
            "metrics_path": "/metrics",
            "scrape_interval": SCRAPE_INTERVAL,
            "scrape_timeout": SCRAPE_INTERVAL,
            // The provider answers with the OpenMetrics or the classic text
            // format depending on Accept; Prometheus 3 refuses a scrape
            // whose Content-Type it cannot read unless given a fallback.
            "fallback_scrape_protocol": "PrometheusText0.0.4",
            "static_configs": targets,
        })
    };
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
        std::fs::write(&cfg, config(replicas)?)?;
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
