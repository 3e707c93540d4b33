//! The admin API the e2e harness reads: `GET /_talossim/servers` (the
//! records of `docs/simulator-contracts.md`, as a JSON array) and
//! `POST /_talossim/reset`.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use axum::routing::{get, post};
use axum::{Json, Router};

use crate::manager::Simulator;
use crate::records::ServerRecord;

pub fn app(sim: Arc<Simulator>) -> Router {
    Router::new()
        .route("/_talossim/servers", get(servers))
        .route("/_talossim/reset", post(reset))
        .with_state(sim)
}

async fn servers(State(sim): State<Arc<Simulator>>) -> Json<Vec<ServerRecord>> {
    Json(sim.records().await)
}

async fn reset(State(sim): State<Arc<Simulator>>) -> StatusCode {
    sim.reset().await;
    StatusCode::NO_CONTENT
}
