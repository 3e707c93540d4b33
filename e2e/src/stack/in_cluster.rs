//! The stack in a real cluster (`just e2e-kind`, docs/development.md "kind"): the
//! charts installed by `helm install` (from their directories or from an OCI
//! registry, as a release is consumed), the provider and the bridge run from their
//! images by the cluster's kubelet, emsim from its image in a Deployment of its own,
//! and talos-sim from its image beside the provider, in the provider Pod's network
//! namespace: the simulated servers' addresses (emsim's `--ip-range`, loopback
//! addresses) are where the provider connects to them, as a real server's public
//! address is reachable from a real provider Pod.
//!
//! The test process reaches emsim's and talos-sim's admin APIs through NodePort
//! Services on the kind node's address, and scrapes the release's `/metrics` through
//! its Service (the API server's service proxy). The Talos image is served by the
//! test process on this host's address on the cluster's network (kind's bridge).
//!
//! What differs from the host stack, and why: talos-sim runs without
//! `--config-validator` (Talos' machinery is a host binary the harness builds, not
//! part of any image; the host e2e and `just sim-conformance` validate every
//! rendered config), and each scenario expects a fresh cluster (the driver,
//! hack/e2e-kind.sh, makes one per scenario): nothing cluster-wide is undone.

use std::collections::BTreeMap;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, ListParams, LogParams};
use kube::{Client, ResourceExt as _};
use serde_json::json;

use super::{NAMESPACE, ORGANIZATION_ID, PROJECT_ID, SECRET_KEY, StackOptions, TALOS_PORT};
use crate::{kubeutil, wait};

/// The namespace of emsim's Deployment.
pub const SIMS_NAMESPACE: &str = "kps-sims";
/// The chart's release name and namespace, as on the host stack.
pub const RELEASE: &str = super::chart::RELEASE;
const EMSIM_PORT: u16 = 7080;
const TALOSSIM_ADMIN_PORT: u16 = 7090;

/// Where the charts come from.
#[derive(Debug, Clone, PartialEq)]
pub enum ChartSource {
    /// `charts/` of this checkout.
    Directory(PathBuf),
    /// `oci://HOST:PORT/PATH`: `<url>/karpenter-crd` and `<url>/karpenter-scaleway`
    /// at `version`, over plain HTTP (a registry on loopback).
    Oci { url: String, version: String },
}

impl ChartSource {
    /// The `helm install` arguments naming `chart`.
    pub fn install_args(&self, chart: &str) -> Vec<String> {
        match self {
            ChartSource::Directory(dir) => vec![dir.join(chart).display().to_string()],
            ChartSource::Oci { url, version } => vec![
                format!("{}/{chart}", url.trim_end_matches('/')),
                "--version".into(),
                version.clone(),
                "--plain-http".into(),
            ],
        }
    }
}

/// A cluster to run the stack in, from the environment the driver sets.
#[derive(Debug, Clone)]
pub struct InCluster {
    /// The kind node's address: the API server's endpoint in the machine config
    /// (`https://<node>:6443`) and where the NodePorts are.
    pub node_ip: IpAddr,
    /// This host's address on the cluster's network (the image server binds it).
    pub host_ip: IpAddr,
    pub charts: ChartSource,
    /// Images are `<registry>/<name>:<tag>`, already on the node (`kind load`).
    pub image_registry: String,
    pub image_tag: String,
    pub helm: PathBuf,
}

impl InCluster {
    /// `KPS_IN_CLUSTER=1` with `KPS_KIND_NODE_IP`, `KPS_KIND_HOST_IP`,
    /// `KPS_CHARTS` (a directory, or `oci://…` with `KPS_CHART_VERSION`),
    /// `KPS_IMAGE_REGISTRY`, `KPS_IMAGE_TAG` and `KPS_HELM`; `None` without
    /// `KPS_IN_CLUSTER`.
    pub fn from_env() -> Result<Option<InCluster>> {
        Self::from_vars(|k| std::env::var(k).ok())
    }

    fn from_vars(get: impl Fn(&str) -> Option<String>) -> Result<Option<InCluster>> {
        if get("KPS_IN_CLUSTER").as_deref() != Some("1") {
            return Ok(None);
        }
        let need = |k: &str| {
            get(k)
                .filter(|v| !v.is_empty())
                .with_context(|| format!("KPS_IN_CLUSTER=1 needs {k}"))
        };
        let charts = need("KPS_CHARTS")?;
        let charts = if charts.starts_with("oci://") {
            ChartSource::Oci {
                url: charts,
                version: need("KPS_CHART_VERSION")?,
            }
        } else {
            ChartSource::Directory(PathBuf::from(charts))
        };
        Ok(Some(InCluster {
            node_ip: need("KPS_KIND_NODE_IP")?
                .parse()
                .context("KPS_KIND_NODE_IP")?,
            host_ip: need("KPS_KIND_HOST_IP")?
                .parse()
                .context("KPS_KIND_HOST_IP")?,
            charts,
            image_registry: need("KPS_IMAGE_REGISTRY")?,
            image_tag: need("KPS_IMAGE_TAG")?,
            helm: PathBuf::from(need("KPS_HELM")?),
        }))
    }

    /// The API server as Pods (and talos-sim's kubelet) reach it.
    pub fn api_endpoint(&self) -> String {
        format!("https://{}:6443", self.node_ip)
    }

    fn image(&self, name: &str) -> String {
        format!("{}/{name}:{}", self.image_registry, self.image_tag)
    }

    /// emsim's URL inside the cluster.
    pub fn emsim_service_url(&self) -> String {
        format!("http://emsim.{SIMS_NAMESPACE}.svc.cluster.local:{EMSIM_PORT}")
    }

    /// Chart values over the stack's: the images, talos-sim beside the provider
    /// (with its state on an emptyDir, under a read-only root) and the provider's
    /// extra arguments.
    pub fn chart_values(&self, opts: &StackOptions) -> Result<String> {
        let image = |name: &str| json!({"repository": format!("{}/{name}", self.image_registry), "tag": self.image_tag});
        let mut talos_args = vec![
            "--emsim-url".to_string(),
            self.emsim_service_url(),
            "--talos-port".into(),
            TALOS_PORT.to_string(),
        ];
        if opts.real_timings {
            talos_args.extend(["--timings".into(), "real".into()]);
        }
        if let Some(d) = opts.talos_install_delay {
            talos_args.extend(["--install-delay-ms".into(), d.as_millis().to_string()]);
        }
        if let Some(d) = opts.talos_apply_latency {
            talos_args.extend(["--apply-latency-ms".into(), d.as_millis().to_string()]);
        }
        let values = json!({
            "image": {
                "provider": image("karpenter-scaleway"),
                "bridge": image("karpenter-bridge"),
                // Loaded into the node by the driver (`kind load docker-image`).
                "pullPolicy": "Never",
            },
            "provider": {"extraArgs": opts.provider_args},
            "extraContainers": [{
                "name": "talos-sim",
                "image": self.image("talos-sim"),
                "imagePullPolicy": "Never",
                "args": talos_args,
                "env": [{"name": "RUST_LOG", "value": "info"}],
                "ports": [{"name": "talos-sim-admin", "containerPort": TALOSSIM_ADMIN_PORT}],
                "securityContext": restricted(),
                "volumeMounts": [{"name": "talos-sim-state", "mountPath": "/state"}],
            }],
            "extraVolumes": [{"name": "talos-sim-state", "emptyDir": {}}],
        });
        // The bridge's extra environment (scenario settings of core) has no chart value.
        ensure!(
            opts.bridge_env.is_empty() && opts.bridge_hostname.is_none(),
            "bridge_env and bridge_hostname are host-stack settings; not supported in a cluster"
        );
        Ok(serde_yaml_ng::to_string(&values)?)
    }

    /// emsim's Namespace, ConfigMap (the Instance catalog), Deployment and
    /// NodePort Service; returns its admin URL from this host once it answers.
    pub async fn deploy_emsim(
        &self,
        client: &Client,
        opts: &StackOptions,
        ip_range: &str,
        instance_catalog: Option<String>,
    ) -> Result<String> {
        kubeutil::apply_yaml(
            client,
            &format!("apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {SIMS_NAMESPACE}\n"),
        )
        .await?;
        let mut args: Vec<String> = [
            "--listen",
            &format!("0.0.0.0:{EMSIM_PORT}"),
            "--time-scale",
            &opts.time_scale.to_string(),
            "--secret-key",
            SECRET_KEY,
            "--project-id",
            PROJECT_ID,
            "--organization-id",
            ORGANIZATION_ID,
            "--seed",
            "42",
            "--ip-range",
            ip_range,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        if opts.real_timings {
            args.extend(["--timings".into(), "real".into()]);
        }
        let mut volumes = vec![];
        let mut mounts = vec![];
        if let Some(catalog) = instance_catalog {
            let cm = json!({
                "apiVersion": "v1", "kind": "ConfigMap",
                "metadata": {"name": "emsim-instance-catalog", "namespace": SIMS_NAMESPACE},
                "data": {"instance-catalog.yaml": catalog},
            });
            kubeutil::apply(client, serde_json::from_value(cm)?).await?;
            volumes
                .push(json!({"name": "catalog", "configMap": {"name": "emsim-instance-catalog"}}));
            mounts.push(json!({"name": "catalog", "mountPath": "/catalog", "readOnly": true}));
            args.extend([
                "--instance-catalog".into(),
                "/catalog/instance-catalog.yaml".into(),
            ]);
        }
        let labels = json!({"app.kubernetes.io/name": "emsim"});
        let deployment = json!({
            "apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "emsim", "namespace": SIMS_NAMESPACE},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        // On the kind node, never on a simulated one.
                        "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                            "nodeSelectorTerms": [{"matchExpressions": [
                                {"key": "karpenter.sh/nodepool", "operator": "DoesNotExist"}]}]}}},
                        "securityContext": {"runAsNonRoot": true, "seccompProfile": {"type": "RuntimeDefault"}},
                        "containers": [{
                            "name": "emsim",
                            "image": self.image("emsim"),
                            "imagePullPolicy": "Never",
                            "args": args,
                            "env": [{"name": "RUST_LOG", "value": "info"}],
                            "ports": [{"name": "http", "containerPort": EMSIM_PORT}],
                            "readinessProbe": {"httpGet": {"path": "/_emsim/counters", "port": "http"}, "periodSeconds": 1},
                            "securityContext": restricted(),
                            "volumeMounts": mounts,
                        }],
                        "volumes": volumes,
                    }
                }
            }
        });
        kubeutil::apply(client, serde_json::from_value(deployment)?).await?;
        let service = json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "emsim", "namespace": SIMS_NAMESPACE},
            "spec": {
                "type": "NodePort",
                "selector": labels,
                "ports": [{"name": "http", "port": EMSIM_PORT, "targetPort": "http"}],
            }
        });
        kubeutil::apply(client, serde_json::from_value(service)?).await?;
        let port = node_port(client, SIMS_NAMESPACE, "emsim").await?;
        Ok(format!("http://{}:{port}", self.node_ip))
    }

    /// A NodePort Service onto talos-sim's admin port in the release's Pod(s);
    /// returns its URL from this host. The selector is the Deployment's own.
    pub async fn expose_talossim(&self, client: &Client) -> Result<String> {
        let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
        let d = deployments.get(RELEASE).await?;
        let selector = d
            .spec
            .and_then(|s| s.selector.match_labels)
            .context("the release's Deployment has no matchLabels")?;
        let service = json!({
            "apiVersion": "v1", "kind": "Service",
            "metadata": {"name": "talos-sim-admin", "namespace": NAMESPACE},
            "spec": {
                "type": "NodePort",
                "selector": selector,
                "ports": [{"name": "admin", "port": TALOSSIM_ADMIN_PORT, "targetPort": "talos-sim-admin"}],
            }
        });
        kubeutil::apply(client, serde_json::from_value(service)?).await?;
        let port = node_port(client, NAMESPACE, "talos-sim-admin").await?;
        Ok(format!("http://{}:{port}", self.node_ip))
    }

    /// `helm install RELEASE CHART -n NAMESPACE --wait` with `values`.
    pub fn helm_install(
        &self,
        kubeconfig: &Path,
        release: &str,
        chart: &str,
        values: &[PathBuf],
        log: &Path,
    ) -> Result<()> {
        let mut cmd = Command::new(&self.helm);
        cmd.arg("install")
            .arg(release)
            .args(self.charts.install_args(chart))
            .args([
                "--namespace",
                NAMESPACE,
                "--create-namespace",
                "--wait",
                "--timeout",
                "5m",
            ])
            .arg("--kubeconfig")
            .arg(kubeconfig);
        for v in values {
            cmd.arg("-f").arg(v);
        }
        let out = cmd
            .output()
            .with_context(|| format!("running {}", self.helm.display()))?;
        let text = format!(
            "$ helm install {release} {}\n{}{}",
            self.charts.install_args(chart).join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
        std::fs::write(log, &text)?;
        ensure!(
            out.status.success(),
            "helm install {release} failed:\n{text}"
        );
        tracing::info!(release, chart, source = ?self.charts, "helm install done");
        Ok(())
    }
}

impl super::Stack {
    /// [`super::Stack::up`] in a cluster: emsim's Deployment, the Talos image
    /// served on this host's address on the cluster's network, the operator's
    /// Secrets, then `helm install` of both charts (talos-sim beside the provider),
    /// and the release checked ([`check_release`]).
    pub(super) async fn up_in_cluster(
        opts: StackOptions,
        ic: InCluster,
        bins: super::Binaries,
        cp: crate::controlplane::ControlPlane,
        client: Client,
        addresses: super::AddressBlock,
        logs: PathBuf,
    ) -> Result<super::Stack> {
        use crate::sims::{EmsimAdmin, TalosSimAdmin};
        let kubeconfig = opts
            .kubeconfig
            .clone()
            .context("a stack in a cluster needs KPS_KUBECONFIG")?;
        let catalog = if opts.instances {
            Some(super::instance_catalog(&opts.talos_version)?)
        } else {
            None
        };
        let emsim_admin = ic
            .deploy_emsim(&client, &opts, &addresses.cidr(), catalog)
            .await?;
        wait_available(&client, SIMS_NAMESPACE, "emsim").await?;
        let emsim = EmsimAdmin::new(&emsim_admin)?;
        wait::until(
            "emsim to answer through its NodePort",
            Duration::from_secs(60),
            Duration::from_millis(250),
            || async { Ok(emsim.counters().await.ok().map(|_| ())) },
        )
        .await?;

        let (image, image_payload_sha256) = super::serve_image(&opts, &bins, ic.host_ip).await?;
        let (ssh_key_id, private) = super::register_rescue_key(&emsim).await?;

        // The CRDs, from the karpenter-crd chart.
        ic.helm_install(
            &kubeconfig,
            "karpenter-crd",
            "karpenter-crd",
            &[],
            &logs.join("helm-karpenter-crd.log"),
        )?;
        super::cluster::wait_crds_established(&client).await?;

        // The operator's Secrets, then the provider's release.
        let base = crate::talosconfig::worker_config(
            &opts.cluster_name,
            &ic.api_endpoint(),
            cp.ca_pem(),
            &opts.talos_version,
        )?;
        super::cluster::apply_secret(&client, "talos-worker-config", "worker.yaml", &base.yaml)
            .await?;
        super::cluster::apply_secret(&client, "rescue-ssh-key", "ssh-privatekey", &private).await?;
        super::chart::apply_credentials(
            &client,
            NAMESPACE,
            super::ACCESS_KEY,
            SECRET_KEY,
            PROJECT_ID,
        )
        .await?;
        let mut value_files = vec![super::repo_root().join("e2e/chart-values.yaml")];
        for (name, text) in [
            (
                "stack",
                super::stack_values(&opts, &ic.emsim_service_url())?,
            ),
            ("in-cluster", ic.chart_values(&opts)?),
        ] {
            let path = opts.work_dir.join(format!("chart-values.{name}.yaml"));
            std::fs::write(&path, text)?;
            value_files.push(path);
        }
        if let Some(extra) = &opts.extra_chart_values {
            let path = opts.work_dir.join("chart-values.extra.yaml");
            std::fs::write(&path, extra)?;
            value_files.push(path);
        }
        let installed = ic.helm_install(
            &kubeconfig,
            RELEASE,
            "karpenter-scaleway",
            &value_files,
            &logs.join("helm-karpenter-scaleway.log"),
        );
        if let Err(e) = installed {
            let files = collect_logs(&client, &logs).await.unwrap_or_default();
            return Err(e.context(log_tails(&files, 40)));
        }
        if let Err(e) = check_release(&client).await {
            let files = collect_logs(&client, &logs).await.unwrap_or_default();
            return Err(e.context(log_tails(&files, 40)));
        }

        let talossim = TalosSimAdmin::new(&ic.expose_talossim(&client).await?)?;
        wait::until(
            "talos-sim to answer through its NodePort",
            Duration::from_secs(60),
            Duration::from_millis(250),
            || async { Ok(talossim.servers().await.ok().map(|_| ())) },
        )
        .await?;

        let secrets = super::secrets::fingerprints(SECRET_KEY, &private, &base);
        let seen_tokens = std::sync::Arc::new(std::sync::Mutex::new(Default::default()));
        let token_watch = tokio::spawn(super::watch_bootstrap_tokens(
            client.clone(),
            seen_tokens.clone(),
        ));
        Ok(super::Stack {
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
            provider_socket: PathBuf::new(),
            addresses,
            emsim_url: emsim_admin,
            replicas: Vec::new(),
            down: Default::default(),
            lease: (
                NAMESPACE.to_string(),
                "karpenter-leader-election".to_string(),
            ),
            logs,
            _scratch: super::ScratchDir::new()?,
            seen_tokens,
            token_watch,
            prometheus: None,
            system: None,
            procs: Vec::new(),
        })
    }
}

/// The restricted Pod Security profile's container settings.
fn restricted() -> serde_json::Value {
    json!({
        "allowPrivilegeEscalation": false,
        "readOnlyRootFilesystem": true,
        "runAsNonRoot": true,
        "capabilities": {"drop": ["ALL"]},
    })
}

async fn node_port(client: &Client, namespace: &str, name: &str) -> Result<i32> {
    let api: Api<Service> = Api::namespaced(client.clone(), namespace);
    let svc = api.get(name).await?;
    svc.spec
        .and_then(|s| s.ports)
        .and_then(|p| p.first().and_then(|p| p.node_port))
        .with_context(|| format!("Service {namespace}/{name} has no node port"))
}

/// GET a path of a Service port through the API server's service proxy
/// (`/api/v1/namespaces/NS/services/NAME:PORT/proxy/PATH`): what a scraper
/// reaches through the Service.
pub async fn get_through_service(
    client: &Client,
    namespace: &str,
    service: &str,
    port: &str,
    path: &str,
) -> Result<String> {
    let uri = format!(
        "/api/v1/namespaces/{namespace}/services/{service}:{port}/proxy/{}",
        path.trim_start_matches('/')
    );
    let req = http::Request::get(&uri).body(Vec::new())?;
    client
        .request_text(req)
        .await
        .with_context(|| format!("GET {uri}"))
}

/// The release's Pods.
pub async fn release_pods(client: &Client) -> Result<Vec<Pod>> {
    let api: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let lp = ListParams::default().labels(&format!("app.kubernetes.io/instance={RELEASE}"));
    Ok(api.list(&lp).await?.items)
}

/// What `helm install` promised, checked in the cluster: every container of the
/// release's Pod Ready with no restart (their startup, readiness and liveness
/// probes passed and keep passing), Karpenter core's leader election Lease held
/// by that Pod, the provider leading, and both `/metrics` pages served through
/// the release's Service.
pub async fn check_release(client: &Client) -> Result<()> {
    let pods = wait::until(
        "the release's Pod Running with every container ready",
        Duration::from_secs(180),
        Duration::from_millis(500),
        || async {
            let pods = release_pods(client).await?;
            let ready = !pods.is_empty()
                && pods.iter().all(|p| {
                    let st = p.status.as_ref();
                    let cs = st
                        .and_then(|s| s.container_statuses.clone())
                        .unwrap_or_default();
                    let init = st
                        .and_then(|s| s.init_container_statuses.clone())
                        .unwrap_or_default();
                    st.and_then(|s| s.phase.as_deref()) == Some("Running")
                        && !cs.is_empty()
                        && cs.iter().chain(init.iter()).all(|c| c.ready)
                });
            Ok(ready.then_some(pods))
        },
    )
    .await?;
    ensure!(
        pods.len() == 1,
        "expected one Pod of the release, got {}",
        pods.len()
    );
    let pod = &pods[0];
    let spec = pod.spec.as_ref().context("Pod spec")?;
    let provider = spec
        .init_containers
        .iter()
        .flatten()
        .find(|c| c.name == "provider")
        .context("no provider (sidecar) container in the release's Pod")?;
    ensure!(
        provider.startup_probe.is_some() && provider.liveness_probe.is_some(),
        "the provider container has no startup or liveness probe"
    );
    let bridge = spec
        .containers
        .iter()
        .find(|c| c.name == "controller")
        .context("no controller (bridge) container in the release's Pod")?;
    ensure!(
        bridge.readiness_probe.is_some() && bridge.liveness_probe.is_some(),
        "the bridge container has no readiness or liveness probe"
    );
    let status = pod.status.as_ref().context("Pod status")?;
    for c in status
        .container_statuses
        .iter()
        .flatten()
        .chain(status.init_container_statuses.iter().flatten())
    {
        ensure!(
            c.restart_count == 0,
            "container {} restarted {} times",
            c.name,
            c.restart_count
        );
    }
    let pod_name = pod.name_any();
    let leases: Api<Lease> = Api::namespaced(client.clone(), NAMESPACE);
    wait::until(
        &format!("the leader election Lease held by {pod_name}"),
        Duration::from_secs(60),
        Duration::from_millis(500),
        || {
            let (leases, pod_name) = (leases.clone(), pod_name.clone());
            async move {
                let holder = leases
                    .get_opt("karpenter-leader-election")
                    .await?
                    .and_then(|l| l.spec)
                    .and_then(|s| s.holder_identity)
                    .unwrap_or_default();
                Ok(holder.starts_with(&pod_name).then_some(()))
            }
        },
    )
    .await?;
    wait::until(
        "the provider's /metrics, through the Service, to say it leads",
        Duration::from_secs(60),
        Duration::from_millis(500),
        || async {
            let text = get_through_service(client, NAMESPACE, RELEASE, "http-provider", "/metrics")
                .await?;
            Ok(
                (super::metric_value(&text, "karpenter_scaleway_leader") == Some(1.0))
                    .then_some(()),
            )
        },
    )
    .await?;
    let core = get_through_service(client, NAMESPACE, RELEASE, "http-metrics", "/metrics").await?;
    ensure!(
        core.contains("controller_runtime_reconcile_total"),
        "Karpenter core's /metrics through the Service lacks controller_runtime_reconcile_total"
    );
    tracing::info!(
        pod = pod_name,
        "release checked: containers ready, no restart, Lease held, /metrics through the Service"
    );
    Ok(())
}

/// Every container log of the release's and emsim's Pods, into `dir`
/// (`<namespace>_<pod>_<container>.log`, the previous instance's too when
/// one restarted). Returns the files written.
pub async fn collect_logs(client: &Client, dir: &Path) -> Result<Vec<PathBuf>> {
    std::fs::create_dir_all(dir)?;
    let mut written = Vec::new();
    for ns in [NAMESPACE, SIMS_NAMESPACE] {
        let api: Api<Pod> = Api::namespaced(client.clone(), ns);
        for pod in api.list(&ListParams::default()).await?.items {
            let name = pod.name_any();
            let spec = pod.spec.clone().unwrap_or_default();
            let containers: Vec<String> = spec
                .init_containers
                .iter()
                .flatten()
                .chain(spec.containers.iter())
                .map(|c| c.name.clone())
                .collect();
            let restarted: BTreeMap<String, i32> = pod
                .status
                .iter()
                .flat_map(|s| {
                    s.container_statuses
                        .iter()
                        .flatten()
                        .chain(s.init_container_statuses.iter().flatten())
                })
                .map(|c| (c.name.clone(), c.restart_count))
                .collect();
            for c in containers {
                let mut text = String::new();
                if restarted.get(&c).copied().unwrap_or(0) > 0 {
                    let lp = LogParams {
                        container: Some(c.clone()),
                        previous: true,
                        ..Default::default()
                    };
                    if let Ok(prev) = api.logs(&name, &lp).await {
                        text.push_str(&prev);
                        text.push_str("\n----- restarted -----\n");
                    }
                }
                let lp = LogParams {
                    container: Some(c.clone()),
                    ..Default::default()
                };
                match api.logs(&name, &lp).await {
                    Ok(now) => text.push_str(&now),
                    Err(e) => text.push_str(&format!("(no log: {e})\n")),
                }
                let path = dir.join(format!("{ns}_{name}_{c}.log"));
                std::fs::write(&path, text)?;
                written.push(path);
            }
        }
    }
    Ok(written)
}

/// The last `lines` lines of every collected log, for a failure message.
pub fn log_tails(files: &[PathBuf], lines: usize) -> String {
    let mut out = String::new();
    for f in files {
        let text = std::fs::read_to_string(f).unwrap_or_default();
        let all: Vec<&str> = text.lines().collect();
        let tail = all[all.len().saturating_sub(lines)..].join("\n");
        out.push_str(&format!("\n===== {} =====\n{tail}\n", f.display()));
    }
    out
}

/// Fails unless `name`'s Deployment in `namespace` has all replicas available.
pub async fn wait_available(client: &Client, namespace: &str, name: &str) -> Result<()> {
    let api: Api<Deployment> = Api::namespaced(client.clone(), namespace);
    wait::until(
        &format!("Deployment {namespace}/{name} available"),
        Duration::from_secs(120),
        Duration::from_millis(500),
        || {
            let (api, name) = (api.clone(), name.to_string());
            async move {
                let d = api.get(&name).await?;
                let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
                let have = d.status.and_then(|s| s.available_replicas).unwrap_or(0);
                Ok((have >= want).then_some(()))
            }
        },
    )
    .await
}

#[cfg(test)]
mod tests {
    use super::*;

    fn vars(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> {
        let map: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        move |k| map.get(k).cloned()
    }

    #[test]
    fn without_kps_in_cluster_the_stack_is_local() {
        assert!(
            InCluster::from_vars(vars(&[("KPS_CHARTS", "/x")]))
                .unwrap()
                .is_none()
        );
    }

    #[test]
    fn oci_charts_need_a_version_and_install_over_plain_http() {
        let base = [
            ("KPS_IN_CLUSTER", "1"),
            ("KPS_KIND_NODE_IP", "172.18.0.2"),
            ("KPS_KIND_HOST_IP", "172.18.0.1"),
            ("KPS_CHARTS", "oci://127.0.0.1:5000/charts"),
            ("KPS_IMAGE_REGISTRY", "kps.local"),
            ("KPS_IMAGE_TAG", "0.1.0"),
            ("KPS_HELM", "/bin/helm"),
        ];
        let err = InCluster::from_vars(vars(&base)).unwrap_err().to_string();
        assert!(err.contains("KPS_CHART_VERSION"), "{err}");
        let mut with = base.to_vec();
        with.push(("KPS_CHART_VERSION", "0.1.0"));
        let ic = InCluster::from_vars(vars(&with)).unwrap().unwrap();
        assert_eq!(
            ic.charts.install_args("karpenter-crd"),
            [
                "oci://127.0.0.1:5000/charts/karpenter-crd",
                "--version",
                "0.1.0",
                "--plain-http"
            ]
        );
        assert_eq!(ic.api_endpoint(), "https://172.18.0.2:6443");
        assert_eq!(ic.image("emsim"), "kps.local/emsim:0.1.0");
    }

    #[test]
    fn directory_charts_install_from_the_path() {
        let src = ChartSource::Directory(PathBuf::from("/repo/charts"));
        assert_eq!(
            src.install_args("karpenter-scaleway"),
            ["/repo/charts/karpenter-scaleway"]
        );
    }

    #[test]
    fn chart_values_run_talos_sim_beside_the_provider_read_only() {
        let ic = InCluster {
            node_ip: "172.18.0.2".parse().unwrap(),
            host_ip: "172.18.0.1".parse().unwrap(),
            charts: ChartSource::Directory("/c".into()),
            image_registry: "kps.local".into(),
            image_tag: "0.1.0".into(),
            helm: "/bin/helm".into(),
        };
        let mut opts = StackOptions::for_test("unit-in-cluster").unwrap();
        opts.provider_args = vec!["--standby-interval=1s".into()];
        let v: serde_json::Value =
            serde_yaml_ng::from_str(&ic.chart_values(&opts).unwrap()).unwrap();
        assert_eq!(
            v["image"]["provider"]["repository"],
            "kps.local/karpenter-scaleway"
        );
        assert_eq!(v["provider"]["extraArgs"][0], "--standby-interval=1s");
        let sidecar = &v["extraContainers"][0];
        assert_eq!(sidecar["image"], "kps.local/talos-sim:0.1.0");
        assert_eq!(sidecar["securityContext"]["readOnlyRootFilesystem"], true);
        assert!(
            sidecar["args"]
                .as_array()
                .unwrap()
                .iter()
                .any(|a| a == &json!(ic.emsim_service_url()))
        );
        opts.bridge_env.push(("X".into(), "1".into()));
        assert!(ic.chart_values(&opts).is_err());
        let _ = std::fs::remove_dir_all(&opts.work_dir);
    }
}
