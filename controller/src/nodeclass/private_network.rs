//! `spec.privateNetwork` of both NodeClasses: the customer's Private Network
//! (VPC) the nodes join, and how each node gets its address on it.
//!
//! A Private Network is regional (`fr-par`), a NodeClass's zones may span
//! regions: the selector resolves, for each region of the NodeClass's zones,
//! to exactly one Private Network (`status.privateNetworks`). On Elastic Metal
//! the network arrives as a VLAN on the server's one NIC, on Instances as a
//! private NIC of its own; either way the node's Talos config brings the link
//! up with its address, and by default the kubelet takes that address as the
//! Node's InternalIP (docs/nodeclass.md, "Private Networks").

use kube::KubeSchema;
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use super::rules::*;
use crate::scaleway::ApiError;
use crate::scaleway::private_network::{IpFilter, PrivateNetworkFilter, PrivateNetworks};

/// The selector's two forms, exactly one of which is set (the same rule as
/// the Instance image selector).
pub const PN_ONE_FORM: &str = "has(self.id) != ((has(self.name) && self.name != '') || (has(self.tags) && size(self.tags) > 0))";
pub const PN_ONE_FORM_MESSAGE: &str = "privateNetwork: set either id (one Private Network) or name and/or tags (one matching Private Network per region), exactly one of the two forms";
/// `ipamIpIds` goes with, and only with, `addresses: booked`.
pub const PN_BOOKED_IDS: &str = "(has(self.addresses) && self.addresses == 'booked') == (has(self.ipamIpIds) && size(self.ipamIpIds) > 0)";
pub const PN_BOOKED_IDS_MESSAGE: &str = "privateNetwork: addresses: booked needs ipamIpIds (the IPAM IPs booked ahead, one per node), and ipamIpIds is only read with addresses: booked";

/// The Private Network the nodes join (`spec.privateNetwork`).
#[derive(Debug, Clone, PartialEq, Default, Serialize, Deserialize, KubeSchema)]
#[serde(rename_all = "camelCase")]
#[x_kube(
    validation = Rule::new(PN_ONE_FORM).message(PN_ONE_FORM_MESSAGE),
    validation = Rule::new(PN_BOOKED_IDS).message(PN_BOOKED_IDS_MESSAGE)
)]
pub struct PrivateNetworkSelector {
    /// Id of the Private Network (`scw vpc private-network list`). Its region
    /// must be the region of every zone of the NodeClass.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(length(max = 36))]
    #[x_kube(validation = Rule::new(UUID).message("privateNetwork.id must be the id (a UUID) of a Private Network: see `scw vpc private-network list`"))]
    pub id: Option<String>,
    /// Exact name of the Private Network. With `tags`, a network must match
    /// both. Exactly one network must match in each region of the zones.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    #[schemars(length(max = 255))]
    pub name: String,
    /// Tags the Private Network carries (all of them).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 16), inner(length(max = 128)))]
    #[x_kube(validation = Rule::new(TAGS_NOT_EMPTY).message("privateNetwork.tags must not contain an empty tag"))]
    pub tags: Vec<String>,
    /// How a node gets its address: `ipam` (default), IPAM allocates one from
    /// the network's subnet when the node is attached and releases it when
    /// the node goes; `booked`, each node takes a free one of `ipamIpIds`,
    /// which stay booked after the node goes.
    #[serde(default)]
    pub addresses: AddressPolicy,
    /// IPAM IPs booked ahead in the network (`scw ipam ip create`), by id;
    /// only with `addresses: booked`. A node is created only while one is free.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(length(max = 256), inner(length(max = 36)))]
    #[x_kube(
        validation = Rule::new("self.all(i, i.matches('^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$'))").message("privateNetwork.ipamIpIds must be ids (UUIDs) of IPAM IPs: see `scw ipam ip list`"),
        validation = Rule::new("self.all(i, self.exists_one(j, j == i))").message("privateNetwork.ipamIpIds must not repeat an id")
    )]
    pub ipam_ip_ids: Vec<String>,
    /// The Node's InternalIP: `private` (default), the address on this
    /// network (the kubelet's `nodeIP.validSubnets` is set to the network's
    /// subnets), so node and pod traffic stays in the VPC; `public`, the
    /// server's public address as without a Private Network.
    #[serde(default, rename = "nodeIP")]
    pub node_ip: NodeIpSource,
}

impl PrivateNetworkSelector {
    /// The ids of the booked IPs, or none under `ipam`.
    pub fn booked_ips(&self) -> &[String] {
        match self.addresses {
            AddressPolicy::Booked => &self.ipam_ip_ids,
            AddressPolicy::Ipam => &[],
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum AddressPolicy {
    #[default]
    Ipam,
    Booked,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "lowercase")]
pub enum NodeIpSource {
    #[default]
    Private,
    Public,
}

/// What the selector resolved to in one region (`status.privateNetworks`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, JsonSchema)]
#[serde(rename_all = "camelCase")]
pub struct ResolvedPrivateNetwork {
    /// Region of the network, e.g. `fr-par`.
    pub region: String,
    /// Id of the Private Network.
    pub id: String,
    /// Its name as the API lists it.
    pub name: String,
    /// Id of its VPC.
    #[serde(default)]
    pub vpc_id: String,
    /// Its IPv4 subnets (CIDR), e.g. `172.16.0.0/22`.
    #[serde(default)]
    pub subnets: Vec<String>,
}

/// `PrivateNetworkReady`: present when `spec.privateNetwork` is set.
pub const PRIVATE_NETWORK_READY: &str = "PrivateNetworkReady";

/// A Private Network as the reconciler listed it (VPC API), reduced to what
/// the selection is judged on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NetworkSeen {
    pub id: String,
    pub name: String,
    pub region: String,
    pub tags: Vec<String>,
    pub vpc_id: String,
    /// IPv4 subnets (CIDR) only: the nodes' addresses are IPv4.
    pub subnets: Vec<String>,
}

/// An IPAM IP named by `ipamIpIds`, as the reconciler found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BookedIpSeen {
    pub id: String,
    /// `None`: no such IP in the regions looked at.
    pub private_network_id: Option<String>,
    pub is_ipv6: bool,
}

/// What one region's listing gave.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NetworkListing {
    /// The networks the API returned for the selector's filters (the API's
    /// `name` filter matches substrings: the exact match is made here).
    Listed(Vec<NetworkSeen>),
    /// 401/403: the provider's credentials may not read Private Networks.
    Refused(String),
    /// Anything else (5xx, 429, timeout): says nothing about the networks.
    Error(String),
}

/// What the reconciler observed for `spec.privateNetwork`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PrivateNetworkObservation {
    /// One listing per region of the NodeClass's zones.
    pub listings: Vec<(String, NetworkListing)>,
    /// One entry per booked IP id (empty under `addresses: ipam`); `None`
    /// when the IPs could not be listed.
    pub booked: Option<Vec<BookedIpSeen>>,
}

/// The outcome of judging a selection.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// One network per region, in the order of the regions.
    Resolved(Vec<ResolvedPrivateNetwork>),
    /// The selection is wrong, or the networks are: `reason` and a message
    /// that says what to fix.
    Invalid {
        reason: &'static str,
        message: String,
    },
    /// A lookup failed: nothing can be concluded (the previous verdict of the
    /// same generation is kept).
    Unknown {
        reason: &'static str,
        message: String,
    },
}

/// The regions of a set of zones, in first-seen order (`fr-par-2` → `fr-par`).
pub fn regions_of(zones: &[String]) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for zone in zones {
        let region = crate::scaleway::private_network::region_of(zone).to_string();
        if !out.contains(&region) {
            out.push(region);
        }
    }
    out
}

fn describe(selector: &PrivateNetworkSelector) -> String {
    if let Some(id) = &selector.id {
        return format!("id {id}");
    }
    match (selector.name.is_empty(), selector.tags.is_empty()) {
        (false, true) => format!("name {:?}", selector.name),
        (true, false) => format!("tags {:?}", selector.tags),
        _ => format!("name {:?} and tags {:?}", selector.name, selector.tags),
    }
}

fn matches(selector: &PrivateNetworkSelector, network: &NetworkSeen) -> bool {
    if let Some(id) = &selector.id {
        return &network.id == id;
    }
    (selector.name.is_empty() || network.name == selector.name)
        && selector.tags.iter().all(|t| network.tags.contains(t))
}

/// Judges the selection against what was listed: exactly one network with an
/// IPv4 subnet in each region, and every booked IP an IPv4 address of the
/// network of its region. A pure function (house style §7).
pub fn resolve_private_network(
    selector: &PrivateNetworkSelector,
    observed: &PrivateNetworkObservation,
) -> Resolution {
    let what = describe(selector);
    let mut resolved = Vec::new();
    for (region, listing) in &observed.listings {
        let networks = match listing {
            NetworkListing::Listed(networks) => networks,
            NetworkListing::Refused(e) => {
                return Resolution::Invalid {
                    reason: "PrivateNetworkAccessRefused",
                    message: format!(
                        "Scaleway refused to list the Private Networks of {region} ({e}): grant the provider's IAM application PrivateNetworksReadOnly and IPAMFullAccess in the project (docs/install.md, \"Private Networks\")"
                    ),
                };
            }
            NetworkListing::Error(e) => {
                return Resolution::Unknown {
                    reason: "PrivateNetworkLookupFailed",
                    message: format!("listing the Private Networks of {region}: {e}"),
                };
            }
        };
        let found: Vec<&NetworkSeen> = networks
            .iter()
            .filter(|n| n.region == *region && matches(selector, n))
            .collect();
        let network = match found.as_slice() {
            [one] => *one,
            [] => {
                return Resolution::Invalid {
                    reason: "PrivateNetworkNotFound",
                    message: format!(
                        "no Private Network with {what} in region {region}, a region of the NodeClass's zones: create one (`scw vpc private-network create region={region}`) or fix spec.privateNetwork; a NodeClass whose zones span regions needs one network per region, selected by name or tags"
                    ),
                };
            }
            many => {
                let ids: Vec<&str> = many.iter().map(|n| n.id.as_str()).collect();
                return Resolution::Invalid {
                    reason: "PrivateNetworkAmbiguous",
                    message: format!(
                        "{} Private Networks match {what} in region {region} ({}): select one, by id or by a name and tags only it has",
                        many.len(),
                        ids.join(", ")
                    ),
                };
            }
        };
        if network.subnets.is_empty() {
            return Resolution::Invalid {
                reason: "PrivateNetworkNoSubnet",
                message: format!(
                    "Private Network {} ({}) in {region} has no IPv4 subnet: add one (`scw vpc private-network add-subnets`)",
                    network.name, network.id
                ),
            };
        }
        resolved.push(ResolvedPrivateNetwork {
            region: region.clone(),
            id: network.id.clone(),
            name: network.name.clone(),
            vpc_id: network.vpc_id.clone(),
            subnets: network.subnets.clone(),
        });
    }
    if let Some(problem) = judge_booked(selector, observed, &resolved) {
        return problem;
    }
    Resolution::Resolved(resolved)
}

fn judge_booked(
    selector: &PrivateNetworkSelector,
    observed: &PrivateNetworkObservation,
    resolved: &[ResolvedPrivateNetwork],
) -> Option<Resolution> {
    let wanted = selector.booked_ips();
    if wanted.is_empty() {
        return None;
    }
    let Some(seen) = &observed.booked else {
        return Some(Resolution::Unknown {
            reason: "BookedIpsLookupFailed",
            message: "the booked IPAM IPs could not be listed".to_string(),
        });
    };
    for id in wanted {
        let problem = match seen.iter().find(|ip| &ip.id == id) {
            None
            | Some(BookedIpSeen {
                private_network_id: None,
                ..
            }) => format!(
                "IPAM IP {id} (privateNetwork.ipamIpIds) does not exist in the regions of the zones: book it (`scw ipam ip create source.private-network-id=<network>`) or remove it"
            ),
            Some(ip) if ip.is_ipv6 => format!(
                "IPAM IP {id} (privateNetwork.ipamIpIds) is an IPv6 address: the nodes' private addresses are IPv4"
            ),
            Some(BookedIpSeen {
                private_network_id: Some(network),
                ..
            }) if !resolved.iter().any(|r| &r.id == network) => format!(
                "IPAM IP {id} (privateNetwork.ipamIpIds) belongs to Private Network {network}, not to the selected one ({}): book it in the selected network",
                resolved
                    .iter()
                    .map(|r| r.id.as_str())
                    .collect::<Vec<_>>()
                    .join(", ")
            ),
            Some(_) => continue,
        };
        return Some(Resolution::Invalid {
            reason: "BookedIpInvalid",
            message: problem,
        });
    }
    None
}

/// Lists what the selection is judged on: the matching Private Networks of
/// each region of `zones` (the API filters, [`resolve`] decides), and the
/// booked IPs. Regions in parallel.
pub async fn observe_private_network(
    api: &dyn PrivateNetworks,
    selector: &PrivateNetworkSelector,
    zones: &[String],
    project_id: &str,
) -> PrivateNetworkObservation {
    let filter = PrivateNetworkFilter {
        ids: selector.id.iter().cloned().collect(),
        name: (!selector.name.is_empty()).then(|| selector.name.clone()),
        tags: selector.tags.clone(),
        project_id: Some(project_id.to_string()),
    };
    let regions = regions_of(zones);
    let listings = futures::future::join_all(regions.iter().map(|region| {
        let filter = &filter;
        async move {
            let listing = match api.list_private_networks(region, filter).await {
                Ok(networks) => NetworkListing::Listed(
                    networks
                        .into_iter()
                        .map(|n| NetworkSeen {
                            subnets: n.ipv4_cidrs(),
                            region: if n.region.is_empty() {
                                region.clone()
                            } else {
                                n.region.clone()
                            },
                            id: n.id,
                            name: n.name,
                            tags: n.tags,
                            vpc_id: n.vpc_id,
                        })
                        .collect(),
                ),
                Err(e @ ApiError::Unauthorized(_)) => NetworkListing::Refused(e.to_string()),
                Err(e) => NetworkListing::Error(e.to_string()),
            };
            (region.clone(), listing)
        }
    }))
    .await;
    let booked = observe_booked(api, selector, &regions).await;
    PrivateNetworkObservation { listings, booked }
}

/// The booked IPs by id in every region; an address whose source names only
/// its subnet is placed in the network that holds the subnet.
async fn observe_booked(
    api: &dyn PrivateNetworks,
    selector: &PrivateNetworkSelector,
    regions: &[String],
) -> Option<Vec<BookedIpSeen>> {
    let wanted = selector.booked_ips();
    if wanted.is_empty() {
        return Some(Vec::new());
    }
    let filter = IpFilter {
        ip_ids: wanted.to_vec(),
        ..Default::default()
    };
    let mut found: Vec<BookedIpSeen> = Vec::new();
    for region in regions {
        let ips = api.list_ips(region, &filter).await.ok()?;
        let mut subnet_owner: Vec<(String, String)> = Vec::new();
        if ips.iter().any(|ip| ip.private_network_id().is_none()) {
            let networks = api
                .list_private_networks(region, &PrivateNetworkFilter::default())
                .await
                .ok()?;
            for n in networks {
                for subnet in &n.subnets {
                    subnet_owner.push((subnet.id.clone(), n.id.clone()));
                }
            }
        }
        for ip in ips {
            let network = ip.private_network_id().map(str::to_string).or_else(|| {
                let subnet = ip.source.as_ref()?.subnet_id.as_ref()?;
                subnet_owner
                    .iter()
                    .find(|(s, _)| s == subnet)
                    .map(|(_, n)| n.clone())
            });
            found.push(BookedIpSeen {
                id: ip.id,
                private_network_id: network,
                is_ipv6: ip.is_ipv6,
            });
        }
    }
    Some(found)
}

/// The `PrivateNetworkReady` verdict of a resolution.
pub(super) fn private_network_verdict(resolution: &Resolution) -> super::conditions::Verdict {
    use super::conditions::{ok, verdict};
    match resolution {
        Resolution::Resolved(_) => ok(PRIVATE_NETWORK_READY),
        Resolution::Invalid { reason, message } => {
            verdict(PRIVATE_NETWORK_READY, "False", reason, message.clone())
        }
        Resolution::Unknown { reason, message } => {
            verdict(PRIVATE_NETWORK_READY, "Unknown", reason, message.clone())
        }
    }
}

/// What `status.privateNetworks` shows for a resolution: the networks when
/// resolved, else what the previous status held (a failed lookup does not
/// erase what the nodes were built with).
pub fn status_networks(
    resolution: &Resolution,
    previous: &[ResolvedPrivateNetwork],
) -> Vec<ResolvedPrivateNetwork> {
    match resolution {
        Resolution::Resolved(networks) => networks.clone(),
        Resolution::Unknown { .. } => previous.to_vec(),
        Resolution::Invalid { .. } => Vec::new(),
    }
}

#[cfg(test)]
#[path = "private_network_tests.rs"]
mod tests;
