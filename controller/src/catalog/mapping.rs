//! Offers → instance types: pure functions over the API's offer objects.

use std::collections::BTreeMap;

use super::resources::MAX_PODS;
use super::{
    Billing, CAPACITY_TYPE_ON_DEMAND, HOURS_PER_MONTH, InstanceType, LABEL_ARCH,
    LABEL_CAPACITY_TYPE, LABEL_INSTANCE_BANDWIDTH, LABEL_INSTANCE_CPU, LABEL_INSTANCE_DISK_SIZE,
    LABEL_INSTANCE_DISK_TYPE, LABEL_INSTANCE_GPU_COUNT, LABEL_INSTANCE_GPU_NAME,
    LABEL_INSTANCE_MEMORY, LABEL_INSTANCE_RANGE, LABEL_INSTANCE_TYPE, LABEL_OS, MonthlyTwin,
    Offering, Overhead, Resources,
};
use crate::scaleway::Offer;

/// An offer left out of the catalog, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Excluded {
    pub offer: String,
    pub zone: String,
    pub reason: String,
}

/// `fr-par-2` → `fr-par`.
pub use crate::scaleway::private_network::region_of;

/// The Kubernetes architecture of an offer, from its CPU model and tags. Talos
/// ships amd64 and arm64 images only, so anything else (the RISC-V `labs`
/// offers) is excluded.
pub fn arch_of(offer: &Offer) -> Result<&'static str, String> {
    let tags: Vec<String> = offer.tags.iter().map(|t| t.to_ascii_lowercase()).collect();
    let cpu = offer
        .cpus
        .first()
        .map(|c| c.name.to_ascii_lowercase())
        .unwrap_or_default();
    let words: Vec<&str> = cpu.split(|c: char| !c.is_ascii_alphanumeric()).collect();
    let has_word = |w: &str| words.contains(&w);
    if tags.iter().any(|t| t == "riscv" || t == "risc-v")
        || cpu.contains("risc")
        || has_word("th1520")
    {
        return Err("RISC-V is not supported by Talos".into());
    }
    if tags.iter().any(|t| t == "arm64" || t == "arm")
        || has_word("ampere")
        || has_word("altra")
        || has_word("arm")
        || has_word("neoverse")
    {
        return Ok("arm64");
    }
    if has_word("intel")
        || has_word("xeon")
        || has_word("amd")
        || has_word("epyc")
        || has_word("ryzen")
        || has_word("opteron")
    {
        return Ok("amd64");
    }
    Err(format!(
        "unknown CPU architecture {:?}",
        offer.cpus.first().map(|c| c.name.as_str()).unwrap_or("")
    ))
}

/// A label value: lowercase, `[a-z0-9.-]`, at most 63 characters, starting and
/// ending with an alphanumeric character.
pub(super) fn label_value(raw: &str) -> String {
    let mut out = String::with_capacity(raw.len());
    for c in raw.trim().chars() {
        let c = c.to_ascii_lowercase();
        if c.is_ascii_alphanumeric() || c == '.' {
            out.push(c);
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    out.truncate(63);
    out.trim_matches(|c: char| !c.is_ascii_alphanumeric())
        .to_string()
}

/// Hardware of one offer as an instance type without offerings.
fn hardware(offer: &Offer, arch: &'static str) -> Result<InstanceType, String> {
    let threads: u64 = offer.cpus.iter().map(|c| u64::from(c.thread_count)).sum();
    if threads == 0 {
        return Err("offer has no CPU threads".into());
    }
    let memory: u64 = offer.memories.iter().map(|m| m.capacity).sum();
    let disk = offer.disks.first().ok_or("offer has no disk")?;
    let gpus = offer.gpus.len() as u64;
    let capacity = Resources {
        cpu_millis: threads * 1000,
        memory_bytes: memory,
        ephemeral_storage_bytes: disk.capacity,
        pods: MAX_PODS,
        // Every GPU offer Scaleway sells is NVIDIA; another vendor would need its
        // own device plugin resource name.
        nvidia_gpus: if offer
            .gpus
            .iter()
            .all(|g| g.name.to_ascii_lowercase().contains("nvidia"))
        {
            gpus
        } else {
            0
        },
    };
    let mut labels = BTreeMap::new();
    let mut put = |k: &str, v: String| {
        if !v.is_empty() {
            labels.insert(k.to_string(), v);
        }
    };
    put(LABEL_INSTANCE_TYPE, offer.name.clone());
    put(LABEL_ARCH, arch.to_string());
    put(LABEL_OS, "linux".into());
    put(LABEL_CAPACITY_TYPE, CAPACITY_TYPE_ON_DEMAND.into());
    put(LABEL_INSTANCE_RANGE, label_value(&offer.commercial_range));
    put(LABEL_INSTANCE_CPU, threads.to_string());
    put(LABEL_INSTANCE_MEMORY, (memory / (1024 * 1024)).to_string());
    put(LABEL_INSTANCE_DISK_TYPE, label_value(&disk.kind));
    put(
        LABEL_INSTANCE_DISK_SIZE,
        (disk.capacity / 1_000_000_000).to_string(),
    );
    if let Some(gpu) = offer.gpus.first() {
        put(LABEL_INSTANCE_GPU_NAME, label_value(&gpu.name));
        put(LABEL_INSTANCE_GPU_COUNT, gpus.to_string());
    }
    if offer.bandwidth > 0 {
        put(
            LABEL_INSTANCE_BANDWIDTH,
            (offer.bandwidth / 1_000_000).to_string(),
        );
    }
    Ok(InstanceType {
        name: offer.name.clone(),
        arch: arch.to_string(),
        labels,
        offerings: Vec::new(),
        overhead: Overhead::estimate(&capacity),
        capacity,
    })
}

/// Builds the catalog from the offers of each zone, hourly and monthly mixed
/// (the refresher lists both periods). Each hourly offer is paired with its
/// monthly twin (by `monthly_offer_id`, else by name, which the API leaves
/// null on some offers). An offer sold in several zones becomes one type with
/// one offering per zone; its hardware is taken from the first zone (zones
/// sorted). Sold-out and disabled offers stay listed with `available =
/// false`, because a type that disappears makes every node of that type
/// drift. Offerings are priced for hourly billing; see [`Offering::bill`].
pub fn instance_types(
    offers_by_zone: &BTreeMap<String, Vec<Offer>>,
) -> (Vec<InstanceType>, Vec<Excluded>) {
    let mut types: BTreeMap<String, InstanceType> = BTreeMap::new();
    let mut excluded = Vec::new();
    for (zone, offers) in offers_by_zone {
        let monthly: Vec<&Offer> = offers.iter().filter(|o| o.is_monthly()).collect();
        for offer in offers.iter().filter(|o| !o.is_monthly()) {
            let exclude = |reason: String| Excluded {
                offer: offer.name.clone(),
                zone: zone.clone(),
                reason,
            };
            let Some(price) = offer.price_per_hour.as_ref() else {
                excluded.push(exclude("no hourly price".into()));
                continue;
            };
            let arch = match arch_of(offer) {
                Ok(arch) => arch,
                Err(reason) => {
                    excluded.push(exclude(reason));
                    continue;
                }
            };
            let it = match types.get_mut(&offer.name) {
                Some(it) => it,
                None => match hardware(offer, arch) {
                    Ok(it) => types.entry(offer.name.clone()).or_insert(it),
                    Err(reason) => {
                        excluded.push(exclude(reason));
                        continue;
                    }
                },
            };
            let twin = match offer.monthly_offer_id.as_deref() {
                Some(id) => monthly.iter().find(|m| m.id == id),
                None => monthly.iter().find(|m| m.name == offer.name),
            };
            let mut offering = Offering {
                zone: zone.clone(),
                offer_id: offer.id.clone(),
                price: price.as_f64(),
                hourly_price: price.as_f64(),
                available: true,
                unavailable_reason: None,
                enabled: offer.enable,
                stock: offer.stock.clone(),
                monthly: twin.and_then(|m| {
                    Some(MonthlyTwin {
                        offer_id: m.id.clone(),
                        price_per_month: m.price_per_month.as_ref()?.as_f64(),
                        enabled: m.enable,
                        stock: m.stock.clone(),
                        private_network_per_month: option_price(m),
                    })
                }),
                billing: Billing::Hourly,
                reservation: None,
                private_network_per_hour: option_price(offer),
            };
            offering.bill(Billing::Hourly);
            it.offerings.push(offering);
        }
        for m in monthly {
            let paired = offers.iter().any(|o| {
                !o.is_monthly()
                    && (o.monthly_offer_id.as_deref() == Some(&m.id) || o.name == m.name)
            });
            if !paired {
                excluded.push(Excluded {
                    offer: m.name.clone(),
                    zone: zone.clone(),
                    reason: "sold monthly only (no hourly offer to pair it with)".into(),
                });
            }
        }
    }
    (types.into_values().collect(), excluded)
}

/// What the offer's `private_network` option costs per billing period (0
/// when the offer includes it), `None` when the offer sells none.
fn option_price(offer: &Offer) -> Option<f64> {
    let option = offer.private_network_option()?;
    Some(match (&option.price, option.enabled) {
        (Some(price), false) => price.as_f64(),
        _ => 0.0,
    })
}

impl Offering {
    /// EUR per hour the `private_network` option adds under the billing
    /// priced (the monthly option's price over [`HOURS_PER_MONTH`] under
    /// monthly billing); 0 when the offer sells none or includes it.
    pub fn private_network_price(&self) -> f64 {
        let monthly = self
            .monthly
            .as_ref()
            .and_then(|m| m.private_network_per_month);
        match (self.billing, monthly) {
            (Billing::Monthly, Some(per_month)) => per_month / HOURS_PER_MONTH,
            _ => self.private_network_per_hour.unwrap_or(0.0),
        }
    }

    /// Prices the offering for `billing` and decides whether it can be
    /// ordered, from the offer's `enable` and `stock` (and its monthly twin's
    /// under monthly billing). A `low` stock is orderable; `empty` is not, nor
    /// is an Instance type's `shortage` (`scarce` is).
    /// Under monthly billing an offer without a monthly twin keeps its hourly
    /// price (consolidation needs a real price for every offering) but is
    /// never available.
    pub fn bill(&mut self, billing: Billing) {
        self.billing = billing;
        let (price, reason) = match (billing, &self.monthly) {
            (Billing::Hourly, _) => (
                self.hourly_price,
                stock_reason(self.enabled, &self.stock, ""),
            ),
            (Billing::Monthly, Some(m)) => (
                m.price_per_month / HOURS_PER_MONTH,
                stock_reason(m.enabled, &m.stock, "monthly offer "),
            ),
            (Billing::Monthly, None) => (
                self.hourly_price,
                Some("no monthly offer in this zone".into()),
            ),
        };
        self.price = price;
        self.available = reason.is_none();
        self.unavailable_reason = reason;
    }
}

fn stock_reason(enabled: bool, stock: &str, what: &str) -> Option<String> {
    if !enabled {
        Some(format!("{what}disabled"))
    } else if stock == "empty" {
        Some(format!("{what}stock empty"))
    } else if stock == "shortage" {
        // An Instance type's availability (EM stock is never `shortage`).
        Some(format!("{what}shortage"))
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{LABEL_REGION, LABEL_WINDOWS_BUILD, LABEL_ZONE, Operator};
    use crate::scaleway::fake::sample_offers;

    fn catalog() -> (Vec<InstanceType>, Vec<Excluded>) {
        let mut by_zone = BTreeMap::new();
        by_zone.insert("fr-par-2".to_string(), sample_offers("fr-par-2"));
        let mut ams = sample_offers("nl-ams-1");
        ams.retain(|o| o.name == "EM-A115X-SSD");
        ams[0].stock = "empty".into();
        by_zone.insert("nl-ams-1".to_string(), ams);
        instance_types(&by_zone)
    }

    fn find<'a>(types: &'a [InstanceType], name: &str) -> &'a InstanceType {
        types.iter().find(|t| t.name == name).unwrap()
    }

    #[test]
    fn regions() {
        assert_eq!(region_of("fr-par-2"), "fr-par");
        assert_eq!(region_of("pl-waw-3"), "pl-waw");
        assert_eq!(region_of("weird"), "weird");
    }

    #[test]
    fn maps_a_small_intel_offer() {
        let (types, _) = catalog();
        let t = find(&types, "EM-A115X-SSD");
        assert_eq!(t.arch, "amd64");
        assert_eq!(t.labels[LABEL_INSTANCE_CPU], "4");
        assert_eq!(t.labels[LABEL_INSTANCE_MEMORY], "32768");
        assert_eq!(t.labels[LABEL_INSTANCE_DISK_TYPE], "ssd");
        assert_eq!(t.labels[LABEL_INSTANCE_DISK_SIZE], "1024");
        assert_eq!(t.labels[LABEL_INSTANCE_RANGE], "aluminium");
        assert_eq!(t.labels[LABEL_INSTANCE_BANDWIDTH], "1000");
        assert!(!t.labels.contains_key(LABEL_INSTANCE_GPU_NAME));
        let cap = t.capacity.to_quantities(true);
        assert_eq!(cap["cpu"], "4");
        assert_eq!(cap["memory"], "32Gi");
        assert_eq!(cap["pods"], "110");
        assert_eq!(cap["ephemeral-storage"], "1000204632Ki");
        // Offered in both zones; sold out in Amsterdam but still listed.
        assert_eq!(t.offerings.len(), 2);
        let ams = t.offerings.iter().find(|o| o.zone == "nl-ams-1").unwrap();
        assert!(!ams.available);
        let par = t.offerings.iter().find(|o| o.zone == "fr-par-2").unwrap();
        assert!(par.available);
        assert_eq!(par.price, 0.091);
        assert_eq!(par.offer_id, "fr-par-2-a115x");
    }

    #[test]
    fn requirements_define_every_well_known_label() {
        let (types, _) = catalog();
        let t = find(&types, "EM-A115X-SSD");
        let reqs = t.requirements();
        let get = |k: &str| reqs.iter().find(|r| r.key == k).unwrap();
        assert_eq!(get(LABEL_ZONE).values, vec!["fr-par-2", "nl-ams-1"]);
        assert_eq!(get(LABEL_REGION).values, vec!["fr-par", "nl-ams"]);
        assert_eq!(get(LABEL_OS).values, vec!["linux"]);
        assert_eq!(get(LABEL_CAPACITY_TYPE).values, vec!["on-demand"]);
        assert_eq!(get(LABEL_WINDOWS_BUILD).operator, Operator::DoesNotExist);
        assert_eq!(
            get(LABEL_INSTANCE_GPU_NAME).operator,
            Operator::DoesNotExist
        );
        for key in crate::catalog::PROVIDER_LABELS {
            assert!(reqs.iter().any(|r| r.key == *key), "{key} undefined");
        }
    }

    #[test]
    fn maps_gpu_and_epyc_offers_and_excludes_riscv() {
        let (types, excluded) = catalog();
        let gpu = find(&types, "EM-T620E-H100");
        assert_eq!(gpu.labels[LABEL_INSTANCE_GPU_NAME], "nvidia-h100");
        assert_eq!(gpu.labels[LABEL_INSTANCE_GPU_COUNT], "2");
        assert_eq!(gpu.capacity.to_quantities(true)["nvidia.com/gpu"], "2");
        assert!(!gpu.offerings[0].available, "stock empty");
        assert!((gpu.offerings[0].price - 9.589).abs() < 1e-9);

        let epyc = find(&types, "EM-I215E-NVME");
        assert_eq!(epyc.labels[LABEL_INSTANCE_CPU], "32");
        assert_eq!(epyc.labels[LABEL_INSTANCE_DISK_TYPE], "nvme");
        assert!(epyc.offerings[0].available, "stock low is available");

        assert!(types.iter().all(|t| t.name != "EM-RV1-C4M16S128-A"));
        assert_eq!(excluded.len(), 1);
        assert!(excluded[0].reason.contains("RISC-V"));
    }

    #[test]
    fn arch_detection() {
        let mut offer = sample_offers("fr-par-2").remove(0);
        offer.cpus[0].name = "Ampere Altra Max M128-30".into();
        assert_eq!(arch_of(&offer), Ok("arm64"));
        offer.cpus[0].name = "Intel Xeon Gold 5412U".into();
        assert_eq!(arch_of(&offer), Ok("amd64"));
        offer.cpus[0].name = "Mystery 9000".into();
        assert!(arch_of(&offer).is_err());
    }

    /// An hourly offer and its monthly twin as the API lists them (field
    /// set of `facts/scaleway-api.md`), the twin found by `monthly_offer_id`.
    fn api_pair(monthly_offer_id: serde_json::Value) -> Vec<Offer> {
        let json = serde_json::json!([
            {
                "id": "a2f5c1d0-0000-4000-8000-000000000001", "name": "EM-A115X-SSD",
                "stock": "available", "bandwidth": 1_000_000_000u64, "max_bandwidth": 1_000_000_000u64,
                "commercial_range": "aluminium",
                "price_per_hour": {"currency_code": "EUR", "units": 0, "nanos": 91_000_000},
                "price_per_month": null,
                "disks": [{"capacity": 1_024_209_543_168u64, "type": "SSD"},
                          {"capacity": 1_024_209_543_168u64, "type": "SSD"}],
                "enable": true,
                "cpus": [{"name": "Intel Xeon E3 1220", "core_count": 4, "thread_count": 4,
                          "frequency": 3100, "benchmark": "5000"}],
                "memories": [{"capacity": 34_359_738_368u64, "type": "DDR3", "frequency": 1600, "is_ecc": true}],
                "quota_name": "EM_A115X_SSD", "persistent_memories": [], "raid_controllers": [],
                "incompatible_os_ids": [], "subscription_period": "hourly", "operation_path": "",
                "fee": {"currency_code": "EUR", "units": 0, "nanos": 0}, "options": [],
                "private_bandwidth": 0, "shared_bandwidth": false, "tags": [], "gpus": [],
                "monthly_offer_id": monthly_offer_id, "zone": "fr-par-2"
            },
            {
                "id": "a2f5c1d0-0000-4000-8000-000000000002", "name": "EM-A115X-SSD",
                "stock": "available", "bandwidth": 1_000_000_000u64, "commercial_range": "aluminium",
                "price_per_hour": null,
                "price_per_month": {"currency_code": "EUR", "units": 32, "nanos": 990_000_000},
                "disks": [{"capacity": 1_024_209_543_168u64, "type": "SSD"}],
                "enable": true,
                "cpus": [{"name": "Intel Xeon E3 1220", "core_count": 4, "thread_count": 4, "frequency": 3100}],
                "memories": [{"capacity": 34_359_738_368u64, "type": "DDR3"}],
                "subscription_period": "monthly",
                "fee": {"currency_code": "EUR", "units": 32, "nanos": 990_000_000},
                "tags": [], "gpus": [], "monthly_offer_id": null, "zone": "fr-par-2"
            }
        ]);
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn hourly_offer_with_monthly_twin() {
        for link in [
            serde_json::json!("a2f5c1d0-0000-4000-8000-000000000002"),
            // Some hourly offers carry no link: paired by name.
            serde_json::Value::Null,
        ] {
            let zones = BTreeMap::from([("fr-par-2".to_string(), api_pair(link.clone()))]);
            let (types, excluded) = instance_types(&zones);
            assert!(excluded.is_empty(), "{excluded:?}");
            assert_eq!(types.len(), 1, "the twin is not a type of its own");
            let o = &types[0].offerings[0];
            assert_eq!(o.offer_id, "a2f5c1d0-0000-4000-8000-000000000001");
            assert_eq!(o.price, 0.091);
            assert_eq!(o.billing, Billing::Hourly);
            let twin = o.monthly.as_ref().expect("paired");
            assert_eq!(twin.offer_id, "a2f5c1d0-0000-4000-8000-000000000002");
            assert!((twin.price_per_month - 32.99).abs() < 1e-9);
            let mut monthly = o.clone();
            monthly.bill(Billing::Monthly);
            assert!((monthly.price - 32.99 / 730.0).abs() < 1e-12);
            assert!(monthly.available);
        }
    }

    #[test]
    fn monthly_only_offer_is_left_out() {
        let mut offers = api_pair(serde_json::Value::Null);
        offers.remove(0);
        let (types, excluded) = instance_types(&BTreeMap::from([("fr-par-2".to_string(), offers)]));
        assert!(types.is_empty());
        assert_eq!(excluded.len(), 1);
        assert!(excluded[0].reason.contains("monthly only"));
    }

    #[test]
    fn monthly_billing_availability() {
        let mut offers = api_pair(serde_json::Value::Null);
        offers[1].enable = false;
        let (types, _) = instance_types(&BTreeMap::from([("fr-par-2".to_string(), offers)]));
        let mut o = types[0].offerings[0].clone();
        assert!(o.available, "the hourly offer is fine");
        o.bill(Billing::Monthly);
        assert!(!o.available);
        assert_eq!(
            o.unavailable_reason.as_deref(),
            Some("monthly offer disabled")
        );

        // The RISC-V-free sample H100 has a twin but its stock is empty.
        let (types, _) = catalog();
        let mut h100 = find(&types, "EM-T620E-H100").offerings[0].clone();
        assert_eq!(h100.unavailable_reason.as_deref(), Some("stock empty"));
        h100.bill(Billing::Monthly);
        assert!(!h100.available);
        assert_eq!(
            h100.price, 9.589,
            "no twin in this test set: hourly price kept"
        );
        assert_eq!(
            h100.unavailable_reason.as_deref(),
            Some("no monthly offer in this zone")
        );
        assert_eq!(h100.order_offer_id(Billing::Monthly), None);
    }

    #[test]
    fn disabled_offer_is_unavailable() {
        let mut offers = sample_offers("fr-par-2");
        offers[0].enable = false;
        let (types, _) = instance_types(&BTreeMap::from([("fr-par-2".to_string(), offers)]));
        let o = &find(&types, "EM-A115X-SSD").offerings[0];
        assert!(!o.available);
        assert_eq!(o.unavailable_reason.as_deref(), Some("disabled"));
    }
}
