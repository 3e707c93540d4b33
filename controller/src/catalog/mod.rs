//! The catalog: Elastic Metal offers of every configured zone turned into
//! Karpenter instance types, cached in memory and refreshed in the background.
//!
//! `mapping` is pure (offer JSON → instance type), and so is `instance_mapping`
//! (Instance commercial types → instance types); `store` holds the last good
//! catalog, the unavailable-offerings cache and the per-NodeClass views (keyed
//! by kind and name, `kind`), and publishes a new snapshot on every change;
//! `run_refresher` (Elastic Metal) and `run_instance_refresher` (Instances) are
//! the background tasks.
//! Nothing here imports kube or tonic.

mod instance_mapping;
mod instance_refresh;
mod kind;
mod mapping;
mod resources;
mod store;

pub use instance_mapping::{DEFAULT_ROOT_BYTES, ZoneProducts, instance_family, vm_instance_types};
pub use instance_refresh::{read_instance_zone, run_instance_refresher};
pub use kind::{ClassKey, ClassKind};
pub use mapping::{Excluded, arch_of, instance_types, region_of};
pub use resources::{
    KubeletReservations, Overhead, Resources, bytes_quantity, cpu_quantity, parse_quantity_milli,
};
pub use store::{
    CatalogStore, ClassView, ReservedPool, Snapshot, Unavailability, UnavailableOffering,
    read_zone, run_refresher,
};

use std::collections::{BTreeMap, BTreeSet};

pub const LABEL_INSTANCE_TYPE: &str = "node.kubernetes.io/instance-type";
pub const LABEL_ZONE: &str = "topology.kubernetes.io/zone";
pub const LABEL_REGION: &str = "topology.kubernetes.io/region";
pub const LABEL_ARCH: &str = "kubernetes.io/arch";
pub const LABEL_OS: &str = "kubernetes.io/os";
pub const LABEL_CAPACITY_TYPE: &str = "karpenter.sh/capacity-type";
pub const LABEL_WINDOWS_BUILD: &str = "node.kubernetes.io/windows-build";

pub const CAPACITY_TYPE_ON_DEMAND: &str = "on-demand";

/// Offer range as Scaleway names it (`aluminium`, `labs`, ...).
pub const LABEL_INSTANCE_RANGE: &str = "karpenter.scaleway.com/instance-range";
/// Hardware threads (= Kubernetes CPUs).
pub const LABEL_INSTANCE_CPU: &str = "karpenter.scaleway.com/instance-cpu";
/// Memory in MiB.
pub const LABEL_INSTANCE_MEMORY: &str = "karpenter.scaleway.com/instance-memory";
/// Type of the install disk, lowercase (`nvme`, `ssd`, `hdd`, ...).
pub const LABEL_INSTANCE_DISK_TYPE: &str = "karpenter.scaleway.com/instance-disk-type";
/// Size of the install (first) disk in GB (10^9 bytes).
pub const LABEL_INSTANCE_DISK_SIZE: &str = "karpenter.scaleway.com/instance-disk-size";
/// GPU model, sanitised to a label value (`nvidia-h100`).
pub const LABEL_INSTANCE_GPU_NAME: &str = "karpenter.scaleway.com/instance-gpu-name";
pub const LABEL_INSTANCE_GPU_COUNT: &str = "karpenter.scaleway.com/instance-gpu-count";
/// Public bandwidth in Mbit/s.
pub const LABEL_INSTANCE_BANDWIDTH: &str = "karpenter.scaleway.com/instance-bandwidth";
/// Instance family, from the commercial type (`POP2`, `POP2-HM`, `L4`,
/// `H100-SXM`); Instance types only (`DoesNotExist` on Elastic Metal).
pub const LABEL_INSTANCE_FAMILY: &str = "karpenter.scaleway.com/instance-family";
/// Memory of one GPU in MiB; Instance types only.
pub const LABEL_INSTANCE_GPU_MEMORY: &str = "karpenter.scaleway.com/instance-gpu-memory";
/// The reservation a node adopted from a standby server belongs to: one
/// reservation per (NodeClass, offer, zone) standby pool. Registered as core's
/// `cloudprovider.ReservationIDLabel` by the bridge (Info).
pub const LABEL_RESERVATION_ID: &str = "karpenter.scaleway.com/reservation-id";
/// Capacity served from standby servers (core's reserved capacity type).
pub const CAPACITY_TYPE_RESERVED: &str = "reserved";
/// A reserved offering's price is the on-demand price divided by this: nearly
/// free, so that core prefers it, while keeping the relative order of types
/// for consolidation (the AWS provider uses the same divisor).
pub const RESERVED_PRICE_DIVISOR: f64 = 10_000_000.0;

/// Labels this provider defines on instance types, registered as well-known by
/// the bridge (Info). Every one of them appears in every type's requirements,
/// as `In [value]` or `DoesNotExist`.
pub const PROVIDER_LABELS: &[&str] = &[
    LABEL_INSTANCE_RANGE,
    LABEL_INSTANCE_CPU,
    LABEL_INSTANCE_MEMORY,
    LABEL_INSTANCE_DISK_TYPE,
    LABEL_INSTANCE_DISK_SIZE,
    LABEL_INSTANCE_GPU_NAME,
    LABEL_INSTANCE_GPU_COUNT,
    LABEL_INSTANCE_BANDWIDTH,
    LABEL_INSTANCE_FAMILY,
    LABEL_INSTANCE_GPU_MEMORY,
    LABEL_RESERVATION_ID,
];

/// Karpenter's well-known labels that an instance type must define, even as
/// `DoesNotExist`, because an undefined well-known key matches anything.
const CORE_WELL_KNOWN: &[&str] = &[
    LABEL_INSTANCE_TYPE,
    LABEL_ZONE,
    LABEL_REGION,
    LABEL_ARCH,
    LABEL_OS,
    LABEL_CAPACITY_TYPE,
    LABEL_WINDOWS_BUILD,
];

/// Whether this provider defines `key` on its instance types (so a NodeClaim
/// requirement on it constrains which offering to order).
pub fn managed_label(key: &str) -> bool {
    CORE_WELL_KNOWN.contains(&key) || PROVIDER_LABELS.contains(&key)
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Operator {
    In,
    NotIn,
    Exists,
    DoesNotExist,
    Gt,
    Lt,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    pub key: String,
    pub operator: Operator,
    pub values: Vec<String>,
}

impl Requirement {
    pub fn is_in(key: &str, values: impl IntoIterator<Item = String>) -> Self {
        Requirement {
            key: key.to_string(),
            operator: Operator::In,
            values: values.into_iter().collect(),
        }
    }

    fn does_not_exist(key: &str) -> Self {
        Requirement {
            key: key.to_string(),
            operator: Operator::DoesNotExist,
            values: Vec::new(),
        }
    }
}

/// How a NodeClass pays for its servers (mirrors the NodeClass `billing`
/// field; the catalog does not import the CRD types).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Billing {
    #[default]
    Hourly,
    Monthly,
}

/// Hours a monthly price is spread over to compare it with hourly prices
/// (365 × 24 / 12 = 730, the convention Scaleway's own price pages use).
pub const HOURS_PER_MONTH: f64 = 730.0;

/// The monthly offer paired with an hourly one in the same zone.
#[derive(Debug, Clone, PartialEq)]
pub struct MonthlyTwin {
    pub offer_id: String,
    /// EUR per month.
    pub price_per_month: f64,
    pub enabled: bool,
    /// `empty`, `low` or `available`.
    pub stock: String,
    /// The monthly offer's `private_network` option, EUR per month (0 when
    /// included); `None` when it sells none.
    pub private_network_per_month: Option<f64>,
}

/// One offer in one zone, as a NodeClass with a given billing sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct Offering {
    pub zone: String,
    /// The hourly offer's id in that zone (ids differ between zones).
    pub offer_id: String,
    /// Price per hour in EUR: the hourly price, or under monthly billing the
    /// monthly price over [`HOURS_PER_MONTH`].
    pub price: f64,
    /// The hourly offer's price per hour in EUR, whatever the billing.
    pub hourly_price: f64,
    pub available: bool,
    /// Why `available` is false (`None` when available): shown by the
    /// `catalog` command and logged.
    pub unavailable_reason: Option<String>,
    /// The hourly offer's `enable` and `stock`.
    pub enabled: bool,
    pub stock: String,
    pub monthly: Option<MonthlyTwin>,
    /// The billing this offering was priced for.
    pub billing: Billing,
    /// Set on a `reserved` offering: capacity served by a standby pool.
    pub reservation: Option<OfferingReservation>,
    /// The hourly offer's `private_network` option, EUR per hour (0 when
    /// included); `None` when it sells none (Instances: private NICs are
    /// free). Added to `price` for a NodeClass with a Private Network.
    pub private_network_per_hour: Option<f64>,
}

/// A standby pool as a reserved offering.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OfferingReservation {
    /// The value of [`LABEL_RESERVATION_ID`].
    pub id: String,
    /// Idle installed standby servers: how many more nodes core may launch
    /// into this reservation.
    pub capacity: u32,
}

/// The reservation id of the standby pool of `offer` in `zone` of the
/// NodeClass `class`: `<class>.<offer>.<zone>` in lowercase, a valid label
/// value; `standby-` and 16 hex digits of its sha256 when that is longer
/// than the 63 characters a label value may have.
pub fn reservation_id(class: &str, offer: &str, zone: &str) -> String {
    let plain = format!("{class}.{offer}.{zone}").to_ascii_lowercase();
    if plain.len() <= 63 {
        return plain;
    }
    use sha2::Digest;
    let digest = sha2::Sha256::digest(plain.as_bytes());
    let hex: String = digest.iter().take(8).map(|b| format!("{b:02x}")).collect();
    format!("standby-{hex}")
}

impl Offering {
    pub fn requirements(&self) -> Vec<Requirement> {
        match &self.reservation {
            None => vec![
                Requirement::is_in(LABEL_CAPACITY_TYPE, [CAPACITY_TYPE_ON_DEMAND.to_string()]),
                Requirement::is_in(LABEL_ZONE, [self.zone.clone()]),
                // Core's rule for reserved capacity: every offering that is
                // not reserved says it carries no reservation id.
                Requirement::does_not_exist(LABEL_RESERVATION_ID),
            ],
            Some(r) => vec![
                Requirement::is_in(LABEL_CAPACITY_TYPE, [CAPACITY_TYPE_RESERVED.to_string()]),
                Requirement::is_in(LABEL_ZONE, [self.zone.clone()]),
                Requirement::is_in(LABEL_RESERVATION_ID, [r.id.clone()]),
            ],
        }
    }

    /// The capacity type of a node launched into this offering.
    pub fn capacity_type(&self) -> &'static str {
        if self.reservation.is_some() {
            CAPACITY_TYPE_RESERVED
        } else {
            CAPACITY_TYPE_ON_DEMAND
        }
    }

    /// The offer id to order under `billing`: the hourly offer, or its
    /// monthly twin (`None` when the offer has no monthly twin in this zone).
    pub fn order_offer_id(&self, billing: Billing) -> Option<&str> {
        match billing {
            Billing::Hourly => Some(&self.offer_id),
            Billing::Monthly => self.monthly.as_ref().map(|m| m.offer_id.as_str()),
        }
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct InstanceType {
    /// The offer name, e.g. `EM-A115X-SSD`.
    pub name: String,
    /// `amd64` or `arm64`.
    pub arch: String,
    /// Every single-valued label of the type (instance type, arch, os,
    /// capacity type and the provider labels that apply).
    pub labels: BTreeMap<String, String>,
    pub offerings: Vec<Offering>,
    pub capacity: Resources,
    pub overhead: Overhead,
}

impl InstanceType {
    pub fn zones(&self) -> BTreeSet<String> {
        self.offerings.iter().map(|o| o.zone.clone()).collect()
    }

    /// Requirements as Karpenter reads them: every single-valued label as `In`,
    /// zone and region over every zone with an offering, and `DoesNotExist` for
    /// each well-known or provider label the type does not carry.
    pub fn requirements(&self) -> Vec<Requirement> {
        let zones = self.zones();
        let regions: BTreeSet<String> = zones.iter().map(|z| region_of(z).to_string()).collect();
        let mut reqs: Vec<Requirement> = self
            .labels
            .iter()
            .map(|(k, v)| Requirement::is_in(k, [v.clone()]))
            .collect();
        reqs.push(Requirement::is_in(LABEL_ZONE, zones));
        reqs.push(Requirement::is_in(LABEL_REGION, regions));
        // Reserved offerings widen the capacity type. The reservation id is
        // left to the offerings: no type-level requirement on it is right
        // for both a pod that selects a reservation and one that avoids
        // them, and an undefined well-known label matches anything at the
        // type level (the bridge does not fill it in for such types).
        let reserved = self.offerings.iter().any(|o| o.reservation.is_some());
        if reserved {
            let mut types: BTreeSet<String> = self
                .offerings
                .iter()
                .map(|o| o.capacity_type().to_string())
                .collect();
            if let Some(label) = self.labels.get(LABEL_CAPACITY_TYPE) {
                types.insert(label.clone());
            }
            reqs.retain(|r| r.key != LABEL_CAPACITY_TYPE);
            reqs.push(Requirement::is_in(LABEL_CAPACITY_TYPE, types));
        }
        for key in CORE_WELL_KNOWN.iter().chain(PROVIDER_LABELS) {
            if reserved && *key == LABEL_RESERVATION_ID {
                continue;
            }
            if !reqs.iter().any(|r| r.key == *key) {
                reqs.push(Requirement::does_not_exist(key));
            }
        }
        reqs
    }

    pub fn allocatable(&self) -> Resources {
        self.capacity.saturating_sub(&self.overhead.total())
    }

    /// The labels a node of this type in `zone` carries (what Create returns).
    pub fn node_labels(&self, zone: &str) -> BTreeMap<String, String> {
        let mut labels = self.labels.clone();
        labels.insert(LABEL_ZONE.into(), zone.to_string());
        labels.insert(LABEL_REGION.into(), region_of(zone).to_string());
        labels
    }

    /// The labels of a node launched into `reservation` in `zone`: reserved
    /// capacity with its reservation id, for the node's whole life.
    pub fn reserved_node_labels(&self, zone: &str, reservation: &str) -> BTreeMap<String, String> {
        let mut labels = self.node_labels(zone);
        labels.insert(LABEL_CAPACITY_TYPE.into(), CAPACITY_TYPE_RESERVED.into());
        labels.insert(LABEL_RESERVATION_ID.into(), reservation.to_string());
        labels
    }
}
