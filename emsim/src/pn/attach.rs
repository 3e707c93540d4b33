//! Elastic Metal attachments (baremetal v3 `server-private-networks`): a VLAN
//! of the network on the server's NIC, `attaching` → `attached` (or `error`
//! when a fault says so), `detaching` → gone.

use super::{IpResource, PnWorld, region_of};
use crate::clock::{SimTime, secs};
use crate::error::ApiError;

/// Private Networks an Elastic Metal server may join (facts: up to 8).
pub const MAX_PER_SERVER: usize = 8;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AttachStatus {
    Attaching,
    Attached,
    Error,
    Detaching,
}

impl AttachStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            AttachStatus::Attaching => "attaching",
            AttachStatus::Attached => "attached",
            AttachStatus::Error => "error",
            AttachStatus::Detaching => "detaching",
        }
    }
}

#[derive(Debug, Clone)]
pub struct AttachmentRecord {
    pub id: String,
    pub zone: String,
    pub server_id: String,
    pub private_network_id: String,
    pub project_id: String,
    pub vlan: u32,
    pub status: AttachStatus,
    pub created_at: SimTime,
    pub updated_at: SimTime,
    pub ipam_ip_ids: Vec<String>,
    /// When the current transition ends (`attaching` or `detaching`).
    pub pending: Option<SimTime>,
    /// An injected fault: the attachment ends in `error`.
    pub fails: bool,
}

/// The server side of an attachment, checked by the world.
#[derive(Debug, Clone)]
pub struct ServerRef {
    pub id: String,
    pub zone: String,
    pub project_id: String,
    pub name: String,
    pub mac_address: String,
}

impl ServerRef {
    fn resource(&self) -> IpResource {
        IpResource {
            kind: "baremetal_private_nic",
            id: self.id.clone(),
            mac_address: self.mac_address.clone(),
            name: self.name.clone(),
        }
    }
}

/// `POST .../servers/{id}/private-networks`.
#[derive(Debug, Clone)]
pub struct AttachRequest {
    pub private_network_id: String,
    pub ipam_ip_ids: Vec<String>,
    /// A `private_network_attach_error` fault fired on this call.
    pub fails: bool,
}

fn attachment_not_found(pn: &str) -> ApiError {
    ApiError::NotFound {
        resource: "baremetal_private_network".into(),
        resource_id: pn.into(),
    }
}

impl PnWorld {
    /// Attachments of a zone, oldest first.
    pub fn attachments(&self, zone: &str) -> Vec<&AttachmentRecord> {
        let mut list: Vec<_> = self
            .attachments
            .values()
            .filter(|a| a.zone == zone)
            .collect();
        list.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
        list
    }

    pub fn all_attachments(&self) -> impl Iterator<Item = &AttachmentRecord> {
        self.attachments.values()
    }

    pub fn attachments_of(&self, server_id: &str) -> Vec<&AttachmentRecord> {
        let mut list: Vec<_> = self
            .attachments
            .values()
            .filter(|a| a.server_id == server_id)
            .collect();
        list.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
        list
    }

    /// Checks what an attach asks before any state changes (the network of
    /// the server's region and project, not attached yet, room left, the
    /// booked addresses usable).
    pub fn check_attach(
        &self,
        server: &ServerRef,
        pn: &str,
        ipam_ip_ids: &[String],
    ) -> Result<(), ApiError> {
        let network = self.network(region_of(&server.zone), pn)?;
        if network.project_id != server.project_id {
            // Another project's network is not visible from the server's.
            return Err(ApiError::NotFound {
                resource: "private_network".into(),
                resource_id: pn.into(),
            });
        }
        let current = self.attachments_of(&server.id);
        if current.iter().any(|a| a.private_network_id == pn) {
            return Err(ApiError::invalid(
                "private_network_id",
                "constraint",
                "the server is already attached to this Private Network",
            ));
        }
        if current.len() >= MAX_PER_SERVER {
            return Err(ApiError::invalid(
                "private_network_id",
                "constraint",
                format!("a server joins at most {MAX_PER_SERVER} Private Networks"),
            ));
        }
        self.check_booked(&server.zone, pn, ipam_ip_ids)
    }

    /// Attaches after `check_attach` passed: `attaching` until the attach
    /// delay ends; an address is allocated unless one was booked.
    pub fn attach(
        &mut self,
        now: SimTime,
        server: &ServerRef,
        req: AttachRequest,
    ) -> Result<&AttachmentRecord, ApiError> {
        self.check_attach(server, &req.private_network_id, &req.ipam_ip_ids)?;
        let region = region_of(&server.zone).to_string();
        let pn = req.private_network_id;
        let ids = if req.ipam_ip_ids.is_empty() {
            vec![self.allocate(now, &region, &pn, None, false)?]
        } else {
            req.ipam_ip_ids
        };
        for ip in &ids {
            self.set_resource(now, ip, Some(server.resource()));
        }
        let vlan = self.vlan_for(&server.id, &pn);
        let network = &self.networks[&pn];
        let record = AttachmentRecord {
            id: String::new(),
            zone: server.zone.clone(),
            server_id: server.id.clone(),
            private_network_id: pn.clone(),
            project_id: network.project_id.clone(),
            vlan,
            status: AttachStatus::Attaching,
            created_at: now,
            updated_at: now,
            ipam_ip_ids: ids,
            pending: Some(now + secs(self.timings.attach)),
            fails: req.fails,
        };
        let id = self.uuid();
        tracing::info!(attachment_id = %id, server_id = %server.id, private_network_id = %pn, vlan = record.vlan, fails = req.fails, "private network attaching");
        Ok(self
            .attachments
            .entry(id.clone())
            .or_insert(AttachmentRecord { id, ..record }))
    }

    /// `DELETE .../servers/{id}/private-networks/{pn}`: `detaching`, gone
    /// after the detach delay. Refused while a transition runs.
    pub fn detach(&mut self, now: SimTime, server_id: &str, pn: &str) -> Result<(), ApiError> {
        let Some(record) = self
            .attachments
            .values_mut()
            .find(|a| a.server_id == server_id && a.private_network_id == pn)
        else {
            return Err(attachment_not_found(pn));
        };
        if matches!(
            record.status,
            AttachStatus::Attaching | AttachStatus::Detaching
        ) {
            return Err(ApiError::TransientState {
                resource: "baremetal_private_network".into(),
                resource_id: record.id.clone(),
                current_state: record.status.as_str().into(),
            });
        }
        record.status = AttachStatus::Detaching;
        record.updated_at = now;
        record.pending = Some(now + secs(self.timings.detach));
        tracing::info!(attachment_id = %record.id, %server_id, private_network_id = %pn, "private network detaching");
        Ok(())
    }

    /// The server is being deleted: its attachments show `detaching` until
    /// it is gone (then they go with it).
    pub fn server_deleting(&mut self, now: SimTime, server_id: &str) {
        for record in self
            .attachments
            .values_mut()
            .filter(|a| a.server_id == server_id)
        {
            record.status = AttachStatus::Detaching;
            record.updated_at = now;
            record.pending = None;
        }
    }

    pub(crate) fn advance_attachments(&mut self, now: SimTime) {
        let due: Vec<(String, SimTime)> = self
            .attachments
            .values()
            .filter_map(|a| {
                a.pending
                    .filter(|at| *at <= now)
                    .map(|at| (a.id.clone(), at))
            })
            .collect();
        for (id, at) in due {
            let record = self.attachments.get_mut(&id).expect("listed above");
            record.pending = None;
            record.updated_at = at;
            match record.status {
                AttachStatus::Attaching => {
                    record.status = if record.fails {
                        AttachStatus::Error
                    } else {
                        AttachStatus::Attached
                    };
                    tracing::info!(attachment_id = %id, status = record.status.as_str(), "private network attachment settled");
                }
                AttachStatus::Detaching => self.drop_attachment(&id, at),
                AttachStatus::Attached | AttachStatus::Error => {}
            }
        }
    }

    pub(crate) fn drop_attachment(&mut self, id: &str, now: SimTime) {
        if let Some(record) = self.attachments.remove(id) {
            self.free_held(now, &record.ipam_ip_ids);
            tracing::info!(attachment_id = %id, server_id = %record.server_id, "private network detached");
        }
    }
}

impl PnWorld {
    /// `PUT .../servers/{id}/private-networks`: the server's whole set. Networks
    /// left out are detached, new ones attached (`fails` says which an
    /// injected fault makes end in `error`); for a kept network a non-empty
    /// address list replaces its addresses, an empty one keeps them. Checked
    /// in full before anything changes.
    pub fn set_attachments(
        &mut self,
        now: SimTime,
        server: &ServerRef,
        wanted: &[(String, Vec<String>)],
        mut fails: impl FnMut(&str) -> bool,
    ) -> Result<Vec<&AttachmentRecord>, ApiError> {
        let current: Vec<(String, AttachStatus, Vec<String>)> = self
            .attachments_of(&server.id)
            .into_iter()
            .map(|a| {
                (
                    a.private_network_id.clone(),
                    a.status,
                    a.ipam_ip_ids.clone(),
                )
            })
            .collect();
        if wanted.len() > MAX_PER_SERVER {
            return Err(ApiError::invalid(
                "per_private_network_ipam_ip_ids",
                "constraint",
                format!("a server joins at most {MAX_PER_SERVER} Private Networks"),
            ));
        }
        for (pn, status, _) in &current {
            if wanted.iter().all(|(w, _)| w != pn)
                && matches!(status, AttachStatus::Attaching | AttachStatus::Detaching)
            {
                return Err(ApiError::TransientState {
                    resource: "baremetal_private_network".into(),
                    resource_id: pn.clone(),
                    current_state: status.as_str().into(),
                });
            }
        }
        for (pn, ips) in wanted {
            match current.iter().find(|(c, _, _)| c == pn) {
                None => {
                    let network = self.network(region_of(&server.zone), pn)?;
                    if network.project_id != server.project_id {
                        return Err(ApiError::NotFound {
                            resource: "private_network".into(),
                            resource_id: pn.clone(),
                        });
                    }
                    self.check_booked(&server.zone, pn, ips)?;
                }
                Some((_, _, held)) if !ips.is_empty() && ips != held => {
                    let others: Vec<String> =
                        ips.iter().filter(|i| !held.contains(i)).cloned().collect();
                    self.check_booked(&server.zone, pn, &others)?;
                    if ips.len() > 1 {
                        self.check_booked(&server.zone, pn, ips)?;
                    }
                }
                Some(_) => {}
            }
        }
        for (pn, status, _) in current.clone() {
            if wanted.iter().all(|(w, _)| *w != pn) && status != AttachStatus::Detaching {
                self.detach(now, &server.id, &pn)?;
            }
        }
        for (pn, ips) in wanted {
            match current.iter().find(|(c, _, _)| c == pn) {
                None => {
                    let req = AttachRequest {
                        private_network_id: pn.clone(),
                        ipam_ip_ids: ips.clone(),
                        fails: fails(pn),
                    };
                    self.attach(now, server, req)?;
                }
                Some((_, _, held)) if !ips.is_empty() && ips != held => {
                    let released: Vec<String> =
                        held.iter().filter(|h| !ips.contains(h)).cloned().collect();
                    self.free_held(now, &released);
                    for ip in ips {
                        self.set_resource(now, ip, Some(server.resource()));
                    }
                    let record = self
                        .attachments
                        .values_mut()
                        .find(|a| a.server_id == server.id && a.private_network_id == *pn)
                        .expect("listed above");
                    record.ipam_ip_ids = ips.clone();
                    record.updated_at = now;
                }
                Some(_) => {}
            }
        }
        Ok(self
            .attachments_of(&server.id)
            .into_iter()
            .filter(|a| wanted.iter().any(|(w, _)| *w == a.private_network_id))
            .collect())
    }
}
