//! When actions are due: status polls at the poll interval (15 s in `plan()`),
//! local probes at the probe interval (2 s), and at once what was just made
//! possible.

use std::time::Duration;

use tokio::time::Instant;

use super::*;
use crate::install::tests_support::spec;

fn secs(s: u64) -> Duration {
    Duration::from_secs(s)
}

/// The step, the action and how long after `now` it is due.
fn step(p: &Plan, s: &State, obs: Observation, now: Instant) -> (State, Action, Duration) {
    let t = advance(p, s, obs, now);
    assert!(t.due >= now, "an action is never due in the past");
    let wait = t.due - now;
    (t.state, t.action, wait)
}

fn refused() -> Observation {
    Observation::SshFailed(RescueError::Unreachable("connection refused".into()))
}

fn talos_down() -> Observation {
    Observation::TalosDown(TalosError::Unavailable("connection refused".into()))
}

#[test]
fn status_polls_wait_the_poll_interval_and_local_probes_the_probe_interval() {
    let p = plan();
    let t0 = Instant::now();
    let delivering = at(&State::start(t0), Phase::Delivering, Step::AwaitDelivery);

    let (_, a, wait) = step(
        &p,
        &delivering,
        server(ServerStatus::Delivering, BootType::Normal),
        t0,
    );
    assert_eq!((a, wait), (Action::PollServer, secs(15)));
    let (s, a, wait) = step(
        &p,
        &delivering,
        server(ServerStatus::Ready, BootType::Normal),
        t0,
    );
    assert_eq!((a, wait), (Action::RebootRescue, secs(0)));
    // The rescue reboot was accepted: read the status at once, to learn
    // where to probe while the server reboots.
    let (s, a, wait) = step(&p, &s, Observation::Rebooted, t0);
    assert_eq!(
        (s.step, a, wait),
        (Step::AwaitRescue, Action::PollServer, secs(0))
    );
    // Still on the old boot: the next status poll.
    let (s, a, wait) = step(&p, &s, server(ServerStatus::Ready, BootType::Normal), t0);
    assert_eq!((a, wait), (Action::PollServer, secs(15)));
    // Up in rescue: log in now, retry a refused login after one probe interval.
    let (s, a, wait) = step(&p, &s, server(ServerStatus::Ready, BootType::Rescue), t0);
    assert_eq!((s.step, wait), (Step::Connect, secs(0)));
    assert!(matches!(a, Action::ConnectSsh { .. }), "{a:?}");
    let (s, a, wait) = step(&p, &s, refused(), t0);
    assert_eq!((s.step, wait), (Step::Connect, secs(2)));
    assert!(matches!(a, Action::ConnectSsh { .. }), "{a:?}");
    let (_, a, wait) = step(&p, &s, connected(), t0);
    assert_eq!(wait, secs(0));
    assert!(matches!(a, Action::Run { .. }), "{a:?}");

    // A session lost mid-imaging: reconnect after one probe interval.
    let writing = imaging(t0, Step::WriteImage, 1);
    let lost = Observation::SessionLost(RescueError::SessionLost("reset".into()));
    let (s, a, wait) = step(&p, &writing, lost, t0);
    assert_eq!((s.step, wait), (Step::Connect, secs(2)));
    assert!(matches!(a, Action::ConnectSsh { .. }), "{a:?}");

    // The normal reboot was accepted: the first Talos probe after one probe
    // interval (the server has to go down first), then every probe interval.
    let rebooting = State {
        phase: Phase::Booting,
        ..imaging(t0, Step::RebootNormal, 1)
    };
    let (s, a, wait) = step(&p, &rebooting, Observation::Rebooted, t0);
    assert_eq!((s.step, wait), (Step::ProbeTalos, secs(2)));
    assert!(matches!(a, Action::ProbeTalos { .. }), "{a:?}");
    let (s, _, wait) = step(&p, &s, talos_down(), t0);
    assert_eq!((s.step, wait), (Step::ProbeTalos, secs(2)));
    let (s, a, wait) = step(&p, &s, Observation::TalosUp, t0);
    assert_eq!(wait, secs(0));
    assert!(matches!(a, Action::ApplyConfig { .. }), "{a:?}");
    // Node readiness is read from the Kubernetes API every probe interval.
    let (s, a, wait) = step(&p, &s, Observation::ConfigApplied, t0);
    assert_eq!((a, wait), (Action::PollNode, secs(2)));
    let (s, a, wait) = step(&p, &s, Observation::Node(Some(false)), t0);
    assert_eq!((a, wait), (Action::PollNode, secs(2)));
    // The join's last steps run at once, a failed one a probe interval later.
    let (s, a, wait) = step(&p, &s, Observation::Node(Some(true)), t0);
    assert_eq!((a, wait), (Action::InitializeNode, secs(0)));
    let conflict = NodePortError::Unavailable("409".into());
    let (s, a, wait) = step(&p, &s, Observation::NodeFailed(conflict), t0);
    assert_eq!((a, wait), (Action::InitializeNode, secs(2)));
    let (s, a, wait) = step(&p, &s, Observation::NodeInitialized, t0);
    assert_eq!((a, wait), (Action::ReleaseToken, secs(0)));
    let (_, a, wait) = step(&p, &s, Observation::TokenReleased, t0);
    assert_eq!((a, wait), (Action::Finish, secs(0)));
}

#[test]
fn ssh_is_probed_between_status_polls_while_the_server_reboots_into_rescue() {
    let p = plan();
    let t0 = Instant::now();
    let t = |s: u64| t0 + secs(s);
    let s = at(&State::start(t0), Phase::Rescue, Step::AwaitRescue);

    // The status poll at t0 shows the reboot under way: probe every 2 s...
    let (mut s, a, wait) = step(&p, &s, server(ServerStatus::Stopping, BootType::Rescue), t0);
    assert_eq!(s.step, Step::ProbeRescueSsh);
    assert_eq!(
        (a, wait),
        (
            Action::ProbeSsh {
                host: "127.77.0.10".into(),
                user: "rescue".into()
            },
            secs(2)
        )
    );
    for now in [2, 4, 6, 8, 10, 12] {
        let (next, a, wait) = step(&p, &s, refused(), t(now));
        assert_eq!(
            (next.step, wait),
            (Step::ProbeRescueSsh, secs(2)),
            "at {now}s"
        );
        assert!(matches!(a, Action::ProbeSsh { .. }), "{a:?}");
        s = next;
    }
    // ...until the next status poll (t0 + 15 s) falls due before the next probe.
    let (s, a, wait) = step(&p, &s, refused(), t(14));
    assert_eq!(
        (s.step, a, wait),
        (Step::AwaitRescue, Action::PollServer, secs(1))
    );
    let (s, _, wait) = step(
        &p,
        &s,
        server(ServerStatus::Stopping, BootType::Rescue),
        t(15),
    );
    assert_eq!((s.step, wait), (Step::ProbeRescueSsh, secs(2)));
    // A probe gets in: read the status at once to confirm.
    let (s, a, wait) = step(&p, &s, connected(), t(17));
    assert_eq!(
        (s.step, a, wait),
        (Step::ConfirmRescue, Action::PollServer, secs(0))
    );
    assert_eq!(s.host_key, None);
    // The API lags: no more probes, status polls at the poll interval.
    let (s, a, wait) = step(
        &p,
        &s,
        server(ServerStatus::Stopping, BootType::Rescue),
        t(17),
    );
    assert_eq!(
        (s.step, a, wait),
        (Step::ConfirmRescue, Action::PollServer, secs(15))
    );
    let failed = Observation::ApiFailed(ApiError::Unavailable("503".into()));
    let (s, a, wait) = step(&p, &s, failed, t(32));
    assert_eq!(
        (s.step, a, wait),
        (Step::ConfirmRescue, Action::PollServer, secs(15))
    );
    // Confirmed: log in now, trusting nothing yet.
    let (s, a, wait) = step(&p, &s, server(ServerStatus::Ready, BootType::Rescue), t(47));
    assert_eq!((s.step, wait), (Step::Connect, secs(0)));
    assert_eq!((s.host_key, s.status_polled), (None, None));
    assert_eq!(
        a,
        Action::ConnectSsh {
            host: "127.77.0.10".into(),
            user: "rescue".into()
        }
    );
}

#[test]
fn a_slow_probe_never_delays_the_status_poll_further() {
    let p = plan();
    let t0 = Instant::now();
    let s = at(&State::start(t0), Phase::Rescue, Step::AwaitRescue);
    let (s, _, _) = step(&p, &s, server(ServerStatus::Stopping, BootType::Rescue), t0);
    // The probe hung until t0 + 20 s, past the status poll due at t0 + 15 s.
    let timed_out = Observation::SshFailed(RescueError::Timeout("no answer within 5s".into()));
    let (s, a, wait) = step(&p, &s, timed_out, t0 + secs(20));
    assert_eq!(
        (s.step, a, wait),
        (Step::AwaitRescue, Action::PollServer, secs(0))
    );
}

#[test]
fn probing_rescue_ssh_keeps_the_rescue_deadline_and_fails_on_a_bad_key() {
    let p = plan();
    let t0 = Instant::now();
    let s = at(&State::start(t0), Phase::Rescue, Step::AwaitRescue);
    let (probing, _, _) = step(&p, &s, server(ServerStatus::Stopping, BootType::Rescue), t0);

    let (s, a, _) = step(&p, &probing, refused(), t0 + secs(301));
    assert_eq!(s.phase, Phase::Failed);
    assert_eq!(reason(&a), "phase rescue did not complete within 300s");

    let invalid = Observation::SshFailed(RescueError::InvalidKey("not an OpenSSH key".into()));
    let (s, a, wait) = step(&p, &probing, invalid, t0 + secs(2));
    assert_eq!((s.phase, wait), (Phase::Failed, secs(0)));
    assert_eq!(class(&a), FailureClass::Rescue);
}

#[test]
fn resumed_installs_act_on_what_the_status_shows_at_once() {
    let p = plan();
    let t0 = Instant::now();
    let installed = imaging(t0, Step::ResumeBooting, 1);

    let booting = State {
        phase: Phase::Booting,
        ..installed.clone()
    };
    let (s, a, wait) = step(
        &p,
        &booting,
        server(ServerStatus::Ready, BootType::Normal),
        t0,
    );
    assert_eq!((s.step, wait), (Step::ProbeTalos, secs(0)));
    assert!(matches!(a, Action::ProbeTalos { .. }), "{a:?}");

    let maintenance = State {
        phase: Phase::Maintenance,
        step: Step::ResumeMaintenance,
        ..installed.clone()
    };
    let (s, _, wait) = step(
        &p,
        &maintenance,
        server(ServerStatus::Ready, BootType::Normal),
        t0,
    );
    assert_eq!((s.step, wait), (Step::ProbeTalos, secs(0)));

    let rescue = State {
        phase: Phase::Rescue,
        step: Step::ResumeRescue,
        ..installed
    };
    let (s, _, wait) = step(
        &p,
        &rescue,
        server(ServerStatus::Ready, BootType::Rescue),
        t0,
    );
    assert_eq!((s.step, wait), (Step::Connect, secs(0)));
}

#[test]
fn the_probe_interval_is_capped_by_the_poll_interval() {
    let settings = |poll_ms, probe_ms| InstallSettings {
        poll_interval: Duration::from_millis(poll_ms),
        probe_interval: Duration::from_millis(probe_ms),
        ..InstallSettings::default()
    };
    let p = Plan::new(
        &spec("https://img.example/metal-amd64.raw.xz"),
        &settings(250, 2000),
    )
    .unwrap();
    assert_eq!(
        (p.poll_interval, p.probe_interval),
        (Duration::from_millis(250), Duration::from_millis(250))
    );
    let p = Plan::new(
        &spec("https://img.example/metal-amd64.raw.xz"),
        &settings(15_000, 2000),
    )
    .unwrap();
    assert_eq!((p.poll_interval, p.probe_interval), (secs(15), secs(2)));
}

#[test]
fn delivery_reads_follow_the_window_the_offers_history_gives() {
    use crate::install::history::Window;
    use crate::install::machine::cadence::delivery_read;
    let t0 = Instant::now();
    let t = |s: u64| t0 + secs(s);
    // Poll interval 15 s in `plan()`: 90 s apart before the window, 2 s
    // inside.
    let p = Plan {
        delivery: Some(Window {
            opens: secs(220),
            closes: secs(260),
            every: secs(2),
        }),
        ..plan()
    };
    let read = |now| delivery_read(&p, t0, now);
    assert_eq!(read(t0), t(90));
    // Never past the opening.
    assert_eq!(read(t(180)), t(220));
    assert_eq!(read(t(220)), t(222));
    assert_eq!(read(t(258)), t(260));
    // A delivery later than every one seen: the poll interval again.
    assert_eq!(read(t(260)), t(275));
    // Without history: the poll interval throughout.
    let plain = plan();
    assert_eq!(delivery_read(&plain, t0, t(230)), t(245));
    assert_eq!(plain.first_status_read(t0), t(15));
    assert_eq!(p.first_status_read(t0), t(90));

    // The machine schedules its reads of a delivering server by it, from the
    // order (the phase clock), failed reads included.
    let delivering = at(&State::start(t0), Phase::Delivering, Step::AwaitDelivery);
    let (_, a, wait) = step(
        &p,
        &delivering,
        server(ServerStatus::Delivering, BootType::Normal),
        t(230),
    );
    assert_eq!((a, wait), (Action::PollServer, secs(2)));
    let throttled = Observation::ApiFailed(ApiError::Throttled);
    let (_, a, wait) = step(&p, &delivering, throttled, t(100));
    assert_eq!((a, wait), (Action::PollServer, secs(90)));
}

#[test]
fn talos_probes_follow_the_window_of_the_offers_boots() {
    use crate::install::history::Window;
    let t0 = Instant::now();
    let t = |ms: u64| t0 + Duration::from_millis(ms);
    let p = Plan {
        boot: Some(Window {
            opens: secs(9),
            closes: secs(14),
            every: Duration::from_millis(500),
        }),
        ..plan()
    };
    let rebooting = State {
        phase: Phase::Booting,
        ..imaging(t0, Step::RebootNormal, 1)
    };
    // Probe interval 2 s until the window opens (never past it), 0.5 s in
    // it, 2 s after it.
    let (s, _, wait) = step(&p, &rebooting, Observation::Rebooted, t0);
    assert_eq!((s.step, wait), (Step::ProbeTalos, secs(2)));
    let (_, _, wait) = step(&p, &s, talos_down(), t(8_000));
    assert_eq!(wait, secs(1));
    let (_, _, wait) = step(&p, &s, talos_down(), t(9_000));
    assert_eq!(wait, Duration::from_millis(500));
    let (_, _, wait) = step(&p, &s, talos_down(), t(14_000));
    assert_eq!(wait, secs(2));
    // Without history: the probe interval.
    let (_, _, wait) = step(&plan(), &s, talos_down(), t(9_000));
    assert_eq!(wait, secs(2));
}
