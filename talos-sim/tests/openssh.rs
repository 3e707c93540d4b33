//! The rescue system through OpenSSH's own `ssh` client, not ours: key
//! authentication with the key emsim attached, the install flow's commands
//! with their real output formats, and the exit codes of anything else.
//! `hack/bootstrap.sh` installs `openssh-client` where it is missing.

mod common;

use std::net::Ipv4Addr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::Duration;

use common::*;
use russh::keys::PrivateKey;
use sha2::{Digest, Sha256};
use talos_sim::image::{Compression, hex};
use talos_sim::manager::Simulator;
use talos_sim::model::BootType;
use talos_sim::os::Settings;

const SSH_PORT: u16 = 2222;
const DISK: u64 = 64 << 20;
const IMAGE: u64 = 8 << 20;

struct Output {
    status: i32,
    stdout: String,
    stderr: String,
}

/// Runs `command` on the rescue system with OpenSSH, non-interactively.
async fn openssh(key: &Path, user: &str, ip: Ipv4Addr, command: &str) -> Output {
    let mut cmd = tokio::process::Command::new("ssh");
    cmd.args(["-i"])
        .arg(key)
        .args([
            "-p",
            &SSH_PORT.to_string(),
            "-o",
            "BatchMode=yes",
            "-o",
            "IdentitiesOnly=yes",
            "-o",
            "StrictHostKeyChecking=no",
            "-o",
            "UserKnownHostsFile=/dev/null",
            "-o",
            "LogLevel=ERROR",
            "-o",
            "ConnectTimeout=10",
            "-F",
            "/dev/null",
        ])
        .arg(format!("{user}@{ip}"))
        .arg(command)
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let out = tokio::time::timeout(Duration::from_secs(60), cmd.output())
        .await
        .expect("ssh finished within 60 s")
        .expect("the `ssh` binary runs (hack/bootstrap.sh installs openssh-client)");
    Output {
        status: out.status.code().expect("ssh exited"),
        stdout: String::from_utf8(out.stdout).expect("UTF-8 stdout"),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    }
}

/// The private key in OpenSSH's file format, readable by its owner only
/// (ssh refuses other modes).
fn key_file(dir: &Path, name: &str, key: &PrivateKey) -> PathBuf {
    let path = dir.join(name);
    let pem = key
        .to_openssh(russh::keys::ssh_key::LineEnding::LF)
        .expect("OpenSSH private key encoding");
    std::fs::write(&path, pem.as_bytes()).expect("write key");
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
    path
}

fn simulator(dir: &Path) -> Arc<Simulator> {
    talos_sim::install_crypto_provider();
    Simulator::new(Settings {
        ssh_port: SSH_PORT,
        kubelet: false,
        // The reply to ApplyConfiguration must leave before the "reboot"
        // drops the connection: room for a loaded machine.
        install_delay: Duration::from_secs(1),
        ..Settings::new(dir.join("state"))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openssh_runs_the_install_flow_on_the_rescue_system() {
    let dir = tempfile::tempdir().unwrap();
    let sim = simulator(dir.path());
    let ip = Ipv4Addr::new(127, 93, 6, 10);
    let (key, other) = (keypair(), keypair());
    let key_path = key_file(dir.path(), "id_ed25519", &key);
    let other_path = key_file(dir.path(), "other", &other);
    sim.apply(power_on(
        "srv-openssh",
        BootType::Rescue,
        ip,
        vec![authorized_line(&key)],
        &offer("NVMe", DISK),
    ))
    .await;

    // Key authentication: only the attached key, only the rescue user.
    let refused = openssh(&other_path, "rescue", ip, "true").await;
    assert_eq!(refused.status, 255, "{}", refused.stderr);
    assert!(
        refused.stderr.contains("Permission denied"),
        "{}",
        refused.stderr
    );
    let wrong_user = openssh(&key_path, "root", ip, "true").await;
    assert_eq!(wrong_user.status, 255, "{}", wrong_user.stderr);

    let out = openssh(&key_path, "rescue", ip, "lsblk -dno NAME,TYPE").await;
    assert_eq!(
        (out.status, out.stdout.as_str()),
        (0, "nvme0n1 disk\n"),
        "{}",
        out.stderr
    );

    let out = openssh(&key_path, "rescue", ip, "ip -o link").await;
    assert_eq!(out.status, 0, "{}", out.stderr);
    let lines: Vec<&str> = out.stdout.lines().collect();
    assert!(lines.len() >= 2, "{}", out.stdout);
    assert!(
        lines[0].starts_with("1: lo: <LOOPBACK,UP,LOWER_UP>"),
        "{}",
        lines[0]
    );
    assert!(
        lines[1..].iter().any(|l| l.contains("link/ether ")),
        "an Ethernet link with its MAC: {}",
        out.stdout
    );

    // The write of contracts.md: stream hash on stdout, dd's status on stderr.
    let raw = image("v1.13.9", IMAGE, Compression::None);
    let http = serve_files(vec![(
        "/v1.13.9/metal-amd64.raw.xz",
        image("v1.13.9", IMAGE, Compression::Xz),
    )])
    .await;
    let write = format!(
        "set -o pipefail; curl -fsSL 'http://{http}/v1.13.9/metal-amd64.raw.xz' | xz -d | dd bs=4M iflag=fullblock | sudo tee /dev/nvme0n1 | sha256sum"
    );
    let out = openssh(&key_path, "rescue", ip, &write).await;
    assert_eq!(out.status, 0, "{}", out.stderr);
    let digest = hex(&Sha256::digest(&raw));
    assert_eq!(out.stdout, format!("{digest}  -\n"));
    let status: Vec<&str> = out.stderr.lines().collect();
    assert_eq!(status.len(), 3, "dd's three status lines: {}", out.stderr);
    assert_eq!(status[0], "2+0 records in");
    assert_eq!(status[1], "2+0 records out");
    assert!(
        status[2].starts_with("8388608 bytes (8.4 MB, 8.0 MiB) copied, "),
        "{}",
        status[2]
    );

    let out = openssh(&key_path, "rescue", ip, "sudo sync").await;
    assert_eq!(out.status, 0, "{}", out.stderr);
    let verify = format!(
        "sudo dd if=/dev/nvme0n1 bs=4M iflag=direct,count_bytes count={IMAGE} status=none | sha256sum"
    );
    let out = openssh(&key_path, "rescue", ip, &verify).await;
    assert_eq!(
        (out.status, out.stdout.clone()),
        (0, format!("{digest}  -\n")),
        "{}",
        out.stderr
    );
    assert_eq!(out.stderr, "");

    // Anything else: "command not found" (127), and failures keep their codes.
    let out = openssh(&key_path, "rescue", ip, "apt-get install -y nmap").await;
    assert_eq!(out.status, 127, "{}", out.stderr);
    assert!(
        out.stderr.contains("apt-get: command not found"),
        "{}",
        out.stderr
    );
    let out = openssh(&key_path, "rescue", ip, "sh -c 'exit 3'").await;
    assert_ne!(out.status, 0, "{}", out.stderr);
    let out = openssh(
        &key_path,
        "rescue",
        ip,
        "dd if=/dev/sdz of=/dev/null count=1",
    )
    .await;
    assert_ne!(out.status, 0);
    assert!(!out.stderr.is_empty(), "a failing command says why");
    let out = openssh(
        &key_path,
        "rescue",
        ip,
        &format!("set -o pipefail; curl -fsSL 'http://{http}/missing.raw.xz' | xz -d | sha256sum"),
    )
    .await;
    assert_ne!(out.status, 0, "a 404 download fails the pipeline");
}
