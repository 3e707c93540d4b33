//! emsim's admin list of VMs (`GET /_emsim/instance/servers`) as talos-sim
//! reads it, and the power commands its changes mean. Pure: the follower
//! fetches, [`Tracker`] compares with what it told the simulator before.
//!
//! A VM boots when it reaches `running`; each `poweron` or `reboot` action
//! starts a new boot, so the number of those actions tells a reboot apart
//! from the boot already running even when a poll missed the `starting`
//! state in between. Any other state means the OS is down (emsim moves a VM
//! to `stopping` at the poweroff, terminate or reboot call);
//! a VM missing from the list is gone.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use serde::Deserialize;

use crate::model::{Command, Machine, Platform, PowerOn, VmBoot, VmImage, is_nvidia, mac_for};

#[derive(Debug, Clone, Deserialize)]
pub struct Listing {
    pub servers: Vec<AdminVm>,
}

/// The part of an admin VM record talos-sim uses; other fields are ignored.
#[derive(Debug, Clone, Deserialize)]
pub struct AdminVm {
    pub id: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub hostname: String,
    pub zone: String,
    pub state: String,
    #[serde(default)]
    pub commercial_type: String,
    #[serde(default)]
    pub arch: String,
    #[serde(default)]
    pub image: Option<ImageRef>,
    #[serde(default)]
    pub address: Option<String>,
    #[serde(default)]
    pub actions: Vec<ActionRef>,
    #[serde(default)]
    pub hardware: Option<Hardware>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ImageRef {
    pub id: String,
    #[serde(default)]
    pub name: String,
}

#[derive(Debug, Clone, Deserialize)]
pub struct ActionRef {
    pub action: String,
}

#[derive(Debug, Clone, Deserialize)]
pub struct Hardware {
    pub ncpus: u32,
    pub ram: u64,
    #[serde(default)]
    pub gpu: u32,
    #[serde(default)]
    pub gpu_info: Option<GpuInfo>,
    #[serde(default)]
    pub root_volume_size: Option<u64>,
}

#[derive(Debug, Clone, Deserialize)]
pub struct GpuInfo {
    #[serde(default)]
    pub gpu_manufacturer: String,
    #[serde(default)]
    pub gpu_name: String,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum VmError {
    #[error("running VM without {0}")]
    Missing(&'static str),
    #[error("running VM with invalid {field}: {value:?}")]
    Invalid { field: &'static str, value: String },
}

impl AdminVm {
    /// How many boots the VM was asked for: a new number is a new boot.
    pub fn boots(&self) -> u64 {
        self.actions
            .iter()
            .filter(|a| matches!(a.action.as_str(), "poweron" | "reboot"))
            .count() as u64
    }

    /// The latest of these actions: what started or stopped the VM.
    pub fn last_action(&self, of: &[&str]) -> Option<String> {
        self.actions
            .iter()
            .rev()
            .find(|a| of.contains(&a.action.as_str()))
            .map(|a| a.action.clone())
    }

    pub fn is_running(&self) -> bool {
        self.state == "running"
    }

    /// The power-on of the boot running now.
    pub fn power_on(&self) -> Result<PowerOn, VmError> {
        let raw = self.address.clone().ok_or(VmError::Missing("address"))?;
        let address: Ipv4Addr = raw.parse().map_err(|_| VmError::Invalid {
            field: "address",
            value: raw.clone(),
        })?;
        let (goarch, uname) = match self.arch.as_str() {
            "x86_64" => ("amd64", "x86_64"),
            "arm64" => ("arm64", "aarch64"),
            other => {
                return Err(VmError::Invalid {
                    field: "arch",
                    value: other.to_string(),
                });
            }
        };
        let hardware = self.hardware.as_ref().ok_or(VmError::Missing("hardware"))?;
        let image = self.image.as_ref().ok_or(VmError::Missing("image"))?;
        let gpus = match &hardware.gpu_info {
            Some(info) if is_nvidia(&info.gpu_manufacturer) || is_nvidia(&info.gpu_name) => {
                hardware.gpu
            }
            _ => 0,
        };
        let machine = Machine {
            offer_name: self.commercial_type.clone(),
            disk_name: "sda".into(),
            disk_kind: "SBS".into(),
            disk_size: hardware.root_volume_size.unwrap_or(0),
            threads: hardware.ncpus,
            memory_bytes: hardware.ram,
            uname_arch: uname.into(),
            mac: mac_for(&self.id),
            gpus,
        };
        Ok(PowerOn {
            server_id: self.id.clone(),
            server_name: if self.hostname.is_empty() {
                self.name.clone()
            } else {
                self.hostname.clone()
            },
            boot_type: crate::model::BootType::Normal,
            address,
            rescue_ssh_public_keys: Vec::new(),
            rescue_user: String::new(),
            machine,
            cause: self.last_action(&["poweron", "reboot"]),
            platform: Platform::Scaleway(VmBoot {
                zone: self.zone.clone(),
                boot: self.boots(),
                image: VmImage {
                    id: image.id.clone(),
                    name: image.name.clone(),
                    version: talos_version(&image.name),
                    arch: goarch.into(),
                },
            }),
        })
    }
}

/// The Talos version in an image name (`talos-v1.11.5-amd64` → `v1.11.5`),
/// or `unknown`.
pub fn talos_version(image_name: &str) -> String {
    image_name
        .split(['-', '_'])
        .find(|part| {
            part.strip_prefix('v').is_some_and(|rest| {
                rest.starts_with(|c: char| c.is_ascii_digit()) && rest.contains('.')
            })
        })
        .unwrap_or("unknown")
        .to_string()
}

/// What came of one VM in one listing.
#[derive(Debug)]
pub enum Change {
    Command(Command),
    /// A running VM whose record cannot be booted; reported once per boot.
    Unreadable {
        server_id: String,
        error: VmError,
    },
}

/// What the simulator was told about each VM: `Some(boot)` while that boot
/// runs, `None` while the VM is down.
#[derive(Debug, Default)]
pub struct Tracker {
    told: BTreeMap<String, Option<u64>>,
}

impl Tracker {
    /// The commands that bring the simulator from what it was told to this
    /// listing, in listing order, deletions last.
    pub fn changes(&mut self, servers: &[AdminVm]) -> Vec<Change> {
        let mut changes = Vec::new();
        let mut listed = std::collections::BTreeSet::new();
        for vm in servers {
            listed.insert(vm.id.as_str());
            let told = self.told.get(&vm.id).copied().flatten();
            if vm.is_running() {
                let boot = vm.boots();
                if told == Some(boot) {
                    continue;
                }
                self.told.insert(vm.id.clone(), Some(boot));
                changes.push(match vm.power_on() {
                    Ok(on) => Change::Command(Command::PowerOn(Box::new(on))),
                    Err(error) => Change::Unreadable {
                        server_id: vm.id.clone(),
                        error,
                    },
                });
            } else {
                if told.is_some() {
                    changes.push(Change::Command(Command::PowerOff {
                        server_id: vm.id.clone(),
                        cause: vm.last_action(&["reboot", "poweroff", "terminate"]),
                    }));
                }
                self.told.insert(vm.id.clone(), None);
            }
        }
        let gone: Vec<String> = self
            .told
            .keys()
            .filter(|id| !listed.contains(id.as_str()))
            .cloned()
            .collect();
        for server_id in gone {
            self.told.remove(&server_id);
            changes.push(Change::Command(Command::Deleted { server_id }));
        }
        changes
    }
}

#[cfg(test)]
#[path = "listing_tests.rs"]
mod tests;
