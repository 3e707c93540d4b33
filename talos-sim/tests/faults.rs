//! The injected faults (`/_talossim/faults`) and what each does to a
//! server, over real sockets: the admin API, rescue SSH running the
//! provider's write and verify commands, and the boot into maintenance mode.

mod common;

use std::net::{Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use common::*;
use sha2::{Digest, Sha256};
use talos_sim::image::{Compression, hex};
use talos_sim::manager::Simulator;
use talos_sim::model::{BootType, Command};
use talos_sim::os::Settings;
use talos_sim::records::OsState;
use tower::ServiceExt;

const SSH_PORT: u16 = 2223;
const TALOS_PORT: u16 = 50001;
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

/// Calls the admin API in-process; returns the status and the JSON body.
async fn admin(
    sim: &Arc<Simulator>,
    method: Method,
    body: Option<&str>,
) -> (StatusCode, serde_json::Value) {
    let request = Request::builder()
        .method(method)
        .uri("/_talossim/faults")
        .header("content-type", "application/json")
        .body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
        .unwrap();
    let response = talos_sim::admin::app(sim.clone())
        .oneshot(request)
        .await
        .unwrap();
    let status = response.status();
    let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    let json = serde_json::from_slice(&bytes).unwrap_or(serde_json::Value::Null);
    (status, json)
}

async fn arm(sim: &Arc<Simulator>, body: &str) {
    let (status, json) = admin(sim, Method::POST, Some(body)).await;
    assert_eq!(status, StatusCode::CREATED, "{json}");
}

async fn fired(sim: &Arc<Simulator>) -> Vec<u64> {
    let (_, json) = admin(sim, Method::GET, None).await;
    json.as_array()
        .unwrap()
        .iter()
        .map(|f| f["fired"].as_u64().unwrap())
        .collect()
}

fn write_command(url: &str, decompress: &str, dev: &str) -> String {
    format!(
        "set -o pipefail; curl -fsSL '{url}'{decompress} | dd bs=4M iflag=fullblock | sudo tee {dev} | sha256sum"
    )
}

fn verify_command(dev: &str, bytes: u64) -> String {
    format!("sudo dd if={dev} bs=4M iflag=direct,count_bytes count={bytes} status=none | sha256sum")
}

fn hash_line(data: &[u8]) -> String {
    format!("{}  -\n", hex(&Sha256::digest(data)))
}

/// A server in rescue with an SSH session, and the image server.
struct Rescue {
    sim: Arc<Simulator>,
    ssh: Ssh,
    key: russh::keys::PrivateKey,
    ip: Ipv4Addr,
    http: SocketAddr,
    raw: Vec<u8>,
    _dir: tempfile::TempDir,
}

async fn rescue(id: &str, ip: Ipv4Addr, faults: &[&str]) -> Rescue {
    let dir = tempfile::tempdir().unwrap();
    let sim = simulator(&dir);
    for f in faults {
        arm(&sim, f).await;
    }
    let raw = image("v1.13.9", IMAGE, Compression::None);
    let http = serve_files(vec![
        (
            "/metal-amd64.raw.xz",
            image("v1.13.9", IMAGE, Compression::Xz),
        ),
        ("/metal-amd64.raw", raw.clone()),
    ])
    .await;
    let key = keypair();
    sim.apply(power_on(
        id,
        BootType::Rescue,
        ip,
        vec![authorized_line(&key)],
        &offer("NVMe", DISK),
    ))
    .await;
    let ssh = ssh(SocketAddr::from((ip, SSH_PORT)), "rescue", &key)
        .await
        .unwrap()
        .expect("key accepted");
    Rescue {
        sim,
        ssh,
        key,
        ip,
        http,
        raw,
        _dir: dir,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fault_api_arms_lists_and_clears() {
    let dir = tempfile::tempdir().unwrap();
    let sim = simulator(&dir);
    let (status, json) = admin(
        &sim,
        Method::POST,
        Some(r#"{"kind":"corrupt_write","server_id":"srv-1","count":3}"#),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(json["kind"], "corrupt_write");
    assert_eq!(json["server_id"], "srv-1");
    assert_eq!(
        (json["count"].as_u64(), json["fired"].as_u64()),
        (Some(3), Some(0))
    );
    arm(&sim, r#"{"kind":"never_ready"}"#).await;
    let (status, json) = admin(&sim, Method::GET, None).await;
    assert_eq!(status, StatusCode::OK);
    let kinds: Vec<&str> = json
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, vec!["corrupt_write", "never_ready"]);
    assert_eq!(json[1]["count"], 1, "count defaults to 1");

    for bad in [
        r#"{"kind":"explode"}"#,
        r#"{"kind":"never_ready","count":0}"#,
        r#"{"kind":"never_ready","colour":"red"}"#,
        "not json",
    ] {
        let (status, json) = admin(&sim, Method::POST, Some(bad)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
        assert!(json["message"].is_string(), "{bad}: {json}");
    }

    let (status, _) = admin(&sim, Method::DELETE, None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert!(fired(&sim).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ssh_drop_during_dd_cuts_the_session_half_way_and_the_server_stays_reachable() {
    let r = rescue(
        "srv-drop",
        Ipv4Addr::new(127, 94, 0, 10),
        &[r#"{"kind":"ssh_drop_during_dd","server_id":"srv-drop"}"#],
    )
    .await;
    let url = format!("http://{}/metal-amd64.raw.xz", r.http);
    let write = write_command(&url, " | xz -d", "/dev/nvme0n1");
    // The session dies without an exit status.
    match r.ssh.exec(&write).await {
        Err(_) => {}
        Ok(out) => assert_eq!(out.status, None, "{out:?}"),
    }
    assert_eq!(fired(&r.sim).await, vec![1]);
    assert!(r.ssh.exec("true").await.is_err(), "the old session is gone");

    // What landed: the first half of the image, nothing after it.
    let again = ssh(SocketAddr::from((r.ip, SSH_PORT)), "rescue", &r.key)
        .await
        .unwrap()
        .expect("the server is reachable again");
    let half = IMAGE / 2;
    let out = again
        .exec(&verify_command("/dev/nvme0n1", half))
        .await
        .unwrap();
    assert_eq!(
        String::from_utf8(out.stdout).unwrap(),
        hash_line(&r.raw[..half as usize])
    );
    let out = again
        .exec(&verify_command("/dev/nvme0n1", IMAGE))
        .await
        .unwrap();
    assert_ne!(String::from_utf8(out.stdout).unwrap(), hash_line(&r.raw));

    // Spent: the retry writes the whole image.
    let out = again.exec(&write).await.unwrap();
    assert_eq!(out.status, Some(0), "{}", out.stderr);
    assert_eq!(String::from_utf8(out.stdout).unwrap(), hash_line(&r.raw));
    assert_eq!(fired(&r.sim).await, vec![1]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_download_breaks_xz_and_spoils_a_raw_image() {
    let r = rescue(
        "srv-dl",
        Ipv4Addr::new(127, 94, 0, 11),
        &[r#"{"kind":"corrupt_download","count":2}"#],
    )
    .await;
    let xz = format!("http://{}/metal-amd64.raw.xz", r.http);
    let out = r
        .ssh
        .exec(&write_command(&xz, " | xz -d", "/dev/nvme0n1"))
        .await
        .unwrap();
    assert_ne!(out.status, Some(0), "{}", out.stderr);
    assert!(out.stderr.contains("xz: "), "{}", out.stderr);

    let raw = format!("http://{}/metal-amd64.raw", r.http);
    let out = r
        .ssh
        .exec(&write_command(&raw, "", "/dev/nvme0n1"))
        .await
        .unwrap();
    assert_eq!(out.status, Some(0), "{}", out.stderr);
    let stream = String::from_utf8(out.stdout).unwrap();
    assert_ne!(stream, hash_line(&r.raw), "the body must arrive corrupt");
    // What was written is what was received.
    let out = r
        .ssh
        .exec(&verify_command("/dev/nvme0n1", IMAGE))
        .await
        .unwrap();
    assert_eq!(String::from_utf8(out.stdout).unwrap(), stream);
    assert_eq!(fired(&r.sim).await, vec![2]);

    let out = r
        .ssh
        .exec(&write_command(&raw, "", "/dev/nvme0n1"))
        .await
        .unwrap();
    assert_eq!(String::from_utf8(out.stdout).unwrap(), hash_line(&r.raw));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn corrupt_write_makes_the_read_back_differ_from_the_stream() {
    let r = rescue(
        "srv-wr",
        Ipv4Addr::new(127, 94, 0, 12),
        &[r#"{"kind":"corrupt_write","server_id":"srv-wr"}"#],
    )
    .await;
    let url = format!("http://{}/metal-amd64.raw.xz", r.http);
    let write = write_command(&url, " | xz -d", "/dev/nvme0n1");
    let out = r.ssh.exec(&write).await.unwrap();
    assert_eq!(out.status, Some(0), "{}", out.stderr);
    assert_eq!(String::from_utf8(out.stdout).unwrap(), hash_line(&r.raw));
    let verify = verify_command("/dev/nvme0n1", IMAGE);
    let out = r.ssh.exec(&verify).await.unwrap();
    assert_eq!(out.status, Some(0), "{}", out.stderr);
    assert_ne!(String::from_utf8(out.stdout).unwrap(), hash_line(&r.raw));
    assert_eq!(fired(&r.sim).await, vec![1]);

    r.ssh.exec(&write).await.unwrap();
    let out = r.ssh.exec(&verify).await.unwrap();
    assert_eq!(String::from_utf8(out.stdout).unwrap(), hash_line(&r.raw));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn maintenance_never_up_keeps_the_talos_api_closed_for_one_boot() {
    let r = rescue(
        "srv-mnt",
        Ipv4Addr::new(127, 94, 0, 13),
        &[r#"{"kind":"maintenance_never_up","server_id":"srv-mnt"}"#],
    )
    .await;
    let url = format!("http://{}/metal-amd64.raw.xz", r.http);
    let out = r
        .ssh
        .exec(&write_command(&url, " | xz -d", "/dev/nvme0n1"))
        .await
        .unwrap();
    assert_eq!(out.status, Some(0), "{}", out.stderr);
    let offer = offer("NVMe", DISK);
    let talos_addr = SocketAddr::from((r.ip, TALOS_PORT));
    let boot = |sim: Arc<Simulator>| {
        let offer = offer.clone();
        async move {
            sim.apply(Command::PowerOff {
                server_id: "srv-mnt".into(),
                cause: None,
            })
            .await;
            sim.apply(power_on("srv-mnt", BootType::Normal, r.ip, vec![], &offer))
                .await;
        }
    };

    boot(r.sim.clone()).await;
    let record = wait_for(
        "the hung boot",
        || r.sim.records(),
        |r| {
            r.boot_error
                .as_deref()
                .is_some_and(|e| e.contains("maintenance_never_up"))
        },
    )
    .await;
    assert_ne!(record.state, OsState::Maintenance);
    // A good image, yet nothing listens.
    assert_eq!(record.disk.image_version.as_deref(), Some("v1.13.9"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(tokio::net::TcpStream::connect(talos_addr).await.is_err());
    assert_eq!(fired(&r.sim).await, vec![1]);

    boot(r.sim.clone()).await;
    wait_for(
        "maintenance mode on the next boot",
        || r.sim.records(),
        |r| r.state == OsState::Maintenance,
    )
    .await;
    assert!(tokio::net::TcpStream::connect(talos_addr).await.is_ok());
}
