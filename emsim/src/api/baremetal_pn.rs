//! `/baremetal/v3/zones/{zone}`: Private Network attachments of Elastic Metal
//! servers (`server-private-networks`).

use std::collections::BTreeMap;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use super::extract::{ApiJson, Params, check_zone};
use crate::catalog::is_uuid;
use crate::error::ApiError;
use crate::pn::{Attachment, AttachmentRecord};
use crate::state::AppState;

type ApiResult<T> = Result<Json<T>, ApiError>;

fn uuid_arg(name: &str, value: &str) -> Result<(), ApiError> {
    if is_uuid(value) {
        Ok(())
    } else {
        Err(ApiError::invalid(
            name,
            "constraint",
            "must be a valid UUID",
        ))
    }
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttachBody {
    #[serde(default)]
    private_network_id: String,
    #[serde(default)]
    ipam_ip_ids: Option<Vec<String>>,
}

pub async fn attach(
    State(state): State<AppState>,
    Path((zone, id)): Path<(String, String)>,
    ApiJson(body): ApiJson<AttachBody>,
) -> ApiResult<Attachment> {
    check_zone(&zone)?;
    if body.private_network_id.is_empty() {
        return Err(ApiError::invalid(
            "private_network_id",
            "required",
            "required key not provided",
        ));
    }
    uuid_arg("private_network_id", &body.private_network_id)?;
    let ipam_ip_ids = body.ipam_ip_ids.unwrap_or_default();
    for ip in &ipam_ip_ids {
        uuid_arg("ipam_ip_ids", ip)?;
    }
    let (mut world, mut faults, now) = state.world_and_faults();
    world
        .attach_private_network(
            now,
            &zone,
            &id,
            body.private_network_id,
            ipam_ip_ids,
            &mut faults,
        )
        .map(Json)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SetBody {
    #[serde(default)]
    per_private_network_ipam_ip_ids: BTreeMap<String, Option<Vec<String>>>,
}

pub async fn set(
    State(state): State<AppState>,
    Path((zone, id)): Path<(String, String)>,
    ApiJson(body): ApiJson<SetBody>,
) -> ApiResult<Value> {
    check_zone(&zone)?;
    let mut wanted = Vec::new();
    for (pn, ips) in body.per_private_network_ipam_ip_ids {
        uuid_arg("per_private_network_ipam_ip_ids", &pn)?;
        let ips = ips.unwrap_or_default();
        for ip in &ips {
            uuid_arg("per_private_network_ipam_ip_ids", ip)?;
        }
        wanted.push((pn, ips));
    }
    let (mut world, mut faults, now) = state.world_and_faults();
    let list = world.set_private_networks(now, &zone, &id, &wanted, &mut faults)?;
    Ok(Json(json!({ "server_private_networks": list })))
}

pub async fn list(
    State(state): State<AppState>,
    Path(zone): Path<String>,
    params: Params,
) -> ApiResult<Value> {
    check_zone(&zone)?;
    let page = params.page(50)?;
    let order = params.order_by(&[
        "created_at_asc",
        "created_at_desc",
        "updated_at_asc",
        "updated_at_desc",
    ])?;
    let ipam_ip_ids = params.all("ipam_ip_ids");
    let (world, _) = state.world();
    let organization = |a: &AttachmentRecord| {
        world
            .pn()
            .networks
            .get(&a.private_network_id)
            .map(|n| n.organization_id.clone())
    };
    let mut list: Vec<&AttachmentRecord> = world
        .pn()
        .attachments(&zone)
        .into_iter()
        .filter(|a| {
            params.get("server_id").is_none_or(|v| a.server_id == v)
                && params
                    .get("private_network_id")
                    .is_none_or(|v| a.private_network_id == v)
                && params.get("project_id").is_none_or(|v| a.project_id == v)
                && params
                    .get("organization_id")
                    .is_none_or(|v| organization(a).as_deref() == Some(v))
                && (ipam_ip_ids.is_empty() || a.ipam_ip_ids.iter().any(|i| ipam_ip_ids.contains(i)))
        })
        .collect();
    if order.starts_with("updated_at") {
        list.sort_by(|a, b| a.updated_at.cmp(&b.updated_at).then(a.id.cmp(&b.id)));
    }
    if order.ends_with("_desc") {
        list.reverse();
    }
    let wire: Vec<Attachment> = list.into_iter().map(AttachmentRecord::to_wire).collect();
    let (items, total) = page.slice(wire);
    Ok(Json(
        json!({ "server_private_networks": items, "total_count": total }),
    ))
}

pub async fn detach(
    State(state): State<AppState>,
    Path((zone, id, pn)): Path<(String, String, String)>,
) -> Result<StatusCode, ApiError> {
    check_zone(&zone)?;
    let (mut world, now) = state.world();
    world.detach_private_network(now, &zone, &id, &pn)?;
    Ok(StatusCode::NO_CONTENT)
}
