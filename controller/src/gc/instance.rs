//! What the orphan sweeper does with each Instance (VM) and each SBS volume
//! of this cluster: a pure function of one snapshot (the VMs and the volumes
//! listed, the NodeClaims listed after them, the clock), like [`super::decide`]
//! for Elastic Metal.
//!
//! A VM is ours when it carries this cluster's tag, this project and a
//! nodeclaim tag (Create tags it so); it is an orphan when no NodeClaim
//! claims it (by providerID `scaleway://instance/{zone}/{id}` or by the
//! nodeclaim tag) and it is older than the VM grace. Deleting it depends on
//! its state: terminate when running, delete when stopped, power off when
//! stopped in place, wait while it starts or stops.
//!
//! A volume is ours on the same tags (Create copies them onto the SBS root).
//! A left-over one is detached (`available`, no reference), named by no VM
//! listed, claimed by no NodeClaim, and older than the grace since its
//! creation and its last detach.

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::{Reason, SweepPolicy, Verdict, format_age};
use crate::provider::{TAG_CLUSTER, TAG_NODECLAIM, TAG_NODECLASS, instance_provider_id};
use crate::scaleway::block::{Volume, VolumeStatus};
use crate::scaleway::instance::{Server, ServerState};

/// What a decision is about.
#[derive(Debug, Clone, PartialEq)]
pub enum Subject {
    Vm(Box<Server>),
    Volume(Box<Volume>),
}

/// The call that deletes (or moves towards deleting) the subject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    /// A running VM: stops it and deletes it with its local volumes; SBS
    /// volumes are detached and flexible IPs released from it.
    Terminate,
    /// A VM stopped in place still holds its hypervisor; once stopped it is
    /// deleted by a later pass.
    Poweroff,
    /// A stopped VM: `DELETE /servers/{id}`.
    DeleteServer,
    /// A detached volume: `DELETE /block/v1/.../volumes/{id}`.
    DeleteVolume,
}

impl Step {
    pub fn as_str(self) -> &'static str {
        match self {
            Step::Terminate => "terminate",
            Step::Poweroff => "poweroff",
            Step::DeleteServer => "delete server",
            Step::DeleteVolume => "delete volume",
        }
    }
}

/// One VM's or one volume's decision.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceDecision {
    pub subject: Subject,
    pub verdict: Verdict,
    pub reason: Reason,
    /// Time since creation (for a volume, since its last detach when later).
    pub age: Option<Duration>,
    /// The NodeClaim that claims it, when one does.
    pub claim: Option<String>,
    pub detail: String,
    /// Set when the verdict is `Deleted` or `WouldDelete`.
    pub step: Option<Step>,
}

impl InstanceDecision {
    pub fn id(&self) -> &str {
        match &self.subject {
            Subject::Vm(s) => &s.id,
            Subject::Volume(v) => &v.id,
        }
    }

    pub fn zone(&self) -> &str {
        match &self.subject {
            Subject::Vm(s) => &s.zone,
            Subject::Volume(v) => &v.zone,
        }
    }

    pub fn name(&self) -> &str {
        match &self.subject {
            Subject::Vm(s) => &s.name,
            Subject::Volume(v) => &v.name,
        }
    }

    fn tags(&self) -> &[String] {
        match &self.subject {
            Subject::Vm(s) => &s.tags,
            Subject::Volume(v) => &v.tags,
        }
    }

    /// `instance` or `volume`: what the Event and the logs call it.
    pub fn kind(&self) -> &'static str {
        match &self.subject {
            Subject::Vm(_) => "instance",
            Subject::Volume(_) => "volume",
        }
    }

    /// The NodeClass named by the subject's tag, if any.
    pub fn nodeclass(&self) -> Option<&str> {
        tag_in(self.tags(), TAG_NODECLASS)
    }

    /// As for Elastic Metal: no Event for the steady "claimed".
    pub fn needs_event(&self) -> bool {
        !(self.verdict == Verdict::Spared && self.reason == Reason::Claimed)
    }

    /// The Event note: kind, id, name, zone, age, decision, reason, detail.
    pub fn note(&self) -> String {
        format!(
            "{} {} ({}) in {}, age {}: {} ({}): {}",
            self.kind(),
            self.id(),
            self.name(),
            self.zone(),
            self.age.map(format_age).unwrap_or_else(|| "unknown".into()),
            self.verdict.as_str(),
            self.reason.as_str(),
            self.detail
        )
    }
}

/// The value of the `key=` tag among `tags`.
pub fn tag_in<'a>(tags: &'a [String], key: &str) -> Option<&'a str> {
    tags.iter()
        .find_map(|t| t.strip_prefix(key).and_then(|rest| rest.strip_prefix('=')))
}

/// Why ownership cannot be proven from these tags and project, if it cannot.
fn ownership_gap(tags: &[String], project: &str, policy: &SweepPolicy) -> Option<String> {
    match tag_in(tags, TAG_CLUSTER) {
        None => return Some(format!("no {TAG_CLUSTER} tag")),
        Some(c) if c != policy.cluster_name => {
            return Some(format!(
                "{TAG_CLUSTER} is {c:?}, not {:?}",
                policy.cluster_name
            ));
        }
        Some(_) => {}
    }
    if project != policy.project_id {
        return Some(format!(
            "project {project:?} is not {:?}",
            policy.project_id
        ));
    }
    if tag_in(tags, TAG_NODECLAIM).is_none_or(str::is_empty) {
        return Some(format!("no {TAG_NODECLAIM} tag"));
    }
    None
}

fn parse_time(t: Option<&str>) -> Option<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(t?)
        .ok()
        .map(|t| t.with_timezone(&Utc))
}

fn age_since(now: DateTime<Utc>, t: DateTime<Utc>) -> Duration {
    (now - t).to_std().unwrap_or_default()
}

/// The NodeClaims, indexed by what can claim a VM or a volume.
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

    /// By providerID, else by the name in the nodeclaim tag (Create tags the
    /// server before the NodeClaim gets its providerID).
    fn claiming_vm(&self, server: &Server) -> Option<String> {
        let pid = instance_provider_id(&server.zone, &server.id);
        if let Some(name) = self.by_provider_id.get(pid.as_str()) {
            return Some((*name).to_string());
        }
        self.by_tag(&server.tags)
    }

    fn by_tag(&self, tags: &[String]) -> Option<String> {
        tag_in(tags, TAG_NODECLAIM)
            .filter(|name| self.names.contains(name))
            .map(str::to_string)
    }
}

/// One decision per VM, then one per volume, in the order listed. `claims`
/// must have been listed after `servers` and `volumes` (a VM created in
/// between is then seen with its NodeClaim); `grace` is the VM grace.
pub fn decide_instances(
    servers: &[Server],
    volumes: &[Volume],
    claims: &[Value],
    now: DateTime<Utc>,
    policy: &SweepPolicy,
    grace: Duration,
) -> Vec<InstanceDecision> {
    let index = Claims::new(claims);
    // Volumes a listed VM still names (attached, or being detached).
    let named: HashMap<&str, &str> = servers
        .iter()
        .flat_map(|s| {
            s.volumes
                .values()
                .map(move |v| (v.id.as_str(), s.id.as_str()))
        })
        .collect();
    let mut out: Vec<InstanceDecision> = servers
        .iter()
        .map(|s| decide_vm(s, &index, now, policy, grace))
        .collect();
    out.extend(
        volumes
            .iter()
            .map(|v| decide_volume(v, &index, &named, now, policy, grace)),
    );
    out
}

fn delete_or_would(policy: &SweepPolicy) -> Verdict {
    if policy.dry_run {
        Verdict::WouldDelete
    } else {
        Verdict::Deleted
    }
}

fn dry_run_note(policy: &SweepPolicy) -> &'static str {
    if policy.dry_run {
        "; dry run: not deleted"
    } else {
        ""
    }
}

fn decide_vm(
    server: &Server,
    claims: &Claims<'_>,
    now: DateTime<Utc>,
    policy: &SweepPolicy,
    grace: Duration,
) -> InstanceDecision {
    let age = parse_time(server.creation_date.as_deref()).map(|t| age_since(now, t));
    let claim = claims.claiming_vm(server);
    let tagged = tag_in(&server.tags, TAG_NODECLAIM).unwrap_or("");
    let spared = |reason, detail: String| (Verdict::Spared, reason, detail, None);
    let (verdict, reason, detail, step) =
        if let Some(gap) = ownership_gap(&server.tags, &server.project, policy) {
            (Verdict::Refused, Reason::OwnershipUnproven, gap, None)
        } else if let Some(name) = &claim {
            spared(Reason::Claimed, format!("NodeClaim {name} claims it"))
        } else if let Some(wait) = within_grace(age, grace, tagged) {
            spared(Reason::WithinGrace, wait)
        } else {
            let step = match server.state {
                ServerState::Running => Some(Step::Terminate),
                ServerState::Stopped => Some(Step::DeleteServer),
                ServerState::StoppedInPlace => Some(Step::Poweroff),
                // Starting, stopping (a terminate under way), locked: the
                // API refuses every action until it settles.
                _ => None,
            };
            match step {
                Some(step) => (
                    delete_or_would(policy),
                    Reason::Orphaned,
                    format!(
                        "no NodeClaim {tagged}, older than the grace ({}): {} ({}){}",
                        format_age(grace),
                        step.as_str(),
                        state_name(server),
                        dry_run_note(policy)
                    ),
                    Some(step),
                ),
                None => spared(
                    Reason::Transitioning,
                    format!(
                        "no NodeClaim {tagged}, but {}: decided once it settles",
                        state_name(server)
                    ),
                ),
            }
        };
    InstanceDecision {
        subject: Subject::Vm(Box::new(server.clone())),
        verdict,
        reason,
        age,
        claim,
        detail,
        step,
    }
}

fn state_name(server: &Server) -> String {
    let state = serde_json::to_value(&server.state)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| "an unknown state".into());
    if server.state_detail.is_empty() {
        state
    } else {
        format!("{state}/{}", server.state_detail)
    }
}

/// `Some(why)` while the subject must be left alone for its age.
fn within_grace(age: Option<Duration>, grace: Duration, tagged: &str) -> Option<String> {
    match age {
        None => Some(format!(
            "no NodeClaim {tagged}; creation time unreadable, so never old enough"
        )),
        Some(age) if age < grace => Some(format!(
            "no NodeClaim {tagged}; deletable once older than the grace ({})",
            format_age(grace)
        )),
        Some(_) => None,
    }
}

fn decide_volume(
    volume: &Volume,
    claims: &Claims<'_>,
    named: &HashMap<&str, &str>,
    now: DateTime<Utc>,
    policy: &SweepPolicy,
    grace: Duration,
) -> InstanceDecision {
    // The later of creation and last detach: a volume detached a moment ago
    // (its VM just deleted by Delete, which deletes it next) is young.
    let created = parse_time(volume.created_at.as_deref());
    let detached = parse_time(volume.last_detached_at.as_deref());
    let age = created.map(|c| age_since(now, detached.map_or(c, |d| d.max(c))));
    let claim = claims.by_tag(&volume.tags);
    let tagged = tag_in(&volume.tags, TAG_NODECLAIM).unwrap_or("");
    let spared = |reason, detail: String| (Verdict::Spared, reason, detail, None);
    let (verdict, reason, detail, step) =
        if let Some(gap) = ownership_gap(&volume.tags, &volume.project_id, policy) {
            (Verdict::Refused, Reason::OwnershipUnproven, gap, None)
        } else if volume.status == VolumeStatus::Deleting {
            spared(Reason::Deleting, "already being deleted".into())
        } else if !volume.is_detached() {
            let to: Vec<&str> = volume
                .references
                .iter()
                .map(|r| r.product_resource_id.as_str())
                .collect();
            spared(
                Reason::Attached,
                format!("{:?}, referenced by {to:?}", volume.status),
            )
        } else if let Some(server) = named.get(volume.id.as_str()) {
            spared(
                Reason::Attached,
                format!("instance {server} still lists it"),
            )
        } else if let Some(name) = &claim {
            spared(Reason::Claimed, format!("NodeClaim {name} claims it"))
        } else if let Some(wait) = within_grace(age, grace, tagged) {
            spared(Reason::WithinGrace, wait)
        } else {
            (
                delete_or_would(policy),
                Reason::Orphaned,
                format!(
                    "detached, no instance, no NodeClaim {tagged}, older than the grace ({}){}",
                    format_age(grace),
                    dry_run_note(policy)
                ),
                Some(Step::DeleteVolume),
            )
        };
    InstanceDecision {
        subject: Subject::Volume(Box::new(volume.clone())),
        verdict,
        reason,
        age,
        claim,
        detail,
        step,
    }
}

#[cfg(test)]
#[path = "instance_tests.rs"]
mod tests;
