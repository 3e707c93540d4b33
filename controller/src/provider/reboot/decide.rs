//! What a Reboot call does, as pure functions of what was read: the
//! NodeClaim (its install, its replay record) and the server (whose it is,
//! whether it can take a reboot now, its timestamp). `mod.rs` reads, asks
//! [`decide`], then applies; every error is classified here, once.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::Value;

use super::record::{MachineKind, RebootRecord, RebootState};
use crate::install::{Phase, Progress};
use crate::provider::standby::StandbyServer;
use crate::provider::{KubeError, ProviderError, TAG_CLUSTER, TAG_NODECLAIM, tag_value};
use crate::scaleway::instance::{self, ServerState};
use crate::scaleway::{ApiError, BootType, Server, ServerStatus};

/// Where the node's install stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Install {
    /// Joined: a reboot brings the node back from its own disk and config.
    Joined,
    /// Not joined yet: the install engine (or the VM's first boot) still
    /// works on it. Asked again later.
    Running(String),
    /// Over without a node (failed): never rebooted.
    Ended(String),
}

/// Whose the server is, by its tags.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Owner {
    /// This cluster's, and this NodeClaim's.
    Ours,
    /// Someone else's, a standby, a server being wiped: never rebooted.
    Other(String),
}

/// Whether the machine can take a reboot now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Power {
    Up,
    /// In a transient state (starting, stopping, ...): asked again later.
    Busy(String),
    /// Stopped, deleted, in rescue, locked: a reboot cannot cure it.
    Down(String),
}

/// The machine as read just now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Machine {
    pub kind: MachineKind,
    pub zone: String,
    pub server_id: String,
    pub owner: Owner,
    pub power: Power,
    /// `updated_at` / `modification_date` (empty when the API sent none).
    pub stamp: String,
}

/// The NodeClaim as read just now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Claim {
    pub deleting: bool,
    pub install: Install,
}

/// What to do after the server was read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The `issuing` call of this operation landed (the server's timestamp
    /// moved since): record `accepted`, answer OK, do not call again.
    Confirm,
    /// Record `issuing`, call, record `accepted`.
    Issue,
    /// Answer "not now" (core asks again).
    NotNow(String),
    /// Never reboot this machine for this NodeClaim.
    Refuse(String),
}

/// This operation was accepted before: answer OK without reading or calling
/// anything.
pub fn replayed(record: Option<&RebootRecord>, operation: &str) -> bool {
    record.is_some_and(|r| r.operation == operation && r.state == RebootState::Accepted)
}

/// The decision, once [`replayed`] said no.
///
/// Order matters: a server that is no longer this NodeClaim's is refused
/// before anything (its timestamp moved for another reason: a retag);
/// then an `issuing` record of this operation is settled by the server's
/// timestamp, before the safety checks (the reboot that landed makes the
/// server busy); an `issuing` record younger than `in_flight` may belong to
/// a call still under way (another replica, a call cut by the RPC's
/// deadline), so it is neither called again nor given up on.
pub fn decide(
    operation: &str,
    record: Option<&RebootRecord>,
    claim: &Claim,
    machine: &Machine,
    now: DateTime<Utc>,
    in_flight: Duration,
) -> Decision {
    if let Owner::Other(why) = &machine.owner {
        return Decision::Refuse(why.clone());
    }
    let pending = record.filter(|r| {
        r.operation == operation
            && r.state == RebootState::Issuing
            && r.kind == machine.kind
            && r.server_id == machine.server_id
    });
    if let Some(r) = pending {
        if !r.server_stamp.is_empty() && r.server_stamp != machine.stamp {
            return Decision::Confirm;
        }
        let age = (now - r.issued_at).to_std().unwrap_or_default();
        if age < in_flight {
            // No figure that changes between calls: repeats of this Event
            // are counted, not written again.
            return Decision::NotNow(format!(
                "a call of this operation recorded less than {}s ago may still land (the server's timestamp has not moved yet)",
                in_flight.as_secs()
            ));
        }
    }
    if claim.deleting {
        return Decision::Refuse("the NodeClaim is being deleted".into());
    }
    match &claim.install {
        Install::Joined => {}
        Install::Running(why) => return Decision::NotNow(why.clone()),
        Install::Ended(why) => return Decision::Refuse(why.clone()),
    }
    match &machine.power {
        Power::Up => Decision::Issue,
        Power::Busy(why) => Decision::NotNow(why.clone()),
        Power::Down(why) => Decision::Refuse(why.clone()),
    }
}

/// An Elastic Metal node's install: persisted on the NodeClaim, and this
/// process's engine when it runs the install now.
pub fn em_install(claim: &Value, running_here: Option<Phase>) -> Install {
    if let Some(phase) = running_here.filter(|p| !p.is_terminal()) {
        return Install::Running(format!(
            "the install of this node is at phase {phase}, not joined"
        ));
    }
    match Progress::from_annotations(&annotations(claim)).phase {
        Some(Phase::Joined) => Install::Joined,
        Some(Phase::Failed) => Install::Ended("the install of this node failed".into()),
        Some(Phase::Standby) => Install::Ended("the server is a standby server, not a node".into()),
        Some(phase) => Install::Running(format!(
            "the install of this node is at phase {phase}, not joined"
        )),
        None => Install::Running("no install progress is recorded on the NodeClaim yet".into()),
    }
}

/// A VM has no install: it joined once core marked its NodeClaim
/// `Initialized` (its Node Ready, its startup taints gone). A reboot call
/// comes before core marks it `Unknown` for the reboot.
pub fn vm_install(claim: &Value) -> Install {
    if crate::provider::nodeclaim::initialized(claim) {
        Install::Joined
    } else {
        Install::Running("the VM has not joined yet (the NodeClaim is not Initialized)".into())
    }
}

/// An Elastic Metal server: this NodeClaim's, and able to reboot.
pub fn em_machine(server: &Server, cluster: &str, claim: &str) -> Machine {
    let id = &server.id;
    let owner = if tag_value(server, TAG_CLUSTER) != Some(cluster) {
        Owner::Other(format!("server {id} does not carry this cluster's tag"))
    } else if let Some(standby) = StandbyServer::of(server) {
        Owner::Other(format!(
            "server {id} is a standby server of NodeClass {} ({}), not this NodeClaim's",
            standby.class,
            standby.state.as_str()
        ))
    } else {
        match tag_value(server, TAG_NODECLAIM) {
            Some(c) if c == claim => Owner::Ours,
            Some(other) => Owner::Other(format!("server {id} belongs to NodeClaim {other}")),
            None => Owner::Other(format!("server {id} is claimed by no NodeClaim")),
        }
    };
    let status = wire(&server.status);
    let power = match server.status {
        ServerStatus::Deleting => Power::Down(format!("server {id} is being deleted")),
        _ if server.boot_type == BootType::Rescue => Power::Down(format!(
            "server {id} is booted into rescue (its disk is being written)"
        )),
        ServerStatus::Ready => Power::Up,
        ServerStatus::Stopping
        | ServerStatus::Starting
        | ServerStatus::Resetting
        | ServerStatus::Migrating
        | ServerStatus::Delivering
        | ServerStatus::Ordered => Power::Busy(format!("server {id} is {status}")),
        ServerStatus::Stopped
        | ServerStatus::Error
        | ServerStatus::Locked
        | ServerStatus::OutOfStock
        | ServerStatus::Unknown
        | ServerStatus::Other => Power::Down(format!("server {id} is {status}")),
    };
    Machine {
        kind: MachineKind::Baremetal,
        zone: server.zone.clone(),
        server_id: id.clone(),
        owner,
        power,
        stamp: server.updated_at.clone(),
    }
}

/// A VM: this NodeClaim's, and able to reboot.
pub fn vm_machine(server: &instance::Server, cluster: &str, claim: &str) -> Machine {
    let id = &server.id;
    let ours = |key: &str, value: &str| server.tags.contains(&crate::provider::tag(key, value));
    let owner = if !ours(TAG_CLUSTER, cluster) {
        Owner::Other(format!("VM {id} does not carry this cluster's tag"))
    } else if !ours(TAG_NODECLAIM, claim) {
        Owner::Other(format!("VM {id} is not tagged for this NodeClaim"))
    } else {
        Owner::Ours
    };
    let state = wire(&server.state);
    let power = if server.state_detail.contains("terminating") {
        Power::Down(format!("VM {id} is being terminated"))
    } else {
        match server.state {
            ServerState::Running => Power::Up,
            ServerState::Starting | ServerState::Stopping | ServerState::Other => {
                Power::Busy(format!("VM {id} is {state}"))
            }
            ServerState::Stopped | ServerState::StoppedInPlace | ServerState::Locked => {
                Power::Down(format!("VM {id} is {state}"))
            }
        }
    };
    Machine {
        kind: MachineKind::Instance,
        zone: server.zone.clone(),
        server_id: id.clone(),
        owner,
        power,
        stamp: server.modification_date.clone().unwrap_or_default(),
    }
}

/// A failed Scaleway call, as core should see it (the proto's Reboot rows):
/// gone or forbidden fail the reboot at once (core replaces the node); a
/// busy server is "not now"; an API that did not answer is retried; a
/// request the API refuses cannot be fixed by retrying.
pub fn api_error(doing: &str, err: ApiError) -> ProviderError {
    let message = format!("{doing}: {err}");
    match err {
        ApiError::NotFound(_) => ProviderError::NotFound(message),
        ApiError::Unauthorized(_) => ProviderError::PermissionDenied(message),
        ApiError::TransientState(_) => ProviderError::NotNow(message),
        ApiError::Throttled
        | ApiError::Unavailable(_)
        | ApiError::Timeout(_)
        | ApiError::Inconsistent(_) => ProviderError::Unavailable(message),
        ApiError::Invalid(_) | ApiError::OutOfStock(_) | ApiError::QuotaExceeded(_) => {
            ProviderError::RebootRefused(message)
        }
    }
}

/// A failed read or write of the NodeClaim: a write that lost a race is
/// "not now" (the next call reads the winner's record), a refusal (RBAC) is
/// a missing permission: without its record no reboot is safe to replay.
pub fn kube_error(doing: &str, err: KubeError) -> ProviderError {
    let message = format!("{doing}: {err}");
    match err {
        KubeError::Conflict(_) => ProviderError::NotNow(message),
        KubeError::Unavailable(_) => ProviderError::Unavailable(message),
        KubeError::Refused(_) => ProviderError::PermissionDenied(message),
    }
}

/// The metric outcome of a failed call.
pub fn outcome(err: &ProviderError) -> &'static str {
    match err {
        ProviderError::RebootRefused(_) => "refused",
        ProviderError::NotNow(_) => "not_now",
        ProviderError::Unavailable(_) => "unavailable",
        _ => "failed",
    }
}

/// The NodeClaim's annotations.
pub fn annotations(claim: &Value) -> std::collections::BTreeMap<String, String> {
    claim
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// A value as the API spells it (`ready`, `stopped in place`, `wiping`).
fn wire<T: serde::Serialize + std::fmt::Debug>(value: &T) -> String {
    match serde_json::to_value(value) {
        Ok(Value::String(s)) => s,
        _ => format!("{value:?}").to_lowercase(),
    }
}
