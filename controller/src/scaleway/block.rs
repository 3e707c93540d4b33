//! Scaleway Block Storage (SBS) v1: the volumes an Instance's root lives on.
//! Terminating or deleting a server only detaches them, so the provider
//! deletes them itself, or pays for them forever. The narrow [`Block`] trait,
//! its wire model and the real calls; the fake is
//! [`super::instance::fake::FakeInstance`], which holds the volumes its
//! servers leave behind.

use async_trait::async_trait;
use reqwest::Method;
use serde::{Deserialize, Serialize};

use super::http::{Api, Patience, Request, segment};
use super::{ApiError, ScalewayClient};

/// The Block API v1 calls the provider uses, and only those.
#[async_trait]
pub trait Block: Send + Sync + 'static {
    async fn get_volume(&self, zone: &str, id: &str) -> Result<Volume, ApiError>;
    /// `TransientState` while the volume is still attached (it is detached
    /// some seconds after its server's terminate).
    async fn delete_volume(&self, zone: &str, id: &str) -> Result<(), ApiError>;
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum VolumeStatus {
    Creating,
    Available,
    InUse,
    Deleting,
    Deleted,
    Resizing,
    Error,
    Snapshotting,
    Locked,
    Updating,
    #[serde(other)]
    Other,
}

/// Who uses a volume (`product_resource_id` is the server's id).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Reference {
    pub id: String,
    #[serde(default)]
    pub product_resource_type: String,
    #[serde(default)]
    pub product_resource_id: String,
    #[serde(default)]
    pub status: String,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Volume {
    pub id: String,
    #[serde(default)]
    pub name: String,
    /// `sbs_5k`, `sbs_15k`.
    #[serde(rename = "type", default)]
    pub kind: String,
    /// Bytes.
    #[serde(default)]
    pub size: u64,
    #[serde(default)]
    pub project_id: String,
    pub status: VolumeStatus,
    #[serde(default)]
    pub references: Vec<Reference>,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default)]
    pub zone: String,
    #[serde(default)]
    pub created_at: Option<String>,
}

fn volume_path(zone: &str, id: &str) -> Result<String, ApiError> {
    Ok(format!(
        "/block/v1/zones/{}/volumes/{}",
        segment(zone)?,
        segment(id)?
    ))
}

#[async_trait]
impl Block for ScalewayClient {
    async fn get_volume(&self, zone: &str, id: &str) -> Result<Volume, ApiError> {
        let path = volume_path(zone, id)?;
        let req = Request::new(
            Api::Block,
            "GET /block/v1/volumes/{volume_id}",
            Patience::Long,
            &Method::GET,
            &path,
        );
        self.call(&req).await
    }

    async fn delete_volume(&self, zone: &str, id: &str) -> Result<(), ApiError> {
        let path = volume_path(zone, id)?;
        let req = Request::new(
            Api::Block,
            "DELETE /block/v1/volumes/{volume_id}",
            Patience::Short,
            &Method::DELETE,
            &path,
        );
        self.send(&req).await.map(drop)
    }
}
