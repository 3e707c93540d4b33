//! What both kinds of node share of a Private Network (`spec.privateNetwork`):
//! which resolved network serves a zone, which booked address a new node
//! takes, and the link its Talos config brings up.
//!
//! Elastic Metal attaches the network in the install engine (after delivery,
//! `install/network.rs`); Instances add a private NIC before the power-on
//! (`provider/vm/`). Both render the link with [`private_link`]. It lives in
//! the install layer because the engine uses it; the provider re-exports it
//! as `provider::network`.

use std::collections::BTreeSet;

use crate::scaleway::ApiError;
use crate::scaleway::private_network::{IpFilter, Ipam, IpamIp};
use crate::talos::PrivateLink;

/// The Private Network one node joins, as Create hands it on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeNetwork {
    /// Region of the network (the node's zone's).
    pub region: String,
    /// Id of the Private Network.
    pub id: String,
    /// Its IPv4 subnets (CIDR).
    pub subnets: Vec<String>,
    /// The IPAM IPs booked ahead (`addresses: booked`); empty: IPAM allocates.
    pub booked: Vec<String>,
    /// Whether the Node's InternalIP is the private address.
    pub internal_ip: bool,
}

/// Serialises the choice of a booked address with the call that takes it
/// (an attachment or a private NIC naming it): two nodes created at once
/// must never pick the same free address. One process-wide lock, because
/// the addresses are the project's, whichever NodeClass names them.
pub static BOOKING: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Why no booked address could be chosen.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BookedChoiceError {
    /// Every booked address is attached to something: no node can be
    /// created until one is freed or more are booked.
    #[error(
        "every IPAM IP of privateNetwork.ipamIpIds is in use ({in_use} of {named}); \
         book more (`scw ipam ip create`) and add them to the NodeClass"
    )]
    NoneFree { named: usize, in_use: usize },
    #[error("listing the booked IPAM IPs failed: {0}")]
    Api(ApiError),
}

/// The first of `booked` (in the NodeClass's order) that IPAM lists as
/// attached to nothing. Call it holding [`BOOKING`] until the call that
/// takes the address has answered. An id IPAM does not list (released
/// since) is skipped: the NodeClass reconciler reports it.
pub async fn choose_booked(
    ipam: &dyn Ipam,
    region: &str,
    network_id: &str,
    booked: &[String],
) -> Result<IpamIp, BookedChoiceError> {
    let filter = IpFilter {
        private_network_id: Some(network_id.to_string()),
        ip_ids: booked.to_vec(),
        ..IpFilter::default()
    };
    let listed = ipam
        .list_ips(region, &filter)
        .await
        .map_err(BookedChoiceError::Api)?;
    let in_use: BTreeSet<&str> = listed
        .iter()
        .filter(|ip| ip.resource.is_some())
        .map(|ip| ip.id.as_str())
        .collect();
    booked
        .iter()
        .find_map(|id| {
            listed
                .iter()
                .find(|ip| &ip.id == id && ip.resource.is_none() && !ip.is_ipv6)
        })
        .cloned()
        .ok_or(BookedChoiceError::NoneFree {
            named: booked.len(),
            in_use: in_use.len(),
        })
}

/// The node's link to the network for its Talos config. `address` is the
/// IPAM address with its prefix length (`172.16.0.7/22`); `None` leaves the
/// link to DHCP. `vlan` for Elastic Metal, `mac` (the private NIC's) for a
/// VM.
pub fn private_link(
    network: &NodeNetwork,
    vlan: Option<u32>,
    mac: Option<String>,
    address: Option<&IpamIp>,
) -> PrivateLink {
    PrivateLink {
        vlan,
        mac,
        address: address.map(|ip| with_prefix(ip, &network.subnets)),
        subnets: network.subnets.clone(),
        internal_ip: network.internal_ip,
    }
}

/// `172.16.0.7/22`: IPAM gives the prefix with the address; when it does
/// not, the prefix of the network's first subnet that holds it.
fn with_prefix(ip: &IpamIp, subnets: &[String]) -> String {
    if ip.address.contains('/') {
        return ip.address.clone();
    }
    let addr: Option<std::net::Ipv4Addr> = ip.address.parse().ok();
    let prefix = subnets.iter().find_map(|cidr| {
        let (net, len) = cidr.split_once('/')?;
        let (net, len): (std::net::Ipv4Addr, u32) = (net.parse().ok()?, len.parse().ok()?);
        let mask = u32::MAX.checked_shl(32 - len).unwrap_or(0);
        (u32::from(addr?) & mask == u32::from(net) & mask).then_some(len)
    });
    match prefix {
        Some(len) => format!("{}/{len}", ip.address),
        None => format!("{}/32", ip.address),
    }
}

#[cfg(test)]
#[path = "node_network_tests.rs"]
mod tests;
