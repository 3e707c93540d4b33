use super::*;
use crate::machine_config;
use k8s_openapi::api::core::v1::{Container, PodSpec};

const PROVIDER_ID: &str = "scaleway://baremetal/fr-par-2/11111111-2222-3333-4444-555555555555";

fn config() -> NodeConfig {
    machine_config::parse(crate::machine_config::tests::WORKER).unwrap()
}

fn facts() -> NodeFacts {
    NodeFacts {
        name: "default-abcde".into(),
        server_id: "11111111-2222-3333-4444-555555555555".into(),
        address: Ipv4Addr::new(127, 77, 0, 10),
        arch: "amd64".into(),
        talos_version: "v1.13.9".into(),
        kubelet_version: "v1.35.2".into(),
        threads: 32,
        memory_bytes: 256 << 30,
        disk_bytes: 1_920_383_410_176,
        gpus: 0,
        boot_id: "boot".into(),
    }
}

fn now() -> Timestamp {
    "2026-11-22T10:00:00Z".parse().unwrap()
}

#[test]
fn new_node_carries_identity_labels_and_registration_taints() {
    let node = new_node(&config(), &facts());
    assert_eq!(node.metadata.name.as_deref(), Some("default-abcde"));
    let labels = node.metadata.labels.clone().unwrap();
    assert_eq!(labels["kubernetes.io/hostname"], "default-abcde");
    assert_eq!(labels["kubernetes.io/arch"], "amd64");
    assert_eq!(labels["kubernetes.io/os"], "linux");
    assert_eq!(labels["karpenter.sh/nodepool"], "default");
    let spec = node.spec.clone().unwrap();
    assert_eq!(spec.provider_id.as_deref(), Some(PROVIDER_ID));
    let taints: Vec<(String, Option<String>, String)> = spec
        .taints
        .unwrap()
        .into_iter()
        .map(|t| (t.key, t.value, t.effect))
        .collect();
    assert_eq!(
        taints,
        vec![("karpenter.sh/unregistered".into(), None, "NoExecute".into())]
    );
    // nodeTaints come after registration, from the node itself, which
    // NodeRestriction refuses: they are reported as not applied.
    assert_eq!(
        taints_not_applied(&node, &config()),
        vec!["dedicated:NoSchedule", "example.com/flag:PreferNoSchedule"]
    );
}

#[test]
fn adopting_leaves_taints_alone_and_sets_missing_provider_id() {
    let existing = Node {
        metadata: ObjectMeta {
            name: Some("default-abcde".into()),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            provider_id: None,
            taints: Some(vec![KubeTaint {
                key: "node.kubernetes.io/not-ready".into(),
                effect: "NoSchedule".into(),
                value: None,
                time_added: None,
            }]),
            ..Default::default()
        }),
        status: None,
    };
    let patch = adopt_patch(&existing, &config(), &facts()).unwrap();
    assert_eq!(patch["spec"]["providerID"], PROVIDER_ID);
    // A node may not modify its own taints (NodeRestriction).
    assert!(patch["spec"].get("taints").is_none(), "{patch}");
    assert_eq!(
        patch["metadata"]["labels"]["kubernetes.io/hostname"],
        "default-abcde"
    );
}

#[test]
fn adopting_a_node_of_another_machine_is_refused() {
    let existing = Node {
        metadata: ObjectMeta {
            name: Some("default-abcde".into()),
            ..Default::default()
        },
        spec: Some(NodeSpec {
            provider_id: Some("scaleway://baremetal/fr-par-2/other".into()),
            ..Default::default()
        }),
        status: None,
    };
    let err = adopt_patch(&existing, &config(), &facts()).unwrap_err();
    assert!(err.contains("already exists with providerID scaleway://baremetal/fr-par-2/other"));
    let mut same = existing.clone();
    same.spec.as_mut().unwrap().provider_id = Some(PROVIDER_ID.into());
    let patch = adopt_patch(&same, &config(), &facts()).unwrap();
    assert!(
        patch.get("spec").is_none(),
        "providerID is immutable once set, taints are not the node's: {patch}"
    );
}

#[test]
fn capacity_comes_from_the_offer_and_allocatable_subtracts_reservations() {
    let mut cfg = config();
    cfg.system_reserved.clear();
    cfg.max_pods = None;
    let (capacity, allocatable) = resources(&cfg, &facts());
    assert_eq!(capacity["cpu"].0, "32");
    assert_eq!(capacity["memory"].0, format!("{}Ki", (256u64 << 30) / 1024));
    assert_eq!(
        capacity["ephemeral-storage"].0,
        format!("{}Ki", 1_920_383_410_176u64 / 1024)
    );
    assert_eq!(capacity["pods"].0, "110");
    // Talos' defaults: 50m CPU, 384Mi memory, 256Mi disk; kubelet's hard
    // eviction: 100Mi memory, 10% of the disk.
    assert_eq!(allocatable["cpu"].0, "31950m");
    assert_eq!(
        allocatable["memory"].0,
        format!("{}Ki", ((256u64 << 30) - (484 << 20)) / 1024)
    );
    let disk = 1_920_383_410_176u64;
    assert_eq!(
        allocatable["ephemeral-storage"].0,
        (disk - (256 << 20) - disk / 10).to_string()
    );

    let (_, with_config) = resources(&config(), &facts());
    assert_eq!(with_config["cpu"].0, "31900m");
    assert_eq!(with_config["pods"].0, "250");
}

#[test]
fn gpus_are_reported_as_nvidia_gpu_capacity_and_allocatable() {
    let (capacity, allocatable) = resources(&config(), &facts());
    assert!(!capacity.contains_key(NVIDIA_GPU), "no GPU, no resource");
    assert!(!allocatable.contains_key(NVIDIA_GPU));
    let gpu = NodeFacts { gpus: 2, ..facts() };
    let (capacity, allocatable) = resources(&config(), &gpu);
    assert_eq!(capacity[NVIDIA_GPU].0, "2");
    assert_eq!(allocatable[NVIDIA_GPU].0, "2");
    let status = status(&config(), &gpu, None, now(), now(), now());
    assert_eq!(status.capacity.unwrap()[NVIDIA_GPU].0, "2");
}

#[test]
fn status_is_ready_with_addresses_and_node_info() {
    let later: Timestamp = "2026-11-22T10:05:00Z".parse().unwrap();
    let not_ready = status(
        &config(),
        &facts(),
        Some("container runtime is down"),
        later,
        now(),
        later,
    );
    let conditions = not_ready.conditions.unwrap();
    let cond = conditions.iter().find(|c| c.type_ == "Ready").unwrap();
    assert_eq!(
        (
            cond.status.as_str(),
            cond.reason.as_deref(),
            cond.message.as_deref()
        ),
        (
            "False",
            Some("KubeletNotReady"),
            Some("container runtime is down")
        )
    );
    // Ready changed later than the kubelet started; the rest did not.
    assert_eq!(cond.last_transition_time, Some(Time(later)));
    let memory = conditions
        .iter()
        .find(|c| c.type_ == "MemoryPressure")
        .unwrap();
    assert_eq!(memory.last_transition_time, Some(Time(now())));
    assert_eq!(not_ready.node_info.unwrap().boot_id, "boot");
    let status = status(&config(), &facts(), None, now(), now(), now());
    let ready = status
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(ready.status, "True");
    assert_eq!(ready.last_heartbeat_time, Some(Time(now())));
    let addresses = status.addresses.unwrap();
    assert_eq!(addresses[0].type_, "InternalIP");
    assert_eq!(addresses[0].address, "127.77.0.10");
    let info = status.node_info.unwrap();
    assert_eq!(info.os_image, "Talos (v1.13.9)");
    assert_eq!(info.kubelet_version, "v1.35.2");
    assert_eq!(info.architecture, "amd64");
}

#[test]
fn quantities_and_versions() {
    assert_eq!(parse_milli("100m"), Some(100));
    assert_eq!(parse_milli("2"), Some(2000));
    assert_eq!(parse_milli("1Ki"), Some(1_024_000));
    assert_eq!(parse_milli("0.5Gi"), Some(512 * 1024 * 1024 * 1000));
    assert_eq!(parse_milli("3Q"), None);
    assert_eq!(
        kubelet_version_from_image("ghcr.io/siderolabs/kubelet:v1.35.2").as_deref(),
        Some("v1.35.2")
    );
    assert_eq!(kubelet_version_from_image("localhost:5000/kubelet"), None);
    assert_eq!(
        node_name(&NodeConfig::default(), "srv").len(),
        "talos-xxx-yyy".len()
    );
}

fn pod(phase: Option<&str>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some("web".into()),
            uid: Some("uid-1".into()),
            ..Default::default()
        },
        spec: Some(PodSpec {
            node_name: Some("default-abcde".into()),
            containers: vec![Container {
                name: "app".into(),
                image: Some("nginx:1.27".into()),
                ..Default::default()
            }],
            ..Default::default()
        }),
        status: Some(PodStatus {
            phase: phase.map(str::to_string),
            ..Default::default()
        }),
    }
}

#[test]
fn pending_pods_become_running_and_ready() {
    let status = pod_status(&pod(Some("Pending")), Ipv4Addr::new(127, 77, 0, 10), now()).unwrap();
    assert_eq!(status.phase.as_deref(), Some("Running"));
    assert_eq!(status.pod_ip.as_deref(), Some("127.77.0.10"));
    for kind in ["Initialized", "ContainersReady", "Ready", "PodScheduled"] {
        let c = status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == kind)
            .unwrap();
        assert_eq!(c.status, "True", "{kind}");
    }
    let container = &status.container_statuses.as_ref().unwrap()[0];
    assert!(container.ready);
    assert!(container.state.as_ref().unwrap().running.is_some());
    assert!(container.image_id.starts_with("nginx@sha256:"));

    let mut running = pod(None);
    running.status = Some(status);
    assert_eq!(
        pod_status(&running, Ipv4Addr::new(127, 77, 0, 10), now()),
        None
    );
    assert_eq!(
        pod_status(&pod(Some("Succeeded")), Ipv4Addr::LOCALHOST, now()),
        None
    );
}

/// A pod that ran before the machine rebooted, as the API server still
/// holds it: Running, its container started in the earlier boot.
fn ran_before(restart_policy: Option<&str>) -> Pod {
    let mut p = pod(Some("Pending"));
    p.spec.as_mut().unwrap().restart_policy = restart_policy.map(str::to_string);
    let earlier: Timestamp = "2026-11-22T09:00:00Z".parse().unwrap();
    let mut status = pod_status(&p, Ipv4Addr::new(127, 77, 0, 10), earlier).unwrap();
    // What the node lifecycle controller did while the node was away.
    for c in status.conditions.iter_mut().flatten() {
        if c.type_ == "Ready" {
            c.status = "False".into();
        }
    }
    p.status = Some(status);
    p
}

#[test]
fn after_a_reboot_pods_that_ran_restart_their_containers() {
    let ip = Ipv4Addr::new(127, 77, 0, 10);
    let before = ran_before(Some("Always"));
    let old = before
        .status
        .as_ref()
        .unwrap()
        .container_statuses
        .as_ref()
        .unwrap()[0]
        .clone();
    let status = pod_status_after_boot(&before, ip, now()).unwrap();
    assert_eq!(status.phase.as_deref(), Some("Running"));
    let ready = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(ready.status, "True");
    let c = &status.container_statuses.as_ref().unwrap()[0];
    assert_eq!(c.restart_count, 1);
    assert!(c.ready);
    assert_ne!(c.container_id, old.container_id, "a new container");
    assert_eq!(
        c.state
            .as_ref()
            .unwrap()
            .running
            .as_ref()
            .unwrap()
            .started_at,
        Some(Time(now()))
    );
    let lost = c.last_state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!(
        (lost.exit_code, lost.reason.as_deref()),
        (255, Some("Unknown"))
    );
    assert_eq!(lost.container_id, old.container_id);
    assert_eq!(
        lost.started_at,
        old.state
            .as_ref()
            .unwrap()
            .running
            .as_ref()
            .unwrap()
            .started_at
    );
    assert_eq!(
        status.start_time,
        before.status.as_ref().unwrap().start_time,
        "the pod's own start stays"
    );

    // Once more: the count goes on.
    let mut again = before.clone();
    again.status = Some(status);
    let status = pod_status_after_boot(&again, ip, now()).unwrap();
    assert_eq!(status.container_statuses.unwrap()[0].restart_count, 2);

    // A pod new to the node starts as usual, and a finished one stays.
    let fresh = pod_status_after_boot(&pod(Some("Pending")), ip, now()).unwrap();
    assert_eq!(fresh.container_statuses.unwrap()[0].restart_count, 0);
    assert_eq!(
        pod_status_after_boot(&pod(Some("Succeeded")), ip, now()),
        None
    );
}

#[test]
fn after_a_reboot_a_never_restarted_pod_fails() {
    let status =
        pod_status_after_boot(&ran_before(Some("Never")), Ipv4Addr::LOCALHOST, now()).unwrap();
    assert_eq!(status.phase.as_deref(), Some("Failed"));
    let c = &status.container_statuses.as_ref().unwrap()[0];
    assert!(!c.ready);
    assert_eq!(c.restart_count, 0);
    let lost = c.state.as_ref().unwrap().terminated.as_ref().unwrap();
    assert_eq!(lost.exit_code, 255);
    let ready = status
        .conditions
        .iter()
        .flatten()
        .find(|c| c.type_ == "Ready")
        .unwrap();
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_deref()),
        ("False", Some("PodFailed"))
    );
}
