//! A configured machine's network: the Private Network links emsim delivers,
//! configured by the machine config (`network`), and the node IP the
//! kubelet reports. Talos' node IP controller creates no kubelet spec while
//! no address matches `nodeIP.validSubnets`: the kubelet does not start, the
//! Node never registers, and the machine keeps looking (a link may come up
//! later, e.g. once its attachment is `attached`).

use std::net::Ipv4Addr;

use crate::machine_config::NodeConfig;
use crate::model::Platform;
use crate::network::{self, LinkState, Nic, PrivateLink};
use crate::os::Boot;

impl Boot {
    /// Configures the links and waits for a node IP; returns it and the
    /// links it saw.
    pub(crate) async fn network_up(&self, cfg: &NodeConfig) -> (Ipv4Addr, Vec<PrivateLink>) {
        let mut last = None;
        let mut waiting = false;
        loop {
            let links = self.read_links(cfg, &mut last).await;
            let private: Vec<Ipv4Addr> = links.iter().filter_map(PrivateLink::ip).collect();
            match network::node_ip(self.on.address, &private, &cfg.node_ip_subnets) {
                Ok(ip) => {
                    if waiting {
                        tracing::info!(server_id = %self.server_id(), node_ip = %ip, "node IP found: starting the kubelet");
                    }
                    self.record.update(|r| {
                        r.node_ip = Some(ip.to_string());
                        if waiting {
                            r.boot_error = None;
                        }
                    });
                    return (ip, links);
                }
                Err(e) => {
                    if !waiting {
                        tracing::warn!(server_id = %self.server_id(), error = %e, "kubelet not started: no node IP");
                        waiting = true;
                    }
                    self.record.update(|r| {
                        r.node_ip = None;
                        r.boot_error = Some(format!("kubelet not started: {e}"));
                    });
                }
            }
            tokio::time::sleep(self.settings.links_poll).await;
        }
    }

    /// While the node runs, its links follow what emsim delivers (the
    /// kubelet keeps the node IP it started with).
    pub(crate) async fn follow_links(&self, cfg: &NodeConfig, links: Vec<PrivateLink>) {
        if self.settings.private_links.is_none() {
            return;
        }
        let mut last = Some(links);
        loop {
            tokio::time::sleep(self.settings.links_poll).await;
            self.read_links(cfg, &mut last).await;
        }
    }

    /// Reads the delivered links and configures them; a change is logged and
    /// recorded. emsim unreachable: the links stay as they were.
    async fn read_links(
        &self,
        cfg: &NodeConfig,
        last: &mut Option<Vec<PrivateLink>>,
    ) -> Vec<PrivateLink> {
        let delivered = match &self.settings.private_links {
            None => Vec::new(),
            Some(client) => match client.of(self.server_id()).await {
                Ok(Some(server)) => {
                    if let Some(mac) = &server.mac_address
                        && !mac.eq_ignore_ascii_case(&self.on.machine.mac)
                    {
                        tracing::warn!(server_id = %self.server_id(), emsim_mac = %mac, nic_mac = %self.on.machine.mac, "emsim and talos-sim disagree on the NIC's MAC");
                    }
                    server.links
                }
                Ok(None) => Vec::new(),
                Err(e) => {
                    tracing::warn!(server_id = %self.server_id(), error = %e, "cannot read the private links");
                    return last.clone().unwrap_or_default();
                }
            },
        };
        let nic = match self.on.platform {
            Platform::Metal => Nic::Metal(&self.on.machine.mac),
            Platform::Scaleway(_) => Nic::Instance,
        };
        let links = network::configure(nic, &delivered, &cfg.network);
        if last.as_ref() != Some(&links) {
            for link in &links {
                let network = &link.private_network_name;
                let name = link.link.as_deref().unwrap_or("-");
                match link.state {
                    LinkState::Up => tracing::info!(
                        server_id = %self.server_id(),
                        %network,
                        link = %name,
                        address = link.address.as_deref().unwrap_or(""),
                        source = link.source.unwrap_or(""),
                        "private link up"
                    ),
                    LinkState::Down => tracing::warn!(
                        server_id = %self.server_id(),
                        %network,
                        link = %name,
                        reason = link.reason.as_deref().unwrap_or(""),
                        "private link down: no private address"
                    ),
                }
            }
            for note in network::undelivered(nic, &delivered, &cfg.network) {
                tracing::info!(server_id = %self.server_id(), %note, "private link not delivered: no address");
            }
            self.record.update(|r| r.private_links = links.clone());
            *last = Some(links.clone());
        }
        links
    }
}
