//! When each action is due.
//!
//! Two cadences. The Elastic Metal API is remote and rate-limited: a server's
//! status is read once per poll interval, except while it is delivered when
//! the deliveries seen before tell when this one should end (see
//! [`delivery_read`]; the normal boot's Talos probes likewise,
//! [`boot_probe`]). Everything else the engine waits
//! for is cheap to ask directly: an SSH login on the rescue system, the Talos
//! maintenance API, the Node in the Kubernetes API; those are probed once per
//! probe interval (a few seconds). And an action that what was just seen made
//! possible (the API shows the server up in rescue, a resumed install found
//! its server up) runs at once instead of after another wait.

use std::time::Duration;

use tokio::time::Instant;

use super::rescue::next_status_poll;
use super::{Action, Plan, State, Step};
use crate::install::Phase;
use crate::install::history::READS_BEFORE_WINDOW;

/// When the next status read of a server being delivered (ordered at
/// `ordered`) is due, the last one made at `now`.
///
/// Without a window (no deliveries of this offer in this zone seen yet, or
/// too spread to predict): every poll interval. With one (`history.rs`):
/// every [`READS_BEFORE_WINDOW`] poll intervals until it opens (never past
/// its opening), at the window's pace inside it, every poll interval after
/// it (a delivery later than every one seen).
pub(super) fn delivery_read(plan: &Plan, ordered: Instant, now: Instant) -> Instant {
    let Some(window) = plan.delivery else {
        return now + plan.poll_interval;
    };
    let (opens, closes) = (ordered + window.opens, ordered + window.closes);
    if now < opens {
        (now + plan.poll_interval * READS_BEFORE_WINDOW).min(opens)
    } else if now < closes {
        now + window.every
    } else {
        now + plan.poll_interval
    }
}

/// Whether a status read at `now` of a server ordered at `ordered` falls
/// inside its delivery window: such a read is an extra one, made only if
/// the API's pace has a spare turn (the driver skips it otherwise).
pub(super) fn in_delivery_window(plan: &Plan, ordered: Instant, now: Instant) -> bool {
    plan.delivery
        .is_some_and(|w| now >= ordered + w.opens && now < ordered + w.closes)
}

/// When the next Talos probe of a server booting normally (reboot requested
/// at `rebooted`) is due, the last one made at `now`: every probe interval,
/// but at the window's pace inside the window where the offer's boots ended
/// (`history.rs`); the probes cost no API call, so none are saved before it.
pub(super) fn boot_probe(plan: &Plan, rebooted: Instant, now: Instant) -> Instant {
    let next = now + plan.probe_interval;
    let Some(window) = plan.boot else {
        return next;
    };
    let (opens, closes) = (rebooted + window.opens, rebooted + window.closes);
    if now < opens {
        next.min(opens)
    } else if now < closes {
        now + window.every
    } else {
        next
    }
}

/// When `action`, chosen on leaving `before` for `next` at `now`, is due.
pub(super) fn due(
    plan: &Plan,
    before: &State,
    next: &State,
    action: &Action,
    now: Instant,
) -> Instant {
    let at_once = Duration::ZERO;
    let wait = match action {
        Action::PollServer => match (before.step, next.step) {
            // The reboot call answered: does the API show where and as whom to
            // probe while the server reboots?
            (Step::RebootRescue, Step::AwaitRescue) => at_once,
            // The rescue system answered: confirm it is what the API booted.
            (Step::ProbeRescueSsh, Step::ConfirmRescue) => at_once,
            // The status poll falls due between two SSH probes.
            (Step::ProbeRescueSsh, Step::AwaitRescue) => {
                return next_status_poll(plan, before, now).max(now);
            }
            // Still delivering (or the read failed): the delivery's cadence.
            (_, Step::AwaitDelivery) => return delivery_read(plan, next.since, now),
            _ => plan.poll_interval,
        },
        // Right after delivery: attach now; then the status polls' cadence.
        Action::EnsureNetwork => match before.step {
            Step::AttachNetwork => plan.poll_interval,
            _ => at_once,
        },
        Action::ProbeSsh { .. } => plan.probe_interval,
        // The API just reported the server up in rescue: log in now. A retry
        // (refused, or the session was lost) waits one probe interval.
        Action::ConnectSsh { .. } => match before.step {
            Step::AwaitRescue | Step::ConfirmRescue | Step::ResumeRescue => at_once,
            _ => plan.probe_interval,
        },
        // A resumed install found its server up: probe now. After the normal
        // reboot call, the server first has to go down and boot.
        Action::ProbeTalos { .. } => match before.step {
            Step::ResumeBooting | Step::ResumeMaintenance | Step::Adopt => at_once,
            // The normal reboot is under way: the boot's cadence.
            Step::RebootNormal | Step::ProbeTalos if next.phase == Phase::Booting => {
                return boot_probe(plan, next.since, now);
            }
            _ => plan.probe_interval,
        },
        Action::PollNode => match before.step {
            // Right after the Talos probe that found maintenance mode gone,
            // or after the Node was seen Ready while the apply was in doubt.
            Step::ProbeTalos | Step::ConfirmApplied => at_once,
            _ => plan.probe_interval,
        },
        // The step after the Node was seen Ready (or the taint removed) runs
        // at once; a failed attempt is retried one probe interval later.
        Action::InitializeNode | Action::ReleaseToken => {
            if before.step == next.step {
                plan.probe_interval
            } else {
                at_once
            }
        }
        Action::RebootRescue
        | Action::RebootNormal
        | Action::Run { .. }
        | Action::ApplyConfig { .. }
        | Action::Fail { .. }
        | Action::Finish => at_once,
    };
    now + wait
}
