//! russh adapter of [`RescueShell`]: public-key login, one exec channel per
//! command, stdout and stderr collected.
//!
//! Host keys: the caller passes the fingerprint it trusted on first use in the
//! current rescue boot (it persists it with the install's progress); a server
//! presenting another key is refused before our key is offered. A rescue image
//! makes new host keys at every boot, so there is no key to pin beforehand.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use russh::client::{self, AuthResult, Handle};
use russh::keys::{HashAlg, PrivateKeyWithHashAlg, PublicKeyOrCertificate, decode_secret_key};
use russh::{ChannelMsg, Disconnect};
use tokio::time::timeout;
use tracing::warn;

use super::{CommandOutput, RescueError, RescueSession, RescueShell, SshTarget};

/// Output beyond this many bytes per stream is dropped: the commands we run
/// print little, and a runaway one must not exhaust memory.
const MAX_OUTPUT: usize = 1 << 20;

/// SSH client for rescue systems.
#[derive(Debug, Clone)]
pub struct RusshShell {
    /// TCP connect, handshake and authentication together.
    pub connect_timeout: Duration,
    /// One command, from exec to exit status.
    pub command_timeout: Duration,
}

impl Default for RusshShell {
    fn default() -> Self {
        RusshShell {
            connect_timeout: Duration::from_secs(20),
            command_timeout: Duration::from_secs(30 * 60),
        }
    }
}

impl RusshShell {
    pub fn new(connect_timeout: Duration, command_timeout: Duration) -> Self {
        RusshShell {
            connect_timeout,
            command_timeout,
        }
    }

    async fn open(
        &self,
        target: &SshTarget,
        private_key: &str,
        trusted: Option<&str>,
    ) -> Result<(Handle<HostKeys>, String), RescueError> {
        // The parse error names the problem, never the key material.
        let key = decode_secret_key(private_key, None)
            .map_err(|e| RescueError::InvalidKey(e.to_string()))?;
        let addr = format!("{}:{}", target.host, target.port);
        let config = Arc::new(client::Config {
            // The image write is silent for minutes: keepalives tell a quiet
            // session from a dead one.
            keepalive_interval: Some(Duration::from_secs(10)),
            keepalive_max: 3,
            ..Default::default()
        });
        let seen = Arc::new(Mutex::new(None));
        let handler = HostKeys {
            addr: addr.clone(),
            trusted: trusted.map(str::to_string),
            seen: seen.clone(),
        };
        let connected = client::connect(config, (target.host.as_str(), target.port), handler).await;
        let presented = seen.lock().unwrap_or_else(|e| e.into_inner()).clone();
        if let (Some(trusted), Some(presented)) = (trusted, presented.as_deref())
            && trusted != presented
        {
            return Err(RescueError::HostKeyMismatch {
                trusted: trusted.to_string(),
                presented: presented.to_string(),
            });
        }
        let mut handle = connected.map_err(|e| RescueError::Unreachable(format!("{addr}: {e}")))?;
        let Some(host_key) = presented else {
            return Err(RescueError::Unreachable(format!(
                "{addr}: the server did not present a host key"
            )));
        };
        let hash = handle
            .best_supported_rsa_hash()
            .await
            .map_err(|e| RescueError::Unreachable(format!("{addr}: {e}")))?
            .flatten();
        let auth = handle
            .authenticate_publickey(
                target.user.clone(),
                PrivateKeyWithHashAlg::new(Arc::new(key), hash),
            )
            .await
            .map_err(|e| RescueError::Unreachable(format!("{addr}: {e}")))?;
        match auth {
            AuthResult::Success => Ok((handle, host_key)),
            AuthResult::Failure { .. } => Err(RescueError::AuthRejected(target.user.clone())),
        }
    }
}

#[async_trait]
impl RescueShell for RusshShell {
    async fn connect(
        &self,
        target: &SshTarget,
        private_key: &str,
        trusted_host_key: Option<&str>,
    ) -> Result<Box<dyn RescueSession>, RescueError> {
        let (handle, host_key) = timeout(
            self.connect_timeout,
            self.open(target, private_key, trusted_host_key),
        )
        .await
        .map_err(|_| {
            RescueError::Timeout(format!(
                "connecting to {}:{} took more than {}s",
                target.host,
                target.port,
                self.connect_timeout.as_secs()
            ))
        })??;
        Ok(Box::new(RusshSession {
            handle,
            host_key,
            command_timeout: self.command_timeout,
        }))
    }
}

/// Checks the server's host key against the one trusted in this rescue boot,
/// and records the key presented.
struct HostKeys {
    addr: String,
    trusted: Option<String>,
    seen: Arc<Mutex<Option<String>>>,
}

impl client::Handler for HostKeys {
    type Error = russh::Error;

    async fn check_server_key(
        &mut self,
        server_key: &PublicKeyOrCertificate,
    ) -> Result<bool, Self::Error> {
        let fingerprint = match server_key {
            PublicKeyOrCertificate::PublicKey { key, .. } => {
                key.fingerprint(HashAlg::Sha256).to_string()
            }
            PublicKeyOrCertificate::Certificate(cert) => {
                cert.public_key().fingerprint(HashAlg::Sha256).to_string()
            }
        };
        *self.seen.lock().unwrap_or_else(|e| e.into_inner()) = Some(fingerprint.clone());
        match &self.trusted {
            Some(trusted) if *trusted != fingerprint => {
                warn!(addr = %self.addr, presented = %fingerprint, %trusted,
                    "rescue host key differs from the one trusted in this rescue boot; refusing");
                Ok(false)
            }
            _ => Ok(true),
        }
    }
}

struct RusshSession {
    handle: Handle<HostKeys>,
    host_key: String,
    command_timeout: Duration,
}

impl RusshSession {
    async fn exec(&mut self, command: &str) -> Result<CommandOutput, RescueError> {
        let lost = |e: russh::Error| RescueError::SessionLost(e.to_string());
        let mut channel = self.handle.channel_open_session().await.map_err(lost)?;
        channel.exec(true, command).await.map_err(lost)?;
        let mut stdout = Vec::new();
        let mut stderr = Vec::new();
        let mut status = None;
        // The exit status may arrive before the last data: read to the close.
        while let Some(msg) = channel.wait().await {
            match msg {
                ChannelMsg::Data { data } => append(&mut stdout, &data),
                ChannelMsg::ExtendedData { data, ext: 1 } => append(&mut stderr, &data),
                ChannelMsg::ExitStatus { exit_status } => status = Some(exit_status),
                ChannelMsg::ExitSignal { signal_name, .. } => {
                    append(
                        &mut stderr,
                        format!("killed by signal {signal_name:?}").as_bytes(),
                    );
                    // Shells report death by signal as 128 + n; the number is
                    // not on the wire, so use a status no command returns.
                    status = Some(255);
                }
                _ => {}
            }
        }
        let exit_status = status.ok_or_else(|| {
            RescueError::SessionLost("channel closed without an exit status".into())
        })?;
        Ok(CommandOutput {
            exit_status,
            stdout: String::from_utf8_lossy(&stdout).into_owned(),
            stderr: String::from_utf8_lossy(&stderr).into_owned(),
        })
    }
}

fn append(buf: &mut Vec<u8>, data: &[u8]) {
    let room = MAX_OUTPUT.saturating_sub(buf.len());
    buf.extend_from_slice(&data[..data.len().min(room)]);
}

#[async_trait]
impl RescueSession for RusshSession {
    fn host_key(&self) -> &str {
        &self.host_key
    }

    async fn run(&mut self, command: &str) -> Result<CommandOutput, RescueError> {
        let limit = self.command_timeout;
        timeout(limit, self.exec(command)).await.map_err(|_| {
            RescueError::Timeout(format!("command took more than {}s", limit.as_secs()))
        })?
    }

    async fn close(self: Box<Self>) {
        // Best effort: the server may already be rebooting.
        let _ = self
            .handle
            .disconnect(Disconnect::ByApplication, "", "en")
            .await;
    }
}

#[cfg(test)]
#[path = "ssh_tests.rs"]
mod tests;
