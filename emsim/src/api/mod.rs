//! The HTTP surface: the simulated Scaleway API behind one gate (counters, fault
//! injection, authentication, rate limiting, in that order) and the admin API.

mod admin;
mod baremetal;
mod baremetal_pn;
mod block;
pub mod extract;
mod iam;
mod instance;
mod instance_admin;
mod instance_pn;
mod ipam;
mod pn_admin;
mod vpc;

use std::time::Instant;

use axum::Router;
use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderValue, StatusCode, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodRouter, delete, get, patch, post, put};

use crate::error::ApiError;
use crate::faults::{HOLD_LIMIT, HttpOutcome};
use crate::state::AppState;

/// Counter status of a call held by a `timeout` fault: it got no answer.
pub const HELD_STATUS: u16 = 0;

const ZONE: &str = "/baremetal/v1/zones/{zone}";
const INSTANCE: &str = "/instance/v1/zones/{zone}";
const BLOCK: &str = "/block/v1/zones/{zone}";
const BAREMETAL_V3: &str = "/baremetal/v3/zones/{zone}";
const VPC: &str = "/vpc/v2/regions/{region}";
const IPAM: &str = "/ipam/v1/regions/{region}";

/// The simulated API endpoints, one entry per method and path template. The
/// same list names the endpoints for counters and faults.
fn api_routes() -> Vec<(&'static str, String, MethodRouter<AppState>)> {
    let mut routes = vec![
        ("GET", format!("{ZONE}/offers"), get(baremetal::list_offers)),
        (
            "GET",
            format!("{ZONE}/offers/{{offer_id}}"),
            get(baremetal::get_offer),
        ),
        (
            "GET",
            format!("{ZONE}/servers"),
            get(baremetal::list_servers),
        ),
        (
            "POST",
            format!("{ZONE}/servers"),
            post(baremetal::create_server),
        ),
        (
            "GET",
            format!("{ZONE}/servers/{{server_id}}"),
            get(baremetal::get_server),
        ),
        (
            "PATCH",
            format!("{ZONE}/servers/{{server_id}}"),
            patch(baremetal::update_server),
        ),
        (
            "DELETE",
            format!("{ZONE}/servers/{{server_id}}"),
            delete(baremetal::delete_server),
        ),
        (
            "POST",
            format!("{ZONE}/servers/{{server_id}}/install"),
            post(baremetal::install_server),
        ),
        (
            "GET",
            format!("{ZONE}/servers/{{server_id}}/events"),
            get(baremetal::list_server_events),
        ),
        (
            "POST",
            format!("{ZONE}/servers/{{server_id}}/migrate-offer-monthly"),
            post(baremetal::migrate_monthly),
        ),
        (
            "POST",
            format!("{ZONE}/servers/{{server_id}}/options/{{option_id}}"),
            post(baremetal::add_option),
        ),
        (
            "DELETE",
            format!("{ZONE}/servers/{{server_id}}/options/{{option_id}}"),
            delete(baremetal::delete_option),
        ),
        (
            "GET",
            format!("{ZONE}/options"),
            get(baremetal::list_options),
        ),
        (
            "GET",
            format!("{ZONE}/options/{{option_id}}"),
            get(baremetal::get_option),
        ),
        ("GET", format!("{ZONE}/os"), get(baremetal::list_os)),
        (
            "GET",
            format!("{ZONE}/os/{{os_id}}"),
            get(baremetal::get_os),
        ),
        (
            "POST",
            format!("{ZONE}/servers/{{server_id}}/reboot"),
            post(baremetal::reboot_server),
        ),
        (
            "POST",
            format!("{ZONE}/servers/{{server_id}}/start"),
            post(baremetal::start_server),
        ),
        (
            "POST",
            format!("{ZONE}/servers/{{server_id}}/stop"),
            post(baremetal::stop_server),
        ),
        (
            "GET",
            "/iam/v1alpha1/ssh-keys".into(),
            get(iam::list_ssh_keys),
        ),
        (
            "POST",
            "/iam/v1alpha1/ssh-keys".into(),
            post(iam::create_ssh_key),
        ),
        (
            "GET",
            "/iam/v1alpha1/ssh-keys/{ssh_key_id}".into(),
            get(iam::get_ssh_key),
        ),
        (
            "DELETE",
            "/iam/v1alpha1/ssh-keys/{ssh_key_id}".into(),
            delete(iam::delete_ssh_key),
        ),
    ];
    routes.extend(instance_routes());
    routes.extend(private_network_routes());
    routes
}

fn private_network_routes() -> Vec<(&'static str, String, MethodRouter<AppState>)> {
    let attachments = format!("{BAREMETAL_V3}/servers/{{server_id}}/private-networks");
    let nics = format!("{INSTANCE}/servers/{{server_id}}/private_nics");
    vec![
        (
            "GET",
            format!("{VPC}/private-networks"),
            get(vpc::list_private_networks),
        ),
        (
            "GET",
            format!("{VPC}/private-networks/{{private_network_id}}"),
            get(vpc::get_private_network),
        ),
        ("GET", format!("{IPAM}/ips"), get(ipam::list_ips)),
        ("POST", format!("{IPAM}/ips"), post(ipam::book_ip)),
        ("GET", format!("{IPAM}/ips/{{ip_id}}"), get(ipam::get_ip)),
        (
            "DELETE",
            format!("{IPAM}/ips/{{ip_id}}"),
            delete(ipam::release_ip),
        ),
        ("POST", attachments.clone(), post(baremetal_pn::attach)),
        ("PUT", attachments.clone(), put(baremetal_pn::set)),
        (
            "DELETE",
            format!("{attachments}/{{private_network_id}}"),
            delete(baremetal_pn::detach),
        ),
        (
            "GET",
            format!("{BAREMETAL_V3}/server-private-networks"),
            get(baremetal_pn::list),
        ),
        ("GET", nics.clone(), get(instance_pn::list)),
        ("POST", nics.clone(), post(instance_pn::create)),
        (
            "GET",
            format!("{nics}/{{private_nic_id}}"),
            get(instance_pn::get),
        ),
        (
            "DELETE",
            format!("{nics}/{{private_nic_id}}"),
            delete(instance_pn::delete),
        ),
    ]
}

fn instance_routes() -> Vec<(&'static str, String, MethodRouter<AppState>)> {
    let server = format!("{INSTANCE}/servers/{{server_id}}");
    vec![
        (
            "GET",
            format!("{INSTANCE}/products/servers"),
            get(instance::list_products),
        ),
        (
            "GET",
            format!("{INSTANCE}/products/servers/availability"),
            get(instance::list_availability),
        ),
        (
            "GET",
            format!("{INSTANCE}/servers"),
            get(instance::list_servers),
        ),
        (
            "POST",
            format!("{INSTANCE}/servers"),
            post(instance::create_server),
        ),
        ("GET", server.clone(), get(instance::get_server)),
        ("PATCH", server.clone(), patch(instance::update_server)),
        ("DELETE", server.clone(), delete(instance::delete_server)),
        (
            "POST",
            format!("{server}/action"),
            post(instance::server_action),
        ),
        (
            "GET",
            format!("{server}/user_data"),
            get(instance::list_user_data),
        ),
        (
            "GET",
            format!("{server}/user_data/{{key}}"),
            get(instance::get_user_data),
        ),
        (
            "PATCH",
            format!("{server}/user_data/{{key}}"),
            patch(instance::set_user_data),
        ),
        (
            "DELETE",
            format!("{server}/user_data/{{key}}"),
            delete(instance::delete_user_data),
        ),
        (
            "GET",
            format!("{INSTANCE}/images"),
            get(instance::list_images),
        ),
        (
            "GET",
            format!("{INSTANCE}/images/{{image_id}}"),
            get(instance::get_image),
        ),
        ("GET", format!("{INSTANCE}/ips"), get(instance::list_ips)),
        ("POST", format!("{INSTANCE}/ips"), post(instance::create_ip)),
        (
            "GET",
            format!("{INSTANCE}/ips/{{ip_id}}"),
            get(instance::get_ip),
        ),
        (
            "DELETE",
            format!("{INSTANCE}/ips/{{ip_id}}"),
            delete(instance::delete_ip),
        ),
        ("GET", format!("{BLOCK}/volumes"), get(block::list_volumes)),
        (
            "GET",
            format!("{BLOCK}/volumes/{{volume_id}}"),
            get(block::get_volume),
        ),
        (
            "PATCH",
            format!("{BLOCK}/volumes/{{volume_id}}"),
            patch(block::update_volume),
        ),
        (
            "DELETE",
            format!("{BLOCK}/volumes/{{volume_id}}"),
            delete(block::delete_volume),
        ),
    ]
}

/// `METHOD /path-template` of every simulated API endpoint.
pub fn endpoints() -> Vec<String> {
    api_routes()
        .into_iter()
        .map(|(m, p, _)| format!("{m} {p}"))
        .collect()
}

pub fn app(state: AppState) -> Router {
    let mut api = Router::new();
    for (_, path, handler) in api_routes() {
        api = api.route(&path, handler);
    }
    let api = api.route_layer(middleware::from_fn_with_state(state.clone(), gate));

    let admin = Router::new()
        .route("/_emsim/healthz", get(admin::healthz))
        .route("/_emsim/events", get(admin::events))
        .route("/_emsim/servers", get(admin::servers))
        .route("/_emsim/counters", get(admin::counters))
        .route("/_emsim/reset", post(admin::reset))
        .route("/_emsim/stock", put(admin::set_stock))
        .route("/_emsim/quota", put(admin::set_quota))
        .route(
            "/_emsim/faults",
            post(admin::add_fault)
                .get(admin::list_faults)
                .delete(admin::clear_faults),
        )
        .route(
            "/_emsim/rate-limit",
            get(admin::rate_limit).put(admin::set_rate_limit),
        )
        .route("/_emsim/clock", get(admin::clock))
        .route("/_emsim/clock/advance", post(admin::advance_clock))
        .merge(instance_admin::routes())
        .merge(pn_admin::routes());

    api.merge(admin).fallback(not_found).with_state(state)
}

async fn gate(
    State(state): State<AppState>,
    matched: MatchedPath,
    req: Request,
    next: Next,
) -> Response {
    let started = Instant::now();
    let endpoint = format!("{} {}", req.method(), matched.as_str());
    let server = crate::counters::server_of(&endpoint, req.uri().path()).map(str::to_string);
    // The lock is released before any injected delay.
    let fault = state
        .faults
        .lock()
        .expect("faults lock")
        .take_http(&endpoint);
    let mut answer = None;
    let mut lose_answer = false;
    if let Some(action) = fault {
        if !action.delay.is_zero() {
            tokio::time::sleep(action.delay).await;
        }
        match action.outcome {
            HttpOutcome::Answer(error) => answer = Some(error),
            HttpOutcome::PassThrough => {}
            HttpOutcome::LoseAnswer => lose_answer = true,
            HttpOutcome::Hold => {
                // Counted at once: the client usually gives up first, which
                // drops this future and nothing after the sleep runs.
                state
                    .counters
                    .lock()
                    .expect("counters lock")
                    .record(&endpoint, HELD_STATUS);
                tracing::info!(%endpoint, "injected timeout: holding the request");
                tokio::time::sleep(HOLD_LIMIT).await;
                return StatusCode::GATEWAY_TIMEOUT.into_response();
            }
        }
    }
    let admitted = answer
        .map_or(Ok(()), Err)
        .and_then(|()| state.authenticate(req.headers()))
        .and_then(|()| state.rate_limit(&endpoint));
    let response = match admitted {
        Ok(()) => {
            let page = requested_page(&req);
            let response = next.run(req).await;
            apply_list_faults(&state, &endpoint, page, response).await
        }
        Err(error) => error.into_response(),
    };
    if lose_answer {
        // The handler acted; its answer never leaves (counted as held).
        state
            .counters
            .lock()
            .expect("counters lock")
            .record(&endpoint, HELD_STATUS);
        tracing::info!(%endpoint, status = %response.status(), "injected lost answer: holding the handler's answer");
        tokio::time::sleep(HOLD_LIMIT).await;
        return StatusCode::GATEWAY_TIMEOUT.into_response();
    }
    // The API's `Date` is its own clock: the simulated one, like every
    // timestamp in its bodies (clients that measure billing periods against
    // `created_at` read the API's time from it).
    let mut response = response;
    if let Ok(date) = HeaderValue::from_str(
        &state
            .clock
            .now()
            .format("%a, %d %b %Y %H:%M:%S GMT")
            .to_string(),
    ) {
        response.headers_mut().insert(header::DATE, date);
    }
    let status = response.status().as_u16();
    let mut counters = state.counters.lock().expect("counters lock");
    counters.record(&endpoint, status);
    if let Some(server) = &server {
        counters.record_for_server(server, &endpoint, status);
    }
    drop(counters);
    tracing::debug!(%endpoint, status, elapsed_ms = started.elapsed().as_millis() as u64, "api call");
    response
}

/// The `page` a list call asks for (1 when absent or unreadable: the handler
/// refuses an unreadable one with a 400 that no list fault touches).
fn requested_page(req: &Request) -> u64 {
    let query = req.uri().query().unwrap_or("");
    form_urlencoded::parse(query.as_bytes())
        .filter(|(k, v)| k == "page" && !v.is_empty())
        .last()
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or(1)
}

/// Lets the list faults armed on `endpoint` rewrite a 200 answer. Answers
/// of endpoints without a list fault are passed on untouched (not buffered).
async fn apply_list_faults(
    state: &AppState,
    endpoint: &str,
    page: u64,
    response: Response,
) -> Response {
    if response.status() != StatusCode::OK
        || !state.faults.lock().expect("faults lock").has_list(endpoint)
    {
        return response;
    }
    let (parts, body) = response.into_parts();
    let bytes = match axum::body::to_bytes(body, usize::MAX).await {
        Ok(bytes) => bytes,
        Err(error) => {
            tracing::warn!(%endpoint, %error, "reading a list answer for a list fault");
            return StatusCode::INTERNAL_SERVER_ERROR.into_response();
        }
    };
    let Ok(mut value) = serde_json::from_slice::<serde_json::Value>(&bytes) else {
        return Response::from_parts(parts, axum::body::Body::from(bytes));
    };
    let effects = state
        .faults
        .lock()
        .expect("faults lock")
        .take_list(endpoint, page);
    let Some(effects) = effects else {
        return Response::from_parts(parts, axum::body::Body::from(bytes));
    };
    effects.apply(&mut value);
    tracing::info!(%endpoint, page, drop = effects.drop, total_delta = effects.total_delta,
        "injected list fault");
    // The Instance API's lists carry their total in a header, kept (or
    // moved by the fault) with the others.
    let mut response = (StatusCode::OK, axum::Json(value)).into_response();
    for (name, value) in &parts.headers {
        if name == header::CONTENT_LENGTH {
            continue;
        }
        let value = match (
            name.as_str(),
            value.to_str().ok().and_then(|v| v.parse().ok()),
        ) {
            ("x-total-count", Some(total)) => HeaderValue::from(effects.moved_total(total)),
            _ => value.clone(),
        };
        response.headers_mut().insert(name.clone(), value);
    }
    response
}

/// Unknown paths answer like the real gateway, and are counted so that a test can
/// see a client calling something emsim does not simulate.
async fn not_found(State(state): State<AppState>, req: Request) -> Response {
    let endpoint = format!("{} (unmatched) {}", req.method(), req.uri().path());
    tracing::warn!(%endpoint, "call to an unknown endpoint");
    let response = ApiError::server_not_found().into_response();
    state
        .counters
        .lock()
        .expect("counters lock")
        .record(&endpoint, 404);
    response
}
