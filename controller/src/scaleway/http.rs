//! The HTTP machinery every Scaleway API client of this crate shares: one
//! reqwest client with the secret key, timeouts, the retry policy, 429
//! handling, per-endpoint pacing, error classification and all-or-error
//! paging. The Elastic Metal/IAM calls (`client.rs`), the Instance calls and
//! the Block calls (`instance/client.rs`) are thin lists of requests on top.
//!
//! Retryable errors are retried with jittered exponential backoff, within a
//! bounded number of attempts; non-idempotent calls (ordering a server,
//! rebooting, power actions) are only retried when the API certainly did not
//! act on them.

use std::sync::Arc;
use std::time::{Duration, Instant};

use rand::Rng;
use reqwest::Method;
use reqwest::header::{CONTENT_TYPE, HeaderMap};
use serde::de::DeserializeOwned;
use serde_json::Value;
use tracing::{debug, warn};

use super::ApiError;
use super::errors::classify;
use super::pacer::{Pacer, Turn};
use super::telemetry::{ApiTelemetry, api_telemetry};

/// The largest page the APIs serve (`page_size` of EM/IAM, `per_page` of
/// Instance).
const PAGE_SIZE: u32 = 100;

/// The Scaleway secret key. Debug never prints it.
#[derive(Clone, PartialEq, Eq)]
pub struct SecretKey(String);

impl SecretKey {
    pub fn new(key: impl Into<String>) -> Self {
        SecretKey(key.into())
    }

    /// The key itself, for the code that merges configuration layers
    /// (`config::profile`); never format it.
    pub(crate) fn expose(&self) -> &str {
        &self.0
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

/// One client for every Scaleway API the provider calls (Elastic Metal, IAM,
/// Instance, Block): it implements each API's narrow trait, and they share
/// the connection pool and the pace.
pub struct ScalewayClient {
    http: reqwest::Client,
    base: String,
    secret_key: SecretKey,
    retry: RetryPolicy,
    /// Calls per endpoint per second (`None`: unpaced).
    pacer: Option<Pacer>,
    request_timeout: Duration,
    /// Where calls, retries and pacing are counted.
    telemetry: Arc<ApiTelemetry>,
}

/// Which API answers: the error bodies and the paging differ between them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Api {
    ElasticMetal,
    Iam,
    Instance,
    Block,
    /// VPC v2 (Private Networks), regional.
    Vpc,
    /// IPAM v1 (private addresses), regional.
    Ipam,
}

/// How long a call may wait for its turn when the client is paced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Patience {
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
pub(super) enum Idempotency {
    Idempotent,
    /// Retried only on errors that prove the call was not applied (429, 409
    /// transient state); a second POST /servers after a timeout could order a
    /// second server.
    Unsafe,
}

/// A request body.
#[derive(Clone, Copy)]
pub(super) enum Body<'a> {
    Empty,
    Json(&'a Value),
    /// Sent raw as `text/plain` (Instance user data, which holds a
    /// bootstrap token: Debug never prints it).
    Text(&'a str),
}

impl std::fmt::Debug for Body<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Body::Empty => f.write_str("Empty"),
            Body::Json(v) => f.debug_tuple("Json").field(v).finish(),
            Body::Text(t) => write!(f, "Text(<{} bytes>)", t.len()),
        }
    }
}

/// One API call, as the retry loop repeats it.
#[derive(Debug, Clone, Copy)]
pub(super) struct Request<'a> {
    pub api: Api,
    /// The pacing key and metric label, e.g. `GET /servers/{server_id}`.
    pub endpoint: &'static str,
    pub patience: Patience,
    pub method: &'a Method,
    pub path: &'a str,
    pub query: &'a [(&'a str, String)],
    pub body: Body<'a>,
    pub idempotency: Idempotency,
}

impl<'a> Request<'a> {
    /// An idempotent call without a body or query.
    pub fn new(
        api: Api,
        endpoint: &'static str,
        patience: Patience,
        method: &'a Method,
        path: &'a str,
    ) -> Self {
        Request {
            api,
            endpoint,
            patience,
            method,
            path,
            query: &[],
            body: Body::Empty,
            idempotency: Idempotency::Idempotent,
        }
    }

    pub fn query(mut self, query: &'a [(&'a str, String)]) -> Self {
        self.query = query;
        self
    }

    pub fn body(mut self, body: Body<'a>) -> Self {
        self.body = body;
        self
    }

    pub fn unsafe_to_repeat(mut self) -> Self {
        self.idempotency = Idempotency::Unsafe;
        self
    }
}

/// A successful answer.
pub(super) struct Reply {
    pub headers: HeaderMap,
    pub bytes: bytes::Bytes,
}

/// Where a list endpoint says how many items it holds in all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Paging {
    /// Elastic Metal and IAM: `page_size`, the body's `total_count`.
    BodyTotal,
    /// Instance: `per_page`, no `total_count` in the body, only the
    /// `X-Total-Count` header.
    HeaderTotal,
    /// Instance lists whose SDK response type carries a `total_count`
    /// (`private_nics`): `per_page`, the body's `total_count` or else the
    /// `X-Total-Count` header; both present and different is inconsistent.
    BodyOrHeader,
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
            telemetry: api_telemetry().clone(),
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

    /// Counts into `telemetry` instead of the process-wide counters.
    pub fn with_telemetry(mut self, telemetry: Arc<ApiTelemetry>) -> Self {
        self.telemetry = telemetry;
        self
    }

    /// Takes a turn of `endpoint` only if one is free now: `false` (and the
    /// skip counted) when the caller would have to wait. Unpaced: always.
    pub(super) async fn idle_turn(&self, endpoint: &'static str) -> bool {
        let Some(pacer) = &self.pacer else {
            return true;
        };
        if pacer.turn(endpoint, Duration::ZERO).await == Turn::Refused {
            self.telemetry.skipped(endpoint);
            return false;
        }
        true
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
        self.telemetry.paced(endpoint, turn);
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

    /// Sends the request until it succeeds, fails for good, or runs out of
    /// attempts; the answer of a 2xx, whatever its body.
    pub(super) async fn send(&self, req: &Request<'_>) -> Result<Reply, ApiError> {
        let url = format!("{}{}", self.base, req.path);
        let method = req.method;
        let path = req.path;
        let mut attempt = 0;
        loop {
            if !(attempt == 0 && req.patience == Patience::Taken) {
                self.wait_turn(req.endpoint, req.patience).await?;
            }
            let started = Instant::now();
            let outcome = self.send_once(req, &url).await;
            self.telemetry.attempt(
                req.api,
                req.endpoint,
                started.elapsed(),
                outcome.as_ref().map(|_| ()),
            );
            let err = match outcome {
                Ok(reply) => return Ok(reply),
                Err(err) => err,
            };
            attempt += 1;
            let may_retry = match req.idempotency {
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
            self.telemetry.retry(req.api, req.endpoint);
            tokio::time::sleep(delay).await;
        }
    }

    /// [`Self::send`], the answer decoded as JSON.
    pub(super) async fn call<T: DeserializeOwned>(&self, req: &Request<'_>) -> Result<T, ApiError> {
        let reply = self.send(req).await?;
        serde_json::from_slice(&reply.bytes).map_err(|e| {
            ApiError::Unavailable(format!("decoding {} {}: {e}", req.method, req.path))
        })
    }

    /// One HTTP exchange: the answer of a 2xx, or the classified error.
    async fn send_once(&self, req: &Request<'_>, url: &str) -> Result<Reply, ApiError> {
        let mut builder = self
            .http
            .request(req.method.clone(), url)
            .header("X-Auth-Token", &self.secret_key.0)
            .query(req.query);
        builder = match req.body {
            Body::Empty => builder,
            Body::Json(body) => builder.json(body),
            Body::Text(text) => builder
                .header(CONTENT_TYPE, "text/plain")
                .body(text.to_string()),
        };
        let resp = builder.send().await.map_err(transport_error)?;
        let status = resp.status();
        let headers = resp.headers().clone();
        if let Some(date) = headers
            .get(reqwest::header::DATE)
            .and_then(|v| v.to_str().ok())
        {
            super::api_clock::observe(date);
        }
        let bytes = resp.bytes().await.map_err(transport_error)?;
        if status.is_success() {
            return Ok(Reply { headers, bytes });
        }
        let err = classify(req.api, status, &bytes);
        if err == ApiError::Throttled {
            self.telemetry.throttled(req.api, req.endpoint, &bytes);
        }
        Err(err)
    }

    /// Reads every page of a list endpoint whose items are the array
    /// `field`. The answer is complete or an error: a short page, a page past
    /// the end or a total that moves while paging all fail, because callers
    /// (List, GC) must never see a partial list.
    pub(super) async fn list_all<T: DeserializeOwned>(
        &self,
        req: Request<'_>,
        paging: Paging,
        field: &str,
    ) -> Result<Vec<T>, ApiError> {
        let path = req.path;
        self.collect_pages(req, paging, |body| match body.get(field) {
            Some(Value::Array(a)) => a.iter().map(|item| decode_item(path, item)).collect(),
            Some(Value::Null) | None => Ok(Vec::new()),
            Some(_) => Err(inconsistent(path, "list field is not an array")),
        })
        .await
    }

    /// Reads every page of a list endpoint whose items are the entries of
    /// the object `field` (the Instance catalog: `{"servers": {"<TYPE>":
    /// {...}}}`), with the checks of [`Self::list_all`]; an entry listed on
    /// two pages is an inconsistency too, since the count would then hide a
    /// missing one.
    pub(super) async fn list_map<T: DeserializeOwned>(
        &self,
        req: Request<'_>,
        paging: Paging,
        field: &str,
    ) -> Result<std::collections::BTreeMap<String, T>, ApiError> {
        let path = req.path;
        let entries = self
            .collect_pages(req, paging, |body| match body.get(field) {
                Some(Value::Object(m)) => m
                    .iter()
                    .map(|(k, v)| Ok((k.clone(), decode_item(path, v)?)))
                    .collect(),
                Some(Value::Null) | None => Ok(Vec::new()),
                Some(_) => Err(inconsistent(path, "list field is not an object")),
            })
            .await?;
        let mut map = std::collections::BTreeMap::new();
        for (key, value) in entries {
            if map.insert(key, value).is_some() {
                return Err(inconsistent(path, "an entry listed twice"));
            }
        }
        Ok(map)
    }

    async fn collect_pages<T>(
        &self,
        req: Request<'_>,
        paging: Paging,
        items_of: impl Fn(&Value) -> Result<Vec<T>, ApiError>,
    ) -> Result<Vec<T>, ApiError> {
        let path = req.path;
        let size_param = match paging {
            Paging::BodyTotal => "page_size",
            Paging::HeaderTotal | Paging::BodyOrHeader => "per_page",
        };
        let mut items: Vec<T> = Vec::new();
        let mut expected: Option<u64> = None;
        let mut page: u32 = 1;
        loop {
            let mut query: Vec<(&str, String)> = req.query.to_vec();
            query.push(("page", page.to_string()));
            query.push((size_param, PAGE_SIZE.to_string()));
            let reply = self.send(&req.query(&query)).await?;
            let body: Value = serde_json::from_slice(&reply.bytes)
                .map_err(|e| ApiError::Unavailable(format!("decoding GET {path}: {e}")))?;
            let total = match paging {
                Paging::BodyTotal => body
                    .get("total_count")
                    .and_then(Value::as_u64)
                    .ok_or_else(|| inconsistent(path, "answer without total_count"))?,
                Paging::HeaderTotal => header_total(&reply.headers)
                    .ok_or_else(|| inconsistent(path, "answer without X-Total-Count"))?,
                Paging::BodyOrHeader => {
                    let body_total = body.get("total_count").and_then(Value::as_u64);
                    match (body_total, header_total(&reply.headers)) {
                        (Some(b), Some(h)) if b != h => {
                            return Err(inconsistent(
                                path,
                                "total_count and X-Total-Count disagree",
                            ));
                        }
                        (Some(t), _) | (None, Some(t)) => t,
                        (None, None) => {
                            return Err(inconsistent(
                                path,
                                "answer without total_count or X-Total-Count",
                            ));
                        }
                    }
                }
            };
            if *expected.get_or_insert(total) != total {
                return Err(inconsistent(path, "the total changed while paging"));
            }
            let page_items = items_of(&body)?;
            let got = page_items.len();
            items.extend(page_items);
            let have = items.len() as u64;
            if have == total {
                return Ok(items);
            }
            if have > total {
                return Err(inconsistent(path, "more items than the total"));
            }
            if got == 0 {
                return Err(inconsistent(
                    path,
                    "page missing before the total was reached",
                ));
            }
            page += 1;
        }
    }
}

fn decode_item<T: DeserializeOwned>(path: &str, item: &Value) -> Result<T, ApiError> {
    T::deserialize(item).map_err(|e| ApiError::Unavailable(format!("decoding {path} item: {e}")))
}

fn header_total(headers: &HeaderMap) -> Option<u64> {
    headers
        .get("x-total-count")?
        .to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
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

/// Path segments come from configuration and from providerIDs written into the
/// cluster; refuse anything that could change the path.
pub(super) fn segment(value: &str) -> Result<&str, ApiError> {
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
