//! Follows emsim's VMs by reading its admin list every `every`, and hands
//! the commands their changes mean to the same sink as the event stream.
//! emsim unreachable or answering an error: retried with backoff.

use std::time::Duration;

use super::listing::{Change, Listing, Tracker};
use crate::follower::EventSink;

const MIN_BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(5);
const TIMEOUT: Duration = Duration::from_secs(10);

#[derive(Debug, thiserror::Error)]
enum ListError {
    #[error("requesting: {0}")]
    Request(reqwest::Error),
    #[error("emsim answered {0}")]
    Status(reqwest::StatusCode),
    #[error("reading: {0}")]
    Read(reqwest::Error),
}

/// Follows `{emsim_url}/_emsim/instance/servers` forever.
pub async fn follow(emsim_url: &str, sink: &impl EventSink, every: Duration) {
    let url = format!(
        "{}/_emsim/instance/servers",
        emsim_url.trim_end_matches('/')
    );
    crate::install_crypto_provider();
    let client = match reqwest::Client::builder()
        .no_proxy()
        .timeout(TIMEOUT)
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "cannot build the HTTP client for the VM list");
            return;
        }
    };
    let mut tracker = Tracker::default();
    let mut backoff = MIN_BACKOFF;
    let mut failing = false;
    loop {
        match list(&client, &url).await {
            Ok(listing) => {
                if std::mem::take(&mut failing) {
                    tracing::info!(%url, "following emsim's VMs again");
                }
                backoff = MIN_BACKOFF;
                for change in tracker.changes(&listing.servers) {
                    match change {
                        Change::Command(command) => {
                            tracing::info!(command = command.kind(), server_id = %command.server_id(), "VM change");
                            sink.handle(command).await;
                        }
                        Change::Unreadable { server_id, error } => {
                            tracing::warn!(%server_id, %error, "skipping a VM")
                        }
                    }
                }
                tokio::time::sleep(every).await;
            }
            Err(e) => {
                failing = true;
                tracing::warn!(%url, error = %e, retry_in_ms = backoff.as_millis() as u64, "cannot list emsim's VMs");
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
            }
        }
    }
}

async fn list(client: &reqwest::Client, url: &str) -> Result<Listing, ListError> {
    let response = client.get(url).send().await.map_err(ListError::Request)?;
    if !response.status().is_success() {
        return Err(ListError::Status(response.status()));
    }
    response.json().await.map_err(ListError::Read)
}
