//! Instance types → instance types, on the bodies recorded against the real
//! API (`testdata/instance/`) plus a few types built from them.

use super::*;
use crate::catalog::{LABEL_REGION, LABEL_ZONE, Operator};
use crate::scaleway::instance::Arch;
use crate::scaleway::instance::fake::{recorded_availability, recorded_types};

const ROOT: u64 = 20_000_000_000;

/// fr-par-2 as recorded, with H100-1-80G (in `shortage` there), an arm64
/// BASIC2 and an end-of-service type added; fr-par-3 sells POP2-2C-8G at
/// 1.5× and has no availability entry for it.
fn zones() -> BTreeMap<String, ZoneProducts> {
    let mut par2 = recorded_types();
    let mut h100 = par2["H100-SXM-2-80G"].clone();
    h100.gpu = Some(1);
    h100.gpu_info.as_mut().unwrap().gpu_name = "H100".into();
    h100.ncpus = 24;
    h100.hourly_price = 2.8665;
    par2.insert("H100-1-80G".into(), h100);
    let mut basic = par2["POP2-2C-8G"].clone();
    basic.arch = Arch::Arm64;
    basic.ncpus = 2;
    basic.ram = 4 * 1024 * 1024 * 1024;
    basic.hourly_price = 0.0255;
    par2.insert("BASIC2-A2C-4G".into(), basic);
    let mut old = par2["POP2-2C-8G"].clone();
    old.end_of_service = true;
    par2.insert("GPU-3070-S".into(), old);
    let mut win = par2["POP2-2C-8G"].clone();
    win.hourly_price = 0.1;
    par2.insert("POP2-2C-8G-WIN".into(), win);

    let mut pop2 = recorded_types()["POP2-2C-8G"].clone();
    pop2.hourly_price = 0.0735 * 1.5;
    let par3 = BTreeMap::from([("POP2-2C-8G".to_string(), pop2)]);
    BTreeMap::from([
        (
            "fr-par-2".to_string(),
            ZoneProducts {
                types: par2,
                availability: recorded_availability(),
            },
        ),
        (
            "fr-par-3".to_string(),
            ZoneProducts {
                types: par3,
                availability: BTreeMap::new(),
            },
        ),
    ])
}

fn find<'a>(types: &'a [InstanceType], name: &str) -> &'a InstanceType {
    types
        .iter()
        .find(|t| t.name == name)
        .unwrap_or_else(|| panic!("{name} missing"))
}

#[test]
fn families_from_commercial_types() {
    for (ty, family) in [
        ("POP2-2C-8G", "POP2"),
        ("POP2-HM-2C-16G", "POP2-HM"),
        ("POP2-HC-2C-4G", "POP2-HC"),
        ("POP2-HN-10", "POP2-HN"),
        ("PRO2-S", "PRO2"),
        ("PRO2-XXS", "PRO2"),
        ("DEV1-S", "DEV1"),
        ("GP1-XL", "GP1"),
        ("PLAY2-PICO", "PLAY2"),
        ("L4-1-24G", "L4"),
        ("L40S-1-48G", "L40S"),
        ("H100-1-80G", "H100"),
        ("H100-SXM-8-80G", "H100-SXM"),
        ("BASIC2-A2C-4G", "BASIC2"),
        ("STANDARD2-A4C-16G", "STANDARD2"),
        ("RENDER-S", "RENDER"),
    ] {
        assert_eq!(instance_family(ty), family, "{ty}");
    }
}

#[test]
fn maps_a_cpu_type_with_prices_per_zone() {
    let (types, _) = vm_instance_types(&zones(), ROOT);
    let t = find(&types, "POP2-2C-8G");
    assert_eq!(t.arch, "amd64");
    assert_eq!(t.labels[LABEL_ARCH], "amd64");
    assert_eq!(t.labels[LABEL_INSTANCE_TYPE], "POP2-2C-8G");
    assert_eq!(t.labels[LABEL_INSTANCE_FAMILY], "POP2");
    assert_eq!(t.labels[LABEL_INSTANCE_CPU], "2");
    assert_eq!(t.labels[LABEL_INSTANCE_MEMORY], "8192");
    assert_eq!(t.labels[LABEL_INSTANCE_BANDWIDTH], "400");
    assert!(!t.labels.contains_key(LABEL_INSTANCE_GPU_NAME));
    let cap = t.capacity.to_quantities(true);
    assert_eq!(cap["cpu"], "2");
    assert_eq!(cap["memory"], "8Gi");
    assert_eq!(cap["pods"], "110");
    assert_eq!(t.capacity.ephemeral_storage_bytes, ROOT);
    assert!(!cap.contains_key("nvidia.com/gpu"));

    let zone = |z: &str| t.offerings.iter().find(|o| o.zone == z).unwrap();
    let par2 = zone("fr-par-2");
    assert_eq!(par2.price, 0.0735);
    assert_eq!(par2.offer_id, "POP2-2C-8G");
    assert_eq!(par2.stock, "available");
    assert!(par2.available);
    let par3 = zone("fr-par-3");
    assert!((par3.price - 0.0735 * 1.5).abs() < 1e-12);
    assert_eq!(par3.stock, "unknown", "not in fr-par-3's availability");
    assert!(par3.available);
    let reqs = t.requirements();
    let zones = &reqs.iter().find(|r| r.key == LABEL_ZONE).unwrap().values;
    assert_eq!(zones, &["fr-par-2", "fr-par-3"]);
    let regions = &reqs.iter().find(|r| r.key == LABEL_REGION).unwrap().values;
    assert_eq!(regions, &["fr-par"]);
}

#[test]
fn maps_gpu_types_with_shared_gpu_labels() {
    let (types, _) = vm_instance_types(&zones(), ROOT);
    let l4 = find(&types, "L4-1-24G");
    assert_eq!(l4.labels[LABEL_INSTANCE_FAMILY], "L4");
    assert_eq!(l4.labels[LABEL_INSTANCE_GPU_NAME], "nvidia-l4");
    assert_eq!(l4.labels[LABEL_INSTANCE_GPU_COUNT], "1");
    assert_eq!(l4.labels[LABEL_INSTANCE_GPU_MEMORY], "24576");
    assert_eq!(l4.labels[LABEL_INSTANCE_CPU], "8");
    assert_eq!(l4.labels[LABEL_INSTANCE_MEMORY], "49152");
    assert_eq!(l4.labels[LABEL_INSTANCE_BANDWIDTH], "2500");
    assert_eq!(l4.capacity.to_quantities(true)["nvidia.com/gpu"], "1");
    assert_eq!(l4.offerings[0].price, 0.7875);

    let sxm = find(&types, "H100-SXM-2-80G");
    assert_eq!(sxm.labels[LABEL_INSTANCE_FAMILY], "H100-SXM");
    assert_eq!(sxm.labels[LABEL_INSTANCE_GPU_NAME], "nvidia-h100-sxm");
    assert_eq!(sxm.labels[LABEL_INSTANCE_GPU_COUNT], "2");
    assert_eq!(sxm.capacity.nvidia_gpus, 2);
    // EM's GPU offers carry the same label value for the same GPU.
    let h100 = find(&types, "H100-1-80G");
    assert_eq!(h100.labels[LABEL_INSTANCE_GPU_NAME], "nvidia-h100");
}

#[test]
fn shortage_is_listed_but_unavailable_and_scarce_is_available() {
    let (types, _) = vm_instance_types(&zones(), ROOT);
    let h100 = find(&types, "H100-1-80G").offerings[0].clone();
    assert!(!h100.available);
    assert_eq!(h100.stock, "shortage");
    assert_eq!(h100.unavailable_reason.as_deref(), Some("shortage"));
    assert_eq!(h100.price, 2.8665, "still priced");
    // Billing again (as per-NodeClass views do) keeps the verdict.
    let mut again = h100.clone();
    again.bill(Billing::Hourly);
    assert!(!again.available);

    let mut types = recorded_types();
    types.insert("L40S-1-48G".into(), types["L4-1-24G"].clone());
    let zones = BTreeMap::from([(
        "fr-par-2".to_string(),
        ZoneProducts {
            types,
            availability: recorded_availability(),
        },
    )]);
    let (types, _) = vm_instance_types(&zones, ROOT);
    let l40s = &find(&types, "L40S-1-48G").offerings[0];
    assert_eq!(l40s.stock, "scarce");
    assert!(l40s.available);
}

#[test]
fn arm64_types_and_what_is_left_out() {
    let (types, excluded) = vm_instance_types(&zones(), ROOT);
    let basic = find(&types, "BASIC2-A2C-4G");
    assert_eq!(basic.arch, "arm64");
    assert_eq!(basic.labels[LABEL_ARCH], "arm64");
    assert_eq!(basic.labels[LABEL_INSTANCE_FAMILY], "BASIC2");

    assert!(types.iter().all(|t| t.name != "GPU-3070-S"));
    assert!(types.iter().all(|t| t.name != "POP2-2C-8G-WIN"));
    let mut reasons: Vec<(&str, &str)> = excluded
        .iter()
        .map(|e| (e.offer.as_str(), e.reason.as_str()))
        .collect();
    reasons.sort();
    assert_eq!(
        reasons,
        [
            ("GPU-3070-S", "end of service"),
            ("POP2-2C-8G-WIN", "Windows licence type")
        ]
    );
    assert_eq!(types.len(), 5);

    // Every well-known and provider label is defined on VM types too.
    let reqs = basic.requirements();
    let gpu = reqs
        .iter()
        .find(|r| r.key == LABEL_INSTANCE_GPU_NAME)
        .unwrap();
    assert_eq!(gpu.operator, Operator::DoesNotExist);
    for key in crate::catalog::PROVIDER_LABELS {
        assert!(reqs.iter().any(|r| r.key == *key), "{key} undefined");
    }
}
