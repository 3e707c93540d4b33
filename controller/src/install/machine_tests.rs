use std::time::Duration;

use tokio::time::Instant;

use super::*;
use crate::scaleway::{Ip, RescueServer};

const URL: &str = "https://img.example/v1.13.9/metal-amd64.raw.xz";
const WRITE_AS_USER: &str = "set -o pipefail; curl -fsSL 'https://img.example/v1.13.9/metal-amd64.raw.xz' | xz -d | sudo dd of=/dev/nvme0n1 bs=4M oflag=direct status=none";
const LSBLK: &str = "nvme0n1 disk\nnvme1n1 disk\n";
const IP_LINK: &str = "1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536\\    link/loopback 00:00:00:00:00:00 brd 00:00:00:00:00:00\n2: eth0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500\\    link/ether 52:54:00:aa:bb:cc brd ff:ff:ff:ff:ff:ff\n";

fn plan() -> Plan {
    Plan {
        image_url: URL.to_string(),
        compression: Compression::Xz,
        install_disk: None,
        deadlines: Deadlines {
            delivery: Duration::from_secs(600),
            rescue: Duration::from_secs(300),
            imaging: Duration::from_secs(400),
            booting: Duration::from_secs(200),
            maintenance: Duration::from_secs(100),
            join: Duration::from_secs(500),
        },
        image_attempts: 2,
    }
}

fn server(status: ServerStatus, boot_type: BootType) -> Observation {
    Observation::Server(Box::new(Server {
        id: "srv-1".into(),
        organization_id: String::new(),
        project_id: String::new(),
        name: "np-abc12".into(),
        description: String::new(),
        status,
        offer_id: "offer".into(),
        offer_name: "EM-A115X-SSD".into(),
        tags: vec![],
        ips: vec![Ip {
            id: "ip-1".into(),
            address: "127.77.0.10".into(),
            reverse: String::new(),
            version: "IPv4".into(),
        }],
        boot_type,
        zone: "fr-par-2".into(),
        rescue_server: (boot_type == BootType::Rescue).then(|| RescueServer {
            user: "rescue".into(),
            password: "pw".into(),
        }),
        created_at: String::new(),
        updated_at: String::new(),
    }))
}

fn ok(stdout: &str) -> Observation {
    Observation::Command(CommandOutput { exit_status: 0, stdout: stdout.into(), stderr: String::new() })
}

fn failed(status: u32, stderr: &str) -> Observation {
    Observation::Command(CommandOutput { exit_status: status, stdout: String::new(), stderr: stderr.into() })
}

fn at(state: &State, phase: Phase, step: Step) -> State {
    State { phase, step, ..state.clone() }
}

/// A state at `step` with everything learned up to the imaging phase.
fn imaging(t0: Instant, step: Step, attempts: u32) -> State {
    State {
        phase: Phase::Imaging,
        step,
        since: t0,
        host: Some("127.77.0.10".into()),
        user: Some("rescue".into()),
        disk: Some("nvme0n1".into()),
        mac: Some("52:54:00:aa:bb:cc".into()),
        image_attempts: attempts,
    }
}

fn reason(action: &Action) -> &str {
    match action {
        Action::Fail { reason } => reason,
        other => panic!("expected Fail, got {other:?}"),
    }
}

#[test]
fn happy_path_walks_every_phase() {
    let p = plan();
    let t0 = Instant::now();
    let t = |s: u64| t0 + Duration::from_secs(s);
    let s = State::start(t0);
    assert_eq!((s.phase, s.step), (Phase::Ordered, Step::AwaitDelivery));

    let (s, a) = next(&p, &s, server(ServerStatus::Ordered, BootType::UnknownBootType), t(1));
    assert_eq!((s.phase, a), (Phase::Ordered, Action::PollServer));
    let (s, a) = next(&p, &s, server(ServerStatus::Delivering, BootType::UnknownBootType), t(2));
    assert_eq!((s.phase, a), (Phase::Delivering, Action::PollServer));
    assert_eq!(s.since, t0, "ordered and delivering share the delivery clock");
    let (s, a) = next(&p, &s, server(ServerStatus::Ready, BootType::Normal), t(3));
    assert_eq!((s.phase, s.step, a), (Phase::Ready, Step::RebootRescue, Action::RebootRescue));
    assert_eq!(s.since, t(3));

    let (s, a) = next(&p, &s, Observation::Rebooted, t(4));
    assert_eq!((s.phase, s.step, a), (Phase::Rescue, Step::AwaitRescue, Action::PollServer));
    // Still on the old boot: wait.
    let (s, a) = next(&p, &s, server(ServerStatus::Ready, BootType::Normal), t(5));
    assert_eq!((s.step, a), (Step::AwaitRescue, Action::PollServer));
    let (s, a) = next(&p, &s, server(ServerStatus::Stopping, BootType::Rescue), t(6));
    assert_eq!(a, Action::PollServer);
    let (s, a) = next(&p, &s, server(ServerStatus::Ready, BootType::Rescue), t(7));
    assert_eq!(
        a,
        Action::ConnectSsh { host: "127.77.0.10".into(), user: "rescue".into() }
    );
    assert_eq!((s.phase, s.step), (Phase::Rescue, Step::Connect));

    let (s, a) = next(&p, &s, Observation::SshFailed(RescueError::Unreachable("refused".into())), t(8));
    assert!(matches!(a, Action::ConnectSsh { .. }));
    let (s, a) = next(&p, &s, Observation::SshConnected, t(9));
    assert_eq!((s.phase, s.since), (Phase::Imaging, t(9)));
    assert_eq!(a, Action::Run { command: "lsblk -dno NAME,TYPE".into() });

    let (s, a) = next(&p, &s, ok(LSBLK), t(10));
    assert_eq!(s.disk.as_deref(), Some("nvme0n1"));
    assert_eq!(a, Action::Run { command: "ip -o link".into() });
    let (s, a) = next(&p, &s, ok(IP_LINK), t(11));
    assert_eq!(s.mac.as_deref(), Some("52:54:00:aa:bb:cc"));
    assert_eq!(a, Action::Run { command: WRITE_AS_USER.into() });
    assert_eq!(s.image_attempts, 1);
    let (s, a) = next(&p, &s, ok(""), t(12));
    assert_eq!(a, Action::Run { command: "sudo sync".into() });
    let (s, a) = next(&p, &s, ok(""), t(13));
    assert_eq!((s.phase, s.step, a), (Phase::Booting, Step::RebootNormal, Action::RebootNormal));

    let (s, a) = next(&p, &s, Observation::Rebooted, t(14));
    assert_eq!(a, Action::ProbeTalos { host: "127.77.0.10".into() });
    let (s, a) = next(&p, &s, Observation::TalosDown(TalosError::Unavailable("refused".into())), t(15));
    assert_eq!((s.phase, a), (Phase::Booting, Action::ProbeTalos { host: "127.77.0.10".into() }));
    let (s, a) = next(&p, &s, Observation::TalosUp, t(16));
    assert_eq!(s.phase, Phase::Maintenance);
    assert_eq!(
        a,
        Action::ApplyConfig {
            host: "127.77.0.10".into(),
            disk: "nvme0n1".into(),
            mac: "52:54:00:aa:bb:cc".into()
        }
    );

    let (s, a) = next(&p, &s, Observation::ConfigApplied, t(17));
    assert_eq!((s.phase, a), (Phase::Configured, Action::PollNode));
    let (s, a) = next(&p, &s, Observation::Node(None), t(18));
    assert_eq!(a, Action::PollNode);
    let (s, a) = next(&p, &s, Observation::Node(Some(false)), t(19));
    assert_eq!(a, Action::PollNode);
    let (s, a) = next(&p, &s, Observation::NodeFailed(NodePortError::Unavailable("x".into())), t(20));
    assert_eq!(a, Action::PollNode);
    let (s, a) = next(&p, &s, Observation::Node(Some(true)), t(21));
    assert_eq!((s.phase, s.step, a), (Phase::Joined, Step::Done, Action::Finish));
}

#[test]
fn polling_errors_are_retried_until_the_deadline() {
    let p = plan();
    let t0 = Instant::now();
    let s = State::start(t0);
    let (s, a) = next(&p, &s, Observation::ApiFailed(ApiError::Unavailable("502".into())), t0 + Duration::from_secs(1));
    assert_eq!((s.phase, a), (Phase::Ordered, Action::PollServer));
    let (s, a) = next(&p, &s, Observation::ApiFailed(ApiError::Throttled), t0 + Duration::from_secs(601));
    assert_eq!(s.phase, Phase::Failed);
    assert_eq!(reason(&a), "phase ordered did not complete within 600s");

    let rescue = at(&State::start(t0), Phase::Rescue, Step::AwaitRescue);
    let (_, a) = next(&p, &rescue, Observation::ApiFailed(ApiError::Throttled), t0);
    assert_eq!(a, Action::PollServer);
}

#[test]
fn delivery_deadline_fails_a_stuck_delivery() {
    let p = plan();
    let t0 = Instant::now();
    let s = State::start(t0);
    let (s, _) = next(&p, &s, server(ServerStatus::Delivering, BootType::UnknownBootType), t0 + Duration::from_secs(300));
    let (s, a) = next(&p, &s, server(ServerStatus::Delivering, BootType::UnknownBootType), t0 + Duration::from_secs(601));
    assert_eq!(s.phase, Phase::Failed);
    assert_eq!(reason(&a), "phase delivering did not complete within 600s");
}

#[test]
fn a_transition_out_of_the_phase_wins_over_its_deadline() {
    let p = plan();
    let t0 = Instant::now();
    let s = State::start(t0);
    let (s, a) = next(&p, &s, server(ServerStatus::Ready, BootType::Normal), t0 + Duration::from_secs(9999));
    assert_eq!((s.phase, a), (Phase::Ready, Action::RebootRescue));
}

#[test]
fn broken_server_statuses_and_disappearance_fail_at_any_step() {
    let p = plan();
    let t0 = Instant::now();
    for (status, text) in [
        (ServerStatus::Error, "error"),
        (ServerStatus::Locked, "locked"),
        (ServerStatus::OutOfStock, "out_of_stock"),
        (ServerStatus::Deleting, "deleting"),
    ] {
        let (s, a) = next(&p, &State::start(t0), server(status, BootType::Normal), t0);
        assert_eq!(s.phase, Phase::Failed);
        assert_eq!(reason(&a), format!("the server is in status {text}"));
    }
    let rescue = at(&State::start(t0), Phase::Rescue, Step::AwaitRescue);
    let (s, a) = next(&p, &rescue, Observation::ApiFailed(ApiError::NotFound("srv".into())), t0);
    assert_eq!(s.phase, Phase::Failed);
    assert_eq!(reason(&a), "the server no longer exists");
}

#[test]
fn refused_rescue_reboot_is_retried_once_the_server_is_ready() {
    let p = plan();
    let t0 = Instant::now();
    let s = at(&State::start(t0), Phase::Ready, Step::RebootRescue);
    let (s, a) = next(&p, &s, Observation::ApiFailed(ApiError::TransientState("Server is not delivered".into())), t0);
    assert_eq!((s.phase, s.step, a), (Phase::Ready, Step::RetryRebootRescue, Action::PollServer));
    let (s, a) = next(&p, &s, server(ServerStatus::Starting, BootType::Normal), t0);
    assert_eq!((s.step, a), (Step::RetryRebootRescue, Action::PollServer));
    let (s, a) = next(&p, &s, Observation::ApiFailed(ApiError::Unavailable("503".into())), t0);
    assert_eq!((s.step, a), (Step::RetryRebootRescue, Action::PollServer));
    let (s, a) = next(&p, &s, server(ServerStatus::Ready, BootType::Normal), t0);
    assert_eq!((s.step, a), (Step::RebootRescue, Action::RebootRescue));

    let (s, a) = next(&p, &s, Observation::ApiFailed(ApiError::Invalid("bad ssh key id".into())), t0);
    assert_eq!(s.phase, Phase::Failed);
    assert_eq!(reason(&a), "rescue reboot refused: invalid request: bad ssh key id");
}

#[test]
fn rescue_needs_ready_rescue_boot_address_and_user() {
    let p = plan();
    let t0 = Instant::now();
    let s = at(&State::start(t0), Phase::Rescue, Step::AwaitRescue);
    let Observation::Server(mut no_ip) = server(ServerStatus::Ready, BootType::Rescue) else { unreachable!() };
    no_ip.ips.clear();
    let (_, a) = next(&p, &s, Observation::Server(no_ip), t0);
    assert_eq!(a, Action::PollServer);
    let Observation::Server(mut no_user) = server(ServerStatus::Ready, BootType::Rescue) else { unreachable!() };
    no_user.rescue_server = None;
    let (_, a) = next(&p, &s, Observation::Server(no_user), t0);
    assert_eq!(a, Action::PollServer);
    let (_, a) = next(&p, &s, server(ServerStatus::Starting, BootType::Rescue), t0);
    assert_eq!(a, Action::PollServer);
}

#[test]
fn ssh_is_retried_until_the_rescue_deadline_unless_the_key_is_invalid() {
    let p = plan();
    let t0 = Instant::now();
    let s = State {
        host: Some("127.77.0.10".into()),
        user: Some("rescue".into()),
        ..at(&State::start(t0), Phase::Rescue, Step::Connect)
    };
    let (s2, a) = next(&p, &s, Observation::SshFailed(RescueError::AuthRejected("rescue".into())), t0 + Duration::from_secs(299));
    assert_eq!((s2.phase, a), (Phase::Rescue, Action::ConnectSsh { host: "127.77.0.10".into(), user: "rescue".into() }));
    let (s3, a) = next(&p, &s2, Observation::SshFailed(RescueError::Timeout("connect".into())), t0 + Duration::from_secs(301));
    assert_eq!(s3.phase, Phase::Failed);
    assert_eq!(reason(&a), "phase rescue did not complete within 300s");

    let (s4, a) = next(&p, &s, Observation::SshFailed(RescueError::InvalidKey("not an OpenSSH key".into())), t0);
    assert_eq!(s4.phase, Phase::Failed);
    assert_eq!(reason(&a), "the rescue private key is invalid: not an OpenSSH key");
}

#[test]
fn root_rescue_user_runs_without_sudo_and_selector_picks_the_disk() {
    let p = Plan { install_disk: Some("nvme1n1".into()), ..plan() };
    let t0 = Instant::now();
    let s = State { user: Some("root".into()), disk: None, mac: None, ..imaging(t0, Step::ListDisks, 0) };
    let (s, _) = next(&p, &s, ok(LSBLK), t0);
    assert_eq!(s.disk.as_deref(), Some("nvme1n1"));
    let (s, a) = next(&p, &s, ok(IP_LINK), t0);
    assert_eq!(
        a,
        Action::Run {
            command: "set -o pipefail; curl -fsSL 'https://img.example/v1.13.9/metal-amd64.raw.xz' | xz -d | dd of=/dev/nvme1n1 bs=4M oflag=direct status=none".into()
        }
    );
    let (_, a) = next(&p, &s, ok(""), t0);
    assert_eq!(a, Action::Run { command: "sync".into() });
}

#[test]
fn disk_and_nic_detection_failures_are_terminal() {
    let t0 = Instant::now();
    let p = Plan { install_disk: Some("sda".into()), ..plan() };
    let (s, a) = next(&p, &imaging(t0, Step::ListDisks, 0), ok(LSBLK), t0);
    assert_eq!(s.phase, Phase::Failed);
    assert_eq!(reason(&a), "install disk sda not found (disks: nvme0n1, nvme1n1)");

    let (_, a) = next(&plan(), &imaging(t0, Step::ListDisks, 0), failed(127, "sh: lsblk: command not found"), t0);
    assert_eq!(reason(&a), "lsblk exited with status 127: sh: lsblk: command not found");

    let (_, a) = next(&plan(), &imaging(t0, Step::ListLinks, 0), ok("1: lo: <LOOPBACK> mtu 1\\ link/loopback 00:00:00:00:00:00 brd\n"), t0);
    assert_eq!(reason(&a), "no Ethernet link found by ip -o link");
    let (_, a) = next(&plan(), &imaging(t0, Step::ListLinks, 0), failed(1, "boom"), t0);
    assert_eq!(reason(&a), "ip -o link exited with status 1: boom");
}

#[test]
fn a_failed_image_write_is_retried_within_the_budget() {
    let p = plan();
    let t0 = Instant::now();
    let s = imaging(t0, Step::WriteImage, 1);
    let (s, a) = next(&p, &s, failed(1, "xz: (stdin): Compressed data is corrupt"), t0);
    assert_eq!((s.step, s.image_attempts), (Step::WriteImage, 2));
    assert_eq!(a, Action::Run { command: WRITE_AS_USER.into() });
    let (s, a) = next(&p, &s, failed(22, "curl: (22) The requested URL returned error: 404"), t0);
    assert_eq!(s.phase, Phase::Failed);
    assert_eq!(reason(&a), "image write exited with status 22: curl: (22) The requested URL returned error: 404");
}

#[test]
fn a_lost_session_restarts_imaging_on_a_new_session_within_the_budget() {
    let p = plan();
    let t0 = Instant::now();
    let lost = || Observation::SessionLost(RescueError::SessionLost("connection reset".into()));
    let s = imaging(t0, Step::WriteImage, 1);
    let (s, a) = next(&p, &s, lost(), t0 + Duration::from_secs(5));
    assert_eq!((s.phase, s.step, s.image_attempts), (Phase::Imaging, Step::Connect, 2));
    assert_eq!(s.since, t0, "reconnecting keeps the imaging clock");
    assert_eq!(a, Action::ConnectSsh { host: "127.77.0.10".into(), user: "rescue".into() });
    let (s, a) = next(&p, &s, Observation::SshConnected, t0 + Duration::from_secs(6));
    assert_eq!((s.phase, s.since), (Phase::Imaging, t0));
    assert_eq!(a, Action::Run { command: "lsblk -dno NAME,TYPE".into() });
    let (s, a) = next(&p, &s, lost(), t0);
    assert_eq!(s.phase, Phase::Failed);
    assert_eq!(reason(&a), "SSH session lost: SSH session lost: connection reset");

    for step in [Step::ListDisks, Step::ListLinks, Step::Sync] {
        let (s, _) = next(&p, &imaging(t0, step, 0), lost(), t0);
        assert_eq!(s.step, Step::Connect, "{step:?}");
    }
}

#[test]
fn imaging_deadline_fails_even_while_commands_succeed() {
    let p = plan();
    let t0 = Instant::now();
    let (s, a) = next(&p, &imaging(t0, Step::ListDisks, 0), ok(LSBLK), t0 + Duration::from_secs(401));
    assert_eq!(s.phase, Phase::Failed);
    assert_eq!(reason(&a), "phase imaging did not complete within 400s");
}

#[test]
fn failed_sync_is_terminal() {
    let (s, a) = next(&plan(), &imaging(Instant::now(), Step::Sync, 1), failed(1, "I/O error"), Instant::now());
    assert_eq!(s.phase, Phase::Failed);
    assert_eq!(reason(&a), "sync exited with status 1: I/O error");
}

#[test]
fn refused_normal_reboot_is_retried_once_the_server_is_ready() {
    let p = plan();
    let t0 = Instant::now();
    let s = at(&imaging(t0, Step::RebootNormal, 1), Phase::Booting, Step::RebootNormal);
    let (s, a) = next(&p, &s, Observation::ApiFailed(ApiError::TransientState("busy".into())), t0);
    assert_eq!((s.step, a), (Step::RetryRebootNormal, Action::PollServer));
    let (s, a) = next(&p, &s, server(ServerStatus::Stopping, BootType::Rescue), t0);
    assert_eq!((s.step, a), (Step::RetryRebootNormal, Action::PollServer));
    let (s, a) = next(&p, &s, Observation::ApiFailed(ApiError::Unavailable("x".into())), t0);
    assert_eq!((s.step, a), (Step::RetryRebootNormal, Action::PollServer));
    let (s, a) = next(&p, &s, server(ServerStatus::Ready, BootType::Rescue), t0);
    assert_eq!((s.step, a), (Step::RebootNormal, Action::RebootNormal));
    let (s, a) = next(&p, &s, Observation::ApiFailed(ApiError::Unauthorized("denied".into())), t0);
    assert_eq!(s.phase, Phase::Failed);
    assert_eq!(reason(&a), "normal reboot refused: unauthorized: denied");
}

#[test]
fn talos_that_never_answers_fails_the_booting_phase() {
    let p = plan();
    let t0 = Instant::now();
    let s = at(&imaging(t0, Step::ProbeTalos, 1), Phase::Booting, Step::ProbeTalos);
    let (s, a) = next(&p, &s, Observation::TalosDown(TalosError::Unavailable("refused".into())), t0 + Duration::from_secs(201));
    assert_eq!(s.phase, Phase::Failed);
    assert_eq!(reason(&a), "phase booting did not complete within 200s");
}

#[test]
fn apply_failures_are_retried_unless_rejected() {
    let p = plan();
    let t0 = Instant::now();
    let s = at(&imaging(t0, Step::ApplyConfig, 1), Phase::Maintenance, Step::ApplyConfig);
    let (s2, a) = next(&p, &s, Observation::ApplyFailed(TalosError::Unavailable("reset".into())), t0);
    assert_eq!((s2.phase, s2.step), (Phase::Maintenance, Step::ProbeTalos));
    assert_eq!(a, Action::ProbeTalos { host: "127.77.0.10".into() });
    let (s3, a) = next(&p, &s2, Observation::TalosUp, t0);
    assert_eq!((s3.phase, s3.step), (Phase::Maintenance, Step::ApplyConfig));
    assert!(matches!(a, Action::ApplyConfig { .. }));

    let (s4, a) = next(&p, &s, Observation::ApplyFailed(TalosError::Rejected("unknown field".into())), t0);
    assert_eq!(s4.phase, Phase::Failed);
    assert_eq!(reason(&a), "Talos rejected the machine config: unknown field");
    let (_, a) = next(&p, &s, Observation::ConfigInvalid("bad patch".into()), t0);
    assert_eq!(reason(&a), "cannot render the machine config: bad patch");
}

#[test]
fn a_node_that_never_becomes_ready_fails_the_join_phase() {
    let p = plan();
    let t0 = Instant::now();
    let s = at(&imaging(t0, Step::AwaitNode, 1), Phase::Configured, Step::AwaitNode);
    let (s, a) = next(&p, &s, Observation::Node(Some(false)), t0 + Duration::from_secs(501));
    assert_eq!(s.phase, Phase::Failed);
    assert_eq!(reason(&a), "phase configured did not complete within 500s");
}

#[test]
fn unexpected_observations_fail_loudly() {
    let t0 = Instant::now();
    let (s, a) = next(&plan(), &State::start(t0), Observation::TalosUp, t0);
    assert_eq!(s.phase, Phase::Failed);
    assert_eq!(reason(&a), "internal error: unexpected observation TalosUp at step AwaitDelivery");
}

#[test]
fn plan_refuses_unknown_image_formats() {
    let spec = crate::install::tests_support::spec("https://img.example/metal-amd64.iso");
    assert!(Plan::new(&spec, &InstallSettings::default()).is_err());
    let spec = crate::install::tests_support::spec(URL);
    let plan = Plan::new(&spec, &InstallSettings::default()).expect("plan");
    assert_eq!(plan.compression, Compression::Xz);
}

#[test]
fn polls_are_the_waiting_actions() {
    assert!(Action::PollServer.is_poll());
    assert!(Action::PollNode.is_poll());
    assert!(Action::ProbeTalos { host: String::new() }.is_poll());
    assert!(Action::ConnectSsh { host: String::new(), user: String::new() }.is_poll());
    assert!(!Action::RebootRescue.is_poll());
    assert!(!Action::Run { command: String::new() }.is_poll());
}
