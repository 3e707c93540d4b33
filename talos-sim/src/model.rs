//! emsim's event stream as talos-sim reads it (`docs/simulator-contracts.md`),
//! and the machine facts derived from a server's offer. Only the fields
//! talos-sim uses are decoded; unknown fields are ignored so that emsim can
//! grow its objects freely.

use std::net::Ipv4Addr;

use serde::Deserialize;
use sha2::{Digest, Sha256};

/// One line of `GET /_emsim/events`.
#[derive(Debug, Clone, Deserialize)]
pub struct Event {
    pub seq: u64,
    #[serde(rename = "type")]
    pub kind: String,
    #[serde(default)]
    pub at: Option<String>,
    /// What brought it about (`deliver`, `reboot`, `start`, `stop`,
    /// `delete`, `reset`); absent from older emsims.
    #[serde(default)]
    pub cause: Option<String>,
    pub server: ServerRef,
    #[serde(default)]
    pub boot_type: Option<String>,
    #[serde(default)]
    pub address: Option<String>,
    #[serde(default)]
    pub rescue_ssh_public_keys: Vec<String>,
    #[serde(default)]
    pub rescue_user: Option<String>,
    #[serde(default)]
    pub offer: Option<Offer>,
}

/// The part of the Server JSON talos-sim needs.
#[derive(Debug, Clone, Deserialize)]
pub struct ServerRef {
    pub id: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub ips: Vec<Ip>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Ip {
    pub address: String,
    #[serde(default)]
    pub version: String,
}

/// The part of the Offer JSON talos-sim needs.
#[derive(Debug, Clone, Default, Deserialize)]
pub struct Offer {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub disks: Vec<OfferDisk>,
    #[serde(default)]
    pub cpus: Vec<OfferCpu>,
    #[serde(default)]
    pub memories: Vec<OfferMemory>,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default)]
    pub gpus: Vec<OfferGpu>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct OfferGpu {
    /// `NVIDIA H100`.
    #[serde(default)]
    pub name: String,
}

#[derive(Debug, Clone, Deserialize)]
pub struct OfferDisk {
    pub capacity: u64,
    #[serde(rename = "type", default)]
    pub kind: String,
}

#[derive(Debug, Clone, Deserialize)]
pub struct OfferCpu {
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub core_count: u32,
    #[serde(default)]
    pub thread_count: u32,
}

#[derive(Debug, Clone, Deserialize)]
pub struct OfferMemory {
    pub capacity: u64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BootType {
    Normal,
    Rescue,
}

/// What an event asks talos-sim to do, validated once here so that the
/// server manager only matches on complete commands.
#[derive(Debug, Clone)]
pub enum Command {
    PowerOn(Box<PowerOn>),
    /// `cause`: the request that takes the OS down (`reboot`, `stop`,
    /// `delete`; for a VM `reboot`, `poweroff`, `terminate`), when known.
    PowerOff {
        server_id: String,
        cause: Option<String>,
    },
    Deleted {
        server_id: String,
    },
}

impl Command {
    /// The event type it comes from (`power_on`, `power_off`, `deleted`).
    pub fn kind(&self) -> &'static str {
        match self {
            Command::PowerOn(_) => "power_on",
            Command::PowerOff { .. } => "power_off",
            Command::Deleted { .. } => "deleted",
        }
    }

    pub fn server_id(&self) -> &str {
        match self {
            Command::PowerOn(on) => &on.server_id,
            Command::PowerOff { server_id, .. } | Command::Deleted { server_id } => server_id,
        }
    }
}

#[derive(Debug, Clone)]
pub struct PowerOn {
    pub server_id: String,
    pub server_name: String,
    pub boot_type: BootType,
    pub address: Ipv4Addr,
    pub rescue_ssh_public_keys: Vec<String>,
    pub rescue_user: String,
    pub machine: Machine,
    pub platform: Platform,
    /// What started this boot (`deliver`, `reboot`, `start`; for a VM
    /// `poweron`, `reboot`), when known.
    pub cause: Option<String>,
}

/// The Talos image a server boots and where its config comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Platform {
    /// An Elastic Metal server: Talos' `metal` image written on its disk
    /// from rescue, the config applied in maintenance mode.
    Metal,
    /// An Instance: Talos' `scaleway` image, the config read from the
    /// user data key `cloud-init`.
    Scaleway(VmBoot),
}

/// One boot of an Instance.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmBoot {
    pub zone: String,
    /// How many times the VM was started (poweron and reboot actions): a
    /// new number is a new boot.
    pub boot: u64,
    pub image: VmImage,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmImage {
    pub id: String,
    pub name: String,
    /// Talos version from the image name (`talos-v1.11.5-amd64`), or
    /// `unknown`.
    pub version: String,
    /// GOARCH (`amd64`, `arm64`).
    pub arch: String,
}

impl VmBoot {
    /// What Talos' `scaleway` platform reports as the node's providerID.
    pub fn provider_id(&self, server_id: &str) -> String {
        format!("scaleway://instance/{}/{server_id}", self.zone)
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum EventError {
    #[error("unknown event type {0:?}")]
    UnknownType(String),
    #[error("power_on event without {0}")]
    Missing(&'static str),
    #[error("power_on event with invalid {field}: {value:?}")]
    Invalid { field: &'static str, value: String },
}

impl Event {
    pub fn command(&self) -> Result<Command, EventError> {
        let server_id = self.server.id.clone();
        match self.kind.as_str() {
            "power_off" => Ok(Command::PowerOff {
                server_id,
                cause: self.cause.clone(),
            }),
            "deleted" => Ok(Command::Deleted { server_id }),
            "power_on" => self.power_on().map(|on| Command::PowerOn(Box::new(on))),
            other => Err(EventError::UnknownType(other.to_string())),
        }
    }

    fn power_on(&self) -> Result<PowerOn, EventError> {
        let boot_type = match self.boot_type.as_deref() {
            Some("rescue") => BootType::Rescue,
            Some("normal") => BootType::Normal,
            Some(other) => {
                return Err(EventError::Invalid {
                    field: "boot_type",
                    value: other.to_string(),
                });
            }
            None => return Err(EventError::Missing("boot_type")),
        };
        // The contract puts the address at the top level; the server's IPv4 is
        // the same address, so it is an acceptable fallback.
        let raw = self
            .address
            .clone()
            .or_else(|| {
                self.server
                    .ips
                    .iter()
                    .find(|ip| ip.version == "IPv4")
                    .map(|ip| ip.address.clone())
            })
            .ok_or(EventError::Missing("address"))?;
        let address: Ipv4Addr = raw.parse().map_err(|_| EventError::Invalid {
            field: "address",
            value: raw.clone(),
        })?;
        let offer = self.offer.clone().ok_or(EventError::Missing("offer"))?;
        let machine = Machine::from_offer(&self.server.id, &offer)?;
        Ok(PowerOn {
            server_id: self.server.id.clone(),
            server_name: self.server.name.clone(),
            boot_type,
            address,
            rescue_ssh_public_keys: self.rescue_ssh_public_keys.clone(),
            rescue_user: self
                .rescue_user
                .clone()
                .unwrap_or_else(|| "rescue".to_string()),
            machine,
            platform: Platform::Metal,
            cause: self.cause.clone(),
        })
    }
}

/// The hardware of one server as its OS sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Machine {
    pub offer_name: String,
    /// Kernel name of the install disk (`nvme0n1`, `sda`).
    pub disk_name: String,
    /// Offer disk type (`NVMe`, `SSD`, `HDD`...).
    pub disk_kind: String,
    pub disk_size: u64,
    pub threads: u32,
    pub memory_bytes: u64,
    /// `uname -m` style (`x86_64`, `riscv64`).
    pub uname_arch: String,
    pub mac: String,
    /// NVIDIA GPUs, reported as `nvidia.com/gpu` (as with NVIDIA's device
    /// plugin running).
    pub gpus: u32,
}

impl Machine {
    pub fn from_offer(server_id: &str, offer: &Offer) -> Result<Self, EventError> {
        let disk = offer
            .disks
            .first()
            .ok_or(EventError::Missing("offer disk"))?;
        let threads = offer
            .cpus
            .iter()
            .map(|c| c.thread_count.max(c.core_count))
            .sum();
        Ok(Self {
            offer_name: offer.name.clone(),
            disk_name: disk_name(&disk.kind).to_string(),
            disk_kind: disk.kind.clone(),
            disk_size: disk.capacity,
            threads,
            memory_bytes: offer.memories.iter().map(|m| m.capacity).sum(),
            uname_arch: if offer.tags.iter().any(|t| t.eq_ignore_ascii_case("riscv")) {
                "riscv64".to_string()
            } else {
                "x86_64".to_string()
            },
            mac: mac_for(server_id),
            gpus: offer.gpus.iter().filter(|g| is_nvidia(&g.name)).count() as u32,
        })
    }

    pub fn is_nvme(&self) -> bool {
        self.disk_kind.eq_ignore_ascii_case("nvme")
    }

    /// Spinning disks report `ROTA 1` in lsblk.
    pub fn is_rotational(&self) -> bool {
        matches!(self.disk_kind.to_ascii_lowercase().as_str(), "hdd" | "sata")
    }
}

/// Whether a GPU (by its name or maker) is one NVIDIA's device plugin
/// counts as `nvidia.com/gpu`.
pub fn is_nvidia(name_or_maker: &str) -> bool {
    name_or_maker.to_ascii_lowercase().contains("nvidia")
}

/// Kernel device name of the first disk of an offer: NVMe drives are
/// `nvme0n1`, everything else is behind a SATA/SAS controller as `sda`.
pub fn disk_name(kind: &str) -> &'static str {
    if kind.eq_ignore_ascii_case("nvme") {
        "nvme0n1"
    } else {
        "sda"
    }
}

/// A stable, locally administered unicast MAC derived from the server id, so
/// that the rescue system and Talos agree on the NIC across reboots.
pub fn mac_for(server_id: &str) -> String {
    let digest = Sha256::digest(server_id.as_bytes());
    let mut bytes = [0u8; 6];
    bytes.copy_from_slice(&digest[..6]);
    bytes[0] = (bytes[0] & 0xfc) | 0x02;
    bytes
        .iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

#[cfg(test)]
mod tests {
    use super::*;

    const POWER_ON: &str = r#"{"seq": 12, "type": "power_on", "at": "2026-11-22T10:00:00.000000Z",
        "server": {"id": "11111111-2222-3333-4444-555555555555", "name": "node-a", "status": "ready",
                   "ips": [{"id": "x", "address": "127.77.0.10", "version": "IPv4"}]},
        "boot_type": "rescue", "address": "127.77.0.10",
        "rescue_ssh_public_keys": ["ssh-ed25519 AAAA"], "rescue_user": "rescue",
        "offer": {"name": "EM-I215E-NVME", "disks": [{"capacity": 1920383410176, "type": "NVMe"},
                  {"capacity": 1920383410176, "type": "NVMe"}],
                  "cpus": [{"name": "AMD EPYC 7313P", "core_count": 16, "thread_count": 32}],
                  "memories": [{"capacity": 137438953472}, {"capacity": 137438953472}]}}"#;

    #[test]
    fn power_on_event_becomes_a_command() {
        let event: Event = serde_json::from_str(POWER_ON).unwrap();
        let Command::PowerOn(on) = event.command().unwrap() else {
            panic!("not a power_on")
        };
        assert_eq!(on.boot_type, BootType::Rescue);
        assert_eq!(on.address, Ipv4Addr::new(127, 77, 0, 10));
        assert_eq!(on.rescue_user, "rescue");
        assert_eq!(on.machine.disk_name, "nvme0n1");
        assert_eq!(on.machine.disk_size, 1_920_383_410_176);
        assert_eq!(on.machine.threads, 32);
        assert_eq!(on.machine.memory_bytes, 274_877_906_944);
        assert_eq!(on.cause, None, "an emsim that does not say");
        let with_cause = POWER_ON.replace(
            r#""type": "power_on","#,
            r#""type": "power_on", "cause": "reboot","#,
        );
        let event: Event = serde_json::from_str(&with_cause).unwrap();
        let Command::PowerOn(on) = event.command().unwrap() else {
            panic!("not a power_on")
        };
        assert_eq!(on.cause.as_deref(), Some("reboot"));
        let off: Event = serde_json::from_str(
            r#"{"seq":13,"type":"power_off","cause":"reboot","server":{"id":"a"}}"#,
        )
        .unwrap();
        assert!(matches!(
            off.command().unwrap(),
            Command::PowerOff { cause: Some(c), .. } if c == "reboot"
        ));
    }

    #[test]
    fn nvidia_gpus_of_an_offer_are_counted() {
        let mut event: Event = serde_json::from_str(POWER_ON).unwrap();
        let Command::PowerOn(on) = event.command().unwrap() else {
            panic!("not a power_on")
        };
        assert_eq!(on.machine.gpus, 0);
        assert_eq!(on.platform, Platform::Metal);
        event.offer.as_mut().unwrap().gpus = serde_json::from_str(
            r#"[{"name": "NVIDIA H100", "vram": 80000000000}, {"name": "NVIDIA H100", "vram": 80000000000}]"#,
        )
        .unwrap();
        let Command::PowerOn(on) = event.command().unwrap() else {
            panic!("not a power_on")
        };
        assert_eq!(on.machine.gpus, 2);
    }

    #[test]
    fn power_on_without_offer_is_rejected() {
        let mut event: Event = serde_json::from_str(POWER_ON).unwrap();
        event.offer = None;
        assert_eq!(event.command().unwrap_err(), EventError::Missing("offer"));
    }

    #[test]
    fn unknown_event_types_are_reported() {
        let event: Event =
            serde_json::from_str(r#"{"seq":1,"type":"exploded","server":{"id":"a"}}"#).unwrap();
        assert_eq!(
            event.command().unwrap_err(),
            EventError::UnknownType("exploded".into())
        );
    }

    #[test]
    fn disk_names_follow_the_disk_type() {
        assert_eq!(disk_name("NVMe"), "nvme0n1");
        assert_eq!(disk_name("SSD"), "sda");
        assert_eq!(disk_name("HDD"), "sda");
    }

    #[test]
    fn macs_are_stable_and_locally_administered() {
        let a = mac_for("server-a");
        assert_eq!(a, mac_for("server-a"));
        assert_ne!(a, mac_for("server-b"));
        let first = u8::from_str_radix(&a[..2], 16).unwrap();
        assert_eq!(first & 0x03, 0x02);
        assert_eq!(a.split(':').count(), 6);
    }
}
