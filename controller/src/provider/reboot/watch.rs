//! The reboot deadline: core waits 20 minutes (a constant) for a rebooted
//! Node to show a new `bootID` before it gives up and replaces the node,
//! while an Elastic Metal reboot takes 3-5 minutes and a VM's about one. A
//! leader-only pass ends the wait sooner: a reboot accepted longer ago than
//! its kind's deadline whose Node still shows the pre-boot `bootID` (or is
//! gone) gets a `RebootNotReturned` Event and its NodeClaim deleted, as the
//! install engine does after a terminal install failure; core's termination
//! then deletes the server and provisions a replacement.

use std::sync::Arc;
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;
use tracing::{info, warn};

use super::decide::annotations;
use super::record::{PRE_BOOT_ID_ANNOTATION, RebootRecord, RebootState};
use super::{NodeBoots, RebootSettings};
use crate::install::InstallEvent;
use crate::metrics::reboot_metrics;
use crate::provider::Provider;

/// A reboot the pass looks at: accepted, in core's current episode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Watched {
    pub name: String,
    /// `status.nodeName`, else the NodeClaim's name (ours are equal).
    pub node: String,
    pub record: RebootRecord,
    /// Core's pre-boot `bootID`, equal to the record's.
    pub pre_boot_id: String,
    /// The reboot's deadline has passed.
    pub due: bool,
    pub deadline: Duration,
}

/// The reboot of `claim` the pass watches, if any: a record `accepted` for
/// the episode core still runs (its pre-boot annotation is the one the
/// record was written with; core removes it when the episode ends), on a
/// NodeClaim not being deleted.
pub fn watched(claim: &Value, now: DateTime<Utc>, settings: &RebootSettings) -> Option<Watched> {
    if claim.pointer("/metadata/deletionTimestamp").is_some() {
        return None;
    }
    let annotations = annotations(claim);
    let record = RebootRecord::of(&annotations).filter(|r| r.state == RebootState::Accepted)?;
    let pre_boot_id = annotations.get(PRE_BOOT_ID_ANNOTATION)?;
    if record.pre_boot_id.as_ref() != Some(pre_boot_id) {
        return None;
    }
    let name = claim.pointer("/metadata/name").and_then(Value::as_str)?;
    let node = claim
        .pointer("/status/nodeName")
        .and_then(Value::as_str)
        .filter(|n| !n.is_empty())
        .unwrap_or(name);
    let deadline = settings.deadline(record.kind);
    let elapsed = (now - record.issued_at).to_std().unwrap_or_default();
    Some(Watched {
        name: name.to_string(),
        node: node.to_string(),
        pre_boot_id: pre_boot_id.clone(),
        due: elapsed >= deadline,
        deadline,
        record,
    })
}

/// The Node booted again: its `bootID` is another one.
pub fn came_back(pre_boot_id: &str, boot_id: Option<&str>) -> bool {
    boot_id.is_some_and(|b| !b.is_empty() && b != pre_boot_id)
}

/// What a pass did for one watched reboot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchOutcome {
    /// Within its deadline.
    Waiting,
    /// A new `bootID`: core finishes the reboot.
    Returned,
    /// Past its deadline on the old `bootID`: NodeClaim deleted.
    NotReturned,
    /// A read or the deletion failed; tried again next pass.
    Retry(String),
}

pub struct RebootWatch {
    provider: Arc<Provider>,
    boots: Arc<dyn NodeBoots>,
}

impl RebootWatch {
    pub fn new(provider: Arc<Provider>, boots: Arc<dyn NodeBoots>) -> Self {
        RebootWatch { provider, boots }
    }

    /// One pass over every NodeClaim; `Err` when they cannot be listed.
    pub async fn pass(&self) -> Result<Vec<(String, WatchOutcome)>, String> {
        let Some(ports) = self.provider.reboot_ports() else {
            return Ok(Vec::new());
        };
        let claims = ports.claims.list().await.map_err(|e| e.to_string())?;
        let now = (ports.clock)();
        let mut out = Vec::new();
        for w in claims
            .iter()
            .filter_map(|c| watched(c, now, &ports.settings))
        {
            let outcome = if w.due {
                self.settle(&w, now).await
            } else {
                WatchOutcome::Waiting
            };
            out.push((w.name, outcome));
        }
        Ok(out)
    }

    async fn settle(&self, w: &Watched, now: DateTime<Utc>) -> WatchOutcome {
        let ports = self
            .provider
            .reboot_ports()
            .expect("settle is reached with the ports");
        let boot = match self.boots.boot_id(&w.node).await {
            Ok(boot) => boot,
            Err(e) => return WatchOutcome::Retry(format!("reading Node {}: {e}", w.node)),
        };
        if came_back(&w.pre_boot_id, boot.as_deref()) {
            return WatchOutcome::Returned;
        }
        let r = &w.record;
        let waited = (now - r.issued_at).to_std().unwrap_or_default();
        let seen = match &boot {
            Some(b) => format!("still reports boot id {b}"),
            None => "is gone".to_string(),
        };
        let message = format!(
            "{} {} in {} accepted a reboot at {} (operation {}); Node {} {seen} after {}s, past the {}s deadline: deleting the NodeClaim so that Karpenter replaces the node",
            r.kind.noun(),
            r.server_id,
            r.zone,
            r.issued_at
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            r.operation,
            w.node,
            waited.as_secs(),
            w.deadline.as_secs(),
        );
        warn!(nodeclaim = %w.name, server_id = %r.server_id, operation = %r.operation,
            kind = r.kind.as_str(), "reboot did not return: {message}");
        ports
            .nodes
            .event(
                &w.name,
                InstallEvent {
                    warning: true,
                    reason: "RebootNotReturned".into(),
                    message,
                },
            )
            .await;
        match ports
            .nodes
            .delete_node_claim(&w.name, "reboot did not return")
            .await
        {
            Ok(()) => {
                reboot_metrics().count(r.kind.as_str(), "not_returned");
                info!(nodeclaim = %w.name, server_id = %r.server_id, reason = "reboot did not return",
                    "deleted NodeClaim");
                WatchOutcome::NotReturned
            }
            Err(e) => WatchOutcome::Retry(format!("deleting NodeClaim {}: {e}", w.name)),
        }
    }
}

/// Runs a pass every `interval` while this replica leads, until `shutdown`.
pub async fn run_reboot_watch(
    watch: RebootWatch,
    interval: Duration,
    is_leader: Arc<dyn Fn() -> bool + Send + Sync>,
    shutdown: impl std::future::Future<Output = ()>,
) {
    let mut shutdown = std::pin::pin!(shutdown);
    loop {
        if is_leader() {
            match watch.pass().await {
                Ok(outcomes) => {
                    for (name, outcome) in outcomes {
                        if let WatchOutcome::Retry(why) = outcome {
                            warn!(nodeclaim = %name, %why, "reboot deadline check failed; retried next pass");
                        }
                    }
                }
                Err(error) => warn!(%error, "listing NodeClaims for the reboot deadline pass"),
            }
        }
        tokio::select! {
            _ = &mut shutdown => return,
            _ = tokio::time::sleep(interval) => {}
        }
    }
}
