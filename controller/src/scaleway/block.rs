//! Scaleway Block Storage (SBS) v1: the volumes an Instance's root lives on.
//! Terminating or deleting a server only detaches them, so the provider
//! deletes them itself, or pays for them forever. The narrow [`Block`] trait,
//! its wire model and the real calls; the fake is
//! [`super::instance::fake::FakeInstance`], which holds the volumes its
//! servers leave behind.

use async_trait::async_trait;
use reqwest::Method;
use serde::{Deserialize, Serialize};

use super::http::{Api, Body, Paging, Patience, Request, segment};
use super::{ApiError, ScalewayClient};

/// The Block API v1 calls the provider uses, and only those.
#[async_trait]
pub trait Block: Send + Sync + 'static {
    async fn get_volume(&self, zone: &str, id: &str) -> Result<Volume, ApiError>;
    /// `TransientState` while the volume is still attached (it is detached
    /// some seconds after its server's terminate).
    async fn delete_volume(&self, zone: &str, id: &str) -> Result<(), ApiError>;
    /// Every page of the volumes matching the filter, refiltered on our
    /// side: complete or an error, never a shorter list (the orphan sweeper
    /// decides on it).
    async fn list_volumes(
        &self,
        zone: &str,
        filter: &VolumeFilter,
    ) -> Result<Vec<Volume>, ApiError>;
    /// Changes what `update` sets (`PATCH`; the fields left `None` stay).
    async fn update_volume(
        &self,
        zone: &str,
        id: &str,
        update: &VolumeUpdate,
    ) -> Result<Volume, ApiError>;
    /// Replaces the volume's tags (Create gives an SBS root the ownership
    /// tags of its server, so that a volume left behind can be proven ours).
    async fn update_volume_tags(
        &self,
        zone: &str,
        id: &str,
        tags: &[String],
    ) -> Result<Volume, ApiError> {
        let update = VolumeUpdate {
            tags: Some(tags.to_vec()),
            perf_iops: None,
        };
        self.update_volume(zone, id, &update).await
    }
}

/// The body of `PATCH /block/v1/zones/{zone}/volumes/{id}`: only the fields
/// set are sent.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct VolumeUpdate {
    /// The full list (it replaces the volume's tags).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tags: Option<Vec<String>>,
    /// The SBS class: 5000 (`sbs_5k`) or 15000 (`sbs_15k`) IOPS.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub perf_iops: Option<u32>,
}

/// Query filters of `GET /block/v1/zones/{zone}/volumes`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct VolumeFilter {
    /// Volumes carrying every one of these tags. The API documents its
    /// `tags` filter as "one or more matching tags", so the answer is
    /// refiltered here.
    pub tags: Vec<String>,
    pub project_id: Option<String>,
}

impl VolumeFilter {
    /// The filter applied on our side: every tag present, same project.
    pub fn matches(&self, volume: &Volume) -> bool {
        self.tags.iter().all(|t| volume.tags.contains(t))
            && self
                .project_id
                .as_ref()
                .is_none_or(|p| &volume.project_id == p)
    }
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
    /// When it was last detached from a server (`null` if never).
    #[serde(default)]
    pub last_detached_at: Option<String>,
}

impl Volume {
    /// Attached to nothing: `available` and referenced by no server.
    pub fn is_detached(&self) -> bool {
        self.status == VolumeStatus::Available && self.references.is_empty()
    }
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

    async fn list_volumes(
        &self,
        zone: &str,
        filter: &VolumeFilter,
    ) -> Result<Vec<Volume>, ApiError> {
        let path = format!("/block/v1/zones/{}/volumes", segment(zone)?);
        // A repeated `tags` parameter, as the Go SDK sends it.
        let mut query: Vec<(&str, String)> =
            filter.tags.iter().map(|t| ("tags", t.clone())).collect();
        if let Some(project) = &filter.project_id {
            query.push(("project_id", project.clone()));
        }
        let req = Request::new(
            Api::Block,
            "GET /block/v1/volumes",
            Patience::Long,
            &Method::GET,
            &path,
        )
        .query(&query);
        // Block is a newer API: `page_size` and the body's `total_count`.
        let volumes: Vec<Volume> = self.list_all(req, Paging::BodyTotal, "volumes").await?;
        Ok(volumes.into_iter().filter(|v| filter.matches(v)).collect())
    }

    async fn update_volume(
        &self,
        zone: &str,
        id: &str,
        update: &VolumeUpdate,
    ) -> Result<Volume, ApiError> {
        let path = volume_path(zone, id)?;
        let body = serde_json::to_value(update)
            .map_err(|e| ApiError::Invalid(format!("volume update: {e}")))?;
        // Setting the same tags or class twice is harmless: idempotent.
        let req = Request::new(
            Api::Block,
            "PATCH /block/v1/volumes/{volume_id}",
            Patience::Short,
            &Method::PATCH,
            &path,
        )
        .body(Body::Json(&body));
        self.call(&req).await
    }
}

#[cfg(test)]
#[path = "block_tests.rs"]
mod tests;
