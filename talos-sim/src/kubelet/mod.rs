//! The kubelet stand-in of a configured node: registers (or adopts) its Node,
//! keeps it Ready with status heartbeats and a Lease, marks the pods bound to
//! it Running and completes their deletion.

pub mod bootstrap;
pub mod containers;
pub mod health;
pub mod node;

use std::collections::HashSet;
use std::net::Ipv4Addr;
use std::sync::Mutex;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;
use tokio::sync::watch;

use crate::machine_config::NodeConfig;
use crate::model::Machine;
use health::Health;
use node::NodeFacts;

/// How often the kubelet posts its Node's status and renews its Lease
/// (`nodeStatusUpdateFrequency`, and the Lease's renew interval).
pub const HEARTBEAT: Duration = Duration::from_secs(10);
const FIELD_MANAGER: &str = "talos-sim-kubelet";

#[derive(Debug, thiserror::Error)]
pub enum KubeletError {
    #[error("kubelet credentials: {0}")]
    Credentials(String),
    #[error("TLS bootstrap: {0}")]
    Bootstrap(String),
    /// The API server refused the credentials (401): a wrong, expired or
    /// deleted bootstrap token, or a certificate it no longer trusts.
    #[error("TLS bootstrap: the API server rejected the bootstrap token (401 Unauthorized)")]
    TokenRejected,
    #[error("{0}")]
    Conflict(String),
    #[error("Kubernetes API: {0}")]
    Api(#[from] kube::Error),
}

impl KubeletError {
    fn is_not_found(&self) -> bool {
        matches!(self, KubeletError::Api(kube::Error::Api(s)) if s.code == 404)
    }

    /// Whether the API server answered 401 to these credentials.
    pub fn is_unauthorized(&self) -> bool {
        matches!(self, KubeletError::TokenRejected)
            || matches!(self, KubeletError::Api(kube::Error::Api(s)) if s.code == 401)
    }

    /// Errors of calls made with the bootstrap token.
    fn from_bootstrap(e: kube::Error) -> Self {
        match e {
            kube::Error::Api(s) if s.code == 401 => KubeletError::TokenRejected,
            e => KubeletError::Api(e),
        }
    }
}

pub struct Kubelet {
    client: Client,
    cfg: NodeConfig,
    facts: NodeFacts,
    node_uid: Option<String>,
    started: Timestamp,
    /// What to report: Ready, NotReady (the `never_ready` fault, or one
    /// that acts while the node runs) or nothing at all.
    health: watch::Receiver<Health>,
    /// The pods this boot's kubelet started: the first time it meets one
    /// that ran before, it restarts its containers.
    started_pods: Mutex<HashSet<String>>,
    /// Deleted pods whose containers are still stopping: uid -> when the
    /// deletion is confirmed (see [`containers::shutdown`]).
    stopping: Mutex<std::collections::HashMap<String, Timestamp>>,
    heartbeat: Duration,
}

impl Kubelet {
    /// Starts with a client authenticated as the node (its certificate);
    /// an empty kubelet version in `facts` is taken from the API server, as
    /// the kubelet would match it.
    pub async fn connect(
        client: Client,
        cfg: NodeConfig,
        mut facts: NodeFacts,
        health: watch::Receiver<Health>,
    ) -> Result<Self, KubeletError> {
        if facts.kubelet_version.is_empty() {
            facts.kubelet_version = client.apiserver_version().await?.git_version;
        }
        Ok(Self {
            client,
            cfg,
            facts,
            node_uid: None,
            started: Timestamp::now(),
            health,
            started_pods: Mutex::default(),
            stopping: Mutex::default(),
            heartbeat: HEARTBEAT,
        })
    }

    /// Posts and renews every `every` instead of `HEARTBEAT` (tests).
    pub fn with_heartbeat(mut self, every: Duration) -> Self {
        self.heartbeat = every;
        self
    }

    pub fn node_name(&self) -> &str {
        &self.facts.name
    }

    /// Creates the Node, or adopts the one registered ahead of the machine,
    /// then reports it Ready and takes its Lease.
    pub async fn register(&mut self) -> Result<(), KubeletError> {
        let nodes: Api<Node> = Api::all(self.client.clone());
        let name = self.facts.name.clone();
        let registered = match nodes.get_opt(&name).await? {
            None => {
                let created = nodes
                    .create(
                        &PostParams::default(),
                        &node::new_node(&self.cfg, &self.facts),
                    )
                    .await?;
                tracing::info!(node = %name, "kubelet registered its node");
                created
            }
            Some(existing) => {
                let patch = node::adopt_patch(&existing, &self.cfg, &self.facts)
                    .map_err(KubeletError::Conflict)?;
                let adopted = nodes
                    .patch(&name, &PatchParams::default(), &Patch::Merge(&patch))
                    .await?;
                tracing::info!(node = %name, "kubelet adopted its existing node");
                adopted
            }
        };
        let missing = node::taints_not_applied(&registered, &self.cfg);
        if !missing.is_empty() {
            // What Talos' node controller meets on a real worker.
            tracing::warn!(node = %name, taints = ?missing, "machine.nodeTaints not applied: a node is not allowed to modify its own taints (NodeRestriction); use registerWithTaints");
        }
        self.node_uid = registered.metadata.uid.clone();
        let health = self.health.borrow().clone();
        self.report_status(&health, self.started).await?;
        self.renew_lease().await?;
        Ok(())
    }

    async fn report_status(
        &self,
        health: &Health,
        ready_since: Timestamp,
    ) -> Result<(), KubeletError> {
        let status = node::status(
            &self.cfg,
            &self.facts,
            health.not_ready(),
            Timestamp::now(),
            self.started,
            ready_since,
        );
        let nodes: Api<Node> = Api::all(self.client.clone());
        nodes
            .patch_status(
                &self.facts.name,
                &PatchParams::default(),
                &Patch::Strategic(json!({ "status": status })),
            )
            .await?;
        Ok(())
    }

    async fn renew_lease(&self) -> Result<(), KubeletError> {
        let leases: Api<Lease> = Api::namespaced(self.client.clone(), node::LEASE_NAMESPACE);
        let lease = node::lease(&self.facts.name, self.node_uid.as_deref(), Timestamp::now());
        leases
            .patch(
                &self.facts.name,
                &PatchParams::apply(FIELD_MANAGER).force(),
                &Patch::Apply(&lease),
            )
            .await?;
        Ok(())
    }

    fn silent(&self) -> bool {
        *self.health.borrow() == Health::Silent
    }

    /// Heartbeats and pod handling, until the future is dropped (power off).
    /// A change of health is reported at once; a silent kubelet posts and
    /// renews nothing.
    pub async fn run(self) {
        let name = self.facts.name.clone();
        let heartbeat = async {
            let mut health = self.health.clone();
            let mut ready = health.borrow_and_update().not_ready().is_none();
            let mut ready_since = self.started;
            let mut tick = tokio::time::interval(self.heartbeat);
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    Ok(()) = health.changed() => {}
                }
                let now = health.borrow_and_update().clone();
                if now == Health::Silent {
                    continue;
                }
                if now.not_ready().is_none() != ready {
                    ready = !ready;
                    ready_since = Timestamp::now();
                }
                match self.report_status(&now, ready_since).await {
                    Ok(()) => {}
                    // A kubelet does not recreate a Node someone deleted.
                    Err(e) if e.is_not_found() => {
                        tracing::warn!(node = %name, "node object deleted; status updates stop");
                        return;
                    }
                    Err(e) => tracing::warn!(node = %name, error = %e, "node status update failed"),
                }
            }
        };
        let lease = async {
            let mut tick = tokio::time::interval(self.heartbeat);
            loop {
                tick.tick().await;
                if self.silent() {
                    continue;
                }
                if let Err(e) = self.renew_lease().await {
                    tracing::warn!(node = %name, error = %e, "lease renewal failed");
                }
            }
        };
        tokio::join!(heartbeat, lease, self.run_pods());
    }

    async fn run_pods(&self) {
        let pods: Api<Pod> = Api::all(self.client.clone());
        let config =
            watcher::Config::default().fields(&format!("spec.nodeName={}", self.facts.name));
        let mut events = watcher(pods, config)
            .default_backoff()
            .applied_objects()
            .boxed();
        // Deleted pods whose containers stop later: each is synced again when
        // its time comes (dropped with the kubelet when the machine stops).
        let mut later = futures::stream::FuturesUnordered::new();
        loop {
            let pod = tokio::select! {
                event = events.next() => match event {
                    None => return,
                    Some(Ok(pod)) => pod,
                    Some(Err(e)) => {
                        tracing::warn!(node = %self.facts.name, error = %e, "pod watch error");
                        continue;
                    }
                },
                Some(pod) = later.next(), if !later.is_empty() => pod,
            };
            if self.silent() {
                // Wedged: nothing runs, nothing is confirmed.
                continue;
            }
            if let Some(wait) = self.sync_pod(&pod).await {
                later.push(async move {
                    tokio::time::sleep(wait).await;
                    pod
                });
            }
        }
    }

    fn pods_started(&self) -> std::sync::MutexGuard<'_, HashSet<String>> {
        self.started_pods.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Brings the pod's status to what its containers would do; for a
    /// deleted pod whose containers are still stopping, returns how long
    /// until it should be synced again.
    async fn sync_pod(&self, pod: &Pod) -> Option<Duration> {
        let namespace = pod.namespace().unwrap_or_default();
        let name = pod.name_any();
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
        let result = if pod.metadata.deletion_timestamp.is_some() {
            // The API server waits for the kubelet to confirm the containers
            // are gone: once their preStop hooks ran and they exited, or the
            // grace period ended (a shorter one given later counts).
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            let at = containers::stopped_at(pod);
            let now = Timestamp::now();
            if at > now {
                let mut stopping = self.stopping.lock().unwrap_or_else(|p| p.into_inner());
                let scheduled = stopping.get(&uid).copied();
                if scheduled.is_some_and(|s| s <= at) {
                    return None;
                }
                stopping.insert(uid, at);
                let wait = at.duration_since(now).unsigned_abs();
                tracing::debug!(node = %self.facts.name, %namespace, pod = %name, wait_ms = wait.as_millis() as u64, "containers stopping");
                return Some(wait);
            }
            self.stopping
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .remove(&uid);
            let params = DeleteParams {
                grace_period_seconds: Some(0),
                preconditions: Some(Preconditions {
                    uid: pod.metadata.uid.clone(),
                    resource_version: None,
                }),
                ..Default::default()
            };
            pods.delete(&name, &params).await.map(|_| ())
        } else if self.health.borrow().not_ready().is_some() {
            // Without a pod network or a runtime nothing starts.
            Ok(())
        } else {
            let uid = pod.metadata.uid.clone().unwrap_or_default();
            let first = self.pods_started().insert(uid.clone());
            let now = Timestamp::now();
            let status = if first {
                node::pod_status_after_boot(pod, self.facts.address, now)
            } else {
                node::pod_status(pod, self.facts.address, now)
            };
            let result = match status {
                Some(status) => pods
                    .patch_status(
                        &name,
                        &PatchParams::default(),
                        &Patch::Merge(json!({ "status": status })),
                    )
                    .await
                    .map(|_| ()),
                None => Ok(()),
            };
            if first && result.is_err() {
                // Not started after all: the next event tries again.
                self.pods_started().remove(&uid);
            }
            result
        };
        match result {
            Ok(()) => {
                tracing::debug!(node = %self.facts.name, %namespace, pod = %name, "pod synced")
            }
            Err(kube::Error::Api(s)) if s.code == 404 || s.code == 409 => {}
            Err(e) => {
                tracing::warn!(node = %self.facts.name, %namespace, pod = %name, error = %e, "pod sync failed")
            }
        }
        None
    }
}

/// The facts of a node booted (boot `boot_id`) from an image of
/// `talos_version`/`arch` on `machine`.
pub fn facts(
    cfg: &NodeConfig,
    server_id: &str,
    address: Ipv4Addr,
    arch: &str,
    talos_version: &str,
    machine: &Machine,
    boot_id: &str,
) -> NodeFacts {
    NodeFacts {
        name: node::node_name(cfg, server_id),
        server_id: server_id.to_string(),
        address,
        arch: arch.to_string(),
        talos_version: talos_version.to_string(),
        kubelet_version: cfg
            .kubelet_image
            .as_deref()
            .and_then(node::kubelet_version_from_image)
            .unwrap_or_default(),
        threads: machine.threads,
        memory_bytes: machine.memory_bytes,
        disk_bytes: machine.disk_size,
        gpus: machine.gpus,
        boot_id: boot_id.to_string(),
    }
}
