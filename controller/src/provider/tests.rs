//! Provider tests against the in-memory Elastic Metal fake. The fixtures are
//! shared with the gRPC contract test.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use serde_json::{Value, json};

use super::*;
use crate::catalog::{CatalogStore, instance_types};
use crate::nodeclass::{Billing, NodeClassSpec, RescueSshKey, SecretKeyRef, TalosImage};
use crate::scaleway::fake::{FakeElasticMetal, Op, sample_offers};
use crate::scaleway::{ServerStatus, SshKey};

pub(crate) const ZONE: &str = "fr-par-2";
pub(crate) const PROJECT: &str = "proj-1";

#[derive(Default)]
pub(crate) struct FakeNodeClasses {
    /// What the cache holds.
    pub classes: Mutex<BTreeMap<String, NodeClassRecord>>,
    /// What the API server holds where it differs from the cache (a status
    /// write the cache has not seen yet).
    pub live: Mutex<BTreeMap<String, NodeClassRecord>>,
    /// Live reads fail with this.
    pub live_error: Mutex<Option<String>>,
    pub live_reads: Mutex<usize>,
    pub secrets: Mutex<HashMap<(String, String, String), String>>,
}

impl FakeNodeClasses {
    /// Sets what the cache says of a NodeClass's `Ready`.
    pub fn set_readiness(&self, name: &str, readiness: Readiness) {
        self.classes
            .lock()
            .unwrap()
            .get_mut(name)
            .expect("a NodeClass of the fixture")
            .readiness = readiness;
    }
}

#[async_trait]
impl NodeClasses for FakeNodeClasses {
    fn get(&self, name: &str) -> Option<NodeClassRecord> {
        self.classes.lock().unwrap().get(name).cloned()
    }

    async fn get_live(&self, name: &str) -> Result<Option<NodeClassRecord>, String> {
        *self.live_reads.lock().unwrap() += 1;
        if let Some(e) = self.live_error.lock().unwrap().clone() {
            return Err(e);
        }
        match self.live.lock().unwrap().get(name) {
            Some(live) => Ok(Some(live.clone())),
            None => Ok(self.get(name)),
        }
    }

    fn list(&self) -> Vec<NodeClassRecord> {
        self.classes.lock().unwrap().values().cloned().collect()
    }

    async fn secret(&self, r: &SecretKeyRef) -> Result<Option<Secret>, String> {
        let key = (r.namespace.clone(), r.name.clone(), r.key.clone());
        Ok(self
            .secrets
            .lock()
            .unwrap()
            .get(&key)
            .cloned()
            .map(Secret::new))
    }
}

#[derive(Default)]
pub(crate) struct RecordingInstaller {
    pub started: Mutex<Vec<InstallSpec>>,
    pub resumed: Mutex<Vec<(InstallSpec, Progress)>>,
    /// (spec, disk, mac) of each adoption.
    pub adopted: Mutex<Vec<(InstallSpec, String, String)>>,
    /// Phases a test says installs of this process are in.
    pub phases: Mutex<HashMap<String, crate::install::Phase>>,
}

impl Installer for RecordingInstaller {
    fn start(&self, spec: InstallSpec) {
        self.started.lock().unwrap().push(spec);
    }

    fn resume(&self, spec: InstallSpec, progress: Progress) {
        self.resumed.lock().unwrap().push((spec, progress));
    }

    fn adopt(&self, spec: InstallSpec, disk: String, mac: String, _host_key: Option<String>) {
        self.adopted.lock().unwrap().push((spec, disk, mac));
    }

    fn phase(&self, server_id: &str) -> Option<crate::install::Phase> {
        self.phases.lock().unwrap().get(server_id).copied()
    }

    fn knows(&self, server_id: &str) -> bool {
        let seen = |s: &InstallSpec| s.server_id == server_id;
        self.started.lock().unwrap().iter().any(seen)
            || self.resumed.lock().unwrap().iter().any(|(s, _)| seen(s))
            || self.adopted.lock().unwrap().iter().any(|(s, _, _)| seen(s))
    }
}

/// Tokens in memory: one per NodeClaim, `<claim-index>.<secret>`; the next
/// call to fail is set by the test.
#[derive(Default)]
pub(crate) struct FakeTokens {
    pub tokens: Mutex<BTreeMap<String, String>>,
    pub created: Mutex<u32>,
    pub deleted: Mutex<Vec<String>>,
    pub fail_next: Mutex<Option<KubeError>>,
}

#[async_trait]
impl BootstrapTokens for FakeTokens {
    async fn ensure(&self, claim: &str) -> Result<Secret, KubeError> {
        if let Some(e) = self.fail_next.lock().unwrap().take() {
            return Err(e);
        }
        let mut tokens = self.tokens.lock().unwrap();
        let mut created = self.created.lock().unwrap();
        let token = tokens.entry(claim.to_string()).or_insert_with(|| {
            *created += 1;
            format!("tok{:03}.{:016}", *created, *created)
        });
        Ok(Secret::new(token.clone()))
    }

    async fn delete(&self, claim: &str) -> Result<(), KubeError> {
        self.tokens.lock().unwrap().remove(claim);
        self.deleted.lock().unwrap().push(claim.to_string());
        Ok(())
    }
}

/// Nodes in memory, refusing another providerID for a name as the API
/// adapter does.
#[derive(Default)]
pub(crate) struct FakeRegistrar {
    pub nodes: Mutex<BTreeMap<String, NodeRegistration>>,
    /// Names `forget` was called with.
    pub forgotten: Mutex<Vec<String>>,
    pub fail_next: Mutex<Option<KubeError>>,
}

#[async_trait]
impl NodeRegistrar for FakeRegistrar {
    async fn register(&self, node: &NodeRegistration) -> Result<(), KubeError> {
        if let Some(e) = self.fail_next.lock().unwrap().take() {
            return Err(e);
        }
        let mut nodes = self.nodes.lock().unwrap();
        match nodes.get(&node.name) {
            Some(existing) if existing.provider_id != node.provider_id => Err(KubeError::Conflict(
                format!("Node {} belongs to another machine", node.name),
            )),
            Some(_) => Ok(()),
            None => {
                nodes.insert(node.name.clone(), node.clone());
                Ok(())
            }
        }
    }

    async fn forget(&self, name: &str, provider_id: Option<&str>) -> Result<bool, KubeError> {
        if let Some(e) = self.fail_next.lock().unwrap().take() {
            return Err(e);
        }
        let mut nodes = self.nodes.lock().unwrap();
        let ours = nodes
            .get(name)
            .is_some_and(|n| provider_id.is_none_or(|p| p == n.provider_id));
        if ours {
            nodes.remove(name);
        }
        self.forgotten.lock().unwrap().push(name.to_string());
        Ok(ours)
    }
}

pub(crate) fn node_class_spec() -> NodeClassSpec {
    let secret = |name: &str, key: &str| SecretKeyRef {
        name: name.into(),
        namespace: "karpenter".into(),
        key: key.into(),
    };
    NodeClassSpec {
        zones: vec![ZONE.into()],
        billing: Billing::Hourly,
        image: TalosImage {
            url_template: "http://127.0.0.1:9/talos-{version}-{arch}.raw.xz".into(),
            version: "v1.13.9".into(),
            schematic: String::new(),
            sha256: None,
        },
        install_disk: None,
        rescue_ssh_key: RescueSshKey {
            iam_key_id: "key-1".into(),
            private_key_secret_ref: secret("rescue", "id_ed25519"),
        },
        machine_config_secret_ref: secret("talos", "worker.yaml"),
        machine_config_patches: vec!["machine: {}".into()],
        tags: vec!["team=infra".into()],
        standby: None,
        private_network: None,
    }
}

pub(crate) struct Fixture {
    pub api: Arc<FakeElasticMetal>,
    pub classes: Arc<FakeNodeClasses>,
    pub installer: Arc<RecordingInstaller>,
    pub tokens: Arc<FakeTokens>,
    pub nodes: Arc<FakeRegistrar>,
    pub catalog: Arc<CatalogStore>,
    /// The NodeClaims Reboot reads and records on, and its Events.
    pub claims: Arc<reboot::fakes::FakeClaimStore>,
    pub reboot_nodes: Arc<reboot::fakes::RecordingNodes>,
    pub provider: Arc<Provider>,
}

pub(crate) fn fixture() -> Fixture {
    let api = Arc::new(FakeElasticMetal::new());
    api.set_offers(ZONE, sample_offers(ZONE));
    api.add_ssh_key(SshKey {
        id: "key-1".into(),
        name: "rescue".into(),
        public_key: "ssh-ed25519 AAAA".into(),
        fingerprint: String::new(),
        project_id: PROJECT.into(),
        disabled: false,
    });
    let catalog = CatalogStore::new(Duration::from_secs(1800));
    catalog.set_base(instance_types(&BTreeMap::from([(ZONE.to_string(), sample_offers(ZONE))])).0);
    let classes = Arc::new(FakeNodeClasses::default());
    classes.classes.lock().unwrap().insert(
        "default".into(),
        NodeClassRecord {
            name: "default".into(),
            spec: node_class_spec(),
            readiness: Readiness::Ready,
            private_networks: Vec::new(),
        },
    );
    {
        let mut s = classes.secrets.lock().unwrap();
        s.insert(
            ("karpenter".into(), "rescue".into(), "id_ed25519".into()),
            "PRIVATE".into(),
        );
        s.insert(
            ("karpenter".into(), "talos".into(), "worker.yaml".into()),
            "version: v1alpha1".into(),
        );
    }
    let installer = Arc::new(RecordingInstaller::default());
    let tokens = Arc::new(FakeTokens::default());
    let nodes = Arc::new(FakeRegistrar::default());
    let claims = Arc::new(reboot::fakes::FakeClaimStore::default());
    let reboot_nodes = Arc::new(reboot::fakes::RecordingNodes::default());
    let provider = Arc::new(
        Provider::new(
            api.clone(),
            catalog.clone(),
            classes.clone(),
            installer.clone(),
            ClusterPorts {
                tokens: tokens.clone(),
                nodes: nodes.clone(),
            },
            ProviderSettings {
                cluster_name: "test".into(),
                project_id: PROJECT.into(),
                zones: vec![ZONE.into(), "nl-ams-1".into()],
                instance_zones: vec![ZONE.into(), "nl-ams-1".into()],
            },
        )
        .with_reboots(RebootPorts {
            claims: claims.clone(),
            nodes: reboot_nodes.clone(),
            settings: RebootSettings::default(),
            clock: Arc::new(chrono::Utc::now),
        }),
    );
    Fixture {
        api,
        classes,
        installer,
        tokens,
        nodes,
        catalog,
        claims,
        reboot_nodes,
        provider,
    }
}

pub(crate) fn claim(name: &str, types: &[&str]) -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": name, "labels": {"karpenter.sh/nodepool": "default"}},
        "spec": {
            "requirements": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": types},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                {"key": "karpenter.sh/nodepool", "operator": "In", "values": ["default"]}
            ],
            "taints": [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}],
            "nodeClassRef": {"group": "karpenter.scaleway.com", "kind": "ScalewayElasticMetalNodeClass", "name": "default"}
        }
    })
}

#[tokio::test]
async fn create_orders_the_cheapest_offering_and_starts_the_install() {
    let f = fixture();
    let out = f
        .provider
        .create(claim("default-a", &["EM-I215E-NVME", "EM-A115X-SSD"]))
        .await
        .unwrap();
    let servers = f.api.servers();
    assert_eq!(servers.len(), 1);
    let s = &servers[0];
    assert_eq!(s.offer_name, "EM-A115X-SSD");
    assert_eq!(s.name, "default-a");
    for t in [
        "karpenter.scaleway.com/cluster=test",
        "karpenter.sh/nodeclaim=default-a",
        "karpenter.sh/nodepool=default",
        "karpenter.scaleway.com/nodeclass=default",
        "team=infra",
    ] {
        assert!(s.tags.contains(&t.to_string()), "missing tag {t}");
    }
    let pid = format!("scaleway://baremetal/{ZONE}/{}", s.id);
    assert_eq!(out["status"]["providerID"], pid.as_str());
    let labels = &out["metadata"]["labels"];
    assert_eq!(labels["node.kubernetes.io/instance-type"], "EM-A115X-SSD");
    assert_eq!(labels["topology.kubernetes.io/zone"], ZONE);
    assert_eq!(labels["topology.kubernetes.io/region"], "fr-par");
    assert_eq!(labels["karpenter.sh/capacity-type"], "on-demand");
    assert_eq!(labels["kubernetes.io/arch"], "amd64");
    assert_eq!(labels["kubernetes.io/os"], "linux");
    assert_eq!(labels["karpenter.scaleway.com/instance-cpu"], "4");
    assert_eq!(out["status"]["capacity"]["cpu"], "4");
    assert_eq!(out["status"]["allocatable"]["pods"], "110");
    assert_eq!(out["spec"]["taints"][0]["key"], "dedicated");

    let started = f.installer.started.lock().unwrap();
    assert_eq!(started.len(), 1);
    let spec = &started[0];
    assert_eq!(spec.provider_id, pid);
    assert_eq!(spec.node_name, "default-a");
    assert_eq!(spec.arch, "amd64");
    assert_eq!(
        spec.image_url,
        "http://127.0.0.1:9/talos-v1.13.9-amd64.raw.xz"
    );
    assert_eq!(spec.rescue_ssh_key_id, "key-1");
    assert_eq!(spec.rescue_private_key.expose(), "PRIVATE");
    assert_eq!(spec.base_machine_config.expose(), "version: v1alpha1");
    assert_eq!(spec.labels["karpenter.sh/nodepool"], "default");
    assert_eq!(
        spec.labels["node.kubernetes.io/instance-type"],
        "EM-A115X-SSD"
    );
    assert_eq!(spec.taints.len(), 1);
    // The kubelet reserves what the catalog's overhead assumed for this
    // 4-thread offer: 6% + 1% + 2 × 0.5% of a thread, and as many pods as
    // the NodeClaim's allocatable promises.
    let reservations = spec.kubelet_reservations.expect("reservations set");
    assert_eq!(reservations.kube_reserved.cpu_millis, 80);
    assert_eq!(
        out["status"]["allocatable"]["pods"],
        reservations.max_pods.to_string().as_str()
    );
}

#[tokio::test]
async fn create_again_adopts_instead_of_ordering_twice() {
    let f = fixture();
    let first = f
        .provider
        .create(claim("default-a", &["EM-A115X-SSD"]))
        .await
        .unwrap();
    let second = f
        .provider
        .create(claim("default-a", &["EM-A115X-SSD"]))
        .await
        .unwrap();
    assert_eq!(f.api.count(Op::CreateServer), 1);
    assert_eq!(
        first["status"]["providerID"],
        second["status"]["providerID"]
    );
    assert_eq!(
        f.installer.started.lock().unwrap().len(),
        2,
        "the engine ignores repeats itself"
    );
}

#[tokio::test]
async fn out_of_stock_marks_the_offering_and_answers_insufficient_capacity() {
    let f = fixture();
    f.api.fail_next(
        Op::CreateServer,
        ApiError::OutOfStock("EM-A115X-SSD".into()),
    );
    let err = f
        .provider
        .create(claim("default-a", &["EM-A115X-SSD", "EM-I215E-NVME"]))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::InsufficientCapacity(_)),
        "{err:?}"
    );
    assert_eq!(
        f.api.count(Op::CreateServer),
        1,
        "one order per Create: Karpenter picks the next offering"
    );
    let snap = f.catalog.snapshot();
    let a = snap
        .default
        .iter()
        .find(|t| t.name == "EM-A115X-SSD")
        .unwrap();
    assert!(
        !a.offerings[0].available,
        "refused offering is cached as unavailable"
    );

    // The next NodeClaim with the same choice gets the next offering.
    let out = f
        .provider
        .create(claim("default-b", &["EM-A115X-SSD", "EM-I215E-NVME"]))
        .await
        .unwrap();
    assert_eq!(
        out["metadata"]["labels"]["node.kubernetes.io/instance-type"],
        "EM-I215E-NVME"
    );

    // Quota refusals count the same; with nothing left: InsufficientCapacity
    // without an order.
    f.api
        .fail_next(Op::CreateServer, ApiError::QuotaExceeded("quota".into()));
    let err = f
        .provider
        .create(claim("default-c", &["EM-I215E-NVME"]))
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::InsufficientCapacity(_)));
    let orders = f.api.count(Op::CreateServer);
    let err = f
        .provider
        .create(claim(
            "default-d",
            &["EM-A115X-SSD", "EM-I215E-NVME", "EM-T620E-H100"],
        ))
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::InsufficientCapacity(_)));
    assert_eq!(
        f.api.count(Op::CreateServer),
        orders,
        "no order for sold-out offerings"
    );
}

#[tokio::test]
async fn monthly_billing_orders_the_monthly_twin() {
    use crate::scaleway::fake::sample_monthly_offers;
    let f = fixture();
    let mut offers = sample_offers(ZONE);
    offers.extend(sample_monthly_offers(ZONE));
    f.api.set_offers(ZONE, offers.clone());
    f.catalog
        .set_base(instance_types(&BTreeMap::from([(ZONE.to_string(), offers)])).0);
    {
        let mut classes = f.classes.classes.lock().unwrap();
        let class = classes.get_mut("default").unwrap();
        class.spec.billing = crate::nodeclass::Billing::Monthly;
    }
    f.provider
        .create(claim("monthly-a", &["EM-A115X-SSD"]))
        .await
        .unwrap();
    let server = f
        .api
        .servers()
        .into_iter()
        .find(|s| s.name == "monthly-a")
        .unwrap();
    assert_eq!(server.offer_id, format!("{ZONE}-a115x-monthly"));
}

#[tokio::test]
async fn api_failure_while_ordering_is_a_create_error() {
    let f = fixture();
    f.api
        .fail_next(Op::CreateServer, ApiError::Unavailable("HTTP 503".into()));
    let err = f
        .provider
        .create(claim("default-a", &["EM-A115X-SSD"]))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ProviderError::CreateFailed { reason, .. } if reason == "ScalewayAPIUnavailable"),
        "{err:?}"
    );
    f.api.fail_next(Op::ListServers, ApiError::Throttled);
    let err = f
        .provider
        .create(claim("default-a", &["EM-A115X-SSD"]))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::CreateFailed { .. }),
        "no order without the adoption check"
    );
    assert_eq!(f.api.count(Op::CreateServer), 1);
}

#[tokio::test]
async fn node_class_problems_are_not_ready() {
    let f = fixture();
    let mut c = claim("default-a", &["EM-A115X-SSD"]);
    c["spec"]["nodeClassRef"]["name"] = json!("missing");
    assert!(matches!(
        f.provider.create(c).await,
        Err(ProviderError::NodeClassNotReady(_))
    ));

    f.classes
        .set_readiness("default", crate::nodeclass::conditions::Readiness::NotReady);
    let err = f
        .provider
        .create(claim("default-a", &["EM-A115X-SSD"]))
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::NodeClassNotReady(_)));

    f.classes
        .set_readiness("default", crate::nodeclass::conditions::Readiness::Ready);
    f.classes.secrets.lock().unwrap().clear();
    let err = f
        .provider
        .create(claim("default-a", &["EM-A115X-SSD"]))
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::NodeClassNotReady(_)));
    assert_eq!(f.api.count(Op::CreateServer), 0);
}

/// Found by core's regression suite (StandaloneNodeClaim garbage
/// collection): a NodeClaim created together with its NodeClass reached
/// Create before the provider's cache saw the reconciler's `Ready` write;
/// Create answered NodeClassNotReady and core deleted the NodeClaim.
#[tokio::test]
async fn create_reads_past_a_cache_that_lags_the_ready_write() {
    let f = fixture();
    let ready = f.classes.classes.lock().unwrap()["default"].clone();
    f.classes
        .set_readiness("default", crate::nodeclass::conditions::Readiness::NotReady);
    f.classes
        .live
        .lock()
        .unwrap()
        .insert("default".into(), ready.clone());
    f.provider
        .create(claim("default-a", &["EM-A115X-SSD"]))
        .await
        .expect("the API server says Ready: Create goes on");
    assert_eq!(f.api.count(Op::CreateServer), 1);

    // Not in the cache at all, Ready on the API server.
    let mut other = ready.clone();
    other.name = "fresh".into();
    f.classes.live.lock().unwrap().insert("fresh".into(), other);
    let mut c = claim("fresh-a", &["EM-A115X-SSD"]);
    c["spec"]["nodeClassRef"]["name"] = json!("fresh");
    f.provider.create(c).await.expect("found on the API server");
    assert_eq!(f.api.count(Op::CreateServer), 2);

    // A cache that says Ready is trusted without a read.
    let reads = *f.classes.live_reads.lock().unwrap();
    f.classes
        .classes
        .lock()
        .unwrap()
        .insert("default".into(), ready);
    f.provider
        .create(claim("default-b", &["EM-A115X-SSD"]))
        .await
        .unwrap();
    assert_eq!(*f.classes.live_reads.lock().unwrap(), reads);
}

/// Found by core's regression suite ("should create a standard NodeClaim",
/// NodeClass and NodeClaim created at once): a NodeClass not yet reconciled
/// is a wait, not a verdict. Create fails retryably (core launches again)
/// instead of NodeClassNotReady (core deletes the NodeClaim); only
/// `Ready=False` for the current generation refuses.
#[tokio::test]
async fn a_node_class_not_yet_reconciled_is_retryable() {
    let f = fixture();
    f.classes.set_readiness("default", Readiness::Unknown);
    let err = f
        .provider
        .create(claim("default-a", &["EM-A115X-SSD"]))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ProviderError::CreateFailed { reason, .. } if reason == "NodeClassReadinessUnknown"),
        "{err:?}"
    );
    assert_eq!(f.api.count(Op::CreateServer), 0);

    // Reconciled: the retry goes on.
    f.classes.set_readiness("default", Readiness::Ready);
    f.provider
        .create(claim("default-a", &["EM-A115X-SSD"]))
        .await
        .unwrap();
    assert_eq!(f.api.count(Op::CreateServer), 1);
}

/// When the live read fails, Create must not answer NodeClassNotReady (core
/// would delete the NodeClaim on a transient API server error): it fails
/// retryably and orders nothing.
#[tokio::test]
async fn a_failed_live_read_is_retryable_not_not_ready() {
    let f = fixture();
    f.classes
        .set_readiness("default", crate::nodeclass::conditions::Readiness::NotReady);
    *f.classes.live_error.lock().unwrap() = Some("connection refused".into());
    let err = f
        .provider
        .create(claim("default-a", &["EM-A115X-SSD"]))
        .await
        .unwrap_err();
    match err {
        ProviderError::CreateFailed { reason, message } => {
            assert_eq!(reason, "NodeClassReadFailed");
            assert!(message.contains("connection refused"), "{message}");
        }
        other => panic!("want CreateFailed, got {other:?}"),
    }
    assert_eq!(f.api.count(Op::CreateServer), 0);
}

#[tokio::test]
async fn no_compatible_offering_is_insufficient_capacity() {
    let f = fixture();
    let err = f
        .provider
        .create(claim("default-a", &["EM-T620E-H100"]))
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::InsufficientCapacity(_)));
    let err = f
        .provider
        .create(claim("default-a", &["EM-NOPE"]))
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::InsufficientCapacity(_)));
}

#[tokio::test]
async fn delete_is_idempotent_then_not_found() {
    let f = fixture();
    let created = f
        .provider
        .create(claim("default-a", &["EM-A115X-SSD"]))
        .await
        .unwrap();
    f.provider.delete(&created).await.unwrap();
    f.provider.delete(&created).await.unwrap();
    assert_eq!(
        f.api.count(Op::DeleteServer),
        1,
        "a deleting server is not deleted again"
    );
    let pid = created["status"]["providerID"].as_str().unwrap();
    let got = f.provider.get(pid).await.unwrap();
    assert!(got["metadata"]["deletionTimestamp"].is_string());
    f.api.finish_deletions();
    assert!(matches!(
        f.provider.delete(&created).await,
        Err(ProviderError::NotFound(_))
    ));
    assert!(matches!(
        f.provider.get(pid).await,
        Err(ProviderError::NotFound(_))
    ));
}

#[tokio::test]
async fn delete_without_provider_id_finds_the_server_by_tag() {
    let f = fixture();
    f.provider
        .create(claim("default-a", &["EM-A115X-SSD"]))
        .await
        .unwrap();
    let bare = claim("default-a", &["EM-A115X-SSD"]);
    f.provider.delete(&bare).await.unwrap();
    assert_eq!(f.api.servers()[0].status, ServerStatus::Deleting);
    let other = claim("default-zzz", &["EM-A115X-SSD"]);
    assert!(matches!(
        f.provider.delete(&other).await,
        Err(ProviderError::NotFound(_))
    ));
}

/// The sweeper's release of a deleted NodeClaim's server (gc::ClaimRelease):
/// found by its tag as Delete finds it; nothing left to release is success.
#[tokio::test]
async fn releasing_a_deleted_nodeclaims_server_deletes_it_by_tag() {
    use crate::gc::ClaimRelease;
    let f = fixture();
    f.provider
        .create(claim("default-a", &["EM-A115X-SSD"]))
        .await
        .unwrap();
    f.provider.release("default-a").await.unwrap();
    assert_eq!(f.api.servers()[0].status, ServerStatus::Deleting);
    f.provider.release("default-zzz").await.unwrap();
}

#[tokio::test]
async fn foreign_servers_are_neither_deleted_nor_listed() {
    let f = fixture();
    let created = f
        .provider
        .create(claim("default-a", &["EM-A115X-SSD"]))
        .await
        .unwrap();
    let mut foreign = f.api.servers()[0].clone();
    foreign.id = "foreign".into();
    foreign.tags = vec!["karpenter.scaleway.com/cluster=other".into()];
    f.api.insert_server(foreign);

    let listed = f.provider.list().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(
        listed[0]["status"]["providerID"],
        created["status"]["providerID"]
    );
    assert_eq!(
        listed[0]["metadata"]["labels"]["karpenter.sh/nodepool"],
        "default"
    );
    assert_eq!(listed[0]["status"]["capacity"]["cpu"], "4");

    let mut c = claim("x", &[]);
    c["status"] = json!({"providerID": format!("scaleway://baremetal/{ZONE}/foreign")});
    assert!(matches!(
        f.provider.delete(&c).await,
        Err(ProviderError::NotFound(_))
    ));
    assert_eq!(f.api.count(Op::DeleteServer), 0);
}

#[tokio::test]
async fn list_fails_whole_when_a_zone_fails() {
    let f = fixture();
    f.provider
        .create(claim("default-a", &["EM-A115X-SSD"]))
        .await
        .unwrap();
    f.api
        .fail_next(Op::ListServers, ApiError::Unavailable("boom".into()));
    assert!(matches!(
        f.provider.list().await,
        Err(ProviderError::Unavailable(_))
    ));
}

#[test]
fn provider_ids() {
    assert_eq!(
        provider_id("fr-par-2", "abc"),
        "scaleway://baremetal/fr-par-2/abc"
    );
    assert_eq!(
        parse_provider_id("scaleway://baremetal/fr-par-2/abc"),
        Some(("fr-par-2", "abc"))
    );
    assert_eq!(parse_provider_id("scaleway-em://fr-par-2/abc"), None);
    assert_eq!(parse_provider_id("scaleway://baremetal/fr-par-2/"), None);
    assert_eq!(parse_provider_id("scaleway://baremetal/fr-par-2/a/b"), None);
}

#[test]
fn machine_ids_of_both_kinds_parse_and_nothing_else_does() {
    use super::{MachineId, instance_provider_id, parse_machine_id};
    assert_eq!(
        parse_machine_id("scaleway://baremetal/fr-par-2/abc"),
        Some(MachineId::Baremetal {
            zone: "fr-par-2",
            id: "abc"
        })
    );
    let vm = instance_provider_id("pl-waw-2", "vm-1");
    assert_eq!(vm, "scaleway://instance/pl-waw-2/vm-1");
    let parsed = parse_machine_id(&vm).unwrap();
    assert_eq!(
        parsed,
        MachineId::Instance {
            zone: "pl-waw-2",
            id: "vm-1"
        }
    );
    assert_eq!((parsed.zone(), parsed.server_id()), ("pl-waw-2", "vm-1"));
    // The legacy form (`scaleway://<id>`) is the CCM's, never ours.
    assert_eq!(parse_machine_id("scaleway://vm-1"), None);
    assert_eq!(parse_machine_id("scaleway://instance/fr-par-2/"), None);
    assert_eq!(parse_machine_id("scaleway://instance/fr-par-2/a/b"), None);
    // Only the baremetal form is an Elastic Metal server.
    assert_eq!(parse_provider_id(&vm), None);
}

#[tokio::test]
async fn create_registers_the_node_and_passes_the_per_node_token() {
    let f = fixture();
    let mut c = claim("default-a", &["EM-A115X-SSD"]);
    c["metadata"]["uid"] = json!("uid-default-a");
    c["spec"]["startupTaints"] =
        json!([{"key": "cilium.io/agent-not-ready", "effect": "NoExecute"}]);
    f.classes
        .classes
        .lock()
        .unwrap()
        .get_mut("default")
        .unwrap()
        .spec
        .image
        .sha256 = Some(BTreeMap::from([("amd64".to_string(), "ab".repeat(32))]));
    let out = f.provider.create(c).await.unwrap();
    let pid = out["status"]["providerID"].as_str().unwrap().to_string();

    let nodes = f.nodes.nodes.lock().unwrap();
    let node = nodes.get("default-a").expect("Node registered by Create");
    assert_eq!(node.provider_id, pid);
    // Owned by the NodeClaim: gone with it even if core never learns the
    // providerID (a Create whose answer is lost).
    assert_eq!(node.owner_uid.as_deref(), Some("uid-default-a"));
    assert_eq!(node.labels["karpenter.sh/nodepool"], "default");
    assert_eq!(
        node.labels["node.kubernetes.io/instance-type"],
        "EM-A115X-SSD"
    );
    assert_eq!(node.labels["topology.kubernetes.io/zone"], ZONE);
    let taints: Vec<(&str, &str)> = node
        .taints
        .iter()
        .map(|t| (t.key.as_str(), t.effect.as_str()))
        .collect();
    assert_eq!(
        taints,
        vec![
            ("dedicated", "NoSchedule"),
            ("cilium.io/agent-not-ready", "NoExecute"),
            ("karpenter.sh/unregistered", "NoExecute"),
            ("node.kubernetes.io/not-ready", "NoSchedule"),
            (
                "node.cloudprovider.kubernetes.io/uninitialized",
                "NoSchedule"
            ),
        ]
    );

    let started = f.installer.started.lock().unwrap();
    let spec = &started[0];
    let token = f.tokens.tokens.lock().unwrap()["default-a"].clone();
    assert_eq!(spec.bootstrap_token.expose(), token);
    assert_eq!(spec.offer_name, "EM-A115X-SSD");
    assert_eq!(spec.image_sha256, Some("ab".repeat(32)));
}

#[tokio::test]
async fn create_retries_reuse_the_node_and_the_token() {
    let f = fixture();
    f.provider
        .create(claim("default-a", &["EM-A115X-SSD"]))
        .await
        .unwrap();
    f.provider
        .create(claim("default-a", &["EM-A115X-SSD"]))
        .await
        .unwrap();
    assert_eq!(*f.tokens.created.lock().unwrap(), 1);
    let started = f.installer.started.lock().unwrap();
    assert_eq!(
        started[0].bootstrap_token, started[1].bootstrap_token,
        "a retried Create renders the same token"
    );
    assert_eq!(f.nodes.nodes.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn registration_failure_fails_create_and_the_retry_adopts() {
    let f = fixture();
    *f.nodes.fail_next.lock().unwrap() = Some(KubeError::Unavailable("503".into()));
    let err = f
        .provider
        .create(claim("default-a", &["EM-A115X-SSD"]))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ProviderError::CreateFailed { reason, .. } if reason == "NodeRegistrationFailed"),
        "{err:?}"
    );
    assert!(
        f.installer.started.lock().unwrap().is_empty(),
        "no install without the Node"
    );
    assert_eq!(f.api.count(Op::CreateServer), 1);

    f.provider
        .create(claim("default-a", &["EM-A115X-SSD"]))
        .await
        .unwrap();
    assert_eq!(
        f.api.count(Op::CreateServer),
        1,
        "the retry adopts the server"
    );
    assert_eq!(f.installer.started.lock().unwrap().len(), 1);
    assert!(f.nodes.nodes.lock().unwrap().contains_key("default-a"));
}

#[tokio::test]
async fn a_node_of_another_machine_fails_create_without_touching_it() {
    let f = fixture();
    f.nodes.nodes.lock().unwrap().insert(
        "default-a".into(),
        NodeRegistration {
            name: "default-a".into(),
            provider_id: "scaleway://baremetal/fr-par-2/someone-else".into(),
            owner_uid: None,
            labels: BTreeMap::new(),
            taints: vec![],
        },
    );
    let err = f
        .provider
        .create(claim("default-a", &["EM-A115X-SSD"]))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ProviderError::CreateFailed { reason, .. } if reason == "NodeNameConflict"),
        "{err:?}"
    );
    assert_eq!(
        f.nodes.nodes.lock().unwrap()["default-a"].provider_id,
        "scaleway://baremetal/fr-par-2/someone-else"
    );
    assert!(f.installer.started.lock().unwrap().is_empty());
}

#[tokio::test]
async fn token_failure_fails_create_retryably() {
    let f = fixture();
    *f.tokens.fail_next.lock().unwrap() = Some(KubeError::Refused("403 forbidden".into()));
    let err = f
        .provider
        .create(claim("default-a", &["EM-A115X-SSD"]))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ProviderError::CreateFailed { reason, .. } if reason == "BootstrapTokenFailed"),
        "{err:?}"
    );
    assert!(f.installer.started.lock().unwrap().is_empty());
    f.provider
        .create(claim("default-a", &["EM-A115X-SSD"]))
        .await
        .unwrap();
    assert_eq!(f.api.count(Op::CreateServer), 1);
}

#[tokio::test]
async fn delete_deletes_the_bootstrap_token() {
    let f = fixture();
    let created = f
        .provider
        .create(claim("default-a", &["EM-A115X-SSD"]))
        .await
        .unwrap();
    assert!(f.tokens.tokens.lock().unwrap().contains_key("default-a"));
    f.provider.delete(&created).await.unwrap();
    assert!(f.tokens.tokens.lock().unwrap().is_empty());
    // Also when the server is already gone.
    f.api.finish_deletions();
    assert!(matches!(
        f.provider.delete(&created).await,
        Err(ProviderError::NotFound(_))
    ));
    assert_eq!(f.tokens.deleted.lock().unwrap().len(), 2);
}

#[tokio::test]
async fn a_server_gone_lifts_the_quota_marks_of_its_offer_and_nothing_else() {
    use crate::catalog::Unavailability;
    let f = fixture();
    let created = f
        .provider
        .create(claim("default-a", &["EM-A115X-SSD"]))
        .await
        .unwrap();
    // An order of the same range refused for quota elsewhere, one of
    // another offer for stock.
    f.catalog
        .mark_unavailable_for("EM-A115X-SSD", ZONE, Unavailability::QuotaExceeded);
    f.catalog
        .mark_unavailable_for("EM-A115X-SSD", "nl-ams-1", Unavailability::QuotaExceeded);
    f.catalog
        .mark_unavailable_for("EM-I215E-NVME", ZONE, Unavailability::OutOfStock);
    f.provider.delete(&created).await.unwrap();
    // Deleting is not gone: the quota still counts the server.
    assert!(f.catalog.refusal("EM-A115X-SSD", ZONE).is_some());
    f.api.finish_deletions();
    assert!(matches!(
        f.provider.delete(&created).await,
        Err(ProviderError::NotFound(_))
    ));
    assert_eq!(f.catalog.refusal("EM-A115X-SSD", ZONE), None);
    assert_eq!(f.catalog.refusal("EM-A115X-SSD", "nl-ams-1"), None);
    assert!(f.catalog.refusal("EM-I215E-NVME", ZONE).is_some());
}

#[tokio::test]
async fn a_providerid_of_another_scheme_names_no_machine_of_ours() {
    let f = fixture();
    // Core's own e2e suite writes this into a NodeClaim and expects core's
    // garbage collection to let it go (docs/conformance.md).
    let foreign = "Provider:///AZ/i-01234567890123456";
    let mut c = claim("default-foreign", &["EM-A115X-SSD"]);
    c["status"] = json!({"providerID": foreign});
    assert!(matches!(
        f.provider.delete(&c).await,
        Err(ProviderError::NotFound(_))
    ));
    assert!(matches!(
        f.provider.get(foreign).await,
        Err(ProviderError::NotFound(_))
    ));
    // Ours but unreadable: a malformed request, not an absence.
    let garbled = "scaleway://baremetal/no-slash";
    assert!(matches!(
        f.provider.get(garbled).await,
        Err(ProviderError::Invalid(_))
    ));
    assert_eq!(f.api.count(Op::DeleteServer), 0);
}
