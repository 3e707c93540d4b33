//! Wire model of the Instance API v1 objects the provider reads and writes,
//! field names as the API sends them (`facts/scaleway-instances.md`, bodies in
//! `testdata/instance/`). Unknown fields are ignored and unknown enum values
//! decode as `Other`, so that new API fields never break decoding. Fields the
//! API may send as `null` are `Option`s.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};

/// CPU architecture of a type, a server or an image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Arch {
    #[serde(rename = "x86_64")]
    X86_64,
    #[serde(rename = "arm64")]
    Arm64,
    #[serde(other)]
    Other,
}

impl Arch {
    /// The Kubernetes name (`kubernetes.io/arch`), `None` for an unknown one.
    pub fn kubernetes(self) -> Option<&'static str> {
        match self {
            Arch::X86_64 => Some("amd64"),
            Arch::Arm64 => Some("arm64"),
            Arch::Other => None,
        }
    }
}

/// `{min_size, max_size}` in bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct SizeRange {
    #[serde(default)]
    pub min_size: u64,
    #[serde(default)]
    pub max_size: u64,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct PerVolumeConstraint {
    #[serde(default)]
    pub l_ssd: Option<SizeRange>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct GpuInfo {
    /// `NVIDIA`.
    #[serde(default)]
    pub gpu_manufacturer: String,
    /// `L4`, `H100-SXM`, ...
    #[serde(default)]
    pub gpu_name: String,
    /// Bytes per GPU.
    #[serde(default)]
    pub gpu_memory: u64,
}

/// Bandwidths in bit/s.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Network {
    #[serde(default)]
    pub sum_internet_bandwidth: Option<u64>,
    #[serde(default)]
    pub sum_internal_bandwidth: Option<u64>,
    #[serde(default)]
    pub ipv6_support: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Capabilities {
    /// `local`, `rescue`.
    #[serde(default)]
    pub boot_types: Vec<String>,
    #[serde(default)]
    pub block_storage: Option<bool>,
    #[serde(default)]
    pub placement_groups: Option<bool>,
    /// How many private networks a server may join.
    #[serde(default)]
    pub private_network: Option<u32>,
}

/// One entry of `GET /products/servers`: a commercial type as sold in the
/// zone asked (prices differ between zones).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerType {
    pub arch: Arch,
    pub ncpus: u32,
    /// Bytes.
    pub ram: u64,
    /// GPU count (`0` or absent on CPU types).
    #[serde(default)]
    pub gpu: Option<u64>,
    #[serde(default)]
    pub gpu_info: Option<GpuInfo>,
    /// EUR per hour in this zone.
    pub hourly_price: f64,
    /// Deprecated by the API (= hourly × 730); kept for display only.
    #[serde(default)]
    pub monthly_price: Option<f64>,
    /// Total size of the local volumes (`0`/`0` on types without local storage).
    #[serde(default)]
    pub volumes_constraint: Option<SizeRange>,
    #[serde(default)]
    pub per_volume_constraint: Option<PerVolumeConstraint>,
    /// Bytes of scratch storage the type may have (`0`: none).
    #[serde(default)]
    pub scratch_storage_max_size: Option<u64>,
    #[serde(default)]
    pub network: Option<Network>,
    /// Bytes per second to block storage.
    #[serde(default)]
    pub block_bandwidth: Option<u64>,
    #[serde(default)]
    pub capabilities: Option<Capabilities>,
    /// No longer sold to new servers.
    #[serde(default)]
    pub end_of_service: bool,
}

impl ServerType {
    pub fn gpu_count(&self) -> u64 {
        self.gpu.unwrap_or(0)
    }

    /// Public bandwidth in bit/s, when the API says.
    pub fn internet_bandwidth(&self) -> Option<u64> {
        self.network
            .as_ref()
            .and_then(|n| n.sum_internet_bandwidth)
            .filter(|b| *b > 0)
    }
}

/// Stock of a type in a zone (`GET /products/servers/availability`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Availability {
    Available,
    Scarce,
    Shortage,
    #[serde(other)]
    Unknown,
}

impl Availability {
    pub fn as_str(self) -> &'static str {
        match self {
            Availability::Available => "available",
            Availability::Scarce => "scarce",
            Availability::Shortage => "shortage",
            Availability::Unknown => "unknown",
        }
    }
}

/// One entry of the availability map: `{"availability": "scarce"}`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct TypeAvailability {
    pub availability: Availability,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum ServerState {
    #[serde(rename = "running")]
    Running,
    #[serde(rename = "stopped")]
    Stopped,
    /// Powered off but still holding its hypervisor (billed).
    #[serde(rename = "stopped in place")]
    StoppedInPlace,
    #[serde(rename = "starting")]
    Starting,
    #[serde(rename = "stopping")]
    Stopping,
    #[serde(rename = "locked")]
    Locked,
    #[serde(other)]
    Other,
}

/// `POST /servers/{id}/action`'s `action`, and the entries of a server's
/// `allowed_actions`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ServerAction {
    Poweron,
    Poweroff,
    StopInPlace,
    Reboot,
    /// Stops the server and deletes it with its local volumes; SBS volumes
    /// and flexible IPs are only detached.
    Terminate,
    Backup,
    #[serde(other)]
    Other,
}

/// `l_ssd`, `sbs_volume`, `scratch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VolumeType {
    LSsd,
    /// Block Storage: outlives its server (deleted through the Block API).
    SbsVolume,
    Scratch,
    #[serde(other)]
    Other,
}

/// A volume as a server lists it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerVolume {
    pub id: String,
    pub volume_type: VolumeType,
    #[serde(default)]
    pub boot: bool,
    /// Bytes; absent on SBS volumes (ask the Block API).
    #[serde(default)]
    pub size: Option<u64>,
    #[serde(default)]
    pub state: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
    #[serde(default)]
    pub zone: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PublicIp {
    pub id: String,
    pub address: String,
    /// A dynamic IP dies at poweroff; a flexible one outlives the server.
    #[serde(default)]
    pub dynamic: bool,
    /// `inet` or `inet6`.
    #[serde(default)]
    pub family: String,
}

/// `{id, name}` of an image, security group or placement group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Ref {
    pub id: String,
    #[serde(default)]
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Server {
    pub id: String,
    pub name: String,
    pub commercial_type: String,
    #[serde(default)]
    pub arch: Option<Arch>,
    pub state: ServerState,
    /// Free text (`allocating node`, `provisioning node`, `booting kernel`).
    #[serde(default)]
    pub state_detail: String,
    #[serde(default)]
    pub allowed_actions: Vec<ServerAction>,
    /// The first public IP (deprecated by the API, still sent).
    #[serde(default)]
    pub public_ip: Option<PublicIp>,
    #[serde(default)]
    pub public_ips: Vec<PublicIp>,
    /// Index (`"0"` is the root) → volume.
    #[serde(default)]
    pub volumes: BTreeMap<String, ServerVolume>,
    #[serde(default)]
    pub tags: Vec<String>,
    pub zone: String,
    #[serde(default)]
    pub project: String,
    /// RFC 3339 with `+00:00`.
    #[serde(default)]
    pub creation_date: Option<String>,
    /// When the server last changed (RFC 3339): an action moves it, which
    /// is how a reboot whose answer was lost is told from one never sent
    /// (`provider/reboot`).
    #[serde(default)]
    pub modification_date: Option<String>,
    #[serde(default)]
    pub image: Option<Ref>,
    #[serde(default)]
    pub security_group: Option<Ref>,
    #[serde(default)]
    pub placement_group: Option<Ref>,
    /// `local` or `rescue`.
    #[serde(default)]
    pub boot_type: Option<String>,
    #[serde(default)]
    pub dynamic_ip_required: bool,
}

impl Server {
    /// The first public IPv4 address.
    pub fn ipv4(&self) -> Option<&str> {
        self.public_ips
            .iter()
            .chain(self.public_ip.iter())
            .find(|ip| ip.family.is_empty() || ip.family == "inet")
            .map(|ip| ip.address.as_str())
    }

    /// Ids of the SBS volumes: they survive terminate and must be deleted
    /// through the Block API.
    pub fn sbs_volume_ids(&self) -> Vec<String> {
        self.volumes
            .values()
            .filter(|v| v.volume_type == VolumeType::SbsVolume)
            .map(|v| v.id.clone())
            .collect()
    }

    /// Ids of the flexible (non-dynamic) IPs: they survive terminate.
    pub fn flexible_ip_ids(&self) -> Vec<String> {
        self.public_ips
            .iter()
            .filter(|ip| !ip.dynamic)
            .map(|ip| ip.id.clone())
            .collect()
    }
}

/// A volume of `POST /servers`' `volumes` map.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct VolumeTemplate {
    /// Bytes, a multiple of 512 (the API refuses others).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size: Option<u64>,
    pub volume_type: VolumeType,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub boot: Option<bool>,
}

impl VolumeTemplate {
    /// An SBS root volume of `size_bytes` created from the image.
    pub fn sbs_root(size_bytes: u64) -> Self {
        VolumeTemplate {
            size: Some(size_bytes),
            volume_type: VolumeType::SbsVolume,
            boot: None,
        }
    }
}

/// `POST /servers`. The server is created `stopped`; set its user data, then
/// power it on.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct CreateServerRequest {
    pub name: String,
    pub commercial_type: String,
    /// Image id (per zone and arch).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub image: Option<String>,
    /// `"0"` is the root; empty lets the image decide.
    #[serde(skip_serializing_if = "BTreeMap::is_empty")]
    pub volumes: BTreeMap<String, VolumeTemplate>,
    /// A dynamic public IPv4: Talos' `scaleway` platform only runs DHCP
    /// when the metadata lists one.
    pub dynamic_ip_required: bool,
    pub project: String,
    pub tags: Vec<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub security_group: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement_group: Option<String>,
    /// `local` (the default) or `rescue`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub boot_type: Option<String>,
}

impl CreateServerRequest {
    pub fn new(name: &str, commercial_type: &str, project: &str) -> Self {
        CreateServerRequest {
            name: name.to_string(),
            commercial_type: commercial_type.to_string(),
            image: None,
            volumes: BTreeMap::new(),
            dynamic_ip_required: true,
            project: project.to_string(),
            tags: Vec::new(),
            security_group: None,
            placement_group: None,
            boot_type: None,
        }
    }

    /// An SBS root volume of `size_bytes` instead of the image's default.
    pub fn with_sbs_root(mut self, size_bytes: u64) -> Self {
        self.volumes
            .insert("0".into(), VolumeTemplate::sbs_root(size_bytes));
        self
    }
}

/// `PATCH /servers/{id}`: only the fields set are changed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct ServerPatch {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tags: Option<Vec<String>>,
    /// Sent as `{"id": ...}`, the API's template for a security group.
    #[serde(
        skip_serializing_if = "Option::is_none",
        serialize_with = "security_group_template"
    )]
    pub security_group: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub placement_group: Option<String>,
}

fn security_group_template<S: serde::Serializer>(
    id: &Option<String>,
    s: S,
) -> Result<S::Ok, S::Error> {
    #[derive(Serialize)]
    struct Template<'a> {
        id: &'a str,
    }
    match id {
        Some(id) => Template { id }.serialize(s),
        None => s.serialize_none(),
    }
}

/// The answer of an action: the API runs it asynchronously (no task
/// endpoint: poll the server).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Task {
    pub id: String,
    #[serde(default)]
    pub description: String,
    /// `pending`, `started`, `success`, `failure`.
    #[serde(default)]
    pub status: String,
}

#[cfg(test)]
#[path = "model_tests.rs"]
mod tests;
