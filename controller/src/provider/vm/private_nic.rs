//! A VM's private NIC on its NodeClass's Private Network (issue 27). Create
//! adds the NIC while the VM it ordered is still stopped, reads the NIC's
//! MAC and IPAM address and renders them into the node's config (a
//! `LinkAliasConfig` `priv0` by MAC, its address, the kubelet's
//! `nodeIP.validSubnets`); only then does the VM get its user data and
//! power on. The NIC need not be `available` yet: its MAC and address are
//! known from its creation, and the VM reads its config once it boots.
//!
//! Idempotent (house style §8): the server's NICs are listed before one is
//! made, so a retried Create, or one whose answer was lost, finds the NIC it
//! made; the create call is never repeated after an unclear failure.
//!
//! With `addresses: booked`, the free address is chosen before the VM is
//! ordered, holding [`BOOKING`] through the order and the NIC creation, so
//! that no VM is ordered that cannot join and no two nodes pick the same
//! address. The lock is taken after the order turn (and only for booked
//! classes): whoever holds it never waits for a turn.
//!
//! Delete: the Instance API deletes a server's private NICs with it (IPAM
//! releases the addresses it allocated; booked ones stay booked, they are
//! the customer's). Delete still deletes the NICs of a VM tagged with its
//! network first, best effort, so that IPAM frees the address through the
//! documented path even where the server's end would not.

use std::sync::Arc;

use tracing::{debug, info, warn};

use super::super::network::{
    BOOKING, BookedChoiceError, NodeNetwork, choose_booked, node_network, private_link,
};
use super::super::{Provider, ProviderError, TAG_NODECLAIM, tag};
use super::{InstanceClassRecord, TAG_PRIVATE_NETWORK, vm_tag_value};
use crate::nodeclass::instance as ic;
use crate::scaleway::ApiError;
use crate::scaleway::instance::Server;
use crate::scaleway::private_network::{
    CreatePrivateNicRequest, IpFilter, IpamIp, PrivateNetworks, PrivateNic,
};
use crate::talos::PrivateLink;

/// A booked address chosen for a VM, held until its NIC takes it.
pub(super) struct Reserved {
    _turn: tokio::sync::MutexGuard<'static, ()>,
    ip: IpamIp,
}

fn create_failed(reason: &str, message: impl Into<String>) -> ProviderError {
    ProviderError::CreateFailed {
        reason: reason.to_string(),
        message: message.into(),
    }
}

fn unavailable(doing: &str, server: &str, e: &ApiError) -> ProviderError {
    create_failed(
        "ScalewayAPIUnavailable",
        format!("{doing} of VM {server}: {e}"),
    )
}

impl Provider {
    /// The Private Network clients when `class` selects a network; `None`
    /// without a selector.
    pub(super) fn vm_networks(
        &self,
        class: &InstanceClassRecord,
    ) -> Result<Option<&Arc<dyn PrivateNetworks>>, ProviderError> {
        if class.spec.private_network.is_none() {
            return Ok(None);
        }
        match self.networks.as_ref() {
            Some(networks) => Ok(Some(networks)),
            None => Err(ProviderError::NodeClassNotReady(format!(
                "{} {} selects a Private Network but the Private Network clients are not configured in this provider",
                ic::KIND,
                class.name
            ))),
        }
    }

    /// The network a VM of `class` in `zone` joins; NodeClassNotReady when
    /// the selector has none resolved in the zone's region.
    pub(super) fn vm_network(
        class: &InstanceClassRecord,
        zone: &str,
    ) -> Result<Option<NodeNetwork>, ProviderError> {
        node_network(
            class.spec.private_network.as_ref(),
            &class.private_networks,
            zone,
        )
        .map_err(|m| ProviderError::NodeClassNotReady(format!("{} {}: {m}", ic::KIND, class.name)))
    }

    /// With `addresses: booked`, the free address a new node takes, chosen
    /// holding [`BOOKING`], which the answer keeps held; `None` under
    /// `ipam`. Every booked address in use is a CreateFailed
    /// (`PrivateNetworkAddressesExhausted`): core retries until one is freed.
    pub(super) async fn reserve_address(
        networks: &Arc<dyn PrivateNetworks>,
        network: &NodeNetwork,
        claim: &str,
    ) -> Result<Option<Reserved>, ProviderError> {
        if network.booked.is_empty() {
            return Ok(None);
        }
        let turn = BOOKING.lock().await;
        match choose_booked(&**networks, &network.region, &network.id, &network.booked).await {
            Ok(ip) => {
                debug!(nodeclaim = claim, ipam_ip_id = %ip.id, address = %ip.address,
                    "chose a booked address");
                Ok(Some(Reserved { _turn: turn, ip }))
            }
            Err(e @ BookedChoiceError::NoneFree { .. }) => Err(create_failed(
                "PrivateNetworkAddressesExhausted",
                format!("NodeClaim {claim}: {e}"),
            )),
            Err(BookedChoiceError::Api(e)) => Err(create_failed(
                "ScalewayAPIUnavailable",
                format!("listing the booked IPAM IPs for NodeClaim {claim}: {e}"),
            )),
        }
    }

    /// The VM's one private NIC on `network`: the one it has, else a new one
    /// (on `reserved`, or a booked address chosen now, or one IPAM
    /// allocates); then the link its config brings up.
    pub(super) async fn ensure_private_nic(
        &self,
        networks: &Arc<dyn PrivateNetworks>,
        network: &NodeNetwork,
        server: &Server,
        claim: &str,
        reserved: Option<Reserved>,
    ) -> Result<PrivateLink, ProviderError> {
        let nics = networks
            .list_private_nics(&server.zone, &server.id)
            .await
            .map_err(|e| unavailable("listing the private NICs", &server.id, &e))?;
        let nic = match nics
            .into_iter()
            .find(|n| n.private_network_id == network.id)
        {
            Some(nic) => {
                debug!(nodeclaim = claim, server_id = %server.id, private_nic_id = %nic.id,
                    "the VM has its private NIC already");
                nic
            }
            None => {
                let reserved = match reserved {
                    Some(r) => Some(r),
                    None => Self::reserve_address(networks, network, claim).await?,
                };
                self.create_nic(networks, network, server, claim, reserved)
                    .await?
            }
        };
        let address = nic_address(&**networks, network, &nic, &server.id).await?;
        Ok(private_link(
            network,
            None,
            Some(nic.mac_address.clone()),
            address.as_ref(),
        ))
    }

    /// One create call, never repeated here: after an unclear failure the
    /// next Create's listing says whether the NIC was made. `reserved` (the
    /// booking lock) is let go once the call has answered.
    async fn create_nic(
        &self,
        networks: &Arc<dyn PrivateNetworks>,
        network: &NodeNetwork,
        server: &Server,
        claim: &str,
        reserved: Option<Reserved>,
    ) -> Result<PrivateNic, ProviderError> {
        let req = CreatePrivateNicRequest {
            private_network_id: network.id.clone(),
            tags: vec![self.cluster_tag(), tag(TAG_NODECLAIM, claim)],
            ipam_ip_ids: reserved.iter().map(|r| r.ip.id.clone()).collect(),
        };
        let result = networks
            .create_private_nic(&server.zone, &server.id, &req)
            .await;
        drop(reserved);
        match result {
            Ok(nic) => {
                info!(nodeclaim = claim, server_id = %server.id, private_nic_id = %nic.id,
                    private_network_id = %network.id, mac = %nic.mac_address,
                    booked = !req.ipam_ip_ids.is_empty(), "created the VM's private NIC");
                Ok(nic)
            }
            // The API refused it (a booked address taken meanwhile by
            // another project's resource, the network gone): what to fix
            // is in the message; core retries.
            Err(e @ (ApiError::Invalid(_) | ApiError::NotFound(_))) => Err(create_failed(
                "PrivateNicRefused",
                format!(
                    "adding VM {} of NodeClaim {claim} to Private Network {}: {e}",
                    server.id, network.id
                ),
            )),
            Err(e) => Err(unavailable("creating the private NIC", &server.id, &e)),
        }
    }

    /// Before the server goes: deletes the private NICs of a VM Create put
    /// on a Private Network. Best effort: the server's deletion removes
    /// them too, and nothing here may keep a VM billed.
    pub(super) async fn delete_private_nics(&self, server: &Server, claim: &str) {
        let (Some(networks), Some(_)) = (
            self.networks.as_ref(),
            vm_tag_value(server, TAG_PRIVATE_NETWORK),
        ) else {
            return;
        };
        let nics = match networks.list_private_nics(&server.zone, &server.id).await {
            Ok(nics) => nics,
            Err(ApiError::NotFound(_)) => return,
            Err(error) => {
                warn!(nodeclaim = claim, server_id = %server.id, %error,
                    "could not list the VM's private NICs; they go with the server");
                return;
            }
        };
        for nic in nics {
            match networks
                .delete_private_nic(&server.zone, &server.id, &nic.id)
                .await
            {
                Ok(()) => {
                    info!(nodeclaim = claim, server_id = %server.id, private_nic_id = %nic.id,
                        "deleted the VM's private NIC");
                }
                Err(error) => {
                    warn!(nodeclaim = claim, server_id = %server.id, private_nic_id = %nic.id,
                        %error, "could not delete the VM's private NIC; it goes with the server");
                }
            }
        }
    }
}

/// The NIC's IPv4 IPAM address: by the ids the NIC names, else by IPAM's
/// listing of what is attached to it. `None` (none found) leaves the link
/// to DHCP, which serves the same IPAM address.
async fn nic_address(
    ipam: &dyn PrivateNetworks,
    network: &NodeNetwork,
    nic: &PrivateNic,
    server: &str,
) -> Result<Option<IpamIp>, ProviderError> {
    for id in &nic.ipam_ip_ids {
        match ipam.get_ip(&network.region, id).await {
            Ok(ip) if !ip.is_ipv6 => return Ok(Some(ip)),
            Ok(_) | Err(ApiError::NotFound(_)) => {}
            Err(e) => return Err(unavailable("reading the private address", server, &e)),
        }
    }
    if nic.ipam_ip_ids.is_empty() {
        let filter = IpFilter {
            private_network_id: Some(network.id.clone()),
            resource_id: Some(nic.id.clone()),
            ..IpFilter::default()
        };
        let listed = ipam
            .list_ips(&network.region, &filter)
            .await
            .map_err(|e| unavailable("listing the private address", server, &e))?;
        if let Some(ip) = listed.into_iter().find(|ip| !ip.is_ipv6) {
            return Ok(Some(ip));
        }
    }
    debug!(server_id = server, private_nic_id = %nic.id,
        "no IPAM address found for the private NIC; its link asks DHCP");
    Ok(None)
}

#[cfg(test)]
#[path = "private_nic_tests.rs"]
mod tests;
