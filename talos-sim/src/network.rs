//! A configured machine's Private Network links, decided as Talos' network
//! stack would: what emsim delivers to the server (`/_emsim/private-links`,
//! see `private_links`) against what the machine config asks for
//! (`machine_config::network`). Pure: no I/O.
//!
//! - Elastic Metal: each attached Private Network is a tagged VLAN on the
//!   server's one NIC. The link is up when a `VLANConfig` has the
//!   attachment's `vlanID` and its `parent` is an alias (`LinkAliasConfig`)
//!   whose selector matches that NIC's MAC.
//! - Instance: each private NIC is a NIC of its own. The link is up when a
//!   `LinkAliasConfig` selects the NIC's MAC and a `LinkConfig` or a
//!   `DHCPv4Config` names that alias.
//!
//! The link's address is its static `addresses` entry, which must be the
//! IPAM address (anything else would not be routed by the network), or the
//! IPAM address itself when DHCP asks for it. A link that does not match
//! carries no address, and says why.
//!
//! A real Talos would put a static address on a VLAN the switch does not
//! deliver; talos-sim leaves it off instead, so that a wrong VLAN or MAC
//! shows as a machine without its private address rather than a silently
//! unreachable one.

use std::net::{IpAddr, Ipv4Addr};

use serde::{Deserialize, Serialize};

use crate::machine_config::network::{LinkDoc, NetworkConfig, Selector, parse_prefix};

/// One private link of a server as emsim reports it (the fields talos-sim
/// uses of `/_emsim/private-links`' `links[]`).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct Delivered {
    pub private_network_id: String,
    #[serde(default)]
    pub private_network_name: String,
    /// Elastic Metal: the attachment's status (`attached` carries traffic);
    /// Instance: the NIC's state (`available` does).
    pub status: String,
    /// Elastic Metal: the VLAN id (null until attached).
    #[serde(default)]
    pub vlan: Option<u32>,
    /// Instance: the private NIC's MAC.
    #[serde(default)]
    pub mac_address: Option<String>,
    /// The IPAM address with the subnet's prefix (`127.80.0.2/24`).
    #[serde(default)]
    pub address: Option<String>,
    #[serde(default)]
    pub subnet: Option<String>,
}

/// Which machine the links belong to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Nic<'a> {
    /// An Elastic Metal server and the MAC of its one NIC.
    Metal(&'a str),
    Instance,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum LinkState {
    Up,
    Down,
}

/// What became of one delivered link (`private_links[]` of the record).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PrivateLink {
    pub private_network_id: String,
    pub private_network_name: String,
    /// The config's link that carries it (`net0.100`, `priv0`), when one
    /// was found.
    pub link: Option<String>,
    pub vlan: Option<u32>,
    pub mac_address: Option<String>,
    pub state: LinkState,
    /// `127.80.0.2/24` while up.
    pub address: Option<String>,
    /// `static` or `dhcp` while up.
    pub source: Option<&'static str>,
    /// Why it is down.
    pub reason: Option<String>,
}

impl PrivateLink {
    /// The IPv4 address of an up link.
    pub fn ip(&self) -> Option<Ipv4Addr> {
        match parse_prefix(self.address.as_deref()?)? {
            (IpAddr::V4(ip), _) => Some(ip),
            _ => None,
        }
    }
}

/// Every delivered link of the machine, configured by `cfg`.
pub fn configure(nic: Nic<'_>, delivered: &[Delivered], cfg: &NetworkConfig) -> Vec<PrivateLink> {
    delivered
        .iter()
        .map(|d| {
            let mut link = PrivateLink {
                private_network_id: d.private_network_id.clone(),
                private_network_name: d.private_network_name.clone(),
                link: None,
                vlan: d.vlan,
                mac_address: d.mac_address.clone(),
                state: LinkState::Down,
                address: None,
                source: None,
                reason: None,
            };
            let chosen = match nic {
                Nic::Metal(mac) => vlan_link(mac, d, cfg),
                Nic::Instance => nic_link(d, cfg),
            };
            match chosen.and_then(|doc| {
                link.link = Some(doc.name.clone());
                address(&doc, d, cfg)
            }) {
                Ok((address, source)) => {
                    link.state = LinkState::Up;
                    link.address = Some(address);
                    link.source = Some(source);
                }
                Err(reason) => link.reason = Some(reason),
            }
            link
        })
        .collect()
}

/// The config's private links that nothing delivered matches: a
/// `VLANConfig` whose VLAN is not attached to the server, a link on an
/// alias of a MAC that is no private NIC of the VM. What the log says about
/// them: they get no address.
pub fn undelivered(nic: Nic<'_>, delivered: &[Delivered], cfg: &NetworkConfig) -> Vec<String> {
    match nic {
        Nic::Metal(_) => cfg
            .vlans
            .iter()
            .filter(|v| {
                !delivered
                    .iter()
                    .any(|d| d.vlan.is_some() && d.vlan == v.vlan)
            })
            .map(|v| {
                format!(
                    "VLANConfig {}: VLAN {} is not attached to this server",
                    v.name,
                    v.vlan.unwrap_or(0)
                )
            })
            .collect(),
        Nic::Instance => cfg
            .aliases
            .iter()
            .filter(|a| cfg.links.iter().any(|l| l.name == a.name) || cfg.dhcp4.contains(&a.name))
            .filter_map(|a| match &a.selector {
                Selector::Mac(mac)
                    if !delivered.iter().any(|d| {
                        d.mac_address
                            .as_deref()
                            .is_some_and(|m| m.eq_ignore_ascii_case(mac))
                    }) =>
                {
                    Some(format!(
                        "link {}: MAC {mac} is no private NIC of this server",
                        a.name
                    ))
                }
                _ => None,
            })
            .collect(),
    }
}

fn vlan_link(nic_mac: &str, d: &Delivered, cfg: &NetworkConfig) -> Result<LinkDoc, String> {
    if d.status != "attached" {
        return Err(format!(
            "the attachment is {} (a VLAN carries traffic once attached)",
            d.status
        ));
    }
    let Some(vlan) = d.vlan else {
        return Err("the attachment has no VLAN id".into());
    };
    let Some(doc) = cfg.vlans.iter().find(|v| v.vlan == Some(vlan)) else {
        let others: Vec<String> = cfg
            .vlans
            .iter()
            .map(|v| format!("{} (vlanID {})", v.name, v.vlan.unwrap_or(0)))
            .collect();
        return Err(if others.is_empty() {
            format!("no VLANConfig document for VLAN {vlan}")
        } else {
            format!(
                "no VLANConfig for VLAN {vlan}: the config has {}",
                others.join(", ")
            )
        });
    };
    let parent = doc.parent.as_deref().unwrap_or("");
    let Some(alias) = cfg.alias(parent) else {
        return Err(format!(
            "VLANConfig {}: parent {parent:?} is not a LinkAliasConfig (talos-sim knows the NIC by the alias that selects its MAC)",
            doc.name
        ));
    };
    match &alias.selector {
        Selector::Mac(mac) if mac.eq_ignore_ascii_case(nic_mac) => {}
        Selector::Mac(mac) => {
            return Err(format!(
                "VLANConfig {}: parent {parent} selects MAC {mac}, the server's NIC is {nic_mac}",
                doc.name
            ));
        }
        Selector::Other(expr) => {
            return Err(format!(
                "VLANConfig {}: parent {parent}'s selector {expr:?} is not a MAC match talos-sim plays",
                doc.name
            ));
        }
    }
    if !doc.up {
        return Err(format!("VLANConfig {}: up is false", doc.name));
    }
    Ok(doc.clone())
}

fn nic_link(d: &Delivered, cfg: &NetworkConfig) -> Result<LinkDoc, String> {
    if d.status != "available" {
        return Err(format!(
            "the private NIC is {} (it carries traffic once available)",
            d.status
        ));
    }
    let Some(nic_mac) = d.mac_address.as_deref() else {
        return Err("emsim gave no MAC for the private NIC".into());
    };
    let Some(alias) = cfg
        .aliases
        .iter()
        .find(|a| matches!(&a.selector, Selector::Mac(m) if m.eq_ignore_ascii_case(nic_mac)))
    else {
        let macs: Vec<String> = cfg
            .aliases
            .iter()
            .filter_map(|a| match &a.selector {
                Selector::Mac(m) => Some(format!("{} ({m})", a.name)),
                Selector::Other(_) => None,
            })
            .collect();
        return Err(if macs.is_empty() {
            format!("no LinkAliasConfig selects the private NIC's MAC {nic_mac}")
        } else {
            format!(
                "no LinkAliasConfig selects the private NIC's MAC {nic_mac}: the config's aliases select {}",
                macs.join(", ")
            )
        });
    };
    match cfg.links.iter().find(|l| l.name == alias.name) {
        Some(doc) if !doc.up => Err(format!("LinkConfig {}: up is false", doc.name)),
        Some(doc) => Ok(doc.clone()),
        // DHCP alone configures the link (Talos brings it up).
        None if cfg.dhcp4.contains(&alias.name) => Ok(LinkDoc {
            name: alias.name.clone(),
            vlan: None,
            parent: None,
            up: true,
            addresses: Vec::new(),
        }),
        None => Err(format!(
            "alias {} selects the private NIC but no LinkConfig or DHCPv4Config configures it",
            alias.name
        )),
    }
}

/// The address the link takes: its static one (which must be the IPAM
/// address) or, with DHCP, the IPAM address.
fn address(
    doc: &LinkDoc,
    d: &Delivered,
    cfg: &NetworkConfig,
) -> Result<(String, &'static str), String> {
    let ipam = d
        .address
        .as_deref()
        .and_then(|a| Some((a, parse_prefix(a)?)));
    if !doc.addresses.is_empty() {
        let Some((ipam_text, (ipam_ip, _))) = ipam else {
            return Err(format!(
                "{}: static address {} but IPAM holds no address for this link",
                doc.name,
                doc.addresses.join(", ")
            ));
        };
        return doc
            .addresses
            .iter()
            .find(|a| parse_prefix(a).is_some_and(|(ip, _)| ip == ipam_ip))
            .map(|a| (a.clone(), "static"))
            .ok_or_else(|| {
                format!(
                    "{}: static address {} is not the IPAM address {ipam_text}",
                    doc.name,
                    doc.addresses.join(", ")
                )
            });
    }
    if cfg.dhcp4.contains(&doc.name) {
        return match ipam {
            Some((text, _)) => Ok((text.to_string(), "dhcp")),
            None => Err(format!(
                "{}: DHCP got no lease (IPAM holds no address for this link)",
                doc.name
            )),
        };
    }
    Err(format!(
        "{}: no address (neither addresses nor a DHCPv4Config)",
        doc.name
    ))
}

/// Why the kubelet cannot start: Talos' node IP controller found no
/// address in `nodeIP.validSubnets` (it then creates no kubelet spec, and
/// the kubelet never starts; its log line is quoted).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "no suitable node IP found, please make sure .machine.kubelet.nodeIP filters and pod/service subnets are set up correctly (validSubnets {subnets:?}, addresses {addresses:?})"
)]
pub struct NoNodeIp {
    pub subnets: Vec<String>,
    pub addresses: Vec<String>,
}

/// The kubelet's node IP among the machine's addresses (`public` first,
/// then the up private links): without `valid_subnets` the public address;
/// with them, the first address they keep, as Talos' `FilterIPs` does (a
/// positive entry adds what it contains, a `!` entry removes, so only
/// negative entries keep nothing).
pub fn node_ip(
    public: Ipv4Addr,
    private: &[Ipv4Addr],
    valid_subnets: &[String],
) -> Result<Ipv4Addr, NoNodeIp> {
    if valid_subnets.is_empty() {
        return Ok(public);
    }
    let addresses: Vec<Ipv4Addr> = std::iter::once(public)
        .chain(private.iter().copied())
        .collect();
    let kept = |ip: &Ipv4Addr| {
        let mut included = false;
        let mut excluded = false;
        for entry in valid_subnets {
            let (negative, cidr) = match entry.strip_prefix('!') {
                Some(rest) => (true, rest),
                None => (false, entry.as_str()),
            };
            if contains(cidr, *ip) {
                if negative {
                    excluded = true;
                } else {
                    included = true;
                }
            }
        }
        included && !excluded
    };
    addresses
        .iter()
        .copied()
        .find(kept)
        .ok_or_else(|| NoNodeIp {
            subnets: valid_subnets.to_vec(),
            addresses: addresses.iter().map(Ipv4Addr::to_string).collect(),
        })
}

/// Whether `cidr` (or a bare address) holds `ip`.
fn contains(cidr: &str, ip: Ipv4Addr) -> bool {
    let (net, bits) = match parse_prefix(cidr) {
        Some((IpAddr::V4(net), bits)) => (net, bits),
        Some(_) => return false,
        None => match cidr.parse::<Ipv4Addr>() {
            Ok(addr) => (addr, 32),
            Err(_) => return false,
        },
    };
    let mask = if bits == 0 {
        0
    } else {
        u32::MAX << (32 - u32::from(bits))
    };
    u32::from(net) & mask == u32::from(ip) & mask
}

#[cfg(test)]
#[path = "network_tests.rs"]
mod tests;
