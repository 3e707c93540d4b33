//! The Private Network a node joins, as Create and the VMs use it. The
//! node's network, the booked-address choice and the link are defined in
//! the install layer ([`crate::install::node_network`]), since the install
//! engine attaches Elastic Metal servers and may not depend on the provider
//! or the NodeClass types; reading them off a NodeClass is done here.

pub use crate::install::node_network::*;

use super::{NodeClassRecord, Provider, ProviderError};
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

impl Provider {
    /// Under `addresses: booked`, whether a booked address is free in the
    /// network of each of `zones`, before an Elastic Metal server is ordered:
    /// a server that cannot join would be billed for its first hour for
    /// nothing. The address itself is chosen when the delivered server is
    /// attached; two Creates racing for the last free one both pass here,
    /// and the install that finds none fails (its server is deleted).
    pub(super) async fn booked_address_free(
        &self,
        class: &NodeClassRecord,
        zones: &[String],
    ) -> Result<(), ProviderError> {
        let mut checked = std::collections::BTreeSet::new();
        for zone in zones {
            let Some(network) = node_network(
                class.spec.private_network.as_ref(),
                &class.private_networks,
                zone,
            )
            .map_err(ProviderError::NodeClassNotReady)?
            else {
                return Ok(());
            };
            if network.booked.is_empty() || !checked.insert(network.id.clone()) {
                continue;
            }
            let Some(api) = self.networks.as_ref() else {
                return Err(ProviderError::NodeClassNotReady(format!(
                    "NodeClass {} selects a Private Network but the Private Network clients are not configured in this provider",
                    class.name
                )));
            };
            let _turn = BOOKING.lock().await;
            match choose_booked(api.as_ref(), &network.region, &network.id, &network.booked).await {
                Ok(_) => {}
                Err(e @ BookedChoiceError::NoneFree { .. }) => {
                    return Err(ProviderError::CreateFailed {
                        reason: "PrivateNetworkAddressesExhausted".into(),
                        message: format!("NodeClass {}: {e}", class.name),
                    });
                }
                Err(BookedChoiceError::Api(e)) => {
                    return Err(ProviderError::CreateFailed {
                        reason: "ScalewayAPIUnavailable".into(),
                        message: format!("checking the booked addresses: {e}"),
                    });
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "network_tests.rs"]
mod tests;
