//! What a replay assumes: the recorded prices and sizes of the offers, the
//! VM the burst lands on, the durations of the slow steps, and the planner's
//! settings. Every figure says where it comes from (docs/planner.md,
//! "Replaying a trace").

use std::time::Duration;

use crate::catalog::{Billing, Overhead, Resources};

/// An Elastic Metal offer as recorded: emsim's seeded catalog
/// (`emsim/src/catalog/seeded.yaml`), whose figures for EM-A115X-SSD follow
/// the real offer (facts/scaleway-api.md); fr-par-2 prices.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct MetalOffer {
    pub name: &'static str,
    pub threads: u64,
    pub memory_bytes: u64,
    /// EUR per hour, hourly billing.
    pub hourly: f64,
    /// EUR per month of 730 h, monthly billing; its setup fee is the same
    /// amount, paid once per order (facts/scaleway-api.md: `fee` equal to one
    /// month).
    pub monthly: f64,
}

pub const METAL_OFFERS: [MetalOffer; 5] = [
    MetalOffer {
        name: "EM-A115X-SSD",
        threads: 4,
        memory_bytes: 32_000_000_000,
        hourly: 0.091,
        monthly: 32.99,
    },
    MetalOffer {
        name: "EM-A315X-SSD",
        threads: 12,
        memory_bytes: 64_000_000_000,
        hourly: 0.153,
        monthly: 55.99,
    },
    MetalOffer {
        name: "EM-B112X-SSD",
        threads: 12,
        memory_bytes: 64_000_000_000,
        hourly: 0.241,
        monthly: 87.99,
    },
    MetalOffer {
        name: "EM-L105X-SATA",
        threads: 8,
        memory_bytes: 96_000_000_000,
        hourly: 0.213,
        monthly: 76.99,
    },
    MetalOffer {
        name: "EM-I215E-NVME",
        threads: 32,
        memory_bytes: 256_000_000_000,
        hourly: 0.904,
        monthly: 329.99,
    },
];

/// A VM type as recorded (facts/scaleway-instances.md, fr-par-2, 2026-07):
/// CPU Instances are billed per started hour.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct VmType {
    pub name: &'static str,
    pub vcpus: u64,
    pub memory_bytes: u64,
    pub hourly: f64,
}

pub const VM_TYPES: [VmType; 2] = [
    VmType {
        name: "POP2-2C-8G",
        vcpus: 2,
        memory_bytes: 8 << 30,
        hourly: 0.0735,
    },
    VmType {
        name: "POP2-16C-64G",
        vcpus: 16,
        memory_bytes: 64 << 30,
        hourly: 0.59,
    },
];

/// What a node of this hardware offers pods: capacity less the overhead the
/// controller's own catalog predicts (kube- and system-reserved, eviction).
pub fn allocatable(threads: u64, memory_bytes: u64) -> (u64, u64) {
    let capacity = Resources {
        cpu_millis: threads * 1000,
        memory_bytes,
        ..Resources::default()
    };
    let a = capacity.saturating_sub(&Overhead::estimate(&capacity).total());
    (a.cpu_millis, a.memory_bytes)
}

/// The durations of the slow steps (real ones; docs/planner.md says where
/// each comes from).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Durations {
    /// From the order to an idle installed standby server: delivery, rescue
    /// boot, `dd`, boot into maintenance mode (12 min 31 s in the demo with
    /// emsim's real timings).
    pub install: Duration,
    /// A deleted node's server written again (rescue boot, `dd`, boot).
    pub wipe: Duration,
    /// From an idle standby server to the pods moved onto it (core's
    /// consolidation, the config applied, the evictions).
    pub adopt: Duration,
    /// Karpenter's `consolidateAfter` on both NodePools
    /// (examples/vm-first-warm-metal.yaml).
    pub consolidate_after: Duration,
}

impl Default for Durations {
    fn default() -> Self {
        Durations {
            install: Duration::from_secs(751),
            wipe: Duration::from_secs(540),
            adopt: Duration::from_secs(240),
            consolidate_after: Duration::from_secs(300),
        }
    }
}

/// The standby pool and its planner, as a NodeClass would set them.
#[derive(Debug, Clone, PartialEq)]
pub struct PoolSettings {
    pub billing: Billing,
    /// The pool's `min` (idle standby servers kept whatever the planner's
    /// target: servers ready for load no history foresees).
    pub min: u32,
    /// The pool's `max` (standby servers at a time).
    pub max: u32,
    /// `planner.maxServers`.
    pub max_servers: u32,
    pub window: Duration,
    pub at_least: Duration,
    pub hold: Duration,
    pub idle_hourly_keep: Duration,
    /// `planner.ahead` (docs/planner.md): stage ahead of a load seen at the
    /// same time a day or a week before.
    pub ahead: Option<Duration>,
}

impl Default for PoolSettings {
    fn default() -> Self {
        PoolSettings {
            billing: Billing::Hourly,
            min: 0,
            max: 16,
            max_servers: 16,
            window: Duration::from_secs(2 * 3600),
            at_least: Duration::from_secs(2 * 3600),
            hold: Duration::from_secs(30 * 60),
            idle_hourly_keep: Duration::ZERO,
            ahead: None,
        }
    }
}

/// Everything one replay assumes.
#[derive(Debug, Clone, PartialEq)]
pub struct Setup {
    pub offer: MetalOffer,
    pub vm: VmType,
    pub durations: Durations,
    pub pool: PoolSettings,
}

impl Default for Setup {
    fn default() -> Self {
        Setup {
            offer: METAL_OFFERS[1],
            vm: VM_TYPES[0],
            durations: Durations::default(),
            pool: PoolSettings::default(),
        }
    }
}

impl Setup {
    pub fn server(&self) -> (u64, u64) {
        allocatable(self.offer.threads, self.offer.memory_bytes)
    }

    pub fn vm_size(&self) -> (u64, u64) {
        allocatable(self.vm.vcpus, self.vm.memory_bytes)
    }
}

/// The offer called `name`, among the recorded ones.
pub fn offer(name: &str) -> Result<MetalOffer, String> {
    METAL_OFFERS
        .iter()
        .find(|o| o.name == name)
        .copied()
        .ok_or_else(|| {
            format!(
                "unknown offer {name:?}; recorded: {}",
                METAL_OFFERS.map(|o| o.name).join(", ")
            )
        })
}

/// The VM type called `name`, among the recorded ones.
pub fn vm_type(name: &str) -> Result<VmType, String> {
    VM_TYPES
        .iter()
        .find(|v| v.name == name)
        .copied()
        .ok_or_else(|| {
            format!(
                "unknown VM type {name:?}; recorded: {}",
                VM_TYPES.map(|v| v.name).join(", ")
            )
        })
}
