//! Small Kubernetes helpers for the harness: server-side apply of multi-document
//! YAML, and typed access to Karpenter's objects through the dynamic API.

use anyhow::{Context, Result};
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use kube::core::GroupVersionKind;
use kube::discovery::pinned_kind;
use kube::{Client, ResourceExt};
use serde::Deserialize;

const FIELD_MANAGER: &str = "kps-e2e";

/// Server-side applies every document of `yaml` (empty documents skipped).
pub async fn apply_yaml(client: &Client, yaml: &str) -> Result<Vec<DynamicObject>> {
    let mut applied = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(yaml) {
        let value = serde_yaml_ng::Value::deserialize(doc)?;
        if value.is_null() {
            continue;
        }
        let obj: DynamicObject =
            serde_yaml_ng::from_value(value).context("parsing a YAML document")?;
        applied.push(apply(client, obj).await?);
    }
    Ok(applied)
}

/// Server-side applies one object, namespaced or cluster-scoped as its kind is.
pub async fn apply(client: &Client, obj: DynamicObject) -> Result<DynamicObject> {
    let types = obj
        .types
        .clone()
        .context("object without apiVersion/kind")?;
    let gvk = GroupVersionKind::try_from(&types)?;
    let (ar, caps) = pinned_kind(client, &gvk)
        .await
        .with_context(|| format!("discovering {}/{}", types.api_version, types.kind))?;
    let api: Api<DynamicObject> = match (caps.scope, obj.namespace()) {
        (kube::discovery::Scope::Namespaced, Some(ns)) => {
            Api::namespaced_with(client.clone(), &ns, &ar)
        }
        (kube::discovery::Scope::Namespaced, None) => {
            Api::default_namespaced_with(client.clone(), &ar)
        }
        (kube::discovery::Scope::Cluster, _) => Api::all_with(client.clone(), &ar),
    };
    let name = obj.name_any();
    api.patch(
        &name,
        &PatchParams::apply(FIELD_MANAGER).force(),
        &Patch::Apply(&obj),
    )
    .await
    .with_context(|| format!("applying {} {}", types.kind, name))
}

fn dynamic_api(
    client: &Client,
    group: &str,
    version: &str,
    kind: &str,
    plural: &str,
) -> Api<DynamicObject> {
    let gvk = GroupVersionKind::gvk(group, version, kind);
    let ar = kube::discovery::ApiResource::from_gvk_with_plural(&gvk, plural);
    Api::all_with(client.clone(), &ar)
}

pub fn nodeclaims(client: &Client) -> Api<DynamicObject> {
    dynamic_api(client, "karpenter.sh", "v1", "NodeClaim", "nodeclaims")
}

pub fn nodepools(client: &Client) -> Api<DynamicObject> {
    dynamic_api(client, "karpenter.sh", "v1", "NodePool", "nodepools")
}

pub fn instance_nodeclasses(client: &Client) -> Api<DynamicObject> {
    dynamic_api(
        client,
        "karpenter.scaleway.com",
        "v1alpha1",
        "ScalewayInstanceNodeClass",
        "scalewayinstancenodeclasses",
    )
}

pub fn nodeclasses(client: &Client) -> Api<DynamicObject> {
    dynamic_api(
        client,
        "karpenter.scaleway.com",
        "v1alpha1",
        "ScalewayElasticMetalNodeClass",
        "scalewayelasticmetalnodeclasses",
    )
}

/// The status of condition `type_` of a dynamic object (`True`/`False`/`Unknown`).
pub fn condition(obj: &DynamicObject, type_: &str) -> Option<String> {
    obj.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .and_then(|c| c["status"].as_str().map(str::to_string))
}

/// True when the core/v1 Node has condition Ready=True.
pub fn node_ready(node: &k8s_openapi::api::core::v1::Node) -> bool {
    node.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .is_some_and(|cs| cs.iter().any(|c| c.type_ == "Ready" && c.status == "True"))
}

/// The prefix of the install-progress annotations the provider keeps on a
/// NodeClaim (`install.karpenter.scaleway.com/phase`, ...).
pub const INSTALL_ANNOTATION_PREFIX: &str = "install.karpenter.scaleway.com/";

/// An annotation of a dynamic object.
pub fn annotation(obj: &DynamicObject, key: &str) -> Option<String> {
    obj.metadata
        .annotations
        .as_ref()
        .and_then(|a| a.get(key).cloned())
}

/// The install phase the provider last persisted on a NodeClaim
/// (`ordered`, `delivering`, ..., `joined`, `failed`).
pub fn install_phase(claim: &DynamicObject) -> Option<String> {
    annotation(claim, &format!("{INSTALL_ANNOTATION_PREFIX}phase"))
}

/// A numeric install annotation (`image-attempts`, `rescue-returns`), 0 when absent.
pub fn install_counter(claim: &DynamicObject, key: &str) -> u32 {
    annotation(claim, &format!("{INSTALL_ANNOTATION_PREFIX}{key}"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or(0)
}

/// One Event about an object, in the fields the scenarios check.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectEvent {
    pub type_: String,
    pub reason: String,
    pub message: String,
    pub count: i32,
}

/// The core/v1 Events (which include those written through events.k8s.io/v1)
/// whose involved object is the NodeClaim `name`, oldest first. NodeClaims are
/// cluster-scoped, so the Events may be in any namespace.
pub async fn nodeclaim_events(client: &Client, name: &str) -> Result<Vec<ObjectEvent>> {
    use k8s_openapi::api::core::v1::Event;
    let api: Api<Event> = Api::all(client.clone());
    let list = api
        .list(&kube::api::ListParams::default().fields(&format!(
            "involvedObject.kind=NodeClaim,involvedObject.name={name}"
        )))
        .await
        .with_context(|| format!("listing the Events of NodeClaim {name}"))?;
    let mut items = list.items;
    items.sort_by_key(|e| {
        e.event_time
            .as_ref()
            .map(|t| t.0)
            .or(e.first_timestamp.as_ref().map(|t| t.0))
            .or(e.metadata.creation_timestamp.as_ref().map(|t| t.0))
    });
    Ok(items
        .into_iter()
        .map(|e| ObjectEvent {
            type_: e.type_.unwrap_or_default(),
            reason: e.reason.unwrap_or_default(),
            message: e.message.unwrap_or_default(),
            count: e.count.unwrap_or(1),
        })
        .collect())
}

/// The NodeClaim condition `type_`'s lastTransitionTime, if set.
pub fn condition_time(obj: &DynamicObject, type_: &str) -> Option<chrono::DateTime<chrono::Utc>> {
    obj.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .and_then(|c| c["lastTransitionTime"].as_str())
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map(|t| t.with_timezone(&chrono::Utc))
}
