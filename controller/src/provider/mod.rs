//! The CloudProvider domain logic: Create, Delete, Get, List, IsDrifted,
//! following `facts/karpenter-contract.md`. Kubernetes objects are JSON values;
//! the NodeClass store, Secrets and the install engine are reached through the
//! narrow ports below, so this module imports neither kube nor tonic.

mod create;
mod drift;
mod lifecycle;
pub mod network;
pub mod nodeclaim;
pub mod reboot;
mod repair;
mod resume;
mod select;
pub mod standby;
pub mod vm;

use std::collections::BTreeMap;
use std::sync::Arc;

use async_trait::async_trait;

use crate::catalog::CatalogStore;
use crate::install::{InstallEngine, InstallSpec, Progress, Secret, Taint};
pub use crate::nodeclass::conditions::Readiness;
use crate::nodeclass::{NodeClassSpec, SecretKeyRef};
use crate::scaleway::private_network::PrivateNetworks;
use crate::scaleway::{ApiError, ElasticMetal, Server};

pub use create::{
    ClassSecrets, NOT_READY_TAINT_KEY, Placement, UNINITIALIZED_TAINT_KEY, install_spec,
};
pub use drift::{
    Component as DriftComponent, HASH_ANNOTATION, HASH_VERSION, HASH_VERSION_ANNOTATION,
    NodeClassHash, Restamp,
};
pub use lifecycle::ListFailureReason;
pub use reboot::{
    NodeBoots, PRE_BOOT_ID_ANNOTATION, REBOOT_ANNOTATION, RebootPorts, RebootRecord,
    RebootSettings, RebootState, RebootWatch, WatchOutcome, run_reboot_watch,
};
pub use repair::{
    DEFAULT_REBOOT_AFTER, RepairAction, RepairPolicy, RepairTolerations, longest_install,
    repair_policies,
};
pub use resume::{ResumeOutcome, ResumeReport};
pub use select::{candidates, satisfies};

pub const PROVIDER_NAME: &str = "scaleway";
pub const PROVIDER_ID_PREFIX: &str = "scaleway://baremetal/";
/// Scaleway Instances (VMs), as the cloud controller manager and Talos'
/// `scaleway` platform write it.
pub const INSTANCE_PROVIDER_ID_PREFIX: &str = "scaleway://instance/";

pub const TAG_CLUSTER: &str = "karpenter.scaleway.com/cluster";
pub const TAG_NODECLAIM: &str = "karpenter.sh/nodeclaim";
pub const TAG_NODEPOOL: &str = "karpenter.sh/nodepool";
pub const TAG_NODECLASS: &str = "karpenter.scaleway.com/nodeclass";

/// `key=value`, the form ownership tags take on Scaleway (tags are free strings).
pub fn tag(key: &str, value: &str) -> String {
    format!("{key}={value}")
}

/// The value of the `key=` tag of a server, if any.
pub fn tag_value<'a>(server: &'a Server, key: &str) -> Option<&'a str> {
    server
        .tags
        .iter()
        .find_map(|t| t.strip_prefix(key).and_then(|rest| rest.strip_prefix('=')))
}

pub fn provider_id(zone: &str, server_id: &str) -> String {
    format!("{PROVIDER_ID_PREFIX}{zone}/{server_id}")
}

/// `scaleway://baremetal/{zone}/{server_id}` → (zone, server id).
/// The error for a providerID this provider cannot read: one of another
/// provider's scheme (say, a NodeClaim moved from another cloud, or core's
/// own e2e suite's `Provider:///AZ/i-…`) names no machine of this provider,
/// which is core's NotFound, so that core lets its NodeClaim go; one in this
/// provider's scheme that does not parse is a malformed request.
pub fn unreadable_provider_id(pid: &str) -> ProviderError {
    if pid.starts_with("scaleway://") {
        ProviderError::Invalid(format!("malformed providerID {pid:?}"))
    } else {
        ProviderError::NotFound(format!("{pid} (not a Scaleway providerID)"))
    }
}

pub fn parse_provider_id(id: &str) -> Option<(&str, &str)> {
    let rest = id.strip_prefix(PROVIDER_ID_PREFIX)?;
    let (zone, server) = rest.split_once('/')?;
    (!zone.is_empty() && !server.is_empty() && !server.contains('/')).then_some((zone, server))
}

/// `scaleway://instance/{zone}/{server_id}`.
pub fn instance_provider_id(zone: &str, server_id: &str) -> String {
    format!("{INSTANCE_PROVIDER_ID_PREFIX}{zone}/{server_id}")
}

/// The machine behind a providerID of either kind.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MachineId<'a> {
    /// An Elastic Metal server.
    Baremetal { zone: &'a str, id: &'a str },
    /// An Instance (VM).
    Instance { zone: &'a str, id: &'a str },
}

impl MachineId<'_> {
    pub fn zone(&self) -> &str {
        match self {
            MachineId::Baremetal { zone, .. } | MachineId::Instance { zone, .. } => zone,
        }
    }

    pub fn server_id(&self) -> &str {
        match self {
            MachineId::Baremetal { id, .. } | MachineId::Instance { id, .. } => id,
        }
    }
}

/// Either kind of providerID this provider writes.
pub fn parse_machine_id(pid: &str) -> Option<MachineId<'_>> {
    if let Some((zone, id)) = parse_provider_id(pid) {
        return Some(MachineId::Baremetal { zone, id });
    }
    let rest = pid.strip_prefix(INSTANCE_PROVIDER_ID_PREFIX)?;
    let (zone, id) = rest.split_once('/')?;
    (!zone.is_empty() && !id.is_empty() && !id.contains('/'))
        .then_some(MachineId::Instance { zone, id })
}

/// Errors of the provider, each with one meaning for Karpenter core (the gRPC
/// layer maps them to the proto's error table).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ProviderError {
    /// No capacity for this NodeClaim: core deletes it and schedules elsewhere.
    #[error("insufficient capacity: {0}")]
    InsufficientCapacity(String),
    /// The NodeClass is missing, not Ready, or its Secrets are missing.
    #[error("node class not ready: {0}")]
    NodeClassNotReady(String),
    /// Create failed in a way core should retry, with this condition reason.
    #[error("{reason}: {message}")]
    CreateFailed { reason: String, message: String },
    /// The machine is gone.
    #[error("not found: {0}")]
    NotFound(String),
    /// A malformed request (bad JSON, bad providerID).
    #[error("invalid request: {0}")]
    Invalid(String),
    /// The Scaleway API (or the cluster) did not answer; retry later.
    #[error("unavailable: {0}")]
    Unavailable(String),
    /// Reboot: the machine is in a state a reboot would harm (an install not
    /// finished, a standby, a wipe) or no longer this NodeClaim's; retrying
    /// cannot help.
    #[error("reboot refused: {0}")]
    RebootRefused(String),
    /// The credentials lack a permission; retrying cannot help.
    #[error("permission denied: {0}")]
    PermissionDenied(String),
    /// Not now: ask again later (e.g. an earlier call of the same operation
    /// is not yet confirmed either way).
    #[error("not now: {0}")]
    NotNow(String),
}

impl ProviderError {
    /// For calls other than Create and Reboot: API errors mean "try again",
    /// except NotFound, which the caller decides about.
    fn from_api(err: ApiError) -> Self {
        match err {
            ApiError::NotFound(m) => ProviderError::NotFound(m),
            ApiError::Invalid(m) => ProviderError::Invalid(m),
            other => ProviderError::Unavailable(other.to_string()),
        }
    }
}

/// A NodeClass as the provider needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeClassRecord {
    pub name: String,
    pub spec: NodeClassSpec,
    /// The root `Ready` condition, for the current generation.
    pub readiness: Readiness,
    /// What `spec.privateNetwork` resolved to, per region
    /// (`status.privateNetworks`); empty without a network.
    pub private_networks: Vec<crate::nodeclass::ResolvedPrivateNetwork>,
}

impl NodeClassRecord {
    pub fn ready(&self) -> bool {
        self.readiness.is_ready()
    }
}

/// The NodeClasses (from the reconciler's cache) and the Secrets they name.
#[async_trait]
pub trait NodeClasses: Send + Sync + 'static {
    fn get(&self, name: &str) -> Option<NodeClassRecord>;
    /// The NodeClass as the API server has it now, read past the cache.
    /// Create asks before refusing a NodeClass its cache calls absent or not
    /// Ready: the cache lags the reconciler's own status writes, and core
    /// (whose informer may already have seen `Ready=True`) deletes a NodeClaim
    /// that Create refuses as NodeClassNotReady. `Err` when it could not be
    /// read.
    async fn get_live(&self, name: &str) -> Result<Option<NodeClassRecord>, String> {
        Ok(self.get(name))
    }
    /// Every Elastic Metal NodeClass known now.
    fn list(&self) -> Vec<NodeClassRecord>;
    /// The value under `r.key` of the Secret; `Ok(None)` when the Secret or the
    /// key is absent, `Err` when it could not be read.
    async fn secret(&self, r: &SecretKeyRef) -> Result<Option<Secret>, String>;
}

/// Hands a server to the install engine.
pub trait Installer: Send + Sync + 'static {
    /// Starts (or, when already running for this server, ignores) the install.
    fn start(&self, spec: InstallSpec);
    /// Resumes an install from the progress persisted on its NodeClaim.
    fn resume(&self, spec: InstallSpec, progress: Progress);
    /// Adopts a standby server: applies the node's config over the Talos
    /// maintenance API (see [`InstallEngine::adopt`]).
    fn adopt(&self, spec: InstallSpec, disk: String, mac: String, host_key: Option<String>);
    /// Where this process's install of the server stands, if it has one.
    fn phase(&self, server_id: &str) -> Option<crate::install::Phase>;
    /// Whether this process has already been handed the server (running,
    /// finished or failed here): the resume loop leaves such servers alone
    /// instead of rebuilding their spec every pass.
    fn knows(&self, server_id: &str) -> bool;
}

impl Installer for InstallEngine {
    fn start(&self, spec: InstallSpec) {
        InstallEngine::start(self, spec)
    }

    fn resume(&self, spec: InstallSpec, progress: Progress) {
        InstallEngine::resume(self, spec, progress)
    }

    fn adopt(&self, spec: InstallSpec, disk: String, mac: String, host_key: Option<String>) {
        InstallEngine::adopt(self, spec, disk, mac, host_key)
    }

    fn phase(&self, server_id: &str) -> Option<crate::install::Phase> {
        InstallEngine::phase(self, server_id)
    }

    fn knows(&self, server_id: &str) -> bool {
        self.phase(server_id).is_some()
    }
}

/// Errors of the Kubernetes-side ports (bootstrap tokens, Node registration),
/// classified once by their adapters.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KubeError {
    /// The API server did not answer or asked to retry (5xx, 429, transport).
    #[error("kubernetes API unavailable: {0}")]
    Unavailable(String),
    /// The API server refused the call (403, 422, ...); retrying the same call
    /// will not help until someone fixes RBAC or the input.
    #[error("kubernetes API refused: {0}")]
    Refused(String),
    /// The object exists and belongs to something else: it is never overwritten.
    #[error("conflict: {0}")]
    Conflict(String),
}

/// Per-node bootstrap tokens (`bootstrap.kubernetes.io/token` Secrets), one per
/// NodeClaim, so that a leaked or stale token opens the cluster to one node for
/// a bounded time instead of to everyone for ever.
#[async_trait]
pub trait BootstrapTokens: Send + Sync + 'static {
    /// The NodeClaim's token `<id>.<secret>`: the existing one while it has not
    /// expired (Create retries and resumes must render the same token), else a
    /// new one replacing it.
    async fn ensure(&self, claim: &str) -> Result<Secret, KubeError>;
    /// Deletes the NodeClaim's tokens; none is success.
    async fn delete(&self, claim: &str) -> Result<(), KubeError>;
}

/// Every NodeClaim in the cluster, as Kubernetes JSON, fresh from the API
/// server (all pages, or an error). List uses it to prove that a server it
/// did not see is really gone before core may garbage-collect its NodeClaim;
/// Reboot reads one NodeClaim and keeps its replay record on it.
#[async_trait]
pub trait NodeClaimSource: Send + Sync + 'static {
    async fn list(&self) -> Result<Vec<serde_json::Value>, KubeError>;
    /// One NodeClaim, fresh from the API server (not a cache: its
    /// `resourceVersion` guards a write); `None` when it does not exist.
    /// By default found in [`Self::list`].
    async fn get(&self, name: &str) -> Result<Option<serde_json::Value>, KubeError> {
        Ok(self.list().await?.into_iter().find(|c| {
            c.pointer("/metadata/name")
                .and_then(serde_json::Value::as_str)
                == Some(name)
        }))
    }
    /// Sets one annotation of the NodeClaim (a merge patch). With
    /// `resource_version`, only while the NodeClaim is still at that version:
    /// a NodeClaim changed since is [`KubeError::Conflict`], so that of two
    /// writers that read the same version, one fails.
    async fn annotate(
        &self,
        name: &str,
        key: &str,
        value: &str,
        resource_version: Option<&str>,
    ) -> Result<(), KubeError>;
}

/// What Create reads and writes of the Nodes of idle siblings before it
/// orders an Elastic Metal server (the consolidation churn guard,
/// `churn/mod.rs`).
#[async_trait]
pub trait SiblingNodes: Send + Sync + 'static {
    /// The Node's state; `None` when it does not exist.
    async fn state(&self, node: &str) -> Result<Option<crate::churn::NodeState>, KubeError>;
    /// Keeps the Node from being disrupted until `until`. `Ok(false)`: the
    /// Node is gone or someone else's `do-not-disrupt` is on it.
    async fn hold(
        &self,
        node: &str,
        until: chrono::DateTime<chrono::Utc>,
        reason: &str,
    ) -> Result<bool, KubeError>;
    /// Whether the NodePool is static (`spec.replicas` set): core keeps its
    /// node count whatever runs on them, so an idle sibling never makes an
    /// order of it useless. `Ok(false)` when the NodePool is gone.
    async fn static_pool(&self, nodepool: &str) -> Result<bool, KubeError>;
}

/// The Node object Create registers right after ordering (see
/// `create.rs`, "Registration deadline").
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRegistration {
    /// NodeClaim name = Node name = Talos hostname.
    pub name: String,
    pub provider_id: String,
    pub labels: BTreeMap<String, String>,
    pub taints: Vec<Taint>,
    /// The NodeClaim's uid: the Node gets the owner reference core's
    /// registration would give it, so that the garbage collector deletes a
    /// Node whose NodeClaim went away before core learnt its providerID
    /// (a Create whose answer was lost), which core itself never deletes.
    pub owner_uid: Option<String>,
}

/// Registers Nodes before their kubelet exists.
#[async_trait]
pub trait NodeRegistrar: Send + Sync + 'static {
    /// Creates the Node. A Node of that name with the same providerID is
    /// success (a retried Create); one with another providerID is
    /// [`KubeError::Conflict`] and is left untouched.
    async fn register(&self, node: &NodeRegistration) -> Result<(), KubeError>;

    /// Deletes the Node named after a NodeClaim whose machine is gone, as a
    /// cloud controller manager deletes the Node of a vanished instance.
    /// Core deletes the Nodes of a NodeClaim it registered before it calls
    /// Delete, and none of one it never registered: a VM whose kubelet
    /// joined while its NodeClaim was being deleted (an insufficient-capacity
    /// answer, then a retried Create) or a machine whose Create answer was
    /// lost leaves a Node nobody else removes. With `provider_id`, only a
    /// Node carrying it; without (core never learnt it), only a Node with a
    /// Scaleway providerID that core never registered. `Ok(true)` when a
    /// Node was deleted; a Node being deleted or of another machine is left.
    async fn forget(&self, name: &str, provider_id: Option<&str>) -> Result<bool, KubeError>;
}

#[derive(Debug, Clone)]
pub struct ProviderSettings {
    /// Value of the `karpenter.scaleway.com/cluster` ownership tag.
    pub cluster_name: String,
    pub project_id: String,
    /// Zones this provider serves Elastic Metal in (NodeClass zones are
    /// intersected with these).
    pub zones: Vec<String>,
    /// Zones it serves Instances in (`--instance-zones`, by default the
    /// same): Elastic Metal is not sold in every zone that has VMs.
    pub instance_zones: Vec<String>,
}

pub struct Provider {
    api: Arc<dyn ElasticMetal>,
    catalog: Arc<CatalogStore>,
    node_classes: Arc<dyn NodeClasses>,
    installer: Arc<dyn Installer>,
    cluster: ClusterPorts,
    settings: ProviderSettings,
    /// The NodeClaims List cross-checks against (see `lifecycle.rs`);
    /// `serve` always sets it ([`Provider::with_node_claims`]).
    node_claims: Option<Arc<dyn NodeClaimSource>>,
    /// Scaleway Instances (VMs), when served ([`Provider::with_instances`]).
    vms: Option<vm::VmPorts>,
    /// Standby servers (warm metal), when served ([`Provider::with_standby`]).
    standby: Option<standby::StandbyPorts>,
    /// The demand planner of the standby pools, when served
    /// ([`Provider::with_planner`]).
    planner: Option<standby::PlannerPorts>,
    /// The churn guard's view of Nodes ([`Provider::with_churn_guard`]);
    /// without it (or without `node_claims`) Create orders unguarded.
    siblings: Option<Arc<dyn SiblingNodes>>,
    /// What Reboot reads and writes besides the machine
    /// ([`Provider::with_reboots`]); without it Reboot refuses.
    reboots: Option<RebootPorts>,
    /// Private Networks (VPC, IPAM, attachments, private NICs)
    /// ([`Provider::with_private_networks`]); without it a NodeClass that
    /// selects a network cannot be served.
    networks: Option<Arc<dyn PrivateNetworks>>,
}

/// `list` in each of `zones` at once; the first error fails the whole.
async fn across<T, F, Fut>(zones: &[String], list: F) -> Result<Vec<T>, ApiError>
where
    F: Fn(String) -> Fut,
    Fut: std::future::Future<Output = Result<Vec<T>, ApiError>>,
{
    let results = futures::future::join_all(zones.iter().map(|z| list(z.clone()))).await;
    let mut all = Vec::new();
    for result in results {
        all.extend(result?);
    }
    Ok(all)
}

/// The Kubernetes objects Create and Delete manage besides the server.
#[derive(Clone)]
pub struct ClusterPorts {
    pub tokens: Arc<dyn BootstrapTokens>,
    pub nodes: Arc<dyn NodeRegistrar>,
}

impl Provider {
    pub fn new(
        api: Arc<dyn ElasticMetal>,
        catalog: Arc<CatalogStore>,
        node_classes: Arc<dyn NodeClasses>,
        installer: Arc<dyn Installer>,
        cluster: ClusterPorts,
        settings: ProviderSettings,
    ) -> Self {
        Provider {
            api,
            catalog,
            node_classes,
            installer,
            cluster,
            settings,
            node_claims: None,
            vms: None,
            standby: None,
            planner: None,
            siblings: None,
            reboots: None,
            networks: None,
        }
    }

    /// Serves NodeClasses with `spec.privateNetwork`: attachments, private
    /// NICs and their addresses are made and released through these clients.
    pub fn with_private_networks(mut self, networks: Arc<dyn PrivateNetworks>) -> Self {
        self.networks = Some(networks);
        self
    }

    /// Serves Reboot: the NodeClaim its replay record goes on, the Events,
    /// the deadlines (`reboot/`).
    pub fn with_reboots(mut self, ports: RebootPorts) -> Self {
        self.reboots = Some(ports);
        self
    }

    /// Serves standby pools: reserved offerings, adoption, recycling.
    pub fn with_standby(mut self, ports: standby::StandbyPorts) -> Self {
        self.standby = Some(ports);
        self
    }

    /// Serves `ScalewayInstanceNodeClass` NodeClaims too (VMs, see `vm`).
    pub fn with_instances(mut self, ports: vm::VmPorts) -> Self {
        self.vms = Some(ports);
        self
    }

    /// `list` in every zone served for Elastic Metal at once: every zone's
    /// answer, or the first error (a listing with a zone missing is never an
    /// answer).
    async fn every_zone<T, F, Fut>(&self, list: F) -> Result<Vec<T>, ApiError>
    where
        F: Fn(String) -> Fut,
        Fut: std::future::Future<Output = Result<Vec<T>, ApiError>>,
    {
        across(&self.settings.zones, list).await
    }

    /// The same over the zones served for Instances.
    async fn every_vm_zone<T, F, Fut>(&self, list: F) -> Result<Vec<T>, ApiError>
    where
        F: Fn(String) -> Fut,
        Fut: std::future::Future<Output = Result<Vec<T>, ApiError>>,
    {
        across(&self.settings.instance_zones, list).await
    }

    /// Whether `ScalewayInstanceNodeClass` NodeClaims are served.
    pub fn serves_instances(&self) -> bool {
        self.vms.is_some()
    }

    /// The served zones a NodeClass allows (all served zones when it names
    /// none), of `served`.
    fn allowed_zones(served: &[String], class_zones: &[String]) -> Vec<String> {
        if class_zones.is_empty() {
            served.to_vec()
        } else {
            served
                .iter()
                .filter(|z| class_zones.contains(z))
                .cloned()
                .collect()
        }
    }

    /// The NodeClaims List proves absence against: a NodeClaim whose server
    /// is missing from the listing is looked up before List may leave it
    /// out. Without it (unit tests of other calls), List trusts the listing.
    pub fn with_node_claims(mut self, source: Arc<dyn NodeClaimSource>) -> Self {
        self.node_claims = Some(source);
        self
    }

    /// Guards Elastic Metal orders against consolidation churn: an order
    /// that an idle sibling can take is refused and the sibling held
    /// (`create.rs`, `guard_churn`). Needs `with_node_claims` too.
    pub fn with_churn_guard(mut self, siblings: Arc<dyn SiblingNodes>) -> Self {
        self.siblings = Some(siblings);
        self
    }

    pub fn catalog(&self) -> &Arc<CatalogStore> {
        &self.catalog
    }

    fn cluster_tag(&self) -> String {
        tag(TAG_CLUSTER, &self.settings.cluster_name)
    }

    fn owned(&self, server: &Server) -> bool {
        tag_value(server, TAG_CLUSTER) == Some(self.settings.cluster_name.as_str())
    }

    /// IsDrifted: see `drift.rs`. Never fails: a NodeClaim this provider
    /// cannot judge is not drifted.
    pub fn is_drifted(&self, node_claim: &serde_json::Value) -> Result<String, ProviderError> {
        if vm::instance_class_name(node_claim).is_some() {
            return Ok(self.vm_drift_reason(node_claim));
        }
        Ok(self.drift_reason(node_claim))
    }
}

#[cfg(test)]
mod churn_guard_tests;
#[cfg(test)]
#[path = "network_create_tests.rs"]
mod network_create_tests;
#[cfg(test)]
pub(crate) mod tests;
