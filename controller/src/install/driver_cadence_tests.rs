//! The engine's cadence on paused time: reboots that take a while, a status
//! poll of 10 s and local probes of 2 s, and a timeline of every call the
//! engine made, to show when it noticed each change.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::install::driver_fakes::*;
use crate::install::tests_support::spec;
use crate::install::*;
use crate::rescue::{CommandOutput, RescueError, RescueSession, RescueShell, SshTarget};
use crate::scaleway::fake::FakeElasticMetal;
use crate::scaleway::{
    ApiError, BootType, CreateServerRequest, ElasticMetal, Offer, Server, ServerFilter,
    ServerStatus, SshKey, SubscriptionPeriod,
};
use crate::talos::{TalosError, TalosMaintenance, TalosVersion};

/// How long each reboot takes until the booted system answers.
const BOOT: Duration = Duration::from_secs(12);

/// What the engine did, in seconds since the test began.
#[derive(Clone)]
struct Timeline {
    start: Instant,
    entries: Arc<Mutex<Vec<(f64, String)>>>,
}

impl Timeline {
    fn new() -> Self {
        Timeline {
            start: Instant::now(),
            entries: Arc::default(),
        }
    }

    fn log(&self, what: impl Into<String>) {
        let at = self.start.elapsed().as_secs_f64();
        self.entries.lock().unwrap().push((at, what.into()));
    }

    fn entries(&self) -> Vec<(f64, String)> {
        self.entries.lock().unwrap().clone()
    }
}

/// The booted system, shared by the fakes: which boot and when it is up.
#[derive(Default)]
struct Boot {
    kind: Option<BootType>,
    up_at: Option<Instant>,
}

impl Boot {
    fn up(&self, kind: BootType) -> bool {
        self.kind == Some(kind) && self.up_at.is_some_and(|t| Instant::now() >= t)
    }
}

/// Elastic Metal whose reboots take [`BOOT`]: `stopping` until then.
struct SlowReboots {
    inner: Arc<FakeElasticMetal>,
    boot: Arc<Mutex<Boot>>,
    /// `rescue_server` stays empty until the rescue boot is up.
    hide_rescue_user: bool,
    timeline: Timeline,
}

#[async_trait]
impl ElasticMetal for SlowReboots {
    async fn list_offers(
        &self,
        zone: &str,
        period: SubscriptionPeriod,
    ) -> Result<Vec<Offer>, ApiError> {
        self.inner.list_offers(zone, period).await
    }

    async fn create_server(
        &self,
        zone: &str,
        req: &CreateServerRequest,
    ) -> Result<Server, ApiError> {
        self.inner.create_server(zone, req).await
    }

    async fn get_server(&self, zone: &str, id: &str) -> Result<Server, ApiError> {
        let mut server = self.inner.get_server(zone, id).await?;
        let boot = self.boot.lock().unwrap();
        if let Some(kind) = boot.kind
            && !boot.up(kind)
        {
            server.status = ServerStatus::Stopping;
            if self.hide_rescue_user {
                server.rescue_server = None;
            }
        }
        self.timeline.log(format!("status {:?}", server.status));
        Ok(server)
    }

    async fn list_servers(
        &self,
        zone: &str,
        filter: &ServerFilter,
    ) -> Result<Vec<Server>, ApiError> {
        self.inner.list_servers(zone, filter).await
    }

    async fn delete_server(&self, zone: &str, id: &str) -> Result<Server, ApiError> {
        self.inner.delete_server(zone, id).await
    }

    async fn update_server_tags(
        &self,

        zone: &str,

        id: &str,

        tags: &[String],
    ) -> Result<Server, ApiError> {
        self.inner.update_server_tags(zone, id, tags).await
    }

    async fn reboot_server(
        &self,
        zone: &str,
        id: &str,
        boot_type: BootType,
        ssh_key_ids: &[String],
    ) -> Result<Server, ApiError> {
        let server = self
            .inner
            .reboot_server(zone, id, boot_type, ssh_key_ids)
            .await?;
        *self.boot.lock().unwrap() = Boot {
            kind: Some(boot_type),
            up_at: Some(Instant::now() + BOOT),
        };
        self.timeline.log(format!("reboot {boot_type:?}"));
        Ok(server)
    }

    async fn list_ssh_keys(&self, project_id: &str) -> Result<Vec<SshKey>, ApiError> {
        self.inner.list_ssh_keys(project_id).await
    }
}

/// The rescue SSH server: refuses connections until the rescue boot is up.
struct SlowRescue {
    inner: Arc<FakeRescue>,
    boot: Arc<Mutex<Boot>>,
    timeline: Timeline,
}

#[async_trait]
impl RescueShell for SlowRescue {
    async fn connect(
        &self,
        target: &SshTarget,
        private_key: &str,
        trusted_host_key: Option<&str>,
    ) -> Result<Box<dyn RescueSession>, RescueError> {
        if !self.boot.lock().unwrap().up(BootType::Rescue) {
            self.timeline.log("ssh refused");
            return Err(RescueError::Unreachable("connection refused".into()));
        }
        let inner = self
            .inner
            .connect(target, private_key, trusted_host_key)
            .await?;
        self.timeline.log("ssh open");
        Ok(Box::new(LoggedSession {
            inner,
            timeline: self.timeline.clone(),
        }))
    }
}

struct LoggedSession {
    inner: Box<dyn RescueSession>,
    timeline: Timeline,
}

#[async_trait]
impl RescueSession for LoggedSession {
    fn host_key(&self) -> &str {
        self.inner.host_key()
    }

    async fn run(&mut self, command: &str) -> Result<CommandOutput, RescueError> {
        let program = command
            .trim_start_matches("set -o pipefail; ")
            .trim_start_matches("sudo ")
            .split_whitespace()
            .next()
            .unwrap_or_default()
            .to_string();
        self.timeline.log(format!("run {program}"));
        self.inner.run(command).await
    }

    async fn close(self: Box<Self>) {
        self.timeline.log("ssh close");
        self.inner.close().await
    }
}

/// Talos: its maintenance API answers once the normal boot is up.
struct SlowTalos {
    inner: Arc<FakeTalos>,
    boot: Arc<Mutex<Boot>>,
    timeline: Timeline,
}

#[async_trait]
impl TalosMaintenance for SlowTalos {
    async fn version(&self, addr: &str) -> Result<TalosVersion, TalosError> {
        if !self.boot.lock().unwrap().up(BootType::Normal) {
            self.timeline.log("talos down");
            return Err(TalosError::Unavailable("connection refused".into()));
        }
        self.timeline.log("talos up");
        self.inner.version(addr).await
    }

    async fn apply_configuration(
        &self,
        addr: &str,
        config: &str,
    ) -> Result<Vec<String>, TalosError> {
        self.timeline.log("apply");
        self.inner.apply_configuration(addr, config).await
    }
}

/// The Kubernetes side, logging the Node reads.
struct LoggedNodes {
    inner: Arc<FakeNodes>,
    timeline: Timeline,
}

#[async_trait]
impl NodePort for LoggedNodes {
    async fn node_ready(&self, node_name: &str) -> Result<Option<bool>, NodePortError> {
        let ready = self.inner.node_ready(node_name).await?;
        self.timeline.log(format!("node ready {ready:?}"));
        Ok(ready)
    }

    async fn delete_node_claim(&self, name: &str, reason: &str) -> Result<(), NodePortError> {
        self.inner.delete_node_claim(name, reason).await
    }

    async fn save_progress(&self, claim: &str, progress: &Progress) -> Result<(), NodePortError> {
        self.inner.save_progress(claim, progress).await
    }

    async fn event(&self, claim: &str, event: InstallEvent) {
        self.inner.event(claim, event).await
    }

    async fn initialize_node(&self, node_name: &str) -> Result<(), NodePortError> {
        self.inner.initialize_node(node_name).await
    }

    async fn release_token(&self, claim: &str) -> Result<(), NodePortError> {
        self.inner.release_token(claim).await
    }
}

/// An engine over the slow fakes, the server already delivered.
fn slow_world(timeline: &Timeline, hide_rescue_user: bool) -> (InstallEngine, Arc<FakeNodes>) {
    let em = Arc::new(FakeElasticMetal::new());
    em.insert_server(delivering_server());
    em.deliver("srv-1");
    let boot = Arc::new(Mutex::new(Boot::default()));
    let talos = Arc::new(FakeTalos::default());
    *talos.em.lock().unwrap() = Some(em.clone());
    let nodes = Arc::new(FakeNodes {
        talos: talos.clone(),
        ..Default::default()
    });
    let engine = InstallEngine::new(EngineDeps {
        elastic_metal: Arc::new(SlowReboots {
            inner: em,
            boot: boot.clone(),
            hide_rescue_user,
            timeline: timeline.clone(),
        }),
        capacity: Arc::new(FakeCapacity::default()),
        rescue: Arc::new(SlowRescue {
            inner: Arc::new(FakeRescue::reachable()),
            boot: boot.clone(),
            timeline: timeline.clone(),
        }),
        talos: Arc::new(SlowTalos {
            inner: talos,
            boot,
            timeline: timeline.clone(),
        }),
        nodes: Arc::new(LoggedNodes {
            inner: nodes.clone(),
            timeline: timeline.clone(),
        }),
        networks: None,
        settings: InstallSettings {
            poll_interval: Duration::from_secs(10),
            probe_interval: Duration::from_secs(2),
            ..InstallSettings::default()
        },
    });
    (engine, nodes)
}

#[tokio::test(start_paused = true)]
async fn the_engine_notices_each_boot_within_a_probe_interval() {
    let timeline = Timeline::new();
    let (engine, nodes) = slow_world(&timeline, false);
    engine.start(spec(URL));
    wait_for(&engine, Phase::Joined).await;
    assert_eq!(*nodes.joined.lock().unwrap(), ["default-abc12"]);

    let expected: Vec<(f64, &str)> = vec![
        // The first status poll, one poll interval after the order.
        (10.0, "status Ready"),
        (10.0, "reboot Rescue"),
        // At once: the API shows the address and the rescue user.
        (10.0, "status Stopping"),
        // SSH probes every probe interval until the status poll falls due.
        (12.0, "ssh refused"),
        (14.0, "ssh refused"),
        (16.0, "ssh refused"),
        (18.0, "ssh refused"),
        (20.0, "status Stopping"),
        // The rescue system is up 12 s after the reboot call: the probe gets
        // in, the API confirms the rescue boot, and imaging starts over a new
        // session, all at once.
        (22.0, "ssh open"),
        (22.0, "ssh close"),
        (22.0, "status Ready"),
        (22.0, "ssh open"),
        (22.0, "run lsblk"),
        (22.0, "run ip"),
        (22.0, "run curl"),
        (22.0, "run sync"),
        (22.0, "run dd"),
        (22.0, "ssh close"),
        (22.0, "reboot Normal"),
        // Talos probed every probe interval from one interval after the call.
        (24.0, "talos down"),
        (26.0, "talos down"),
        (28.0, "talos down"),
        (30.0, "talos down"),
        (32.0, "talos down"),
        (34.0, "talos up"),
        (34.0, "apply"),
        (36.0, "node ready Some(true)"),
    ];
    let got = timeline.entries();
    let got: Vec<(f64, &str)> = got.iter().map(|(t, s)| (*t, s.as_str())).collect();
    assert_eq!(got, expected);
}

#[tokio::test(start_paused = true)]
async fn without_the_rescue_user_in_the_api_the_status_poll_alone_decides() {
    // An API that names the rescue user only once the rescue boot is done:
    // nothing to probe with, so the status poll that sees the rescue boot
    // done is followed by the login at once.
    let timeline = Timeline::new();
    let (engine, _) = slow_world(&timeline, true);
    engine.start(spec(URL));
    wait_for(&engine, Phase::Booting).await;
    let got = timeline.entries();
    let got: Vec<(f64, &str)> = got.iter().map(|(t, s)| (*t, s.as_str())).collect();
    assert_eq!(
        got[..7],
        [
            (10.0, "status Ready"),
            (10.0, "reboot Rescue"),
            (10.0, "status Stopping"),
            (20.0, "status Stopping"),
            (30.0, "status Ready"),
            (30.0, "ssh open"),
            (30.0, "run lsblk"),
        ]
    );
}
