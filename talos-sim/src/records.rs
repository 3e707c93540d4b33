//! What talos-sim records per server and exposes on `GET /_talossim/servers`
//! (`docs/simulator-contracts.md`, "talos-sim records").

use std::sync::{Arc, Mutex};

use serde::Serialize;

use crate::disk::Disk;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum OsState {
    Off,
    Rescue,
    NoBootableDevice,
    Maintenance,
    Configured,
    Running,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct DiskRecord {
    pub name: String,
    pub path: String,
    pub size_bytes: u64,
    pub image_sha256: Option<String>,
    pub image_version: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AppliedConfig {
    /// RFC 3339, wall clock of talos-sim.
    pub at: String,
    /// The request's mode as Talos names it (`AUTO`, `STAGED`...).
    pub mode: String,
    pub yaml: String,
}

/// What a VM's boot found in its user data. The value itself (it holds a
/// bootstrap token) is never recorded.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum UserDataOutcome {
    /// Booted from it.
    Accepted,
    /// The key is not set (404): maintenance mode.
    Missing,
    /// Set but blank: maintenance mode.
    Empty,
    /// Not a valid machine config: maintenance mode (`boot_error` says why).
    Refused,
    /// The metadata service did not answer; read again.
    Unreachable,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct UserDataRead {
    /// RFC 3339, wall clock of talos-sim.
    pub at: String,
    pub key: String,
    pub outcome: UserDataOutcome,
    pub bytes: usize,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ServerRecord {
    pub id: String,
    /// `metal` (Elastic Metal) or `scaleway` (an Instance).
    pub platform: &'static str,
    pub address: String,
    pub state: OsState,
    pub disk: DiskRecord,
    pub rescue_sessions: u64,
    pub commands: Vec<String>,
    pub applied_configs: Vec<AppliedConfig>,
    /// Every read of a VM's user data, one per boot that had no installed
    /// config (and per retry while the metadata service is unreachable).
    pub user_data_reads: Vec<UserDataRead>,
    pub node_name: Option<String>,
    /// Why the last normal boot found no bootable device, or why the OS
    /// could not start its services.
    pub boot_error: Option<String>,
    /// Set once emsim reported the server deleted (its disk is wiped).
    pub deleted: bool,
}

/// One server's record, shared between the services that update it.
#[derive(Debug, Clone)]
pub struct Record(Arc<Mutex<ServerRecord>>);

impl Record {
    pub fn new(id: &str) -> Self {
        Self(Arc::new(Mutex::new(ServerRecord {
            id: id.to_string(),
            platform: "metal",
            address: String::new(),
            state: OsState::Off,
            disk: DiskRecord {
                name: String::new(),
                path: String::new(),
                size_bytes: 0,
                image_sha256: None,
                image_version: None,
            },
            rescue_sessions: 0,
            commands: Vec::new(),
            applied_configs: Vec::new(),
            user_data_reads: Vec::new(),
            node_name: None,
            boot_error: None,
            deleted: false,
        })))
    }

    pub fn update<T>(&self, f: impl FnOnce(&mut ServerRecord) -> T) -> T {
        // A panic while holding the lock leaves a record that is still worth
        // reading, so poisoning is ignored.
        let mut guard = self.0.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut guard)
    }

    pub fn snapshot(&self) -> ServerRecord {
        self.update(|r| r.clone())
    }

    pub fn set_state(&self, state: OsState) {
        self.update(|r| r.state = state);
    }

    pub fn set_disk(&self, disk: &Disk) {
        self.update(|r| {
            r.disk.name = disk.name.clone();
            r.disk.path = disk.path.display().to_string();
            r.disk.size_bytes = disk.size;
        });
    }

    pub fn push_command(&self, line: &str) {
        self.update(|r| r.commands.push(line.to_string()));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_serialize_with_contract_field_names() {
        let record = Record::new("srv-1");
        record.set_state(OsState::NoBootableDevice);
        record.push_command("lsblk -dno NAME,TYPE");
        let json = serde_json::to_value(record.snapshot()).unwrap();
        assert_eq!(json["id"], "srv-1");
        assert_eq!(json["state"], "no_bootable_device");
        assert_eq!(json["commands"][0], "lsblk -dno NAME,TYPE");
        for key in [
            "address",
            "disk",
            "rescue_sessions",
            "applied_configs",
            "user_data_reads",
            "node_name",
            "platform",
        ] {
            assert!(json.get(key).is_some(), "{key} missing");
        }
        for key in [
            "name",
            "path",
            "size_bytes",
            "image_sha256",
            "image_version",
        ] {
            assert!(json["disk"].get(key).is_some(), "disk.{key} missing");
        }
    }
}
