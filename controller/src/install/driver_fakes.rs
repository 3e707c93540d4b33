//! Recording fakes of the engine's ports for the driver tests: a rescue
//! system with a disk that can be told to lose sessions or corrupt writes, a
//! Talos that can stay down for whole boots, and the Kubernetes side.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;

use super::*;
use crate::rescue::{CommandOutput, RescueError, RescueSession, SshTarget};
use crate::scaleway::fake::{FakeElasticMetal, Op};
use crate::scaleway::{BootType, RescueServer, Server, ServerStatus};
use crate::talos::{TalosError, TalosVersion};

pub const URL: &str = "https://factory.talos.dev/image/376567988ad3/v1.13.9/metal-amd64.raw.xz";
pub const IMAGE_SHA: &str = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";
pub const CORRUPT_SHA: &str = "60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752";
pub const HOST_KEY: &str = "SHA256:47DEQpj8HBSa+/TImW+5JCeuQeRkm5NMpJWZG3hSuFU";
pub const IMAGE_BYTES: u64 = 1_306_525_696;
const IP_LINK: &str = "1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue state UNKNOWN mode DEFAULT group default qlen 1000\\    link/loopback 00:00:00:00:00:00 brd 00:00:00:00:00:00\n2: eth0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc mq state UP mode DEFAULT group default qlen 1000\\    link/ether 52:54:00:aa:bb:cc brd ff:ff:ff:ff:ff:ff\n";

/// What the fake disk and its faults hold, shared by the sessions.
#[derive(Default)]
pub struct Disk {
    /// Writes still to come that lose the session halfway.
    pub drop_writes: u32,
    /// Writes still to come whose bytes land corrupted on the disk.
    pub corrupt_writes: u32,
    /// The last write landed corrupted.
    corrupt: bool,
}

/// Rescue system: refuses connections until `reachable_after` attempts, then
/// answers the standard commands, presenting `host_key`.
pub struct FakeRescue {
    pub reachable_after: Option<usize>,
    pub host_key: Mutex<String>,
    /// (target, private key, trusted host key) of every connect.
    pub connects: Mutex<Vec<(SshTarget, String, Option<String>)>>,
    pub commands: Arc<Mutex<Vec<String>>>,
    pub disk: Arc<Mutex<Disk>>,
}

impl Default for FakeRescue {
    fn default() -> Self {
        FakeRescue {
            reachable_after: None,
            host_key: Mutex::new(HOST_KEY.to_string()),
            connects: Mutex::default(),
            commands: Arc::default(),
            disk: Arc::default(),
        }
    }
}

impl FakeRescue {
    pub fn reachable() -> Self {
        FakeRescue {
            reachable_after: Some(0),
            ..Default::default()
        }
    }

    pub fn commands(&self) -> Vec<String> {
        self.commands.lock().unwrap().clone()
    }

    pub fn writes(&self) -> usize {
        self.commands()
            .iter()
            .filter(|c| c.starts_with("set -o pipefail; curl"))
            .count()
    }
}

#[async_trait]
impl RescueShell for FakeRescue {
    async fn connect(
        &self,
        target: &SshTarget,
        private_key: &str,
        trusted_host_key: Option<&str>,
    ) -> Result<Box<dyn RescueSession>, RescueError> {
        let mut connects = self.connects.lock().unwrap();
        connects.push((
            target.clone(),
            private_key.to_string(),
            trusted_host_key.map(str::to_string),
        ));
        let presented = self.host_key.lock().unwrap().clone();
        match self.reachable_after {
            Some(n) if connects.len() > n => {
                if let Some(trusted) = trusted_host_key.filter(|t| *t != presented) {
                    return Err(RescueError::HostKeyMismatch {
                        trusted: trusted.to_string(),
                        presented,
                    });
                }
                Ok(Box::new(FakeSession {
                    host_key: presented,
                    commands: self.commands.clone(),
                    disk: self.disk.clone(),
                }))
            }
            _ => Err(RescueError::Unreachable("connection refused".into())),
        }
    }
}

struct FakeSession {
    host_key: String,
    commands: Arc<Mutex<Vec<String>>>,
    disk: Arc<Mutex<Disk>>,
}

fn out(stdout: &str, stderr: &str) -> CommandOutput {
    CommandOutput {
        exit_status: 0,
        stdout: stdout.into(),
        stderr: stderr.into(),
    }
}

#[async_trait]
impl RescueSession for FakeSession {
    fn host_key(&self) -> &str {
        &self.host_key
    }

    async fn run(&mut self, command: &str) -> Result<CommandOutput, RescueError> {
        self.commands.lock().unwrap().push(command.to_string());
        let mut disk = self.disk.lock().unwrap();
        Ok(match command {
            "lsblk -dno NAME,TYPE" => out("loop0 loop\nnvme0n1 disk\nnvme1n1 disk\n", ""),
            "ip -o link" => out(IP_LINK, ""),
            c if c.starts_with("set -o pipefail; curl") => {
                if disk.drop_writes > 0 {
                    disk.drop_writes -= 1;
                    return Err(RescueError::SessionLost("connection reset by peer".into()));
                }
                disk.corrupt = disk.corrupt_writes > 0;
                disk.corrupt_writes = disk.corrupt_writes.saturating_sub(1);
                out(
                    &format!("{IMAGE_SHA}  -\n"),
                    &format!(
                        "311+1 records in\n311+1 records out\n{IMAGE_BYTES} bytes (1.3 GB, 1.2 GiB) copied, 6.5 s, 200 MB/s\n"
                    ),
                )
            }
            c if c.contains(&format!("count={IMAGE_BYTES} status=none | sha256sum")) => {
                let hash = if disk.corrupt { CORRUPT_SHA } else { IMAGE_SHA };
                out(&format!("{hash}  -\n"), "")
            }
            _ => out("", ""),
        })
    }

    async fn close(self: Box<Self>) {}
}

/// Talos: down for the first `down_for` probes, and for the first
/// `never_up_boots` normal boots; then in maintenance mode until configured.
#[derive(Default)]
pub struct FakeTalos {
    pub down_for: usize,
    pub never_up_boots: usize,
    /// The server already runs Talos (a standby server): its boot counts as
    /// one normal boot that no reboot call of the test made.
    pub booted: bool,
    pub em: Mutex<Option<Arc<FakeElasticMetal>>>,
    pub probes: Mutex<usize>,
    pub applied: Mutex<Vec<(String, String)>>,
}

impl FakeTalos {
    fn normal_boots(&self) -> usize {
        let em = self.em.lock().unwrap();
        em.as_ref().map_or(0, |em| {
            em.calls()
                .iter()
                .filter(|c| c.op == Op::RebootServer && c.boot_type == Some(BootType::Normal))
                .count()
        })
    }
}

#[async_trait]
impl TalosMaintenance for FakeTalos {
    async fn version(&self, _addr: &str) -> Result<TalosVersion, TalosError> {
        let mut probes = self.probes.lock().unwrap();
        *probes += 1;
        let boots = self.normal_boots() + usize::from(self.booted);
        if *probes <= self.down_for || boots <= self.never_up_boots {
            return Err(TalosError::Unavailable("connection refused".into()));
        }
        Ok(TalosVersion::default())
    }

    async fn apply_configuration(
        &self,
        addr: &str,
        config: &str,
    ) -> Result<Vec<String>, TalosError> {
        self.applied
            .lock()
            .unwrap()
            .push((addr.to_string(), config.to_string()));
        Ok(vec![])
    }
}

/// Kubernetes: the Node turns Ready once Talos has a config (or always).
#[derive(Default)]
pub struct FakeNodes {
    pub talos: Arc<FakeTalos>,
    pub always_ready: bool,
    /// Saves still to come that fail.
    pub failing_saves: Mutex<u32>,
    pub deleted: Mutex<Vec<(String, String)>>,
    pub progress: Mutex<Vec<Progress>>,
    /// (claim, phase) of every save, in order.
    pub saved_by: Mutex<Vec<(String, Phase)>>,
    /// Reads of a Node's readiness.
    pub readiness_reads: Mutex<usize>,
    pub events: Mutex<Vec<InstallEvent>>,
    /// Claims whose bootstrap token was released.
    pub joined: Mutex<Vec<String>>,
    /// Nodes whose `uninitialized` taint was removed.
    pub initialized: Mutex<Vec<String>>,
    /// Taint removals still to come that fail (retryably).
    pub failing_initializes: Mutex<u32>,
    /// Every side effect in order: `save:<phase>`, `initialize:<node>`,
    /// `release:<claim>`.
    pub log: Mutex<Vec<String>>,
}

impl FakeNodes {
    pub fn events(&self) -> Vec<(String, bool, String)> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .map(|e| (e.reason.clone(), e.warning, e.message.clone()))
            .collect()
    }

    pub fn reasons(&self) -> Vec<String> {
        self.events().into_iter().map(|(r, _, _)| r).collect()
    }

    pub fn saved_phases(&self) -> Vec<Phase> {
        let mut phases: Vec<Phase> = Vec::new();
        for p in self.progress.lock().unwrap().iter() {
            let phase = p.phase.expect("every save has a phase");
            if phases.last() != Some(&phase) {
                phases.push(phase);
            }
        }
        phases
    }

    pub fn last_progress(&self) -> Progress {
        self.progress
            .lock()
            .unwrap()
            .last()
            .cloned()
            .expect("saved")
    }
}

#[async_trait]
impl NodePort for FakeNodes {
    async fn node_ready(&self, _node_name: &str) -> Result<Option<bool>, NodePortError> {
        *self.readiness_reads.lock().unwrap() += 1;
        Ok(Some(
            self.always_ready || !self.talos.applied.lock().unwrap().is_empty(),
        ))
    }

    async fn delete_node_claim(&self, name: &str, reason: &str) -> Result<(), NodePortError> {
        self.deleted
            .lock()
            .unwrap()
            .push((name.to_string(), reason.to_string()));
        Ok(())
    }

    async fn save_progress(&self, claim: &str, progress: &Progress) -> Result<(), NodePortError> {
        let mut failing = self.failing_saves.lock().unwrap();
        if *failing > 0 {
            *failing -= 1;
            return Err(NodePortError::Unavailable("etcd leader changed".into()));
        }
        self.progress.lock().unwrap().push(progress.clone());
        if let Some(phase) = progress.phase {
            self.log.lock().unwrap().push(format!("save:{phase}"));
            self.saved_by
                .lock()
                .unwrap()
                .push((claim.to_string(), phase));
        }
        Ok(())
    }

    async fn event(&self, _claim: &str, event: InstallEvent) {
        self.events.lock().unwrap().push(event);
    }

    async fn initialize_node(&self, node_name: &str) -> Result<(), NodePortError> {
        let mut failing = self.failing_initializes.lock().unwrap();
        if *failing > 0 {
            *failing -= 1;
            return Err(NodePortError::Unavailable(
                "409 the object has been modified".into(),
            ));
        }
        self.initialized.lock().unwrap().push(node_name.to_string());
        self.log
            .lock()
            .unwrap()
            .push(format!("initialize:{node_name}"));
        Ok(())
    }

    async fn release_token(&self, claim: &str) -> Result<(), NodePortError> {
        self.joined.lock().unwrap().push(claim.to_string());
        self.log.lock().unwrap().push(format!("release:{claim}"));
        Ok(())
    }
}

#[derive(Default)]
pub struct FakeCapacity {
    pub unavailable: Mutex<Vec<(String, String)>>,
}

impl CapacityPort for FakeCapacity {
    fn mark_unavailable(&self, offer: &str, zone: &str) {
        self.unavailable
            .lock()
            .unwrap()
            .push((offer.to_string(), zone.to_string()));
    }
}

pub struct World {
    pub engine: InstallEngine,
    pub em: Arc<FakeElasticMetal>,
    pub rescue: Arc<FakeRescue>,
    pub talos: Arc<FakeTalos>,
    pub nodes: Arc<FakeNodes>,
    pub capacity: Arc<FakeCapacity>,
}

/// Server `srv-1`, `delivering`, no address yet.
pub fn delivering_server() -> Server {
    Server {
        id: "srv-1".into(),
        organization_id: String::new(),
        project_id: "proj".into(),
        name: "default-abc12".into(),
        description: String::new(),
        status: ServerStatus::Delivering,
        offer_id: "offer-1".into(),
        offer_name: "EM-A115X-SSD".into(),
        tags: vec![],
        ips: vec![],
        boot_type: BootType::Normal,
        zone: "fr-par-2".into(),
        rescue_server: None,
        created_at: String::new(),
        updated_at: String::new(),
    }
}

pub fn world(rescue: FakeRescue, talos: FakeTalos) -> World {
    world_with(rescue, talos, false)
}

pub fn world_with(rescue: FakeRescue, talos: FakeTalos, always_ready: bool) -> World {
    world_of(rescue, talos, always_ready, None)
}

/// A world whose engine reaches Private Networks through `networks`.
pub fn world_of(
    rescue: FakeRescue,
    talos: FakeTalos,
    always_ready: bool,
    networks: Option<Arc<dyn crate::scaleway::private_network::PrivateNetworks>>,
) -> World {
    let em = Arc::new(FakeElasticMetal::new());
    em.insert_server(delivering_server());
    *talos.em.lock().unwrap() = Some(em.clone());
    let rescue = Arc::new(rescue);
    let talos = Arc::new(talos);
    let nodes = Arc::new(FakeNodes {
        talos: talos.clone(),
        always_ready,
        ..Default::default()
    });
    let capacity = Arc::new(FakeCapacity::default());
    let settings = InstallSettings {
        poll_interval: Duration::from_secs(10),
        probe_interval: Duration::from_secs(2),
        ssh_port: 2222,
        talos_port: 50000,
        ..InstallSettings::default()
    };
    let engine = InstallEngine::new(EngineDeps {
        elastic_metal: em.clone(),
        capacity: capacity.clone(),
        rescue: rescue.clone(),
        talos: talos.clone(),
        nodes: nodes.clone(),
        networks,
        settings,
    });
    World {
        engine,
        em,
        rescue,
        talos,
        nodes,
        capacity,
    }
}

impl World {
    /// Puts the server in rescue mode with an address, as after a rescue reboot.
    pub fn in_rescue(&self) {
        self.em.deliver("srv-1");
        let mut server = self.em.server("srv-1").unwrap();
        server.boot_type = BootType::Rescue;
        server.rescue_server = Some(RescueServer {
            user: "rescue".into(),
            password: "pw".into(),
        });
        self.em.insert_server(server);
    }

    /// Boot types of the reboots issued, in order.
    pub fn reboots(&self) -> Vec<BootType> {
        self.em
            .calls()
            .into_iter()
            .filter(|c| c.op == Op::RebootServer)
            .filter_map(|c| c.boot_type)
            .collect()
    }
}

/// Lets simulated time run until the install reaches `phase` (or a day passes).
pub async fn wait_for(engine: &InstallEngine, phase: Phase) {
    for _ in 0..(24 * 3600) {
        if engine.phase("srv-1") == Some(phase) {
            return;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    panic!(
        "install stuck in {:?}, wanted {phase:?}",
        engine.phase("srv-1")
    );
}

/// Lets the cleanup after a failure (or the token release after a join) run.
pub async fn settle() {
    tokio::time::sleep(Duration::from_secs(3600)).await;
}
