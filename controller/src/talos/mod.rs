//! Talos Linux: the maintenance API the install engine talks to, and the
//! rendering of a node's machine config.
//!
//! The trait and the renderer import no gRPC types; `grpc` is the tonic adapter.

mod grpc;
mod private_network;
pub mod render;
pub mod yaml;

pub use grpc::GrpcTalos;
pub use private_network::PRIVATE_LINK_ALIAS;
pub use render::{
    NodeSettings, PRIMARY_LINK_ALIAS, PrivateLink, RenderError, Taint, render_machine_config,
};

use async_trait::async_trait;

/// What `Version` says about a node in maintenance mode.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TalosVersion {
    pub tag: String,
    pub arch: String,
    /// `platform.mode`, e.g. `metal`.
    pub platform: String,
}

/// Errors of the maintenance API, classified once at the boundary.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum TalosError {
    /// Not listening yet, TLS or HTTP/2 failure, timeout: try again later.
    #[error("Talos API unavailable: {0}")]
    Unavailable(String),
    /// Talos refused the configuration (invalid YAML, unknown field, ...):
    /// sending it again cannot help.
    #[error("configuration rejected: {0}")]
    Rejected(String),
    /// Any other answer we did not expect.
    #[error("Talos API error: {0}")]
    Other(String),
}

/// The maintenance-mode calls the install engine uses. `addr` is `host:port`.
#[async_trait]
pub trait TalosMaintenance: Send + Sync + 'static {
    async fn version(&self, addr: &str) -> Result<TalosVersion, TalosError>;
    /// Applies `config` (multi-document YAML, secret) in `AUTO` mode; returns the
    /// warnings Talos reported.
    async fn apply_configuration(
        &self,
        addr: &str,
        config: &str,
    ) -> Result<Vec<String>, TalosError>;
}
