//! IPAM v1 addresses of the Private Networks: booked ahead (`POST /ips`) or
//! allocated for an attachment or a private NIC, released by `DELETE
//! /ips/{id}` (booked ones) or with what they were allocated for.

use std::net::Ipv4Addr;

use axum::http::StatusCode;

use super::{PnWorld, region_of};
use crate::clock::SimTime;
use crate::error::ApiError;

/// What an address is attached to (`resource` in the API).
#[derive(Debug, Clone, PartialEq)]
pub struct IpResource {
    /// `baremetal_private_nic` or `instance_private_nic`.
    pub kind: &'static str,
    pub id: String,
    pub mac_address: String,
    pub name: String,
}

#[derive(Debug, Clone)]
pub struct IpRecord {
    pub id: String,
    pub address: Ipv4Addr,
    pub prefix: u8,
    pub private_network_id: String,
    pub subnet_id: String,
    pub region: String,
    pub project_id: String,
    pub tags: Vec<String>,
    pub created_at: SimTime,
    pub updated_at: SimTime,
    pub resource: Option<IpResource>,
    /// Booked through `POST /ips` (kept when its holder goes) rather than
    /// allocated for an attachment or NIC (released with it).
    pub booked: bool,
}

/// `POST /ipam/v1/regions/{region}/ips`, validated by the handler.
#[derive(Debug, Clone)]
pub struct BookRequest {
    pub project_id: Option<String>,
    pub private_network_id: String,
    pub address: Option<Ipv4Addr>,
    pub tags: Vec<String>,
}

/// Filters of `GET /ips`; absent ones match everything.
#[derive(Debug, Clone, Default)]
pub struct IpFilter {
    pub project_id: Option<String>,
    pub private_network_id: Option<String>,
    pub subnet_id: Option<String>,
    pub resource_id: Option<String>,
    pub resource_ids: Vec<String>,
    pub resource_type: Option<String>,
    pub resource_types: Vec<String>,
    pub mac_address: Option<String>,
    pub is_ipv6: Option<bool>,
    pub attached: Option<bool>,
    pub tags: Vec<String>,
    pub ip_ids: Vec<String>,
}

impl IpFilter {
    fn matches(&self, ip: &IpRecord) -> bool {
        let resource = ip.resource.as_ref();
        self.project_id.as_ref().is_none_or(|p| *p == ip.project_id)
            && self
                .private_network_id
                .as_ref()
                .is_none_or(|p| *p == ip.private_network_id)
            && self.subnet_id.as_ref().is_none_or(|s| *s == ip.subnet_id)
            && self
                .resource_id
                .as_ref()
                .is_none_or(|id| resource.is_some_and(|r| r.id == *id))
            && (self.resource_ids.is_empty()
                || resource.is_some_and(|r| self.resource_ids.contains(&r.id)))
            && self
                .resource_type
                .as_ref()
                .is_none_or(|t| resource.is_some_and(|r| r.kind == t))
            && (self.resource_types.is_empty()
                || resource.is_some_and(|r| self.resource_types.iter().any(|t| t == r.kind)))
            && self.mac_address.as_ref().is_none_or(|m| {
                resource.is_some_and(|r| r.mac_address.eq_ignore_ascii_case(m))
            })
            // Private Network addresses here are IPv4 only.
            && self.is_ipv6 != Some(true)
            && self.attached.is_none_or(|a| a == resource.is_some())
            // "IPs with one or more matching tags" (the SDK's words).
            && (self.tags.is_empty() || self.tags.iter().any(|t| ip.tags.contains(t)))
            && (self.ip_ids.is_empty() || self.ip_ids.contains(&ip.id))
    }
}

fn ip_not_found(id: &str) -> ApiError {
    ApiError::NotFound {
        resource: "ip".into(),
        resource_id: id.into(),
    }
}

impl PnWorld {
    /// Addresses of `region` matching `filter`, oldest first.
    pub fn list_ips(&self, region: &str, filter: &IpFilter) -> Vec<&IpRecord> {
        let mut list: Vec<&IpRecord> = self
            .ips
            .values()
            .filter(|ip| ip.region == region && filter.matches(ip))
            .collect();
        list.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
        list
    }

    pub fn ip(&self, region: &str, id: &str) -> Result<&IpRecord, ApiError> {
        self.ips
            .get(id)
            .filter(|ip| ip.region == region)
            .ok_or_else(|| ip_not_found(id))
    }

    /// Every address of every region (admin records).
    pub fn all_ips(&self) -> impl Iterator<Item = &IpRecord> {
        self.ips.values()
    }

    /// `POST /ips`: books an address of the network (the given one, or the
    /// lowest free one).
    pub fn book(
        &mut self,
        now: SimTime,
        region: &str,
        req: BookRequest,
    ) -> Result<&IpRecord, ApiError> {
        let network = self.network(region, &req.private_network_id)?;
        let project = req.project_id.unwrap_or_else(|| network.project_id.clone());
        if project != network.project_id {
            // "the Project must match the Private Network's Project" (SDK).
            return Err(ApiError::invalid(
                "project_id",
                "constraint",
                "the project must be the Private Network's project",
            ));
        }
        let pn = req.private_network_id.clone();
        let id = self.allocate(now, region, &pn, req.address, true)?;
        let ip = self.ips.get_mut(&id).expect("just allocated");
        ip.tags = req.tags;
        tracing::info!(ip_id = %id, address = %ip.address, private_network_id = %pn, "IPAM address booked");
        Ok(ip)
    }

    /// Takes an address of network `pn` (the given one or the lowest free
    /// one) and returns its id.
    pub(crate) fn allocate(
        &mut self,
        now: SimTime,
        region: &str,
        pn: &str,
        wanted: Option<Ipv4Addr>,
        booked: bool,
    ) -> Result<String, ApiError> {
        let network = self.network(region, pn)?;
        let taken = |addr: Ipv4Addr| self.ips.values().any(|ip| ip.address == addr);
        let found = match wanted {
            Some(addr) => {
                let Some(subnet) = network.subnets.iter().find(|s| s.cidr.assignable(addr)) else {
                    return Err(ApiError::invalid(
                        "address",
                        "constraint",
                        format!("{addr} is not an assignable address of the Private Network"),
                    ));
                };
                if taken(addr) {
                    // INFERENCE: the SDK only says the call "will fail".
                    return Err(ApiError::message(
                        StatusCode::CONFLICT,
                        format!("IP {addr} is already reserved"),
                    ));
                }
                Some((subnet, addr))
            }
            None => network
                .subnets
                .iter()
                .find_map(|s| s.cidr.hosts().find(|a| !taken(*a)).map(|a| (s, a))),
        };
        let Some((subnet, address)) = found else {
            // INFERENCE: the real answer to an exhausted subnet is unknown.
            return Err(ApiError::PreconditionFailed {
                precondition: "unknown_precondition".into(),
                help_message: "no address left in the Private Network's subnets".into(),
            });
        };
        let record = IpRecord {
            id: String::new(),
            address,
            prefix: subnet.cidr.prefix,
            private_network_id: network.id.clone(),
            subnet_id: subnet.id.clone(),
            region: network.region.clone(),
            project_id: network.project_id.clone(),
            tags: Vec::new(),
            created_at: now,
            updated_at: now,
            resource: None,
            booked,
        };
        let id = self.uuid();
        self.ips.insert(
            id.clone(),
            IpRecord {
                id: id.clone(),
                ..record
            },
        );
        Ok(id)
    }

    /// `DELETE /ips/{id}`: refused while attached (INFERENCE: the shape is
    /// the one of a Block volume still in use).
    pub fn release(&mut self, region: &str, id: &str) -> Result<(), ApiError> {
        let ip = self.ip(region, id)?;
        if ip.resource.is_some() {
            return Err(ApiError::PreconditionFailed {
                precondition: "resource_still_in_use".into(),
                help_message: "the IP is attached to a resource; detach it first".into(),
            });
        }
        self.ips.remove(id);
        tracing::info!(ip_id = %id, "IPAM address released");
        Ok(())
    }

    /// Checks that booked addresses `ids` may be attached on network `pn`:
    /// they exist in the region, belong to that network, and are free.
    pub(crate) fn check_booked(
        &self,
        zone: &str,
        pn: &str,
        ids: &[String],
    ) -> Result<(), ApiError> {
        if ids.len() > 1 {
            return Err(ApiError::invalid(
                "ipam_ip_ids",
                "constraint",
                "at most one IPv4 address per Private Network",
            ));
        }
        for id in ids {
            let ip = self.ip(region_of(zone), id)?;
            if ip.private_network_id != pn {
                return Err(ApiError::invalid(
                    "ipam_ip_ids",
                    "constraint",
                    format!("IP {id} is not in Private Network {pn}"),
                ));
            }
            if ip.resource.is_some() {
                return Err(ApiError::invalid(
                    "ipam_ip_ids",
                    "constraint",
                    format!("IP {id} is already attached to a resource"),
                ));
            }
        }
        Ok(())
    }

    pub(crate) fn set_resource(&mut self, now: SimTime, id: &str, resource: Option<IpResource>) {
        if let Some(ip) = self.ips.get_mut(id) {
            ip.resource = resource;
            ip.updated_at = now;
        }
    }

    /// The holder of `ids` went: allocated addresses are released, booked
    /// ones stay booked, detached.
    pub(crate) fn free_held(&mut self, now: SimTime, ids: &[String]) {
        for id in ids {
            match self.ips.get(id).map(|ip| ip.booked) {
                Some(true) => self.set_resource(now, id, None),
                Some(false) => {
                    self.ips.remove(id);
                }
                None => {}
            }
        }
    }
}
