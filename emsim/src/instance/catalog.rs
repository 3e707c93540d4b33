//! The Instance catalog: commercial types (one entry per type, listing its
//! zones and per-zone prices) and images, read from YAML or JSON and expanded
//! per zone. Image ids are derived from zone and name, so they stay the same
//! across runs and seeds, like the offer ids of the Elastic Metal catalog.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};

/// The zones of the Instance API (`facts/scaleway-instances.md` §1).
pub const INSTANCE_ZONES: &[&str] = &[
    "fr-par-1", "fr-par-2", "fr-par-3", "nl-ams-1", "nl-ams-2", "nl-ams-3", "pl-waw-1", "pl-waw-2",
    "pl-waw-3", "it-mil-1",
];

const SEEDED: &str = include_str!("seeded.yaml");

/// What `GET /products/servers/availability` says of a type in a zone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Availability {
    Available,
    Scarce,
    /// Out of stock: a server of this type powered on falls back to `stopped`.
    Shortage,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct GpuSpec {
    pub count: u32,
    pub name: String,
    /// Bytes per GPU.
    pub memory: u64,
    #[serde(default = "nvidia")]
    pub manufacturer: String,
}

fn nvidia() -> String {
    "NVIDIA".into()
}

/// One commercial type as the catalog file describes it.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TypeSpec {
    pub name: String,
    pub zones: Vec<String>,
    /// EUR per hour, in every zone not in `price_by_zone`.
    pub hourly_price: f64,
    #[serde(default)]
    pub price_by_zone: BTreeMap<String, f64>,
    #[serde(default = "default_availability")]
    pub availability: Availability,
    #[serde(default)]
    pub availability_by_zone: BTreeMap<String, Availability>,
    #[serde(default = "default_arch")]
    pub arch: String,
    pub ncpus: u32,
    /// Bytes.
    pub ram: u64,
    #[serde(default)]
    pub gpu: Option<GpuSpec>,
    /// Internet bandwidth, bit/s.
    pub bandwidth: u64,
    #[serde(default)]
    pub block_bandwidth: u64,
    /// Bytes of local SSD (`l_ssd`) one volume may have; 0: none.
    #[serde(default)]
    pub l_ssd_max_size: u64,
    /// Bytes of local volumes in total; 0: none.
    #[serde(default)]
    pub volumes_max_size: u64,
    /// Bytes of `scratch` storage; 0: none.
    #[serde(default)]
    pub scratch_storage_max_size: u64,
    #[serde(default)]
    pub end_of_service: bool,
    /// Servers of this type a project may hold; absent: unlimited.
    #[serde(default)]
    pub quota: Option<u64>,
}

fn default_availability() -> Availability {
    Availability::Available
}
fn default_arch() -> String {
    "x86_64".into()
}

impl TypeSpec {
    pub fn price_in(&self, zone: &str) -> f64 {
        self.price_by_zone
            .get(zone)
            .copied()
            .unwrap_or(self.hourly_price)
    }

    pub fn availability_in(&self, zone: &str) -> Availability {
        self.availability_by_zone
            .get(zone)
            .copied()
            .unwrap_or(self.availability)
    }

    pub fn gpus(&self) -> u32 {
        self.gpu.as_ref().map_or(0, |g| g.count)
    }

    /// The name of the quota the API reports (INFERENCE, after the recorded
    /// `compute_snapshots_type_b_ssd_available`).
    pub fn quota_name(&self) -> String {
        format!(
            "compute_servers_type_{}_available",
            self.name.to_lowercase().replace('-', "_")
        )
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct ImageSpec {
    name: String,
    arch: String,
    zones: Vec<String>,
    #[serde(default)]
    tags: Vec<String>,
    /// Public images belong to Scaleway's own project, not the user's.
    #[serde(default)]
    public: bool,
}

/// One image in one zone.
#[derive(Debug, Clone, PartialEq)]
pub struct Image {
    pub id: String,
    pub name: String,
    pub arch: String,
    pub zone: String,
    pub tags: Vec<String>,
    pub public: bool,
    /// Id of the snapshot the root volume of a server is made from.
    pub root_snapshot_id: String,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct CatalogFile {
    types: Vec<TypeSpec>,
    #[serde(default)]
    images: Vec<ImageSpec>,
}

#[derive(Debug, Clone)]
pub struct InstanceCatalog {
    /// Sorted by name (the order of the paged product lists).
    pub types: Vec<TypeSpec>,
    pub images: Vec<Image>,
}

impl InstanceCatalog {
    pub fn seeded() -> Self {
        Self::parse(SEEDED).expect("the embedded Instance catalog is valid")
    }

    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading Instance catalog {}", path.display()))?;
        Self::parse(&text).with_context(|| format!("parsing Instance catalog {}", path.display()))
    }

    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let file: CatalogFile = serde_yaml_ng::from_str(text)?;
        let mut types = file.types;
        for t in &types {
            check_type(t)?;
        }
        types.sort_by(|a, b| a.name.cmp(&b.name));
        if let Some(w) = types.windows(2).find(|w| w[0].name == w[1].name) {
            bail!("type {} is listed twice", w[0].name);
        }
        let mut images = Vec::new();
        for spec in file.images {
            if !matches!(spec.arch.as_str(), "x86_64" | "arm64") {
                bail!("image {}: arch must be x86_64 or arm64", spec.name);
            }
            for zone in &spec.zones {
                check_zone(&spec.name, zone)?;
                images.push(Image {
                    id: derived_id("image", zone, &spec.name),
                    name: spec.name.clone(),
                    arch: spec.arch.clone(),
                    zone: zone.clone(),
                    tags: spec.tags.clone(),
                    public: spec.public,
                    root_snapshot_id: derived_id("snapshot", zone, &spec.name),
                });
            }
        }
        Ok(Self { types, images })
    }

    /// The type `name` if it is sold in `zone`.
    pub fn find(&self, zone: &str, name: &str) -> Option<&TypeSpec> {
        self.types
            .iter()
            .find(|t| t.name == name && t.zones.iter().any(|z| z == zone))
    }

    pub fn in_zone<'a>(&'a self, zone: &'a str) -> impl Iterator<Item = &'a TypeSpec> + 'a {
        self.types
            .iter()
            .filter(move |t| t.zones.iter().any(|z| z == zone))
    }

    pub fn image(&self, zone: &str, id: &str) -> Option<&Image> {
        self.images.iter().find(|i| i.zone == zone && i.id == id)
    }
}

fn check_zone(what: &str, zone: &str) -> anyhow::Result<()> {
    if INSTANCE_ZONES.contains(&zone) {
        Ok(())
    } else {
        bail!(
            "{what}: unknown zone {zone} (known: {})",
            INSTANCE_ZONES.join(", ")
        )
    }
}

fn check_type(t: &TypeSpec) -> anyhow::Result<()> {
    if t.name.is_empty() {
        bail!("a type has an empty name");
    }
    if t.zones.is_empty() {
        bail!("type {} lists no zone", t.name);
    }
    let zones = t
        .zones
        .iter()
        .chain(t.price_by_zone.keys())
        .chain(t.availability_by_zone.keys());
    for zone in zones {
        check_zone(&t.name, zone)?;
    }
    if !matches!(t.arch.as_str(), "x86_64" | "arm64") {
        bail!("type {}: arch must be x86_64 or arm64", t.name);
    }
    if !(t.hourly_price.is_finite() && t.hourly_price >= 0.0) {
        bail!(
            "type {}: hourly_price must be a non-negative number",
            t.name
        );
    }
    Ok(())
}

fn derived_id(kind: &str, zone: &str, name: &str) -> String {
    let digest = md5::compute(format!("emsim-instance-{kind}:{zone}:{name}"));
    uuid::Builder::from_md5_bytes(digest.0)
        .into_uuid()
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn seeded_catalog_holds_the_types_of_the_facts() {
        let c = InstanceCatalog::seeded();
        let pop2 = c.find("fr-par-2", "POP2-2C-8G").unwrap();
        assert_eq!(pop2.price_in("fr-par-2"), 0.0735);
        assert!((pop2.price_in("fr-par-3") - 0.0735 * 1.5).abs() < 1e-9);
        assert_eq!(pop2.gpus(), 0);
        let h100 = c.find("fr-par-2", "H100-1-80G").unwrap();
        assert_eq!((h100.ncpus, h100.gpus()), (24, 1));
        assert_eq!(h100.availability_in("fr-par-2"), Availability::Shortage);
        assert_eq!(h100.availability_in("pl-waw-2"), Availability::Available);
        assert!(
            c.find("fr-par-1", "H100-SXM-8-80G").is_none(),
            "fr-par-2 only"
        );
        assert_eq!(c.find("fr-par-1", "BASIC2-A2C-4G").unwrap().arch, "arm64");
        assert!(c.find("fr-par-1", "GP1-XS").unwrap().end_of_service);
        for name in [
            "PRO2-S",
            "DEV1-S",
            "L4-1-24G",
            "L40S-1-48G",
            "POP2-HM-2C-16G",
        ] {
            assert!(c.find("fr-par-2", name).is_some(), "{name}");
        }
        assert!(c.types.windows(2).all(|w| w[0].name < w[1].name));
        assert_eq!(
            pop2.quota_name(),
            "compute_servers_type_pop2_2c_8g_available"
        );
    }

    #[test]
    fn image_ids_are_stable_per_zone() {
        let a = InstanceCatalog::seeded();
        let b = InstanceCatalog::seeded();
        assert_eq!(a.images, b.images);
        let talos: Vec<_> = a
            .images
            .iter()
            .filter(|i| i.name == "talos-v1.11.5-amd64")
            .collect();
        assert!(talos.len() > 1);
        assert_ne!(talos[0].id, talos[1].id);
        assert!(crate::catalog::is_uuid(&talos[0].id));
    }

    #[test]
    fn rejects_unknown_zones_and_duplicates() {
        let err = InstanceCatalog::parse(
            "types: [{name: X, zones: [mars-1], hourly_price: 1, ncpus: 1, ram: 1, bandwidth: 1}]",
        )
        .unwrap_err();
        assert!(err.to_string().contains("unknown zone"), "{err}");
        let twice = "types: [{name: X, zones: [fr-par-1], hourly_price: 1, ncpus: 1, ram: 1, bandwidth: 1},\
                            {name: X, zones: [fr-par-2], hourly_price: 1, ncpus: 1, ram: 1, bandwidth: 1}]";
        let err = InstanceCatalog::parse(twice).unwrap_err();
        assert!(err.to_string().contains("twice"), "{err}");
    }
}
