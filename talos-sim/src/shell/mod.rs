//! The rescue system's shell: a strict interpreter for the command lines the
//! provider sends over SSH, with the standard tools it relies on implemented
//! against the server's disk file. Unknown commands are "command not found".

mod cmd;
mod exec;
pub mod io;
pub mod parse;

use std::sync::Arc;

use crate::disk::Disk;
use crate::model::Machine;

pub use exec::{Options, run_line};

/// What the commands of one rescue system see of their machine.
#[derive(Debug, Clone)]
pub struct ShellEnv {
    pub disk: Disk,
    pub machine: Machine,
    pub hostname: String,
}

impl ShellEnv {
    pub fn new(disk: Disk, machine: Machine, hostname: impl Into<String>) -> Arc<Self> {
        Arc::new(Self {
            disk,
            machine,
            hostname: hostname.into(),
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
