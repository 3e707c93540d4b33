//! Repair policies: how long Karpenter's node repair (feature gate
//! `NodeRepair`) lets a Node stay unhealthy before it deletes its NodeClaim.
//!
//! Core counts the toleration from the condition's `lastTransitionTime` and
//! does not look at whether the NodeClaim is initialised. Our Nodes are
//! registered right after the order (`create.rs`, "Registration deadline"),
//! and the node lifecycle controller sets such a Node's `Ready` to `Unknown`
//! within a minute, where it stays until the kubelet starts at the end of the
//! install. So the `Ready=Unknown` toleration must outlast the longest
//! install the engine allows; the engine fails (and cleans up) an install
//! that overruns its deadlines by itself, so repair only has to catch nodes
//! that went silent after joining.

use std::time::Duration;

use crate::install::InstallSettings;

/// One policy, in the proto's terms.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepairPolicy {
    /// A Node condition type, e.g. `Ready`.
    pub condition_type: String,
    /// `True`, `False` or `Unknown`.
    pub condition_status: String,
    pub toleration: Duration,
}

/// `Ready=False` for this long: the kubelet reports the node unhealthy. An
/// Elastic Metal reboot alone (firmware POST) takes 3-5 minutes and replacing
/// the node costs a new delivery and install (10-15 minutes at best), so a
/// node gets far longer to recover than a cloud VM would; 30 minutes is what
/// Karpenter's AWS provider uses as well.
pub const READY_FALSE_TOLERATION: Duration = Duration::from_secs(30 * 60);
/// Never less than this for `Ready=Unknown`, whatever the deadlines.
pub const READY_UNKNOWN_MIN_TOLERATION: Duration = Duration::from_secs(30 * 60);
/// Added to the longest install: the node lifecycle controller and the
/// engine's own cadence (poll, probes, a resume after a leader change) are
/// not exact, and an install must never lose that race.
pub const INSTALL_MARGIN: Duration = Duration::from_secs(15 * 60);

/// The longest an install can last before the engine fails it by itself,
/// with every phase taking its whole deadline: delivery; then per rescue
/// boot (the first one and each return to rescue) the reboot request and
/// the rescue boot (each under the rescue deadline: the clock restarts when
/// the server is seen in rescue), the image writes (one imaging deadline
/// shared by every attempt of that boot) and the normal boot (a return to
/// rescue happens when the booting deadline passes); then the maintenance
/// API (plus the grace for a lost ApplyConfiguration answer) and the join.
pub fn longest_install(settings: &InstallSettings) -> Duration {
    let d = &settings.deadlines;
    let per_rescue_boot = d.rescue.saturating_mul(2) + d.imaging + d.booting;
    [
        per_rescue_boot.saturating_mul(settings.rescue_returns.saturating_add(1)),
        d.maintenance,
        settings.apply_grace,
        d.join,
    ]
    .into_iter()
    .fold(d.delivery, Duration::saturating_add)
}

/// The policies the provider declares: `Ready=False` for
/// [`READY_FALSE_TOLERATION`], `Ready=Unknown` for the longest install plus
/// [`INSTALL_MARGIN`] (at least [`READY_UNKNOWN_MIN_TOLERATION`]).
pub fn repair_policies(settings: &InstallSettings) -> Vec<RepairPolicy> {
    let unknown = longest_install(settings)
        .saturating_add(INSTALL_MARGIN)
        .max(READY_UNKNOWN_MIN_TOLERATION);
    vec![
        RepairPolicy {
            condition_type: "Ready".into(),
            condition_status: "False".into(),
            toleration: READY_FALSE_TOLERATION,
        },
        RepairPolicy {
            condition_type: "Ready".into(),
            condition_status: "Unknown".into(),
            toleration: unknown,
        },
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIN: u64 = 60;

    #[test]
    fn the_default_install_bound_counts_every_deadline_and_one_return_to_rescue() {
        let settings = InstallSettings::default();
        // delivery 30 + 2 rescue boots × (rescue 15 × 2 + imaging 20 +
        // booting 10) + maintenance 5 + apply grace 2 + join 15.
        assert_eq!(
            longest_install(&settings),
            Duration::from_secs((30 + 2 * (30 + 20 + 10) + 5 + 2 + 15) * MIN)
        );
        let policies = repair_policies(&settings);
        assert_eq!(
            policies,
            vec![
                RepairPolicy {
                    condition_type: "Ready".into(),
                    condition_status: "False".into(),
                    toleration: Duration::from_secs(30 * MIN),
                },
                RepairPolicy {
                    condition_type: "Ready".into(),
                    condition_status: "Unknown".into(),
                    toleration: Duration::from_secs((172 + 15) * MIN),
                },
            ]
        );
    }

    #[test]
    fn the_unknown_toleration_follows_the_configured_deadlines() {
        let mut settings = InstallSettings::default();
        settings.deadlines.delivery = Duration::from_secs(120 * MIN);
        settings.rescue_returns = 0;
        let unknown = &repair_policies(&settings)[1];
        assert_eq!(
            unknown.toleration,
            Duration::from_secs((120 + 60 + 5 + 2 + 15 + 15) * MIN)
        );
        // Every install outlives its policy's toleration minus the margin.
        assert!(unknown.toleration > longest_install(&settings));
    }

    #[test]
    fn short_deadlines_never_bring_the_unknown_toleration_under_30_minutes() {
        let mut settings = InstallSettings::default();
        for name in crate::install::Deadlines::NAMES {
            settings
                .deadlines
                .set(name, Duration::from_secs(10))
                .expect("known deadline");
        }
        settings.apply_grace = Duration::from_secs(10);
        let policies = repair_policies(&settings);
        assert_eq!(policies[1].toleration, READY_UNKNOWN_MIN_TOLERATION);
        assert_eq!(policies[0].toleration, READY_FALSE_TOLERATION);
    }
}
