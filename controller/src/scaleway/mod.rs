//! The Scaleway APIs this provider calls: Elastic Metal and IAM here, the
//! Instance and Block APIs in [`instance`], the Private Network surface
//! (VPC, IPAM, Elastic Metal attachments, Instance private NICs) in
//! [`private_network`]. For each, the domain model of the
//! calls made, the narrow trait that the real client, the unit-test fake and
//! (over HTTP) emsim all satisfy, and the error classification every caller
//! matches on. One [`ScalewayClient`] implements every trait on the shared
//! machinery of `http.rs`.
//!
//! This module imports neither kube nor tonic (house style §1).

pub mod api_clock;
pub mod block;
mod client;
mod errors;
pub mod fake;
mod http;
pub mod instance;
mod model;
pub mod pacer;
pub mod private_network;
pub mod telemetry;

pub use errors::classify;
pub use http::{Api, ClientConfig, RetryPolicy, ScalewayClient, SecretKey};
pub use model::*;

use async_trait::async_trait;

/// A Scaleway zone such as `fr-par-2`.
pub type Zone = String;

/// Errors of the Scaleway APIs, classified once at the boundary (house
/// style §3). Everything above matches on the variant, never on text.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum ApiError {
    #[error("not found: {0}")]
    NotFound(String),
    #[error("out of stock: {0}")]
    OutOfStock(String),
    #[error("quota exceeded: {0}")]
    QuotaExceeded(String),
    /// 409 transient_state, EM's 400 "Server is not delivered", an Instance
    /// action asked in the wrong state ("server should be running"), a Block
    /// volume not yet detached: retry later.
    #[error("resource in a transient state: {0}")]
    TransientState(String),
    /// 429.
    #[error("throttled by the API")]
    Throttled,
    /// 5xx, connection errors.
    #[error("API unavailable: {0}")]
    Unavailable(String),
    /// No answer within the client's timeout.
    #[error("API timed out: {0}")]
    Timeout(String),
    /// A listing whose pages contradict each other or their announced total
    /// (`total_count` or `X-Total-Count` changed, a page missing, more items
    /// than announced, no total at all): never a shorter list.
    #[error("API answer inconsistent: {0}")]
    Inconsistent(String),
    /// 400 invalid_arguments, a locked resource and other refusals that
    /// retrying cannot fix.
    #[error("invalid request: {0}")]
    Invalid(String),
    /// 401/403 (except the Instance API's legacy quota 403): bad or
    /// insufficient credentials.
    #[error("unauthorized: {0}")]
    Unauthorized(String),
}

impl ApiError {
    /// Worth retrying the same call after a backoff.
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            ApiError::TransientState(_)
                | ApiError::Throttled
                | ApiError::Unavailable(_)
                | ApiError::Timeout(_)
                | ApiError::Inconsistent(_)
        )
    }

    /// The class as a metric label (`result` of
    /// `karpenter_scaleway_api_requests_total`).
    pub fn class(&self) -> &'static str {
        match self {
            ApiError::NotFound(_) => "not_found",
            ApiError::OutOfStock(_) => "out_of_stock",
            ApiError::QuotaExceeded(_) => "quota_exceeded",
            ApiError::TransientState(_) => "transient_state",
            ApiError::Throttled => "throttled",
            ApiError::Unavailable(_) => "unavailable",
            ApiError::Timeout(_) => "timeout",
            ApiError::Inconsistent(_) => "inconsistent",
            ApiError::Invalid(_) => "invalid",
            ApiError::Unauthorized(_) => "unauthorized",
        }
    }

    /// The order could not be placed for lack of capacity (stock or quota).
    pub fn is_insufficient_capacity(&self) -> bool {
        matches!(self, ApiError::OutOfStock(_) | ApiError::QuotaExceeded(_))
    }
}

/// The Elastic Metal v1 and IAM SSH-key calls the provider uses, and only those.
#[async_trait]
pub trait ElasticMetal: Send + Sync + 'static {
    /// The offers of a zone sold with this billing period (all pages).
    async fn list_offers(
        &self,
        zone: &str,
        period: SubscriptionPeriod,
    ) -> Result<Vec<Offer>, ApiError>;
    async fn create_server(
        &self,
        zone: &str,
        req: &CreateServerRequest,
    ) -> Result<Server, ApiError>;
    async fn get_server(&self, zone: &str, id: &str) -> Result<Server, ApiError>;
    /// A read that is made only if it costs no wait: `Ok(None)` when the
    /// client's pace has no free turn now (the install engine's fast reads
    /// near the expected end of a delivery use only spare capacity, so that
    /// they never delay the reads other installs wait on). Unpaced clients
    /// and fakes always read.
    async fn get_server_if_idle(&self, zone: &str, id: &str) -> Result<Option<Server>, ApiError> {
        self.get_server(zone, id).await.map(Some)
    }
    /// Every page of servers matching the filter. Any failure, including a page
    /// that is missing or a `total_count` that does not match, is an error:
    /// never a shorter list.
    async fn list_servers(
        &self,
        zone: &str,
        filter: &ServerFilter,
    ) -> Result<Vec<Server>, ApiError>;
    async fn delete_server(&self, zone: &str, id: &str) -> Result<Server, ApiError>;
    /// Replaces the server's tags (`PATCH /servers/{id}` with `tags`).
    async fn update_server_tags(
        &self,
        zone: &str,
        id: &str,
        tags: &[String],
    ) -> Result<Server, ApiError>;
    async fn reboot_server(
        &self,
        zone: &str,
        id: &str,
        boot_type: BootType,
        ssh_key_ids: &[String],
    ) -> Result<Server, ApiError>;
    /// IAM SSH keys of a project (all pages).
    async fn list_ssh_keys(&self, project_id: &str) -> Result<Vec<SshKey>, ApiError>;
}
