//! Volumes (SBS ones live in the Block API, local ones die with their
//! server) and flexible IPs, as plain records.

use std::net::Ipv4Addr;

use serde::Serialize;

use super::world::InstanceWorld;
use crate::clock::SimTime;
use crate::error::ApiError;
use crate::sim::IpPool;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum VolumeKind {
    #[serde(rename = "sbs_volume")]
    Sbs,
    #[serde(rename = "l_ssd")]
    LSsd,
    #[serde(rename = "scratch")]
    Scratch,
}

impl VolumeKind {
    pub fn parse(s: Option<&str>) -> Result<Self, String> {
        match s {
            None | Some("") | Some("sbs_volume") => Ok(VolumeKind::Sbs),
            Some("l_ssd") => Ok(VolumeKind::LSsd),
            Some("scratch") => Ok(VolumeKind::Scratch),
            Some(other) => Err(format!(
                "volume_type {other:?}: one of l_ssd, sbs_volume, scratch"
            )),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            VolumeKind::Sbs => "sbs_volume",
            VolumeKind::LSsd => "l_ssd",
            VolumeKind::Scratch => "scratch",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct VolumeRecord {
    pub id: String,
    pub name: String,
    pub kind: VolumeKind,
    /// Bytes.
    pub size: u64,
    pub zone: String,
    pub organization: String,
    pub project: String,
    pub tags: Vec<String>,
    /// `(server id, server name)` while attached.
    pub server: Option<(String, String)>,
    pub parent_snapshot_id: Option<String>,
    /// SBS IOPS class: 5000 (`sbs_5k`, the default) or 15000 (`sbs_15k`).
    pub perf_iops: u32,
    #[serde(serialize_with = "super::server::ser_time")]
    pub created_at: SimTime,
    #[serde(serialize_with = "super::server::ser_time")]
    pub updated_at: SimTime,
    #[serde(skip)]
    pub last_detached_at: Option<SimTime>,
}

#[derive(Debug, Clone, Serialize)]
pub struct FlexIpRecord {
    pub id: String,
    pub address: Ipv4Addr,
    pub zone: String,
    pub organization: String,
    pub project: String,
    pub tags: Vec<String>,
    /// Server id while attached.
    pub server: Option<String>,
    pub ipam_id: String,
}

fn not_found(resource: &str, id: &str) -> ApiError {
    ApiError::NotFound {
        resource: resource.into(),
        resource_id: id.into(),
    }
}

impl InstanceWorld {
    /// A Block volume (SBS only: local volumes are not Block's).
    pub fn block_volume(&self, zone: &str, id: &str) -> Result<&VolumeRecord, ApiError> {
        self.volumes
            .get(id)
            .filter(|v| v.zone == zone && v.kind == VolumeKind::Sbs)
            .ok_or_else(|| not_found("volume", id))
    }

    /// `PATCH`: a new name and/or a new tag list (replacing the old one).
    pub fn update_block_volume(
        &mut self,
        now: SimTime,
        zone: &str,
        id: &str,
        name: Option<String>,
        tags: Option<Vec<String>>,
        perf_iops: Option<u32>,
    ) -> Result<&VolumeRecord, ApiError> {
        self.block_volume(zone, id)?;
        let volume = self.volumes.get_mut(id).expect("checked above");
        if let Some(iops) = perf_iops {
            volume.perf_iops = iops;
        }
        if let Some(name) = name {
            volume.name = name;
        }
        if let Some(tags) = tags {
            volume.tags = tags;
        }
        volume.updated_at = now;
        tracing::info!(volume_id = %id, "block volume updated");
        Ok(volume)
    }

    pub fn delete_block_volume(&mut self, zone: &str, id: &str) -> Result<(), ApiError> {
        let volume = self.block_volume(zone, id)?;
        if let Some((server, _)) = &volume.server {
            return Err(ApiError::PreconditionFailed {
                precondition: "resource_still_in_use".into(),
                help_message: format!("volume is attached to server {server}"),
            });
        }
        self.volumes.remove(id);
        tracing::info!(volume_id = %id, "block volume deleted");
        Ok(())
    }

    pub fn create_ip(
        &mut self,
        zone: &str,
        project: Option<String>,
        tags: Vec<String>,
        pool: &mut IpPool,
    ) -> Result<String, ApiError> {
        let address = pool.allocate().ok_or_else(|| {
            ApiError::invalid_request(
                axum::http::StatusCode::BAD_REQUEST,
                "emsim: no address left in --ip-range",
            )
        })?;
        let id = self.uuid();
        let ipam_id = self.uuid();
        self.ips.insert(
            id.clone(),
            FlexIpRecord {
                id: id.clone(),
                address,
                zone: zone.to_string(),
                organization: self.organization.clone(),
                project: project.unwrap_or_else(|| self.project.clone()),
                tags,
                server: None,
                ipam_id,
            },
        );
        tracing::info!(ip_id = %id, %zone, %address, "flexible ip created");
        Ok(id)
    }

    pub fn ip(&self, zone: &str, id: &str) -> Result<&FlexIpRecord, ApiError> {
        self.ips
            .get(id)
            .filter(|ip| ip.zone == zone)
            .ok_or_else(|| not_found("instance_ip", id))
    }

    /// Deleting an attached flexible IP detaches it from its server first.
    pub fn delete_ip(&mut self, zone: &str, id: &str, pool: &mut IpPool) -> Result<(), ApiError> {
        let ip = self.ip(zone, id)?.clone();
        if let Some(server) = ip.server.as_ref().and_then(|s| self.servers.get_mut(s)) {
            server.flexible_ips.retain(|i| i != id);
        }
        self.ips.remove(id);
        pool.release(ip.address);
        tracing::info!(ip_id = %id, "flexible ip deleted");
        Ok(())
    }
}
