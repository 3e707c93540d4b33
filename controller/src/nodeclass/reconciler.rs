//! The NodeClass status reconciler: observe (Secrets, IAM key), compute the
//! conditions (a pure function, `conditions`), patch the status only when it
//! changed. Karpenter core never writes NodeClass status and ignores NodePools
//! whose NodeClass is not `Ready`, so this loop gates all provisioning.
//!
//! Only the replica that leads writes the status: a standby keeps its cache
//! and tells its catalog about the classes, but checks nothing (no Secret
//! read, no IAM call, no image download) and looks again every
//! [`REQUEUE_STANDBY`], so that a new leader takes over within seconds while
//! the status the old one wrote stays in force.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret as KubeSecret;
use kube::api::{Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::Store;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tracing::{debug, info, warn};

use super::conditions::{self, ImageArch, Observations, SecretCheck, SshKeyCheck};
use super::verifications::Verifications;
use super::{
    Condition, NodeClassSpec, ScalewayElasticMetalNodeClass, SecretKeyRef, content_check,
    image_check, resolve_image_url,
};
use crate::catalog::{self, CatalogStore, ClassKind, ClassView};
use crate::scaleway::private_network::PrivateNetworks;
use crate::scaleway::{ApiError, ElasticMetal};

type NodeClass = ScalewayElasticMetalNodeClass;

/// Requeue of a Ready NodeClass: catches an IAM key removed behind our back.
const REQUEUE_READY: Duration = Duration::from_secs(60);
/// Requeue of a NodeClass that is not Ready yet: it usually is being set up.
const REQUEUE_NOT_READY: Duration = Duration::from_secs(10);
/// Requeue on a replica that does not lead.
const REQUEUE_STANDBY: Duration = Duration::from_secs(5);

/// Whether this replica holds Karpenter's leader lease (from the bridge).
pub type IsLeader = Arc<dyn Fn() -> bool + Send + Sync>;

#[derive(Debug, thiserror::Error)]
pub enum ReconcileError {
    #[error("patching NodeClass status: {0}")]
    PatchStatus(#[source] kube::Error),
}

impl ReconcileError {
    /// Label for logs and metrics.
    pub fn category(&self) -> &'static str {
        match self {
            ReconcileError::PatchStatus(_) => "patch_status",
        }
    }
}

struct Context {
    client: Client,
    api: Arc<dyn ElasticMetal>,
    /// VPC and IPAM: `spec.privateNetwork`.
    networks: Arc<dyn PrivateNetworks>,
    project_id: String,
    /// The provider's zones: those of a NodeClass that names none.
    zones: Vec<String>,
    catalog: Arc<CatalogStore>,
    store: Store<NodeClass>,
    /// For the image checks (no Scaleway credentials on it).
    http: reqwest::Client,
    verifications: Verifications,
    is_leader: IsLeader,
}

pub struct NodeClassController {
    controller: Controller<NodeClass>,
    ctx: Arc<Context>,
}

impl NodeClassController {
    pub fn new(
        client: Client,
        api: Arc<dyn ElasticMetal>,
        networks: Arc<dyn PrivateNetworks>,
        project_id: String,
        zones: Vec<String>,
        catalog: Arc<CatalogStore>,
        is_leader: IsLeader,
    ) -> Self {
        let controller = Controller::new(
            Api::<NodeClass>::all(client.clone()),
            watcher::Config::default(),
        );
        // reqwest is built without a default rustls provider (the workspace
        // standardises on ring); installing it twice is a harmless no-op.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(10))
            .user_agent(concat!(
                "karpenter-provider-scaleway/",
                env!("CARGO_PKG_VERSION")
            ))
            .build()
            .expect("an HTTP client with the ring provider installed always builds");
        let ctx = Arc::new(Context {
            client,
            api,
            networks,
            project_id,
            zones,
            catalog,
            store: controller.store(),
            http,
            verifications: Verifications::default(),
            is_leader,
        });
        NodeClassController { controller, ctx }
    }

    /// The NodeClass cache, shared with the provider.
    pub fn store(&self) -> Store<NodeClass> {
        self.ctx.store.clone()
    }

    /// Runs until `shutdown` resolves. A change to a Secret that some NodeClass
    /// references (metadata only: Secret data never enters this cache)
    /// reconciles every NodeClass at once, so that creating the Secrets after
    /// the NodeClass makes it Ready without waiting for the periodic requeue.
    pub async fn run(self, shutdown: impl Future<Output = ()> + Send + Sync + 'static) {
        let store = self.ctx.store.clone();
        let secrets = watcher(
            Api::<PartialObjectMeta<KubeSecret>>::all(self.ctx.client.clone()),
            watcher::Config::default(),
        )
        .default_backoff()
        .touched_objects()
        .filter_map(move |event| {
            let relevant = match event {
                Ok(meta) => {
                    let (ns, name) = (meta.namespace().unwrap_or_default(), meta.name_any());
                    store
                        .state()
                        .iter()
                        .any(|nc| references(&nc.spec, &ns, &name))
                }
                Err(error) => {
                    debug!(%error, "Secret watch error");
                    false
                }
            };
            futures::future::ready(relevant.then_some(()))
        });
        self.controller
            .reconcile_all_on(secrets)
            .graceful_shutdown_on(shutdown)
            .run(reconcile, error_policy, self.ctx)
            .for_each(|result| async move {
                if let Err(error) = result {
                    debug!(%error, "NodeClass reconcile did not complete");
                }
            })
            .await;
    }
}

fn references(spec: &NodeClassSpec, namespace: &str, name: &str) -> bool {
    [
        &spec.rescue_ssh_key.private_key_secret_ref,
        &spec.machine_config_secret_ref,
    ]
    .iter()
    .any(|r| r.namespace == namespace && r.name == name)
}

/// What one Secret reference yields: the check, and the bytes when present.
pub(super) async fn read_secret(
    client: &Client,
    r: &SecretKeyRef,
) -> (SecretCheck, Option<Vec<u8>>) {
    let secrets: Api<KubeSecret> = Api::namespaced(client.clone(), &r.namespace);
    match secrets.get_opt(&r.name).await {
        Ok(None) => (SecretCheck::SecretNotFound, None),
        Ok(Some(secret)) => {
            let data = secret
                .data
                .and_then(|mut d| d.remove(&r.key))
                .map(|v| v.0)
                .filter(|v| !v.is_empty());
            match data {
                Some(bytes) => (SecretCheck::Present, Some(bytes)),
                None => (SecretCheck::KeyMissing, None),
            }
        }
        Err(e) => (SecretCheck::Error(e.to_string()), None),
    }
}

fn secret_place(r: &SecretKeyRef) -> String {
    format!("Secret {}/{} key {:?}", r.namespace, r.name, r.key)
}

async fn check_ssh_key(ctx: &Context, key_id: &str) -> SshKeyCheck {
    match ctx.api.list_ssh_keys(&ctx.project_id).await {
        Ok(keys) => match keys.iter().find(|k| k.id == key_id) {
            None => SshKeyCheck::NotFound,
            Some(k) if k.disabled => SshKeyCheck::Disabled,
            Some(k) => SshKeyCheck::Registered {
                public_key: k.public_key.clone(),
            },
        },
        Err(e @ ApiError::Unauthorized(_)) => SshKeyCheck::Refused(e.to_string()),
        Err(e) => SshKeyCheck::Error(e.to_string()),
    }
}

/// The architectures a NodeClass may be installed on: those of the offers
/// its NodePools can get (the catalog), plus those `image.sha256` pins;
/// `amd64` before the catalog is read.
fn arches_of(ctx: &Context, name: &str, spec: &NodeClassSpec) -> BTreeSet<String> {
    let mut arches: BTreeSet<String> = ctx
        .catalog
        .snapshot()
        .for_class(ClassKind::ElasticMetal, Some(name))
        .iter()
        .map(|t| t.arch.clone())
        .collect();
    if let Some(pinned) = &spec.image.sha256 {
        arches.extend(pinned.keys().cloned());
    }
    if arches.is_empty() {
        arches.insert("amd64".to_string());
    }
    arches
}

/// Probes the image of every architecture, and reads (or starts) the
/// checksum verification of those `image.sha256` pins.
async fn check_image(ctx: &Context, nc: &NodeClass, previous: &[Condition]) -> Vec<ImageArch> {
    let spec = &nc.spec;
    let mut out = Vec::new();
    let mut probes = Vec::new();
    for arch in arches_of(ctx, &nc.name_any(), spec) {
        let Ok(url) = resolve_image_url(&spec.image, &arch) else {
            return Vec::new();
        };
        probes.push((arch, url));
    }
    let results = futures::future::join_all(
        probes
            .iter()
            .map(|(_, url)| image_check::probe(&ctx.http, url)),
    )
    .await;
    // Verified at this generation before a restart: not downloaded again.
    let verified_before = previous.iter().any(|c| {
        c.type_ == conditions::IMAGE_VERIFIED
            && c.status == "True"
            && c.observed_generation == nc.metadata.generation
    });
    for ((arch, url), probe) in probes.into_iter().zip(results) {
        let verification = spec
            .image
            .sha256
            .as_ref()
            .and_then(|m| m.get(&arch))
            .map(|expected| {
                ctx.verifications
                    .state(&ctx.http, &url, expected, verified_before)
            });
        out.push(ImageArch {
            arch,
            url,
            probe,
            verification,
        });
    }
    out
}

/// The zones of every cached NodeClass, for the per-NodeClass catalogs.
/// What the catalog needs of a NodeClass: its zones and how it is billed.
fn class_view(spec: &NodeClassSpec) -> ClassView {
    let billing = match spec.billing {
        super::Billing::Hourly => catalog::Billing::Hourly,
        super::Billing::Monthly => catalog::Billing::Monthly,
    };
    ClassView {
        private_network: spec.private_network.is_some(),
        ..ClassView::from((spec.zones.clone(), billing))
    }
}

/// Tells the catalog each NodeClass's zones and billing, so that Karpenter
/// compares monthly classes at their amortised monthly price.
fn publish_node_classes(ctx: &Context) {
    let classes: BTreeMap<String, ClassView> = ctx
        .store
        .state()
        .iter()
        .map(|nc| (nc.name_any(), class_view(&nc.spec)))
        .collect();
    ctx.catalog
        .set_node_classes(ClassKind::ElasticMetal, classes);
}

async fn reconcile(nc: Arc<NodeClass>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    publish_node_classes(&ctx);
    if !(ctx.is_leader)() {
        return Ok(Action::requeue(REQUEUE_STANDBY));
    }
    let name = nc.name_any();
    let spec = &nc.spec;
    let previous = nc
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    let previous_networks = nc
        .status
        .as_ref()
        .map(|s| s.private_networks.clone())
        .unwrap_or_default();
    let key_ref = &spec.rescue_ssh_key.private_key_secret_ref;
    let config_ref = &spec.machine_config_secret_ref;
    let ((private_key, key_bytes), (machine_config, config_bytes), ssh_key, image, network) = futures::join!(
        read_secret(&ctx.client, key_ref),
        read_secret(&ctx.client, config_ref),
        check_ssh_key(&ctx, &spec.rescue_ssh_key.iam_key_id),
        check_image(&ctx, &nc, &previous),
        check_private_network(&ctx, spec),
    );
    let observed = Observations {
        ssh_key,
        private_key,
        machine_config,
        private_key_content: key_bytes
            .map(|b| content_check::check_private_key(&b, &secret_place(key_ref))),
        machine_config_content: config_bytes.map(|b| {
            content_check::check_machine_config(
                &b,
                &spec.machine_config_patches,
                &secret_place(config_ref),
            )
        }),
        image,
        private_network: network,
    };
    let now = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string();
    let next = conditions::compute(spec, nc.metadata.generation, &observed, &previous, &now);
    let networks = observed
        .private_network
        .as_ref()
        .map(|r| super::status_networks(r, &previous_networks))
        .unwrap_or_default();
    let ready = conditions::is_ready(&next);
    if next != previous || networks != previous_networks {
        let api: Api<NodeClass> = Api::all(ctx.client.clone());
        let patch = json!({ "status": { "conditions": next, "privateNetworks": networks } });
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(ReconcileError::PatchStatus)?;
        let summary: Vec<String> = next
            .iter()
            .map(|c| format!("{}={}({})", c.type_, c.status, c.reason))
            .collect();
        if ready {
            info!(nodeclass = %name, conditions = %summary.join(" "), "NodeClass status updated: Ready");
        } else {
            let why = next
                .iter()
                .find(|c| c.type_ == conditions::READY)
                .map(|c| c.message.clone())
                .unwrap_or_default();
            warn!(nodeclass = %name, conditions = %summary.join(" "), %why, "NodeClass status updated: not Ready, no server is ordered for it");
        }
    }
    let in_use: Vec<(String, String)> = ctx
        .store
        .state()
        .iter()
        .flat_map(|nc| pinned_urls(nc))
        .collect();
    ctx.verifications.retain(&in_use);
    Ok(Action::requeue(if ready {
        REQUEUE_READY
    } else {
        REQUEUE_NOT_READY
    }))
}

/// `spec.privateNetwork` judged against the VPC and IPAM of the regions of
/// the NodeClass's zones (the provider's zones when it names none).
async fn check_private_network(ctx: &Context, spec: &NodeClassSpec) -> Option<super::Resolution> {
    let selector = spec.private_network.as_ref()?;
    let zones = if spec.zones.is_empty() {
        ctx.zones.clone()
    } else {
        spec.zones.clone()
    };
    let observed =
        super::observe_private_network(ctx.networks.as_ref(), selector, &zones, &ctx.project_id)
            .await;
    Some(super::resolve_private_network(selector, &observed))
}

/// (URL, sha256) of every architecture a NodeClass pins.
fn pinned_urls(nc: &NodeClass) -> Vec<(String, String)> {
    nc.spec
        .image
        .sha256
        .iter()
        .flatten()
        .filter_map(|(arch, sha)| {
            resolve_image_url(&nc.spec.image, arch)
                .ok()
                .map(|url| (url, sha.clone()))
        })
        .collect()
}

fn error_policy(nc: Arc<NodeClass>, error: &ReconcileError, _ctx: Arc<Context>) -> Action {
    warn!(nodeclass = %nc.name_any(), category = error.category(), %error, "NodeClass reconcile failed");
    Action::requeue(Duration::from_secs(15))
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicBool, Ordering};

    use wiremock::matchers::{method, path};
    use wiremock::{Mock, MockServer, ResponseTemplate};

    use super::*;
    use crate::scaleway::fake::{FakeElasticMetal, Op};

    const STATUS_PATH: &str =
        "/apis/karpenter.scaleway.com/v1alpha1/scalewayelasticmetalnodeclasses/standby/status";

    fn context(
        kube_uri: &str,
        api: Arc<FakeElasticMetal>,
        leader: Arc<AtomicBool>,
    ) -> Arc<Context> {
        let config = kube::Config::new(kube_uri.parse().expect("mock server URI"));
        let (store, _writer) = kube::runtime::reflector::store::<NodeClass>();
        Arc::new(Context {
            client: Client::try_from(config).expect("kube client"),
            api,
            networks: Arc::new(crate::scaleway::private_network::fake::FakePrivateNetworks::new()),
            project_id: "project".into(),
            zones: vec!["fr-par-2".into()],
            catalog: CatalogStore::new(Duration::from_secs(60)),
            store,
            http: reqwest::Client::new(),
            verifications: Verifications::default(),
            is_leader: Arc::new(move || leader.load(Ordering::SeqCst)),
        })
    }

    #[tokio::test]
    async fn a_standby_replica_checks_nothing_and_writes_no_status() {
        let kube = MockServer::start().await;
        let spec: NodeClassSpec = serde_json::from_value(json!({
            "image": {"urlTemplate": format!("{}/{{arch}}.raw.xz", kube.uri()), "version": "v1.13.9"},
            "rescueSshKey": {"iamKeyId": "k", "privateKeySecretRef": {"name": "rescue", "namespace": "karpenter", "key": "id"}},
            "machineConfigSecretRef": {"name": "talos", "namespace": "karpenter", "key": "worker.yaml"}
        }))
        .unwrap();
        let nc = Arc::new(NodeClass::new("standby", spec));
        Mock::given(method("PATCH"))
            .and(path(STATUS_PATH))
            .respond_with(
                ResponseTemplate::new(200).set_body_json(serde_json::to_value(&*nc).unwrap()),
            )
            .mount(&kube)
            .await;
        let api = Arc::new(FakeElasticMetal::new());
        let leader = Arc::new(AtomicBool::new(false));
        let ctx = context(&kube.uri(), api.clone(), leader.clone());

        let action = reconcile(nc.clone(), ctx.clone())
            .await
            .expect("a standby has nothing to fail");
        assert_eq!(action, Action::requeue(REQUEUE_STANDBY));
        let requests = kube.received_requests().await.expect("recording is on");
        assert!(
            requests.is_empty(),
            "a standby called the API server: {requests:?}"
        );
        assert!(
            api.calls().is_empty(),
            "a standby called Scaleway: {:?}",
            api.calls()
        );

        // The same replica once it leads: Secrets read, IAM asked, status written.
        leader.store(true, Ordering::SeqCst);
        let action = reconcile(nc, ctx).await.expect("status patched");
        assert_eq!(action, Action::requeue(REQUEUE_NOT_READY));
        let seen: Vec<String> = kube
            .received_requests()
            .await
            .expect("recording is on")
            .iter()
            .map(|r| format!("{} {}", r.method, r.url.path()))
            .collect();
        for expected in [
            "GET /api/v1/namespaces/karpenter/secrets/rescue".to_string(),
            "GET /api/v1/namespaces/karpenter/secrets/talos".to_string(),
            format!("PATCH {STATUS_PATH}"),
        ] {
            assert!(seen.contains(&expected), "{expected} missing from {seen:?}");
        }
        assert_eq!(api.count(Op::ListSshKeys), 1);
    }

    #[test]
    fn the_catalog_learns_zones_and_billing() {
        let mut spec: NodeClassSpec = serde_json::from_value(json!({
            "zones": ["fr-par-2"],
            "billing": "monthly",
            "image": {"urlTemplate": "https://x/{arch}.raw.xz", "version": "v1"},
            "rescueSshKey": {"iamKeyId": "k", "privateKeySecretRef": {"name": "rescue", "namespace": "karpenter", "key": "id"}},
            "machineConfigSecretRef": {"name": "talos", "namespace": "karpenter", "key": "worker.yaml"}
        }))
        .unwrap();
        let view = class_view(&spec);
        assert_eq!(view.zones, vec!["fr-par-2".to_string()]);
        assert_eq!(view.billing, catalog::Billing::Monthly);
        spec.billing = super::super::Billing::Hourly;
        assert_eq!(class_view(&spec).billing, catalog::Billing::Hourly);
    }

    #[test]
    fn secret_references() {
        let spec: NodeClassSpec = serde_json::from_value(json!({
            "image": {"urlTemplate": "https://x/{arch}.raw.xz", "version": "v1"},
            "rescueSshKey": {"iamKeyId": "k", "privateKeySecretRef": {"name": "rescue", "namespace": "karpenter", "key": "id"}},
            "machineConfigSecretRef": {"name": "talos", "namespace": "karpenter", "key": "worker.yaml"}
        }))
        .unwrap();
        assert!(references(&spec, "karpenter", "rescue"));
        assert!(references(&spec, "karpenter", "talos"));
        assert!(!references(&spec, "default", "talos"));
        assert!(!references(&spec, "karpenter", "other"));
    }
}
