//! Volumes (SBS ones live in the Block API, local ones die with their
//! server) and flexible IPs, as plain records.

use std::net::Ipv4Addr;

use serde::Serialize;

use crate::clock::SimTime;

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
