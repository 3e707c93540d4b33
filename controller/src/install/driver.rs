//! Runs one install: performs the state machine's actions through the ports,
//! feeds back what it saw, persists the progress and records Events, and on a
//! terminal failure cleans up (the server and the NodeClaim are deleted so
//! that Karpenter retries elsewhere).

use std::time::Duration;

use chrono::{DateTime, SubsecRound, Utc};
use tokio::time::{Instant, sleep, sleep_until, timeout};
use tracing::{Instrument, debug, error, info, info_span, warn};

use super::history::Wait;
use super::machine::{self, Action, FailureClass, Observation, Plan, State, Step, Transition};
use super::waits::WaitWatch;
use super::{InstallEngine, InstallEvent, InstallSpec, Phase, Progress, Target, node_settings};
use crate::metrics::install_metrics;
use crate::rescue::{RescueError, RescueSession, SshTarget};
use crate::scaleway::{ApiError, BootType};
use crate::talos::{TalosError, render_machine_config};

use super::NodePortError;
use crate::crashpoint::{self, CrashPoint};

/// The crash point between the side effect just performed (what `obs` reports
/// at `state`) and the next one.
fn crash_point_after(plan: &Plan, state: &State, obs: &Observation) -> Option<CrashPoint> {
    use machine::Step;
    match (state.step, obs) {
        (Step::WriteImage, Observation::Command(out))
            if plan.target == crate::install::Target::Standby && out.exit_status == 0 =>
        {
            Some(CrashPoint::StandbyImaged)
        }
        (Step::ApplyConfig, Observation::ConfigApplied) => Some(CrashPoint::ConfigApplied),
        (Step::AwaitNode, Observation::Node(Some(true))) => Some(CrashPoint::NodeReady),
        (Step::InitializeNode, Observation::NodeInitialized) => Some(CrashPoint::NodeInitialized),
        (Step::ReleaseToken, Observation::TokenReleased) => Some(CrashPoint::TokenReleased),
        _ => None,
    }
}

/// How many times the server deletion after a failed install is tried (with
/// a growing pause) before it is left to the garbage collector.
const DELETE_ATTEMPTS: u32 = 8;
/// The same for the NodeClaim deletion and the bootstrap-token cleanup.
const CLEANUP_ATTEMPTS: u32 = 5;
/// The longest pause between two cleanup attempts.
const MAX_BACKOFF: Duration = Duration::from_secs(300);
/// The least time an SSH probe of a rebooting server may take: TCP connect,
/// handshake and login, across the internet. A probe is bounded by the
/// larger of this and the probe interval (and by the call timeout), so that
/// one lost in a dead route does not hold up the next status poll for long.
const MIN_PROBE_TIME: Duration = Duration::from_secs(5);

pub(super) async fn run(engine: InstallEngine, spec: InstallSpec, progress: Option<Progress>) {
    let span = info_span!("install", server_id = %spec.server_id, node = %spec.node_name);
    let now = Instant::now();
    let anchor = (now, Utc::now());
    let started = progress
        .as_ref()
        .and_then(|p| p.started)
        .unwrap_or(anchor.1);
    Driver {
        engine: &engine,
        spec: &spec,
        session: None,
        anchor,
        started: started.trunc_subsecs(0),
        adopted: spec.target == crate::install::Target::Node
            && progress.as_ref().and_then(|p| p.phase) == Some(Phase::Standby),
        saved: None,
        entered: now,
        // A new order was undelivered when the install began.
        waits: WaitWatch::new(progress.is_none().then_some(now)),
    }
    .run(progress)
    .instrument(span)
    .await;
}

struct Driver<'a> {
    engine: &'a InstallEngine,
    spec: &'a InstallSpec,
    /// The open rescue session, kept across the commands of the imaging phase.
    session: Option<Box<dyn RescueSession>>,
    /// One moment on both clocks: the machine counts in `Instant`s, the
    /// persisted progress in wall-clock time.
    anchor: (Instant, DateTime<Utc>),
    /// When the install began (persisted, so it survives restarts).
    started: DateTime<Utc>,
    /// The progress last saved on the NodeClaim.
    saved: Option<Progress>,
    /// This install adopts a standby server (its join is an adoption).
    adopted: bool,
    /// When the current phase was entered, for the phase-duration metric
    /// (the imaging deadline clock restarts per write; this does not).
    entered: Instant,
    /// Brackets this install's delivery and normal boot for the history.
    waits: WaitWatch,
}

impl Driver<'_> {
    async fn run(mut self, progress: Option<Progress>) {
        let settings = &self.engine.deps.settings;
        let now = Instant::now();
        let (mut state, mut action) = match &progress {
            None => (State::start(now), Action::PollServer),
            Some(progress) => {
                let since = progress
                    .phase_since
                    .map(|t| self.instant_of(t))
                    .unwrap_or(now);
                machine::resume(progress, since, now)
            }
        };
        self.entered = state.since;
        match (&progress, state.phase) {
            (Some(_), Phase::Joined) => {
                // Only handed over when its NodeClaim is not Initialized: a
                // node that joined under a version that persisted `joined`
                // before the taint was removed. Finish it again.
                info!(phase = %Phase::Joined, "resumed an install that had joined; making sure its Node is initialised");
                self.saved = progress;
                return self.finish_again().await;
            }
            (Some(_), Phase::Failed) => {
                info!(phase = %Phase::Failed, "resumed an install that had failed; making sure it is cleaned up");
                self.saved = progress;
                return self
                    .cleanup("the install had failed before the controller restarted")
                    .await;
            }
            _ => {}
        }
        let mut plan = match Plan::new(self.spec, settings) {
            Ok(plan) => plan,
            Err(reason) => {
                let (failed, _) = machine::fail(&state, now, reason.clone(), FailureClass::Image);
                self.save(&failed).await;
                return self.fail(&failed, &reason, FailureClass::Image).await;
            }
        };
        match &progress {
            None => {
                self.log_phase(&state);
                if let Some(message) = machine::phase_message(&plan, &state) {
                    self.event(machine::phase_event(message)).await;
                }
            }
            Some(p) if p.phase == Some(Phase::Standby) && self.spec.target == Target::Node => {
                info!(phase = %state.phase, "adopting a standby server");
                self.event(InstallEvent {
                    warning: false,
                    reason: "StandbyAdopted".to_string(),
                    message: format!(
                        "maintenance: adopted standby server {} ({}, {}), installed and waiting in Talos maintenance mode; applying this node's machine config",
                        self.spec.server_id, self.spec.offer_name, self.spec.zone
                    ),
                })
                .await;
            }
            Some(p) => {
                let from = p.phase.map_or("none", Phase::as_str);
                info!(persisted_phase = %from, phase = %state.phase, image_attempts = state.image_attempts,
                    rescue_returns = state.rescue_returns, "resuming install");
                self.event(machine::phase_event(format!(
                    "{}: install resumed after a controller restart (persisted phase {from})",
                    state.phase
                )))
                .await;
            }
        }
        // A server to attach resumes its attachment first (found again by
        // listing, never requested twice) before the rescue boot.
        if plan.private_network.is_some()
            && (state.phase, state.step) == (Phase::Ready, Step::RebootRescue)
        {
            state.step = Step::AttachNetwork;
            action = Action::EnsureNetwork;
        }
        self.save(&state).await;
        plan.delivery = self.expected(Wait::Delivery, &plan, &state);
        if let Some(w) = plan.delivery {
            debug!(offer = %self.spec.offer_name, zone = %self.spec.zone, opens_s = w.opens.as_secs_f64(),
                closes_s = w.closes.as_secs_f64(), every_s = w.every.as_secs_f64(),
                "deliveries seen before: reading the status faster in their window");
        }
        // A new order is not delivered at once; a resumed install first looks
        // at where things stand.
        let mut due = match &progress {
            None => plan.first_status_read(now),
            Some(_) => now,
        };
        loop {
            sleep_until(due).await;
            let sent = Instant::now();
            let window_read = action == Action::PollServer
                && state.step == Step::AwaitDelivery
                && plan.watching_delivery(state.since, sent);
            self.engine.set_watching(&self.spec.server_id, window_read);
            let obs = if window_read {
                match self.read_if_idle().await {
                    Some(obs) => obs,
                    None => {
                        // No spare turn in the API's pace: this fast read is
                        // skipped rather than queued behind reads other
                        // installs wait on.
                        due = sent + plan.delivery.map_or(plan.poll_interval, |w| w.every);
                        continue;
                    }
                }
            } else {
                self.perform(&plan, &state, &action).await
            };
            if let Some(point) = crash_point_after(&plan, &state, &obs) {
                crashpoint::reached(point, &self.spec.node_claim_name);
            }
            let look = look_of(&obs);
            self.waits.looked(state.step, look);
            // What other installs saw meanwhile counts for this one.
            if state.step == Step::AwaitDelivery {
                plan.delivery = self.expected(Wait::Delivery, &plan, &state);
            }
            if matches!(state.step, Step::RebootNormal | Step::ProbeTalos) {
                plan.boot = self.expected(Wait::Boot, &plan, &state);
            }
            let answered = Instant::now();
            let transition = machine::advance(&plan, &state, obs, answered);
            if let Some((wait, seen)) =
                self.waits
                    .observe(&state, &transition.state, look, sent, answered)
            {
                debug!(?wait, offer = %self.spec.offer_name, zone = %self.spec.zone,
                    after_s = seen.after.as_secs_f64(), by_s = seen.by.as_secs_f64(), "wait seen ending");
                self.engine
                    .history
                    .record(wait, &self.spec.offer_name, &self.spec.zone, seen);
            }
            self.record(&state, &transition).await;
            let Transition {
                state: next_state,
                action: next_action,
                due: next_due,
                ..
            } = transition;
            state = next_state;
            action = next_action;
            due = next_due;
            if !matches!(action, Action::Run { .. } | Action::ConnectSsh { .. })
                && let Some(session) = self.session.take()
            {
                session.close().await;
            }
            match &action {
                Action::Fail { reason, class } => return self.fail(&state, reason, *class).await,
                Action::Finish if state.phase == Phase::Standby => {
                    self.save_final(&state).await;
                    return self.finish_standby().await;
                }
                Action::Finish => {
                    self.save_final(&state).await;
                    crashpoint::reached(CrashPoint::JoinedSaved, &self.spec.node_claim_name);
                    return self.finish().await;
                }
                _ => {}
            }
        }
    }

    /// Everything a transition means outside the machine: the phase map,
    /// metrics, logs, Events and the persisted progress.
    async fn record(&mut self, before: &State, t: &Transition) {
        let after = &t.state;
        if after.phase != before.phase {
            let now = Instant::now();
            let outcome = match (before.phase, after.phase) {
                (_, Phase::Failed) => "failed",
                (Phase::Booting, Phase::Ready) | (Phase::Imaging, Phase::Rescue) => "retried",
                _ => "completed",
            };
            install_metrics().observe_phase(
                before.phase.as_str(),
                outcome,
                now.saturating_duration_since(self.entered).as_secs_f64(),
            );
            self.entered = now;
            self.engine.set_phase(&self.spec.server_id, after.phase);
            self.log_phase(after);
        }
        if before.host_key.is_none()
            && let Some(fingerprint) = &after.host_key
        {
            info!(host = after.host.as_deref().unwrap_or_default(), %fingerprint,
                "trusting the rescue host key on first use in this rescue boot");
        }
        for event in &t.events {
            self.event(event.clone()).await;
        }
        self.save(after).await;
    }

    fn log_phase(&self, state: &State) {
        info!(server_id = %self.spec.server_id, node = %self.spec.node_name, phase = %state.phase,
            image_attempts = state.image_attempts, rescue_returns = state.rescue_returns, "install phase");
    }

    /// Records an Event (best effort, bounded like every port call).
    async fn event(&self, event: InstallEvent) {
        if event.warning {
            warn!(reason = %event.reason, message = %event.message, "install event");
        } else {
            info!(reason = %event.reason, message = %event.message, "install event");
        }
        let deps = &self.engine.deps;
        let call = deps.nodes.event(&self.spec.node_claim_name, event);
        if bounded(deps.settings.call_timeout, call).await.is_err() {
            warn!("recording the Event timed out");
        }
    }

    /// Saves the progress when it changed since the last successful save. A
    /// failed save is logged and tried again at the next transition; it never
    /// fails the install.
    async fn save(&mut self, state: &State) {
        let progress = self.progress_of(state);
        if self.saved.as_ref() == Some(&progress) {
            return;
        }
        let deps = &self.engine.deps;
        let call = deps
            .nodes
            .save_progress(&self.spec.node_claim_name, &progress);
        match bounded(deps.settings.call_timeout, call).await {
            Ok(Ok(())) => self.saved = Some(progress),
            Ok(Err(err)) => {
                warn!(error = %err, phase = %state.phase, "cannot save the install progress; will retry")
            }
            Err(elapsed) => {
                warn!(error = %elapsed, phase = %state.phase, "cannot save the install progress; will retry")
            }
        }
    }

    /// `joined` (or `standby`) is the last save: no later transition would
    /// retry it, so it is retried here. Left unsaved, the NodeClaim stays at
    /// `configured`, which a restart resumes harmlessly (every join step is
    /// idempotent); a standby server stays at `booting`, which a restart
    /// resumes by probing Talos again.
    async fn save_final(&mut self, state: &State) {
        let mut pause = self.engine.deps.settings.probe_interval;
        for _ in 1..CLEANUP_ATTEMPTS {
            if self.saved.as_ref().and_then(|p| p.phase) == Some(state.phase) {
                return;
            }
            sleep(pause).await;
            pause = (pause * 2).min(MAX_BACKOFF);
            self.save(state).await;
        }
    }

    fn progress_of(&self, state: &State) -> Progress {
        Progress {
            phase: Some(state.phase),
            phase_since: Some(self.utc_of(state.since)),
            disk: state.disk.clone(),
            mac: state.mac.clone(),
            image_attempts: state.image_attempts,
            rescue_returns: state.rescue_returns,
            host_key: state.host_key.clone(),
            started: Some(self.started),
        }
    }

    /// Wall-clock time of an instant, to the second (the annotation's precision).
    fn utc_of(&self, instant: Instant) -> DateTime<Utc> {
        let (base, base_utc) = self.anchor;
        let t = if instant >= base {
            base_utc + chrono::Duration::from_std(instant - base).unwrap_or_default()
        } else {
            base_utc - chrono::Duration::from_std(base - instant).unwrap_or_default()
        };
        t.trunc_subsecs(0)
    }

    /// The instant of a persisted wall-clock time (never in the future).
    fn instant_of(&self, time: DateTime<Utc>) -> Instant {
        let (base, base_utc) = self.anchor;
        let elapsed = (base_utc - time).to_std().unwrap_or_default();
        base.checked_sub(elapsed).unwrap_or(base)
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
                let connect = deps.rescue.connect(&target, key, state.host_key.as_deref());
                match bounded(settings.call_timeout, connect).await {
                    Ok(Ok(session)) => {
                        let host_key = session.host_key().to_string();
                        info!(%host, %user, %host_key, "rescue SSH session open");
                        self.session = Some(session);
                        Observation::SshConnected { host_key }
                    }
                    Ok(Err(err @ RescueError::HostKeyMismatch { .. })) => {
                        error!(error = %err, "rescue host key changed within one rescue boot");
                        Observation::SshFailed(err)
                    }
                    Ok(Err(err)) => {
                        debug!(error = %err, "rescue SSH not available yet");
                        Observation::SshFailed(err)
                    }
                    Err(elapsed) => Observation::SshFailed(RescueError::Timeout(elapsed)),
                }
            }
            Action::ProbeSsh { host, user } => {
                let target = SshTarget {
                    host: host.clone(),
                    port: settings.ssh_port,
                    user: user.clone(),
                };
                let key = self.spec.rescue_private_key.expose();
                let limit = settings
                    .call_timeout
                    .min(plan.probe_interval.max(MIN_PROBE_TIME));
                match bounded(limit, deps.rescue.connect(&target, key, None)).await {
                    Ok(Ok(session)) => {
                        // Not trusted, nothing runs on it: the status read
                        // that follows says whether this is the rescue system.
                        let host_key = session.host_key().to_string();
                        session.close().await;
                        info!(%host, %user, "SSH answers while the API still reports the rescue reboot under way; confirming with the API");
                        Observation::SshConnected { host_key }
                    }
                    Ok(Err(err)) => {
                        debug!(error = %err, "rescue SSH not up yet");
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
                        debug!(error = %err, "Talos maintenance API not available");
                        Observation::TalosDown(err)
                    }
                    Err(elapsed) => Observation::TalosDown(TalosError::Unavailable(elapsed)),
                }
            }
            Action::EnsureNetwork => {
                let call = super::network::ensure_attached(
                    deps.elastic_metal.as_ref(),
                    deps.networks.as_deref(),
                    self.spec,
                );
                match bounded(settings.call_timeout, call).await {
                    Ok(seen) => seen,
                    Err(elapsed) => api_failed("attach", ApiError::Unavailable(elapsed)),
                }
            }
            Action::ApplyConfig { host, disk, mac } => {
                let mut settings_for_node = node_settings(self.spec, disk, mac);
                let link = super::network::private_link(deps.networks.as_deref(), self.spec);
                settings_for_node.private_network = match bounded(settings.call_timeout, link).await
                {
                    Ok(Ok(link)) => link,
                    Ok(Err(observation)) => return observation,
                    Err(elapsed) => {
                        return api_failed("private network", ApiError::Unavailable(elapsed));
                    }
                };
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
            Action::InitializeNode => {
                let call = deps.nodes.initialize_node(&self.spec.node_name);
                match bounded(settings.call_timeout, call).await {
                    Ok(Ok(())) => Observation::NodeInitialized,
                    Ok(Err(err)) => {
                        warn!(error = %err, "cannot remove the Node's uninitialized taint");
                        Observation::NodeFailed(err)
                    }
                    Err(elapsed) => Observation::NodeFailed(NodePortError::Unavailable(elapsed)),
                }
            }
            Action::ReleaseToken => {
                let call = deps.nodes.release_token(&self.spec.node_claim_name);
                match bounded(settings.call_timeout, call).await {
                    Ok(Ok(())) => Observation::TokenReleased,
                    Ok(Err(err)) => {
                        warn!(error = %err, "cannot delete the node's bootstrap token");
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

    /// The node joined, its taint and token are gone and `joined` is
    /// persisted: Event and metric.
    async fn finish(self) {
        install_metrics().count_outcome("joined");
        let took = Utc::now().trunc_subsecs(0) - self.started;
        let took = took.to_std().unwrap_or_default();
        if self.adopted {
            crate::metrics::standby_metrics().observe_adoption(took.as_secs_f64());
        }
        info!(
            took_s = took.as_secs(),
            "install finished: the Node is Ready"
        );
        self.event(InstallEvent {
            warning: false,
            reason: "InstallJoined".to_string(),
            message: format!(
                "joined: Node {} is Ready, {} after the install began",
                self.spec.node_name,
                human(took)
            ),
        })
        .await;
    }

    /// A standby install is done: the server waits in maintenance mode.
    async fn finish_standby(self) {
        install_metrics().count_outcome("standby");
        let took = Utc::now().trunc_subsecs(0) - self.started;
        let took = took.to_std().unwrap_or_default();
        info!(
            took_s = took.as_secs(),
            "standby install finished: the server waits in Talos maintenance mode"
        );
        self.event(InstallEvent {
            warning: false,
            reason: "StandbyReady".to_string(),
            message: format!(
                "standby: server {} ({}, {}) is installed and waits in Talos maintenance mode, {} after its install began",
                self.spec.server_id,
                self.spec.offer_name,
                self.spec.zone,
                human(took)
            ),
        })
        .await;
    }

    /// A resumed `joined` install whose NodeClaim is not Initialized: removes
    /// the taint and deletes the token again (both idempotent), with retries.
    async fn finish_again(self) {
        let deps = &self.engine.deps;
        let (node, claim) = (
            self.spec.node_name.as_str(),
            self.spec.node_claim_name.as_str(),
        );
        let done = self
            .retried("removing the Node's uninitialized taint", || {
                deps.nodes.initialize_node(node)
            })
            .await
            && self
                .retried("deleting the node's bootstrap token", || {
                    deps.nodes.release_token(claim)
                })
                .await;
        if !done {
            // Forgotten, so that the next resume pass hands it over again.
            self.engine.forget(&self.spec.server_id);
            error!(nodeclaim = %claim, "could not finish the join; the next resume pass tries again");
        }
    }

    /// Calls `call` until it succeeds (true), is refused, or the attempts run
    /// out (false), with a growing pause between attempts.
    async fn retried<F, Fut>(&self, what: &str, mut call: F) -> bool
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<(), NodePortError>>,
    {
        let settings = &self.engine.deps.settings;
        let mut pause = settings.poll_interval;
        for attempt in 1..=CLEANUP_ATTEMPTS {
            match bounded(settings.call_timeout, call()).await {
                Ok(Ok(())) => return true,
                Ok(Err(NodePortError::Refused(err))) => {
                    error!(error = %err, "{what}: refused");
                    return false;
                }
                outcome => {
                    warn!(attempt, ?outcome, "{what} failed; retrying");
                    if attempt < CLEANUP_ATTEMPTS {
                        sleep(pause).await;
                        pause = (pause * 2).min(MAX_BACKOFF);
                    }
                }
            }
        }
        false
    }

    /// Terminal failure: Events, metric, then the server goes back and the
    /// NodeClaim is deleted so that Karpenter provisions elsewhere.
    async fn fail(mut self, state: &State, reason: &str, class: FailureClass) {
        self.engine.set_phase(&self.spec.server_id, Phase::Failed);
        error!(phase = %state.phase, class = class.as_str(), %reason,
            "install failed; deleting the server and the NodeClaim");
        if let Some(session) = self.session.take() {
            session.close().await;
        }
        install_metrics().count_outcome(class.as_str());
        let deps = &self.engine.deps;
        if class == FailureClass::OutOfStock {
            deps.capacity
                .mark_unavailable(&self.spec.offer_name, &self.spec.zone);
            info!(offer = %self.spec.offer_name, zone = %self.spec.zone, "offering marked unavailable");
            self.event(InstallEvent {
                warning: true,
                reason: "InsufficientCapacity".to_string(),
                message: format!(
                    "offer {} went out of stock in {} after the order; marked unavailable so that Karpenter picks another offering",
                    self.spec.offer_name, self.spec.zone
                ),
            })
            .await;
        }
        self.event(InstallEvent {
            warning: true,
            reason: "InstallFailed".to_string(),
            message: format!("failed: {reason}"),
        })
        .await;
        self.cleanup(reason).await;
    }

    /// Deletes the server (until it is gone or the attempts run out) and,
    /// at the same time, the NodeClaim (its finalizer deletes the server too).
    /// Every deletion is logged with its reason.
    async fn cleanup(self, reason: &str) {
        tokio::join!(self.delete_server(reason), self.delete_node_claim(reason));
    }

    async fn delete_server(&self, reason: &str) {
        let (zone, id) = (self.spec.zone.as_str(), self.spec.server_id.as_str());
        let deps = &self.engine.deps;
        let settings = &deps.settings;
        let mut pause = settings.poll_interval;
        for attempt in 1..=DELETE_ATTEMPTS {
            info!(server_id = %id, attempt, %reason, "deleting server after failed install");
            match bounded(
                settings.call_timeout,
                deps.elastic_metal.delete_server(zone, id),
            )
            .await
            {
                Ok(Ok(_)) => {
                    info!(server_id = %id, %reason, "deleted server after failed install");
                    return;
                }
                Ok(Err(ApiError::NotFound(_))) => {
                    info!(server_id = %id, "server already gone");
                    return;
                }
                outcome => {
                    warn!(server_id = %id, attempt, ?outcome, "deleting server failed");
                    if attempt < DELETE_ATTEMPTS {
                        sleep(pause).await;
                        pause = (pause * 2).min(MAX_BACKOFF);
                    }
                }
            }
        }
        error!(server_id = %id, %reason,
            "gave up deleting the server after a failed install; the garbage collector will catch it");
    }

    async fn delete_node_claim(&self, reason: &str) {
        let deps = &self.engine.deps;
        let settings = &deps.settings;
        let claim = self.spec.node_claim_name.as_str();
        let mut pause = settings.poll_interval;
        for attempt in 1..=CLEANUP_ATTEMPTS {
            info!(nodeclaim = %claim, attempt, %reason, "deleting NodeClaim after failed install");
            match bounded(
                settings.call_timeout,
                deps.nodes.delete_node_claim(claim, reason),
            )
            .await
            {
                Ok(Ok(())) => {
                    info!(nodeclaim = %claim, %reason, "deleted NodeClaim after failed install");
                    return;
                }
                Ok(Err(NodePortError::Refused(err))) => {
                    error!(nodeclaim = %claim, error = %err, "cannot delete NodeClaim after failed install");
                    return;
                }
                outcome => {
                    warn!(nodeclaim = %claim, attempt, ?outcome, "deleting NodeClaim failed");
                    if attempt < CLEANUP_ATTEMPTS {
                        sleep(pause).await;
                        pause = (pause * 2).min(MAX_BACKOFF);
                    }
                }
            }
        }
        error!(nodeclaim = %claim, "gave up deleting the NodeClaim after a failed install");
    }
}

/// `12m05s`, `48s`.
fn human(d: Duration) -> String {
    let s = d.as_secs();
    if s >= 60 {
        format!("{}m{:02}s", s / 60, s % 60)
    } else {
        format!("{s}s")
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

#[path = "driver_waits.rs"]
mod waits;
use waits::look_of;
