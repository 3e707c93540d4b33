//! The demand planner at work (leader only): each standby pass samples the
//! load of every pool's planner, asks [`super::planner::decide`] for the
//! pool's target, and turns it into the standby count the pool keeps
//! (`target - adopted`, within `min` and `max`). A change of target is
//! explained by an Event on the NodeClass, a metric and the NodeClass's
//! `status.planner`. The samples live in memory: a restart or a new leader
//! watches the window again, which only delays staging. The target itself
//! survives: a pool's first decision starts from the servers it has.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use tracing::{info, warn};

use super::planner::{
    self, Change, Decision, NodeView, Observed, PlannerConfig, PlannerSpec, Sample,
};
use super::{PoolKey, PoolSpec, StandbyServer, TAG_RESERVATION};
use crate::catalog::{
    CAPACITY_TYPE_RESERVED, ClassKind, InstanceType, Snapshot, bytes_quantity, reservation_id,
};
use crate::metrics::planner_metrics;
use crate::nodeclass::PlannerStatus;
use crate::provider::{NodeClassRecord, Provider, TAG_NODECLAIM, tag_value};
use crate::scaleway::{Server, ServerStatus};

/// The nodes and the running pods of the cluster, as the planner sees them.
#[async_trait]
pub trait LoadSource: Send + Sync + 'static {
    async fn observe(&self) -> Result<Observed, String>;
}

/// Where the planner's view of each NodeClass is written
/// (`status.planner`).
#[async_trait]
pub trait PlannerStatusSink: Send + Sync + 'static {
    async fn publish(&self, class: &str, pools: Vec<PlannerStatus>) -> Result<(), String>;
}

/// What the planner needs besides the standby ports.
pub struct PlannerPorts {
    pub load: Arc<dyn LoadSource>,
    pub status: Arc<dyn PlannerStatusSink>,
    pub demand: Arc<Demand>,
    /// The planner's clock: the cluster's time (`Utc::now` in `main`), not
    /// the API's billing clock.
    pub clock: Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>,
}

/// The samples and targets of every planned pool.
#[derive(Default)]
pub struct Demand {
    pools: Mutex<HashMap<PoolKey, PoolDemand>>,
    /// What was last written to each NodeClass's status (without times).
    published: Mutex<HashMap<String, Vec<PlannerStatus>>>,
}

struct PoolDemand {
    samples: Vec<Sample>,
    target: u32,
    last_change: Option<DateTime<Utc>>,
    watched_since: DateTime<Utc>,
}

impl Demand {
    /// Forgets every sample (leadership lost: another replica watches now,
    /// and this one's history would bridge a gap it did not see).
    pub fn forget(&self) {
        self.lock().clear();
        self.published
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clear();
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<PoolKey, PoolDemand>> {
        self.pools.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The current target of a pool, when planned.
    pub fn target(&self, key: &PoolKey) -> Option<u32> {
        self.lock().get(key).map(|p| p.target)
    }
}

/// Keeps what `decide` needs to see back to `keep` before `now`: every
/// later sample and the one in force at `now - keep`. A sample equal to the
/// one before it changes nothing and is not kept.
pub(crate) fn push_sample(samples: &mut Vec<Sample>, sample: Sample, keep: std::time::Duration) {
    if samples
        .last()
        .is_some_and(|l| (l.cpu_millis, l.memory_bytes) == (sample.cpu_millis, sample.memory_bytes))
    {
        return;
    }
    samples.push(sample);
    let cut = sample.at - chrono::Duration::from_std(keep).unwrap_or(chrono::Duration::MAX);
    if let Some(in_force) = samples.iter().rposition(|s| s.at <= cut) {
        samples.drain(..in_force);
    }
}

/// The standby servers a pool keeps for a planner's `target` when `adopted`
/// of its servers are nodes already: the rest, within the pool's own `min`
/// and `max`.
pub(crate) fn standby_count(target: u32, adopted: u32, pool: &PoolSpec) -> u32 {
    target
        .saturating_sub(adopted)
        .clamp(pool.min, pool.max.max(pool.min))
}

/// The type of `offer` in the catalog of NodeClass `class`.
fn offer_type<'a>(types: &'a [InstanceType], offer: &str) -> Option<&'a InstanceType> {
    types.iter().find(|t| t.name == offer)
}

/// EUR per hour of a node, from the catalog (its type, zone and capacity
/// type); 0 when the catalog does not know it.
fn node_price(snapshot: &Snapshot, node: &NodeView) -> f64 {
    let (Some(name), Some(zone)) = (&node.instance_type, &node.zone) else {
        return 0.0;
    };
    [ClassKind::Instance, ClassKind::ElasticMetal]
        .into_iter()
        .flat_map(|k| snapshot.default_for(k).iter().cloned().collect::<Vec<_>>())
        .filter(|t| &t.name == name)
        .flat_map(|t| t.offerings)
        .filter(|o| &o.zone == zone && o.reservation.is_none())
        .map(|o| {
            if node.capacity_type.as_deref() == Some(CAPACITY_TYPE_RESERVED) {
                o.price
            } else {
                o.hourly_price.max(o.price)
            }
        })
        .next()
        .unwrap_or(0.0)
}

fn quantity_millis(millis: u64) -> String {
    format!("{millis}m")
}

fn rfc3339(t: DateTime<Utc>) -> String {
    t.to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

impl Provider {
    /// Uses a demand planner ([`PlannerPorts`]).
    pub fn with_planner(mut self, ports: PlannerPorts) -> Self {
        self.planner = Some(ports);
        self
    }

    /// Forgets the planner's samples (this replica stopped leading).
    pub(crate) fn forget_demand(&self) {
        if let Some(p) = &self.planner {
            p.demand.forget();
        }
    }

    /// Samples the load and decides each planned pool's target; returns the
    /// pools with the standby count the planner asks for in place of `min`.
    /// Pools without a planner, a dry run, or no planner ports: unchanged.
    pub(super) async fn plan_demand(
        &self,
        pools: &BTreeMap<PoolKey, PoolSpec>,
        classes: &BTreeMap<String, NodeClassRecord>,
        servers: &[Server],
        members: &HashMap<PoolKey, Vec<&StandbyServer>>,
        snapshot: &Snapshot,
    ) -> BTreeMap<PoolKey, PoolSpec> {
        let mut out = pools.clone();
        let Some(ports) = &self.planner else {
            return out;
        };
        let now = (ports.clock)();
        let mut planned: Vec<(PoolKey, PlannerConfig)> = Vec::new();
        for class in classes.values() {
            for pool in class.spec.standby.iter().flat_map(|s| &s.pools) {
                let key: PoolKey = (class.name.clone(), pool.offer.clone(), pool.zone.clone());
                if !pools.contains_key(&key) {
                    continue;
                }
                match planner::config_of(pool) {
                    Ok(Some(config)) => planned.push((key, config)),
                    Ok(None) => {}
                    Err(error) => {
                        warn!(nodeclass = %class.name, %error, "standby planner left out")
                    }
                }
            }
        }
        planner_metrics().know_nodeclasses(planned.iter().map(|(k, _)| k.0.as_str()));
        {
            let keys: BTreeSet<&PoolKey> = planned.iter().map(|(k, _)| k).collect();
            ports.demand.lock().retain(|k, _| keys.contains(k));
        }
        if planned.is_empty() {
            planner_metrics().set_pools(BTreeMap::new());
            self.publish_planner_status(ports, classes, BTreeMap::new())
                .await;
            return out;
        }
        let observed = match ports.load.observe().await {
            Ok(o) => Some(o),
            Err(error) => {
                warn!(%error, "planner: cannot read the cluster's pods and nodes; targets kept");
                None
            }
        };
        let mut statuses: BTreeMap<String, Vec<PlannerStatus>> = BTreeMap::new();
        let mut figures = BTreeMap::new();
        for (key, config) in planned {
            let (class, offer, zone) = &key;
            let rid = reservation_id(class, offer, zone);
            let adopted = servers
                .iter()
                .filter(|s| s.status != ServerStatus::Deleting)
                .filter(|s| tag_value(s, TAG_NODECLAIM).is_some())
                .filter(|s| tag_value(s, TAG_RESERVATION) == Some(rid.as_str()))
                .count() as u32;
            let standbys = members.get(&key).map_or(0, Vec::len) as u32;
            let types = snapshot.for_class(ClassKind::ElasticMetal, Some(class));
            let Some(kind) = offer_type(&types, offer) else {
                warn!(nodeclass = %class, %offer, "planner: the offer is not in the catalog; target kept");
                continue;
            };
            let allocatable = kind.allocatable();
            let offer_price = kind
                .offerings
                .iter()
                .find(|o| &o.zone == zone && o.reservation.is_none())
                .map_or(0.0, |o| o.price);
            let load = observed
                .as_ref()
                .map(|(nodes, pods)| planner::load_of(nodes, pods, &config.node_pools, &rid));
            let spec = PlannerSpec {
                window: config.window,
                at_least: config.at_least,
                hold: config.hold,
                ahead: config.ahead,
                max: config.max_servers,
                server_cpu_millis: allocatable
                    .cpu_millis
                    .saturating_sub(load.as_ref().map_or(0, |l| l.daemon_cpu_millis)),
                server_memory_bytes: allocatable
                    .memory_bytes
                    .saturating_sub(load.as_ref().map_or(0, |l| l.daemon_memory_bytes)),
            };
            let (decision, previous, last_change, watched_since) = {
                let mut pools_state = ports.demand.lock();
                let state = pools_state
                    .entry(key.clone())
                    .or_insert_with(|| PoolDemand {
                        samples: Vec::new(),
                        // What the pool already has was staged for a reason: kept
                        // until the planner has seen enough to decide otherwise.
                        target: (adopted + standbys).min(config.max_servers),
                        last_change: Some(now),
                        watched_since: now,
                    });
                if let Some(l) = &load {
                    push_sample(
                        &mut state.samples,
                        Sample {
                            at: now,
                            cpu_millis: l.cpu_millis,
                            memory_bytes: l.memory_bytes,
                        },
                        planner::history(config.window, config.hold, config.ahead),
                    );
                }
                let decision: Decision = if load.is_some() {
                    planner::decide(&spec, &state.samples, state.target, state.last_change, now)
                } else {
                    Decision {
                        target: state.target,
                        change: Change::Unchanged,
                        sustained: None,
                        needed: 0,
                        reason: "the cluster's pods could not be read; target kept".into(),
                    }
                };
                let previous = state.target;
                if decision.change != Change::Unchanged {
                    state.target = decision.target;
                    state.last_change = Some(now);
                }
                let last_change = state.last_change;
                let watched_since = state.watched_since;
                (decision, previous, last_change, watched_since)
            };

            let pool = &pools[&key];
            let standby = standby_count(decision.target, adopted, pool);
            if !config.dry_run
                && let Some(p) = out.get_mut(&key)
            {
                p.min = standby;
            }
            let vm_cost: f64 = load.as_ref().map_or(0.0, |l| {
                l.nodes
                    .iter()
                    .filter(|n| n.reservation.as_deref() != Some(rid.as_str()))
                    .map(|n| node_price(snapshot, n))
                    // Not `.sum()`: an empty f64 sum is -0.0, which the
                    // gauge and the status would show as "-0".
                    .fold(0.0, |total, price| total + price)
            });
            let metal_cost = f64::from(decision.target) * offer_price;
            let status = PlannerStatus {
                offer: offer.clone(),
                zone: zone.clone(),
                target: decision.target as i32,
                needed: decision.sustained.map(|_| decision.needed as i32),
                adopted: adopted as i32,
                standby: if config.dry_run { pool.min } else { standby } as i32,
                sustained_cpu: decision.sustained.map(|s| quantity_millis(s.0)),
                sustained_memory: decision.sustained.map(|s| bytes_quantity(s.1)),
                cpu: quantity_millis(load.as_ref().map_or(0, |l| l.cpu_millis)),
                memory: bytes_quantity(load.as_ref().map_or(0, |l| l.memory_bytes)),
                server_cpu: quantity_millis(spec.server_cpu_millis),
                server_memory: bytes_quantity(spec.server_memory_bytes),
                vm_euros_per_hour: (vm_cost * 10_000.0).round() / 10_000.0,
                metal_euros_per_hour: (metal_cost * 10_000.0).round() / 10_000.0,
                dry_run: config.dry_run,
                reason: decision.reason.clone(),
                last_change: last_change.map(rfc3339),
                watched_since: rfc3339(watched_since),
            };
            figures.insert(
                key.clone(),
                crate::metrics::PlannerFigures {
                    target: decision.target,
                    needed: decision.sustained.map(|_| decision.needed),
                    sustained_cpu_cores: decision.sustained.map(|s| s.0 as f64 / 1000.0),
                    sustained_memory_bytes: decision.sustained.map(|s| s.1),
                    vm_euros_per_hour: vm_cost,
                    metal_euros_per_hour: metal_cost,
                },
            );
            if decision.change != Change::Unchanged {
                self.explain(&key, &config, &decision, previous, &status)
                    .await;
            }
            statuses.entry(class.clone()).or_default().push(status);
        }
        planner_metrics().set_pools(figures);
        self.publish_planner_status(ports, classes, statuses).await;
        out
    }

    /// The Event, metric and log line of a change of target.
    async fn explain(
        &self,
        key: &PoolKey,
        config: &PlannerConfig,
        decision: &Decision,
        previous: u32,
        status: &PlannerStatus,
    ) {
        let (class, offer, zone) = key;
        let direction = if decision.change == Change::Raised {
            "raised"
        } else {
            "lowered"
        };
        let dry = if config.dry_run {
            "dry run: would have "
        } else {
            ""
        };
        let note = format!(
            "{dry}{direction} the target of {offer} in {zone} from {previous} to {} server(s) ({} adopted, {} standby): {}; nodes of NodePools {} cost {:.4} EUR/h now, {} server(s) of {offer} cost {:.4} EUR/h",
            decision.target,
            status.adopted,
            status.standby,
            decision.reason,
            config
                .node_pools
                .iter()
                .cloned()
                .collect::<Vec<_>>()
                .join(", "),
            status.vm_euros_per_hour,
            decision.target,
            status.metal_euros_per_hour,
        );
        info!(nodeclass = %class, %offer, %zone, previous, target = decision.target,
            dry_run = config.dry_run, reason = %decision.reason, "planner target changed");
        planner_metrics().count_change(class, direction);
        if let Some(sb) = &self.standby {
            let reason = match (config.dry_run, decision.change) {
                (true, _) => "PlannerDryRun",
                (false, Change::Raised) => "PlannerTargetRaised",
                (false, _) => "PlannerTargetLowered",
            };
            sb.events.record(class, false, reason, note).await;
        }
    }

    /// Writes each NodeClass's `status.planner` when it changed; a NodeClass
    /// whose pools lost their planner gets an empty list once.
    async fn publish_planner_status(
        &self,
        ports: &PlannerPorts,
        classes: &BTreeMap<String, NodeClassRecord>,
        mut statuses: BTreeMap<String, Vec<PlannerStatus>>,
    ) {
        let stale: Vec<String> = ports
            .demand
            .published
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .keys()
            .filter(|c| !statuses.contains_key(*c))
            .cloned()
            .collect();
        for class in stale {
            if classes.contains_key(&class) {
                statuses.insert(class, Vec::new());
            } else {
                ports
                    .demand
                    .published
                    .lock()
                    .unwrap_or_else(|p| p.into_inner())
                    .remove(&class);
            }
        }
        for (class, list) in statuses {
            let unchanged = ports
                .demand
                .published
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .get(&class)
                .is_some_and(|before| *before == list);
            if unchanged {
                continue;
            }
            match ports.status.publish(&class, list.clone()).await {
                Ok(()) => {
                    let mut published = ports
                        .demand
                        .published
                        .lock()
                        .unwrap_or_else(|p| p.into_inner());
                    if list.is_empty() {
                        published.remove(&class);
                    } else {
                        published.insert(class, list);
                    }
                }
                Err(error) => warn!(nodeclass = %class, %error, "planner: cannot write status"),
            }
        }
    }
}
