//! The fleet: one slot per server emsim told us about, each running at most
//! one boot at a time. Events are applied idempotently, so that the replay of
//! power-ons emsim sends on every (re)connection converges instead of
//! restarting servers that already run.

use std::collections::BTreeMap;
use std::net::Ipv4Addr;
use std::sync::Arc;

use russh::keys::PrivateKey;
use russh::keys::ssh_key::private::Ed25519Keypair;
use tokio::sync::{Mutex, oneshot};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

use crate::disk::Disk;
use crate::model::{BootType, Command, Platform};
use crate::os::{Boot, Settings};
use crate::records::{OsState, Record, ServerRecord};

/// How long a power-on may take to bring its services up before the next
/// event is handled anyway.
const SETTLE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

pub struct Simulator {
    settings: Arc<Settings>,
    servers: Mutex<BTreeMap<String, Slot>>,
}

struct Slot {
    record: Record,
    /// The rescue system's host key, stable across rescue boots.
    host_key: PrivateKey,
    disk: Option<Disk>,
    running: Option<Running>,
}

struct Running {
    boot_type: BootType,
    address: Ipv4Addr,
    /// For a VM, which boot this is: a new one restarts the OS.
    platform: Platform,
    cancel: CancellationToken,
    task: JoinHandle<()>,
}

impl Running {
    /// Power off: cancel everything the boot started and wait until its
    /// sockets are closed, so the next boot can bind them again.
    async fn stop(self) {
        self.cancel.cancel();
        self.task.abort();
        let _ = self.task.await;
    }
}

fn new_host_key() -> PrivateKey {
    PrivateKey::from(Ed25519Keypair::from_seed(&rand::random::<[u8; 32]>()))
}

impl Simulator {
    pub fn new(settings: Settings) -> Arc<Self> {
        Arc::new(Self {
            settings: Arc::new(settings),
            servers: Mutex::new(BTreeMap::new()),
        })
    }

    pub async fn apply(&self, command: Command) {
        let mut servers = self.servers.lock().await;
        match command {
            Command::PowerOn(on) => {
                let on = *on;
                let server_id = on.server_id.clone();
                let slot = servers.entry(on.server_id.clone()).or_insert_with(|| Slot {
                    record: Record::new(&on.server_id),
                    host_key: new_host_key(),
                    disk: None,
                    running: None,
                });
                if let Some(running) = &slot.running
                    && running.boot_type == on.boot_type
                    && running.address == on.address
                    && running.platform == on.platform
                {
                    tracing::debug!(server_id = %on.server_id, "power_on for a server already up: nothing to do");
                    return;
                }
                if let Some(running) = slot.running.take() {
                    // A new boot while one runs (a VM whose reboot was seen
                    // only as a new boot number): the old one went down.
                    running.stop().await;
                    slot.record.power_off(on.cause.clone());
                }
                let disk = Disk::new(
                    &self.settings.state_dir,
                    &on.server_id,
                    &on.machine.disk_name,
                    on.machine.disk_size,
                );
                slot.record.set_disk(&disk);
                slot.record.update(|r| {
                    r.platform = match on.platform {
                        Platform::Metal => "metal",
                        Platform::Scaleway(_) => "scaleway",
                    };
                    r.address = on.address.to_string();
                    r.deleted = false;
                    r.state = OsState::Off;
                });
                slot.disk = Some(disk.clone());
                let boot_id = slot.record.begin_boot(
                    match on.boot_type {
                        BootType::Normal => "normal",
                        BootType::Rescue => "rescue",
                    },
                    on.cause.clone(),
                );
                tracing::info!(%server_id, %boot_id, cause = ?on.cause, "booting");
                let cancel = CancellationToken::new();
                let (settled_tx, settled_rx) = oneshot::channel();
                let boot_type = on.boot_type;
                let address = on.address;
                let platform = on.platform.clone();
                let boot = Boot {
                    on,
                    disk,
                    record: slot.record.clone(),
                    host_key: slot.host_key.clone(),
                    settings: self.settings.clone(),
                    cancel: cancel.clone(),
                    settled: std::sync::Mutex::new(Some(settled_tx)),
                };
                slot.running = Some(Running {
                    boot_type,
                    address,
                    platform,
                    cancel,
                    task: tokio::spawn(boot.run()),
                });
                if tokio::time::timeout(SETTLE_TIMEOUT, settled_rx)
                    .await
                    .is_err()
                {
                    tracing::warn!(%server_id, "boot still settling, moving on");
                }
            }
            Command::PowerOff { server_id, cause } => {
                let Some(slot) = servers.get_mut(&server_id) else {
                    return;
                };
                if let Some(running) = slot.running.take() {
                    // A hard stop: the kubelet posts nothing more.
                    running.stop().await;
                    slot.record.power_off(cause.clone());
                    tracing::info!(%server_id, ?cause, "powered off");
                }
                slot.record.set_state(OsState::Off);
            }
            Command::Deleted { server_id } => {
                let Some(slot) = servers.get_mut(&server_id) else {
                    // Unknown here (talos-sim restarted since): a disk file
                    // from a previous run may still exist.
                    let disk = Disk::new(&self.settings.state_dir, &server_id, "", 0);
                    if let Err(e) = disk.wipe() {
                        tracing::warn!(%server_id, error = %e, "cannot remove the disk file of a deleted server");
                    }
                    return;
                };
                if let Some(running) = slot.running.take() {
                    running.stop().await;
                    slot.record.power_off(Some("delete".into()));
                }
                if let Some(disk) = &slot.disk
                    && let Err(e) = disk.wipe()
                {
                    tracing::warn!(%server_id, error = %e, "cannot remove the disk file of a deleted server");
                }
                slot.record.update(|r| {
                    r.state = OsState::Off;
                    r.deleted = true;
                    r.disk.image_sha256 = None;
                    r.disk.image_version = None;
                });
                tracing::info!(%server_id, "server deleted, disk wiped");
            }
        }
    }

    /// The injected failures every server consults.
    pub fn faults(&self) -> &crate::faults::Faults {
        &self.settings.faults
    }

    pub async fn records(&self) -> Vec<ServerRecord> {
        self.servers
            .lock()
            .await
            .values()
            .map(|s| s.record.snapshot())
            .collect()
    }

    /// Powers everything off and forgets every server and disk.
    pub async fn reset(&self) {
        let mut servers = self.servers.lock().await;
        for (server_id, slot) in std::mem::take(&mut *servers) {
            if let Some(running) = slot.running {
                running.stop().await;
            }
            if let Some(disk) = slot.disk
                && let Err(e) = disk.wipe()
            {
                tracing::warn!(%server_id, error = %e, "cannot remove a disk file on reset");
            }
        }
        tracing::info!("reset: all servers forgotten");
    }

    /// Powers everything off (process shutdown); disks stay.
    pub async fn shutdown(&self) {
        let mut servers = self.servers.lock().await;
        for slot in servers.values_mut() {
            if let Some(running) = slot.running.take() {
                running.stop().await;
            }
        }
    }
}

impl crate::follower::EventSink for Simulator {
    fn handle(&self, command: Command) -> impl std::future::Future<Output = ()> + Send {
        self.apply(command)
    }
}
