//! Standby servers (warm metal, `provider/standby`) and the demand planner
//! that sizes their pools: how many servers in each state, what the idle ones
//! cost, what recycling saved, how fast adoption is, and the numbers behind
//! each pool's target.
//!
//! The per-pass figures (servers by state, idle cost, planner figures) are
//! kept as the pass left them and turned into gauges at scrape time, so that
//! a pool or a state gone since the last pass disappears.

use std::collections::BTreeMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Mutex, MutexGuard};

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Adoption (Create of a reserved NodeClaim) to Node Ready, in seconds.
const ADOPTION_BUCKETS: [f64; 10] = [
    10.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0, 180.0, 300.0, 600.0,
];

type FloatGauges<L> = Family<L, Gauge<f64, AtomicU64>>;

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Class {
    nodeclass: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct ServerState {
    nodeclass: String,
    offer: String,
    zone: String,
    state: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Recycling {
    nodeclass: String,
    decision: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolLabels {
    nodeclass: String,
    offer: String,
    zone: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Direction {
    nodeclass: String,
    direction: String,
}

/// The `decision` values of `karpenter_scaleway_standby_recycling_total`.
const RECYCLING_DECISIONS: [&str; 2] = ["recycled", "deleted"];

/// The `direction` values of `karpenter_scaleway_planner_target_changes_total`.
const DIRECTIONS: [&str; 2] = ["raised", "lowered"];

fn class(name: &str) -> Class {
    Class {
        nodeclass: name.to_string(),
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

#[derive(Debug, Default)]
struct StandbyPass {
    /// (nodeclass, offer, zone, state) → servers.
    servers: BTreeMap<(String, String, String, String), usize>,
    /// nodeclass → EUR per hour of its idle standby servers.
    idle_cost: BTreeMap<String, f64>,
}

/// Process-wide ([`super::standby_metrics`]).
#[derive(Debug)]
pub struct StandbyMetrics {
    pass: Mutex<StandbyPass>,
    servers: Family<ServerState, Gauge>,
    idle_cost: FloatGauges<Class>,
    savings: Family<Class, Counter<f64, AtomicU64>>,
    orders: Family<Class, Counter>,
    releases: Family<Class, Counter>,
    recycling: Family<Recycling, Counter>,
    adoption: Histogram,
}

impl Default for StandbyMetrics {
    fn default() -> Self {
        StandbyMetrics {
            pass: Mutex::default(),
            servers: Family::default(),
            idle_cost: Family::default(),
            savings: Family::default(),
            orders: Family::default(),
            releases: Family::default(),
            recycling: Family::default(),
            adoption: Histogram::new(ADOPTION_BUCKETS),
        }
    }
}

impl StandbyMetrics {
    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "karpenter_scaleway_standby_servers",
            "Standby servers by NodeClass, offer, zone and state (installing, idle, wiping)",
            self.servers.clone(),
        );
        registry.register(
            "karpenter_scaleway_standby_idle_euros_per_hour",
            "What the idle standby servers of a NodeClass cost per hour (monthly billing: the monthly price over 730 h)",
            self.idle_cost.clone(),
        );
        registry.register(
            "karpenter_scaleway_standby_savings_euros",
            "EUR saved by adopting recycled servers instead of ordering: a monthly order's setup fee, or the paid rest of an hourly server's hour",
            self.savings.clone(),
        );
        registry.register(
            "karpenter_scaleway_standby_orders",
            "Standby servers ordered",
            self.orders.clone(),
        );
        registry.register(
            "karpenter_scaleway_standby_releases",
            "Standby servers released (deleted) at the end of their paid period or when no pool wanted them",
            self.releases.clone(),
        );
        registry.register(
            "karpenter_scaleway_standby_recycling",
            "Servers of deleted nodes, by decision: recycled (wiped back to standby) or deleted",
            self.recycling.clone(),
        );
        registry.register(
            "karpenter_scaleway_standby_adoption_seconds",
            "From the adoption of a standby server to its Node Ready",
            self.adoption.clone(),
        );
    }

    /// Servers per (nodeclass, offer, zone, state) as of a pass (replaces
    /// the previous pass's figures).
    pub fn set_servers(&self, servers: BTreeMap<(String, String, String, String), usize>) {
        lock(&self.pass).servers = servers;
    }

    /// EUR per hour of the idle standby servers, per NodeClass.
    pub fn set_idle_cost(&self, cost: BTreeMap<String, f64>) {
        lock(&self.pass).idle_cost = cost;
    }

    /// Writes the per-NodeClass counters of NodeClasses with a standby pool
    /// at 0 (no-op for those already written), so that each series exists
    /// before its first event: `rate()` and `increase()` only see a count
    /// that rises from a sample they already have.
    pub fn know_nodeclasses<'a>(&self, nodeclasses: impl IntoIterator<Item = &'a str>) {
        for nodeclass in nodeclasses {
            let labels = class(nodeclass);
            self.orders.get_or_create_owned(&labels);
            self.releases.get_or_create_owned(&labels);
            self.savings.get_or_create_owned(&labels);
            for decision in RECYCLING_DECISIONS {
                self.recycling.get_or_create_owned(&Recycling {
                    nodeclass: nodeclass.to_string(),
                    decision: decision.to_string(),
                });
            }
        }
    }

    pub fn count_order(&self, nodeclass: &str) {
        self.orders.get_or_create(&class(nodeclass)).inc();
    }

    pub fn count_release(&self, nodeclass: &str) {
        self.releases.get_or_create(&class(nodeclass)).inc();
    }

    /// A deleted node's server: `recycled` or `deleted`.
    pub fn count_recycling(&self, nodeclass: &str, decision: &str) {
        self.recycling
            .get_or_create(&Recycling {
                nodeclass: nodeclass.to_string(),
                decision: decision.to_string(),
            })
            .inc();
    }

    pub fn add_savings(&self, nodeclass: &str, euros: f64) {
        if euros > 0.0 {
            self.savings.get_or_create(&class(nodeclass)).inc_by(euros);
        }
    }

    /// An adoption ended with the Node Ready after `seconds`.
    pub fn observe_adoption(&self, seconds: f64) {
        self.adoption.observe(seconds);
    }

    /// Before a scrape: the gauges from the last pass's figures.
    pub(super) fn refresh(&self) {
        let pass = lock(&self.pass);
        self.servers.clear();
        for ((nodeclass, offer, zone, state), n) in &pass.servers {
            let labels = ServerState {
                nodeclass: nodeclass.clone(),
                offer: offer.clone(),
                zone: zone.clone(),
                state: state.clone(),
            };
            self.servers
                .get_or_create(&labels)
                .set(i64::try_from(*n).unwrap_or(i64::MAX));
        }
        self.idle_cost.clear();
        for (nodeclass, euros) in &pass.idle_cost {
            self.idle_cost.get_or_create(&class(nodeclass)).set(*euros);
        }
    }
}

/// One planned pool's figures as of the last standby pass.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct PlannerFigures {
    pub target: u32,
    /// `None` while the load has not been watched for the whole window.
    pub needed: Option<u32>,
    pub sustained_cpu_cores: Option<f64>,
    pub sustained_memory_bytes: Option<u64>,
    pub vm_euros_per_hour: f64,
    pub metal_euros_per_hour: f64,
}

type Pick = fn(&PlannerFigures) -> Option<f64>;

/// The planner's per-pool gauges: name, help, which figure.
const PLANNER_GAUGES: [(&str, &str, Pick); 6] = [
    (
        "karpenter_scaleway_planner_target_servers",
        "Servers of a standby pool the demand planner stages for the migratable load (adopted and standby)",
        |f| Some(f64::from(f.target)),
    ),
    (
        "karpenter_scaleway_planner_needed_servers",
        "Servers the sustained load needs, before the bounds (absent until the load was watched for the whole window)",
        |f| f.needed.map(f64::from),
    ),
    (
        "karpenter_scaleway_planner_sustained_cpu_cores",
        "CPU requested by the sustained part of the migratable load",
        |f| f.sustained_cpu_cores,
    ),
    (
        "karpenter_scaleway_planner_sustained_memory_bytes",
        "Memory requested by the sustained part of the migratable load",
        |f| f.sustained_memory_bytes.map(|b| b as f64),
    ),
    (
        "karpenter_scaleway_planner_vm_euros_per_hour",
        "EUR per hour of the nodes the planner counts that are not the pool's servers (typically VMs)",
        |f| Some(f.vm_euros_per_hour),
    ),
    (
        "karpenter_scaleway_planner_metal_euros_per_hour",
        "EUR per hour of the planner's target in servers of the pool's offer",
        |f| Some(f.metal_euros_per_hour),
    ),
];

/// The demand planner (`provider/standby/demand.rs`): per pool, its target
/// and the numbers behind it; per NodeClass, the changes of target.
/// Process-wide ([`super::planner_metrics`]).
#[derive(Debug, Default)]
pub struct PlannerMetrics {
    /// (nodeclass, offer, zone) → figures, as of the last pass.
    pools: Mutex<BTreeMap<(String, String, String), PlannerFigures>>,
    /// One family per [`PLANNER_GAUGES`] entry.
    gauges: [FloatGauges<PoolLabels>; PLANNER_GAUGES.len()],
    changes: Family<Direction, Counter>,
}

impl PlannerMetrics {
    pub(super) fn register(&self, registry: &mut Registry) {
        for ((name, help, _), family) in PLANNER_GAUGES.iter().zip(&self.gauges) {
            registry.register(*name, *help, family.clone());
        }
        registry.register(
            "karpenter_scaleway_planner_target_changes",
            "Changes of a planner target by NodeClass and direction (raised, lowered; dry runs included)",
            self.changes.clone(),
        );
    }

    /// The planned pools' figures (replaces the previous pass's).
    pub fn set_pools(&self, pools: BTreeMap<(String, String, String), PlannerFigures>) {
        *lock(&self.pools) = pools;
    }

    /// Writes the changes of the planned NodeClasses at 0 (see
    /// [`StandbyMetrics::know_nodeclasses`]).
    pub fn know_nodeclasses<'a>(&self, nodeclasses: impl IntoIterator<Item = &'a str>) {
        for nodeclass in nodeclasses {
            for direction in DIRECTIONS {
                self.changes.get_or_create_owned(&Direction {
                    nodeclass: nodeclass.to_string(),
                    direction: direction.to_string(),
                });
            }
        }
    }

    /// A change of target, `raised` or `lowered`.
    pub fn count_change(&self, nodeclass: &str, direction: &str) {
        self.changes
            .get_or_create(&Direction {
                nodeclass: nodeclass.to_string(),
                direction: direction.to_string(),
            })
            .inc();
    }

    /// Before a scrape: the gauges from the last pass's figures.
    pub(super) fn refresh(&self) {
        let pools = lock(&self.pools);
        for ((_, _, pick), family) in PLANNER_GAUGES.iter().zip(&self.gauges) {
            family.clear();
            for ((nodeclass, offer, zone), figures) in pools.iter() {
                if let Some(v) = pick(figures) {
                    let labels = PoolLabels {
                        nodeclass: nodeclass.clone(),
                        offer: offer.clone(),
                        zone: zone.clone(),
                    };
                    family.get_or_create(&labels).set(v);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::tests::{encoded, has};

    fn key(a: &str, b: &str, c: &str) -> (String, String, String) {
        (a.to_string(), b.to_string(), c.to_string())
    }

    #[test]
    fn standby_servers_costs_and_adoptions_are_exposed() {
        let m = StandbyMetrics::default();
        let servers = |state: &str, n| {
            let (a, b, c) = key("warm", "EM-A115X-SSD", "fr-par-2");
            BTreeMap::from([((a, b, c, state.to_string()), n)])
        };
        m.set_servers(servers("wiping", 1));
        m.refresh();
        m.set_servers(servers("idle", 2));
        m.set_idle_cost(BTreeMap::from([("warm".to_string(), 0.182)]));
        m.count_order("warm");
        m.count_recycling("warm", "recycled");
        m.add_savings("warm", 0.5);
        m.add_savings("warm", -1.0);
        m.observe_adoption(25.0);
        m.refresh();
        let out = encoded(|r| m.register(r));
        has(
            &out,
            "karpenter_scaleway_standby_servers{nodeclass=\"warm\",offer=\"EM-A115X-SSD\",zone=\"fr-par-2\",state=\"idle\"} 2",
        );
        assert!(!out.contains("state=\"wiping\""), "{out}");
        has(
            &out,
            "karpenter_scaleway_standby_idle_euros_per_hour{nodeclass=\"warm\"} 0.182",
        );
        has(
            &out,
            "karpenter_scaleway_standby_orders_total{nodeclass=\"warm\"} 1",
        );
        has(
            &out,
            "karpenter_scaleway_standby_recycling_total{nodeclass=\"warm\",decision=\"recycled\"} 1",
        );
        has(
            &out,
            "karpenter_scaleway_standby_savings_euros_total{nodeclass=\"warm\"} 0.5",
        );
        has(
            &out,
            "karpenter_scaleway_standby_adoption_seconds_bucket{le=\"20.0\"} 0",
        );
        has(
            &out,
            "karpenter_scaleway_standby_adoption_seconds_bucket{le=\"30.0\"} 1",
        );
        has(&out, "karpenter_scaleway_standby_adoption_seconds_count 1");
    }

    #[test]
    fn planner_figures_follow_the_last_pass() {
        let m = PlannerMetrics::default();
        m.set_pools(BTreeMap::from([(
            key("gone", "EM-A115X-SSD", "fr-par-2"),
            PlannerFigures::default(),
        )]));
        m.refresh();
        m.set_pools(BTreeMap::from([(
            key("warm", "EM-A115X-SSD", "fr-par-2"),
            PlannerFigures {
                target: 3,
                needed: None,
                sustained_cpu_cores: Some(5.5),
                sustained_memory_bytes: Some(1 << 30),
                vm_euros_per_hour: 1.25,
                metal_euros_per_hour: 0.273,
            },
        )]));
        m.count_change("warm", "raised");
        m.refresh();
        let out = encoded(|r| m.register(r));
        let pool = "nodeclass=\"warm\",offer=\"EM-A115X-SSD\",zone=\"fr-par-2\"";
        has(
            &out,
            &format!("karpenter_scaleway_planner_target_servers{{{pool}}} 3.0"),
        );
        has(
            &out,
            &format!("karpenter_scaleway_planner_sustained_cpu_cores{{{pool}}} 5.5"),
        );
        has(
            &out,
            &format!("karpenter_scaleway_planner_sustained_memory_bytes{{{pool}}} 1073741824.0"),
        );
        has(
            &out,
            "karpenter_scaleway_planner_target_changes_total{nodeclass=\"warm\",direction=\"raised\"} 1",
        );
        assert!(
            !out.contains("karpenter_scaleway_planner_needed_servers{"),
            "{out}"
        );
        assert!(!out.contains("nodeclass=\"gone\""), "{out}");
    }

    #[test]
    fn known_nodeclasses_have_their_counters_at_zero_before_any_event() {
        let standby = StandbyMetrics::default();
        standby.know_nodeclasses(["warm"]);
        standby.count_order("warm");
        // Known again (every pass): counts are kept.
        standby.know_nodeclasses(["warm", "cold"]);
        let out = encoded(|r| standby.register(r));
        for line in [
            "karpenter_scaleway_standby_orders_total{nodeclass=\"warm\"} 1",
            "karpenter_scaleway_standby_orders_total{nodeclass=\"cold\"} 0",
            "karpenter_scaleway_standby_releases_total{nodeclass=\"cold\"} 0",
            "karpenter_scaleway_standby_savings_euros_total{nodeclass=\"cold\"} 0.0",
            "karpenter_scaleway_standby_recycling_total{nodeclass=\"cold\",decision=\"recycled\"} 0",
            "karpenter_scaleway_standby_recycling_total{nodeclass=\"cold\",decision=\"deleted\"} 0",
        ] {
            has(&out, line);
        }

        let planner = PlannerMetrics::default();
        planner.know_nodeclasses(["warm"]);
        let out = encoded(|r| planner.register(r));
        for direction in DIRECTIONS {
            has(
                &out,
                &format!(
                    "karpenter_scaleway_planner_target_changes_total{{nodeclass=\"warm\",direction=\"{direction}\"}} 0"
                ),
            );
        }
    }
}
