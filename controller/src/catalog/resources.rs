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

    pub fn add(&self, other: &Resources) -> Resources {
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

/// Parses a Kubernetes quantity (`31800m`, `32`, `256Gi`, `1000204632Ki`,
/// `110`, `1e3`) into thousandths of its unit, rounding down. `None` for
/// anything else (negative, malformed, too large).
pub fn parse_quantity_milli(text: &str) -> Option<u128> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, suffix) = text.split_at(split);
    let (int_part, frac_part) = number.split_once('.').unwrap_or((number, ""));
    if int_part.is_empty() && frac_part.is_empty() {
        return None;
    }
    // value = digits / 10^scale
    let digits: u128 = format!("{int_part}{frac_part}").parse().ok()?;
    let scale = frac_part.len() as u32;
    let (multiplier, exp10): (u128, i32) = match suffix {
        "" => (1, 0),
        "m" => (1, -3),
        "k" => (1, 3),
        "M" => (1, 6),
        "G" => (1, 9),
        "T" => (1, 12),
        "P" => (1, 15),
        "E" => (1, 18),
        "Ki" => (1 << 10, 0),
        "Mi" => (1 << 20, 0),
        "Gi" => (1 << 30, 0),
        "Ti" => (1 << 40, 0),
        "Pi" => (1 << 50, 0),
        "Ei" => (1 << 60, 0),
        s if s.starts_with(['e', 'E']) => (1, s[1..].parse().ok()?),
        _ => return None,
    };
    // milli = digits × multiplier × 10^(exp10 + 3 − scale)
    let exp = exp10 + 3 - scale as i32;
    let base = digits.checked_mul(multiplier)?;
    if exp >= 0 {
        base.checked_mul(10u128.checked_pow(exp as u32)?)
    } else {
        Some(base / 10u128.checked_pow((-exp) as u32)?)
    }
}

impl Resources {
    /// The resources this catalog models, read from a Node's
    /// `status.allocatable` (or capacity). Unknown resources are ignored; a
    /// malformed quantity of a known one makes the whole reading `None`.
    pub fn from_quantities<'a>(
        quantities: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> Option<Resources> {
        let mut r = Resources::default();
        for (name, value) in quantities {
            let milli = || parse_quantity_milli(value);
            let whole = || milli().and_then(|m| u64::try_from(m / 1000).ok());
            match name {
                "cpu" => r.cpu_millis = u64::try_from(milli()?).ok()?,
                "memory" => r.memory_bytes = whole()?,
                "ephemeral-storage" => r.ephemeral_storage_bytes = whole()?,
                "pods" => r.pods = whole()?,
                "nvidia.com/gpu" => r.nvidia_gpus = whole()?,
                _ => {}
            }
        }
        Some(r)
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

/// The kubelet's own reservations on our nodes, as the provider wants Talos
/// to configure them (`machine.kubelet.extraConfig`: `maxPods`,
/// `kubeReserved`, `systemReserved`, `evictionHard`). The catalog's overhead
/// is built from the same numbers, so the scheduler's promise and the Node's
/// allocatable agree by construction rather than by luck.
///
/// * system-reserved: Talos' worker defaults (cpu 50m, memory 384Mi,
///   ephemeral-storage 256Mi, `pkg/machinery/constants`), written out
///   explicitly so that a Talos upgrade changing them cannot silently break
///   the promise.
/// * kube-reserved (Talos sets none by default): cpu 6% of the first thread,
///   1% of the second, 0.5% of the 3rd and 4th, 0.25% of the rest; memory
///   255Mi + 11Mi × max pods; ephemeral-storage 1Gi. These are the formulas
///   GKE and EKS use, sized for the kubelet and containerd.
/// * eviction-hard: the kubelet's defaults, `memory.available` 100Mi and
///   `nodefs.available` 10%.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct KubeletReservations {
    pub max_pods: u64,
    pub kube_reserved: Resources,
    pub system_reserved: Resources,
    /// `evictionHard.memory.available`, bytes.
    pub eviction_memory_available: u64,
    /// `evictionHard.nodefs.available`, percent of the ephemeral disk.
    pub eviction_nodefs_available_percent: u64,
}

/// Kubernetes' default and Karpenter's assumption without a kubelet override.
pub const MAX_PODS: u64 = 110;

/// Share of the installed memory (per mille) that the Node does not report as
/// capacity at all: the kernel, its page tables and firmware reservations
/// come off `MemTotal` before the kubelet counts anything. Measured on EM
/// servers between 1.1% and 1.4%; 1.5% keeps the promise on the safe side
/// until registered Nodes report the real figure (see
/// [`Overhead::at_most_allocatable`]).
const KERNEL_MEMORY_PER_MILLE: u64 = 15;

impl KubeletReservations {
    pub fn for_capacity(capacity: &Resources) -> Self {
        let threads = capacity.cpu_millis / 1000;
        KubeletReservations {
            max_pods: MAX_PODS,
            kube_reserved: Resources {
                cpu_millis: tiered_cpu_reservation_millis(threads),
                memory_bytes: 255 * MI + 11 * MI * MAX_PODS,
                ephemeral_storage_bytes: GI,
                ..Default::default()
            },
            system_reserved: Resources {
                cpu_millis: 50,
                memory_bytes: 384 * MI,
                ephemeral_storage_bytes: 256 * MI,
                ..Default::default()
            },
            eviction_memory_available: 100 * MI,
            eviction_nodefs_available_percent: 10,
        }
    }

    /// `kubeReserved`, `systemReserved` and `evictionHard` as the quantity
    /// maps a KubeletConfiguration takes.
    pub fn kubelet_config_maps(&self) -> [(&'static str, BTreeMap<String, String>); 3] {
        [
            ("kubeReserved", self.kube_reserved.to_quantities(false)),
            ("systemReserved", self.system_reserved.to_quantities(false)),
            (
                "evictionHard",
                BTreeMap::from([
                    (
                        "memory.available".to_string(),
                        bytes_quantity(self.eviction_memory_available),
                    ),
                    (
                        "nodefs.available".to_string(),
                        format!("{}%", self.eviction_nodefs_available_percent),
                    ),
                ]),
            ),
        ]
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

    /// The overhead of a node with this hardware: the kubelet reservations
    /// (which Talos is configured with, [`KubeletReservations`]) plus, in
    /// kube-reserved, the memory the kernel keeps before the kubelet counts
    /// it. Deliberately on the generous side: a node that offers more than
    /// predicted only wastes a little; one that offers less leaves pods
    /// pending and makes Karpenter launch another server.
    pub fn estimate(capacity: &Resources) -> Overhead {
        let r = KubeletReservations::for_capacity(capacity);
        let kernel = round_up(capacity.memory_bytes * KERNEL_MEMORY_PER_MILLE / 1000, MI);
        Overhead {
            kube_reserved: Resources {
                memory_bytes: r.kube_reserved.memory_bytes + kernel,
                ..r.kube_reserved
            },
            system_reserved: r.system_reserved,
            eviction_threshold: Resources {
                memory_bytes: r.eviction_memory_available,
                ephemeral_storage_bytes: round_up(
                    capacity.ephemeral_storage_bytes * r.eviction_nodefs_available_percent / 100,
                    MI,
                ),
                ..Default::default()
            },
        }
    }

    /// This overhead, raised where a registered Node of the type reported a
    /// lower allocatable than `capacity − overhead`, so that the scheduler
    /// never promises more than the Node really has. Resources the Node
    /// reports as zero (GPUs before the device plugin runs) are ignored, and
    /// the overhead is never lowered: a Node offering more is harmless.
    pub fn at_most_allocatable(&self, capacity: &Resources, observed: &Resources) -> Overhead {
        let predicted = capacity.saturating_sub(&self.total());
        let extra = |observed: u64, predicted: u64| {
            if observed > 0 {
                predicted.saturating_sub(observed)
            } else {
                0
            }
        };
        let mut out = *self;
        out.kube_reserved = out.kube_reserved.add(&Resources {
            cpu_millis: extra(observed.cpu_millis, predicted.cpu_millis),
            memory_bytes: extra(observed.memory_bytes, predicted.memory_bytes),
            ephemeral_storage_bytes: extra(
                observed.ephemeral_storage_bytes,
                predicted.ephemeral_storage_bytes,
            ),
            pods: extra(observed.pods, predicted.pods),
            nvidia_gpus: extra(observed.nvidia_gpus, predicted.nvidia_gpus),
        });
        out
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
    fn reservations_render_as_kubelet_config() {
        let cap = Resources {
            cpu_millis: 4_000,
            memory_bytes: 32 * GI,
            ephemeral_storage_bytes: 1_024_209_543_168,
            pods: 110,
            nvidia_gpus: 0,
        };
        let r = KubeletReservations::for_capacity(&cap);
        let maps = BTreeMap::from(r.kubelet_config_maps());
        assert_eq!(maps["kubeReserved"]["cpu"], "80m");
        assert_eq!(maps["kubeReserved"]["memory"], "1465Mi");
        assert_eq!(maps["kubeReserved"]["ephemeral-storage"], "1Gi");
        assert_eq!(maps["systemReserved"]["memory"], "384Mi");
        assert_eq!(maps["evictionHard"]["memory.available"], "100Mi");
        assert_eq!(maps["evictionHard"]["nodefs.available"], "10%");
        assert_eq!(r.max_pods, 110);
    }

    #[test]
    fn observed_allocatable_only_lowers_the_promise() {
        let cap = Resources {
            cpu_millis: 4_000,
            memory_bytes: 32 * GI,
            ephemeral_storage_bytes: 100 * GI,
            pods: 110,
            nvidia_gpus: 2,
        };
        let o = Overhead::estimate(&cap);
        let predicted = cap.saturating_sub(&o.total());
        // The Node reports less memory, more CPU, and no GPU yet.
        let observed = Resources {
            memory_bytes: predicted.memory_bytes - 512 * MI,
            cpu_millis: 4_000,
            nvidia_gpus: 0,
            ..predicted
        };
        let corrected = o.at_most_allocatable(&cap, &observed);
        let alloc = cap.saturating_sub(&corrected.total());
        assert_eq!(alloc.memory_bytes, observed.memory_bytes);
        assert_eq!(alloc.cpu_millis, predicted.cpu_millis, "never raised");
        assert_eq!(alloc.nvidia_gpus, 2, "zero GPUs reported is ignored");
        assert_eq!(alloc.pods, 110);
    }

    #[test]
    fn parses_node_quantities() {
        assert_eq!(parse_quantity_milli("31800m"), Some(31_800));
        assert_eq!(parse_quantity_milli("32"), Some(32_000));
        assert_eq!(parse_quantity_milli("0.5"), Some(500));
        assert_eq!(parse_quantity_milli("1e3"), Some(1_000_000));
        assert_eq!(
            parse_quantity_milli("256Gi"),
            Some(256 * 1000 * u128::from(GI))
        );
        assert_eq!(parse_quantity_milli("1k"), Some(1_000_000));
        assert_eq!(parse_quantity_milli("-1"), None);
        assert_eq!(parse_quantity_milli("12 parsecs"), None);
        assert_eq!(parse_quantity_milli(""), None);
        let r = Resources::from_quantities([
            ("cpu", "3870m"),
            ("memory", "30504712Ki"),
            ("ephemeral-storage", "921184158784"),
            ("pods", "110"),
            ("hugepages-1Gi", "0"),
        ])
        .unwrap();
        assert_eq!(r.cpu_millis, 3_870);
        assert_eq!(r.memory_bytes, 30_504_712 * KI);
        assert_eq!(r.ephemeral_storage_bytes, 921_184_158_784);
        assert_eq!(r.pods, 110);
        assert_eq!(r.nvidia_gpus, 0);
        assert!(Resources::from_quantities([("memory", "lots")]).is_none());
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
