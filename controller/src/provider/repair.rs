//! Repair policies: how long Karpenter's node repair (feature gate
//! `NodeRepair`) lets a Node stay unhealthy, and whether it then reboots the
//! machine in place (core v1.15's `RebootNode`) or replaces it.
//!
//! A reboot comes first wherever one can cure: an Elastic Metal reboot takes
//! 3-5 minutes and keeps the server, its disk, its Talos install and its paid
//! period, where a replacement costs a new delivery and install (10-15
//! minutes at best) and, for a monthly server, a second month.
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

/// What core does once a policy's toleration has passed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RepairAction {
    /// Restart the machine in place (`Reboot`): same server, same disk, same
    /// paid period.
    Reboot,
    /// Delete the NodeClaim; core provisions a replacement.
    Replace,
}

/// One policy, in the proto's terms (core v1.15's `RepairPolicy`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RepairPolicy {
    /// A Node condition type, e.g. `Ready`.
    pub condition_type: String,
    /// `True`, `False` or `Unknown`.
    pub condition_status: String,
    /// A Go regular expression on the condition's reason; empty for the
    /// set's one default fallback.
    pub reason_regex: String,
    pub toleration: Duration,
    /// The drain's bound: `None` = the NodeClaim's own, zero = no drain.
    pub termination_grace_period: Option<Duration>,
    /// 0-100, higher repairs first.
    pub priority: u8,
    pub action: RepairAction,
}

/// The reason the node lifecycle controller gives `Ready=Unknown` when the
/// kubelet posted status before and then stopped (a wedged kernel, a hung
/// kubelet, a lost network): a reboot can cure it. An early-registered Node
/// whose install is still running has never been posted by a kubelet and
/// carries `NodeStatusNeverUpdated` instead, which only the fallback matches.
pub const KUBELET_STOPPED_REASON: &str = "NodeStatusUnknown";

/// How long a kubelet that reports `Ready=False` may drain its pods before the
/// reboot goes ahead: the kubelet still evicts, but a stuck PodDisruptionBudget
/// must not hold a broken node forever.
pub const NOT_READY_DRAIN: Duration = Duration::from_secs(5 * 60);

/// `--repair-reboot-after`: how long a node stays unhealthy before core
/// reboots it. Core's own e2e suite injects its reboot fault 11 minutes old,
/// so the default stays under that.
pub const DEFAULT_REBOOT_AFTER: Duration = Duration::from_secs(10 * 60);

/// node-problem-detector's kernel monitor sets this condition `True` when
/// a task has hung in the kernel for minutes (its `KernelDeadlock` rule): the
/// machine still runs, the kubelet may still say Ready, and only a reboot
/// cures it. Nothing else on the node resets it, so a node that has it is
/// rebooted after the reboot toleration, like `Ready=False`.
pub const KERNEL_DEADLOCK: &str = "KernelDeadlock";
/// node-problem-detector's kernel monitor sets this condition `True` when the
/// kernel remounted a filesystem read-only after I/O errors: a failing disk.
/// A reboot would come back to the same disk, so the node is replaced.
pub const READONLY_FILESYSTEM: &str = "ReadonlyFilesystem";
/// `--repair-replace-after`: how long a read-only filesystem is tolerated
/// before the replacement: long enough for an operator paged by the condition
/// to look first (a replacement of a monthly server costs a second month),
/// short enough that workloads do not sit on a broken disk for hours.
pub const DEFAULT_REPLACE_AFTER: Duration = Duration::from_secs(30 * 60);

/// The tolerations an operator sets (`--repair-reboot-after`,
/// `--repair-replace-after`); the `Ready=Unknown` fallback follows the
/// install deadlines instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RepairTolerations {
    pub reboot_after: Duration,
    pub replace_after: Duration,
}

impl Default for RepairTolerations {
    fn default() -> Self {
        RepairTolerations {
            reboot_after: DEFAULT_REBOOT_AFTER,
            replace_after: DEFAULT_REPLACE_AFTER,
        }
    }
}

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

/// The policies the provider declares, in core v1.15's form (validated by
/// core at start-up when `NodeRepair` is on):
///
/// * `Ready=False` (the kubelet says the node is unhealthy): reboot after
///   `reboot_after`, draining for at most [`NOT_READY_DRAIN`];
/// * `Ready=Unknown` with reason [`KUBELET_STOPPED_REASON`] (the kubelet went
///   silent after it had joined): reboot after `reboot_after`, no drain (a
///   silent kubelet cannot evict);
/// * [`KERNEL_DEADLOCK`]`=True` (node-problem-detector): reboot after
///   `reboot_after`, draining for at most [`NOT_READY_DRAIN`];
/// * [`READONLY_FILESYSTEM`]`=True` (node-problem-detector): replace after
///   `replace_after`, drained by the NodeClaim's own grace
///   period (the node still runs its pods);
/// * the default fallback, `Ready=Unknown` with any other reason (above all
///   `NodeStatusNeverUpdated`, the state of an early-registered Node during
///   its whole install): replace after the longest install plus
///   [`INSTALL_MARGIN`] (at least [`READY_UNKNOWN_MIN_TOLERATION`]).
///
/// A fault that a reboot does not cure is replaced by core itself: a reboot
/// whose node does not come back Ready fails and replaces the node, and after
/// two reboots in 24 hours core replaces instead of rebooting a third time.
pub fn repair_policies(
    settings: &InstallSettings,
    tolerations: RepairTolerations,
) -> Vec<RepairPolicy> {
    let RepairTolerations {
        reboot_after,
        replace_after,
    } = tolerations;
    let unknown = longest_install(settings)
        .saturating_add(INSTALL_MARGIN)
        .max(READY_UNKNOWN_MIN_TOLERATION);
    vec![
        RepairPolicy {
            condition_type: "Ready".into(),
            condition_status: "False".into(),
            reason_regex: ".*".into(),
            toleration: reboot_after,
            termination_grace_period: Some(NOT_READY_DRAIN),
            priority: 0,
            action: RepairAction::Reboot,
        },
        RepairPolicy {
            condition_type: "Ready".into(),
            condition_status: "Unknown".into(),
            reason_regex: format!("^{KUBELET_STOPPED_REASON}$"),
            toleration: reboot_after,
            termination_grace_period: Some(Duration::ZERO),
            priority: 0,
            action: RepairAction::Reboot,
        },
        RepairPolicy {
            condition_type: "Ready".into(),
            condition_status: "Unknown".into(),
            reason_regex: String::new(),
            toleration: unknown,
            termination_grace_period: Some(Duration::ZERO),
            priority: 0,
            action: RepairAction::Replace,
        },
        RepairPolicy {
            condition_type: KERNEL_DEADLOCK.into(),
            condition_status: "True".into(),
            reason_regex: ".*".into(),
            toleration: reboot_after,
            termination_grace_period: Some(NOT_READY_DRAIN),
            priority: 0,
            action: RepairAction::Reboot,
        },
        RepairPolicy {
            condition_type: READONLY_FILESYSTEM.into(),
            condition_status: "True".into(),
            reason_regex: ".*".into(),
            toleration: replace_after,
            termination_grace_period: None,
            priority: 0,
            action: RepairAction::Replace,
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
    }

    #[test]
    fn reboot_first_where_a_reboot_can_cure_and_one_replace_fallback() {
        let settings = InstallSettings::default();
        let policies = repair_policies(&settings, RepairTolerations::default());
        assert_eq!(
            policies,
            vec![
                RepairPolicy {
                    condition_type: "Ready".into(),
                    condition_status: "False".into(),
                    reason_regex: ".*".into(),
                    toleration: Duration::from_secs(10 * MIN),
                    termination_grace_period: Some(Duration::from_secs(5 * MIN)),
                    priority: 0,
                    action: RepairAction::Reboot,
                },
                RepairPolicy {
                    condition_type: "Ready".into(),
                    condition_status: "Unknown".into(),
                    reason_regex: "^NodeStatusUnknown$".into(),
                    toleration: Duration::from_secs(10 * MIN),
                    termination_grace_period: Some(Duration::ZERO),
                    priority: 0,
                    action: RepairAction::Reboot,
                },
                RepairPolicy {
                    condition_type: "Ready".into(),
                    condition_status: "Unknown".into(),
                    reason_regex: String::new(),
                    toleration: Duration::from_secs((172 + 15) * MIN),
                    termination_grace_period: Some(Duration::ZERO),
                    priority: 0,
                    action: RepairAction::Replace,
                },
                RepairPolicy {
                    condition_type: "KernelDeadlock".into(),
                    condition_status: "True".into(),
                    reason_regex: ".*".into(),
                    toleration: Duration::from_secs(10 * MIN),
                    termination_grace_period: Some(Duration::from_secs(5 * MIN)),
                    priority: 0,
                    action: RepairAction::Reboot,
                },
                RepairPolicy {
                    condition_type: "ReadonlyFilesystem".into(),
                    condition_status: "True".into(),
                    reason_regex: ".*".into(),
                    toleration: Duration::from_secs(30 * MIN),
                    termination_grace_period: None,
                    priority: 0,
                    action: RepairAction::Replace,
                },
            ]
        );
        // Core's start-up validation: exactly one default fallback, and it
        // replaces; every policy has an action.
        let fallbacks: Vec<_> = policies
            .iter()
            .filter(|p| p.reason_regex.is_empty())
            .collect();
        assert_eq!(fallbacks.len(), 1);
        assert_eq!(fallbacks[0].action, RepairAction::Replace);
        // Core's repair never acts sooner than the set tolerations, and
        // counts them from the condition's transition, or from the Node's
        // creation when the condition claims to be older.
        assert!(DEFAULT_REBOOT_AFTER < DEFAULT_REPLACE_AFTER);
    }

    #[test]
    fn the_reboot_and_replace_tolerations_are_the_settings() {
        let policies = repair_policies(
            &InstallSettings::default(),
            RepairTolerations {
                reboot_after: Duration::from_secs(7),
                replace_after: Duration::from_secs(9),
            },
        );
        let reboots: Vec<_> = policies
            .iter()
            .filter(|p| p.action == RepairAction::Reboot)
            .map(|p| p.toleration)
            .collect();
        assert_eq!(reboots, vec![Duration::from_secs(7); 3]);
        let readonly = policies
            .iter()
            .find(|p| p.condition_type == READONLY_FILESYSTEM)
            .expect("a ReadonlyFilesystem policy");
        assert_eq!(readonly.toleration, Duration::from_secs(9));
        assert_eq!(readonly.action, RepairAction::Replace);
    }

    #[test]
    fn the_unknown_toleration_follows_the_configured_deadlines() {
        let mut settings = InstallSettings::default();
        settings.deadlines.delivery = Duration::from_secs(120 * MIN);
        settings.rescue_returns = 0;
        let fallback = &repair_policies(&settings, RepairTolerations::default())[2];
        assert_eq!(
            fallback.toleration,
            Duration::from_secs((120 + 60 + 5 + 2 + 15 + 15) * MIN)
        );
        // Every install outlives its policy's toleration minus the margin.
        assert!(fallback.toleration > longest_install(&settings));
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
        let policies = repair_policies(&settings, RepairTolerations::default());
        assert_eq!(policies[2].toleration, READY_UNKNOWN_MIN_TOLERATION);
    }
}
