//! A small fake API server over TLS for the kubelet stand-in: it answers
//! the few calls the kubelet makes, checks who makes them (bootstrap token
//! for the CSR, no token afterwards) and signs CSRs with its CA like
//! kube-controller-manager. It keeps the Nodes and pods it was given (JSON
//! merge patches applied as they come), so a rebooted kubelet finds its
//! Node and its pods again. The real API server (Node authorizer,
//! NodeRestriction, csrapproving) is exercised by the e2e suite.

use std::collections::BTreeMap;
use std::net::{Ipv4Addr, SocketAddr};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Json;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, patch, post};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use rcgen::{BasicConstraints, CertificateParams, IsCa, Issuer, KeyPair};
use serde_json::{Value, json};
use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;

pub const GOOD_TOKEN: &str = "abc123.0123456789abcdef";

#[derive(Default)]
pub struct Seen {
    /// CSR name → (subject as `CN=...,O=...`, signer, usages).
    pub csrs: BTreeMap<String, (String, String, Vec<String>)>,
    pub issued: BTreeMap<String, String>,
    pub node_creates: usize,
    /// Whether any call after the bootstrap carried a bearer token.
    pub node_calls_with_token: usize,
    pub ready_statuses: Vec<String>,
    /// Every Node created, as sent.
    pub nodes: Vec<Value>,
    /// Every status patch, as sent, with when it arrived.
    pub statuses: Vec<Value>,
    pub status_times: Vec<Instant>,
    /// When each Lease renewal arrived.
    pub leases: Vec<Instant>,
    /// Merge patches of an existing Node (adoptions).
    pub node_patches: Vec<Value>,
    /// The Nodes as they stand, by name.
    pub node_store: BTreeMap<String, Value>,
    /// The pods as they stand, by name (one namespace: `default`).
    pub pods: BTreeMap<String, Value>,
}

impl Seen {
    /// `(Ready status, reason, message, bootID)` of every status patch.
    pub fn reports(&self) -> Vec<(String, String, String, String)> {
        self.statuses
            .iter()
            .map(|s| {
                let ready = s["conditions"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|c| c["type"] == "Ready")
                    .unwrap();
                let text = |v: &Value| v.as_str().unwrap_or_default().to_string();
                (
                    text(&ready["status"]),
                    text(&ready["reason"]),
                    text(&ready["message"]),
                    text(&s["nodeInfo"]["bootID"]),
                )
            })
            .collect()
    }
}

pub struct Fake {
    issuer: Issuer<'static, KeyPair>,
    pub seen: Mutex<Seen>,
    /// Set once the bootstrap token is deleted (as the provider does once
    /// the node joined): the token gets 401s.
    revoked: AtomicBool,
}

impl Fake {
    pub fn revoke_token(&self) {
        self.revoked.store(true, Ordering::SeqCst);
    }

    fn token_ok(&self, headers: &HeaderMap) -> bool {
        !self.revoked.load(Ordering::SeqCst) && bearer(headers).as_deref() == Some(GOOD_TOKEN)
    }

    /// A pod bound to `node`, as the scheduler leaves it.
    pub fn add_pod(&self, name: &str, node: &str, restart_policy: &str) {
        let pod = json!({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "namespace": "default", "uid": format!("uid-{name}")},
            "spec": {"nodeName": node, "restartPolicy": restart_policy,
                     "containers": [{"name": "app", "image": "nginx:1.27"}]},
            "status": {"phase": "Pending", "conditions": [
                {"type": "PodScheduled", "status": "True"}]},
        });
        self.seen.lock().unwrap().pods.insert(name.into(), pod);
    }

    pub fn pod(&self, name: &str) -> Value {
        self.seen.lock().unwrap().pods[name].clone()
    }

    pub fn node(&self, name: &str) -> Option<Value> {
        self.seen.lock().unwrap().node_store.get(name).cloned()
    }

    /// Changes a stored Node as another client would (core removing a
    /// taint, say).
    pub fn edit_node(&self, name: &str, edit: impl FnOnce(&mut Value)) {
        edit(self.seen.lock().unwrap().node_store.get_mut(name).unwrap());
    }
}

/// RFC 7386 JSON merge patch.
fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(fields) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let object = target.as_object_mut().unwrap();
    for (key, value) in fields {
        if value.is_null() {
            object.remove(key);
        } else {
            merge(object.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
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
    if !f.token_ok(&headers) {
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
    if !f.token_ok(&headers) {
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

async fn get_node(
    State(f): State<Arc<Fake>>,
    headers: HeaderMap,
    Path(name): Path<String>,
) -> Response {
    node_call(&f, &headers);
    match f.node(&name) {
        Some(node) => Json(node).into_response(),
        None => status(404, "NotFound"),
    }
}

async fn patch_node(
    State(f): State<Arc<Fake>>,
    headers: HeaderMap,
    Path(name): Path<String>,
    body: axum::body::Bytes,
) -> Response {
    node_call(&f, &headers);
    let patch: Value = serde_json::from_slice(&body).unwrap();
    let mut seen = f.seen.lock().unwrap();
    seen.node_patches.push(patch.clone());
    let Some(node) = seen.node_store.get_mut(&name) else {
        return status(404, "NotFound");
    };
    merge(node, &patch);
    Json(node.clone()).into_response()
}

async fn create_node(
    State(f): State<Arc<Fake>>,
    headers: HeaderMap,
    Json(mut node): Json<Value>,
) -> Response {
    node_call(&f, &headers);
    {
        let mut seen = f.seen.lock().unwrap();
        seen.node_creates += 1;
        seen.nodes.push(node.clone());
        node["metadata"]["uid"] = json!("uid-1");
        let name = node["metadata"]["name"].as_str().unwrap().to_string();
        seen.node_store.insert(name, node.clone());
    }
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
    let mut seen = f.seen.lock().unwrap();
    seen.ready_statuses.push(ready);
    seen.statuses.push(patch["status"].clone());
    seen.status_times.push(Instant::now());
    match seen.node_store.get_mut(&name) {
        Some(node) => {
            merge(node, &patch);
            Json(node.clone()).into_response()
        }
        None => Json(json!({"apiVersion": "v1", "kind": "Node", "metadata": {"name": name}}))
            .into_response(),
    }
}

async fn apply_lease(
    State(f): State<Arc<Fake>>,
    headers: HeaderMap,
    body: axum::body::Bytes,
) -> Response {
    node_call(&f, &headers);
    let lease: Value = serde_json::from_slice(&body).unwrap();
    f.seen.lock().unwrap().leases.push(Instant::now());
    Json(lease).into_response()
}

async fn pods(
    State(f): State<Arc<Fake>>,
    headers: HeaderMap,
    Query(q): Query<BTreeMap<String, String>>,
) -> Response {
    node_call(&f, &headers);
    if q.get("watch").map(String::as_str) == Some("true") {
        // Nothing changes behind a watch: the list is what the kubelet
        // gets at each start.
        tokio::time::sleep(Duration::from_secs(3600)).await;
    }
    let node = q
        .get("fieldSelector")
        .and_then(|s| s.strip_prefix("spec.nodeName="))
        .unwrap_or_default()
        .to_string();
    let items: Vec<Value> = f
        .seen
        .lock()
        .unwrap()
        .pods
        .values()
        .filter(|p| p["spec"]["nodeName"] == node.as_str())
        .cloned()
        .collect();
    Json(json!({"apiVersion": "v1", "kind": "PodList", "metadata": {"resourceVersion": "1"}, "items": items}))
        .into_response()
}

async fn patch_pod_status(
    State(f): State<Arc<Fake>>,
    headers: HeaderMap,
    Path((_namespace, name)): Path<(String, String)>,
    body: axum::body::Bytes,
) -> Response {
    node_call(&f, &headers);
    let patch: Value = serde_json::from_slice(&body).unwrap();
    let mut seen = f.seen.lock().unwrap();
    let Some(pod) = seen.pods.get_mut(&name) else {
        return status(404, "NotFound");
    };
    merge(pod, &patch);
    Json(pod.clone()).into_response()
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
pub async fn fake_apiserver(ip: Ipv4Addr) -> (Arc<Fake>, String, String) {
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
        revoked: AtomicBool::new(false),
    });
    let csrs = "/apis/certificates.k8s.io/v1/certificatesigningrequests";
    let app = axum::Router::new()
        .route(csrs, post(create_csr))
        .route(&format!("{csrs}/{{name}}"), get(get_csr))
        .route("/api/v1/nodes", post(create_node))
        .route("/api/v1/nodes/{name}", get(get_node).patch(patch_node))
        .route("/api/v1/nodes/{name}/status", patch(patch_node_status))
        .route(
            "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/{name}",
            patch(apply_lease),
        )
        .route("/api/v1/pods", get(pods))
        .route(
            "/api/v1/namespaces/{namespace}/pods/{name}/status",
            patch(patch_pod_status),
        )
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
