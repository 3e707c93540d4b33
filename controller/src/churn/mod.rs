//! Consolidation churn on Elastic Metal: what sets a NodePool up for it, and
//! how to recognise it when it happens.
//!
//! Karpenter core gives a disruption replacement 10 minutes (wall clock, not
//! configurable: `disruption/queue.go`) to become Initialized. An Elastic
//! Metal install takes 10-15 minutes, so a consolidation *replace* onto a
//! freshly ordered server times out: core un-taints the old node, the late
//! replacement joins empty, and the next consolidation pass orders another
//! server while the first idles towards deletion. Every round buys a server
//! billed at least an hour (a month under monthly billing) and the move never
//! completes (docs/troubleshooting.md, "Servers ordered and deleted every 12
//! minutes"; the measurements in docs/figures.md).
//!
//! What the provider does about it, besides reporting:
//!
//! - **Refuse the order** ([`guard_candidates`], called by Create before it
//!   orders): while a disruption command is in flight (a NodeClaim carries
//!   core's `DisruptionReason` condition), an order whose whole request fits
//!   an Initialized sibling of the same NodePool, offer and zone that runs no
//!   pods is answered InsufficientCapacity, and the offering is marked
//!   unavailable for [`REFUSAL_TTL`]. Core drops the command at once
//!   ("replacement was deleted") instead of buying another server. Outside a
//!   disruption an order is a scale-up, whose pods core would have placed on
//!   the idle sibling had they fitted (it counts the pods nominated to it),
//!   so nothing is refused then: that is why the guard asks for both.
//! - **Hold the idle sibling** ([`hold_until`]): core never moves running
//!   pods onto a node still inside its NodePool's `consolidateAfter`, and once
//!   that has passed, Emptiness (the first method of every disruption pass)
//!   would delete the idle node before consolidation could use it. So the
//!   refused order's sibling, and any late replacement (Initialized 10 minutes
//!   or more after it was ordered, idle, in a NodePool set up to churn), gets
//!   `karpenter.sh/do-not-disrupt` until [`HOLD_MARGIN`] before the end of a
//!   paid hour, at least [`HOLD_MIN`] away. Consolidation then moves the pods onto it (a plain
//!   delete of the old nodes); the churn watch lifts the hold as soon as the
//!   node runs pods, when the hour ends, or when the node goes.
//!
//! This module is pure: [`risk_of`] judges a NodePool's disruption settings,
//! [`detect`] judges one new order against its NodePool's other NodeClaims,
//! [`guard_candidates`] and [`hold_until`] decide a refusal and its hold. The
//! kube side ([`watch`], [`hold`]) lists the objects, writes the Events,
//! places and lifts the holds and counts the metrics.

pub mod hold;
pub mod watch;

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::nodeclass::{GROUP, KIND};

/// Core's deadline for a disruption replacement to become Initialized.
pub const REPLACEMENT_WINDOW: Duration = Duration::from_secs(10 * 60);
/// An idle sibling ordered less than this long before a new order of the same
/// NodePool and offer makes the new order churn: Elastic Metal bills at least
/// an hour, so the idle one was paid for and a second one is being bought.
pub const CHURN_LOOKBACK: chrono::TimeDelta = chrono::TimeDelta::hours(1);
/// What an Elastic Metal install takes on real hardware when all goes well
/// (delivery 3-5 min, two reboots of 3-5 min, the image), in minutes: the
/// figure the NodePool warning quotes.
pub const TYPICAL_INSTALL_MINUTES: (u32, u32) = (10, 15);

pub const LABEL_NODEPOOL: &str = "karpenter.sh/nodepool";
pub const LABEL_INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
pub const LABEL_CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
pub const LABEL_ZONE: &str = "topology.kubernetes.io/zone";

/// What a NodePool's disruption settings allow, as far as churn goes.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolView {
    pub name: String,
    /// The NodePool points at an Elastic Metal NodeClass of this provider.
    pub elastic_metal: bool,
    /// `spec.disruption.consolidationPolicy` (core's default when absent).
    pub policy: String,
    /// `spec.disruption.consolidateAfter` as written; `None` is `Never`.
    pub consolidate_after: Option<String>,
    /// An always-active budget of 0 nodes covers the Underutilized reason.
    pub underutilized_blocked: bool,
    /// The template's requirements admit on-demand capacity (every Elastic
    /// Metal offering the catalog serves today is on-demand: ordering is what
    /// takes 10-15 minutes).
    pub on_demand: bool,
    /// `spec.replicas` is set: a static NodePool, which core never consolidates.
    pub static_replicas: bool,
}

/// A NodePool set up to churn, with the numbers the warning gives.
#[derive(Debug, Clone, PartialEq)]
pub struct Risk {
    pub nodepool: String,
    pub policy: String,
    pub consolidate_after: String,
}

impl Risk {
    /// The warning, with the numbers and the fix. `hourly_price`: the
    /// cheapest hourly price among the offers the NodePool may order, when
    /// known.
    pub fn message(&self, hourly_price: Option<f64>) -> String {
        let (lo, hi) = TYPICAL_INSTALL_MINUTES;
        let cost = match hourly_price {
            Some(p) => format!(
                " Each failed replace leaves a server billed at least one hour (from €{p:.2} for this NodePool's offers)."
            ),
            None => " Each failed replace leaves a server billed at least one hour.".to_string(),
        };
        format!(
            "NodePool {} can start consolidation replaces it cannot finish: consolidationPolicy {} \
             with consolidateAfter {} may replace a node by a freshly ordered Elastic Metal server, \
             whose install takes {lo}-{hi} min, while Karpenter gives a replacement {} min to become \
             Initialized; past that it gives up and orders again (servers ordered and deleted every \
             ~13 min).{cost} Fix: consolidationPolicy WhenEmpty for on-demand Elastic Metal NodePools, \
             or a budget {{nodes: \"0\", reasons: [Underutilized]}} (docs/troubleshooting.md).",
            self.nodepool,
            self.policy,
            self.consolidate_after,
            REPLACEMENT_WINDOW.as_secs() / 60,
        )
    }
}

/// Whether the NodePool can start a consolidation replace onto a freshly
/// ordered Elastic Metal server. Drift is not judged: a drift replacement that
/// outlasts the window fails once, and the next drift command moves the pods
/// onto it (no server wasted, docs/nodeclass.md).
pub fn risk_of(pool: &PoolView) -> Option<Risk> {
    let consolidates = matches!(
        pool.policy.as_str(),
        "WhenEmptyOrUnderutilized" | "Balanced"
    );
    if !pool.elastic_metal
        || !consolidates
        || pool.underutilized_blocked
        || !pool.on_demand
        || pool.static_replicas
    {
        return None;
    }
    Some(Risk {
        nodepool: pool.name.clone(),
        policy: pool.policy.clone(),
        consolidate_after: pool.consolidate_after.clone()?,
    })
}

/// Reads what [`risk_of`] needs from a `karpenter.sh/v1` NodePool.
pub fn parse_pool(pool: &Value) -> Result<PoolView, String> {
    let name = pool
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .ok_or("NodePool without metadata.name")?
        .to_string();
    let spec = pool.get("spec").unwrap_or(&Value::Null);
    let class_ref = spec.pointer("/template/spec/nodeClassRef");
    let elastic_metal = class_ref.is_some_and(|r| {
        r.get("group").and_then(Value::as_str) == Some(GROUP)
            && r.get("kind").and_then(Value::as_str) == Some(KIND)
    });
    let disruption = spec.get("disruption").unwrap_or(&Value::Null);
    let policy = disruption
        .get("consolidationPolicy")
        .and_then(Value::as_str)
        .unwrap_or("WhenEmptyOrUnderutilized")
        .to_string();
    // Core requires the field (a NodePool without it is not served); any
    // duration lets consolidation run, only how soon differs.
    let consolidate_after = disruption
        .get("consolidateAfter")
        .and_then(Value::as_str)
        .filter(|s| *s != "Never")
        .map(str::to_string);
    let underutilized_blocked = disruption
        .get("budgets")
        .and_then(Value::as_array)
        .is_some_and(|budgets| budgets.iter().any(blocks_underutilized));
    let on_demand = spec
        .pointer("/template/spec/requirements")
        .and_then(Value::as_array)
        .is_none_or(|reqs| {
            reqs.iter()
                .filter(|r| r.get("key").and_then(Value::as_str) == Some(LABEL_CAPACITY_TYPE))
                .all(|r| admits(r, "on-demand"))
        });
    Ok(PoolView {
        name,
        elastic_metal,
        policy,
        consolidate_after,
        underutilized_blocked,
        on_demand,
        static_replicas: spec.get("replicas").is_some_and(|r| !r.is_null()),
    })
}

/// An always-active budget of zero nodes that applies to Underutilized.
fn blocks_underutilized(budget: &Value) -> bool {
    let zero = matches!(
        budget.get("nodes").and_then(Value::as_str),
        Some("0") | Some("0%")
    );
    let always = budget.get("schedule").is_none_or(Value::is_null);
    let reasons = budget.get("reasons").and_then(Value::as_array);
    let covers = reasons
        .is_none_or(|rs| rs.is_empty() || rs.iter().any(|r| r.as_str() == Some("Underutilized")));
    zero && always && covers
}

/// Whether one node selector requirement admits `value`.
fn admits(req: &Value, value: &str) -> bool {
    let values: Vec<&str> = req
        .get("values")
        .and_then(Value::as_array)
        .map(|vs| vs.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    match req.get("operator").and_then(Value::as_str) {
        Some("In") => values.contains(&value),
        Some("NotIn") => !values.contains(&value),
        Some("DoesNotExist") => false,
        _ => true,
    }
}

/// One NodeClaim as the detector sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimView {
    pub name: String,
    pub uid: String,
    pub nodepool: Option<String>,
    pub offer: Option<String>,
    pub zone: Option<String>,
    pub created: DateTime<Utc>,
    /// `status.providerID`: set once the server is ordered.
    pub provider_id: Option<String>,
    pub node_name: Option<String>,
    /// The `Initialized` condition is True.
    pub initialized: bool,
    /// When it became Initialized (the condition's `lastTransitionTime`).
    pub initialized_at: Option<DateTime<Utc>>,
    pub deleting: bool,
    pub node_class: Option<String>,
    /// Core's `DisruptionReason` condition, when True: the NodeClaim is the
    /// candidate of a disruption command in flight (its reason, e.g.
    /// `Underutilized`).
    pub disruption: Option<String>,
    /// `status.allocatable`, in thousandths of each resource's unit.
    pub allocatable: BTreeMap<String, u128>,
}

impl ClaimView {
    pub fn parse(claim: &Value) -> Option<ClaimView> {
        let meta = claim.get("metadata")?;
        let label = |k: &str| {
            meta.pointer(&format!("/labels/{}", k.replace('/', "~1")))
                .and_then(Value::as_str)
                .map(str::to_string)
        };
        let created = meta
            .get("creationTimestamp")
            .and_then(Value::as_str)
            .and_then(|s| DateTime::parse_from_rfc3339(s).ok())?
            .with_timezone(&Utc);
        let status = claim.get("status").unwrap_or(&Value::Null);
        let initialized = crate::provider::nodeclaim::initialized(claim);
        let condition = |kind: &str| {
            status
                .get("conditions")
                .and_then(Value::as_array)
                .and_then(|cs| {
                    cs.iter().find(|c| {
                        c.get("type").and_then(Value::as_str) == Some(kind)
                            && c.get("status").and_then(Value::as_str) == Some("True")
                    })
                })
        };
        let initialized_at = condition("Initialized")
            .and_then(|c| c.get("lastTransitionTime"))
            .and_then(Value::as_str)
            .and_then(|s| DateTime::parse_from_rfc3339(s).ok())
            .map(|t| t.with_timezone(&Utc));
        let disruption = condition("DisruptionReason").map(|c| {
            c.get("reason")
                .and_then(Value::as_str)
                .unwrap_or("Unknown")
                .to_string()
        });
        let class_ref = claim.pointer("/spec/nodeClassRef");
        let node_class = class_ref
            .filter(|r| {
                r.get("group").and_then(Value::as_str) == Some(GROUP)
                    && r.get("kind").and_then(Value::as_str) == Some(KIND)
            })
            .and_then(|r| r.get("name").and_then(Value::as_str))
            .map(str::to_string);
        Some(ClaimView {
            name: meta.get("name")?.as_str()?.to_string(),
            uid: meta
                .get("uid")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_string(),
            nodepool: label(LABEL_NODEPOOL),
            offer: label(LABEL_INSTANCE_TYPE),
            zone: label(LABEL_ZONE),
            created,
            provider_id: status
                .get("providerID")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_string),
            node_name: status
                .get("nodeName")
                .and_then(Value::as_str)
                .filter(|s| !s.is_empty())
                .map(str::to_string),
            initialized,
            initialized_at,
            deleting: meta.get("deletionTimestamp").is_some_and(|d| !d.is_null()),
            node_class,
            disruption,
            allocatable: quantities(status.get("allocatable")),
        })
    }
}

/// A map of Kubernetes quantities (`{"cpu": "8", "memory": "61Gi"}`) in
/// thousandths of each unit; unreadable values are left out.
pub fn quantities(map: Option<&Value>) -> BTreeMap<String, u128> {
    map.and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| {
                    let q = crate::catalog::parse_quantity_milli(v.as_str()?)?;
                    Some((k.clone(), q))
                })
                .collect()
        })
        .unwrap_or_default()
}

/// How long an offering stays unavailable after a refused churn order: long
/// enough that core's next passes do not compute the same replace again
/// (they run every 10 s), short enough that a scale-up after the move is not
/// kept from the offering for the catalog's whole TTL.
pub const REFUSAL_TTL: Duration = Duration::from_secs(5 * 60);
/// A hold lasts until the end of a paid hour at least this far away: longer
/// than the usual `consolidateAfter` (30 s to 5 min), after which core moves
/// pods onto the held node.
pub const HOLD_MIN: chrono::TimeDelta = chrono::TimeDelta::minutes(15);
/// Elastic Metal bills hourly servers by the started hour.
pub const PAID_PERIOD: chrono::TimeDelta = chrono::TimeDelta::hours(1);
/// A hold ends this long before a paid hour does, so that core can delete
/// the node still unused (Emptiness, its validation, the drain and the API
/// call take a minute or two) before the next hour starts to be billed: the
/// standby release's default margin.
pub const HOLD_MARGIN: chrono::TimeDelta = chrono::TimeDelta::minutes(5);

/// An order Create is about to make, as the guard judges it.
#[derive(Debug, Clone, PartialEq)]
pub struct Order<'a> {
    pub claim: &'a str,
    pub nodepool: &'a str,
    pub offer: &'a str,
    pub zone: &'a str,
    /// The NodeClaim's `spec.resources.requests`, in thousandths.
    pub requests: &'a BTreeMap<String, u128>,
}

/// Whether `allocatable` holds every resource `requests` asks for.
pub fn fits(requests: &BTreeMap<String, u128>, allocatable: &BTreeMap<String, u128>) -> bool {
    !allocatable.is_empty()
        && requests
            .iter()
            .all(|(k, want)| *want == 0 || allocatable.get(k).is_some_and(|have| have >= want))
}

/// The siblings that could take `order`'s pods instead, most recent first:
/// NodeClaims of its NodePool, offer and zone, Initialized, with a Node, not
/// being deleted, not themselves disruption candidates, whose allocatable
/// holds the whole request. Empty unless a disruption command is in flight
/// (some NodeClaim not being deleted carries `DisruptionReason`): see the
/// module's documentation. Whether a candidate's Node runs pods, or is being
/// disrupted, is read afterwards, for these only ([`NodeState`]).
pub fn guard_candidates<'a>(order: &Order<'_>, claims: &'a [ClaimView]) -> Vec<&'a ClaimView> {
    let in_flight = claims.iter().any(|c| c.disruption.is_some() && !c.deleting);
    if !in_flight {
        return Vec::new();
    }
    let mut out: Vec<&ClaimView> = claims
        .iter()
        .filter(|c| c.name != order.claim)
        .filter(|c| {
            c.nodepool.as_deref() == Some(order.nodepool)
                && c.offer.as_deref() == Some(order.offer)
                && c.zone.as_deref() == Some(order.zone)
        })
        .filter(|c| c.initialized && !c.deleting && c.disruption.is_none())
        .filter(|c| c.node_name.is_some() && c.provider_id.is_some())
        .filter(|c| fits(order.requests, &c.allocatable))
        .collect();
    out.sort_by_key(|c| std::cmp::Reverse(c.created));
    out
}

/// What the guard reads of a candidate's Node.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeState {
    /// It carries core's `karpenter.sh/disrupted` taint (being disrupted).
    pub disrupted: bool,
    /// A pod other than a DaemonSet's or a mirror pod runs on it ([`is_workload`]).
    pub runs_work: bool,
    /// What the pods bound to it request, DaemonSet and mirror pods included
    /// (`cpu`, `memory`, `pods`, in thousandths, as [`quantities`]).
    pub used: BTreeMap<String, u128>,
}

impl NodeState {
    /// Whether the node is free to take the pods of an order.
    pub fn idle(&self) -> bool {
        !self.disrupted && !self.runs_work
    }

    /// Whether the pods of an order requesting `requests` fit on the node
    /// beside what already runs there: `allocatable` less [`NodeState::used`].
    /// The order's requests already count core's estimate of the
    /// DaemonSets' pods, which run on the node too, so a sibling is taken
    /// for one that can hold the order only with room to spare: a wrong
    /// refusal keeps pods pending, a missed one costs one order.
    pub fn has_room(
        &self,
        requests: &BTreeMap<String, u128>,
        allocatable: &BTreeMap<String, u128>,
    ) -> bool {
        let free: BTreeMap<String, u128> = allocatable
            .iter()
            .map(|(k, have)| {
                let used = self.used.get(k).copied().unwrap_or(0);
                (k.clone(), have.saturating_sub(used))
            })
            .collect();
        fits(requests, &free)
    }
}

/// When a hold of a server ordered at `created` ends: [`HOLD_MARGIN`] before
/// the end of its first paid hour that leaves at least [`HOLD_MIN`] of hold
/// from `now`. Holding the server until then costs nothing that is not
/// already paid, except when the hour under way ends too soon to wait for,
/// in which case one more hour is held in place of the server the refusal
/// did not buy.
pub fn hold_until(created: DateTime<Utc>, now: DateTime<Utc>) -> DateTime<Utc> {
    let target = now + HOLD_MIN + HOLD_MARGIN;
    if target <= created {
        return created + PAID_PERIOD - HOLD_MARGIN;
    }
    let elapsed = (target - created).num_seconds();
    let hour = PAID_PERIOD.num_seconds();
    let hours = (elapsed + hour - 1) / hour;
    created + chrono::TimeDelta::seconds(hours.max(1) * hour) - HOLD_MARGIN
}

/// A refused order: Create's answer and the hold it placed.
#[derive(Debug, Clone, PartialEq)]
pub struct Refusal {
    pub claim: String,
    pub nodepool: String,
    pub offer: String,
    pub zone: String,
    /// The idle sibling NodeClaim (and Node) that takes the pods instead.
    pub sibling: String,
    pub hold_until: DateTime<Utc>,
}

impl Refusal {
    pub fn new(order: &Order<'_>, sibling: &ClaimView, now: DateTime<Utc>) -> Refusal {
        Refusal {
            claim: order.claim.to_string(),
            nodepool: order.nodepool.to_string(),
            offer: order.offer.to_string(),
            zone: order.zone.to_string(),
            sibling: sibling.name.clone(),
            hold_until: hold_until(sibling.created, now),
        }
    }

    /// Create's error text (core logs it with the NodeClaim).
    pub fn message(&self) -> String {
        format!(
            "not ordering {offer} in {zone} for NodeClaim {claim}: NodeClaim {sibling} of NodePool {pool} \
             ({offer}, Initialized, no pods) can take its pods; it is kept from disruption until {until} \
             and the offering is unavailable for {ttl} min, so that consolidation moves the pods onto it \
             instead of buying another server (docs/troubleshooting.md, consolidation churn)",
            offer = self.offer,
            zone = self.zone,
            claim = self.claim,
            sibling = self.sibling,
            pool = self.nodepool,
            until = self.hold_until.format("%H:%M:%SZ"),
            ttl = REFUSAL_TTL.as_secs() / 60,
        )
    }
}

/// Whether `claim` is a late replacement worth holding: an Elastic Metal
/// NodeClaim that became Initialized [`REPLACEMENT_WINDOW`] or more after it
/// was ordered (core had given up on it), not being deleted nor disrupted.
/// Whether it is idle and its NodePool set up to churn is the caller's.
pub fn late_replacement(claim: &ClaimView) -> bool {
    let window = chrono::TimeDelta::from_std(REPLACEMENT_WINDOW).unwrap_or(chrono::TimeDelta::MAX);
    claim.node_class.is_some()
        && claim.initialized
        && !claim.deleting
        && claim.disruption.is_none()
        && claim.node_name.is_some()
        && claim
            .initialized_at
            .is_some_and(|at| at - claim.created >= window)
}

/// A new order made while a sibling of the same NodePool and offer stood
/// idle: the idle one was bought for nothing, or this one is.
#[derive(Debug, Clone, PartialEq)]
pub struct Churn {
    pub claim: String,
    pub nodepool: String,
    pub offer: String,
    /// The idle sibling and how long before this order it had been ordered.
    pub idle: String,
    pub idle_age: chrono::TimeDelta,
}

impl Churn {
    /// The Event's note. `cost`: what the order costs at the least (EUR),
    /// with its unit of billing.
    pub fn message(&self, cost: Option<(f64, &str)>) -> String {
        let cost = match cost {
            Some((eur, unit)) => {
                format!(" This order costs at least €{eur:.2} (Elastic Metal bills by the {unit}).")
            }
            None => String::new(),
        };
        format!(
            "Ordered {offer} for NodePool {pool} while NodeClaim {idle} ({offer}, ordered {age} min ago, \
             Initialized, no pods) stands idle: a consolidation replace that outlasted Karpenter's \
             {window}-minute window is the usual cause, and each round buys another server.{cost} \
             See docs/troubleshooting.md, \"Servers ordered and deleted every 13 minutes\".",
            offer = self.offer,
            pool = self.nodepool,
            idle = self.idle,
            age = self.idle_age.num_minutes(),
            window = REPLACEMENT_WINDOW.as_secs() / 60,
        )
    }
}

/// Whether `new`, just ordered, churns: another NodeClaim of its NodePool and
/// offer, ordered within [`CHURN_LOOKBACK`] before it, is Initialized and
/// runs no pods (`busy`: the node names that run a pod other than a
/// DaemonSet's or a mirror pod). A sibling being deleted counts: it was
/// bought and goes unused.
pub fn detect(new: &ClaimView, claims: &[ClaimView], busy: &dyn Fn(&str) -> bool) -> Option<Churn> {
    let pool = new.nodepool.as_ref()?;
    let offer = new.offer.as_ref()?;
    new.provider_id.as_ref()?;
    claims
        .iter()
        .filter(|c| c.name != new.name)
        .filter(|c| c.nodepool.as_ref() == Some(pool) && c.offer.as_ref() == Some(offer))
        .filter(|c| c.initialized && c.created <= new.created)
        .filter(|c| new.created - c.created < CHURN_LOOKBACK)
        .filter(|c| c.node_name.as_deref().is_some_and(|n| !busy(n)))
        // The most recent idle sibling names the round that just failed.
        .max_by_key(|c| c.created)
        .map(|c| Churn {
            claim: new.name.clone(),
            nodepool: pool.clone(),
            offer: offer.clone(),
            idle: c.name.clone(),
            idle_age: new.created - c.created,
        })
}

/// Orders older than this when the watch first sees them (a restart, a new
/// leader) are not judged: their siblings may have changed since.
pub const FRESH_ORDER: chrono::TimeDelta = chrono::TimeDelta::minutes(5);

/// The orders of this pass not judged before: Elastic Metal NodeClaims with a
/// server (providerID set), each judged once (by uid, recorded in `judged`).
/// On the first pass after a start or a leader change, orders older than
/// [`FRESH_ORDER`] are recorded as judged without being judged.
pub fn new_orders<'a>(
    claims: &'a [ClaimView],
    judged: &mut std::collections::BTreeSet<String>,
    first_pass: bool,
    now: DateTime<Utc>,
) -> Vec<&'a ClaimView> {
    let mut out = Vec::new();
    for c in claims {
        if c.node_class.is_none() || c.provider_id.is_none() || !judged.insert(c.uid.clone()) {
            continue;
        }
        if first_pass && now - c.created > FRESH_ORDER {
            continue;
        }
        out.push(c);
    }
    out
}

/// Drops from `judged` the NodeClaims no longer listed.
pub fn forget_gone(claims: &[ClaimView], judged: &mut std::collections::BTreeSet<String>) {
    let live: std::collections::BTreeSet<&String> = claims.iter().map(|c| &c.uid).collect();
    judged.retain(|uid| live.contains(uid));
}

/// Whether a pod counts as work on its node: not a DaemonSet's, not a mirror
/// pod, not finished.
pub fn is_workload(pod: &Value) -> bool {
    let daemonset = pod
        .pointer("/metadata/ownerReferences")
        .and_then(Value::as_array)
        .is_some_and(|os| {
            os.iter()
                .any(|o| o.get("kind").and_then(Value::as_str) == Some("DaemonSet"))
        });
    let mirror = pod
        .pointer("/metadata/annotations/kubernetes.io~1config.mirror")
        .is_some();
    let finished = matches!(
        pod.pointer("/status/phase").and_then(Value::as_str),
        Some("Succeeded") | Some("Failed")
    );
    !(daemonset || mirror || finished)
}

/// The least an order costs: an hour at the hourly price, or a month under
/// monthly billing. `None` when the catalog does not know the offering.
pub fn order_cost(
    types: &[crate::catalog::InstanceType],
    offer: &str,
    zone: Option<&str>,
    monthly: bool,
) -> Option<(f64, &'static str)> {
    let it = types.iter().find(|t| t.name == offer)?;
    let offering = it
        .offerings
        .iter()
        .find(|o| zone.is_none_or(|z| o.zone == z))?;
    if monthly {
        offering
            .monthly
            .as_ref()
            .map(|m| (m.price_per_month, "month"))
    } else {
        Some((offering.hourly_price, "hour"))
    }
}

/// The cheapest hourly price among offers, per name: for the NodePool
/// warning.
pub fn cheapest_hourly(types: &[crate::catalog::InstanceType]) -> Option<f64> {
    types
        .iter()
        .flat_map(|t| t.offerings.iter().map(|o| o.hourly_price))
        .filter(|p| *p > 0.0)
        .min_by(f64::total_cmp)
}

#[cfg(test)]
mod tests;
