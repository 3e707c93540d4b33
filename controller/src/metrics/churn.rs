//! Consolidation churn on Elastic Metal (`churn/`): orders made while a
//! sibling of the same NodePool and offer stood idle, what they cost at the
//! least, which NodePools are set up for it, and the churn guard's refusals
//! and holds.

use std::collections::BTreeMap;
use std::sync::Mutex;
use std::sync::atomic::AtomicU64;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::registry::Registry;

/// How a hold ends (`karpenter_scaleway_churn_holds_released_total{outcome}`).
const RELEASE_OUTCOMES: [&str; 3] = ["used", "expired", "gone"];

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PoolOffer {
    nodepool: String,
    offer: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Pool {
    nodepool: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Outcome {
    outcome: String,
}

fn pool_offer(nodepool: &str, offer: &str) -> PoolOffer {
    PoolOffer {
        nodepool: nodepool.to_string(),
        offer: offer.to_string(),
    }
}

/// Counted by the churn watch (`churn/watch.rs`) and the churn guard
/// (`provider/create.rs`). Process-wide ([`super::churn_metrics`]).
#[derive(Debug)]
pub struct ChurnMetrics {
    orders: Family<PoolOffer, Counter>,
    euros: Family<PoolOffer, Counter<f64, AtomicU64>>,
    refused: Family<PoolOffer, Counter>,
    /// 1 when set up to churn (absent: not an EM NodePool); set at scrape
    /// time from `risks`.
    at_risk: Family<Pool, Gauge>,
    risks: Mutex<BTreeMap<String, bool>>,
    /// Nodes held from disruption by the churn guard, at the last pass.
    held: Gauge,
    released: Family<Outcome, Counter>,
}

impl Default for ChurnMetrics {
    fn default() -> Self {
        let m = ChurnMetrics {
            orders: Family::default(),
            euros: Family::default(),
            refused: Family::default(),
            at_risk: Family::default(),
            risks: Mutex::default(),
            held: Gauge::default(),
            released: Family::default(),
        };
        for outcome in RELEASE_OUTCOMES {
            m.released.get_or_create_owned(&Outcome {
                outcome: outcome.to_string(),
            });
        }
        m
    }
}

impl ChurnMetrics {
    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "karpenter_scaleway_churn_orders",
            "Servers ordered while an Initialized, empty node of the same NodePool and offer, ordered less than an hour before, stood idle",
            self.orders.clone(),
        );
        registry.register(
            "karpenter_scaleway_churn_euros",
            "The least those orders cost, in EUR (an hour at the hourly price, a month under monthly billing)",
            self.euros.clone(),
        );
        registry.register(
            "karpenter_scaleway_nodepool_churn_risk",
            "1 when an Elastic Metal NodePool's disruption settings can start consolidation replaces that outlast Karpenter's 10-minute window",
            self.at_risk.clone(),
        );
        registry.register(
            "karpenter_scaleway_churn_refused",
            "Orders refused during a disruption command because an idle, Initialized node of the same NodePool, offer and zone could take their pods",
            self.refused.clone(),
        );
        registry.register(
            "karpenter_scaleway_churn_held_nodes",
            "Idle nodes kept from disruption (karpenter.sh/do-not-disrupt) until consolidation moves pods onto them or their paid hour ends",
            self.held.clone(),
        );
        registry.register(
            "karpenter_scaleway_churn_holds_released",
            "Holds lifted, by outcome: used (the node runs pods), expired (its paid hour ended first), gone (the node went)",
            self.released.clone(),
        );
    }

    /// One order that churned, of `offer` in `nodepool`.
    pub fn count(&self, nodepool: &str, offer: &str, euros: Option<f64>) {
        let key = pool_offer(nodepool, offer);
        self.orders.get_or_create(&key).inc();
        self.euros
            .get_or_create(&key)
            .inc_by(euros.unwrap_or(0.0).max(0.0));
    }

    /// One order refused by the churn guard.
    pub fn refused(&self, nodepool: &str, offer: &str) {
        self.refused
            .get_or_create(&pool_offer(nodepool, offer))
            .inc();
    }

    /// Orders of `offer` in `nodepool` refused by the churn guard so far.
    pub fn refused_count(&self, nodepool: &str, offer: &str) -> u64 {
        self.refused
            .get(&pool_offer(nodepool, offer))
            .map_or(0, |c| c.get())
    }

    pub fn set_held(&self, held: u64) {
        self.held.set(i64::try_from(held).unwrap_or(i64::MAX));
    }

    pub fn released(&self, outcome: &str) {
        self.released
            .get_or_create(&Outcome {
                outcome: outcome.to_string(),
            })
            .inc();
    }

    /// Which NodePools are set up to churn (replaces the last pass's).
    pub fn set_risks(&self, risks: BTreeMap<String, bool>) {
        *self.risks.lock().unwrap_or_else(|e| e.into_inner()) = risks;
    }

    /// Before a scrape: the risk gauges from the last pass, a NodePool gone
    /// since disappearing.
    pub(super) fn refresh(&self) {
        let risks = self.risks.lock().unwrap_or_else(|e| e.into_inner());
        self.at_risk.clear();
        for (pool, risk) in risks.iter() {
            self.at_risk
                .get_or_create(&Pool {
                    nodepool: pool.clone(),
                })
                .set(i64::from(*risk));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::tests::{encoded, has};

    #[test]
    fn churn_orders_cost_and_risks_are_exposed() {
        let m = ChurnMetrics::default();
        m.count("metal", "EM-A115X-SSD", Some(0.091));
        m.count("metal", "EM-A115X-SSD", Some(0.091));
        m.refused("metal", "EM-A115X-SSD");
        m.set_held(1);
        m.released("used");
        m.set_risks(BTreeMap::from([
            ("gone".to_string(), true),
            ("safe".to_string(), false),
        ]));
        m.set_risks(BTreeMap::from([
            ("metal".to_string(), true),
            ("safe".to_string(), false),
        ]));
        m.refresh();
        let out = encoded(|r| m.register(r));
        let metal = "nodepool=\"metal\",offer=\"EM-A115X-SSD\"";
        has(&out, "# TYPE karpenter_scaleway_churn_orders counter");
        has(
            &out,
            &format!("karpenter_scaleway_churn_refused_total{{{metal}}} 1"),
        );
        has(&out, "karpenter_scaleway_churn_held_nodes 1");
        has(
            &out,
            "karpenter_scaleway_churn_holds_released_total{outcome=\"used\"} 1",
        );
        has(
            &out,
            "karpenter_scaleway_churn_holds_released_total{outcome=\"expired\"} 0",
        );
        has(
            &out,
            &format!("karpenter_scaleway_churn_orders_total{{{metal}}} 2"),
        );
        has(
            &out,
            &format!("karpenter_scaleway_churn_euros_total{{{metal}}} 0.182"),
        );
        has(&out, "# TYPE karpenter_scaleway_nodepool_churn_risk gauge");
        has(
            &out,
            "karpenter_scaleway_nodepool_churn_risk{nodepool=\"metal\"} 1",
        );
        has(
            &out,
            "karpenter_scaleway_nodepool_churn_risk{nodepool=\"safe\"} 0",
        );
        assert!(!out.contains("nodepool=\"gone\""), "{out}");
        assert_eq!(m.refused_count("metal", "EM-A115X-SSD"), 1);
    }
}
