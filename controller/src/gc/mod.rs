//! The orphan sweeper: deletes servers tagged for this cluster that no
//! NodeClaim claims — only after a grace longer than the longest install,
//! never when ownership cannot be proven, never while this process installs
//! them, and not at all in dry-run mode. Every decision is counted
//! (`karpenter_scaleway_sweeper_decisions_total{decision,reason}`) and, but
//! for the steady "claimed", recorded as an Event.
//!
//! A pass is compute-then-apply: list the servers (every zone, every page,
//! or nothing), then the NodeClaims, decide with the pure [`decide`], then
//! act. Only the leader sweeps ([`run_orphan_sweeper`]).
//!
//! With Instance and Block ports, a pass also sweeps this cluster's VMs and
//! the SBS volumes they leave behind ([`instance`], with its own, shorter
//! grace); a failed Instance or Block listing takes no Instance decision and
//! leaves the Elastic Metal side alone.

mod decide;
pub mod instance;
mod instance_pass;
mod k8s;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use futures::future::join_all;
use tracing::{debug, info, warn};

use crate::install::InstallEngine;
use crate::metrics::safety_metrics;
use crate::provider::{NodeClaimSource, TAG_CLUSTER, tag};
use crate::scaleway::block::{Block, Volume};
use crate::scaleway::instance::Instance;
use crate::scaleway::{ApiError, ElasticMetal, Server, ServerFilter};

pub use decide::{
    CLAIM_DELETED_GRACE, Decision, Reason, SweepPolicy, Verdict, decide, format_age,
    unlisted_claims,
};
pub use instance::{InstanceDecision, Step, Subject, decide_instances};
pub use instance_pass::{Teardowns, list_owned_instances};
pub use k8s::KubeSweepEvents;

/// Whether this process's install engine is working on a server.
pub trait InFlight: Send + Sync + 'static {
    fn in_flight(&self, server_id: &str) -> bool;
}

impl InFlight for InstallEngine {
    /// Started or resumed here and not yet joined or failed.
    fn in_flight(&self, server_id: &str) -> bool {
        self.phase(server_id).is_some_and(|p| !p.is_terminal())
    }
}

/// Releases the server(s) of a NodeClaim that is gone, the way Delete does
/// for a NodeClaim without a providerID: an adopted standby goes back to its
/// pool, anything else is deleted (the provider implements it).
#[async_trait]
pub trait ClaimRelease: Send + Sync + 'static {
    async fn release(&self, nodeclaim: &str) -> Result<(), String>;
    /// Deletes the Node a swept machine's kubelet registered under its
    /// NodeClaim's name, if it carries this providerID (core deletes only
    /// the Nodes it registered; see `NodeRegistrar::forget`).
    async fn forget_node(&self, nodeclaim: &str, provider_id: &str) -> Result<(), String>;
}

/// Where decisions are recorded as Events (best effort: a failure is logged
/// and never stops a pass).
#[async_trait]
pub trait SweepEvents: Send + Sync + 'static {
    async fn record(&self, decision: &Decision);
    /// A VM's or a volume's decision.
    async fn record_instance(&self, decision: &InstanceDecision);
}

/// Why a pass took no decision.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SweepError {
    #[error("listing servers in {zone}: {error}")]
    Servers { zone: String, error: ApiError },
    #[error("listing NodeClaims: {0}")]
    NodeClaims(String),
    #[error("listing Instances in {zone}: {error}")]
    Instances { zone: String, error: ApiError },
    #[error("listing Block volumes in {zone}: {error}")]
    Volumes { zone: String, error: ApiError },
}

/// The startup warning when the grace is shorter than `longest_install`
/// ([`crate::provider::longest_install`]: every deadline, the second rescue
/// boot the engine allows, the apply grace). An install in flight is
/// protected by its NodeClaim and by this process's in-flight check anyway;
/// the grace is the last guard for a server whose NodeClaim is not (yet, or
/// no longer) visible, so it should outlast any install.
pub fn grace_warning(grace: Duration, longest_install: Duration) -> Option<String> {
    (grace < longest_install).then(|| {
        format!(
            "--orphan-grace ({}) is shorter than the longest possible install ({}): \
             a server whose NodeClaim is not visible could be swept while it is still being installed",
            format_age(grace),
            format_age(longest_install)
        )
    })
}

/// The sweeper and the ports it acts through.
pub struct Sweeper {
    pub api: Arc<dyn ElasticMetal>,
    pub claims: Arc<dyn NodeClaimSource>,
    pub in_flight: Arc<dyn InFlight>,
    /// Releases the servers of deleted NodeClaims (`None`: deleted outright).
    pub release: Option<Arc<dyn ClaimRelease>>,
    pub events: Arc<dyn SweepEvents>,
    pub policy: SweepPolicy,
    pub zones: Vec<String>,
    /// The Instance side runs when both ports are set, in these zones.
    pub instance: Option<Arc<dyn Instance>>,
    pub instance_zones: Vec<String>,
    pub block: Option<Arc<dyn Block>>,
    /// Age under which an unclaimed VM or a left-over volume is left alone
    /// (`--instance-orphan-grace`; a VM boots in about a minute).
    pub instance_grace: Duration,
    /// The leftovers of VMs this sweeper deleted, still to delete.
    pub teardowns: Teardowns,
}

/// This cluster's VMs and volumes, or why they could not all be listed.
type InstanceSnapshot = Result<(Vec<crate::scaleway::instance::Server>, Vec<Volume>), SweepError>;

/// Elastic Metal servers, the Instance side (`None` without its ports), the
/// NodeClaims.
type Snapshot = (
    Vec<Server>,
    Option<InstanceSnapshot>,
    Vec<serde_json::Value>,
);

/// What one pass decided and carried out.
#[derive(Debug, Default)]
pub struct Pass {
    /// Elastic Metal servers.
    pub servers: Vec<Decision>,
    /// VMs, then volumes.
    pub instances: Vec<InstanceDecision>,
    /// Why no Instance decision was taken, when the listing failed.
    pub instance_error: Option<SweepError>,
}

/// Every zone, every page of the servers carrying this cluster's tag in this
/// project, or the first error. Not re-filtered: [`decide`] refuses what it
/// cannot prove is ours, which a silent filter would hide.
pub async fn list_owned_servers(
    api: &dyn ElasticMetal,
    zones: &[String],
    policy: &SweepPolicy,
) -> Result<Vec<Server>, SweepError> {
    let filter = ServerFilter {
        tags: vec![tag(TAG_CLUSTER, &policy.cluster_name)],
        name: None,
        project_id: Some(policy.project_id.clone()),
    };
    let results = join_all(zones.iter().map(|z| api.list_servers(z, &filter))).await;
    let mut servers = Vec::new();
    for (zone, result) in zones.iter().zip(results) {
        servers.extend(result.map_err(|error| SweepError::Servers {
            zone: zone.clone(),
            error,
        })?);
    }
    Ok(servers)
}

impl Sweeper {
    /// One pass: decide about every owned server (and, with the Instance
    /// ports, every owned VM and volume) and act. A failed Elastic Metal or
    /// NodeClaim listing takes no decision at all, a failed Instance or Block
    /// listing none on that side (either counted as `list_failed`).
    pub async fn pass(&self) -> Result<Pass, SweepError> {
        let result = self.snapshot().await;
        let (servers, instances, claims) = match result {
            Ok(snapshot) => snapshot,
            Err(error) => {
                safety_metrics().count_sweeper_pass("list_failed");
                warn!(%error, "orphan sweep skipped: no decision without a complete list");
                return Err(error);
            }
        };
        let in_flight: HashSet<String> = servers
            .iter()
            .filter(|s| self.in_flight.in_flight(&s.id))
            .map(|s| s.id.clone())
            .collect();
        let deleted = self.deleted_claims(&servers, &claims).await;
        let decisions = decide(
            &servers,
            &claims,
            &deleted,
            &in_flight,
            chrono::Utc::now(),
            &self.policy,
        );
        let mut acted = Vec::with_capacity(decisions.len());
        for decision in decisions {
            if let Some(d) = self.act(decision).await {
                acted.push(d);
            }
        }
        let mut pass = Pass {
            servers: acted,
            ..Pass::default()
        };
        match (instances, self.instance_ports()) {
            (Some(Ok((vms, volumes))), Some(ports)) => {
                pass.instances = self.sweep_instances(&ports, &vms, &volumes, &claims).await;
            }
            (Some(Err(error)), _) => {
                warn!(%error, "no Instance decision without a complete list");
                pass.instance_error = Some(error);
            }
            _ => {}
        }
        safety_metrics().count_sweeper_pass(if pass.instance_error.is_some() {
            "list_failed"
        } else {
            "completed"
        });
        let verdicts = pass
            .servers
            .iter()
            .map(|d| d.verdict)
            .chain(pass.instances.iter().map(|d| d.verdict));
        let (mut deleted, mut would_delete, mut refused) = (0, 0, 0);
        for v in verdicts {
            match v {
                Verdict::Deleted => deleted += 1,
                Verdict::WouldDelete => would_delete += 1,
                Verdict::Refused => refused += 1,
                Verdict::Spared => {}
            }
        }
        if deleted + would_delete + refused > 0 {
            info!(
                servers = servers.len(),
                instance_decisions = pass.instances.len(),
                deleted,
                would_delete,
                refused,
                dry_run = self.policy.dry_run,
                "orphan sweep"
            );
        } else {
            debug!(
                servers = servers.len(),
                instance_decisions = pass.instances.len(),
                "orphan sweep: nothing to do"
            );
        }
        Ok(pass)
    }

    /// Servers first (Elastic Metal, then VMs and volumes), NodeClaims last:
    /// anything ordered in between is then seen with its NodeClaim (which
    /// Create needs first). The Instance side is `None` without its ports.
    async fn snapshot(&self) -> Result<Snapshot, SweepError> {
        let servers = list_owned_servers(self.api.as_ref(), &self.zones, &self.policy).await?;
        let instances = match self.instance_ports() {
            Some(ports) => Some(
                list_owned_instances(
                    ports.instance.as_ref(),
                    ports.block.as_ref(),
                    &self.instance_zones,
                    &self.policy,
                )
                .await,
            ),
            None => None,
        };
        let claims = self
            .claims
            .list()
            .await
            .map_err(|e| SweepError::NodeClaims(e.to_string()))?;
        Ok((servers, instances, claims))
    }

    /// The NodeClaims named by servers but not listed that a read from the
    /// API server confirms are gone. A failed read confirms nothing: those
    /// servers wait for the grace as before.
    async fn deleted_claims(
        &self,
        servers: &[Server],
        claims: &[serde_json::Value],
    ) -> HashSet<String> {
        let mut deleted = HashSet::new();
        for name in unlisted_claims(servers, claims, &self.policy) {
            match self.claims.get(&name).await {
                Ok(None) => {
                    deleted.insert(name);
                }
                Ok(Some(_)) => {}
                Err(error) => {
                    warn!(nodeclaim = %name, %error, "could not read the NodeClaim a server names; it waits for the grace");
                }
            }
        }
        deleted
    }

    /// Carries out one decision; `None` when a deletion was not done (it is
    /// decided again next pass).
    async fn act(&self, decision: Decision) -> Option<Decision> {
        let server = &decision.server;
        if decision.verdict == Verdict::Deleted {
            // The engine may have been handed the server since the snapshot.
            if self.in_flight.in_flight(&server.id) {
                debug!(server_id = %server.id, "install started since the listing; not deleting");
                return None;
            }
            if decision.reason == Reason::ClaimDeleted
                && let (Some(release), Some(claim)) = (
                    &self.release,
                    crate::provider::tag_value(server, crate::provider::TAG_NODECLAIM),
                )
            {
                return match release.release(claim).await {
                    Ok(()) => {
                        info!(server_id = %server.id, zone = %server.zone, nodeclaim = claim,
                            "released the server of a deleted NodeClaim");
                        self.acted(decision).await
                    }
                    Err(error) => {
                        safety_metrics().count_sweeper_delete_failure();
                        warn!(server_id = %server.id, nodeclaim = claim, %error,
                            "releasing the server of a deleted NodeClaim failed; retrying next pass");
                        None
                    }
                };
            }
            match self.api.delete_server(&server.zone, &server.id).await {
                Ok(_) => info!(server_id = %server.id, zone = %server.zone, name = %server.name,
                    reason = decision.reason.as_str(), "deleting orphaned server"),
                Err(ApiError::NotFound(_)) => {
                    debug!(server_id = %server.id, zone = %server.zone, "orphan already gone");
                    return None;
                }
                Err(error) => {
                    safety_metrics().count_sweeper_delete_failure();
                    warn!(server_id = %server.id, zone = %server.zone, %error,
                        "deleting orphaned server failed; retrying next pass");
                    return None;
                }
            }
        }
        self.acted(decision).await
    }

    /// Counts and records a decision carried out.
    async fn acted(&self, decision: Decision) -> Option<Decision> {
        safety_metrics()
            .count_sweeper_decision(decision.verdict.as_str(), decision.reason.as_str());
        if decision.needs_event() {
            self.events.record(&decision).await;
        }
        Some(decision)
    }
}

/// How often leadership is checked between two passes.
const LEADERSHIP_POLL: Duration = Duration::from_secs(1);

/// Sweeps every `interval` while this replica is the leader, until `stop`
/// resolves. The first pass comes one interval after becoming the leader, so
/// that a new leader first resumes the installs in flight.
pub async fn run_orphan_sweeper(
    sweeper: Sweeper,
    interval: Duration,
    is_leader: Arc<dyn Fn() -> bool + Send + Sync>,
    stop: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(stop);
    let mut leading_since: Option<tokio::time::Instant> = None;
    let mut last_pass: Option<tokio::time::Instant> = None;
    loop {
        if is_leader() {
            let since = *leading_since.get_or_insert_with(tokio::time::Instant::now);
            let due_from = last_pass.unwrap_or(since);
            if due_from.elapsed() >= interval {
                let _ = sweeper.pass().await;
                last_pass = Some(tokio::time::Instant::now());
            }
        } else {
            leading_since = None;
            last_pass = None;
        }
        tokio::select! {
            _ = &mut stop => return,
            _ = tokio::time::sleep(LEADERSHIP_POLL) => {}
        }
    }
}

#[cfg(test)]
mod tests;
