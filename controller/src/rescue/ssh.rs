//! russh adapter of [`super::RescueShell`].

use async_trait::async_trait;

use super::{RescueError, RescueSession, RescueShell, SshTarget};

/// SSH client for rescue systems.
#[derive(Debug, Clone, Default)]
pub struct RusshShell {}

#[async_trait]
impl RescueShell for RusshShell {
    async fn connect(
        &self,
        target: &SshTarget,
        _private_key: &str,
    ) -> Result<Box<dyn RescueSession>, RescueError> {
        Err(RescueError::Unreachable(target.host.clone()))
    }
}
