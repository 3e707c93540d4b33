//! Scaleway Instances (VMs and GPU VMs): the narrow [`Instance`] trait of the
//! Instance API v1 calls this provider makes, its wire model, the real calls
//! (on the shared machinery of `scaleway/http.rs`) and an in-memory fake that
//! also plays the Block API (`scaleway/block.rs`), since terminate leaves SBS
//! volumes to it.
//!
//! This module imports neither kube nor tonic (house style §1).

mod client;
pub mod fake;
mod images;
mod model;

pub use images::*;
pub use model::*;

use std::collections::BTreeMap;

use async_trait::async_trait;

use super::ApiError;

/// The user data key Talos' `scaleway` platform reads its machine config from.
pub const USER_DATA_KEY: &str = "cloud-init";

/// The Instance API v1 calls the provider uses, and only those.
#[async_trait]
pub trait Instance: Send + Sync + 'static {
    /// The commercial types sold in a zone, with this zone's prices (all
    /// pages, counted against `X-Total-Count`).
    async fn list_server_types(&self, zone: &str)
    -> Result<BTreeMap<String, ServerType>, ApiError>;
    /// The stock of each commercial type in a zone (all pages).
    async fn list_server_availability(
        &self,
        zone: &str,
    ) -> Result<BTreeMap<String, Availability>, ApiError>;
    /// Creates a `stopped` server.
    async fn create_server(
        &self,
        zone: &str,
        req: &CreateServerRequest,
    ) -> Result<Server, ApiError>;
    async fn get_server(&self, zone: &str, id: &str) -> Result<Server, ApiError>;
    /// Every page of servers matching the filter, filtered again on our side
    /// (the API's `name` is a substring match). Any failure, including a
    /// page missing or a count that disagrees with `X-Total-Count`, is an
    /// error: never a shorter list.
    async fn list_servers(
        &self,
        zone: &str,
        filter: &ServerFilter,
    ) -> Result<Vec<Server>, ApiError>;
    async fn update_server(
        &self,
        zone: &str,
        id: &str,
        patch: &ServerPatch,
    ) -> Result<Server, ApiError>;
    /// Deletes a stopped server; its SBS volumes and flexible IPs remain.
    async fn delete_server(&self, zone: &str, id: &str) -> Result<(), ApiError>;
    /// Starts `action`; the server's state tells when it is done.
    async fn server_action(
        &self,
        zone: &str,
        id: &str,
        action: ServerAction,
    ) -> Result<Task, ApiError>;
    /// Sets user data `key` (sent raw as `text/plain`). The value is a
    /// secret (a bootstrap token travels in it): it is never logged.
    async fn set_user_data(
        &self,
        zone: &str,
        id: &str,
        key: &str,
        value: &str,
    ) -> Result<(), ApiError>;
    /// `NotFound` when the key is not set.
    async fn get_user_data(&self, zone: &str, id: &str, key: &str) -> Result<String, ApiError>;
    async fn delete_user_data(&self, zone: &str, id: &str, key: &str) -> Result<(), ApiError>;
    /// Releases a flexible IP (it survives its server).
    async fn delete_ip(&self, zone: &str, id: &str) -> Result<(), ApiError>;
    /// Every page of images matching the filter, refiltered on our side;
    /// like [`Instance::list_servers`], complete or an error.
    async fn list_images(&self, zone: &str, filter: &ImageFilter) -> Result<Vec<Image>, ApiError>;
    /// `NotFound` when no image has this id in the zone.
    async fn get_image(&self, zone: &str, id: &str) -> Result<Image, ApiError>;
    /// `NotFound` when no security group has this id in the zone.
    async fn get_security_group(&self, zone: &str, id: &str) -> Result<SecurityGroup, ApiError>;
}

/// Query filters of `GET /servers`.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ServerFilter {
    /// Servers carrying every one of these tags.
    pub tags: Vec<String>,
    /// Exactly this name (the API matches a substring; refiltered here).
    pub name: Option<String>,
    pub project: Option<String>,
}

impl ServerFilter {
    /// The filter applied on our side: every tag present exactly, same name,
    /// same project.
    pub fn matches(&self, server: &Server) -> bool {
        self.tags.iter().all(|t| server.tags.contains(t))
            && self.name.as_ref().is_none_or(|n| &server.name == n)
            && self
                .project
                .as_ref()
                .is_none_or(|p| server.project.is_empty() || &server.project == p)
    }
}
