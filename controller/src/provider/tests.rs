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
    pub classes: Mutex<BTreeMap<String, NodeClassRecord>>,
    pub secrets: Mutex<HashMap<(String, String, String), String>>,
}

#[async_trait]
impl NodeClasses for FakeNodeClasses {
    fn get(&self, name: &str) -> Option<NodeClassRecord> {
        self.classes.lock().unwrap().get(name).cloned()
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
}

impl Installer for RecordingInstaller {
    fn start(&self, spec: InstallSpec) {
        self.started.lock().unwrap().push(spec);
    }

    fn resume(&self, spec: InstallSpec, progress: Progress) {
        self.resumed.lock().unwrap().push((spec, progress));
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
    }
}

pub(crate) struct Fixture {
    pub api: Arc<FakeElasticMetal>,
    pub classes: Arc<FakeNodeClasses>,
    pub installer: Arc<RecordingInstaller>,
    pub catalog: Arc<CatalogStore>,
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
            ready: true,
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
    let provider = Arc::new(Provider::new(
        api.clone(),
        catalog.clone(),
        classes.clone(),
        installer.clone(),
        ProviderSettings {
            cluster_name: "test".into(),
            project_id: PROJECT.into(),
            zones: vec![ZONE.into(), "nl-ams-1".into()],
            max_order_attempts: 3,
        },
    ));
    Fixture {
        api,
        classes,
        installer,
        catalog,
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
        .create(claim("default-d", &["EM-A115X-SSD", "EM-I215E-NVME", "EM-T620E-H100"]))
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::InsufficientCapacity(_)));
    assert_eq!(f.api.count(Op::CreateServer), orders, "no order for sold-out offerings");
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
        .classes
        .lock()
        .unwrap()
        .get_mut("default")
        .unwrap()
        .ready = false;
    let err = f
        .provider
        .create(claim("default-a", &["EM-A115X-SSD"]))
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::NodeClassNotReady(_)));

    f.classes
        .classes
        .lock()
        .unwrap()
        .get_mut("default")
        .unwrap()
        .ready = true;
    f.classes.secrets.lock().unwrap().clear();
    let err = f
        .provider
        .create(claim("default-a", &["EM-A115X-SSD"]))
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::NodeClassNotReady(_)));
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
