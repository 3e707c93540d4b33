//! emsim: a simulator of the Scaleway Elastic Metal v1 and IAM SSH-key APIs for
//! tests, with a simulated clock, an event stream for talos-sim and an admin API
//! (see `emsim/README.md`).

#![forbid(unsafe_code)]

pub mod api;
pub mod catalog;
pub mod clock;
pub mod counters;
pub mod error;
pub mod events;
pub mod faults;
pub mod instance;
pub mod model;
pub mod pn;
pub mod ratelimit;
pub mod sim;
pub mod ssh_key;
pub mod state;
pub mod timings;

pub use api::app;
pub use state::{AppState, Config};

/// Serves `state` on `listener` until the future is dropped, with the ticker
/// that fires transitions on time.
pub async fn serve(listener: tokio::net::TcpListener, state: AppState) -> std::io::Result<()> {
    let ticker = state.spawn_ticker();
    let result = axum::serve(listener, app(state)).await;
    ticker.abort();
    result
}
