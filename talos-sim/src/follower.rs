//! Follows emsim's NDJSON event stream, reconnecting with backoff, and hands
//! each event to a sink in order.

use std::future::Future;
use std::time::Duration;

use futures::StreamExt;

use crate::model::{Command, Event};

const MIN_BACKOFF: Duration = Duration::from_millis(200);
const MAX_BACKOFF: Duration = Duration::from_secs(5);

/// Receives the commands derived from events, one at a time.
pub trait EventSink {
    fn handle(&self, command: Command) -> impl Future<Output = ()> + Send;
}

#[derive(Debug, thiserror::Error)]
enum StreamError {
    #[error("connecting: {0}")]
    Connect(reqwest::Error),
    #[error("emsim answered {0}")]
    Status(reqwest::StatusCode),
    #[error("reading: {0}")]
    Read(reqwest::Error),
    #[error("stream closed by emsim")]
    Closed,
}

/// Follows `{emsim_url}/_emsim/events` forever.
pub async fn follow(emsim_url: &str, sink: &impl EventSink) {
    let url = format!("{}/_emsim/events", emsim_url.trim_end_matches('/'));
    crate::install_crypto_provider();
    let client = match reqwest::Client::builder()
        .no_proxy()
        .connect_timeout(Duration::from_secs(5))
        .build()
    {
        Ok(c) => c,
        Err(e) => {
            tracing::error!(error = %e, "cannot build the HTTP client for the event stream");
            return;
        }
    };
    let mut backoff = MIN_BACKOFF;
    loop {
        let mut delivered = false;
        let err = stream_once(&client, &url, sink, &mut delivered).await;
        if delivered {
            backoff = MIN_BACKOFF;
        }
        tracing::warn!(%url, error = %err, retry_in_ms = backoff.as_millis() as u64, "event stream interrupted");
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

async fn stream_once(
    client: &reqwest::Client,
    url: &str,
    sink: &impl EventSink,
    delivered: &mut bool,
) -> StreamError {
    let response = match client
        .get(url)
        .header("Accept", "application/x-ndjson")
        .send()
        .await
    {
        Ok(r) => r,
        Err(e) => return StreamError::Connect(e),
    };
    if !response.status().is_success() {
        return StreamError::Status(response.status());
    }
    tracing::info!(%url, "following emsim events");
    *delivered = true;
    let mut body = response.bytes_stream();
    let mut buffer = Vec::new();
    loop {
        let chunk = match body.next().await {
            Some(Ok(chunk)) => chunk,
            Some(Err(e)) => return StreamError::Read(e),
            None => return StreamError::Closed,
        };
        buffer.extend_from_slice(&chunk);
        while let Some(end) = buffer.iter().position(|b| *b == b'\n') {
            let line: Vec<u8> = buffer.drain(..=end).collect();
            deliver(&line[..line.len() - 1], sink).await;
        }
    }
}

async fn deliver(line: &[u8], sink: &impl EventSink) {
    if line.iter().all(u8::is_ascii_whitespace) {
        return;
    }
    let event: Event = match serde_json::from_slice(line) {
        Ok(e) => e,
        Err(e) => {
            tracing::warn!(error = %e, "skipping an unreadable event line");
            return;
        }
    };
    match event.command() {
        Ok(command) => {
            tracing::info!(seq = event.seq, kind = %event.kind, server_id = %event.server.id, "event");
            sink.handle(command).await;
        }
        Err(e) => {
            tracing::warn!(seq = event.seq, server_id = %event.server.id, error = %e, "skipping event")
        }
    }
}
