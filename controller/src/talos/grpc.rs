//! tonic adapter of [`super::TalosMaintenance`].

use async_trait::async_trait;

use super::{TalosError, TalosMaintenance, TalosVersion};

/// Maintenance API client.
#[derive(Debug, Clone, Default)]
pub struct GrpcTalos {}

#[async_trait]
impl TalosMaintenance for GrpcTalos {
    async fn version(&self, addr: &str) -> Result<TalosVersion, TalosError> {
        Err(TalosError::Unavailable(addr.to_string()))
    }
    async fn apply_configuration(&self, addr: &str, _config: &str) -> Result<Vec<String>, TalosError> {
        Err(TalosError::Unavailable(addr.to_string()))
    }
}
