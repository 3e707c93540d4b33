//! Transitions from the imaging phase on.

use std::time::Duration;

use tokio::time::Instant;

use super::*;

#[test]
fn root_rescue_user_runs_without_sudo_and_selector_picks_the_disk() {
    let p = Plan {
        install_disk: Some("nvme1n1".into()),
        ..plan()
    };
    let t0 = Instant::now();
    let s = State {
        user: Some("root".into()),
        disk: None,
        mac: None,
        ..imaging(t0, Step::ListDisks, 0)
    };
    let (s, _) = next(&p, &s, ok(LSBLK), t0);
    assert_eq!(s.disk.as_deref(), Some("nvme1n1"));
    let (s, a) = next(&p, &s, ok(IP_LINK), t0);
    assert_eq!(
        a,
        Action::Run {
            command: "set -o pipefail; curl -fsSL 'https://img.example/v1.13.9/metal-amd64.raw.xz' | xz -d | dd bs=4M iflag=fullblock | tee /dev/nvme1n1 | sha256sum".into()
        }
    );
    let (s, a) = next(&p, &s, written(IMAGE_SHA), t0);
    assert_eq!(
        a,
        Action::Run {
            command: "sync".into()
        }
    );
    let (_, a) = next(&p, &s, ok(""), t0);
    assert_eq!(
        a,
        Action::Run {
            command: "dd if=/dev/nvme1n1 bs=4M iflag=direct,count_bytes count=1306525696 status=none | sha256sum".into()
        }
    );
}

#[test]
fn disk_and_nic_detection_failures_are_terminal() {
    let t0 = Instant::now();
    let p = Plan {
        install_disk: Some("sda".into()),
        ..plan()
    };
    let (s, a) = next(&p, &imaging(t0, Step::ListDisks, 0), ok(LSBLK), t0);
    assert_eq!(s.phase, Phase::Failed);
    assert_eq!(
        reason(&a),
        "install disk sda not found (disks: nvme0n1, nvme1n1)"
    );

    let (_, a) = next(
        &plan(),
        &imaging(t0, Step::ListDisks, 0),
        failed(127, "sh: lsblk: command not found"),
        t0,
    );
    assert_eq!(
        reason(&a),
        "lsblk exited with status 127: sh: lsblk: command not found"
    );

    let (_, a) = next(
        &plan(),
        &imaging(t0, Step::ListLinks, 0),
        ok("1: lo: <LOOPBACK> mtu 1\\ link/loopback 00:00:00:00:00:00 brd\n"),
        t0,
    );
    assert_eq!(reason(&a), "no Ethernet link found by ip -o link");
    let (_, a) = next(
        &plan(),
        &imaging(t0, Step::ListLinks, 0),
        failed(1, "boom"),
        t0,
    );
    assert_eq!(reason(&a), "ip -o link exited with status 1: boom");
}

#[test]
fn a_failed_image_write_is_retried_within_the_budget() {
    let p = plan();
    let t0 = Instant::now();
    // The return to rescue is spent: an exhausted budget fails the install.
    let s = State {
        rescue_returns: 1,
        ..imaging(t0, Step::WriteImage, 1)
    };
    let (s, a) = next(
        &p,
        &s,
        failed(1, "xz: (stdin): Compressed data is corrupt"),
        t0,
    );
    assert_eq!((s.step, s.image_attempts), (Step::WriteImage, 2));
    assert_eq!(
        a,
        Action::Run {
            command: WRITE_AS_USER.into()
        }
    );
    let (s, a) = next(
        &p,
        &s,
        failed(22, "curl: (22) The requested URL returned error: 404"),
        t0,
    );
    assert_eq!(s.phase, Phase::Failed);
    assert_eq!(
        reason(&a),
        "the image write failed 2 time(s) in this rescue boot, after 1 return(s) to rescue; last: image write exited with status 22: curl: (22) The requested URL returned error: 404"
    );
    assert_eq!(class(&a), FailureClass::ImageAttempts);
}

#[test]
fn a_lost_session_restarts_imaging_on_a_new_session_within_the_budget() {
    let p = plan();
    let t0 = Instant::now();
    let lost = || Observation::SessionLost(RescueError::SessionLost("connection reset".into()));
    let s = State {
        rescue_returns: 1,
        ..imaging(t0, Step::WriteImage, 1)
    };
    let t = advance(&p, &s, lost(), t0 + Duration::from_secs(5));
    let s = t.state.clone();
    assert_eq!(
        (s.phase, s.step, s.image_attempts),
        (Phase::Imaging, Step::Connect, 1),
        "the interrupted write already counted"
    );
    assert_eq!(s.since, t0, "reconnecting keeps the imaging clock");
    assert_eq!(
        t.action,
        Action::ConnectSsh {
            host: "127.77.0.10".into(),
            user: "rescue".into()
        }
    );
    assert_eq!(
        events(&t),
        [(
            "InstallRetry",
            true,
            "imaging: SSH session lost during WriteImage: SSH session lost: connection reset; reconnecting to write the image again"
        )]
    );
    let (s, a) = next(&p, &s, connected(), t0 + Duration::from_secs(6));
    assert_eq!((s.phase, s.since), (Phase::Imaging, t0));
    assert_eq!(
        a,
        Action::Run {
            command: "lsblk -dno NAME,TYPE".into()
        }
    );
    let (s, _) = next(&p, &s, ok(LSBLK), t0);
    let (s, a) = next(&p, &s, ok(IP_LINK), t0);
    assert_eq!(s.image_attempts, 2);
    assert_eq!(
        a,
        Action::Run {
            command: WRITE_AS_USER.into()
        }
    );
    // The last write allowed loses its session too.
    let (s, a) = next(&p, &s, lost(), t0);
    assert_eq!(s.phase, Phase::Failed);
    assert_eq!(
        reason(&a),
        "the image write failed 2 time(s) in this rescue boot, after 1 return(s) to rescue; last: SSH session lost during WriteImage: SSH session lost: connection reset"
    );
    assert_eq!(class(&a), FailureClass::ImageAttempts);

    for step in [Step::ListDisks, Step::ListLinks, Step::Sync, Step::Verify] {
        let (s, _) = next(&p, &imaging(t0, step, 1), lost(), t0);
        assert_eq!(s.step, Step::Connect, "{step:?}");
    }
}

#[test]
fn no_write_starts_once_the_budget_is_spent() {
    // A session lost before the write (lsblk) after the last attempt: the
    // reconnect happens, but no further write.
    let (s, a) = next(
        &plan(),
        &State {
            rescue_returns: 1,
            ..imaging(Instant::now(), Step::ListLinks, 2)
        },
        ok(IP_LINK),
        Instant::now(),
    );
    assert_eq!(s.phase, Phase::Failed);
    assert_eq!(
        reason(&a),
        "the image write failed 2 time(s) in this rescue boot, after 1 return(s) to rescue; last: no image write left in this rescue boot"
    );
}

#[test]
fn spent_writes_take_a_fresh_rescue_boot_while_returns_are_left() {
    // Writes interrupted by controller restarts, or a flaky rescue system,
    // spend a rescue boot's writes: a new rescue boot gets a new set, once.
    let p = plan();
    let t0 = Instant::now();
    let later = t0 + Duration::from_secs(7);
    let t = advance(
        &p,
        &State {
            checksum_mismatches: 1,
            ..imaging(t0, Step::ListLinks, 2)
        },
        ok(IP_LINK),
        later,
    );
    assert_eq!(
        (t.state.phase, t.state.step, t.state.image_attempts),
        (Phase::Ready, Step::RebootRescue, 0)
    );
    assert_eq!(
        (
            t.state.rescue_returns,
            t.state.checksum_mismatches,
            t.state.since
        ),
        (1, 0, later),
        "a fresh rescue boot: the budget's return is spent, the ready clock starts"
    );
    assert_eq!(t.action, Action::RebootRescue);
    assert_eq!(
        events(&t),
        [
            (
                "InstallRetry",
                true,
                "imaging: 2 image write(s) failed in this rescue boot (last: no image write left in this rescue boot); rebooting into rescue to write it again (return 1/1)"
            ),
            (
                "InstallPhase",
                false,
                "ready: rebooting server srv-1 into rescue mode again (return 1/1) with SSH key key-1"
            )
        ]
    );
}

#[test]
fn imaging_deadline_fails_even_while_commands_succeed() {
    let p = plan();
    let t0 = Instant::now();
    let (s, a) = next(
        &p,
        &imaging(t0, Step::ListDisks, 0),
        ok(LSBLK),
        t0 + Duration::from_secs(401),
    );
    assert_eq!(s.phase, Phase::Failed);
    assert_eq!(reason(&a), "phase imaging did not complete within 400s");
}

#[test]
fn failed_sync_is_terminal() {
    let (s, a) = next(
        &plan(),
        &imaging(Instant::now(), Step::Sync, 1),
        failed(1, "I/O error"),
        Instant::now(),
    );
    assert_eq!(s.phase, Phase::Failed);
    assert_eq!(reason(&a), "sync exited with status 1: I/O error");
}

#[test]
fn refused_normal_reboot_is_retried_once_the_server_is_ready() {
    let p = plan();
    let t0 = Instant::now();
    let s = at(
        &imaging(t0, Step::RebootNormal, 1),
        Phase::Booting,
        Step::RebootNormal,
    );
    let (s, a) = next(
        &p,
        &s,
        Observation::ApiFailed(ApiError::TransientState("busy".into())),
        t0,
    );
    assert_eq!((s.step, a), (Step::RetryRebootNormal, Action::PollServer));
    let (s, a) = next(&p, &s, server(ServerStatus::Stopping, BootType::Rescue), t0);
    assert_eq!((s.step, a), (Step::RetryRebootNormal, Action::PollServer));
    let (s, a) = next(
        &p,
        &s,
        Observation::ApiFailed(ApiError::Unavailable("x".into())),
        t0,
    );
    assert_eq!((s.step, a), (Step::RetryRebootNormal, Action::PollServer));
    let (s, a) = next(&p, &s, server(ServerStatus::Ready, BootType::Rescue), t0);
    assert_eq!((s.step, a), (Step::RebootNormal, Action::RebootNormal));
    let (s, a) = next(
        &p,
        &s,
        Observation::ApiFailed(ApiError::Unauthorized("denied".into())),
        t0,
    );
    assert_eq!(s.phase, Phase::Failed);
    assert_eq!(reason(&a), "normal reboot refused: unauthorized: denied");
}

#[test]
fn talos_that_never_answers_after_a_return_to_rescue_fails() {
    let p = plan();
    let t0 = Instant::now();
    let s = State {
        rescue_returns: 1,
        ..at(
            &imaging(t0, Step::ProbeTalos, 1),
            Phase::Booting,
            Step::ProbeTalos,
        )
    };
    let (_, a) = next(
        &p,
        &s,
        Observation::TalosDown(TalosError::Unavailable("refused".into())),
        t0 + Duration::from_secs(199),
    );
    assert!(matches!(a, Action::ProbeTalos { .. }));
    let (s, a) = next(
        &p,
        &s,
        Observation::TalosDown(TalosError::Unavailable("refused".into())),
        t0 + Duration::from_secs(201),
    );
    assert_eq!(s.phase, Phase::Failed);
    assert_eq!(
        reason(&a),
        "the Talos maintenance API did not come up within 200s of the normal boot, after 1 return(s) to rescue"
    );
    assert_eq!(class(&a), FailureClass::MaintenanceNeverUp);
}

#[test]
fn apply_failures_are_retried_unless_rejected() {
    let p = plan();
    let t0 = Instant::now();
    let s = at(
        &imaging(t0, Step::ApplyConfig, 1),
        Phase::Maintenance,
        Step::ApplyConfig,
    );
    let t = advance(
        &p,
        &s,
        Observation::ApplyFailed(TalosError::Unavailable("reset".into())),
        t0,
    );
    let s2 = t.state.clone();
    assert_eq!((s2.phase, s2.step), (Phase::Maintenance, Step::ProbeTalos));
    assert_eq!(s2.apply_uncertain_since, Some(t0));
    assert_eq!(
        t.action,
        Action::ProbeTalos {
            host: "127.77.0.10".into()
        }
    );
    assert_eq!(
        events(&t),
        [(
            "InstallRetry",
            true,
            "maintenance: ApplyConfiguration failed (Talos API unavailable: reset); retrying"
        )]
    );
    let (s3, a) = next(&p, &s2, Observation::TalosUp, t0);
    assert_eq!((s3.phase, s3.step), (Phase::Maintenance, Step::ApplyConfig));
    assert_eq!(s3.apply_uncertain_since, None);
    assert!(matches!(a, Action::ApplyConfig { .. }));

    let (s4, a) = next(
        &p,
        &s,
        Observation::ApplyFailed(TalosError::Rejected("unknown field".into())),
        t0,
    );
    assert_eq!(s4.phase, Phase::Failed);
    assert_eq!(
        reason(&a),
        "Talos rejected the machine config: unknown field"
    );
    assert_eq!(class(&a), FailureClass::Config);
    let (_, a) = next(&p, &s, Observation::ConfigInvalid("bad patch".into()), t0);
    assert_eq!(reason(&a), "cannot render the machine config: bad patch");
    assert_eq!(class(&a), FailureClass::Config);
}

#[test]
fn a_node_that_never_becomes_ready_fails_the_join_phase() {
    let p = plan();
    let t0 = Instant::now();
    let s = at(
        &imaging(t0, Step::AwaitNode, 1),
        Phase::Configured,
        Step::AwaitNode,
    );
    let (s, a) = next(
        &p,
        &s,
        Observation::Node(Some(false)),
        t0 + Duration::from_secs(501),
    );
    assert_eq!(s.phase, Phase::Failed);
    assert_eq!(reason(&a), "phase configured did not complete within 500s");
}

/// A Ready Node is not the end: the phase stays `configured` through the
/// taint removal and the token deletion, so that persisted progress never
/// claims a join whose side effects a crash could still lose.
#[test]
fn the_join_stays_configured_until_the_taint_and_the_token_are_gone() {
    let p = plan();
    let t0 = Instant::now();
    let s = at(
        &imaging(t0, Step::AwaitNode, 1),
        Phase::Configured,
        Step::AwaitNode,
    );
    let t = advance(&p, &s, Observation::Node(Some(true)), t0);
    assert_eq!(
        (t.state.phase, t.state.step),
        (Phase::Configured, Step::InitializeNode)
    );
    assert_eq!(t.action, Action::InitializeNode);
    assert_eq!(t.due, t0, "initialised at once");

    // A conflict (the kubelet updated the Node) is retried quietly.
    let conflict = NodePortError::Unavailable("409 conflict".into());
    let r = advance(&p, &t.state, Observation::NodeFailed(conflict), t0);
    assert_eq!(
        (r.state.step, &r.action),
        (Step::InitializeNode, &Action::InitializeNode)
    );
    assert_eq!(r.due, t0 + p.probe_interval);
    assert!(r.events.is_empty());
    // A refusal is retried too, with a warning saying what is wrong.
    let refused = NodePortError::Refused("403 forbidden".into());
    let r = advance(&p, &t.state, Observation::NodeFailed(refused), t0);
    assert_eq!(r.action, Action::InitializeNode);
    assert!(r.events[0].warning && r.events[0].message.contains("403 forbidden"));
    // ... until the join deadline.
    let late = t0 + Duration::from_secs(501);
    let refused = NodePortError::Refused("403 forbidden".into());
    let (s_late, _) = next(&p, &t.state, Observation::NodeFailed(refused), late);
    assert_eq!(s_late.phase, Phase::Failed);

    let t = advance(&p, &t.state, Observation::NodeInitialized, t0);
    assert_eq!(
        (t.state.phase, t.state.step),
        (Phase::Configured, Step::ReleaseToken)
    );
    assert_eq!(t.action, Action::ReleaseToken);

    let unavailable = NodePortError::Unavailable("503".into());
    let (s2, a2) = next(&p, &t.state, Observation::NodeFailed(unavailable), t0);
    assert_eq!((s2.phase, a2), (Phase::Configured, Action::ReleaseToken));

    let done = advance(&p, &t.state, Observation::TokenReleased, t0);
    assert_eq!(
        (done.state.phase, done.action),
        (Phase::Joined, Action::Finish)
    );
}

/// The node has joined: a token we may not delete expires with its TTL and
/// does not fail an install whose Node runs.
#[test]
fn a_refused_token_deletion_warns_and_joins() {
    let p = plan();
    let t0 = Instant::now();
    let s = at(
        &imaging(t0, Step::ReleaseToken, 1),
        Phase::Configured,
        Step::ReleaseToken,
    );
    let refused = NodePortError::Refused("403 forbidden".into());
    let t = advance(&p, &s, Observation::NodeFailed(refused), t0);
    assert_eq!((t.state.phase, t.action), (Phase::Joined, Action::Finish));
    assert!(t.events[0].warning);
    assert!(t.events[0].message.contains("expires with its TTL"));
}

#[test]
fn unexpected_observations_fail_loudly() {
    let t0 = Instant::now();
    let (s, a) = next(&plan(), &State::start(t0), Observation::TalosUp, t0);
    assert_eq!(s.phase, Phase::Failed);
    assert_eq!(
        reason(&a),
        "internal error: unexpected observation TalosUp at step AwaitDelivery"
    );
}

#[test]
fn plan_refuses_unknown_image_formats() {
    let spec = crate::install::tests_support::spec("https://img.example/metal-amd64.iso");
    assert!(Plan::new(&spec, &InstallSettings::default()).is_err());
    let spec = crate::install::tests_support::spec(URL);
    let plan = Plan::new(&spec, &InstallSettings::default()).expect("plan");
    assert_eq!(plan.compression, Compression::Xz);
}
