//! The consolidation churn guard in Create (`create.rs`, `guard_churn`):
//! an order that an idle sibling can take is refused during a disruption,
//! and only then; the guard never blocks an order it cannot judge.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use chrono::{DateTime, TimeDelta, Utc};
use serde_json::{Value, json};

use super::tests::{
    FakeNodeClasses, FakeRegistrar, FakeTokens, PROJECT, RecordingInstaller, ZONE, claim, fixture,
};
use super::*;
use crate::churn::NodeState;
use crate::scaleway::fake::Op;

const OFFER: &str = "EM-A115X-SSD";

#[derive(Default)]
struct Claims {
    claims: Mutex<Vec<Value>>,
    fail: Mutex<bool>,
}

#[async_trait]
impl NodeClaimSource for Claims {
    async fn list(&self) -> Result<Vec<Value>, KubeError> {
        if *self.fail.lock().unwrap() {
            return Err(KubeError::Unavailable("503 etcd leader changed".into()));
        }
        Ok(self.claims.lock().unwrap().clone())
    }

    async fn annotate(
        &self,
        name: &str,
        _: &str,
        _: &str,
        _: Option<&str>,
    ) -> Result<(), KubeError> {
        Err(KubeError::Refused(format!("read-only fake: {name}")))
    }
}

#[derive(Default)]
struct Siblings {
    states: Mutex<BTreeMap<String, NodeState>>,
    fail: Mutex<bool>,
    /// Someone else's do-not-disrupt is on every node.
    foreign_hold: Mutex<bool>,
    holds: Mutex<Vec<(String, DateTime<Utc>, String)>>,
    /// NodePools with `spec.replicas`.
    static_pools: Mutex<Vec<String>>,
    /// Reading a NodePool fails.
    pools_fail: Mutex<bool>,
}

#[async_trait]
impl SiblingNodes for Siblings {
    async fn state(&self, node: &str) -> Result<Option<NodeState>, KubeError> {
        if *self.fail.lock().unwrap() {
            return Err(KubeError::Refused("403 nodes is forbidden".into()));
        }
        Ok(self.states.lock().unwrap().get(node).cloned())
    }

    async fn hold(
        &self,
        node: &str,
        until: DateTime<Utc>,
        reason: &str,
    ) -> Result<bool, KubeError> {
        if *self.foreign_hold.lock().unwrap() {
            return Ok(false);
        }
        self.holds
            .lock()
            .unwrap()
            .push((node.into(), until, reason.into()));
        Ok(true)
    }

    async fn static_pool(&self, nodepool: &str) -> Result<bool, KubeError> {
        if *self.pools_fail.lock().unwrap() {
            return Err(KubeError::Unavailable("503".into()));
        }
        Ok(self
            .static_pools
            .lock()
            .unwrap()
            .iter()
            .any(|p| p == nodepool))
    }
}

struct Guarded {
    api: Arc<crate::scaleway::fake::FakeElasticMetal>,
    catalog: Arc<crate::catalog::CatalogStore>,
    claims: Arc<Claims>,
    siblings: Arc<Siblings>,
    provider: Provider,
}

fn guarded() -> Guarded {
    let f = fixture();
    let claims = Arc::new(Claims::default());
    let siblings = Arc::new(Siblings::default());
    let classes = Arc::new(FakeNodeClasses::default());
    for (k, v) in f.classes.classes.lock().unwrap().iter() {
        classes.classes.lock().unwrap().insert(k.clone(), v.clone());
    }
    *classes.secrets.lock().unwrap() = f.classes.secrets.lock().unwrap().clone();
    let provider = Provider::new(
        f.api.clone(),
        f.catalog.clone(),
        classes,
        Arc::new(RecordingInstaller::default()),
        ClusterPorts {
            tokens: Arc::new(FakeTokens::default()),
            nodes: Arc::new(FakeRegistrar::default()),
        },
        ProviderSettings {
            cluster_name: "test".into(),
            project_id: PROJECT.into(),
            zones: vec![ZONE.into()],
            instance_zones: vec![ZONE.into()],
        },
    )
    .with_node_claims(claims.clone())
    .with_churn_guard(siblings.clone());
    Guarded {
        api: f.api,
        catalog: f.catalog,
        claims,
        siblings,
        provider,
    }
}

fn rfc(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// A NodeClaim of NodePool `default` as the API server lists it.
fn listed(name: &str, offer: &str, zone: &str, created: DateTime<Utc>, initialized: bool) -> Value {
    let mut conditions = vec![];
    if initialized {
        conditions.push(json!({"type": "Initialized", "status": "True",
            "lastTransitionTime": rfc(created + TimeDelta::minutes(11))}));
    }
    json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": name, "uid": format!("uid-{name}"), "creationTimestamp": rfc(created),
            "labels": {"karpenter.sh/nodepool": "default", "node.kubernetes.io/instance-type": offer,
                       "topology.kubernetes.io/zone": zone}},
        "spec": {"nodeClassRef": {"group": "karpenter.scaleway.com", "kind": "ScalewayElasticMetalNodeClass", "name": "default"}},
        "status": {"providerID": format!("scaleway://baremetal/{zone}/srv-{name}"), "nodeName": name,
            "allocatable": {"cpu": "3800m", "memory": "28Gi", "pods": "110"},
            "conditions": conditions}
    })
}

/// The candidate of a consolidation command in flight (another NodePool's VM).
fn candidate() -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": "vms-abc", "uid": "uid-vms-abc", "creationTimestamp": rfc(Utc::now() - TimeDelta::hours(3)),
            "labels": {"karpenter.sh/nodepool": "vms", "node.kubernetes.io/instance-type": "POP2-2C-8G"}},
        "spec": {"nodeClassRef": {"group": "karpenter.scaleway.com", "kind": "ScalewayInstanceNodeClass", "name": "vms"}},
        "status": {"providerID": "scaleway://instance/fr-par-2/vm-1", "nodeName": "vms-abc",
            "conditions": [
                {"type": "Initialized", "status": "True"},
                {"type": "DisruptionReason", "status": "True", "reason": "Underutilized"}]}
    })
}

/// The order being created, as listed (its requests are read from there).
fn new_claim(name: &str, cpu: &str) -> (Value, Value) {
    let mut c = claim(name, &[OFFER]);
    c["spec"]["resources"] = json!({"requests": {"cpu": cpu, "memory": "2Gi", "pods": "3"}});
    let mut l = c.clone();
    l["metadata"]["creationTimestamp"] = json!(rfc(Utc::now()));
    l["metadata"]["uid"] = json!(format!("uid-{name}"));
    (c, l)
}

fn idle() -> NodeState {
    NodeState::default()
}

/// The measured cold path: a late replacement joined idle 12 minutes after
/// its order, while core replaces the VMs once more.
fn cold_path(g: &Guarded) -> (Value, DateTime<Utc>) {
    let now = Utc::now();
    // Whole seconds, as the API server writes timestamps.
    let ordered = DateTime::from_timestamp(now.timestamp(), 0).unwrap() - TimeDelta::minutes(12);
    let (create, listed_new) = new_claim("default-second", "3300m");
    *g.claims.claims.lock().unwrap() = vec![
        listed("default-late", OFFER, ZONE, ordered, true),
        candidate(),
        listed_new,
    ];
    g.siblings
        .states
        .lock()
        .unwrap()
        .insert("default-late".into(), idle());
    (create, ordered)
}

#[tokio::test]
async fn an_order_an_idle_sibling_can_take_is_refused_and_the_sibling_held() {
    let g = guarded();
    let (create, ordered) = cold_path(&g);
    let before = crate::metrics::churn_metrics().refused_count("default", OFFER);
    let err = g.provider.create(create).await.unwrap_err();
    let ProviderError::InsufficientCapacity(msg) = &err else {
        panic!("expected InsufficientCapacity, got {err:?}");
    };
    assert!(
        msg.contains("NodeClaim default-late of NodePool default")
            && msg.contains(OFFER)
            && msg.contains("default-second"),
        "{msg}"
    );
    assert_eq!(g.api.count(Op::CreateServer), 0, "nothing ordered");
    // Held until 5 minutes before its first paid hour ends (43 min away,
    // more than 15).
    let holds = g.siblings.holds.lock().unwrap().clone();
    assert_eq!(holds.len(), 1);
    assert_eq!(holds[0].0, "default-late");
    assert_eq!(holds[0].1, ordered + TimeDelta::minutes(55));
    assert!(holds[0].2.contains("default-second"), "{}", holds[0].2);
    // The offering is unavailable for the refusal's TTL, not the catalog's 30 min.
    let reason = g.catalog.refusal(OFFER, ZONE).expect("offering marked");
    assert!(reason.contains("default-late"), "{reason}");
    let after = crate::metrics::churn_metrics().refused_count("default", OFFER);
    assert_eq!(after, before + 1);
}

#[tokio::test]
async fn someone_elses_do_not_disrupt_is_left_alone_and_the_order_still_refused() {
    let g = guarded();
    let (create, _) = cold_path(&g);
    *g.siblings.foreign_hold.lock().unwrap() = true;
    let err = g.provider.create(create).await.unwrap_err();
    assert!(
        matches!(err, ProviderError::InsufficientCapacity(_)),
        "{err:?}"
    );
    assert!(g.siblings.holds.lock().unwrap().is_empty());
    assert_eq!(g.api.count(Op::CreateServer), 0);
}

/// Found by core's regression suite (StaticCapacity › should not go over
/// limit during concurrent changes): a static NodePool's drift replacement
/// was refused because a new idle node of the pool "could take its pods",
/// and drift stalled. A static NodePool keeps its count, whatever runs on
/// its nodes: its orders are never churn. A NodePool that cannot be read is
/// not judged either.
#[tokio::test]
async fn orders_of_a_static_nodepool_are_never_refused() {
    let g = guarded();
    let (create, _) = cold_path(&g);
    g.siblings
        .static_pools
        .lock()
        .unwrap()
        .push("default".into());
    g.provider.create(create).await.unwrap();
    assert_eq!(g.api.count(Op::CreateServer), 1);
    assert!(g.siblings.holds.lock().unwrap().is_empty());
    assert_eq!(g.catalog.refusal(OFFER, ZONE), None);

    let g = guarded();
    let (create, _) = cold_path(&g);
    *g.siblings.pools_fail.lock().unwrap() = true;
    g.provider.create(create).await.unwrap();
    assert_eq!(g.api.count(Op::CreateServer), 1);
    assert!(g.siblings.holds.lock().unwrap().is_empty());
}

#[tokio::test]
async fn outside_a_disruption_an_order_is_a_scale_up_and_is_made() {
    let g = guarded();
    let (create, _) = cold_path(&g);
    // No NodeClaim carries DisruptionReason: pods core could not place.
    g.claims
        .claims
        .lock()
        .unwrap()
        .retain(|c| c.pointer("/metadata/name").and_then(Value::as_str) != Some("vms-abc"));
    g.provider.create(create).await.unwrap();
    assert_eq!(g.api.count(Op::CreateServer), 1);
    assert!(g.siblings.holds.lock().unwrap().is_empty());
    assert_eq!(g.catalog.refusal(OFFER, ZONE), None);
}

#[tokio::test]
async fn siblings_that_cannot_take_the_pods_do_not_stop_the_order() {
    type Change = fn(&Guarded);
    let cases: [(&str, Change); 7] = [
        ("the sibling runs pods", |g| {
            g.siblings.states.lock().unwrap().insert(
                "default-late".into(),
                NodeState {
                    runs_work: true,
                    ..NodeState::default()
                },
            );
        }),
        ("the sibling is being disrupted", |g| {
            g.siblings.states.lock().unwrap().insert(
                "default-late".into(),
                NodeState {
                    disrupted: true,
                    ..NodeState::default()
                },
            );
        }),
        ("the sibling's Node is gone", |g| {
            g.siblings.states.lock().unwrap().clear();
        }),
        // Core's conformance suite (regression, "should account for
        // LimitRange Default on daemonSet pods"): core estimated the
        // DaemonSet's pod at no CPU (a LimitRange gives it 2 at admission),
        // so the order fits the sibling's allocatable but not beside the
        // DaemonSet pod that runs there; holding the sibling kept a second
        // server for nothing and the pods where core did not want them.
        (
            "the sibling's DaemonSet pods leave no room for the request",
            |g| {
                g.siblings.states.lock().unwrap().insert(
                    "default-late".into(),
                    NodeState {
                        used: BTreeMap::from([("cpu".to_string(), 2_000u128)]),
                        ..NodeState::default()
                    },
                );
            },
        ),
        ("the request does not fit the sibling", |g| {
            let mut claims = g.claims.claims.lock().unwrap();
            let new = claims.last_mut().unwrap();
            new["spec"]["resources"]["requests"]["cpu"] = json!("3900m");
        }),
        ("the sibling is in another zone", |g| {
            let mut claims = g.claims.claims.lock().unwrap();
            claims[0]["metadata"]["labels"]["topology.kubernetes.io/zone"] = json!("nl-ams-1");
        }),
        ("the sibling is not Initialized (still installing)", |g| {
            let mut claims = g.claims.claims.lock().unwrap();
            claims[0]["status"]["conditions"] = json!([]);
        }),
    ];
    for (what, change) in cases {
        let g = guarded();
        let (create, _) = cold_path(&g);
        change(&g);
        let mut create = create;
        if what == "the request does not fit the sibling" {
            create["spec"]["resources"]["requests"]["cpu"] = json!("3900m");
        }
        g.provider
            .create(create)
            .await
            .unwrap_or_else(|e| panic!("{what}: {e:?}"));
        assert_eq!(g.api.count(Op::CreateServer), 1, "{what}");
        assert!(g.siblings.holds.lock().unwrap().is_empty(), "{what}");
    }
}

#[tokio::test]
async fn a_guard_that_cannot_read_the_cluster_orders_as_before() {
    for fail_claims in [true, false] {
        let g = guarded();
        let (create, _) = cold_path(&g);
        if fail_claims {
            *g.claims.fail.lock().unwrap() = true;
        } else {
            *g.siblings.fail.lock().unwrap() = true;
        }
        g.provider.create(create).await.unwrap();
        assert_eq!(
            g.api.count(Op::CreateServer),
            1,
            "claims failing: {fail_claims}"
        );
        assert_eq!(g.catalog.refusal(OFFER, ZONE), None);
    }
}
