//! The install engine: turns an ordered Elastic Metal server into a Talos node.
//!
//! Flow: wait for delivery -> reboot into rescue with our SSH key -> SSH in ->
//! find the disk and the primary NIC -> `curl | xz -d | dd` the Talos image ->
//! reboot normally -> wait for the Talos maintenance API -> apply the rendered
//! machine config -> wait for the Node to be Ready.
//!
//! `machine` is the pure state machine (what to do next, given what was seen),
//! `resume` rebuilds a machine state from persisted progress, and `driver`
//! performs the actions through the ports, one tokio task per server.

mod commands;
mod driver;
#[cfg(test)]
mod driver_fakes;
#[cfg(test)]
mod driver_tests;
pub mod history;
pub mod machine;
mod network;
pub mod node_network;
mod resume;
#[cfg(test)]
mod tests_support;
mod waits;

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;

use crate::rescue::RescueShell;
use crate::scaleway::ElasticMetal;
use crate::talos::{NodeSettings, TalosMaintenance};

/// A Kubernetes taint as the NodeClaim spells it (the same type the Talos
/// renderer registers the Node with).
pub use crate::talos::Taint;

/// The taint Karpenter requires a Node to register with; Karpenter removes it
/// once it has synced the NodeClaim's labels and taints onto the Node.
pub const UNREGISTERED_TAINT_KEY: &str = "karpenter.sh/unregistered";

/// The taint a cloud provider removes once it has initialised a Node (the
/// value `true` is part of Karpenter's known ephemeral taint). We are that
/// cloud provider: the install engine removes it when the node has joined,
/// and Karpenter marks the NodeClaim Initialized only after that.
pub const UNINITIALIZED_TAINT_KEY: &str = "node.cloudprovider.kubernetes.io/uninitialized";

/// A string that must never reach a log: Debug and Display print `<redacted>`.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Secret(String);

impl Secret {
    pub fn new(value: impl Into<String>) -> Self {
        Secret(value.into())
    }

    /// The secret value, for the one place that needs it.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl From<String> for Secret {
    fn from(value: String) -> Self {
        Secret(value)
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

impl fmt::Display for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Everything the engine needs to install one server.
#[derive(Debug, Clone)]
pub struct InstallSpec {
    pub zone: String,
    pub server_id: String,
    /// `scaleway://baremetal/{zone}/{server_id}`.
    pub provider_id: String,
    /// NodeClaim name = Talos hostname = Node name.
    pub node_name: String,
    pub node_claim_name: String,
    /// NodeClaim labels to put on the Node.
    pub labels: BTreeMap<String, String>,
    /// NodeClaim `spec.taints`.
    pub taints: Vec<Taint>,
    /// NodeClaim `spec.startupTaints`.
    pub startup_taints: Vec<Taint>,
    /// `amd64` or `arm64`.
    pub arch: String,
    /// The Talos disk image (`.raw.xz` or `.raw.zst`), resolved from the NodeClass.
    pub image_url: String,
    /// NodeClass disk selector such as `nvme0n1`; `None` takes the first disk.
    pub install_disk: Option<String>,
    /// IAM SSH key id attached on the rescue reboot.
    pub rescue_ssh_key_id: String,
    /// OpenSSH private key matching `rescue_ssh_key_id`.
    pub rescue_private_key: Secret,
    /// The base worker config (`talosctl gen config` worker.yaml).
    pub base_machine_config: Secret,
    /// NodeClass patches, applied in order after the per-node settings.
    pub machine_config_patches: Vec<String>,
    /// The offer ordered (e.g. `EM-A115X-SSD`); an install that fails because
    /// the server went `out_of_stock` marks this offer+zone unavailable.
    pub offer_name: String,
    /// sha256 (hex) of the raw, decompressed image, from the NodeClass
    /// `image.sha256[arch]`; when given, the streamed image must match it.
    pub image_sha256: Option<String>,
    /// This node's own bootstrap token `<id>.<secret>`: the `cluster.token`
    /// of its rendered machine config.
    pub bootstrap_token: Secret,
    /// The kubelet reservations for the offer's hardware, the ones the
    /// catalog's overhead was computed from; `None` when the hardware is not
    /// known (then the base config's or Talos' defaults apply).
    pub kubelet_reservations: Option<crate::catalog::KubeletReservations>,
    /// Where the install ends: a node, or a standby server.
    pub target: Target,
    /// The Private Network the server joins (attached after delivery, its
    /// VLAN and address rendered into the config); `None` without one.
    pub private_network: Option<node_network::NodeNetwork>,
}

/// Where an install ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Target {
    /// The machine config is applied and the Node joins (`joined`).
    #[default]
    Node,
    /// The server is left in Talos maintenance mode without config
    /// (`standby`), to be adopted by a node later (see `provider/standby`).
    /// Such an install has no NodeClaim: its `node_claim_name` is the key its
    /// [`NodePort`] knows the server by, and its node fields are unused.
    Standby,
}

/// The prefix of the NodeClaim annotations that persist an install's progress.
pub const PROGRESS_ANNOTATION_PREFIX: &str = "install.karpenter.scaleway.com/";

/// What is persisted about an install (as NodeClaim annotations under
/// [`PROGRESS_ANNOTATION_PREFIX`]) so that a restarted controller, or the
/// next leader, resumes it where it stood. The cloud stays the source of truth
/// for what exists; this only says how far the install got.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Progress {
    pub phase: Option<Phase>,
    /// When the current phase was entered (its deadline counts from here).
    pub phase_since: Option<chrono::DateTime<chrono::Utc>>,
    pub disk: Option<String>,
    pub mac: Option<String>,
    /// Image writes (and sessions lost while imaging) so far.
    pub image_attempts: u32,
    /// Returns to rescue after the maintenance API never came up.
    pub rescue_returns: u32,
    /// SHA256 fingerprint of the rescue host key trusted on first use.
    pub host_key: Option<String>,
    /// When the install began (for the total duration reported on join).
    pub started: Option<chrono::DateTime<chrono::Utc>>,
}

impl Progress {
    /// The annotations that persist this progress (keys under the prefix).
    pub fn to_annotations(&self) -> BTreeMap<String, String> {
        let mut out = BTreeMap::new();
        let mut put = |key: &str, value: String| {
            out.insert(format!("{PROGRESS_ANNOTATION_PREFIX}{key}"), value);
        };
        if let Some(phase) = self.phase {
            put("phase", phase.as_str().to_string());
        }
        if let Some(since) = self.phase_since {
            put(
                "phase-since",
                since.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            );
        }
        if let Some(disk) = &self.disk {
            put("disk", disk.clone());
        }
        if let Some(mac) = &self.mac {
            put("mac", mac.clone());
        }
        put("image-attempts", self.image_attempts.to_string());
        put("rescue-returns", self.rescue_returns.to_string());
        if let Some(key) = &self.host_key {
            put("host-key", key.clone());
        }
        if let Some(started) = self.started {
            put(
                "started",
                started.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            );
        }
        out
    }

    /// Reads progress back from a NodeClaim's annotations; unknown or
    /// malformed values are ignored (the install then redoes that part).
    pub fn from_annotations(annotations: &BTreeMap<String, String>) -> Progress {
        let get = |key: &str| {
            annotations
                .get(&format!("{PROGRESS_ANNOTATION_PREFIX}{key}"))
                .map(|v| v.trim())
                .filter(|v| !v.is_empty())
        };
        let time = |key: &str| {
            get(key)
                .and_then(|v| chrono::DateTime::parse_from_rfc3339(v).ok())
                .map(|t| t.with_timezone(&chrono::Utc))
        };
        Progress {
            phase: get("phase").and_then(Phase::parse),
            phase_since: time("phase-since"),
            disk: get("disk").map(str::to_string),
            mac: get("mac").map(str::to_string),
            image_attempts: get("image-attempts")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
            rescue_returns: get("rescue-returns")
                .and_then(|v| v.parse().ok())
                .unwrap_or(0),
            host_key: get("host-key").map(str::to_string),
            started: time("started"),
        }
    }
}

/// An Event to record on the NodeClaim (`kubectl describe nodeclaim`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallEvent {
    /// `Warning` when true, else `Normal`.
    pub warning: bool,
    /// CamelCase reason, e.g. `InstallPhase`, `InstallRetry`, `InstallFailed`.
    pub reason: String,
    pub message: String,
}

/// Where out-of-stock outcomes are reported (the catalog's unavailable
/// offerings).
pub trait CapacityPort: Send + Sync + 'static {
    fn mark_unavailable(&self, offer: &str, zone: &str);
}

impl CapacityPort for crate::catalog::CatalogStore {
    fn mark_unavailable(&self, offer: &str, zone: &str) {
        crate::catalog::CatalogStore::mark_unavailable(self, offer, zone)
    }
}

/// Where an install stands. `Failed`, `Joined` and `Standby` are terminal.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Phase {
    Ordered,
    Delivering,
    Ready,
    Rescue,
    Imaging,
    Booting,
    Maintenance,
    Configured,
    Joined,
    Failed,
    /// A standby install is done: the server waits in Talos maintenance mode,
    /// without config. Resuming from it (in the node engine) is an adoption.
    Standby,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Ordered => "ordered",
            Phase::Delivering => "delivering",
            Phase::Ready => "ready",
            Phase::Rescue => "rescue",
            Phase::Imaging => "imaging",
            Phase::Booting => "booting",
            Phase::Maintenance => "maintenance",
            Phase::Configured => "configured",
            Phase::Joined => "joined",
            Phase::Failed => "failed",
            Phase::Standby => "standby",
        }
    }

    pub fn parse(s: &str) -> Option<Phase> {
        [
            Phase::Ordered,
            Phase::Delivering,
            Phase::Ready,
            Phase::Rescue,
            Phase::Imaging,
            Phase::Booting,
            Phase::Maintenance,
            Phase::Configured,
            Phase::Joined,
            Phase::Failed,
            Phase::Standby,
        ]
        .into_iter()
        .find(|p| p.as_str() == s)
    }

    pub fn is_terminal(self) -> bool {
        matches!(self, Phase::Joined | Phase::Failed | Phase::Standby)
    }
}

impl fmt::Display for Phase {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Errors of the Kubernetes side of the engine.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum NodePortError {
    #[error("kubernetes API unavailable: {0}")]
    Unavailable(String),
    #[error("kubernetes API refused: {0}")]
    Refused(String),
}

/// The Kubernetes objects the engine watches and cleans up.
#[async_trait]
pub trait NodePort: Send + Sync + 'static {
    /// `Some(true)` when the Node exists and its `Ready` condition is `True`,
    /// `Some(false)` when it exists but is not Ready, `None` when it is absent.
    async fn node_ready(&self, node_name: &str) -> Result<Option<bool>, NodePortError>;
    /// Deletes the NodeClaim so that Karpenter retries elsewhere; absent is success.
    async fn delete_node_claim(&self, name: &str, reason: &str) -> Result<(), NodePortError>;
    /// Persists the install's progress on the NodeClaim (merge-patches the
    /// annotations under [`PROGRESS_ANNOTATION_PREFIX`]).
    async fn save_progress(&self, claim: &str, progress: &Progress) -> Result<(), NodePortError>;
    /// Records an Event on the NodeClaim. Best effort: failures are logged.
    async fn event(&self, claim: &str, event: InstallEvent);
    /// The Node is Ready: removes the `uninitialized` taint the early
    /// registration put on it (see [`UNINITIALIZED_TAINT_KEY`]). Idempotent:
    /// a Node without the taint, or no Node, is success.
    async fn initialize_node(&self, node_name: &str) -> Result<(), NodePortError>;
    /// The node joined: deletes its bootstrap token. Idempotent: a token
    /// already gone is success.
    async fn release_token(&self, claim: &str) -> Result<(), NodePortError>;
}

/// How long each phase may take. A phase's clock starts when it is entered
/// (and survives restarts through the persisted `phase-since`); `Ordered` and
/// `Delivering` share one, and the imaging clock restarts at each image write.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deadlines {
    /// Order placed until the server is `ready`. Delivery of some offers takes
    /// several minutes.
    pub delivery: Duration,
    /// Rescue reboot issued until an SSH session is open.
    pub rescue: Duration,
    /// One image write: disk detection, download, write, sync and read-back.
    pub imaging: Duration,
    /// Normal reboot until the Talos maintenance API answers. Passing it sends
    /// the server back to rescue (once, see `InstallSettings::rescue_returns`).
    pub booting: Duration,
    /// Maintenance API up until the config is accepted.
    pub maintenance: Duration,
    /// Config applied until the Node is Ready.
    pub join: Duration,
}

impl Default for Deadlines {
    fn default() -> Self {
        Deadlines {
            delivery: Duration::from_secs(30 * 60),
            rescue: Duration::from_secs(15 * 60),
            imaging: Duration::from_secs(20 * 60),
            // An Elastic Metal reboot (firmware POST) takes 3-5 minutes and a
            // Talos image reaches maintenance mode within a minute of it.
            booting: Duration::from_secs(10 * 60),
            maintenance: Duration::from_secs(5 * 60),
            join: Duration::from_secs(15 * 60),
        }
    }
}

impl Deadlines {
    /// The names [`Self::set`] accepts, in flow order.
    pub const NAMES: [&'static str; 6] = [
        "delivery",
        "rescue",
        "imaging",
        "booting",
        "maintenance",
        "join",
    ];

    /// Overrides one deadline by name (for a command-line flag such as
    /// `--install-deadline booting=30s`).
    pub fn set(&mut self, name: &str, value: Duration) -> Result<(), String> {
        if value.is_zero() {
            return Err(format!("the {name} deadline must be positive"));
        }
        let slot = match name {
            "delivery" => &mut self.delivery,
            "rescue" => &mut self.rescue,
            "imaging" => &mut self.imaging,
            "booting" => &mut self.booting,
            "maintenance" => &mut self.maintenance,
            "join" => &mut self.join,
            other => {
                return Err(format!(
                    "unknown install deadline {other:?} (one of {})",
                    Self::NAMES.join(", ")
                ));
            }
        };
        *slot = value;
        Ok(())
    }
}

/// Tunables of the engine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InstallSettings {
    /// Pause between two reads of a server's status from the Elastic Metal
    /// API while waiting for delivery or a reboot: the API is remote and
    /// rate-limited, so this stays at the cadence of the SDK's wait helper.
    pub poll_interval: Duration,
    /// Pause between two cheap probes of things close to us: an SSH connect to
    /// the rescue system, the Talos maintenance API, the Node's readiness in
    /// the Kubernetes API. Capped by `poll_interval`. Probes that follow a
    /// change making them possible (the API shows the server in rescue, a
    /// resumed install found its server up) run at once.
    pub probe_interval: Duration,
    pub ssh_port: u16,
    pub talos_port: u16,
    pub deadlines: Deadlines,
    /// Image writes per rescue boot before failing. Each write counts, whether
    /// it failed, did not verify, or its SSH session was lost.
    pub image_attempts: u32,
    /// Returns to rescue (to write the image again) when the Talos
    /// maintenance API never came up after the normal boot.
    pub rescue_returns: u32,
    /// Failed Elastic Metal calls in a row (each after the client's own
    /// retries) that fail the install.
    pub api_failure_budget: u32,
    /// After an ApplyConfiguration whose answer was lost (or a restart in
    /// the maintenance phase), how long the maintenance API may stay
    /// unreachable before the config is taken as applied (Talos leaves
    /// maintenance mode once configured).
    pub apply_grace: Duration,
    /// Time limit of one call to the EM API, the Talos API, the Kubernetes API
    /// or of one SSH connect. Commands in rescue are bounded by the imaging
    /// deadline instead.
    pub call_timeout: Duration,
    /// The Elastic Metal client's pace as the time between two status reads
    /// (1 / `--scw-api-rate-limit`); the fast reads of delivery windows
    /// share what the plain reads leave of it (`history::shared`). `None`:
    /// unpaced, each window keeps its own pace.
    pub status_read_spacing: Option<Duration>,
}

impl Default for InstallSettings {
    fn default() -> Self {
        InstallSettings {
            poll_interval: Duration::from_secs(10),
            probe_interval: Duration::from_secs(2),
            ssh_port: 22,
            talos_port: 50000,
            deadlines: Deadlines::default(),
            image_attempts: 3,
            rescue_returns: 1,
            api_failure_budget: 30,
            apply_grace: Duration::from_secs(120),
            call_timeout: Duration::from_secs(60),
            status_read_spacing: None,
        }
    }
}

/// The ports the engine acts through.
#[derive(Clone)]
pub struct EngineDeps {
    pub elastic_metal: Arc<dyn ElasticMetal>,
    pub capacity: Arc<dyn CapacityPort>,
    pub rescue: Arc<dyn RescueShell>,
    pub talos: Arc<dyn TalosMaintenance>,
    pub nodes: Arc<dyn NodePort>,
    /// Private Network attachments and their IPAM addresses, for installs
    /// whose spec names a network; `None` where none is served.
    pub networks: Option<Arc<dyn crate::scaleway::private_network::PrivateNetworks>>,
    pub settings: InstallSettings,
}

/// Runs installs, one task per server, and remembers where each stands.
#[derive(Clone)]
pub struct InstallEngine {
    deps: EngineDeps,
    /// Server id → the key of the install that owns it (the NodeClaim) and
    /// where that install stands.
    phases: Arc<Mutex<HashMap<String, (String, Phase)>>>,
    /// How long deliveries and boots took, per offer and zone (`history.rs`).
    history: Arc<history::History>,
    /// Servers whose install is inside its delivery window now.
    watching: Arc<Mutex<std::collections::HashSet<String>>>,
}

impl InstallEngine {
    pub fn new(deps: EngineDeps) -> Self {
        crate::metrics::install_metrics().know_outcomes(Self::outcomes());
        InstallEngine {
            deps,
            phases: Arc::new(Mutex::new(HashMap::new())),
            history: Arc::default(),
            watching: Arc::default(),
        }
    }

    /// Every `result` of `karpenter_scaleway_install_outcomes_total`: an
    /// install ends `joined` (a node) or `standby` (an idle standby server),
    /// or fails with a class.
    pub fn outcomes() -> impl Iterator<Item = &'static str> {
        [Phase::Joined.as_str(), Phase::Standby.as_str()]
            .into_iter()
            .chain(machine::FailureClass::ALL.iter().map(|c| c.as_str()))
    }

    /// Starts the install of `spec.server_id` in the background and returns at
    /// once. A server whose install is already running (or finished) is left
    /// alone, so Create may call this again on retries. Must be called within a
    /// tokio runtime.
    pub fn start(&self, spec: InstallSpec) {
        self.launch(spec, None)
    }

    /// Adopts a standby server (installed, in Talos maintenance mode without
    /// config, its disk and primary NIC found by its standby install): the
    /// install continues at `maintenance`, applies the node's config and
    /// waits for the Node. The progress saved from then on is the NodeClaim's,
    /// so a restart resumes it like any install.
    pub fn adopt(&self, spec: InstallSpec, disk: String, mac: String, host_key: Option<String>) {
        let now = chrono::Utc::now();
        let progress = Progress {
            phase: Some(Phase::Standby),
            phase_since: Some(now),
            disk: Some(disk),
            mac: Some(mac),
            host_key,
            started: Some(now),
            ..Progress::default()
        };
        self.launch(spec, Some(progress))
    }

    /// Resumes an install a previous controller (or leader) started, from the
    /// progress persisted on its NodeClaim (see `resume.rs` for where each
    /// phase picks up). Like [`Self::start`], a server whose install already
    /// runs here is left alone. A joined install only has its bootstrap token
    /// released again; a failed one is cleaned up again.
    pub fn resume(&self, spec: InstallSpec, progress: Progress) {
        self.launch(spec, Some(progress))
    }

    fn launch(&self, spec: InstallSpec, progress: Option<Progress>) {
        {
            let mut phases = self.phases.lock().unwrap_or_else(|e| e.into_inner());
            match phases.get(&spec.server_id) {
                // A failed install may be retried if the server is handed
                // again; a server that reached standby, or that another
                // NodeClaim owned, starts a new install.
                Some((owner, phase))
                    if *owner == spec.node_claim_name
                        && !matches!(phase, Phase::Failed | Phase::Standby) =>
                {
                    return;
                }
                _ => {}
            }
            // Where the install starts, not the phase it was handed: an
            // adoption (persisted `standby`, terminal) runs from the first
            // moment, so a retried launch leaves it alone and the sweeper
            // sees it in flight.
            let phase = progress.as_ref().map_or(Phase::Ordered, |p| {
                let now = tokio::time::Instant::now();
                machine::resume(p, now, now).0.phase
            });
            phases.insert(
                spec.server_id.clone(),
                (spec.node_claim_name.clone(), phase),
            );
        }
        let engine = self.clone();
        tokio::spawn(async move { driver::run(engine, spec, progress).await });
    }

    /// The current phase of a server's install, if this engine has seen it.
    pub fn phase(&self, server_id: &str) -> Option<Phase> {
        self.phases
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(server_id)
            .map(|(_, phase)| *phase)
    }

    /// The installs running now (not joined, failed or standby), by phase.
    pub fn installs_by_phase(&self) -> BTreeMap<&'static str, usize> {
        let mut by_phase = BTreeMap::new();
        for (_, phase) in self
            .phases
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
        {
            if !phase.is_terminal() {
                *by_phase.entry(phase.as_str()).or_default() += 1;
            }
        }
        by_phase
    }

    /// Drops what this engine knows of a server, so that the next
    /// [`Self::resume`] (or [`Self::start`]) of it runs again.
    fn forget(&self, server_id: &str) {
        self.phases
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(server_id);
    }

    /// Marks whether `server_id`'s install reads inside its delivery window.
    fn set_watching(&self, server_id: &str, watching: bool) {
        let mut all = self.watching.lock().unwrap_or_else(|e| e.into_inner());
        if watching {
            all.insert(server_id.to_string());
        } else {
            all.remove(server_id);
        }
    }

    /// How many installs read inside their delivery window now.
    fn watching_count(&self) -> usize {
        self.watching
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .len()
    }

    /// Installs whose phase reads the server's status at the plain cadence
    /// (waiting for delivery or for the rescue system).
    fn reading_status(&self) -> usize {
        self.phases
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .values()
            .filter(|(_, p)| {
                matches!(
                    p,
                    Phase::Ordered | Phase::Delivering | Phase::Ready | Phase::Rescue
                )
            })
            .count()
    }

    fn set_phase(&self, server_id: &str, phase: Phase) {
        if let Some(entry) = self
            .phases
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get_mut(server_id)
        {
            entry.1 = phase;
        }
    }
}

/// The taints a kubelet registers its Node with: the NodeClaim's taints, its
/// startup taints and `karpenter.sh/unregistered` (core removes it once it
/// has synced the NodeClaim), each (key, effect) once: the kubelet refuses
/// two taints with the same key and effect.
pub fn register_taints(taints: &[Taint], startup_taints: &[Taint]) -> Vec<Taint> {
    let unregistered = Taint {
        key: UNREGISTERED_TAINT_KEY.to_string(),
        value: None,
        effect: "NoExecute".to_string(),
    };
    let mut out: Vec<Taint> = Vec::new();
    for taint in taints
        .iter()
        .chain(startup_taints)
        .chain(std::iter::once(&unregistered))
    {
        if !out
            .iter()
            .any(|t| t.key == taint.key && t.effect == taint.effect)
        {
            out.push(taint.clone());
        }
    }
    out
}

/// The per-node part of the machine config: NodeClaim labels and taints (plus
/// startup taints and the unregistered taint, all registered by the kubelet),
/// the provider id, and what the rescue system found.
pub fn node_settings(spec: &InstallSpec, disk: &str, mac: &str) -> NodeSettings {
    let register_taints = register_taints(&spec.taints, &spec.startup_taints);
    NodeSettings {
        hostname: spec.node_name.clone(),
        labels: spec.labels.clone(),
        register_taints,
        provider_id: spec.provider_id.clone(),
        install_disk: disk.to_string(),
        primary_mac: mac.to_string(),
        patches: spec.machine_config_patches.clone(),
        bootstrap_token: spec.bootstrap_token.expose().to_string(),
        kubelet_reservations: spec.kubelet_reservations,
        // Read from the server's attachment when the config is rendered
        // (`network.rs`).
        private_network: None,
    }
}
