//! Reboots (core v1.15's `CloudProvider.Reboot`, `provider/reboot`): every
//! decision on a reboot call, and the reboots whose node never came back.

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::registry::Registry;

/// The machine kinds (`kind` label).
pub const REBOOT_KINDS: [&str; 2] = ["baremetal", "instance"];

/// What became of a reboot call or an accepted reboot (`outcome` label):
/// `accepted` (the API took the call, or a restart found that it had),
/// `replayed` (the operation was accepted before: not called again),
/// `refused` (never rebooted: install not joined, a standby, a wipe, a
/// server no longer this NodeClaim's, a request the API refuses), `not_now`
/// (ask again: an earlier call may still land, the server is busy),
/// `unavailable` (the API or the cluster did not answer; core retries),
/// `failed` (the server is gone, a permission is missing: core replaces the
/// node), `not_returned` (accepted, but the node kept its boot id past the
/// deadline: the provider deleted the NodeClaim).
pub const REBOOT_OUTCOMES: [&str; 7] = [
    "accepted",
    "replayed",
    "refused",
    "not_now",
    "unavailable",
    "failed",
    "not_returned",
];

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct KindOutcome {
    kind: String,
    outcome: String,
}

/// Counted by `provider/reboot`. Process-wide ([`super::reboot_metrics`]).
#[derive(Debug)]
pub struct RebootMetrics {
    reboots: Family<KindOutcome, Counter>,
}

impl Default for RebootMetrics {
    fn default() -> Self {
        let m = RebootMetrics {
            reboots: Family::default(),
        };
        for kind in REBOOT_KINDS {
            for outcome in REBOOT_OUTCOMES {
                m.reboots.get_or_create_owned(&KindOutcome {
                    kind: kind.to_string(),
                    outcome: outcome.to_string(),
                });
            }
        }
        m
    }
}

impl RebootMetrics {
    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "karpenter_scaleway_reboots",
            "Reboot calls and accepted reboots by machine kind (baremetal, instance) and outcome (accepted, replayed, refused, not_now, unavailable, failed, not_returned)",
            self.reboots.clone(),
        );
    }

    /// One decision of `outcome` about a machine of `kind`.
    pub fn count(&self, kind: &str, outcome: &str) {
        self.reboots
            .get_or_create(&KindOutcome {
                kind: kind.to_string(),
                outcome: outcome.to_string(),
            })
            .inc();
    }

    /// How many so far (tests).
    pub fn counted(&self, kind: &str, outcome: &str) -> u64 {
        self.reboots
            .get(&KindOutcome {
                kind: kind.to_string(),
                outcome: outcome.to_string(),
            })
            .map_or(0, |c| c.get())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::tests::{encoded, has};

    #[test]
    fn every_kind_and_outcome_starts_at_zero() {
        let m = RebootMetrics::default();
        m.count("baremetal", "accepted");
        m.count("baremetal", "accepted");
        let out = encoded(|r| m.register(r));
        has(&out, "# TYPE karpenter_scaleway_reboots counter");
        has(
            &out,
            "karpenter_scaleway_reboots_total{kind=\"baremetal\",outcome=\"accepted\"} 2",
        );
        has(
            &out,
            "karpenter_scaleway_reboots_total{kind=\"instance\",outcome=\"not_returned\"} 0",
        );
        assert_eq!(m.counted("baremetal", "accepted"), 2);
        assert_eq!(m.counted("instance", "refused"), 0);
    }
}
