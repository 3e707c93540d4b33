//! Contract test: a real tonic client over a temporary Unix socket, the real
//! service, the provider on the in-memory Elastic Metal fake.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::AtomicU32;
use std::time::Duration;

use hyper_util::rt::TokioIo;
use prost::Message;
use serde_json::json;
use tokio::net::UnixStream;
use tonic::Code;
use tonic::transport::{Channel, Endpoint, Uri};

use super::pb::cloud_provider_client::CloudProviderClient;
use super::*;
use crate::provider::tests::{Fixture, ZONE, claim, fixture};
use crate::provider::vm::tests::vm_fixture;
use crate::scaleway::ApiError;
use crate::scaleway::fake::Op;

static NEXT: AtomicU32 = AtomicU32::new(0);

struct Harness {
    client: CloudProviderClient<Channel>,
    fixture: Fixture,
    path: PathBuf,
    stop: Option<tokio::sync::oneshot::Sender<()>>,
    server: tokio::task::JoinHandle<anyhow::Result<()>>,
}

async fn start() -> Harness {
    let fixture = fixture();
    let path = std::env::temp_dir().join(format!(
        "kps-grpc-{}-{}.sock",
        std::process::id(),
        NEXT.fetch_add(1, Ordering::SeqCst)
    ));
    // A stale socket file from a crashed run must not stop the server.
    drop(std::os::unix::net::UnixListener::bind(&path).unwrap());
    let service = CloudProviderService::new(
        fixture.provider.clone(),
        Leadership::default(),
        crate::provider::repair_policies(
            &crate::install::InstallSettings::default(),
            crate::provider::RepairTolerations::default(),
        ),
    );
    let (tx, rx) = tokio::sync::oneshot::channel::<()>();
    let p = path.clone();
    let server = tokio::spawn(async move {
        serve(&p, service, async {
            let _ = rx.await;
        })
        .await
    });
    for _ in 0..100 {
        if UnixStream::connect(&path).await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let p = path.clone();
    let channel = Endpoint::try_from("http://[::]:50051")
        .unwrap()
        .connect_with_connector(tower::service_fn(move |_: Uri| {
            let p = p.clone();
            async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(p).await?)) }
        }))
        .await
        .unwrap();
    Harness {
        client: CloudProviderClient::new(channel),
        fixture,
        path,
        stop: Some(tx),
        server,
    }
}

impl Harness {
    async fn lead(&mut self) {
        self.client
            .set_leadership(pb::SetLeadershipRequest {
                leader: true,
                identity: "test-0".into(),
            })
            .await
            .unwrap();
    }

    async fn create(&mut self, c: serde_json::Value) -> Result<serde_json::Value, Status> {
        let resp = self
            .client
            .create(pb::CreateRequest {
                node_claim_json: serde_json::to_vec(&c).unwrap(),
            })
            .await?;
        Ok(serde_json::from_slice(&resp.get_ref().node_claim_json).unwrap())
    }

    async fn stop(mut self) {
        self.stop.take().unwrap().send(()).unwrap();
        self.server.await.unwrap().unwrap();
        assert!(!self.path.exists(), "socket removed on shutdown");
    }
}

fn details(status: &Status) -> RpcStatus {
    RpcStatus::decode(status.details()).expect("grpc-status-details-bin holds a google.rpc.Status")
}

#[tokio::test]
async fn info_and_repair_policies() {
    let mut h = start().await;
    let info = h
        .client
        .info(pb::InfoRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(info.name, "scaleway");
    assert_eq!(info.node_classes[0].kind, "ScalewayElasticMetalNodeClass");
    assert_eq!(info.node_classes[0].group, "karpenter.scaleway.com");
    assert_eq!(
        info.node_classes.len(),
        1,
        "no Instance kind where Instances are not served"
    );
    assert!(
        info.well_known_labels
            .contains(&"karpenter.scaleway.com/instance-cpu".to_string())
    );
    let policies = h
        .client
        .repair_policies(pb::RepairPoliciesRequest {})
        .await
        .unwrap()
        .into_inner()
        .policies;
    use pb::repair_policy::Action;
    let on_wire: Vec<_> = policies
        .iter()
        .map(|p| {
            (
                p.condition_type.as_str(),
                p.condition_status.as_str(),
                p.reason_regex.as_str(),
                p.toleration_seconds,
                p.termination_grace_period_seconds,
                p.action(),
            )
        })
        .collect();
    // The fallback: the longest install with the default deadlines (172
    // min, see provider/repair.rs) plus 15 min.
    assert_eq!(
        on_wire,
        [
            ("Ready", "False", ".*", 600, Some(300), Action::RebootNode),
            (
                "Ready",
                "Unknown",
                "^NodeStatusUnknown$",
                600,
                Some(0),
                Action::RebootNode
            ),
            (
                "Ready",
                "Unknown",
                "",
                187 * 60,
                Some(0),
                Action::ReplaceNode
            ),
            (
                "KernelDeadlock",
                "True",
                ".*",
                600,
                Some(300),
                Action::RebootNode
            ),
            (
                "ReadonlyFilesystem",
                "True",
                ".*",
                30 * 60,
                None,
                Action::ReplaceNode
            ),
        ]
    );
    h.stop().await;
}

#[test]
fn repair_tolerations_round_up_to_whole_seconds() {
    let policy = |toleration| RepairPolicy {
        condition_type: "Ready".into(),
        condition_status: "False".into(),
        reason_regex: String::new(),
        toleration,
        termination_grace_period: Some(Duration::from_millis(100)),
        priority: 7,
        action: crate::provider::RepairAction::Replace,
    };
    let wire = repair_policy(&policy(Duration::from_millis(1500)));
    assert_eq!(wire.termination_grace_period_seconds, Some(1));
    assert_eq!(wire.priority, 7);
    assert_eq!(
        repair_policy(&policy(Duration::from_millis(1500))).toleration_seconds,
        2
    );
    assert_eq!(
        repair_policy(&policy(Duration::from_secs(1800))).toleration_seconds,
        1800
    );
}

#[tokio::test]
async fn mutating_calls_need_leadership() {
    let mut h = start().await;
    let err = h
        .create(claim("default-a", &["EM-A115X-SSD"]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    let d = details(&err);
    assert_eq!(
        d.details[0].type_url,
        "type.googleapis.com/karpenter.cloudprovider.v1.NotLeaderDetail"
    );
    let err = h
        .client
        .delete(pb::DeleteRequest {
            node_claim_json: serde_json::to_vec(&claim("default-a", &[])).unwrap(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert_eq!(h.fixture.api.count(Op::CreateServer), 0);
    h.stop().await;
}

#[tokio::test]
async fn create_get_list_delete_round_trip() {
    let mut h = start().await;
    h.lead().await;
    let created = h
        .create(claim("default-a", &["EM-A115X-SSD"]))
        .await
        .unwrap();
    let pid = created["status"]["providerID"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(pid.starts_with(&format!("scaleway://baremetal/{ZONE}/")));

    let got = h
        .client
        .get(pb::GetRequest {
            provider_id: pid.clone(),
        })
        .await
        .unwrap();
    let got: serde_json::Value = serde_json::from_slice(&got.get_ref().node_claim_json).unwrap();
    assert_eq!(got["status"]["providerID"], pid.as_str());

    let listed = h
        .client
        .list(pb::ListRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(listed.node_claims_json.len(), 1);

    let del = pb::DeleteRequest {
        node_claim_json: serde_json::to_vec(&created).unwrap(),
    };
    h.client.delete(del.clone()).await.unwrap();
    h.fixture.api.finish_deletions();
    assert_eq!(
        h.client.delete(del).await.unwrap_err().code(),
        Code::NotFound
    );
    let err = h
        .client
        .get(pb::GetRequest { provider_id: pid })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::NotFound);

    h.fixture
        .api
        .fail_next(Op::ListServers, ApiError::Unavailable("boom".into()));
    assert_ne!(
        h.client.list(pb::ListRequest {}).await.unwrap_err().code(),
        Code::Ok
    );
    h.stop().await;
}

#[tokio::test]
async fn create_errors_follow_the_table() {
    let mut h = start().await;
    h.lead().await;
    let err = h
        .create(claim("default-a", &["EM-T620E-H100"]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);

    // An order refused for stock: RESOURCE_EXHAUSTED with the catalog
    // revision that holds the mark.
    let before = h.fixture.catalog.snapshot().revision;
    h.fixture.api.fail_next(
        Op::CreateServer,
        ApiError::OutOfStock("EM-A115X-SSD".into()),
    );
    let err = h
        .create(claim("default-a", &["EM-A115X-SSD"]))
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::ResourceExhausted);
    let d = details(&err);
    assert_eq!(
        d.details[0].type_url,
        "type.googleapis.com/karpenter.cloudprovider.v1.InsufficientCapacityDetail"
    );
    let detail = pb::InsufficientCapacityDetail::decode(d.details[0].value.as_slice()).unwrap();
    assert_eq!(detail.catalog_revision, before + 1);
    assert_eq!(h.fixture.catalog.snapshot().revision, before + 1);

    let mut c = claim("default-a", &["EM-I215E-NVME"]);
    c["spec"]["nodeClassRef"]["name"] = json!("missing");
    let err = h.create(c).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(
        err.details().is_empty(),
        "NodeClassNotReady carries no NotLeaderDetail"
    );

    h.fixture
        .api
        .fail_next(Op::CreateServer, ApiError::Unauthorized("bad key".into()));
    let err = h
        .create(claim("default-a", &["EM-I215E-NVME"]))
        .await
        .unwrap_err();
    let d = details(&err);
    assert_eq!(d.code, err.code() as i32);
    assert_eq!(
        d.details[0].type_url,
        "type.googleapis.com/karpenter.cloudprovider.v1.CreateErrorDetail"
    );
    let detail = pb::CreateErrorDetail::decode(d.details[0].value.as_slice()).unwrap();
    assert_eq!(detail.condition_reason, "ScalewayUnauthorized");
    assert!(detail.condition_message.contains("bad key"));

    let err = h
        .client
        .create(pb::CreateRequest {
            node_claim_json: b"{not json".to_vec(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    h.stop().await;
}

#[tokio::test]
async fn instance_types_and_watch() {
    let mut h = start().await;
    let pool = json!({"spec": {"template": {"spec": {"nodeClassRef": {"name": "default"}}}}});
    let resp = h
        .client
        .get_instance_types(pb::GetInstanceTypesRequest {
            node_pool_json: serde_json::to_vec(&pool).unwrap(),
        })
        .await
        .unwrap()
        .into_inner();
    let h100 = resp
        .instance_types
        .iter()
        .find(|t| t.name == "EM-T620E-H100")
        .unwrap();
    assert!(!h100.offerings[0].available, "sold-out types stay listed");
    assert_eq!(h100.capacity["nvidia.com/gpu"], "2");
    let a = resp
        .instance_types
        .iter()
        .find(|t| t.name == "EM-A115X-SSD")
        .unwrap();
    assert!((a.offerings[0].price - 0.091).abs() < 1e-9);
    let zone_req = a
        .requirements
        .iter()
        .find(|r| r.key == "topology.kubernetes.io/zone")
        .unwrap();
    assert_eq!(zone_req.operator, pb::requirement::Operator::In as i32);
    assert_eq!(zone_req.values, vec![ZONE]);
    assert!(
        a.overhead
            .as_ref()
            .unwrap()
            .system_reserved
            .contains_key("memory")
    );

    let mut stream = h
        .client
        .watch_instance_types(pb::WatchInstanceTypesRequest {})
        .await
        .unwrap()
        .into_inner();
    let first = tokio::time::timeout(Duration::from_secs(5), stream.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(!first.default_catalog.is_empty());
    assert!(
        first.offers_read_at_unix > 1_700_000_000,
        "offers read time sent"
    );
    h.fixture.catalog.mark_unavailable("EM-A115X-SSD", ZONE);
    let second = tokio::time::timeout(Duration::from_secs(5), stream.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    assert!(second.revision > first.revision);
    let a = second
        .default_catalog
        .iter()
        .find(|t| t.name == "EM-A115X-SSD")
        .unwrap();
    assert!(!a.offerings[0].available);
    drop(stream);
    h.stop().await;
}

/// One catalog holds both kinds: a NodePool gets its nodeClassRef's kind and
/// name, an Instance NodePool of an unlisted class the Instance default, and
/// the watch stream says which kind each catalog is.
#[tokio::test]
async fn instance_types_are_keyed_by_kind() {
    use crate::catalog::{ClassKind, ZoneProducts, vm_instance_types};
    use crate::scaleway::instance::fake::{recorded_availability, recorded_types};
    let mut h = start().await;
    let vms = vm_instance_types(
        &BTreeMap::from([(
            ZONE.to_string(),
            ZoneProducts {
                types: recorded_types(),
                availability: recorded_availability(),
            },
        )]),
        20_000_000_000,
    )
    .0;
    let catalog = &h.fixture.catalog;
    catalog.set_kind_types(ClassKind::Instance, vms);
    let shared = || BTreeMap::from([("shared".to_string(), vec![ZONE.to_string()])]);
    catalog.set_node_classes(ClassKind::ElasticMetal, shared());
    catalog.set_node_classes(ClassKind::Instance, shared());

    let mut types_of = async |kind: Option<&str>, name: &str| {
        let mut class_ref = json!({"group": "karpenter.scaleway.com", "name": name});
        if let Some(kind) = kind {
            class_ref["kind"] = json!(kind);
        }
        let pool = json!({"spec": {"template": {"spec": {"nodeClassRef": class_ref}}}});
        let resp = h
            .client
            .get_instance_types(pb::GetInstanceTypesRequest {
                node_pool_json: serde_json::to_vec(&pool).unwrap(),
            })
            .await
            .unwrap()
            .into_inner();
        let names: Vec<String> = resp.instance_types.into_iter().map(|t| t.name).collect();
        assert!(!names.is_empty(), "{kind:?} {name}");
        (names.iter().all(|n| n.starts_with("EM-")), names)
    };
    let em = Some("ScalewayElasticMetalNodeClass");
    let vm = Some("ScalewayInstanceNodeClass");
    let (all_em, em_shared) = types_of(em, "shared").await;
    assert!(all_em);
    let (all_em, vm_shared) = types_of(vm, "shared").await;
    assert!(!all_em && vm_shared.iter().all(|n| !n.starts_with("EM-")));
    let (all_em, vm_unlisted) = types_of(vm, "unlisted").await;
    assert!(!all_em && vm_unlisted.iter().all(|n| !n.starts_with("EM-")));
    // Elastic Metal as before: no kind or an unknown one is Elastic Metal.
    assert_eq!(types_of(None, "shared").await.1, em_shared);
    assert_eq!(
        types_of(Some("OtherNodeClass"), "shared").await.1,
        em_shared
    );
    assert!(types_of(em, "unlisted").await.0);

    let mut stream = h
        .client
        .watch_instance_types(pb::WatchInstanceTypesRequest {})
        .await
        .unwrap()
        .into_inner();
    let msg = tokio::time::timeout(Duration::from_secs(5), stream.message())
        .await
        .unwrap()
        .unwrap()
        .unwrap();
    let kinds: Vec<(&str, &str)> = msg
        .catalogs
        .iter()
        .map(|c| (c.node_class_kind.as_str(), c.node_class_name.as_str()))
        .collect();
    assert_eq!(
        kinds,
        [("", "shared"), ("ScalewayInstanceNodeClass", "shared")],
        "Elastic Metal goes on the wire as the empty kind"
    );
    assert!(
        msg.default_catalog
            .iter()
            .all(|t| t.name.starts_with("EM-"))
    );
    assert_eq!(msg.kind_defaults.len(), 1);
    let d = &msg.kind_defaults[0];
    assert_eq!(
        (d.node_class_kind.as_str(), d.node_class_name.as_str()),
        ("ScalewayInstanceNodeClass", "")
    );
    let mut wire: Vec<&str> = d.instance_types.iter().map(|t| t.name.as_str()).collect();
    wire.sort();
    let mut served: Vec<&str> = vm_unlisted.iter().map(String::as_str).collect();
    served.sort();
    assert_eq!(wire, served);
    drop(stream);
    h.stop().await;
}

#[tokio::test]
async fn info_lists_the_instance_kind_only_where_instances_are_served() {
    let kinds = |provider: Arc<Provider>| async move {
        let service = CloudProviderService::new(provider, Leadership::default(), Vec::new());
        let info = service
            .info(tonic::Request::new(pb::InfoRequest {}))
            .await
            .unwrap()
            .into_inner();
        let kinds: Vec<String> = info.node_classes.into_iter().map(|k| k.kind).collect();
        (kinds, info.well_known_labels)
    };
    let (served, labels) = kinds(vm_fixture().provider).await;
    assert_eq!(
        served,
        ["ScalewayElasticMetalNodeClass", "ScalewayInstanceNodeClass"]
    );
    assert!(labels.contains(&"karpenter.scaleway.com/instance-family".to_string()));
    let (em_only, _) = kinds(fixture().provider).await;
    assert_eq!(em_only, ["ScalewayElasticMetalNodeClass"]);
}

impl Harness {
    async fn reboot(&mut self, c: &serde_json::Value, operation: &str) -> Result<(), Status> {
        self.client
            .reboot(pb::RebootRequest {
                node_claim_json: serde_json::to_vec(c).unwrap(),
                operation_id: operation.into(),
            })
            .await
            .map(drop)
    }

    /// A joined Elastic Metal node `default-a` on server `srv-1`.
    fn joined_node(&self) -> serde_json::Value {
        crate::provider::reboot::fakes::joined_em_node(
            &self.fixture.api,
            &self.fixture.claims,
            ZONE,
            "default-a",
            "srv-1",
        )
    }
}

const REBOOT_OP: &str = "default-a-uid-1763805600000000000-boot-a";

#[tokio::test]
async fn reboot_needs_leadership_and_an_operation_id() {
    let mut h = start().await;
    let node = h.joined_node();
    let err = h.reboot(&node, REBOOT_OP).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert_eq!(
        details(&err).details[0].type_url,
        "type.googleapis.com/karpenter.cloudprovider.v1.NotLeaderDetail"
    );
    h.lead().await;
    let err = h.reboot(&node, "").await.unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    let err = h
        .client
        .reboot(pb::RebootRequest {
            node_claim_json: b"{not json".to_vec(),
            operation_id: REBOOT_OP.into(),
        })
        .await
        .unwrap_err();
    assert_eq!(err.code(), Code::InvalidArgument);
    assert_eq!(h.fixture.api.count(Op::RebootServer), 0);
    h.stop().await;
}

#[tokio::test]
async fn reboot_is_accepted_once_and_replayed() {
    let mut h = start().await;
    h.lead().await;
    let node = h.joined_node();
    h.reboot(&node, REBOOT_OP).await.unwrap();
    h.reboot(&node, REBOOT_OP).await.unwrap();
    assert_eq!(h.fixture.api.count(Op::RebootServer), 1);
    h.stop().await;
}

#[tokio::test]
async fn reboot_errors_follow_the_table() {
    let mut h = start().await;
    h.lead().await;
    let node = h.joined_node();
    let code = |e: Result<(), Status>| e.unwrap_err().code();

    // NOT_FOUND: the server is gone (core fails the reboot, replaces).
    h.fixture
        .api
        .fail_next(Op::GetServer, ApiError::NotFound("server".into()));
    assert_eq!(code(h.reboot(&node, REBOOT_OP).await), Code::NotFound);

    // PERMISSION_DENIED: the key lacks a permission (401 and 403 alike).
    h.fixture
        .api
        .fail_next(Op::GetServer, ApiError::Unauthorized("403".into()));
    assert_eq!(
        code(h.reboot(&node, REBOOT_OP).await),
        Code::PermissionDenied
    );

    // UNAVAILABLE: the API did not answer (core retries).
    h.fixture
        .api
        .fail_next(Op::GetServer, ApiError::Unavailable("502".into()));
    assert_eq!(code(h.reboot(&node, REBOOT_OP).await), Code::Unavailable);

    // ABORTED: not now (an install still running).
    h.fixture.claims.set_annotation(
        "default-a",
        "install.karpenter.scaleway.com/phase",
        Some("configured"),
    );
    assert_eq!(code(h.reboot(&node, REBOOT_OP).await), Code::Aborted);

    // FAILED_PRECONDITION without NotLeaderDetail: refused (install failed).
    h.fixture.claims.set_annotation(
        "default-a",
        "install.karpenter.scaleway.com/phase",
        Some("failed"),
    );
    let err = h.reboot(&node, REBOOT_OP).await.unwrap_err();
    assert_eq!(err.code(), Code::FailedPrecondition);
    assert!(
        err.details().is_empty(),
        "a refusal carries no NotLeaderDetail"
    );

    // NOT_FOUND: the NodeClaim is gone.
    h.fixture.claims.remove("default-a");
    assert_eq!(code(h.reboot(&node, REBOOT_OP).await), Code::NotFound);

    // INVALID_ARGUMENT: not a providerID of this provider.
    let mut foreign = node.clone();
    foreign["status"]["providerID"] = json!("aws:///eu-west-1a/i-0");
    foreign["metadata"]["name"] = json!("default-z");
    foreign["metadata"]["uid"] = json!("z");
    h.fixture.claims.insert(foreign.clone());
    assert_eq!(
        code(h.reboot(&foreign, REBOOT_OP).await),
        Code::InvalidArgument
    );
    assert_eq!(h.fixture.api.count(Op::RebootServer), 0);
    h.stop().await;
}
