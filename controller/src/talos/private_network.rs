//! A node's link to a Private Network as Talos (1.12 and later) network
//! documents, next to the primary NIC's alias `net0`:
//!
//! - Elastic Metal: the Private Network is a tagged VLAN on the primary NIC, a
//!   `VLANConfig` `net0.<vlan>` over `net0`;
//! - Instance: the private NIC is a NIC of its own, given the alias `priv0` by
//!   its MAC (`LinkAliasConfig`) and configured by a `LinkConfig`.
//!
//! The link takes the node's IPAM address, or asks DHCP for it (`DHCPv4Config`)
//! when none is known. Checked against Talos' machinery v1.14.1
//! (`config/types/network`: `vlan.go`, `link.go`, `link_alias.go`, `dhcp4.go`):
//! addresses are `netip.Prefix` (an address without its prefix length does not
//! load), a VLAN id is 1 to 4094, `vlanMode` is `802.1q` or `802.1ad`, `up` is
//! a field of every link document, and a VLAN's parent may be an alias.

use std::net::IpAddr;

use serde_yaml_ng::{Mapping, Value};

use super::render::{PRIMARY_LINK_ALIAS, RenderError};

/// The alias of an Instance's private NIC, selected by its MAC address.
pub const PRIVATE_LINK_ALIAS: &str = "priv0";

/// A node's link to one Private Network.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PrivateLink {
    /// Elastic Metal: the VLAN id of the attachment on the primary NIC (alias net0).
    /// None for a VM, whose private NIC is a NIC of its own.
    pub vlan: Option<u32>,
    /// VM: the MAC of the private NIC. None on Elastic Metal (the VLAN rides the primary NIC).
    pub mac: Option<String>,
    /// The node's private address with the subnet's prefix length ("172.16.0.7/22");
    /// None = DHCP on the link (DHCPv4Config).
    pub address: Option<String>,
    /// The network's subnets (CIDR). With `internal_ip`, written to the kubelet's
    /// `machine.kubelet.nodeIP.validSubnets`.
    pub subnets: Vec<String>,
    pub internal_ip: bool,
}

impl PrivateLink {
    /// The link's name in the node's network config: `net0.<vlan>` or `priv0`.
    pub fn link_name(&self) -> String {
        match self.vlan {
            Some(vlan) => format!("{PRIMARY_LINK_ALIAS}.{vlan}"),
            None => PRIVATE_LINK_ALIAS.to_string(),
        }
    }

    /// The network documents of the link. `primary_mac` is the node's primary
    /// NIC, which carries the `net0` alias a VLAN needs as its parent.
    pub(super) fn documents(&self, primary_mac: &str) -> Result<Vec<Mapping>, RenderError> {
        self.check(primary_mac)
            .map_err(RenderError::InvalidPrivateLink)?;
        let name = self.link_name();
        let mut docs = Vec::new();
        let mut link = match (self.vlan, &self.mac) {
            (Some(vlan), _) => {
                let mut doc = document("VLANConfig", &name);
                doc.insert("vlanID".into(), vlan.into());
                doc.insert("vlanMode".into(), "802.1q".into());
                doc.insert("parent".into(), PRIMARY_LINK_ALIAS.into());
                doc
            }
            (None, Some(mac)) => {
                let mut alias = document("LinkAliasConfig", &name);
                let mut selector = Mapping::new();
                selector.insert(
                    "match".into(),
                    format!(
                        "mac(link.permanent_addr) == \"{}\"",
                        mac.to_ascii_lowercase()
                    )
                    .into(),
                );
                alias.insert("selector".into(), Value::Mapping(selector));
                docs.push(alias);
                document("LinkConfig", &name)
            }
            (None, None) => unreachable!("checked"),
        };
        link.insert("up".into(), true.into());
        if let Some(address) = &self.address {
            let mut entry = Mapping::new();
            entry.insert("address".into(), address.as_str().into());
            link.insert(
                "addresses".into(),
                Value::Sequence(vec![Value::Mapping(entry)]),
            );
        }
        docs.push(link);
        if self.address.is_none() {
            docs.push(document("DHCPv4Config", &name));
        }
        Ok(docs)
    }

    fn check(&self, primary_mac: &str) -> Result<(), String> {
        match (self.vlan, &self.mac) {
            (Some(_), Some(_)) => {
                return Err("both a VLAN (Elastic Metal) and a private NIC MAC (Instance)".into());
            }
            (None, None) => {
                return Err(
                    "neither a VLAN (Elastic Metal) nor a private NIC MAC (Instance)".into(),
                );
            }
            (Some(vlan), None) if !(1..=4094).contains(&vlan) => {
                return Err(format!("VLAN id {vlan} is not between 1 and 4094"));
            }
            (Some(_), None) if primary_mac.is_empty() => {
                return Err(format!(
                    "a VLAN needs the primary NIC's MAC (its parent is the alias {PRIMARY_LINK_ALIAS})"
                ));
            }
            (None, Some(mac)) if !is_mac(mac) => {
                return Err(format!(
                    "private NIC MAC {mac:?} is not of the form xx:xx:xx:xx:xx:xx"
                ));
            }
            _ => {}
        }
        if let Some(address) = &self.address
            && !is_prefix(address)
        {
            return Err(format!(
                "address {address:?} is not an IP address with a prefix length (e.g. 172.16.0.7/22)"
            ));
        }
        if self.internal_ip {
            if self.subnets.is_empty() {
                return Err(
                    "the node's InternalIP is private but the network has no subnet".into(),
                );
            }
            if let Some(subnet) = self.subnets.iter().find(|s| !is_prefix(s)) {
                return Err(format!("subnet {subnet:?} is not a CIDR"));
            }
        }
        Ok(())
    }
}

fn document(kind: &str, name: &str) -> Mapping {
    let mut doc = Mapping::new();
    doc.insert("apiVersion".into(), "v1alpha1".into());
    doc.insert("kind".into(), kind.into());
    doc.insert("name".into(), name.into());
    doc
}

/// `<address>/<prefix length>`, as Go's `netip.ParsePrefix` reads it.
fn is_prefix(text: &str) -> bool {
    let Some((addr, bits)) = text.split_once('/') else {
        return false;
    };
    let Ok(addr) = addr.parse::<IpAddr>() else {
        return false;
    };
    let max = if addr.is_ipv4() { 32 } else { 128 };
    !addr.is_unspecified()
        && !bits.is_empty()
        && bits.len() <= 3
        && bits.bytes().all(|b| b.is_ascii_digit())
        && !(bits.len() > 1 && bits.starts_with('0'))
        && bits.parse::<u8>().is_ok_and(|b| b <= max)
}

fn is_mac(text: &str) -> bool {
    let parts: Vec<&str> = text.split(':').collect();
    parts.len() == 6
        && parts
            .iter()
            .all(|p| p.len() == 2 && p.bytes().all(|b| b.is_ascii_hexdigit()))
}

#[cfg(test)]
#[path = "private_network_tests.rs"]
mod tests;
