//! What runs on a server between a power-on and the next power-off: the
//! rescue system, or a normal boot from its disk into Talos maintenance mode,
//! then the installed node with its kubelet.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use russh::keys::PrivateKey;
use tokio::net::TcpListener;
use tokio::sync::{Notify, mpsc, oneshot, watch};
use tokio_util::sync::CancellationToken;

use crate::disk::Disk;
use crate::faults::{FaultKind, Faults, Target};
use crate::image::{BootError, ImageHeader};
use crate::instance::metadata::Metadata;
use crate::kubelet::bootstrap::{self, ClientIdentity, ClusterAccess};
use crate::kubelet::health::{self, Health};
use crate::kubelet::{self, Kubelet};
use crate::machine_config;
use crate::model::{BootType, Platform, PowerOn};
use crate::private_links::PrivateLinks;
use crate::records::{OsState, Record, new_boot_id};
use crate::shell::{FaultHooks, ShellEnv};
use crate::ssh::{RescueSsh, parse_authorized_keys};
use crate::talos_api::MaintenanceApi;
use crate::timings::WriteRate;
use crate::validator::ConfigValidator;

/// How long the kubelet waits for its CSR to be signed before it tries
/// again with a new one.
const CSR_WAIT: Duration = Duration::from_secs(60);

/// Process-wide settings of the simulated machines.
#[derive(Debug, Clone)]
pub struct Settings {
    pub state_dir: PathBuf,
    pub ssh_port: u16,
    pub talos_port: u16,
    /// Whether configured nodes run the kubelet stand-in. It joins the
    /// cluster named in the applied machine config with that config's
    /// bootstrap token; tests without a cluster turn it off.
    pub kubelet: bool,
    /// Between answering ApplyConfiguration and the "reboot" that drops the
    /// maintenance API: lets the reply reach the client.
    pub install_delay: Duration,
    /// How long ApplyConfiguration takes before anything happens (0: no wait).
    pub apply_latency: Duration,
    /// Injected failures, shared with the admin API.
    pub faults: Arc<Faults>,
    /// Talos' machinery (`talos-config validate`): every applied config is
    /// validated by it before talos-sim's own checks.
    pub config_validator: Option<ConfigValidator>,
    /// Where VMs read their user data (emsim's admin API); without it a VM
    /// stays in maintenance mode.
    pub metadata: Option<Metadata>,
    /// How fast rescue writes reach a disk (`dd of=`, `tee`); `None`: as
    /// fast as the host allows.
    pub disk_write_rate: Option<WriteRate>,
    /// How often the kubelet posts its Node's status and renews its Lease
    /// (a kubelet's 10 s; tests shorten it).
    pub kubelet_heartbeat: Duration,
    /// Where a configured machine learns which Private Network links the
    /// network delivers to it (emsim's `/_emsim/private-links`); without
    /// it a machine has none.
    pub private_links: Option<PrivateLinks>,
    /// How often a configured machine reads its private links again.
    pub links_poll: Duration,
}

impl Settings {
    /// Defaults of the `talos-sim` binary for the given state directory.
    pub fn new(state_dir: impl Into<PathBuf>) -> Self {
        Self {
            state_dir: state_dir.into(),
            ssh_port: 22,
            talos_port: 50000,
            kubelet: true,
            install_delay: Duration::from_millis(500),
            apply_latency: Duration::ZERO,
            faults: Arc::default(),
            config_validator: None,
            metadata: None,
            disk_write_rate: None,
            kubelet_heartbeat: kubelet::HEARTBEAT,
            private_links: None,
            links_poll: Duration::from_secs(1),
        }
    }
}

/// One power-on of one server.
pub struct Boot {
    pub on: PowerOn,
    pub disk: Disk,
    pub record: Record,
    pub host_key: PrivateKey,
    pub settings: Arc<Settings>,
    pub cancel: CancellationToken,
    /// Fired (or dropped) once the boot settled: its services listen, or it
    /// stopped at a dead end. Lets event handling finish a power-on before
    /// the next event, like a machine that reached `ready`.
    pub settled: std::sync::Mutex<Option<oneshot::Sender<()>>>,
}

impl Boot {
    pub async fn run(self) {
        let normal = matches!(self.on.platform, Platform::Scaleway(_))
            || self.on.boot_type == BootType::Normal;
        if normal && self.never_returns() {
            return std::future::pending().await;
        }
        match (&self.on.platform, self.on.boot_type) {
            (Platform::Scaleway(vm), _) => {
                let vm = vm.clone();
                self.cloud(vm).await
            }
            (Platform::Metal, BootType::Rescue) => self.rescue().await,
            (Platform::Metal, BootType::Normal) => self.normal().await,
        }
    }

    pub(crate) fn settle(&self) {
        if let Some(tx) = self
            .settled
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .take()
        {
            let _ = tx.send(());
        }
    }

    /// The `reboot_never_returns` fault: this boot hangs before the OS
    /// starts (nothing listens, no kubelet), until the next power-on. Aimed
    /// by node name, it knows the node from the boot before.
    fn never_returns(&self) -> bool {
        let node_name = self.record.update(|r| r.node_name.clone());
        let target = Target::node(self.server_id(), node_name.as_deref());
        if self
            .settings
            .faults
            .take_for(FaultKind::RebootNeverReturns, target)
            .is_none()
        {
            return false;
        }
        tracing::warn!(server_id = %self.server_id(), "fault reboot_never_returns: the OS does not come back");
        self.record.fault_fired(
            FaultKind::RebootNeverReturns,
            "fault reboot_never_returns: the OS did not come back from this boot".into(),
        );
        self.settle();
        true
    }

    pub(crate) fn server_id(&self) -> &str {
        &self.on.server_id
    }

    pub(crate) fn fail(&self, message: String) {
        tracing::error!(server_id = %self.server_id(), error = %message, "server OS failed");
        self.record.update(|r| r.boot_error = Some(message));
    }

    async fn bind(&self, port: u16, what: &str) -> Option<TcpListener> {
        let addr = SocketAddr::from((self.on.address, port));
        match TcpListener::bind(addr).await {
            Ok(listener) => Some(listener),
            Err(e) => {
                self.fail(format!("cannot listen for {what} on {addr}: {e}"));
                None
            }
        }
    }

    async fn rescue(self) {
        if let Err(e) = self.disk.ensure() {
            self.fail(format!(
                "cannot create the disk file {}: {e}",
                self.disk.path.display()
            ));
        }
        let Some(listener) = self.bind(self.settings.ssh_port, "rescue SSH").await else {
            return;
        };
        self.record.update(|r| {
            r.state = OsState::Rescue;
            r.boot_error = None;
        });
        tracing::info!(server_id = %self.server_id(), address = %self.on.address, "booted into rescue");
        self.settle();
        let hostname = if self.on.server_name.is_empty() {
            "rescue".to_string()
        } else {
            self.on.server_name.clone()
        };
        let hooks = FaultHooks {
            server_id: self.on.server_id.clone(),
            faults: self.settings.faults.clone(),
            link_down: Arc::new(Notify::new()),
        };
        let env = Arc::new(ShellEnv {
            disk: self.disk.clone(),
            machine: self.on.machine.clone(),
            hostname,
            hooks: hooks.clone(),
            disk_write_rate: self.settings.disk_write_rate,
        });
        // The listening socket outlives a network cut, as a real server's
        // does: only the connections die, so a client that reconnects right
        // after the cut is answered (rebinding left a moment where it was
        // refused, which made the fault's own test flaky).
        loop {
            let ssh = RescueSsh {
                server_id: self.on.server_id.clone(),
                user: self.on.rescue_user.clone(),
                authorized: parse_authorized_keys(
                    &self.on.server_id,
                    &self.on.rescue_ssh_public_keys,
                ),
                host_key: self.host_key.clone(),
                env: env.clone(),
                record: self.record.clone(),
            };
            // The connections of this stretch of network uptime.
            let link = self.cancel.child_token();
            tokio::select! {
                _ = ssh.serve(&listener, link.clone()) => return,
                _ = hooks.link_down.notified() => {}
            }
            // The `ssh_drop_during_dd` fault: every connection dies at once,
            // as in a network cut, and the server stays reachable afterwards.
            link.cancel();
            tracing::warn!(server_id = %self.server_id(), "rescue network dropped: SSH connections cut");
        }
    }

    async fn normal(self) {
        let disk = self.disk.clone();
        let verdict = tokio::task::spawn_blocking(move || disk.verify_image())
            .await
            .unwrap_or_else(|e| Err(BootError::Io(e.to_string())));
        let header = match verdict {
            Ok(header) => header,
            Err(e) => {
                tracing::info!(server_id = %self.server_id(), reason = %e, "no bootable device");
                self.record.update(|r| {
                    r.state = OsState::NoBootableDevice;
                    r.boot_error = Some(e.to_string());
                    r.disk.image_sha256 = None;
                    r.disk.image_version = None;
                });
                self.settle();
                return;
            }
        };
        self.record.update(|r| {
            r.disk.image_sha256 = Some(header.payload_sha256.clone());
            r.disk.image_version = Some(header.version.clone());
            r.boot_error = None;
        });
        let installed = self.disk.installed_config().unwrap_or_else(|e| {
            tracing::warn!(server_id = %self.server_id(), error = %e, "cannot read the installed config");
            None
        });
        let yaml = match installed {
            Some(yaml) => yaml,
            None => match self.maintenance_mode(&header).await {
                Some(yaml) => yaml,
                None => return,
            },
        };
        self.record.set_state(OsState::Configured);
        self.settle();
        let cfg = match machine_config::parse(&yaml) {
            Ok(cfg) => cfg,
            Err(e) => return self.fail(format!("the installed machine config is invalid: {e}")),
        };
        self.join_cluster(cfg, &header).await;
    }

    /// Maintenance mode, unless the `maintenance_never_up` fault hangs the
    /// boot before the API starts; the config applied there, once installed.
    pub(crate) async fn maintenance_mode(&self, header: &ImageHeader) -> Option<String> {
        if self
            .settings
            .faults
            .take(FaultKind::MaintenanceNeverUp, self.server_id())
        {
            // Hung before apid started: nothing listens, nothing changes.
            self.record.fault_fired(
                FaultKind::MaintenanceNeverUp,
                "fault maintenance_never_up: the Talos API did not start".into(),
            );
            self.settle();
            return std::future::pending().await;
        }
        self.maintenance(header).await
    }

    /// Serves the maintenance API until a config is applied; returns it
    /// once the node has "installed" it (the API is gone by then).
    async fn maintenance(&self, header: &ImageHeader) -> Option<String> {
        let listener = self.bind(self.settings.talos_port, "the Talos API").await?;
        self.record.set_state(OsState::Maintenance);
        tracing::info!(server_id = %self.server_id(), version = %header.version, "booted Talos in maintenance mode");
        self.settle();
        let (applied_tx, mut applied_rx) = mpsc::channel(1);
        let api = MaintenanceApi::new(
            &self.on.server_id,
            self.on.address,
            &header.version,
            &header.arch,
            &header.payload_sha256,
            self.disk.clone(),
            self.record.clone(),
            applied_tx,
        )
        .with_validator(self.settings.config_validator.clone())
        .with_apply_latency(self.settings.apply_latency)
        .with_platform(match self.on.platform {
            Platform::Metal => "metal",
            Platform::Scaleway(_) => "scaleway",
        });
        let stop = self.cancel.child_token();
        let mut server = Box::pin(api.serve(listener, stop.clone()));
        let applied = tokio::select! {
            result = &mut server => {
                if let Err(e) = result {
                    self.fail(format!("maintenance API failed: {e}"));
                }
                return None;
            }
            Some(applied) = applied_rx.recv() => applied,
        };
        let _ = tokio::time::timeout(self.settings.install_delay, &mut server).await;
        // The "reboot": the listener and every connection go away.
        stop.cancel();
        drop(server);
        if let Err(e) = self.disk.install_config(&applied.yaml) {
            self.fail(format!("cannot install the machine config: {e}"));
            return None;
        }
        // Talos reboots into the installed system: a new kernel boot.
        self.record.begin_boot("normal", Some("install".into()));
        tracing::info!(server_id = %self.server_id(), "installed Talos and rebooted with the applied config");
        Some(applied.yaml)
    }

    pub(crate) async fn join_cluster(
        &self,
        mut cfg: machine_config::NodeConfig,
        header: &ImageHeader,
    ) {
        // Talos brings the network up first; the kubelet waits for a node IP.
        let (node_ip, links) = self.network_up(&cfg).await;
        if !self.settings.kubelet {
            self.fail("kubelet not started: disabled in this simulator".into());
            return std::future::pending().await;
        }
        let access = match ClusterAccess::from_config(&cfg) {
            Ok(access) => access,
            Err(e) => {
                self.fail(format!("kubelet cannot start: {e}"));
                return std::future::pending().await;
            }
        };
        let boot_id = self.record.boot_id().unwrap_or_else(new_boot_id);
        let mut facts = kubelet::facts(
            &cfg,
            &self.on.server_id,
            node_ip,
            &header.arch,
            &header.version,
            &self.on.machine,
            &boot_id,
        );
        if let Platform::Scaleway(vm) = &self.on.platform {
            crate::instance::platform_identity(
                vm,
                &self.on.server_id,
                &self.on.server_name,
                &mut cfg,
                &mut facts,
            );
        }
        let never_ready = self
            .settings
            .faults
            .take_for(
                FaultKind::NeverReady,
                Target::node(self.server_id(), Some(&facts.name)),
            )
            .is_some();
        let initial = if never_ready {
            Health::NotReady(kubelet::node::NOT_READY_MESSAGE.into())
        } else {
            Health::Ready
        };
        let (health_tx, health_rx) = watch::channel(initial.clone());
        let mut identity = self.stored_identity();
        let mut backoff = Duration::from_millis(500);
        let kubelet = loop {
            match self
                .join_once(&access, &cfg, &facts, &health_rx, &mut identity)
                .await
            {
                Ok(k) => break k,
                Err(e) => {
                    if e.is_unauthorized() && identity.take().is_some() {
                        // The cluster no longer trusts this certificate:
                        // bootstrap again, as a kubelet with an invalid
                        // client certificate does.
                        let _ = self.disk.forget_kubelet_pki();
                    }
                    // Retried: the API server may be late, the token not
                    // created yet, or the Node held by another machine.
                    tracing::warn!(server_id = %self.server_id(), error = %e, "kubelet registration failed");
                    self.record.update(|r| {
                        r.boot_error = Some(format!("kubelet registration failed: {e}"))
                    });
                    tokio::time::sleep(backoff).await;
                    backoff = (backoff * 2).min(Duration::from_secs(10));
                }
            }
        };
        let node_name = kubelet.node_name().to_string();
        self.record.update(|r| r.boot_error = None);
        self.record.kubelet_joined(&node_name, initial.report());
        if never_ready {
            self.record.fault_fired(
                FaultKind::NeverReady,
                "fault never_ready: the node reports NotReady".into(),
            );
        }
        tracing::info!(server_id = %self.server_id(), node = %node_name, %boot_id, ready = !never_ready, "node joined the cluster");
        tokio::join!(
            kubelet.run(),
            health::follow_faults(
                &self.settings.faults,
                self.server_id(),
                &node_name,
                &self.record,
                &health_tx,
            ),
            self.follow_links(&cfg, links),
        );
    }

    /// The client certificate a previous boot of this install obtained.
    fn stored_identity(&self) -> Option<ClientIdentity> {
        match self.disk.kubelet_pki() {
            Ok(pem) => pem.as_deref().and_then(ClientIdentity::from_pem),
            Err(e) => {
                tracing::warn!(server_id = %self.server_id(), error = %e, "cannot read the kubelet's certificate");
                None
            }
        }
    }

    /// One registration attempt: TLS bootstrap when there is no client
    /// certificate yet, then create or adopt the Node as that node.
    async fn join_once(
        &self,
        access: &ClusterAccess,
        cfg: &machine_config::NodeConfig,
        facts: &kubelet::node::NodeFacts,
        health: &watch::Receiver<Health>,
        identity: &mut Option<ClientIdentity>,
    ) -> Result<Kubelet, kubelet::KubeletError> {
        let current = match identity {
            Some(id) => id.clone(),
            None => {
                let token = cfg.bootstrap_token.as_ref().ok_or_else(|| {
                    kubelet::KubeletError::Credentials("cluster.token is not set".into())
                })?;
                let id = bootstrap::bootstrap(access, token, &facts.name, CSR_WAIT).await?;
                if let Err(e) = self.disk.save_kubelet_pki(&id.to_pem()) {
                    tracing::warn!(server_id = %self.server_id(), error = %e, "cannot store the kubelet's certificate");
                }
                *identity = Some(id.clone());
                id
            }
        };
        let client = bootstrap::node_client(access, &current).await?;
        let mut k = Kubelet::connect(client, cfg.clone(), facts.clone(), health.clone())
            .await?
            .with_heartbeat(self.settings.kubelet_heartbeat);
        k.register().await?;
        Ok(k)
    }
}
