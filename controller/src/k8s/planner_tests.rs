use super::*;

fn pod(value: serde_json::Value) -> Pod {
    serde_json::from_value(value).unwrap()
}

const GIB: u64 = 1 << 30;

#[test]
fn a_pod_counts_its_containers_sidecars_init_peak_and_overhead() {
    let p = pod(json!({
        "metadata": {"name": "web-1", "namespace": "default"},
        "spec": {
            "nodeName": "vm-1",
            "overhead": {"cpu": "50m", "memory": "64Mi"},
            "initContainers": [
                {"name": "migrate", "resources": {"requests": {"cpu": "3", "memory": "1Gi"}}},
                {"name": "proxy", "restartPolicy": "Always",
                 "resources": {"requests": {"cpu": "100m", "memory": "128Mi"}}}
            ],
            "containers": [
                {"name": "app", "resources": {"requests": {"cpu": "1500m", "memory": "2Gi"}}},
                {"name": "log", "resources": {"requests": {"cpu": "0.25"}}},
                {"name": "bare"}
            ]
        },
        "status": {"phase": "Running"}
    }));
    let v = pod_view(&p).unwrap();
    assert_eq!(v.node, "vm-1");
    assert!(!v.daemon_set);
    // CPU: the init peak (3000m) beats containers + sidecar (1850m).
    assert_eq!(v.cpu_millis, 3_000 + 50);
    // Memory: containers + sidecar (2 GiB + 128 MiB) beat the init (1 GiB).
    assert_eq!(v.memory_bytes, 2 * GIB + (128 << 20) + (64 << 20));
}

#[test]
fn daemonsets_mirrors_unbound_and_finished_pods() {
    let ds = pod(json!({
        "metadata": {"name": "cilium-x", "ownerReferences": [
            {"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "cilium", "uid": "u"}]},
        "spec": {"nodeName": "vm-1", "containers": [
            {"name": "agent", "resources": {"requests": {"cpu": "100m"}}}]}
    }));
    assert!(pod_view(&ds).unwrap().daemon_set);
    let mirror = pod(json!({
        "metadata": {"name": "kube-proxy-vm-1",
                     "annotations": {"kubernetes.io/config.mirror": "abc"}},
        "spec": {"nodeName": "vm-1", "containers": [{"name": "proxy"}]}
    }));
    assert!(pod_view(&mirror).unwrap().daemon_set);
    let pending = pod(json!({
        "metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]},
        "status": {"phase": "Pending"}
    }));
    assert_eq!(pod_view(&pending), None);
    let done = pod(json!({
        "metadata": {"name": "j"}, "spec": {"nodeName": "vm-1", "containers": [{"name": "c"}]},
        "status": {"phase": "Succeeded"}
    }));
    assert_eq!(pod_view(&done), None);
}

#[test]
fn a_node_is_read_from_its_labels() {
    let n: Node = serde_json::from_value(json!({
        "metadata": {"name": "metal-1", "labels": {
            "karpenter.sh/nodepool": "metal",
            "karpenter.scaleway.com/reservation-id": "warm.em-a115x-ssd.fr-par-2",
            "node.kubernetes.io/instance-type": "EM-A115X-SSD",
            "topology.kubernetes.io/zone": "fr-par-2",
            "karpenter.sh/capacity-type": "reserved"
        }}
    }))
    .unwrap();
    assert_eq!(
        node_view(&n),
        NodeView {
            name: "metal-1".into(),
            node_pool: Some("metal".into()),
            reservation: Some("warm.em-a115x-ssd.fr-par-2".into()),
            instance_type: Some("EM-A115X-SSD".into()),
            zone: Some("fr-par-2".into()),
            capacity_type: Some("reserved".into()),
        }
    );
}
