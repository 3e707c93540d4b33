//! The rescue system of an Elastic Metal server, reached over SSH.
//!
//! The trait is what the install engine needs: open a session as the rescue
//! user with a private key, run shell command lines, collect their output.
//! `russh` is one adapter; tests use in-memory fakes.

mod ssh;

pub use ssh::RusshShell;

use async_trait::async_trait;

/// Where and as whom to log in.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SshTarget {
    /// IP address or host name, without the port.
    pub host: String,
    pub port: u16,
    pub user: String,
}

/// What one command line produced.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct CommandOutput {
    /// The exit status (255 when the command was killed by a signal).
    pub exit_status: u32,
    pub stdout: String,
    pub stderr: String,
}

impl CommandOutput {
    pub fn success(&self) -> bool {
        self.exit_status == 0
    }
}

/// Failures of the SSH transport, classified once here. A command that ran and
/// exited non-zero is not an error: it is a [`CommandOutput`].
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum RescueError {
    /// TCP connect or SSH handshake failed: the rescue system may still be booting.
    #[error("cannot reach the rescue system: {0}")]
    Unreachable(String),
    /// The server refused our key (wrong key, or the reboot did not attach it).
    #[error("authentication refused for user {0}")]
    AuthRejected(String),
    /// The private key could not be parsed. Never carries key material.
    #[error("invalid private key: {0}")]
    InvalidKey(String),
    /// Connect or command took longer than its time limit.
    #[error("timed out: {0}")]
    Timeout(String),
    /// The session or channel broke while a command ran.
    #[error("SSH session lost: {0}")]
    SessionLost(String),
}

/// Opens sessions on a rescue system.
#[async_trait]
pub trait RescueShell: Send + Sync + 'static {
    /// Connects and authenticates with `private_key` (OpenSSH format). The key
    /// is secret: implementations never log it.
    async fn connect(
        &self,
        target: &SshTarget,
        private_key: &str,
    ) -> Result<Box<dyn RescueSession>, RescueError>;
}

/// An authenticated session; each `run` opens one exec channel.
#[async_trait]
pub trait RescueSession: Send {
    async fn run(&mut self, command: &str) -> Result<CommandOutput, RescueError>;
    /// Says goodbye politely; dropping the session also closes it.
    async fn close(self: Box<Self>);
}
