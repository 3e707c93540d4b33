//! Pure computations of the kubelet stand-in: the Node it registers (or the
//! patch that adopts an existing one), its status, its Lease and the status of
//! the pods it "runs". No I/O here.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::api::core::v1::{
    ContainerState, ContainerStateRunning, ContainerStateTerminated, ContainerStatus,
    DaemonEndpoint, HostIP, Node, NodeAddress, NodeCondition, NodeDaemonEndpoints, NodeSpec,
    NodeStatus, NodeSystemInfo, Pod, PodCondition, PodIP, PodStatus, Taint as KubeTaint,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, OwnerReference, Time};
use k8s_openapi::jiff::Timestamp;
use serde_json::json;
use sha2::{Digest, Sha256};

use crate::image::hex;
use crate::machine_config::{NodeConfig, Taint};

pub const LEASE_NAMESPACE: &str = "kube-node-lease";
pub const LEASE_DURATION_SECONDS: i32 = 40;
const CONTAINER_RUNTIME: &str = "containerd://2.1.4";
const KERNEL_VERSION: &str = "6.12.57-talos";
/// The extended resource NVIDIA's device plugin advertises.
pub const NVIDIA_GPU: &str = "nvidia.com/gpu";

/// What the kubelet knows about its machine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeFacts {
    pub name: String,
    pub server_id: String,
    pub address: Ipv4Addr,
    /// GOARCH of the installed image (`amd64`).
    pub arch: String,
    pub talos_version: String,
    pub kubelet_version: String,
    pub threads: u32,
    pub memory_bytes: u64,
    pub disk_bytes: u64,
    /// Reported as `nvidia.com/gpu`.
    pub gpus: u32,
    pub boot_id: String,
}

/// The node name: the configured hostname, or the kind of name Talos makes
/// up when none is set.
pub fn node_name(cfg: &NodeConfig, server_id: &str) -> String {
    cfg.hostname.clone().unwrap_or_else(|| {
        let h = hex(&Sha256::digest(server_id.as_bytes()));
        format!("talos-{}-{}", &h[..3], &h[3..6])
    })
}

/// The kubelet version: the tag of `machine.kubelet.image` when set.
pub fn kubelet_version_from_image(image: &str) -> Option<String> {
    let tag = image.rsplit_once(':')?.1;
    (tag.starts_with('v') && !tag.contains('/'))
        .then(|| tag.split('@').next().unwrap_or(tag).to_string())
}

pub fn labels(cfg: &NodeConfig, facts: &NodeFacts) -> BTreeMap<String, String> {
    let mut labels = cfg.node_labels.clone();
    for (k, v) in [
        ("kubernetes.io/hostname", facts.name.as_str()),
        ("kubernetes.io/arch", facts.arch.as_str()),
        ("kubernetes.io/os", "linux"),
        ("beta.kubernetes.io/arch", facts.arch.as_str()),
        ("beta.kubernetes.io/os", "linux"),
    ] {
        labels.insert(k.to_string(), v.to_string());
    }
    labels
}

fn annotations(cfg: &NodeConfig) -> BTreeMap<String, String> {
    let mut annotations = cfg.node_annotations.clone();
    annotations.insert("node.alpha.kubernetes.io/ttl".into(), "0".into());
    annotations.insert(
        "volumes.kubernetes.io/controller-managed-attach-detach".into(),
        "true".into(),
    );
    annotations
}

fn kube_taint(t: &Taint) -> KubeTaint {
    KubeTaint {
        key: t.key.clone(),
        value: (!t.value.is_empty()).then(|| t.value.clone()),
        effect: t.effect.clone(),
        time_added: None,
    }
}

/// The Node the kubelet creates, with its `registerWithTaints`.
///
/// `machine.nodeTaints` are not part of it: Talos applies them after
/// registration with the kubelet's credentials, which the NodeRestriction
/// admission plugin refuses on a worker ("node ... is not allowed to modify
/// taints"); see `taints_not_applied`.
pub fn new_node(cfg: &NodeConfig, facts: &NodeFacts) -> Node {
    let taints: Vec<KubeTaint> = cfg.register_with_taints.iter().map(kube_taint).collect();
    Node {
        metadata: ObjectMeta {
            name: Some(facts.name.clone()),
            labels: Some(labels(cfg, facts)),
            annotations: Some(annotations(cfg)),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            provider_id: cfg.provider_id.clone(),
            taints: (!taints.is_empty()).then_some(taints),
            ..Default::default()
        }),
        status: None,
    }
}

/// The `machine.nodeTaints` a registered Node lacks: what Talos would try
/// and fail to add on a worker, since a node may not change its own taints.
pub fn taints_not_applied(node: &Node, cfg: &NodeConfig) -> Vec<String> {
    let have = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    cfg.node_taints
        .iter()
        .filter(|t| !have.iter().any(|h| h.key == t.key && h.effect == t.effect))
        .map(|t| format!("{}:{}", t.key, t.effect))
        .collect()
}

/// The merge patch with which the kubelet adopts a Node registered ahead of
/// it (by the provider), or why it cannot. Taints are left alone: the
/// registration taints belong to whoever set them, and NodeRestriction
/// forbids a node to change its own.
pub fn adopt_patch(
    existing: &Node,
    cfg: &NodeConfig,
    facts: &NodeFacts,
) -> Result<serde_json::Value, String> {
    let spec = existing.spec.clone().unwrap_or_default();
    let current = spec.provider_id.clone().filter(|p| !p.is_empty());
    if let (Some(have), Some(want)) = (&current, &cfg.provider_id)
        && have != want
    {
        return Err(format!(
            "node {} already exists with providerID {have}, this machine is {want}",
            facts.name
        ));
    }
    let mut patch = json!({
        "metadata": { "labels": labels(cfg, facts), "annotations": annotations(cfg) },
    });
    if current.is_none()
        && let Some(id) = &cfg.provider_id
    {
        patch["spec"] = json!({ "providerID": id });
    }
    Ok(patch)
}

/// Kubernetes quantity to milli-units (`100m` → 100, `1Ki` → 1_024_000).
pub fn parse_milli(q: &str) -> Option<u128> {
    let split = q
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(q.len());
    let (number, suffix) = q.split_at(split);
    let value: f64 = number.parse().ok()?;
    let mult: f64 = match suffix {
        "m" => 1e-3,
        "" => 1.0,
        "k" => 1e3,
        "M" => 1e6,
        "G" => 1e9,
        "T" => 1e12,
        "Ki" => 1024.0,
        "Mi" => 1024f64.powi(2),
        "Gi" => 1024f64.powi(3),
        "Ti" => 1024f64.powi(4),
        _ => return None,
    };
    Some((value * mult * 1000.0).round() as u128)
}

/// A reservation or eviction threshold in the resource's unit; `N%` is a
/// share of `capacity`.
fn amount(map: &BTreeMap<String, String>, key: &str, capacity: u128) -> u128 {
    match map.get(key) {
        Some(v) if v.ends_with('%') => {
            // The kubelet truncates (int64 of a float product).
            let pct: f64 = v.trim_end_matches('%').parse().unwrap_or(0.0);
            (capacity as f64 * pct / 100.0) as u128
        }
        Some(v) => parse_milli(v).map(|m| m / 1000).unwrap_or(0),
        None => 0,
    }
}

fn talos_system_reserved() -> BTreeMap<String, String> {
    [
        ("cpu", "50m"),
        ("memory", "384Mi"),
        ("ephemeral-storage", "256Mi"),
        ("pid", "100"),
    ]
    .into_iter()
    .map(|(k, v)| (k.to_string(), v.to_string()))
    .collect()
}

fn kubelet_eviction_hard() -> BTreeMap<String, String> {
    [("memory.available", "100Mi"), ("nodefs.available", "10%")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

/// Capacity from the offer's hardware; allocatable after Talos' default
/// system reservation (or the configured one), kube reservation and hard
/// eviction thresholds, as the kubelet computes it.
pub fn resources(
    cfg: &NodeConfig,
    facts: &NodeFacts,
) -> (BTreeMap<String, Quantity>, BTreeMap<String, Quantity>) {
    let system = if cfg.system_reserved.is_empty() {
        talos_system_reserved()
    } else {
        cfg.system_reserved.clone()
    };
    let eviction = if cfg.eviction_hard.is_empty() {
        kubelet_eviction_hard()
    } else {
        cfg.eviction_hard.clone()
    };
    let kube = &cfg.kube_reserved;
    let pods = cfg.max_pods.unwrap_or(110);

    let cpu_m = u128::from(facts.threads) * 1000;
    let cpu_reserved = [&system, kube]
        .iter()
        .map(|m| m.get("cpu").and_then(|v| parse_milli(v)).unwrap_or(0))
        .sum::<u128>();
    let memory = u128::from(facts.memory_bytes);
    let memory_alloc = memory
        .saturating_sub(amount(&system, "memory", memory))
        .saturating_sub(amount(kube, "memory", memory))
        .saturating_sub(amount(&eviction, "memory.available", memory));
    let disk = u128::from(facts.disk_bytes);
    let disk_alloc = disk
        .saturating_sub(amount(&system, "ephemeral-storage", disk))
        .saturating_sub(amount(kube, "ephemeral-storage", disk))
        .saturating_sub(amount(&eviction, "nodefs.available", disk));

    let q = |s: String| Quantity(s);
    let capacity = BTreeMap::from([
        ("cpu".to_string(), q(facts.threads.to_string())),
        ("memory".to_string(), q(format!("{}Ki", memory / 1024))),
        (
            "ephemeral-storage".to_string(),
            q(format!("{}Ki", disk / 1024)),
        ),
        ("pods".to_string(), q(pods.to_string())),
        ("hugepages-1Gi".to_string(), q("0".into())),
        ("hugepages-2Mi".to_string(), q("0".into())),
    ]);
    let cpu_alloc = cpu_m.saturating_sub(cpu_reserved);
    let allocatable = BTreeMap::from([
        (
            "cpu".to_string(),
            q(if cpu_alloc % 1000 == 0 {
                (cpu_alloc / 1000).to_string()
            } else {
                format!("{cpu_alloc}m")
            }),
        ),
        (
            "memory".to_string(),
            q(format!("{}Ki", memory_alloc / 1024)),
        ),
        ("ephemeral-storage".to_string(), q(disk_alloc.to_string())),
        ("pods".to_string(), q(pods.to_string())),
        ("hugepages-1Gi".to_string(), q("0".into())),
        ("hugepages-2Mi".to_string(), q("0".into())),
    ]);
    let (mut capacity, mut allocatable) = (capacity, allocatable);
    if facts.gpus > 0 {
        // Nothing is reserved from devices: all of them are allocatable.
        for resources in [&mut capacity, &mut allocatable] {
            resources.insert(NVIDIA_GPU.to_string(), q(facts.gpus.to_string()));
        }
    }
    (capacity, allocatable)
}

fn condition(
    kind: &str,
    status: &str,
    reason: &str,
    message: &str,
    now: Timestamp,
    since: Timestamp,
) -> NodeCondition {
    NodeCondition {
        type_: kind.into(),
        status: status.into(),
        reason: Some(reason.into()),
        message: Some(message.into()),
        last_heartbeat_time: Some(Time(now)),
        last_transition_time: Some(Time(since)),
    }
}

/// Why a node is not Ready, in the kubelet's words for a node whose CNI
/// never came up (the `never_ready` fault).
pub const NOT_READY_MESSAGE: &str = "container runtime network not ready: NetworkReady=false reason:NetworkPluginNotReady message:Network plugin returns error: cni plugin not initialized";

/// The status the kubelet reports: Ready, or not Ready with `not_ready`'s
/// message; no pressure, its resources and identity. `since` is when the
/// kubelet started (transition time of the other conditions),
/// `ready_since` when Ready last changed.
pub fn status(
    cfg: &NodeConfig,
    facts: &NodeFacts,
    not_ready: Option<&str>,
    now: Timestamp,
    since: Timestamp,
    ready_since: Timestamp,
) -> NodeStatus {
    let (capacity, allocatable) = resources(cfg, facts);
    let machine_id = hex(&Sha256::digest(
        format!("machine-id/{}", facts.server_id).as_bytes(),
    ))[..32]
        .to_string();
    NodeStatus {
        addresses: Some(vec![
            NodeAddress {
                type_: "InternalIP".into(),
                address: facts.address.to_string(),
            },
            NodeAddress {
                type_: "Hostname".into(),
                address: facts.name.clone(),
            },
        ]),
        capacity: Some(capacity),
        allocatable: Some(allocatable),
        conditions: Some(vec![
            condition(
                "MemoryPressure",
                "False",
                "KubeletHasSufficientMemory",
                "kubelet has sufficient memory available",
                now,
                since,
            ),
            condition(
                "DiskPressure",
                "False",
                "KubeletHasNoDiskPressure",
                "kubelet has no disk pressure",
                now,
                since,
            ),
            condition(
                "PIDPressure",
                "False",
                "KubeletHasSufficientPID",
                "kubelet has sufficient PID available",
                now,
                since,
            ),
            match not_ready {
                None => condition(
                    "Ready",
                    "True",
                    "KubeletReady",
                    "kubelet is posting ready status",
                    now,
                    ready_since,
                ),
                Some(message) => condition(
                    "Ready",
                    "False",
                    "KubeletNotReady",
                    message,
                    now,
                    ready_since,
                ),
            },
        ]),
        daemon_endpoints: Some(NodeDaemonEndpoints {
            kubelet_endpoint: Some(DaemonEndpoint { port: 10250 }),
        }),
        node_info: Some(NodeSystemInfo {
            architecture: facts.arch.clone(),
            boot_id: facts.boot_id.clone(),
            container_runtime_version: CONTAINER_RUNTIME.into(),
            kernel_version: KERNEL_VERSION.into(),
            kube_proxy_version: String::new(),
            kubelet_version: facts.kubelet_version.clone(),
            machine_id,
            operating_system: "linux".into(),
            os_image: format!("Talos ({})", facts.talos_version),
            swap: None,
            system_uuid: facts.server_id.to_ascii_uppercase(),
        }),
        ..Default::default()
    }
}

/// The node's Lease, owned by its Node so it goes away with it.
pub fn lease(name: &str, node_uid: Option<&str>, now: Timestamp) -> Lease {
    Lease {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(LEASE_NAMESPACE.into()),
            owner_references: node_uid.map(|uid| {
                vec![OwnerReference {
                    api_version: "v1".into(),
                    kind: "Node".into(),
                    name: name.into(),
                    uid: uid.into(),
                    ..Default::default()
                }]
            }),
            ..Default::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(name.into()),
            lease_duration_seconds: Some(LEASE_DURATION_SECONDS),
            renew_time: Some(MicroTime(now)),
            ..Default::default()
        }),
    }
}

/// Running, and Ready as its containers' readiness probes say (see
/// [`super::containers::ready`]): nothing to report.
fn is_running_as_probed(pod: &Pod, status: &PodStatus) -> bool {
    let want = pod_ready(pod);
    status.phase.as_deref() == Some("Running")
        && status
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Ready" && (c.status == "True") == want)
}

fn pod_ready(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .is_some_and(|s| s.containers.iter().all(super::containers::ready))
}

/// The container of one run (`attempt` = its restart count).
fn container_id(pod_uid: &str, name: &str, attempt: i32) -> String {
    let key = match attempt {
        0 => format!("{pod_uid}/{name}"),
        n => format!("{pod_uid}/{name}/{n}"),
    };
    format!("containerd://{}", hex(&Sha256::digest(key.as_bytes())))
}

fn image_id(image: &str) -> String {
    let repo = image.split('@').next().unwrap_or(image);
    let repo = repo
        .rsplit_once(':')
        .filter(|(_, tag)| !tag.contains('/'))
        .map_or(repo, |(r, _)| r);
    format!("{repo}@sha256:{}", hex(&Sha256::digest(image.as_bytes())))
}

/// The status of a pod this node "runs": Running and Ready with every
/// container started. `None` when there is nothing to change (already
/// running, or finished).
pub fn pod_status(pod: &Pod, node_ip: Ipv4Addr, now: Timestamp) -> Option<PodStatus> {
    let current = pod.status.clone().unwrap_or_default();
    if matches!(current.phase.as_deref(), Some("Succeeded" | "Failed"))
        || is_running_as_probed(pod, &current)
    {
        return None;
    }
    started(pod, &current, node_ip, now, &[])
}

/// The status of a pod the first time the kubelet of a boot sees it. A pod
/// whose containers ran in an earlier boot lost them with the machine: the
/// kubelet starts them again, `restartCount` + 1 with the lost run in
/// `lastState` as containerd reports a container that died with its host
/// (exit code 255, reason `Unknown`); under `restartPolicy: Never` the pod
/// fails instead. Any other pod is handled as `pod_status` says.
pub fn pod_status_after_boot(pod: &Pod, node_ip: Ipv4Addr, now: Timestamp) -> Option<PodStatus> {
    let current = pod.status.clone().unwrap_or_default();
    let previous = current.container_statuses.clone().unwrap_or_default();
    let ran = current.phase.as_deref() == Some("Running")
        && previous.iter().any(|c| c.container_id.is_some());
    if !ran {
        return pod_status(pod, node_ip, now);
    }
    if pod.spec.as_ref()?.restart_policy.as_deref() == Some("Never") {
        return Some(failed(&current, &previous, now));
    }
    started(pod, &current, node_ip, now, &previous)
}

fn pod_condition(kind: &str, ok: bool, reason: Option<&str>, at: Time) -> PodCondition {
    PodCondition {
        type_: kind.into(),
        status: if ok { "True" } else { "False" }.into(),
        reason: reason.map(str::to_string),
        last_transition_time: Some(at),
        ..Default::default()
    }
}

fn scheduled_at(current: &PodStatus, now: Timestamp) -> Time {
    current
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "PodScheduled")
        .and_then(|c| c.last_transition_time.clone())
        .unwrap_or(Time(now))
}

/// The run a reset ended, as containerd reports it after the boot.
fn lost_run(previous: &ContainerStatus, now: Timestamp) -> ContainerState {
    ContainerState {
        terminated: Some(ContainerStateTerminated {
            exit_code: 255,
            reason: Some("Unknown".into()),
            started_at: previous
                .state
                .as_ref()
                .and_then(|s| s.running.as_ref())
                .and_then(|r| r.started_at.clone()),
            finished_at: Some(Time(now)),
            container_id: previous.container_id.clone(),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// Every container running and ready; `previous` holds the container
/// statuses of a run the machine lost (empty for a first start).
fn started(
    pod: &Pod,
    current: &PodStatus,
    node_ip: Ipv4Addr,
    now: Timestamp,
    previous: &[ContainerStatus],
) -> Option<PodStatus> {
    let spec = pod.spec.as_ref()?;
    let uid = pod.metadata.uid.clone().unwrap_or_default();
    let started = current.start_time.clone().unwrap_or(Time(now));
    let containers = spec
        .containers
        .iter()
        .map(|c| {
            let before = previous.iter().find(|p| p.name == c.name);
            let attempt = before.map_or(0, |p| p.restart_count + 1);
            ContainerStatus {
                name: c.name.clone(),
                image: c.image.clone().unwrap_or_default(),
                image_id: image_id(c.image.as_deref().unwrap_or_default()),
                container_id: Some(container_id(&uid, &c.name, attempt)),
                ready: super::containers::ready(c),
                started: Some(true),
                restart_count: attempt,
                state: Some(ContainerState {
                    running: Some(ContainerStateRunning {
                        started_at: Some(Time(now)),
                    }),
                    ..Default::default()
                }),
                last_state: before.map(|p| lost_run(p, now)),
                ..Default::default()
            }
        })
        .collect();
    let init_containers: Vec<ContainerStatus> = spec
        .init_containers
        .iter()
        .flatten()
        .map(|c| ContainerStatus {
            name: c.name.clone(),
            image: c.image.clone().unwrap_or_default(),
            image_id: image_id(c.image.as_deref().unwrap_or_default()),
            container_id: Some(container_id(&uid, &c.name, 0)),
            ready: true,
            started: Some(false),
            restart_count: 0,
            state: Some(ContainerState {
                terminated: Some(ContainerStateTerminated {
                    exit_code: 0,
                    reason: Some("Completed".into()),
                    started_at: Some(Time(now)),
                    finished_at: Some(Time(now)),
                    container_id: Some(container_id(&uid, &c.name, 0)),
                    ..Default::default()
                }),
                ..Default::default()
            }),
            ..Default::default()
        })
        .collect();
    let ip = node_ip.to_string();
    let up = |kind: &str| pod_condition(kind, true, None, Time(now));
    let ready = pod_ready(pod);
    let probed = |kind: &str| {
        pod_condition(
            kind,
            ready,
            (!ready).then_some("ContainersNotReady"),
            Time(now),
        )
    };
    Some(PodStatus {
        phase: Some("Running".into()),
        conditions: Some(vec![
            up("PodReadyToStartContainers"),
            up("Initialized"),
            probed("Ready"),
            probed("ContainersReady"),
            pod_condition("PodScheduled", true, None, scheduled_at(current, now)),
        ]),
        host_ip: Some(ip.clone()),
        host_ips: Some(vec![HostIP { ip: ip.clone() }]),
        pod_ip: Some(ip.clone()),
        pod_ips: Some(vec![PodIP { ip }]),
        start_time: Some(started),
        container_statuses: Some(containers),
        init_container_statuses: (!init_containers.is_empty()).then_some(init_containers),
        qos_class: current.qos_class.clone(),
        ..Default::default()
    })
}

/// A `restartPolicy: Never` pod whose containers the machine lost.
fn failed(current: &PodStatus, previous: &[ContainerStatus], now: Timestamp) -> PodStatus {
    let containers = previous
        .iter()
        .map(|p| ContainerStatus {
            ready: false,
            started: Some(false),
            state: Some(lost_run(p, now)),
            last_state: None,
            ..p.clone()
        })
        .collect();
    let down = |kind: &str| pod_condition(kind, false, Some("PodFailed"), Time(now));
    PodStatus {
        phase: Some("Failed".into()),
        conditions: Some(vec![
            pod_condition("PodReadyToStartContainers", false, None, Time(now)),
            pod_condition("Initialized", true, None, Time(now)),
            down("Ready"),
            down("ContainersReady"),
            pod_condition("PodScheduled", true, None, scheduled_at(current, now)),
        ]),
        container_statuses: Some(containers),
        ..current.clone()
    }
}

#[cfg(test)]
#[path = "node_tests.rs"]
mod tests;
