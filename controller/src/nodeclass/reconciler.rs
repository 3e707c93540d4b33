//! The NodeClass status reconciler: observe (Secrets, IAM key), compute the
//! conditions (a pure function, `conditions`), patch the status only when it
//! changed. Karpenter core never writes NodeClass status and ignores NodePools
//! whose NodeClass is not `Ready`, so this loop gates all provisioning.

use std::collections::BTreeMap;
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

use super::conditions::{self, Observations, SecretCheck, SshKeyCheck};
use super::{NodeClassSpec, ScalewayElasticMetalNodeClass, SecretKeyRef};
use crate::catalog::{self, CatalogStore, ClassView};
use crate::scaleway::ElasticMetal;

type NodeClass = ScalewayElasticMetalNodeClass;

/// Requeue of a Ready NodeClass: catches an IAM key removed behind our back.
const REQUEUE_READY: Duration = Duration::from_secs(60);
/// Requeue of a NodeClass that is not Ready yet: it usually is being set up.
const REQUEUE_NOT_READY: Duration = Duration::from_secs(10);

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
    project_id: String,
    catalog: Arc<CatalogStore>,
    store: Store<NodeClass>,
}

pub struct NodeClassController {
    controller: Controller<NodeClass>,
    ctx: Arc<Context>,
}

impl NodeClassController {
    pub fn new(
        client: Client,
        api: Arc<dyn ElasticMetal>,
        project_id: String,
        catalog: Arc<CatalogStore>,
    ) -> Self {
        let controller = Controller::new(
            Api::<NodeClass>::all(client.clone()),
            watcher::Config::default(),
        );
        let ctx = Arc::new(Context {
            client,
            api,
            project_id,
            catalog,
            store: controller.store(),
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

async fn check_secret(client: &Client, r: &SecretKeyRef) -> SecretCheck {
    let secrets: Api<KubeSecret> = Api::namespaced(client.clone(), &r.namespace);
    match secrets.get_opt(&r.name).await {
        Ok(None) => SecretCheck::SecretNotFound,
        Ok(Some(secret)) => {
            let has_key = secret
                .data
                .as_ref()
                .and_then(|d| d.get(&r.key))
                .is_some_and(|v| !v.0.is_empty());
            if has_key {
                SecretCheck::Present
            } else {
                SecretCheck::KeyMissing
            }
        }
        Err(e) => SecretCheck::Error(e.to_string()),
    }
}

async fn check_ssh_key(ctx: &Context, key_id: &str) -> SshKeyCheck {
    match ctx.api.list_ssh_keys(&ctx.project_id).await {
        Ok(keys) => match keys.iter().find(|k| k.id == key_id) {
            None => SshKeyCheck::NotFound,
            Some(k) if k.disabled => SshKeyCheck::Disabled,
            Some(_) => SshKeyCheck::Registered,
        },
        Err(e) => SshKeyCheck::Error(e.to_string()),
    }
}

/// The zones of every cached NodeClass, for the per-NodeClass catalogs.
/// What the catalog needs of a NodeClass: its zones and how it is billed.
fn class_view(spec: &NodeClassSpec) -> ClassView {
    let billing = match spec.billing {
        super::Billing::Hourly => catalog::Billing::Hourly,
        super::Billing::Monthly => catalog::Billing::Monthly,
    };
    ClassView::from((spec.zones.clone(), billing))
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
    ctx.catalog.set_node_classes(classes);
}

async fn reconcile(nc: Arc<NodeClass>, ctx: Arc<Context>) -> Result<Action, ReconcileError> {
    publish_node_classes(&ctx);
    let name = nc.name_any();
    let spec = &nc.spec;
    let (private_key, machine_config, ssh_key) = futures::join!(
        check_secret(&ctx.client, &spec.rescue_ssh_key.private_key_secret_ref),
        check_secret(&ctx.client, &spec.machine_config_secret_ref),
        check_ssh_key(&ctx, &spec.rescue_ssh_key.iam_key_id),
    );
    let observed = Observations {
        private_key,
        machine_config,
        ssh_key,
    };
    let previous = nc
        .status
        .as_ref()
        .map(|s| s.conditions.clone())
        .unwrap_or_default();
    let now = chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string();
    let next = conditions::compute(spec, nc.metadata.generation, &observed, &previous, &now);
    let ready = conditions::is_ready(&next);
    if next != previous {
        let api: Api<NodeClass> = Api::all(ctx.client.clone());
        let patch = json!({ "status": { "conditions": next } });
        api.patch_status(&name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map_err(ReconcileError::PatchStatus)?;
        let summary: Vec<String> = next
            .iter()
            .map(|c| format!("{}={}({})", c.type_, c.status, c.reason))
            .collect();
        info!(nodeclass = %name, ready, conditions = %summary.join(" "), "NodeClass status updated");
    }
    Ok(Action::requeue(if ready {
        REQUEUE_READY
    } else {
        REQUEUE_NOT_READY
    }))
}

fn error_policy(nc: Arc<NodeClass>, error: &ReconcileError, _ctx: Arc<Context>) -> Action {
    warn!(nodeclass = %nc.name_any(), category = error.category(), %error, "NodeClass reconcile failed");
    Action::requeue(Duration::from_secs(15))
}

#[cfg(test)]
mod tests {
    use super::*;

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
