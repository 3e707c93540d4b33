use chrono::{TimeDelta, TimeZone, Utc};
use serde_json::{Value, json};

use super::*;

fn pool(disruption: Value, requirements: Value) -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodePool",
        "metadata": {"name": "metal"},
        "spec": {
            "template": {"spec": {
                "nodeClassRef": {"group": "karpenter.scaleway.com", "kind": "ScalewayElasticMetalNodeClass", "name": "default"},
                "requirements": requirements,
            }},
            "disruption": disruption,
        }
    })
}

fn risk(disruption: Value) -> Option<Risk> {
    risk_of(&parse_pool(&pool(disruption, json!([]))).unwrap())
}

#[test]
fn underutilized_consolidation_of_on_demand_metal_is_a_risk() {
    let r =
        risk(json!({"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "30s"}))
            .expect("a risk");
    assert_eq!(r.policy, "WhenEmptyOrUnderutilized");
    assert_eq!(r.consolidate_after, "30s");
    let msg = r.message(Some(0.371));
    assert!(msg.contains("10-12 min"), "{msg}");
    assert!(msg.contains("10 min to become Initialized"), "{msg}");
    assert!(msg.contains("€0.37"), "{msg}");
    assert!(msg.contains("WhenEmpty"), "{msg}");
    // Core's default policy is the risky one.
    assert!(risk(json!({"consolidateAfter": "5m"})).is_some());
    assert!(risk(json!({"consolidationPolicy": "Balanced", "consolidateAfter": "1h"})).is_some());
}

#[test]
fn settings_that_cannot_start_a_replace_are_no_risk() {
    assert_eq!(
        risk(json!({"consolidationPolicy": "WhenEmpty", "consolidateAfter": "30s"})),
        None
    );
    assert_eq!(
        risk(
            json!({"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "Never"})
        ),
        None
    );
    // A zero budget for Underutilized, always active.
    assert_eq!(
        risk(
            json!({"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "30s",
            "budgets": [{"nodes": "0", "reasons": ["Underutilized"]}]})
        ),
        None
    );
    // ... or for every reason.
    assert_eq!(
        risk(json!({"consolidateAfter": "30s", "budgets": [{"nodes": "0%"}]})),
        None
    );
}

#[test]
fn budgets_that_leave_underutilized_open_some_of_the_time_are_a_risk() {
    // Only during a schedule: outside it, replaces start.
    assert!(
        risk(json!({"consolidateAfter": "30s",
            "budgets": [{"nodes": "0", "reasons": ["Underutilized"], "schedule": "0 9 * * 1-5", "duration": "8h"}]}))
        .is_some()
    );
    // Zero for drift only.
    assert!(
        risk(
            json!({"consolidateAfter": "30s", "budgets": [{"nodes": "0", "reasons": ["Drifted"]}]})
        )
        .is_some()
    );
    assert!(risk(json!({"consolidateAfter": "30s", "budgets": [{"nodes": "1"}]})).is_some());
}

#[test]
fn reserved_only_static_and_foreign_pools_are_no_risk() {
    let d = json!({"consolidationPolicy": "WhenEmptyOrUnderutilized", "consolidateAfter": "30s"});
    let reserved = pool(
        d.clone(),
        json!([{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["reserved"]}]),
    );
    assert_eq!(risk_of(&parse_pool(&reserved).unwrap()), None);
    let not_od = pool(
        d.clone(),
        json!([{"key": "karpenter.sh/capacity-type", "operator": "NotIn", "values": ["on-demand"]}]),
    );
    assert_eq!(risk_of(&parse_pool(&not_od).unwrap()), None);
    let both = pool(
        d.clone(),
        json!([{"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["reserved", "on-demand"]}]),
    );
    assert!(risk_of(&parse_pool(&both).unwrap()).is_some());
    let mut fixed = pool(d.clone(), json!([]));
    fixed["spec"]["replicas"] = json!(3);
    assert_eq!(risk_of(&parse_pool(&fixed).unwrap()), None);
    let mut kwok = pool(d, json!([]));
    kwok["spec"]["template"]["spec"]["nodeClassRef"] =
        json!({"group": "karpenter.kwok.sh", "kind": "KWOKNodeClass", "name": "default"});
    let view = parse_pool(&kwok).unwrap();
    assert!(!view.elastic_metal);
    assert_eq!(risk_of(&view), None);
}

fn at(min: i64) -> chrono::DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 24, 6, 0, 0).unwrap() + TimeDelta::minutes(min)
}

fn claim(name: &str, pool: &str, offer: &str, created_min: i64, initialized: bool) -> ClaimView {
    ClaimView {
        name: name.into(),
        uid: format!("uid-{name}"),
        nodepool: Some(pool.into()),
        offer: Some(offer.into()),
        zone: Some("fr-par-2".into()),
        created: at(created_min),
        provider_id: Some(format!("scaleway://baremetal/fr-par-2/{name}")),
        node_name: Some(name.into()),
        initialized,
        deleting: false,
        node_class: Some("default".into()),
    }
}

#[test]
fn an_order_while_a_recent_sibling_idles_is_churn() {
    // The measured timeline: #2 ordered at 40, joins at 52 and stays empty;
    // #3 ordered at 52.
    let old = claim("old", "metal", "EM-A", 0, true);
    let second = claim("second", "metal", "EM-B", 40, true);
    let third = claim("third", "metal", "EM-B", 52, false);
    let claims = vec![old.clone(), second.clone(), third.clone()];
    let busy = |n: &str| n == "old";
    let churn = detect(&third, &claims, &busy).expect("churn");
    assert_eq!(churn.idle, "second");
    assert_eq!(churn.offer, "EM-B");
    assert_eq!(churn.idle_age, TimeDelta::minutes(12));
    let msg = churn.message(Some((0.371, "hour")));
    assert!(
        msg.contains("Ordered EM-B for NodePool metal while NodeClaim second"),
        "{msg}"
    );
    assert!(msg.contains("ordered 12 min ago"), "{msg}");
    assert!(msg.contains("€0.37"), "{msg}");
    // A sibling being deleted still counts: it was bought and goes unused.
    let mut deleting = second.clone();
    deleting.deleting = true;
    assert!(detect(&third, &[old, deleting, third.clone()], &busy).is_some());
}

#[test]
fn orders_that_do_not_churn() {
    let third = claim("third", "metal", "EM-B", 52, false);
    let busy_none = |_: &str| false;
    // The sibling runs pods.
    let working = claim("second", "metal", "EM-B", 40, true);
    assert_eq!(
        detect(&third, &[working.clone(), third.clone()], &|n| n
            == "second"),
        None
    );
    // The sibling is not Initialized yet (still installing: a scale-up).
    let installing = claim("second", "metal", "EM-B", 40, false);
    assert_eq!(
        detect(&third, &[installing, third.clone()], &busy_none),
        None
    );
    // Another offer or another NodePool.
    let other_offer = claim("second", "metal", "EM-A", 40, true);
    assert_eq!(
        detect(&third, &[other_offer, third.clone()], &busy_none),
        None
    );
    let other_pool = claim("second", "vms", "EM-B", 40, true);
    assert_eq!(
        detect(&third, &[other_pool, third.clone()], &busy_none),
        None
    );
    // Ordered more than an hour before.
    let old = claim("second", "metal", "EM-B", 52 - 61, true);
    assert_eq!(detect(&third, &[old, third.clone()], &busy_none), None);
    // Ordered after the new one (the detector judges orders, not siblings).
    let later = claim("second", "metal", "EM-B", 53, true);
    assert_eq!(detect(&third, &[later, third.clone()], &busy_none), None);
    // The new claim has no server yet.
    let mut unordered = third.clone();
    unordered.provider_id = None;
    assert_eq!(
        detect(&unordered, &[working, unordered.clone()], &busy_none),
        None
    );
}

#[test]
fn workload_pods_exclude_daemonsets_mirrors_and_finished_pods() {
    assert!(is_workload(
        &json!({"metadata": {"name": "web"}, "status": {"phase": "Running"}})
    ));
    assert!(!is_workload(
        &json!({"metadata": {"ownerReferences": [{"kind": "DaemonSet", "name": "cilium"}]}})
    ));
    assert!(!is_workload(
        &json!({"metadata": {"annotations": {"kubernetes.io/config.mirror": "x"}}})
    ));
    assert!(!is_workload(
        &json!({"metadata": {}, "status": {"phase": "Succeeded"}})
    ));
    assert!(is_workload(
        &json!({"metadata": {"ownerReferences": [{"kind": "ReplicaSet"}]}, "status": {"phase": "Pending"}})
    ));
}

#[test]
fn claim_views_read_labels_conditions_and_the_class() {
    let v = json!({
        "metadata": {"name": "metal-abc", "uid": "u1", "creationTimestamp": "2026-11-24T06:40:49Z",
            "labels": {"karpenter.sh/nodepool": "metal", "node.kubernetes.io/instance-type": "EM-B",
                       "topology.kubernetes.io/zone": "fr-par-2"}},
        "spec": {"nodeClassRef": {"group": "karpenter.scaleway.com", "kind": "ScalewayElasticMetalNodeClass", "name": "default"}},
        "status": {"providerID": "scaleway://baremetal/fr-par-2/s1", "nodeName": "metal-abc",
            "conditions": [{"type": "Initialized", "status": "True"}]}
    });
    let c = ClaimView::parse(&v).unwrap();
    assert_eq!(c.nodepool.as_deref(), Some("metal"));
    assert_eq!(c.offer.as_deref(), Some("EM-B"));
    assert_eq!(c.node_class.as_deref(), Some("default"));
    assert!(c.initialized && !c.deleting);
    assert_eq!(c.created, at(40) + TimeDelta::seconds(49));
    let mut foreign = v.clone();
    foreign["spec"]["nodeClassRef"]["kind"] = json!("KWOKNodeClass");
    foreign["status"]["conditions"][0]["status"] = json!("Unknown");
    let f = ClaimView::parse(&foreign).unwrap();
    assert_eq!(f.node_class, None);
    assert!(!f.initialized);
}

#[test]
fn each_order_is_judged_once_and_a_restart_judges_only_fresh_ones() {
    let mut old = claim("old", "metal", "EM-B", 0, true);
    old.uid = "u-old".into();
    let mut fresh = claim("fresh", "metal", "EM-B", 58, false);
    fresh.uid = "u-fresh".into();
    let mut unordered = claim("unordered", "metal", "EM-B", 59, false);
    unordered.provider_id = None;
    let mut foreign = claim("foreign", "metal", "EM-B", 59, false);
    foreign.node_class = None;
    let claims = vec![old.clone(), fresh.clone(), unordered.clone(), foreign];
    let now = at(60);
    let mut judged = std::collections::BTreeSet::new();
    // First pass after a start: the 60-minute-old order is not judged.
    let names = |v: Vec<&ClaimView>| v.iter().map(|c| c.name.clone()).collect::<Vec<_>>();
    assert_eq!(
        names(new_orders(&claims, &mut judged, true, now)),
        ["fresh"]
    );
    assert!(judged.contains("u-old") && judged.contains("u-fresh"));
    // Nothing twice.
    assert!(new_orders(&claims, &mut judged, false, now).is_empty());
    // The unordered claim is judged once it has its server, whatever its age.
    let mut ordered = unordered.clone();
    ordered.provider_id = Some("scaleway://baremetal/fr-par-2/x".into());
    let claims = vec![old.clone(), fresh.clone(), ordered];
    assert_eq!(
        names(new_orders(&claims, &mut judged, false, at(90))),
        ["unordered"]
    );
    // A NodeClaim gone is forgotten.
    forget_gone(&[fresh], &mut judged);
    assert_eq!(judged.iter().collect::<Vec<_>>(), ["u-fresh"]);
}
