//! The offer catalog: a small YAML/JSON description (one entry per offer name,
//! listing its zones) expanded into the wire `Offer` objects of every zone, with
//! an hourly offer and, when a monthly price is given, its monthly twin.
//!
//! Offer ids are derived from zone, name and period, so they stay the same across
//! runs and seeds, like real offer ids.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, bail};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::model::{Cpu, Disk, Gpu, Memory, Money, Offer};
use crate::timings::{DEFAULT_BOOT, STANDARD_DELIVERY, Span, TimingOverrides};

pub mod extras;

/// The zones the real API knows (`facts/scaleway-api.md`).
pub const ZONES: &[&str] = &[
    "fr-par-1", "fr-par-2", "nl-ams-1", "nl-ams-2", "pl-waw-2", "pl-waw-3",
];

const SEEDED: &str = include_str!("seeded.yaml");

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum StockLevel {
    Empty,
    Low,
    Available,
}

/// Stock of one offer in one zone: a level that never runs out, or a count of
/// machines that orders consume and deletions give back.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(untagged)]
pub enum Stock {
    Count(u64),
    Level(StockLevel),
}

impl Stock {
    /// What the API shows in `offer.stock`.
    pub fn level(&self) -> StockLevel {
        match *self {
            Stock::Level(level) => level,
            Stock::Count(0) => StockLevel::Empty,
            Stock::Count(1..=3) => StockLevel::Low,
            Stock::Count(_) => StockLevel::Available,
        }
    }

    pub fn as_str(&self) -> &'static str {
        match self.level() {
            StockLevel::Empty => "empty",
            StockLevel::Low => "low",
            StockLevel::Available => "available",
        }
    }

    /// Takes one machine; false when there is none.
    pub fn take(&mut self) -> bool {
        match self {
            Stock::Level(StockLevel::Empty) | Stock::Count(0) => false,
            Stock::Level(_) => true,
            Stock::Count(n) => {
                *n -= 1;
                true
            }
        }
    }

    pub fn give_back(&mut self) {
        if let Stock::Count(n) = self {
            *n += 1;
        }
    }
}

/// How long delivery takes, in simulated seconds.
pub type Delivery = Span;

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(untagged)]
enum DeliverySpec {
    Seconds(f64),
    Kind(DeliveryKind),
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(rename_all = "lowercase")]
enum DeliveryKind {
    /// "Ready at the next poll" (15 s polling) in the recordings.
    Instant,
    /// 3 min 45 s to 4 min 47 s in the recordings.
    Standard,
}

impl From<DeliverySpec> for Delivery {
    fn from(spec: DeliverySpec) -> Self {
        match spec {
            DeliverySpec::Seconds(s) => Delivery::Fixed(s),
            DeliverySpec::Kind(DeliveryKind::Instant) => Delivery::Between(5.0, 12.0),
            DeliverySpec::Kind(DeliveryKind::Standard) => STANDARD_DELIVERY,
        }
    }
}

/// One entry of a catalog file.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct OfferSpec {
    name: String,
    zones: Vec<String>,
    #[serde(default = "default_stock")]
    stock: Stock,
    #[serde(default)]
    stock_by_zone: BTreeMap<String, Stock>,
    #[serde(default = "default_delivery")]
    delivery: DeliverySpec,
    /// A reboot or start: seconds or a `"180-300"` range (default 12).
    #[serde(default = "default_boot")]
    boot: Span,
    /// Servers of this quota name a project may hold; absent means unlimited.
    #[serde(default)]
    quota: Option<u64>,
    /// Defaults to the name in upper case with `_` for `-` (`EM_L105X_SATA`).
    #[serde(default)]
    quota_name: Option<String>,
    #[serde(default)]
    commercial_range: String,
    #[serde(default = "default_bandwidth")]
    bandwidth: u64,
    #[serde(default)]
    cpus: Vec<Cpu>,
    #[serde(default)]
    memories: Vec<Memory>,
    #[serde(default)]
    disks: Vec<Disk>,
    #[serde(default)]
    gpus: Vec<Gpu>,
    /// Euros.
    price_per_hour: f64,
    /// Euros; when set, a monthly twin offer exists.
    #[serde(default)]
    price_per_month: Option<f64>,
    #[serde(default)]
    tags: Vec<String>,
    #[serde(default = "default_true")]
    enable: bool,
    /// Euros per hour (hourly offer) of the `private_network` option in the
    /// offer's `options`; the monthly twin's is 730 times that, per month.
    /// Default 0 (INFERENCE: no recorded price).
    #[serde(default)]
    private_network_price_per_hour: f64,
}

fn default_stock() -> Stock {
    Stock::Level(StockLevel::Available)
}
fn default_delivery() -> DeliverySpec {
    DeliverySpec::Kind(DeliveryKind::Standard)
}
fn default_boot() -> Span {
    DEFAULT_BOOT
}
fn default_bandwidth() -> u64 {
    1_000_000_000
}
fn default_true() -> bool {
    true
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
struct CatalogFile {
    offers: Vec<OfferSpec>,
}

/// One wire offer with the simulation parameters attached to it.
#[derive(Debug, Clone)]
pub struct CatalogOffer {
    /// `stock` in here is the initial level; the live value is in the world.
    pub offer: Offer,
    pub stock: Stock,
    pub delivery: Delivery,
    /// From a reboot or start call to the power-on (normal or rescue).
    pub boot: Span,
    pub quota: Option<u64>,
}

#[derive(Debug, Clone)]
pub struct Catalog {
    pub offers: Vec<CatalogOffer>,
}

impl Catalog {
    pub fn seeded() -> Self {
        Self::parse(SEEDED).expect("the embedded catalog is valid")
    }

    /// Reads a catalog file, JSON or YAML (parsed as YAML, a superset of JSON).
    pub fn load(path: &Path) -> anyhow::Result<Self> {
        let text = std::fs::read_to_string(path)
            .with_context(|| format!("reading catalog {}", path.display()))?;
        Self::parse(&text).with_context(|| format!("parsing catalog {}", path.display()))
    }

    pub fn parse(text: &str) -> anyhow::Result<Self> {
        let file: CatalogFile = serde_yaml_ng::from_str(text)?;
        let mut offers = Vec::new();
        for spec in file.offers {
            offers.extend(expand(&spec)?);
        }
        Ok(Self { offers })
    }

    /// Replaces every offer's delivery and boot time with the overrides
    /// that are set (`--timings`, `--delivery-seconds`, `--boot-seconds`).
    pub fn apply(&mut self, overrides: &TimingOverrides) {
        for offer in &mut self.offers {
            if let Some(delivery) = overrides.delivery {
                offer.delivery = delivery;
            }
            if let Some(boot) = overrides.boot {
                offer.boot = boot;
            }
        }
    }

    pub fn find(&self, zone: &str, offer_id: &str) -> Option<&CatalogOffer> {
        self.offers
            .iter()
            .find(|o| o.offer.zone == zone && o.offer.id == offer_id)
    }
}

fn expand(spec: &OfferSpec) -> anyhow::Result<Vec<CatalogOffer>> {
    if spec.name.is_empty() {
        bail!("an offer has an empty name");
    }
    if spec.zones.is_empty() {
        bail!("offer {} lists no zone", spec.name);
    }
    for zone in spec.zones.iter().chain(spec.stock_by_zone.keys()) {
        if !ZONES.contains(&zone.as_str()) {
            bail!(
                "offer {}: unknown zone {zone} (known: {})",
                spec.name,
                ZONES.join(", ")
            );
        }
    }
    let quota_name = spec
        .quota_name
        .clone()
        .unwrap_or_else(|| spec.name.to_uppercase().replace('-', "_"));
    let mut out = Vec::new();
    for zone in &spec.zones {
        let stock = spec.stock_by_zone.get(zone).copied().unwrap_or(spec.stock);
        let monthly_id = spec
            .price_per_month
            .map(|_| offer_id(zone, &spec.name, "monthly"));
        let base = Offer {
            id: offer_id(zone, &spec.name, "hourly"),
            name: spec.name.clone(),
            stock: stock.as_str().into(),
            bandwidth: spec.bandwidth,
            max_bandwidth: spec.bandwidth,
            commercial_range: spec.commercial_range.clone(),
            price_per_hour: Some(Money::eur(spec.price_per_hour)),
            price_per_month: None,
            disks: spec.disks.clone(),
            enable: spec.enable,
            cpus: spec.cpus.clone(),
            memories: spec.memories.clone(),
            quota_name: quota_name.clone(),
            persistent_memories: vec![],
            raid_controllers: vec![],
            incompatible_os_ids: vec![],
            subscription_period: "hourly".into(),
            operation_path: String::new(),
            fee: Money::eur(0.0),
            options: vec![private_network_option(
                zone,
                "hourly",
                spec.private_network_price_per_hour,
            )],
            private_bandwidth: spec.bandwidth,
            shared_bandwidth: true,
            tags: spec.tags.clone(),
            gpus: spec.gpus.clone(),
            monthly_offer_id: monthly_id.clone(),
            zone: zone.clone(),
        };
        let params = |offer: Offer| CatalogOffer {
            offer,
            stock,
            delivery: spec.delivery.into(),
            boot: spec.boot,
            quota: spec.quota,
        };
        if let (Some(monthly), Some(id)) = (spec.price_per_month, monthly_id) {
            let twin = Offer {
                id,
                price_per_hour: None,
                price_per_month: Some(Money::eur(monthly)),
                subscription_period: "monthly".into(),
                // The monthly commitment is billed one month up front.
                fee: Money::eur(monthly),
                monthly_offer_id: None,
                options: vec![private_network_option(
                    zone,
                    "monthly",
                    spec.private_network_price_per_hour * 730.0,
                )],
                ..base.clone()
            };
            out.push(params(base));
            out.push(params(twin));
        } else {
            out.push(params(base));
        }
    }
    Ok(out)
}

/// The offer's `private_network` option (`OfferOptionOffer`): available,
/// not included (`enabled: false`), added with `POST
/// .../servers/{id}/options/{option_id}`; its id is the zone's option's.
fn private_network_option(zone: &str, period: &str, price: f64) -> serde_json::Value {
    let option = extras::options(zone)
        .into_iter()
        .find(|o| o.kind.private_network.is_some())
        .expect("the zone's options include the Private Network");
    serde_json::json!({
        "id": option.id,
        "name": option.name,
        "enabled": false,
        "subscription_period": period,
        "price": Money::eur(price),
        "manageable": option.manageable,
        "private_network": option.kind.private_network,
    })
}

fn offer_id(zone: &str, name: &str, period: &str) -> String {
    let digest = md5::compute(format!("emsim-offer:{zone}:{name}:{period}"));
    uuid::Builder::from_md5_bytes(digest.0)
        .into_uuid()
        .to_string()
}

/// True when `s` is a canonical lowercase hyphenated UUID, the only id form the
/// API accepts in paths.
pub fn is_uuid(s: &str) -> bool {
    s.len() == 36 && Uuid::parse_str(s).is_ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hourly<'a>(c: &'a Catalog, zone: &str, name: &str) -> &'a CatalogOffer {
        c.offers
            .iter()
            .find(|o| {
                o.offer.zone == zone
                    && o.offer.name == name
                    && o.offer.subscription_period == "hourly"
            })
            .unwrap_or_else(|| panic!("{name} in {zone}"))
    }

    #[test]
    fn seeded_catalog_holds_the_real_examples() {
        let c = Catalog::seeded();
        let a = hourly(&c, "fr-par-2", "EM-A115X-SSD");
        assert_eq!(a.offer.disks[0].kind, "SSD");
        assert_eq!(a.offer.price_per_hour, Some(Money::eur(0.091)));
        assert_eq!(a.offer.price_per_month, None);
        assert_eq!(a.offer.fee, Money::eur(0.0));
        let twin_id = a.offer.monthly_offer_id.clone().unwrap();
        let twin = c.find("fr-par-2", &twin_id).unwrap();
        assert_eq!(twin.offer.subscription_period, "monthly");
        assert_eq!(twin.offer.price_per_month, Some(Money::eur(32.99)));
        assert_eq!(twin.offer.fee, Money::eur(32.99));
        assert_eq!(twin.offer.price_per_hour, None);

        let h100 = hourly(&c, "fr-par-2", "EM-T620E-H100");
        assert_eq!(h100.offer.stock, "empty");
        assert_eq!(h100.offer.gpus.len(), 2);
        assert_eq!(h100.offer.gpus[0].vram, 80_000_000_000);

        assert_eq!(
            hourly(&c, "fr-par-1", "EM-L105X-SATA").offer.quota_name,
            "EM_L105X_SATA"
        );
        assert_eq!(
            hourly(&c, "fr-par-2", "EM-I215E-NVME").offer.disks[0].kind,
            "NVMe"
        );
        let rv = hourly(&c, "fr-par-2", "EM-RV1-C4M16S128-A");
        assert_eq!(rv.offer.commercial_range, "labs");
        assert_eq!(rv.offer.monthly_offer_id, None);
        assert_eq!(hourly(&c, "pl-waw-3", "EM-A315X-SSD").offer.stock, "low");
        for zone in ["fr-par-1", "fr-par-2", "nl-ams-1", "pl-waw-3"] {
            assert!(c.offers.iter().any(|o| o.offer.zone == zone), "{zone}");
        }
    }

    #[test]
    fn ids_are_stable_and_distinct_per_zone() {
        let a = Catalog::seeded();
        let b = Catalog::seeded();
        assert_eq!(a.offers[0].offer.id, b.offers[0].offer.id);
        assert!(is_uuid(&a.offers[0].offer.id));
        let ids: std::collections::HashSet<_> = a.offers.iter().map(|o| &o.offer.id).collect();
        assert_eq!(ids.len(), a.offers.len());
    }

    #[test]
    fn parses_a_tiny_json_catalog_and_rejects_unknown_zones() {
        let c = Catalog::parse(
            r#"{"offers":[{"name":"EM-TEST","zones":["fr-par-1"],"stock":2,"delivery":30,
                "price_per_hour":0.5,"quota":1}]}"#,
        )
        .unwrap();
        assert_eq!(c.offers.len(), 1);
        assert_eq!(c.offers[0].stock, Stock::Count(2));
        assert_eq!(c.offers[0].offer.stock, "low");
        assert_eq!(c.offers[0].delivery, Delivery::Fixed(30.0));
        assert_eq!(c.offers[0].quota, Some(1));
        let err =
            Catalog::parse("offers: [{name: X, zones: [mars-1], price_per_hour: 1}]").unwrap_err();
        assert!(err.to_string().contains("unknown zone"), "{err}");
    }

    #[test]
    fn the_real_profile_replaces_every_delivery_and_boot() {
        let mut c = Catalog::seeded();
        let instant = hourly(&c, "fr-par-2", "EM-A115X-SSD");
        assert_eq!(instant.delivery, Delivery::Between(5.0, 12.0));
        assert_eq!(instant.boot, Span::Fixed(12.0));
        let standard = hourly(&c, "fr-par-2", "EM-I215E-NVME");
        assert_eq!(standard.delivery, STANDARD_DELIVERY);

        c.apply(&crate::timings::Profile::Real.overrides());
        for o in &c.offers {
            assert_eq!(o.delivery, Span::Between(225.0, 287.0), "{}", o.offer.name);
            assert_eq!(o.boot, Span::Between(180.0, 300.0), "{}", o.offer.name);
        }

        let own = Catalog::parse(
            r#"{"offers":[{"name":"EM-TEST","zones":["fr-par-1"],"boot":"60-90","price_per_hour":1}]}"#,
        )
        .unwrap();
        assert_eq!(own.offers[0].boot, Span::Between(60.0, 90.0));
        let err =
            Catalog::parse("offers: [{name: X, zones: [fr-par-1], boot: soon, price_per_hour: 1}]")
                .unwrap_err();
        assert!(format!("{err:#}").contains("soon"), "{err:#}");
    }

    #[test]
    fn counted_stock_runs_out_and_comes_back() {
        let mut s = Stock::Count(1);
        assert!(s.take());
        assert_eq!(s.level(), StockLevel::Empty);
        assert!(!s.take());
        s.give_back();
        assert_eq!(s.as_str(), "low");
        let mut empty = Stock::Level(StockLevel::Empty);
        assert!(!empty.take());
        let mut avail = Stock::Level(StockLevel::Available);
        assert!(avail.take());
        assert_eq!(avail.as_str(), "available");
    }
}
