//! Polling with a deadline and a description, so a timeout says what never happened.

use std::future::Future;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};

/// Polls `check` every `every` until it returns `Ok(Some(v))`, or fails after
/// `timeout` with the last error or "still not ..." message.
pub async fn until<T, F, Fut>(
    what: &str,
    timeout: Duration,
    every: Duration,
    mut check: F,
) -> Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Option<T>>>,
{
    let start = Instant::now();
    let mut last_err = None;
    loop {
        match check().await {
            Ok(Some(v)) => {
                tracing::info!(
                    what,
                    elapsed_ms = start.elapsed().as_millis() as u64,
                    "condition met"
                );
                return Ok(v);
            }
            Ok(None) => {}
            Err(e) => last_err = Some(e),
        }
        if start.elapsed() > timeout {
            match last_err {
                Some(e) => {
                    bail!("timed out after {timeout:?} waiting for {what}: last error: {e:#}")
                }
                None => bail!("timed out after {timeout:?} waiting for {what}"),
            }
        }
        tokio::time::sleep(every).await;
    }
}
