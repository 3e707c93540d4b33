//! Wire errors → [`ApiError`], once, at the boundary (house style §3).
//!
//! The body's `type` decides when present (the SDK's rule), otherwise the
//! status code. Two legacy answers carry nothing but text, and only those
//! read the message: Elastic Metal's 400 "Server is not delivered", and the
//! Instance API's 400 `invalid_request_error` "server should be running".

use reqwest::StatusCode;
use serde_json::Value;

use super::ApiError;
use super::http::Api;

/// Maps an error answer of `api` to [`ApiError`].
pub fn classify(api: Api, status: StatusCode, body: &[u8]) -> ApiError {
    let json: Value = serde_json::from_slice(body).unwrap_or(Value::Null);
    let kind = json.get("type").and_then(Value::as_str).unwrap_or("");
    let message = describe(&json, status);
    let precondition = json.get("precondition").and_then(Value::as_str);
    match (api, kind) {
        (_, "not_found") => return ApiError::NotFound(message),
        // A Block volume is detached from its server some seconds after
        // terminate; deleting it before answers this.
        (Api::Block, "precondition_failed") if precondition == Some("resource_still_in_use") => {
            return ApiError::TransientState(message);
        }
        (_, "invalid_arguments" | "precondition_failed" | "resource_expired") => {
            return ApiError::Invalid(message);
        }
        (_, "permissions_denied" | "denied_authentication") => {
            return ApiError::Unauthorized(message);
        }
        (_, "transient_state") => return ApiError::TransientState(message),
        (_, "quotas_exceeded") => return ApiError::QuotaExceeded(message),
        (_, "out_of_stock") => return ApiError::OutOfStock(message),
        (_, "too_many_requests") => return ApiError::Throttled,
        // Scaleway locks a resource for abuse or billing; waiting seconds
        // does not lift it, so retrying would only hammer the API.
        (_, "locked") => return ApiError::Invalid(format!("resource locked: {message}")),
        (Api::Instance, "invalid_request_error") => return instance_legacy(status, message),
        _ => {}
    }
    match status.as_u16() {
        404 => ApiError::NotFound(message),
        // Reboot/start/stop while the server is still being delivered.
        400 if api == Api::ElasticMetal
            && message.to_ascii_lowercase().contains("not delivered") =>
        {
            ApiError::TransientState(message)
        }
        401 | 403 => ApiError::Unauthorized(message),
        409 => ApiError::TransientState(message),
        429 => ApiError::Throttled,
        500..=599 => ApiError::Unavailable(message),
        _ => ApiError::Invalid(message),
    }
}

/// The Instance API's legacy `invalid_request_error`: a 403 is a quota
/// ("Quota exceeded for this resource."); a 400 "server should be <state>"
/// is an action asked in the wrong state, which the server may leave on its
/// own (starting → running), so it is worth a later try; any other 400 is a
/// refusal retrying cannot fix.
fn instance_legacy(status: StatusCode, message: String) -> ApiError {
    if status == StatusCode::FORBIDDEN {
        ApiError::QuotaExceeded(message)
    } else if message.to_ascii_lowercase().starts_with("server should be") {
        ApiError::TransientState(message)
    } else if status.is_server_error() {
        ApiError::Unavailable(message)
    } else {
        ApiError::Invalid(message)
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
