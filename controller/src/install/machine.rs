//! The pure install state machine: given where an install stands and what was
//! just observed, decide the next state and the one action to perform.
//!
//! It performs no I/O and reads no clock (the caller passes `now`), so every
//! transition is unit-tested. The driver owns the resources (the SSH session)
//! and turns each action into calls on the ports.

use std::time::Duration;

use tokio::time::Instant;

use super::commands::{self, Compression};
use super::{Deadlines, InstallSettings, InstallSpec, Phase};
use crate::rescue::{CommandOutput, RescueError};
use crate::scaleway::{ApiError, BootType, Server, ServerStatus};
use crate::talos::TalosError;

use super::NodePortError;

/// What does not change during one install.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub image_url: String,
    pub compression: Compression,
    pub install_disk: Option<String>,
    pub deadlines: Deadlines,
    pub image_attempts: u32,
}

impl Plan {
    /// Fails when the spec cannot be installed at all (e.g. an image format we
    /// cannot decompress).
    pub fn new(spec: &InstallSpec, settings: &InstallSettings) -> Result<Self, String> {
        Ok(Plan {
            compression: Compression::from_url(&spec.image_url)?,
            image_url: spec.image_url.clone(),
            install_disk: spec.install_disk.clone(),
            deadlines: settings.deadlines.clone(),
            image_attempts: settings.image_attempts.max(1),
        })
    }

    fn deadline(&self, phase: Phase) -> Option<Duration> {
        let d = &self.deadlines;
        match phase {
            Phase::Ordered | Phase::Delivering => Some(d.delivery),
            Phase::Ready | Phase::Rescue => Some(d.rescue),
            Phase::Imaging => Some(d.imaging),
            Phase::Booting => Some(d.booting),
            Phase::Maintenance => Some(d.maintenance),
            Phase::Configured => Some(d.join),
            Phase::Joined | Phase::Failed => None,
        }
    }
}

/// What the machine is waiting for within its phase.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// Polling the server until it is delivered (`ready`).
    AwaitDelivery,
    /// The rescue reboot call is in flight.
    RebootRescue,
    /// The rescue reboot was refused for now; polling until the server is `ready`.
    RetryRebootRescue,
    /// Polling until the server runs the rescue image and has its address.
    AwaitRescue,
    /// Opening an SSH session (again after a lost one).
    Connect,
    ListDisks,
    ListLinks,
    WriteImage,
    Sync,
    /// The normal reboot call is in flight.
    RebootNormal,
    RetryRebootNormal,
    /// Waiting for the Talos maintenance API to answer.
    ProbeTalos,
    ApplyConfig,
    AwaitNode,
    Done,
}

/// Where an install stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct State {
    pub phase: Phase,
    pub step: Step,
    /// When the current phase was entered; its deadline counts from here.
    pub since: Instant,
    /// The server's IPv4 address once known.
    pub host: Option<String>,
    /// The rescue user once known.
    pub user: Option<String>,
    pub disk: Option<String>,
    pub mac: Option<String>,
    /// Image writes (and lost sessions during imaging) so far.
    pub image_attempts: u32,
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
    SshConnected,
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
}

/// The one thing to do next. Polls (`PollServer`, `ConnectSsh`, `ProbeTalos`,
/// `PollNode`) are performed after the poll interval.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    PollServer,
    RebootRescue,
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
    /// Terminal failure: delete the server and the NodeClaim.
    Fail {
        reason: String,
    },
    /// The node joined: nothing left to do.
    Finish,
}

impl Action {
    /// Actions that wait for something outside to change; the driver sleeps one
    /// poll interval before performing them.
    pub fn is_poll(&self) -> bool {
        matches!(
            self,
            Action::PollServer
                | Action::ConnectSsh { .. }
                | Action::ProbeTalos { .. }
                | Action::PollNode
        )
    }
}

/// Computes the next state and action. Phase deadlines are enforced here: an
/// observation that does not move the install to another phase after the
/// phase's deadline fails it.
pub fn next(plan: &Plan, state: &State, obs: Observation, now: Instant) -> (State, Action) {
    let (next_state, action) = transition(plan, state, obs, now);
    if next_state.phase == state.phase
        && !matches!(action, Action::Fail { .. } | Action::Finish)
        && let Some(limit) = plan.deadline(state.phase)
        && now.saturating_duration_since(state.since) > limit
    {
        let reason = format!(
            "phase {} did not complete within {}s",
            state.phase,
            limit.as_secs()
        );
        return fail(state, now, reason);
    }
    (next_state, action)
}

fn fail(state: &State, now: Instant, reason: String) -> (State, Action) {
    let next = State {
        phase: Phase::Failed,
        step: Step::Done,
        since: now,
        ..state.clone()
    };
    (next, Action::Fail { reason })
}

/// Moves to `phase` at `step`; the deadline clock restarts only on a real phase
/// change (Ordered -> Delivering shares the delivery clock).
fn go(state: &State, phase: Phase, step: Step, now: Instant) -> State {
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
fn broken_status(status: &ServerStatus) -> Option<&'static str> {
    match status {
        ServerStatus::Error => Some("error"),
        ServerStatus::Locked => Some("locked"),
        ServerStatus::OutOfStock => Some("out_of_stock"),
        ServerStatus::Deleting => Some("deleting"),
        _ => None,
    }
}

fn transition(plan: &Plan, state: &State, obs: Observation, now: Instant) -> (State, Action) {
    // Observations that mean the same thing at every step.
    match &obs {
        Observation::ApiFailed(ApiError::NotFound(_)) => {
            return fail(state, now, "the server no longer exists".to_string());
        }
        Observation::Server(server) => {
            if let Some(status) = broken_status(&server.status) {
                return fail(state, now, format!("the server is in status {status}"));
            }
        }
        _ => {}
    }

    match (state.step, obs) {
        (Step::AwaitDelivery, Observation::Server(server)) => match server.status {
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
        (Step::AwaitDelivery | Step::AwaitRescue, Observation::ApiFailed(_)) => {
            (state.clone(), Action::PollServer)
        }

        (Step::RebootRescue, Observation::Rebooted) => (
            go(state, Phase::Rescue, Step::AwaitRescue, now),
            Action::PollServer,
        ),
        (Step::RebootRescue, Observation::ApiFailed(err)) if err.is_retryable() => {
            (stay(state, Step::RetryRebootRescue), Action::PollServer)
        }
        (Step::RebootRescue, Observation::ApiFailed(err)) => {
            fail(state, now, format!("rescue reboot refused: {err}"))
        }
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
        (
            Step::RetryRebootRescue | Step::RetryRebootNormal,
            Observation::Server(_) | Observation::ApiFailed(_),
        ) => (state.clone(), Action::PollServer),

        (Step::AwaitRescue, Observation::Server(server)) => {
            let user = server
                .rescue_server
                .as_ref()
                .map(|r| r.user.clone())
                .filter(|u| !u.is_empty());
            match (
                server.status == ServerStatus::Ready,
                server.boot_type,
                server.ipv4(),
                user,
            ) {
                (true, BootType::Rescue, Some(host), Some(user)) => {
                    let next = State {
                        host: Some(host.to_string()),
                        user: Some(user.clone()),
                        ..stay(state, Step::Connect)
                    };
                    (
                        next,
                        Action::ConnectSsh {
                            host: host.to_string(),
                            user,
                        },
                    )
                }
                _ => (state.clone(), Action::PollServer),
            }
        }

        (Step::Connect, Observation::SshConnected) => (
            go(state, Phase::Imaging, Step::ListDisks, now),
            Action::Run {
                command: commands::LIST_DISKS.to_string(),
            },
        ),
        (Step::Connect, Observation::SshFailed(RescueError::InvalidKey(msg))) => fail(
            state,
            now,
            format!("the rescue private key is invalid: {msg}"),
        ),
        (Step::Connect, Observation::SshFailed(_)) => (state.clone(), connect(state)),

        // A session lost mid-imaging starts the imaging over on a new session,
        // within the attempt budget.
        (
            Step::ListDisks | Step::ListLinks | Step::WriteImage | Step::Sync,
            Observation::SessionLost(err),
        ) => retry_imaging(plan, state, now, format!("SSH session lost: {err}")),

        (Step::ListDisks, Observation::Command(out)) => {
            if !out.success() {
                return fail(state, now, command_failed("lsblk", &out));
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
                Err(reason) => fail(state, now, reason),
            }
        }
        (Step::ListLinks, Observation::Command(out)) => {
            if !out.success() {
                return fail(state, now, command_failed("ip -o link", &out));
            }
            match commands::pick_mac(&out.stdout) {
                Ok(mac) => {
                    let next = State {
                        mac: Some(mac),
                        image_attempts: state.image_attempts + 1,
                        ..stay(state, Step::WriteImage)
                    };
                    let command = write_command(plan, &next);
                    (next, Action::Run { command })
                }
                Err(reason) => fail(state, now, reason),
            }
        }
        (Step::WriteImage, Observation::Command(out)) => {
            if out.success() {
                (
                    stay(state, Step::Sync),
                    Action::Run {
                        command: commands::sync(state.as_root()),
                    },
                )
            } else if state.image_attempts < plan.image_attempts {
                let next = State {
                    image_attempts: state.image_attempts + 1,
                    ..state.clone()
                };
                let command = write_command(plan, &next);
                (next, Action::Run { command })
            } else {
                fail(state, now, command_failed("image write", &out))
            }
        }
        (Step::Sync, Observation::Command(out)) => {
            if out.success() {
                (
                    go(state, Phase::Booting, Step::RebootNormal, now),
                    Action::RebootNormal,
                )
            } else {
                fail(state, now, command_failed("sync", &out))
            }
        }

        (Step::RebootNormal, Observation::Rebooted) => {
            (stay(state, Step::ProbeTalos), probe(state))
        }
        (Step::RebootNormal, Observation::ApiFailed(err)) if err.is_retryable() => {
            (stay(state, Step::RetryRebootNormal), Action::PollServer)
        }
        (Step::RebootNormal, Observation::ApiFailed(err)) => {
            fail(state, now, format!("normal reboot refused: {err}"))
        }

        (Step::ProbeTalos, Observation::TalosUp) => {
            let next = go(state, Phase::Maintenance, Step::ApplyConfig, now);
            let action = apply(&next);
            (next, action)
        }
        (Step::ProbeTalos, Observation::TalosDown(_)) => (state.clone(), probe(state)),

        (Step::ApplyConfig, Observation::ConfigApplied) => (
            go(state, Phase::Configured, Step::AwaitNode, now),
            Action::PollNode,
        ),
        (Step::ApplyConfig, Observation::ApplyFailed(TalosError::Rejected(msg))) => fail(
            state,
            now,
            format!("Talos rejected the machine config: {msg}"),
        ),
        (Step::ApplyConfig, Observation::ApplyFailed(_)) => {
            (stay(state, Step::ProbeTalos), probe(state))
        }
        (Step::ApplyConfig, Observation::ConfigInvalid(msg)) => fail(
            state,
            now,
            format!("cannot render the machine config: {msg}"),
        ),

        (Step::AwaitNode, Observation::Node(Some(true))) => {
            (go(state, Phase::Joined, Step::Done, now), Action::Finish)
        }
        (Step::AwaitNode, Observation::Node(_) | Observation::NodeFailed(_)) => {
            (state.clone(), Action::PollNode)
        }

        (step, obs) => fail(
            state,
            now,
            format!("internal error: unexpected observation {obs:?} at step {step:?}"),
        ),
    }
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

fn write_command(plan: &Plan, state: &State) -> String {
    commands::write_image(
        &plan.image_url,
        plan.compression,
        state.disk.as_deref().unwrap_or_default(),
        state.as_root(),
    )
}

fn retry_imaging(plan: &Plan, state: &State, now: Instant, reason: String) -> (State, Action) {
    if state.image_attempts >= plan.image_attempts {
        return fail(state, now, reason);
    }
    let next = State {
        image_attempts: state.image_attempts + 1,
        ..stay(state, Step::Connect)
    };
    let action = connect(&next);
    (next, action)
}

fn command_failed(what: &str, out: &CommandOutput) -> String {
    let stderr = out.stderr.trim();
    // stderr of a failed download can be long; the first lines tell the story.
    let excerpt: String = stderr.chars().take(300).collect();
    format!("{what} exited with status {}: {excerpt}", out.exit_status)
}

#[cfg(test)]
#[path = "machine_tests.rs"]
mod tests;
