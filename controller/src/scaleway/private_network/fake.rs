//! An in-memory [`Vpc`], [`Ipam`], [`MetalPrivateNetworks`] and
//! [`InstancePrivateNics`] for unit tests: Private Networks, IPAM addresses,
//! server options, attachments and private NICs held in maps, every call
//! recorded, and errors injected per operation.
//!
//! It follows the real API where tests depend on it: an attachment is
//! `attaching` (no VLAN yet) until [`FakePrivateNetworks::finish`], then
//! `attached` with a VLAN id unique on its server (or `error` for a Private
//! Network marked with [`FakePrivateNetworks::fail_attachments_to`]); a
//! detach goes through `detaching`; a private NIC is `syncing` then
//! `available` with its own MAC. IPAM gives each attachment or NIC an
//! address of the network's first IPv4 subnet unless booked addresses are
//! named; addresses IPAM gave are released with their attachment or NIC,
//! booked ones are only detached. Deleting what is gone succeeds, as the
//! trait says. Choices where the real API is not recorded (what a second
//! attach of the same network or a ninth network answers, the IPAM
//! resource of an attachment) are marked "unverified".

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::net::Ipv4Addr;
use std::sync::{Mutex, MutexGuard};

use async_trait::async_trait;

use super::{
    AttachmentFilter, AttachmentStatus, BookIpRequest, CreatePrivateNicRequest,
    InstancePrivateNics, IpFilter, IpResource, IpResourceType, IpSource, Ipam, IpamIp,
    MetalPrivateNetworks, PrivateNetwork, PrivateNetworkFilter, PrivateNic, PrivateNicState,
    ServerPrivateNetwork, Subnet, Vpc, ipv4_in, parse_ipv4_cidr, region_of,
};
use crate::scaleway::{ApiError, OfferOption, OptionStatus, ServerOption};

/// Private Networks per Elastic Metal server (`facts/private-networks.md`).
pub const MAX_NETWORKS_PER_SERVER: usize = 8;

/// The first VLAN id the fake hands out on a server.
const FIRST_VLAN: u32 = 1000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    ListPrivateNetworks,
    GetPrivateNetwork,
    ListIps,
    GetIp,
    BookIp,
    ReleaseIp,
    AddServerOption,
    GetServerOptions,
    Attach,
    ListAttachments,
    Detach,
    CreateNic,
    ListNics,
    GetNic,
    DeleteNic,
}

/// One recorded call.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub op: Op,
    /// The zone or region asked.
    pub scope: String,
    /// The server, Private Network, address or NIC the call is about.
    pub id: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Kind {
    Metal,
    Vm,
}

struct FakeServer {
    zone: String,
    kind: Kind,
    options: Vec<ServerOption>,
}

#[derive(Default)]
struct State {
    networks: BTreeMap<String, PrivateNetwork>,
    ips: BTreeMap<String, IpamIp>,
    /// Addresses IPAM picked for an attachment or NIC (released with it).
    allocated: BTreeSet<String>,
    servers: BTreeMap<String, FakeServer>,
    offer_options: BTreeMap<String, Vec<OfferOption>>,
    /// Attachment id → (zone, attachment).
    attachments: BTreeMap<String, (String, ServerPrivateNetwork)>,
    nics: BTreeMap<String, PrivateNic>,
    failing_networks: BTreeSet<String>,
    failures: HashMap<Op, VecDeque<ApiError>>,
    calls: Vec<Call>,
    next_id: u64,
    auto_finish: bool,
    requires_option: bool,
}

#[derive(Default)]
pub struct FakePrivateNetworks {
    state: Mutex<State>,
}

impl FakePrivateNetworks {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        // A test that panicked while holding the lock already failed.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A Private Network of `region` with one subnet, as the API shows it.
    pub fn add_private_network(
        &self,
        region: &str,
        name: &str,
        cidr: &str,
        tags: &[&str],
    ) -> PrivateNetwork {
        let mut st = self.lock();
        let id = next_id(&mut st);
        let vpc_id = format!("vpc-{region}");
        let pn = PrivateNetwork {
            id: id.clone(),
            name: name.to_string(),
            organization_id: "org".into(),
            project_id: "proj".into(),
            region: region.to_string(),
            tags: tags.iter().map(|t| t.to_string()).collect(),
            subnets: vec![Subnet {
                id: next_id(&mut st),
                subnet: cidr.to_string(),
                project_id: "proj".into(),
                private_network_id: id.clone(),
                vpc_id: vpc_id.clone(),
                region: region.to_string(),
                created_at: Some(now()),
                updated_at: Some(now()),
            }],
            vpc_id,
            dhcp_enabled: true,
            created_at: Some(now()),
            updated_at: Some(now()),
        };
        st.networks.insert(id, pn.clone());
        pn
    }

    pub fn insert_private_network(&self, pn: PrivateNetwork) {
        self.lock().networks.insert(pn.id.clone(), pn);
    }

    /// An Elastic Metal server attachments may be made to.
    pub fn add_metal_server(&self, zone: &str, id: &str) {
        self.add_server(zone, id, Kind::Metal);
    }

    /// An Instance server private NICs may be made on.
    pub fn add_vm(&self, zone: &str, id: &str) {
        self.add_server(zone, id, Kind::Vm);
    }

    fn add_server(&self, zone: &str, id: &str, kind: Kind) {
        self.lock().servers.insert(
            id.to_string(),
            FakeServer {
                zone: zone.to_string(),
                kind,
                options: Vec::new(),
            },
        );
    }

    /// The server is deleted: its attachments and NICs go with it, the
    /// addresses IPAM gave them are released, booked ones only detached.
    pub fn remove_server(&self, id: &str) {
        let mut st = self.lock();
        st.servers.remove(id);
        let attachments: Vec<String> = st
            .attachments
            .iter()
            .filter(|(_, (_, a))| a.server_id == id)
            .map(|(k, _)| k.clone())
            .collect();
        for a in attachments {
            drop_attachment(&mut st, &a);
        }
        let nics: Vec<String> = st
            .nics
            .values()
            .filter(|n| n.server_id == id)
            .map(|n| n.id.clone())
            .collect();
        for n in nics {
            drop_nic(&mut st, &n);
        }
    }

    /// The options the offers of `zone` are sold with
    /// ([`MetalPrivateNetworks::add_server_option`] adds only these).
    pub fn set_offer_options(&self, zone: &str, options: Vec<OfferOption>) {
        self.lock().offer_options.insert(zone.to_string(), options);
    }

    /// Attaching an Elastic Metal server fails (`Invalid`) unless it has a
    /// `private_network` option on (unverified whether the real API asks it).
    pub fn set_requires_option(&self, on: bool) {
        self.lock().requires_option = on;
    }

    /// Everything under way ends as soon as it is asked.
    pub fn set_auto_finish(&self, on: bool) {
        self.lock().auto_finish = on;
    }

    /// Attachments to this Private Network end in `error`.
    pub fn fail_attachments_to(&self, private_network_id: &str) {
        self.lock()
            .failing_networks
            .insert(private_network_id.to_string());
    }

    /// The next call of `op` fails with `err` (queued: several calls fail in order).
    pub fn fail_next(&self, op: Op, err: ApiError) {
        self.lock().failures.entry(op).or_default().push_back(err);
    }

    /// Everything under way ends: attachments `attaching` → `attached` (or
    /// `error`), `detaching` → gone; NICs `syncing` → `available`; options
    /// `enabling` → `enable`.
    pub fn finish(&self) {
        let mut st = self.lock();
        let ids: Vec<String> = st.attachments.keys().cloned().collect();
        for id in ids {
            finish_attachment(&mut st, &id);
        }
        for nic in st.nics.values_mut() {
            if nic.state == PrivateNicState::Syncing {
                nic.state = PrivateNicState::Available;
            }
        }
        for server in st.servers.values_mut() {
            for o in &mut server.options {
                if o.status == OptionStatus::OptionStatusEnabling {
                    o.status = OptionStatus::OptionStatusEnable;
                }
            }
        }
    }

    pub fn ips(&self) -> Vec<IpamIp> {
        self.lock().ips.values().cloned().collect()
    }

    pub fn attachments(&self) -> Vec<ServerPrivateNetwork> {
        self.lock()
            .attachments
            .values()
            .map(|(_, a)| a.clone())
            .collect()
    }

    pub fn nics(&self) -> Vec<PrivateNic> {
        self.lock().nics.values().cloned().collect()
    }

    pub fn calls(&self) -> Vec<Call> {
        self.lock().calls.clone()
    }

    pub fn count(&self, op: Op) -> usize {
        self.lock().calls.iter().filter(|c| c.op == op).count()
    }

    fn begin(
        &self,
        op: Op,
        scope: &str,
        id: Option<&str>,
    ) -> Result<MutexGuard<'_, State>, ApiError> {
        let mut st = self.lock();
        st.calls.push(Call {
            op,
            scope: scope.to_string(),
            id: id.map(str::to_string),
        });
        if let Some(err) = st.failures.get_mut(&op).and_then(VecDeque::pop_front) {
            return Err(err);
        }
        Ok(st)
    }
}

fn next_id(st: &mut State) -> String {
    st.next_id += 1;
    format!("00000000-0000-4000-a000-{:012}", st.next_id)
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

fn not_found(kind: &str, id: &str) -> ApiError {
    ApiError::NotFound(format!("{kind} {id}"))
}

fn server<'a>(
    st: &'a mut State,
    zone: &str,
    id: &str,
    kind: Kind,
) -> Result<&'a mut FakeServer, ApiError> {
    let resource = match kind {
        Kind::Metal => "baremetal_server",
        Kind::Vm => "instance_server",
    };
    st.servers
        .get_mut(id)
        .filter(|s| s.zone == zone && s.kind == kind)
        .ok_or_else(|| not_found(resource, id))
}

fn network<'a>(st: &'a State, region: &str, id: &str) -> Result<&'a PrivateNetwork, ApiError> {
    st.networks
        .get(id)
        .filter(|pn| pn.region == region)
        .ok_or_else(|| not_found("private_network", id))
}

/// The network's first IPv4 subnet and the next free host in it (the
/// network address, the gateway `.1` and the broadcast address are never
/// given).
fn free_address(st: &State, pn: &PrivateNetwork) -> Result<(String, String), ApiError> {
    let (subnet, net, len) = pn
        .subnets
        .iter()
        .find_map(|s| parse_ipv4_cidr(&s.subnet).map(|(n, l)| (s, n, l)))
        .ok_or_else(|| {
            ApiError::Invalid(format!("private network {} has no IPv4 subnet", pn.id))
        })?;
    let size = 1u64 << (32 - u32::from(len));
    let base = u64::from(u32::from(net)) & !(size - 1);
    let used = used_addresses(st, &pn.id);
    (2..size.saturating_sub(1))
        .map(|host| Ipv4Addr::from((base + host) as u32))
        .find(|a| !used.contains(a))
        .map(|a| (subnet.id.clone(), format!("{a}/{len}")))
        // Unverified what the real IPAM answers when a subnet is full.
        .ok_or_else(|| ApiError::Invalid(format!("no free address in {}", subnet.subnet)))
}

fn used_addresses(st: &State, private_network_id: &str) -> BTreeSet<Ipv4Addr> {
    st.ips
        .values()
        .filter(|ip| ip.private_network_id() == Some(private_network_id))
        .filter_map(|ip| ip.ip().parse().ok())
        .collect()
}

/// An address IPAM picks for `resource`.
fn allocate(
    st: &mut State,
    pn: &PrivateNetwork,
    project_id: &str,
    resource: IpResource,
    zone: &str,
) -> Result<String, ApiError> {
    let (subnet_id, address) = free_address(st, pn)?;
    let id = next_id(st);
    st.ips.insert(
        id.clone(),
        IpamIp {
            id: id.clone(),
            address,
            project_id: project_id.to_string(),
            is_ipv6: false,
            source: Some(IpSource {
                private_network_id: Some(pn.id.clone()),
                subnet_id: Some(subnet_id),
                ..Default::default()
            }),
            resource: Some(resource),
            tags: Vec::new(),
            region: pn.region.clone(),
            zone: Some(zone.to_string()),
            created_at: Some(now()),
            updated_at: Some(now()),
        },
    );
    st.allocated.insert(id.clone());
    Ok(id)
}

/// Booked addresses named by a caller: each must exist, belong to the
/// network and be free; then they are attached to `resource`.
fn take_booked(
    st: &mut State,
    pn: &PrivateNetwork,
    ids: &[String],
    resource: &IpResource,
) -> Result<(), ApiError> {
    for id in ids {
        let ip = st
            .ips
            .get(id)
            .filter(|ip| ip.region == pn.region)
            .ok_or_else(|| not_found("ipam_ip", id))?;
        if ip.private_network_id() != Some(pn.id.as_str()) {
            return Err(ApiError::Invalid(format!(
                "IP {id} is not in private network {}",
                pn.id
            )));
        }
        if ip.resource.is_some() {
            return Err(ApiError::Invalid(format!("IP {id} is already attached")));
        }
    }
    for id in ids {
        if let Some(ip) = st.ips.get_mut(id) {
            ip.resource = Some(resource.clone());
            ip.updated_at = Some(now());
        }
    }
    Ok(())
}

/// Addresses IPAM gave are released, booked ones detached.
fn let_go(st: &mut State, ids: &[String]) {
    for id in ids {
        if st.allocated.remove(id) {
            st.ips.remove(id);
        } else if let Some(ip) = st.ips.get_mut(id) {
            ip.resource = None;
            ip.updated_at = Some(now());
        }
    }
}

fn drop_attachment(st: &mut State, id: &str) {
    if let Some((_, a)) = st.attachments.remove(id) {
        let_go(st, &a.ipam_ip_ids);
    }
}

fn drop_nic(st: &mut State, id: &str) {
    if let Some(nic) = st.nics.remove(id) {
        let_go(st, &nic.ipam_ip_ids);
    }
}

fn finish_attachment(st: &mut State, id: &str) {
    let Some((_, a)) = st.attachments.get(id).cloned() else {
        return;
    };
    match a.status {
        AttachmentStatus::Attaching => {
            let failing = st.failing_networks.contains(&a.private_network_id);
            let used: BTreeSet<u32> = st
                .attachments
                .values()
                .filter(|(_, o)| o.server_id == a.server_id)
                .filter_map(|(_, o)| o.vlan)
                .collect();
            let vlan = (FIRST_VLAN..).find(|v| !used.contains(v));
            if let Some((_, a)) = st.attachments.get_mut(id) {
                if failing {
                    a.status = AttachmentStatus::Error;
                } else {
                    a.status = AttachmentStatus::Attached;
                    a.vlan = vlan;
                }
                a.updated_at = Some(now());
            }
        }
        AttachmentStatus::Detaching => drop_attachment(st, id),
        _ => {}
    }
}

#[async_trait]
impl Vpc for FakePrivateNetworks {
    async fn list_private_networks(
        &self,
        region: &str,
        filter: &PrivateNetworkFilter,
    ) -> Result<Vec<PrivateNetwork>, ApiError> {
        let st = self.begin(Op::ListPrivateNetworks, region, None)?;
        Ok(st
            .networks
            .values()
            .filter(|pn| pn.region == region && filter.matches(pn))
            .cloned()
            .collect())
    }

    async fn get_private_network(
        &self,
        region: &str,
        id: &str,
    ) -> Result<PrivateNetwork, ApiError> {
        let st = self.begin(Op::GetPrivateNetwork, region, Some(id))?;
        network(&st, region, id).cloned()
    }
}

#[async_trait]
impl Ipam for FakePrivateNetworks {
    async fn list_ips(&self, region: &str, filter: &IpFilter) -> Result<Vec<IpamIp>, ApiError> {
        let st = self.begin(Op::ListIps, region, None)?;
        Ok(st
            .ips
            .values()
            .filter(|ip| ip.region == region && filter.matches(ip))
            .cloned()
            .collect())
    }

    async fn get_ip(&self, region: &str, id: &str) -> Result<IpamIp, ApiError> {
        let st = self.begin(Op::GetIp, region, Some(id))?;
        st.ips
            .get(id)
            .filter(|ip| ip.region == region)
            .cloned()
            .ok_or_else(|| not_found("ipam_ip", id))
    }

    async fn book_ip(&self, region: &str, req: &BookIpRequest) -> Result<IpamIp, ApiError> {
        let mut st = self.begin(Op::BookIp, region, None)?;
        if req.is_ipv6 {
            return Err(ApiError::Invalid("the fake books IPv4 only".into()));
        }
        let pn_id = req
            .source
            .private_network_id
            .as_deref()
            .ok_or_else(|| ApiError::Invalid("source.private_network_id is required".into()))?;
        let pn = network(&st, region, pn_id)?.clone();
        let (subnet_id, address) = match &req.address {
            None => free_address(&st, &pn)?,
            Some(address) => {
                let ip: Ipv4Addr = address
                    .parse()
                    .map_err(|_| ApiError::Invalid(format!("address {address:?}")))?;
                let subnet = pn
                    .subnets
                    .iter()
                    .find(|s| ipv4_in(&s.subnet, ip))
                    .ok_or_else(|| {
                        ApiError::Invalid(format!("{address} is in no subnet of {}", pn.id))
                    })?;
                if used_addresses(&st, &pn.id).contains(&ip) {
                    return Err(ApiError::Invalid(format!("{address} is already booked")));
                }
                let (_, len) = parse_ipv4_cidr(&subnet.subnet).unwrap_or((ip, 32));
                (subnet.id.clone(), format!("{ip}/{len}"))
            }
        };
        let id = next_id(&mut st);
        let ip = IpamIp {
            id: id.clone(),
            address,
            project_id: req.project_id.clone(),
            is_ipv6: false,
            source: Some(IpSource {
                private_network_id: Some(pn.id.clone()),
                subnet_id: Some(subnet_id),
                ..Default::default()
            }),
            resource: None,
            tags: req.tags.clone(),
            region: region.to_string(),
            zone: None,
            created_at: Some(now()),
            updated_at: Some(now()),
        };
        st.ips.insert(id, ip.clone());
        Ok(ip)
    }

    async fn release_ip(&self, region: &str, id: &str) -> Result<(), ApiError> {
        let mut st = self.begin(Op::ReleaseIp, region, Some(id))?;
        let Some(ip) = st.ips.get(id).filter(|ip| ip.region == region) else {
            return Ok(());
        };
        if ip.resource.is_some() {
            // Unverified: the real IPAM's answer for an address in use.
            return Err(ApiError::Invalid(format!("IP {id} is attached")));
        }
        st.ips.remove(id);
        st.allocated.remove(id);
        Ok(())
    }
}

// The server side (Elastic Metal attachments, Instance private NICs).
#[path = "fake_servers.rs"]
mod servers;

/// An offer's `private_network` option as the API lists it: not included,
/// 0.02 €/hour, 1 Gbit/s.
pub fn private_network_option(id: &str) -> OfferOption {
    OfferOption {
        id: id.into(),
        name: "Private Network".into(),
        enabled: false,
        subscription_period: "hourly".into(),
        price: Some(crate::scaleway::Money {
            currency_code: "EUR".into(),
            units: 0,
            nanos: 20_000_000,
        }),
        manageable: true,
        private_network: Some(crate::scaleway::PrivateNetworkOption {
            bandwidth_in_bps: 1_000_000_000,
        }),
    }
}
