//! Wire model of the Private Network objects, field names as the APIs send
//! them (scaleway-sdk-go v1.39.0: `api/vpc/v2`, `api/ipam/v1`,
//! `api/baremetal/v3`, `api/instance/v1`; `facts/private-networks.md`).
//! Unknown fields are ignored, unknown enum values decode as `Other`, and
//! lists the API may send as `null` decode empty, so that new API fields
//! never break decoding. Filters carry the query of a list and the same
//! filter applied again on our side.

use std::net::Ipv4Addr;

use serde::{Deserialize, Serialize};

use crate::scaleway::model::nullable;

/// A VPC v2 Private Network (regional).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrivateNetwork {
    pub id: String,
    pub name: String,
    #[serde(default)]
    pub organization_id: String,
    #[serde(default)]
    pub project_id: String,
    #[serde(default)]
    pub region: String,
    #[serde(default, deserialize_with = "nullable")]
    pub tags: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub subnets: Vec<Subnet>,
    #[serde(default)]
    pub vpc_id: String,
    #[serde(default)]
    pub dhcp_enabled: bool,
    #[serde(default)]
    pub created_at: Option<String>,
    #[serde(default)]
    pub updated_at: Option<String>,
}

impl PrivateNetwork {
    /// The subnets' CIDRs (`172.16.0.0/22`, `fd5f:519c:6d46:2728::/64`).
    pub fn cidrs(&self) -> Vec<String> {
        self.subnets.iter().map(|s| s.subnet.clone()).collect()
    }

    /// The IPv4 subnets' CIDRs.
    pub fn ipv4_cidrs(&self) -> Vec<String> {
        self.subnets
            .iter()
            .filter(|s| parse_ipv4_cidr(&s.subnet).is_some())
            .map(|s| s.subnet.clone())
            .collect()
    }
}

/// One subnet of a Private Network.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Subnet {
    pub id: String,
    /// The CIDR, `172.16.0.0/22`.
    pub subnet: String,
    #[serde(default)]
    pub project_id: String,
    #[serde(default)]
    pub private_network_id: String,
    #[serde(default)]
    pub vpc_id: String,
    #[serde(default)]
    pub region: String,
    #[serde(default)]
    pub created_at: Option<String>,
    #[serde(default)]
    pub updated_at: Option<String>,
}

/// `a.b.c.d/len` → the address and the prefix length; `None` for IPv6 or
/// anything malformed (a prefix above 32, a missing `/`). The network need
/// not be aligned (`172.16.0.7/22` is an IPAM address with its prefix).
pub fn parse_ipv4_cidr(cidr: &str) -> Option<(Ipv4Addr, u8)> {
    let (addr, len) = cidr.split_once('/')?;
    let addr: Ipv4Addr = addr.parse().ok()?;
    if len.is_empty() || !len.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let len: u8 = len.parse().ok()?;
    (len <= 32).then_some((addr, len))
}

/// Whether `addr` lies in the IPv4 network `cidr`.
pub fn ipv4_in(cidr: &str, addr: Ipv4Addr) -> bool {
    let Some((net, len)) = parse_ipv4_cidr(cidr) else {
        return false;
    };
    let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
    u32::from(net) & mask == u32::from(addr) & mask
}

/// Query filters of `GET /vpc/v2/regions/{region}/private-networks`: the
/// NodeClass selector (an id, or a name and/or tags).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PrivateNetworkFilter {
    /// One of these ids (`private_network_ids`, repeated).
    pub ids: Vec<String>,
    /// Exactly this name (the API matches a substring).
    pub name: Option<String>,
    /// Every one of these tags (the API matches any one).
    pub tags: Vec<String>,
    pub project_id: Option<String>,
}

impl PrivateNetworkFilter {
    /// The filter applied on our side.
    pub fn matches(&self, pn: &PrivateNetwork) -> bool {
        (self.ids.is_empty() || self.ids.contains(&pn.id))
            && self.name.as_ref().is_none_or(|n| &pn.name == n)
            && self.tags.iter().all(|t| pn.tags.contains(t))
            && self
                .project_id
                .as_ref()
                .is_none_or(|p| pn.project_id.is_empty() || &pn.project_id == p)
    }
}

/// What an IPAM address is attached to (`IP.resource.type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum IpResourceType {
    #[default]
    UnknownType,
    Custom,
    InstanceServer,
    InstancePrivateNic,
    BaremetalServer,
    BaremetalPrivateNic,
    /// Any of the other product resources this client does not read.
    #[serde(other)]
    Other,
}

impl IpResourceType {
    /// The query value; `None` for [`IpResourceType::Other`], which names
    /// no one type.
    pub fn as_str(self) -> Option<&'static str> {
        Some(match self {
            IpResourceType::UnknownType => "unknown_type",
            IpResourceType::Custom => "custom",
            IpResourceType::InstanceServer => "instance_server",
            IpResourceType::InstancePrivateNic => "instance_private_nic",
            IpResourceType::BaremetalServer => "baremetal_server",
            IpResourceType::BaremetalPrivateNic => "baremetal_private_nic",
            IpResourceType::Other => return None,
        })
    }
}

/// `IP.resource`: the resource an address is attached to.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpResource {
    #[serde(rename = "type", default)]
    pub kind: IpResourceType,
    pub id: String,
    #[serde(default)]
    pub mac_address: Option<String>,
    #[serde(default)]
    pub name: Option<String>,
}

/// `IP.source` (where the address comes from) and `BookIPRequest.source`:
/// one of the fields is set.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct IpSource {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zonal: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_network_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub subnet_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub vpc_id: Option<String>,
}

/// An IPAM v1 address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct IpamIp {
    pub id: String,
    /// With the subnet's prefix length: `172.16.0.7/22`.
    pub address: String,
    #[serde(default)]
    pub project_id: String,
    #[serde(default)]
    pub is_ipv6: bool,
    #[serde(default)]
    pub source: Option<IpSource>,
    /// `None` while booked and not attached.
    #[serde(default)]
    pub resource: Option<IpResource>,
    #[serde(default, deserialize_with = "nullable")]
    pub tags: Vec<String>,
    #[serde(default)]
    pub region: String,
    #[serde(default)]
    pub zone: Option<String>,
    #[serde(default)]
    pub created_at: Option<String>,
    #[serde(default)]
    pub updated_at: Option<String>,
}

impl IpamIp {
    /// The address without its prefix length (`172.16.0.7`).
    pub fn ip(&self) -> &str {
        self.address
            .split_once('/')
            .map_or(self.address.as_str(), |(ip, _)| ip)
    }

    /// The Private Network the address belongs to.
    pub fn private_network_id(&self) -> Option<&str> {
        self.source.as_ref()?.private_network_id.as_deref()
    }
}

/// Query filters of `GET /ipam/v1/regions/{region}/ips`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct IpFilter {
    pub private_network_id: Option<String>,
    /// The resource the address is attached to (a server, an attachment,
    /// a private NIC).
    pub resource_id: Option<String>,
    pub resource_type: Option<IpResourceType>,
    /// One of these ids (`ip_ids`, repeated).
    pub ip_ids: Vec<String>,
    /// Every one of these tags.
    pub tags: Vec<String>,
    pub project_id: Option<String>,
}

impl IpFilter {
    /// The filter applied on our side.
    pub fn matches(&self, ip: &IpamIp) -> bool {
        let resource = ip.resource.as_ref();
        self.private_network_id
            .as_deref()
            .is_none_or(|p| ip.private_network_id() == Some(p))
            && self
                .resource_id
                .as_ref()
                .is_none_or(|r| resource.is_some_and(|res| &res.id == r))
            && self
                .resource_type
                .is_none_or(|t| resource.is_some_and(|res| res.kind == t))
            && (self.ip_ids.is_empty() || self.ip_ids.contains(&ip.id))
            && self.tags.iter().all(|t| ip.tags.contains(t))
            && self
                .project_id
                .as_ref()
                .is_none_or(|p| ip.project_id.is_empty() || &ip.project_id == p)
    }
}

/// The body of `POST /ipam/v1/regions/{region}/ips` (an IPv4 address of a
/// Private Network).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct BookIpRequest {
    pub project_id: String,
    pub source: IpSource,
    pub is_ipv6: bool,
    /// A chosen address (without prefix); `None` lets IPAM pick one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub address: Option<String>,
    pub tags: Vec<String>,
}

impl BookIpRequest {
    /// An IPv4 address of `private_network_id`, picked by IPAM.
    pub fn new(project_id: &str, private_network_id: &str, tags: Vec<String>) -> Self {
        BookIpRequest {
            project_id: project_id.to_string(),
            source: IpSource {
                private_network_id: Some(private_network_id.to_string()),
                ..Default::default()
            },
            is_ipv6: false,
            address: None,
            tags,
        }
    }
}

/// Status of an Elastic Metal Private Network attachment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum AttachmentStatus {
    #[default]
    UnknownStatus,
    Attaching,
    Attached,
    Error,
    Detaching,
    Locked,
    /// A status this client does not know yet.
    #[serde(other)]
    Other,
}

impl AttachmentStatus {
    /// Under way: wait (the SDK's `WaitForServerPrivateNetworks` polls
    /// until none is `attaching` or `detaching`).
    pub fn is_transient(self) -> bool {
        matches!(
            self,
            AttachmentStatus::Attaching | AttachmentStatus::Detaching
        )
    }
}

/// A baremetal v3 `ServerPrivateNetwork`: one server attached to one Private
/// Network, through a VLAN on its NIC.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerPrivateNetwork {
    pub id: String,
    #[serde(default)]
    pub project_id: String,
    pub server_id: String,
    pub private_network_id: String,
    /// The VLAN id on the server's NIC; may be `null` (until attached).
    #[serde(default)]
    pub vlan: Option<u32>,
    #[serde(default)]
    pub status: AttachmentStatus,
    #[serde(default, deserialize_with = "nullable")]
    pub ipam_ip_ids: Vec<String>,
    #[serde(default)]
    pub created_at: Option<String>,
    #[serde(default)]
    pub updated_at: Option<String>,
}

/// Query filters of `GET /baremetal/v3/zones/{zone}/server-private-networks`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AttachmentFilter {
    pub server_id: Option<String>,
    pub private_network_id: Option<String>,
    pub project_id: Option<String>,
}

impl AttachmentFilter {
    /// The filter applied on our side.
    pub fn matches(&self, a: &ServerPrivateNetwork) -> bool {
        self.server_id.as_ref().is_none_or(|s| &a.server_id == s)
            && self
                .private_network_id
                .as_ref()
                .is_none_or(|p| &a.private_network_id == p)
            && self
                .project_id
                .as_ref()
                .is_none_or(|p| a.project_id.is_empty() || &a.project_id == p)
    }
}

/// State of an Instance private NIC.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PrivateNicState {
    Available,
    Syncing,
    SyncingError,
    /// A state this client does not know yet.
    #[serde(other)]
    Other,
}

/// An Instance private NIC: the VM sees it as an extra NIC with this MAC.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PrivateNic {
    pub id: String,
    pub server_id: String,
    pub private_network_id: String,
    #[serde(default)]
    pub mac_address: String,
    pub state: PrivateNicState,
    #[serde(default, deserialize_with = "nullable")]
    pub tags: Vec<String>,
    #[serde(default, deserialize_with = "nullable")]
    pub ipam_ip_ids: Vec<String>,
    #[serde(default)]
    pub zone: String,
    #[serde(default)]
    pub creation_date: Option<String>,
}

/// The body of `POST /instance/v1/zones/{zone}/servers/{id}/private_nics`;
/// empty lists are left out, as the SDK does.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Default)]
pub struct CreatePrivateNicRequest {
    pub private_network_id: String,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub tags: Vec<String>,
    /// Booked IPAM addresses; empty: IPAM allocates one.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub ipam_ip_ids: Vec<String>,
}
