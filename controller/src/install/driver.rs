//! Runs one install: performs the state machine's actions through the ports,
//! feeds back what it saw, and on a terminal failure cleans up (the server and
//! the NodeClaim are deleted so that Karpenter retries elsewhere).

use std::time::Duration;

use tokio::time::{Instant, sleep, timeout};
use tracing::{Instrument, debug, error, info, info_span, warn};

use super::machine::{self, Action, Observation, Plan, State};
use super::{InstallEngine, InstallSpec, Phase, node_settings};
use crate::rescue::{RescueError, RescueSession, SshTarget};
use crate::scaleway::{ApiError, BootType};
use crate::talos::{TalosError, render_machine_config};

use super::NodePortError;

/// How many times each cleanup call is tried before giving up (logged; the
/// garbage collector catches what is left).
const CLEANUP_ATTEMPTS: u32 = 5;

pub(super) async fn run(engine: InstallEngine, spec: InstallSpec) {
    let span = info_span!("install", server_id = %spec.server_id, node = %spec.node_name);
    Driver {
        engine: &engine,
        spec: &spec,
        session: None,
    }
    .run()
    .instrument(span)
    .await;
}

struct Driver<'a> {
    engine: &'a InstallEngine,
    spec: &'a InstallSpec,
    /// The open rescue session, kept across the commands of the imaging phase.
    session: Option<Box<dyn RescueSession>>,
}

impl Driver<'_> {
    async fn run(mut self) {
        let settings = &self.engine.deps.settings;
        let plan = match Plan::new(self.spec, settings) {
            Ok(plan) => plan,
            Err(reason) => return self.fail(&reason).await,
        };
        let mut state = State::start(Instant::now());
        let mut action = Action::PollServer;
        self.log_phase(Phase::Ordered);
        loop {
            if action.is_poll() {
                sleep(settings.poll_interval).await;
            }
            let obs = self.perform(&plan, &state, &action).await;
            let (next_state, next_action) = machine::next(&plan, &state, obs, Instant::now());
            if next_state.phase != state.phase {
                self.engine
                    .set_phase(&self.spec.server_id, next_state.phase);
                self.log_phase(next_state.phase);
            }
            state = next_state;
            action = next_action;
            if !matches!(action, Action::Run { .. } | Action::ConnectSsh { .. })
                && let Some(session) = self.session.take()
            {
                session.close().await;
            }
            match &action {
                Action::Fail { reason } => return self.fail(reason).await,
                Action::Finish => return,
                _ => {}
            }
        }
    }

    fn log_phase(&self, phase: Phase) {
        info!(server_id = %self.spec.server_id, node = %self.spec.node_name, phase = %phase, "install phase");
    }

    async fn perform(&mut self, plan: &Plan, state: &State, action: &Action) -> Observation {
        let deps = &self.engine.deps;
        let settings = &deps.settings;
        let (zone, id) = (self.spec.zone.as_str(), self.spec.server_id.as_str());
        match action {
            Action::PollServer => {
                let call = deps.elastic_metal.get_server(zone, id);
                match bounded(settings.call_timeout, call).await {
                    Ok(Ok(server)) => Observation::Server(Box::new(server)),
                    Ok(Err(err)) => api_failed("get server", err),
                    Err(elapsed) => api_failed("get server", ApiError::Unavailable(elapsed)),
                }
            }
            Action::RebootRescue | Action::RebootNormal => {
                let (boot, keys) = match action {
                    Action::RebootRescue => {
                        (BootType::Rescue, vec![self.spec.rescue_ssh_key_id.clone()])
                    }
                    _ => (BootType::Normal, Vec::new()),
                };
                let call = deps.elastic_metal.reboot_server(zone, id, boot, &keys);
                match bounded(settings.call_timeout, call).await {
                    Ok(Ok(_)) => {
                        info!(boot_type = ?boot, "reboot requested");
                        Observation::Rebooted
                    }
                    Ok(Err(err)) => api_failed("reboot", err),
                    Err(elapsed) => api_failed("reboot", ApiError::Unavailable(elapsed)),
                }
            }
            Action::ConnectSsh { host, user } => {
                let target = SshTarget {
                    host: host.clone(),
                    port: settings.ssh_port,
                    user: user.clone(),
                };
                let key = self.spec.rescue_private_key.expose();
                let connect = deps.rescue.connect(&target, key);
                match bounded(settings.call_timeout, connect).await {
                    Ok(Ok(session)) => {
                        info!(%host, %user, "rescue SSH session open");
                        self.session = Some(session);
                        Observation::SshConnected
                    }
                    Ok(Err(err)) => {
                        debug!(error = %err, "rescue SSH not available yet");
                        Observation::SshFailed(err)
                    }
                    Err(elapsed) => Observation::SshFailed(RescueError::Timeout(elapsed)),
                }
            }
            Action::Run { command } => self.run_command(plan, state, command).await,
            Action::ProbeTalos { host } => {
                let addr = format!("{host}:{}", settings.talos_port);
                match bounded(settings.call_timeout, deps.talos.version(&addr)).await {
                    Ok(Ok(version)) => {
                        info!(talos_version = %version.tag, arch = %version.arch, "Talos maintenance API up");
                        Observation::TalosUp
                    }
                    Ok(Err(err)) => {
                        debug!(error = %err, "Talos maintenance API not available yet");
                        Observation::TalosDown(err)
                    }
                    Err(elapsed) => Observation::TalosDown(TalosError::Unavailable(elapsed)),
                }
            }
            Action::ApplyConfig { host, disk, mac } => {
                let settings_for_node = node_settings(self.spec, disk, mac);
                let config = match render_machine_config(
                    self.spec.base_machine_config.expose(),
                    &settings_for_node,
                ) {
                    Ok(config) => config,
                    Err(err) => return Observation::ConfigInvalid(err.to_string()),
                };
                let addr = format!("{host}:{}", settings.talos_port);
                match bounded(
                    settings.call_timeout,
                    deps.talos.apply_configuration(&addr, &config),
                )
                .await
                {
                    Ok(Ok(warnings)) => {
                        for warning in warnings {
                            warn!(%warning, "Talos warning on the applied config");
                        }
                        info!(%disk, %mac, "machine config applied");
                        Observation::ConfigApplied
                    }
                    Ok(Err(err)) => {
                        warn!(error = %err, "ApplyConfiguration failed");
                        Observation::ApplyFailed(err)
                    }
                    Err(elapsed) => Observation::ApplyFailed(TalosError::Unavailable(elapsed)),
                }
            }
            Action::PollNode => {
                let call = deps.nodes.node_ready(&self.spec.node_name);
                match bounded(settings.call_timeout, call).await {
                    Ok(Ok(ready)) => Observation::Node(ready),
                    Ok(Err(err)) => {
                        warn!(error = %err, "cannot read the Node");
                        Observation::NodeFailed(err)
                    }
                    Err(elapsed) => Observation::NodeFailed(NodePortError::Unavailable(elapsed)),
                }
            }
            // The loop returns before performing these.
            Action::Fail { .. } | Action::Finish => Observation::Node(None),
        }
    }

    /// Runs one command on the open session, bounded by what is left of the
    /// phase's deadline so that a hung `dd` cannot outlive it.
    async fn run_command(&mut self, plan: &Plan, state: &State, command: &str) -> Observation {
        let Some(session) = self.session.as_mut() else {
            return Observation::SessionLost(RescueError::SessionLost("no open session".into()));
        };
        let limit = plan
            .deadlines
            .imaging
            .saturating_sub(state.since.elapsed())
            .max(Duration::from_secs(1));
        let step = state.step;
        let started = Instant::now();
        match timeout(limit, session.run(command)).await {
            Ok(Ok(out)) => {
                // Command lines are not logged: an image URL may carry a
                // signed query string.
                info!(
                    ?step,
                    exit_status = out.exit_status,
                    elapsed_ms = started.elapsed().as_millis() as u64,
                    "rescue command finished"
                );
                debug!(?step, stdout = %out.stdout, stderr = %out.stderr, "rescue command output");
                Observation::Command(out)
            }
            Ok(Err(err)) => {
                warn!(?step, error = %err, "rescue session lost");
                self.session = None;
                Observation::SessionLost(err)
            }
            Err(_) => {
                warn!(?step, "rescue command timed out");
                self.session = None;
                Observation::SessionLost(RescueError::Timeout(format!(
                    "{step:?} exceeded the imaging deadline"
                )))
            }
        }
    }

    /// Terminal failure: the server goes back, the NodeClaim is deleted so that
    /// Karpenter provisions elsewhere.
    async fn fail(mut self, reason: &str) {
        let (zone, id) = (self.spec.zone.as_str(), self.spec.server_id.as_str());
        self.engine.set_phase(id, Phase::Failed);
        error!(server_id = %id, node = %self.spec.node_name, phase = %Phase::Failed, %reason,
            "install failed; deleting the server and the NodeClaim");
        if let Some(session) = self.session.take() {
            session.close().await;
        }
        let deps = &self.engine.deps;
        let settings = &deps.settings;
        for attempt in 1..=CLEANUP_ATTEMPTS {
            match bounded(
                settings.call_timeout,
                deps.elastic_metal.delete_server(zone, id),
            )
            .await
            {
                Ok(Ok(_)) | Ok(Err(ApiError::NotFound(_))) => {
                    info!(server_id = %id, %reason, "deleted server after failed install");
                    break;
                }
                Ok(Err(err)) if !err.is_retryable() => {
                    error!(server_id = %id, error = %err, "cannot delete server after failed install");
                    break;
                }
                outcome => {
                    warn!(server_id = %id, attempt, ?outcome, "deleting server failed; retrying");
                    sleep(settings.poll_interval).await;
                }
            }
        }
        let claim = self.spec.node_claim_name.as_str();
        for attempt in 1..=CLEANUP_ATTEMPTS {
            match bounded(
                settings.call_timeout,
                deps.nodes.delete_node_claim(claim, reason),
            )
            .await
            {
                Ok(Ok(())) => {
                    info!(nodeclaim = %claim, %reason, "deleted NodeClaim after failed install");
                    break;
                }
                Ok(Err(NodePortError::Refused(err))) => {
                    error!(nodeclaim = %claim, error = %err, "cannot delete NodeClaim after failed install");
                    break;
                }
                outcome => {
                    warn!(nodeclaim = %claim, attempt, ?outcome, "deleting NodeClaim failed; retrying");
                    sleep(settings.poll_interval).await;
                }
            }
        }
    }
}

/// Bounds a port call; the error is a description of the timeout.
async fn bounded<T>(limit: Duration, call: impl Future<Output = T>) -> Result<T, String> {
    timeout(limit, call)
        .await
        .map_err(|_| format!("no answer within {}s", limit.as_secs()))
}

fn api_failed(what: &str, err: ApiError) -> Observation {
    if err.is_retryable() {
        debug!(error = %err, "{what} failed; will retry");
    } else {
        warn!(error = %err, "{what} failed");
    }
    Observation::ApiFailed(err)
}
