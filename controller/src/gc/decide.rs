//! What the orphan sweeper does with each server: a pure function of one
//! snapshot (the servers listed, the NodeClaims listed after them, the
//! installs in flight, the clock), shared by the sweeper and the `servers`
//! command so that the command shows exactly what a pass would do.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;

use crate::provider::standby::TAG_STANDBY;
use crate::provider::{TAG_CLUSTER, TAG_NODECLAIM, TAG_NODECLASS, provider_id, tag_value};
use crate::scaleway::{Server, ServerStatus};

/// What happens to a server (the `decision` label of
/// `karpenter_scaleway_sweeper_decisions_total`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Verdict {
    /// Kept: it is in use, being installed, young, or already going.
    Spared,
    /// Never touched: this cluster cannot prove it owns the server.
    Refused,
    /// Deleted: owned, unclaimed, older than the grace, not being installed.
    Deleted,
    /// What `Deleted` would have been, in dry-run mode.
    WouldDelete,
}

impl Verdict {
    pub fn as_str(self) -> &'static str {
        match self {
            Verdict::Spared => "spared",
            Verdict::Refused => "refused",
            Verdict::Deleted => "deleted",
            Verdict::WouldDelete => "would_delete",
        }
    }

    /// The Event reason.
    pub fn event_reason(self) -> &'static str {
        match self {
            Verdict::Spared => "OrphanSpared",
            Verdict::Refused => "OrphanRefused",
            Verdict::Deleted => "OrphanDeleted",
            Verdict::WouldDelete => "OrphanWouldDelete",
        }
    }

    /// Events of everything but a spared server are Warnings: each one is
    /// something an operator should look at.
    pub fn is_warning(self) -> bool {
        self != Verdict::Spared
    }
}

/// Why (the `reason` label).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Reason {
    /// A NodeClaim has its providerID, or its nodeclaim tag names one.
    Claimed,
    /// This process is installing it.
    InFlight,
    /// Unclaimed, but younger than the grace (or of unknown age).
    WithinGrace,
    /// Already being deleted.
    Deleting,
    /// Cluster tag absent or different, another project, or no nodeclaim tag.
    OwnershipUnproven,
    /// Owned, unclaimed, older than the grace, not in flight.
    Orphaned,
    /// A volume still attached to (or named by) a server.
    Attached,
    /// An Instance starting, stopping or locked: no action is possible
    /// until it settles.
    Transitioning,
    /// A standby server of this cluster: the standby pools own it (they
    /// order, recycle and release it; `provider/standby`).
    Standby,
    /// Its NodeClaim was deleted (confirmed by a read from the API server)
    /// before core learnt the server: released as Delete releases a server,
    /// without waiting for the grace.
    ClaimDeleted,
}

impl Reason {
    pub fn as_str(self) -> &'static str {
        match self {
            Reason::Claimed => "claimed",
            Reason::InFlight => "in_flight",
            Reason::WithinGrace => "within_grace",
            Reason::Deleting => "deleting",
            Reason::OwnershipUnproven => "ownership_unproven",
            Reason::Orphaned => "orphaned",
            Reason::Attached => "attached",
            Reason::Transitioning => "transitioning",
            Reason::Standby => "standby",
            Reason::ClaimDeleted => "claim_deleted",
        }
    }
}

/// The rules of a pass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SweepPolicy {
    /// Value of the `karpenter.scaleway.com/cluster` tag this cluster owns.
    pub cluster_name: String,
    pub project_id: String,
    /// An unclaimed server is left alone this long after its creation; it
    /// must exceed the longest install.
    pub grace: Duration,
    /// Decide, report, delete nothing.
    pub dry_run: bool,
}

/// One server's decision.
#[derive(Debug, Clone, PartialEq)]
pub struct Decision {
    pub server: Server,
    pub verdict: Verdict,
    pub reason: Reason,
    /// Time since the server's creation; `None` when `created_at` is unreadable.
    pub age: Option<Duration>,
    /// The NodeClaim that claims the server, when one does.
    pub claim: Option<String>,
    /// What exactly was seen (for the Event note and the CLI).
    pub detail: String,
}

impl Decision {
    /// Spared-because-claimed is the steady state of every node: counted,
    /// but an Event per node per pass would only be noise.
    pub fn needs_event(&self) -> bool {
        // Claimed servers and standby servers are the normal case: an Event
        // per pass for each would only bury the ones that matter.
        !(self.verdict == Verdict::Spared
            && matches!(self.reason, Reason::Claimed | Reason::Standby))
    }

    /// The Event note: server id, zone, name, age, decision and reason.
    pub fn note(&self) -> String {
        format!(
            "server {} ({}) in {}, age {}: {} ({}): {}",
            self.server.id,
            self.server.name,
            self.server.zone,
            self.age.map(format_age).unwrap_or_else(|| "unknown".into()),
            self.verdict.as_str(),
            self.reason.as_str(),
            self.detail
        )
    }

    /// The NodeClass named by the server's tag, if any.
    pub fn nodeclass(&self) -> Option<&str> {
        tag_value(&self.server, TAG_NODECLASS)
    }
}

/// `3d4h`, `2h5m`, `4m10s`, `12s`: the two largest units.
pub fn format_age(age: Duration) -> String {
    let s = age.as_secs();
    let (d, h, m, sec) = (s / 86_400, s / 3600 % 24, s / 60 % 60, s % 60);
    if d > 0 {
        format!("{d}d{h}h")
    } else if h > 0 {
        format!("{h}h{m}m")
    } else if m > 0 {
        format!("{m}m{sec}s")
    } else {
        format!("{sec}s")
    }
}

/// The NodeClaims, indexed by what can claim a server.
struct Claims<'a> {
    names: HashSet<&'a str>,
    by_provider_id: HashMap<&'a str, &'a str>,
}

impl<'a> Claims<'a> {
    fn new(claims: &'a [Value]) -> Self {
        let mut names = HashSet::new();
        let mut by_provider_id = HashMap::new();
        for c in claims {
            let Some(name) = c.pointer("/metadata/name").and_then(Value::as_str) else {
                continue;
            };
            names.insert(name);
            if let Some(pid) = c.pointer("/status/providerID").and_then(Value::as_str) {
                by_provider_id.insert(pid, name);
            }
        }
        Claims {
            names,
            by_provider_id,
        }
    }

    /// The NodeClaim claiming the server: by providerID, else by the name in
    /// its nodeclaim tag (Create tags the server before the NodeClaim gets
    /// its providerID).
    fn claiming(&self, server: &Server) -> Option<String> {
        let pid = provider_id(&server.zone, &server.id);
        if let Some(name) = self.by_provider_id.get(pid.as_str()) {
            return Some((*name).to_string());
        }
        tag_value(server, TAG_NODECLAIM)
            .filter(|name| self.names.contains(name))
            .map(str::to_string)
    }
}

/// Why ownership cannot be proven, if it cannot.
fn ownership_gap(server: &Server, policy: &SweepPolicy) -> Option<String> {
    match tag_value(server, TAG_CLUSTER) {
        None => return Some(format!("no {TAG_CLUSTER} tag")),
        Some(c) if c != policy.cluster_name => {
            return Some(format!(
                "{TAG_CLUSTER} is {c:?}, not {:?}",
                policy.cluster_name
            ));
        }
        Some(_) => {}
    }
    if server.project_id != policy.project_id {
        return Some(format!(
            "project {:?} is not {:?}",
            server.project_id, policy.project_id
        ));
    }
    if tag_value(server, TAG_NODECLAIM).is_none_or(str::is_empty) {
        return Some(format!("no {TAG_NODECLAIM} tag"));
    }
    None
}

/// The NodeClass whose standby server this is, when it is one of this
/// cluster's (its tag, this project, no NodeClaim tag).
fn standby_of<'a>(server: &'a Server, policy: &SweepPolicy) -> Option<&'a str> {
    let class = tag_value(server, TAG_STANDBY)?;
    (tag_value(server, TAG_CLUSTER) == Some(policy.cluster_name.as_str())
        && server.project_id == policy.project_id
        && tag_value(server, TAG_NODECLAIM).is_none())
    .then_some(class)
}

/// How old a server whose NodeClaim was deleted must be before it is
/// released: the moments in which a Create may still be ordering it for a
/// NodeClaim being deleted at that very time.
pub const CLAIM_DELETED_GRACE: Duration = Duration::from_secs(120);

/// The NodeClaims named by servers' nodeclaim tags that `claims` lacks: the
/// names to read again from the API server before [`decide`] may take them
/// as deleted (standby servers and servers this cluster cannot prove it owns
/// excluded).
pub fn unlisted_claims(servers: &[Server], claims: &[Value], policy: &SweepPolicy) -> Vec<String> {
    let index = Claims::new(claims);
    let mut out: Vec<String> = servers
        .iter()
        .filter(|s| standby_of(s, policy).is_none() && ownership_gap(s, policy).is_none())
        .filter(|s| index.claiming(s).is_none())
        .filter_map(|s| tag_value(s, TAG_NODECLAIM).map(str::to_string))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// One decision per server, in the order of `servers`. `claims` must have
/// been listed after `servers` (a server ordered in between is then seen
/// with its NodeClaim); `deleted` holds NodeClaim names a fresh read found
/// absent (see [`unlisted_claims`]); `in_flight` holds the ids of servers an
/// install of this process is working on.
pub fn decide(
    servers: &[Server],
    claims: &[Value],
    deleted: &HashSet<String>,
    in_flight: &HashSet<String>,
    now: DateTime<Utc>,
    policy: &SweepPolicy,
) -> Vec<Decision> {
    let index = Claims::new(claims);
    servers
        .iter()
        .map(|server| decide_one(server, &index, deleted, in_flight, now, policy))
        .collect()
}

fn decide_one(
    server: &Server,
    claims: &Claims<'_>,
    deleted: &HashSet<String>,
    in_flight: &HashSet<String>,
    now: DateTime<Utc>,
    policy: &SweepPolicy,
) -> Decision {
    let age = DateTime::parse_from_rfc3339(&server.created_at)
        .ok()
        .map(|t| (now - t.with_timezone(&Utc)).to_std().unwrap_or_default());
    let claim = claims.claiming(server);
    let tagged = tag_value(server, TAG_NODECLAIM).unwrap_or("");
    let (verdict, reason, detail) = if let Some(class) = standby_of(server, policy) {
        (
            Verdict::Spared,
            Reason::Standby,
            format!("a standby server of NodeClass {class}: its standby pool owns it"),
        )
    } else if let Some(gap) = ownership_gap(server, policy) {
        (Verdict::Refused, Reason::OwnershipUnproven, gap)
    } else if in_flight.contains(&server.id) {
        (
            Verdict::Spared,
            Reason::InFlight,
            "an install of this controller is working on it".to_string(),
        )
    } else if let Some(name) = &claim {
        (
            Verdict::Spared,
            Reason::Claimed,
            format!("NodeClaim {name} claims it"),
        )
    } else if server.status == ServerStatus::Deleting {
        (
            Verdict::Spared,
            Reason::Deleting,
            "already being deleted".to_string(),
        )
    } else if deleted.contains(tagged) && age.is_some_and(|a| a >= CLAIM_DELETED_GRACE) {
        // Core deletes a NodeClaim whose Create never answered (the answer
        // was lost after the order) without calling Delete, since it has no
        // providerID: nobody else releases this server.
        let (verdict, dry) = deletion(policy, "released");
        (
            verdict,
            Reason::ClaimDeleted,
            format!(
                "NodeClaim {tagged} was deleted before it learnt this server (read again from the API server), no install in flight{dry}"
            ),
        )
    } else {
        match age {
            None => (
                Verdict::Spared,
                Reason::WithinGrace,
                format!(
                    "no NodeClaim {tagged}; creation time {:?} unreadable, so never old enough",
                    server.created_at
                ),
            ),
            Some(age) if age < policy.grace => (
                Verdict::Spared,
                Reason::WithinGrace,
                format!(
                    "no NodeClaim {tagged}; deletable once older than the grace ({})",
                    format_age(policy.grace)
                ),
            ),
            Some(_) => {
                let (verdict, dry) = deletion(policy, "deleted");
                (
                    verdict,
                    Reason::Orphaned,
                    format!(
                        "no NodeClaim {tagged}, older than the grace ({}), no install in flight{dry}",
                        format_age(policy.grace)
                    ),
                )
            }
        }
    };
    Decision {
        server: server.clone(),
        verdict,
        reason,
        age,
        claim,
        detail,
    }
}

/// The verdict of a server to go, and what the note adds in dry-run mode
/// (`done`: what would not be done).
fn deletion(policy: &SweepPolicy, done: &str) -> (Verdict, String) {
    if policy.dry_run {
        (Verdict::WouldDelete, format!("; dry run: not {done}"))
    } else {
        (Verdict::Deleted, String::new())
    }
}

#[cfg(test)]
#[path = "decide_tests.rs"]
mod tests;
