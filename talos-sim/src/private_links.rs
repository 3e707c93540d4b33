//! What the network delivers to a server: emsim's admin endpoint
//! `GET /_emsim/private-links?server=<id>` (`docs/simulator-contracts.md`,
//! "Private links"), read when a configured machine brings its network up
//! and while it runs. A snapshot: emsim's event stream does not carry
//! Private Network changes.

use std::time::Duration;

use serde::Deserialize;

use crate::network::Delivered;

const TIMEOUT: Duration = Duration::from_secs(10);

/// The answer: every live server matching `?server=`.
#[derive(Debug, Clone, Deserialize)]
pub struct Listing {
    pub servers: Vec<ServerLinks>,
}

/// One server's links (the fields talos-sim uses).
#[derive(Debug, Clone, Deserialize)]
pub struct ServerLinks {
    pub server_id: String,
    /// `elastic_metal` or `instance`.
    #[serde(default)]
    pub kind: String,
    /// Elastic Metal: the MAC of the server's NIC.
    #[serde(default)]
    pub mac_address: Option<String>,
    #[serde(default)]
    pub links: Vec<Delivered>,
}

#[derive(Debug, thiserror::Error)]
pub enum LinksError {
    #[error("emsim is unreachable: {0}")]
    Unreachable(String),
    #[error("emsim answered {0}")]
    Status(u16),
    #[error("emsim's answer is unreadable: {0}")]
    Unreadable(String),
}

/// A client of emsim's private links for every server.
#[derive(Debug, Clone)]
pub struct PrivateLinks {
    client: reqwest::Client,
    base: String,
}

impl PrivateLinks {
    pub fn new(emsim_url: &str) -> anyhow::Result<Self> {
        crate::install_crypto_provider();
        let client = reqwest::Client::builder()
            .no_proxy()
            .timeout(TIMEOUT)
            .build()?;
        Ok(Self {
            client,
            base: emsim_url.trim_end_matches('/').to_string(),
        })
    }

    /// The links delivered to `server_id`: none when emsim does not list
    /// the server, or is an emsim without Private Networks (404).
    pub async fn of(&self, server_id: &str) -> Result<Option<ServerLinks>, LinksError> {
        let url = format!("{}/_emsim/private-links", self.base);
        let response = self
            .client
            .get(&url)
            .query(&[("server", server_id)])
            .send()
            .await
            .map_err(|e| LinksError::Unreachable(e.to_string()))?;
        match response.status() {
            s if s.is_success() => {
                let listing: Listing = response
                    .json()
                    .await
                    .map_err(|e| LinksError::Unreadable(e.to_string()))?;
                Ok(listing
                    .servers
                    .into_iter()
                    .find(|s| s.server_id == server_id))
            }
            reqwest::StatusCode::NOT_FOUND => Ok(None),
            s => Err(LinksError::Status(s.as_u16())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The shape of `docs/simulator-contracts.md`'s example.
    #[test]
    fn emsim_links_are_read() {
        let listing: Listing = serde_json::from_str(
            r#"{"servers": [
  {"server_id": "em-1", "kind": "elastic_metal", "zone": "fr-par-2", "address": "127.77.0.10",
   "mac_address": "a6:9b:84:98:a1:fb",
   "links": [{"private_network_id": "pn-1", "private_network_name": "prod", "status": "attached",
              "vlan": 100, "ipam_ip_id": "ip-1", "address": "127.80.0.2/24",
              "subnet": "127.80.0.0/24", "subnets": ["127.80.0.0/24"]},
             {"private_network_id": "pn-2", "private_network_name": "dev", "status": "attaching",
              "vlan": null, "ipam_ip_id": null, "address": null, "subnet": null, "subnets": []}]},
  {"server_id": "vm-1", "kind": "instance", "zone": "fr-par-2", "address": "127.77.0.11",
   "links": [{"private_network_id": "pn-1", "private_network_name": "prod", "status": "available",
              "mac_address": "02:00:00:3c:1f:9a", "private_nic_id": "nic-1", "ipam_ip_id": "ip-2",
              "address": "127.80.0.3/24", "subnet": "127.80.0.0/24",
              "subnets": ["127.80.0.0/24"]}]}]}"#,
        )
        .unwrap();
        let em = &listing.servers[0];
        assert_eq!(em.mac_address.as_deref(), Some("a6:9b:84:98:a1:fb"));
        assert_eq!(em.links[0].vlan, Some(100));
        assert_eq!(em.links[0].address.as_deref(), Some("127.80.0.2/24"));
        assert_eq!(em.links[1].vlan, None);
        let vm = &listing.servers[1];
        assert_eq!(vm.kind, "instance");
        assert_eq!(
            vm.links[0].mac_address.as_deref(),
            Some("02:00:00:3c:1f:9a")
        );
        assert_eq!(vm.links[0].status, "available");
    }
}
