//! `/baremetal/v1/zones/{zone}/...`: offers and servers.

use axum::Json;
use axum::extract::{Path, State};
use serde::Deserialize;
use serde_json::Value;

use super::extract::{ApiJson, Params, check_zone};
use crate::catalog::is_uuid;
use crate::error::ApiError;
use crate::model::{
    ListOffers, ListOptions, ListOs, ListServerEvents, ListServers, Offer, OptionInfo, Os, Server,
};
use crate::sim::{BootType, InstallRequest, NewServer, Request, ServerPatch, ServerRecord};
use crate::state::AppState;

type ApiResult<T> = Result<Json<T>, ApiError>;

pub async fn list_offers(
    State(state): State<AppState>,
    Path(zone): Path<String>,
    params: Params,
) -> ApiResult<ListOffers> {
    check_zone(&zone)?;
    let page = params.page(50)?;
    // The SDK sends `unknown_subscription_period` when the caller sets nothing.
    let period = match params.get("subscription_period") {
        None | Some("unknown_subscription_period") | Some("hourly") => "hourly",
        Some("monthly") => "monthly",
        Some(other) => {
            return Err(ApiError::invalid(
                "subscription_period",
                "constraint",
                format!("unknown period {other:?}"),
            ));
        }
    };
    let name = params.get("name");
    let offers: Vec<Offer> = state
        .world()
        .0
        .offers(&zone)
        .into_iter()
        .filter(|o| o.subscription_period == period)
        .filter(|o| name.is_none_or(|n| o.name.eq_ignore_ascii_case(n)))
        .collect();
    let (offers, total_count) = page.slice(offers);
    Ok(Json(ListOffers {
        total_count,
        offers,
    }))
}

pub async fn get_offer(
    State(state): State<AppState>,
    Path((zone, id)): Path<(String, String)>,
) -> ApiResult<Offer> {
    check_zone(&zone)?;
    state
        .world()
        .0
        .offer(&zone, &id)
        .map(Json)
        .ok_or(ApiError::NotFound {
            resource: "baremetal_offer".into(),
            resource_id: id,
        })
}

#[derive(Debug, Deserialize)]
pub struct CreateServerBody {
    #[serde(default)]
    offer_id: String,
    #[serde(default)]
    project_id: Option<String>,
    #[serde(default)]
    name: String,
    #[serde(default)]
    description: String,
    #[serde(default)]
    tags: Option<Vec<String>>,
    #[serde(default)]
    install: Option<Value>,
    #[serde(default)]
    option_ids: Option<Vec<String>>,
    #[serde(default)]
    protected: Option<bool>,
    /// Base64 (the SDK's `[]byte`), kept as sent.
    #[serde(default)]
    user_data: Option<String>,
    #[serde(default, rename = "organization_id")]
    _organization_id: Option<String>,
}

pub async fn create_server(
    State(state): State<AppState>,
    Path(zone): Path<String>,
    ApiJson(body): ApiJson<CreateServerBody>,
) -> ApiResult<Server> {
    check_zone(&zone)?;
    if body.offer_id.is_empty() {
        return Err(ApiError::invalid(
            "offer_id",
            "required",
            "the offer to order",
        ));
    }
    if !is_uuid(&body.offer_id) {
        return Err(ApiError::invalid(
            "offer_id",
            "constraint",
            "must be a valid UUID",
        ));
    }
    if body.name.is_empty() {
        return Err(ApiError::invalid("name", "required", "the server name"));
    }
    if let Some(project_id) = body.project_id.as_deref().filter(|p| !p.is_empty())
        && !is_uuid(project_id)
    {
        return Err(ApiError::invalid(
            "project_id",
            "constraint",
            "must be a valid UUID",
        ));
    }
    if body.install.as_ref().is_some_and(|v| !v.is_null()) {
        return Err(ApiError::invalid(
            "install",
            "constraint",
            "emsim does not simulate OS installation: order with install null and use rescue mode",
        ));
    }
    if body.option_ids.as_ref().is_some_and(|o| !o.is_empty()) {
        return Err(ApiError::invalid(
            "option_ids",
            "constraint",
            "emsim does not take options at order time: add them with POST /servers/{server_id}/options/{option_id}",
        ));
    }
    let req = NewServer {
        offer_id: body.offer_id,
        project_id: body.project_id.filter(|p| !p.is_empty()),
        name: body.name,
        description: body.description,
        tags: body.tags.unwrap_or_default(),
        protected: body.protected.unwrap_or(false),
        user_data: body.user_data.filter(|u| !u.is_empty()),
    };
    let (mut world, mut faults, now) = state.world_and_faults();
    world.create_server(now, &zone, req, &mut faults).map(Json)
}

pub async fn get_server(
    State(state): State<AppState>,
    Path((zone, id)): Path<(String, String)>,
) -> ApiResult<Server> {
    check_zone(&zone)?;
    let (world, _) = state.world();
    world.server(&zone, &id).map(|s| Json(s.to_wire()))
}

/// Filters of `GET /servers`. Tags: every given tag must be present on the
/// server, compared exactly (the real semantics are unverified, so clients
/// filter again). Statuses: any of. Name: substring.
fn matches(server: &ServerRecord, params: &Params, tags: &[String], statuses: &[String]) -> bool {
    tags.iter().all(|t| server.tags.contains(t))
        && (statuses.is_empty() || statuses.iter().any(|s| s == server.status.as_str()))
        && params.get("name").is_none_or(|n| server.name.contains(n))
        && params
            .get("project_id")
            .is_none_or(|p| server.project_id == p)
        && params
            .get("organization_id")
            .is_none_or(|o| server.organization_id == o)
        && params
            .get("option_id")
            .is_none_or(|o| server.options.iter().any(|opt| opt.id == o))
}

pub async fn list_servers(
    State(state): State<AppState>,
    Path(zone): Path<String>,
    params: Params,
) -> ApiResult<ListServers> {
    check_zone(&zone)?;
    let page = params.page(50)?;
    let order = params.order_by(&["created_at_asc", "created_at_desc"])?;
    let tags = params.all("tags");
    let statuses = params.all("status");
    let (world, _) = state.world();
    let mut servers: Vec<Server> = world
        .servers(&zone)
        .into_iter()
        .filter(|s| matches(s, &params, &tags, &statuses))
        .map(ServerRecord::to_wire)
        .collect();
    if order == "created_at_desc" {
        servers.reverse();
    }
    let (servers, total_count) = page.slice(servers);
    Ok(Json(ListServers {
        total_count,
        servers,
    }))
}

pub async fn delete_server(
    State(state): State<AppState>,
    Path((zone, id)): Path<(String, String)>,
) -> ApiResult<Server> {
    check_zone(&zone)?;
    let (mut world, now) = state.world();
    world.delete(now, &zone, &id).map(Json)
}

#[derive(Debug, Default, Deserialize)]
pub struct BootBody {
    #[serde(default)]
    boot_type: Option<String>,
    #[serde(default)]
    ssh_key_ids: Option<Vec<String>>,
}

pub async fn reboot_server(
    state: State<AppState>,
    path: Path<(String, String)>,
    body: ApiJson<BootBody>,
) -> ApiResult<Server> {
    boot(state, path, body, Request::Reboot).await
}

pub async fn start_server(
    state: State<AppState>,
    path: Path<(String, String)>,
    body: ApiJson<BootBody>,
) -> ApiResult<Server> {
    boot(state, path, body, Request::Start).await
}

async fn boot(
    State(state): State<AppState>,
    Path((zone, id)): Path<(String, String)>,
    ApiJson(body): ApiJson<BootBody>,
    request: Request,
) -> ApiResult<Server> {
    check_zone(&zone)?;
    let boot_type = BootType::parse(body.boot_type.as_deref())?;
    let (mut world, now) = state.world();
    world
        .boot(
            now,
            &zone,
            &id,
            request,
            boot_type,
            body.ssh_key_ids.unwrap_or_default(),
        )
        .map(Json)
}

pub async fn stop_server(
    State(state): State<AppState>,
    Path((zone, id)): Path<(String, String)>,
    ApiJson(_): ApiJson<Value>,
) -> ApiResult<Server> {
    check_zone(&zone)?;
    let (mut world, now) = state.world();
    world.stop(now, &zone, &id).map(Json)
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct UpdateServerBody {
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    tags: Option<Vec<String>>,
    #[serde(default)]
    protected: Option<bool>,
    #[serde(default)]
    user_data: Option<String>,
}

pub async fn update_server(
    State(state): State<AppState>,
    Path((zone, id)): Path<(String, String)>,
    ApiJson(body): ApiJson<UpdateServerBody>,
) -> ApiResult<Server> {
    check_zone(&zone)?;
    if body.name.as_deref() == Some("") {
        return Err(ApiError::invalid("name", "constraint", "must not be empty"));
    }
    let patch = ServerPatch {
        name: body.name,
        description: body.description,
        tags: body.tags,
        protected: body.protected,
        user_data: body.user_data,
    };
    let (mut world, now) = state.world();
    world.update(now, &zone, &id, patch).map(Json)
}

#[derive(Debug, Deserialize)]
pub struct InstallBody {
    #[serde(default)]
    os_id: String,
    #[serde(default)]
    hostname: String,
    #[serde(default)]
    ssh_key_ids: Option<Vec<String>>,
    #[serde(default)]
    user: Option<String>,
    /// Accepted and not kept: nothing in the simulation reads them.
    #[serde(default, rename = "password")]
    _password: Option<String>,
    #[serde(default, rename = "service_user")]
    _service_user: Option<String>,
    #[serde(default, rename = "service_password")]
    _service_password: Option<String>,
    #[serde(default, rename = "partitioning_schema")]
    _partitioning_schema: Option<Value>,
    #[serde(default, rename = "user_data")]
    _user_data: Option<Value>,
}

pub async fn install_server(
    State(state): State<AppState>,
    Path((zone, id)): Path<(String, String)>,
    ApiJson(body): ApiJson<InstallBody>,
) -> ApiResult<Server> {
    check_zone(&zone)?;
    if body.os_id.is_empty() {
        return Err(ApiError::invalid("os_id", "required", "the OS to install"));
    }
    if body.hostname.is_empty() {
        return Err(ApiError::invalid(
            "hostname",
            "required",
            "the server's hostname",
        ));
    }
    let req = InstallRequest {
        os_id: body.os_id,
        hostname: body.hostname,
        ssh_key_ids: body.ssh_key_ids.unwrap_or_default(),
        user: body.user.filter(|u| !u.is_empty()),
    };
    let (mut world, now) = state.world();
    world.install(now, &zone, &id, req).map(Json)
}

pub async fn list_server_events(
    State(state): State<AppState>,
    Path((zone, id)): Path<(String, String)>,
    params: Params,
) -> ApiResult<ListServerEvents> {
    check_zone(&zone)?;
    let page = params.page(50)?;
    let order = params.order_by(&["created_at_asc", "created_at_desc"])?;
    let (world, _) = state.world();
    let mut events = world.server(&zone, &id)?.events_wire();
    if order == "created_at_desc" {
        events.reverse();
    }
    let (events, total_count) = page.slice(events);
    Ok(Json(ListServerEvents {
        total_count,
        events,
    }))
}

pub async fn migrate_monthly(
    State(state): State<AppState>,
    Path((zone, id)): Path<(String, String)>,
) -> ApiResult<Server> {
    check_zone(&zone)?;
    let (mut world, now) = state.world();
    world.migrate_monthly(now, &zone, &id).map(Json)
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AddOptionBody {
    #[serde(default)]
    expires_at: Option<String>,
}

pub async fn add_option(
    State(state): State<AppState>,
    Path((zone, id, option_id)): Path<(String, String, String)>,
    ApiJson(body): ApiJson<AddOptionBody>,
) -> ApiResult<Server> {
    check_zone(&zone)?;
    if let Some(at) = body.expires_at.as_deref()
        && chrono::DateTime::parse_from_rfc3339(at).is_err()
    {
        return Err(ApiError::invalid(
            "expires_at",
            "format",
            "an RFC 3339 time",
        ));
    }
    let (mut world, now) = state.world();
    world
        .add_option(now, &zone, &id, &option_id, body.expires_at)
        .map(Json)
}

pub async fn delete_option(
    State(state): State<AppState>,
    Path((zone, id, option_id)): Path<(String, String, String)>,
) -> ApiResult<Server> {
    check_zone(&zone)?;
    let (mut world, now) = state.world();
    world.delete_option(now, &zone, &id, &option_id).map(Json)
}

pub async fn list_options(
    State(state): State<AppState>,
    Path(zone): Path<String>,
    params: Params,
) -> ApiResult<ListOptions> {
    check_zone(&zone)?;
    let page = params.page(50)?;
    let name = params.get("name");
    let (world, _) = state.world();
    // `offer_id` is accepted: every seeded option is available with every offer.
    if let Some(offer_id) = params.get("offer_id")
        && world.offer(&zone, offer_id).is_none()
    {
        return Err(ApiError::NotFound {
            resource: "baremetal_offer".into(),
            resource_id: offer_id.into(),
        });
    }
    let options: Vec<OptionInfo> = world
        .options(&zone)
        .into_iter()
        .filter(|o| name.is_none_or(|n| o.name.to_lowercase().contains(&n.to_lowercase())))
        .collect();
    let (options, total_count) = page.slice(options);
    Ok(Json(ListOptions {
        total_count,
        options,
    }))
}

pub async fn get_option(
    State(state): State<AppState>,
    Path((zone, id)): Path<(String, String)>,
) -> ApiResult<OptionInfo> {
    check_zone(&zone)?;
    let (world, _) = state.world();
    world
        .options(&zone)
        .into_iter()
        .find(|o| o.id == id)
        .map(Json)
        .ok_or(ApiError::NotFound {
            resource: "baremetal_option".into(),
            resource_id: id,
        })
}

pub async fn list_os(
    State(state): State<AppState>,
    Path(zone): Path<String>,
    params: Params,
) -> ApiResult<ListOs> {
    check_zone(&zone)?;
    let page = params.page(50)?;
    let (world, _) = state.world();
    if let Some(offer_id) = params.get("offer_id")
        && world.offer(&zone, offer_id).is_none()
    {
        return Err(ApiError::NotFound {
            resource: "baremetal_offer".into(),
            resource_id: offer_id.into(),
        });
    }
    let (os, total_count) = page.slice(world.os_list(&zone));
    Ok(Json(ListOs { total_count, os }))
}

pub async fn get_os(
    State(state): State<AppState>,
    Path((zone, id)): Path<(String, String)>,
) -> ApiResult<Os> {
    check_zone(&zone)?;
    let (world, _) = state.world();
    world
        .os_list(&zone)
        .into_iter()
        .find(|o| o.id == id)
        .map(Json)
        .ok_or(ApiError::NotFound {
            resource: "baremetal_os".into(),
            resource_id: id,
        })
}
