//! A server's life through talos-sim over real sockets: rescue SSH, the
//! image written with `curl | xz -d | dd`, a normal boot that verifies it,
//! and Talos' maintenance API over TLS.

mod common;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use common::*;
use sha2::{Digest, Sha256};
use talos_sim::image::{Compression, HEADER_LEN, ImageHeader, hex};
use talos_sim::manager::Simulator;
use talos_sim::model::{BootType, Command};
use talos_sim::os::Settings;
use talos_sim::proto::ApplyConfigurationRequest;
use talos_sim::proto::apply_configuration_request::Mode;
use talos_sim::records::OsState;

const SSH_PORT: u16 = 2222;
const TALOS_PORT: u16 = 50000;
const DISK: u64 = 64 << 20;
const IMAGE: u64 = 8 << 20;

fn simulator(dir: &tempfile::TempDir) -> Arc<Simulator> {
    talos_sim::install_crypto_provider();
    Simulator::new(Settings {
        ssh_port: SSH_PORT,
        talos_port: TALOS_PORT,
        kubelet: false,
        // The reply to ApplyConfiguration must leave before the "reboot"
        // drops the connection: room for a loaded machine.
        install_delay: Duration::from_secs(1),
        ..Settings::new(dir.path())
    })
}

fn ssh_addr(ip: Ipv4Addr) -> SocketAddr {
    SocketAddr::from((ip, SSH_PORT))
}

fn talos_addr(ip: Ipv4Addr) -> SocketAddr {
    SocketAddr::from((ip, TALOS_PORT))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rescue_install_boot_and_apply_configuration() {
    let dir = tempfile::tempdir().unwrap();
    let sim = simulator(&dir);
    let xz = image("v1.13.9", IMAGE, Compression::Xz);
    let raw = image("v1.13.9", IMAGE, Compression::None);
    let header = ImageHeader::parse(&raw[..HEADER_LEN]).unwrap();
    let http = serve_files(vec![("/v1.13.9/metal-amd64.raw.xz", xz)]).await;
    let ip = Ipv4Addr::new(127, 93, 0, 10);
    let key = keypair();
    let offer = offer("NVMe", DISK);

    sim.apply(power_on(
        "srv-a",
        BootType::Rescue,
        ip,
        vec![authorized_line(&key)],
        &offer,
    ))
    .await;
    let rescue = ssh(ssh_addr(ip), "rescue", &key)
        .await
        .unwrap()
        .expect("key accepted");
    let out = rescue.exec("lsblk -b -dno NAME,SIZE,TYPE").await.unwrap();
    assert_eq!(
        (out.status, String::from_utf8(out.stdout).unwrap()),
        (Some(0), format!("nvme0n1 {DISK} disk\n"))
    );

    let install = format!(
        "set -o pipefail; curl -fsSL http://{http}/v1.13.9/metal-amd64.raw.xz | xz -d | sudo dd of=/dev/nvme0n1 bs=4M oflag=direct conv=fsync status=progress"
    );
    let out = rescue.exec(&install).await.unwrap();
    assert_eq!(out.status, Some(0), "{}", out.stderr);
    assert!(out.stderr.contains(" records in\n"), "{}", out.stderr);
    assert!(
        out.stderr
            .contains("8388608 bytes (8.4 MB, 8.0 MiB) copied, "),
        "{}",
        out.stderr
    );

    let out = rescue
        .exec(&format!("sudo head -c {IMAGE} /dev/nvme0n1 | sha256sum"))
        .await
        .unwrap();
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        format!("{}  -\n", hex(&Sha256::digest(&raw)))
    );
    let out = rescue.exec("sync").await.unwrap();
    assert_eq!(out.status, Some(0));

    // Reboot: the rescue system goes away with its connections.
    sim.apply(Command::PowerOff {
        server_id: "srv-a".into(),
        cause: None,
    })
    .await;
    assert!(
        rescue.exec("true").await.is_err(),
        "the open SSH session must be dropped"
    );
    assert!(
        tokio::net::TcpStream::connect(ssh_addr(ip)).await.is_err(),
        "SSH must be down after power_off"
    );

    sim.apply(power_on("srv-a", BootType::Normal, ip, vec![], &offer))
        .await;
    let record = wait_for(
        "maintenance mode",
        || sim.records(),
        |r| r.state == OsState::Maintenance,
    )
    .await;
    assert_eq!(record.disk.image_version.as_deref(), Some("v1.13.9"));
    assert_eq!(
        record.disk.image_sha256.as_deref(),
        Some(header.payload_sha256.as_str())
    );

    let mut talos = talos(talos_addr(ip)).await.unwrap();
    let version = talos.version(()).await.unwrap().into_inner();
    assert_eq!(version.messages[0].version.as_ref().unwrap().tag, "v1.13.9");

    let bad = WORKER_YAML.replace("type: worker", "type: controlplane");
    let err = talos
        .apply_configuration(ApplyConfigurationRequest {
            data: bad.into_bytes(),
            mode: Mode::Auto as i32,
            ..Default::default()
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(
        err.message()
            .starts_with("1 error occurred:\n\t* talos-sim only simulates worker machines"),
        "{}",
        err.message()
    );

    let reply = talos
        .apply_configuration(ApplyConfigurationRequest {
            data: WORKER_YAML.as_bytes().to_vec(),
            mode: Mode::Auto as i32,
            ..Default::default()
        })
        .await
        .unwrap()
        .into_inner();
    assert_eq!(reply.messages.len(), 1);
    assert_eq!(reply.messages[0].mode, Mode::NoReboot as i32);
    assert_eq!(
        reply.messages[0].mode_details,
        "Applied configuration without a reboot"
    );
    assert_eq!(
        reply.messages[0].metadata.as_ref().unwrap().hostname,
        ip.to_string()
    );

    // "Install and reboot": the maintenance API closes, the node is configured
    // (its kubelet is off in this simulator: there is no cluster to join).
    let record = wait_for(
        "configured",
        || sim.records(),
        |r| r.state == OsState::Configured,
    )
    .await;
    for _ in 0..50 {
        if tokio::net::TcpStream::connect(talos_addr(ip))
            .await
            .is_err()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(
        tokio::net::TcpStream::connect(talos_addr(ip))
            .await
            .is_err(),
        "maintenance API must be gone"
    );
    assert_eq!(record.applied_configs.len(), 1);
    assert_eq!(record.applied_configs[0].mode, "AUTO");
    assert_eq!(record.applied_configs[0].yaml, WORKER_YAML);
    assert_eq!(record.rescue_sessions, 1);
    assert_eq!(record.commands[0], "lsblk -b -dno NAME,SIZE,TYPE");
    assert_eq!(record.commands[1], install);
    assert!(
        record
            .boot_error
            .as_deref()
            .unwrap()
            .contains("kubelet not started")
    );

    // A power cycle boots the installed system, not maintenance mode.
    sim.apply(Command::PowerOff {
        server_id: "srv-a".into(),
        cause: None,
    })
    .await;
    sim.apply(power_on("srv-a", BootType::Normal, ip, vec![], &offer))
        .await;
    wait_for(
        "configured again",
        || sim.records(),
        |r| r.state == OsState::Configured,
    )
    .await;
    assert!(
        tokio::net::TcpStream::connect(talos_addr(ip))
            .await
            .is_err()
    );

    sim.apply(Command::Deleted {
        server_id: "srv-a".into(),
    })
    .await;
    let record = sim.records().await.remove(0);
    assert!(record.deleted);
    assert_eq!(record.state, OsState::Off);
    assert!(
        !std::path::Path::new(&record.disk.path).exists(),
        "disk file must be wiped"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blank_and_corrupt_disks_do_not_boot() {
    let dir = tempfile::tempdir().unwrap();
    let sim = simulator(&dir);
    let zst = image("v1.13.9", 1 << 20, Compression::Zstd);
    let http = serve_files(vec![("/metal-amd64.raw.zst", zst)]).await;
    let ip = Ipv4Addr::new(127, 93, 0, 11);
    let key = keypair();
    let offer = offer("SSD", 8 << 20);

    sim.apply(power_on("srv-b", BootType::Normal, ip, vec![], &offer))
        .await;
    let record = wait_for(
        "blank disk",
        || sim.records(),
        |r| r.state == OsState::NoBootableDevice,
    )
    .await;
    assert_eq!(
        record.boot_error.as_deref(),
        Some("no bootable device: the disk is blank")
    );
    assert!(
        tokio::net::TcpStream::connect(talos_addr(ip))
            .await
            .is_err()
    );

    sim.apply(Command::PowerOff {
        server_id: "srv-b".into(),
        cause: None,
    })
    .await;
    sim.apply(power_on(
        "srv-b",
        BootType::Rescue,
        ip,
        vec![authorized_line(&key)],
        &offer,
    ))
    .await;
    let rescue = ssh(ssh_addr(ip), "rescue", &key).await.unwrap().unwrap();
    let out = rescue
        .exec(&format!("curl -fsSL http://{http}/metal-amd64.raw.zst | zstd -dc | dd of=/dev/sda bs=4M && dd if=/dev/zero of=/dev/sda bs=1 seek=5000 count=1 status=none"))
        .await
        .unwrap();
    assert_eq!(out.status, Some(0), "{}", out.stderr);
    sim.apply(Command::PowerOff {
        server_id: "srv-b".into(),
        cause: None,
    })
    .await;
    sim.apply(power_on("srv-b", BootType::Normal, ip, vec![], &offer))
        .await;
    let record = wait_for(
        "corrupt disk",
        || sim.records(),
        |r| r.state == OsState::NoBootableDevice,
    )
    .await;
    assert!(
        record
            .boot_error
            .unwrap()
            .contains("does not match the header's")
    );

    // A server deleted while talos-sim did not know it (restart): its disk
    // file from an earlier run is removed too.
    let ghost = dir.path().join("disks/srv-ghost.img");
    std::fs::write(&ghost, b"old disk").unwrap();
    sim.apply(Command::Deleted {
        server_id: "srv-ghost".into(),
    })
    .await;
    assert!(!ghost.exists());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failing_downloads_fail_the_pipeline_only_with_pipefail() {
    let dir = tempfile::tempdir().unwrap();
    let sim = simulator(&dir);
    let http = serve_files(vec![]).await;
    let ip = Ipv4Addr::new(127, 93, 0, 12);
    let key = keypair();
    sim.apply(power_on(
        "srv-c",
        BootType::Rescue,
        ip,
        vec![authorized_line(&key)],
        &offer("NVMe", 8 << 20),
    ))
    .await;
    let rescue = ssh(ssh_addr(ip), "rescue", &key).await.unwrap().unwrap();

    let plain = rescue
        .exec(&format!(
            "curl -fsSL http://{http}/missing.raw | dd of=/dev/nvme0n1 bs=4M"
        ))
        .await
        .unwrap();
    assert_eq!(plain.status, Some(0));
    assert!(
        plain
            .stderr
            .contains("curl: (22) The requested URL returned error: 404\n"),
        "{}",
        plain.stderr
    );

    let strict = rescue
        .exec(&format!(
            "set -o pipefail; curl -fsSL http://{http}/missing.raw | dd of=/dev/nvme0n1 bs=4M"
        ))
        .await
        .unwrap();
    assert_eq!(strict.status, Some(22));

    let refused = rescue
        .exec("curl -fsSL http://127.0.0.1:1/x")
        .await
        .unwrap();
    assert_eq!(refused.status, Some(7));
    assert!(
        refused
            .stderr
            .starts_with("curl: (7) Failed to connect to 127.0.0.1 port 1 after "),
        "{}",
        refused.stderr
    );

    let unknown = rescue.exec("parted -s /dev/nvme0n1 print").await.unwrap();
    assert_eq!(
        (unknown.status, unknown.stderr.as_str()),
        (Some(127), "sh: parted: command not found\n")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rescue_ssh_accepts_exactly_the_listed_keys_for_the_rescue_user() {
    let dir = tempfile::tempdir().unwrap();
    let sim = simulator(&dir);
    let ip = Ipv4Addr::new(127, 93, 0, 13);
    let (allowed, other) = (keypair(), keypair());
    let keys = vec![
        authorized_line(&allowed),
        "ssh-ed25519 not-base64 broken".to_string(),
    ];
    sim.apply(power_on(
        "srv-d",
        BootType::Rescue,
        ip,
        keys,
        &offer("NVMe", 8 << 20),
    ))
    .await;

    assert!(
        ssh(ssh_addr(ip), "rescue", &other).await.unwrap().is_none(),
        "unknown key must be refused"
    );
    assert!(
        ssh(ssh_addr(ip), "root", &allowed).await.unwrap().is_none(),
        "other users must be refused"
    );
    let session = ssh(ssh_addr(ip), "rescue", &allowed)
        .await
        .unwrap()
        .expect("listed key accepted");
    let out = session.exec("ip -o link | head -n 1").await.unwrap();
    assert!(
        String::from_utf8(out.stdout)
            .unwrap()
            .starts_with("1: lo: <LOOPBACK,UP,LOWER_UP>")
    );
    let record = sim.records().await.remove(0);
    assert_eq!(record.rescue_sessions, 1);
    assert_eq!(record.state, OsState::Rescue);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_servers_run_side_by_side() {
    let dir = tempfile::tempdir().unwrap();
    let sim = simulator(&dir);
    let key = keypair();
    let (a, b) = (Ipv4Addr::new(127, 93, 0, 14), Ipv4Addr::new(127, 93, 0, 15));
    sim.apply(power_on(
        "srv-e",
        BootType::Rescue,
        a,
        vec![authorized_line(&key)],
        &offer("NVMe", 8 << 20),
    ))
    .await;
    sim.apply(power_on(
        "srv-f",
        BootType::Rescue,
        b,
        vec![authorized_line(&key)],
        &offer("HDD", 16 << 20),
    ))
    .await;
    let (sa, sb) = (
        ssh(ssh_addr(a), "rescue", &key).await.unwrap().unwrap(),
        ssh(ssh_addr(b), "rescue", &key).await.unwrap().unwrap(),
    );
    let (oa, ob) = tokio::join!(sa.exec("lsblk -dno NAME"), sb.exec("lsblk -dno NAME"));
    assert_eq!(oa.unwrap().stdout, b"nvme0n1\n");
    assert_eq!(ob.unwrap().stdout, b"sda\n");

    // A replayed power_on (emsim reconnect) leaves the running system alone.
    sim.apply(power_on(
        "srv-e",
        BootType::Rescue,
        a,
        vec![authorized_line(&key)],
        &offer("NVMe", 8 << 20),
    ))
    .await;
    assert_eq!(sa.exec("true").await.unwrap().status, Some(0));
}
