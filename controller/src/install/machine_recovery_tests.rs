//! Recovery paths: back to rescue, host keys, API failure budget, capacity,
//! an apply whose answer was lost, the resume steps, and phase Events.

use tokio::time::Instant;

use super::*;

fn booting(t0: Instant) -> State {
    at(
        &imaging(t0, Step::ProbeTalos, 1),
        Phase::Booting,
        Step::ProbeTalos,
    )
}

fn down() -> Observation {
    Observation::TalosDown(TalosError::Unavailable("connection refused".into()))
}

#[test]
fn maintenance_never_up_goes_back_to_rescue_once_with_a_fresh_trust_and_budget() {
    let p = plan();
    let t0 = Instant::now();
    let late = t0 + Duration::from_secs(201);
    let s = State {
        image_attempts: 2,
        checksum_mismatches: 1,
        ..booting(t0)
    };
    let t = advance(&p, &s, down(), late);
    assert_eq!(
        (t.state.phase, t.state.step, &t.action),
        (Phase::Ready, Step::RebootRescue, &Action::RebootRescue)
    );
    assert_eq!(
        (
            t.state.rescue_returns,
            t.state.image_attempts,
            t.state.since
        ),
        (1, 0, late)
    );
    assert_eq!(
        events(&t),
        [
            (
                "InstallRetry",
                true,
                "booting: the Talos maintenance API did not come up within 200s of the normal boot; rebooting into rescue to write the image again (return 1/1)"
            ),
            (
                "InstallPhase",
                false,
                "ready: rebooting server srv-1 into rescue mode again (return 1/1) with SSH key key-1"
            ),
        ]
    );
    // The new rescue boot has new host keys: the old trust goes.
    let (s, a) = next(&p, &t.state, Observation::Rebooted, late);
    assert_eq!((s.phase, a), (Phase::Rescue, Action::PollServer));
    assert_eq!(s.host_key, None);
    let (s, _) = next(&p, &s, server(ServerStatus::Ready, BootType::Rescue), late);
    let (s, _) = next(
        &p,
        &s,
        Observation::SshConnected {
            host_key: "SHA256:new-boot-key".into(),
        },
        late,
    );
    assert_eq!(
        (s.phase, s.host_key.as_deref()),
        (Phase::Imaging, Some("SHA256:new-boot-key"))
    );

    // The normal reboot not even accepted by the deadline is a plain failure.
    let s = at(&booting(t0), Phase::Booting, Step::RetryRebootNormal);
    let (_, a) = next(
        &p,
        &s,
        server(ServerStatus::Starting, BootType::Rescue),
        late,
    );
    assert_eq!(class(&a), FailureClass::Deadline);
}

#[test]
fn another_host_key_within_one_rescue_boot_is_refused() {
    let p = plan();
    let t0 = Instant::now();
    let s = State {
        host_key: Some(HOST_KEY.into()),
        ..imaging(t0, Step::Connect, 1)
    };
    let mismatch = RescueError::HostKeyMismatch {
        trusted: HOST_KEY.into(),
        presented: "SHA256:impostor".into(),
    };
    let (s2, a) = next(&p, &s, Observation::SshFailed(mismatch), t0);
    assert_eq!(s2.phase, Phase::Failed);
    assert_eq!(class(&a), FailureClass::HostKey);
    assert_eq!(
        reason(&a),
        "the rescue system at 127.77.0.10 presented host key SHA256:impostor, but SHA256:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU was trusted on first use in this rescue boot; refusing to connect"
    );
    // A shell that connected anyway is caught as well.
    let (_, a) = next(
        &p,
        &s,
        Observation::SshConnected {
            host_key: "SHA256:impostor".into(),
        },
        t0,
    );
    assert_eq!(class(&a), FailureClass::HostKey);
    // The trusted key itself connects.
    let (s3, _) = next(&p, &s, connected(), t0);
    assert_eq!(s3.step, Step::ListDisks);
}

#[test]
fn consecutive_api_failures_have_a_budget_and_an_event() {
    let p = plan();
    let t0 = Instant::now();
    let fail_once = |s: &State| {
        advance(
            &p,
            s,
            Observation::ApiFailed(ApiError::Unavailable("502 bad gateway".into())),
            t0,
        )
    };
    let mut s = State::start(t0);
    for n in 1..=4 {
        let t = fail_once(&s);
        assert_eq!((t.state.api_failures, &t.action), (n, &Action::PollServer));
        if n == 3 {
            assert_eq!(
                events(&t),
                [(
                    "InstallRetry",
                    true,
                    "ordered: 3 Elastic Metal API calls failed in a row (API unavailable: 502 bad gateway); retrying"
                )]
            );
        } else {
            assert!(t.events.is_empty());
        }
        s = t.state;
    }
    // A success resets the streak.
    let (reset, _) = next(
        &p,
        &s,
        server(ServerStatus::Delivering, BootType::UnknownBootType),
        t0,
    );
    assert_eq!(reset.api_failures, 0);
    let t = fail_once(&s);
    assert_eq!(t.state.phase, Phase::Failed);
    assert_eq!(class(&t.action), FailureClass::Api);
    assert_eq!(
        reason(&t.action),
        "5 Elastic Metal API calls failed in a row; last: API unavailable: 502 bad gateway"
    );
}

#[test]
fn out_of_stock_after_the_order_is_its_own_class() {
    let p = plan();
    let t0 = Instant::now();
    let (_, a) = next(
        &p,
        &State::start(t0),
        server(ServerStatus::OutOfStock, BootType::UnknownBootType),
        t0,
    );
    assert_eq!(class(&a), FailureClass::OutOfStock);
    assert_eq!(
        reason(&a),
        "the server went out_of_stock after the order: offer EM-A115X-SSD has no stock in fr-par-2"
    );
    let (_, a) = next(
        &p,
        &State::start(t0),
        server(ServerStatus::Error, BootType::Normal),
        t0,
    );
    assert_eq!(class(&a), FailureClass::ServerStatus);
    let (_, a) = next(
        &p,
        &State::start(t0),
        server(ServerStatus::Deleting, BootType::Normal),
        t0,
    );
    assert_eq!(class(&a), FailureClass::ServerGone);
}

#[test]
fn a_ready_node_settles_an_apply_in_doubt_without_waiting_for_the_grace() {
    let p = plan();
    let t0 = Instant::now();
    let s = State {
        apply_uncertain_since: Some(t0),
        ..at(
            &imaging(t0, Step::ProbeTalos, 1),
            Phase::Maintenance,
            Step::ProbeTalos,
        )
    };
    let (s, a) = next(&p, &s, down(), t0 + Duration::from_secs(1));
    assert_eq!((s.step, a), (Step::ConfirmApplied, Action::PollNode));
    let failed = Observation::NodeFailed(NodePortError::Unavailable("etcd".into()));
    let (s, a) = next(&p, &s, failed, t0 + Duration::from_secs(1));
    assert!(matches!(a, Action::ProbeTalos { .. }), "{a:?}");
    let (s, _) = next(&p, &s, down(), t0 + Duration::from_secs(3));
    let t = advance(
        &p,
        &s,
        Observation::Node(Some(true)),
        t0 + Duration::from_secs(3),
    );
    assert_eq!(
        (t.state.phase, t.state.step, &t.action),
        (Phase::Configured, Step::AwaitNode, &Action::PollNode)
    );
    assert_eq!(
        t.due,
        t0 + Duration::from_secs(3),
        "the join is recorded at once"
    );
    assert_eq!(t.state.apply_uncertain_since, None);
    assert_eq!(
        events(&t)[0],
        (
            "InstallPhase",
            false,
            "maintenance: Node default-abc12 is Ready, so the machine config whose apply had no answer was applied"
        )
    );
    let (s, a) = next(
        &p,
        &t.state,
        Observation::Node(Some(true)),
        t0 + Duration::from_secs(3),
    );
    assert_eq!((s.phase, a), (Phase::Configured, Action::InitializeNode));
}

#[test]
fn a_lost_apply_answer_followed_by_silence_means_configured() {
    let p = plan();
    let t0 = Instant::now();
    let s = State {
        apply_uncertain_since: Some(t0),
        ..at(
            &imaging(t0, Step::ProbeTalos, 1),
            Phase::Maintenance,
            Step::ProbeTalos,
        )
    };
    // Within the grace: is the Node Ready already? Not yet: probe Talos again.
    let (s1, a) = next(&p, &s, down(), t0 + Duration::from_secs(59));
    assert_eq!(
        (s1.phase, s1.step, a),
        (Phase::Maintenance, Step::ConfirmApplied, Action::PollNode)
    );
    let (s1, a) = next(
        &p,
        &s1,
        Observation::Node(None),
        t0 + Duration::from_secs(59),
    );
    assert_eq!((s1.phase, s1.step), (Phase::Maintenance, Step::ProbeTalos));
    assert!(matches!(a, Action::ProbeTalos { .. }), "{a:?}");
    assert_eq!(s1.apply_uncertain_since, Some(t0));
    // Past the maintenance deadline but within the grace: still waiting.
    let late = State {
        since: t0 - Duration::from_secs(100),
        ..s.clone()
    };
    let (s2, _) = next(&p, &late, down(), t0 + Duration::from_secs(30));
    assert_eq!(s2.phase, Phase::Maintenance);
    let t = advance(&p, &s, down(), t0 + Duration::from_secs(60));
    assert_eq!(
        (t.state.phase, &t.action),
        (Phase::Configured, &Action::PollNode)
    );
    assert_eq!(t.state.apply_uncertain_since, None);
    assert_eq!(
        events(&t),
        [
            (
                "InstallPhase",
                false,
                "maintenance: the Talos maintenance API has not answered for 60s after an apply whose outcome is unknown (Talos API unavailable: connection refused); assuming the config was applied"
            ),
            (
                "InstallPhase",
                false,
                "configured: machine config applied (install disk /dev/nvme0n1, primary NIC 52:54:00:aa:bb:cc); waiting for Node default-abc12 to be Ready"
            ),
        ]
    );
    // Without an uncertain apply, silence in maintenance is not success.
    let sure = State {
        apply_uncertain_since: None,
        ..s
    };
    let (s3, _) = next(&p, &sure, down(), t0 + Duration::from_secs(90));
    assert_eq!(s3.phase, Phase::Maintenance);
}

#[test]
fn resumed_rescue_reconnects_or_starts_a_new_rescue_boot() {
    let p = plan();
    let t0 = Instant::now();
    let s = State {
        host_key: Some(HOST_KEY.into()),
        ..at(&State::start(t0), Phase::Rescue, Step::ResumeRescue)
    };
    let (s1, a) = next(&p, &s, server(ServerStatus::Ready, BootType::Rescue), t0);
    assert_eq!(
        (s1.step, a),
        (
            Step::Connect,
            Action::ConnectSsh {
                host: "127.77.0.10".into(),
                user: "rescue".into()
            }
        )
    );
    assert_eq!(
        s1.host_key.as_deref(),
        Some(HOST_KEY),
        "same rescue boot, same key"
    );
    let (s2, a) = next(&p, &s, server(ServerStatus::Stopping, BootType::Rescue), t0);
    assert_eq!((s2.step, a), (Step::ResumeRescue, Action::PollServer));
    let (s3, a) = next(&p, &s, server(ServerStatus::Ready, BootType::Normal), t0);
    assert_eq!(
        (s3.phase, s3.step, a),
        (Phase::Ready, Step::RebootRescue, Action::RebootRescue)
    );
}

#[test]
fn resumed_booting_looks_at_the_boot_type() {
    let p = plan();
    let t0 = Instant::now();
    let s = State {
        host: None,
        ..at(
            &imaging(t0, Step::ResumeBooting, 1),
            Phase::Booting,
            Step::ResumeBooting,
        )
    };
    let (s1, a) = next(&p, &s, server(ServerStatus::Ready, BootType::Rescue), t0);
    assert_eq!((s1.step, a), (Step::RebootNormal, Action::RebootNormal));
    assert_eq!(s1.host.as_deref(), Some("127.77.0.10"));
    let (s2, a) = next(&p, &s, server(ServerStatus::Ready, BootType::Normal), t0);
    assert_eq!(
        (s2.step, a),
        (
            Step::ProbeTalos,
            Action::ProbeTalos {
                host: "127.77.0.10".into()
            }
        )
    );
    let (_, a) = next(&p, &s, server(ServerStatus::Starting, BootType::Normal), t0);
    assert_eq!(a, Action::PollServer);
    let (_, a) = next(&p, &s, Observation::ApiFailed(ApiError::Throttled), t0);
    assert_eq!(a, Action::PollServer);
}

#[test]
fn resumed_maintenance_probes_with_the_apply_grace() {
    let p = plan();
    let t0 = Instant::now();
    let s = at(
        &imaging(t0, Step::ResumeMaintenance, 1),
        Phase::Maintenance,
        Step::ResumeMaintenance,
    );
    let (s1, a) = next(&p, &s, server(ServerStatus::Ready, BootType::Normal), t0);
    assert_eq!(s1.step, Step::ProbeTalos);
    assert_eq!(s1.apply_uncertain_since, Some(t0));
    assert!(matches!(a, Action::ProbeTalos { .. }));
    // Up: apply (again).
    let (_, a) = next(&p, &s1, Observation::TalosUp, t0);
    assert!(matches!(a, Action::ApplyConfig { .. }));
    // Down for the grace: applied just before the restart.
    let (s2, a) = next(&p, &s1, down(), t0 + Duration::from_secs(61));
    assert_eq!((s2.phase, a), (Phase::Configured, Action::PollNode));
}

#[test]
fn every_phase_change_has_an_event() {
    let p = plan();
    let t0 = Instant::now();
    let s = State::start(t0);
    let t = advance(
        &p,
        &s,
        server(ServerStatus::Delivering, BootType::UnknownBootType),
        t0,
    );
    assert_eq!(
        events(&t),
        [(
            "InstallPhase",
            false,
            "delivering: server srv-1 (EM-A115X-SSD) is being delivered in fr-par-2"
        )]
    );
    let t2 = advance(
        &p,
        &t.state,
        server(ServerStatus::Delivering, BootType::UnknownBootType),
        t0,
    );
    assert!(t2.events.is_empty(), "no event without a change");
    let t = advance(
        &p,
        &at(&s, Phase::Ready, Step::RebootRescue),
        Observation::Rebooted,
        t0,
    );
    assert_eq!(
        events(&t)[0].2,
        "rescue: rescue boot requested; waiting for the rescue system's SSH"
    );
    let s = State {
        host: Some("127.77.0.10".into()),
        user: Some("rescue".into()),
        ..at(&s, Phase::Rescue, Step::Connect)
    };
    let t = advance(&p, &s, connected(), t0);
    assert_eq!(
        events(&t)[0].2,
        "imaging: SSH session open as rescue@127.77.0.10 (host key SHA256:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU); finding the install disk and the primary NIC"
    );
    let t = advance(&p, &imaging(t0, Step::ListLinks, 0), ok(IP_LINK), t0);
    assert_eq!(
        events(&t),
        [(
            "InstallPhase",
            false,
            "imaging: writing https://img.example/v1.13.9/metal-amd64.raw.xz to /dev/nvme0n1 (attempt 1/2)"
        )]
    );
    let t = advance(
        &p,
        &at(
            &imaging(t0, Step::ProbeTalos, 1),
            Phase::Booting,
            Step::ProbeTalos,
        ),
        Observation::TalosUp,
        t0,
    );
    assert_eq!(
        events(&t)[0].2,
        "maintenance: Talos maintenance API up on 127.77.0.10; applying the machine config"
    );
    // Terminal phases are reported by the driver with their own reasons.
    let t = advance(
        &p,
        &at(&s, Phase::Configured, Step::ReleaseToken),
        Observation::TokenReleased,
        t0,
    );
    assert_eq!((t.state.phase, t.events.len()), (Phase::Joined, 0));
    let t = advance(
        &p,
        &State::start(t0),
        server(ServerStatus::Error, BootType::Normal),
        t0,
    );
    assert_eq!((t.state.phase, t.events.len()), (Phase::Failed, 0));
}

#[test]
fn a_signed_image_url_is_not_shown_in_events() {
    let p = Plan {
        image_url: "https://s3.example/metal-amd64.raw.xz?X-Amz-Signature=secret".into(),
        ..plan()
    };
    let t = advance(
        &p,
        &imaging(Instant::now(), Step::ListLinks, 0),
        ok(IP_LINK),
        Instant::now(),
    );
    assert!(!events(&t)[0].2.contains("secret"), "{:?}", events(&t));
    let Action::Run { command } = &t.action else {
        panic!()
    };
    assert!(
        command.contains("X-Amz-Signature=secret"),
        "the command keeps it"
    );
}
