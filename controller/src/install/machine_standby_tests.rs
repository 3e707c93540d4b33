//! The standby target (an install that ends in Talos maintenance mode) and
//! the adoption of a standby server (`Step::Adopt`).

use std::time::Duration;

use tokio::time::Instant;

use super::*;
use crate::install::Target;

fn standby_plan() -> Plan {
    Plan {
        target: Target::Standby,
        ..plan()
    }
}

fn talos_down() -> Observation {
    Observation::TalosDown(TalosError::Unavailable("connection refused".into()))
}

/// A server found `ready` but without an address yet.
fn server_without_address() -> Observation {
    let Observation::Server(mut s) = server(ServerStatus::Ready, BootType::Normal) else {
        unreachable!()
    };
    s.ips.clear();
    Observation::Server(s)
}

/// An adoption as `resume` starts it: the disk and NIC known, no address.
fn adopting(t0: Instant) -> State {
    State {
        host: None,
        user: None,
        ..at(
            &imaging(t0, Step::Adopt, 1),
            Phase::Maintenance,
            Step::Adopt,
        )
    }
}

/// Every transition of an install from the order to the first Talos probe
/// that finds the maintenance API up: (phase, step, action) after each.
fn walk(p: &Plan) -> Vec<(Phase, Step, Action)> {
    let t0 = Instant::now();
    let script = [
        server(ServerStatus::Delivering, BootType::UnknownBootType),
        server(ServerStatus::Ready, BootType::Normal),
        Observation::Rebooted,
        server(ServerStatus::Ready, BootType::Rescue),
        connected(),
        ok(LSBLK),
        ok(IP_LINK),
        written(IMAGE_SHA),
        ok(""),
        read_back(IMAGE_SHA),
        Observation::Rebooted,
        talos_down(),
        Observation::TalosUp,
    ];
    let mut s = State::start(t0);
    let mut out = Vec::new();
    for (i, obs) in script.into_iter().enumerate() {
        let (next_state, a) = next(p, &s, obs, t0 + Duration::from_secs(i as u64 + 1));
        out.push((next_state.phase, next_state.step, a));
        s = next_state;
    }
    out
}

#[test]
fn a_standby_install_walks_the_node_path_and_stops_where_the_config_would_be_applied() {
    let node = walk(&plan());
    let standby = walk(&standby_plan());
    assert_eq!(node.len(), standby.len());
    let last = node.len() - 1;
    assert_eq!(
        node[..last],
        standby[..last],
        "order, rescue, imaging and boot are the same"
    );
    assert_eq!(standby[last - 1].0, Phase::Booting);
    assert_eq!(
        standby[last],
        (Phase::Standby, Step::Done, Action::Finish),
        "{standby:?}"
    );
    assert!(
        standby
            .iter()
            .all(|(_, _, a)| !matches!(a, Action::ApplyConfig { .. } | Action::PollNode)),
        "{standby:?}"
    );
    // The node plan is unchanged: it applies its config there.
    assert_eq!(
        node[last],
        (
            Phase::Maintenance,
            Step::ApplyConfig,
            Action::ApplyConfig {
                host: "127.77.0.10".into(),
                disk: "nvme0n1".into(),
                mac: "52:54:00:aa:bb:cc".into()
            }
        )
    );
}

#[test]
fn a_standby_install_finishes_at_once_with_its_phase_event() {
    let p = standby_plan();
    let t0 = Instant::now();
    let s = at(
        &imaging(t0, Step::ProbeTalos, 1),
        Phase::Booting,
        Step::ProbeTalos,
    );
    // Down: keep probing, still booting.
    let (down, a) = next(&p, &s, talos_down(), t0 + Duration::from_secs(5));
    assert_eq!((down.phase, down.step), (Phase::Booting, Step::ProbeTalos));
    assert!(matches!(a, Action::ProbeTalos { .. }), "{a:?}");

    let now = t0 + Duration::from_secs(7);
    let t = advance(&p, &down, Observation::TalosUp, now);
    assert_eq!(
        (t.state.phase, t.state.step, &t.action),
        (Phase::Standby, Step::Done, &Action::Finish)
    );
    assert_eq!(t.due, now, "nothing left to wait for");
    assert_eq!(t.state.since, now, "the standby phase starts its own clock");
    assert_eq!(
        (t.state.disk.as_deref(), t.state.mac.as_deref()),
        (Some("nvme0n1"), Some("52:54:00:aa:bb:cc")),
        "what an adoption needs is kept"
    );
    assert_eq!(
        events(&t),
        [(
            "InstallPhase",
            false,
            "standby: Talos maintenance API up on 127.77.0.10 (install disk /dev/nvme0n1, primary NIC 52:54:00:aa:bb:cc); the server waits without config to be adopted"
        )]
    );

    // A node plan at the same point applies its config.
    let (s, a) = next(&plan(), &down, Observation::TalosUp, now);
    assert_eq!(s.phase, Phase::Maintenance);
    assert!(matches!(a, Action::ApplyConfig { .. }), "{a:?}");
}

#[test]
fn a_standby_install_late_in_its_boot_still_ends_in_standby() {
    let p = standby_plan();
    let t0 = Instant::now();
    let s = at(
        &imaging(t0, Step::ProbeTalos, 1),
        Phase::Booting,
        Step::ProbeTalos,
    );
    // Talos answers just past the booting deadline (200 s): leaving the phase
    // wins over its deadline, as for a node.
    let (s, a) = next(&p, &s, Observation::TalosUp, t0 + Duration::from_secs(201));
    assert_eq!((s.phase, a), (Phase::Standby, Action::Finish));
    // Silent past it: back to rescue once, exactly like a node's boot.
    let s = at(
        &imaging(t0, Step::ProbeTalos, 1),
        Phase::Booting,
        Step::ProbeTalos,
    );
    let (s, a) = next(&p, &s, talos_down(), t0 + Duration::from_secs(201));
    assert_eq!(
        (s.phase, s.rescue_returns, a),
        (Phase::Ready, 1, Action::RebootRescue)
    );
}

#[test]
fn the_standby_phase_has_no_deadline_and_is_terminal() {
    let p = standby_plan();
    assert_eq!(p.deadline(Phase::Standby), None);
    assert_eq!(p.deadline(Phase::Booting), Some(Duration::from_secs(200)));
    assert!(Phase::Standby.is_terminal());
    assert!(!Phase::Maintenance.is_terminal());
}

#[test]
fn the_standby_message_names_the_address_the_disk_and_the_nic() {
    let t0 = Instant::now();
    let s = at(&imaging(t0, Step::Done, 1), Phase::Standby, Step::Done);
    assert_eq!(
        phase_message(&standby_plan(), &s).as_deref(),
        Some(
            "standby: Talos maintenance API up on 127.77.0.10 (install disk /dev/nvme0n1, primary NIC 52:54:00:aa:bb:cc); the server waits without config to be adopted"
        )
    );
    let unknown = State {
        disk: None,
        mac: None,
        ..s
    };
    let message = phase_message(&standby_plan(), &unknown).unwrap();
    assert!(
        message.contains("(install disk /dev/?, primary NIC ?)"),
        "{message}"
    );
}

#[test]
fn adopting_probes_talos_at_once_with_no_apply_in_doubt() {
    let p = plan();
    let t0 = Instant::now();
    let s = adopting(t0);
    let t = advance(&p, &s, server(ServerStatus::Ready, BootType::Normal), t0);
    assert_eq!(
        (t.state.phase, t.state.step, &t.action),
        (
            Phase::Maintenance,
            Step::ProbeTalos,
            &Action::ProbeTalos {
                host: "127.77.0.10".into()
            }
        )
    );
    assert_eq!(t.state.host.as_deref(), Some("127.77.0.10"));
    assert_eq!(t.state.apply_uncertain_since, None);
    assert_eq!(t.due, t0, "the server is up: probe now");
    assert!(t.events.is_empty(), "{:?}", t.events);

    let t = advance(
        &p,
        &t.state,
        Observation::TalosUp,
        t0 + Duration::from_secs(1),
    );
    assert_eq!(
        (t.state.phase, t.state.step, &t.action),
        (
            Phase::Maintenance,
            Step::ApplyConfig,
            &Action::ApplyConfig {
                host: "127.77.0.10".into(),
                disk: "nvme0n1".into(),
                mac: "52:54:00:aa:bb:cc".into()
            }
        )
    );
    assert_eq!(t.state.since, t0, "the maintenance clock keeps running");
    assert_eq!(t.due, t0 + Duration::from_secs(1));
    let (s, a) = next(
        &p,
        &t.state,
        Observation::ConfigApplied,
        t0 + Duration::from_secs(2),
    );
    assert_eq!((s.phase, a), (Phase::Configured, Action::PollNode));
}

#[test]
fn a_silent_maintenance_api_while_adopting_is_never_taken_as_applied() {
    let p = plan();
    let t0 = Instant::now();
    let up = server(ServerStatus::Ready, BootType::Normal);
    let (adopted, _) = next(&p, &adopting(t0), up.clone(), t0);
    // Past the apply grace (60 s), within the maintenance deadline (100 s).
    let late = t0 + Duration::from_secs(61);
    let (s, a) = next(&p, &adopted, talos_down(), late);
    assert_eq!(
        (s.phase, s.step, s.apply_uncertain_since),
        (Phase::Maintenance, Step::ProbeTalos, None)
    );
    assert!(matches!(a, Action::ProbeTalos { .. }), "{a:?}");
    // Within the grace: no Node is asked about either.
    let (s, a) = next(&p, &adopted, talos_down(), t0 + Duration::from_secs(1));
    assert_eq!(s.step, Step::ProbeTalos);
    assert!(matches!(a, Action::ProbeTalos { .. }), "{a:?}");

    // A resumed maintenance at the same point assumes the config applied.
    let resumed = State {
        step: Step::ResumeMaintenance,
        ..adopting(t0)
    };
    let (resumed, _) = next(&p, &resumed, up, t0);
    let (s, a) = next(&p, &resumed, talos_down(), late);
    assert_eq!((s.phase, a), (Phase::Configured, Action::PollNode));
}

#[test]
fn adopting_waits_for_a_ready_server_with_an_address() {
    let p = plan();
    let t0 = Instant::now();
    let s = adopting(t0);
    let later = t0 + Duration::from_secs(1);
    for obs in [
        server(ServerStatus::Starting, BootType::Normal),
        server_without_address(),
        Observation::ApiFailed(ApiError::Throttled),
    ] {
        let t = advance(&p, &s, obs.clone(), later);
        assert_eq!(
            (t.state.phase, t.state.step, &t.action),
            (Phase::Maintenance, Step::Adopt, &Action::PollServer),
            "{obs:?}"
        );
        assert_eq!(t.due, later + p.poll_interval, "{obs:?}");
    }
}

#[test]
fn an_adoption_keeps_the_maintenance_deadline() {
    let p = plan();
    let t0 = Instant::now();
    let past = t0 + Duration::from_secs(101);
    // The server never comes up.
    let (s, a) = next(
        &p,
        &adopting(t0),
        server(ServerStatus::Starting, BootType::Normal),
        past,
    );
    assert_eq!(s.phase, Phase::Failed);
    assert_eq!(reason(&a), "phase maintenance did not complete within 100s");
    assert_eq!(class(&a), FailureClass::Deadline);
    // The maintenance API never answers: no return to rescue, a failure.
    let (adopted, _) = next(
        &p,
        &adopting(t0),
        server(ServerStatus::Ready, BootType::Normal),
        t0,
    );
    let (s, a) = next(&p, &adopted, talos_down(), past);
    assert_eq!(
        (s.phase, class(&a)),
        (Phase::Failed, FailureClass::Deadline)
    );
}

/// A standby server whose standby progress is resumed by its own standby
/// install (e.g. the pool's pass after a restart) is not configured: only a
/// node plan applies a config.
#[test]
fn a_standby_plan_never_applies_a_config_even_from_maintenance() {
    let p = standby_plan();
    let t0 = Instant::now();
    let (s, _) = next(
        &p,
        &adopting(t0),
        server(ServerStatus::Ready, BootType::Normal),
        t0,
    );
    let (s, a) = next(&p, &s, Observation::TalosUp, t0 + Duration::from_secs(1));
    assert_eq!(
        (s.phase, s.step, a),
        (Phase::Standby, Step::Done, Action::Finish)
    );
}
