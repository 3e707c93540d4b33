use std::time::Duration;

use tokio::time::Instant;

use super::*;
use crate::install::commands::Compression;
use crate::install::{Deadlines, InstallSettings};
use crate::scaleway::{Ip, RescueServer};

const URL: &str = "https://img.example/v1.13.9/metal-amd64.raw.xz";
const WRITE_AS_USER: &str = "set -o pipefail; curl -fsSL 'https://img.example/v1.13.9/metal-amd64.raw.xz' | xz -d | dd bs=4M iflag=fullblock | sudo tee /dev/nvme0n1 | sha256sum";
const VERIFY_AS_USER: &str = "sudo dd if=/dev/nvme0n1 bs=4M iflag=direct,count_bytes count=1306525696 status=none | sha256sum";
/// sha256 of the image the tests stream.
const IMAGE_SHA: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
const OTHER_SHA: &str = "60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752";
const HOST_KEY: &str = "SHA256:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU";
const LSBLK: &str = "nvme0n1 disk\nnvme1n1 disk\n";
const IP_LINK: &str = "1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536\\    link/loopback 00:00:00:00:00:00 brd 00:00:00:00:00:00\n2: eth0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500\\    link/ether 52:54:00:aa:bb:cc brd ff:ff:ff:ff:ff:ff\n";

fn plan() -> Plan {
    Plan {
        image_url: URL.to_string(),
        compression: Compression::Xz,
        install_disk: None,
        poll_interval: Duration::from_secs(15),
        probe_interval: Duration::from_secs(2),
        deadlines: Deadlines {
            delivery: Duration::from_secs(600),
            rescue: Duration::from_secs(300),
            imaging: Duration::from_secs(400),
            booting: Duration::from_secs(200),
            maintenance: Duration::from_secs(100),
            join: Duration::from_secs(500),
        },
        image_attempts: 2,
        image_sha256: None,
        rescue_returns: 1,
        api_failures: 5,
        apply_grace: Duration::from_secs(60),
        delivery: None,
        boot: None,
        server_id: "srv-1".into(),
        zone: "fr-par-2".into(),
        offer_name: "EM-A115X-SSD".into(),
        node_name: "default-abc12".into(),
        target: crate::install::Target::Node,
        rescue_ssh_key_id: "key-1".into(),
        private_network: None,
    }
}

/// What the image write prints: the stream's hash and dd's status.
fn written(sha: &str) -> Observation {
    Observation::Command(CommandOutput {
        exit_status: 0,
        stdout: format!("{sha}  -\n"),
        stderr: "311+1 records in\n311+1 records out\n1306525696 bytes (1.3 GB, 1.2 GiB) copied, 6.5 s, 200 MB/s\n".into(),
    })
}

fn read_back(sha: &str) -> Observation {
    ok(&format!("{sha}  -\n"))
}

fn connected() -> Observation {
    Observation::SshConnected {
        host_key: HOST_KEY.into(),
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
    Observation::Command(CommandOutput {
        exit_status: 0,
        stdout: stdout.into(),
        stderr: String::new(),
    })
}

fn failed(status: u32, stderr: &str) -> Observation {
    Observation::Command(CommandOutput {
        exit_status: status,
        stdout: String::new(),
        stderr: stderr.into(),
    })
}

fn at(state: &State, phase: Phase, step: Step) -> State {
    State {
        phase,
        step,
        ..state.clone()
    }
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
        host_key: Some(HOST_KEY.into()),
        ..State::start(t0)
    }
}

fn reason(action: &Action) -> &str {
    match action {
        Action::Fail { reason, .. } => reason,
        other => panic!("expected Fail, got {other:?}"),
    }
}

fn class(action: &Action) -> FailureClass {
    match action {
        Action::Fail { class, .. } => *class,
        other => panic!("expected Fail, got {other:?}"),
    }
}

/// (reason, warning, message) of each Event.
fn events(t: &Transition) -> Vec<(&str, bool, &str)> {
    t.events
        .iter()
        .map(|e| (e.reason.as_str(), e.warning, e.message.as_str()))
        .collect()
}

#[test]
fn happy_path_walks_every_phase() {
    let p = plan();
    let t0 = Instant::now();
    let t = |s: u64| t0 + Duration::from_secs(s);
    let s = State::start(t0);
    assert_eq!((s.phase, s.step), (Phase::Ordered, Step::AwaitDelivery));

    let (s, a) = next(
        &p,
        &s,
        server(ServerStatus::Ordered, BootType::UnknownBootType),
        t(1),
    );
    assert_eq!((s.phase, a), (Phase::Ordered, Action::PollServer));
    let (s, a) = next(
        &p,
        &s,
        server(ServerStatus::Delivering, BootType::UnknownBootType),
        t(2),
    );
    assert_eq!((s.phase, a), (Phase::Delivering, Action::PollServer));
    assert_eq!(
        s.since, t0,
        "ordered and delivering share the delivery clock"
    );
    let (s, a) = next(&p, &s, server(ServerStatus::Ready, BootType::Normal), t(3));
    assert_eq!(
        (s.phase, s.step, a),
        (Phase::Ready, Step::RebootRescue, Action::RebootRescue)
    );
    assert_eq!(s.since, t(3));

    let (s, a) = next(&p, &s, Observation::Rebooted, t(4));
    assert_eq!(
        (s.phase, s.step, a),
        (Phase::Rescue, Step::AwaitRescue, Action::PollServer)
    );
    // Still on the old boot: wait.
    let (s, a) = next(&p, &s, server(ServerStatus::Ready, BootType::Normal), t(5));
    assert_eq!((s.step, a), (Step::AwaitRescue, Action::PollServer));
    // Rebooting into rescue: SSH is probed, but a login that gets in is only
    // a reason to read the status again.
    let (s, a) = next(
        &p,
        &s,
        server(ServerStatus::Stopping, BootType::Rescue),
        t(6),
    );
    assert_eq!(
        (s.step, a),
        (
            Step::ProbeRescueSsh,
            Action::ProbeSsh {
                host: "127.77.0.10".into(),
                user: "rescue".into()
            }
        )
    );
    let (s, a) = next(&p, &s, connected(), t(7));
    assert_eq!((s.step, a), (Step::ConfirmRescue, Action::PollServer));
    assert_eq!(s.host_key, None, "a probe's host key is not trusted");
    let (s, a) = next(&p, &s, server(ServerStatus::Ready, BootType::Rescue), t(7));
    assert_eq!(
        a,
        Action::ConnectSsh {
            host: "127.77.0.10".into(),
            user: "rescue".into()
        }
    );
    assert_eq!((s.phase, s.step), (Phase::Rescue, Step::Connect));

    let (s, a) = next(
        &p,
        &s,
        Observation::SshFailed(RescueError::Unreachable("refused".into())),
        t(8),
    );
    assert!(matches!(a, Action::ConnectSsh { .. }));
    let (s, a) = next(&p, &s, connected(), t(9));
    assert_eq!((s.phase, s.since), (Phase::Imaging, t(9)));
    assert_eq!(s.host_key.as_deref(), Some(HOST_KEY));
    assert_eq!(
        a,
        Action::Run {
            command: "lsblk -dno NAME,TYPE".into()
        }
    );

    let (s, a) = next(&p, &s, ok(LSBLK), t(10));
    assert_eq!(s.disk.as_deref(), Some("nvme0n1"));
    assert_eq!(
        a,
        Action::Run {
            command: "ip -o link".into()
        }
    );
    let (s, a) = next(&p, &s, ok(IP_LINK), t(11));
    assert_eq!(s.mac.as_deref(), Some("52:54:00:aa:bb:cc"));
    assert_eq!(
        a,
        Action::Run {
            command: WRITE_AS_USER.into()
        }
    );
    assert_eq!(s.image_attempts, 1);
    assert_eq!(s.since, t(11), "each write gets the whole imaging deadline");
    let (s, a) = next(&p, &s, written(IMAGE_SHA), t(12));
    assert_eq!(
        a,
        Action::Run {
            command: "sudo sync".into()
        }
    );
    let (s, a) = next(&p, &s, ok(""), t(13));
    assert_eq!(
        a,
        Action::Run {
            command: VERIFY_AS_USER.into()
        }
    );
    let (s, a) = next(&p, &s, read_back(IMAGE_SHA), t(13));
    assert_eq!(
        (s.phase, s.step, a),
        (Phase::Booting, Step::RebootNormal, Action::RebootNormal)
    );

    let (s, a) = next(&p, &s, Observation::Rebooted, t(14));
    assert_eq!(
        a,
        Action::ProbeTalos {
            host: "127.77.0.10".into()
        }
    );
    let (s, a) = next(
        &p,
        &s,
        Observation::TalosDown(TalosError::Unavailable("refused".into())),
        t(15),
    );
    assert_eq!(
        (s.phase, a),
        (
            Phase::Booting,
            Action::ProbeTalos {
                host: "127.77.0.10".into()
            }
        )
    );
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
    let (s, a) = next(
        &p,
        &s,
        Observation::NodeFailed(NodePortError::Unavailable("x".into())),
        t(20),
    );
    assert_eq!(a, Action::PollNode);
    let (s, a) = next(&p, &s, Observation::Node(Some(true)), t(21));
    assert_eq!(
        (s.phase, s.step, a),
        (
            Phase::Configured,
            Step::InitializeNode,
            Action::InitializeNode
        )
    );
    let (s, a) = next(&p, &s, Observation::NodeInitialized, t(21));
    assert_eq!(
        (s.phase, s.step, a),
        (Phase::Configured, Step::ReleaseToken, Action::ReleaseToken)
    );
    let (s, a) = next(&p, &s, Observation::TokenReleased, t(21));
    assert_eq!(
        (s.phase, s.step, a),
        (Phase::Joined, Step::Done, Action::Finish)
    );
}

#[test]
fn polling_errors_are_retried_until_the_deadline() {
    let p = plan();
    let t0 = Instant::now();
    let s = State::start(t0);
    let (s, a) = next(
        &p,
        &s,
        Observation::ApiFailed(ApiError::Unavailable("502".into())),
        t0 + Duration::from_secs(1),
    );
    assert_eq!((s.phase, a), (Phase::Ordered, Action::PollServer));
    let (s, a) = next(
        &p,
        &s,
        Observation::ApiFailed(ApiError::Throttled),
        t0 + Duration::from_secs(601),
    );
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
    let (s, _) = next(
        &p,
        &s,
        server(ServerStatus::Delivering, BootType::UnknownBootType),
        t0 + Duration::from_secs(300),
    );
    let (s, a) = next(
        &p,
        &s,
        server(ServerStatus::Delivering, BootType::UnknownBootType),
        t0 + Duration::from_secs(601),
    );
    assert_eq!(s.phase, Phase::Failed);
    assert_eq!(reason(&a), "phase delivering did not complete within 600s");
}

#[test]
fn a_transition_out_of_the_phase_wins_over_its_deadline() {
    let p = plan();
    let t0 = Instant::now();
    let s = State::start(t0);
    let (s, a) = next(
        &p,
        &s,
        server(ServerStatus::Ready, BootType::Normal),
        t0 + Duration::from_secs(9999),
    );
    assert_eq!((s.phase, a), (Phase::Ready, Action::RebootRescue));
}

#[test]
fn broken_server_statuses_and_disappearance_fail_at_any_step() {
    let p = plan();
    let t0 = Instant::now();
    for (status, text) in [
        (ServerStatus::Error, "error"),
        (ServerStatus::Locked, "locked"),
        (ServerStatus::Deleting, "deleting"),
    ] {
        let (s, a) = next(&p, &State::start(t0), server(status, BootType::Normal), t0);
        assert_eq!(s.phase, Phase::Failed);
        assert_eq!(reason(&a), format!("the server is in status {text}"));
    }
    let rescue = at(&State::start(t0), Phase::Rescue, Step::AwaitRescue);
    let (s, a) = next(
        &p,
        &rescue,
        Observation::ApiFailed(ApiError::NotFound("srv".into())),
        t0,
    );
    assert_eq!(s.phase, Phase::Failed);
    assert_eq!(reason(&a), "the server no longer exists");
}

#[test]
fn refused_rescue_reboot_is_retried_once_the_server_is_ready() {
    let p = plan();
    let t0 = Instant::now();
    let s = at(&State::start(t0), Phase::Ready, Step::RebootRescue);
    let (s, a) = next(
        &p,
        &s,
        Observation::ApiFailed(ApiError::TransientState("Server is not delivered".into())),
        t0,
    );
    assert_eq!(
        (s.phase, s.step, a),
        (Phase::Ready, Step::RetryRebootRescue, Action::PollServer)
    );
    let (s, a) = next(&p, &s, server(ServerStatus::Starting, BootType::Normal), t0);
    assert_eq!((s.step, a), (Step::RetryRebootRescue, Action::PollServer));
    let (s, a) = next(
        &p,
        &s,
        Observation::ApiFailed(ApiError::Unavailable("503".into())),
        t0,
    );
    assert_eq!((s.step, a), (Step::RetryRebootRescue, Action::PollServer));
    let (s, a) = next(&p, &s, server(ServerStatus::Ready, BootType::Normal), t0);
    assert_eq!((s.step, a), (Step::RebootRescue, Action::RebootRescue));

    let (s, a) = next(
        &p,
        &s,
        Observation::ApiFailed(ApiError::Invalid("bad ssh key id".into())),
        t0,
    );
    assert_eq!(s.phase, Phase::Failed);
    assert_eq!(
        reason(&a),
        "rescue reboot refused: invalid request: bad ssh key id"
    );
}

#[test]
fn rescue_needs_ready_rescue_boot_address_and_user() {
    let p = plan();
    let t0 = Instant::now();
    let s = at(&State::start(t0), Phase::Rescue, Step::AwaitRescue);
    let Observation::Server(mut no_ip) = server(ServerStatus::Ready, BootType::Rescue) else {
        unreachable!()
    };
    no_ip.ips.clear();
    let (_, a) = next(&p, &s, Observation::Server(no_ip), t0);
    assert_eq!(a, Action::PollServer);
    let Observation::Server(mut no_user) = server(ServerStatus::Ready, BootType::Rescue) else {
        unreachable!()
    };
    no_user.rescue_server = None;
    let (_, a) = next(&p, &s, Observation::Server(no_user), t0);
    assert_eq!(a, Action::PollServer);
    // Still starting: probed over SSH, never logged into for imaging.
    let (s2, a) = next(&p, &s, server(ServerStatus::Starting, BootType::Rescue), t0);
    assert_eq!(s2.step, Step::ProbeRescueSsh);
    assert!(matches!(a, Action::ProbeSsh { .. }), "{a:?}");
    // Rebooting, but the API does not name the rescue user yet: no probe.
    let Observation::Server(mut anonymous) = server(ServerStatus::Stopping, BootType::Rescue)
    else {
        unreachable!()
    };
    anonymous.rescue_server = None;
    let (s3, a) = next(&p, &s, Observation::Server(anonymous), t0);
    assert_eq!((s3.step, a), (Step::AwaitRescue, Action::PollServer));
    // Rebooting into the normal image: nothing to probe.
    let (s4, a) = next(&p, &s, server(ServerStatus::Stopping, BootType::Normal), t0);
    assert_eq!((s4.step, a), (Step::AwaitRescue, Action::PollServer));
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
    let (s2, a) = next(
        &p,
        &s,
        Observation::SshFailed(RescueError::AuthRejected("rescue".into())),
        t0 + Duration::from_secs(299),
    );
    assert_eq!(
        (s2.phase, a),
        (
            Phase::Rescue,
            Action::ConnectSsh {
                host: "127.77.0.10".into(),
                user: "rescue".into()
            }
        )
    );
    let (s3, a) = next(
        &p,
        &s2,
        Observation::SshFailed(RescueError::Timeout("connect".into())),
        t0 + Duration::from_secs(301),
    );
    assert_eq!(s3.phase, Phase::Failed);
    assert_eq!(reason(&a), "phase rescue did not complete within 300s");

    let (s4, a) = next(
        &p,
        &s,
        Observation::SshFailed(RescueError::InvalidKey("not an OpenSSH key".into())),
        t0,
    );
    assert_eq!(s4.phase, Phase::Failed);
    assert_eq!(
        reason(&a),
        "the rescue private key is invalid: not an OpenSSH key"
    );
}

#[path = "machine_later_tests.rs"]
mod later;

#[path = "machine_verify_tests.rs"]
mod verify;

#[path = "machine_recovery_tests.rs"]
mod recovery;

#[path = "machine_cadence_tests.rs"]
mod cadence;

#[path = "machine_standby_tests.rs"]
mod standby;

#[test]
fn the_ready_message_tells_a_first_rescue_boot_from_a_return() {
    let p = plan();
    let mut s = State::start(Instant::now());
    s.phase = Phase::Ready;
    assert_eq!(
        phase_message(&p, &s).as_deref(),
        Some("ready: server srv-1 is delivered; rebooting into rescue mode with SSH key key-1")
    );
    s.rescue_returns = 1;
    assert_eq!(
        phase_message(&p, &s).as_deref(),
        Some(
            "ready: rebooting server srv-1 into rescue mode again (return 1/1) with SSH key key-1"
        )
    );
}

#[test]
fn every_failure_class_is_an_install_outcome_once() {
    // A class missing from `FailureClass::ALL` would have no series before its
    // first failure. The match has no wildcard: a new class does not compile
    // until it is placed here, and the count then asks for it in ALL.
    let listed = |c: FailureClass| match c {
        FailureClass::OutOfStock
        | FailureClass::ServerStatus
        | FailureClass::ServerGone
        | FailureClass::Deadline
        | FailureClass::MaintenanceNeverUp
        | FailureClass::ImageAttempts
        | FailureClass::Image
        | FailureClass::Api
        | FailureClass::PrivateNetwork
        | FailureClass::Rescue
        | FailureClass::HostKey
        | FailureClass::Config
        | FailureClass::Internal => 1,
    };
    assert_eq!(
        FailureClass::ALL.iter().map(|c| listed(*c)).sum::<usize>(),
        13
    );
    let outcomes: Vec<&str> = crate::install::InstallEngine::outcomes().collect();
    let unique: std::collections::BTreeSet<&str> = outcomes.iter().copied().collect();
    assert_eq!(unique.len(), outcomes.len(), "{outcomes:?}");
    assert_eq!(outcomes.len(), 2 + FailureClass::ALL.len());
    assert!(unique.contains("joined") && unique.contains("standby") && unique.contains("host_key"));
}

#[path = "machine_network_tests.rs"]
mod network;
