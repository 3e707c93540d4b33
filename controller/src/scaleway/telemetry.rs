//! What the HTTP layer counts about the Scaleway APIs: every attempt by API,
//! operation and result class, its duration, the retries, what client-side
//! pacing did, and the rate-limit figures a 429 body reports.
//!
//! The families are typed `prometheus-client` ones; `metrics` names them and
//! exposes them, so that this module knows nothing of HTTP serving. Labels
//! are the API, the endpoint template (`GET /servers/{server_id}`) and the
//! error class: never a URL, an id or a body.

use std::sync::atomic::AtomicU64;
use std::sync::{Arc, LazyLock};
use std::time::Duration;

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::Histogram;
use serde_json::Value;

use super::ApiError;
use super::http::Api;
use super::pacer::Turn;

/// Upper bounds (seconds) of the call-duration buckets: reads answer in tens
/// of milliseconds, an order or a paged list in seconds, the client's timeout
/// is tens of seconds.
pub const CALL_BUCKETS: [f64; 10] = [0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 30.0];

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct CallLabels {
    pub api: &'static str,
    pub operation: &'static str,
    pub result: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OperationLabels {
    pub api: &'static str,
    pub operation: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ApiLabel {
    pub api: &'static str,
}

#[derive(Debug, Clone, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct EndpointLabel {
    pub endpoint: &'static str,
}

pub type FloatGauge = Family<ApiLabel, Gauge<f64, AtomicU64>>;
pub type CallHistograms = Family<OperationLabels, Histogram, fn() -> Histogram>;

fn call_histogram() -> Histogram {
    Histogram::new(CALL_BUCKETS)
}

/// The counters of one client (process-wide in production, one per test).
#[derive(Debug, Clone)]
pub struct ApiTelemetry {
    /// One per HTTP attempt, by result (`ok` or [`ApiError::class`]).
    pub requests: Family<CallLabels, Counter>,
    pub durations: CallHistograms,
    pub retries: Family<OperationLabels, Counter>,
    /// As the last 429 body that carried them reported.
    pub rate_limit_quota: FloatGauge,
    pub rate_limit_window_seconds: FloatGauge,
    pub rate_limit_reset_seconds: FloatGauge,
    /// Calls that waited for their turn, and how long in all.
    pub paced: Family<EndpointLabel, Counter>,
    pub pacing_wait_seconds: Family<EndpointLabel, Counter<f64, AtomicU64>>,
    /// Calls not sent: their turn was further away than they could wait.
    pub refused: Family<EndpointLabel, Counter>,
    /// Reads made only if idle that were not made: no turn was free.
    pub skipped: Family<EndpointLabel, Counter>,
    /// 429 answers received anyway.
    pub throttled: Family<EndpointLabel, Counter>,
}

impl Default for ApiTelemetry {
    fn default() -> Self {
        ApiTelemetry {
            requests: Family::default(),
            durations: Family::new_with_constructor(call_histogram as fn() -> Histogram),
            retries: Family::default(),
            rate_limit_quota: Family::default(),
            rate_limit_window_seconds: Family::default(),
            rate_limit_reset_seconds: Family::default(),
            paced: Family::default(),
            pacing_wait_seconds: Family::default(),
            refused: Family::default(),
            skipped: Family::default(),
            throttled: Family::default(),
        }
    }
}

static TELEMETRY: LazyLock<Arc<ApiTelemetry>> = LazyLock::new(Arc::default);

/// The process-wide counters, which every client counts into unless given
/// its own.
pub fn api_telemetry() -> &'static Arc<ApiTelemetry> {
    &TELEMETRY
}

impl Api {
    /// The `api` label.
    pub fn label(self) -> &'static str {
        match self {
            Api::ElasticMetal => "baremetal",
            Api::Iam => "iam",
            Api::Instance => "instance",
            Api::Block => "block",
            Api::Vpc => "vpc",
            Api::Ipam => "ipam",
        }
    }
}

impl ApiTelemetry {
    /// One HTTP attempt of `endpoint` ended after `took`.
    pub fn attempt(
        &self,
        api: Api,
        endpoint: &'static str,
        took: Duration,
        outcome: Result<(), &ApiError>,
    ) {
        let result = match outcome {
            Ok(()) => "ok",
            Err(err) => err.class(),
        };
        self.requests
            .get_or_create(&CallLabels {
                api: api.label(),
                operation: endpoint,
                result,
            })
            .inc();
        self.durations
            .get_or_create(&OperationLabels {
                api: api.label(),
                operation: endpoint,
            })
            .observe(took.as_secs_f64());
    }

    /// The retry loop sends `endpoint` again.
    pub fn retry(&self, api: Api, endpoint: &'static str) {
        self.retries
            .get_or_create(&OperationLabels {
                api: api.label(),
                operation: endpoint,
            })
            .inc();
    }

    /// A 429 of `api` answered `body`: the rate-limit figures it reports,
    /// `{"limit": {"quota", "window_seconds"}, "reset_seconds"}`, each set
    /// only when present and a number (the body is often empty).
    pub fn throttled(&self, api: Api, endpoint: &'static str, body: &[u8]) {
        self.throttled
            .get_or_create(&EndpointLabel { endpoint })
            .inc();
        let Ok(json) = serde_json::from_slice::<Value>(body) else {
            return;
        };
        let label = ApiLabel { api: api.label() };
        let figures = [
            (&self.rate_limit_quota, json.pointer("/limit/quota")),
            (
                &self.rate_limit_window_seconds,
                json.pointer("/limit/window_seconds"),
            ),
            (&self.rate_limit_reset_seconds, json.get("reset_seconds")),
        ];
        for (gauge, value) in figures {
            if let Some(v) = value.and_then(Value::as_f64).filter(|v| v.is_finite()) {
                gauge.get_or_create(&label).set(v);
            }
        }
    }

    /// What pacing did to one call.
    pub fn paced(&self, endpoint: &'static str, turn: Turn) {
        let label = EndpointLabel { endpoint };
        match turn {
            Turn::Now => {}
            Turn::Waited(d) => {
                self.paced.get_or_create(&label).inc();
                self.pacing_wait_seconds
                    .get_or_create(&label)
                    .inc_by(d.as_secs_f64());
            }
            Turn::Refused => {
                self.refused.get_or_create(&label).inc();
            }
        }
    }

    /// A read made only if idle was not made.
    pub fn skipped(&self, endpoint: &'static str) {
        self.skipped
            .get_or_create(&EndpointLabel { endpoint })
            .inc();
    }
}
