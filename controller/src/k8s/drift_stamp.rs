//! The re-stamp pass: keeps every NodeClaim's NodeClass hash at the current
//! hash version (`provider/drift.rs`), so that a provider release that hashes
//! differently never marks the fleet drifted. NodeClaims stamped with another
//! version (or never stamped, by a release without drift detection) are not
//! judged by IsDrifted until this pass has rewritten their stamp from their
//! NodeClass as it is now. Only the leader writes, at startup, on becoming
//! the leader and then every `--resume-interval`.

use std::sync::Arc;
use std::time::Duration;

use kube::Client;
use kube::api::{Api, DynamicObject, Patch, PatchParams};
use serde_json::json;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::k8s::nodes::{NodeClaimList, node_claim_resource};
use crate::provider::{HASH_VERSION, Provider, Restamp};

/// How often leadership is checked between two passes.
const LEADERSHIP_POLL: Duration = Duration::from_secs(1);

/// Writes stamps on NodeClaims.
#[derive(Clone)]
pub struct NodeClaimStamper {
    api: Api<DynamicObject>,
}

/// What became of one re-stamp.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StampOutcome {
    Stamped,
    /// The NodeClaim changed (or went away) since it was listed; the next
    /// pass looks again.
    Skipped,
    Failed(String),
}

impl NodeClaimStamper {
    pub fn new(client: Client) -> Self {
        NodeClaimStamper {
            api: Api::all_with(client, &node_claim_resource()),
        }
    }

    /// Merge-patches the two annotations, with the listed resourceVersion as
    /// a precondition: a NodeClaim that Karpenter changed meanwhile (e.g.
    /// marked Drifted) is not stamped from a stale view.
    pub async fn apply(&self, r: &Restamp) -> StampOutcome {
        let patch = json!({
            "metadata": {
                "resourceVersion": r.resource_version,
                "annotations": r.annotations,
            }
        });
        match self
            .api
            .patch(&r.name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
        {
            Ok(_) => StampOutcome::Stamped,
            Err(kube::Error::Api(status)) if status.code == 409 || status.code == 404 => {
                StampOutcome::Skipped
            }
            Err(e) => StampOutcome::Failed(e.to_string()),
        }
    }
}

/// One pass: list every NodeClaim, re-stamp those of another hash version.
/// A failed list skips the pass. Returns the outcome per NodeClaim
/// re-stamped (empty when nothing needed it).
pub async fn restamp_pass(
    provider: &Provider,
    claims: &NodeClaimList,
    stamper: &NodeClaimStamper,
) -> Vec<(String, StampOutcome)> {
    let listed = match claims.list().await {
        Ok(listed) => listed,
        Err(error) => {
            warn!(%error, "listing NodeClaims for the NodeClass hash re-stamp failed; retrying next pass");
            return Vec::new();
        }
    };
    let mut report = Vec::new();
    for r in provider.restamps(&listed) {
        let outcome = stamper.apply(&r).await;
        let from = r.from_version.as_deref().unwrap_or("none");
        match &outcome {
            StampOutcome::Stamped => info!(nodeclaim = %r.name, from_version = from,
                to_version = HASH_VERSION, "re-stamped the NodeClass hash"),
            StampOutcome::Skipped => debug!(nodeclaim = %r.name,
                "NodeClaim changed or gone since listed; re-stamping next pass"),
            StampOutcome::Failed(error) => warn!(nodeclaim = %r.name, %error,
                "re-stamping the NodeClass hash failed; retrying next pass"),
        }
        report.push((r.name, outcome));
    }
    report
}

/// Runs [`restamp_pass`] when this replica becomes the leader (including at
/// startup) and every `interval` while it leads, until `stop` resolves.
pub async fn run_restamper(
    provider: Arc<Provider>,
    claims: NodeClaimList,
    stamper: NodeClaimStamper,
    interval: Duration,
    is_leader: Arc<dyn Fn() -> bool + Send + Sync>,
    stop: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(stop);
    let mut was_leader = false;
    let mut last_pass: Option<Instant> = None;
    loop {
        let leader = is_leader();
        let due = last_pass.is_none_or(|t| t.elapsed() >= interval);
        if leader && (!was_leader || due) {
            restamp_pass(&provider, &claims, &stamper).await;
            last_pass = Some(Instant::now());
        }
        was_leader = leader;
        tokio::select! {
            _ = &mut stop => return,
            _ = tokio::time::sleep(LEADERSHIP_POLL) => {}
        }
    }
}

#[cfg(test)]
#[path = "drift_stamp_tests.rs"]
mod tests;
