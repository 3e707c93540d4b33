use std::collections::BTreeMap;

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
    assert!(msg.contains("10-15 min"), "{msg}");
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
        initialized_at: initialized.then(|| at(created_min + 11)),
        deleting: false,
        node_class: Some("default".into()),
        disruption: None,
        allocatable: BTreeMap::from([
            ("cpu".to_string(), 8_000),
            ("memory".to_string(), 60 * (1u128 << 30) * 1000),
            ("pods".to_string(), 110_000),
        ]),
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

fn requests(cpu_milli: u128) -> BTreeMap<String, u128> {
    BTreeMap::from([
        ("cpu".to_string(), cpu_milli),
        ("memory".to_string(), 2 * (1u128 << 30) * 1000),
    ])
}

fn in_flight() -> ClaimView {
    let mut c = claim("vms-x", "vms", "POP2-2C-8G", 0, true);
    c.node_class = None;
    c.disruption = Some("Underutilized".into());
    c
}

#[test]
fn the_guard_offers_idle_siblings_only_during_a_disruption() {
    let late = claim("late", "metal", "EM-B", 40, true);
    let older = claim("older", "metal", "EM-B", 10, true);
    let r = requests(3300);
    let order = Order {
        claim: "new",
        nodepool: "metal",
        offer: "EM-B",
        zone: "fr-par-2",
        requests: &r,
    };
    let names = |v: Vec<&ClaimView>| v.iter().map(|c| c.name.clone()).collect::<Vec<_>>();
    // No command in flight: a scale-up, nothing offered.
    assert!(guard_candidates(&order, &[late.clone(), older.clone()]).is_empty());
    // A candidate being deleted is a command that is over.
    let mut over = in_flight();
    over.deleting = true;
    assert!(guard_candidates(&order, &[late.clone(), over]).is_empty());
    // In flight: the most recent sibling first.
    let all = vec![older.clone(), late.clone(), in_flight()];
    assert_eq!(names(guard_candidates(&order, &all)), ["late", "older"]);
    // Siblings that cannot take the pods.
    let mut excluded = Vec::new();
    let mut other_offer = claim("a", "metal", "EM-A", 40, true);
    other_offer.offer = Some("EM-A".into());
    excluded.push(other_offer);
    excluded.push(claim("b", "vms", "EM-B", 40, true));
    let mut other_zone = claim("c", "metal", "EM-B", 40, true);
    other_zone.zone = Some("nl-ams-1".into());
    excluded.push(other_zone);
    excluded.push(claim("d", "metal", "EM-B", 40, false));
    let mut deleting = claim("e", "metal", "EM-B", 40, true);
    deleting.deleting = true;
    excluded.push(deleting);
    let mut candidate = claim("f", "metal", "EM-B", 40, true);
    candidate.disruption = Some("Underutilized".into());
    excluded.push(candidate);
    let mut small = claim("g", "metal", "EM-B", 40, true);
    small.allocatable.insert("cpu".into(), 3_000);
    excluded.push(small);
    let mut unknown = claim("h", "metal", "EM-B", 40, true);
    unknown.allocatable.clear();
    excluded.push(unknown);
    let mut no_node = claim("i", "metal", "EM-B", 40, true);
    no_node.node_name = None;
    excluded.push(no_node);
    excluded.push(in_flight());
    assert!(
        guard_candidates(&order, &excluded).is_empty(),
        "{:?}",
        names(guard_candidates(&order, &excluded))
    );
    // The order itself is never its own sibling.
    let mut itself = claim("new", "metal", "EM-B", 40, true);
    itself.name = "new".into();
    assert!(guard_candidates(&order, &[itself, in_flight()]).is_empty());
}

#[test]
fn a_request_fits_when_every_resource_it_asks_for_is_allocatable() {
    let alloc = BTreeMap::from([
        ("cpu".to_string(), 3_800u128),
        ("pods".to_string(), 110_000),
    ]);
    assert!(fits(&BTreeMap::from([("cpu".to_string(), 3_800)]), &alloc));
    assert!(!fits(&BTreeMap::from([("cpu".to_string(), 3_801)]), &alloc));
    // A resource the node does not have, unless nothing of it is asked.
    assert!(!fits(
        &BTreeMap::from([("nvidia.com/gpu".to_string(), 1_000)]),
        &alloc
    ));
    assert!(fits(
        &BTreeMap::from([("nvidia.com/gpu".to_string(), 0)]),
        &alloc
    ));
    // Nothing known of the node: no.
    assert!(!fits(&BTreeMap::new(), &BTreeMap::new()));
}

#[test]
fn a_hold_ends_five_minutes_before_a_paid_hour_at_least_fifteen_minutes_away() {
    // Ordered at 06:00, refused at 06:13: the first hour ends at 07:00, the
    // hold 5 minutes before.
    assert_eq!(hold_until(at(0), at(13)), at(55));
    // At 06:41 that leaves 14 minutes: the second hour is held.
    assert_eq!(hold_until(at(0), at(41)), at(115));
    // At 06:40, exactly 15 minutes: that hour.
    assert_eq!(hold_until(at(0), at(40)), at(55));
    // Hours after the order: the hour under way (or the next).
    assert_eq!(hold_until(at(0), at(130)), at(175));
    // A clock skew that puts the order in the future: its first hour.
    assert_eq!(hold_until(at(30), at(0)), at(85));
    let r = requests(1000);
    let order = Order {
        claim: "new",
        nodepool: "metal",
        offer: "EM-B",
        zone: "fr-par-2",
        requests: &r,
    };
    let refusal = Refusal::new(&order, &claim("late", "metal", "EM-B", 0, true), at(13));
    assert_eq!(refusal.hold_until, at(55));
    let msg = refusal.message();
    assert!(
        msg.contains("not ordering EM-B in fr-par-2 for NodeClaim new"),
        "{msg}"
    );
    assert!(msg.contains("NodeClaim late of NodePool metal"), "{msg}");
    assert!(msg.contains("until 06:55:00Z"), "{msg}");
    assert!(msg.contains("for 5 min"), "{msg}");
}

#[test]
fn a_late_replacement_became_initialized_past_the_window() {
    // The helper makes Initialized 11 minutes after the order.
    let late = claim("late", "metal", "EM-B", 40, true);
    assert!(late_replacement(&late));
    let mut quick = late.clone();
    quick.initialized_at = Some(at(49));
    assert!(!late_replacement(&quick), "9 minutes: core waited for it");
    let mut exactly = late.clone();
    exactly.initialized_at = Some(at(50));
    assert!(late_replacement(&exactly));
    let mut foreign = late.clone();
    foreign.node_class = None;
    assert!(!late_replacement(&foreign));
    let mut deleting = late.clone();
    deleting.deleting = true;
    assert!(!late_replacement(&deleting));
    let mut disrupted = late.clone();
    disrupted.disruption = Some("Empty".into());
    assert!(!late_replacement(&disrupted));
    assert!(!late_replacement(&claim("x", "metal", "EM-B", 40, false)));
}

#[test]
fn claim_views_read_the_disruption_reason_and_the_allocatable() {
    let v = json!({
        "metadata": {"name": "metal-abc", "uid": "u1", "creationTimestamp": "2026-11-24T06:40:49Z",
            "labels": {"karpenter.sh/nodepool": "metal"}},
        "status": {"allocatable": {"cpu": "3800m", "memory": "28Gi", "pods": "110", "bad": "x"},
            "conditions": [
                {"type": "Initialized", "status": "True", "lastTransitionTime": "2026-11-24T06:52:00Z"},
                {"type": "DisruptionReason", "status": "True", "reason": "Underutilized"}]}
    });
    let c = ClaimView::parse(&v).unwrap();
    assert_eq!(c.disruption.as_deref(), Some("Underutilized"));
    assert_eq!(c.initialized_at, Some(at(52)));
    assert_eq!(c.allocatable["cpu"], 3_800);
    assert_eq!(c.allocatable["memory"], 28 * (1u128 << 30) * 1000);
    assert_eq!(c.allocatable["pods"], 110_000);
    assert!(!c.allocatable.contains_key("bad"));
    let mut cleared = v.clone();
    cleared["status"]["conditions"][1]["status"] = json!("False");
    assert_eq!(ClaimView::parse(&cleared).unwrap().disruption, None);
}

#[test]
fn room_on_a_sibling_is_its_allocatable_less_what_its_pods_request() {
    let order = BTreeMap::from([("cpu".to_string(), 2_000u128), ("pods".to_string(), 2_000)]);
    let allocatable = BTreeMap::from([
        ("cpu".to_string(), 3_870u128),
        ("pods".to_string(), 110_000),
    ]);
    assert!(NodeState::default().has_room(&order, &allocatable));
    let with_daemonset = NodeState {
        used: BTreeMap::from([("cpu".to_string(), 2_000u128), ("pods".to_string(), 1_000)]),
        ..NodeState::default()
    };
    assert!(!with_daemonset.has_room(&order, &allocatable));
    // More used than allocatable (an overcommitted node): no room, no panic.
    let over = NodeState {
        used: BTreeMap::from([("cpu".to_string(), 9_000u128)]),
        ..NodeState::default()
    };
    assert!(!over.has_room(&order, &allocatable));
}

#[test]
fn a_node_s_pods_are_counted_as_the_scheduler_counts_them() {
    let pod = |name: &str, cpu: &str, phase: &str| -> k8s_openapi::api::core::v1::Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name, "ownerReferences": [{"apiVersion": "apps/v1", "kind": "DaemonSet", "name": "ds", "uid": "u"}]},
            "spec": {"nodeName": "n", "containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]},
            "status": {"phase": phase},
        }))
        .unwrap()
    };
    let used = super::hold::requested(&[
        pod("ds-a", "2", "Running"),
        pod("done", "4", "Succeeded"),
        pod("b", "500m", "Pending"),
    ]);
    assert_eq!(used["cpu"], 2_500);
    assert_eq!(used["memory"], 2 * 1024 * 1024 * 1024 * 1000);
    assert_eq!(used["pods"], 2_000);
}
