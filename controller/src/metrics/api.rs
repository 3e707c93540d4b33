//! The Scaleway API families (`karpenter_scaleway_api_*`), counted by the
//! HTTP layer (`scaleway/telemetry.rs`) and named here.

use prometheus_client::registry::Registry;

use crate::scaleway::telemetry::ApiTelemetry;

pub(super) fn register(t: &ApiTelemetry, registry: &mut Registry) {
    registry.register(
        "karpenter_scaleway_api_requests",
        "Scaleway API HTTP attempts (each retry counts), by API, operation (the endpoint template) and result (ok or the error class)",
        t.requests.clone(),
    );
    registry.register(
        "karpenter_scaleway_api_request_duration_seconds",
        "Duration of one Scaleway API HTTP attempt (pacing waits excluded), by API and operation",
        t.durations.clone(),
    );
    registry.register(
        "karpenter_scaleway_api_retries",
        "Scaleway API calls sent again by the client's retry loop, by API and operation",
        t.retries.clone(),
    );
    registry.register(
        "karpenter_scaleway_api_rate_limit_quota",
        "Calls allowed per window, as the last 429 body of the API that carried it reported (limit.quota)",
        t.rate_limit_quota.clone(),
    );
    registry.register(
        "karpenter_scaleway_api_rate_limit_window_seconds",
        "The rate-limit window, as the last 429 body of the API that carried it reported (limit.window_seconds)",
        t.rate_limit_window_seconds.clone(),
    );
    registry.register(
        "karpenter_scaleway_api_rate_limit_reset_seconds",
        "Seconds until the rate limit resets, as the last 429 body of the API that carried it reported (reset_seconds)",
        t.rate_limit_reset_seconds.clone(),
    );
    registry.register(
        "karpenter_scaleway_api_paced_calls",
        "Scaleway API calls that waited for their turn (client-side pacing), by endpoint",
        t.paced.clone(),
    );
    registry.register(
        "karpenter_scaleway_api_pacing_wait_seconds",
        "Time Scaleway API calls waited for their turn, by endpoint",
        t.pacing_wait_seconds.clone(),
    );
    registry.register(
        "karpenter_scaleway_api_refused_calls",
        "Scaleway API calls not sent: their turn was further away than their caller could wait (answered as throttled), by endpoint",
        t.refused.clone(),
    );
    registry.register(
        "karpenter_scaleway_api_skipped_reads",
        "Optional status reads (the install engine's fast reads near a delivery's expected end) not made: the pace had no free turn, by endpoint",
        t.skipped.clone(),
    );
    registry.register(
        "karpenter_scaleway_api_throttled",
        "429 answers of the Scaleway API, by endpoint (each retried with backoff by the client)",
        t.throttled.clone(),
    );
}
