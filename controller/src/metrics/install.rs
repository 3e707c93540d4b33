//! The install engine's metrics: how long each phase took, how installs
//! ended, and which phases the installs of this process are in now.

use std::collections::BTreeMap;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use prometheus_client::registry::Registry;

/// Upper bounds (seconds) of the install phase-duration buckets: phases last
/// from seconds (ready) to tens of minutes (delivery, imaging).
const PHASE_BUCKETS: [f64; 12] = [
    1.0, 5.0, 15.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0, 1200.0, 1800.0, 3600.0,
];

fn phase_histogram() -> Histogram {
    Histogram::new(PHASE_BUCKETS)
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseOutcome {
    phase: String,
    outcome: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct InstallResult {
    result: String,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
struct PhaseLabel {
    phase: String,
}

/// The install engine's metrics. Process-wide ([`super::install_metrics`]).
#[derive(Debug)]
pub struct InstallMetrics {
    phases: Family<PhaseOutcome, Histogram, fn() -> Histogram>,
    /// By result: `joined`, `standby` or the failure class.
    outcomes: Family<InstallResult, Counter>,
    /// Installs running now, by phase (set at scrape time).
    in_progress: Family<PhaseLabel, Gauge>,
}

impl Default for InstallMetrics {
    fn default() -> Self {
        InstallMetrics {
            phases: Family::new_with_constructor(phase_histogram as fn() -> Histogram),
            outcomes: Family::default(),
            in_progress: Family::default(),
        }
    }
}

impl InstallMetrics {
    pub(super) fn register(&self, registry: &mut Registry) {
        registry.register(
            "karpenter_scaleway_install_phase_duration_seconds",
            "Time spent in each install phase, by how the phase ended",
            self.phases.clone(),
        );
        registry.register(
            "karpenter_scaleway_install_outcomes",
            "Installs that ended, by result: joined or the failure class",
            self.outcomes.clone(),
        );
        registry.register(
            "karpenter_scaleway_installs_in_progress",
            "Installs running in this process (node and standby installs), by current phase",
            self.in_progress.clone(),
        );
    }

    /// A phase ended: `outcome` is `completed`, `retried` (left for an earlier
    /// phase to try again) or `failed`.
    pub fn observe_phase(&self, phase: &str, outcome: &str, seconds: f64) {
        self.phases
            .get_or_create(&PhaseOutcome {
                phase: phase.to_string(),
                outcome: outcome.to_string(),
            })
            .observe(seconds);
    }

    /// An install ended: `joined`, or the class of its failure.
    /// Writes each of `results` at 0 (no-op for those already counted), so
    /// that `increase()` sees the first install of each: a series that first
    /// appears at 1 hides it. The install engine knows the results.
    pub fn know_outcomes<'a>(&self, results: impl IntoIterator<Item = &'a str>) {
        for result in results {
            self.outcomes.get_or_create_owned(&InstallResult {
                result: result.to_string(),
            });
        }
    }

    pub fn count_outcome(&self, result: &str) {
        self.outcomes
            .get_or_create(&InstallResult {
                result: result.to_string(),
            })
            .inc();
    }

    /// How many installs ended with `result` so far.
    pub fn outcomes(&self, result: &str) -> u64 {
        self.outcomes
            .get(&InstallResult {
                result: result.to_string(),
            })
            .map_or(0, |c| c.get())
    }

    /// The installs running now by phase, replacing the last figures: a
    /// phase no install is in any more disappears.
    pub fn set_in_progress(&self, by_phase: &BTreeMap<&'static str, usize>) {
        self.in_progress.clear();
        for (phase, n) in by_phase {
            let label = PhaseLabel {
                phase: phase.to_string(),
            };
            self.in_progress
                .get_or_create(&label)
                .set(i64::try_from(*n).unwrap_or(i64::MAX));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::metrics::tests::{encoded, has};

    #[test]
    fn phase_durations_outcomes_and_phases_in_progress_are_exposed() {
        let m = InstallMetrics::default();
        m.observe_phase("imaging", "completed", 42.0);
        m.observe_phase("imaging", "completed", 400.0);
        m.observe_phase("booting", "retried", 600.0);
        m.count_outcome("joined");
        m.count_outcome("joined");
        m.count_outcome("out_of_stock");
        m.set_in_progress(&BTreeMap::from([("imaging", 3), ("delivering", 1)]));
        m.set_in_progress(&BTreeMap::from([("imaging", 2)]));
        let out = encoded(|r| m.register(r));
        has(
            &out,
            "# TYPE karpenter_scaleway_install_phase_duration_seconds histogram",
        );
        let name = "karpenter_scaleway_install_phase_duration_seconds";
        let imaging = "phase=\"imaging\",outcome=\"completed\"";
        has(&out, &format!("{name}_bucket{{le=\"30.0\",{imaging}}} 0"));
        has(&out, &format!("{name}_bucket{{le=\"60.0\",{imaging}}} 1"));
        has(&out, &format!("{name}_bucket{{le=\"600.0\",{imaging}}} 2"));
        has(&out, &format!("{name}_bucket{{le=\"+Inf\",{imaging}}} 2"));
        has(&out, &format!("{name}_sum{{{imaging}}} 442.0"));
        has(
            &out,
            &format!("{name}_count{{phase=\"booting\",outcome=\"retried\"}} 1"),
        );
        has(&out, "# TYPE karpenter_scaleway_install_outcomes counter");
        has(
            &out,
            "karpenter_scaleway_install_outcomes_total{result=\"joined\"} 2",
        );
        has(
            &out,
            "karpenter_scaleway_install_outcomes_total{result=\"out_of_stock\"} 1",
        );
        assert_eq!(m.outcomes("joined"), 2);
        has(
            &out,
            "karpenter_scaleway_installs_in_progress{phase=\"imaging\"} 2",
        );
        assert!(!out.contains("phase=\"delivering\"}"), "{out}");
    }

    #[test]
    fn known_outcomes_are_written_at_zero_and_counts_kept() {
        let m = InstallMetrics::default();
        m.count_outcome("joined");
        m.know_outcomes(["joined", "standby", "deadline"]);
        let out = encoded(|r| m.register(r));
        has(
            &out,
            "karpenter_scaleway_install_outcomes_total{result=\"joined\"} 1",
        );
        has(
            &out,
            "karpenter_scaleway_install_outcomes_total{result=\"standby\"} 0",
        );
        has(
            &out,
            "karpenter_scaleway_install_outcomes_total{result=\"deadline\"} 0",
        );
    }
}
