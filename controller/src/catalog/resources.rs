//! Node resources in integer units, rendered as Kubernetes quantities at the edge.

use std::collections::BTreeMap;

const KI: u64 = 1024;
const MI: u64 = 1024 * KI;
const GI: u64 = 1024 * MI;

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Resources {
    pub cpu_millis: u64,
    pub memory_bytes: u64,
    pub ephemeral_storage_bytes: u64,
    pub pods: u64,
    pub nvidia_gpus: u64,
}

impl Resources {
    pub fn saturating_sub(&self, other: &Resources) -> Resources {
        Resources {
            cpu_millis: self.cpu_millis.saturating_sub(other.cpu_millis),
            memory_bytes: self.memory_bytes.saturating_sub(other.memory_bytes),
            ephemeral_storage_bytes: self
                .ephemeral_storage_bytes
                .saturating_sub(other.ephemeral_storage_bytes),
            pods: self.pods.saturating_sub(other.pods),
            nvidia_gpus: self.nvidia_gpus.saturating_sub(other.nvidia_gpus),
        }
    }

    fn add(&self, other: &Resources) -> Resources {
        Resources {
            cpu_millis: self.cpu_millis + other.cpu_millis,
            memory_bytes: self.memory_bytes + other.memory_bytes,
            ephemeral_storage_bytes: self.ephemeral_storage_bytes + other.ephemeral_storage_bytes,
            pods: self.pods + other.pods,
            nvidia_gpus: self.nvidia_gpus + other.nvidia_gpus,
        }
    }

    /// Resource name → quantity string; zero entries are left out, except in a
    /// capacity (`keep_zero`), where `cpu`, `memory`, `ephemeral-storage` and
    /// `pods` are always present.
    pub fn to_quantities(&self, keep_zero: bool) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        let mut put = |name: &str, value: u64, text: String| {
            if value > 0 || (keep_zero && name != "nvidia.com/gpu") {
                out.insert(name.to_string(), text);
            }
        };
        put("cpu", self.cpu_millis, cpu_quantity(self.cpu_millis));
        put(
            "memory",
            self.memory_bytes,
            bytes_quantity(self.memory_bytes),
        );
        put(
            "ephemeral-storage",
            self.ephemeral_storage_bytes,
            bytes_quantity(self.ephemeral_storage_bytes),
        );
        put("pods", self.pods, self.pods.to_string());
        put(
            "nvidia.com/gpu",
            self.nvidia_gpus,
            self.nvidia_gpus.to_string(),
        );
        out
    }
}

pub fn cpu_quantity(millis: u64) -> String {
    if millis.is_multiple_of(1000) {
        (millis / 1000).to_string()
    } else {
        format!("{millis}m")
    }
}

pub fn bytes_quantity(bytes: u64) -> String {
    if bytes == 0 {
        "0".into()
    } else if bytes.is_multiple_of(GI) {
        format!("{}Gi", bytes / GI)
    } else if bytes.is_multiple_of(MI) {
        format!("{}Mi", bytes / MI)
    } else if bytes.is_multiple_of(KI) {
        format!("{}Ki", bytes / KI)
    } else {
        bytes.to_string()
    }
}

/// What the node keeps for itself: capacity − overhead = allocatable.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Overhead {
    pub kube_reserved: Resources,
    pub system_reserved: Resources,
    pub eviction_threshold: Resources,
}

impl Overhead {
    pub fn total(&self) -> Resources {
        self.kube_reserved
            .add(&self.system_reserved)
            .add(&self.eviction_threshold)
    }

    /// A first approximation of the kubelet's reservations on a Talos worker,
    /// deliberately on the generous side (a node that offers more than
    /// predicted only wastes a little; one that offers less leaves pods
    /// pending and makes Karpenter launch another server):
    ///
    /// * system-reserved: Talos' worker defaults, cpu 50m, memory 384Mi,
    ///   ephemeral-storage 256Mi (`pkg/machinery/constants`).
    /// * kube-reserved (Talos sets none; this stands for the kubelet and
    ///   runtime, plus memory the kernel and firmware take before the kubelet
    ///   counts it): cpu 6% of the first thread, 1% of the second, 0.5% of the
    ///   third and fourth, 0.25% of the rest; memory 255Mi + 11Mi × max pods
    ///   + 1.5% of physical memory; ephemeral-storage 1Gi.
    /// * eviction threshold: the kubelet's hard defaults, memory.available
    ///   100Mi and nodefs.available 10%.
    ///
    /// The catalog issue replaces this with what registered nodes report.
    pub fn estimate(capacity: &Resources) -> Overhead {
        let threads = capacity.cpu_millis / 1000;
        let kube_cpu = tiered_cpu_reservation_millis(threads);
        let kube_memory = 255 * MI + 11 * MI * capacity.pods + capacity.memory_bytes * 15 / 1000;
        Overhead {
            kube_reserved: Resources {
                cpu_millis: kube_cpu,
                memory_bytes: round_up(kube_memory, MI),
                ephemeral_storage_bytes: GI,
                ..Default::default()
            },
            system_reserved: Resources {
                cpu_millis: 50,
                memory_bytes: 384 * MI,
                ephemeral_storage_bytes: 256 * MI,
                ..Default::default()
            },
            eviction_threshold: Resources {
                memory_bytes: 100 * MI,
                ephemeral_storage_bytes: round_up(capacity.ephemeral_storage_bytes / 10, MI),
                ..Default::default()
            },
        }
    }
}

fn round_up(value: u64, unit: u64) -> u64 {
    value.div_ceil(unit) * unit
}

/// 6% of the first thread, 1% of the second, 0.5% of the 3rd and 4th, 0.25% of
/// the rest, in millicores (rounded up).
fn tiered_cpu_reservation_millis(threads: u64) -> u64 {
    // In hundredths of a millicore to stay in integers.
    let mut hundredths: u64 = 0;
    for t in 1..=threads {
        hundredths += match t {
            1 => 6_000,
            2 => 1_000,
            3 | 4 => 500,
            _ => 250,
        };
    }
    hundredths.div_ceil(100)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quantities() {
        assert_eq!(cpu_quantity(32_000), "32");
        assert_eq!(cpu_quantity(1_250), "1250m");
        assert_eq!(bytes_quantity(256 * GI), "256Gi");
        assert_eq!(bytes_quantity(1465 * MI), "1465Mi");
        assert_eq!(bytes_quantity(1_024_209_543_168), "1000204632Ki");
        assert_eq!(bytes_quantity(1_000_000_001), "1000000001");
    }

    #[test]
    fn tiered_cpu() {
        assert_eq!(tiered_cpu_reservation_millis(1), 60);
        assert_eq!(tiered_cpu_reservation_millis(4), 80);
        // 60 + 10 + 5 + 5 + 28 * 2.5
        assert_eq!(tiered_cpu_reservation_millis(32), 150);
    }

    #[test]
    fn overhead_of_a_32_thread_256gib_server() {
        let cap = Resources {
            cpu_millis: 32_000,
            memory_bytes: 256 * GI,
            ephemeral_storage_bytes: 1_920_383_410_176,
            pods: 110,
            nvidia_gpus: 0,
        };
        let o = Overhead::estimate(&cap);
        assert_eq!(o.kube_reserved.cpu_millis, 150);
        // 255 + 1210 + ceil(262144 * 0.015 = 3932.16) Mi
        assert_eq!(o.kube_reserved.memory_bytes, (255 + 1210 + 3933) * MI);
        let alloc = cap.saturating_sub(&o.total());
        assert_eq!(alloc.cpu_millis, 32_000 - 150 - 50);
        assert_eq!(alloc.pods, 110);
        let q = alloc.to_quantities(true);
        assert_eq!(q["cpu"], "31800m");
        assert!(!q.contains_key("nvidia.com/gpu"));
    }
}
