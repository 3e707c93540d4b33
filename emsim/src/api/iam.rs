//! `/iam/v1alpha1/ssh-keys`.

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;

use super::extract::{ApiJson, Params};
use crate::catalog::is_uuid;
use crate::error::ApiError;
use crate::model::{ListSshKeys, SshKey};
use crate::sim::SshKeyRecord;
use crate::ssh_key;
use crate::state::AppState;

pub async fn list_ssh_keys(
    State(state): State<AppState>,
    params: Params,
) -> Result<Json<ListSshKeys>, ApiError> {
    let page = params.page(20)?;
    let order = params.order_by(&["created_at_asc", "created_at_desc", "name_asc", "name_desc"])?;
    let disabled = match params.get("disabled") {
        None => None,
        Some("true") => Some(true),
        Some("false") => Some(false),
        Some(_) => return Err(ApiError::invalid("disabled", "constraint", "true or false")),
    };
    let (world, _) = state.world();
    let mut keys: Vec<&SshKeyRecord> = world
        .ssh_keys()
        .iter()
        .filter(|k| params.get("project_id").is_none_or(|p| k.project_id == p))
        .filter(|k| {
            params
                .get("organization_id")
                .is_none_or(|o| k.organization_id == o)
        })
        .filter(|k| params.get("name").is_none_or(|n| k.name.contains(n)))
        .filter(|k| disabled.is_none_or(|d| k.disabled == d))
        .collect();
    match order {
        "created_at_desc" => keys.reverse(),
        "name_asc" => keys.sort_by(|a, b| a.name.cmp(&b.name)),
        "name_desc" => keys.sort_by(|a, b| b.name.cmp(&a.name)),
        _ => {}
    }
    let (keys, total_count) = page.slice(keys);
    Ok(Json(ListSshKeys {
        ssh_keys: keys.into_iter().map(SshKeyRecord::to_wire).collect(),
        total_count,
    }))
}

#[derive(Debug, Deserialize)]
pub struct CreateSshKeyBody {
    #[serde(default)]
    name: String,
    #[serde(default)]
    public_key: String,
    #[serde(default)]
    project_id: Option<String>,
}

pub async fn create_ssh_key(
    State(state): State<AppState>,
    ApiJson(body): ApiJson<CreateSshKeyBody>,
) -> Result<Json<SshKey>, ApiError> {
    if body.public_key.trim().is_empty() {
        return Err(ApiError::invalid(
            "public_key",
            "required",
            "an OpenSSH public key",
        ));
    }
    let key = ssh_key::parse(&body.public_key)
        .map_err(|e| ApiError::invalid("public_key", "constraint", e.to_string()))?;
    let project_id = body.project_id.filter(|p| !p.is_empty());
    if project_id.as_deref().is_some_and(|p| !is_uuid(p)) {
        return Err(ApiError::invalid(
            "project_id",
            "constraint",
            "must be a valid UUID",
        ));
    }
    let (mut world, now) = state.world();
    Ok(Json(world.create_ssh_key(now, body.name, key, project_id)))
}

pub async fn get_ssh_key(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<Json<SshKey>, ApiError> {
    let (world, _) = state.world();
    world.ssh_key(&id).map(|k| Json(k.to_wire()))
}

pub async fn delete_ssh_key(
    State(state): State<AppState>,
    Path(id): Path<String>,
) -> Result<StatusCode, ApiError> {
    let (mut world, _) = state.world();
    world.delete_ssh_key(&id)?;
    Ok(StatusCode::NO_CONTENT)
}
