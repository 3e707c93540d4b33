//! `/ipam/v1/regions/{region}/ips`: the Private Networks' addresses.

use std::net::Ipv4Addr;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use serde::Deserialize;
use serde_json::{Value, json};

use super::extract::{ApiJson, Params};
use super::vpc::{bool_param, check_region};
use crate::catalog::is_uuid;
use crate::error::ApiError;
use crate::pn::{BookRequest, IpFilter, IpRecord};
use crate::state::AppState;

type ApiResult<T> = Result<Json<T>, ApiError>;

const ORDERS: &[&str] = &[
    "created_at_desc",
    "created_at_asc",
    "updated_at_desc",
    "updated_at_asc",
    "attached_at_desc",
    "attached_at_asc",
    "ip_address_desc",
    "ip_address_asc",
    "mac_address_desc",
    "mac_address_asc",
];

pub async fn list_ips(
    State(state): State<AppState>,
    Path(region): Path<String>,
    params: Params,
) -> ApiResult<Value> {
    check_region(&region)?;
    let page = params.page(50)?;
    let order = params.order_by(ORDERS)?;
    let filter = IpFilter {
        project_id: params.get("project_id").map(str::to_string),
        private_network_id: params.get("private_network_id").map(str::to_string),
        subnet_id: params.get("subnet_id").map(str::to_string),
        resource_id: params.get("resource_id").map(str::to_string),
        resource_ids: params.all("resource_ids"),
        resource_type: params
            .get("resource_type")
            .filter(|t| *t != "unknown_type")
            .map(str::to_string),
        resource_types: params.all("resource_types"),
        mac_address: params.get("mac_address").map(str::to_string),
        is_ipv6: bool_param(&params, "is_ipv6")?,
        attached: bool_param(&params, "attached")?,
        tags: params.all("tags"),
        ip_ids: params.all("ip_ids"),
    };
    // Every address here is in a Private Network: none is zonal or regional.
    let other_source =
        params.get("zonal").is_some() || bool_param(&params, "regional")? == Some(true);
    let (world, _) = state.world();
    let pn = world.pn();
    let vpc = |ip: &IpRecord| {
        pn.networks
            .get(&ip.private_network_id)
            .map(|n| n.vpc_id.clone())
    };
    let mut list: Vec<&IpRecord> = pn
        .list_ips(&region, &filter)
        .into_iter()
        .filter(|_| !other_source)
        .filter(|ip| {
            ["vpc_id", "source_vpc_id"]
                .iter()
                .all(|k| params.get(k).is_none_or(|v| vpc(ip).as_deref() == Some(v)))
        })
        .filter(|ip| {
            params
                .get("resource_name")
                .is_none_or(|v| ip.resource.as_ref().is_some_and(|r| r.name.contains(v)))
        })
        .filter(|ip| {
            params.get("organization_id").is_none_or(|v| {
                pn.networks
                    .get(&ip.private_network_id)
                    .is_some_and(|n| n.organization_id == v)
            })
        })
        .collect();
    let mac = |ip: &IpRecord| ip.resource.as_ref().map(|r| r.mac_address.clone());
    match order.rsplit_once('_') {
        Some(("created_at", _)) => list.sort_by_key(|ip| (ip.created_at, ip.id.clone())),
        Some(("updated_at" | "attached_at", _)) => {
            list.sort_by_key(|ip| (ip.updated_at, ip.id.clone()))
        }
        Some(("ip_address", _)) => list.sort_by_key(|ip| ip.address),
        _ => list.sort_by_key(|ip| (mac(ip), ip.id.clone())),
    }
    if order.ends_with("_desc") {
        list.reverse();
    }
    let wire: Vec<_> = list.into_iter().map(IpRecord::to_wire).collect();
    let (ips, total) = page.slice(wire);
    Ok(Json(json!({ "total_count": total, "ips": ips })))
}

#[derive(Debug, Default, Deserialize)]
pub struct SourceBody {
    #[serde(default)]
    private_network_id: Option<String>,
    #[serde(default)]
    subnet_id: Option<String>,
    #[serde(default)]
    zonal: Option<String>,
    #[serde(default)]
    vpc_id: Option<String>,
    #[serde(default)]
    regional: Option<bool>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct BookBody {
    #[serde(default)]
    project_id: Option<String>,
    #[serde(default)]
    source: Option<SourceBody>,
    #[serde(default)]
    is_ipv6: bool,
    #[serde(default)]
    address: Option<String>,
    #[serde(default)]
    tags: Option<Vec<String>>,
    #[serde(default)]
    resource: Option<Value>,
}

pub async fn book_ip(
    State(state): State<AppState>,
    Path(region): Path<String>,
    ApiJson(body): ApiJson<BookBody>,
) -> ApiResult<Value> {
    check_region(&region)?;
    let source = body
        .source
        .ok_or_else(|| ApiError::invalid("source", "required", "required key not provided"))?;
    if source.zonal.is_some() || source.vpc_id.is_some() || source.regional == Some(true) {
        return Err(ApiError::invalid(
            "source",
            "constraint",
            "emsim books Private Network addresses only (source.private_network_id or source.subnet_id)",
        ));
    }
    if body.is_ipv6 {
        return Err(ApiError::invalid(
            "is_ipv6",
            "constraint",
            "the simulated Private Networks have IPv4 subnets only",
        ));
    }
    if body.resource.is_some() {
        return Err(ApiError::invalid(
            "resource",
            "constraint",
            "custom resources are not simulated",
        ));
    }
    if let Some(p) = body.project_id.as_deref().filter(|p| !p.is_empty())
        && !is_uuid(p)
    {
        return Err(ApiError::invalid(
            "project_id",
            "constraint",
            "must be a valid UUID",
        ));
    }
    let address = body
        .address
        .as_deref()
        .map(|a| {
            a.parse::<Ipv4Addr>().map_err(|_| {
                ApiError::invalid(
                    "address",
                    "constraint",
                    "an IPv4 address without its prefix",
                )
            })
        })
        .transpose()?;
    let (mut world, now) = state.world();
    let pn = world.pn_mut();
    let private_network_id = match (source.private_network_id, source.subnet_id) {
        (Some(p), None) => p,
        (None, Some(subnet)) => pn
            .networks()
            .find(|n| n.subnets.iter().any(|s| s.id == subnet))
            .map(|n| n.id.clone())
            .ok_or(ApiError::NotFound {
                resource: "subnet".into(),
                resource_id: subnet,
            })?,
        _ => {
            return Err(ApiError::invalid(
                "source",
                "constraint",
                "precisely one of private_network_id, subnet_id",
            ));
        }
    };
    let ip = pn.book(
        now,
        &region,
        BookRequest {
            project_id: body.project_id.filter(|p| !p.is_empty()),
            private_network_id,
            address,
            tags: body.tags.unwrap_or_default(),
        },
    )?;
    Ok(Json(json!(ip.to_wire())))
}

pub async fn get_ip(
    State(state): State<AppState>,
    Path((region, id)): Path<(String, String)>,
) -> ApiResult<Value> {
    check_region(&region)?;
    let (world, _) = state.world();
    Ok(Json(json!(world.pn().ip(&region, &id)?.to_wire())))
}

pub async fn release_ip(
    State(state): State<AppState>,
    Path((region, id)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    check_region(&region)?;
    let (mut world, _) = state.world();
    world.pn_mut().release(&region, &id)?;
    Ok(StatusCode::NO_CONTENT)
}
