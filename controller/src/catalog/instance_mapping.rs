//! Instance commercial types → Karpenter instance types: pure functions over
//! each zone's `/products/servers` and availability maps, beside the
//! Elastic Metal offers' `mapping.rs` and sharing its labels where the
//! meaning is the same (CPUs, memory, GPU name and count, bandwidth).

use std::collections::BTreeMap;

use super::mapping::label_value;
use super::resources::MAX_PODS;
use super::{
    Billing, CAPACITY_TYPE_ON_DEMAND, Excluded, InstanceType, LABEL_ARCH, LABEL_CAPACITY_TYPE,
    LABEL_INSTANCE_BANDWIDTH, LABEL_INSTANCE_CPU, LABEL_INSTANCE_FAMILY, LABEL_INSTANCE_GPU_COUNT,
    LABEL_INSTANCE_GPU_MEMORY, LABEL_INSTANCE_GPU_NAME, LABEL_INSTANCE_MEMORY, LABEL_INSTANCE_TYPE,
    LABEL_OS, Offering, Overhead, Resources,
};
use crate::scaleway::instance::{Availability, ServerType};

/// The root volume size of an Instance NodeClass whose `rootVolume` sets
/// none (20 GB): the ephemeral storage the catalog announces for its VMs.
pub const DEFAULT_ROOT_BYTES: u64 = 20_000_000_000;

/// What the Instance API says about one zone.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ZoneProducts {
    pub types: BTreeMap<String, ServerType>,
    pub availability: BTreeMap<String, Availability>,
}

/// Size words that end a commercial type's family (`PRO2-S`, `PLAY2-PICO`).
const SIZE_WORDS: &[&str] = &[
    "XXS", "XS", "S", "M", "L", "XL", "XXL", "PICO", "NANO", "MICRO",
];

/// The family of a commercial type: its first word and the letter-only words
/// after it, up to the first size or number (`POP2-HM-2C-16G` → `POP2-HM`,
/// `H100-SXM-2-80G` → `H100-SXM`, `L40S-1-48G` → `L40S`, `PRO2-S` → `PRO2`,
/// `BASIC2-A2C-4G` → `BASIC2`).
pub fn instance_family(commercial_type: &str) -> String {
    let mut words = commercial_type.split('-');
    let mut family = words.next().unwrap_or_default().to_string();
    for word in words {
        let letters_only = !word.is_empty() && word.bytes().all(|b| b.is_ascii_alphabetic());
        if !letters_only || SIZE_WORDS.contains(&word) {
            break;
        }
        family.push('-');
        family.push_str(word);
    }
    family
}

/// Why a type cannot carry a Talos node, if it cannot.
fn unusable(name: &str, ty: &ServerType) -> Option<String> {
    if ty.end_of_service {
        Some("end of service".into())
    } else if name.ends_with("-WIN") {
        // Sold with a Windows licence: dearer, and Talos would not use it.
        Some("Windows licence type".into())
    } else if ty.arch.kubernetes().is_none() {
        Some("unknown CPU architecture".into())
    } else if ty.ncpus == 0 || ty.ram == 0 {
        Some("no CPU or memory".into())
    } else {
        None
    }
}

/// Hardware of one type as an instance type without offerings. The node's
/// ephemeral storage is its root volume, chosen by the NodeClass, not the type.
fn hardware(name: &str, ty: &ServerType, arch: &str, root_volume_bytes: u64) -> InstanceType {
    let gpus = ty.gpu_count();
    let nvidia = ty
        .gpu_info
        .as_ref()
        .is_some_and(|g| g.gpu_manufacturer.eq_ignore_ascii_case("nvidia"));
    let capacity = Resources {
        cpu_millis: u64::from(ty.ncpus) * 1000,
        memory_bytes: ty.ram,
        ephemeral_storage_bytes: root_volume_bytes,
        pods: MAX_PODS,
        // Another vendor would need its own device plugin resource name.
        nvidia_gpus: if nvidia { gpus } else { 0 },
    };
    let mut labels = BTreeMap::new();
    let mut put = |k: &str, v: String| {
        if !v.is_empty() {
            labels.insert(k.to_string(), v);
        }
    };
    put(LABEL_INSTANCE_TYPE, name.to_string());
    put(LABEL_ARCH, arch.to_string());
    put(LABEL_OS, "linux".into());
    put(LABEL_CAPACITY_TYPE, CAPACITY_TYPE_ON_DEMAND.into());
    put(LABEL_INSTANCE_FAMILY, instance_family(name));
    put(LABEL_INSTANCE_CPU, ty.ncpus.to_string());
    put(LABEL_INSTANCE_MEMORY, (ty.ram / (1024 * 1024)).to_string());
    if let Some(gpu) = ty.gpu_info.as_ref().filter(|_| gpus > 0) {
        // `NVIDIA` + `L4` → `nvidia-l4`, as EM's `NVIDIA H100` → `nvidia-h100`.
        put(
            LABEL_INSTANCE_GPU_NAME,
            label_value(&format!("{} {}", gpu.gpu_manufacturer, gpu.gpu_name)),
        );
        put(LABEL_INSTANCE_GPU_COUNT, gpus.to_string());
        if gpu.gpu_memory > 0 {
            put(
                LABEL_INSTANCE_GPU_MEMORY,
                (gpu.gpu_memory / (1024 * 1024)).to_string(),
            );
        }
    }
    if let Some(bandwidth) = ty.internet_bandwidth() {
        put(
            LABEL_INSTANCE_BANDWIDTH,
            (bandwidth / 1_000_000).to_string(),
        );
    }
    InstanceType {
        name: name.to_string(),
        arch: arch.to_string(),
        labels,
        offerings: Vec::new(),
        overhead: Overhead::estimate(&capacity),
        capacity,
    }
}

/// Builds the Instance catalog from each zone's types and availability. A
/// type sold in several zones becomes one instance type with one offering
/// per zone, priced at that zone's hourly price; its hardware is taken from
/// the first zone (zones sorted). A type in `shortage` stays listed with an
/// unavailable offering (a type that disappears makes its nodes drift); a
/// type the availability list does not mention is offered, and an order the
/// API then refuses marks it unavailable like any other. End-of-service and
/// Windows types, and architectures Talos has no image for, are left out.
/// `root_volume_bytes` is every node's ephemeral storage.
pub fn vm_instance_types(
    by_zone: &BTreeMap<String, ZoneProducts>,
    root_volume_bytes: u64,
) -> (Vec<InstanceType>, Vec<Excluded>) {
    let mut types: BTreeMap<String, InstanceType> = BTreeMap::new();
    let mut excluded = Vec::new();
    for (zone, products) in by_zone {
        for (name, ty) in &products.types {
            if let Some(reason) = unusable(name, ty) {
                excluded.push(Excluded {
                    offer: name.clone(),
                    zone: zone.clone(),
                    reason,
                });
                continue;
            }
            let arch = ty.arch.kubernetes().unwrap_or_default();
            let it = types
                .entry(name.clone())
                .or_insert_with(|| hardware(name, ty, arch, root_volume_bytes));
            let stock = products
                .availability
                .get(name)
                .copied()
                .unwrap_or(Availability::Unknown);
            let mut offering = Offering {
                zone: zone.clone(),
                // What is ordered: the commercial type itself.
                offer_id: name.clone(),
                price: ty.hourly_price,
                hourly_price: ty.hourly_price,
                available: true,
                unavailable_reason: None,
                enabled: true,
                stock: stock.as_str().to_string(),
                monthly: None,
                billing: Billing::Hourly,
                reservation: None,
                private_network_per_hour: None,
            };
            offering.bill(Billing::Hourly);
            it.offerings.push(offering);
        }
    }
    (types.into_values().collect(), excluded)
}

#[cfg(test)]
#[path = "instance_mapping_tests.rs"]
mod tests;
