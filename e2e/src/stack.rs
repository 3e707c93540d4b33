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
    /// emsim time scale: 0.01 makes a 4-minute delivery take 2.4 s.
    pub time_scale: f64,
    /// Target an existing cluster (kind) instead of starting local binaries.
    pub kubeconfig: Option<PathBuf>,
    pub cluster_name: String,
    pub talos_version: String,
    /// Provider poll interval (the provider default is 15 s, as the SDK's wait helper).
    pub poll_interval: Duration,
}

impl StackOptions {
    pub fn for_test(name: &str) -> Result<Self> {
        let work_dir = repo_root().join(".work").join(format!(
            "{name}-{}",
            chrono::Utc::now().format("%Y%m%dT%H%M%S")
        ));
        std::fs::create_dir_all(&work_dir)?;
        Ok(StackOptions {
            work_dir,
            time_scale: std::env::var("KPS_TIME_SCALE")
                .ok()
                .and_then(|s| s.parse().ok())
                .unwrap_or(0.01),
            kubeconfig: std::env::var_os("KPS_KUBECONFIG").map(PathBuf::from),
            cluster_name: "e2e".to_string(),
            talos_version: "v1.13.9".to_string(),
            poll_interval: Duration::from_millis(250),
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
    emsim_url: String,
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
        procs.push(Proc::spawn(
            "talos-sim",
            Command::new(bins.rust("talos-sim"))
                .args(["--emsim-url", &emsim_url])
                .arg("--state-dir")
                .arg(opts.work_dir.join("talos-sim"))
                .args([
                    "--ssh-port",
                    &SSH_PORT.to_string(),
                    "--talos-port",
                    &TALOS_PORT.to_string(),
                ])
                .arg("--kubeconfig")
                .arg(cp.kubeconfig_path())
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
                "8MiB",
            ])
            .arg("--out")
            .arg(&image_path)
            .status()?;
        if !status.success() {
            bail!("talos-sim make-image failed: {status}");
        }
        let image_payload_sha256 = image_payload_sha256(&image_path)?;
        let image = ImageServer::start(&image_path).await?;

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
        let expires = (chrono::Utc::now() + chrono::Duration::hours(24))
            .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
        kubeutil::apply_yaml(
            &client,
            &talosconfig::bootstrap_token_secret(&base, &expires),
        )
        .await?;
        apply_secret(&client, "talos-worker-config", "worker.yaml", &base.yaml).await?;
        apply_secret(&client, "rescue-ssh-key", "ssh-privatekey", &private).await?;

        // The provider and the bridge, sharing a Unix socket as the two
        // containers of the Deployment do.
        let provider_socket = opts.work_dir.join("provider.sock");
        procs.push(spawn_provider(
            &bins,
            &opts,
            &cp,
            &emsim_url,
            &provider_socket,
            &logs,
            "karpenter-scaleway",
        )?);
        procs.push(spawn_bridge(
            &bins,
            &cp,
            &provider_socket,
            &logs,
            "karpenter-bridge",
        )?);

        let secrets = secret_fingerprints(&private, &base);
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
            emsim_url,
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
        for f in files {
            let text = std::fs::read_to_string(&f).unwrap_or_default();
            for (i, secret) in self.secrets.iter().enumerate() {
                if text.contains(secret.as_str()) {
                    bail!("secret #{i} of this run appears in {}", f.display());
                }
            }
        }
        Ok(())
    }

    pub async fn stop(mut self) {
        while let Some(mut p) = self.procs.pop() {
            p.stop(Duration::from_secs(5));
        }
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        while let Some(mut p) = self.procs.pop() {
            p.stop(Duration::from_secs(5));
        }
    }
}

pub fn spawn_provider(
    bins: &Binaries,
    opts: &StackOptions,
    cp: &ControlPlane,
    emsim_url: &str,
    socket: &Path,
    logs: &Path,
    name: &str,
) -> Result<Proc> {
    let metrics = free_port()?;
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

async fn apply_secret(client: &Client, name: &str, key: &str, value: &str) -> Result<()> {
    use base64::Engine;
    let data = base64::engine::general_purpose::STANDARD.encode(value);
    kubeutil::apply_yaml(
        client,
        &format!("apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\n  namespace: {NAMESPACE}\ntype: Opaque\ndata:\n  {key}: {data}\n"),
    )
    .await?;
    Ok(())
}

async fn install_crds(client: &Client, dir: &Path) -> Result<()> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .with_context(|| {
            format!(
                "reading Karpenter CRDs from {} (run `just karpenter-crds`)",
                dir.display()
            )
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    if files.is_empty() {
        bail!("no CRDs in {}", dir.display());
    }
    for f in files {
        kubeutil::apply_yaml(client, &std::fs::read_to_string(&f)?).await?;
    }
    Ok(())
}

async fn wait_crds_established(client: &Client) -> Result<()> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    wait::until(
        "CRDs Established",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || {
            let api = api.clone();
            async move {
                let crds = api.list(&ListParams::default()).await?;
                let all = crds.items.iter().all(|c| {
                    c.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|cs| {
                            cs.iter()
                                .any(|c| c.type_ == "Established" && c.status == "True")
                        })
                });
                Ok(all.then_some(()))
            }
        },
    )
    .await
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
