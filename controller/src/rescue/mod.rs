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
    /// The server presented a host key other than the one trusted earlier in
    /// the same rescue boot: someone may be in the middle. The connection was
    /// refused before authenticating.
    #[error("rescue host key mismatch: trusted {trusted}, presented {presented}")]
    HostKeyMismatch { trusted: String, presented: String },
}

/// Opens sessions on a rescue system.
#[async_trait]
pub trait RescueShell: Send + Sync + 'static {
    /// Connects and authenticates with `private_key` (OpenSSH format). The key
    /// is secret: implementations never log it.
    ///
    /// Host keys are trusted on first use per rescue boot (a rescue image makes
    /// new ones at every boot, so there is nothing to pin in advance): with
    /// `trusted_host_key` (OpenSSH `SHA256:...` fingerprint) set, a server
    /// presenting another key is refused with
    /// [`RescueError::HostKeyMismatch`] before our key is offered; with `None`
    /// any key is accepted and the session reports it
    /// ([`RescueSession::host_key`]) so that the caller can record it.
    async fn connect(
        &self,
        target: &SshTarget,
        private_key: &str,
        trusted_host_key: Option<&str>,
    ) -> Result<Box<dyn RescueSession>, RescueError>;
}

/// An authenticated session; each `run` opens one exec channel.
#[async_trait]
pub trait RescueSession: Send + Sync {
    /// The server's host key fingerprint, OpenSSH `SHA256:...` form.
    fn host_key(&self) -> &str;
    async fn run(&mut self, command: &str) -> Result<CommandOutput, RescueError>;
    /// Says goodbye politely; dropping the session also closes it.
    async fn close(self: Box<Self>);
}
