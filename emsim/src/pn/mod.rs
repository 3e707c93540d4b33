//! Private Networks: VPC v2 networks (seeded, never created through the public
//! API), IPAM v1 addresses, Elastic Metal attachments (baremetal v3
//! server-private-networks) and Instance private NICs. Plain state driven by
//! the caller's `now`, held by the `World` next to the servers it links.

mod attach;
mod ipam;
mod mac;
mod nics;
mod wire;

use std::collections::BTreeMap;
use std::net::Ipv4Addr;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Deserialize;

pub use attach::{AttachRequest, AttachStatus, AttachmentRecord, ServerRef};
pub use ipam::{BookRequest, IpFilter, IpRecord, IpResource};
pub use mac::em_mac;
pub use nics::{NicRecord, NicState, VmRef};
pub use wire::{Attachment, PrivateNetwork, PrivateNic};

use crate::catalog::is_uuid;
use crate::clock::SimTime;
use crate::error::ApiError;

/// Keeps this RNG's stream apart from the servers', so that attaching a
/// network does not change the ids a scenario's servers get.
const RNG_SALT: u64 = 0x7072_6976_6e65_7473;

/// Regions of the zones emsim serves (a Private Network is regional).
pub const REGIONS: &[&str] = &["fr-par", "nl-ams", "pl-waw", "it-mil"];

/// The region of a zone (`fr-par-2` → `fr-par`).
pub fn region_of(zone: &str) -> &str {
    zone.rsplit_once('-').map_or(zone, |(region, _)| region)
}

/// Simulated seconds of the Private Network transitions (INFERENCE: no
/// recording gives them).
#[derive(Debug, Clone, Copy)]
pub struct PnTimings {
    /// An Elastic Metal attachment from `attaching` to `attached`.
    pub attach: f64,
    /// An Elastic Metal attachment from `detaching` to gone.
    pub detach: f64,
    /// An Instance private NIC from `syncing` to `available`.
    pub nic_sync: f64,
}

impl Default for PnTimings {
    fn default() -> Self {
        Self {
            attach: 10.0,
            detach: 5.0,
            nic_sync: 3.0,
        }
    }
}

/// A Private Network to seed (`--private-networks FILE` or `POST
/// /_emsim/private-networks`).
#[derive(Debug, Clone, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct PnSpec {
    /// Default: derived from region and name (stable across runs).
    #[serde(default)]
    pub id: Option<String>,
    pub name: String,
    pub region: String,
    /// IPv4 CIDRs. The simulators use loopback ranges (`127.80.0.0/24`).
    pub subnets: Vec<String>,
    #[serde(default)]
    pub tags: Vec<String>,
    /// Default: the simulator's project.
    #[serde(default)]
    pub project_id: Option<String>,
    /// Default: the region's default VPC (derived id).
    #[serde(default)]
    pub vpc_id: Option<String>,
    #[serde(default = "default_true")]
    pub dhcp_enabled: bool,
}

fn default_true() -> bool {
    true
}

/// The seed file: `{"private_networks": [...]}` (JSON or YAML).
#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PnFile {
    pub private_networks: Vec<PnSpec>,
}

impl PnFile {
    pub fn parse(text: &str) -> anyhow::Result<Vec<PnSpec>> {
        let file: PnFile = serde_yaml_ng::from_str(text)?;
        Ok(file.private_networks)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cidr {
    pub network: Ipv4Addr,
    pub prefix: u8,
}

impl Cidr {
    pub fn parse(text: &str) -> Result<Self, String> {
        let (addr, prefix) = text
            .split_once('/')
            .ok_or_else(|| format!("{text:?} is not a CIDR"))?;
        let network: Ipv4Addr = addr
            .parse()
            .map_err(|_| format!("{text:?}: not an IPv4 address"))?;
        let prefix: u8 = prefix
            .parse()
            .ok()
            .filter(|p| (8..=29).contains(p))
            .ok_or_else(|| format!("{text:?}: prefix length must be 8..29"))?;
        let mask = u32::MAX << (32 - prefix);
        if u32::from(network) & !mask != 0 {
            return Err(format!("{text:?}: host bits are set"));
        }
        Ok(Self { network, prefix })
    }

    fn size(&self) -> u32 {
        1 << (32 - self.prefix)
    }

    pub fn contains(&self, ip: Ipv4Addr) -> bool {
        let mask = u32::MAX << (32 - self.prefix);
        u32::from(ip) & mask == u32::from(self.network)
    }

    /// Addresses IPAM may hand out: not the network, not the first host
    /// (kept for the gateway, INFERENCE), not the broadcast.
    pub fn assignable(&self, ip: Ipv4Addr) -> bool {
        let offset = u32::from(ip).wrapping_sub(u32::from(self.network));
        self.contains(ip) && offset >= 2 && offset < self.size() - 1
    }

    pub fn hosts(&self) -> impl Iterator<Item = Ipv4Addr> + '_ {
        let base = u32::from(self.network);
        (2..self.size() - 1).map(move |o| Ipv4Addr::from(base + o))
    }
}

impl std::fmt::Display for Cidr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.network, self.prefix)
    }
}

#[derive(Debug, Clone)]
pub struct SubnetRecord {
    pub id: String,
    pub cidr: Cidr,
}

#[derive(Debug, Clone)]
pub struct PnRecord {
    pub id: String,
    pub name: String,
    pub region: String,
    pub organization_id: String,
    pub project_id: String,
    pub tags: Vec<String>,
    pub vpc_id: String,
    pub dhcp_enabled: bool,
    pub subnets: Vec<SubnetRecord>,
    pub created_at: SimTime,
}

fn derived_id(kind: &str, a: &str, b: &str) -> String {
    let digest = md5::compute(format!("emsim-{kind}:{a}:{b}"));
    uuid::Builder::from_md5_bytes(digest.0)
        .into_uuid()
        .to_string()
}

/// VLAN ids handed out (INFERENCE: real ids are opaque numbers).
const VLANS: std::ops::RangeInclusive<u32> = 100..=4094;

pub struct PnWorld {
    seeds: Vec<PnSpec>,
    organization: String,
    project: String,
    seed: u64,
    pub(crate) timings: PnTimings,
    pub(crate) networks: BTreeMap<String, PnRecord>,
    pub(crate) ips: BTreeMap<String, IpRecord>,
    pub(crate) attachments: BTreeMap<String, AttachmentRecord>,
    pub(crate) nics: BTreeMap<String, NicRecord>,
    /// The VLAN of each (server, network) pair ever attached, kept across
    /// detach and re-attach until the server goes.
    vlans: BTreeMap<(String, String), u32>,
    rng: StdRng,
    /// The servers' public addresses (`--ip-range`): no subnet may overlap
    /// it, or a private address could be a server's public one.
    public: Option<Cidr>,
}

impl PnWorld {
    /// Checks the seeds; `now` dates the seeded networks; `public` is the
    /// servers' address range, which no subnet may overlap.
    pub fn new(
        seeds: Vec<PnSpec>,
        seed: u64,
        organization: &str,
        project: &str,
        timings: PnTimings,
        now: SimTime,
        public: Option<(Ipv4Addr, u8)>,
    ) -> anyhow::Result<Self> {
        let mut world = Self {
            seeds: Vec::new(),
            organization: organization.into(),
            project: project.into(),
            seed,
            timings,
            networks: BTreeMap::new(),
            ips: BTreeMap::new(),
            attachments: BTreeMap::new(),
            nics: BTreeMap::new(),
            vlans: BTreeMap::new(),
            rng: StdRng::seed_from_u64(seed ^ RNG_SALT),
            public: public.map(|(network, prefix)| Cidr { network, prefix }),
        };
        for spec in &seeds {
            world
                .add_network(spec.clone(), now)
                .map_err(|e| anyhow::anyhow!("private network {:?}: {e}", spec.name))?;
        }
        world.seeds = seeds;
        Ok(world)
    }

    /// Back to the seeded networks, without addresses, attachments or NICs
    /// (networks added through the admin API are forgotten).
    pub fn reset(&mut self, now: SimTime) {
        self.networks.clear();
        self.ips.clear();
        self.attachments.clear();
        self.nics.clear();
        self.vlans.clear();
        self.rng = StdRng::seed_from_u64(self.seed ^ RNG_SALT);
        for spec in self.seeds.clone() {
            self.add_network(spec, now).expect("seeds were checked");
        }
    }

    pub(crate) fn uuid(&mut self) -> String {
        uuid::Builder::from_random_bytes(self.rng.random())
            .into_uuid()
            .to_string()
    }

    /// Adds a network (seed or admin). Refuses unknown regions, malformed
    /// or overlapping subnets and ids already taken.
    pub fn add_network(&mut self, spec: PnSpec, now: SimTime) -> Result<&PnRecord, String> {
        if !REGIONS.contains(&spec.region.as_str()) {
            return Err(format!(
                "unknown region {}, expected one of {}",
                spec.region,
                REGIONS.join(", ")
            ));
        }
        if spec.name.is_empty() {
            return Err("name must not be empty".into());
        }
        if spec.subnets.is_empty() {
            return Err("at least one subnet is needed".into());
        }
        for id in [&spec.id, &spec.project_id, &spec.vpc_id]
            .into_iter()
            .flatten()
        {
            if !is_uuid(id) {
                return Err(format!("{id:?} is not a lowercase UUID"));
            }
        }
        let id = spec
            .id
            .clone()
            .unwrap_or_else(|| derived_id("private-network", &spec.region, &spec.name));
        if self.networks.contains_key(&id) {
            return Err(format!("private network {id} already exists"));
        }
        let mut subnets = Vec::new();
        for text in &spec.subnets {
            let cidr = Cidr::parse(text)?;
            let overlaps = self
                .networks
                .values()
                .flat_map(|n| &n.subnets)
                .chain(&subnets)
                .any(|s: &SubnetRecord| {
                    s.cidr.contains(cidr.network) || cidr.contains(s.cidr.network)
                });
            if overlaps {
                return Err(format!("subnet {cidr} overlaps another network's"));
            }
            if let Some(public) = self.public
                && (public.contains(cidr.network) || cidr.contains(public.network))
            {
                return Err(format!(
                    "subnet {cidr} overlaps the servers' public range {public}"
                ));
            }
            subnets.push(SubnetRecord {
                id: derived_id("subnet", &id, &cidr.to_string()),
                cidr,
            });
        }
        let record = PnRecord {
            vpc_id: spec
                .vpc_id
                .unwrap_or_else(|| derived_id("vpc", &spec.region, "default")),
            id: id.clone(),
            name: spec.name,
            region: spec.region,
            organization_id: self.organization.clone(),
            project_id: spec.project_id.unwrap_or_else(|| self.project.clone()),
            tags: spec.tags,
            dhcp_enabled: spec.dhcp_enabled,
            subnets,
            created_at: now,
        };
        tracing::info!(private_network_id = %id, name = %record.name, region = %record.region, "private network added");
        Ok(self.networks.entry(id).or_insert(record))
    }

    pub fn networks(&self) -> impl Iterator<Item = &PnRecord> {
        self.networks.values()
    }

    /// A network of `region`, or the API's 404.
    pub fn network(&self, region: &str, id: &str) -> Result<&PnRecord, ApiError> {
        self.networks
            .get(id)
            .filter(|n| n.region == region)
            .ok_or_else(|| ApiError::NotFound {
                resource: "private_network".into(),
                resource_id: id.into(),
            })
    }

    pub fn next_deadline(&self) -> Option<SimTime> {
        self.attachments
            .values()
            .filter_map(|a| a.pending)
            .chain(self.nics.values().filter_map(|n| n.pending))
            .min()
    }

    /// Applies the transitions due at `now`, then drops what belonged to
    /// servers that are gone (`live_em`/`live_vm` say which still exist).
    pub fn advance(
        &mut self,
        now: SimTime,
        live_em: impl Fn(&str) -> bool,
        live_vm: impl Fn(&str) -> bool,
    ) {
        self.advance_attachments(now);
        self.advance_nics(now);
        let gone: Vec<String> = self
            .attachments
            .values()
            .filter(|a| !live_em(&a.server_id))
            .map(|a| a.id.clone())
            .collect();
        for id in gone {
            self.drop_attachment(&id, now);
        }
        let gone: Vec<String> = self
            .nics
            .values()
            .filter(|n| !live_vm(&n.server_id))
            .map(|n| n.id.clone())
            .collect();
        for id in gone {
            self.drop_nic(&id, now);
        }
        self.vlans.retain(|(server, _), _| live_em(server));
    }

    /// The VLAN of `server` on network `pn`: the one it had, or the lowest
    /// id used neither by the server's other networks nor by the network's
    /// other servers (so it is unique on the server and on the network).
    pub(crate) fn vlan_for(&mut self, server: &str, pn: &str) -> u32 {
        let key = (server.to_string(), pn.to_string());
        if let Some(vlan) = self.vlans.get(&key) {
            return *vlan;
        }
        let taken: std::collections::BTreeSet<u32> = self
            .vlans
            .iter()
            .filter(|((s, p), _)| s == server || p == pn)
            .map(|(_, v)| *v)
            .collect();
        let vlan = VLANS.clone().find(|v| !taken.contains(v)).expect(
            "a server joins at most 8 networks; a network has fewer than 3995 servers here",
        );
        self.vlans.insert(key, vlan);
        vlan
    }
}

#[cfg(test)]
mod tests;
