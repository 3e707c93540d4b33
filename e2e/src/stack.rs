//! The whole system under test: a control plane (local binaries or an existing
//! kubeconfig), emsim, talos-sim, the image server, the Rust provider and the
//! Karpenter bridge, wired together as a user would deploy them: the provider
//! and the bridge are installed from the rendered `karpenter-scaleway` chart
//! (see `stack/chart.rs`), one process per container of each replica.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use k8s_openapi::api::core::v1::Namespace;
use kube::api::{Api, ListParams};
use kube::{Client, ResourceExt as _};

use crate::controlplane::ControlPlane;
use crate::image::ImageServer;
use crate::procs::{Proc, free_port};
use crate::sims::{EmsimAdmin, TalosSimAdmin};
use crate::{kubeutil, talosconfig, wait};

mod addresses;
pub mod chart;
mod cluster;
pub mod in_cluster;
pub mod prometheus;
mod replica;
mod replicas;
mod secrets;
pub mod system_node;
pub use addresses::AddressBlock;
use cluster::{apply_secret, install_crds, wait_crds_established};
pub use replica::Replica;
use replica::{ReplicaInputs, ScratchDir};
pub use replica::{http_get, metric_value};

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
    /// talos-sim `--apply-latency-ms`: how long ApplyConfiguration takes.
    pub talos_apply_latency: Option<Duration>,
    /// Extra `karpenter-scaleway serve` arguments (e.g. shorter install
    /// deadlines for a scenario that waits for one to expire), after the
    /// chart's; a flag given here wins over the chart's env.
    pub provider_args: Vec<String>,
    /// Extra environment of every bridge process, over the chart's.
    pub bridge_env: Vec<(String, String)>,
    /// Run every bridge process with this host name (a UTS namespace of its
    /// own, as a container's): Karpenter core names its leader election
    /// Lease holder after the host name, and core's performance suite looks
    /// for a Pod of that name (`kps-perf`).
    pub bridge_hostname: Option<String>,
    /// The system node's address and kubelet endpoint
    /// ([`system_node::NodeAddress`]; `kps-perf`).
    pub system_node_address: Option<system_node::NodeAddress>,
    /// Images the system node runs with a binary of its own
    /// ([`system_node::Inputs::images`]).
    pub system_node_images: std::collections::BTreeMap<String, PathBuf>,
    /// Replicas of the chart's Deployment (`replicas` value): each is a
    /// provider and a bridge process; Karpenter's leader election picks the
    /// one that acts.
    pub replicas: usize,
    /// Serve Scaleway Instances too: the `ScalewayInstanceNodeClass` CRD is
    /// installed before the provider starts (which is how it decides to
    /// serve them), and emsim's Instance catalog has Talos images of
    /// `talos_version` and of [`NEXT_TALOS_VERSION`].
    pub instances: bool,
    /// emsim and talos-sim with real Scaleway timings (`--timings real`:
    /// delivery and reboots of 3-5 minutes, VM boots of about a minute, the
    /// disk written at 150 MB/s), for runs by hand at time scale 1.
    pub real_timings: bool,
    /// Chart values over the e2e harness's own (YAML; later wins), e.g. the
    /// feature gates core's suites need (`kps-conformance`).
    pub extra_chart_values: Option<String>,
    /// Run the chart as a cluster would: release `karpenter` in
    /// `kube-system` (Deployment `kube-system/karpenter`), its Deployment
    /// applied, and its Pods run by the harness's kubelet on a tainted system
    /// Node ([`system_node`]), so that rollouts, restarts and the Lease holder
    /// are real Pods (what Karpenter core's own e2e suites read and patch).
    /// The replica handles ([`Stack::replicas`]) are then empty.
    pub system_node: bool,
    /// A KubeSchedulerConfiguration for the local kube-scheduler
    /// ([`crate::controlplane::ControlPlaneOptions::scheduler_config`]); with
    /// [`StackOptions::system_node`], the system node also publishes the
    /// scheduler's mirror Pod (`kube-system`, `component=kube-scheduler`), as
    /// a kubelet does for a static Pod, which is how core's
    /// DefaultTopologySpreadConstraints specs recognize a cluster whose
    /// scheduler has their profile.
    pub scheduler_config: Option<String>,
    /// Run in a real cluster (`KPS_KUBECONFIG`): the charts installed by
    /// `helm install`, every component from its image
    /// ([`in_cluster::InCluster::from_env`], `just e2e-kind`).
    pub in_cluster: Option<in_cluster::InCluster>,
}

/// A second Talos version whose Instance image exists when
/// [`StackOptions::instances`] is set (to drift VMs onto).
pub const NEXT_TALOS_VERSION: &str = "v1.13.10";

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
            talos_apply_latency: None,
            provider_args: Vec::new(),
            bridge_env: Vec::new(),
            replicas: 1,
            instances: false,
            real_timings: false,
            extra_chart_values: None,
            system_node: false,
            bridge_hostname: None,
            system_node_address: None,
            system_node_images: std::collections::BTreeMap::new(),
            scheduler_config: None,
            in_cluster: in_cluster::InCluster::from_env()?,
        })
    }
}

pub const PROJECT_ID: &str = "4d7a1a49-7bcb-4b3e-9c2e-1f0d5c1e2b3a";
pub const ORGANIZATION_ID: &str = "0b8b3c2e-6d57-4f0e-9d9c-5e4b1c1f8a77";
/// A key in the shape of a Scaleway secret key (a UUID). Test-only.
pub const SECRET_KEY: &str = "6e0b2c4d-8f1a-4b3c-9d2e-7a5f1c3b9e8d";
pub const ACCESS_KEY: &str = "SCWE2EACCESSKEY00000";
/// The release namespace of the chart, where the NodeClass Secrets live too.
pub const NAMESPACE: &str = "karpenter";
pub const ZONE: &str = "fr-par-2";
/// The Image Factory schematic of the scenarios' NodeClasses (the image
/// server serves any).
pub const TALOS_SCHEMATIC: &str =
    "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba";
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
    /// Talos secrets, the replicas' ServiceAccount tokens): none may appear
    /// in any log, Event or `/metrics` page.
    secrets: Vec<String>,
    pub bins: Binaries,
    /// The socket of the first replica's provider.
    pub provider_socket: PathBuf,
    /// This stack's loopback block (emsim `--ip-range`), held until drop.
    pub addresses: AddressBlock,
    emsim_url: String,
    /// The Deployment's pods, as processes (see [`Replica`]).
    replicas: Vec<Replica>,
    /// Replicas killed by [`Stack::kill_replica`] and not started again.
    down: std::collections::BTreeSet<usize>,
    /// The leader election Lease (namespace, name), from the bridge's env.
    lease: (String, String),
    logs: PathBuf,
    /// Holds the replicas' sockets and kubeconfigs; removed after the
    /// processes stopped (fields drop after `Drop::drop`).
    _scratch: ScratchDir,
    /// Bootstrap token secrets seen in the cluster during the run (per-node
    /// tokens live only from Create to join, so they are collected as they
    /// appear); checked by [`Stack::assert_no_secrets_in_logs`].
    seen_tokens: std::sync::Arc<std::sync::Mutex<std::collections::BTreeSet<String>>>,
    token_watch: tokio::task::JoinHandle<()>,
    /// The optional Prometheus scraping the replicas (`KPS_PROMETHEUS_BIN`),
    /// stopped before the other processes so that it records them up to
    /// the end.
    pub prometheus: Option<prometheus::Prometheus>,
    /// The system node running the chart's Pods ([`StackOptions::system_node`]).
    system: Option<system_node::SystemNode>,
    // Stopped in reverse order of start when dropped (bridge first).
    procs: Vec<Proc>,
}

impl Stack {
    /// Brings the whole system up, the provider installed from the chart,
    /// and waits until every replica's containers passed their startup
    /// probes.
    pub async fn up(opts: StackOptions) -> Result<Stack> {
        crate::install_crypto();
        let bins = Binaries::from_env()?;
        prometheus::check_bin()?;
        let logs = opts.work_dir.join("logs");
        std::fs::create_dir_all(&logs)?;

        let cp = match &opts.kubeconfig {
            Some(path) => ControlPlane::existing(path).await?,
            None => {
                let bin_dir = bins.kube_bin_dir.clone().context(
                    "KPS_KUBE_BIN_DIR unset: run e2e/kube/build.sh (or `just kube-bins`)",
                )?;
                let mut cp_opts = crate::controlplane::ControlPlaneOptions::new(
                    bin_dir,
                    opts.work_dir.join("controlplane"),
                );
                cp_opts.scheduler_config = opts.scheduler_config.clone();
                ControlPlane::start(cp_opts).await?
            }
        };
        let client = cp.client().await?;
        let mut procs = Vec::new();
        let addresses = AddressBlock::reserve()?;

        if let Some(ic) = opts.in_cluster.clone() {
            return Self::up_in_cluster(opts, ic, bins, cp, client, addresses, logs).await;
        }

        // emsim: the Scaleway API.
        let emsim_port = free_port()?;
        let emsim_url = format!("http://127.0.0.1:{emsim_port}");
        let mut emsim_cmd = Command::new(bins.rust("emsim"));
        if opts.instances {
            let catalog = opts.work_dir.join("instance-catalog.yaml");
            std::fs::write(&catalog, instance_catalog(&opts.talos_version)?)?;
            emsim_cmd.arg("--instance-catalog").arg(&catalog);
        }
        if opts.real_timings {
            emsim_cmd.args(["--timings", "real"]);
        }
        procs.push(Proc::spawn(
            "emsim",
            emsim_cmd
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
        // Talos' machinery as a command (built on first use, then cached).
        let talos_config = tokio::task::spawn_blocking(talosconfig::talos_config_bin).await??;
        let mut talos_cmd = Command::new(bins.rust("talos-sim"));
        if opts.real_timings {
            talos_cmd.args(["--timings", "real"]);
        }
        if let Some(delay) = opts.talos_install_delay {
            talos_cmd.args(["--install-delay-ms", &delay.as_millis().to_string()]);
        }
        if let Some(latency) = opts.talos_apply_latency {
            talos_cmd.args(["--apply-latency-ms", &latency.as_millis().to_string()]);
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
                // Every applied config is validated by Talos' machinery and
                // refused the way a real node refuses it.
                .arg("--config-validator")
                .arg(&talos_config)
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
        let (image, image_payload_sha256) =
            serve_image(&opts, &bins, std::net::Ipv4Addr::LOCALHOST.into()).await?;
        // The operator's part: an SSH key registered in IAM, whose private half
        // goes into a Secret the NodeClass references.
        let (ssh_key_id, private) = register_rescue_key(&emsim).await?;

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
        let mut ours = vec!["karpenter.scaleway.com_scalewayelasticmetalnodeclasses.yaml"];
        if opts.instances {
            ours.push("karpenter.scaleway.com_scalewayinstancenodeclasses.yaml");
        }
        for crd in ours {
            let path = repo_root().join("charts/karpenter-crd/templates").join(crd);
            kubeutil::apply_yaml(
                &client,
                &std::fs::read_to_string(&path).with_context(|| path.display().to_string())?,
            )
            .await?;
        }
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

        // The provider and the bridge, installed from the chart.
        let (release, release_ns) = if opts.system_node {
            (system_node::RELEASE, "kube-system")
        } else {
            (chart::RELEASE, NAMESPACE)
        };
        chart::apply_credentials(&client, release_ns, ACCESS_KEY, SECRET_KEY, PROJECT_ID).await?;
        let values = opts.work_dir.join("chart-values.stack.yaml");
        std::fs::write(&values, stack_values(&opts, &emsim_url)?)?;
        let mut value_files = vec![repo_root().join("e2e/chart-values.yaml"), values];
        if let Some(extra) = &opts.extra_chart_values {
            let path = opts.work_dir.join("chart-values.extra.yaml");
            std::fs::write(&path, extra)?;
            value_files.push(path);
        }
        if opts.system_node {
            let path = opts.work_dir.join("chart-values.system-node.yaml");
            std::fs::write(&path, format!("fullnameOverride: {release}\n"))?;
            value_files.push(path);
        }
        let helm = chart::helm_binary(&repo_root())?;
        let rendered = chart::render(
            &helm,
            &repo_root().join("charts/karpenter-scaleway"),
            release,
            release_ns,
            &value_files,
            &opts.work_dir.join("chart.yaml"),
        )?;
        rendered.apply(&client).await?;
        let scratch = ScratchDir::new()?;
        let mut secrets = secrets::fingerprints(SECRET_KEY, &private, &base);
        let (replicas, provider_socket, lease, system) = if opts.system_node {
            let system = system_node::SystemNode::start(system_node::Inputs {
                client: client.clone(),
                bins: bins.clone(),
                scratch: scratch.path().to_path_buf(),
                logs: logs.clone(),
                server_url: cp.server_url().to_string(),
                ca_pem: cp.ca_pem().to_string(),
                address: opts.system_node_address.clone(),
                images: opts.system_node_images.clone(),
            })
            .await?;
            if opts.scheduler_config.is_some() && opts.kubeconfig.is_none() {
                system_node::publish_scheduler_mirror(
                    &client,
                    &opts
                        .work_dir
                        .join("controlplane")
                        .join(crate::controlplane::SCHEDULER_CONFIG_DIR),
                )
                .await?;
            }
            rendered.apply_deployment(&client).await?;
            let lease = (
                release_ns.to_string(),
                "karpenter-leader-election".to_string(),
            );
            (Vec::new(), PathBuf::new(), lease, Some(system))
        } else {
            let (replicas, sa_tokens) = replica::resolve(&ReplicaInputs {
                client: &client,
                rendered: &rendered,
                bins: &bins,
                scratch: scratch.path(),
                server_url: cp.server_url(),
                ca_pem: cp.ca_pem(),
            })
            .await?;
            secrets.extend(sa_tokens);
            let first = replicas
                .first()
                .context("the chart rendered a Deployment with 0 replicas")?;
            // `bridge_env` wins over the chart's, as at each start.
            let env = |key: &str| {
                opts.bridge_env
                    .iter()
                    .rev()
                    .find(|(k, _)| k == key)
                    .map(|(_, v)| v.as_str())
                    .or_else(|| first.bridge.env(key))
            };
            let lease = (
                env("LEADER_ELECTION_NAMESPACE")
                    .unwrap_or(&rendered.namespace)
                    .to_string(),
                env("LEADER_ELECTION_NAME")
                    .unwrap_or("karpenter-leader-election")
                    .to_string(),
            );
            let provider_socket = first.socket();
            for r in &replicas {
                procs.push(Proc::spawn(
                    &r.provider_proc,
                    &mut provider_command(r, &opts),
                    &logs,
                )?);
                procs.push(Proc::spawn(
                    &r.bridge_proc,
                    &mut bridge_command(r, &opts),
                    &logs,
                )?);
            }
            (replicas, provider_socket, lease, None)
        };

        let seen_tokens = std::sync::Arc::new(std::sync::Mutex::new(Default::default()));
        let token_watch = tokio::spawn(watch_bootstrap_tokens(client.clone(), seen_tokens.clone()));
        let mut stack = Stack {
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
            replicas,
            down: Default::default(),
            lease,
            logs,
            _scratch: scratch,
            seen_tokens,
            token_watch,
            prometheus: None,
            system,
            procs,
        };
        if stack.system.is_some() {
            stack.wait_deployment_ready(&rendered).await?;
            return Ok(stack);
        }
        for i in 0..stack.replicas.len() {
            stack.wait_replica_started(i).await?;
        }
        stack.prometheus = prometheus::Prometheus::start_if_asked(
            &stack.opts.work_dir,
            &stack.logs,
            &stack.replicas,
        )
        .await?;
        Ok(stack)
    }

    /// Waits until the Deployment's Pods, run by the system node, are all
    /// available ([`StackOptions::system_node`]).
    async fn wait_deployment_ready(&self, rendered: &chart::Rendered) -> Result<()> {
        use k8s_openapi::api::apps::v1::Deployment;
        let api: Api<Deployment> = Api::namespaced(self.client.clone(), &rendered.namespace);
        let name = rendered.name();
        let want = rendered.replicas() as i32;
        wait::until(
            &format!(
                "Deployment {}/{name}: {want} replicas available",
                rendered.namespace
            ),
            Duration::from_secs(180),
            Duration::from_millis(500),
            || {
                let (api, name) = (api.clone(), name.clone());
                async move {
                    let d = api.get(&name).await?;
                    let available = d.status.and_then(|s| s.available_replicas).unwrap_or(0);
                    Ok((available >= want).then_some(()))
                }
            },
        )
        .await
    }

    /// The namespace of the chart's release.
    pub fn release_namespace(&self) -> &str {
        &self.lease.0
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
    schematic: {schematic}
  rescueSshKey:
    iamKeyId: {key}
    privateKeySecretRef: {{name: rescue-ssh-key, namespace: {NAMESPACE}, key: ssh-privatekey}}
  machineConfigSecretRef: {{name: talos-worker-config, namespace: {NAMESPACE}, key: worker.yaml}}
  tags: ["team=platform"]
"#,
            url = self.image.url_template(),
            version = self.opts.talos_version,
            key = self.ssh_key_id,
            schematic = TALOS_SCHEMATIC,
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

    /// Applies the scenarios' NodeClass and waits for its Ready condition.
    pub async fn create_nodeclass(&self, name: &str) -> Result<()> {
        self.apply_nodeclass(name, &self.nodeclass_yaml(name)).await
    }

    /// Applies a NodeClass and waits until its `Ready` condition is `True`
    /// for this very generation (the provider refuses to launch on an older
    /// one, and a condition left from the previous spec would say True).
    pub async fn apply_nodeclass(&self, name: &str, yaml: &str) -> Result<()> {
        kubeutil::apply_yaml(&self.client, yaml).await?;
        let api = kubeutil::nodeclasses(&self.client);
        wait::until(
            &format!("NodeClass {name} Ready for its generation"),
            Duration::from_secs(60),
            Duration::from_millis(250),
            || {
                let api = api.clone();
                async move {
                    let nc = api.get(name).await?;
                    let generation = nc.metadata.generation;
                    let ready = nc.data["status"]["conditions"]
                        .as_array()
                        .into_iter()
                        .flatten()
                        .any(|c| {
                            c["type"] == "Ready"
                                && c["status"] == "True"
                                && c["observedGeneration"].as_i64() == generation
                        });
                    Ok(ready.then_some(()))
                }
            },
        )
        .await
    }

    pub fn proc_mut(&mut self, name: &str) -> Option<&mut Proc> {
        self.procs.iter_mut().find(|p| p.name() == name)
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
        if self.opts.in_cluster.is_some() {
            out.push_str(&self.cluster_logs(40));
        }
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

    /// The containers' logs of a stack in a cluster, collected now, and
    /// their last `lines` lines (blocks: needs the multi-thread runtime the
    /// scenarios run on; otherwise the logs collected before).
    fn cluster_logs(&self, lines: usize) -> String {
        use tokio::runtime::{Handle, RuntimeFlavor};
        let collected = match Handle::try_current() {
            Ok(h) if h.runtime_flavor() == RuntimeFlavor::MultiThread => {
                tokio::task::block_in_place(|| {
                    h.block_on(in_cluster::collect_logs(&self.client, &self.logs))
                })
            }
            _ => Err(anyhow::anyhow!("no multi-thread runtime")),
        };
        let files = collected.unwrap_or_else(|e| {
            tracing::warn!("collecting the cluster's logs: {e:#}");
            std::fs::read_dir(&self.logs)
                .into_iter()
                .flatten()
                .flatten()
                .map(|e| e.path())
                .collect()
        });
        in_cluster::log_tails(&files, lines)
    }

    /// Servers in emsim carrying this cluster's ownership tag (any status).
    /// A `ScalewayInstanceNodeClass` in [`ZONE`] booting the Talos image
    /// `talos-<version>-amd64`, with the stack's worker config.
    pub fn instance_nodeclass_yaml(&self, name: &str, version: &str) -> String {
        format!(
            r#"apiVersion: karpenter.scaleway.com/v1alpha1
kind: ScalewayInstanceNodeClass
metadata:
  name: {name}
spec:
  zones: ["{ZONE}"]
  image:
    name: talos-{version}-amd64
  machineConfigSecretRef: {{name: talos-worker-config, namespace: {NAMESPACE}, key: worker.yaml}}
  tags: ["team=burst"]
"#
        )
    }

    /// Applies an Instance NodeClass and waits for its Ready condition.
    pub async fn create_instance_nodeclass(&self, yaml: &str) -> Result<String> {
        let applied = kubeutil::apply_yaml(&self.client, yaml).await?;
        let name = applied
            .first()
            .map(|o| o.name_any())
            .context("no object applied")?;
        let api = kubeutil::instance_nodeclasses(&self.client);
        wait::until(
            &format!("Instance NodeClass {name} Ready=True"),
            Duration::from_secs(60),
            Duration::from_millis(250),
            || {
                let (api, name) = (api.clone(), name.clone());
                async move {
                    let nc = api.get(&name).await?;
                    Ok(
                        (kubeutil::condition(&nc, "Ready").as_deref() == Some("True"))
                            .then_some(()),
                    )
                }
            },
        )
        .await?;
        Ok(name)
    }

    /// A NodePool of VMs on an Instance NodeClass, with a `weight` (0: none),
    /// consolidating empty nodes quickly.
    pub fn instance_nodepool_yaml(
        name: &str,
        nodeclass: &str,
        weight: u32,
        extra_requirements: &str,
        extra_template: &str,
    ) -> String {
        let weight = if weight > 0 {
            format!("  weight: {weight}\n")
        } else {
            String::new()
        };
        format!(
            r#"apiVersion: karpenter.sh/v1
kind: NodePool
metadata:
  name: {name}
spec:
{weight}  template:
    metadata:
      labels: {{pool: {name}}}
    spec:
      nodeClassRef:
        group: karpenter.scaleway.com
        kind: ScalewayInstanceNodeClass
        name: {nodeclass}
      expireAfter: Never
{extra_template}      requirements:
        - key: karpenter.sh/capacity-type
          operator: In
          values: ["on-demand"]
{extra_requirements}
  disruption:
    consolidationPolicy: WhenEmpty
    consolidateAfter: 5s
    budgets:
      - nodes: "100%"
"#
        )
    }

    /// This cluster's live VMs in emsim.
    pub async fn owned_vms(&self) -> Result<Vec<serde_json::Value>> {
        let tag = format!("karpenter.scaleway.com/cluster={}", self.opts.cluster_name);
        Ok(self
            .emsim
            .instance_servers()
            .await?
            .into_iter()
            .filter(|s| {
                s["tags"]
                    .as_array()
                    .is_some_and(|t| t.iter().any(|v| v == &serde_json::json!(tag)))
            })
            .collect())
    }

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

    pub async fn stop(mut self) {
        self.token_watch.abort();
        if self.opts.in_cluster.is_some() {
            // Kept in the work dir: the cluster goes with the run.
            if let Err(e) = in_cluster::collect_logs(&self.client, &self.logs).await {
                tracing::warn!("collecting the cluster's logs: {e:#}");
            }
        }
        if let Some(mut p) = self.prometheus.take() {
            p.stop();
        }
        if let Some(system) = self.system.take() {
            system.stop().await;
        }
        while let Some(mut p) = self.procs.pop() {
            p.stop(Duration::from_secs(5));
        }
    }
}

/// The Talos image of `opts` (made once per work root by talos-sim, then
/// linked into the stack's work dir), served on `ip`; and its payload's sha256.
async fn serve_image(
    opts: &StackOptions,
    bins: &Binaries,
    ip: std::net::IpAddr,
) -> Result<(ImageServer, String)> {
    let image_path = opts.work_dir.join("metal-amd64.raw.xz");
    let made = tokio::task::spawn_blocking({
        let talos_sim = bins.rust("talos-sim");
        let (version, size) = (opts.talos_version.clone(), opts.image_size.clone());
        let work_root = work_root(&opts.work_dir);
        move || cached_image(&talos_sim, &work_root, &version, &size)
    })
    .await??;
    link_or_copy(&made, &image_path)?;
    let sha256 = image_payload_sha256(&image_path)?;
    let image = ImageServer::start_on(&image_path, opts.image_bytes_per_second, ip).await?;
    Ok((image, sha256))
}

/// A fresh Ed25519 key registered in emsim's IAM as `karpenter-rescue`:
/// its id, and the private half in OpenSSH form (a secret of the run).
async fn register_rescue_key(emsim: &EmsimAdmin) -> Result<(String, String)> {
    let seed: [u8; 32] = rand::random();
    let key = russh::keys::PrivateKey::from(
        russh::keys::ssh_key::private::Ed25519Keypair::from_seed(&seed),
    );
    let public = key.public_key().to_openssh()?;
    let private = key
        .to_openssh(russh::keys::ssh_key::LineEnding::LF)?
        .to_string();
    let id = emsim
        .create_ssh_key(SECRET_KEY, PROJECT_ID, "karpenter-rescue", &public)
        .await?;
    Ok((id, private))
}

/// emsim's seeded Instance catalog with Talos images of `version` and of
/// [`NEXT_TALOS_VERSION`] instead of its own (talos-sim boots a VM with the
/// version its image is named after).
fn instance_catalog(version: &str) -> Result<String> {
    let seeded = repo_root().join("emsim/src/instance/seeded.yaml");
    let text = std::fs::read_to_string(&seeded).with_context(|| seeded.display().to_string())?;
    let images = text
        .find("\nimages:")
        .context("the seeded Instance catalog has no images section")?;
    let mut out = text[..images].to_string();
    out.push_str("\nimages:\n");
    // Both architectures, named apart and tagged alike: a NodeClass that
    // selects by name gets one, one that selects by tag gets both (core's
    // suites need arm64 nodes beside amd64 ones).
    for v in [version, NEXT_TALOS_VERSION] {
        for (suffix, arch) in [("amd64", "x86_64"), ("arm64", "arm64")] {
            out.push_str(&format!(
                "  - name: talos-{v}-{suffix}\n    arch: {arch}\n    zones: [{ZONE}]\n    tags: [talos, talos-{v}]\n"
            ));
        }
    }
    Ok(out)
}

impl Drop for Stack {
    fn drop(&mut self) {
        self.token_watch.abort();
        if let Some(mut p) = self.prometheus.take() {
            p.stop();
        }
        while let Some(mut p) = self.procs.pop() {
            p.stop(Duration::from_secs(5));
        }
    }
}

/// The provider's process name (and log file stem).
pub const PROVIDER: &str = "karpenter-scaleway";
/// The bridge's (Karpenter core's) process name (and log file stem).
pub const BRIDGE: &str = "karpenter-bridge";

/// The provider container of `r` with `opts.provider_args` after the
/// chart's arguments (read at each start, so a scenario may change them
/// before [`Stack::start_provider`]).
fn provider_command(r: &Replica, opts: &StackOptions) -> Command {
    let mut cmd = r.provider.command();
    cmd.args(&opts.provider_args);
    cmd
}

/// The bridge container of `r` with `opts.bridge_env` over the chart's env
/// (read at each start).
fn bridge_command(r: &Replica, opts: &StackOptions) -> Command {
    let mut cmd = r.bridge.command();
    cmd.envs(opts.bridge_env.iter().map(|(k, v)| (k, v)));
    match &opts.bridge_hostname {
        Some(hostname) => system_node::with_hostname(&cmd, hostname),
        None => cmd,
    }
}

/// The stack's own chart values, over `e2e/chart-values.yaml`: what varies
/// per stack (cluster name, emsim's URL, replicas, poll interval) and what
/// the harness's constants fix (zone, simulator ports, credentials Secret).
fn stack_values(opts: &StackOptions, emsim_url: &str) -> Result<String> {
    let values = serde_json::json!({
        "clusterName": opts.cluster_name,
        "replicas": opts.replicas,
        "scaleway": {
            "existingSecret": chart::CREDENTIALS_SECRET,
            "zones": [ZONE],
            "apiUrl": emsim_url,
        },
        "provider": {
            "pollInterval": format!("{}ms", opts.poll_interval.as_millis()),
            "rescueSSHPort": SSH_PORT,
            "talosAPIPort": TALOS_PORT,
        },
    });
    Ok(serde_yaml_ng::to_string(&values)?)
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
/// Where the stacks of one run share what they can: the parent of a stack's
/// work dir (`.work/`), or the work dir itself at the root.
fn work_root(work_dir: &Path) -> PathBuf {
    work_dir
        .parent()
        .filter(|p| !p.as_os_str().is_empty())
        .unwrap_or(work_dir)
        .to_path_buf()
}

/// The xz-compressed test image of `version`/`size`, made by `talos-sim
/// make-image` once per talos-sim build and shared by the stacks of a run
/// (`<work root>/images/`): the image is a pure function of those (its
/// payload is derived from version and arch), and xz-compressing it costs
/// each stack 5 to 10 s of CPU. Written under a temporary name, then renamed,
/// so concurrent stacks never read a partial image.
fn cached_image(talos_sim: &Path, work_root: &Path, version: &str, size: &str) -> Result<PathBuf> {
    let meta =
        std::fs::metadata(talos_sim).with_context(|| format!("reading {}", talos_sim.display()))?;
    let built = meta
        .modified()?
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_nanos();
    let dir = work_root.join("images");
    std::fs::create_dir_all(&dir).with_context(|| format!("creating {}", dir.display()))?;
    let path = dir.join(format!(
        "metal-amd64-{version}-{size}-{:x}-{built:x}.raw.xz",
        meta.len()
    ));
    if path.exists() {
        return Ok(path);
    }
    // The same extension as the image: make-image compresses by it.
    let partial = dir.join(format!(
        ".{}-{}",
        std::process::id(),
        path.file_name().unwrap_or_default().to_string_lossy(),
    ));
    let status = Command::new(talos_sim)
        .args([
            "make-image",
            "--version",
            version,
            "--arch",
            "amd64",
            "--size",
            size,
        ])
        .arg("--out")
        .arg(&partial)
        .status()?;
    if !status.success() {
        let _ = std::fs::remove_file(&partial);
        bail!("talos-sim make-image failed: {status}");
    }
    std::fs::rename(&partial, &path)
        .with_context(|| format!("renaming {} to {}", partial.display(), path.display()))?;
    Ok(path)
}

/// `to` as a hard link to `from` (a copy across file systems): the work
/// dir's clean-up then removes the link, never the shared image.
fn link_or_copy(from: &Path, to: &Path) -> Result<()> {
    if std::fs::hard_link(from, to).is_err() {
        std::fs::copy(from, to)
            .with_context(|| format!("copying {} to {}", from.display(), to.display()))?;
    }
    Ok(())
}

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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// A stand-in for `talos-sim make-image` that counts its runs and writes
    /// its arguments as the image.
    fn fake_talos_sim(dir: &Path) -> PathBuf {
        let bin = dir.join("talos-sim");
        std::fs::write(
            &bin,
            format!(
                "#!/bin/sh\necho run >> {}\nfor a; do last=$a; done\necho \"$@\" > \"$last\"\n",
                dir.join("runs").display()
            ),
        )
        .unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        bin
    }

    fn runs(dir: &Path) -> usize {
        std::fs::read_to_string(dir.join("runs"))
            .unwrap_or_default()
            .lines()
            .count()
    }

    #[test]
    fn an_image_is_made_once_per_build_version_and_size() {
        let tmp = tempfile::tempdir().unwrap();
        let bin = fake_talos_sim(tmp.path());
        let root = tmp.path().join("work");
        let a = cached_image(&bin, &root, "v1.13.9", "8MiB").unwrap();
        let again = cached_image(&bin, &root, "v1.13.9", "8MiB").unwrap();
        assert_eq!(a, again);
        assert_eq!(runs(tmp.path()), 1);
        let args = std::fs::read_to_string(&a).unwrap();
        assert!(args.contains("--version v1.13.9"), "{args}");
        // make-image compresses by the extension of --out: the file it
        // writes (before the rename) must end like the image.
        let out = args.split_whitespace().last().unwrap();
        assert!(out.ends_with(".raw.xz"), "{out}");

        let other = cached_image(&bin, &root, "v1.13.9", "16MiB").unwrap();
        assert_ne!(other, a);
        assert_eq!(runs(tmp.path()), 2);

        // A rebuilt talos-sim makes its own image.
        let f = std::fs::File::options().write(true).open(&bin).unwrap();
        f.set_modified(std::time::UNIX_EPOCH + Duration::from_secs(1))
            .unwrap();
        drop(f);
        let rebuilt = cached_image(&bin, &root, "v1.13.9", "8MiB").unwrap();
        assert_ne!(rebuilt, a);
        assert_eq!(runs(tmp.path()), 3);

        // A stack's clean-up removes its link, not the shared image.
        let link = tmp.path().join("stack-image.raw.xz");
        link_or_copy(&rebuilt, &link).unwrap();
        std::fs::remove_file(&link).unwrap();
        assert!(rebuilt.exists());
        // No partial file is left behind.
        let names: Vec<String> = std::fs::read_dir(root.join("images"))
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(names.iter().all(|n| !n.starts_with('.')), "{names:?}");
    }

    #[test]
    fn a_failed_make_leaves_no_image() {
        let tmp = tempfile::tempdir().unwrap();
        let bin = tmp.path().join("talos-sim");
        // It writes part of its output, then fails.
        std::fs::write(
            &bin,
            "#!/bin/sh\nfor a; do last=$a; done\necho part > \"$last\"\nexit 3\n",
        )
        .unwrap();
        std::fs::set_permissions(&bin, std::fs::Permissions::from_mode(0o755)).unwrap();
        let root = tmp.path().join("work");
        let err = cached_image(&bin, &root, "v1.13.9", "8MiB").unwrap_err();
        assert!(err.to_string().contains("make-image failed"), "{err:#}");
        assert_eq!(std::fs::read_dir(root.join("images")).unwrap().count(), 0);
    }
}
