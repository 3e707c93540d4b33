//! `/_emsim/instance/...`: records and controls of the Instance side for the
//! test harness, and the user data talos-sim serves as the metadata service
//! would (`http://169.254.42.42/user_data/cloud-init` inside a real VM).

use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, put};
use axum::{Json, Router};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};

use super::extract::{ApiJson, Params};
use super::instance::{check_instance_zone, user_data_response};
use crate::clock::format_time;
use crate::error::ApiError;
use crate::instance::Availability;
use crate::instance::model::{GpuInfo, Server};
use crate::instance::server::{VmPending, VmRecord};
use crate::instance::volumes::VolumeRecord;
use crate::instance::world::InstanceWorld;
use crate::state::AppState;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/_emsim/instance/servers", get(servers))
        .route(
            "/_emsim/instance/servers/{server_id}/user_data/{key}",
            get(user_data),
        )
        .route("/_emsim/instance/volumes", get(volumes))
        .route("/_emsim/instance/availability", put(set_availability))
        .route("/_emsim/instance/quota", put(set_quota))
}

/// A server as `GET /servers/{id}` returns it (its last form once gone),
/// plus what only the simulator knows. User data: the keys, never the values.
#[derive(Serialize)]
struct AdminVm<'a> {
    #[serde(flatten)]
    server: Server,
    address: String,
    powered_on: bool,
    pending: Option<&'a VmPending>,
    user_data_keys: Vec<&'a String>,
    actions: Vec<Value>,
    deleted_at: Option<String>,
    hardware: Option<Hardware>,
}

/// What the VM's OS finds (talos-sim reports it on the Node): its type's
/// vCPUs, memory and GPUs, and the size of its root volume.
#[derive(Serialize)]
struct Hardware {
    ncpus: u32,
    ram: u64,
    gpu: u32,
    gpu_info: Option<GpuInfo>,
    root_volume_size: Option<u64>,
}

fn hardware(instance: &InstanceWorld, s: &VmRecord) -> Option<Hardware> {
    let spec = instance.catalog().find(&s.zone, &s.commercial_type)?;
    Some(Hardware {
        ncpus: spec.ncpus,
        ram: spec.ram,
        gpu: spec.gpus(),
        gpu_info: spec.gpu.as_ref().map(|g| GpuInfo {
            gpu_manufacturer: g.manufacturer.clone(),
            gpu_name: g.name.clone(),
            gpu_memory: g.memory,
        }),
        root_volume_size: s
            .volumes
            .get("0")
            .and_then(|id| instance.volumes.get(id))
            .map(|v| v.size),
    })
}

/// Every server of every zone; `?include_deleted=true` adds the gone ones.
async fn servers(State(state): State<AppState>, params: Params) -> Json<Value> {
    let include_deleted = params.get("include_deleted") == Some("true");
    let (world, _) = state.world();
    let instance = world.instance();
    let servers: Vec<AdminVm> = instance
        .all_servers()
        .into_iter()
        .filter(|s| include_deleted || s.deleted_at.is_none())
        .map(|s: &VmRecord| AdminVm {
            server: world.vm_wire(s),
            address: s.address.to_string(),
            powered_on: s.is_on(),
            pending: s.pending.as_ref(),
            user_data_keys: s.user_data.keys().collect(),
            actions: s
                .history
                .iter()
                .map(|(at, action)| json!({ "at": format_time(*at), "action": action }))
                .collect(),
            deleted_at: s.deleted_at.map(format_time),
            hardware: hardware(instance, s),
        })
        .collect();
    Json(json!({ "servers": servers }))
}

/// The raw value of a live server's user data key, whatever its zone; 404
/// with an empty body when the server or the key is missing.
async fn user_data(
    State(state): State<AppState>,
    Path((id, key)): Path<(String, String)>,
) -> Response {
    let (world, _) = state.world();
    match world.instance().servers.get(&id) {
        Some(server) => user_data_response(server, &key),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

/// Every volume (Block SBS ones, attached or not, and local ones).
async fn volumes(State(state): State<AppState>) -> Json<Value> {
    let (world, _) = state.world();
    let volumes: Vec<&VolumeRecord> = world.instance().volumes.values().collect();
    Json(json!({ "volumes": volumes }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct AvailabilityBody {
    zone: String,
    commercial_type: String,
    availability: Availability,
}

async fn set_availability(
    State(state): State<AppState>,
    ApiJson(body): ApiJson<AvailabilityBody>,
) -> Result<StatusCode, ApiError> {
    check_instance_zone(&body.zone)?;
    let (mut world, _) = state.world();
    let (instance, _) = world.instance_mut();
    if instance.set_availability(&body.zone, &body.commercial_type, body.availability) {
        tracing::info!(zone = %body.zone, commercial_type = %body.commercial_type,
            availability = ?body.availability, "instance availability set");
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound {
            resource: "instance_server_type".into(),
            resource_id: body.commercial_type,
        })
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct QuotaBody {
    commercial_type: String,
    /// `null`: unlimited.
    quota: Option<u64>,
}

async fn set_quota(
    State(state): State<AppState>,
    ApiJson(body): ApiJson<QuotaBody>,
) -> Result<StatusCode, ApiError> {
    let (mut world, _) = state.world();
    if world
        .instance_mut()
        .0
        .set_quota(&body.commercial_type, body.quota)
    {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound {
            resource: "instance_server_type".into(),
            resource_id: body.commercial_type,
        })
    }
}
