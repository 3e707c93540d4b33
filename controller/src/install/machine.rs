//! The pure install state machine: given where an install stands and what was
//! just observed, decide the next state, the one action to perform, and the
//! Events that tell users about it.
//!
//! It performs no I/O and reads no clock (the caller passes `now`), so every
//! transition is unit-tested. The driver owns the resources (the SSH session)
//! and turns each action into calls on the ports. Resuming after a restart is
//! [`resume`] (in `resume.rs`): it rebuilds a state from the persisted progress.

use std::time::Duration;

use tokio::time::Instant;

use super::commands::{self, Written};
use super::{InstallEvent, Phase, UNINITIALIZED_TAINT_KEY as UNINITIALIZED};
use crate::rescue::{CommandOutput, RescueError};
use crate::scaleway::{ApiError, BootType, Server, ServerStatus};
use crate::talos::TalosError;

use super::NodePortError;

pub use super::resume::resume;

/// What the machine is waiting for within its phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Polling the server until it is delivered (`ready`).
    AwaitDelivery,
    /// Delivered, with a Private Network to join: attaching the server and
    /// waiting for the attachment to be `attached` before the rescue boot
    /// (the VLAN id is known from then on).
    AttachNetwork,
    /// The rescue reboot call is in flight.
    RebootRescue,
    /// The rescue reboot was refused for now; polling until the server is `ready`.
    RetryRebootRescue,
    /// Polling until the server runs the rescue image and has its address.
    AwaitRescue,
    /// The API shows the rescue reboot under way, with the address and the
    /// rescue user: probing SSH between two status polls.
    ProbeRescueSsh,
    /// The rescue system answered SSH before the API reported the reboot
    /// done: polling until the API confirms the server is up in rescue.
    ConfirmRescue,
    /// Resumed in rescue or imaging: is the server still in rescue mode?
    ResumeRescue,
    /// Opening an SSH session (again after a lost one).
    Connect,
    ListDisks,
    ListLinks,
    WriteImage,
    Sync,
    /// Reading the written bytes back.
    Verify,
    /// The normal reboot call is in flight.
    RebootNormal,
    RetryRebootNormal,
    /// Resumed while booting: has the normal reboot been issued?
    ResumeBooting,
    /// Resumed in maintenance: learning the server's address.
    ResumeMaintenance,
    /// Adopting a standby server: learning its address (the maintenance API
    /// answered before, and no config was ever applied).
    Adopt,
    /// Waiting for the Talos maintenance API to answer.
    ProbeTalos,
    /// The config may have been applied with the answer lost, and the
    /// maintenance API is silent: a Ready Node would settle it.
    ConfirmApplied,
    ApplyConfig,
    AwaitNode,
    /// The Node is Ready: removing the `uninitialized` taint the early
    /// registration put on it.
    InitializeNode,
    /// The taint is gone: deleting the node's bootstrap token.
    ReleaseToken,
    Done,
}

/// Where an install stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct State {
    pub phase: Phase,
    pub step: Step,
    /// When the current phase was entered; its deadline counts from here. The
    /// imaging clock restarts at each image write.
    pub since: Instant,
    /// The server's IPv4 address once known.
    pub host: Option<String>,
    /// The rescue user once known.
    pub user: Option<String>,
    pub disk: Option<String>,
    pub mac: Option<String>,
    /// Image writes started in the current rescue boot.
    pub image_attempts: u32,
    /// Returns to rescue after the maintenance API never came up.
    pub rescue_returns: u32,
    /// Rescue host key trusted on first use in the current rescue boot.
    pub host_key: Option<String>,
    /// What the last image write reported.
    pub written: Option<Written>,
    /// Consecutive writes whose stream did not match the NodeClass checksum.
    pub checksum_mismatches: u32,
    /// Consecutive failed Elastic Metal calls.
    pub api_failures: u32,
    /// Set when an ApplyConfiguration may have taken effect without us
    /// hearing the answer (or the controller restarted in maintenance).
    pub apply_uncertain_since: Option<Instant>,
    /// When the server's status was last read while SSH probes run between
    /// status polls ([`Step::ProbeRescueSsh`]).
    pub status_polled: Option<Instant>,
}

impl State {
    pub fn start(now: Instant) -> Self {
        State {
            phase: Phase::Ordered,
            step: Step::AwaitDelivery,
            since: now,
            host: None,
            user: None,
            disk: None,
            mac: None,
            image_attempts: 0,
            rescue_returns: 0,
            host_key: None,
            written: None,
            checksum_mismatches: 0,
            api_failures: 0,
            apply_uncertain_since: None,
            status_polled: None,
        }
    }

    fn as_root(&self) -> bool {
        self.user.as_deref() == Some("root")
    }
}

/// What the driver saw when performing the last action.
#[derive(Debug, Clone, PartialEq)]
pub enum Observation {
    /// `get_server` answered.
    Server(Box<Server>),
    /// A call to the Elastic Metal API failed (`get_server` or a reboot).
    ApiFailed(ApiError),
    /// A reboot call was accepted.
    Rebooted,
    /// An SSH login succeeded (after [`Action::ProbeSsh`], the session was
    /// closed at once); the server presented this host key.
    SshConnected {
        host_key: String,
    },
    SshFailed(RescueError),
    /// A command ran to completion (whatever its exit status).
    Command(CommandOutput),
    /// The SSH session broke while a command ran.
    SessionLost(RescueError),
    TalosUp,
    TalosDown(TalosError),
    ConfigApplied,
    ApplyFailed(TalosError),
    /// The machine config could not be rendered.
    ConfigInvalid(String),
    /// The Node's readiness (`None`: no Node yet).
    Node(Option<bool>),
    NodeFailed(NodePortError),
    /// The Node carries no `uninitialized` taint any more (or is gone).
    NodeInitialized,
    /// The node's bootstrap token is deleted (or was already).
    TokenReleased,
    /// Where the server's attachment to its Private Network stands.
    Network(NetworkSeen),
}

/// The server's attachment to the NodeClass's Private Network, as
/// [`Action::EnsureNetwork`] found (or made) it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetworkSeen {
    /// Requested, not attached yet.
    Attaching,
    /// Attached: the VLAN rides the server's NIC.
    Attached,
    /// The attachment failed or cannot be made; waiting will not help.
    Failed(String),
}

/// The one thing to do next, due at [`Transition::due`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    PollServer,
    /// Attach the server to its Private Network unless it is (idempotent:
    /// the attachments are listed first), and report where it stands.
    EnsureNetwork,
    RebootRescue,
    /// Is the rescue system up yet? An SSH login that is closed at once: its
    /// host key is not trusted and nothing runs on it, because only the API
    /// can say that what answered is the rescue system.
    ProbeSsh {
        host: String,
        user: String,
    },
    ConnectSsh {
        host: String,
        user: String,
    },
    Run {
        command: String,
    },
    RebootNormal,
    ProbeTalos {
        host: String,
    },
    ApplyConfig {
        host: String,
        disk: String,
        mac: String,
    },
    PollNode,
    /// Remove the `uninitialized` taint from the Ready Node.
    InitializeNode,
    /// Delete the node's bootstrap token.
    ReleaseToken,
    /// Terminal failure: delete the server and the NodeClaim.
    Fail {
        reason: String,
        class: FailureClass,
    },
    /// The node joined, its taint is removed and its token deleted, and the
    /// phase `joined` is persisted: only the Event is left.
    Finish,
}

/// The outcome of one observation.
#[derive(Debug, Clone, PartialEq)]
pub struct Transition {
    pub state: State,
    pub action: Action,
    /// When to perform the action (see `machine_cadence.rs`).
    pub due: Instant,
    /// Events to record on the NodeClaim, in order.
    pub events: Vec<InstallEvent>,
}

/// After this many failed Elastic Metal calls in a row, users get a warning.
const API_FAILURES_WORTH_AN_EVENT: u32 = 3;

/// Computes the next state, action and Events. Phase deadlines are enforced
/// here: an observation that leaves the install in its phase after the
/// phase's deadline fails it, except a Talos maintenance API that never came
/// up after the normal boot, which sends the server back to rescue once.
pub fn advance(plan: &Plan, state: &State, obs: Observation, now: Instant) -> Transition {
    let mut events = Vec::new();
    let (mut next, mut action) = transition(plan, state, obs, now, &mut events);
    let grace_running = state
        .apply_uncertain_since
        .is_some_and(|t| now.saturating_duration_since(t) < plan.apply_grace);
    if next.phase == state.phase
        && !matches!(action, Action::Fail { .. } | Action::Finish)
        && let Some(limit) = plan.deadline(state.phase)
        && now.saturating_duration_since(next.since) > limit
        && !grace_running
    {
        (next, action) = if state.phase == Phase::Booting && state.step == Step::ProbeTalos {
            back_to_rescue(plan, state, now, limit, &mut events)
        } else {
            let reason = format!(
                "phase {} did not complete within {}s",
                state.phase,
                limit.as_secs()
            );
            fail(state, now, reason, FailureClass::Deadline)
        };
    }
    if next.phase != state.phase
        && let Some(message) = phase_message(plan, &next)
    {
        events.push(phase_event(message));
    }
    let due = cadence::due(plan, state, &next, &action, now);
    Transition {
        state: next,
        action,
        due,
        events,
    }
}

/// [`advance`] without the Events, for tests that follow states and actions.
#[cfg(test)]
pub fn next(plan: &Plan, state: &State, obs: Observation, now: Instant) -> (State, Action) {
    let t = advance(plan, state, obs, now);
    (t.state, t.action)
}

pub(super) fn fail(
    state: &State,
    now: Instant,
    reason: String,
    class: FailureClass,
) -> (State, Action) {
    let next = State {
        phase: Phase::Failed,
        step: Step::Done,
        since: now,
        ..state.clone()
    };
    (next, Action::Fail { reason, class })
}

/// Moves to `phase` at `step`; the deadline clock restarts only on a real phase
/// change (Ordered -> Delivering shares the delivery clock).
pub(super) fn go(state: &State, phase: Phase, step: Step, now: Instant) -> State {
    let same_clock = phase == state.phase
        || matches!(
            (state.phase, phase),
            (Phase::Ordered, Phase::Delivering) | (Phase::Delivering, Phase::Ordered)
        );
    State {
        phase,
        step,
        since: if same_clock { state.since } else { now },
        ..state.clone()
    }
}

fn stay(state: &State, step: Step) -> State {
    State {
        step,
        ..state.clone()
    }
}

/// A server status that no amount of waiting will turn into a usable server.
fn broken_status(status: &ServerStatus) -> Option<(&'static str, FailureClass)> {
    match status {
        ServerStatus::Error => Some(("error", FailureClass::ServerStatus)),
        ServerStatus::Locked => Some(("locked", FailureClass::ServerStatus)),
        ServerStatus::OutOfStock => Some(("out_of_stock", FailureClass::OutOfStock)),
        ServerStatus::Deleting => Some(("deleting", FailureClass::ServerGone)),
        _ => None,
    }
}

fn transition(
    plan: &Plan,
    state: &State,
    obs: Observation,
    now: Instant,
    events: &mut Vec<InstallEvent>,
) -> (State, Action) {
    // Observations that mean the same thing at every step.
    let state = &match &obs {
        Observation::ApiFailed(ApiError::NotFound(_)) => {
            return fail(
                state,
                now,
                "the server no longer exists".to_string(),
                FailureClass::ServerGone,
            );
        }
        Observation::ApiFailed(err) => {
            let failures = state.api_failures + 1;
            if failures >= plan.api_failures {
                return fail(
                    state,
                    now,
                    format!("{failures} Elastic Metal API calls failed in a row; last: {err}"),
                    FailureClass::Api,
                );
            }
            if failures == API_FAILURES_WORTH_AN_EVENT {
                events.push(retry_event(format!(
                    "{}: {failures} Elastic Metal API calls failed in a row ({err}); retrying",
                    state.phase
                )));
            }
            State {
                api_failures: failures,
                ..state.clone()
            }
        }
        Observation::Server(server) => {
            if let Some((status, class)) = broken_status(&server.status) {
                let reason = match class {
                    FailureClass::OutOfStock => format!(
                        "the server went out_of_stock after the order: offer {} has no stock in {}",
                        plan.offer_name, plan.zone
                    ),
                    _ => format!("the server is in status {status}"),
                };
                return fail(state, now, reason, class);
            }
            State {
                api_failures: 0,
                ..state.clone()
            }
        }
        Observation::Rebooted => State {
            api_failures: 0,
            ..state.clone()
        },
        _ => state.clone(),
    };

    match (state.step, obs) {
        (Step::AwaitDelivery, Observation::Server(server)) => match server.status {
            ServerStatus::Ready if plan.private_network.is_some() => (
                go(state, Phase::Ready, Step::AttachNetwork, now),
                Action::EnsureNetwork,
            ),
            ServerStatus::Ready => (
                go(state, Phase::Ready, Step::RebootRescue, now),
                Action::RebootRescue,
            ),
            ServerStatus::Delivering => (
                go(state, Phase::Delivering, Step::AwaitDelivery, now),
                Action::PollServer,
            ),
            _ => (stay(state, Step::AwaitDelivery), Action::PollServer),
        },
        (
            Step::AwaitDelivery
            | Step::AwaitRescue
            | Step::ConfirmRescue
            | Step::ResumeRescue
            | Step::ResumeBooting
            | Step::ResumeMaintenance
            | Step::Adopt
            | Step::RetryRebootRescue
            | Step::RetryRebootNormal,
            Observation::ApiFailed(_),
        ) => (state.clone(), Action::PollServer),

        (Step::AttachNetwork, Observation::Network(NetworkSeen::Attached)) => {
            (stay(state, Step::RebootRescue), Action::RebootRescue)
        }
        (
            Step::AttachNetwork,
            Observation::Network(NetworkSeen::Attaching) | Observation::ApiFailed(_),
        ) => (stay(state, Step::AttachNetwork), Action::EnsureNetwork),
        (Step::AttachNetwork, Observation::Network(NetworkSeen::Failed(why))) => fail(
            state,
            now,
            format!(
                "the server could not join Private Network {}: {why}",
                plan.private_network.as_deref().unwrap_or("?")
            ),
            FailureClass::PrivateNetwork,
        ),

        (Step::RebootRescue, Observation::Rebooted) => {
            // A new rescue boot has new host keys: trust starts over.
            let next = State {
                host_key: None,
                ..go(state, Phase::Rescue, Step::AwaitRescue, now)
            };
            (next, Action::PollServer)
        }
        (Step::RebootRescue, Observation::ApiFailed(err)) if err.is_retryable() => {
            (stay(state, Step::RetryRebootRescue), Action::PollServer)
        }
        (Step::RebootRescue, Observation::ApiFailed(err)) => fail(
            state,
            now,
            format!("rescue reboot refused: {err}"),
            FailureClass::Api,
        ),
        (Step::RetryRebootRescue, Observation::Server(server))
            if server.status == ServerStatus::Ready =>
        {
            (stay(state, Step::RebootRescue), Action::RebootRescue)
        }
        (Step::RetryRebootNormal, Observation::Server(server))
            if server.status == ServerStatus::Ready =>
        {
            (stay(state, Step::RebootNormal), Action::RebootNormal)
        }
        (Step::RetryRebootRescue | Step::RetryRebootNormal, Observation::Server(_)) => {
            (state.clone(), Action::PollServer)
        }

        (Step::AwaitRescue, Observation::Server(server)) => {
            rescue::status_seen(state, &server, now, true)
        }
        (Step::ConfirmRescue, Observation::Server(server)) => {
            rescue::status_seen(state, &server, now, false)
        }
        (Step::ProbeRescueSsh, Observation::SshConnected { .. }) => {
            (stay(state, Step::ConfirmRescue), Action::PollServer)
        }
        (Step::ProbeRescueSsh, Observation::SshFailed(RescueError::InvalidKey(msg))) => fail(
            state,
            now,
            format!("the rescue private key is invalid: {msg}"),
            FailureClass::Rescue,
        ),
        (Step::ProbeRescueSsh, Observation::SshFailed(_)) => rescue::probe_failed(plan, state, now),
        (Step::ResumeRescue, Observation::Server(server)) => match rescue_login(&server) {
            Some((host, user)) => connect_to(state, host, user),
            // Not in rescue (any more): the rescue boot starts over.
            None if server.status == ServerStatus::Ready
                && server.boot_type != BootType::Rescue =>
            {
                (
                    go(state, Phase::Ready, Step::RebootRescue, now),
                    Action::RebootRescue,
                )
            }
            None => (state.clone(), Action::PollServer),
        },

        (Step::Connect, Observation::SshConnected { host_key }) => {
            if let Some(trusted) = state.host_key.as_ref().filter(|k| **k != host_key) {
                return fail(
                    state,
                    now,
                    host_key_changed(state, trusted, &host_key),
                    FailureClass::HostKey,
                );
            }
            let next = State {
                host_key: Some(host_key),
                ..go(state, Phase::Imaging, Step::ListDisks, now)
            };
            (
                next,
                Action::Run {
                    command: commands::LIST_DISKS.to_string(),
                },
            )
        }
        (Step::Connect, Observation::SshFailed(RescueError::InvalidKey(msg))) => fail(
            state,
            now,
            format!("the rescue private key is invalid: {msg}"),
            FailureClass::Rescue,
        ),
        (
            Step::Connect,
            Observation::SshFailed(RescueError::HostKeyMismatch { trusted, presented }),
        ) => fail(
            state,
            now,
            host_key_changed(state, &trusted, &presented),
            FailureClass::HostKey,
        ),
        (Step::Connect, Observation::SshFailed(_)) => (state.clone(), connect(state)),

        // A session lost mid-imaging starts the imaging over on a new session
        // (the same rescue boot, so the same host key), within the budget.
        (
            Step::ListDisks | Step::ListLinks | Step::WriteImage | Step::Sync | Step::Verify,
            Observation::SessionLost(err),
        ) => {
            let reason = format!("SSH session lost during {:?}: {err}", state.step);
            if state.image_attempts >= plan.image_attempts {
                return attempts_exhausted(plan, state, now, &reason, events);
            }
            events.push(retry_event(format!(
                "imaging: {reason}; reconnecting to write the image again"
            )));
            (stay(state, Step::Connect), connect(state))
        }

        (Step::ListDisks, Observation::Command(out)) => {
            if !out.success() {
                return fail(
                    state,
                    now,
                    command_failed("lsblk", &out),
                    FailureClass::Rescue,
                );
            }
            match commands::pick_disk(&out.stdout, plan.install_disk.as_deref()) {
                Ok(disk) => (
                    State {
                        disk: Some(disk),
                        ..stay(state, Step::ListLinks)
                    },
                    Action::Run {
                        command: commands::LIST_LINKS.to_string(),
                    },
                ),
                Err(reason) => fail(state, now, reason, FailureClass::Rescue),
            }
        }
        (Step::ListLinks, Observation::Command(out)) => {
            if !out.success() {
                return fail(
                    state,
                    now,
                    command_failed("ip -o link", &out),
                    FailureClass::Rescue,
                );
            }
            match commands::pick_mac(&out.stdout) {
                Ok(mac) => {
                    if state.image_attempts >= plan.image_attempts {
                        return attempts_exhausted(
                            plan,
                            state,
                            now,
                            "no image write left in this rescue boot",
                            events,
                        );
                    }
                    let next = State {
                        mac: Some(mac),
                        ..state.clone()
                    };
                    start_write(plan, &next, now, events)
                }
                Err(reason) => fail(state, now, reason, FailureClass::Rescue),
            }
        }
        (Step::WriteImage, Observation::Command(out)) => {
            imaging::written(plan, state, &out, now, events)
        }
        (Step::Sync, Observation::Command(out)) => imaging::synced(state, &out, now),
        (Step::Verify, Observation::Command(out)) => {
            imaging::verified(plan, state, &out, now, events)
        }

        (Step::RebootNormal, Observation::Rebooted) => {
            (stay(state, Step::ProbeTalos), probe(state))
        }
        (Step::RebootNormal, Observation::ApiFailed(err)) if err.is_retryable() => {
            (stay(state, Step::RetryRebootNormal), Action::PollServer)
        }
        (Step::RebootNormal, Observation::ApiFailed(err)) => fail(
            state,
            now,
            format!("normal reboot refused: {err}"),
            FailureClass::Api,
        ),
        (Step::ResumeBooting, Observation::Server(server)) => {
            match (server.status == ServerStatus::Ready, server.ipv4()) {
                (true, Some(host)) => {
                    let next = State {
                        host: Some(host.to_string()),
                        ..state.clone()
                    };
                    if server.boot_type == BootType::Rescue {
                        (stay(&next, Step::RebootNormal), Action::RebootNormal)
                    } else {
                        let action = probe(&next);
                        (stay(&next, Step::ProbeTalos), action)
                    }
                }
                _ => (state.clone(), Action::PollServer),
            }
        }
        (Step::ResumeMaintenance, Observation::Server(server)) => {
            match (server.status == ServerStatus::Ready, server.ipv4()) {
                (true, Some(host)) => {
                    let next = State {
                        host: Some(host.to_string()),
                        apply_uncertain_since: Some(now),
                        ..stay(state, Step::ProbeTalos)
                    };
                    let action = probe(&next);
                    (next, action)
                }
                _ => (state.clone(), Action::PollServer),
            }
        }

        (Step::Adopt, Observation::Server(server)) => {
            match (server.status == ServerStatus::Ready, server.ipv4()) {
                (true, Some(host)) => {
                    let next = State {
                        host: Some(host.to_string()),
                        ..stay(state, Step::ProbeTalos)
                    };
                    let action = probe(&next);
                    (next, action)
                }
                _ => (state.clone(), Action::PollServer),
            }
        }
        // A standby install ends where a node's would apply its config; it
        // never applies one, even when handed a standby server again (its
        // own resume from `standby` passes through maintenance).
        (Step::ProbeTalos, Observation::TalosUp)
            if plan.target == crate::install::Target::Standby =>
        {
            (go(state, Phase::Standby, Step::Done, now), Action::Finish)
        }
        (Step::ProbeTalos, Observation::TalosUp) => {
            let next = State {
                apply_uncertain_since: None,
                ..go(state, Phase::Maintenance, Step::ApplyConfig, now)
            };
            let action = apply(&next);
            (next, action)
        }
        (Step::ProbeTalos, Observation::TalosDown(err)) => match state.apply_uncertain_since {
            Some(t) if now.saturating_duration_since(t) >= plan.apply_grace => {
                events.push(phase_event(format!(
                    "maintenance: the Talos maintenance API has not answered for {}s after an apply whose outcome is unknown ({err}); assuming the config was applied",
                    plan.apply_grace.as_secs()
                )));
                let next = State {
                    apply_uncertain_since: None,
                    ..go(state, Phase::Configured, Step::AwaitNode, now)
                };
                (next, Action::PollNode)
            }
            // Talos leaves maintenance mode once configured; the node may
            // even have joined already (a restart right after the apply).
            Some(_) => (stay(state, Step::ConfirmApplied), Action::PollNode),
            None => (state.clone(), probe(state)),
        },
        (Step::ConfirmApplied, Observation::Node(Some(true))) => {
            events.push(phase_event(format!(
                "maintenance: Node {} is Ready, so the machine config whose apply had no answer was applied",
                plan.node_name
            )));
            let next = State {
                apply_uncertain_since: None,
                ..go(state, Phase::Configured, Step::AwaitNode, now)
            };
            (next, Action::PollNode)
        }
        (Step::ConfirmApplied, Observation::Node(_) | Observation::NodeFailed(_)) => {
            (stay(state, Step::ProbeTalos), probe(state))
        }

        (Step::ApplyConfig, Observation::ConfigApplied) => {
            let next = State {
                apply_uncertain_since: None,
                ..go(state, Phase::Configured, Step::AwaitNode, now)
            };
            (next, Action::PollNode)
        }
        (Step::ApplyConfig, Observation::ApplyFailed(TalosError::Rejected(msg))) => fail(
            state,
            now,
            format!("Talos rejected the machine config: {msg}"),
            FailureClass::Config,
        ),
        (Step::ApplyConfig, Observation::ApplyFailed(err)) => {
            events.push(retry_event(format!(
                "maintenance: ApplyConfiguration failed ({err}); retrying"
            )));
            // The config may have been applied with the answer lost: if the
            // maintenance API is gone from now on, that is what happened.
            let next = State {
                apply_uncertain_since: state.apply_uncertain_since.or(Some(now)),
                ..stay(state, Step::ProbeTalos)
            };
            let action = probe(&next);
            (next, action)
        }
        // Reading the server's attachment and address for the config failed:
        // the API's failure budget decides.
        (Step::ApplyConfig, Observation::ApiFailed(_)) => (state.clone(), apply(state)),
        (Step::ApplyConfig, Observation::ConfigInvalid(msg)) => fail(
            state,
            now,
            format!("cannot render the machine config: {msg}"),
            FailureClass::Config,
        ),

        // The phase stays `configured` until every side effect of the join is
        // done: a restart anywhere in between resumes at `configured`, sees
        // the Ready Node and does the rest again (each step is idempotent).
        // Persisting `joined` earlier would leave a restarted provider with
        // nothing to resume and the Node tainted for good.
        (Step::AwaitNode, Observation::Node(Some(true))) => {
            (stay(state, Step::InitializeNode), Action::InitializeNode)
        }
        (Step::AwaitNode, Observation::Node(_) | Observation::NodeFailed(_)) => {
            (state.clone(), Action::PollNode)
        }
        (Step::InitializeNode, Observation::NodeInitialized) => {
            (stay(state, Step::ReleaseToken), Action::ReleaseToken)
        }
        (Step::InitializeNode, Observation::NodeFailed(err)) => {
            if matches!(err, NodePortError::Refused(_)) {
                events.push(retry_event(format!(
                    "configured: cannot remove the {UNINITIALIZED} taint from Node {} ({err}); retrying until the join deadline",
                    plan.node_name
                )));
            }
            (state.clone(), Action::InitializeNode)
        }
        (Step::ReleaseToken, Observation::TokenReleased) => {
            (go(state, Phase::Joined, Step::Done, now), Action::Finish)
        }
        (Step::ReleaseToken, Observation::NodeFailed(NodePortError::Refused(err))) => {
            // The node has joined; a token we may not delete expires with
            // its TTL and does not hold the install back.
            events.push(retry_event(format!(
                "configured: cannot delete the node's bootstrap token ({err}); it expires with its TTL"
            )));
            (go(state, Phase::Joined, Step::Done, now), Action::Finish)
        }
        (Step::ReleaseToken, Observation::NodeFailed(_)) => (state.clone(), Action::ReleaseToken),

        (step, obs) => fail(
            state,
            now,
            format!("internal error: unexpected observation {obs:?} at step {step:?}"),
            FailureClass::Internal,
        ),
    }
}

fn host_key_changed(state: &State, trusted: &str, presented: &str) -> String {
    format!(
        "the rescue system at {} presented host key {presented}, but {trusted} was trusted on first use in this rescue boot; refusing to connect",
        state.host.as_deref().unwrap_or("?")
    )
}

/// The maintenance API never came up after the normal boot: the image on disk
/// may be bad in a way the read-back could not see (or the boot went wrong).
/// Write it again from a fresh rescue boot, once; then give up.
fn back_to_rescue(
    plan: &Plan,
    state: &State,
    now: Instant,
    limit: Duration,
    events: &mut Vec<InstallEvent>,
) -> (State, Action) {
    if state.rescue_returns >= plan.rescue_returns {
        let reason = format!(
            "the Talos maintenance API did not come up within {}s of the normal boot, after {} return(s) to rescue",
            limit.as_secs(),
            state.rescue_returns
        );
        return fail(state, now, reason, FailureClass::MaintenanceNeverUp);
    }
    let next = State {
        rescue_returns: state.rescue_returns + 1,
        image_attempts: 0,
        checksum_mismatches: 0,
        written: None,
        ..go(state, Phase::Ready, Step::RebootRescue, now)
    };
    events.push(retry_event(format!(
        "booting: the Talos maintenance API did not come up within {}s of the normal boot; rebooting into rescue to write the image again (return {}/{})",
        limit.as_secs(),
        next.rescue_returns,
        plan.rescue_returns
    )));
    (next, Action::RebootRescue)
}

fn connect(state: &State) -> Action {
    Action::ConnectSsh {
        host: state.host.clone().unwrap_or_default(),
        user: state.user.clone().unwrap_or_default(),
    }
}

fn probe(state: &State) -> Action {
    Action::ProbeTalos {
        host: state.host.clone().unwrap_or_default(),
    }
}

fn apply(state: &State) -> Action {
    Action::ApplyConfig {
        host: state.host.clone().unwrap_or_default(),
        disk: state.disk.clone().unwrap_or_default(),
        mac: state.mac.clone().unwrap_or_default(),
    }
}

fn command_failed(what: &str, out: &CommandOutput) -> String {
    let stderr = out.stderr.trim();
    // stderr of a failed download can be long; the first lines tell the story.
    let excerpt: String = stderr.chars().take(300).collect();
    format!("{what} exited with status {}: {excerpt}", out.exit_status)
}

#[path = "machine_plan.rs"]
mod plan;
pub use plan::{FailureClass, Plan};

#[path = "machine_imaging.rs"]
mod imaging;

#[path = "machine_events.rs"]
mod events;

#[path = "machine_cadence.rs"]
mod cadence;

#[path = "machine_rescue.rs"]
mod rescue;
use rescue::{connect_to, rescue_login};

pub use events::phase_message;
pub(super) use events::{phase_event, retry_event};
use imaging::{attempts_exhausted, start_write};

#[cfg(test)]
#[path = "machine_tests.rs"]
mod tests;
