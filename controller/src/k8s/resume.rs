//! The resume loop: at startup, whenever this replica becomes the leader, and
//! then periodically, hands the engine every install in flight that this
//! process does not run (see `provider/resume.rs` for the per-NodeClaim
//! rules). Only the leader resumes, as only the leader installs.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;
use tracing::{info, warn};

use crate::k8s::nodes::NodeClaimList;
use crate::provider::{Provider, ResumeOutcome};

/// How often leadership is checked between two passes.
const LEADERSHIP_POLL: Duration = Duration::from_secs(1);

/// One pass: list every NodeClaim, resume what needs it. A failed list skips
/// the pass (nothing is resumed from a partial view, and nothing is lost:
/// the next pass lists again).
pub async fn resume_pass(provider: &Provider, claims: &NodeClaimList) {
    let listed = match claims.list().await {
        Ok(listed) => listed,
        Err(error) => {
            warn!(%error, "listing NodeClaims for the resume pass failed; retrying next pass");
            return;
        }
    };
    let report = provider.resume_installs(&listed).await;
    let resumed = report
        .iter()
        .filter(|(_, o)| *o == ResumeOutcome::Resumed)
        .count();
    let retry = report
        .iter()
        .filter(|(_, o)| matches!(o, ResumeOutcome::Retry(_)))
        .count();
    if resumed + retry > 0 {
        info!(nodeclaims = listed.len(), resumed, retry, "resume pass");
    }
}

/// Runs [`resume_pass`] when this replica becomes the leader (including at
/// startup) and every `interval` while it leads, until `stop` resolves.
pub async fn run_resumer(
    provider: Arc<Provider>,
    claims: NodeClaimList,
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
            resume_pass(&provider, &claims).await;
            last_pass = Some(Instant::now());
        }
        was_leader = leader;
        tokio::select! {
            _ = &mut stop => return,
            _ = tokio::time::sleep(LEADERSHIP_POLL) => {}
        }
    }
}
