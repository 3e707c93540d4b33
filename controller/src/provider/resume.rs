//! Resuming installs a previous controller (or leader) started.
//!
//! Karpenter calls Create once per NodeClaim: after a restart, a NodeClaim
//! that already has its providerID is never handed to this process again, so
//! the installs in flight would stall until the engine's deadlines (or
//! Karpenter's) kill them. The resume pass finds such NodeClaims, rebuilds
//! their install spec exactly as Create does, and gives the engine the
//! progress persisted on them.

use serde_json::Value;
use tracing::{debug, info, warn};

use super::nodeclaim::{self, NodeClaimView};
use super::{Placement, Provider, install_spec, parse_provider_id, tag_value};
use crate::install::{Phase, Progress};
use crate::nodeclass;
use crate::scaleway::{ApiError, ServerStatus};

/// What the resume pass did with one NodeClaim.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ResumeOutcome {
    /// Handed to the engine with its persisted progress.
    Resumed,
    /// Not a NodeClaim of this provider, or its server lacks this cluster's
    /// ownership tag: never touched.
    NotOurs,
    /// Being deleted, not launched yet (no providerID), or its install
    /// finished (`failed`, or `joined` with the NodeClaim Initialized):
    /// nothing to resume.
    Inactive,
    /// This process already runs (or ran) the install.
    AlreadyKnown,
    /// The server no longer exists (or is being deleted): Karpenter's garbage
    /// collection removes the NodeClaim.
    ServerGone,
    /// Could not be resumed this pass (API error, NodeClass or Secret
    /// missing); the next pass tries again.
    Retry(String),
}

/// The outcome per NodeClaim name, in input order.
pub type ResumeReport = Vec<(String, ResumeOutcome)>;

impl Provider {
    /// Resumes every NodeClaim of `claims` (Kubernetes JSON, as listed from
    /// the API server) whose install is in flight but not running here.
    pub async fn resume_installs(&self, claims: &[Value]) -> ResumeReport {
        let mut report = Vec::with_capacity(claims.len());
        for claim in claims {
            let name = claim
                .pointer("/metadata/name")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string();
            let outcome = self.resume_install(claim).await;
            match &outcome {
                ResumeOutcome::Resumed => info!(nodeclaim = %name, "resumed install"),
                ResumeOutcome::ServerGone => info!(nodeclaim = %name,
                    "the NodeClaim's server is gone; leaving the NodeClaim to Karpenter's garbage collection"),
                ResumeOutcome::Retry(reason) => {
                    warn!(nodeclaim = %name, %reason, "cannot resume the install yet")
                }
                other => debug!(nodeclaim = %name, outcome = ?other, "not resumed"),
            }
            report.push((name, outcome));
        }
        report
    }

    async fn resume_install(&self, claim: &Value) -> ResumeOutcome {
        if claim.pointer("/metadata/deletionTimestamp").is_some() {
            return ResumeOutcome::Inactive;
        }
        let view = match nodeclaim::parse(claim) {
            Ok(view) => view,
            Err(e) => return ResumeOutcome::Retry(format!("malformed NodeClaim: {e}")),
        };
        if !ours(&view) {
            return ResumeOutcome::NotOurs;
        }
        let Some(pid) = view.provider_id.as_deref() else {
            // Not launched: Karpenter calls Create for it.
            return ResumeOutcome::Inactive;
        };
        let Some((zone, server_id)) = parse_provider_id(pid) else {
            return ResumeOutcome::NotOurs;
        };
        let annotations = claim
            .pointer("/metadata/annotations")
            .and_then(Value::as_object)
            .map(|m| {
                m.iter()
                    .filter_map(|(k, v)| v.as_str().map(|v| (k.clone(), v.to_string())))
                    .collect()
            })
            .unwrap_or_default();
        let progress = Progress::from_annotations(&annotations);
        match progress.phase {
            Some(Phase::Failed) => return ResumeOutcome::Inactive,
            // Karpenter marks a NodeClaim Initialized only once its Node lost
            // the `uninitialized` taint. A joined one that is not was left
            // half-finished (by a version that persisted `joined` before
            // removing the taint): the engine finishes it again. One being
            // rebooted in place is not Initialized either, for a while: it
            // joined, and comes back from its own disk.
            Some(Phase::Joined) if nodeclaim::initialized(claim) || nodeclaim::rebooting(claim) => {
                return ResumeOutcome::Inactive;
            }
            _ => {}
        }
        if self.installer.knows(server_id) {
            return ResumeOutcome::AlreadyKnown;
        }
        let class_name = view
            .node_class_ref
            .as_ref()
            .map(|r| r.name.as_str())
            .unwrap_or_default();
        // A NodeClass that is momentarily not Ready (an API blip while its
        // credentials were checked) does not stop an install already paid for.
        let Some(class) = self.node_classes.get(class_name) else {
            return ResumeOutcome::Retry(format!("NodeClass {class_name} not found"));
        };
        let server = match self.api.get_server(zone, server_id).await {
            Ok(server) => server,
            Err(ApiError::NotFound(_)) => return ResumeOutcome::ServerGone,
            Err(e) => return ResumeOutcome::Retry(format!("reading server {server_id}: {e}")),
        };
        if !self.owned(&server) {
            warn!(nodeclaim = %view.name, %server_id, zone,
                "server lacks this cluster's ownership tag; not resuming its install");
            return ResumeOutcome::NotOurs;
        }
        if server.status == ServerStatus::Deleting {
            return ResumeOutcome::ServerGone;
        }
        let snapshot = self.catalog.snapshot();
        if !snapshot.is_loaded() {
            return ResumeOutcome::Retry("the offer catalog has not been read yet".into());
        }
        let Some(it) = snapshot
            .default
            .iter()
            .find(|t| t.name == server.offer_name)
        else {
            return ResumeOutcome::Retry(format!(
                "offer {} of server {server_id} is not in the catalog",
                server.offer_name
            ));
        };
        let secrets = match self.class_secrets(&class.spec).await {
            Ok(secrets) => secrets,
            Err(e) => return ResumeOutcome::Retry(e.to_string()),
        };
        let token = match self.cluster.tokens.ensure(&view.name).await {
            Ok(token) => token,
            Err(e) => return ResumeOutcome::Retry(format!("bootstrap token: {e}")),
        };
        let mut placement = Placement::of(it, &server.zone, &server.id);
        let reservation = tag_value(&server, super::standby::TAG_RESERVATION);
        if let Some(id) = reservation {
            placement.type_labels = it.reserved_node_labels(&server.zone, id);
        }
        // Adopted from standby, and nothing saved on the NodeClaim yet (the
        // restart came right after the claim): the adoption starts again
        // from the server's own standby progress.
        let progress = match (progress.phase, reservation) {
            (None, Some(_)) => {
                let standby = super::standby::progress_of(&server);
                if standby.phase == Some(Phase::Standby) {
                    standby
                } else {
                    progress
                }
            }
            _ => progress,
        };
        match install_spec(&view, &class.spec, &placement, secrets, token) {
            Ok(spec) => {
                self.installer.resume(spec, progress);
                ResumeOutcome::Resumed
            }
            Err(e) => ResumeOutcome::Retry(format!("NodeClass {}: {e}", class.name)),
        }
    }
}

/// A NodeClaim of this provider: it references our NodeClass kind and its
/// providerID (once launched) has our prefix.
fn ours(view: &NodeClaimView) -> bool {
    let kind_ok = view.node_class_ref.as_ref().is_some_and(|r| {
        r.kind == nodeclass::KIND && (r.group.is_empty() || r.group == nodeclass::GROUP)
    });
    let pid_ok = view
        .provider_id
        .as_deref()
        .is_none_or(|p| parse_provider_id(p).is_some());
    kind_ok && pid_ok
}

#[cfg(test)]
#[path = "resume_tests.rs"]
mod tests;
