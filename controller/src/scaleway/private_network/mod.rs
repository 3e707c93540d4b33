//! The Private Network surface (issue 27): a node reaches a VPC Private
//! Network through the Elastic Metal v3 attachments (a VLAN on the server's
//! NIC, after the v1 `private_network` server option) or an Instance private
//! NIC, and takes its address from IPAM. One narrow trait per API, each
//! listing only the calls the provider makes: [`Vpc`], [`Ipam`],
//! [`MetalPrivateNetworks`] and [`InstancePrivateNics`]; [`PrivateNetworks`]
//! is all four. The real calls are `client.rs` (on the shared machinery of
//! `scaleway/http.rs`), the in-memory fake is [`fake::FakePrivateNetworks`].
//!
//! Private Networks and IPAM are regional ([`region_of`] a zone); attachments
//! and private NICs are zonal. Deleting what is already gone (detach,
//! release, NIC delete answering 404) succeeds: cleanup tolerates the apply
//! never having run, or having run twice (house style §8).
//!
//! This module imports neither kube nor tonic (house style §1).

mod client;
pub mod fake;
mod model;

pub use model::*;

use async_trait::async_trait;

use super::{ApiError, ServerOption};

/// `fr-par-2` → `fr-par`: the region of a zone, where its Private Networks
/// and IPAM addresses live. A name without a numeric suffix is returned as
/// it is (the API refuses it if it is no region).
pub fn region_of(zone: &str) -> &str {
    match zone.rsplit_once('-') {
        Some((region, n)) if !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()) => region,
        _ => zone,
    }
}

/// VPC v2: finding the Private Network a NodeClass names.
#[async_trait]
pub trait Vpc: Send + Sync + 'static {
    /// Every page of the region's Private Networks matching the filter,
    /// refiltered on our side (the API's `name` is a substring match and its
    /// `tags` match any one tag); complete or an error, never a shorter list.
    async fn list_private_networks(
        &self,
        region: &str,
        filter: &PrivateNetworkFilter,
    ) -> Result<Vec<PrivateNetwork>, ApiError>;
    async fn get_private_network(&self, region: &str, id: &str)
    -> Result<PrivateNetwork, ApiError>;
}

/// IPAM v1: the private addresses.
#[async_trait]
pub trait Ipam: Send + Sync + 'static {
    /// Every page of the region's IPs matching the filter, refiltered on our
    /// side; complete or an error.
    async fn list_ips(&self, region: &str, filter: &IpFilter) -> Result<Vec<IpamIp>, ApiError>;
    async fn get_ip(&self, region: &str, id: &str) -> Result<IpamIp, ApiError>;
    /// Books an address of a Private Network ahead of its use. Not repeated
    /// after an unclear failure (a second booking would hold a second
    /// address): the caller lists by tag before booking again.
    async fn book_ip(&self, region: &str, req: &BookIpRequest) -> Result<IpamIp, ApiError>;
    /// Releases a booked address; `Ok` when it is already gone.
    async fn release_ip(&self, region: &str, id: &str) -> Result<(), ApiError>;
}

/// Elastic Metal: the `private_network` server option (v1) and the Private
/// Network attachments (v3).
#[async_trait]
pub trait MetalPrivateNetworks: Send + Sync + 'static {
    /// Adds an option (from the offer's `options`) to a server
    /// (`POST /baremetal/v1/.../servers/{id}/options/{option_id}`); the
    /// server's options after the call.
    async fn add_server_option(
        &self,
        zone: &str,
        server_id: &str,
        option_id: &str,
    ) -> Result<Vec<ServerOption>, ApiError>;
    /// The options a server has (`GET /baremetal/v1/.../servers/{id}`).
    async fn get_server_options(
        &self,
        zone: &str,
        server_id: &str,
    ) -> Result<Vec<ServerOption>, ApiError>;
    /// Attaches a server to a Private Network (`attaching` at first). With no
    /// `ipam_ip_ids`, IPAM allocates an address; otherwise these booked
    /// addresses are used.
    async fn attach_private_network(
        &self,
        zone: &str,
        server_id: &str,
        private_network_id: &str,
        ipam_ip_ids: &[String],
    ) -> Result<ServerPrivateNetwork, ApiError>;
    /// Every page of the attachments matching the filter (by server and/or
    /// Private Network), refiltered on our side; complete or an error.
    async fn list_server_private_networks(
        &self,
        zone: &str,
        filter: &AttachmentFilter,
    ) -> Result<Vec<ServerPrivateNetwork>, ApiError>;
    /// Detaches a server from a Private Network; `Ok` when it is not attached.
    async fn detach_private_network(
        &self,
        zone: &str,
        server_id: &str,
        private_network_id: &str,
    ) -> Result<(), ApiError>;
}

/// Instance API v1: a VM's private NICs (one per Private Network).
#[async_trait]
pub trait InstancePrivateNics: Send + Sync + 'static {
    /// Creates a private NIC (`syncing` at first). Not repeated after an
    /// unclear failure (it could make a second NIC): the caller lists first.
    async fn create_private_nic(
        &self,
        zone: &str,
        server_id: &str,
        req: &CreatePrivateNicRequest,
    ) -> Result<PrivateNic, ApiError>;
    /// Every page of a server's private NICs; complete or an error.
    async fn list_private_nics(
        &self,
        zone: &str,
        server_id: &str,
    ) -> Result<Vec<PrivateNic>, ApiError>;
    async fn get_private_nic(
        &self,
        zone: &str,
        server_id: &str,
        nic_id: &str,
    ) -> Result<PrivateNic, ApiError>;
    /// Deletes a private NIC; `Ok` when it is already gone.
    async fn delete_private_nic(
        &self,
        zone: &str,
        server_id: &str,
        nic_id: &str,
    ) -> Result<(), ApiError>;
}

/// The whole Private Network surface, for the code that needs all of it.
pub trait PrivateNetworks: Vpc + Ipam + MetalPrivateNetworks + InstancePrivateNics {}

impl<T: Vpc + Ipam + MetalPrivateNetworks + InstancePrivateNics> PrivateNetworks for T {}

/// `Ok(())` for a 404: what was to be deleted is already gone.
fn gone_is_done(result: Result<(), ApiError>) -> Result<(), ApiError> {
    match result {
        Err(ApiError::NotFound(_)) => Ok(()),
        other => other,
    }
}

#[cfg(test)]
#[path = "model_tests.rs"]
mod model_tests;
