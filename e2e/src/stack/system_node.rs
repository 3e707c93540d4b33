//! A system node for the harness's own pods: a Node (`kps-system`, tainted
//! `CriticalAddonsOnly=true:NoSchedule` as the system nodes of a real
//! cluster are) and a kubelet for it whose containers are host processes.
//!
//! With it the chart's Deployment lives in the cluster as on a real one: the
//! controller-manager makes its ReplicaSet and Pods, the scheduler binds them
//! here, and this kubelet starts each Pod's containers (the provider sidecar
//! first, then Karpenter core) with the environment, arguments and
//! ServiceAccount the Pod has, reports them Running and Ready with their
//! restart counts, restarts a container that exits, and stops them within the
//! Pod's grace period when the Pod is deleted. So a rollout (a changed
//! setting, `kubectl rollout restart`) starts new processes with the new Pod
//! and stops the old ones, a crash shows as a restart, and the leader
//! election Lease is held by a real Pod's name: what Karpenter core's own e2e
//! suites read and patch (docs/conformance.md).
//!
//! What differs from a kubelet: the containers share the host's network (the
//! ports are moved to free loopback ports, see [`chart::container_process`]),
//! the Pod's IP is 127.0.0.1, and only `emptyDir` volumes, HTTP startup probes
//! and the harness's own binaries are supported.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Container, Node, Pod};
use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams, PostParams, Preconditions};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::sync::watch;

use super::Binaries;
use super::chart::{self, ContainerProcess, PodContext};
use super::replica::http_get;
use crate::procs::Proc;

/// The Helm release (and, with `fullnameOverride`, the Deployment) of the
/// chart on a system node: `kube-system/karpenter`, where Karpenter's own
/// chart and core's e2e suites have it.
pub const RELEASE: &str = "karpenter";
/// The system node's name.
pub const NODE: &str = "kps-system";
/// The taint every system node of the suites' clusters carries (core's
/// e2e suites require every Node to be tainted).
pub const TAINT_KEY: &str = "CriticalAddonsOnly";
const HEARTBEAT: Duration = Duration::from_secs(10);
/// A kubelet's mark on the Pod it publishes for a static Pod it runs.
pub const MIRROR_ANNOTATION: &str = "kubernetes.io/config.mirror";
/// Where core's kind cluster mounts the scheduler's configuration (what
/// core's DefaultTopologySpreadConstraints specs look for in the arguments
/// of the `component=kube-scheduler` Pod).
pub const SCHEDULER_CONFIG_MOUNT: &str = "/etc/kubernetes/karpenter-scheduler-config";
const FIELD_MANAGER: &str = "kps-system-kubelet";

/// What the pods' kubelet needs from the stack.
pub struct Inputs {
    pub client: Client,
    pub bins: Binaries,
    /// Scratch space (short paths: Unix sockets live in `emptyDir`s).
    pub scratch: PathBuf,
    pub logs: PathBuf,
    pub server_url: String,
    pub ca_pem: String,
    /// The node's address and kubelet endpoint instead of 127.0.0.1 and
    /// none ([`NodeAddress`]).
    pub address: Option<NodeAddress>,
    /// Container images run by a binary of their own (beside the chart's
    /// containers, run by name): core's KWOK provider in `kps-perf`.
    pub images: BTreeMap<String, PathBuf>,
}

/// A non-loopback address for the node and one for its pods (the API
/// server proxies to a Pod only at one, see [`crate::netns`]), the pods'
/// in a network namespace of their own, where each pod's declared container
/// ports are forwarded to their loopback stand-ins (so that they take no port
/// of the host's: core's suites bind the host's wildcard :8080 themselves),
/// and the port of a kubelet endpoint serving port-forwards for the node
/// (KWOK's, in `kps-perf`).
#[derive(Debug, Clone)]
pub struct NodeAddress {
    pub ip: std::net::Ipv4Addr,
    pub kubelet_port: u16,
    pub pod_ip: std::net::Ipv4Addr,
    /// The network namespace `pod_ip` lives in (`/run/netns/<name>`).
    pub pod_netns: PathBuf,
}

/// The running system node; its pods' processes stop when it is stopped or
/// dropped.
pub struct SystemNode {
    stop: watch::Sender<bool>,
    task: Option<tokio::task::JoinHandle<()>>,
    /// ServiceAccount tokens handed to the pods (credentials the logs must
    /// not show).
    tokens: Arc<Mutex<Vec<String>>>,
}

impl SystemNode {
    /// Registers the Node, reports it Ready and starts running the pods
    /// bound to it.
    pub async fn start(inputs: Inputs) -> Result<SystemNode> {
        let nodes: Api<Node> = Api::all(inputs.client.clone());
        if nodes.get_opt(NODE).await?.is_none() {
            nodes.create(&PostParams::default(), &node()).await?;
        }
        report_ready(&inputs.client, inputs.address.as_ref()).await?;
        let (stop, stopped) = watch::channel(false);
        let tokens = Arc::new(Mutex::new(Vec::new()));
        let ctx = Arc::new(Ctx {
            inputs,
            tokens: tokens.clone(),
        });
        let task = tokio::spawn(run(ctx, stopped));
        Ok(SystemNode {
            stop,
            task: Some(task),
            tokens,
        })
    }

    pub fn tokens(&self) -> Vec<String> {
        self.tokens
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Stops every pod's processes (as a node shutting down: no grace).
    pub async fn stop(mut self) {
        let _ = self.stop.send(true);
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for SystemNode {
    fn drop(&mut self) {
        let _ = self.stop.send(true);
    }
}

struct Ctx {
    inputs: Inputs,
    tokens: Arc<Mutex<Vec<String>>>,
}

fn node() -> Node {
    serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": NODE,
            "labels": {
                "kubernetes.io/hostname": NODE,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "node-role.kubernetes.io/control-plane": "",
            },
        },
        "spec": {"taints": [{"key": TAINT_KEY, "value": "true", "effect": "NoSchedule"}]},
    }))
    .expect("a valid Node")
}

/// Publishes the mirror Pod of the control plane's kube-scheduler, run with
/// the KubeSchedulerConfiguration in `config_dir`, on the system node, as a
/// kubelet publishes a static Pod: `kube-system/kube-scheduler-kps-system`,
/// labelled `component=kube-scheduler`, its configuration directory a
/// hostPath volume mounted where core's kind cluster mounts it, Running.
pub async fn publish_scheduler_mirror(client: &Client, config_dir: &std::path::Path) -> Result<()> {
    let pods: Api<Pod> = Api::namespaced(client.clone(), "kube-system");
    let name = format!("kube-scheduler-{NODE}");
    let pod: Pod = serde_json::from_value(json!({
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "kube-system",
            "labels": {"component": "kube-scheduler", "tier": "control-plane"},
            "annotations": {MIRROR_ANNOTATION: "kps-e2e-harness"},
        },
        "spec": {
            "nodeName": NODE,
            "tolerations": [{"operator": "Exists"}],
            "containers": [{
                "name": "kube-scheduler",
                "image": "registry.k8s.io/kube-scheduler",
                "command": [
                    "kube-scheduler",
                    format!("--config={SCHEDULER_CONFIG_MOUNT}/kube-scheduler-config.yaml"),
                ],
                "volumeMounts": [{"name": "karpenter-scheduler-config", "mountPath": SCHEDULER_CONFIG_MOUNT, "readOnly": true}],
            }],
            "volumes": [{
                "name": "karpenter-scheduler-config",
                "hostPath": {"path": config_dir.to_string_lossy(), "type": "Directory"},
            }],
        },
    }))?;
    if pods.get_opt(&name).await?.is_none() {
        pods.create(&PostParams::default(), &pod).await?;
    }
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let status = json!({"status": {
        "phase": "Running",
        "hostIP": "127.0.0.1",
        "podIP": "127.0.0.1",
        "startTime": now,
        "conditions": [
            {"type": "Initialized", "status": "True", "lastTransitionTime": now},
            {"type": "Ready", "status": "True", "lastTransitionTime": now},
            {"type": "ContainersReady", "status": "True", "lastTransitionTime": now},
            {"type": "PodScheduled", "status": "True", "lastTransitionTime": now},
        ],
        "containerStatuses": [{
            "name": "kube-scheduler",
            "image": "registry.k8s.io/kube-scheduler",
            "imageID": "",
            "ready": true,
            "started": true,
            "restartCount": 0,
            "state": {"running": {"startedAt": now}},
        }],
    }});
    patch_status(&pods, &name, &status).await
}

async fn report_ready(client: &Client, address: Option<&NodeAddress>) -> Result<()> {
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let nodes: Api<Node> = Api::all(client.clone());
    let ip = address.map_or("127.0.0.1".to_string(), |a| a.ip.to_string());
    let kubelet_port = address.map_or(0, |a| a.kubelet_port);
    let status = json!({"status": {
        "capacity": {"cpu": "4", "memory": "8Gi", "pods": "110"},
        "allocatable": {"cpu": "4", "memory": "8Gi", "pods": "110"},
        // With an address, no Hostname: the API server prefers it for
        // reaching a kubelet, and nothing resolves the node's name.
        "addresses": match address {
            Some(_) => json!([{"type": "InternalIP", "address": ip}]),
            None => json!([{"type": "InternalIP", "address": ip}, {"type": "Hostname", "address": NODE}]),
        },
        "daemonEndpoints": {"kubeletEndpoint": {"Port": kubelet_port}},
        "conditions": [{
            "type": "Ready", "status": "True", "reason": "KubeletReady",
            "message": "the harness's kubelet for its own pods",
            "lastHeartbeatTime": now, "lastTransitionTime": now,
        }],
        "nodeInfo": {
            "architecture": "amd64", "operatingSystem": "linux", "osImage": "the e2e harness",
            "kernelVersion": "", "kubeletVersion": "", "kubeProxyVersion": "",
            "containerRuntimeVersion": "host-process://", "machineID": "", "systemUUID": "",
            "bootID": "kps-system",
        },
    }});
    nodes
        .patch_status(NODE, &PatchParams::default(), &Patch::Strategic(status))
        .await?;
    let leases: Api<Lease> = Api::namespaced(client.clone(), "kube-node-lease");
    let lease = json!({
        "apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
        "metadata": {"name": NODE, "namespace": "kube-node-lease"},
        "spec": {"holderIdentity": NODE, "leaseDurationSeconds": 40,
                 "renewTime": k8s_openapi::jiff::Timestamp::now().strftime("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()},
    });
    leases
        .patch(
            NODE,
            &PatchParams::apply(FIELD_MANAGER).force(),
            &Patch::Apply(&lease),
        )
        .await?;
    Ok(())
}

/// The pods' terminations: uid -> the grace period they were given.
type Terminations = BTreeMap<String, watch::Sender<Option<Duration>>>;

async fn run(ctx: Arc<Ctx>, mut stopped: watch::Receiver<bool>) {
    let pods: Api<Pod> = Api::all(ctx.inputs.client.clone());
    let mut running: Terminations = BTreeMap::new();
    let mut tasks = tokio::task::JoinSet::new();
    let mut heartbeat = tokio::time::interval(HEARTBEAT);
    let mut sync = tokio::time::interval(Duration::from_millis(500));
    loop {
        tokio::select! {
            _ = stopped.changed() => break,
            _ = heartbeat.tick() => {
                if let Err(e) = report_ready(&ctx.inputs.client, ctx.inputs.address.as_ref()).await {
                    tracing::warn!(error = %format!("{e:#}"), "system node heartbeat failed");
                }
            }
            _ = sync.tick() => {
                let list = pods
                    .list(&ListParams::default().fields(&format!("spec.nodeName={NODE}")))
                    .await;
                let list = match list {
                    Ok(l) => l.items,
                    Err(e) => {
                        tracing::warn!(error = %e, "system node: listing its pods failed");
                        continue;
                    }
                };
                // A mirror Pod stands for a process run elsewhere (the
                // control plane's scheduler): nothing to run here.
                for pod in list.into_iter().filter(|p| !p.annotations().contains_key(MIRROR_ANNOTATION)) {
                    let uid = pod.uid().unwrap_or_default();
                    let grace = pod.metadata.deletion_timestamp.as_ref().map(|_| {
                        Duration::from_secs(pod.metadata.deletion_grace_period_seconds.unwrap_or(30).max(0) as u64)
                    });
                    match running.get(&uid) {
                        Some(tx) => {
                            if grace.is_some() && tx.borrow().is_none() {
                                let _ = tx.send(grace);
                            }
                        }
                        None => {
                            let (tx, rx) = watch::channel(grace);
                            running.insert(uid, tx);
                            tasks.spawn(run_pod(ctx.clone(), pod, rx));
                        }
                    }
                }
                while let Some(done) = tasks.try_join_next() {
                    if let Ok(uid) = done {
                        running.remove(&uid);
                    }
                }
            }
        }
    }
    // Shutdown: every pod's processes stop at once.
    for tx in running.values() {
        let _ = tx.send(Some(Duration::ZERO));
    }
    while tasks.join_next().await.is_some() {}
}

/// One container, running.
struct Running {
    spec: ContainerProcess,
    /// The pod's name: the containers' host name, as in a pod.
    pod_name: String,
    proc_name: String,
    proc: Option<Proc>,
    restarts: i32,
    started_at: String,
    started: bool,
}

/// Runs the pod's containers until it is deleted; returns its uid.
async fn run_pod(
    ctx: Arc<Ctx>,
    pod: Pod,
    mut terminate: watch::Receiver<Option<Duration>>,
) -> String {
    let uid = pod.uid().unwrap_or_default();
    let name = pod.name_any();
    let namespace = pod.namespace().unwrap_or_default();
    let pods: Api<Pod> = Api::namespaced(ctx.inputs.client.clone(), &namespace);
    let mut containers = match resolve(&ctx, &pod).await {
        Ok(c) => c,
        Err(e) => {
            // Left Pending, as a kubelet leaves a pod it cannot set up.
            tracing::error!(pod = %name, error = %format!("{e:#}"), "system node: cannot run the pod");
            wait_terminated(&mut terminate).await;
            delete(&pods, &name, &uid).await;
            return uid;
        }
    };
    let start_time = k8s_openapi::jiff::Timestamp::now().to_string();
    let ips = ctx
        .inputs
        .address
        .as_ref()
        .map_or(("127.0.0.1".to_string(), "127.0.0.1".to_string()), |a| {
            (a.ip.to_string(), a.pod_ip.to_string())
        });
    // On a pod address, each declared port reaches its stand-in there, as
    // it would in the pod's network namespace (held until the pod ends).
    let _forwarders = match &ctx.inputs.address {
        Some(a) => forward_ports(&pod, &containers, a.pod_ip, &a.pod_netns).await,
        None => Vec::new(),
    };
    // Sidecars first, each started (probe passed) before the next, then
    // the main containers, as the kubelet starts native sidecars.
    for i in 0..containers.len() {
        if terminate.borrow().is_some() {
            break;
        }
        if let Err(e) = start(&ctx, &mut containers[i]) {
            tracing::error!(pod = %name, error = %format!("{e:#}"), "system node: starting a container failed");
            continue;
        }
        wait_started(&mut containers[i], &mut terminate).await;
        let _ = patch_status(&pods, &name, &status(&pod, &containers, &start_time, &ips)).await;
    }
    loop {
        if terminate.borrow().is_some() {
            break;
        }
        let mut changed = false;
        for c in containers.iter_mut() {
            let exited = c.proc.as_mut().is_some_and(|p| !p.is_running());
            if exited {
                tracing::warn!(pod = %name, container = %c.spec.container, "system node: container exited; restarting it");
                c.restarts += 1;
                c.started = false;
                changed = true;
                if let Err(e) = start(&ctx, c) {
                    tracing::error!(pod = %name, error = %format!("{e:#}"), "system node: restarting a container failed");
                }
            } else if !c.started && probe_passes(&c.spec).await {
                c.started = true;
                changed = true;
            }
        }
        if changed {
            let _ = patch_status(&pods, &name, &status(&pod, &containers, &start_time, &ips)).await;
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(500)) => {}
            _ = terminate.changed() => {}
        }
    }
    let grace = terminate.borrow().unwrap_or_default();
    // Main containers first, then the sidecars in reverse order.
    let procs: Vec<Proc> = containers
        .iter_mut()
        .rev()
        .filter_map(|c| c.proc.take())
        .collect();
    let _ = tokio::task::spawn_blocking(move || {
        for mut p in procs {
            p.stop(grace.max(Duration::from_millis(100)));
        }
    })
    .await;
    delete(&pods, &name, &uid).await;
    uid
}

/// A forwarder from `ip:<containerPort>` to the loopback stand-in of each
/// named port of the pod's containers; a port another pod holds is logged
/// and left out.
async fn forward_ports(
    pod: &Pod,
    containers: &[Running],
    ip: std::net::Ipv4Addr,
    netns: &std::path::Path,
) -> Vec<crate::perf::Forwarder> {
    let mut pairs = Vec::new();
    if let Some(spec) = &pod.spec {
        for c in spec
            .init_containers
            .iter()
            .flatten()
            .chain(&spec.containers)
        {
            let Some(running) = containers.iter().find(|r| r.spec.container == c.name) else {
                continue;
            };
            for p in c.ports.iter().flatten() {
                if let Some(stand_in) = p.name.as_ref().and_then(|n| running.spec.ports.get(n)) {
                    pairs.push((
                        std::net::SocketAddr::from((ip, p.container_port as u16)),
                        std::net::SocketAddr::from(([127, 0, 0, 1], *stand_in)),
                    ));
                }
            }
        }
    }
    let name = pod.name_any();
    let mut out = Vec::new();
    for (listen, target) in pairs {
        match crate::perf::Forwarder::start_in(Some(netns), listen, target).await {
            Ok(f) => out.push(f),
            Err(e) => tracing::warn!(pod = %name, %listen, error = %format!("{e:#}"),
                "system node: cannot forward a container port"),
        }
    }
    out
}

async fn wait_terminated(terminate: &mut watch::Receiver<Option<Duration>>) {
    while terminate.borrow().is_none() {
        if terminate.changed().await.is_err() {
            return;
        }
    }
}

async fn delete(pods: &Api<Pod>, name: &str, uid: &str) {
    let params = DeleteParams {
        grace_period_seconds: Some(0),
        preconditions: Some(Preconditions {
            uid: Some(uid.to_string()),
            resource_version: None,
        }),
        ..Default::default()
    };
    match pods.delete(name, &params).await {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
        Err(e) => tracing::warn!(pod = %name, error = %e, "system node: deleting the pod failed"),
    }
}

/// The pod's containers as processes: native sidecars, then containers.
async fn resolve(ctx: &Ctx, pod: &Pod) -> Result<Vec<Running>> {
    let spec = pod.spec.as_ref().context("pod without spec")?;
    let name = pod.name_any();
    let namespace = pod.namespace().unwrap_or_default();
    ensure!(
        spec.init_containers
            .iter()
            .flatten()
            .all(|c| c.restart_policy.as_deref() == Some("Always")),
        "the pod has an init container that is not a sidecar"
    );
    let short = pod
        .uid()
        .unwrap_or_default()
        .chars()
        .take(8)
        .collect::<String>();
    let dir = ctx.inputs.scratch.join(&short);
    std::fs::create_dir_all(&dir)?;
    let volume_dirs = chart::empty_dirs(spec, &dir)?;
    let sa = spec
        .service_account_name
        .clone()
        .unwrap_or_else(|| "default".into());
    let kubeconfig = dir.join("kubeconfig");
    let token = chart::service_account_kubeconfig(
        &ctx.inputs.client,
        &namespace,
        &sa,
        &ctx.inputs.server_url,
        &ctx.inputs.ca_pem,
        &kubeconfig,
    )
    .await?;
    ctx.tokens
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .push(token);
    let pod_ctx = PodContext {
        client: &ctx.inputs.client,
        namespace: &namespace,
        pod_name: &name,
        spec,
        volume_dirs: &volume_dirs,
    };
    let all: Vec<&Container> = spec
        .init_containers
        .iter()
        .flatten()
        .chain(&spec.containers)
        .collect();
    let mut out = Vec::new();
    for c in all {
        let program = match c.image.as_ref().and_then(|i| ctx.inputs.images.get(i)) {
            Some(path) => path.clone(),
            None => program(&ctx.inputs.bins, &c.name)?,
        };
        let mut p = chart::container_process(&pod_ctx, c, program).await?;
        p.set_env("KUBECONFIG", &kubeconfig.display().to_string());
        out.push(Running {
            pod_name: name.clone(),
            proc_name: format!("{name}.{}", c.name),
            spec: p,
            proc: None,
            restarts: 0,
            started_at: String::new(),
            started: false,
        });
    }
    Ok(out)
}

/// The binary standing in for a container of the chart's pod.
pub fn program(bins: &Binaries, container: &str) -> Result<PathBuf> {
    Ok(match container {
        "provider" => bins.rust_bin_dir.join("karpenter-scaleway"),
        "controller" => bins.bridge.clone(),
        other => bail!("the pod has a container {other} the harness cannot run"),
    })
}

fn start(ctx: &Ctx, c: &mut Running) -> Result<()> {
    let mut cmd = with_hostname(&c.spec.command(), &c.pod_name);
    let proc = Proc::spawn(&c.proc_name, &mut cmd, &ctx.inputs.logs)?;
    c.proc = Some(proc);
    c.started_at = k8s_openapi::jiff::Timestamp::now().to_string();
    Ok(())
}

/// `cmd` run with the pod's name as its host name, as a container's is: in
/// a UTS namespace of its own (`unshare --uts`, then `hostname`, then the
/// program in the same process). Karpenter core's leader election names its
/// Lease holder after the host name, and core's e2e suites look for a Pod of
/// that name.
pub fn with_hostname(cmd: &std::process::Command, hostname: &str) -> std::process::Command {
    let mut out = std::process::Command::new("/usr/bin/unshare");
    out.args([
        "--uts",
        "--",
        "/bin/sh",
        "-c",
        r#"/usr/bin/hostname "$0" && exec "$@""#,
        hostname,
    ])
    .arg(cmd.get_program())
    .args(cmd.get_args())
    .env_clear();
    for (k, v) in cmd.get_envs() {
        if let Some(v) = v {
            out.env(k, v);
        }
    }
    out
}

async fn probe_passes(c: &ContainerProcess) -> bool {
    let Some(probe) = &c.startup_probe else {
        return true;
    };
    let url = format!("http://127.0.0.1:{}{}", probe.port, probe.path);
    matches!(http_get(&url).await, Ok((status, _)) if (200..400).contains(&status))
}

/// Waits until the container's startup probe passes (or it exits, or the
/// pod is deleted).
async fn wait_started(c: &mut Running, terminate: &mut watch::Receiver<Option<Duration>>) {
    loop {
        if terminate.borrow().is_some() || !c.proc.as_mut().is_some_and(|p| p.is_running()) {
            return;
        }
        if probe_passes(&c.spec).await {
            c.started = true;
            return;
        }
        tokio::select! {
            _ = tokio::time::sleep(Duration::from_millis(200)) => {}
            _ = terminate.changed() => {}
        }
    }
}

fn container_status(c: &Running) -> serde_json::Value {
    let state = if c.proc.is_some() && !c.started_at.is_empty() {
        json!({"running": {"startedAt": c.started_at}})
    } else {
        json!({"waiting": {"reason": "PodInitializing"}})
    };
    json!({
        "name": c.spec.container,
        "image": "",
        "imageID": "",
        "containerID": format!("host-process://{}", c.proc.as_ref().map(|p| p.pid()).unwrap_or(0)),
        "ready": c.started,
        "started": c.started,
        "restartCount": c.restarts,
        "state": state,
    })
}

/// `ips`: the node's (host) and the pod's.
fn status(
    pod: &Pod,
    containers: &[Running],
    start_time: &str,
    (host_ip, ip): &(String, String),
) -> serde_json::Value {
    let sidecars = pod
        .spec
        .as_ref()
        .and_then(|s| s.init_containers.as_ref())
        .map_or(0, Vec::len);
    let (init, main) = containers.split_at(sidecars.min(containers.len()));
    let ready = containers.iter().all(|c| c.started && c.proc.is_some());
    let initialized = init.iter().all(|c| c.started);
    let now = k8s_openapi::jiff::Timestamp::now().to_string();
    let cond = |t: &str, ok: bool| json!({"type": t, "status": if ok { "True" } else { "False" }, "lastTransitionTime": now});
    json!({"status": {
        "phase": "Running",
        "hostIP": host_ip,
        "hostIPs": [{"ip": host_ip}],
        "podIP": ip,
        "podIPs": [{"ip": ip}],
        "startTime": start_time,
        "conditions": [
            cond("PodScheduled", true),
            cond("Initialized", initialized),
            cond("ContainersReady", ready),
            cond("Ready", ready),
        ],
        "initContainerStatuses": init.iter().map(container_status).collect::<Vec<_>>(),
        "containerStatuses": main.iter().map(container_status).collect::<Vec<_>>(),
    }})
}

async fn patch_status(pods: &Api<Pod>, name: &str, status: &serde_json::Value) -> Result<()> {
    match pods
        .patch_status(name, &PatchParams::default(), &Patch::Merge(status))
        .await
    {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(e) => {
            let text: String = e.to_string().chars().take(300).collect();
            tracing::warn!(pod = %name, error = %text, "system node: pod status update failed");
            Err(e.into())
        }
    }
}
