//! `/block/v1/zones/{zone}/volumes`: the SBS volumes Instances boot from,
//! which outlive their server (terminate and delete only detach them).

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use super::extract::{ApiJson, Params};
use super::instance::check_instance_zone;
use crate::error::ApiError;
use crate::instance::volumes::VolumeKind;
use crate::instance::wire::block_volume_wire;
use crate::state::AppState;

type ApiResult = Result<Response, ApiError>;

/// `page`, `page_size`, `project_id`, `name` (substring), `tags` (repeated,
/// as the Go SDK sends them; a volume carrying any one of them matches, as
/// the API documents its filter: "one or more matching tags") →
/// `{volumes, total_count}` (Block is a newer API: the count is in the body).
pub async fn list_volumes(
    State(state): State<AppState>,
    Path(zone): Path<String>,
    params: Params,
) -> ApiResult {
    check_instance_zone(&zone)?;
    let page = params.page(50)?;
    let tags = params.all("tags");
    let (world, _) = state.world();
    let volumes: Vec<_> = world
        .instance()
        .volumes
        .values()
        .filter(|v| v.zone == zone && v.kind == VolumeKind::Sbs)
        .filter(|v| params.get("project_id").is_none_or(|p| v.project == p))
        .filter(|v| params.get("name").is_none_or(|n| v.name.contains(n)))
        .filter(|v| tags.is_empty() || tags.iter().any(|t| v.tags.contains(t)))
        .map(block_volume_wire)
        .collect();
    let (volumes, total_count) = page.slice(volumes);
    Ok(Json(json!({ "volumes": volumes, "total_count": total_count })).into_response())
}

pub async fn get_volume(
    State(state): State<AppState>,
    Path((zone, id)): Path<(String, String)>,
) -> ApiResult {
    check_instance_zone(&zone)?;
    let (world, _) = state.world();
    let volume = world.instance().block_volume(&zone, &id)?;
    Ok(Json(block_volume_wire(volume)).into_response())
}

/// The fields of `PATCH /volumes/{id}` emsim applies (the Go SDK's
/// `UpdateVolumeRequest` also has `size`, refused here).
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpdateBody {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    tags: Option<Vec<String>>,
    /// The SBS class: 5000 or 15000 IOPS.
    #[serde(default)]
    perf_iops: Option<u32>,
}

/// 200 with the volume, as `GET` answers it.
pub async fn update_volume(
    State(state): State<AppState>,
    Path((zone, id)): Path<(String, String)>,
    ApiJson(body): ApiJson<UpdateBody>,
) -> ApiResult {
    check_instance_zone(&zone)?;
    if body.name.as_deref() == Some("") {
        return Err(ApiError::invalid("name", "constraint", "must not be empty"));
    }
    if let Some(iops) = body.perf_iops
        && iops != 5000
        && iops != 15000
    {
        return Err(ApiError::invalid(
            "perf_iops",
            "constraint",
            "must be 5000 or 15000",
        ));
    }
    let (mut world, now) = state.world();
    let volume = world.instance_mut().0.update_block_volume(
        now,
        &zone,
        &id,
        body.name,
        body.tags,
        body.perf_iops,
    )?;
    Ok(Json(block_volume_wire(volume)).into_response())
}

/// 204; 412 `precondition_failed` while attached (INFERENCE).
pub async fn delete_volume(
    State(state): State<AppState>,
    Path((zone, id)): Path<(String, String)>,
) -> ApiResult {
    check_instance_zone(&zone)?;
    let (mut world, _) = state.world();
    world.instance_mut().0.delete_block_volume(&zone, &id)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
