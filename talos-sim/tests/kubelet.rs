//! The kubelet stand-in's TLS bootstrap and the `never_ready` fault against
//! a small fake API server over TLS: it answers the few calls the kubelet
//! makes, checks who makes them (bootstrap token for the CSR, no token
//! afterwards) and signs CSRs with its CA like kube-controller-manager.
//! The real API server (Node authorizer, NodeRestriction, csrapproving) is
//! exercised by the e2e suite.

mod common;

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, patch, post};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use common::*;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use serde_json::{Value, json};
use talos_sim::disk::Disk;
use talos_sim::image::Compression;
use talos_sim::manager::Simulator;
use talos_sim::model::{BootType, Command};
use talos_sim::os::Settings;
use talos_sim::records::OsState;
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;

const GOOD_TOKEN: &str = "abc123.0123456789abcdef";
const DISK: u64 = 64 << 20;

#[derive(Default)]
struct Seen {
    /// CSR name → (subject as `CN=...,O=...`, signer, usages).
    csrs: BTreeMap<String, (String, String, Vec<String>)>,
    issued: BTreeMap<String, String>,
    node_creates: usize,
    /// Whether any call after the bootstrap carried a bearer token.
    node_calls_with_token: usize,
    ready_statuses: Vec<String>,
}

struct Fake {
    issuer: Issuer<'static, KeyPair>,
    seen: Mutex<Seen>,
}

fn status(code: u16, reason: &str) -> Response {
    (
        StatusCode::from_u16(code).unwrap(),
        Json(
            json!({"kind": "Status", "apiVersion": "v1", "status": "Failure",
                    "reason": reason, "code": code, "message": reason}),
        ),
    )
        .into_response()
}

fn bearer(headers: &HeaderMap) -> Option<String> {
    headers
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_string)
}

async fn create_csr(
    State(f): State<Arc<Fake>>,
    headers: HeaderMap,
    Json(csr): Json<Value>,
) -> Response {
    if bearer(&headers).as_deref() != Some(GOOD_TOKEN) {
        return status(401, "Unauthorized");
    }
    let pem = B64
        .decode(csr["spec"]["request"].as_str().unwrap())
        .unwrap();
    let request =
        rcgen::CertificateSigningRequestParams::from_pem(std::str::from_utf8(&pem).unwrap())
            .unwrap();
    let subject: Vec<String> = request
        .params
        .distinguished_name
        .iter()
        .map(|(t, v)| {
            let v = match v {
                rcgen::DnValue::Utf8String(s) => s.clone(),
                other => format!("{other:?}"),
            };
            format!("{t:?}={v}")
        })
        .collect();
    let cert = request.signed_by(&f.issuer).unwrap().pem();
    let mut seen = f.seen.lock().unwrap();
    let name = format!("csr-{}", seen.csrs.len());
    seen.csrs.insert(
        name.clone(),
        (
            subject.join(","),
            csr["spec"]["signerName"].as_str().unwrap().to_string(),
            serde_json::from_value(csr["spec"]["usages"].clone()).unwrap(),
        ),
    );
    seen.issued.insert(name.clone(), cert);
    let mut out = csr.clone();
    out["metadata"] = json!({"name": name});
    (StatusCode::CREATED, Json(out)).into_response()
}

async fn get_csr(
    State(f): State<Arc<Fake>>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Response {
    if bearer(&headers).as_deref() != Some(GOOD_TOKEN) {
        return status(401, "Unauthorized");
    }
    let seen = f.seen.lock().unwrap();
    let Some(cert) = seen.issued.get(&name) else {
        return status(404, "NotFound");
    };
    Json(json!({
        "apiVersion": "certificates.k8s.io/v1", "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {"request": "", "signerName": "kubernetes.io/kube-apiserver-client-kubelet"},
        "status": {
            "conditions": [{"type": "Approved", "status": "True"}],
            "certificate": B64.encode(cert),
        },
    }))
    .into_response()
}

fn node_call(f: &Fake, headers: &HeaderMap) {
    if bearer(headers).is_some() {
        f.seen.lock().unwrap().node_calls_with_token += 1;
    }
}

async fn get_node(State(f): State<Arc<Fake>>, headers: HeaderMap) -> Response {
    node_call(&f, &headers);
    status(404, "NotFound")
}

async fn create_node(
    State(f): State<Arc<Fake>>,
    headers: HeaderMap,
    Json(mut node): Json<Value>,
) -> Response {
    node_call(&f, &headers);
    f.seen.lock().unwrap().node_creates += 1;
    node["metadata"]["uid"] = json!("uid-1");
    (StatusCode::CREATED, Json(node)).into_response()
}

async fn patch_node_status(
    State(f): State<Arc<Fake>>,
    headers: HeaderMap,
    Path(name): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    node_call(&f, &headers);
    // Patches come as strategic-merge, merge or apply documents.
    let patch: Value = serde_json::from_slice(&body).unwrap();
    let ready = patch["status"]["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .map(|c| c["status"].as_str().unwrap().to_string())
        .unwrap();
    f.seen.lock().unwrap().ready_statuses.push(ready);
    Json(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}})).into_response()
}

async fn apply_lease(
    State(f): State<Arc<Fake>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    node_call(&f, &headers);
    let lease: Value = serde_json::from_slice(&body).unwrap();
    Json(lease).into_response()
}

async fn pods(
    State(f): State<Arc<Fake>>,
    headers: HeaderMap,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    node_call(&f, &headers);
    if q.get("watch").map(String::as_str) == Some("true") {
        // Nothing ever changes.
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
    Json(json!({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "1"}, "items": []}))
        .into_response()
}

struct TlsListener {
    tcp: TcpListener,
    acceptor: TlsAcceptor,
}

impl axum::serve::Listener for TlsListener {
    type Io = tokio_rustls::server::TlsStream<TcpStream>;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        loop {
            let Ok((tcp, addr)) = self.tcp.accept().await else {
                continue;
            };
            if let Ok(tls) = self.acceptor.accept(tcp).await {
                return (tls, addr);
            }
        }
    }

    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        self.tcp.local_addr()
    }
}

/// Starts the fake API server on `ip`; returns it, its URL and the CA PEM.
async fn fake_apiserver(ip: Ipv4Addr) -> (Arc<Fake>, String, String) {
    talos_sim::install_crypto_provider();
    let ca_key = KeyPair::generate().unwrap();
    let mut ca = CertificateParams::new(Vec::<String>::new()).unwrap();
    ca.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    let ca_pem = ca.self_signed(&ca_key).unwrap().pem();
    let issuer = Issuer::new(ca, ca_key);
    let key = KeyPair::generate().unwrap();
    let cert = CertificateParams::new(vec![ip.to_string()])
        .unwrap()
        .signed_by(&key, &issuer)
        .unwrap();
    let tls = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(
        vec![cert.der().clone()],
        rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
    )
    .unwrap();
    let fake = Arc::new(Fake {
        issuer,
        seen: Mutex::default(),
    });
    let csrs = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
    let app = axum::Router::new()
        .route(csrs, post(create_csr))
        .route(&format!("{csrs}/{{name}}"), get(get_csr))
        .route("/api/v1/nodes", post(create_node))
        .route("/api/v1/nodes/{name}", get(get_node))
        .route("/api/v1/nodes/{name}/status", patch(patch_node_status))
        .route(
            "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}",
            patch(apply_lease),
        )
        .route("/api/v1/pods", get(pods))
        .with_state(fake.clone());
    let tcp = TcpListener::bind((ip, 0)).await.unwrap();
    let url = format!("https://{}", tcp.local_addr().unwrap());
    let listener = TlsListener {
        tcp,
        acceptor: TlsAcceptor::from(Arc::new(tls)),
    };
    tokio::spawn(async move { axum::serve(listener, app).await });
    (fake, url, ca_pem)
}

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

async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    for _ in 0..200 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}");
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
    assert_eq!(seen.node_creates, 2);
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
