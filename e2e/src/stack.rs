//! The whole system under test: a control plane (local binaries or an existing
//! kubeconfig), emsim, talos-sim, the image server, the Rust provider and the
//! Karpenter bridge, wired together as a user would deploy them.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::Namespace;
use kube::Client;
use kube::api::{Api, ListParams};

use crate::controlplane::ControlPlane;
use crate::image::ImageServer;
use crate::procs::{Proc, free_port};
use crate::sims::{EmsimAdmin, TalosSimAdmin};
use crate::{kubeutil, talosconfig, wait};

mod addresses;
mod cluster;
pub use addresses::AddressBlock;
use cluster::{apply_secret, install_crds, wait_crds_established};

/// Where the binaries under test are. Every path can be overridden by env so CI
/// can point at cached builds.
#[derive(Debug, Clone)]
pub struct Binaries {
    /// Holds `karpenter-scaleway`, `emsim`, `talos-sim` (`KPS_RUST_BIN_DIR`, default `target/debug`).
    pub rust_bin_dir: PathBuf,
    /// `karpenter-bridge` (`KPS_BRIDGE_BIN`).
    pub bridge: PathBuf,
    /// etcd, kube-apiserver, kube-controller-manager, kube-scheduler (`KPS_KUBE_BIN_DIR`);
    /// unused when `KPS_KUBECONFIG` targets an existing cluster.
    pub kube_bin_dir: Option<PathBuf>,
    /// The karpenter.sh CRDs of the pinned Karpenter (`KPS_KARPENTER_CRDS`).
    pub karpenter_crds: PathBuf,
}

pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("e2e is in the workspace")
        .to_path_buf()
}

impl Binaries {
    pub fn from_env() -> Result<Self> {
        let root = repo_root();
        let get = |k: &str| std::env::var_os(k).map(PathBuf::from);
        let b = Binaries {
            rust_bin_dir: get("KPS_RUST_BIN_DIR").unwrap_or_else(|| root.join("target/debug")),
            bridge: get("KPS_BRIDGE_BIN")
                .unwrap_or_else(|| root.join(".cache/bin/karpenter-bridge")),
            kube_bin_dir: get("KPS_KUBE_BIN_DIR"),
            karpenter_crds: get("KPS_KARPENTER_CRDS")
                .unwrap_or_else(|| root.join(".cache/karpenter-crds")),
        };
        for bin in ["karpenter-scaleway", "emsim", "talos-sim"] {
            let p = b.rust_bin_dir.join(bin);
            if !p.exists() {
                bail!(
                    "{} missing: build with `cargo build --bins` or set KPS_RUST_BIN_DIR",
                    p.display()
                );
            }
        }
        if !b.bridge.exists() {
            bail!(
                "{} missing: run `just build-bridge` or set KPS_BRIDGE_BIN",
                b.bridge.display()
            );
        }
        Ok(b)
    }

    fn rust(&self, name: &str) -> PathBuf {
        self.rust_bin_dir.join(name)
    }
}

#[derive(Debug, Clone)]
pub struct StackOptions {
    pub work_dir: PathBuf,
    /// The name the work dir was made from (`.work/<name>-<time>-<pid>-<n>`).
    pub name: String,
    /// emsim time scale: 0.01 makes a 4-minute delivery take 2.4 s.
    pub time_scale: f64,
    /// Target an existing cluster (kind) instead of starting local binaries.
    pub kubeconfig: Option<PathBuf>,
    pub cluster_name: String,
    pub talos_version: String,
    /// Provider poll interval (the provider default is 15 s, as the SDK's wait helper).
    pub poll_interval: Duration,
    /// Uncompressed size of the test image (`talos-sim make-image --size`).
    pub image_size: String,
    /// Serve the image at this many bytes per second (None: as fast as loopback
    /// goes), so that imaging lasts long enough to observe or interrupt.
    pub image_bytes_per_second: Option<u64>,
    /// talos-sim `--install-delay-ms`: ApplyConfiguration answered -> reboot.
    pub talos_install_delay: Option<Duration>,
    /// Extra `karpenter-scaleway serve` arguments (e.g. shorter install
    /// deadlines for a scenario that waits for one to expire).
    pub provider_args: Vec<String>,
}

impl StackOptions {
    pub fn for_test(name: &str) -> Result<Self> {
        // Unique even for stacks started in the same second by concurrent
        // tests of one process or by concurrent processes.
        static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let work_dir = repo_root().join(".work").join(format!(
            "{name}-{}-{}-{}",
            chrono::Utc::now().format("%Y%m%dT%H%M%S"),
            std::process::id(),
            SEQ.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
        ));
        std::fs::create_dir_all(&work_dir)?;
        Ok(StackOptions {
            work_dir,
            name: name.to_string(),
            time_scale: std::env::var("KPS_TIME_SCALE")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(0.01),
            kubeconfig: std::env::var_os("KPS_KUBECONFIG").map(PathBuf::from),
            cluster_name: "e2e".to_string(),
            talos_version: "v1.13.9".to_string(),
            poll_interval: Duration::from_millis(250),
            image_size: "8MiB".to_string(),
            image_bytes_per_second: None,
            talos_install_delay: None,
            provider_args: Vec::new(),
        })
    }
}

pub const PROJECT_ID: &str = "4d7a1a49-7bcb-4b3e-9c2e-1f0d5c1e2b3a";
pub const ORGANIZATION_ID: &str = "0b8b3c2e-6d57-4f0e-9d9c-5e4b1c1f8a77";
/// A key in the shape of a Scaleway secret key (a UUID). Test-only.
pub const SECRET_KEY: &str = "6e0b2c4d-8f1a-4b3c-9d2e-7a5f1c3b9e8d";
pub const ACCESS_KEY: &str = "SCWE2EACCESSKEY00000";
pub const NAMESPACE: &str = "karpenter";
pub const ZONE: &str = "fr-par-2";
pub const SSH_PORT: u16 = 2222;
pub const TALOS_PORT: u16 = 50000;

pub struct Stack {
    pub opts: StackOptions,
    pub cp: ControlPlane,
    pub client: Client,
    pub emsim: EmsimAdmin,
    pub talossim: TalosSimAdmin,
    pub image: ImageServer,
    pub image_payload_sha256: String,
    pub ssh_key_id: String,
    /// Every secret this run handed to the system (API key, SSH private key,
    /// bootstrap token secret): none may appear in any component's log.
    secrets: Vec<String>,
    pub bins: Binaries,
    pub provider_socket: PathBuf,
    /// This stack's loopback block (emsim `--ip-range`), held until drop.
    pub addresses: AddressBlock,
    emsim_url: String,
    provider_metrics_port: u16,
    logs: PathBuf,
    /// Bootstrap token secrets seen in the cluster during the run (per-node
    /// tokens live only from Create to join, so they are collected as they
    /// appear); checked by [`Stack::assert_no_secrets_in_logs`].
    seen_tokens: std::sync::Arc<std::sync::Mutex<std::collections::BTreeSet<String>>>,
    token_watch: tokio::task::JoinHandle<()>,
    // Stopped in reverse order of start when dropped (bridge first).
    procs: Vec<Proc>,
}

impl Stack {
    /// Brings the whole system up and waits until the NodeClass is Ready.
    pub async fn up(opts: StackOptions) -> Result<Stack> {
        crate::install_crypto();
        let bins = Binaries::from_env()?;
        let logs = opts.work_dir.join("logs");
        std::fs::create_dir_all(&logs)?;

        let cp = match &opts.kubeconfig {
            Some(path) => ControlPlane::existing(path).await?,
            None => {
                let bin_dir = bins.kube_bin_dir.clone().context(
                    "KPS_KUBE_BIN_DIR unset: run e2e/kube/build.sh (or `just kube-bins`)",
                )?;
                ControlPlane::start(crate::controlplane::ControlPlaneOptions::new(
                    bin_dir,
                    opts.work_dir.join("controlplane"),
                ))
                .await?
            }
        };
        let client = cp.client().await?;
        let mut procs = Vec::new();
        let addresses = AddressBlock::reserve()?;

        // emsim: the Scaleway API.
        let emsim_port = free_port()?;
        let emsim_url = format!("http://127.0.0.1:{emsim_port}");
        procs.push(Proc::spawn(
            "emsim",
            Command::new(bins.rust("emsim"))
                .args(["--listen", &format!("127.0.0.1:{emsim_port}")])
                .args(["--time-scale", &opts.time_scale.to_string()])
                .args(["--secret-key", SECRET_KEY, "--project-id", PROJECT_ID])
                .args(["--organization-id", ORGANIZATION_ID])
                .args(["--seed", "42"])
                .args(["--ip-range", &addresses.cidr()])
                .env("RUST_LOG", "info"),
            &logs,
        )?);
        let emsim = EmsimAdmin::new(&emsim_url)?;
        wait::until(
            "emsim to answer",
            Duration::from_secs(30),
            Duration::from_millis(100),
            || async { Ok(emsim.counters().await.ok().map(|_| ())) },
        )
        .await?;

        // talos-sim: the servers' OS (rescue SSH, Talos API, kubelet).
        let admin_port = free_port()?;
        let talossim_url = format!("http://127.0.0.1:{admin_port}");
        let mut talos_cmd = Command::new(bins.rust("talos-sim"));
        if let Some(delay) = opts.talos_install_delay {
            talos_cmd.args(["--install-delay-ms", &delay.as_millis().to_string()]);
        }
        // A talos-sim whose kubelet still joins with an admin kubeconfig
        // (before the bootstrap-token kubelet) needs it passed; the current
        // one authenticates with the token of the applied machine config.
        if talos_sim_takes_kubeconfig(&bins.rust("talos-sim"))? {
            talos_cmd.arg("--kubeconfig").arg(cp.kubeconfig_path());
        }
        procs.push(Proc::spawn(
            "talos-sim",
            talos_cmd
                .args(["--emsim-url", &emsim_url])
                .arg("--state-dir")
                .arg(opts.work_dir.join("talos-sim"))
                .args([
                    "--ssh-port",
                    &SSH_PORT.to_string(),
                    "--talos-port",
                    &TALOS_PORT.to_string(),
                ])
                .args(["--admin-listen", &format!("127.0.0.1:{admin_port}")])
                .env("RUST_LOG", "info"),
            &logs,
        )?);
        let talossim = TalosSimAdmin::new(&talossim_url)?;
        wait::until(
            "talos-sim to answer",
            Duration::from_secs(30),
            Duration::from_millis(100),
            || async { Ok(talossim.servers().await.ok().map(|_| ())) },
        )
        .await?;

        // The Talos image, served like a mirror of Image Factory.
        let image_path = opts.work_dir.join("metal-amd64.raw.xz");
        let status = Command::new(bins.rust("talos-sim"))
            .args([
                "make-image",
                "--version",
                &opts.talos_version,
                "--arch",
                "amd64",
                "--size",
                &opts.image_size,
            ])
            .arg("--out")
            .arg(&image_path)
            .status()?;
        if !status.success() {
            bail!("talos-sim make-image failed: {status}");
        }
        let image_payload_sha256 = image_payload_sha256(&image_path)?;
        let image = ImageServer::start_with_rate(&image_path, opts.image_bytes_per_second).await?;

        // The operator's part: an SSH key registered in IAM, whose private half
        // goes into a Secret the NodeClass references.
        let seed: [u8; 32] = rand::random();
        let key = russh::keys::PrivateKey::from(
            russh::keys::ssh_key::private::Ed25519Keypair::from_seed(&seed),
        );
        let public = key.public_key().to_openssh()?;
        let private = key
            .to_openssh(russh::keys::ssh_key::LineEnding::LF)?
            .to_string();
        let ssh_key_id = emsim
            .create_ssh_key(SECRET_KEY, PROJECT_ID, "karpenter-rescue", &public)
            .await?;

        // Namespaces, CRDs, Secrets.
        let ns: Api<Namespace> = Api::all(client.clone());
        if ns.get_opt(NAMESPACE).await?.is_none() {
            kubeutil::apply_yaml(
                &client,
                &format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {NAMESPACE}\n"),
            )
            .await?;
        }
        install_crds(&client, &bins.karpenter_crds).await?;
        let ours = repo_root().join("charts/karpenter-crd/templates/karpenter.scaleway.com_scalewayelasticmetalnodeclasses.yaml");
        kubeutil::apply_yaml(
            &client,
            &std::fs::read_to_string(&ours).with_context(|| ours.display().to_string())?,
        )
        .await?;
        wait_crds_established(&client).await?;

        let base = talosconfig::worker_config(
            &opts.cluster_name,
            cp.server_url(),
            cp.ca_pem(),
            &opts.talos_version,
        )?;
        // No Secret for the base config's own `cluster.token`: the cluster
        // must not accept it, so that only the provider's per-node tokens
        // can join (talos-sim's kubelet bootstraps with the token it got).
        apply_secret(&client, "talos-worker-config", "worker.yaml", &base.yaml).await?;
        apply_secret(&client, "rescue-ssh-key", "ssh-privatekey", &private).await?;

        // The provider and the bridge, sharing a Unix socket as the two
        // containers of the Deployment do.
        let provider_socket = opts.work_dir.join("provider.sock");
        let provider_metrics_port = free_port()?;
        procs.push(spawn_provider(
            &bins,
            &opts,
            &cp,
            &emsim_url,
            &provider_socket,
            &logs,
            PROVIDER,
            provider_metrics_port,
        )?);
        procs.push(spawn_bridge(&bins, &cp, &provider_socket, &logs, BRIDGE)?);

        let secrets = secret_fingerprints(&private, &base);
        let seen_tokens = std::sync::Arc::new(std::sync::Mutex::new(Default::default()));
        let token_watch = tokio::spawn(watch_bootstrap_tokens(client.clone(), seen_tokens.clone()));
        let stack = Stack {
            opts,
            cp,
            client,
            emsim,
            talossim,
            image,
            image_payload_sha256,
            ssh_key_id,
            secrets,
            bins,
            provider_socket,
            addresses,
            emsim_url,
            provider_metrics_port,
            logs,
            seen_tokens,
            token_watch,
            procs,
        };
        Ok(stack)
    }

    pub fn emsim_url(&self) -> &str {
        &self.emsim_url
    }

    /// The NodeClass of the scenarios, pointing at the served image and the
    /// Secrets made in `up`.
    pub fn nodeclass_yaml(&self, name: &str) -> String {
        format!(
            r#"apiVersion: karpenter.scaleway.com/v1alpha1
kind: ScalewayElasticMetalNodeClass
metadata:
  name: {name}
spec:
  zones: ["{ZONE}"]
  billing: hourly
  image:
    urlTemplate: "{url}"
    version: {version}
    schematic: 376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba
  rescueSshKey:
    iamKeyId: {key}
    privateKeySecretRef: {{name: rescue-ssh-key, namespace: {NAMESPACE}, key: ssh-privatekey}}
  machineConfigSecretRef: {{name: talos-worker-config, namespace: {NAMESPACE}, key: worker.yaml}}
  tags: ["team=platform"]
"#,
            url = self.image.url_template(),
            version = self.opts.talos_version,
            key = self.ssh_key_id,
        )
    }

    /// A NodePool on that NodeClass that consolidates empty nodes quickly.
    pub fn nodepool_yaml(name: &str, nodeclass: &str, extra_requirements: &str) -> String {
        format!(
            r#"apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: {name}
spec:
  template:
    spec:
      nodeClassRef:
        group: karpenter.scaleway.com
        kind: ScalewayElasticMetalNodeClass
        name: {nodeclass}
      expireAfter: Never
      requirements:
        - key: karpenter.sh/capacity-type
          operator: In
          values: ["on-demand"]
{extra_requirements}
  disruption:
    consolidationPolicy: WhenEmptyOrUnderutilized
    consolidateAfter: 5s
    budgets:
      - nodes: "100%"
"#
        )
    }

    /// Applies a NodeClass and waits for its Ready condition.
    pub async fn create_nodeclass(&self, name: &str) -> Result<()> {
        kubeutil::apply_yaml(&self.client, &self.nodeclass_yaml(name)).await?;
        let api = kubeutil::nodeclasses(&self.client);
        wait::until(
            &format!("NodeClass {name} Ready=True"),
            Duration::from_secs(60),
            Duration::from_millis(250),
            || {
                let api = api.clone();
                async move {
                    let nc = api.get(name).await?;
                    Ok(
                        (kubeutil::condition(&nc, "Ready").as_deref() == Some("True"))
                            .then_some(()),
                    )
                }
            },
        )
        .await
    }

    pub fn proc_mut(&mut self, name: &str) -> Option<&mut Proc> {
        self.procs.iter_mut().find(|p| p.name() == name)
    }

    /// SIGKILLs the provider (its whole process group), as a crash or a node
    /// loss would: no shutdown code runs. The bridge keeps running and
    /// reconnects to the socket once a provider serves it again.
    pub fn kill_provider(&mut self) -> Result<()> {
        let p = self
            .proc_mut(PROVIDER)
            .context("the provider is not running")?;
        let pid = p.pid();
        p.kill_hard();
        tracing::info!(pid, "provider SIGKILLed");
        Ok(())
    }

    /// Starts the provider again with exactly the arguments, environment,
    /// socket and metrics port of the first start (log appended to the same
    /// file). The killed process is replaced in place, so teardown order holds.
    pub fn start_provider(&mut self) -> Result<()> {
        let fresh = spawn_provider(
            &self.bins,
            &self.opts,
            &self.cp,
            &self.emsim_url,
            &self.provider_socket,
            &self.logs,
            PROVIDER,
            self.provider_metrics_port,
        )?;
        match self.procs.iter().position(|p| p.name() == PROVIDER) {
            Some(i) => {
                let mut old = std::mem::replace(&mut self.procs[i], fresh);
                old.stop(Duration::from_secs(5));
            }
            None => self.procs.insert(0, fresh),
        }
        Ok(())
    }

    /// SIGKILLs the bridge (Karpenter core) and starts it again with the same
    /// environment: a restart of the Karpenter container, after which it
    /// takes the lead again and re-announces leadership to the provider.
    pub fn restart_bridge(&mut self) -> Result<()> {
        let fresh_cmd = || {
            spawn_bridge(
                &self.bins,
                &self.cp,
                &self.provider_socket,
                &self.logs,
                BRIDGE,
            )
        };
        let i = self
            .procs
            .iter()
            .position(|p| p.name() == BRIDGE)
            .context("the bridge is not running")?;
        self.procs[i].kill_hard();
        let fresh = fresh_cmd()?;
        self.procs[i] = fresh;
        Ok(())
    }

    /// SIGKILL then restart: a controller crash and its Deployment restarting it.
    pub fn crash_provider(&mut self) -> Result<()> {
        self.kill_provider()?;
        self.start_provider()
    }

    /// Sends `signal` to a component's process group (e.g. SIGSTOP/SIGCONT on
    /// talos-sim to freeze the simulated machines for a moment).
    pub fn signal(&mut self, name: &str, signal: nix::sys::signal::Signal) -> Result<()> {
        self.proc_mut(name)
            .with_context(|| format!("{name} is not running"))?
            .signal(signal);
        Ok(())
    }

    /// The bootstrap token secrets seen in the cluster so far.
    pub fn seen_bootstrap_tokens(&self) -> Vec<String> {
        self.seen_tokens
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .cloned()
            .collect()
    }

    /// Log tails of every component, for a failure message.
    pub fn diagnostics(&self) -> String {
        let mut out = String::new();
        for p in &self.procs {
            out.push_str(&format!(
                "\n===== {} ({}) =====\n{}\n",
                p.name(),
                p.log_path().display(),
                p.log_tail(40)
            ));
        }
        out
    }

    /// Servers in emsim carrying this cluster's ownership tag (any status).
    pub async fn owned_servers(&self) -> Result<Vec<serde_json::Value>> {
        let tag = format!("karpenter.scaleway.com/cluster={}", self.opts.cluster_name);
        Ok(self
            .emsim
            .servers()
            .await?
            .into_iter()
            .filter(|s| {
                s["tags"]
                    .as_array()
                    .is_some_and(|t| t.iter().any(|v| v == &serde_json::json!(tag)))
            })
            .collect())
    }

    /// Fails if any secret of this run appears in a component's log.
    pub fn assert_no_secrets_in_logs(&self) -> Result<()> {
        let mut files: Vec<PathBuf> = self
            .procs
            .iter()
            .map(|p| p.log_path().to_path_buf())
            .collect();
        if let Ok(dir) = std::fs::read_dir(self.opts.work_dir.join("controlplane")) {
            files.extend(
                dir.filter_map(|e| e.ok().map(|e| e.path()))
                    .filter(|p| p.extension().is_some_and(|e| e == "log")),
            );
        }
        let tokens = self.seen_bootstrap_tokens();
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap_or_default();
            for (i, secret) in self.secrets.iter().enumerate() {
                if text.contains(secret.as_str()) {
                    bail!("secret #{i} of this run appears in {}", f.display());
                }
            }
            for (i, token) in tokens.iter().enumerate() {
                if text.contains(token.as_str()) {
                    bail!(
                        "bootstrap token secret #{i} (of {} seen) appears in {}",
                        tokens.len(),
                        f.display()
                    );
                }
            }
        }
        tracing::info!(
            fixed = self.secrets.len(),
            bootstrap_tokens = tokens.len(),
            "no secret in any log"
        );
        Ok(())
    }

    pub async fn stop(mut self) {
        self.token_watch.abort();
        while let Some(mut p) = self.procs.pop() {
            p.stop(Duration::from_secs(5));
        }
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        self.token_watch.abort();
        while let Some(mut p) = self.procs.pop() {
            p.stop(Duration::from_secs(5));
        }
    }
}

/// The provider's process name (and log file stem).
pub const PROVIDER: &str = "karpenter-scaleway";
/// The bridge's (Karpenter core's) process name (and log file stem).
pub const BRIDGE: &str = "karpenter-bridge";

#[allow(clippy::too_many_arguments)]
pub fn spawn_provider(
    bins: &Binaries,
    opts: &StackOptions,
    cp: &ControlPlane,
    emsim_url: &str,
    socket: &Path,
    logs: &Path,
    name: &str,
    metrics: u16,
) -> Result<Proc> {
    Proc::spawn(
        name,
        Command::new(bins.rust("karpenter-scaleway"))
            .arg("serve")
            .arg("--socket")
            .arg(socket)
            .args([
                "--rescue-ssh-port",
                &SSH_PORT.to_string(),
                "--talos-api-port",
                &TALOS_PORT.to_string(),
            ])
            .args([
                "--poll-interval",
                &format!("{}ms", opts.poll_interval.as_millis()),
            ])
            .args(["--metrics-listen", &format!("127.0.0.1:{metrics}")])
            .args(&opts.provider_args)
            .env("KUBECONFIG", cp.kubeconfig_path())
            .env("CLUSTER_NAME", &opts.cluster_name)
            .env("SCW_ACCESS_KEY", ACCESS_KEY)
            .env("SCW_SECRET_KEY", SECRET_KEY)
            .env("SCW_DEFAULT_PROJECT_ID", PROJECT_ID)
            .env("SCW_API_URL", emsim_url)
            .env("SCW_ZONES", ZONE)
            .env("RUST_LOG", "info,karpenter_scaleway=debug"),
        logs,
    )
}

pub fn spawn_bridge(
    bins: &Binaries,
    cp: &ControlPlane,
    socket: &Path,
    logs: &Path,
    name: &str,
) -> Result<Proc> {
    Proc::spawn(
        name,
        Command::new(&bins.bridge)
            .env("KUBECONFIG", cp.kubeconfig_path())
            .env("PROVIDER_SOCKET", socket)
            .env("DISABLE_LEADER_ELECTION", "true")
            .env("SYSTEM_NAMESPACE", NAMESPACE)
            .env("METRICS_PORT", free_port()?.to_string())
            .env("HEALTH_PROBE_PORT", free_port()?.to_string())
            .env("LOG_LEVEL", "debug")
            .env("BATCH_IDLE_DURATION", "1s")
            .env("BATCH_MAX_DURATION", "5s"),
        logs,
    )
}

/// Whether this talos-sim build has the `--kubeconfig` flag of the kubelet
/// that joined with admin credentials.
fn talos_sim_takes_kubeconfig(bin: &Path) -> Result<bool> {
    let out = Command::new(bin)
        .arg("--help")
        .output()
        .with_context(|| format!("running {} --help", bin.display()))?;
    Ok(String::from_utf8_lossy(&out.stdout).contains("--kubeconfig"))
}

/// Records the `token-secret` of every bootstrap token Secret that appears in
/// `kube-system` (ADDED/MODIFIED events and the initial list), so the log scan
/// covers per-node tokens that are deleted once their node joined. Restarts
/// the watch if it ends; stops when the stack aborts the task.
async fn watch_bootstrap_tokens(
    client: Client,
    seen: std::sync::Arc<std::sync::Mutex<std::collections::BTreeSet<String>>>,
) {
    use futures::StreamExt;
    use k8s_openapi::api::core::v1::Secret;
    use kube::runtime::watcher;
    const TYPE: &str = "type=bootstrap.kubernetes.io/token";
    let api: Api<Secret> = Api::namespaced(client, "kube-system");
    let record = |s: &Secret| {
        let value = s
            .data
            .as_ref()
            .and_then(|d| d.get("token-secret"))
            .map(|b| String::from_utf8_lossy(&b.0).to_string());
        if let Some(v) = value.filter(|v| v.len() >= 6) {
            let new = seen.lock().unwrap_or_else(|e| e.into_inner()).insert(v);
            if new {
                tracing::debug!(secret = %kube::ResourceExt::name_any(s), "bootstrap token seen");
            }
        }
    };
    let mut stream = std::pin::pin!(watcher(
        api.clone(),
        watcher::Config::default().fields(TYPE)
    ));
    // A list every second as well: a token that lives between a dropped
    // watch and its re-list would otherwise escape the scan.
    let mut tick = tokio::time::interval(Duration::from_secs(1));
    loop {
        tokio::select! {
            event = stream.next() => match event {
                Some(Ok(watcher::Event::Apply(s) | watcher::Event::InitApply(s))) => record(&s),
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    tracing::debug!(error = %e, "bootstrap token watch error (retrying)");
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                None => return,
            },
            _ = tick.tick() => {
                if let Ok(list) = api.list(&ListParams::default().fields(TYPE)).await {
                    list.items.iter().for_each(record);
                }
            }
        }
    }
}

/// sha256 of the payload that the image header announces: what talos-sim must
/// find on the disk after imaging.
fn image_payload_sha256(path: &Path) -> Result<String> {
    use std::io::Read;
    let f = std::fs::File::open(path)?;
    let mut dec = liblzma::read::XzDecoder::new(f);
    let mut header = vec![0u8; 4096];
    dec.read_exact(&mut header)?;
    let text = String::from_utf8_lossy(&header);
    text.lines()
        .find_map(|l| {
            l.strip_prefix("payload-sha256: ")
                .map(|s| s.trim_matches('\0').trim().to_string())
        })
        .context("image header without payload-sha256")
}

/// The strings that must never be logged: the Scaleway secret key, each line
/// of the SSH private key's body, the bootstrap token secret and the Talos
/// machine token.
fn secret_fingerprints(private_key: &str, base: &talosconfig::BaseConfig) -> Vec<String> {
    let mut out = vec![
        SECRET_KEY.to_string(),
        base.token_secret.clone(),
        base.machine_token.clone(),
    ];
    out.extend(
        private_key
            .lines()
            .filter(|l| !l.starts_with("-----") && l.len() >= 16)
            .map(str::to_string),
    );
    out
}
