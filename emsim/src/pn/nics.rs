//! Instance private NICs: one extra NIC of a VM on a Private Network,
//! `syncing` → `available`, with an IPAM address (allocated, or booked and
//! given by id).

use super::{IpResource, PnWorld, region_of};
use crate::clock::{SimTime, secs};
use crate::error::ApiError;

/// Private NICs per VM (the types' `capabilities.private_network`: 8).
pub const MAX_PER_VM: usize = 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NicState {
    Syncing,
    Available,
}

impl NicState {
    pub fn as_str(self) -> &'static str {
        match self {
            NicState::Syncing => "syncing",
            NicState::Available => "available",
        }
    }
}

#[derive(Debug, Clone)]
pub struct NicRecord {
    pub id: String,
    pub zone: String,
    pub server_id: String,
    pub private_network_id: String,
    pub mac_address: String,
    pub state: NicState,
    pub tags: Vec<String>,
    pub created_at: SimTime,
    pub ipam_ip_ids: Vec<String>,
    pub pending: Option<SimTime>,
}

/// The VM side of a NIC, checked by the world.
#[derive(Debug, Clone)]
pub struct VmRef {
    pub id: String,
    pub zone: String,
    pub project_id: String,
    pub name: String,
}

/// A MAC in Scaleway's private-NIC block (`02:00:00:…`), derived from the
/// NIC id so it is stable without drawing from the RNG.
fn nic_mac(id: &str) -> String {
    let d = md5::compute(format!("emsim-private-nic:{id}")).0;
    format!("02:00:00:{:02x}:{:02x}:{:02x}", d[0], d[1], d[2])
}

impl PnWorld {
    /// The NICs of a VM, oldest first.
    pub fn nics_of(&self, server_id: &str) -> Vec<&NicRecord> {
        let mut list: Vec<_> = self
            .nics
            .values()
            .filter(|n| n.server_id == server_id)
            .collect();
        list.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
        list
    }

    pub fn all_nics(&self) -> impl Iterator<Item = &NicRecord> {
        self.nics.values()
    }

    pub fn nic(&self, server_id: &str, id: &str) -> Result<&NicRecord, ApiError> {
        self.nics
            .get(id)
            .filter(|n| n.server_id == server_id)
            .ok_or_else(|| ApiError::NotFound {
                resource: "instance_private_nic".into(),
                resource_id: id.into(),
            })
    }

    /// `POST .../servers/{id}/private_nics`.
    pub fn create_nic(
        &mut self,
        now: SimTime,
        vm: &VmRef,
        pn: &str,
        tags: Vec<String>,
        ipam_ip_ids: Vec<String>,
    ) -> Result<&NicRecord, ApiError> {
        let network = self.network(region_of(&vm.zone), pn)?;
        if network.project_id != vm.project_id {
            return Err(ApiError::NotFound {
                resource: "private_network".into(),
                resource_id: pn.into(),
            });
        }
        let current = self.nics_of(&vm.id);
        if current.iter().any(|n| n.private_network_id == pn) {
            // INFERENCE: the wording of the real refusal is not recorded.
            return Err(ApiError::invalid_request(
                axum::http::StatusCode::BAD_REQUEST,
                "the server already has a private NIC in this Private Network",
            ));
        }
        if current.len() >= MAX_PER_VM {
            return Err(ApiError::invalid_request(
                axum::http::StatusCode::BAD_REQUEST,
                format!("a server has at most {MAX_PER_VM} private NICs"),
            ));
        }
        self.check_booked(&vm.zone, pn, &ipam_ip_ids)?;
        let region = region_of(&vm.zone).to_string();
        let ids = if ipam_ip_ids.is_empty() {
            vec![self.allocate(now, &region, pn, None, false)?]
        } else {
            ipam_ip_ids
        };
        let id = self.uuid();
        let mac_address = nic_mac(&id);
        for ip in &ids {
            let resource = IpResource {
                kind: "instance_private_nic",
                id: id.clone(),
                mac_address: mac_address.clone(),
                name: vm.name.clone(),
            };
            self.set_resource(now, ip, Some(resource));
        }
        let record = NicRecord {
            id: id.clone(),
            zone: vm.zone.clone(),
            server_id: vm.id.clone(),
            private_network_id: pn.into(),
            mac_address,
            state: NicState::Syncing,
            tags,
            created_at: now,
            ipam_ip_ids: ids,
            pending: Some(now + secs(self.timings.nic_sync)),
        };
        tracing::info!(private_nic_id = %id, server_id = %vm.id, private_network_id = %pn, "private NIC created");
        Ok(self.nics.entry(id).or_insert(record))
    }

    /// `DELETE .../private_nics/{id}`: gone at once.
    pub fn delete_nic(&mut self, now: SimTime, server_id: &str, id: &str) -> Result<(), ApiError> {
        self.nic(server_id, id)?;
        self.drop_nic(id, now);
        Ok(())
    }

    pub(crate) fn advance_nics(&mut self, now: SimTime) {
        for nic in self.nics.values_mut() {
            if nic.pending.is_some_and(|at| at <= now) {
                nic.pending = None;
                nic.state = NicState::Available;
            }
        }
    }

    pub(crate) fn drop_nic(&mut self, id: &str, now: SimTime) {
        if let Some(nic) = self.nics.remove(id) {
            self.free_held(now, &nic.ipam_ip_ids);
            tracing::info!(private_nic_id = %id, server_id = %nic.server_id, "private NIC removed");
        }
    }
}
