//! The reconciler against a mock API server and the fake Instance API: the
//! CRD probe, a standby that checks nothing, a leader that writes the status.

use std::sync::atomic::{AtomicBool, Ordering};

use base64::Engine;
use wiremock::matchers::{method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use super::*;
use crate::scaleway::instance::fake::{FakeInstance, Op};
use crate::scaleway::instance::{Arch, Image, ImageState};

const LIST_PATH: &str = "/apis/karpenter.scaleway.com/v1alpha1/scalewayinstancenodeclasses";
const STATUS_PATH: &str =
    "/apis/karpenter.scaleway.com/v1alpha1/scalewayinstancenodeclasses/vms/status";
const WORKER: &str = "version: v1alpha1\nmachine:\n  type: worker\ncluster:\n  controlPlane:\n    endpoint: https://10.0.0.1:6443\n";

fn kube_client(uri: &str) -> Client {
    Client::try_from(kube::Config::new(uri.parse().expect("mock server URI"))).expect("kube client")
}

fn not_found_status() -> serde_json::Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": "the server could not find the requested resource", "reason": "NotFound",
           "details": {}, "code": 404})
}

fn forbidden_status() -> serde_json::Value {
    json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
           "message": "forbidden", "reason": "Forbidden", "code": 403})
}

fn empty_list() -> serde_json::Value {
    json!({"apiVersion": "meta.k8s.io/v1", "kind": "PartialObjectMetadataList", "metadata": {}, "items": []})
}

#[tokio::test]
async fn each_answer_of_the_api_server_is_classified() {
    let cases = [
        // What an API server answers for a resource no CRD defines.
        (
            ResponseTemplate::new(404).set_body_string("404 page not found\n"),
            Some(KindAnswer::Absent),
        ),
        (
            ResponseTemplate::new(404).set_body_json(not_found_status()),
            Some(KindAnswer::Absent),
        ),
        (
            ResponseTemplate::new(403).set_body_json(forbidden_status()),
            Some(KindAnswer::Forbidden),
        ),
        (
            ResponseTemplate::new(200).set_body_json(empty_list()),
            Some(KindAnswer::Served),
        ),
        (
            ResponseTemplate::new(500).set_body_json(json!({"kind": "Status", "apiVersion": "v1",
                "metadata": {}, "status": "Failure", "message": "etcd down", "reason": "InternalError", "code": 500})),
            None,
        ),
    ];
    for (answer, expected) in cases {
        let kube = MockServer::start().await;
        Mock::given(method("GET"))
            .and(path(LIST_PATH))
            .respond_with(answer)
            .mount(&kube)
            .await;
        let served = kind_served(&kube_client(&kube.uri())).await;
        assert_eq!(served.as_ref().ok().copied(), expected, "{served:?}");
    }
}

/// For probes that must succeed: windows no slow machine runs out of.
const LONG: ProbeWindows = ProbeWindows {
    errors: Duration::from_secs(30),
    forbidden: Duration::from_secs(30),
    every: Duration::from_millis(20),
};

/// For probes that must give up. The first probe always comes inside the
/// window (at 0), so at least two are made whatever the machine's speed.
const SHORT: ProbeWindows = ProbeWindows {
    errors: Duration::from_millis(200),
    forbidden: Duration::from_millis(200),
    every: Duration::from_millis(20),
};

/// Mounts `first` for its first `times` answers, then `then` for good.
async fn answers(first: ResponseTemplate, times: u64, then: ResponseTemplate) -> MockServer {
    let kube = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(LIST_PATH))
        .respond_with(first)
        .up_to_n_times(times)
        .with_priority(1)
        .mount(&kube)
        .await;
    Mock::given(method("GET"))
        .and(path(LIST_PATH))
        .respond_with(then)
        .with_priority(2)
        .mount(&kube)
        .await;
    kube
}

async fn requests(kube: &MockServer) -> usize {
    kube.received_requests()
        .await
        .expect("recording is on")
        .len()
}

#[tokio::test]
async fn rbac_the_authorizer_has_not_seen_yet_is_waited_for() {
    // A fresh install: the chart's ClusterRoleBinding exists, but the API
    // server's RBAC informer answers 403 for a moment (seen in the e2e).
    let forbidden = ResponseTemplate::new(403).set_body_json(forbidden_status());
    let ok = ResponseTemplate::new(200).set_body_json(empty_list());
    let kube = answers(forbidden, 2, ok).await;
    assert!(probe_served(&kube_client(&kube.uri()), LONG).await);
    assert_eq!(requests(&kube).await, 3);
}

#[tokio::test]
async fn rbac_that_stays_forbidden_means_not_served() {
    let forbidden = || ResponseTemplate::new(403).set_body_json(forbidden_status());
    let kube = answers(forbidden(), 1, forbidden()).await;
    assert!(!probe_served(&kube_client(&kube.uri()), SHORT).await);
    // Asked again until the window ended, then no more.
    let asked = requests(&kube).await;
    assert!(asked >= 2, "{asked} probes");
    tokio::time::sleep(Duration::from_millis(100)).await;
    assert_eq!(requests(&kube).await, asked);
}

#[tokio::test]
async fn an_absent_crd_is_not_served_after_one_probe() {
    let absent = || ResponseTemplate::new(404).set_body_json(not_found_status());
    let kube = answers(absent(), 1, absent()).await;
    assert!(!probe_served(&kube_client(&kube.uri()), LONG).await);
    assert_eq!(requests(&kube).await, 1);
}

#[tokio::test]
async fn errors_are_retried_within_their_window_then_mean_not_served() {
    let down = || ResponseTemplate::new(500).set_body_string("etcd down");
    let ok = ResponseTemplate::new(200).set_body_json(empty_list());
    let kube = answers(down(), 2, ok).await;
    assert!(probe_served(&kube_client(&kube.uri()), LONG).await);
    assert_eq!(requests(&kube).await, 3);

    let kube = answers(down(), 1, down()).await;
    assert!(!probe_served(&kube_client(&kube.uri()), SHORT).await);
    assert!(requests(&kube).await >= 2);
}

#[tokio::test]
async fn a_controller_told_the_kind_is_not_served_returns_and_calls_nothing() {
    let kube = MockServer::start().await;
    let api = Arc::new(FakeInstance::new());
    let controller = InstanceNodeClassController::new(
        kube_client(&kube.uri()),
        api.clone(),
        Arc::new(crate::scaleway::private_network::fake::FakePrivateNetworks::new()),
        "proj".into(),
        vec!["fr-par-2".into()],
        Arc::new(|| true),
        crate::catalog::CatalogStore::new(Duration::from_secs(60)),
    );
    // `run` returning at all is the behaviour under test: the shutdown
    // future never resolves. The bound only turns a regression into a
    // failure instead of a hang.
    tokio::time::timeout(
        Duration::from_secs(30),
        controller.run(false, std::future::pending()),
    )
    .await
    .expect("run returns when the kind is not served");
    assert_eq!(requests(&kube).await, 0);
    assert!(api.calls().is_empty());
}

fn node_class() -> Arc<NodeClass> {
    let spec: InstanceNodeClassSpec = serde_json::from_value(json!({
        "zones": ["fr-par-2"],
        "image": {"name": "talos-v1.13.9"},
        "machineConfigSecretRef": {"name": "talos", "namespace": "karpenter", "key": "worker.yaml"}
    }))
    .unwrap();
    let mut nc = NodeClass::new("vms", spec);
    nc.metadata.generation = Some(3);
    Arc::new(nc)
}

#[tokio::test]
async fn a_standby_checks_nothing_and_a_leader_writes_conditions_and_images() {
    let kube = MockServer::start().await;
    let nc = node_class();
    let worker = base64::engine::general_purpose::STANDARD.encode(WORKER);
    Mock::given(method("GET"))
        .and(path("/api/v1/namespaces/karpenter/secrets/talos"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "apiVersion": "v1", "kind": "Secret",
            "metadata": {"name": "talos", "namespace": "karpenter"},
            "data": {"worker.yaml": worker}
        })))
        .mount(&kube)
        .await;
    Mock::given(method("PATCH"))
        .and(path(STATUS_PATH))
        .respond_with(ResponseTemplate::new(200).set_body_json(serde_json::to_value(&*nc).unwrap()))
        .mount(&kube)
        .await;
    let api = Arc::new(FakeInstance::new());
    api.insert_image(Image {
        id: "img".into(),
        name: "talos-v1.13.9".into(),
        arch: Arch::X86_64,
        state: ImageState::Available,
        tags: vec![],
        project: "proj".into(),
        public: false,
        zone: "fr-par-2".into(),
        creation_date: None,
    });
    let leader = Arc::new(AtomicBool::new(false));
    let is_leader = leader.clone();
    let ctx = Arc::new(Context {
        client: kube_client(&kube.uri()),
        api: api.clone(),
        networks: Arc::new(crate::scaleway::private_network::fake::FakePrivateNetworks::new()),
        project_id: "proj".into(),
        zones: vec![],
        is_leader: Arc::new(move || is_leader.load(Ordering::SeqCst)),
        catalog: crate::catalog::CatalogStore::new(Duration::from_secs(60)),
        cache: InstanceClassCache::default(),
    });

    let action = reconcile(nc.clone(), ctx.clone()).await.unwrap();
    assert_eq!(action, Action::requeue(REQUEUE_STANDBY));
    assert!(kube.received_requests().await.unwrap().is_empty());
    assert!(api.calls().is_empty());

    leader.store(true, Ordering::SeqCst);
    let action = reconcile(nc, ctx).await.unwrap();
    assert_eq!(action, Action::requeue(REQUEUE_READY));
    assert_eq!(api.count(Op::ListImages), 1);
    let requests = kube.received_requests().await.unwrap();
    let patch = requests
        .iter()
        .find(|r| r.method.as_str() == "PATCH")
        .expect("the status was patched");
    let body: serde_json::Value = serde_json::from_slice(&patch.body).unwrap();
    let status = &body["status"];
    assert_eq!(
        status["images"],
        json!([{"zone": "fr-par-2", "arch": "amd64", "id": "img", "name": "talos-v1.13.9"}])
    );
    let ready = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Ready")
        .unwrap();
    assert_eq!(ready["status"], "True");
    assert_eq!(ready["observedGeneration"], 3);
}

#[test]
fn only_the_machine_config_secret_is_watched() {
    let nc = node_class();
    assert!(references(&nc.spec, "karpenter", "talos"));
    assert!(!references(&nc.spec, "default", "talos"));
    assert!(!references(&nc.spec, "karpenter", "rescue"));
}

#[test]
fn create_sees_a_class_ready_only_for_its_current_generation_with_its_images() {
    use crate::nodeclass::Condition;
    let mut nc = ScalewayInstanceNodeClass::new("vms", serde_json::from_value(serde_json::json!({
        "image": {"name": "talos"},
        "rootVolume": {"sizeBytes": 50000000000u64},
        "machineConfigSecretRef": {"name": "talos", "namespace": "karpenter", "key": "worker.yaml"}
    })).unwrap());
    nc.metadata.generation = Some(2);
    let ready = |generation| Condition {
        type_: "Ready".into(),
        status: "True".into(),
        observed_generation: Some(generation),
        last_transition_time: "2026-11-24T00:00:00Z".into(),
        reason: "Ready".into(),
        message: String::new(),
    };
    nc.status = Some(super::super::InstanceNodeClassStatus {
        conditions: vec![ready(1)],
        images: vec![super::super::ResolvedImage {
            zone: "fr-par-2".into(),
            arch: "amd64".into(),
            id: "img".into(),
            name: "talos".into(),
        }],
        private_networks: Vec::new(),
    });
    assert_eq!(
        record(&nc).readiness,
        crate::nodeclass::conditions::Readiness::Unknown,
        "Ready for generation 1 says nothing of generation 2"
    );
    nc.status.as_mut().unwrap().conditions = vec![ready(2)];
    let r = record(&nc);
    assert!(r.ready());
    assert_eq!(r.image("fr-par-2", "amd64").unwrap().id, "img");
    let view = class_view(&nc);
    assert_eq!(view.ephemeral_storage_bytes, Some(50_000_000_000));
    assert_eq!(
        view.images,
        Some([("fr-par-2".to_string(), "amd64".to_string())].into())
    );
}
