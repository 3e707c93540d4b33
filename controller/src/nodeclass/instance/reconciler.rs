//! The `ScalewayInstanceNodeClass` status reconciler, in the style of the
//! Elastic Metal one: observe (the machine config Secret, the images and the
//! security group through the [`Instance`] trait), compute the status (a pure
//! function, `conditions`), patch it only when it changed. Only the leader
//! checks and writes; a standby looks again every [`REQUEUE_STANDBY`].
//!
//! A cluster whose CRD chart predates this kind has no such resource: the
//! controller then logs once and stays out of the way ([`probe_served`]), so
//! the Elastic Metal side runs as before.

use std::collections::BTreeMap;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::core::v1::Secret as KubeSecret;
use kube::api::{ListParams, Patch, PatchParams};
use kube::core::PartialObjectMeta;
use kube::runtime::controller::{Action, Controller};
use kube::runtime::reflector::Store;
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Api, Client, ResourceExt};
use serde_json::json;
use tracing::{debug, info, warn};

use super::conditions::{self, Observations};
use super::observe::{check_security_group, lookup_images};
use super::{InstanceNodeClassSpec, ScalewayInstanceNodeClass};
use crate::catalog::{CatalogStore, ClassKind, ClassView};
use crate::nodeclass::conditions::{Readiness, readiness_at};
use crate::nodeclass::reconciler::{IsLeader, read_secret};
use crate::nodeclass::{ReconcileError, content_check};
use crate::provider::vm::{InstanceClassRecord, InstanceClasses};
use crate::scaleway::instance::Instance;
use crate::scaleway::private_network::PrivateNetworks;

type NodeClass = ScalewayInstanceNodeClass;

const REQUEUE_READY: Duration = Duration::from_secs(60);
const REQUEUE_NOT_READY: Duration = Duration::from_secs(10);
const REQUEUE_STANDBY: Duration = Duration::from_secs(5);

struct Context {
    client: Client,
    api: Arc<dyn Instance>,
    /// VPC and IPAM: `spec.privateNetwork`.
    networks: Arc<dyn PrivateNetworks>,
    project_id: String,
    /// The zones the provider serves: those of a NodeClass without `zones`.
    zones: Vec<String>,
    is_leader: IsLeader,
    catalog: Arc<CatalogStore>,
    cache: InstanceClassCache,
}

/// The reconciler's cache of Instance NodeClasses, as Create reads them:
/// empty until the controller runs (and for ever where the CRD is absent,
/// so that Create answers NodeClassNotReady).
#[derive(Clone, Default)]
pub struct InstanceClassCache {
    store: Arc<OnceLock<Store<NodeClass>>>,
    /// For reads past the cache (`get_live`); none in unit tests.
    client: Option<Client>,
}

impl InstanceClassCache {
    fn all(&self) -> Vec<Arc<NodeClass>> {
        self.store.get().map(|s| s.state()).unwrap_or_default()
    }
}

#[async_trait::async_trait]
impl InstanceClasses for InstanceClassCache {
    fn get(&self, name: &str) -> Option<InstanceClassRecord> {
        let nc = self.all().into_iter().find(|nc| nc.name_any() == name)?;
        Some(record(&nc))
    }

    async fn get_live(&self, name: &str) -> Result<Option<InstanceClassRecord>, String> {
        let Some(client) = &self.client else {
            return Ok(self.get(name));
        };
        // A cluster without the CRD answers 404: `None`, as for a missing class.
        Api::<NodeClass>::all(client.clone())
            .get_opt(name)
            .await
            .map(|nc| nc.as_ref().map(record))
            .map_err(|e| e.to_string())
    }
}

fn record(nc: &NodeClass) -> InstanceClassRecord {
    let status = nc.status.clone().unwrap_or_default();
    // A status computed for an older generation says nothing of this spec.
    let current = status.conditions.iter().all(|c| {
        c.observed_generation.is_none() || c.observed_generation == nc.metadata.generation
    });
    let readiness = if current {
        readiness_at(&status.conditions, None)
    } else {
        Readiness::Unknown
    };
    InstanceClassRecord {
        name: nc.name_any(),
        spec: nc.spec.clone(),
        readiness,
        images: status.images,
        private_networks: status.private_networks,
    }
}

/// What the catalog needs of an Instance NodeClass: its zones, the (zone,
/// arch) pairs it has an image for, its root volume size.
fn class_view(nc: &NodeClass) -> ClassView {
    let r = record(nc);
    ClassView {
        zones: nc.spec.zones.clone(),
        images: Some(r.image_pairs()),
        ephemeral_storage_bytes: Some(nc.spec.root_volume.clone().unwrap_or_default().size_bytes),
        ..ClassView::default()
    }
}

/// Tells the catalog every Instance NodeClass's view (every replica: a
/// standby's catalog must be ready when it takes over).
fn publish_node_classes(ctx: &Context) {
    let classes: BTreeMap<String, ClassView> = ctx
        .cache
        .all()
        .iter()
        .map(|nc| (nc.name_any(), class_view(nc)))
        .collect();
    ctx.catalog.set_node_classes(ClassKind::Instance, classes);
}

/// What the API server answers when asked to list the kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KindAnswer {
    Served,
    /// 404: no CRD defines the kind (a CRD chart older than Instances).
    Absent,
    /// 403: the provider may not list it. An older chart's RBAC, or RBAC
    /// installed with the provider that the API server's authorizer has
    /// not seen yet (it reads bindings through an informer).
    Forbidden,
}

/// One probe; `Err` for an answer that says nothing either way.
pub async fn kind_served(client: &Client) -> Result<KindAnswer, kube::Error> {
    let api: Api<NodeClass> = Api::all(client.clone());
    match api.list_metadata(&ListParams::default().limit(1)).await {
        Ok(_) => Ok(KindAnswer::Served),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(KindAnswer::Absent),
        Err(kube::Error::Api(s)) if s.code == 403 => Ok(KindAnswer::Forbidden),
        Err(e) => Err(e),
    }
}

/// How long [`probe_served`] keeps asking.
#[derive(Debug, Clone, Copy)]
pub struct ProbeWindows {
    /// While answers say nothing either way (API server unreachable, 5xx).
    pub errors: Duration,
    /// While the answer is 403. RBAC applied with the chart reaches the
    /// authorizer within moments, so a short window tells a fresh install
    /// (served) from an older chart's RBAC (not served) without holding an
    /// upgraded provider's startup for long.
    pub forbidden: Duration,
    pub every: Duration,
}

impl Default for ProbeWindows {
    fn default() -> Self {
        ProbeWindows {
            errors: Duration::from_secs(30),
            forbidden: Duration::from_secs(10),
            every: Duration::from_secs(1),
        }
    }
}

/// Whether the cluster serves `ScalewayInstanceNodeClass`, decided once at
/// startup (installing the CRD later takes a restart): a 404 says no at
/// once; a 403 or an error is asked again within its window, then the
/// answer is no, logged with the reason.
pub async fn probe_served(client: &Client, windows: ProbeWindows) -> bool {
    let started = std::time::Instant::now();
    loop {
        let elapsed = started.elapsed();
        match kind_served(client).await {
            Ok(KindAnswer::Served) => {
                info!(
                    served = true,
                    "Scaleway Instances (ScalewayInstanceNodeClass)"
                );
                return true;
            }
            Ok(KindAnswer::Absent) => {
                info!(
                    served = false,
                    "Scaleway Instances (ScalewayInstanceNodeClass): the CRD is not installed; Instance NodeClasses are not served"
                );
                return false;
            }
            Ok(KindAnswer::Forbidden) if elapsed < windows.forbidden => {
                debug!(
                    "listing ScalewayInstanceNodeClass is forbidden (RBAC not propagated yet?); retried"
                );
            }
            Ok(KindAnswer::Forbidden) => {
                warn!(
                    served = false,
                    "the provider's RBAC does not allow listing scalewayinstancenodeclasses (a chart older than Instances?): Instance NodeClasses are not served until a restart"
                );
                return false;
            }
            Err(error) if elapsed < windows.errors => {
                warn!(%error, "probing for the ScalewayInstanceNodeClass CRD; retried");
            }
            Err(error) => {
                warn!(%error, "could not tell whether ScalewayInstanceNodeClass is served; Instances are not served until a restart");
                return false;
            }
        }
        tokio::time::sleep(windows.every).await;
    }
}

pub struct InstanceNodeClassController {
    ctx: Arc<Context>,
}

impl InstanceNodeClassController {
    pub fn new(
        client: Client,
        api: Arc<dyn Instance>,
        networks: Arc<dyn PrivateNetworks>,
        project_id: String,
        zones: Vec<String>,
        is_leader: IsLeader,
        catalog: Arc<CatalogStore>,
    ) -> Self {
        InstanceNodeClassController {
            ctx: Arc::new(Context {
                client: client.clone(),
                api,
                networks,
                project_id,
                zones,
                is_leader,
                catalog,
                cache: InstanceClassCache {
                    store: Arc::default(),
                    client: Some(client.clone()),
                },
            }),
        }
    }

    /// The NodeClasses as Create reads them (filled once `run` has started).
    pub fn cache(&self) -> InstanceClassCache {
        self.ctx.cache.clone()
    }

    /// Runs until `shutdown` resolves; returns at once when the cluster does
    /// not serve the kind (`served`, from [`probe_served`]).
    pub async fn run(
        self,
        served: bool,
        shutdown: impl Future<Output = ()> + Send + Sync + 'static,
    ) {
        if !served {
            return;
        }
        let shutdown = Box::pin(shutdown);
        let controller = Controller::new(
            Api::<NodeClass>::all(self.ctx.client.clone()),
            watcher::Config::default(),
        );
        let store = controller.store();
        let _ = self.ctx.cache.store.set(store.clone());
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
                Err(_) => false,
            };
            futures::future::ready(relevant.then_some(()))
        });
        controller
            .reconcile_all_on(secrets)
            .graceful_shutdown_on(shutdown)
            .run(reconcile, error_policy, self.ctx)
            .for_each(|result| async move {
                if let Err(error) = result {
                    debug!(%error, "Instance NodeClass reconcile did not complete");
                }
            })
            .await;
    }
}

fn references(spec: &InstanceNodeClassSpec, namespace: &str, name: &str) -> bool {
    let r = &spec.machine_config_secret_ref;
    r.namespace == namespace && r.name == name
}

/// The zones a NodeClass covers: its own, else the provider's.
fn zones_of(ctx: &Context, spec: &InstanceNodeClassSpec) -> Vec<String> {
    if spec.zones.is_empty() {
        ctx.zones.clone()
    } else {
        spec.zones.clone()
    }
}

/// Everything the status is computed from.
async fn observe(ctx: &Context, spec: &InstanceNodeClassSpec) -> Observations {
    let zones = zones_of(ctx, spec);
    let config_ref = &spec.machine_config_secret_ref;
    let private_network = async {
        let selector = spec.private_network.as_ref()?;
        let observed = crate::nodeclass::observe_private_network(
            ctx.networks.as_ref(),
            selector,
            &zones,
            &ctx.project_id,
        )
        .await;
        Some(crate::nodeclass::resolve_private_network(
            selector, &observed,
        ))
    };
    let ((machine_config, bytes), images, security_group, private_network) = futures::join!(
        read_secret(&ctx.client, config_ref),
        lookup_images(ctx.api.as_ref(), spec, &zones, &ctx.project_id),
        check_security_group(ctx.api.as_ref(), spec, &zones),
        private_network,
    );
    let place = format!(
        "Secret {}/{} key {:?}",
        config_ref.namespace, config_ref.name, config_ref.key
    );
    Observations {
        zones,
        images,
        security_group,
        machine_config,
        machine_config_content: bytes
            .map(|b| content_check::check_machine_config(&b, &spec.machine_config_patches, &place)),
        private_network,
    }
}

async fn reconcile(nc: Arc<NodeClass>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    publish_node_classes(&ctx);
    if !(ctx.is_leader)() {
        return Ok(Action::requeue(REQUEUE_STANDBY));
    }
    let name = nc.name_any();
    let previous = nc.status.clone().unwrap_or_default();
    let observed = observe(&ctx, &nc.spec).await;
    let now = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string();
    let next = conditions::compute(&nc.spec, nc.metadata.generation, &observed, &previous, &now);
    let ready = crate::nodeclass::conditions::is_ready(&next.conditions);
    if next != previous {
        let api: Api<NodeClass> = Api::all(ctx.client.clone());
        let patch = json!({ "status": next });
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(ReconcileError::PatchStatus)?;
        let summary: Vec<String> = next
            .conditions
            .iter()
            .map(|c| format!("{}={}({})", c.type_, c.status, c.reason))
            .collect();
        if ready {
            info!(nodeclass = %name, conditions = %summary.join(" "), images = next.images.len(), "Instance NodeClass status updated: Ready");
        } else {
            let why = next
                .conditions
                .iter()
                .find(|c| c.type_ == conditions::READY)
                .map(|c| c.message.clone())
                .unwrap_or_default();
            warn!(nodeclass = %name, conditions = %summary.join(" "), %why, "Instance NodeClass status updated: not Ready");
        }
    }
    Ok(Action::requeue(if ready {
        REQUEUE_READY
    } else {
        REQUEUE_NOT_READY
    }))
}

fn error_policy(nc: Arc<NodeClass>, error: &ReconcileError, _ctx: Arc<Context>) -> Action {
    warn!(nodeclass = %nc.name_any(), category = error.category(), %error, "Instance NodeClass reconcile failed");
    Action::requeue(Duration::from_secs(15))
}

#[cfg(test)]
#[path = "reconciler_tests.rs"]
mod tests;
