//! `ScalewayElasticMetalNodeClass` (`karpenter.scaleway.com/v1alpha1`, cluster-scoped).
//! The CRD is generated from these types (`karpenter-scaleway crd`).

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::rules::*;

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
#[x_kube(validation = Rule::new(POOL_ZONES_IN_ZONES).message(POOL_ZONES_IN_ZONES_MESSAGE))]
pub struct NodeClassSpec {
    /// Zones to order servers in (e.g. `fr-par-2`). Empty = every zone the provider
    /// is configured for.
    #[serde(default)]
    #[schemars(length(max = 16), inner(length(max = 32)))]
    #[x_kube(
        validation = Rule::new(ZONES_FORMAT).message(ZONES_FORMAT_MESSAGE),
        validation = Rule::new(ZONES_UNIQUE).message(ZONES_UNIQUE_MESSAGE)
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
    /// Their YAML is checked by the status reconciler (`MachineConfigValid`).
    #[serde(default)]
    #[schemars(length(max = 32), inner(length(max = 65536)))]
    #[x_kube(validation = Rule::new(PATCHES_NOT_EMPTY).message(PATCHES_NOT_EMPTY_MESSAGE))]
    pub machine_config_patches: Vec<String>,
    /// Extra Scaleway tags put on every server. The provider's own ownership
    /// tags (`karpenter.sh/...`, `karpenter.scaleway.com/...`) are reserved:
    /// a NodeClass that could set them could make a server look owned by
    /// another NodeClaim or cluster.
    #[serde(default)]
    #[schemars(length(max = 32), inner(length(max = 128)))]
    #[x_kube(
        validation = Rule::new(TAGS_NOT_EMPTY).message(TAGS_NOT_EMPTY_MESSAGE),
        validation = Rule::new(TAGS_NOT_RESERVED).message(TAGS_NOT_RESERVED_MESSAGE)
    )]
    pub tags: Vec<String>,
    /// Installed servers kept idle in Talos maintenance mode, served to
    /// Karpenter as `reserved` capacity (docs/standby.md). Absent = none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub standby: Option<Standby>,
    /// The customer's Private Network the servers join, as a VLAN on their
    /// NIC (docs/nodeclass.md, "Private Networks"). Absent = public network only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_network: Option<super::PrivateNetworkSelector>,
}

/// Standby servers of a NodeClass: one pool per offer and zone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct Standby {
    /// One entry per (offer, zone); at most one entry for each pair.
    #[serde(default)]
    #[schemars(length(max = 16))]
    #[x_kube(validation = Rule::new(POOLS_UNIQUE).message(POOLS_UNIQUE_MESSAGE))]
    pub pools: Vec<StandbyPool>,
}

/// How many standby servers of one offer to keep in one zone.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new(POOL_MAX_AT_LEAST_MIN).message(POOL_MAX_AT_LEAST_MIN_MESSAGE))]
pub struct StandbyPool {
    /// The Elastic Metal offer, e.g. `EM-A115X-SSD`.
    #[schemars(length(min = 1, max = 64))]
    #[x_kube(validation = Rule::new(OFFER_FORMAT).message(OFFER_FORMAT_MESSAGE))]
    pub offer: String,
    /// The zone, e.g. `fr-par-2`; it must be one of the NodeClass's zones
    /// (or any served zone when the NodeClass names none).
    #[schemars(length(min = 1, max = 32))]
    #[x_kube(validation = Rule::new(ZONE_FORMAT).message(POOL_ZONE_FORMAT_MESSAGE))]
    pub zone: String,
    /// Installed idle servers to keep ready; the pool orders more whenever
    /// fewer are idle, being installed or being wiped.
    #[serde(default)]
    #[schemars(range(min = 0, max = 100))]
    pub min: i32,
    /// Most standby servers (idle, being installed or being wiped) this pool
    /// keeps; nothing is ordered above it. The server of a deleted node goes
    /// back to the pool only below it when billed hourly (else it is deleted),
    /// always when billed monthly (released when its paid month ends).
    #[schemars(range(min = 0, max = 100))]
    pub max: i32,
    /// How long an idle hourly-billed server above `min` is kept before it is
    /// released at the end of its paid hour (a Go duration such as `30m`,
    /// `2h`). Default `0s`: released at the end of the hour it went idle in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16))]
    #[x_kube(
        validation = Rule::new(IDLE_KEEP_FORMAT).message(IDLE_KEEP_FORMAT_MESSAGE),
        validation = Rule::new(IDLE_KEEP_AT_MOST_A_DAY).message(IDLE_KEEP_AT_MOST_A_DAY_MESSAGE)
    )]
    pub idle_hourly_keep: Option<String>,
    /// The demand planner (docs/planner.md): raises the standby count above
    /// `min` (up to `max`) for load that has stayed on other NodePools, so
    /// that Karpenter consolidates it onto this pool's servers. Absent = the
    /// pool keeps `min`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub planner: Option<StandbyPlanner>,
}

/// How the demand planner sizes a standby pool from the load of other
/// NodePools.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new(PLANNER_AT_LEAST_WITHIN_WINDOW).message(PLANNER_AT_LEAST_WITHIN_WINDOW_MESSAGE)
)]
pub struct StandbyPlanner {
    /// NodePools whose pods count as migratable load (typically the VM
    /// NodePools). The pods on nodes adopted from this pool count too, so
    /// that load already moved keeps its servers. DaemonSet pods never count.
    #[schemars(length(min = 1, max = 16), inner(length(min = 1, max = 63)))]
    pub node_pools: Vec<String>,
    /// Load counts as sustained once it has been present this long (a Go
    /// duration, at most 168h). Default `2h`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16))]
    #[x_kube(
        validation = Rule::new(PLANNER_DURATION_FORMAT).message(PLANNER_WINDOW_FORMAT_MESSAGE),
        validation = Rule::new(PLANNER_DURATION_AT_MOST_A_WEEK).message(PLANNER_WINDOW_AT_MOST_A_WEEK_MESSAGE)
    )]
    pub window: Option<String>,
    /// Within `window`, how long a load level must have been present to
    /// count: `window: 24h` with `atLeast: 12h` stages for what runs more
    /// than 12 hours a day. Default: all of `window`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16))]
    #[x_kube(validation = Rule::new(PLANNER_DURATION_FORMAT).message(PLANNER_AT_LEAST_FORMAT_MESSAGE))]
    pub at_least: Option<String>,
    /// The target is lowered only once the load has stayed below it this
    /// long, and never sooner than this after its last change. Default `30m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16))]
    #[x_kube(
        validation = Rule::new(PLANNER_DURATION_FORMAT).message(PLANNER_HOLD_FORMAT_MESSAGE),
        validation = Rule::new(PLANNER_DURATION_AT_MOST_A_WEEK).message(PLANNER_HOLD_AT_MOST_A_WEEK_MESSAGE)
    )]
    pub hold: Option<String>,
    /// Stage ahead of a daily pattern: the target also counts, this long
    /// ahead of now, the load that was sustained (by `window` and `atLeast`)
    /// at the same time of day yesterday or on the same day a week before,
    /// as long as today's load so far is at least what it was then at this
    /// time. Set it above the offer's install time (e.g. `20m`) so that the
    /// servers are ready when the load comes back. A Go duration, at most
    /// 168h. Default: off (only load already seen counts).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 16))]
    #[x_kube(
        validation = Rule::new(PLANNER_DURATION_FORMAT).message(PLANNER_AHEAD_FORMAT_MESSAGE),
        validation = Rule::new(PLANNER_DURATION_AT_MOST_A_WEEK).message(PLANNER_AHEAD_AT_MOST_A_WEEK_MESSAGE)
    )]
    pub ahead: Option<String>,
    /// Most servers of this pool (adopted and standby together) the planner
    /// stages for. Default: the pool's `max`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 0, max = 100))]
    pub max_servers: Option<i32>,
    /// Compute, explain (Events, metrics, status) and change nothing.
    #[serde(default)]
    pub dry_run: bool,
}

impl StandbyPool {
    /// `idleHourlyKeep` as a duration; absent = zero. An error only for a
    /// value the API server would have refused (not a Go duration, or more
    /// than 24 h).
    pub fn idle_hourly_keep(&self) -> Result<std::time::Duration, String> {
        let Some(text) = self.idle_hourly_keep.as_deref() else {
            return Ok(std::time::Duration::ZERO);
        };
        let keep = super::go_duration::parse(text).map_err(|e| {
            format!(
                "standby pool {}/{}: idleHourlyKeep: {e}",
                self.offer, self.zone
            )
        })?;
        if keep > std::time::Duration::from_secs(IDLE_KEEP_MAX_SECONDS) {
            return Err(format!(
                "standby pool {}/{}: idleHourlyKeep {text:?} is longer than 24h",
                self.offer, self.zone
            ));
        }
        Ok(keep)
    }
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
#[x_kube(validation = Rule::new("!self.urlTemplate.contains('{schematic}') || self.schematic != ''").message("urlTemplate uses {schematic}: set image.schematic (the Image Factory schematic id)"))]
pub struct TalosImage {
    /// URL of the raw disk image; `{version}`, `{schematic}` and `{arch}` are
    /// substituted. Must end in `.raw.xz` or `.raw.zst`.
    /// Example: `https://factory.talos.dev/image/{schematic}/{version}/metal-{arch}.raw.xz`.
    #[schemars(length(min = 1, max = 2048))]
    #[x_kube(
        validation = Rule::new("self.startsWith('https://') || self.startsWith('http://')").message("urlTemplate must be an http:// or https:// URL"),
        validation = Rule::new("self.endsWith('.raw.xz') || self.endsWith('.raw.zst')").message("urlTemplate must end in .raw.xz or .raw.zst"),
        validation = Rule::new("self.findAll('[{}][^{}]*[}]?').all(p, p in ['{version}', '{schematic}', '{arch}'])").message("urlTemplate may only use the placeholders {version}, {schematic} and {arch}, each with both braces")
    )]
    pub url_template: String,
    /// Talos version, e.g. `v1.13.9`.
    #[schemars(length(max = 64))]
    #[x_kube(validation = Rule::new("self.matches('^v[0-9]+[.][0-9]+[.][0-9]+(-[0-9A-Za-z.-]+)?$')").message("version must be a Talos version such as v1.13.9"))]
    pub version: String,
    /// Image Factory schematic id.
    #[serde(default)]
    #[schemars(length(max = 128))]
    #[x_kube(validation = Rule::new("self.matches('^[0-9A-Za-z-]*$')").message("schematic must be an Image Factory schematic id (letters and digits, e.g. 376567988ad3...)"))]
    pub schematic: String,
    /// Expected sha256 (64 lowercase hex digits) of the uncompressed image, per
    /// architecture (`amd64`, `arm64`). When set, the provider downloads and
    /// checks the image once before ordering any server (`ImageVerified`), and
    /// every install checks what it wrote.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "sha256_schema")]
    #[x_kube(
        validation = Rule::new("self.all(arch, arch == 'amd64' || arch == 'arm64')").message("image.sha256 keys must be amd64 or arm64"),
        validation = Rule::new("self.all(arch, self[arch].matches('^[0-9a-f]{64}$'))").message("image.sha256 values must be 64 lowercase hex digits: the sha256 of the uncompressed image (sha256sum of the .raw)")
    )]
    pub sha256: Option<std::collections::BTreeMap<String, String>>,
}

/// `image.sha256`: at most one entry per architecture, each value short enough
/// for the API server to bound the cost of the CEL rules checking it.
fn sha256_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "type": "object",
        "nullable": true,
        "maxProperties": 2,
        "additionalProperties": { "type": "string", "maxLength": 64 },
    })
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct DiskSelector {
    /// Kernel name of the disk in the rescue system, e.g. `nvme0n1` or `sda`
    /// (a `/dev/` prefix is accepted). A whole disk, never a partition.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 64))]
    #[x_kube(
        validation = Rule::new("self.matches('^(/dev/)?[a-z][a-z0-9]*$')").message("installDisk.name must be a kernel disk name such as nvme0n1 or sda"),
        validation = Rule::new("!self.matches('^(/dev/)?(nvme[0-9]+n[0-9]+p[0-9]+|[sv]d[a-z]+[0-9]+)$')").message("installDisk.name names a partition: give the whole disk, e.g. nvme0n1 or sda")
    )]
    pub name: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct RescueSshKey {
    /// Id of the IAM SSH key (registered in the project) whose public half the
    /// rescue system accepts.
    #[schemars(length(max = 64))]
    #[x_kube(
        validation = Rule::new("self != ''").message("iamKeyId must not be empty"),
        validation = Rule::new("self == '' || self.matches('^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$')").message("iamKeyId must be the id (a UUID) of an IAM SSH key: see `scw iam ssh-key list`")
    )]
    pub iam_key_id: String,
    /// Secret holding the matching OpenSSH private key.
    pub private_key_secret_ref: SecretKeyRef,
}

/// A key of a Secret.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
pub struct SecretKeyRef {
    /// Name of the Secret.
    #[schemars(length(max = 253))]
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?([.][a-z0-9]([-a-z0-9]*[a-z0-9])?)*$')").message("name must be a Secret name (lowercase letters, digits, '-' and '.')"))]
    pub name: String,
    /// Namespace of the Secret (the provider's service account must be allowed
    /// to read Secrets there).
    #[schemars(length(max = 63))]
    #[x_kube(validation = Rule::new("self.matches('^[a-z0-9]([-a-z0-9]*[a-z0-9])?$')").message("namespace must be a namespace name (lowercase letters, digits and '-')"))]
    pub namespace: String,
    /// Key of the Secret's data holding the value.
    #[schemars(length(max = 253))]
    #[x_kube(validation = Rule::new("self.matches('^[-._a-zA-Z0-9]+$')").message("key must be a Secret data key (letters, digits, '-', '_' and '.')"))]
    pub key: String,
}

#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct NodeClassStatus {
    #[serde(default)]
    pub conditions: Vec<Condition>,
    /// The demand planner's latest view of each pool that has one (written
    /// by the leading provider; `karpenter-scaleway plan` prints it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub planner: Vec<PlannerStatus>,
    /// The Private Network `spec.privateNetwork` resolved to, per region.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub private_networks: Vec<super::ResolvedPrivateNetwork>,
}

/// What the demand planner decided for one standby pool, and why.
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct PlannerStatus {
    /// The pool's offer.
    pub offer: String,
    /// The pool's zone.
    pub zone: String,
    /// Servers of the pool staged for the load: adopted and standby together.
    pub target: i32,
    /// Servers the sustained load needs before the bounds; absent while the
    /// load has not been watched for the whole window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub needed: Option<i32>,
    /// The pool's servers serving nodes now.
    pub adopted: i32,
    /// The standby count the pool keeps now: `target - adopted` within the
    /// pool's `min` and `max` (`min` in a dry run).
    pub standby: i32,
    /// The sustained load (Kubernetes quantities), once known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sustained_cpu: Option<String>,
    /// The sustained memory, once known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sustained_memory: Option<String>,
    /// The CPU requested now (DaemonSets left out).
    pub cpu: String,
    /// The memory requested now (DaemonSets left out).
    pub memory: String,
    /// What one server of the pool holds for these pods (its allocatable
    /// less the DaemonSets of a node).
    pub server_cpu: String,
    /// What one server holds for these pods in memory.
    pub server_memory: String,
    /// EUR per hour of the nodes counted now that are not this pool's
    /// servers (typically VMs), and of `target` servers of the pool.
    pub vm_euros_per_hour: f64,
    /// EUR per hour of `target` servers of the pool's offer.
    pub metal_euros_per_hour: f64,
    /// The planner only explains (`planner.dryRun`).
    pub dry_run: bool,
    /// Why the target is what it is, with the numbers.
    pub reason: String,
    /// When the target last changed (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_change: Option<String>,
    /// Since when this provider watches the load (RFC 3339): a restart
    /// starts the window again.
    pub watched_since: String,
}

/// A status condition in the shape Karpenter's operatorpkg reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct Condition {
    /// `Ready`, or one of the checks it sums up (docs/nodeclass.md, "Status").
    #[serde(rename = "type")]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    pub status: String,
    /// CamelCase name of the outcome; on `Ready`, the reason of the first
    /// check that is not `True`.
    pub reason: String,
    /// What was found and what to fix (empty when `True`).
    pub message: String,
    /// When `status` last changed (RFC 3339).
    pub last_transition_time: String,
    /// The `metadata.generation` of the spec this condition judged.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
}
