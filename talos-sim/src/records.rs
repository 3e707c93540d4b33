//! What talos-sim records per server and exposes on `GET /_talossim/servers`
//! (`docs/simulator-contracts.md`, "talos-sim records").

use std::sync::{Arc, Mutex};

use serde::Serialize;

use crate::disk::Disk;
use crate::network::PrivateLink;

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

/// One boot of the server's OS: every power-on, and the reboot that ends an
/// install in maintenance mode.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BootEntry {
    /// RFC 3339, wall clock of talos-sim.
    pub at: String,
    /// The kernel's boot id: what the kubelet of this boot reports as the
    /// Node's `status.nodeInfo.bootID`.
    pub boot_id: String,
    /// `normal` or `rescue`.
    pub boot_type: &'static str,
    /// What started it: emsim's cause (`deliver`, `reboot`, `start`; for a
    /// VM its action `poweron` or `reboot`), `install` for the reboot into
    /// an applied config; null when emsim did not say.
    pub cause: Option<String>,
    /// When the kubelet of this boot registered (created or adopted the
    /// Node and posted its status); null while it has not.
    pub kubelet_joined_at: Option<String>,
}

/// The OS of a running server going down.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PowerOffEntry {
    /// RFC 3339, wall clock of talos-sim.
    pub at: String,
    /// What took it down: emsim's cause (`reboot`, `stop`, `delete`,
    /// `reset`; for a VM `reboot`, `poweroff`, `terminate`), or null.
    pub cause: Option<String>,
    /// The boot that ended.
    pub boot_id: Option<String>,
}

/// A fault of the OS or the kubelet that acted on this server (the rescue
/// faults show in `GET /_talossim/faults` only).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FaultFired {
    /// RFC 3339, wall clock of talos-sim.
    pub at: String,
    pub kind: &'static str,
    /// The boot it acted on.
    pub boot_id: Option<String>,
}

/// What the kubelet of the running boot reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum KubeletReport {
    /// Ready=True, heartbeats and Lease renewals.
    Ready,
    /// Ready=False (`KubeletNotReady`), heartbeats and Lease renewals.
    NotReady,
    /// Nothing at all: no status, no Lease (a wedged machine).
    Silent,
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
    /// The running boot's id; null while the server is off.
    pub boot_id: Option<String>,
    /// Every boot, oldest first.
    pub boots: Vec<BootEntry>,
    /// Every time the running OS went down, oldest first.
    pub power_offs: Vec<PowerOffEntry>,
    /// The OS and kubelet faults that acted, oldest first.
    pub faults_fired: Vec<FaultFired>,
    /// What the running kubelet reports; null when none runs.
    pub kubelet: Option<KubeletReport>,
    /// The Private Network links delivered to the configured machine (emsim's
    /// `/_emsim/private-links`), each `up` with its address or `down` with
    /// the reason; empty before the machine config is running.
    pub private_links: Vec<PrivateLink>,
    /// The address the kubelet reports as the Node's InternalIP; null while
    /// no kubelet could start.
    pub node_ip: Option<String>,
}

/// Now on talos-sim's wall clock, as records show it.
pub fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

/// A fresh kernel boot id (`/proc/sys/kernel/random/boot_id`'s format).
pub fn new_boot_id() -> String {
    let b: [u8; 16] = rand::random();
    let h = crate::image::hex(&b);
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
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
            boot_id: None,
            boots: Vec::new(),
            power_offs: Vec::new(),
            faults_fired: Vec::new(),
            kubelet: None,
            private_links: Vec::new(),
            node_ip: None,
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

    /// A new boot of the OS with a new boot id, which it returns.
    pub fn begin_boot(&self, boot_type: &'static str, cause: Option<String>) -> String {
        let boot_id = new_boot_id();
        self.update(|r| {
            r.boot_id = Some(boot_id.clone());
            r.kubelet = None;
            r.private_links.clear();
            r.node_ip = None;
            r.boots.push(BootEntry {
                at: now(),
                boot_id: boot_id.clone(),
                boot_type,
                cause,
                kubelet_joined_at: None,
            });
        });
        boot_id
    }

    /// The running OS went down.
    pub fn power_off(&self, cause: Option<String>) {
        self.update(|r| {
            r.power_offs.push(PowerOffEntry {
                at: now(),
                cause,
                boot_id: r.boot_id.take(),
            });
            r.kubelet = None;
            r.private_links.clear();
            r.node_ip = None;
            r.state = OsState::Off;
        });
    }

    /// The running boot's id.
    pub fn boot_id(&self) -> Option<String> {
        self.update(|r| r.boot_id.clone())
    }

    /// The kubelet of the running boot registered its node.
    pub fn kubelet_joined(&self, node_name: &str, report: KubeletReport) {
        self.update(|r| {
            r.state = OsState::Running;
            r.node_name = Some(node_name.to_string());
            r.kubelet = Some(report);
            let id = r.boot_id.clone();
            if let Some(boot) = r
                .boots
                .iter_mut()
                .rev()
                .find(|b| Some(&b.boot_id) == id.as_ref())
            {
                boot.kubelet_joined_at = Some(now());
            }
        });
    }

    pub fn set_kubelet(&self, report: KubeletReport) {
        self.update(|r| r.kubelet = Some(report));
    }

    /// An OS or kubelet fault acted on the running boot; `why` goes to
    /// `boot_error`.
    pub fn fault_fired(&self, kind: crate::faults::FaultKind, why: String) {
        self.update(|r| {
            r.faults_fired.push(FaultFired {
                at: now(),
                kind: kind.as_str(),
                boot_id: r.boot_id.clone(),
            });
            r.boot_error = Some(why);
        });
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
            "boot_id",
            "boots",
            "power_offs",
            "faults_fired",
            "kubelet",
            "private_links",
            "node_ip",
        ] {
            assert!(json.get(key).is_some(), "{key} missing");
        }
        record.begin_boot("normal", Some("reboot".into()));
        record.kubelet_joined("node-a", KubeletReport::Ready);
        record.fault_fired(crate::faults::FaultKind::NotReadyUntilReboot, "why".into());
        record.power_off(Some("reboot".into()));
        let json = serde_json::to_value(record.snapshot()).unwrap();
        let boot = &json["boots"][0];
        assert_eq!(boot["boot_type"], "normal");
        assert_eq!(boot["cause"], "reboot");
        assert!(boot["kubelet_joined_at"].is_string());
        assert_eq!(json["faults_fired"][0]["kind"], "not_ready_until_reboot");
        assert_eq!(json["faults_fired"][0]["boot_id"], boot["boot_id"]);
        assert_eq!(json["power_offs"][0]["boot_id"], boot["boot_id"]);
        assert_eq!(json["power_offs"][0]["cause"], "reboot");
        assert!(
            json["boot_id"].is_null() && json["kubelet"].is_null(),
            "off"
        );
        assert_eq!(json["state"], "off");
        assert_eq!(json["boot_error"], "why");
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
