//! When each action is due, and the SSH probes that run while the API still
//! reports the rescue reboot under way.
//!
//! Two cadences. The Elastic Metal API is remote and rate-limited: a server's
//! status is read once per poll interval. Everything else the engine waits
//! for is cheap to ask directly: an SSH login on the rescue system, the Talos
//! maintenance API, the Node in the Kubernetes API; those are probed once per
//! probe interval (a few seconds). And an action that what was just seen made
//! possible (the API shows the server up in rescue, a resumed install found
//! its server up) runs at once instead of after another wait.
//!
//! Why SSH is probed before the API says the rescue boot is done: the API
//! notices the end of a reboot only at the next status poll, so without the
//! probes a ready rescue system waits half a poll interval on average, then
//! the whole connect used to wait one more. A probe is only a signal: its
//! session is closed at once, its host key is not trusted and nothing runs on
//! it, because an SSH server that answers during the reboot might still be the
//! operating system going down. When a probe gets in, the status is read at
//! once and imaging starts only on `status: ready` with `boot_type: rescue`,
//! over a new session whose host key is the one trusted on first use. Probes
//! need the rescue user's name, so they run only when the API shows
//! `rescue_server` while the reboot is under way; otherwise the engine waits
//! for the status poll alone.

use std::time::Duration;

use tokio::time::Instant;

use super::{Action, Plan, State, Step, stay};
use crate::scaleway::{BootType, Server, ServerStatus};

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
            _ => plan.poll_interval,
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
            Step::ResumeBooting | Step::ResumeMaintenance => at_once,
            _ => plan.probe_interval,
        },
        Action::PollNode => plan.probe_interval,
        Action::RebootRescue
        | Action::RebootNormal
        | Action::Run { .. }
        | Action::ApplyConfig { .. }
        | Action::Fail { .. }
        | Action::Finish => at_once,
    };
    now + wait
}

/// The address and rescue user of a server the API shows rebooting into
/// rescue (not up yet), when the API already tells them.
pub(super) fn rescue_booting(server: &Server) -> Option<(String, String)> {
    let rebooting = matches!(
        server.status,
        ServerStatus::Stopping | ServerStatus::Starting
    );
    if !rebooting || server.boot_type != BootType::Rescue {
        return None;
    }
    let user = server
        .rescue_server
        .as_ref()
        .map(|r| r.user.clone())
        .filter(|u| !u.is_empty())?;
    server.ipv4().map(|host| (host.to_string(), user))
}

/// The status poll saw the rescue reboot under way: probe SSH until the next
/// status poll is due.
pub(super) fn probe_rescue(
    state: &State,
    host: String,
    user: String,
    now: Instant,
) -> (State, Action) {
    let next = State {
        host: Some(host.clone()),
        user: Some(user.clone()),
        status_polled: Some(now),
        ..stay(state, Step::ProbeRescueSsh)
    };
    (next, Action::ProbeSsh { host, user })
}

/// A probe did not get in: probe again, unless the status poll falls due
/// first.
pub(super) fn probe_failed(plan: &Plan, state: &State, now: Instant) -> (State, Action) {
    if now + plan.probe_interval >= next_status_poll(plan, state, now) {
        return (stay(state, Step::AwaitRescue), Action::PollServer);
    }
    let action = Action::ProbeSsh {
        host: state.host.clone().unwrap_or_default(),
        user: state.user.clone().unwrap_or_default(),
    };
    (state.clone(), action)
}

fn next_status_poll(plan: &Plan, state: &State, now: Instant) -> Instant {
    state
        .status_polled
        .map_or(now, |polled| polled + plan.poll_interval)
}
