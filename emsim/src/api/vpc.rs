//! `/vpc/v2/regions/{region}/private-networks`: list and get. Networks are
//! seeded (`--private-networks`, `POST /_emsim/private-networks`), never
//! created through this API.

use axum::Json;
use axum::extract::{Path, State};
use serde_json::{Value, json};

use super::extract::Params;
use crate::error::ApiError;
use crate::pn::{PnRecord, PrivateNetwork, REGIONS};
use crate::state::AppState;

type ApiResult<T> = Result<Json<T>, ApiError>;

pub fn check_region(region: &str) -> Result<(), ApiError> {
    if REGIONS.contains(&region) {
        Ok(())
    } else {
        Err(ApiError::invalid(
            "region",
            "constraint",
            format!(
                "unknown region {region}, expected one of {}",
                REGIONS.join(", ")
            ),
        ))
    }
}

/// A boolean query parameter (`true`/`false`), 400 otherwise.
pub fn bool_param(params: &Params, name: &str) -> Result<Option<bool>, ApiError> {
    match params.get(name) {
        None => Ok(None),
        Some("true") => Ok(Some(true)),
        Some("false") => Ok(Some(false)),
        Some(_) => Err(ApiError::invalid(name, "constraint", "true or false")),
    }
}

/// Filters as the SDK documents them: `name` substring, `tags` one or more
/// matching, `private_network_ids` any of.
fn matches(
    n: &PnRecord,
    params: &Params,
    tags: &[String],
    ids: &[String],
    dhcp: Option<bool>,
) -> bool {
    params.get("name").is_none_or(|v| n.name.contains(v))
        && (tags.is_empty() || tags.iter().any(|t| n.tags.contains(t)))
        && params.get("project_id").is_none_or(|v| n.project_id == v)
        && params
            .get("organization_id")
            .is_none_or(|v| n.organization_id == v)
        && (ids.is_empty() || ids.contains(&n.id))
        && params.get("vpc_id").is_none_or(|v| n.vpc_id == v)
        && dhcp.is_none_or(|d| n.dhcp_enabled == d)
}

pub async fn list_private_networks(
    State(state): State<AppState>,
    Path(region): Path<String>,
    params: Params,
) -> ApiResult<Value> {
    check_region(&region)?;
    let page = params.page(50)?;
    let order = params.order_by(&["created_at_asc", "created_at_desc", "name_asc", "name_desc"])?;
    let tags = params.all("tags");
    let ids = params.all("private_network_ids");
    let dhcp = bool_param(&params, "dhcp_enabled")?;
    // No network has the S3 integration.
    let s3 = bool_param(&params, "s3_integration_enabled")?;
    let (world, _) = state.world();
    let mut list: Vec<&PnRecord> = world
        .pn()
        .networks()
        .filter(|n| n.region == region && matches(n, &params, &tags, &ids, dhcp))
        .filter(|_| s3 != Some(true))
        .collect();
    match order {
        "name_asc" => list.sort_by(|a, b| a.name.cmp(&b.name).then(a.id.cmp(&b.id))),
        "name_desc" => list.sort_by(|a, b| b.name.cmp(&a.name).then(b.id.cmp(&a.id))),
        "created_at_desc" => {
            list.sort_by(|a, b| b.created_at.cmp(&a.created_at).then(b.id.cmp(&a.id)))
        }
        _ => list.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id))),
    }
    let wire: Vec<PrivateNetwork> = list.into_iter().map(PnRecord::to_wire).collect();
    let (items, total) = page.slice(wire);
    Ok(Json(
        json!({ "private_networks": items, "total_count": total }),
    ))
}

pub async fn get_private_network(
    State(state): State<AppState>,
    Path((region, id)): Path<(String, String)>,
) -> ApiResult<PrivateNetwork> {
    check_region(&region)?;
    let (world, _) = state.world();
    Ok(Json(world.pn().network(&region, &id)?.to_wire()))
}
