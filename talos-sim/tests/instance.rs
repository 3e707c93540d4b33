//! Scaleway Instances booted like Talos' `scaleway` platform, on real
//! sockets: the user data from a fake metadata service (emsim's admin
//! endpoint), the kubelet against the fake API server of `common::apiserver`,
//! the maintenance API over TLS.

mod common;

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::sync::{Arc, Mutex, OnceLock};

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use common::apiserver::{GOOD_TOKEN, fake_apiserver};
use common::*;
use serde_json::json;
use talos_sim::instance::listing::AdminVm;
use talos_sim::instance::metadata::Metadata;
use talos_sim::manager::Simulator;
use talos_sim::model::Command;
use talos_sim::os::Settings;
use talos_sim::records::{OsState, ServerRecord, UserDataOutcome};
use talos_sim::validator::ConfigValidator;

const TALOS_PORT: u16 = 50003;

/// User data per server id, for the key `cloud-init` only, and the reads.
#[derive(Default)]
struct MetadataService {
    values: Mutex<BTreeMap<String, Vec<u8>>>,
}

async fn user_data(
    State(m): State<Arc<MetadataService>>,
    Path((id, key)): Path<(String, String)>,
) -> Response {
    match m.values.lock().unwrap().get(&id) {
        Some(value) if key == "cloud-init" => value.clone().into_response(),
        _ => StatusCode::NOT_FOUND.into_response(),
    }
}

async fn metadata_service() -> (Arc<MetadataService>, String) {
    let service = Arc::new(MetadataService::default());
    let app = axum::Router::new()
        .route(
            "/_emsim/instance/servers/{id}/user_data/{key}",
            axum::routing::get(user_data),
        )
        .with_state(service.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (service, url)
}

impl MetadataService {
    fn set(&self, id: &str, value: &str) {
        self.values
            .lock()
            .unwrap()
            .insert(id.into(), value.as_bytes().to_vec());
    }

    fn delete(&self, id: &str) {
        self.values.lock().unwrap().remove(id);
    }
}

fn simulator(
    dir: &tempfile::TempDir,
    metadata_url: &str,
    kubelet: bool,
    validator: Option<ConfigValidator>,
) -> Arc<Simulator> {
    Simulator::new(Settings {
        talos_port: TALOS_PORT,
        kubelet,
        config_validator: validator,
        metadata: Some(Metadata::new(metadata_url).unwrap()),
        ..Settings::new(dir.path())
    })
}

/// The `boot`-th start of a VM as emsim's admin list shows it running.
fn running_vm(id: &str, ip: Ipv4Addr, commercial_type: &str, gpus: u32, boot: usize) -> Command {
    let mut actions = vec![json!({"at": "2026-11-22T10:00:00.000000Z", "action": "create"})];
    actions.extend(
        (0..boot).map(|_| json!({"at": "2026-11-22T10:00:01.000000Z", "action": "reboot"})),
    );
    let gpu_info = (gpus > 0).then(
        || json!({"gpu_manufacturer": "NVIDIA", "gpu_name": "L4", "gpu_memory": 25_769_803_776u64}),
    );
    let vm: AdminVm = serde_json::from_value(json!({
        "id": id, "name": "default-x7k2p", "hostname": "default-x7k2p", "zone": "fr-par-2",
        "state": "running", "arch": "x86_64", "commercial_type": commercial_type,
        "image": {"id": "0b5d7a6c-1f4e-4b7a-9d1b-2a8c3e4f5a6b", "name": "talos-v1.11.5-amd64"},
        "address": ip.to_string(), "actions": actions,
        "hardware": {"ncpus": 8, "ram": 51_539_607_552u64, "gpu": gpus, "gpu_info": gpu_info,
                     "root_volume_size": 20_000_000_000u64},
    }))
    .unwrap();
    Command::PowerOn(Box::new(vm.power_on().unwrap()))
}

/// The worker fixture as the provider would render it for a VM: no
/// providerID and no hostname (Talos takes both from the platform).
fn vm_config(url: &str, ca_pem: &str, token: &str) -> String {
    let yaml = WORKER_YAML
        .replace("https://127.0.0.1:6443", url)
        .replace("token: k8sabc.0123456789abcdef", &format!("token: {token}"))
        .replace(
            "  ca:\n    crt: LS0tLS1CRUdJTi==\n    key: \"\"\n---",
            &format!("  ca:\n    crt: {}\n    key: \"\"\n---", B64.encode(ca_pem)),
        )
        .replace(
            "    extraArgs:\n      provider-id: scaleway://baremetal/fr-par-2/11111111-2222-3333-4444-555555555555\n",
            "",
        )
        .replace(
            "---\napiVersion: v1alpha1\nkind: HostnameConfig\nauto: off\nhostname: default-abcde\n",
            "",
        );
    assert!(
        yaml.contains(url)
            && yaml.contains(token)
            && !yaml.contains("provider-id")
            && !yaml.contains("HostnameConfig"),
        "fixture changed"
    );
    yaml
}

fn outcomes(record: &ServerRecord) -> Vec<UserDataOutcome> {
    record.user_data_reads.iter().map(|r| r.outcome).collect()
}

async fn record(sim: &Simulator, id: &str) -> ServerRecord {
    sim.records()
        .await
        .into_iter()
        .find(|r| r.id == id)
        .expect("a record")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_vm_joins_from_its_user_data_as_the_instance_and_reboots_from_state() {
    let ip = Ipv4Addr::new(127, 95, 0, 20);
    let (fake, url, ca_pem) = fake_apiserver(Ipv4Addr::new(127, 95, 0, 50)).await;
    let (metadata, metadata_url) = metadata_service().await;
    let dir = tempfile::tempdir().unwrap();
    let sim = simulator(&dir, &metadata_url, true, None);
    let yaml = vm_config(&url, &ca_pem, GOOD_TOKEN);
    metadata.set("vm-gpu", &yaml);

    sim.apply(running_vm("vm-gpu", ip, "L4-1-24G", 1, 1)).await;
    let joined = wait_for(
        "the VM to join",
        || sim.records(),
        |r| r.state == OsState::Running,
    )
    .await;
    assert_eq!(joined.platform, "scaleway");
    assert_eq!(
        joined.node_name.as_deref(),
        Some("default-x7k2p"),
        "the server's name"
    );
    assert_eq!(joined.boot_error, None);
    assert_eq!(outcomes(&joined), vec![UserDataOutcome::Accepted]);
    assert_eq!(joined.user_data_reads[0].bytes, yaml.len());
    assert!(joined.applied_configs.is_empty(), "nothing was applied");
    let records = serde_json::to_string(&sim.records().await).unwrap();
    assert!(!records.contains(GOOD_TOKEN), "the token is not recorded");
    assert!(!records.contains("controlPlane"), "nor the config");

    wait_until("a status report", || {
        !fake.seen.lock().unwrap().statuses.is_empty()
    })
    .await;
    {
        let seen = fake.seen.lock().unwrap();
        assert_eq!(seen.csrs.len(), 1, "TLS bootstrap with the token");
        let node = &seen.nodes[0];
        assert_eq!(node["metadata"]["name"], "default-x7k2p");
        assert_eq!(
            node["spec"]["providerID"],
            "scaleway://instance/fr-par-2/vm-gpu"
        );
        assert_eq!(
            node["metadata"]["labels"]["karpenter.sh/nodepool"],
            "default"
        );
        assert_eq!(node["metadata"]["labels"]["kubernetes.io/arch"], "amd64");
        assert_eq!(
            node["spec"]["taints"],
            json!([{"key": "karpenter.sh/unregistered", "effect": "NoExecute"}])
        );
        let status = &seen.statuses[0];
        assert_eq!(status["capacity"]["nvidia.com/gpu"], "1");
        assert_eq!(status["allocatable"]["nvidia.com/gpu"], "1");
        assert_eq!(status["capacity"]["cpu"], "8");
        assert_eq!(
            status["capacity"]["ephemeral-storage"],
            format!("{}Ki", 20_000_000_000u64 / 1024)
        );
        assert_eq!(status["nodeInfo"]["osImage"], "Talos (v1.11.5)");
        assert!(seen.ready_statuses.iter().all(|s| s == "True"));
    }

    // The provider deletes the user data once the node joined; a poweroff
    // stops the kubelet, and the next boot takes the config from the
    // STATE partition with the kubelet's certificate: no token needed.
    metadata.delete("vm-gpu");
    sim.apply(Command::PowerOff {
        server_id: "vm-gpu".into(),
        cause: None,
    })
    .await;
    assert_eq!(record(&sim, "vm-gpu").await.state, OsState::Off);
    sim.apply(running_vm("vm-gpu", ip, "L4-1-24G", 1, 2)).await;
    let rebooted = wait_for(
        "the VM to join again",
        || sim.records(),
        |r| r.state == OsState::Running,
    )
    .await;
    assert_eq!(
        outcomes(&rebooted),
        vec![UserDataOutcome::Accepted],
        "not read again"
    );
    let seen = fake.seen.lock().unwrap();
    assert_eq!(seen.csrs.len(), 1, "the certificate was kept");
    // The Node is still there: the kubelet adopts it, as a real one does.
    assert_eq!(seen.node_creates, 1);
    assert_eq!(seen.node_patches.len(), 1, "adopted once");
}

/// A stand-in for `talos-config validate` that refuses every config the
/// way Talos' machinery words a validation error.
fn refusing_validator(dir: &tempfile::TempDir) -> ConfigValidator {
    let script: PathBuf = dir.path().join("talos-config");
    std::fs::write(
        &script,
        "#!/bin/sh\ncat >/dev/null\nprintf '1 error occurred:\\n\\t* stub machinery says no\\n\\n' >&2\nexit 1\n",
    )
    .unwrap();
    std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
    ConfigValidator::new(&script).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_a_valid_config_a_vm_stays_in_maintenance_until_a_reboot_finds_one() {
    let ip = Ipv4Addr::new(127, 95, 0, 21);
    let (metadata, metadata_url) = metadata_service().await;
    let dir = tempfile::tempdir().unwrap();
    let sim = simulator(&dir, &metadata_url, false, None);
    let id = "vm-empty";
    let yaml = vm_config(
        "https://127.95.0.99:6443",
        "-----BEGIN CERTIFICATE-----\n",
        GOOD_TOKEN,
    );

    // No user data: maintenance mode, whose API answers as on bare metal.
    sim.apply(running_vm(id, ip, "POP2-2C-8G", 0, 1)).await;
    let r = record(&sim, id).await;
    assert_eq!(r.state, OsState::Maintenance);
    assert_eq!(outcomes(&r), vec![UserDataOutcome::Missing]);
    assert!(
        r.boot_error
            .as_deref()
            .unwrap()
            .contains("no key cloud-init"),
        "{:?}",
        r.boot_error
    );
    let mut api = talos(SocketAddr::from((ip, TALOS_PORT))).await.unwrap();
    let version = api
        .version(())
        .await
        .unwrap()
        .into_inner()
        .messages
        .remove(0);
    let platform = version.platform.unwrap();
    assert_eq!(
        (platform.name.as_str(), platform.mode.as_str()),
        ("scaleway", "cloud")
    );
    assert_eq!(version.version.unwrap().tag, "v1.11.5");

    // Blank user data: the same.
    metadata.set(id, "  \n");
    sim.apply(running_vm(id, ip, "POP2-2C-8G", 0, 2)).await;
    let r = record(&sim, id).await;
    assert_eq!(r.state, OsState::Maintenance);
    assert_eq!(outcomes(&r)[1], UserDataOutcome::Empty);
    assert!(r.boot_error.as_deref().unwrap().contains("is empty"));

    // A config talos-sim's checks refuse (as an apply would be refused).
    metadata.set(id, &yaml.replace("type: worker", "type: controlplane"));
    sim.apply(running_vm(id, ip, "POP2-2C-8G", 0, 3)).await;
    let r = record(&sim, id).await;
    assert_eq!(r.state, OsState::Maintenance);
    assert_eq!(outcomes(&r)[2], UserDataOutcome::Refused);
    let why = r.boot_error.clone().unwrap();
    assert!(
        why.contains("is invalid") && why.contains("controlplane"),
        "{why}"
    );
    assert!(!why.contains(GOOD_TOKEN));

    // Fixed user data, and a reboot reads it: the node boots its config.
    metadata.set(id, &yaml);
    sim.apply(running_vm(id, ip, "POP2-2C-8G", 0, 4)).await;
    let r = wait_for(
        "the configured boot",
        || sim.records(),
        |r| {
            r.boot_error
                .as_deref()
                .is_some_and(|e| e.contains("kubelet not started"))
        },
    )
    .await;
    assert_eq!(r.state, OsState::Configured);
    assert_eq!(outcomes(&r)[3], UserDataOutcome::Accepted);
    assert!(
        talos(SocketAddr::from((ip, TALOS_PORT))).await.is_err(),
        "no maintenance API once configured"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn talos_machinery_judges_the_user_data() {
    let ip = Ipv4Addr::new(127, 95, 0, 22);
    let (metadata, metadata_url) = metadata_service().await;
    let dir = tempfile::tempdir().unwrap();
    let sim = simulator(&dir, &metadata_url, false, Some(refusing_validator(&dir)));
    let id = "vm-refused";
    metadata.set(
        id,
        &vm_config(
            "https://127.95.0.99:6443",
            "-----BEGIN CERTIFICATE-----\n",
            GOOD_TOKEN,
        ),
    );

    sim.apply(running_vm(id, ip, "POP2-2C-8G", 0, 1)).await;
    let r = record(&sim, id).await;
    assert_eq!(r.state, OsState::Maintenance);
    assert_eq!(outcomes(&r), vec![UserDataOutcome::Refused]);
    assert!(
        r.boot_error
            .as_deref()
            .unwrap()
            .ends_with("is invalid: 1 error occurred:\n\t* stub machinery says no"),
        "{:?}",
        r.boot_error
    );
}

/// Everything talos-sim logs in this test binary from the first call on, at
/// every level.
fn captured_logs() -> Arc<Mutex<Vec<u8>>> {
    static LOGS: OnceLock<Arc<Mutex<Vec<u8>>>> = OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = Arc::new(Mutex::new(Vec::new()));
        let sink = logs.clone();
        tracing_subscriber::fmt()
            .with_env_filter(tracing_subscriber::EnvFilter::new("talos_sim=trace"))
            .with_ansi(false)
            .with_writer(move || Writer(sink.clone()))
            .init();
        logs
    })
    .clone()
}

struct Writer(Arc<Mutex<Vec<u8>>>);

impl std::io::Write for Writer {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_user_data_never_reaches_the_logs() {
    let logs = captured_logs();
    let ip = Ipv4Addr::new(127, 95, 0, 23);
    let (_fake, url, ca_pem) = fake_apiserver(Ipv4Addr::new(127, 95, 0, 51)).await;
    let (metadata, metadata_url) = metadata_service().await;
    let dir = tempfile::tempdir().unwrap();
    let sim = simulator(&dir, &metadata_url, true, None);
    let yaml = vm_config(&url, &ca_pem, GOOD_TOKEN);

    metadata.set(
        "vm-logs",
        &yaml.replace("type: worker", "type: controlplane"),
    );
    sim.apply(running_vm("vm-logs", ip, "POP2-2C-8G", 0, 1))
        .await;
    metadata.set("vm-logs", &yaml);
    sim.apply(running_vm("vm-logs", ip, "POP2-2C-8G", 0, 2))
        .await;
    wait_for(
        "the VM to join",
        || sim.records(),
        |r| r.id == "vm-logs" && r.state == OsState::Running,
    )
    .await;

    let text = String::from_utf8(logs.lock().unwrap().clone()).unwrap();
    assert!(
        text.contains("no machine config: maintenance mode"),
        "{text}"
    );
    assert!(
        text.contains("machine config read from the user data"),
        "{text}"
    );
    assert!(text.contains("node joined the cluster"), "{text}");
    for secret in [
        GOOD_TOKEN,
        "abcdef.0123456789abcdef",
        "c2VjcmV0",
        "controlPlane:",
    ] {
        assert!(!text.contains(secret), "{secret} logged:\n{text}");
    }
}
