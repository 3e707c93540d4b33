//! The attachment to a Private Network: after delivery, before the rescue boot.

use super::*;

fn networked() -> Plan {
    Plan {
        private_network: Some("pn-1".into()),
        ..plan()
    }
}

fn attach_step(now: Instant) -> State {
    State {
        phase: Phase::Ready,
        step: Step::AttachNetwork,
        ..State::start(now)
    }
}

#[test]
fn a_delivered_server_with_a_network_is_attached_before_the_rescue_boot() {
    let now = Instant::now();
    let t = advance(
        &networked(),
        &State::start(now),
        server(ServerStatus::Ready, BootType::Normal),
        now,
    );
    assert_eq!(
        (t.state.phase, t.state.step),
        (Phase::Ready, Step::AttachNetwork)
    );
    assert_eq!(t.action, Action::EnsureNetwork);
    assert_eq!(t.due, now, "attached at once");
    assert!(
        t.events
            .iter()
            .any(|e| e.message.contains("attaching it to Private Network pn-1")),
        "{:?}",
        t.events
    );
    // Without a network the rescue boot comes first, as before.
    let (s, a) = next(
        &plan(),
        &State::start(now),
        server(ServerStatus::Ready, BootType::Normal),
        now,
    );
    assert_eq!((s.step, a), (Step::RebootRescue, Action::RebootRescue));
}

#[test]
fn an_attachment_under_way_is_looked_at_again_at_the_poll_cadence() {
    let now = Instant::now();
    let plan = networked();
    let t = advance(
        &plan,
        &attach_step(now),
        Observation::Network(NetworkSeen::Attaching),
        now,
    );
    assert_eq!(
        (t.state.step, t.action.clone()),
        (Step::AttachNetwork, Action::EnsureNetwork)
    );
    assert_eq!(t.due, now + plan.poll_interval);
    // A failed call is the same wait, counted against the API budget.
    let t = advance(
        &plan,
        &attach_step(now),
        Observation::ApiFailed(ApiError::Unavailable("503".into())),
        now,
    );
    assert_eq!(
        (t.state.step, t.action),
        (Step::AttachNetwork, Action::EnsureNetwork)
    );
    assert_eq!(t.state.api_failures, 1);
}

#[test]
fn attached_goes_on_to_the_rescue_boot_in_the_same_phase_clock() {
    let start = Instant::now();
    let later = start + Duration::from_secs(40);
    let (s, a) = next(
        &networked(),
        &attach_step(start),
        Observation::Network(NetworkSeen::Attached),
        later,
    );
    assert_eq!(
        (s.phase, s.step, a),
        (Phase::Ready, Step::RebootRescue, Action::RebootRescue)
    );
    assert_eq!(
        s.since, start,
        "the attachment counts in the ready phase's deadline"
    );
}

#[test]
fn a_failed_attachment_fails_the_install_with_its_own_class() {
    let now = Instant::now();
    let (s, a) = next(
        &networked(),
        &attach_step(now),
        Observation::Network(NetworkSeen::Failed(
            "attachment a-1 is in status error".into(),
        )),
        now,
    );
    assert_eq!(s.phase, Phase::Failed);
    let Action::Fail { reason, class } = a else {
        panic!("{a:?}")
    };
    assert_eq!(class, FailureClass::PrivateNetwork);
    assert_eq!(
        reason,
        "the server could not join Private Network pn-1: attachment a-1 is in status error"
    );
}

#[test]
fn an_attachment_that_never_ends_fails_at_the_ready_deadline() {
    let start = Instant::now();
    let plan = networked();
    let late = start + plan.deadlines.rescue + Duration::from_secs(1);
    let (s, a) = next(
        &plan,
        &attach_step(start),
        Observation::Network(NetworkSeen::Attaching),
        late,
    );
    assert_eq!(s.phase, Phase::Failed);
    assert!(
        matches!(
            a,
            Action::Fail {
                class: FailureClass::Deadline,
                ..
            }
        ),
        "{a:?}"
    );
}

#[test]
fn reading_the_attachment_for_the_config_is_retried_under_the_api_budget() {
    let now = Instant::now();
    let state = State {
        phase: Phase::Maintenance,
        step: Step::ApplyConfig,
        host: Some("127.77.0.10".into()),
        disk: Some("nvme0n1".into()),
        mac: Some("52:54:00:aa:bb:cc".into()),
        ..State::start(now)
    };
    let (s, a) = next(
        &networked(),
        &state,
        Observation::ApiFailed(ApiError::Unavailable("503".into())),
        now,
    );
    assert_eq!(s.step, Step::ApplyConfig);
    assert_eq!(s.api_failures, 1);
    assert!(matches!(a, Action::ApplyConfig { .. }), "{a:?}");
}
