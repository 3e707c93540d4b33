//! `/instance/v1/zones/{zone}/...`: product catalog, servers, actions, user
//! data, images and flexible IPs. Lists carry their total in `X-Total-Count`
//! (with a `Link` header), never in the body.

use std::collections::BTreeMap;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{Path, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::json;

use super::extract::{ApiJson, Page, Params};
use crate::catalog::is_uuid;
use crate::error::ApiError;
use crate::instance::model::{AvailabilityEntry, OrderedMap, Product, Task};
use crate::instance::server::VmRecord;
use crate::instance::volumes::VolumeKind;
use crate::instance::wire::{flexible_ip_wire, instance_time};
use crate::instance::{INSTANCE_ZONES, NewVm, VmAction, VmPatch, VolumeRequest};
use crate::state::AppState;

type ApiResult = Result<Response, ApiError>;

pub fn check_instance_zone(zone: &str) -> Result<(), ApiError> {
    if INSTANCE_ZONES.contains(&zone) {
        Ok(())
    } else {
        Err(ApiError::invalid(
            "zone",
            "constraint",
            format!(
                "unknown zone {zone}, expected one of {}",
                INSTANCE_ZONES.join(", ")
            ),
        ))
    }
}

/// A 200 list answer: `body` holds the page's items, `total` goes to
/// `X-Total-Count` and `Link` (`path` after the zone).
pub fn paged(body: impl Serialize, total: u64, page: Page, path: &str) -> Response {
    let mut response = Json(body).into_response();
    let headers = response.headers_mut();
    headers.insert("x-total-count", HeaderValue::from(total));
    if let Some(link) = page.link(path, total)
        && let Ok(value) = HeaderValue::from_str(&link)
    {
        headers.insert(header::LINK, value);
    }
    response
}

pub async fn list_products(
    State(state): State<AppState>,
    Path(zone): Path<String>,
    params: Params,
) -> ApiResult {
    check_instance_zone(&zone)?;
    let page = params.per_page()?;
    let (world, _) = state.world();
    let all: Vec<(String, Product)> = world
        .instance()
        .catalog()
        .in_zone(&zone)
        .map(|t| (t.name.clone(), Product::of(t, &zone)))
        .collect();
    let (items, total) = page.slice(all);
    Ok(paged(
        json!({ "servers": OrderedMap(items) }),
        total,
        page,
        "/products/servers",
    ))
}

pub async fn list_availability(
    State(state): State<AppState>,
    Path(zone): Path<String>,
    params: Params,
) -> ApiResult {
    check_instance_zone(&zone)?;
    let page = params.per_page()?;
    let (world, _) = state.world();
    let instance = world.instance();
    let all: Vec<(String, AvailabilityEntry)> = instance
        .catalog()
        .in_zone(&zone)
        .map(|t| {
            let availability = match instance.availability(&zone, t) {
                crate::instance::Availability::Available => "available",
                crate::instance::Availability::Scarce => "scarce",
                crate::instance::Availability::Shortage => "shortage",
            };
            (t.name.clone(), AvailabilityEntry { availability })
        })
        .collect();
    let (items, total) = page.slice(all);
    Ok(paged(
        json!({ "servers": OrderedMap(items) }),
        total,
        page,
        "/products/servers/availability",
    ))
}

#[derive(Debug, Deserialize)]
pub struct VolumeBody {
    #[serde(default)]
    size: Option<u64>,
    #[serde(default)]
    volume_type: Option<String>,
    #[serde(default)]
    id: Option<String>,
}

/// Unknown fields are accepted: the SDK sends more than emsim reads.
#[derive(Debug, Deserialize)]
pub struct CreateBody {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    commercial_type: Option<String>,
    #[serde(default)]
    image: Option<String>,
    #[serde(default)]
    volumes: Option<BTreeMap<String, VolumeBody>>,
    #[serde(default)]
    dynamic_ip_required: Option<bool>,
    #[serde(default)]
    public_ips: Option<Vec<String>>,
    #[serde(default)]
    boot_type: Option<String>,
    #[serde(default)]
    project: Option<String>,
    #[serde(default)]
    tags: Option<Vec<String>>,
    #[serde(default)]
    security_group: Option<String>,
    #[serde(default)]
    placement_group: Option<String>,
    #[serde(default)]
    protected: Option<bool>,
}

fn server_body(world: &crate::sim::World, record: &VmRecord) -> serde_json::Value {
    json!({ "server": world.vm_wire(record) })
}

fn uuid_field(name: &str, value: &str) -> Result<(), ApiError> {
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

fn new_vm(body: CreateBody) -> Result<NewVm, ApiError> {
    let commercial_type = body
        .commercial_type
        .filter(|t| !t.is_empty())
        .ok_or_else(|| {
            ApiError::invalid("commercial_type", "required", "required key not provided")
        })?;
    let mut volumes = BTreeMap::new();
    for (index, v) in body.volumes.unwrap_or_default() {
        if index.parse::<u8>().is_err() {
            return Err(ApiError::invalid(
                "volumes",
                "constraint",
                format!("volume index {index:?} must be \"0\", \"1\"..."),
            ));
        }
        let kind = VolumeKind::parse(v.volume_type.as_deref())
            .map_err(|help| ApiError::invalid(&format!("volumes.{index}"), "constraint", help))?;
        if let Some(id) = &v.id {
            uuid_field(&format!("volumes.{index}.id"), id)?;
        }
        volumes.insert(
            index,
            VolumeRequest {
                kind,
                size: v.size,
                id: v.id,
            },
        );
    }
    let image = body.image.filter(|i| !i.is_empty());
    match &image {
        Some(image) => uuid_field("image", image)?,
        None if volumes.get("0").is_none_or(|v| v.id.is_none()) => {
            return Err(ApiError::invalid(
                "image",
                "required",
                "an image, or an existing root volume in volumes.0.id",
            ));
        }
        None => {}
    }
    let project = body.project.filter(|p| !p.is_empty());
    if let Some(project) = &project {
        uuid_field("project", project)?;
    }
    let boot_type = body.boot_type.unwrap_or_else(|| "local".into());
    if !matches!(boot_type.as_str(), "local" | "rescue") {
        return Err(ApiError::invalid(
            "boot_type",
            "constraint",
            "one of local, rescue",
        ));
    }
    Ok(NewVm {
        name: body
            .name
            .filter(|n| !n.is_empty())
            .unwrap_or_else(|| "emsim-server".into()),
        commercial_type,
        image,
        volumes,
        dynamic_ip_required: body.dynamic_ip_required.unwrap_or(true),
        public_ips: body.public_ips.unwrap_or_default(),
        boot_type,
        project,
        tags: body.tags.unwrap_or_default(),
        security_group: body.security_group.filter(|s| !s.is_empty()),
        placement_group: body.placement_group.filter(|s| !s.is_empty()),
        protected: body.protected.unwrap_or(false),
    })
}

pub async fn create_server(
    State(state): State<AppState>,
    Path(zone): Path<String>,
    ApiJson(body): ApiJson<CreateBody>,
) -> ApiResult {
    check_instance_zone(&zone)?;
    let req = new_vm(body)?;
    let (mut world, now) = state.world();
    let (instance, pool) = world.instance_mut();
    let id = instance.create(now, &zone, req, pool)?;
    let body = server_body(&world, world.instance().server(&zone, &id)?);
    let location = format!("/instance/v1/zones/{zone}/servers/{id}");
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, location)],
        Json(body),
    )
        .into_response())
}

pub async fn get_server(
    State(state): State<AppState>,
    Path((zone, id)): Path<(String, String)>,
) -> ApiResult {
    check_instance_zone(&zone)?;
    let (world, _) = state.world();
    let record = world.instance().server(&zone, &id)?;
    Ok(Json(server_body(&world, record)).into_response())
}

/// Filters of `GET /servers`: `tags` all present (exact), `name` substring,
/// the others exact; `servers` a comma-joined id list.
fn matches(s: &VmRecord, params: &Params, tags: &[String], ids: &[String]) -> bool {
    tags.iter().all(|t| s.tags.contains(t))
        && (ids.is_empty() || ids.contains(&s.id))
        && params.get("name").is_none_or(|n| s.name.contains(n))
        && params.get("project").is_none_or(|p| s.project == p)
        && params
            .get("organization")
            .is_none_or(|o| s.organization == o)
        && params
            .get("commercial_type")
            .is_none_or(|t| s.commercial_type == t)
        && params.get("state").is_none_or(|st| s.state.as_str() == st)
}

pub async fn list_servers(
    State(state): State<AppState>,
    Path(zone): Path<String>,
    params: Params,
) -> ApiResult {
    check_instance_zone(&zone)?;
    let page = params.per_page()?;
    let order = params.get("order").unwrap_or("creation_date_desc");
    if !matches!(order, "creation_date_desc" | "creation_date_asc") {
        return Err(ApiError::invalid(
            "order",
            "constraint",
            "one of creation_date_desc, creation_date_asc",
        ));
    }
    let tags = params.list("tags");
    let ids = params.list("servers");
    let (world, _) = state.world();
    let instance = world.instance();
    let mut servers: Vec<_> = instance
        .servers_in(&zone)
        .into_iter()
        .filter(|s| matches(s, &params, &tags, &ids))
        .map(|s| world.vm_wire(s))
        .collect();
    if order == "creation_date_desc" {
        servers.reverse();
    }
    let (servers, total) = page.slice(servers);
    Ok(paged(
        json!({ "servers": servers }),
        total,
        page,
        "/servers",
    ))
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpdateBody {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    tags: Option<Vec<String>>,
    #[serde(default)]
    security_group: Option<serde_json::Value>,
    #[serde(default, with = "double_option")]
    placement_group: Option<Option<String>>,
    #[serde(default)]
    protected: Option<bool>,
    #[serde(default)]
    dynamic_ip_required: Option<bool>,
}

/// `null` (detach) apart from absent (keep).
mod double_option {
    use serde::{Deserialize, Deserializer};

    pub fn deserialize<'de, D: Deserializer<'de>>(
        d: D,
    ) -> Result<Option<Option<String>>, D::Error> {
        Option::<String>::deserialize(d).map(Some)
    }
}

pub async fn update_server(
    State(state): State<AppState>,
    Path((zone, id)): Path<(String, String)>,
    ApiJson(body): ApiJson<UpdateBody>,
) -> ApiResult {
    check_instance_zone(&zone)?;
    if body.name.as_deref() == Some("") {
        return Err(ApiError::invalid("name", "constraint", "must not be empty"));
    }
    // The SDK sends `{"id": ..., "name": ...}` for a security group.
    let security_group = match body.security_group {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(id)) => Some(id),
        Some(v) => v.get("id").and_then(|i| i.as_str()).map(str::to_string),
    };
    let patch = VmPatch {
        name: body.name,
        tags: body.tags,
        security_group,
        placement_group: body.placement_group,
        protected: body.protected,
        dynamic_ip_required: body.dynamic_ip_required,
    };
    let (mut world, now) = state.world();
    world.instance_mut().0.update(now, &zone, &id, patch)?;
    let body = server_body(&world, world.instance().server(&zone, &id)?);
    Ok(Json(body).into_response())
}

pub async fn delete_server(
    State(state): State<AppState>,
    Path((zone, id)): Path<(String, String)>,
) -> ApiResult {
    check_instance_zone(&zone)?;
    let (mut world, now) = state.world();
    let (instance, pool) = world.instance_mut();
    instance.delete(now, &zone, &id, pool)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

#[derive(Debug, Deserialize)]
pub struct ActionBody {
    #[serde(default)]
    action: Option<String>,
}

pub async fn server_action(
    State(state): State<AppState>,
    Path((zone, id)): Path<(String, String)>,
    ApiJson(body): ApiJson<ActionBody>,
) -> ApiResult {
    check_instance_zone(&zone)?;
    let action = VmAction::parse(body.action.as_deref().unwrap_or(""))?;
    let (mut world, mut faults, now) = state.world_and_faults();
    let (instance, _) = world.instance_mut();
    instance.act(now, &zone, &id, action, &mut faults)?;
    let task = Task {
        id: instance.uuid(),
        description: format!("server_{}", action.as_str()),
        progress: 0,
        started_at: instance_time(now),
        terminated_at: None,
        status: "pending",
        href_from: format!("/servers/{id}/action"),
        href_result: format!("/servers/{id}"),
        zone,
    };
    Ok((StatusCode::ACCEPTED, Json(json!({ "task": task }))).into_response())
}

// ----- user data -----

pub async fn list_user_data(
    State(state): State<AppState>,
    Path((zone, id)): Path<(String, String)>,
) -> ApiResult {
    check_instance_zone(&zone)?;
    let (world, _) = state.world();
    let keys: Vec<&String> = world
        .instance()
        .server(&zone, &id)?
        .user_data
        .keys()
        .collect();
    Ok(Json(json!({ "user_data": keys })).into_response())
}

/// The raw value (text/plain), or 404 with an empty body when the key is
/// not set.
pub async fn get_user_data(
    State(state): State<AppState>,
    Path((zone, id, key)): Path<(String, String, String)>,
) -> ApiResult {
    check_instance_zone(&zone)?;
    let (world, _) = state.world();
    let server = world.instance().server(&zone, &id)?;
    Ok(user_data_response(server, &key))
}

pub fn user_data_response(server: &VmRecord, key: &str) -> Response {
    match server.user_data.get(key) {
        Some(value) => ([(header::CONTENT_TYPE, "text/plain")], value.0.clone()).into_response(),
        None => StatusCode::NOT_FOUND.into_response(),
    }
}

pub async fn set_user_data(
    State(state): State<AppState>,
    Path((zone, id, key)): Path<(String, String, String)>,
    body: Bytes,
) -> ApiResult {
    check_instance_zone(&zone)?;
    let (mut world, now) = state.world();
    world
        .instance_mut()
        .0
        .set_user_data(now, &zone, &id, &key, body.to_vec())?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

pub async fn delete_user_data(
    State(state): State<AppState>,
    Path((zone, id, key)): Path<(String, String, String)>,
) -> ApiResult {
    check_instance_zone(&zone)?;
    let (mut world, _) = state.world();
    world.instance_mut().0.delete_user_data(&zone, &id, &key)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

// ----- images -----

pub async fn list_images(
    State(state): State<AppState>,
    Path(zone): Path<String>,
    params: Params,
) -> ApiResult {
    check_instance_zone(&zone)?;
    let page = params.per_page()?;
    let tags = params.list("tags");
    let (world, _) = state.world();
    let instance = world.instance();
    let images: Vec<_> = instance
        .catalog()
        .images
        .iter()
        .filter(|i| i.zone == zone)
        .map(|i| instance.image_wire(i))
        .filter(|i| params.get("name").is_none_or(|n| i.name.contains(n)))
        .filter(|i| params.get("arch").is_none_or(|a| i.arch == a))
        .filter(|i| params.get("project").is_none_or(|p| i.project == p))
        .filter(|i| {
            params
                .get("public")
                .is_none_or(|p| p == if i.public { "true" } else { "false" })
        })
        .filter(|i| tags.iter().all(|t| i.tags.contains(t)))
        .collect();
    let (images, total) = page.slice(images);
    Ok(paged(json!({ "images": images }), total, page, "/images"))
}

pub async fn get_image(
    State(state): State<AppState>,
    Path((zone, id)): Path<(String, String)>,
) -> ApiResult {
    check_instance_zone(&zone)?;
    let (world, _) = state.world();
    let instance = world.instance();
    let image = instance.image(&zone, &id).ok_or(ApiError::NotFound {
        resource: "instance_image".into(),
        resource_id: id,
    })?;
    Ok(Json(json!({ "image": instance.image_wire(image) })).into_response())
}

// ----- flexible IPs -----

#[derive(Debug, Deserialize)]
pub struct CreateIpBody {
    #[serde(default)]
    project: Option<String>,
    #[serde(default)]
    tags: Option<Vec<String>>,
    #[serde(default, rename = "type")]
    kind: Option<String>,
}

pub async fn create_ip(
    State(state): State<AppState>,
    Path(zone): Path<String>,
    ApiJson(body): ApiJson<CreateIpBody>,
) -> ApiResult {
    check_instance_zone(&zone)?;
    if let Some(kind) = body.kind.as_deref()
        && !matches!(kind, "" | "routed_ipv4" | "unknown_iptype")
    {
        return Err(ApiError::invalid(
            "type",
            "constraint",
            "emsim simulates routed_ipv4 flexible IPs only",
        ));
    }
    let project = body.project.filter(|p| !p.is_empty());
    if let Some(project) = &project {
        uuid_field("project", project)?;
    }
    let (mut world, _) = state.world();
    let (instance, pool) = world.instance_mut();
    let id = instance.create_ip(&zone, project, body.tags.unwrap_or_default(), pool)?;
    let ip = flexible_ip_wire(instance.ip(&zone, &id)?);
    let location = format!("/instance/v1/zones/{zone}/ips/{id}");
    Ok((
        StatusCode::CREATED,
        [(header::LOCATION, location)],
        Json(json!({ "ip": ip })),
    )
        .into_response())
}

pub async fn get_ip(
    State(state): State<AppState>,
    Path((zone, id)): Path<(String, String)>,
) -> ApiResult {
    check_instance_zone(&zone)?;
    let (world, _) = state.world();
    let ip = flexible_ip_wire(world.instance().ip(&zone, &id)?);
    Ok(Json(json!({ "ip": ip })).into_response())
}

pub async fn list_ips(
    State(state): State<AppState>,
    Path(zone): Path<String>,
    params: Params,
) -> ApiResult {
    check_instance_zone(&zone)?;
    let page = params.per_page()?;
    let tags = params.list("tags");
    let (world, _) = state.world();
    let ips: Vec<_> = world
        .instance()
        .ips
        .values()
        .filter(|ip| ip.zone == zone)
        .filter(|ip| params.get("project").is_none_or(|p| ip.project == p))
        .filter(|ip| tags.iter().all(|t| ip.tags.contains(t)))
        .map(flexible_ip_wire)
        .collect();
    let (ips, total) = page.slice(ips);
    Ok(paged(json!({ "ips": ips }), total, page, "/ips"))
}

pub async fn delete_ip(
    State(state): State<AppState>,
    Path((zone, id)): Path<(String, String)>,
) -> ApiResult {
    check_instance_zone(&zone)?;
    let (mut world, _) = state.world();
    let (instance, pool) = world.instance_mut();
    instance.delete_ip(&zone, &id, pool)?;
    Ok(StatusCode::NO_CONTENT.into_response())
}
