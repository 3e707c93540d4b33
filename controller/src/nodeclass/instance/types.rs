//! `ScalewayInstanceNodeClass` (`karpenter.scaleway.com/v1alpha1`, cluster-scoped):
//! nodes on Scaleway Instances (VMs and GPU VMs). The CRD is generated from
//! these types (`karpenter-scaleway crd ScalewayInstanceNodeClass`).
//!
//! What it shares with the Elastic Metal NodeClass is written once in
//! `nodeclass/types.rs`: the machine config source (base Secret + patches,
//! checked by the same `MachineConfigValid` code), Secret references, and the
//! rules on zones and tags.

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use crate::nodeclass::rules::*;
use crate::nodeclass::{Condition, SecretKeyRef};

pub const KIND: &str = "ScalewayInstanceNodeClass";

/// The root volume size when `rootVolume` does not set one (20 GB); declared
/// by the catalog, which sizes the VM types' ephemeral storage with it.
pub use crate::catalog::DEFAULT_ROOT_BYTES;

#[derive(CustomResource, Debug, Clone, PartialEq, Serialize, Deserialize, KubeSchema)]
#[kube(
    group = "karpenter.scaleway.com",
    version = "v1alpha1",
    kind = "ScalewayInstanceNodeClass",
    plural = "scalewayinstancenodeclasses",
    shortname = "inc",
    category = "karpenter",
    status = "InstanceNodeClassStatus",
    printcolumn = r#"{"name":"Ready","type":"string","jsonPath":".status.conditions[?(@.type==\"Ready\")].status"}"#,
    printcolumn = r#"{"name":"Age","type":"date","jsonPath":".metadata.creationTimestamp"}"#
)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new("!has(self.securityGroupId) || (has(self.zones) && size(self.zones) == 1)").message("securityGroupId names a security group of one zone: set zones to exactly that zone (security groups are per zone), or use one NodeClass per zone"),
    validation = Rule::new("!has(self.placementGroupId) || (has(self.zones) && size(self.zones) == 1)").message("placementGroupId names a placement group of one zone: set zones to exactly that zone (placement groups are per zone), or use one NodeClass per zone")
)]
pub struct InstanceNodeClassSpec {
    /// Zones to create VMs in (e.g. `fr-par-2`). Empty = every zone the
    /// provider is configured for.
    #[serde(default)]
    #[schemars(length(max = 16), inner(length(max = 32)))]
    #[x_kube(
        validation = Rule::new(ZONES_FORMAT).message(ZONES_FORMAT_MESSAGE),
        validation = Rule::new(ZONES_UNIQUE).message(ZONES_UNIQUE_MESSAGE)
    )]
    pub zones: Vec<String>,
    /// The Talos image of the VMs (Talos' `scaleway` platform), resolved into
    /// one image per zone and architecture (`status.images`). A type is only
    /// offered in a zone where an image of its architecture resolves.
    pub image: InstanceImageSelector,
    /// The boot volume. Default: a 20 GB Block Storage (`sbs_volume`) volume.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub root_volume: Option<RootVolume>,
    /// Id of the security group of the VMs (in the NodeClass's only zone).
    /// Unset = the project's default security group of the zone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 36))]
    #[x_kube(validation = Rule::new(UUID).message("securityGroupId must be the id (a UUID) of a security group: see `scw instance security-group list zone=<zone>`"))]
    pub security_group_id: Option<String>,
    /// Id of the placement group of the VMs (in the NodeClass's only zone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 36))]
    #[x_kube(validation = Rule::new(UUID).message("placementGroupId must be the id (a UUID) of a placement group: see `scw instance placement-group list zone=<zone>`"))]
    pub placement_group_id: Option<String>,
    /// `dynamic` (default): each VM gets a dynamic public IPv4, released when
    /// it stops. `none`: no public IP; Talos' `scaleway` platform then runs no
    /// DHCP, so the machine config must configure the network itself.
    #[serde(default)]
    pub public_ip: PublicIpMode,
    /// Secret holding the base worker machine config (`talosctl gen config`
    /// worker.yaml), as for Elastic Metal.
    pub machine_config_secret_ref: SecretKeyRef,
    /// Talos config patches (YAML documents) applied on top of the base config, in order.
    /// Their YAML is checked by the status reconciler (`MachineConfigValid`).
    #[serde(default)]
    #[schemars(length(max = 32), inner(length(max = 65536)))]
    #[x_kube(validation = Rule::new(PATCHES_NOT_EMPTY).message(PATCHES_NOT_EMPTY_MESSAGE))]
    pub machine_config_patches: Vec<String>,
    /// Extra Scaleway tags put on every VM and its volumes. The provider's own
    /// ownership tags (`karpenter.sh/...`, `karpenter.scaleway.com/...`) are
    /// reserved. The cloud controller manager turns a tag `foo=bar` into the
    /// node label `k8s.scaleway.com/foo=bar`.
    #[serde(default)]
    #[schemars(length(max = 32), inner(length(max = 128)))]
    #[x_kube(
        validation = Rule::new(TAGS_NOT_EMPTY).message(TAGS_NOT_EMPTY_MESSAGE),
        validation = Rule::new(TAGS_NOT_RESERVED).message(TAGS_NOT_RESERVED_MESSAGE)
    )]
    pub tags: Vec<String>,
    /// The customer's Private Network the VMs join, through a private NIC of
    /// their own (docs/instance-nodeclass.md, "Private Networks"). Absent =
    /// public network only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_network: Option<crate::nodeclass::PrivateNetworkSelector>,
}

/// Which Instance images the VMs boot: either `ids` (one per zone and
/// architecture), or `name` and/or `tags` matching images of the project.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("(has(self.ids) && size(self.ids) > 0) != ((has(self.name) && self.name != '') || (has(self.tags) && size(self.tags) > 0))").message("image: set either ids (one image id per zone and architecture) or name and/or tags (images of the project), exactly one of the two forms"))]
pub struct InstanceImageSelector {
    /// The image of each (zone, architecture), by id (`scw instance image list`).
    #[serde(default)]
    #[schemars(length(max = 32))]
    #[x_kube(validation = Rule::new("self.all(a, self.exists_one(b, b.zone == a.zone && b.arch == a.arch))").message("image.ids must not list a (zone, arch) pair twice"))]
    pub ids: Vec<ZoneImage>,
    /// Exact name of the images (e.g. `talos-v1.13.9`). With `tags`, an image
    /// must match both. The newest matching image of each (zone,
    /// architecture) is used.
    #[serde(default)]
    #[schemars(length(max = 255))]
    pub name: String,
    /// Tags every matching image carries (e.g. `talos`, `v1.13.9`).
    #[serde(default)]
    #[schemars(length(max = 16), inner(length(max = 128)))]
    #[x_kube(validation = Rule::new("self.all(t, t != '')").message("image.tags must not contain an empty tag"))]
    pub tags: Vec<String>,
}

/// One image id, in one zone, for one architecture.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct ZoneImage {
    /// Zone of the image (images are per zone), e.g. `fr-par-2`.
    #[schemars(length(max = 32))]
    #[x_kube(validation = Rule::new(ZONE_FORMAT).message("zone must be a Scaleway zone name such as fr-par-2"))]
    pub zone: String,
    /// `amd64` or `arm64`.
    pub arch: ImageArch,
    /// Id (a UUID) of the image in that zone.
    #[schemars(length(max = 36))]
    #[x_kube(validation = Rule::new(UUID).message("id must be the id (a UUID) of an Instance image: see `scw instance image list zone=<zone>`"))]
    pub id: String,
}

#[derive(
    Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize, JsonSchema,
)]
#[serde(rename_all = "lowercase")]
pub enum ImageArch {
    Amd64,
    Arm64,
}

impl ImageArch {
    pub const ALL: [ImageArch; 2] = [ImageArch::Amd64, ImageArch::Arm64];

    pub fn as_str(self) -> &'static str {
        match self {
            ImageArch::Amd64 => "amd64",
            ImageArch::Arm64 => "arm64",
        }
    }
}

/// The boot volume of each VM.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.type == 'sbs_volume' || !has(self.iops)").message("rootVolume.iops is a Block Storage class: set it only with type sbs_volume"))]
pub struct RootVolume {
    /// `sbs_volume` (default, Block Storage, outlives the VM until the
    /// provider deletes it) or `l_ssd` (local storage, only on types that
    /// have it).
    #[serde(default, rename = "type")]
    pub volume_type: RootVolumeType,
    /// Size in bytes, a multiple of 512, from 10 GB to 10 TB.
    #[serde(default = "default_root_bytes")]
    #[x_kube(
        validation = Rule::new("self % 512 == 0").message("rootVolume.sizeBytes must be a multiple of 512 (e.g. 20000000000 for 20 GB)"),
        validation = Rule::new("self >= 10000000000 && self <= 10000000000000").message("rootVolume.sizeBytes must be between 10 GB (10000000000) and 10 TB (10000000000000)")
    )]
    pub size_bytes: u64,
    /// IOPS class of an `sbs_volume`: `5000` or `15000`. Unset = the
    /// Block Storage default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[x_kube(validation = Rule::new("self == 5000 || self == 15000").message("rootVolume.iops must be 5000 or 15000 (the Block Storage classes sbs_5k and sbs_15k)"))]
    pub iops: Option<u32>,
}

fn default_root_bytes() -> u64 {
    DEFAULT_ROOT_BYTES
}

impl Default for RootVolume {
    fn default() -> Self {
        RootVolume {
            volume_type: RootVolumeType::SbsVolume,
            size_bytes: DEFAULT_ROOT_BYTES,
            iops: None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "snake_case")]
pub enum RootVolumeType {
    #[default]
    SbsVolume,
    LSsd,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum PublicIpMode {
    #[default]
    Dynamic,
    None,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct InstanceNodeClassStatus {
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// The image each (zone, architecture) resolved to; a pair missing here
    /// gets no VM.
    #[serde(default)]
    pub images: Vec<ResolvedImage>,
    /// The Private Network `spec.privateNetwork` resolved to, per region.
    /// Always written (empty when unset), so that the status merge patch
    /// clears it when the selection goes.
    #[serde(default)]
    pub private_networks: Vec<crate::nodeclass::ResolvedPrivateNetwork>,
}

/// The image a (zone, architecture) resolved to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedImage {
    /// Zone of the image, e.g. `fr-par-2`.
    pub zone: String,
    /// `amd64` or `arm64`.
    pub arch: String,
    /// Id of the Instance image.
    pub id: String,
    /// Name of the image as the API lists it.
    pub name: String,
}
