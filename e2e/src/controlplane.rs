//! A Kubernetes control plane for the e2e harness, in one of two modes:
//!
//! * **local**: etcd, kube-apiserver, kube-controller-manager and
//!   kube-scheduler built by `e2e/kube/build.sh`, started on loopback with a
//!   fresh CA, each in its own process group and stopped on drop;
//! * **existing**: a kubeconfig of a cluster someone else runs (kind with the
//!   repository's `kind-config.yaml`, for instance), only read.
//!
//! Both expose the same accessors, so the rest of the harness does not care.
//!
//! Either way the cluster gets the RBAC a Talos control plane installs for
//! joining workers (`node_bootstrap_bindings`): bootstrap-token users may
//! create node CSRs that the controller manager approves, and nodes may
//! renew their certificates. A local control plane gets them when it starts;
//! an existing one (kind) when the harness attaches to it, the same way,
//! since kubeadm binds these roles only to its own token group.

mod components;
mod kubeconfig;
mod pki;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::ServiceAccount;
use k8s_openapi::api::rbac::v1::{ClusterRoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::Api;
use kube::api::{Patch, PatchParams};
use kube::config::{KubeConfigOptions, Kubeconfig};

pub use components::{CLUSTER_NAME, Ports, SERVICE_CLUSTER_IP_RANGE};
pub use pki::CertAndKey;

use crate::procs::Proc;
use components::Layout;
use pki::Pki;

const BINARIES: [&str; 4] = [
    "etcd",
    "kube-apiserver",
    "kube-controller-manager",
    "kube-scheduler",
];

/// How to start a local control plane.
#[derive(Debug, Clone)]
pub struct ControlPlaneOptions {
    /// Holds the binaries `e2e/kube/build.sh` prints.
    pub bin_dir: PathBuf,
    /// Certificates, kubeconfigs, etcd data and one log per component.
    /// Reused between runs: the etcd data of a previous run is discarded.
    pub work_dir: PathBuf,
    /// How long the whole start may take before it is an error.
    pub start_timeout: Duration,
    /// How long each component gets to exit after SIGTERM before SIGKILL.
    pub stop_grace: Duration,
    /// A KubeSchedulerConfiguration (YAML) for kube-scheduler, e.g. the one
    /// Karpenter core's kind cluster gives it (a second profile with default
    /// topology spread constraints); its connection and leader election are
    /// replaced by the control plane's. Written to [`SCHEDULER_CONFIG_DIR`]
    /// under the work dir. `None`: flags only.
    pub scheduler_config: Option<String>,
}

/// Where a [`ControlPlaneOptions::scheduler_config`] is written, under the
/// control plane's work dir (the file is `kube-scheduler-config.yaml`).
pub const SCHEDULER_CONFIG_DIR: &str = "karpenter-scheduler-config";

impl ControlPlaneOptions {
    pub fn new(bin_dir: impl Into<PathBuf>, work_dir: impl Into<PathBuf>) -> ControlPlaneOptions {
        ControlPlaneOptions {
            bin_dir: bin_dir.into(),
            work_dir: work_dir.into(),
            // A loaded 2-core machine takes well under a minute; the margin
            // is for CI running other builds at the same time.
            start_timeout: Duration::from_secs(180),
            stop_grace: Duration::from_secs(10),
            scheduler_config: None,
        }
    }
}

/// The ClusterRoleBindings a Talos control plane creates for worker joins
/// (name, ClusterRole, Group), as contracts with the provider expect: any
/// bootstrap token may request a node client certificate, which the
/// controller manager's csrapproving controller then approves (it checks
/// the requester may `create` `certificatesigningrequests/nodeclient`);
/// nodes may renew their own.
pub fn node_bootstrap_bindings() -> Vec<ClusterRoleBinding> {
    [
        (
            "system-bootstrap-node-bootstrapper",
            "system:node-bootstrapper",
            "system:bootstrappers",
        ),
        (
            "system-bootstrap-approve-node-client-csr",
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
            "system:bootstrappers",
        ),
        (
            "system-bootstrap-node-renewal",
            "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
            "system:nodes",
        ),
    ]
    .into_iter()
    .map(|(name, role, group)| ClusterRoleBinding {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..Default::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".into(),
            kind: "ClusterRole".into(),
            name: role.into(),
        },
        subjects: Some(vec![Subject {
            api_group: Some("rbac.authorization.k8s.io".into()),
            kind: "Group".into(),
            name: group.into(),
            namespace: None,
        }]),
    })
    .collect()
}

/// Applies `node_bootstrap_bindings` (idempotent, server-side apply).
pub async fn apply_node_bootstrap_bindings(client: &kube::Client) -> Result<()> {
    let api: Api<ClusterRoleBinding> = Api::all(client.clone());
    for binding in node_bootstrap_bindings() {
        let name = binding.metadata.name.clone().unwrap_or_default();
        // Server-side apply needs the type in the body.
        let mut value = serde_json::to_value(&binding)?;
        value["apiVersion"] = "rbac.authorization.k8s.io/v1".into();
        value["kind"] = "ClusterRoleBinding".into();
        api.patch(
            &name,
            &PatchParams::apply("kps-e2e").force(),
            &Patch::Apply(&value),
        )
        .await
        .with_context(|| format!("applying ClusterRoleBinding {name}"))?;
    }
    Ok(())
}

/// Processes and files of a control plane this harness started.
struct Local {
    work_dir: PathBuf,
    ports: Ports,
    /// In start order; stopped in reverse.
    procs: Vec<Proc>,
    stop_grace: Duration,
}

pub struct ControlPlane {
    kubeconfig_path: PathBuf,
    server_url: String,
    ca_pem: String,
    admin: Option<CertAndKey>,
    local: Option<Local>,
}

impl std::fmt::Debug for ControlPlane {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ControlPlane")
            .field("kubeconfig_path", &self.kubeconfig_path)
            .field("server_url", &self.server_url)
            .field("ports", &self.ports())
            .finish_non_exhaustive()
    }
}

impl ControlPlane {
    /// Starts a local control plane and returns once it serves requests, the
    /// controller manager and the scheduler are healthy, and the `default`
    /// ServiceAccount exists (so pods can be created in `default`).
    pub async fn start(opts: ControlPlaneOptions) -> Result<ControlPlane> {
        crate::install_crypto();
        let started = Instant::now();
        for bin in BINARIES {
            let path = opts.bin_dir.join(bin);
            if !path.is_file() {
                bail!("{} is missing: run e2e/kube/build.sh", path.display());
            }
        }
        std::fs::create_dir_all(&opts.work_dir)
            .with_context(|| format!("creating work dir {}", opts.work_dir.display()))?;
        let layout = Layout::new(&opts.work_dir);
        let ports = free_ports()?;
        let pki = Pki::generate(components::KUBERNETES_SERVICE_IP)?;
        write_files(&layout, &pki, &ports)?;

        let mut cp = ControlPlane {
            kubeconfig_path: layout.admin_kubeconfig.clone(),
            server_url: components::server_url(&ports),
            ca_pem: pki.ca.cert_pem.clone(),
            admin: Some(pki.admin.clone()),
            local: Some(Local {
                work_dir: opts.work_dir.clone(),
                ports,
                procs: Vec::new(),
                stop_grace: opts.stop_grace,
            }),
        };
        // From here on, an error drops `cp`, which stops whatever was started.
        let deadline = started + opts.start_timeout;
        let probe = Probe::new(&pki)?;

        cp.spawn(
            &opts.bin_dir,
            "etcd",
            components::etcd_args(&layout, &ports),
        )?;
        cp.wait_for("etcd health", deadline, || {
            probe.ok(format!("http://127.0.0.1:{}/health", ports.etcd_client))
        })
        .await?;

        cp.spawn(
            &opts.bin_dir,
            "kube-apiserver",
            components::apiserver_args(&layout, &ports),
        )?;
        cp.wait_for("kube-apiserver /readyz", deadline, || {
            probe.ok(format!("https://127.0.0.1:{}/readyz", ports.apiserver))
        })
        .await?;

        cp.spawn(
            &opts.bin_dir,
            "kube-controller-manager",
            components::controller_manager_args(&layout, &ports),
        )?;
        let scheduler_args = match &opts.scheduler_config {
            Some(given) => {
                let dir = opts.work_dir.join(SCHEDULER_CONFIG_DIR);
                std::fs::create_dir_all(&dir)?;
                let path = dir.join("kube-scheduler-config.yaml");
                std::fs::write(
                    &path,
                    components::scheduler_config(given, &layout.scheduler_kubeconfig)?,
                )?;
                components::scheduler_args_with_config(&layout, &ports, &path)
            }
            None => components::scheduler_args(&layout, &ports),
        };
        cp.spawn(&opts.bin_dir, "kube-scheduler", scheduler_args)?;
        cp.wait_for("kube-controller-manager /healthz", deadline, || {
            probe.ok(format!(
                "https://127.0.0.1:{}/healthz",
                ports.controller_manager
            ))
        })
        .await?;
        cp.wait_for("kube-scheduler /healthz", deadline, || {
            probe.ok(format!("https://127.0.0.1:{}/healthz", ports.scheduler))
        })
        .await?;

        // The ServiceAccount controller creating `default` proves the
        // controller manager is reconciling, not merely serving /healthz.
        let client = cp.client().await?;
        apply_node_bootstrap_bindings(&client).await?;
        let service_accounts: Api<ServiceAccount> = Api::namespaced(client, "default");
        cp.wait_for("the default ServiceAccount", deadline, || {
            let api = service_accounts.clone();
            async move { Ok(api.get_opt("default").await?.is_some()) }
        })
        .await?;

        tracing::info!(
            server = %cp.server_url,
            kubeconfig = %cp.kubeconfig_path.display(),
            elapsed_ms = started.elapsed().as_millis() as u64,
            "local control plane ready"
        );
        Ok(cp)
    }

    /// Uses a cluster someone else runs. Nothing is started or stopped.
    pub async fn existing(kubeconfig_path: impl AsRef<Path>) -> Result<ControlPlane> {
        let path = kubeconfig_path.as_ref();
        let current = kubeconfig::read_current(path)?;
        let cp = ControlPlane {
            kubeconfig_path: path.to_path_buf(),
            server_url: current.server_url,
            ca_pem: current.ca_pem,
            admin: current.client,
            local: None,
        };
        apply_node_bootstrap_bindings(&cp.client().await?).await?;
        Ok(cp)
    }

    /// An admin kubeconfig (current context set).
    pub fn kubeconfig_path(&self) -> &Path {
        &self.kubeconfig_path
    }

    pub fn server_url(&self) -> &str {
        &self.server_url
    }

    /// The cluster CA certificate, PEM.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The admin's client certificate and key: always there for a local
    /// control plane; for an existing one only if its kubeconfig uses them.
    pub fn admin_client(&self) -> Option<&CertAndKey> {
        self.admin.as_ref()
    }

    /// The ports of a local control plane (None for an existing one).
    pub fn ports(&self) -> Option<Ports> {
        self.local.as_ref().map(|l| l.ports)
    }

    /// Process ids of the running components, in start order (empty for an
    /// existing cluster).
    pub fn pids(&self) -> Vec<u32> {
        self.local
            .as_ref()
            .map(|l| l.procs.iter().map(Proc::pid).collect())
            .unwrap_or_default()
    }

    /// Where the component logs (`<component>.log`) are, for a local one.
    pub fn work_dir(&self) -> Option<&Path> {
        self.local.as_ref().map(|l| l.work_dir.as_path())
    }

    /// A client authenticated as the admin of the kubeconfig.
    pub async fn client(&self) -> Result<kube::Client> {
        let kubeconfig = Kubeconfig::read_from(&self.kubeconfig_path)
            .with_context(|| format!("reading {}", self.kubeconfig_path.display()))?;
        let config =
            kube::Config::from_custom_kubeconfig(kubeconfig, &KubeConfigOptions::default())
                .await
                .context("loading the kubeconfig")?;
        kube::Client::try_from(config).context("building the Kubernetes client")
    }

    /// Stops every component (scheduler first, etcd last) and waits for them
    /// to exit, so their ports are free when this returns. A no-op for an
    /// existing cluster.
    pub async fn shutdown(mut self) -> Result<()> {
        if let Some(local) = self.local.take() {
            tokio::task::spawn_blocking(move || local.stop())
                .await
                .context("stopping the control plane")?;
        }
        Ok(())
    }

    fn spawn(&mut self, bin_dir: &Path, name: &str, args: Vec<std::ffi::OsString>) -> Result<()> {
        let local = self.local.as_mut().context("not a local control plane")?;
        let mut cmd = Command::new(bin_dir.join(name));
        cmd.args(args).current_dir(&local.work_dir);
        let proc = Proc::spawn(name, &mut cmd, &local.work_dir)?;
        local.procs.push(proc);
        Ok(())
    }

    /// Polls `check` until it returns true; fails at `deadline`, or at once
    /// with the component's last log lines if one of the processes exits.
    async fn wait_for<F, Fut>(&mut self, what: &str, deadline: Instant, mut check: F) -> Result<()>
    where
        F: FnMut() -> Fut,
        Fut: std::future::Future<Output = Result<bool>>,
    {
        let since = Instant::now();
        loop {
            if let Some(local) = self.local.as_mut() {
                for proc in &mut local.procs {
                    if !proc.is_running() {
                        bail!(
                            "{} exited while waiting for {what}; last lines of {}:\n{}",
                            proc.name(),
                            proc.log_path().display(),
                            proc.log_tail(30)
                        );
                    }
                }
            }
            let last_err = match check().await {
                Ok(true) => {
                    tracing::debug!(
                        what,
                        elapsed_ms = since.elapsed().as_millis() as u64,
                        "ready"
                    );
                    return Ok(());
                }
                Ok(false) => None,
                Err(e) => Some(e),
            };
            if Instant::now() >= deadline {
                let last = last_err
                    .map(|e| format!(": last error: {e:#}"))
                    .unwrap_or_default();
                bail!("timed out waiting for {what}{last}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }
}

impl Local {
    fn stop(mut self) {
        while let Some(mut proc) = self.procs.pop() {
            let started = Instant::now();
            proc.stop(self.stop_grace);
            tracing::debug!(
                component = proc.name(),
                elapsed_ms = started.elapsed().as_millis() as u64,
                "stopped"
            );
        }
    }
}

impl Drop for ControlPlane {
    fn drop(&mut self) {
        if let Some(local) = self.local.take() {
            local.stop();
        }
    }
}

/// Health probes over HTTPS that trust only the cluster CA, as the admin.
struct Probe {
    http: reqwest::Client,
}

impl Probe {
    fn new(pki: &Pki) -> Result<Probe> {
        let ca =
            reqwest::Certificate::from_pem(pki.ca.cert_pem.as_bytes()).context("loading the CA")?;
        let identity = format!("{}{}", pki.admin.cert_pem, pki.admin.key_pem);
        let identity = reqwest::Identity::from_pem(identity.as_bytes())
            .context("loading the admin identity")?;
        let http = reqwest::Client::builder()
            .tls_certs_only([ca])
            .identity(identity)
            .timeout(Duration::from_secs(5))
            .build()
            .context("building the probe client")?;
        Ok(Probe { http })
    }

    /// True when `url` answers 200; an error while nothing listens yet.
    fn ok(&self, url: String) -> impl std::future::Future<Output = Result<bool>> + use<> {
        let request = self.http.get(url);
        async move {
            let response = request.send().await?;
            Ok(response.status() == reqwest::StatusCode::OK)
        }
    }
}

/// Five distinct ports for the components (leased: see `procs::free_port`).
fn free_ports() -> Result<Ports> {
    let port = || crate::procs::free_port().context("reserving loopback ports");
    Ok(Ports {
        etcd_client: port()?,
        etcd_peer: port()?,
        apiserver: port()?,
        controller_manager: port()?,
        scheduler: port()?,
    })
}

fn write_files(layout: &Layout, pki: &Pki, ports: &Ports) -> Result<()> {
    // A previous run's data belongs to another CA and other ports.
    if layout.etcd_data.exists() {
        std::fs::remove_dir_all(&layout.etcd_data)
            .with_context(|| format!("removing old etcd data {}", layout.etcd_data.display()))?;
    }
    // Logs are appended to; start each run with empty ones.
    for bin in BINARIES {
        let log = layout.work_dir.join(format!("{bin}.log"));
        if log.exists() {
            std::fs::remove_file(&log)
                .with_context(|| format!("removing old log {}", log.display()))?;
        }
    }
    std::fs::create_dir_all(layout.pki_dir()).context("creating the pki dir")?;
    let pairs = [
        (&layout.ca, &pki.ca),
        (&layout.apiserver_serving, &pki.apiserver_serving),
        (
            &layout.apiserver_kubelet_client,
            &pki.apiserver_kubelet_client,
        ),
        (&layout.front_proxy_ca, &pki.front_proxy_ca),
        (&layout.front_proxy_client, &pki.front_proxy_client),
        (
            &layout.controller_manager_serving,
            &pki.controller_manager_serving,
        ),
        (&layout.scheduler_serving, &pki.scheduler_serving),
        (&layout.service_account, &pki.service_account),
    ];
    for (paths, pair) in pairs {
        pki::write_pair(paths, pair)?;
    }

    let server = components::server_url(ports);
    let kubeconfigs = [
        (&layout.admin_kubeconfig, pki::ADMIN_USER, &pki.admin),
        (
            &layout.controller_manager_kubeconfig,
            "system:kube-controller-manager",
            &pki.controller_manager,
        ),
        (
            &layout.scheduler_kubeconfig,
            "system:kube-scheduler",
            &pki.scheduler,
        ),
    ];
    for (path, user, pair) in kubeconfigs {
        let text = kubeconfig::render(CLUSTER_NAME, &server, &pki.ca.cert_pem, user, pair)?;
        // Each carries a private key.
        pki::write_file(path, &text, 0o600)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bootstrap_bindings_match_what_talos_binds() {
        let got: Vec<(String, String)> = node_bootstrap_bindings()
            .into_iter()
            .map(|b| {
                let subject = b.subjects.unwrap().remove(0);
                assert_eq!(subject.kind, "Group");
                assert_eq!(b.role_ref.kind, "ClusterRole");
                (b.role_ref.name, subject.name)
            })
            .collect();
        let want = [
            ("system:node-bootstrapper", "system:bootstrappers"),
            (
                "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
                "system:bootstrappers",
            ),
            (
                "system:certificates.k8s.io:certificatesigningrequests:selfnodeclient",
                "system:nodes",
            ),
        ];
        let want: Vec<(String, String)> = want
            .iter()
            .map(|(r, g)| (r.to_string(), g.to_string()))
            .collect();
        assert_eq!(got, want);
    }
}
