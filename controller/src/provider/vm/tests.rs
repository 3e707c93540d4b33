//! Create, Delete, Get, List, the join and drift of VMs, against the
//! in-memory Instance/Block fake.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::{Value, json};

use super::super::tests::{FakeTokens, ZONE, fixture};
use super::super::{
    ClusterPorts, KubeError, NodeClaimSource, Provider, ProviderError, ProviderSettings,
};
use super::super::{NodeRegistrar, NodeRegistration};
use super::*;
use crate::catalog::{CatalogStore, ClassKind, ClassView, ZoneProducts, vm_instance_types};
use crate::install::{InstallEvent, NodePort, NodePortError, Progress};
use crate::nodeclass::SecretKeyRef;
use crate::nodeclass::instance::{
    InstanceImageSelector, InstanceNodeClassSpec, PublicIpMode, ResolvedImage, RootVolume,
    RootVolumeType,
};
use crate::scaleway::ApiError;
use crate::scaleway::instance::fake::{FakeInstance, Op, recorded_availability, recorded_types};
use crate::scaleway::instance::{ServerAction, ServerState, USER_DATA_KEY};
use crate::scaleway::private_network::PrivateNetworks;

const WORKER: &str = include_str!("../../talos/testdata/worker-v1.13.yaml");
const IMAGE: &str = "11111111-1111-4111-8111-111111111111";

/// The cache (`.0`), and what the API server holds where it differs (`.1`).
#[derive(Default)]
pub(super) struct FakeClasses(
    pub(super) Mutex<BTreeMap<String, InstanceClassRecord>>,
    pub(super) Mutex<BTreeMap<String, InstanceClassRecord>>,
);

#[async_trait]
impl InstanceClasses for FakeClasses {
    fn get(&self, name: &str) -> Option<InstanceClassRecord> {
        self.0.lock().unwrap().get(name).cloned()
    }

    async fn get_live(&self, name: &str) -> Result<Option<InstanceClassRecord>, String> {
        match self.1.lock().unwrap().get(name) {
            Some(live) => Ok(Some(live.clone())),
            None => Ok(self.get(name)),
        }
    }
}

pub(super) fn spec() -> InstanceNodeClassSpec {
    InstanceNodeClassSpec {
        zones: vec![ZONE.into()],
        image: InstanceImageSelector {
            name: "talos-v1.13.9".into(),
            ..Default::default()
        },
        root_volume: Some(RootVolume {
            volume_type: RootVolumeType::SbsVolume,
            size_bytes: 30_000_000_000,
            iops: Some(15000),
        }),
        security_group_id: None,
        placement_group_id: None,
        public_ip: PublicIpMode::Dynamic,
        machine_config_secret_ref: SecretKeyRef {
            name: "talos".into(),
            namespace: "karpenter".into(),
            key: "worker.yaml".into(),
        },
        machine_config_patches: vec![],
        tags: vec!["team=ml".into()],
        private_network: None,
    }
}

fn record(spec: InstanceNodeClassSpec) -> InstanceClassRecord {
    InstanceClassRecord {
        name: "vms".into(),
        spec,
        images: vec![ResolvedImage {
            zone: ZONE.into(),
            arch: "amd64".into(),
            id: IMAGE.into(),
            name: "talos-v1.13.9".into(),
        }],
        readiness: crate::nodeclass::conditions::Readiness::Ready,
        private_networks: Vec::new(),
    }
}

pub(crate) struct Vm {
    pub(super) api: Arc<FakeInstance>,
    pub(super) classes: Arc<FakeClasses>,
    tokens: Arc<FakeTokens>,
    nodes: Arc<super::super::tests::FakeRegistrar>,
    catalog: Arc<CatalogStore>,
    pub(crate) provider: Arc<Provider>,
}

pub(crate) fn vm_fixture() -> Vm {
    vm_fixture_with(|_| None)
}

/// [`vm_fixture`], with the Private Network clients `networks` makes from
/// the Instance fake, if any.
pub(super) fn vm_fixture_with(
    networks: impl FnOnce(&Arc<FakeInstance>) -> Option<Arc<dyn PrivateNetworks>>,
) -> Vm {
    let f = fixture();
    f.classes.secrets.lock().unwrap().insert(
        ("karpenter".into(), "talos".into(), "worker.yaml".into()),
        WORKER.into(),
    );
    let api = Arc::new(FakeInstance::new());
    api.set_types(ZONE, recorded_types());
    api.set_availability(ZONE, recorded_availability());
    let catalog = CatalogStore::new(std::time::Duration::from_secs(1800));
    let products = ZoneProducts {
        types: recorded_types(),
        availability: recorded_availability(),
    };
    catalog.set_kind_types(
        ClassKind::Instance,
        vm_instance_types(
            &BTreeMap::from([(ZONE.to_string(), products)]),
            20_000_000_000,
        )
        .0,
    );
    let class = record(spec());
    catalog.set_node_classes(
        ClassKind::Instance,
        BTreeMap::from([(
            "vms".to_string(),
            ClassView {
                images: Some(class.image_pairs()),
                ephemeral_storage_bytes: Some(30_000_000_000),
                ..ClassView::default()
            },
        )]),
    );
    let classes = Arc::new(FakeClasses::default());
    classes.0.lock().unwrap().insert("vms".into(), class);
    let tokens = Arc::new(FakeTokens::default());
    let networks = networks(&api);
    let provider = Provider::new(
        f.api.clone(),
        catalog.clone(),
        f.classes.clone(),
        f.installer.clone(),
        ClusterPorts {
            tokens: tokens.clone(),
            nodes: f.nodes.clone(),
        },
        ProviderSettings {
            cluster_name: "test".into(),
            project_id: "proj-1".into(),
            zones: vec![ZONE.into(), "nl-ams-1".into()],
            instance_zones: vec![ZONE.into(), "nl-ams-1".into()],
        },
    )
    .with_instances(VmPorts {
        api: api.clone(),
        block: api.clone(),
        classes: classes.clone(),
    });
    let provider = Arc::new(match networks {
        Some(networks) => provider.with_private_networks(networks),
        None => provider,
    });
    Vm {
        api,
        classes,
        tokens,
        nodes: f.nodes.clone(),
        catalog,
        provider,
    }
}

pub(super) fn vm_claim(name: &str, types: &[&str]) -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "burst"}},
        "spec": {
            "requirements": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": types},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
            ],
            "nodeClassRef": {"group": "karpenter.scaleway.com", "kind": "ScalewayInstanceNodeClass", "name": "vms"}
        }
    })
}

#[tokio::test]
async fn create_makes_the_cheapest_vm_with_its_config_as_user_data_and_powers_it_on() {
    let v = vm_fixture();
    let out = v
        .provider
        .create(vm_claim("burst-a", &["L4-1-24G", "POP2-2C-8G"]))
        .await
        .unwrap();
    let servers = v.api.servers();
    assert_eq!(servers.len(), 1);
    let s = &servers[0];
    assert_eq!(
        (s.name.as_str(), s.commercial_type.as_str()),
        ("burst-a", "POP2-2C-8G")
    );
    assert_eq!(s.image.as_ref().unwrap().id, IMAGE);
    for t in [
        "karpenter.scaleway.com/cluster=test",
        "karpenter.sh/nodeclaim=burst-a",
        "karpenter.scaleway.com/nodeclass=vms",
        "karpenter.sh/nodepool=burst",
        "team=ml",
    ] {
        assert!(s.tags.contains(&t.to_string()), "{t} in {:?}", s.tags);
    }
    let volume = &v.api.volumes()[0];
    assert_eq!(volume.size, 30_000_000_000, "the NodeClass's root volume");
    assert_eq!(
        volume.tags, s.tags,
        "the root volume carries the VM's ownership tags"
    );
    assert_eq!(volume.kind, "sbs_15k", "the NodeClass's IOPS class");
    assert_eq!(s.state, ServerState::Starting, "powered on");
    let actions: Vec<_> = v.api.calls().iter().filter_map(|c| c.action).collect();
    assert_eq!(actions, [ServerAction::Poweron]);

    let config = v
        .api
        .user_data(&s.id, USER_DATA_KEY)
        .expect("user data set");
    let pid = format!("scaleway://instance/{ZONE}/{}", s.id);
    assert!(config.contains(&pid), "the kubelet's provider-id");
    let token = v.tokens.tokens.lock().unwrap()["burst-a"].clone();
    assert!(config.contains(&token), "the node's own token");
    assert!(config.contains("karpenter.sh/unregistered"));

    assert_eq!(out["status"]["providerID"], json!(pid));
    assert_eq!(out["status"]["imageID"], json!(IMAGE));
    assert_eq!(
        out["status"]["capacity"]["ephemeral-storage"],
        json!("29296875Ki"),
        "30 GB, the NodeClass's root volume"
    );
    let annotations = out["metadata"]["annotations"].as_object().unwrap();
    assert_eq!(annotations[VOLUMES_ANNOTATION], json!(volume.id));
    assert_eq!(
        annotations["karpenter.scaleway.com/nodeclass-hash-version"],
        json!(VM_HASH_VERSION)
    );
}

#[tokio::test]
async fn a_retried_create_adopts_the_vm_and_does_not_power_it_on_twice() {
    let v = vm_fixture();
    let first = v
        .provider
        .create(vm_claim("burst-a", &["POP2-2C-8G"]))
        .await
        .unwrap();
    let again = v
        .provider
        .create(vm_claim("burst-a", &["POP2-2C-8G"]))
        .await
        .unwrap();
    assert_eq!(v.api.servers().len(), 1);
    assert_eq!(first["status"]["providerID"], again["status"]["providerID"]);
    assert_eq!(v.api.count(Op::CreateServer), 1);
    assert_eq!(v.api.count(Op::Action), 1);
    assert_eq!(v.api.count(Op::SetUserData), 1);
}

#[tokio::test]
async fn a_create_that_lost_its_answer_before_power_on_finishes_the_boot() {
    let v = vm_fixture();
    v.api
        .fail_next(Op::Action, ApiError::Timeout("poweron".into()));
    let err = v
        .provider
        .create(vm_claim("burst-a", &["POP2-2C-8G"]))
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::CreateFailed { .. }), "{err:?}");
    assert_eq!(v.api.servers()[0].state, ServerState::Stopped);
    v.provider
        .create(vm_claim("burst-a", &["POP2-2C-8G"]))
        .await
        .unwrap();
    assert_eq!(v.api.servers().len(), 1, "adopted, not created again");
    assert_eq!(v.api.servers()[0].state, ServerState::Starting);
}

#[tokio::test]
async fn out_of_stock_is_insufficient_capacity_and_marks_the_offering() {
    let v = vm_fixture();
    v.api
        .fail_next(Op::CreateServer, ApiError::OutOfStock("POP2-2C-8G".into()));
    let err = v
        .provider
        .create(vm_claim("burst-a", &["POP2-2C-8G"]))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::InsufficientCapacity(_)),
        "{err:?}"
    );
    assert!(v.catalog.refusal("POP2-2C-8G", ZONE).is_some());
    // The next Create does not try the same offering again.
    let err = v
        .provider
        .create(vm_claim("burst-b", &["POP2-2C-8G"]))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::InsufficientCapacity(_)),
        "{err:?}"
    );
    assert_eq!(v.api.count(Op::CreateServer), 1);
}

#[tokio::test]
async fn quota_403_is_insufficient_capacity_too() {
    let v = vm_fixture();
    v.api.fail_next(
        Op::CreateServer,
        ApiError::QuotaExceeded("instances".into()),
    );
    let err = v
        .provider
        .create(vm_claim("burst-a", &["POP2-2C-8G"]))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::InsufficientCapacity(_)),
        "{err:?}"
    );
    assert!(v.catalog.refusal("POP2-2C-8G", ZONE).is_some());
}

#[tokio::test]
async fn no_image_for_the_pair_means_no_vm() {
    let v = vm_fixture();
    v.classes
        .0
        .lock()
        .unwrap()
        .get_mut("vms")
        .unwrap()
        .images
        .clear();
    let err = v
        .provider
        .create(vm_claim("burst-a", &["POP2-2C-8G"]))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::InsufficientCapacity(_)),
        "{err:?}"
    );
    assert_eq!(v.api.count(Op::CreateServer), 0);
}

#[tokio::test]
async fn a_class_not_ready_or_missing_creates_nothing() {
    let v = vm_fixture();
    v.classes
        .0
        .lock()
        .unwrap()
        .get_mut("vms")
        .unwrap()
        .readiness = crate::nodeclass::conditions::Readiness::NotReady;
    let err = v
        .provider
        .create(vm_claim("burst-a", &["POP2-2C-8G"]))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::NodeClassNotReady(_)),
        "{err:?}"
    );
    v.classes.0.lock().unwrap().clear();
    let err = v
        .provider
        .create(vm_claim("burst-a", &["POP2-2C-8G"]))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::NodeClassNotReady(_)),
        "{err:?}"
    );
    assert_eq!(v.api.count(Op::CreateServer), 0);
}

/// Not reconciled yet: retryable, never NodeClassNotReady.
#[tokio::test]
async fn a_class_not_yet_reconciled_is_retryable() {
    let v = vm_fixture();
    v.classes
        .0
        .lock()
        .unwrap()
        .get_mut("vms")
        .unwrap()
        .readiness = crate::nodeclass::conditions::Readiness::Unknown;
    let err = v
        .provider
        .create(vm_claim("burst-a", &["POP2-2C-8G"]))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ProviderError::CreateFailed { reason, .. } if reason == "NodeClassReadinessUnknown"),
        "{err:?}"
    );
    assert_eq!(v.api.count(Op::CreateServer), 0);
}

/// The cache lags the reconciler's own `Ready` write (a NodeClaim made with
/// its NodeClass): Create asks the API server before refusing.
#[tokio::test]
async fn create_reads_past_a_cache_that_lags_the_ready_write() {
    let v = vm_fixture();
    let ready = v.classes.0.lock().unwrap()["vms"].clone();
    v.classes
        .0
        .lock()
        .unwrap()
        .get_mut("vms")
        .unwrap()
        .readiness = crate::nodeclass::conditions::Readiness::NotReady;
    v.classes.1.lock().unwrap().insert("vms".into(), ready);
    v.provider
        .create(vm_claim("burst-a", &["POP2-2C-8G"]))
        .await
        .expect("Ready on the API server");
    assert_eq!(v.api.count(Op::CreateServer), 1);
}

/// A NodeClass created together with its NodeClaim: the reconciler wrote
/// Ready with its images, Create read that past the cache, but the
/// catalog's view of the class still has the cache's (no image yet). That is
/// a retry, not insufficient capacity (core would delete the NodeClaim; core's
/// regression suite lost a standalone NodeClaim to it).
#[tokio::test]
async fn a_catalog_lagging_the_nodeclass_images_is_retryable_not_insufficient_capacity() {
    let v = vm_fixture();
    let lagging = ClassView {
        images: Some(Default::default()),
        ephemeral_storage_bytes: Some(30_000_000_000),
        ..ClassView::default()
    };
    v.catalog.set_node_classes(
        ClassKind::Instance,
        BTreeMap::from([("vms".to_string(), lagging)]),
    );
    let err = v
        .provider
        .create(vm_claim("burst-a", &["POP2-2C-8G"]))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ProviderError::CreateFailed { reason, .. } if reason == "NodeClassCatalogPending"),
        "{err:?}"
    );
    assert_eq!(v.api.count(Op::CreateServer), 0);
    // No type at all stays insufficient capacity, lag or not.
    assert!(matches!(
        v.provider.create(vm_claim("burst-b", &["NOPE-1"])).await,
        Err(ProviderError::InsufficientCapacity(_))
    ));
    let caught_up = ClassView {
        images: Some(v.classes.0.lock().unwrap()["vms"].image_pairs()),
        ephemeral_storage_bytes: Some(30_000_000_000),
        ..ClassView::default()
    };
    v.catalog.set_node_classes(
        ClassKind::Instance,
        BTreeMap::from([("vms".to_string(), caught_up)]),
    );
    v.provider
        .create(vm_claim("burst-a", &["POP2-2C-8G"]))
        .await
        .expect("the catalog caught up");
    assert_eq!(v.api.count(Op::CreateServer), 1);
}

/// Core's Delete loop: call until NotFound, letting the API's actions finish.
pub(super) async fn delete_until_gone(v: &Vm, claim: &Value) -> usize {
    for round in 1..=10 {
        match v.provider.delete(claim).await {
            Err(ProviderError::NotFound(_)) => return round,
            Ok(()) => v.api.finish_actions(),
            Err(e) => panic!("delete failed: {e:?}"),
        }
    }
    panic!("not gone after 10 rounds");
}

#[tokio::test]
async fn delete_terminates_then_deletes_the_volume_and_leaves_nothing_billed() {
    let v = vm_fixture();
    let claim = v
        .provider
        .create(vm_claim("burst-a", &["POP2-2C-8G"]))
        .await
        .unwrap();
    v.api.finish_actions();
    let id = v.api.servers()[0].id.clone();
    v.api.attach_flexible_ip(ZONE, &id);
    assert_eq!(v.api.servers()[0].state, ServerState::Running);
    delete_until_gone(&v, &claim).await;
    assert!(v.api.servers().is_empty());
    assert!(v.api.volumes().is_empty(), "the SBS root volume is deleted");
    assert!(
        v.api.flexible_ips().is_empty(),
        "the flexible IP is released"
    );
    let actions: Vec<_> = v.api.calls().iter().filter_map(|c| c.action).collect();
    assert!(actions.contains(&ServerAction::Terminate));
    // Idempotent: asked again, still NotFound, nothing else deleted.
    assert!(matches!(
        v.provider.delete(&claim).await,
        Err(ProviderError::NotFound(_))
    ));
}

/// The VM's kubelet joined while core was deleting its NodeClaim (an
/// insufficient-capacity answer, then a Create retried from a stale cache):
/// core never registered the Node, so it deletes none; the provider does
/// once the VM is gone, and only the Node of that VM.
#[tokio::test]
async fn the_node_of_a_gone_vm_that_core_never_registered_is_deleted() {
    let v = vm_fixture();
    let claim = v
        .provider
        .create(vm_claim("burst-a", &["POP2-2C-8G"]))
        .await
        .unwrap();
    v.api.finish_actions();
    let pid = claim["status"]["providerID"].as_str().unwrap().to_string();
    let joined = |name: &str, provider_id: &str| NodeRegistration {
        name: name.into(),
        provider_id: provider_id.into(),
        labels: BTreeMap::new(),
        taints: Vec::new(),
        owner_uid: None,
    };
    v.nodes.register(&joined("burst-a", &pid)).await.unwrap();
    v.nodes
        .register(&joined("burst-b", "scaleway://instance/fr-par-2/other"))
        .await
        .unwrap();
    // Under way: the Node stays while the VM may still run.
    assert_eq!(v.provider.delete(&claim).await, Ok(()));
    assert!(v.nodes.nodes.lock().unwrap().contains_key("burst-a"));
    delete_until_gone(&v, &claim).await;
    let left: Vec<String> = v.nodes.nodes.lock().unwrap().keys().cloned().collect();
    assert_eq!(left, vec!["burst-b".to_string()]);
}

/// A Node not yet deleted keeps Delete from answering gone: core asks again
/// rather than leaving it.
#[tokio::test]
async fn a_failed_node_deletion_is_retried_not_reported_gone() {
    let v = vm_fixture();
    let claim = v
        .provider
        .create(vm_claim("burst-a", &["POP2-2C-8G"]))
        .await
        .unwrap();
    v.api.finish_actions();
    // Only `forget` reads it during Delete: the first call that finds the VM gone.
    *v.nodes.fail_next.lock().unwrap() = Some(KubeError::Unavailable("503".into()));
    let mut result = v.provider.delete(&claim).await;
    for _ in 0..10 {
        if result.is_err() {
            break;
        }
        v.api.finish_actions();
        result = v.provider.delete(&claim).await;
    }
    let err = result.unwrap_err();
    assert!(
        matches!(&err, ProviderError::Unavailable(m) if m.contains("Node not yet deleted")),
        "{err:?}"
    );
    assert!(matches!(
        v.provider.delete(&claim).await,
        Err(ProviderError::NotFound(_))
    ));
}

#[tokio::test]
async fn delete_of_a_stopped_vm_deletes_it_and_without_a_provider_id_finds_it_by_tag() {
    let v = vm_fixture();
    v.api
        .fail_next(Op::Action, ApiError::Timeout("poweron".into()));
    let _ = v
        .provider
        .create(vm_claim("burst-a", &["POP2-2C-8G"]))
        .await;
    assert_eq!(v.api.servers()[0].state, ServerState::Stopped);
    // Core never got a providerID: the claim as core holds it.
    delete_until_gone(&v, &vm_claim("burst-a", &["POP2-2C-8G"])).await;
    assert!(v.api.servers().is_empty());
    assert!(v.api.volumes().is_empty());
    assert_eq!(v.api.count(Op::DeleteServer), 1);
}

/// Core's regression suite sets another provider's providerID on a
/// NodeClaim of our NodeClass and waits for it to be collected: Delete must
/// answer gone, or core's finalizer never lets it go. A malformed Scaleway
/// one is a bad request.
#[tokio::test]
async fn delete_of_a_foreign_provider_id_is_gone_and_a_malformed_scaleway_one_is_refused() {
    let v = vm_fixture();
    let mut claim = vm_claim("burst-a", &["POP2-2C-8G"]);
    claim["status"]["providerID"] = json!("Provider:///AZ/i-01234567890123456");
    assert!(matches!(
        v.provider.delete(&claim).await,
        Err(ProviderError::NotFound(_))
    ));
    claim["status"]["providerID"] = json!("scaleway://instance/fr-par-2");
    assert!(matches!(
        v.provider.delete(&claim).await,
        Err(ProviderError::Invalid(_))
    ));
    assert!(v.api.calls().is_empty(), "no API call for either");
}

#[tokio::test]
async fn delete_never_touches_a_vm_of_another_cluster() {
    let v = vm_fixture();
    let claim = v
        .provider
        .create(vm_claim("burst-a", &["POP2-2C-8G"]))
        .await
        .unwrap();
    let mut server = v.api.servers()[0].clone();
    server
        .tags
        .retain(|t| !t.starts_with("karpenter.scaleway.com/cluster="));
    v.api.insert_server(server);
    assert!(matches!(
        v.provider.delete(&claim).await,
        Err(ProviderError::NotFound(_))
    ));
    assert_eq!(v.api.servers().len(), 1);
    assert_eq!(v.api.count(Op::Action), 1, "only the power-on");
}

struct Claims(Vec<Value>);

#[async_trait]
impl NodeClaimSource for Claims {
    async fn list(&self) -> Result<Vec<Value>, KubeError> {
        Ok(self.0.clone())
    }

    async fn annotate(
        &self,
        name: &str,
        _: &str,
        _: &str,
        _: Option<&str>,
    ) -> Result<(), KubeError> {
        Err(KubeError::Refused(format!("read-only fake: {name}")))
    }
}

fn with_claims(v: &Vm, claims: Vec<Value>) -> Provider {
    let f = fixture();
    Provider::new(
        f.api.clone(),
        v.catalog.clone(),
        f.classes.clone(),
        f.installer.clone(),
        ClusterPorts {
            tokens: v.tokens.clone(),
            nodes: f.nodes.clone(),
        },
        ProviderSettings {
            cluster_name: "test".into(),
            project_id: "proj-1".into(),
            zones: vec![ZONE.into()],
            instance_zones: vec![ZONE.into()],
        },
    )
    .with_node_claims(Arc::new(Claims(claims)))
    .with_instances(VmPorts {
        api: v.api.clone(),
        block: v.api.clone(),
        classes: v.classes.clone(),
    })
}

#[tokio::test]
async fn list_holds_vms_and_gets_proves_absence_or_fails() {
    let v = vm_fixture();
    let claim = v
        .provider
        .create(vm_claim("burst-a", &["POP2-2C-8G"]))
        .await
        .unwrap();
    let provider = with_claims(&v, vec![claim.clone()]);
    let listed = provider.list().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        listed[0]["status"]["providerID"],
        claim["status"]["providerID"]
    );
    assert_eq!(listed[0]["metadata"]["name"], json!("burst-a"));
    assert_eq!(
        listed[0]["metadata"]["labels"]["node.kubernetes.io/instance-type"],
        json!("POP2-2C-8G")
    );

    let pid = claim["status"]["providerID"].as_str().unwrap();
    let got = provider.get(pid).await.unwrap();
    assert_eq!(got["status"]["providerID"], json!(pid));

    // A listing that fails is an error, never a shorter list.
    v.api
        .fail_next(Op::ListServers, ApiError::Unavailable("502".into()));
    assert!(matches!(
        provider.list().await,
        Err(ProviderError::Unavailable(_))
    ));

    // Gone (404): left out, and Get says NotFound.
    let id = v.api.servers()[0].id.clone();
    v.api.finish_actions();
    v.api
        .server_action(ZONE, &id, ServerAction::Terminate)
        .await
        .unwrap();
    v.api.finish_actions();
    assert!(provider.list().await.unwrap().is_empty());
    assert!(matches!(
        provider.get(pid).await,
        Err(ProviderError::NotFound(_))
    ));
}

/// Node readiness by name; deletions and events recorded.
#[derive(Default)]
struct Nodes {
    ready: Mutex<BTreeMap<String, bool>>,
    deleted: Mutex<Vec<String>>,
    released: Mutex<Vec<String>>,
    events: Mutex<Vec<InstallEvent>>,
}

#[async_trait]
impl NodePort for Nodes {
    async fn node_ready(&self, name: &str) -> Result<Option<bool>, NodePortError> {
        Ok(self.ready.lock().unwrap().get(name).copied())
    }
    async fn delete_node_claim(&self, name: &str, _reason: &str) -> Result<(), NodePortError> {
        self.deleted.lock().unwrap().push(name.into());
        Ok(())
    }
    async fn save_progress(&self, _: &str, _: &Progress) -> Result<(), NodePortError> {
        Ok(())
    }
    async fn event(&self, _claim: &str, event: InstallEvent) {
        self.events.lock().unwrap().push(event);
    }
    async fn initialize_node(&self, _: &str) -> Result<(), NodePortError> {
        Ok(())
    }
    async fn release_token(&self, claim: &str) -> Result<(), NodePortError> {
        self.released.lock().unwrap().push(claim.into());
        Ok(())
    }
}

fn aged(mut claim: Value, seconds: i64) -> Value {
    let t = chrono::Utc::now() - chrono::Duration::seconds(seconds);
    claim["metadata"]["creationTimestamp"] = json!(t.format("%Y-%m-%dT%H:%M:%SZ").to_string());
    claim
}

#[tokio::test]
async fn once_the_node_is_ready_the_user_data_goes_and_the_token_is_revoked_once() {
    let v = vm_fixture();
    let claim = v
        .provider
        .create(vm_claim("burst-a", &["POP2-2C-8G"]))
        .await
        .unwrap();
    v.api.finish_actions();
    let id = v.api.servers()[0].id.clone();
    let nodes = Arc::new(Nodes::default());
    let joiner = VmJoiner::new(
        v.provider.clone(),
        Arc::new(Claims(vec![aged(claim, 60)])),
        nodes.clone(),
    );

    let out = joiner.pass().await.unwrap();
    assert_eq!(out, [("burst-a".to_string(), JoinOutcome::Waiting)]);
    assert!(v.api.user_data(&id, USER_DATA_KEY).is_some());

    nodes.ready.lock().unwrap().insert("burst-a".into(), true);
    let out = joiner.pass().await.unwrap();
    assert_eq!(out, [("burst-a".to_string(), JoinOutcome::Joined)]);
    assert!(
        v.api.user_data(&id, USER_DATA_KEY).is_none(),
        "user data deleted"
    );
    assert_eq!(*nodes.released.lock().unwrap(), ["burst-a"]);
    assert!(
        joiner.pass().await.unwrap().is_empty(),
        "done: not looked at again"
    );

    // A restarted provider (a new joiner) finishes again without harm.
    let restarted = VmJoiner::new(v.provider.clone(), joiner_claims(&v), nodes.clone());
    let out = restarted.pass().await.unwrap();
    assert_eq!(out, [("burst-a".to_string(), JoinOutcome::Joined)]);
}

fn joiner_claims(v: &Vm) -> Arc<Claims> {
    let s = &v.api.servers()[0];
    Arc::new(Claims(vec![aged(
        json!({
            "metadata": {"name": "burst-a"},
            "status": {"providerID": format!("scaleway://instance/{ZONE}/{}", s.id)}
        }),
        60,
    )]))
}

#[tokio::test]
async fn a_vm_that_falls_back_to_stopped_is_capacity_lost_and_its_claim_deleted() {
    let v = vm_fixture();
    let claim = v
        .provider
        .create(vm_claim("burst-a", &["POP2-2C-8G"]))
        .await
        .unwrap();
    // No hypervisor left: the power-on ends in `stopped`.
    let mut shortage = recorded_availability();
    shortage.insert(
        "POP2-2C-8G".into(),
        crate::scaleway::instance::Availability::Shortage,
    );
    v.api.set_availability(ZONE, shortage);
    v.api.finish_actions();
    assert_eq!(v.api.servers()[0].state, ServerState::Stopped);
    let nodes = Arc::new(Nodes::default());

    // Too young: maybe a slow read right after the power-on.
    let young = VmJoiner::new(
        v.provider.clone(),
        Arc::new(Claims(vec![aged(claim.clone(), 1)])),
        nodes.clone(),
    );
    assert_eq!(young.pass().await.unwrap()[0].1, JoinOutcome::Waiting);
    assert!(v.catalog.refusal("POP2-2C-8G", ZONE).is_none());

    let joiner = VmJoiner::new(
        v.provider.clone(),
        Arc::new(Claims(vec![aged(claim.clone(), 60)])),
        nodes.clone(),
    );
    assert_eq!(joiner.pass().await.unwrap()[0].1, JoinOutcome::FellBack);
    assert!(v.catalog.refusal("POP2-2C-8G", ZONE).is_some());
    assert_eq!(*nodes.deleted.lock().unwrap(), ["burst-a"]);
    assert_eq!(
        nodes.events.lock().unwrap()[0].reason,
        "InsufficientCapacity"
    );
    // Core's Delete then removes the stopped server and its volume.
    delete_until_gone(&v, &claim).await;
    assert!(v.api.servers().is_empty() && v.api.volumes().is_empty());
}

#[tokio::test]
async fn drift_follows_the_hashed_components_and_the_resolved_image() {
    let v = vm_fixture();
    let mut claim = v
        .provider
        .create(vm_claim("burst-a", &["POP2-2C-8G"]))
        .await
        .unwrap();
    claim["metadata"]["labels"]["kubernetes.io/arch"] = json!("amd64");
    assert_eq!(v.provider.is_drifted(&claim).unwrap(), "");

    let set = |f: &dyn Fn(&mut InstanceClassRecord)| {
        let mut classes = v.classes.0.lock().unwrap();
        f(classes.get_mut("vms").unwrap());
    };
    // Tags are not drift.
    set(&|c| c.spec.tags = vec!["team=other".into()]);
    assert_eq!(v.provider.is_drifted(&claim).unwrap(), "");
    // A newer image resolved for the same selector.
    set(&|c| c.images[0].id = "22222222-2222-4222-8222-222222222222".into());
    assert_eq!(v.provider.is_drifted(&claim).unwrap(), "ImageDrift");
    set(&|c| c.images[0].id = IMAGE.into());
    set(&|c| c.spec.root_volume.as_mut().unwrap().size_bytes = 40_000_000_000);
    assert_eq!(v.provider.is_drifted(&claim).unwrap(), "RootVolumeDrift");
    set(&|c| c.spec.root_volume.as_mut().unwrap().size_bytes = 30_000_000_000);
    set(&|c| c.spec.security_group_id = Some("33333333-3333-4333-8333-333333333333".into()));
    assert_eq!(v.provider.is_drifted(&claim).unwrap(), "NetworkDrift");
    set(&|c| c.spec.machine_config_patches = vec!["machine: {}".into()]);
    assert_eq!(v.provider.is_drifted(&claim).unwrap(), "MachineConfigDrift");
}
