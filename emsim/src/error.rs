//! Every error the simulated API can answer, shaped exactly like the real one
//! (`scw/errors.go` and recordings). Handlers, middleware and fault injection all
//! return this one type, so the wire shapes live in a single place.

use axum::Json;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use serde_json::{Value, json};

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ArgumentDetail {
    pub argument_name: String,
    /// `required`, `constraint`, `unknown`...
    pub reason: String,
    pub help_message: String,
}

#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ApiError {
    /// Many Elastic Metal errors carry only `{"message": ...}`: 404 "Not Found"
    /// for a gone server, 400 "Server is not delivered"...
    #[error("{status}: {message}")]
    Message { status: StatusCode, message: String },
    /// Typed `not_found` (IAM, offers).
    #[error("{resource} {resource_id} not found")]
    NotFound {
        resource: String,
        resource_id: String,
    },
    #[error("invalid arguments: {0:?}")]
    InvalidArguments(Vec<ArgumentDetail>),
    #[error("{resource} {resource_id} is in transient state {current_state}")]
    TransientState {
        resource: String,
        resource_id: String,
        current_state: String,
    },
    #[error("{resource} is out of stock")]
    OutOfStock { resource: String },
    #[error("quota {resource} exceeded ({current}/{quota})")]
    QuotasExceeded {
        resource: String,
        quota: u64,
        current: u64,
    },
    /// `reason` is `invalid_argument` for a missing or malformed key and
    /// `not_found` for a well-formed key that does not exist.
    #[error("authentication denied: {reason}")]
    DeniedAuthentication { reason: &'static str },
    #[error("too many requests")]
    TooManyRequests { quota: u64, window_seconds: u64 },
    /// The Instance API's legacy `invalid_request_error`: an action in the
    /// wrong state (400), or a quota (403, with the quota's `resource`).
    #[error("{status}: {message}")]
    InvalidRequest {
        status: StatusCode,
        message: String,
        resource: Option<String>,
    },
    /// `precondition_failed` (a Block volume still attached).
    #[error("precondition {precondition} failed")]
    PreconditionFailed {
        precondition: String,
        help_message: String,
    },
    /// An injected fault: status and body as given to `POST /_emsim/faults`.
    #[error("injected fault {status}")]
    Injected {
        status: StatusCode,
        body: Option<Value>,
    },
}

impl ApiError {
    pub fn message(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError::Message {
            status,
            message: message.into(),
        }
    }

    /// What the API answers for a server that does not exist (any more).
    pub fn server_not_found() -> Self {
        Self::message(StatusCode::NOT_FOUND, "Not Found")
    }

    pub fn not_delivered() -> Self {
        Self::message(StatusCode::BAD_REQUEST, "Server is not delivered")
    }

    pub fn invalid_request(status: StatusCode, message: impl Into<String>) -> Self {
        ApiError::InvalidRequest {
            status,
            message: message.into(),
            resource: None,
        }
    }

    /// The Instance API's quota answer (legacy 403, recorded by the SDK).
    pub fn legacy_quota(resource: impl Into<String>) -> Self {
        ApiError::InvalidRequest {
            status: StatusCode::FORBIDDEN,
            message: "Quota exceeded for this resource.".into(),
            resource: Some(resource.into()),
        }
    }

    pub fn invalid(argument: &str, reason: &str, help: impl Into<String>) -> Self {
        ApiError::InvalidArguments(vec![ArgumentDetail {
            argument_name: argument.into(),
            reason: reason.into(),
            help_message: help.into(),
        }])
    }

    pub fn status(&self) -> StatusCode {
        match self {
            ApiError::Message { status, .. }
            | ApiError::Injected { status, .. }
            | ApiError::InvalidRequest { status, .. } => *status,
            ApiError::PreconditionFailed { .. } => StatusCode::PRECONDITION_FAILED,
            ApiError::NotFound { .. } => StatusCode::NOT_FOUND,
            ApiError::InvalidArguments(_) => StatusCode::BAD_REQUEST,
            ApiError::TransientState { .. } => StatusCode::CONFLICT,
            ApiError::OutOfStock { .. } => StatusCode::PRECONDITION_FAILED,
            ApiError::QuotasExceeded { .. } => StatusCode::FORBIDDEN,
            ApiError::DeniedAuthentication { .. } => StatusCode::UNAUTHORIZED,
            ApiError::TooManyRequests { .. } => StatusCode::TOO_MANY_REQUESTS,
        }
    }

    pub fn body(&self) -> Option<Value> {
        Some(match self {
            ApiError::Message { message, .. } => json!({ "message": message }),
            ApiError::NotFound {
                resource,
                resource_id,
            } => json!({
                "message": "resource is not found",
                "resource": resource,
                "resource_id": resource_id,
                "type": "not_found",
            }),
            ApiError::InvalidArguments(details) => json!({
                "details": details,
                "message": "invalid argument(s)",
                "type": "invalid_arguments",
            }),
            ApiError::TransientState {
                resource,
                resource_id,
                current_state,
            } => json!({
                "current_state": current_state,
                "message": "resource is in a transient state",
                "resource": resource,
                "resource_id": resource_id,
                "type": "transient_state",
            }),
            ApiError::OutOfStock { resource } => json!({
                "message": "resource is out of stock",
                "resource": resource,
                "type": "out_of_stock",
            }),
            ApiError::QuotasExceeded {
                resource,
                quota,
                current,
            } => json!({
                "details": [{ "resource": resource, "quota": quota, "current": current }],
                "message": "quota(s) exceeded for this resource",
                "type": "quotas_exceeded",
            }),
            ApiError::DeniedAuthentication { reason } => json!({
                "message": "authentication is denied",
                "method": "api_key",
                "reason": reason,
                "type": "denied_authentication",
            }),
            ApiError::TooManyRequests {
                quota,
                window_seconds,
            } => json!({
                "message": "too many requests",
                "type": "too_many_requests",
                "limit": { "quota": quota, "window_seconds": window_seconds },
                "reset_seconds": window_seconds,
            }),
            ApiError::InvalidRequest {
                message, resource, ..
            } => {
                let mut body = json!({ "message": message, "type": "invalid_request_error" });
                if let Some(resource) = resource {
                    body["resource"] = json!(resource);
                }
                body
            }
            ApiError::PreconditionFailed {
                precondition,
                help_message,
            } => json!({
                "help_message": help_message,
                "message": "precondition is not respected",
                "precondition": precondition,
                "type": "precondition_failed",
            }),
            ApiError::Injected { body, .. } => return body.clone(),
        })
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status();
        match self.body() {
            Some(body) => (status, Json(body)).into_response(),
            None => status.into_response(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shapes_match_the_real_api() {
        let e = ApiError::NotFound {
            resource: "ssh_key".into(),
            resource_id: "abc".into(),
        };
        assert_eq!(e.status(), StatusCode::NOT_FOUND);
        assert_eq!(
            e.body().unwrap(),
            json!({"message":"resource is not found","resource":"ssh_key","resource_id":"abc","type":"not_found"})
        );
        assert_eq!(ApiError::not_delivered().status(), StatusCode::BAD_REQUEST);
        assert_eq!(
            ApiError::not_delivered().body().unwrap(),
            json!({"message":"Server is not delivered"})
        );
        let q = ApiError::QuotasExceeded {
            resource: "EM_A115X_SSD".into(),
            quota: 1,
            current: 1,
        };
        assert_eq!(q.status(), StatusCode::FORBIDDEN);
        assert_eq!(q.body().unwrap()["details"][0]["quota"], 1);
        let s = ApiError::OutOfStock {
            resource: "x".into(),
        };
        assert_eq!(s.status(), StatusCode::PRECONDITION_FAILED);
        assert_eq!(s.body().unwrap()["type"], "out_of_stock");
        let a = ApiError::DeniedAuthentication {
            reason: "not_found",
        };
        assert_eq!(a.status(), StatusCode::UNAUTHORIZED);
        assert_eq!(a.body().unwrap()["method"], "api_key");
        let i = ApiError::Injected {
            status: StatusCode::BAD_GATEWAY,
            body: None,
        };
        assert_eq!(i.status(), StatusCode::BAD_GATEWAY);
        assert!(i.body().is_none());
        let quota = ApiError::legacy_quota("compute_servers_type_pop2_2c_8g_available");
        assert_eq!(quota.status(), StatusCode::FORBIDDEN);
        assert_eq!(
            quota.body().unwrap(),
            json!({"type": "invalid_request_error", "message": "Quota exceeded for this resource.",
                   "resource": "compute_servers_type_pop2_2c_8g_available"})
        );
    }
}
