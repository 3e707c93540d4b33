//! The churn watch: a periodic pass (leader only) over NodePools and
//! NodeClaims. NodePools on an Elastic Metal NodeClass whose disruption
//! settings can start replaces they cannot finish get a Warning Event (once,
//! again when the settings change or after [`RISK_REPEAT`]); every new order
//! is checked against its NodePool's idle siblings and a churning one gets a
//! Warning Event on its NodeClaim and counts in
//! `karpenter_scaleway_churn_orders_total` / `_euros_total`. It also keeps
//! the guard's holds (`hold.rs`): a late replacement idle in a NodePool set
//! up to churn is held, every held Node gets one Event, and a hold is lifted
//! once the Node runs pods, its time is up, or its NodeClaim goes.
//!
//! A pass lists objects instead of watching them: a few lists every
//! [`DEFAULT_INTERVAL`] cost little next to an install, and a pass that fails
//! is simply the next one's work (nothing is acted on, only reported).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::api::{Api, DynamicObject, ListParams};
use kube::core::{ApiResource, GroupVersionKind};
use serde_json::Value;
use tracing::{debug, info, warn};

use super::hold::KubeSiblingNodes;
use super::{ClaimView, detect, hold_until, late_replacement, order_cost, parse_pool, risk_of};
use crate::catalog::{CatalogStore, ClassKind};
use crate::k8s::events::{EventRecorder, NewEvent};
use crate::k8s::nodes::NodeClaimList;
use crate::metrics::churn_metrics;
use crate::nodeclass::Billing;
use crate::provider::NodeClasses;

/// How often the pass runs.
pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(15);
/// A NodePool still set up to churn is warned about again after this long.
pub const RISK_REPEAT: Duration = Duration::from_secs(3600);

pub(crate) fn node_pool_resource() -> ApiResource {
    let gvk = GroupVersionKind::gvk("karpenter.sh", "v1", "NodePool");
    ApiResource::from_gvk_with_plural(&gvk, "nodepools")
}

pub struct ChurnWatch {
    pools: Api<DynamicObject>,
    claims: NodeClaimList,
    events: EventRecorder,
    catalog: Arc<CatalogStore>,
    classes: Arc<dyn NodeClasses>,
    /// NodeClaims already judged (by uid).
    judged: BTreeSet<String>,
    /// NodePool → (warning given, when).
    warned: HashMap<String, (String, Instant)>,
    first_pass: bool,
    siblings: KubeSiblingNodes,
    /// NodePools set up to churn, at the last NodePool pass.
    at_risk: BTreeSet<String>,
    /// Late replacements already judged for a hold (by uid).
    late_judged: BTreeSet<String>,
    /// Holds already announced by an Event: (node, until).
    announced: BTreeSet<(String, String)>,
}

/// A late replacement is held only if it became Initialized this recently:
/// older ones were judged by an earlier pass or leader, or are in use.
pub const LATE_FRESH: chrono::TimeDelta = chrono::TimeDelta::minutes(10);

impl ChurnWatch {
    pub fn new(client: Client, catalog: Arc<CatalogStore>, classes: Arc<dyn NodeClasses>) -> Self {
        ChurnWatch {
            pools: Api::all_with(client.clone(), &node_pool_resource()),
            claims: NodeClaimList::new(client.clone()),
            siblings: KubeSiblingNodes::new(client.clone()),
            events: EventRecorder::new(client),
            catalog,
            classes,
            judged: BTreeSet::new(),
            warned: HashMap::new(),
            first_pass: true,
            at_risk: BTreeSet::new(),
            late_judged: BTreeSet::new(),
            announced: BTreeSet::new(),
        }
    }

    pub async fn run(
        mut self,
        interval: Duration,
        is_leader: Arc<dyn Fn() -> bool + Send + Sync>,
        stop: impl Future<Output = ()>,
    ) {
        tokio::pin!(stop);
        let mut tick = tokio::time::interval(interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = &mut stop => return,
                _ = tick.tick() => {}
            }
            if !is_leader() {
                // A new leader judges only what is fresh when it takes over.
                self.first_pass = true;
                continue;
            }
            if let Err(e) = self.pools_pass().await {
                warn!(error = %e, "churn watch: listing NodePools failed; next pass retries");
            }
            let claims: Vec<ClaimView> = match self.claims.list().await {
                Ok(list) => list.iter().filter_map(ClaimView::parse).collect(),
                Err(e) => {
                    warn!(error = %e, "churn watch: listing NodeClaims failed; next pass retries");
                    continue;
                }
            };
            if let Err(e) = self.orders_pass(&claims).await {
                warn!(error = %e, "churn watch: reading pods failed; next pass retries");
            }
            if let Err(e) = self.holds_pass(&claims).await {
                warn!(error = %e, "churn watch: keeping the holds failed; next pass retries");
            }
        }
    }

    /// Warns about NodePools set up to churn; sets the per-NodePool gauge.
    async fn pools_pass(&mut self) -> Result<(), kube::Error> {
        let list = self.pools.list(&ListParams::default()).await?;
        let snapshot = self.catalog.snapshot();
        let mut risks = BTreeMap::new();
        let mut present = BTreeSet::new();
        for pool in list.items {
            let uid = pool.metadata.uid.clone().unwrap_or_default();
            let value = serde_json::to_value(&pool).map_err(kube::Error::SerdeError)?;
            let view = match parse_pool(&value) {
                Ok(v) => v,
                Err(e) => {
                    debug!(error = %e, "churn watch: NodePool not judged");
                    continue;
                }
            };
            if !view.elastic_metal {
                continue;
            }
            present.insert(view.name.clone());
            let Some(risk) = risk_of(&view) else {
                risks.insert(view.name.clone(), false);
                self.warned.remove(&view.name);
                continue;
            };
            risks.insert(view.name.clone(), true);
            let class = value
                .pointer("/spec/template/spec/nodeClassRef/name")
                .and_then(Value::as_str);
            // Only Elastic Metal NodePools are judged (above).
            let types = snapshot.for_class(ClassKind::ElasticMetal, class);
            let allowed = allowed_offers(&value);
            let offered: Vec<_> = types
                .iter()
                .filter(|t| allowed.as_ref().is_none_or(|a| a.contains(&t.name)))
                .cloned()
                .collect();
            let message = risk.message(super::cheapest_hourly(&offered));
            let due = match self.warned.get(&view.name) {
                Some((said, at)) => *said != message || at.elapsed() >= RISK_REPEAT,
                None => true,
            };
            if !due {
                continue;
            }
            warn!(nodepool = %view.name, policy = %risk.policy,
                consolidate_after = %risk.consolidate_after, "{message}");
            let event = NewEvent {
                regarding: ObjectReference {
                    api_version: Some("karpenter.sh/v1".into()),
                    kind: Some("NodePool".into()),
                    name: Some(view.name.clone()),
                    uid: Some(uid),
                    ..Default::default()
                },
                warning: true,
                action: "Consolidate".into(),
                reason: "ConsolidationChurnRisk".into(),
                note: message.clone(),
                series_key: format!("churn-risk/{}/{}", view.name, message),
            };
            match self.events.record(event).await {
                Ok(()) => {
                    self.warned
                        .insert(view.name.clone(), (message, Instant::now()));
                }
                Err(e) => {
                    warn!(nodepool = %view.name, error = %e, "churn watch: Event not written")
                }
            }
        }
        self.warned.retain(|name, _| present.contains(name));
        self.at_risk = risks
            .iter()
            .filter(|(_, r)| **r)
            .map(|(n, _)| n.clone())
            .collect();
        churn_metrics().set_risks(risks);
        Ok(())
    }

    /// Judges every order not judged yet.
    async fn orders_pass(&mut self, claims: &[ClaimView]) -> Result<(), kube::Error> {
        let now = chrono::Utc::now();
        let first = std::mem::replace(&mut self.first_pass, false);
        let mut idle_cache: HashMap<String, bool> = HashMap::new();
        for new in super::new_orders(claims, &mut self.judged, first, now) {
            // Which siblings could make it churn; their pods are read only then.
            let mut busy: HashMap<String, bool> = HashMap::new();
            for sib in claims.iter().filter(|c| {
                c.name != new.name
                    && c.initialized
                    && c.nodepool == new.nodepool
                    && c.offer == new.offer
            }) {
                let Some(node) = sib.node_name.as_ref() else {
                    continue;
                };
                let runs = match idle_cache.get(node) {
                    Some(b) => *b,
                    None => {
                        let b = self.siblings.runs_work(node).await?;
                        idle_cache.insert(node.clone(), b);
                        b
                    }
                };
                busy.insert(node.clone(), runs);
            }
            let Some(churn) = detect(new, claims, &|n| busy.get(n).copied().unwrap_or(true)) else {
                continue;
            };
            let monthly = new
                .node_class
                .as_deref()
                .and_then(|c| self.classes.get(c))
                .is_some_and(|c| c.spec.billing == Billing::Monthly);
            let snapshot = self.catalog.snapshot();
            let cost = order_cost(
                // `node_class` is set for Elastic Metal NodeClasses only.
                &snapshot.for_class(ClassKind::ElasticMetal, new.node_class.as_deref()),
                &churn.offer,
                new.zone.as_deref(),
                monthly,
            );
            let message = churn.message(cost);
            warn!(nodeclaim = %churn.claim, nodepool = %churn.nodepool, offer = %churn.offer,
                idle = %churn.idle, cost_eur = cost.map(|c| c.0), "consolidation churn: {message}");
            churn_metrics().count(&churn.nodepool, &churn.offer, cost.map(|c| c.0));
            let event = NewEvent {
                regarding: ObjectReference {
                    api_version: Some("karpenter.sh/v1".into()),
                    kind: Some("NodeClaim".into()),
                    name: Some(new.name.clone()),
                    uid: Some(new.uid.clone()),
                    ..Default::default()
                },
                warning: true,
                action: "Order".into(),
                reason: "ConsolidationChurn".into(),
                note: message,
                series_key: format!("churn/{}", new.uid),
            };
            if let Err(e) = self.events.record(event).await {
                warn!(nodeclaim = %new.name, error = %e, "churn watch: Event not written");
            }
        }
        super::forget_gone(claims, &mut self.judged);
        Ok(())
    }

    /// Holds late replacements idle in NodePools set up to churn, announces
    /// every hold once, and lifts the holds whose work is done.
    async fn holds_pass(&mut self, claims: &[ClaimView]) -> Result<(), kube::Error> {
        let now = chrono::Utc::now();
        for c in claims.iter().filter(|c| late_replacement(c)) {
            if self.late_judged.contains(&c.uid)
                || !c
                    .nodepool
                    .as_ref()
                    .is_some_and(|p| self.at_risk.contains(p))
                || c.initialized_at.is_none_or(|at| now - at > LATE_FRESH)
            {
                continue;
            }
            let Some(node) = c.node_name.as_deref() else {
                continue;
            };
            if !self.siblings.runs_work(node).await? {
                let until = hold_until(c.created, now);
                let late = c
                    .initialized_at
                    .map_or(0, |at| (at - c.created).num_minutes());
                let reason = format!(
                    "late replacement: Initialized {late} min after it was ordered, past Karpenter's \
                     10-minute window; kept for consolidation to move pods onto"
                );
                if self.siblings.place(node, until, &reason).await? {
                    info!(nodeclaim = %c.name, node, %until, "churn watch: holding a late replacement");
                }
            }
            self.late_judged.insert(c.uid.clone());
        }
        let live: BTreeSet<&String> = claims.iter().map(|c| &c.uid).collect();
        self.late_judged.retain(|uid| live.contains(uid));

        let mut kept = 0u64;
        for held in self.siblings.held().await? {
            let claim = claims
                .iter()
                .find(|c| c.node_name.as_deref() == Some(held.node.as_str()));
            let outcome = match claim {
                None => Some("gone"),
                Some(c) if c.deleting => Some("gone"),
                Some(_) if self.siblings.runs_work(&held.node).await? => Some("used"),
                Some(_) if held.until.is_none_or(|u| now >= u) => Some("expired"),
                Some(_) => None,
            };
            if let Some(outcome) = outcome {
                self.siblings.release(&held.node).await?;
                churn_metrics().released(outcome);
                info!(node = %held.node, outcome, "churn watch: hold lifted");
                continue;
            }
            kept += 1;
            let (Some(c), Some(until)) = (claim, held.until) else {
                continue;
            };
            let key = (held.node.clone(), until.to_rfc3339());
            if self.announced.contains(&key) {
                continue;
            }
            let note = format!(
                "Node {} is kept from disruption (karpenter.sh/do-not-disrupt) until {}, or until it runs pods: {}.",
                held.node,
                until.format("%H:%M:%SZ"),
                held.reason
            );
            let event = NewEvent {
                regarding: ObjectReference {
                    api_version: Some("karpenter.sh/v1".into()),
                    kind: Some("NodeClaim".into()),
                    name: Some(c.name.clone()),
                    uid: Some(c.uid.clone()),
                    ..Default::default()
                },
                warning: false,
                action: "Hold".into(),
                reason: "ConsolidationChurnHeld".into(),
                note,
                series_key: format!("churn-hold/{}/{}", c.uid, until.to_rfc3339()),
            };
            match self.events.record(event).await {
                Ok(()) => {
                    self.announced.insert(key);
                }
                Err(e) => warn!(nodeclaim = %c.name, error = %e, "churn watch: Event not written"),
            }
        }
        self.announced
            .retain(|(node, _)| claims.iter().any(|c| c.node_name.as_deref() == Some(node)));
        churn_metrics().set_held(kept);
        Ok(())
    }
}

/// The offers a NodePool's `node.kubernetes.io/instance-type In` requirement
/// allows (`None`: no such requirement).
fn allowed_offers(pool: &Value) -> Option<BTreeSet<String>> {
    let reqs = pool
        .pointer("/spec/template/spec/requirements")?
        .as_array()?;
    let mut allowed: Option<BTreeSet<String>> = None;
    for r in reqs {
        if r.get("key").and_then(Value::as_str) != Some(super::LABEL_INSTANCE_TYPE)
            || r.get("operator").and_then(Value::as_str) != Some("In")
        {
            continue;
        }
        let values: BTreeSet<String> = r
            .get("values")
            .and_then(Value::as_array)
            .map(|vs| {
                vs.iter()
                    .filter_map(Value::as_str)
                    .map(str::to_string)
                    .collect()
            })
            .unwrap_or_default();
        allowed = Some(match allowed {
            Some(a) => a.intersection(&values).cloned().collect(),
            None => values,
        });
    }
    allowed
}
