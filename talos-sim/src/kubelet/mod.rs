//! The kubelet stand-in of a configured node: registers (or adopts) its Node,
//! keeps it Ready with status heartbeats and a Lease, marks the pods bound to
//! it Running and completes their deletion.

pub mod bootstrap;
pub mod node;

use std::net::Ipv4Addr;
use std::time::Duration;

use futures::StreamExt;
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::jiff::Timestamp;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use kube::runtime::{WatchStreamExt, watcher};
use kube::{Client, ResourceExt};
use serde_json::json;

use crate::machine_config::NodeConfig;
use crate::model::Machine;
use node::NodeFacts;

const HEARTBEAT: Duration = Duration::from_secs(10);
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
    /// `false` under the `never_ready` fault: the node reports NotReady.
    ready: bool,
}

impl Kubelet {
    /// Starts with a client authenticated as the node (its certificate);
    /// an empty kubelet version in `facts` is taken from the API server, as
    /// the kubelet would match it.
    pub async fn connect(
        client: Client,
        cfg: NodeConfig,
        mut facts: NodeFacts,
        ready: bool,
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
            ready,
        })
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
        self.report_status().await?;
        self.renew_lease().await?;
        Ok(())
    }

    async fn report_status(&self) -> Result<(), KubeletError> {
        let status = node::status(
            &self.cfg,
            &self.facts,
            self.ready,
            Timestamp::now(),
            self.started,
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

    /// Heartbeats and pod handling, until the future is dropped (power off).
    pub async fn run(self) {
        let name = self.facts.name.clone();
        let heartbeat = async {
            let mut tick = tokio::time::interval(HEARTBEAT);
            loop {
                tick.tick().await;
                match self.report_status().await {
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
            let mut tick = tokio::time::interval(HEARTBEAT);
            loop {
                tick.tick().await;
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
        while let Some(event) = events.next().await {
            match event {
                Ok(pod) => self.sync_pod(&pod).await,
                Err(e) => tracing::warn!(node = %self.facts.name, error = %e, "pod watch error"),
            }
        }
    }

    async fn sync_pod(&self, pod: &Pod) {
        let namespace = pod.namespace().unwrap_or_default();
        let name = pod.name_any();
        let pods: Api<Pod> = Api::namespaced(self.client.clone(), &namespace);
        let result = if pod.metadata.deletion_timestamp.is_some() {
            // The API server waits for the kubelet to confirm the containers
            // are gone; there are none, so confirm at once.
            let params = DeleteParams {
                grace_period_seconds: Some(0),
                preconditions: Some(Preconditions {
                    uid: pod.metadata.uid.clone(),
                    resource_version: None,
                }),
                ..Default::default()
            };
            pods.delete(&name, &params).await.map(|_| ())
        } else if !self.ready {
            // Without a pod network nothing starts.
            Ok(())
        } else if let Some(status) = node::pod_status(pod, self.facts.address, Timestamp::now()) {
            pods.patch_status(
                &name,
                &PatchParams::default(),
                &Patch::Merge(json!({ "status": status })),
            )
            .await
            .map(|_| ())
        } else {
            Ok(())
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
    }
}

/// The facts of a node booted from an image of `talos_version`/`arch` on
/// `machine`.
pub fn facts(
    cfg: &NodeConfig,
    server_id: &str,
    address: Ipv4Addr,
    arch: &str,
    talos_version: &str,
    machine: &Machine,
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
        boot_id: uuid_like(),
    }
}

fn uuid_like() -> String {
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
