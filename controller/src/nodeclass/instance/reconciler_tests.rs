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

#[tokio::test]
async fn the_kind_is_served_only_when_the_crd_answers() {
    let cases = [
        // What an API server answers for a resource no CRD defines.
        (
            ResponseTemplate::new(404).set_body_string("404 page not found\n"),
            Some(false),
        ),
        (ResponseTemplate::new(404).set_body_json(not_found_status()), Some(false)),
        (
            ResponseTemplate::new(403).set_body_json(json!({"kind": "Status", "apiVersion": "v1",
                "metadata": {}, "status": "Failure", "message": "forbidden", "reason": "Forbidden", "code": 403})),
            Some(false),
        ),
        (
            ResponseTemplate::new(200).set_body_json(json!({"apiVersion": "meta.k8s.io/v1",
                "kind": "PartialObjectMetadataList", "metadata": {}, "items": []})),
            Some(true),
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

#[tokio::test]
async fn without_the_crd_the_controller_returns_and_calls_nothing_else() {
    let kube = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(LIST_PATH))
        .respond_with(ResponseTemplate::new(404).set_body_json(not_found_status()))
        .expect(1)
        .mount(&kube)
        .await;
    let api = Arc::new(FakeInstance::new());
    let controller = InstanceNodeClassController::new(
        kube_client(&kube.uri()),
        api.clone(),
        "proj".into(),
        vec!["fr-par-2".into()],
        Arc::new(|| true),
        crate::catalog::CatalogStore::new(Duration::from_secs(60)),
    );
    // `run` returning at all is the behaviour under test: the shutdown
    // future never resolves, so only the probe's answer can end it. The
    // bound only turns a regression into a failure instead of a hang.
    tokio::time::timeout(
        Duration::from_secs(30),
        controller.run(std::future::pending()),
    )
    .await
    .expect("run returns once the probe says the kind is not served");
    let requests = kube.received_requests().await.expect("recording is on");
    assert_eq!(requests.len(), 1, "{requests:?}");
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
    });
    assert!(
        !record(&nc).ready,
        "Ready for generation 1 says nothing of generation 2"
    );
    nc.status.as_mut().unwrap().conditions = vec![ready(2)];
    let r = record(&nc);
    assert!(r.ready);
    assert_eq!(r.image("fr-par-2", "amd64").unwrap().id, "img");
    let view = class_view(&nc);
    assert_eq!(view.ephemeral_storage_bytes, Some(50_000_000_000));
    assert_eq!(
        view.images,
        Some([("fr-par-2".to_string(), "amd64".to_string())].into())
    );
}
