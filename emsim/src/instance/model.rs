//! Wire types of the Instance v1 and Block v1 APIs, field order as in the
//! recorded bodies (`facts/fixtures/instance/`). Lists carry no `total_count`:
//! the total travels in the `X-Total-Count` header.

use serde::{Serialize, Serializer};

use super::catalog::TypeSpec;

#[derive(Debug, Clone, Serialize)]
pub struct SizeRange {
    pub min_size: u64,
    pub max_size: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct PerVolumeConstraint {
    pub l_ssd: SizeRange,
}

#[derive(Debug, Clone, Serialize)]
pub struct GpuInfo {
    pub gpu_manufacturer: String,
    pub gpu_name: String,
    pub gpu_memory: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Capabilities {
    pub boot_types: Vec<&'static str>,
    pub placement_groups: bool,
    pub block_storage: bool,
    pub hot_snapshots_local_volume: bool,
    pub private_network: u32,
    pub max_file_systems: u32,
}

#[derive(Debug, Clone, Serialize)]
pub struct Interface {
    pub internal_bandwidth: u64,
    pub internet_bandwidth: u64,
}

#[derive(Debug, Clone, Serialize)]
pub struct Network {
    pub ipv6_support: bool,
    pub sum_internal_bandwidth: u64,
    pub sum_internet_bandwidth: u64,
    pub interfaces: Vec<Interface>,
}

/// One entry of `GET /products/servers`.
#[derive(Debug, Clone, Serialize)]
pub struct Product {
    pub alt_names: Vec<String>,
    pub arch: String,
    pub ncpus: u32,
    pub ram: u64,
    pub gpu: u32,
    pub gpu_info: Option<GpuInfo>,
    pub mig_profile: Option<String>,
    pub volumes_constraint: SizeRange,
    pub per_volume_constraint: PerVolumeConstraint,
    pub scratch_storage_max_size: u64,
    pub scratch_storage_max_volumes_count: u32,
    pub monthly_price: f64,
    pub hourly_price: f64,
    pub capabilities: Capabilities,
    pub network: Network,
    pub block_bandwidth: u64,
    pub end_of_service: bool,
}

/// Euros rounded to the millionth, as the API writes prices.
fn euros(x: f64) -> f64 {
    (x * 1e6).round() / 1e6
}

impl Product {
    pub fn of(t: &TypeSpec, zone: &str) -> Self {
        let hourly = t.price_in(zone);
        let max_file_systems = match t.gpus() {
            0 => 1,
            1 => 2,
            _ => 4,
        };
        Product {
            alt_names: vec![],
            arch: t.arch.clone(),
            ncpus: t.ncpus,
            ram: t.ram,
            gpu: t.gpus(),
            gpu_info: t.gpu.as_ref().map(|g| GpuInfo {
                gpu_manufacturer: g.manufacturer.clone(),
                gpu_name: g.name.clone(),
                gpu_memory: g.memory,
            }),
            mig_profile: None,
            volumes_constraint: SizeRange {
                min_size: 0,
                max_size: t.volumes_max_size,
            },
            per_volume_constraint: PerVolumeConstraint {
                l_ssd: SizeRange {
                    min_size: if t.l_ssd_max_size > 0 {
                        1_000_000_000
                    } else {
                        0
                    },
                    max_size: t.l_ssd_max_size,
                },
            },
            scratch_storage_max_size: t.scratch_storage_max_size,
            scratch_storage_max_volumes_count: u32::from(t.scratch_storage_max_size > 0),
            // Deprecated by the API, and always hourly x 730.
            monthly_price: euros(hourly * 730.0),
            hourly_price: euros(hourly),
            capabilities: Capabilities {
                boot_types: vec!["local", "rescue"],
                placement_groups: true,
                block_storage: true,
                hot_snapshots_local_volume: false,
                private_network: 8,
                max_file_systems,
            },
            network: Network {
                ipv6_support: true,
                sum_internal_bandwidth: t.bandwidth,
                sum_internet_bandwidth: t.bandwidth,
                interfaces: vec![Interface {
                    internal_bandwidth: t.bandwidth,
                    internet_bandwidth: t.bandwidth,
                }],
            },
            block_bandwidth: t.block_bandwidth,
            end_of_service: t.end_of_service,
        }
    }
}

/// A JSON object from ordered pairs: the `{"<TYPE>": {...}}` maps of the
/// product lists, in catalog order.
#[derive(Debug, Clone)]
pub struct OrderedMap<T>(pub Vec<(String, T)>);

impl<T: Serialize> Serialize for OrderedMap<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_map(self.0.iter().map(|(k, v)| (k, v)))
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct AvailabilityEntry {
    pub availability: &'static str,
}

#[derive(Debug, Clone, Serialize)]
pub struct Ref {
    pub id: String,
    pub name: String,
}

/// `public_ip` / `public_ips[]` of a server.
#[derive(Debug, Clone, Serialize)]
pub struct ServerIp {
    pub id: String,
    pub address: String,
    pub gateway: String,
    pub netmask: String,
    pub family: &'static str,
    pub dynamic: bool,
    pub provisioning_mode: &'static str,
    pub tags: Vec<String>,
    pub ipam_id: String,
    pub state: &'static str,
}

/// A flexible IP (`/ips`).
#[derive(Debug, Clone, Serialize)]
pub struct FlexibleIp {
    pub id: String,
    pub address: String,
    pub reverse: Option<String>,
    pub server: Option<Ref>,
    pub organization: String,
    pub tags: Vec<String>,
    pub project: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub state: &'static str,
    pub prefix: String,
    pub ipam_id: String,
    pub zone: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct RootVolumeRef {
    pub volume_type: &'static str,
    pub id: String,
    pub size: u64,
    pub name: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Image {
    pub id: String,
    pub name: String,
    pub organization: String,
    pub project: String,
    pub root_volume: RootVolumeRef,
    pub extra_volumes: serde_json::Map<String, serde_json::Value>,
    pub public: bool,
    pub arch: String,
    pub creation_date: String,
    pub modification_date: String,
    pub default_bootscript: Option<String>,
    pub from_server: String,
    pub state: &'static str,
    pub tags: Vec<String>,
    pub zone: String,
}

/// One entry of a server's `volumes` map. SBS volumes are shown as the
/// recordings show them (id, type, state); local ones in full.
// Built only to be serialized at once: the size difference costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum ServerVolume {
    Sbs {
        boot: bool,
        volume_type: &'static str,
        id: String,
        state: &'static str,
        zone: String,
    },
    Local {
        boot: bool,
        id: String,
        name: String,
        volume_type: &'static str,
        export_uri: Option<String>,
        organization: String,
        project: String,
        server: Ref,
        size: u64,
        state: &'static str,
        creation_date: String,
        modification_date: String,
        tags: Vec<String>,
        zone: String,
    },
}

#[derive(Debug, Clone, Serialize)]
pub struct Server {
    pub id: String,
    pub name: String,
    pub arch: String,
    pub commercial_type: String,
    pub boot_type: String,
    pub organization: String,
    pub project: String,
    pub hostname: String,
    pub image: Option<Image>,
    pub volumes: OrderedMap<ServerVolume>,
    pub tags: Vec<String>,
    pub state: &'static str,
    pub protected: bool,
    pub state_detail: String,
    pub public_ip: Option<ServerIp>,
    pub public_ips: Vec<ServerIp>,
    pub mac_address: String,
    pub routed_ip_enabled: bool,
    pub ipv6: Option<String>,
    pub extra_networks: Vec<String>,
    pub dynamic_ip_required: bool,
    pub enable_ipv6: bool,
    pub private_ip: Option<String>,
    pub creation_date: String,
    pub modification_date: String,
    pub bootscript: Option<String>,
    pub security_group: Ref,
    pub location: Option<String>,
    pub maintenances: Vec<String>,
    pub allowed_actions: Vec<&'static str>,
    pub placement_group: Option<Ref>,
    pub private_nics: Vec<crate::pn::PrivateNic>,
    pub zone: String,
    pub filesystems: Vec<String>,
    pub end_of_service: bool,
    pub dns: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Task {
    pub id: String,
    pub description: String,
    pub progress: u32,
    pub started_at: String,
    pub terminated_at: Option<String>,
    pub status: &'static str,
    pub href_from: String,
    pub href_result: String,
    pub zone: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct BlockReference {
    pub id: String,
    pub product_resource_type: &'static str,
    pub product_resource_id: String,
    pub created_at: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub status: &'static str,
}

#[derive(Debug, Clone, Serialize)]
pub struct BlockSpecs {
    pub perf_iops: u32,
    pub class: &'static str,
}

/// A Block v1 volume.
#[derive(Debug, Clone, Serialize)]
pub struct BlockVolume {
    pub id: String,
    pub name: String,
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub size: u64,
    pub project_id: String,
    pub created_at: String,
    pub updated_at: String,
    pub references: Vec<BlockReference>,
    pub parent_snapshot_id: Option<String>,
    pub status: &'static str,
    pub tags: Vec<String>,
    pub zone: String,
    pub specs: BlockSpecs,
    pub last_detached_at: Option<String>,
    pub kms_key_id: Option<String>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::instance::catalog::InstanceCatalog;
    use serde_json::Value;

    /// The recorded fr-par-2 entries, field for field, from our catalog.
    #[test]
    fn products_match_the_recorded_bodies() {
        let recorded: Value = serde_json::from_str(include_str!(
            "../../tests/fixtures/products-servers-fr-par-2.excerpt.json"
        ))
        .unwrap();
        let catalog = InstanceCatalog::seeded();
        for name in ["POP2-2C-8G", "L4-1-24G"] {
            let ours = serde_json::to_value(Product::of(
                catalog.find("fr-par-2", name).unwrap(),
                "fr-par-2",
            ))
            .unwrap();
            assert_eq!(ours, recorded["servers"][name], "{name}");
        }
    }

    #[test]
    fn ordered_maps_keep_their_order() {
        let m = OrderedMap(vec![("b".to_string(), 1), ("a".to_string(), 2)]);
        assert_eq!(serde_json::to_string(&m).unwrap(), r#"{"b":1,"a":2}"#);
    }
}
