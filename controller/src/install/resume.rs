//! Resuming an install from the progress persisted on its NodeClaim (after a
//! controller restart or a leader change).
//!
//! The cloud stays the source of truth: every entry point that depends on what
//! the server is doing looks at the server first. Deadlines continue from the
//! persisted `phase-since`, except for an interrupted image write, which starts
//! over (and counts as an attempt).

use tokio::time::Instant;

use super::Phase;
use super::Progress;
use super::machine::{Action, FailureClass, State, Step};

/// The state and first action of an install resumed from `progress`.
/// `since` is when the persisted phase was entered, on the caller's clock.
///
/// | persisted phase | resumes by |
/// |---|---|
/// | none, ordered, delivering | waiting for delivery |
/// | ready | issuing the rescue reboot again |
/// | rescue, imaging | waiting for the server in rescue mode, reconnecting (same host key) and writing the image from scratch; not in rescue any more → a new rescue boot |
/// | booting | looking at the server: still booted into rescue → the normal reboot, else probing Talos |
/// | maintenance | probing Talos and applying the config; a Ready Node, or a maintenance API that stays down for the apply grace, means the config was applied just before the restart |
/// | standby | an adoption ([`super::InstallEngine::adopt`]): probing Talos and applying the config, no doubt about an earlier apply |
/// | configured | waiting for the Node |
/// | joined | nothing ([`Action::Finish`]) |
/// | failed | the cleanup again ([`Action::Fail`]) |
pub fn resume(progress: &Progress, since: Instant, now: Instant) -> (State, Action) {
    let base = State {
        since,
        disk: progress.disk.clone(),
        mac: progress.mac.clone(),
        image_attempts: progress.image_attempts,
        rescue_returns: progress.rescue_returns,
        host_key: progress.host_key.clone(),
        ..State::start(since)
    };
    let at = |phase: Phase, step: Step| State {
        phase,
        step,
        ..base.clone()
    };
    let installed = progress.disk.is_some() && progress.mac.is_some();
    match progress.phase {
        None => (at(Phase::Ordered, Step::AwaitDelivery), Action::PollServer),
        Some(phase @ (Phase::Ordered | Phase::Delivering)) => {
            (at(phase, Step::AwaitDelivery), Action::PollServer)
        }
        Some(Phase::Ready) => (at(Phase::Ready, Step::RebootRescue), Action::RebootRescue),
        Some(Phase::Rescue) => (at(Phase::Rescue, Step::ResumeRescue), Action::PollServer),
        // The write in flight died with the controller: reconnect and write
        // again. Waiting for SSH is the rescue phase's job, on a fresh clock.
        Some(Phase::Imaging) => (
            State {
                since: now,
                ..at(Phase::Rescue, Step::ResumeRescue)
            },
            Action::PollServer,
        ),
        Some(Phase::Booting) if installed => {
            (at(Phase::Booting, Step::ResumeBooting), Action::PollServer)
        }
        Some(Phase::Maintenance) if installed => (
            at(Phase::Maintenance, Step::ResumeMaintenance),
            Action::PollServer,
        ),
        // An adoption: the server waits in maintenance mode without config.
        Some(Phase::Standby) if installed => (
            State {
                since: now,
                ..at(Phase::Maintenance, Step::Adopt)
            },
            Action::PollServer,
        ),
        // Without the disk and the MAC the config cannot be rendered: install
        // again from a new rescue boot.
        Some(Phase::Booting | Phase::Maintenance | Phase::Standby) => (
            State {
                since: now,
                image_attempts: 0,
                ..at(Phase::Ready, Step::RebootRescue)
            },
            Action::RebootRescue,
        ),
        Some(Phase::Configured) => (at(Phase::Configured, Step::AwaitNode), Action::PollNode),
        Some(Phase::Joined) => (at(Phase::Joined, Step::Done), Action::Finish),
        Some(Phase::Failed) => (
            at(Phase::Failed, Step::Done),
            Action::Fail {
                reason: "the install had failed before the controller restarted".to_string(),
                class: FailureClass::Internal,
            },
        ),
    }
}

#[cfg(test)]
#[path = "resume_tests.rs"]
mod tests;
