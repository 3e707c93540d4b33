//! Warm metal: standby servers per Elastic Metal NodeClass, installed ahead
//! of time and left in Talos maintenance mode without config, served to
//! Karpenter as `reserved` capacity (docs/standby.md).
//!
//! - `plan.rs`: the pure rules (when to order, release, recycle).
//! - `controller.rs`: the leader's loop that keeps each pool, installs and
//!   resumes standby servers, and publishes each pool's idle servers to the
//!   catalog as a reserved offering.
//! - `port.rs`: how a standby install persists its progress (on the server's
//!   own tags: there is no NodeClaim) and reports its Events (on the NodeClass).
//! - Adoption (Create of a reserved NodeClaim) and recycling (Delete) are in
//!   `adopt.rs`.
//!
//! The cloud is the source of truth: a standby server is a server with the
//! cluster's tag and [`TAG_STANDBY`]; where its install stands is in its
//! `install.karpenter.scaleway.com/...` tags. In memory there is only the
//! [`Book`] of idle servers that Create takes from, rebuilt every pass.

mod adopt;
mod controller;
mod demand;
pub(crate) use demand::{push_sample, standby_count};
pub mod plan;
pub mod planner;
mod port;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};

pub use adopt::wants_reservation;
pub use controller::{PassReport, StandbyController, run_standby};
pub use demand::{Demand, LoadSource, PlannerPorts, PlannerStatusSink};
pub use plan::{Periods, PoolSpec, State};
pub use port::StandbyNodePort;

use super::{TAG_NODECLAIM, tag_value};
use crate::catalog::Billing;
use crate::install::{PROGRESS_ANNOTATION_PREFIX, Phase, Progress};
use crate::nodeclass::NodeClassSpec;
use crate::scaleway::Server;

/// `karpenter.scaleway.com/standby=<nodeclass>`: a standby server of that
/// NodeClass (not a node). A server loses it when a node adopts it.
pub const TAG_STANDBY: &str = "karpenter.scaleway.com/standby";
/// `karpenter.scaleway.com/billing=hourly|monthly`: how the server was
/// ordered (what recycling and release go by).
pub const TAG_BILLING: &str = "karpenter.scaleway.com/billing";
/// `karpenter.scaleway.com/reservation-id=<id>`: a node adopted from standby,
/// and its reservation (List and Get report it as reserved capacity).
pub const TAG_RESERVATION: &str = crate::catalog::LABEL_RESERVATION_ID;
/// `karpenter.scaleway.com/recycled=true`: the server was a node before and
/// was wiped back to standby.
pub const TAG_RECYCLED: &str = "karpenter.scaleway.com/recycled";
/// `karpenter.scaleway.com/standby-image=<16 hex digits>`: which image (URL
/// and checksum, [`image_tag`]) the standby server was installed with; an
/// idle server whose NodeClass now resolves another image is wiped again
/// before anyone adopts it.
pub const TAG_IMAGE: &str = "karpenter.scaleway.com/standby-image";
/// `karpenter.scaleway.com/idle-since=<RFC 3339>`: when the server became
/// idle, on the API's clock (like `created_at`, which paid periods count
/// from).
pub const TAG_IDLE_SINCE: &str = "karpenter.scaleway.com/idle-since";
/// NodeClaim annotation: `"true"` deletes the node's server instead of
/// recycling it.
pub const RELEASE_ANNOTATION: &str = "karpenter.scaleway.com/release-server";

/// The billing tag's value.
pub fn billing_str(billing: Billing) -> &'static str {
    match billing {
        Billing::Hourly => "hourly",
        Billing::Monthly => "monthly",
    }
}

/// The NodeClass's billing, as the catalog spells it.
pub fn class_billing(spec: &NodeClassSpec) -> Billing {
    match spec.billing {
        crate::nodeclass::Billing::Hourly => Billing::Hourly,
        crate::nodeclass::Billing::Monthly => Billing::Monthly,
    }
}

/// The server's billing: its tag, else (servers ordered before the tag
/// existed) `fallback`, the NodeClass's.
pub fn server_billing(server: &Server, fallback: Billing) -> Billing {
    match tag_value(server, TAG_BILLING) {
        Some("monthly") => Billing::Monthly,
        Some("hourly") => Billing::Hourly,
        _ => fallback,
    }
}

/// The [`TAG_IMAGE`] value of what `spec` installs on `arch`: a digest of the
/// resolved image URL and its expected checksum. `None` when the URL cannot
/// be resolved (the NodeClass is then not Ready anyway).
pub fn image_tag(spec: &NodeClassSpec, arch: &str) -> Option<String> {
    use sha2::Digest;
    let url = crate::nodeclass::resolve_image_url(&spec.image, arch).ok()?;
    let sum = spec
        .image
        .sha256
        .as_ref()
        .and_then(|m| m.get(arch).cloned())
        .unwrap_or_default();
    let digest = sha2::Sha256::digest(format!("{url}\n{sum}").as_bytes());
    Some(digest.iter().take(8).map(|b| format!("{b:02x}")).collect())
}

/// The install progress a server's tags hold (`install.karpenter.scaleway.com/<key>=<value>`).
pub fn progress_of(server: &Server) -> Progress {
    let map: BTreeMap<String, String> = server
        .tags
        .iter()
        .filter(|t| t.starts_with(PROGRESS_ANNOTATION_PREFIX))
        .filter_map(|t| t.split_once('='))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    Progress::from_annotations(&map)
}

/// `tags` with the progress tags replaced by `progress`'s.
pub fn with_progress(tags: &[String], progress: &Progress) -> Vec<String> {
    let mut out: Vec<String> = tags
        .iter()
        .filter(|t| !t.starts_with(PROGRESS_ANNOTATION_PREFIX))
        .cloned()
        .collect();
    out.extend(
        progress
            .to_annotations()
            .into_iter()
            .map(|(k, v)| format!("{k}={v}")),
    );
    out
}

/// A standby server as the tags describe it.
#[derive(Debug, Clone, PartialEq)]
pub struct StandbyServer {
    pub server: Server,
    /// The NodeClass whose standby it is.
    pub class: String,
    pub state: State,
    pub progress: Progress,
    pub recycled: bool,
}

impl StandbyServer {
    /// A standby server (the standby tag, no NodeClaim tag), else `None`.
    /// A failed standby install reads as installing: its install deletes it.
    pub fn of(server: &Server) -> Option<StandbyServer> {
        let class = tag_value(server, TAG_STANDBY)?;
        if tag_value(server, TAG_NODECLAIM).is_some() {
            return None;
        }
        let progress = progress_of(server);
        let recycled = tag_value(server, TAG_RECYCLED) == Some("true");
        let state = match progress.phase {
            Some(Phase::Standby) => State::Idle,
            _ if recycled => State::Wiping,
            _ => State::Installing,
        };
        Some(StandbyServer {
            server: server.clone(),
            class: class.to_string(),
            state,
            progress,
            recycled,
        })
    }

    /// Idle since its standby install ended (on the API's clock; servers
    /// without the tag: when the phase was saved).
    pub fn idle_since(&self) -> Option<DateTime<Utc>> {
        if self.state != State::Idle {
            return None;
        }
        tag_value(&self.server, TAG_IDLE_SINCE)
            .and_then(|t| DateTime::parse_from_rfc3339(t).ok())
            .map(|t| t.with_timezone(&Utc))
            .or(self.progress.phase_since)
    }

    pub fn member(&self, fallback: Billing) -> plan::Member {
        plan::Member {
            id: self.server.id.clone(),
            state: self.state,
            created_at: created_at(&self.server),
            idle_since: self.idle_since(),
            billing: server_billing(&self.server, fallback),
        }
    }

    /// Whether it is one of `class`'s pool (offer, zone).
    pub fn in_pool(&self, class: &str, offer: &str, zone: &str) -> bool {
        self.class == class && self.server.offer_name == offer && self.server.zone == zone
    }
}

/// A server's order time (its creation), or now when unreadable.
pub fn created_at(server: &Server) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(&server.created_at)
        .map(|t| t.with_timezone(&Utc))
        .unwrap_or_else(|_| Utc::now())
}

/// A pool's key: (NodeClass, offer, zone).
pub type PoolKey = (String, String, String);

/// The pools of a NodeClass, validated (`idleHourlyKeep` parsed); invalid
/// pools are left out with the reason (the API server's validation keeps
/// them out in the first place).
pub fn pools_of(spec: &NodeClassSpec) -> (Vec<PoolSpec>, Vec<String>) {
    let billing = class_billing(spec);
    let mut pools = Vec::new();
    let mut errors = Vec::new();
    for p in spec.standby.iter().flat_map(|s| &s.pools) {
        match p.idle_hourly_keep() {
            Ok(idle_hourly_keep) => pools.push(PoolSpec {
                offer: p.offer.clone(),
                zone: p.zone.clone(),
                min: p.min.max(0) as u32,
                max: p.max.max(0) as u32,
                idle_hourly_keep,
                billing,
            }),
            Err(e) => errors.push(e),
        }
    }
    (pools, errors)
}

/// Events about standby servers, recorded on their NodeClass.
#[async_trait]
pub trait StandbyEvents: Send + Sync + 'static {
    async fn record(&self, class: &str, warning: bool, reason: &str, note: String);
}

/// What is known in memory between two passes: each pool's idle servers
/// (Create takes from them), the servers taken since the last listing, and
/// one lock per pool so that two Creates never take the same server.
#[derive(Default)]
pub struct Book {
    idle: Mutex<HashMap<PoolKey, Vec<Server>>>,
    /// Each pool's servers in every state (for Delete's recycling decision).
    members: Mutex<HashMap<PoolKey, usize>>,
    /// Servers claimed in this process, left out of the idle lists until a
    /// listing shows them claimed (a listing that started before the claim
    /// still shows them idle).
    taken: Mutex<HashMap<String, std::time::Instant>>,
    /// Servers recycled into a pool in this process, counted in its
    /// members until a listing shows them (a listing that started before
    /// the recycling does not).
    recycled: Mutex<HashMap<String, (PoolKey, std::time::Instant)>>,
    locks: Mutex<HashMap<PoolKey, Arc<tokio::sync::Mutex<()>>>>,
}

/// How long a taken server is kept out of the idle lists without a listing
/// showing it claimed.
const TAKEN_MEMORY: Duration = Duration::from_secs(600);

impl Book {
    fn lock_of(&self, key: &PoolKey) -> Arc<tokio::sync::Mutex<()>> {
        self.locks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(key.clone())
            .or_default()
            .clone()
    }

    /// Replaces what a pass found: every pool's idle servers and member
    /// counts, `standby` being the ids of the standby servers it listed.
    /// Taken servers stay out; servers recycled since the listing stay in
    /// their pool's count.
    pub fn replace(
        &self,
        idle: HashMap<PoolKey, Vec<Server>>,
        mut members: HashMap<PoolKey, usize>,
        claimed: &HashSet<String>,
        standby: &HashSet<String>,
    ) {
        {
            let mut recycled = self.recycled.lock().unwrap_or_else(|p| p.into_inner());
            recycled.retain(|id, (_, at)| !standby.contains(id) && at.elapsed() < TAKEN_MEMORY);
            for (key, _) in recycled.values() {
                *members.entry(key.clone()).or_default() += 1;
            }
        }
        let mut taken = self.taken.lock().unwrap_or_else(|p| p.into_inner());
        taken.retain(|id, at| !claimed.contains(id) && at.elapsed() < TAKEN_MEMORY);
        let idle = idle
            .into_iter()
            .map(|(k, servers)| {
                let servers = servers
                    .into_iter()
                    .filter(|s| !taken.contains_key(&s.id))
                    .collect();
                (k, servers)
            })
            .collect();
        *self.idle.lock().unwrap_or_else(|p| p.into_inner()) = idle;
        *self.members.lock().unwrap_or_else(|p| p.into_inner()) = members;
    }

    /// Idle servers of a pool now.
    pub fn idle_count(&self, key: &PoolKey) -> usize {
        self.idle
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .map_or(0, Vec::len)
    }

    /// Servers of a pool in every state, as last listed (plus recycled since).
    pub fn member_count(&self, key: &PoolKey) -> usize {
        self.members
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .copied()
            .unwrap_or(0)
    }

    /// Server `id` was recycled into the pool `key`.
    fn add_member(&self, key: &PoolKey, id: &str) {
        self.recycled
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.to_string(), (key.clone(), std::time::Instant::now()));
        *self
            .members
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry(key.clone())
            .or_default() += 1;
    }

    /// The idle servers of a pool, oldest idle first.
    fn idle_of(&self, key: &PoolKey) -> Vec<Server> {
        self.idle
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .cloned()
            .unwrap_or_default()
    }

    fn mark_taken(&self, key: &PoolKey, id: &str) {
        self.taken
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(id.to_string(), std::time::Instant::now());
        if let Some(list) = self
            .idle
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get_mut(key)
        {
            list.retain(|s| s.id != id);
        }
    }

    /// Idle counts per pool.
    pub fn idle_counts(&self) -> HashMap<PoolKey, usize> {
        self.idle
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(k, v)| (k.clone(), v.len()))
            .collect()
    }
}

/// Everything standby needs, shared by the controller and the provider's
/// Create and Delete.
#[derive(Clone)]
pub struct StandbyPorts {
    pub book: Arc<Book>,
    /// The engine standby installs and wipes run in (an
    /// [`crate::install::InstallEngine`] whose NodePort is a
    /// [`StandbyNodePort`]; a recording fake in tests).
    pub engine: Arc<dyn super::Installer>,
    pub port: Arc<StandbyNodePort>,
    pub events: Arc<dyn StandbyEvents>,
    pub periods: Periods,
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;

#[cfg(test)]
#[path = "flow_tests.rs"]
mod flow_tests;
