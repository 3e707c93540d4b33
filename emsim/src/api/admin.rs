//! `/_emsim/...`: records, counters, controls and the event stream for the test
//! harness and talos-sim. No authentication.

use std::convert::Infallible;

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use tokio_stream::StreamExt;
use tokio_stream::wrappers::BroadcastStream;

use super::endpoints;
use super::extract::{ApiJson, Params, check_zone};
use crate::catalog::{Stock, ZONES};
use crate::clock::{format_time, secs};
use crate::counters::Counters;
use crate::error::ApiError;
use crate::faults::{Fault, FaultSpec};
use crate::model::Server;
use crate::sim::{BootRecord, Pending, ServerRecord};
use crate::state::AppState;

/// A server as `GET /servers/{id}` returns it (or last returned it, once
/// deleted), plus what only the simulator knows.
#[derive(Serialize)]
struct AdminServer<'a> {
    #[serde(flatten)]
    server: Server,
    address: String,
    powered_on: bool,
    boot_history: &'a [BootRecord],
    pending: Option<&'a Pending>,
    deleted_at: Option<String>,
}

impl<'a> From<&'a ServerRecord> for AdminServer<'a> {
    fn from(s: &'a ServerRecord) -> Self {
        Self {
            server: s.to_wire(),
            address: s.address.to_string(),
            powered_on: s.powered_on.is_some(),
            boot_history: &s.boot_history,
            pending: s.pending.as_ref(),
            deleted_at: s.deleted_at.map(format_time),
        }
    }
}

/// Live servers of every zone; `?include_deleted=true` adds the deleted ones.
pub async fn servers(State(state): State<AppState>, params: Params) -> Json<Value> {
    let include_deleted = params.get("include_deleted") == Some("true");
    let (world, _) = state.world();
    let servers: Vec<AdminServer> = world
        .all_servers()
        .into_iter()
        .filter(|s| include_deleted || s.deleted_at.is_none())
        .map(AdminServer::from)
        .collect();
    Json(json!({ "servers": servers }))
}

pub async fn counters(State(state): State<AppState>) -> Json<Counters> {
    Json(state.counters.lock().expect("counters lock").clone())
}

pub async fn reset(State(state): State<AppState>) -> StatusCode {
    state.reset();
    tracing::info!("simulator reset");
    StatusCode::NO_CONTENT
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct StockBody {
    zone: String,
    /// Offer id or name (by name: the hourly offer and its monthly twin).
    offer: String,
    stock: Stock,
}

pub async fn set_stock(
    State(state): State<AppState>,
    ApiJson(body): ApiJson<StockBody>,
) -> Result<Json<Value>, ApiError> {
    check_zone(&body.zone)?;
    let (mut world, _) = state.world();
    match world.set_stock(&body.zone, &body.offer, body.stock) {
        0 => Err(ApiError::NotFound {
            resource: "baremetal_offer".into(),
            resource_id: body.offer,
        }),
        updated => Ok(Json(json!({ "updated": updated }))),
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct QuotaBody {
    /// Offer id, offer name or quota name.
    offer: String,
    /// `null`: unlimited.
    quota: Option<u64>,
}

pub async fn set_quota(
    State(state): State<AppState>,
    ApiJson(body): ApiJson<QuotaBody>,
) -> Result<StatusCode, ApiError> {
    let (mut world, _) = state.world();
    if world.set_quota(&body.offer, body.quota) {
        Ok(StatusCode::NO_CONTENT)
    } else {
        Err(ApiError::NotFound {
            resource: "baremetal_offer".into(),
            resource_id: body.offer,
        })
    }
}

pub async fn add_fault(
    State(state): State<AppState>,
    ApiJson(body): ApiJson<Value>,
) -> Result<(StatusCode, Json<Fault>), ApiError> {
    let spec = FaultSpec::from_json(body)?;
    let fault = state
        .faults
        .lock()
        .expect("faults lock")
        .add(spec, &endpoints(), ZONES)?;
    tracing::info!(fault = ?fault.spec, "fault armed");
    Ok((StatusCode::CREATED, Json(fault)))
}

pub async fn list_faults(State(state): State<AppState>) -> Json<Value> {
    let faults = state.faults.lock().expect("faults lock");
    Json(json!({ "faults": faults.list() }))
}

pub async fn clear_faults(State(state): State<AppState>) -> StatusCode {
    state.faults.lock().expect("faults lock").clear();
    StatusCode::NO_CONTENT
}

pub async fn clock(State(state): State<AppState>) -> Json<Value> {
    Json(json!({ "now": format_time(state.clock.now()), "time_scale": state.clock.scale() }))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AdvanceBody {
    seconds: f64,
}

pub async fn advance_clock(
    State(state): State<AppState>,
    ApiJson(body): ApiJson<AdvanceBody>,
) -> Result<Json<Value>, ApiError> {
    if !(body.seconds.is_finite() && body.seconds >= 0.0) {
        return Err(ApiError::invalid(
            "seconds",
            "constraint",
            "a non-negative number",
        ));
    }
    state.clock.advance(secs(body.seconds));
    let now = state.world().1;
    state.wake();
    Ok(Json(json!({ "now": format_time(now) })))
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RateLimitBody {
    /// Calls per second per endpoint; `null`: no limit.
    per_second: Option<f64>,
}

pub async fn rate_limit(State(state): State<AppState>) -> Json<Value> {
    Json(json!({ "per_second": state.rate_limit_per_second() }))
}

pub async fn set_rate_limit(
    State(state): State<AppState>,
    ApiJson(body): ApiJson<RateLimitBody>,
) -> Result<Json<Value>, ApiError> {
    state
        .set_rate_limit(body.per_second)
        .map_err(|reason| ApiError::invalid("per_second", "constraint", reason))?;
    tracing::info!(per_second = ?body.per_second, "rate limit set");
    Ok(Json(json!({ "per_second": body.per_second })))
}

pub async fn healthz() -> &'static str {
    "ok"
}

/// NDJSON: the `power_on` events of the servers that are on now, then live
/// events. A follower that falls too far behind is disconnected, and gets a
/// fresh snapshot when it reconnects.
pub async fn events(State(state): State<AppState>) -> Response {
    let (snapshot, rx) = state.world().0.subscribe();
    tracing::info!(replayed = snapshot.len(), "event follower connected");
    let live = BroadcastStream::new(rx).map_while(|item| match item {
        Ok(event) => Some(event),
        Err(lagged) => {
            tracing::warn!(error = %lagged, "event follower lagged, closing its stream");
            None
        }
    });
    let lines = tokio_stream::iter(snapshot)
        .chain(live)
        .map(|event| Ok::<_, Infallible>(Bytes::from(event.to_line())));
    (
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        Body::from_stream(lines),
    )
        .into_response()
}
