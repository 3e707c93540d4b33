//! The world's side of Private Networks: the servers an attachment or a
//! private NIC belongs to are checked here, the network state lives in
//! `crate::pn`.

use super::*;
use crate::pn::{AttachRequest, Attachment, PnWorld, PrivateNic, ServerRef, VmRef, em_mac};

impl World {
    pub fn pn(&self) -> &PnWorld {
        &self.pn
    }

    pub fn pn_mut(&mut self) -> &mut PnWorld {
        &mut self.pn
    }

    /// Replaces the Private Network state (at start-up, with the seeds).
    pub fn install_private_networks(&mut self, pn: PnWorld) {
        self.pn = pn;
    }

    /// An Elastic Metal server that may join a network now: delivered, not
    /// being deleted, with the Private Network option enabled (whether the
    /// real API requires the option first is unverified: required here).
    fn attachable(&self, zone: &str, id: &str) -> Result<ServerRef, ApiError> {
        let server = self.server(zone, id)?;
        match server.status {
            Status::Delivering | Status::OutOfStock => return Err(ApiError::not_delivered()),
            Status::Deleting => return Err(server.check(Request::Delete).expect_err("deleting")),
            _ => {}
        }
        if !server
            .options
            .iter()
            .any(|o| o.kind.private_network.is_some())
        {
            return Err(ApiError::PreconditionFailed {
                precondition: "attribute_must_be_set".into(),
                help_message: "the server needs the Private Network option: POST /baremetal/v1/zones/{zone}/servers/{server_id}/options/{option_id} first".into(),
            });
        }
        Ok(self.server_ref(server))
    }

    fn server_ref(&self, server: &ServerRecord) -> ServerRef {
        ServerRef {
            id: server.id.clone(),
            zone: server.zone.clone(),
            project_id: server.project_id.clone(),
            name: server.name.clone(),
            mac_address: em_mac(&server.id),
        }
    }

    /// `POST /baremetal/v3/zones/{zone}/servers/{id}/private-networks`.
    pub fn attach_private_network(
        &mut self,
        now: SimTime,
        zone: &str,
        id: &str,
        private_network_id: String,
        ipam_ip_ids: Vec<String>,
        faults: &mut Faults,
    ) -> Result<Attachment, ApiError> {
        let server = self.attachable(zone, id)?;
        // Checked before the fault draws, so a refused call does not spend it.
        self.pn
            .check_attach(&server, &private_network_id, &ipam_ip_ids)?;
        let name = self.pn.networks[&private_network_id].name.clone();
        let fails = faults.take_attach(&private_network_id, &name, zone);
        let req = AttachRequest {
            private_network_id,
            ipam_ip_ids,
            fails,
        };
        let wire = self.pn.attach(now, &server, req)?.to_wire();
        self.wake.notify_one();
        Ok(wire)
    }

    /// `PUT /baremetal/v3/zones/{zone}/servers/{id}/private-networks`.
    pub fn set_private_networks(
        &mut self,
        now: SimTime,
        zone: &str,
        id: &str,
        wanted: &[(String, Vec<String>)],
        faults: &mut Faults,
    ) -> Result<Vec<Attachment>, ApiError> {
        let server = self.attachable(zone, id)?;
        let names: HashMap<String, String> = self
            .pn
            .networks()
            .map(|n| (n.id.clone(), n.name.clone()))
            .collect();
        let list = self
            .pn
            .set_attachments(now, &server, wanted, |pn| {
                let name = names.get(pn).map_or("", String::as_str);
                faults.take_attach(pn, name, zone)
            })?
            .into_iter()
            .map(|a| a.to_wire())
            .collect();
        self.wake.notify_one();
        Ok(list)
    }

    /// `DELETE /baremetal/v3/zones/{zone}/servers/{id}/private-networks/{pn}`.
    pub fn detach_private_network(
        &mut self,
        now: SimTime,
        zone: &str,
        id: &str,
        private_network_id: &str,
    ) -> Result<(), ApiError> {
        let server = self.server(zone, id)?;
        if server.status == Status::Deleting {
            return Err(server.check(Request::Delete).expect_err("deleting"));
        }
        self.pn.detach(now, id, private_network_id)?;
        self.wake.notify_one();
        Ok(())
    }

    fn vm_ref(&self, zone: &str, id: &str) -> Result<VmRef, ApiError> {
        let vm = self.instance.server(zone, id)?;
        Ok(VmRef {
            id: vm.id.clone(),
            zone: vm.zone.clone(),
            project_id: vm.project.clone(),
            name: vm.name.clone(),
        })
    }

    /// `POST /instance/v1/zones/{zone}/servers/{id}/private_nics`.
    pub fn create_private_nic(
        &mut self,
        now: SimTime,
        zone: &str,
        id: &str,
        private_network_id: &str,
        tags: Vec<String>,
        ipam_ip_ids: Vec<String>,
    ) -> Result<PrivateNic, ApiError> {
        let vm = self.vm_ref(zone, id)?;
        let wire = self
            .pn
            .create_nic(now, &vm, private_network_id, tags, ipam_ip_ids)?
            .to_wire();
        self.wake.notify_one();
        Ok(wire)
    }

    /// The private NICs of a VM of `zone` (404 for an unknown VM).
    pub fn private_nics(&self, zone: &str, id: &str) -> Result<Vec<PrivateNic>, ApiError> {
        self.instance.server(zone, id)?;
        Ok(self
            .pn
            .nics_of(id)
            .into_iter()
            .map(|n| n.to_wire())
            .collect())
    }

    pub fn private_nic(&self, zone: &str, id: &str, nic_id: &str) -> Result<PrivateNic, ApiError> {
        self.instance.server(zone, id)?;
        Ok(self.pn.nic(id, nic_id)?.to_wire())
    }

    pub fn delete_private_nic(
        &mut self,
        now: SimTime,
        zone: &str,
        id: &str,
        nic_id: &str,
    ) -> Result<(), ApiError> {
        self.instance.server(zone, id)?;
        self.pn.delete_nic(now, id, nic_id)
    }

    /// A VM as the Instance API shows it, its private NICs included.
    pub fn vm_wire(
        &self,
        record: &crate::instance::server::VmRecord,
    ) -> crate::instance::model::Server {
        let mut wire = self.instance.server_wire(record);
        wire.private_nics = self
            .pn
            .nics_of(&record.id)
            .into_iter()
            .map(|n| n.to_wire())
            .collect();
        wire
    }
}
