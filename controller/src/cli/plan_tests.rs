use super::*;
use crate::nodeclass::PlannerStatus;

fn class(status: Option<Value>) -> ScalewayElasticMetalNodeClass {
    let mut nc = json!({
        "apiVersion": "karpenter.scaleway.com/v1alpha1",
        "kind": "ScalewayElasticMetalNodeClass",
        "metadata": {"name": "warm"},
        "spec": {
            "image": {"urlTemplate": "https://example.com/{version}/{arch}.raw.xz",
                      "version": "v1.13.9", "schematic": "s"},
            "rescueSshKey": {"iamKeyId": "k",
                             "privateKeySecretRef": {"name": "s", "namespace": "n", "key": "k"}},
            "machineConfigSecretRef": {"name": "c", "namespace": "n", "key": "worker.yaml"},
            "standby": {"pools": [
                {"offer": "EM-A115X-SSD", "zone": "fr-par-2", "min": 0, "max": 3,
                 "planner": {"nodePools": ["vms"], "window": "1h"}},
                {"offer": "EM-B112X-SSD", "zone": "fr-par-2", "min": 1, "max": 1}
            ]}
        }
    });
    if let Some(s) = status {
        nc["status"] = s;
    }
    serde_json::from_value(nc).unwrap()
}

fn status() -> PlannerStatus {
    PlannerStatus {
        offer: "EM-A115X-SSD".into(),
        zone: "fr-par-2".into(),
        target: 2,
        needed: Some(2),
        adopted: 1,
        standby: 1,
        sustained_cpu: Some("5000m".into()),
        sustained_memory: Some("8Gi".into()),
        cpu: "5000m".into(),
        memory: "8Gi".into(),
        server_cpu: "3000m".into(),
        server_memory: "30Gi".into(),
        vm_euros_per_hour: 0.1234,
        metal_euros_per_hour: 0.182,
        dry_run: false,
        reason: "sustained load 5000m CPU, 8.0 GiB memory needs 2 server(s)".into(),
        last_change: Some("2026-11-24T09:00:00Z".into()),
        watched_since: "2026-11-24T08:00:00Z".into(),
    }
}

fn load() -> (Vec<NodeView>, Vec<PodView>) {
    let vm = NodeView {
        name: "vm-1".into(),
        node_pool: Some("vms".into()),
        ..NodeView::default()
    };
    let other = NodeView {
        name: "gpu-1".into(),
        node_pool: Some("gpus".into()),
        ..NodeView::default()
    };
    let pod = |node: &str, cpu: u64, daemon_set: bool| PodView {
        node: node.into(),
        cpu_millis: cpu,
        memory_bytes: 1 << 30,
        daemon_set,
    };
    (
        vec![vm, other],
        vec![
            pod("vm-1", 4_000, false),
            pod("vm-1", 3_000, false),
            pod("vm-1", 500, true),
            pod("gpu-1", 9_000, false),
        ],
    )
}

#[test]
fn a_row_per_planned_pool_with_the_leaders_view_and_the_load_now() {
    let (nodes, pods) = load();
    let status = json!({"conditions": [], "planner": [serde_json::to_value(status()).unwrap()]});
    let rows = rows(&[class(Some(status))], &nodes, &pods);
    assert_eq!(rows.len(), 1, "the pool without a planner is left out");
    let r = &rows[0];
    assert_eq!(
        (r.offer.as_str(), r.cpu_millis, r.pods),
        ("EM-A115X-SSD", 7_000, 2)
    );
    // 7000m at 3000m a server: 3, within the pool's max 3.
    assert_eq!(r.would_need, Some(3));
    assert_eq!(r.status.as_ref().unwrap().target, 2);
    let text = table(&rows);
    for part in [
        "warm",
        "EM-A115X-SSD",
        "5000m/8Gi",
        "7000m/2Gi (2 pods)",
        "0.1234",
        "0.1820",
        "needs 2 server(s)",
    ] {
        assert!(text.contains(part), "{part:?} in\n{text}");
    }
    let j = json_rows(&rows);
    assert_eq!(j[0]["now"]["wouldNeed"], 3);
    assert_eq!(j[0]["status"]["target"], 2);
    assert_eq!(j[0]["nodePools"], json!(["vms"]));
}

#[test]
fn without_a_status_the_table_says_why() {
    let (nodes, pods) = load();
    let rows = rows(&[class(None)], &nodes, &pods);
    assert_eq!(rows[0].would_need, None);
    let text = table(&rows);
    assert!(text.contains("no status yet"), "{text}");
    assert!(table(&[]).contains("no standby pool has a planner"));
}
