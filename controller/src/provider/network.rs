//! The Private Network a node joins, as Create and the VMs use it. The
//! node's network, the booked-address choice and the link are defined in
//! the install layer ([`crate::install::node_network`]), since the install
//! engine attaches Elastic Metal servers and may not depend on the provider
//! or the NodeClass types; reading them off a NodeClass is done here.

pub use crate::install::node_network::*;

use crate::nodeclass::{NodeIpSource, PrivateNetworkSelector, ResolvedPrivateNetwork};
use crate::scaleway::private_network::region_of;

/// The network a node in `zone` joins: `Ok(None)` without a selector, an
/// error message (what to fix) when the selector has no network resolved in
/// the zone's region (the NodeClass is then not Ready either; this is the
/// guard for a cache that lags its status).
pub fn node_network(
    selector: Option<&PrivateNetworkSelector>,
    resolved: &[ResolvedPrivateNetwork],
    zone: &str,
) -> Result<Option<NodeNetwork>, String> {
    let Some(selector) = selector else {
        return Ok(None);
    };
    let region = region_of(zone);
    let Some(network) = resolved.iter().find(|n| n.region == region) else {
        return Err(format!(
            "spec.privateNetwork has no Private Network resolved in region {region} \
             (zone {zone}); see the NodeClass's PrivateNetworkReady condition"
        ));
    };
    Ok(Some(NodeNetwork {
        region: region.to_string(),
        id: network.id.clone(),
        subnets: network.subnets.clone(),
        booked: selector.booked_ips().to_vec(),
        internal_ip: selector.node_ip == NodeIpSource::Private,
    }))
}

#[cfg(test)]
#[path = "network_tests.rs"]
mod tests;
