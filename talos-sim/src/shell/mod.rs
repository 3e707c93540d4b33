//! The rescue system's shell: a strict interpreter for the command lines the
//! provider sends over SSH, with the standard tools it relies on implemented
//! against the server's disk file. Unknown commands are "command not found".

mod cmd;
mod diskwrite;
mod exec;
pub mod io;
pub mod parse;

use std::sync::Arc;

use tokio::sync::Notify;

use crate::disk::Disk;
use crate::faults::{FaultKind, Faults};
use crate::model::Machine;
use crate::timings::WriteRate;

pub use exec::{Options, run_line};

/// How the commands of one server reach the injected faults.
#[derive(Debug, Clone, Default)]
pub struct FaultHooks {
    pub server_id: String,
    pub faults: Arc<Faults>,
    /// Notified when the `ssh_drop_during_dd` fault fires: the rescue boot
    /// then cuts every SSH connection of the server.
    pub link_down: Arc<Notify>,
}

impl FaultHooks {
    pub fn armed(&self, kind: FaultKind) -> bool {
        self.faults.armed(kind, &self.server_id)
    }

    pub fn take(&self, kind: FaultKind) -> bool {
        self.faults.take(kind, &self.server_id)
    }
}

/// What the commands of one rescue system see of their machine.
#[derive(Debug, Clone)]
pub struct ShellEnv {
    pub disk: Disk,
    pub machine: Machine,
    pub hostname: String,
    pub hooks: FaultHooks,
    /// How fast the disk takes writes (`--disk-write-mb-per-s`); `None`: as
    /// fast as the host's file system.
    pub disk_write_rate: Option<WriteRate>,
}

impl ShellEnv {
    /// A rescue system without faults.
    pub fn new(disk: Disk, machine: Machine, hostname: impl Into<String>) -> Arc<Self> {
        Self::with_faults(disk, machine, hostname, FaultHooks::default())
    }

    pub fn with_faults(
        disk: Disk,
        machine: Machine,
        hostname: impl Into<String>,
        hooks: FaultHooks,
    ) -> Arc<Self> {
        Arc::new(Self {
            disk,
            machine,
            hostname: hostname.into(),
            hooks,
            disk_write_rate: None,
        })
    }

    /// Resolves a path given to `dd`, `head`, `cat`... The rescue system has
    /// no files of interest besides its devices.
    pub(crate) fn device(&self, path: &str) -> Option<Device> {
        match path {
            "/dev/null" => Some(Device::Null),
            "/dev/zero" => Some(Device::Zero),
            p if p == self.disk.dev_path() => Some(Device::Disk),
            _ => None,
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Device {
    Disk,
    Null,
    Zero,
}

#[cfg(test)]
pub(crate) mod test_support;
#[cfg(test)]
mod tests;
