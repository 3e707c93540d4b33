//! `servers`: each listed server's link to a Private Network, read from the
//! Elastic Metal attachments (baremetal v3), the VMs' private NICs and the
//! IPAM addresses they hold. Best effort: credentials without the Private
//! Network permissions still list the servers, with a note saying the links
//! were not read (the server list itself is never partial).

use std::collections::{BTreeSet, HashMap};

use serde_json::{Value, json};

use super::{Report, Row};
use crate::catalog::ClassKind;
use crate::scaleway::private_network::{AttachmentFilter, IpFilter, PrivateNetworks, region_of};

/// A server's link to one Private Network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LinkCell {
    pub private_network_id: String,
    /// Attachment status (Elastic Metal) or NIC state (Instance).
    pub status: String,
    /// Elastic Metal: the VLAN on the server's NIC, once attached.
    pub vlan: Option<u32>,
    /// Instance: the private NIC's MAC.
    pub mac: Option<String>,
    /// The IPAM address, with its prefix length.
    pub address: Option<String>,
}

impl LinkCell {
    pub fn text(&self) -> String {
        let mut text = format!("{} {}", self.private_network_id, self.status);
        if let Some(vlan) = self.vlan {
            text.push_str(&format!(" vlan {vlan}"));
        }
        if let Some(mac) = &self.mac {
            text.push_str(&format!(" mac {mac}"));
        }
        if let Some(address) = &self.address {
            text.push_str(&format!(" {address}"));
        }
        text
    }

    pub fn json(&self) -> Value {
        json!({
            "privateNetworkId": self.private_network_id,
            "status": self.status,
            "vlan": self.vlan,
            "mac": self.mac,
            "address": self.address,
        })
    }
}

fn wire<T: serde::Serialize>(v: &T) -> String {
    serde_json::to_value(v)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| "unknown".into())
}

/// Fills each row's links; `Err` (the note to print) when a listing failed,
/// leaving the rows as they were.
pub async fn annotate(
    report: &mut Report,
    api: &dyn PrivateNetworks,
    project_id: &str,
) -> Result<(), String> {
    let zones: BTreeSet<&str> = report.rows.iter().map(|r| r.zone.as_str()).collect();
    let regions: BTreeSet<&str> = zones.iter().map(|z| region_of(z)).collect();
    let mut addresses: HashMap<String, String> = HashMap::new();
    for region in regions {
        let filter = IpFilter {
            project_id: Some(project_id.to_string()),
            ..IpFilter::default()
        };
        let ips = api
            .list_ips(region, &filter)
            .await
            .map_err(|e| format!("IPAM addresses of {region}: {e}"))?;
        addresses.extend(ips.into_iter().map(|ip| (ip.id, ip.address)));
    }
    let mut links: HashMap<String, Vec<LinkCell>> = HashMap::new();
    let metal_zones: BTreeSet<&str> = report
        .rows
        .iter()
        .filter(|r| r.kind == ClassKind::ElasticMetal)
        .map(|r| r.zone.as_str())
        .collect();
    for zone in metal_zones {
        let filter = AttachmentFilter {
            project_id: Some(project_id.to_string()),
            ..AttachmentFilter::default()
        };
        let attachments = api
            .list_server_private_networks(zone, &filter)
            .await
            .map_err(|e| format!("attachments in {zone}: {e}"))?;
        for a in attachments {
            links
                .entry(a.server_id.clone())
                .or_default()
                .push(LinkCell {
                    private_network_id: a.private_network_id.clone(),
                    status: wire(&a.status),
                    vlan: a.vlan,
                    mac: None,
                    address: a
                        .ipam_ip_ids
                        .first()
                        .and_then(|id| addresses.get(id).cloned()),
                });
        }
    }
    let vms: Vec<(String, String)> = report
        .rows
        .iter()
        .filter(|r| r.kind == ClassKind::Instance)
        .map(|r| (r.zone.clone(), r.id.clone()))
        .collect();
    for (zone, id) in vms {
        let nics = api
            .list_private_nics(&zone, &id)
            .await
            .map_err(|e| format!("private NICs of VM {id}: {e}"))?;
        for nic in nics {
            links.entry(id.clone()).or_default().push(LinkCell {
                private_network_id: nic.private_network_id.clone(),
                status: wire(&nic.state),
                vlan: None,
                mac: Some(nic.mac_address.clone()),
                address: nic
                    .ipam_ip_ids
                    .first()
                    .and_then(|id| addresses.get(id).cloned()),
            });
        }
    }
    for row in &mut report.rows {
        row.private_links = links.remove(&row.id).unwrap_or_default();
    }
    Ok(())
}

/// The table's section on Private Networks: one line per link, or the note.
pub fn section(report: &Report) -> Option<String> {
    if let Some(note) = &report.networks_note {
        return Some(format!("Private Networks: not read ({note})."));
    }
    let lines: Vec<String> = report
        .rows
        .iter()
        .flat_map(|r: &Row| {
            r.private_links
                .iter()
                .map(move |l| format!("  {} {}", r.id, l.text()))
        })
        .collect();
    (!lines.is_empty()).then(|| format!("Private Networks:\n{}", lines.join("\n")))
}
