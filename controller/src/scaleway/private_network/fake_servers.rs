//! The fake's server side: Elastic Metal options and attachments (v1, v3)
//! and Instance private NICs, on the state of [`super::FakePrivateNetworks`].

use super::*;

#[async_trait]
impl MetalPrivateNetworks for FakePrivateNetworks {
    async fn add_server_option(
        &self,
        zone: &str,
        server_id: &str,
        option_id: &str,
    ) -> Result<Vec<ServerOption>, ApiError> {
        let mut st = self.begin(Op::AddServerOption, zone, Some(server_id))?;
        let auto_finish = st.auto_finish;
        let option = st
            .offer_options
            .get(zone)
            .and_then(|o| o.iter().find(|o| o.id == option_id))
            .cloned()
            .ok_or_else(|| not_found("option", option_id))?;
        let s = server(&mut st, zone, server_id, Kind::Metal)?;
        if s.options.iter().any(|o| o.id == option_id) {
            return Err(ApiError::Invalid(format!(
                "option {option_id} is already on the server"
            )));
        }
        s.options.push(ServerOption {
            id: option.id,
            name: option.name,
            status: if auto_finish {
                OptionStatus::OptionStatusEnable
            } else {
                OptionStatus::OptionStatusEnabling
            },
            manageable: option.manageable,
            expires_at: None,
            private_network: option.private_network,
        });
        Ok(s.options.clone())
    }

    async fn get_server_options(
        &self,
        zone: &str,
        server_id: &str,
    ) -> Result<Vec<ServerOption>, ApiError> {
        let mut st = self.begin(Op::GetServerOptions, zone, Some(server_id))?;
        Ok(server(&mut st, zone, server_id, Kind::Metal)?
            .options
            .clone())
    }

    async fn attach_private_network(
        &self,
        zone: &str,
        server_id: &str,
        private_network_id: &str,
        ipam_ip_ids: &[String],
    ) -> Result<ServerPrivateNetwork, ApiError> {
        let mut st = self.begin(Op::Attach, zone, Some(server_id))?;
        let requires_option = st.requires_option;
        let s = server(&mut st, zone, server_id, Kind::Metal)?;
        if requires_option
            && !s
                .options
                .iter()
                .any(|o| o.private_network.is_some() && o.is_on())
        {
            return Err(ApiError::Invalid(format!(
                "server {server_id} has no private_network option"
            )));
        }
        let pn = network(&st, region_of(zone), private_network_id)?.clone();
        let mine: Vec<&ServerPrivateNetwork> = st
            .attachments
            .values()
            .map(|(_, a)| a)
            .filter(|a| a.server_id == server_id)
            .collect();
        // Unverified: the real API's answers to these two.
        if mine.iter().any(|a| a.private_network_id == pn.id) {
            return Err(ApiError::Invalid(format!(
                "server {server_id} is already attached to {}",
                pn.id
            )));
        }
        if mine.len() >= MAX_NETWORKS_PER_SERVER {
            return Err(ApiError::Invalid(format!(
                "server {server_id} has {MAX_NETWORKS_PER_SERVER} private networks already"
            )));
        }
        let id = next_id(&mut st);
        let resource = IpResource {
            // Unverified which resource the real IPAM names for an attachment.
            kind: IpResourceType::BaremetalPrivateNic,
            id: id.clone(),
            mac_address: None,
            name: None,
        };
        let ipam_ip_ids = if ipam_ip_ids.is_empty() {
            vec![allocate(&mut st, &pn, &pn.project_id, resource, zone)?]
        } else {
            take_booked(&mut st, &pn, ipam_ip_ids, &resource)?;
            ipam_ip_ids.to_vec()
        };
        let attachment = ServerPrivateNetwork {
            id: id.clone(),
            project_id: pn.project_id.clone(),
            server_id: server_id.to_string(),
            private_network_id: pn.id.clone(),
            vlan: None,
            status: AttachmentStatus::Attaching,
            ipam_ip_ids,
            created_at: Some(now()),
            updated_at: Some(now()),
        };
        st.attachments
            .insert(id.clone(), (zone.to_string(), attachment.clone()));
        if st.auto_finish {
            finish_attachment(&mut st, &id);
            return Ok(st.attachments[&id].1.clone());
        }
        Ok(attachment)
    }

    async fn list_server_private_networks(
        &self,
        zone: &str,
        filter: &AttachmentFilter,
    ) -> Result<Vec<ServerPrivateNetwork>, ApiError> {
        let st = self.begin(Op::ListAttachments, zone, None)?;
        Ok(st
            .attachments
            .values()
            .filter(|(z, a)| z == zone && filter.matches(a))
            .map(|(_, a)| a.clone())
            .collect())
    }

    async fn detach_private_network(
        &self,
        zone: &str,
        server_id: &str,
        private_network_id: &str,
    ) -> Result<(), ApiError> {
        let mut st = self.begin(Op::Detach, zone, Some(server_id))?;
        let found = st
            .attachments
            .iter()
            .find(|(_, (z, a))| {
                z == zone && a.server_id == server_id && a.private_network_id == private_network_id
            })
            .map(|(id, (_, a))| (id.clone(), a.status));
        let Some((id, status)) = found else {
            return Ok(());
        };
        match status {
            AttachmentStatus::Attaching => Err(ApiError::TransientState(format!(
                "server private network {id} is attaching"
            ))),
            AttachmentStatus::Detaching => Ok(()),
            _ => {
                if let Some((_, a)) = st.attachments.get_mut(&id) {
                    a.status = AttachmentStatus::Detaching;
                    a.updated_at = Some(now());
                }
                if st.auto_finish {
                    drop_attachment(&mut st, &id);
                }
                Ok(())
            }
        }
    }
}

#[async_trait]
impl InstancePrivateNics for FakePrivateNetworks {
    async fn create_private_nic(
        &self,
        zone: &str,
        server_id: &str,
        req: &CreatePrivateNicRequest,
    ) -> Result<PrivateNic, ApiError> {
        let mut st = self.begin(Op::CreateNic, zone, Some(server_id))?;
        server(&mut st, zone, server_id, Kind::Vm)?;
        let pn = network(&st, region_of(zone), &req.private_network_id)?.clone();
        if st
            .nics
            .values()
            .any(|n| n.server_id == server_id && n.private_network_id == pn.id)
        {
            // Unverified: the real API's answer.
            return Err(ApiError::Invalid(format!(
                "server {server_id} already has a NIC on {}",
                pn.id
            )));
        }
        let id = next_id(&mut st);
        let n = st.next_id;
        let mac = format!(
            "02:00:00:{:02x}:{:02x}:{:02x}",
            (n >> 16) & 0xff,
            (n >> 8) & 0xff,
            n & 0xff
        );
        let resource = IpResource {
            kind: IpResourceType::InstancePrivateNic,
            id: id.clone(),
            mac_address: Some(mac.clone()),
            name: None,
        };
        let ipam_ip_ids = if req.ipam_ip_ids.is_empty() {
            vec![allocate(&mut st, &pn, &pn.project_id, resource, zone)?]
        } else {
            take_booked(&mut st, &pn, &req.ipam_ip_ids, &resource)?;
            req.ipam_ip_ids.clone()
        };
        let nic = PrivateNic {
            id: id.clone(),
            server_id: server_id.to_string(),
            private_network_id: pn.id.clone(),
            mac_address: mac,
            state: if st.auto_finish {
                PrivateNicState::Available
            } else {
                PrivateNicState::Syncing
            },
            tags: req.tags.clone(),
            ipam_ip_ids,
            zone: zone.to_string(),
            creation_date: Some(now()),
        };
        st.nics.insert(id, nic.clone());
        Ok(nic)
    }

    async fn list_private_nics(
        &self,
        zone: &str,
        server_id: &str,
    ) -> Result<Vec<PrivateNic>, ApiError> {
        let mut st = self.begin(Op::ListNics, zone, Some(server_id))?;
        server(&mut st, zone, server_id, Kind::Vm)?;
        Ok(st
            .nics
            .values()
            .filter(|n| n.server_id == server_id)
            .cloned()
            .collect())
    }

    async fn get_private_nic(
        &self,
        zone: &str,
        server_id: &str,
        nic_id: &str,
    ) -> Result<PrivateNic, ApiError> {
        let st = self.begin(Op::GetNic, zone, Some(nic_id))?;
        st.nics
            .get(nic_id)
            .filter(|n| n.server_id == server_id && n.zone == zone)
            .cloned()
            .ok_or_else(|| not_found("instance_private_nic", nic_id))
    }

    async fn delete_private_nic(
        &self,
        zone: &str,
        server_id: &str,
        nic_id: &str,
    ) -> Result<(), ApiError> {
        let mut st = self.begin(Op::DeleteNic, zone, Some(nic_id))?;
        let mine = st
            .nics
            .get(nic_id)
            .is_some_and(|n| n.server_id == server_id && n.zone == zone);
        if mine {
            drop_nic(&mut st, nic_id);
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "fake_tests.rs"]
mod tests;
