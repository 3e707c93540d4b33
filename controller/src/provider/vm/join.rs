//! After Create: watching each VM until its node joins, then removing what
//! let it join. The user data holds the node's bootstrap token and any
//! process on the VM can read it from the metadata service, so once the Node
//! is Ready the user data is deleted and the token revoked (Talos keeps its
//! config on its STATE partition and needs neither again). A VM whose
//! power-on fell back to `stopped` never got a hypervisor: its offering is
//! marked unavailable and its NodeClaim deleted, so that core schedules again
//! elsewhere and Delete removes the server and its volume.
//!
//! Crash-safe without persisted state: every pass starts from the NodeClaims
//! and what the APIs say now. A restarted provider deletes user data that is
//! already gone (404 is success) and tokens already revoked, once per VM.

use std::collections::HashSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use futures::StreamExt as _;
use serde_json::Value;
use tracing::{debug, info, warn};

use super::super::nodeclaim::initialized;
use super::super::{MachineId, NodeClaimSource, Provider, parse_machine_id};
use crate::install::{InstallEvent, NodePort};
use crate::scaleway::ApiError;
use crate::scaleway::instance::{ServerState, USER_DATA_KEY};

/// How long a NodeClaim's VM may be `stopped` after Create powered it on
/// before it counts as fallen back: the API shows `starting` within a
/// second of the action, so this only guards against a slow read.
pub const FALLBACK_GRACE: Duration = Duration::from_secs(30);

/// VMs looked at concurrently in one pass.
const CONCURRENCY: usize = 8;

/// What a pass did for one VM.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JoinOutcome {
    /// The Node is Ready: user data deleted, token revoked.
    Joined,
    /// Still booting (or nothing to do yet).
    Waiting,
    /// Powered on, back to `stopped`: offering marked unavailable, NodeClaim deleted.
    FellBack,
    /// A call failed; tried again next pass.
    Retry(String),
}

pub struct VmJoiner {
    provider: Arc<Provider>,
    claims: Arc<dyn NodeClaimSource>,
    nodes: Arc<dyn NodePort>,
    /// NodeClaims finished in this process (joined or fallen back).
    done: Mutex<HashSet<String>>,
}

impl VmJoiner {
    pub fn new(
        provider: Arc<Provider>,
        claims: Arc<dyn NodeClaimSource>,
        nodes: Arc<dyn NodePort>,
    ) -> Self {
        VmJoiner {
            provider,
            claims,
            nodes,
            done: Mutex::new(HashSet::new()),
        }
    }

    fn is_done(&self, name: &str) -> bool {
        self.done
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .contains(name)
    }

    fn finish(&self, name: &str) {
        self.done
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(name.to_string());
    }

    /// One pass over every VM NodeClaim not finished here.
    pub async fn pass(&self) -> Result<Vec<(String, JoinOutcome)>, String> {
        let claims = self.claims.list().await.map_err(|e| e.to_string())?;
        let live: HashSet<String> = claims
            .iter()
            .filter_map(|c| c.pointer("/metadata/name").and_then(Value::as_str))
            .map(String::from)
            .collect();
        // Forget NodeClaims that are gone, so the set does not grow for ever.
        self.done
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .retain(|n| live.contains(n));
        let todo: Vec<Value> = claims
            .into_iter()
            .filter(|c| c.pointer("/metadata/deletionTimestamp").is_none())
            .filter(|c| {
                c.pointer("/status/providerID")
                    .and_then(Value::as_str)
                    .and_then(parse_machine_id)
                    .is_some_and(|m| matches!(m, MachineId::Instance { .. }))
            })
            .filter(|c| {
                c.pointer("/metadata/name")
                    .and_then(Value::as_str)
                    .is_some_and(|n| !self.is_done(n))
            })
            .collect();
        Ok(
            futures::stream::iter(todo.into_iter().map(|c| self.step(c)))
                .buffer_unordered(CONCURRENCY)
                .collect()
                .await,
        )
    }

    async fn step(&self, claim: Value) -> (String, JoinOutcome) {
        let name = claim
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string();
        let outcome = self.step_inner(&name, &claim).await;
        if matches!(outcome, JoinOutcome::Joined | JoinOutcome::FellBack) {
            self.finish(&name);
        }
        (name, outcome)
    }

    async fn step_inner(&self, name: &str, claim: &Value) -> JoinOutcome {
        let Ok(vms) = self.provider.vm_ports() else {
            return JoinOutcome::Waiting;
        };
        let Some((zone, id)) = claim
            .pointer("/status/providerID")
            .and_then(Value::as_str)
            .and_then(parse_machine_id)
            .map(|m| (m.zone().to_string(), m.server_id().to_string()))
        else {
            return JoinOutcome::Waiting;
        };
        let ready = if initialized(claim) {
            true
        } else {
            match self.nodes.node_ready(name).await {
                Ok(r) => r == Some(true),
                Err(e) => return JoinOutcome::Retry(e.to_string()),
            }
        };
        if ready {
            match vms.api.delete_user_data(&zone, &id, USER_DATA_KEY).await {
                Ok(()) | Err(ApiError::NotFound(_)) => {}
                Err(e) => return JoinOutcome::Retry(format!("deleting the user data: {e}")),
            }
            if let Err(e) = self.nodes.release_token(name).await {
                return JoinOutcome::Retry(format!("revoking the bootstrap token: {e}"));
            }
            info!(nodeclaim = name, server_id = %id, %zone,
                "VM joined; its user data is deleted and its bootstrap token revoked");
            return JoinOutcome::Joined;
        }
        let server = match vms.api.get_server(&zone, &id).await {
            Ok(server) => server,
            // Gone: core's List/Get handle it.
            Err(ApiError::NotFound(_)) => return JoinOutcome::Waiting,
            Err(e) => return JoinOutcome::Retry(format!("reading VM {id}: {e}")),
        };
        let stopped = matches!(
            server.state,
            ServerState::Stopped | ServerState::StoppedInPlace
        );
        if !stopped || age(claim) < FALLBACK_GRACE {
            debug!(nodeclaim = name, server_id = %id, state = ?server.state,
                detail = %server.state_detail, "VM not joined yet");
            return JoinOutcome::Waiting;
        }
        let reason = crate::catalog::Unavailability::StoppedAfterPowerOn;
        self.provider
            .catalog
            .mark_unavailable_for(&server.commercial_type, &zone, reason);
        let message = format!(
            "VM {id} ({} in {zone}) {reason}: no capacity; the offering is unavailable for {}s and the NodeClaim is deleted so that Karpenter schedules elsewhere",
            server.commercial_type,
            self.provider.catalog.unavailable_ttl().as_secs()
        );
        warn!(nodeclaim = name, server_id = %id, %zone, commercial_type = %server.commercial_type, "{message}");
        self.nodes
            .event(
                name,
                InstallEvent {
                    warning: true,
                    reason: "InsufficientCapacity".into(),
                    message,
                },
            )
            .await;
        match self
            .nodes
            .delete_node_claim(name, &reason.to_string())
            .await
        {
            Ok(()) => JoinOutcome::FellBack,
            Err(e) => JoinOutcome::Retry(format!("deleting the NodeClaim: {e}")),
        }
    }
}

/// How long ago the NodeClaim was created (zero when unknown).
fn age(claim: &Value) -> Duration {
    claim
        .pointer("/metadata/creationTimestamp")
        .and_then(Value::as_str)
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .and_then(|t| {
            (chrono::Utc::now() - t.with_timezone(&chrono::Utc))
                .to_std()
                .ok()
        })
        .unwrap_or_default()
}

/// Runs a pass every `interval` while this replica leads, until `shutdown`.
pub async fn run_vm_joiner(
    joiner: VmJoiner,
    interval: Duration,
    is_leader: Arc<dyn Fn() -> bool + Send + Sync>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        if is_leader() {
            match joiner.pass().await {
                Ok(outcomes) => {
                    for (name, outcome) in outcomes {
                        if let JoinOutcome::Retry(why) = outcome {
                            warn!(nodeclaim = %name, %why, "VM join step failed; retried next pass");
                        }
                    }
                }
                Err(error) => warn!(%error, "listing NodeClaims for the VM join pass"),
            }
        }
        tokio::select! {
            _ = &mut shutdown => return,
            _ = tokio::time::sleep(interval) => {}
        }
    }
}
