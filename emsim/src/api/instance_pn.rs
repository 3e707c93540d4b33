//! `/instance/v1/zones/{zone}/servers/{server_id}/private_nics`: a VM's NICs
//! on Private Networks.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;

use super::extract::{ApiJson, Params};
use super::instance::{check_instance_zone, paged};
use crate::catalog::is_uuid;
use crate::error::ApiError;
use crate::pn::PrivateNic;
use crate::state::AppState;

type ApiResult = Result<Response, ApiError>;

/// Unknown fields are accepted, as on the other Instance calls.
#[derive(Debug, Deserialize)]
pub struct CreateNicBody {
    #[serde(default)]
    private_network_id: Option<String>,
    #[serde(default)]
    tags: Option<Vec<String>>,
    #[serde(default)]
    ip_ids: Option<Vec<String>>,
    #[serde(default)]
    ipam_ip_ids: Option<Vec<String>>,
}

pub async fn create(
    State(state): State<AppState>,
    Path((zone, id)): Path<(String, String)>,
    ApiJson(body): ApiJson<CreateNicBody>,
) -> ApiResult {
    check_instance_zone(&zone)?;
    let Some(pn) = body.private_network_id.filter(|p| !p.is_empty()) else {
        return Err(ApiError::invalid(
            "private_network_id",
            "required",
            "required key not provided",
        ));
    };
    let ipam_ip_ids = body.ipam_ip_ids.unwrap_or_default();
    for v in std::iter::once(&pn).chain(&ipam_ip_ids) {
        if !is_uuid(v) {
            return Err(ApiError::invalid(
                if *v == pn {
                    "private_network_id"
                } else {
                    "ipam_ip_ids"
                },
                "constraint",
                "must be a valid UUID",
            ));
        }
    }
    if body.ip_ids.is_some_and(|ips| !ips.is_empty()) {
        return Err(ApiError::invalid(
            "ip_ids",
            "constraint",
            "legacy IP ids are not simulated: book the address in IPAM and give ipam_ip_ids",
        ));
    }
    let (mut world, now) = state.world();
    let nic = world.create_private_nic(
        now,
        &zone,
        &id,
        &pn,
        body.tags.unwrap_or_default(),
        ipam_ip_ids,
    )?;
    Ok((StatusCode::CREATED, Json(json!({ "private_nic": nic }))).into_response())
}

pub async fn list(
    State(state): State<AppState>,
    Path((zone, id)): Path<(String, String)>,
    params: Params,
) -> ApiResult {
    check_instance_zone(&zone)?;
    let page = params.per_page()?;
    // Comma-joined as the SDK sends them; every tag must be on the NIC
    // (chosen as for the servers' filter).
    let tags = params.list("tags");
    let (world, _) = state.world();
    let nics: Vec<PrivateNic> = world
        .private_nics(&zone, &id)?
        .into_iter()
        .filter(|n| tags.iter().all(|t| n.tags.contains(t)))
        .collect();
    let (items, total) = page.slice(nics);
    Ok(paged(
        // Unlike the servers' list, the SDK reads this one's total from the
        // body (`ListPrivateNICsResponse` has no header hook), so both carry it.
        json!({ "private_nics": items, "total_count": total }),
        total,
        page,
        &format!("/servers/{id}/private_nics"),
    ))
}

pub async fn get(
    State(state): State<AppState>,
    Path((zone, id, nic)): Path<(String, String, String)>,
) -> ApiResult {
    check_instance_zone(&zone)?;
    let (world, _) = state.world();
    let nic = world.private_nic(&zone, &id, &nic)?;
    Ok(Json(json!({ "private_nic": nic })).into_response())
}

pub async fn delete(
    State(state): State<AppState>,
    Path((zone, id, nic)): Path<(String, String, String)>,
) -> ApiResult {
    check_instance_zone(&zone)?;
    let (mut world, now) = state.world();
    world.delete_private_nic(now, &zone, &id, &nic)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
