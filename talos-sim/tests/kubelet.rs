//! The kubelet stand-in's TLS bootstrap and the `never_ready` fault against
//! the fake API server of `common::apiserver`.

mod common;

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use common::apiserver::{GOOD_TOKEN, fake_apiserver};
use common::*;
use talos_sim::disk::Disk;
use talos_sim::image::Compression;
use talos_sim::manager::Simulator;
use talos_sim::model::{BootType, Command};
use talos_sim::os::Settings;
use talos_sim::records::OsState;

const DISK: u64 = 64 << 20;

/// A server whose disk holds a good image and an installed config pointing
/// at `url` with `token`: a normal boot goes straight to the kubelet.
fn installed(
    dir: &tempfile::TempDir,
    id: &str,
    url: &str,
    ca_pem: &str,
    token: &str,
) -> Arc<Simulator> {
    let disk = Disk::new(dir.path(), id, "nvme0n1", DISK);
    disk.ensure().unwrap();
    let img = image("v1.13.9", 8 << 20, Compression::None);
    let mut bytes = std::fs::read(&disk.path).unwrap();
    bytes[..img.len()].copy_from_slice(&img);
    std::fs::write(&disk.path, bytes).unwrap();
    let yaml = WORKER_YAML
        .replace("https://127.0.0.1:6443", url)
        .replace("token: k8sabc.0123456789abcdef", &format!("token: {token}"))
        .replace(
            "  ca:\n    crt: LS0tLS1CRUdJTi==\n    key: \"\"\n---",
            &format!("  ca:\n    crt: {}\n    key: \"\"\n---", B64.encode(ca_pem)),
        );
    assert!(
        yaml.contains(url) && yaml.contains(token),
        "fixture changed"
    );
    disk.install_config(&yaml).unwrap();
    Simulator::new(Settings {
        ssh_port: 2224,
        talos_port: 50002,
        ..Settings::new(dir.path())
    })
}

async fn boot(sim: &Simulator, id: &str, ip: Ipv4Addr) {
    sim.apply(Command::PowerOff {
        server_id: id.into(),
        cause: None,
    })
    .await;
    sim.apply(power_on(
        id,
        BootType::Normal,
        ip,
        vec![],
        &offer("NVMe", DISK),
    ))
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kubelet_joins_through_a_csr_and_never_ready_keeps_it_not_ready() {
    let ip = Ipv4Addr::new(127, 94, 0, 20);
    let (fake, url, ca_pem) = fake_apiserver(Ipv4Addr::new(127, 94, 0, 50)).await;
    let dir = tempfile::tempdir().unwrap();
    let sim = installed(&dir, "srv-k", &url, &ca_pem, GOOD_TOKEN);
    sim.faults()
        .add(serde_json::from_str(r#"{"kind":"never_ready","server_id":"srv-k"}"#).unwrap())
        .unwrap();

    boot(&sim, "srv-k", ip).await;
    let record = wait_for(
        "the node to join",
        || sim.records(),
        |r| r.state == OsState::Running,
    )
    .await;
    assert_eq!(record.node_name.as_deref(), Some("default-abcde"));
    assert!(record.boot_error.unwrap().contains("never_ready"));
    wait_until("a status report", || {
        !fake.seen.lock().unwrap().ready_statuses.is_empty()
    })
    .await;
    {
        let seen = fake.seen.lock().unwrap();
        let (subject, signer, usages) = seen.csrs.values().next().unwrap().clone();
        assert_eq!(
            subject,
            "OrganizationName=system:nodes,CommonName=system:node:default-abcde"
        );
        assert_eq!(signer, "kubernetes.io/kube-apiserver-client-kubelet");
        assert_eq!(usages, vec!["digital signature", "client auth"]);
        assert_eq!(seen.node_creates, 1);
        assert_eq!(
            seen.node_calls_with_token, 0,
            "the node acts with its certificate"
        );
        assert!(
            seen.ready_statuses.iter().all(|s| s == "False"),
            "{:?}",
            seen.ready_statuses
        );
    }
    let pki = dir.path().join("disks/srv-k.kubelet-client.pem");
    assert!(
        std::fs::read_to_string(&pki)
            .unwrap()
            .contains("BEGIN CERTIFICATE")
    );
    assert_eq!(sim.faults().list()[0].fired, 1);

    // A reboot keeps the certificate (no new CSR) and, the fault spent,
    // reports Ready.
    fake.seen.lock().unwrap().ready_statuses.clear();
    boot(&sim, "srv-k", ip).await;
    wait_until("a Ready report", || {
        fake.seen
            .lock()
            .unwrap()
            .ready_statuses
            .iter()
            .any(|s| s == "True")
    })
    .await;
    let seen = fake.seen.lock().unwrap();
    assert_eq!(seen.csrs.len(), 1);
    // The Node is still there: the kubelet adopts it, as a real one does.
    assert_eq!(seen.node_creates, 1);
    assert_eq!(seen.node_patches.len(), 1, "adopted once");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_the_cluster_rejects_fails_the_join() {
    let ip = Ipv4Addr::new(127, 94, 0, 21);
    let (fake, url, ca_pem) = fake_apiserver(Ipv4Addr::new(127, 94, 0, 51)).await;
    let dir = tempfile::tempdir().unwrap();
    let sim = installed(&dir, "srv-bad", &url, &ca_pem, "zzz999.ffffffffffffffff");

    boot(&sim, "srv-bad", ip).await;
    let record = wait_for(
        "the rejected join",
        || sim.records(),
        |r| {
            r.boot_error
                .as_deref()
                .is_some_and(|e| e.contains("rejected the bootstrap token"))
        },
    )
    .await;
    assert_eq!(record.state, OsState::Configured);
    assert_eq!(record.node_name, None);
    // Retried, never getting further.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    {
        let seen = fake.seen.lock().unwrap();
        assert!(seen.csrs.is_empty());
        assert_eq!(seen.node_creates, 0);
    }
    assert!(!dir.path().join("disks/srv-bad.kubelet-client.pem").exists());
    let record = sim.records().await.remove(0);
    assert_eq!(record.state, OsState::Configured);
}
