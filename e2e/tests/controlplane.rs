//! The local control plane really works: the API server stores objects, the
//! controller manager turns a Deployment into a ReplicaSet and a Pod, the
//! scheduler is healthy and reports the Pod unschedulable (there are no
//! nodes), bootstrap tokens authenticate, approved CSRs get signed by the
//! cluster CA, and shutdown leaves no process and no port behind.
//!
//! Needs the binaries of `e2e/kube/build.sh`: taken from `KPS_KUBE_BIN_DIR`
//! when set, otherwise the script is run (minutes when its cache is cold).

use std::net::TcpListener;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use std::sync::Arc;

use anyhow::{Context, Result, bail};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use e2e::controlplane::{ControlPlane, ControlPlaneOptions};
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::certificates::v1::CertificateSigningRequest;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod, Secret};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, UnixTime};

const NAMESPACE: &str = "cp-smoke";

fn kube_bin_dir() -> Result<PathBuf> {
    if let Some(dir) = std::env::var_os("KPS_KUBE_BIN_DIR") {
        return Ok(PathBuf::from(dir));
    }
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("kube/build.sh");
    let out = std::process::Command::new("bash")
        .arg(&script)
        .stderr(std::process::Stdio::inherit())
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    if !out.status.success() {
        bail!("{} failed: {}", script.display(), out.status);
    }
    let stdout = String::from_utf8(out.stdout)?;
    let last = stdout.lines().last().context("build.sh printed nothing")?;
    Ok(PathBuf::from(last.trim()))
}

async fn eventually<T, F, Fut>(what: &str, mut check: F) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<Option<T>>>,
{
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        if let Some(v) = check().await? {
            return Ok(v);
        }
        if Instant::now() > deadline {
            bail!("timed out waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

fn deployment() -> Result<Deployment> {
    Ok(serde_json::from_value(serde_json::json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": { "name": "web", "namespace": NAMESPACE },
        "spec": {
            "replicas": 1,
            "selector": { "matchLabels": { "app": "web" } },
            "template": {
                "metadata": { "labels": { "app": "web" } },
                "spec": { "containers": [{ "name": "web", "image": "registry.k8s.io/pause:3.10" }] },
            },
        },
    }))?)
}

/// Deployment -> ReplicaSet -> Pod, then the scheduler's verdict on the Pod.
async fn deployment_becomes_an_unschedulable_pod(client: &Client) -> Result<()> {
    let namespaces: Api<Namespace> = Api::all(client.clone());
    let ns: Namespace =
        serde_json::from_value(serde_json::json!({ "metadata": { "name": NAMESPACE } }))?;
    namespaces.create(&PostParams::default(), &ns).await?;
    let deployments: Api<Deployment> = Api::namespaced(client.clone(), NAMESPACE);
    let created = deployments
        .create(&PostParams::default(), &deployment()?)
        .await?;
    let deployment_uid = created.uid().context("deployment without uid")?;

    let replicasets: Api<ReplicaSet> = Api::namespaced(client.clone(), NAMESPACE);
    let rs = eventually("the ReplicaSet of the Deployment", || {
        let api = replicasets.clone();
        let owner = deployment_uid.clone();
        async move {
            let list = api.list(&ListParams::default()).await?;
            Ok(list
                .items
                .into_iter()
                .find(|rs| rs.owner_references().iter().any(|o| o.uid == owner)))
        }
    })
    .await?;
    let rs_uid = rs.uid().context("replicaset without uid")?;

    let pods: Api<Pod> = Api::namespaced(client.clone(), NAMESPACE);
    let pod = eventually("the Pod of the ReplicaSet", || {
        let api = pods.clone();
        let owner = rs_uid.clone();
        async move {
            let list = api.list(&ListParams::default()).await?;
            Ok(list
                .items
                .into_iter()
                .find(|p| p.owner_references().iter().any(|o| o.uid == owner)))
        }
    })
    .await?;
    let pod_name = pod.name_any();

    // Only the scheduler writes PodScheduled=False/Unschedulable.
    let reason = eventually("the scheduler to mark the Pod unschedulable", || {
        let api = pods.clone();
        let name = pod_name.clone();
        async move {
            let pod = api.get(&name).await?;
            let status = pod.status.unwrap_or_default();
            let scheduled = status
                .conditions
                .unwrap_or_default()
                .into_iter()
                .find(|c| c.type_ == "PodScheduled" && c.status == "False");
            Ok(scheduled.map(|c| (status.phase, c.reason)))
        }
    })
    .await?;
    assert_eq!(reason.0.as_deref(), Some("Pending"));
    assert_eq!(reason.1.as_deref(), Some("Unschedulable"));
    Ok(())
}

const TOKEN_ID: &str = "kpse2e";
const TOKEN_SECRET: &str = "0123456789abcdef";

/// A bootstrap token authenticates (`--enable-bootstrap-token-auth`) and the
/// bootstrap signer signs `kube-public/cluster-info` with it, as nodes joining
/// with a token expect.
async fn bootstrap_tokens_work(cp: &ControlPlane, client: &Client) -> Result<()> {
    let secrets: Api<Secret> = Api::namespaced(client.clone(), "kube-system");
    let token: Secret = serde_json::from_value(serde_json::json!({
        "metadata": { "name": format!("bootstrap-token-{TOKEN_ID}") },
        "type": "bootstrap.kubernetes.io/token",
        "stringData": {
            "token-id": TOKEN_ID,
            "token-secret": TOKEN_SECRET,
            "usage-bootstrap-authentication": "true",
            "usage-bootstrap-signing": "true",
        },
    }))?;
    secrets.create(&PostParams::default(), &token).await?;

    let http = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(cp.ca_pem().as_bytes())?])
        .timeout(Duration::from_secs(5))
        .build()?;
    // The API server's bootstrap token authenticator reads Secrets through
    // an informer (a lister on kube-system), not from etcd: a token is
    // refused with 401 until the informer has seen its Secret, which lags
    // the create by an unbounded moment (CI once saw the 401). A kubelet
    // retries for that reason; so does this check, on 401 only.
    let url = format!(
        "{}/apis/authentication.k8s.io/v1/selfsubjectreviews",
        cp.server_url()
    );
    let review: serde_json::Value = eventually("the bootstrap token to authenticate", || {
        let request = http
            .post(&url)
            .bearer_auth(format!("{TOKEN_ID}.{TOKEN_SECRET}"))
            .json(&serde_json::json!({ "apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview" }));
        async move {
            let response = request.send().await?;
            if response.status() == reqwest::StatusCode::UNAUTHORIZED {
                return Ok(None);
            }
            Ok(Some(response.error_for_status()?.json().await?))
        }
    })
    .await?;
    let user = &review["status"]["userInfo"];
    assert_eq!(user["username"], format!("system:bootstrap:{TOKEN_ID}"));
    assert!(
        user["groups"]
            .as_array()
            .is_some_and(|g| g.iter().any(|g| g == "system:bootstrappers")),
        "{user}"
    );

    let configmaps: Api<ConfigMap> = Api::namespaced(client.clone(), "kube-public");
    let cluster_info: ConfigMap = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "cluster-info" },
        "data": { "kubeconfig": std::fs::read_to_string(cp.kubeconfig_path())? },
    }))?;
    configmaps
        .create(&PostParams::default(), &cluster_info)
        .await?;
    eventually("the bootstrap signer to sign cluster-info", || {
        let api = configmaps.clone();
        async move {
            let cm = api.get("cluster-info").await?;
            let key = format!("jws-kubeconfig-{TOKEN_ID}");
            Ok(cm.data.unwrap_or_default().contains_key(&key).then_some(()))
        }
    })
    .await
}

/// An approved CSR for a client certificate is signed by the controller
/// manager with the cluster CA (`--cluster-signing-*`).
async fn approved_csrs_are_signed_by_the_cluster_ca(
    cp: &ControlPlane,
    client: &Client,
) -> Result<()> {
    let key = rcgen::KeyPair::generate()?;
    let mut params = rcgen::CertificateParams::default();
    params
        .distinguished_name
        .push(rcgen::DnType::CommonName, "kps-e2e-csr-check");
    let request_pem = params.serialize_request(&key)?.pem()?;

    let csrs: Api<CertificateSigningRequest> = Api::all(client.clone());
    let csr: CertificateSigningRequest = serde_json::from_value(serde_json::json!({
        "metadata": { "name": "kps-e2e-csr-check" },
        "spec": {
            "request": BASE64.encode(request_pem),
            "signerName": "kubernetes.io/kube-apiserver-client",
            "usages": ["client auth"],
            "expirationSeconds": 600,
        },
    }))?;
    csrs.create(&PostParams::default(), &csr).await?;
    let approval = serde_json::json!({ "status": { "conditions": [{
        "type": "Approved", "status": "True", "reason": "E2ETest", "message": "approved by the e2e test",
    }]}});
    csrs.patch_approval(
        "kps-e2e-csr-check",
        &PatchParams::default(),
        &Patch::Merge(&approval),
    )
    .await?;

    let issued = eventually("the controller manager to sign the CSR", || {
        let api = csrs.clone();
        async move {
            let csr = api.get("kps-e2e-csr-check").await?;
            Ok(csr.status.and_then(|s| s.certificate).map(|c| c.0))
        }
    })
    .await?;

    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(cp.ca_pem().as_bytes())?)?;
    let verifier = rustls::server::WebPkiClientVerifier::builder_with_provider(
        Arc::new(roots),
        Arc::new(rustls::crypto::ring::default_provider()),
    )
    .build()?;
    verifier.verify_client_cert(
        &CertificateDer::from_pem_slice(&issued)?,
        &[],
        UnixTime::now(),
    )?;
    Ok(())
}

async fn scheduler_healthz(cp: &ControlPlane) -> Result<String> {
    let port = cp
        .ports()
        .context("local control plane has ports")?
        .scheduler;
    let http = reqwest::Client::builder()
        .tls_certs_only([reqwest::Certificate::from_pem(cp.ca_pem().as_bytes())?])
        .timeout(Duration::from_secs(5))
        .build()?;
    let response = http
        .get(format!("https://127.0.0.1:{port}/healthz"))
        .send()
        .await?;
    assert_eq!(response.status(), reqwest::StatusCode::OK);
    Ok(response.text().await?)
}

#[tokio::test]
async fn local_control_plane_runs_controllers_and_scheduler_then_stops_cleanly() -> Result<()> {
    e2e::init_tracing();
    let bin_dir = tokio::task::spawn_blocking(kube_bin_dir).await??;
    let work = tempfile::tempdir()?;

    let started = Instant::now();
    let cp = ControlPlane::start(ControlPlaneOptions::new(bin_dir, work.path())).await?;
    eprintln!("control plane ready in {:?}", started.elapsed());
    let ports = cp.ports().context("ports")?;
    let pids = cp.pids();
    assert_eq!(
        pids.len(),
        4,
        "etcd, apiserver, controller manager, scheduler"
    );
    assert!(cp.server_url().starts_with("https://127.0.0.1:"));
    assert!(cp.ca_pem().contains("BEGIN CERTIFICATE"));
    assert!(cp.admin_client().is_some());
    for component in [
        "etcd",
        "kube-apiserver",
        "kube-controller-manager",
        "kube-scheduler",
    ] {
        let log = work.path().join(format!("{component}.log"));
        assert!(log.metadata()?.len() > 0, "{} is empty", log.display());
    }

    let client = cp.client().await?;
    deployment_becomes_an_unschedulable_pod(&client).await?;
    assert_eq!(scheduler_healthz(&cp).await?, "ok");
    bootstrap_tokens_work(&cp, &client).await?;
    approved_csrs_are_signed_by_the_cluster_ca(&cp, &client).await?;

    // The other mode, pointed at the kubeconfig just written, sees the same cluster.
    let existing = ControlPlane::existing(cp.kubeconfig_path()).await?;
    assert_eq!(existing.server_url(), cp.server_url());
    assert_eq!(existing.ca_pem(), cp.ca_pem());
    assert!(existing.ports().is_none());
    let namespaces: Api<Namespace> = Api::all(existing.client().await?);
    assert!(namespaces.get_opt(NAMESPACE).await?.is_some());
    existing.shutdown().await?; // stops nothing: not ours

    let stopping = Instant::now();
    cp.shutdown().await?;
    eprintln!("control plane stopped in {:?}", stopping.elapsed());
    for port in ports.all() {
        TcpListener::bind(("127.0.0.1", port))
            .with_context(|| format!("port {port} still taken"))?;
    }
    for pid in pids {
        // A zombie would still have its /proc entry.
        assert!(
            !std::path::Path::new(&format!("/proc/{pid}")).exists(),
            "process {pid} left behind"
        );
    }
    Ok(())
}

/// A component that dies during start fails `start` at once with its log,
/// and what was already running (etcd) is stopped, not leaked.
#[tokio::test]
async fn a_component_that_dies_fails_the_start_and_stops_the_others() -> Result<()> {
    e2e::init_tracing();
    let real = tokio::task::spawn_blocking(kube_bin_dir).await??;
    let bins = tempfile::tempdir()?;
    for name in ["etcd", "kube-controller-manager", "kube-scheduler"] {
        std::os::unix::fs::symlink(real.join(name), bins.path().join(name))?;
    }
    let apiserver = bins.path().join("kube-apiserver");
    std::fs::write(
        &apiserver,
        "#!/bin/sh\necho 'boom: refusing to start' >&2\nexit 3\n",
    )?;
    std::fs::set_permissions(
        &apiserver,
        std::os::unix::fs::PermissionsExt::from_mode(0o755),
    )?;

    let work = tempfile::tempdir()?;
    let err = ControlPlane::start(ControlPlaneOptions::new(bins.path(), work.path()))
        .await
        .expect_err("start must fail");
    let message = format!("{err:#}");
    assert!(message.contains("kube-apiserver exited"), "{message}");
    assert!(message.contains("boom: refusing to start"), "{message}");

    // Every child ran in the work dir: none may be left there.
    let work_dir = work.path().canonicalize()?;
    for entry in std::fs::read_dir("/proc")?.flatten() {
        if let Ok(cwd) = std::fs::read_link(entry.path().join("cwd")) {
            assert_ne!(
                cwd,
                work_dir,
                "process {:?} left running",
                entry.file_name()
            );
        }
    }
    let etcd_log = std::fs::read_to_string(work.path().join("etcd.log"))?;
    assert!(
        etcd_log.contains("etcd: terminated, stopping"),
        "etcd was not stopped by SIGTERM"
    );
    Ok(())
}
