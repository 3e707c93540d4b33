//! The real Elastic Metal / IAM client over reqwest.
//!
//! Every wire error is classified here, once, into [`ApiError`] (house style §3).
//! Retryable errors are retried with jittered exponential backoff, within a
//! bounded number of attempts; non-idempotent calls (ordering a server,
//! rebooting) are only retried when the API certainly did not act on them.

use std::time::Duration;

use async_trait::async_trait;
use rand::Rng;
use reqwest::{Method, StatusCode};
use serde::de::DeserializeOwned;
use serde_json::{Value, json};
use tracing::{debug, warn};

use super::pacer::{self as pacing, Pacer, Turn};
use super::{
    ApiError, BootType, CreateServerRequest, ElasticMetal, Offer, Server, ServerFilter, SshKey,
    SubscriptionPeriod,
};

/// The largest page the API serves.
const PAGE_SIZE: u32 = 100;

/// The Scaleway secret key. Debug never prints it.
#[derive(Clone)]
pub struct SecretKey(String);

impl SecretKey {
    pub fn new(key: impl Into<String>) -> Self {
        SecretKey(key.into())
    }
}

impl std::fmt::Debug for SecretKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// Bounds of the retry loop: at most `max_attempts` tries in total, waiting a
/// random time in `[0, min(max_delay, base_delay * 2^n)]` between them ("full
/// jitter", so that many replicas do not retry in step).
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    pub max_attempts: u32,
    pub base_delay: Duration,
    pub max_delay: Duration,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        RetryPolicy {
            max_attempts: 5,
            base_delay: Duration::from_millis(200),
            max_delay: Duration::from_secs(5),
        }
    }
}

impl RetryPolicy {
    fn delay(&self, attempt: u32) -> Duration {
        let ceiling = self
            .base_delay
            .saturating_mul(2u32.saturating_pow(attempt))
            .min(self.max_delay);
        let millis = u64::try_from(ceiling.as_millis()).unwrap_or(u64::MAX);
        Duration::from_millis(rand::rng().random_range(0..=millis))
    }
}

#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// `https://api.scaleway.com`, or emsim's address in tests.
    pub api_url: String,
    pub secret_key: SecretKey,
    pub request_timeout: Duration,
    pub retry: RetryPolicy,
}

pub struct ScalewayClient {
    http: reqwest::Client,
    base: String,
    secret_key: SecretKey,
    retry: RetryPolicy,
    /// Calls per endpoint per second (`None`: unpaced).
    pacer: Option<Pacer>,
    request_timeout: Duration,
}

/// How long a call may wait for its turn when the client is paced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Patience {
    /// Calls made for a Karpenter RPC that must answer within seconds
    /// (Create's adopt-before-create lookup and order, List, Delete): a
    /// turn further away than [`SHORT_PATIENCE`] fails at once as
    /// throttled, and Karpenter calls again.
    Short,
    /// Calls of background loops that have nothing better to do than wait
    /// (the install engine's status reads and reboots, catalog and key
    /// reads): up to the request timeout.
    Long,
    /// The first attempt's turn was already taken by the caller (a read
    /// made only if idle); retries wait as [`Patience::Long`].
    Taken,
}

/// The longest wait for a turn of a [`Patience::Short`] call: well within
/// the bridge's 5 s bound on Create and Delete.
const SHORT_PATIENCE: Duration = Duration::from_secs(2);

/// Whether a call may be repeated after an answer that leaves it unclear if the
/// API acted (a timeout, a 5xx).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Idempotency {
    Idempotent,
    /// Retried only on errors that prove the call was not applied (429, 409
    /// transient state); a second POST /servers after a timeout could order a
    /// second server.
    Unsafe,
}

impl ScalewayClient {
    pub fn new(config: ClientConfig) -> Result<Self, ApiError> {
        // reqwest is built without a default rustls provider (the workspace
        // standardises on ring); installing it twice is a harmless no-op.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let http = reqwest::Client::builder()
            .timeout(config.request_timeout)
            .connect_timeout(config.request_timeout.min(Duration::from_secs(10)))
            .user_agent(concat!(
                "karpenter-provider-scaleway/",
                env!("CARGO_PKG_VERSION")
            ))
            .build()
            .map_err(|e| ApiError::Invalid(format!("building HTTP client: {e}")))?;
        Ok(ScalewayClient {
            http,
            base: config.api_url.trim_end_matches('/').to_string(),
            secret_key: config.secret_key,
            retry: config.retry,
            pacer: None,
            request_timeout: config.request_timeout,
        })
    }

    /// Paces the client: at most `per_second` calls per endpoint (all zones
    /// together), each waiting for its turn (see `pacer.rs`). `None` leaves
    /// it unpaced.
    pub fn with_pacing(mut self, per_second: Option<f64>) -> Self {
        self.pacer = per_second
            .filter(|r| r.is_finite() && *r > 0.0)
            .map(Pacer::new);
        self
    }

    /// Waits for the call's turn; `Err(Throttled)` when it is further away
    /// than the call's patience (nothing is sent).
    async fn wait_turn(&self, endpoint: &'static str, patience: Patience) -> Result<(), ApiError> {
        let Some(pacer) = &self.pacer else {
            return Ok(());
        };
        let limit = match patience {
            Patience::Short => SHORT_PATIENCE.min(self.request_timeout),
            Patience::Long | Patience::Taken => self.request_timeout,
        };
        let turn = pacer.turn(endpoint, limit).await;
        pacing::record(endpoint, turn);
        match turn {
            Turn::Refused => {
                debug!(
                    endpoint,
                    wait_limit_ms = limit.as_millis() as u64,
                    "Scaleway API call not sent: its turn is further away than the caller can wait"
                );
                Err(ApiError::Throttled)
            }
            Turn::Now | Turn::Waited(_) => Ok(()),
        }
    }

    #[allow(clippy::too_many_arguments)]
    async fn call<T: DeserializeOwned>(
        &self,
        endpoint: &'static str,
        patience: Patience,
        method: Method,
        path: &str,
        query: &[(&str, String)],
        body: Option<&Value>,
        idempotency: Idempotency,
    ) -> Result<T, ApiError> {
        let url = format!("{}{}", self.base, path);
        let mut attempt = 0;
        loop {
            if !(attempt == 0 && patience == Patience::Taken) {
                self.wait_turn(endpoint, patience).await?;
            }
            let result = self.send_once(method.clone(), &url, query, body).await;
            if matches!(result, Err(ApiError::Throttled)) {
                pacing::record_throttled(endpoint);
            }
            let err = match result {
                Ok(bytes) => {
                    return serde_json::from_slice(&bytes).map_err(|e| {
                        ApiError::Unavailable(format!("decoding {method} {path}: {e}"))
                    });
                }
                Err(err) => err,
            };
            attempt += 1;
            let may_retry = match idempotency {
                Idempotency::Idempotent => err.is_retryable(),
                Idempotency::Unsafe => {
                    matches!(err, ApiError::Throttled | ApiError::TransientState(_))
                }
            };
            if !may_retry || attempt >= self.retry.max_attempts {
                debug!(%method, path, attempt, error = %err, "Scaleway API call failed");
                return Err(err);
            }
            let delay = self.retry.delay(attempt - 1);
            warn!(%method, path, attempt, error = %err, delay_ms = delay.as_millis() as u64,
                "retrying Scaleway API call");
            tokio::time::sleep(delay).await;
        }
    }

    /// One HTTP exchange: the body of a 2xx answer, or the classified error.
    async fn send_once(
        &self,
        method: Method,
        url: &str,
        query: &[(&str, String)],
        body: Option<&Value>,
    ) -> Result<bytes::Bytes, ApiError> {
        let mut req = self
            .http
            .request(method, url)
            .header("X-Auth-Token", &self.secret_key.0)
            .query(query);
        if let Some(body) = body {
            req = req.json(body);
        }
        let resp = req.send().await.map_err(transport_error)?;
        let status = resp.status();
        let bytes = resp.bytes().await.map_err(transport_error)?;
        if status.is_success() {
            Ok(bytes)
        } else {
            Err(classify(status, &bytes))
        }
    }

    /// Reads every page of a list endpoint. The answer is complete or an error:
    /// a short page, a page past the end or a `total_count` that moves while
    /// paging all fail, because callers (List, GC) must never see a partial list.
    async fn list_all<T: DeserializeOwned>(
        &self,
        endpoint: &'static str,
        patience: Patience,
        path: &str,
        query: &[(&str, String)],
        field: &str,
    ) -> Result<Vec<T>, ApiError> {
        let mut items: Vec<T> = Vec::new();
        let mut expected: Option<u64> = None;
        let mut page: u32 = 1;
        loop {
            let mut q: Vec<(&str, String)> = query.to_vec();
            q.push(("page", page.to_string()));
            q.push(("page_size", PAGE_SIZE.to_string()));
            let body: Value = self
                .call(
                    endpoint,
                    patience,
                    Method::GET,
                    path,
                    &q,
                    None,
                    Idempotency::Idempotent,
                )
                .await?;
            let total = body
                .get("total_count")
                .and_then(Value::as_u64)
                .ok_or_else(|| inconsistent(path, "answer without total_count"))?;
            if *expected.get_or_insert(total) != total {
                return Err(inconsistent(path, "total_count changed while paging"));
            }
            let page_items = match body.get(field) {
                Some(Value::Array(a)) => a.clone(),
                Some(Value::Null) | None => Vec::new(),
                Some(_) => return Err(inconsistent(path, "list field is not an array")),
            };
            let got = page_items.len();
            for item in page_items {
                items
                    .push(serde_json::from_value(item).map_err(|e| {
                        ApiError::Unavailable(format!("decoding {path} item: {e}"))
                    })?);
            }
            let have = items.len() as u64;
            if have == total {
                return Ok(items);
            }
            if have > total {
                return Err(inconsistent(path, "more items than total_count"));
            }
            if got == 0 {
                return Err(inconsistent(
                    path,
                    "page missing before total_count was reached",
                ));
            }
            page += 1;
        }
    }
}

fn inconsistent(path: &str, what: &str) -> ApiError {
    ApiError::Inconsistent(format!("pagination of {path}: {what}"))
}

fn transport_error(err: reqwest::Error) -> ApiError {
    if err.is_timeout() {
        ApiError::Timeout("no answer within the request timeout".into())
    } else if err.is_connect() {
        ApiError::Unavailable("connection failed".into())
    } else {
        // The URL (and never the token, which is a header) may appear here.
        ApiError::Unavailable(format!("transport error: {err}"))
    }
}

/// Maps an error answer to [`ApiError`]: by the body's `type` when present (the
/// SDK's rule), otherwise by the status code. Baremetal errors often carry only
/// `{"message": ...}`.
pub fn classify(status: StatusCode, body: &[u8]) -> ApiError {
    let json: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let kind = json.get("type").and_then(Value::as_str).unwrap_or("");
    let message = describe(&json, status);
    match kind {
        "not_found" => return ApiError::NotFound(message),
        "invalid_arguments" | "precondition_failed" => return ApiError::Invalid(message),
        "permissions_denied" | "denied_authentication" => return ApiError::Unauthorized(message),
        "transient_state" => return ApiError::TransientState(message),
        "quotas_exceeded" => return ApiError::QuotaExceeded(message),
        "out_of_stock" => return ApiError::OutOfStock(message),
        "too_many_requests" => return ApiError::Throttled,
        _ => {}
    }
    match status.as_u16() {
        404 => ApiError::NotFound(message),
        // Reboot/start/stop while the server is still being delivered.
        400 if message.to_ascii_lowercase().contains("not delivered") => {
            ApiError::TransientState(message)
        }
        401 | 403 => ApiError::Unauthorized(message),
        409 => ApiError::TransientState(message),
        429 => ApiError::Throttled,
        500..=599 => ApiError::Unavailable(message),
        _ => ApiError::Invalid(message),
    }
}

fn describe(json: &Value, status: StatusCode) -> String {
    let message = json
        .get("message")
        .and_then(Value::as_str)
        .map(str::to_string)
        .unwrap_or_else(|| format!("HTTP {}", status.as_u16()));
    let extra: Vec<String> = [
        "resource",
        "resource_id",
        "current_state",
        "precondition",
        "help_message",
    ]
    .iter()
    .filter_map(|k| {
        json.get(*k)
            .and_then(Value::as_str)
            .map(|v| format!("{k}={v}"))
    })
    .collect();
    let details = json
        .get("details")
        .filter(|d| d.as_array().is_some_and(|a| !a.is_empty()))
        .map(|d| format!(" details={d}"))
        .unwrap_or_default();
    if extra.is_empty() {
        format!("{message}{details}")
    } else {
        format!("{message} ({}){details}", extra.join(", "))
    }
}

/// Path segments come from configuration and from providerIDs written into the
/// cluster; refuse anything that could change the path.
fn segment(value: &str) -> Result<&str, ApiError> {
    let ok = !value.is_empty()
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_');
    if ok {
        Ok(value)
    } else {
        Err(ApiError::Invalid(format!("invalid path segment {value:?}")))
    }
}

fn zone_path(zone: &str, rest: &str) -> Result<String, ApiError> {
    Ok(format!("/baremetal/v1/zones/{}{}", segment(zone)?, rest))
}

#[async_trait]
impl ElasticMetal for ScalewayClient {
    async fn list_offers(
        &self,
        zone: &str,
        period: SubscriptionPeriod,
    ) -> Result<Vec<Offer>, ApiError> {
        let path = zone_path(zone, "/offers")?;
        let offers: Vec<Offer> = self
            .list_all(
                "GET /offers",
                Patience::Long,
                &path,
                &[("subscription_period", period.as_str().into())],
                "offers",
            )
            .await?;
        // Filtered again: an offer of the other period would be priced wrong.
        Ok(offers
            .into_iter()
            .filter(|o| period.matches(&o.subscription_period))
            .collect())
    }

    async fn create_server(
        &self,
        zone: &str,
        req: &CreateServerRequest,
    ) -> Result<Server, ApiError> {
        let path = zone_path(zone, "/servers")?;
        let body = serde_json::to_value(req)
            .map_err(|e| ApiError::Invalid(format!("encoding create request: {e}")))?;
        self.call(
            "POST /servers",
            Patience::Short,
            Method::POST,
            &path,
            &[],
            Some(&body),
            Idempotency::Unsafe,
        )
        .await
    }

    async fn get_server(&self, zone: &str, id: &str) -> Result<Server, ApiError> {
        let path = zone_path(zone, &format!("/servers/{}", segment(id)?))?;
        self.call(
            "GET /servers/{server_id}",
            Patience::Long,
            Method::GET,
            &path,
            &[],
            None,
            Idempotency::Idempotent,
        )
        .await
    }

    async fn get_server_if_idle(&self, zone: &str, id: &str) -> Result<Option<Server>, ApiError> {
        const ENDPOINT: &str = "GET /servers/{server_id}";
        let path = zone_path(zone, &format!("/servers/{}", segment(id)?))?;
        if let Some(pacer) = &self.pacer {
            let turn = pacer.turn(ENDPOINT, Duration::ZERO).await;
            if turn == Turn::Refused {
                pacing::record_skipped(ENDPOINT);
                return Ok(None);
            }
        }
        self.call(
            ENDPOINT,
            Patience::Taken,
            Method::GET,
            &path,
            &[],
            None,
            Idempotency::Idempotent,
        )
        .await
        .map(Some)
    }

    async fn list_servers(
        &self,
        zone: &str,
        filter: &ServerFilter,
    ) -> Result<Vec<Server>, ApiError> {
        let path = zone_path(zone, "/servers")?;
        let mut query: Vec<(&str, String)> =
            filter.tags.iter().map(|t| ("tags", t.clone())).collect();
        if let Some(name) = &filter.name {
            query.push(("name", name.clone()));
        }
        if let Some(project) = &filter.project_id {
            query.push(("project_id", project.clone()));
        }
        let servers: Vec<Server> = self
            .list_all("GET /servers", Patience::Short, &path, &query, "servers")
            .await?;
        Ok(servers.into_iter().filter(|s| filter.matches(s)).collect())
    }

    async fn delete_server(&self, zone: &str, id: &str) -> Result<Server, ApiError> {
        let path = zone_path(zone, &format!("/servers/{}", segment(id)?))?;
        self.call(
            "DELETE /servers/{server_id}",
            Patience::Short,
            Method::DELETE,
            &path,
            &[],
            None,
            Idempotency::Idempotent,
        )
        .await
    }

    async fn reboot_server(
        &self,
        zone: &str,
        id: &str,
        boot_type: BootType,
        ssh_key_ids: &[String],
    ) -> Result<Server, ApiError> {
        let path = zone_path(zone, &format!("/servers/{}/reboot", segment(id)?))?;
        let keys = if ssh_key_ids.is_empty() {
            Value::Null
        } else {
            json!(ssh_key_ids)
        };
        let body = json!({ "boot_type": boot_type, "ssh_key_ids": keys });
        self.call(
            "POST /servers/{server_id}/reboot",
            Patience::Long,
            Method::POST,
            &path,
            &[],
            Some(&body),
            Idempotency::Unsafe,
        )
        .await
    }

    async fn list_ssh_keys(&self, project_id: &str) -> Result<Vec<SshKey>, ApiError> {
        self.list_all(
            "GET /iam/v1alpha1/ssh-keys",
            Patience::Long,
            "/iam/v1alpha1/ssh-keys",
            &[("project_id", project_id.to_string())],
            "ssh_keys",
        )
        .await
    }
}

#[cfg(test)]
#[path = "client_tests.rs"]
mod tests;
