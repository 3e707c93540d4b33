//! Waiting for the rescue system: status polls, and SSH probes while the API
//! still reports the rescue reboot under way.
//!
//! Why SSH is probed before the API says the rescue boot is done: the API
//! shows the end of a reboot only to the next status poll, so without the
//! probes a rescue system that is up waits half a poll interval on average. A
//! probe is only a signal: its session is closed at once, its host key is not
//! trusted and nothing runs on it, because an SSH server that answers during
//! the reboot might still be the operating system going down (one installed
//! with the project's IAM keys would accept ours). When a probe gets in, the
//! status is read at once, and imaging starts only on `status: ready` with
//! `boot_type: rescue`, over a new session whose host key is the one trusted
//! on first use. After a probe got in, the API is polled at the poll interval
//! without more probes. Probes need the rescue user's name, so they run only
//! when the API shows `rescue_server` while the reboot is under way;
//! otherwise the status poll alone decides.

use tokio::time::Instant;

use super::{Action, Plan, State, Step, stay};
use crate::scaleway::{BootType, Server, ServerStatus};

/// A status read while waiting for the rescue system (`probe`: SSH probes
/// may still run, i.e. none got in yet).
pub(super) fn status_seen(
    state: &State,
    server: &Server,
    now: Instant,
    probe: bool,
) -> (State, Action) {
    if let Some((host, user)) = rescue_login(server) {
        return connect_to(state, host, user);
    }
    match rescue_booting(server).filter(|_| probe) {
        Some((host, user)) => {
            let next = State {
                host: Some(host.clone()),
                user: Some(user.clone()),
                status_polled: Some(now),
                ..stay(state, Step::ProbeRescueSsh)
            };
            (next, Action::ProbeSsh { host, user })
        }
        None => (state.clone(), Action::PollServer),
    }
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

/// When the next status poll is due while SSH probes run.
pub(super) fn next_status_poll(plan: &Plan, state: &State, now: Instant) -> Instant {
    state
        .status_polled
        .map_or(now, |polled| polled + plan.poll_interval)
}

/// The address and user to log into a server running its rescue image.
pub(super) fn rescue_login(server: &Server) -> Option<(String, String)> {
    let user = rescue_user(server)?;
    (server.status == ServerStatus::Ready && server.boot_type == BootType::Rescue)
        .then(|| server.ipv4().map(|host| (host.to_string(), user)))
        .flatten()
}

/// The address and rescue user of a server the API shows rebooting into
/// rescue (not up yet), when the API already tells them.
fn rescue_booting(server: &Server) -> Option<(String, String)> {
    let rebooting = matches!(
        server.status,
        ServerStatus::Stopping | ServerStatus::Starting
    );
    if !rebooting || server.boot_type != BootType::Rescue {
        return None;
    }
    let user = rescue_user(server)?;
    server.ipv4().map(|host| (host.to_string(), user))
}

fn rescue_user(server: &Server) -> Option<String> {
    server
        .rescue_server
        .as_ref()
        .map(|r| r.user.clone())
        .filter(|u| !u.is_empty())
}

/// The API shows the server up in rescue: log in for imaging.
pub(super) fn connect_to(state: &State, host: String, user: String) -> (State, Action) {
    let next = State {
        host: Some(host.clone()),
        user: Some(user.clone()),
        status_polled: None,
        ..stay(state, Step::Connect)
    };
    (next, Action::ConnectSsh { host, user })
}
