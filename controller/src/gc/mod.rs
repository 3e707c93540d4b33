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

mod decide;
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
use crate::scaleway::{ApiError, ElasticMetal, Server, ServerFilter};

pub use decide::{Decision, Reason, SweepPolicy, Verdict, decide, format_age};
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

/// Where decisions are recorded as Events (best effort: a failure is logged
/// and never stops a pass).
#[async_trait]
pub trait SweepEvents: Send + Sync + 'static {
    async fn record(&self, decision: &Decision);
}

/// Why a pass took no decision.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SweepError {
    #[error("listing servers in {zone}: {error}")]
    Servers { zone: String, error: ApiError },
    #[error("listing NodeClaims: {0}")]
    NodeClaims(String),
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
    pub events: Arc<dyn SweepEvents>,
    pub policy: SweepPolicy,
    pub zones: Vec<String>,
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
    /// One pass: decide about every owned server and act. A failed listing
    /// takes no decision at all (counted as `list_failed`).
    pub async fn pass(&self) -> Result<Vec<Decision>, SweepError> {
        let result = self.snapshot().await;
        let (servers, claims) = match result {
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
        let decisions = decide(
            &servers,
            &claims,
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
        safety_metrics().count_sweeper_pass("completed");
        let count = |v: Verdict| acted.iter().filter(|d| d.verdict == v).count();
        let (deleted, would_delete, refused) = (
            count(Verdict::Deleted),
            count(Verdict::WouldDelete),
            count(Verdict::Refused),
        );
        if deleted + would_delete + refused > 0 {
            info!(
                servers = servers.len(),
                deleted,
                would_delete,
                refused,
                dry_run = self.policy.dry_run,
                "orphan sweep"
            );
        } else {
            debug!(servers = servers.len(), "orphan sweep: nothing to do");
        }
        Ok(acted)
    }

    /// Servers first, then NodeClaims: a server ordered between the two
    /// listings is then seen with its NodeClaim (which Create needs first).
    async fn snapshot(&self) -> Result<(Vec<Server>, Vec<serde_json::Value>), SweepError> {
        let servers = list_owned_servers(self.api.as_ref(), &self.zones, &self.policy).await?;
        let claims = self
            .claims
            .list()
            .await
            .map_err(|e| SweepError::NodeClaims(e.to_string()))?;
        Ok((servers, claims))
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
