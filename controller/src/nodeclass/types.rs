//! `ScalewayElasticMetalNodeClass` (`karpenter.scaleway.com/v1alpha1`, cluster-scoped).
//! The CRD is generated from these types (`karpenter-scaleway crd`).

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub const GROUP: &str = "karpenter.scaleway.com";
pub const VERSION: &str = "v1alpha1";
pub const KIND: &str = "ScalewayElasticMetalNodeClass";

#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "karpenter.scaleway.com",
    version = "v1alpha1",
    kind = "ScalewayElasticMetalNodeClass",
    plural = "scalewayelasticmetalnodeclasses",
    shortname = "emnc",
    category = "karpenter",
    status = "NodeClassStatus",
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
pub struct NodeClassSpec {
    /// Zones to order servers in (e.g. `fr-par-2`). Empty = every zone the provider
    /// is configured for.
    #[serde(default)]
    #[schemars(
        length(max = 16),
        inner(regex(pattern = r"^[a-z]{2}-[a-z]{3}-[0-9]+$"))
    )]
    pub zones: Vec<String>,
    /// `hourly` (default) or `monthly`. Monthly orders the monthly twin of an offer
    /// and prices it as the monthly price over 730 h.
    #[serde(default)]
    pub billing: Billing,
    /// The Talos disk image written to the server's disk.
    pub image: TalosImage,
    /// Which disk to install on. Empty = the first disk `lsblk` reports.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub install_disk: Option<DiskSelector>,
    /// The IAM SSH key the rescue system is booted with, and its private half.
    pub rescue_ssh_key: RescueSshKey,
    /// Secret holding the base worker machine config (`talosctl gen config` worker.yaml).
    pub machine_config_secret_ref: SecretKeyRef,
    /// Talos config patches (YAML documents) applied on top of the base config, in order.
    #[serde(default)]
    pub machine_config_patches: Vec<String>,
    /// Extra Scaleway tags put on every server.
    #[serde(default)]
    pub tags: Vec<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum Billing {
    #[default]
    Hourly,
    Monthly,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct TalosImage {
    /// URL of the raw disk image; `{version}`, `{schematic}` and `{arch}` are
    /// substituted. Must end in `.raw.xz` or `.raw.zst`.
    /// Example: `https://factory.talos.dev/image/{schematic}/{version}/metal-{arch}.raw.xz`.
    #[schemars(length(min = 1, max = 2048))]
    #[x_kube(validation = Rule::new("self.endsWith('.raw.xz') || self.endsWith('.raw.zst')").message("urlTemplate must end in .raw.xz or .raw.zst"))]
    pub url_template: String,
    /// Talos version, e.g. `v1.13.9`.
    pub version: String,
    /// Image Factory schematic id.
    #[serde(default)]
    pub schematic: String,
    /// Expected sha256 (hex) of the uncompressed image, per architecture.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sha256: Option<std::collections::BTreeMap<String, String>>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct DiskSelector {
    /// Kernel name of the disk in the rescue system, e.g. `nvme0n1` or `sda`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct RescueSshKey {
    /// Id of the IAM SSH key (registered in the project) whose public half the
    /// rescue system accepts.
    #[schemars(length(max = 64))]
    #[x_kube(validation = Rule::new("self != ''").message("iamKeyId must not be empty"))]
    pub iam_key_id: String,
    /// Secret holding the matching OpenSSH private key.
    pub private_key_secret_ref: SecretKeyRef,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    pub name: String,
    pub namespace: String,
    pub key: String,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClassStatus {
    #[serde(default)]
    pub conditions: Vec<Condition>,
}

/// A status condition in the shape Karpenter's operatorpkg reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    pub reason: String,
    pub message: String,
    pub last_transition_time: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}
