//! The admin API the e2e harness uses: `GET /_talossim/servers` (the
//! records of `docs/simulator-contracts.md`, as a JSON array),
//! `POST /_talossim/reset`, and the faults (`POST`/`GET`/`DELETE
//! /_talossim/faults`, see `crate::faults`).

use std::sync::Arc;

use axum::extract::State;
use axum::extract::rejection::JsonRejection;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde_json::json;

use crate::faults::{Fault, FaultSpec};
use crate::manager::Simulator;
use crate::records::ServerRecord;

pub fn app(sim: Arc<Simulator>) -> Router {
    Router::new()
        .route("/_talossim/servers", get(servers))
        .route("/_talossim/reset", post(reset))
        .route(
            "/_talossim/faults",
            get(list_faults).post(add_fault).delete(clear_faults),
        )
        .with_state(sim)
}

async fn servers(State(sim): State<Arc<Simulator>>) -> Json<Vec<ServerRecord>> {
    Json(sim.records().await)
}

/// Powers everything off, forgets every server and clears the faults.
async fn reset(State(sim): State<Arc<Simulator>>) -> StatusCode {
    sim.reset().await;
    sim.faults().clear();
    StatusCode::NO_CONTENT
}

fn bad_request(message: String) -> Response {
    (StatusCode::BAD_REQUEST, Json(json!({ "message": message }))).into_response()
}

async fn add_fault(
    State(sim): State<Arc<Simulator>>,
    body: Result<Json<FaultSpec>, JsonRejection>,
) -> Response {
    let spec = match body {
        Ok(Json(spec)) => spec,
        Err(e) => return bad_request(e.body_text()),
    };
    match sim.faults().add(spec) {
        Ok(fault) => (StatusCode::CREATED, Json(fault)).into_response(),
        Err(e) => bad_request(e.to_string()),
    }
}

async fn list_faults(State(sim): State<Arc<Simulator>>) -> Json<Vec<Fault>> {
    Json(sim.faults().list())
}

async fn clear_faults(State(sim): State<Arc<Simulator>>) -> StatusCode {
    sim.faults().clear();
    StatusCode::NO_CONTENT
}
