//! The garbage-collection safety metrics: Lists that failed rather than
//! answer a partial list, and every decision of the orphan sweeper.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// Why a List failed (`karpenter_scaleway_list_failures_total{reason}`).
pub const LIST_FAILURE_REASONS: [&str; 6] = [
    "api_unavailable",
    "rate_limited",
    "timeout",
    "auth",
    "inconsistent",
    "kube_unavailable",
];

/// How a sweeper pass ended (`karpenter_scaleway_sweeper_passes_total{result}`).
pub const SWEEPER_PASS_RESULTS: [&str; 2] = ["completed", "list_failed"];

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Reason {
    reason: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PassResult {
    result: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct Decision {
    decision: String,
    reason: String,
}

/// Process-wide ([`super::safety_metrics`]).
#[derive(Debug)]
pub struct SafetyMetrics {
    list_failures: Family<Reason, Counter>,
    sweeper_passes: Family<PassResult, Counter>,
    sweeper_decisions: Family<Decision, Counter>,
    sweeper_delete_failures: Counter,
}

impl Default for SafetyMetrics {
    /// Known label values start at zero, so that a rate() or an alert sees
    /// the series before the first failure.
    fn default() -> Self {
        let m = SafetyMetrics {
            list_failures: Family::default(),
            sweeper_passes: Family::default(),
            sweeper_decisions: Family::default(),
            sweeper_delete_failures: Counter::default(),
        };
        for reason in LIST_FAILURE_REASONS {
            m.list_failures.get_or_create_owned(&reason_label(reason));
        }
        for result in SWEEPER_PASS_RESULTS {
            m.sweeper_passes.get_or_create_owned(&PassResult {
                result: result.to_string(),
            });
        }
        m
    }
}

fn reason_label(reason: &str) -> Reason {
    Reason {
        reason: reason.to_string(),
    }
}

impl SafetyMetrics {
    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "karpenter_scaleway_list_failures",
            "List calls that failed rather than answer a partial list, by reason",
            self.list_failures.clone(),
        );
        registry.register(
            "karpenter_scaleway_sweeper_passes",
            "Orphan sweeper passes, by result (list_failed: no decision was taken)",
            self.sweeper_passes.clone(),
        );
        registry.register(
            "karpenter_scaleway_sweeper_decisions",
            "Orphan sweeper decisions, one per server per pass",
            self.sweeper_decisions.clone(),
        );
        registry.register(
            "karpenter_scaleway_sweeper_delete_failures",
            "Deletions decided by the orphan sweeper that the API refused (retried next pass)",
            self.sweeper_delete_failures.clone(),
        );
    }

    /// A List answered an error; `reason` is one of [`LIST_FAILURE_REASONS`].
    pub fn count_list_failure(&self, reason: &str) {
        self.list_failures
            .get_or_create(&reason_label(reason))
            .inc();
    }

    /// How many Lists failed for `reason` so far.
    pub fn list_failures(&self, reason: &str) -> u64 {
        self.list_failures
            .get(&reason_label(reason))
            .map_or(0, |c| c.get())
    }

    /// A sweeper pass ended; `result` is one of [`SWEEPER_PASS_RESULTS`].
    pub fn count_sweeper_pass(&self, result: &str) {
        self.sweeper_passes
            .get_or_create(&PassResult {
                result: result.to_string(),
            })
            .inc();
    }

    /// One server's decision in one pass.
    pub fn count_sweeper_decision(&self, decision: &str, reason: &str) {
        self.sweeper_decisions
            .get_or_create(&Decision {
                decision: decision.to_string(),
                reason: reason.to_string(),
            })
            .inc();
    }

    /// A deletion the sweeper decided was refused by the API (retried next pass).
    pub fn count_sweeper_delete_failure(&self) {
        self.sweeper_delete_failures.inc();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::tests::{encoded, has};

    #[test]
    fn list_failures_and_sweeper_decisions_are_exposed() {
        let m = SafetyMetrics::default();
        m.count_list_failure("inconsistent");
        m.count_list_failure("inconsistent");
        m.count_sweeper_pass("list_failed");
        m.count_sweeper_decision("spared", "claimed");
        m.count_sweeper_decision("would_delete", "orphaned");
        m.count_sweeper_decision("spared", "claimed");
        m.count_sweeper_delete_failure();
        let out = encoded(|r| m.register(r));
        has(&out, "# TYPE karpenter_scaleway_list_failures counter");
        has(
            &out,
            "karpenter_scaleway_list_failures_total{reason=\"inconsistent\"} 2",
        );
        has(
            &out,
            "karpenter_scaleway_list_failures_total{reason=\"rate_limited\"} 0",
        );
        has(
            &out,
            "karpenter_scaleway_sweeper_passes_total{result=\"list_failed\"} 1",
        );
        has(
            &out,
            "karpenter_scaleway_sweeper_passes_total{result=\"completed\"} 0",
        );
        has(
            &out,
            "karpenter_scaleway_sweeper_decisions_total{decision=\"spared\",reason=\"claimed\"} 2",
        );
        has(
            &out,
            "karpenter_scaleway_sweeper_decisions_total{decision=\"would_delete\",reason=\"orphaned\"} 1",
        );
        has(&out, "karpenter_scaleway_sweeper_delete_failures_total 1");
        assert_eq!(m.list_failures("inconsistent"), 2);
    }
}
