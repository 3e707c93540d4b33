//! Wire shapes of the Private Network APIs (scaleway-sdk-go v1.39.0:
//! `vpc/v2` PrivateNetwork and Subnet, `ipam/v1` IP, `baremetal/v3`
//! ServerPrivateNetwork, `instance/v1` PrivateNIC).

use serde::Serialize;

use super::{AttachStatus, AttachmentRecord, IpRecord, NicRecord, PnRecord};
use crate::clock::format_time;
use crate::instance::wire::instance_time;

#[derive(Debug, Clone, Serialize)]
pub struct Subnet {
    pub id: String,
    pub created_at: String,
    pub updated_at: String,
    pub subnet: String,
    pub project_id: String,
    pub private_network_id: String,
    pub vpc_id: String,
    pub region: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct PrivateNetwork {
    pub id: String,
    pub name: String,
    pub organization_id: String,
    pub project_id: String,
    pub region: String,
    pub tags: Vec<String>,
    pub created_at: String,
    pub updated_at: String,
    pub subnets: Vec<Subnet>,
    pub vpc_id: String,
    pub dhcp_enabled: bool,
    pub default_route_propagation_enabled: bool,
    pub has_s3_integration: bool,
}

impl PnRecord {
    pub fn to_wire(&self) -> PrivateNetwork {
        let at = format_time(self.created_at);
        PrivateNetwork {
            id: self.id.clone(),
            name: self.name.clone(),
            organization_id: self.organization_id.clone(),
            project_id: self.project_id.clone(),
            region: self.region.clone(),
            tags: self.tags.clone(),
            created_at: at.clone(),
            updated_at: at.clone(),
            subnets: self
                .subnets
                .iter()
                .map(|s| Subnet {
                    id: s.id.clone(),
                    created_at: at.clone(),
                    updated_at: at.clone(),
                    subnet: s.cidr.to_string(),
                    project_id: self.project_id.clone(),
                    private_network_id: self.id.clone(),
                    vpc_id: self.vpc_id.clone(),
                    region: self.region.clone(),
                })
                .collect(),
            vpc_id: self.vpc_id.clone(),
            dhcp_enabled: self.dhcp_enabled,
            default_route_propagation_enabled: false,
            has_s3_integration: false,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct IpResourceWire {
    #[serde(rename = "type")]
    pub kind: &'static str,
    pub id: String,
    pub mac_address: Option<String>,
    pub name: Option<String>,
}

/// `source` holds exactly one of its fields (the SDK: "precisely one of");
/// a Private Network address names its subnet.
#[derive(Debug, Clone, Serialize)]
pub struct IpSource {
    pub subnet_id: String,
}

#[derive(Debug, Clone, Serialize)]
pub struct Ip {
    pub id: String,
    pub address: String,
    pub project_id: String,
    pub is_ipv6: bool,
    pub created_at: String,
    pub updated_at: String,
    pub source: IpSource,
    pub resource: Option<IpResourceWire>,
    pub tags: Vec<String>,
    pub reverses: Vec<serde_json::Value>,
    pub region: String,
    /// Private Network addresses are regional.
    pub zone: Option<String>,
}

impl IpRecord {
    /// The address with its subnet's prefix length (`127.80.0.2/24`).
    pub fn cidr(&self) -> String {
        format!("{}/{}", self.address, self.prefix)
    }

    pub fn to_wire(&self) -> Ip {
        Ip {
            id: self.id.clone(),
            address: self.cidr(),
            project_id: self.project_id.clone(),
            is_ipv6: false,
            created_at: format_time(self.created_at),
            updated_at: format_time(self.updated_at),
            source: IpSource {
                subnet_id: self.subnet_id.clone(),
            },
            resource: self.resource.as_ref().map(|r| IpResourceWire {
                kind: r.kind,
                id: r.id.clone(),
                mac_address: Some(r.mac_address.clone()),
                name: Some(r.name.clone()),
            }),
            tags: self.tags.clone(),
            reverses: Vec::new(),
            region: self.region.clone(),
            zone: None,
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Attachment {
    pub id: String,
    pub project_id: String,
    pub server_id: String,
    pub private_network_id: String,
    pub vlan: Option<u32>,
    pub status: &'static str,
    pub created_at: String,
    pub updated_at: String,
    pub ipam_ip_ids: Vec<String>,
}

impl AttachmentRecord {
    pub fn to_wire(&self) -> Attachment {
        Attachment {
            id: self.id.clone(),
            project_id: self.project_id.clone(),
            server_id: self.server_id.clone(),
            private_network_id: self.private_network_id.clone(),
            // Null until attached (the SDK's `Vlan *uint32`): a client must
            // not configure a VLAN the switch does not carry yet.
            vlan: matches!(
                self.status,
                AttachStatus::Attached | AttachStatus::Detaching
            )
            .then_some(self.vlan),
            status: self.status.as_str(),
            created_at: format_time(self.created_at),
            updated_at: format_time(self.updated_at),
            ipam_ip_ids: self.ipam_ip_ids.clone(),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct PrivateNic {
    pub id: String,
    pub server_id: String,
    pub private_network_id: String,
    pub mac_address: String,
    pub state: &'static str,
    pub tags: Vec<String>,
    pub creation_date: String,
    pub zone: String,
    pub ipam_ip_ids: Vec<String>,
}

impl NicRecord {
    pub fn to_wire(&self) -> PrivateNic {
        PrivateNic {
            id: self.id.clone(),
            server_id: self.server_id.clone(),
            private_network_id: self.private_network_id.clone(),
            mac_address: self.mac_address.clone(),
            state: self.state.as_str(),
            tags: self.tags.clone(),
            creation_date: instance_time(self.created_at),
            zone: self.zone.clone(),
            ipam_ip_ids: self.ipam_ip_ids.clone(),
        }
    }
}
