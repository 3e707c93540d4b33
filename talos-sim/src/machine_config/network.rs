//! The network documents of a machine config that decide a Private Network
//! link (Talos 1.12 and later, `config/types/network` of the machinery):
//! `LinkAliasConfig` (a name for the link its selector matches),
//! `VLANConfig`, `LinkConfig` and `DHCPv4Config`. Only what the simulator
//! plays is read; the checks are Talos' own, with its wording.

use std::collections::BTreeSet;
use std::net::IpAddr;

use serde_yaml_ng::Value;

use super::text;

/// How a `LinkAliasConfig` selects its link.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Selector {
    /// `mac(link.permanent_addr) == "aa:bb:..."` (lower-cased).
    Mac(String),
    /// A CEL expression talos-sim does not evaluate: it matches no link.
    Other(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkAlias {
    pub name: String,
    pub selector: Selector,
}

/// A `VLANConfig` (a tagged sub-link of `parent`) or a `LinkConfig` (a
/// physical link, `vlan` and `parent` unset).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkDoc {
    pub name: String,
    pub vlan: Option<u32>,
    pub parent: Option<String>,
    /// `up`, true unless the document says false.
    pub up: bool,
    /// `addresses[].address`, as written (`127.80.0.2/24`).
    pub addresses: Vec<String>,
}

/// What the node's network documents say.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NetworkConfig {
    pub aliases: Vec<LinkAlias>,
    pub vlans: Vec<LinkDoc>,
    pub links: Vec<LinkDoc>,
    /// Links with a `DHCPv4Config`.
    pub dhcp4: BTreeSet<String>,
}

impl NetworkConfig {
    /// The alias of that name, if the config has one.
    pub fn alias(&self, name: &str) -> Option<&LinkAlias> {
        self.aliases.iter().find(|a| a.name == name)
    }

    /// Reads one typed document when it is a network kind talos-sim plays;
    /// other kinds are left alone.
    pub fn read(&mut self, kind: &str, doc: &Value, errors: &mut Vec<String>) {
        let name = text(doc.get("name")).unwrap_or("").to_string();
        let mut fail = |e: &str| errors.push(format!("{kind} {name:?}: {e}"));
        match kind {
            "LinkAliasConfig" => {
                if name.is_empty() {
                    fail("name must be specified");
                }
                match text(doc["selector"].get("match")) {
                    None | Some("") => fail("link selector is required"),
                    Some(expr) => self.aliases.push(LinkAlias {
                        name,
                        selector: parse_selector(expr),
                    }),
                }
            }
            "VLANConfig" => {
                let vlan = doc.get("vlanID").and_then(Value::as_u64);
                let vlan = match vlan {
                    Some(v @ 1..=4094) => v as u32,
                    _ => {
                        fail("vlanID must be specified and between 1 and 4094");
                        0
                    }
                };
                let parent = text(doc.get("parent")).unwrap_or("").to_string();
                if parent.is_empty() {
                    fail("parent must be specified");
                }
                if let Some(mode) = text(doc.get("vlanMode"))
                    && !matches!(mode, "802.1q" | "802.1ad")
                {
                    fail("vlanMode must be either '802.1q' or '802.1ad'");
                }
                let link = link_doc(doc, &name, &mut fail);
                self.vlans.push(LinkDoc {
                    vlan: Some(vlan),
                    parent: Some(parent),
                    ..link
                });
            }
            "LinkConfig" => {
                let link = link_doc(doc, &name, &mut fail);
                self.links.push(link);
            }
            "DHCPv4Config" => {
                if name.is_empty() {
                    fail("name must be specified");
                }
                self.dhcp4.insert(name);
            }
            _ => {}
        }
    }
}

fn link_doc(doc: &Value, name: &str, fail: &mut impl FnMut(&str)) -> LinkDoc {
    if name.is_empty() {
        fail("name must be specified");
    }
    let mut addresses = Vec::new();
    for (i, entry) in doc["addresses"]
        .as_sequence()
        .map(Vec::as_slice)
        .unwrap_or_default()
        .iter()
        .enumerate()
    {
        match text(entry.get("address")) {
            None | Some("") => fail(&format!("address {i} must be specified")),
            Some(a) if !is_prefix(a) => fail(&format!("address {i} must be a valid IP prefix")),
            Some(a) => addresses.push(a.to_string()),
        }
    }
    LinkDoc {
        name: name.to_string(),
        vlan: None,
        parent: None,
        up: doc.get("up").and_then(Value::as_bool).unwrap_or(true),
        addresses,
    }
}

/// The MAC of `mac(link.permanent_addr) == "…"` (also `hardware_addr`,
/// either side of `==`, any spacing); anything else is kept as written.
pub fn parse_selector(expr: &str) -> Selector {
    let compact: String = expr.chars().filter(|c| !c.is_whitespace()).collect();
    let quoted = |s: &str| {
        let s = s.strip_prefix('"').and_then(|s| s.strip_suffix('"'))?;
        is_mac(s).then(|| s.to_ascii_lowercase())
    };
    if let Some((left, right)) = compact.split_once("==") {
        for (call, value) in [(left, right), (right, left)] {
            if matches!(call, "mac(link.permanent_addr)" | "mac(link.hardware_addr)")
                && let Some(mac) = quoted(value)
            {
                return Selector::Mac(mac);
            }
        }
    }
    Selector::Other(expr.to_string())
}

fn is_mac(text: &str) -> bool {
    let parts: Vec<&str> = text.split(':').collect();
    parts.len() == 6
        && parts
            .iter()
            .all(|p| p.len() == 2 && p.bytes().all(|b| b.is_ascii_hexdigit()))
}

/// `<address>/<bits>` as Go's `netip.ParsePrefix` reads it.
pub fn is_prefix(text: &str) -> bool {
    parse_prefix(text).is_some()
}

/// `<address>/<bits>` as Go's `netip.ParsePrefix` reads it.
pub fn parse_prefix(text: &str) -> Option<(IpAddr, u8)> {
    let (addr, bits) = text.split_once('/')?;
    let addr: IpAddr = addr.parse().ok()?;
    if bits.is_empty() || (bits.len() > 1 && bits.starts_with('0')) {
        return None;
    }
    let max = if addr.is_ipv4() { 32 } else { 128 };
    let bits: u8 = bits.parse().ok().filter(|b| *b <= max)?;
    Some((addr, bits))
}
