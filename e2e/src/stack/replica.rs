//! The replicas of the chart's Deployment: per replica, one provider process
//! and one bridge process (the pod's two containers), sharing a scratch
//! directory for their Unix socket, authenticating as the chart's
//! ServiceAccount.

use std::path::{Path, PathBuf};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use kube::Client;

use super::chart::{self, ContainerProcess, PodContext, Rendered};
use super::{BRIDGE, Binaries, PROVIDER};

/// One pod of the Deployment, run as two processes.
#[derive(Debug, Clone)]
pub struct Replica {
    pub index: usize,
    /// The pod name it runs as (`POD_NAME` of both containers).
    pub pod_name: String,
    /// The containers as the chart defines them (the stack adds
    /// `StackOptions::provider_args` and `bridge_env` at each start).
    pub provider: ContainerProcess,
    pub bridge: ContainerProcess,
    /// Process names (and log file stems) of the two containers.
    pub provider_proc: String,
    pub bridge_proc: String,
}

impl Replica {
    /// The provider's `/metrics` (container port `http-provider`).
    pub fn provider_metrics_url(&self) -> Result<String> {
        url(&self.provider, "http-provider", "/metrics")
    }

    /// Karpenter core's `/metrics` (container port `http-metrics`).
    pub fn bridge_metrics_url(&self) -> Result<String> {
        url(&self.bridge, "http-metrics", "/metrics")
    }

    /// The provider's gRPC socket (its `PROVIDER_SOCKET`).
    pub fn socket(&self) -> PathBuf {
        PathBuf::from(self.provider.env("PROVIDER_SOCKET").unwrap_or_default())
    }
}

fn url(c: &ContainerProcess, port: &str, path: &str) -> Result<String> {
    let p = c
        .ports
        .get(port)
        .with_context(|| format!("container {} has no port named {port}", c.container))?;
    Ok(format!("http://127.0.0.1:{p}{path}"))
}

/// Process names of replica `i`: the first keeps the names the stack has
/// always used, so `proc_mut(PROVIDER)` and the log file names still hold.
pub fn proc_names(i: usize) -> (String, String) {
    if i == 0 {
        (PROVIDER.to_string(), BRIDGE.to_string())
    } else {
        (format!("{PROVIDER}-{i}"), format!("{BRIDGE}-{i}"))
    }
}

/// What the replicas share and what differs per stack.
pub struct ReplicaInputs<'a> {
    pub client: &'a Client,
    pub rendered: &'a Rendered,
    pub bins: &'a Binaries,
    pub scratch: &'a Path,
    pub server_url: &'a str,
    pub ca_pem: &'a str,
}

/// Resolves every replica of the rendered Deployment. Returns them with the
/// ServiceAccount tokens handed out (credentials the logs must not show).
pub async fn resolve(inputs: &ReplicaInputs<'_>) -> Result<(Vec<Replica>, Vec<String>)> {
    let rendered = inputs.rendered;
    let spec = rendered.pod_spec()?;
    let sa = rendered.service_account()?;
    let mut replicas = Vec::new();
    let mut tokens = Vec::new();
    for index in 0..rendered.replicas() {
        let pod_name = format!("{}-e2e-{index}", rendered.name());
        let dir = inputs.scratch.join(format!("r{index}"));
        std::fs::create_dir_all(&dir)?;
        let volume_dirs = chart::empty_dirs(spec, &dir)?;
        let kubeconfig = dir.join("kubeconfig");
        tokens.push(
            chart::service_account_kubeconfig(
                inputs.client,
                &rendered.namespace,
                &sa,
                inputs.server_url,
                inputs.ca_pem,
                &kubeconfig,
            )
            .await?,
        );
        let pod = PodContext {
            client: inputs.client,
            namespace: &rendered.namespace,
            pod_name: &pod_name,
            spec,
            volume_dirs: &volume_dirs,
        };
        let mut provider = None;
        let mut bridge = None;
        // The provider is a native sidecar (an init container that keeps
        // running), Karpenter core the pod's one container.
        let sidecars = spec
            .init_containers
            .iter()
            .flatten()
            .filter(|c| c.restart_policy.as_deref() == Some("Always"));
        ensure!(
            spec.init_containers
                .iter()
                .flatten()
                .all(|c| c.restart_policy.as_deref() == Some("Always")),
            "the chart's pod has an init container that is not a sidecar: the harness cannot run it"
        );
        for c in sidecars.chain(&spec.containers) {
            let program = match c.name.as_str() {
                "provider" => inputs.bins.rust_bin_dir.join("karpenter-scaleway"),
                "controller" => inputs.bins.bridge.clone(),
                other => bail!("the chart's pod has a container {other} the harness cannot run"),
            };
            let mut p = chart::container_process(&pod, c, program).await?;
            // In a pod: KUBERNETES_SERVICE_HOST and the projected token.
            p.set_env("KUBECONFIG", &kubeconfig.display().to_string());
            if c.name == "provider" {
                provider = Some(p);
            } else {
                bridge = Some(p);
            }
        }
        let provider = provider.context("the chart's pod has no provider container")?;
        let bridge = bridge.context("the chart's pod has no controller container")?;
        let socket = provider.env("PROVIDER_SOCKET").unwrap_or_default();
        ensure!(
            !socket.is_empty() && bridge.env("PROVIDER_SOCKET") == Some(socket),
            "the provider and the bridge do not share PROVIDER_SOCKET ({socket:?} / {:?})",
            bridge.env("PROVIDER_SOCKET")
        );
        // sun_path holds 108 bytes.
        ensure!(
            socket.len() < 100,
            "socket path {socket} is too long for a Unix socket (set TMPDIR to a shorter directory)"
        );
        let (provider_proc, bridge_proc) = proc_names(index);
        replicas.push(Replica {
            index,
            pod_name,
            provider,
            bridge,
            provider_proc,
            bridge_proc,
        });
    }
    Ok((replicas, tokens))
}

/// A directory under the system temp dir (short enough for Unix socket
/// paths, unlike the work dir), removed when dropped.
#[derive(Debug)]
pub struct ScratchDir(PathBuf);

impl ScratchDir {
    pub fn new() -> Result<ScratchDir> {
        let dir = std::env::temp_dir().join(format!(
            "kps-e2e-{}-{:08x}",
            std::process::id(),
            rand::random::<u32>()
        ));
        std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
        Ok(ScratchDir(dir))
    }

    pub fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// GET `url` (metrics, probes) with a short deadline.
pub async fn http_get(url: &str) -> Result<(u16, String)> {
    crate::install_crypto();
    let client = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()?;
    let resp = client.get(url).send().await?;
    let status = resp.status().as_u16();
    Ok((status, resp.text().await?))
}

/// The value of an unlabelled gauge or counter in Prometheus text.
pub fn metric_value(text: &str, name: &str) -> Option<f64> {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metric_value_reads_only_the_named_series() {
        let text = "# HELP karpenter_scaleway_leader x\n# TYPE karpenter_scaleway_leader gauge\nkarpenter_scaleway_leader 1\nkarpenter_scaleway_leader_changes 7\n";
        assert_eq!(metric_value(text, "karpenter_scaleway_leader"), Some(1.0));
        assert_eq!(metric_value(text, "karpenter_scaleway_lead"), None);
        assert_eq!(metric_value("", "karpenter_scaleway_leader"), None);
    }
}
