//! The Private Network fake joined to the Instance fake, for the VM tests:
//! the Instance API's VMs are the servers private NICs can be made on, and a
//! VM that is gone takes its NICs with it (the API's behaviour, and emsim's),
//! releasing the addresses IPAM gave them. Each call yields first, as a
//! call over the network would, so that concurrent Creates interleave.

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;

use crate::scaleway::instance::fake::FakeInstance;
use crate::scaleway::private_network::fake::FakePrivateNetworks;
use crate::scaleway::private_network::{
    AttachmentFilter, BookIpRequest, CreatePrivateNicRequest, InstancePrivateNics, IpFilter, Ipam,
    IpamIp, MetalPrivateNetworks, PrivateNetwork, PrivateNetworkFilter, PrivateNic,
    ServerPrivateNetwork, Vpc,
};
use crate::scaleway::{ApiError, ServerOption};

pub(super) struct LinkedNetworks {
    pub(super) pn: Arc<FakePrivateNetworks>,
    api: Arc<FakeInstance>,
    known: Mutex<BTreeSet<String>>,
}

impl LinkedNetworks {
    pub(super) fn new(api: &Arc<FakeInstance>) -> Arc<Self> {
        Arc::new(LinkedNetworks {
            pn: Arc::new(FakePrivateNetworks::new()),
            api: api.clone(),
            known: Mutex::default(),
        })
    }

    /// The Instance fake's VMs, as the Private Network fake knows them.
    pub(super) fn sync(&self) {
        let mut known = self.known.lock().unwrap();
        let live: BTreeSet<String> = self.api.servers().into_iter().map(|s| s.id).collect();
        for s in self.api.servers() {
            if known.insert(s.id.clone()) {
                self.pn.add_vm(&s.zone, &s.id);
            }
        }
        for gone in known.difference(&live).cloned().collect::<Vec<_>>() {
            self.pn.remove_server(&gone);
            known.remove(&gone);
        }
    }
}

#[async_trait]
impl Vpc for LinkedNetworks {
    async fn list_private_networks(
        &self,
        region: &str,
        filter: &PrivateNetworkFilter,
    ) -> Result<Vec<PrivateNetwork>, ApiError> {
        self.pn.list_private_networks(region, filter).await
    }
    async fn get_private_network(
        &self,
        region: &str,
        id: &str,
    ) -> Result<PrivateNetwork, ApiError> {
        self.pn.get_private_network(region, id).await
    }
}

#[async_trait]
impl Ipam for LinkedNetworks {
    async fn list_ips(&self, region: &str, filter: &IpFilter) -> Result<Vec<IpamIp>, ApiError> {
        tokio::task::yield_now().await;
        self.sync();
        self.pn.list_ips(region, filter).await
    }
    async fn get_ip(&self, region: &str, id: &str) -> Result<IpamIp, ApiError> {
        tokio::task::yield_now().await;
        self.sync();
        self.pn.get_ip(region, id).await
    }
    async fn book_ip(&self, region: &str, req: &BookIpRequest) -> Result<IpamIp, ApiError> {
        self.pn.book_ip(region, req).await
    }
    async fn release_ip(&self, region: &str, id: &str) -> Result<(), ApiError> {
        self.pn.release_ip(region, id).await
    }
}

#[async_trait]
impl MetalPrivateNetworks for LinkedNetworks {
    async fn add_server_option(
        &self,
        zone: &str,
        server_id: &str,
        option_id: &str,
    ) -> Result<Vec<ServerOption>, ApiError> {
        self.pn.add_server_option(zone, server_id, option_id).await
    }
    async fn get_server_options(
        &self,
        zone: &str,
        server_id: &str,
    ) -> Result<Vec<ServerOption>, ApiError> {
        self.pn.get_server_options(zone, server_id).await
    }
    async fn attach_private_network(
        &self,
        zone: &str,
        server_id: &str,
        private_network_id: &str,
        ipam_ip_ids: &[String],
    ) -> Result<ServerPrivateNetwork, ApiError> {
        self.pn
            .attach_private_network(zone, server_id, private_network_id, ipam_ip_ids)
            .await
    }
    async fn list_server_private_networks(
        &self,
        zone: &str,
        filter: &AttachmentFilter,
    ) -> Result<Vec<ServerPrivateNetwork>, ApiError> {
        self.pn.list_server_private_networks(zone, filter).await
    }
    async fn detach_private_network(
        &self,
        zone: &str,
        server_id: &str,
        private_network_id: &str,
    ) -> Result<(), ApiError> {
        self.pn
            .detach_private_network(zone, server_id, private_network_id)
            .await
    }
}

#[async_trait]
impl InstancePrivateNics for LinkedNetworks {
    async fn create_private_nic(
        &self,
        zone: &str,
        server_id: &str,
        req: &CreatePrivateNicRequest,
    ) -> Result<PrivateNic, ApiError> {
        tokio::task::yield_now().await;
        self.sync();
        self.pn.create_private_nic(zone, server_id, req).await
    }
    async fn list_private_nics(
        &self,
        zone: &str,
        server_id: &str,
    ) -> Result<Vec<PrivateNic>, ApiError> {
        tokio::task::yield_now().await;
        self.sync();
        self.pn.list_private_nics(zone, server_id).await
    }
    async fn get_private_nic(
        &self,
        zone: &str,
        server_id: &str,
        nic_id: &str,
    ) -> Result<PrivateNic, ApiError> {
        tokio::task::yield_now().await;
        self.sync();
        self.pn.get_private_nic(zone, server_id, nic_id).await
    }
    async fn delete_private_nic(
        &self,
        zone: &str,
        server_id: &str,
        nic_id: &str,
    ) -> Result<(), ApiError> {
        tokio::task::yield_now().await;
        self.sync();
        self.pn.delete_private_nic(zone, server_id, nic_id).await
    }
}
