//! The install's side of a Private Network on Elastic Metal: attaching the
//! delivered server ([`ensure_attached`], the action of
//! [`Step::AttachNetwork`](super::machine::Step::AttachNetwork)) and reading
//! back, when the config is rendered, the VLAN id and the address the node's
//! Talos config brings up ([`private_link`]).
//!
//! Nothing of it is persisted: the attachment is found again by listing the
//! server's attachments, so a resumed install (or an adoption) learns what
//! it needs from the API, and a second attachment is never requested.

use tracing::{info, warn};

use super::InstallSpec;
use super::machine::{NetworkSeen, Observation};
use super::node_network::{self as network, BookedChoiceError, NodeNetwork};
use crate::scaleway::private_network::{
    AttachmentFilter, AttachmentStatus, IpFilter, PrivateNetworks, ServerPrivateNetwork,
};
use crate::scaleway::{ApiError, ElasticMetal, OptionStatus, SubscriptionPeriod};
use crate::talos::PrivateLink;

/// The server's attachment to `net`, if any, and its attachments to other
/// networks (the API refilters by server; two to `net` would be an API
/// inconsistency: the first is taken).
async fn attachments(
    api: &dyn PrivateNetworks,
    spec: &InstallSpec,
    net: &NodeNetwork,
) -> Result<(Option<ServerPrivateNetwork>, Vec<ServerPrivateNetwork>), ApiError> {
    let filter = AttachmentFilter {
        server_id: Some(spec.server_id.clone()),
        private_network_id: None,
        project_id: None,
    };
    let (mine, others): (Vec<_>, Vec<_>) = api
        .list_server_private_networks(&spec.zone, &filter)
        .await?
        .into_iter()
        .partition(|a| a.private_network_id == net.id);
    Ok((mine.into_iter().next(), others))
}

/// The server's attachment to `net`, if any.
async fn attachment(
    api: &dyn PrivateNetworks,
    spec: &InstallSpec,
    net: &NodeNetwork,
) -> Result<Option<ServerPrivateNetwork>, ApiError> {
    Ok(attachments(api, spec, net).await?.0)
}

fn seen(a: &ServerPrivateNetwork) -> Observation {
    Observation::Network(match a.status {
        AttachmentStatus::Attached => NetworkSeen::Attached,
        AttachmentStatus::Error => {
            NetworkSeen::Failed(format!("attachment {} is in status error", a.id))
        }
        AttachmentStatus::Locked => NetworkSeen::Failed(format!(
            "attachment {} is locked (a Scaleway-side hold; see the console)",
            a.id
        )),
        // attaching, detaching or unknown: under way.
        _ => NetworkSeen::Attaching,
    })
}

/// An API error of the attach path: a refusal that retrying cannot mend is
/// the install's failure, anything else is retried under the API budget.
fn refused(what: &str, err: ApiError) -> Observation {
    match err {
        ApiError::Invalid(m) | ApiError::NotFound(m) | ApiError::Unauthorized(m) => {
            Observation::Network(NetworkSeen::Failed(format!("{what} refused: {m}")))
        }
        other => Observation::ApiFailed(other),
    }
}

/// Attaches the server to its network unless an attachment exists, and
/// reports where the attachment stands. The offer's `private_network`
/// option is added first when the server lacks it.
pub(super) async fn ensure_attached(
    em: &dyn ElasticMetal,
    api: Option<&dyn PrivateNetworks>,
    spec: &InstallSpec,
) -> Observation {
    let Some(net) = spec.private_network.as_ref() else {
        return Observation::Network(NetworkSeen::Attached);
    };
    let Some(api) = api else {
        return Observation::Network(NetworkSeen::Failed(
            "this controller has no Private Network clients configured".into(),
        ));
    };
    let (mine, others) = match attachments(api, spec, net).await {
        Ok(found) => found,
        Err(err) => return Observation::ApiFailed(err),
    };
    // A server recycled to standby keeps what it was attached to; one
    // installed for a NodeClass whose network changed since leaves the old
    // network (its addresses go back to IPAM, booked ones stay booked).
    for old in others
        .iter()
        .filter(|a| a.status != AttachmentStatus::Detaching)
    {
        match api
            .detach_private_network(&spec.zone, &spec.server_id, &old.private_network_id)
            .await
        {
            Ok(()) => info!(private_network_id = %old.private_network_id,
                "detached the server from a Private Network its NodeClass no longer selects"),
            Err(err) => return Observation::ApiFailed(err),
        }
    }
    if let Some(a) = mine {
        return seen(&a);
    }
    if let Err(observation) = ensure_option(em, api, spec).await {
        return observation;
    }
    let attached = if net.booked.is_empty() {
        api.attach_private_network(&spec.zone, &spec.server_id, &net.id, &[])
            .await
    } else {
        // The choice and the attachment that takes the address, together.
        let _turn = network::BOOKING.lock().await;
        let ip = match network::choose_booked(api, &net.region, &net.id, &net.booked).await {
            Ok(ip) => ip,
            Err(BookedChoiceError::Api(err)) => return Observation::ApiFailed(err),
            Err(none_free) => {
                return Observation::Network(NetworkSeen::Failed(none_free.to_string()));
            }
        };
        info!(ipam_ip_id = %ip.id, address = %ip.address, "booked address chosen");
        api.attach_private_network(
            &spec.zone,
            &spec.server_id,
            &net.id,
            std::slice::from_ref(&ip.id),
        )
        .await
    };
    match attached {
        Ok(a) => {
            info!(private_network_id = %net.id, attachment = %a.id, status = ?a.status,
                "attaching the server to its Private Network");
            seen(&a)
        }
        // A lost answer may have attached: the next look lists it.
        Err(err) => refused("attaching the server", err),
    }
}

/// Adds the offer's `private_network` option to the server unless it has it
/// on (or the offer includes it, or lists none: then the attachment decides).
/// The option is read from the server's own offer (hourly or monthly), so
/// its id is the zone's.
async fn ensure_option(
    em: &dyn ElasticMetal,
    api: &dyn PrivateNetworks,
    spec: &InstallSpec,
) -> Result<(), Observation> {
    let options = api
        .get_server_options(&spec.zone, &spec.server_id)
        .await
        .map_err(Observation::ApiFailed)?;
    let on = options
        .iter()
        .filter(|o| o.private_network.is_some() && o.is_on());
    match on
        .map(|o| o.status)
        .max_by_key(|s| *s == OptionStatus::OptionStatusEnable)
    {
        Some(OptionStatus::OptionStatusEnable) => return Ok(()),
        // Being turned on: attaching now could be refused; wait for it.
        Some(_) => return Err(Observation::Network(NetworkSeen::Attaching)),
        None => {}
    }
    let server = em
        .get_server(&spec.zone, &spec.server_id)
        .await
        .map_err(Observation::ApiFailed)?;
    let mut offer = None;
    for period in [SubscriptionPeriod::Hourly, SubscriptionPeriod::Monthly] {
        let offers = em
            .list_offers(&spec.zone, period)
            .await
            .map_err(Observation::ApiFailed)?;
        offer = offers.into_iter().find(|o| o.id == server.offer_id);
        if offer.is_some() {
            break;
        }
    }
    let Some(option) = offer.as_ref().and_then(|o| o.private_network_option()) else {
        return Ok(());
    };
    if option.enabled || options.iter().any(|o| o.id == option.id && o.is_on()) {
        return Ok(());
    }
    let now = api
        .add_server_option(&spec.zone, &spec.server_id, &option.id)
        .await
        .map_err(|err| refused("adding the private_network server option", err))?;
    info!(option_id = %option.id, "private_network server option added");
    // Attached once the option is on (the next look, when it is enabling).
    match now.iter().find(|o| o.id == option.id).map(|o| o.status) {
        Some(OptionStatus::OptionStatusEnable) | None => Ok(()),
        Some(_) => Err(Observation::Network(NetworkSeen::Attaching)),
    }
}

/// The node's link for its Talos config: the attachment's VLAN and IPAM
/// address. `Err` is the observation to report instead of applying: an API
/// failure (retried), or an attachment that is gone or not attached (the
/// config would leave the node off its network).
pub(super) async fn private_link(
    api: Option<&dyn PrivateNetworks>,
    spec: &InstallSpec,
) -> Result<Option<PrivateLink>, Observation> {
    let Some(net) = spec.private_network.as_ref() else {
        return Ok(None);
    };
    let Some(api) = api else {
        return Err(Observation::ConfigInvalid(
            "this controller has no Private Network clients configured".into(),
        ));
    };
    let a = match attachment(api, spec, net).await {
        Ok(Some(a)) => a,
        Ok(None) => {
            return Err(Observation::ConfigInvalid(format!(
                "the server is not attached to Private Network {}",
                net.id
            )));
        }
        Err(err) => return Err(Observation::ApiFailed(err)),
    };
    let (AttachmentStatus::Attached, Some(vlan)) = (a.status, a.vlan) else {
        return Err(Observation::ConfigInvalid(format!(
            "the server's attachment {} to Private Network {} is {:?} without a VLAN",
            a.id, net.id, a.status
        )));
    };
    let ip = match a.ipam_ip_ids.first() {
        Some(id) => api.get_ip(&net.region, id).await.map(Some),
        None => {
            let filter = IpFilter {
                resource_id: Some(a.id.clone()),
                private_network_id: Some(net.id.clone()),
                ..IpFilter::default()
            };
            api.list_ips(&net.region, &filter)
                .await
                .map(|ips| ips.into_iter().find(|ip| !ip.is_ipv6))
        }
    }
    .map_err(Observation::ApiFailed)?;
    if ip.is_none() {
        warn!(attachment = %a.id, "no IPAM address for the attachment; the link takes DHCP");
    }
    Ok(Some(network::private_link(
        net,
        Some(vlan),
        None,
        ip.as_ref(),
    )))
}
