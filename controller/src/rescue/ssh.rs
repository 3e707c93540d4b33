//! russh adapter of [`RescueShell`]: public-key login, one exec channel per
//! command, stdout and stderr collected.
//!
//! Host keys are trusted on first use and their fingerprint logged. A rescue
//! image makes new host keys at every boot, so a changed key for an address is
//! logged as a warning and accepted; pinning keys per rescue boot comes with
//! their persistence.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use russh::client::{self, AuthResult, Handle};
use russh::keys::{HashAlg, PrivateKeyWithHashAlg, PublicKeyOrCertificate, decode_secret_key};
use russh::{ChannelMsg, Disconnect};
use tokio::time::timeout;
use tracing::{info, warn};

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
    /// Host key fingerprints seen, by `host:port`.
    known: Arc<Mutex<HashMap<String, String>>>,
}

impl Default for RusshShell {
    fn default() -> Self {
        RusshShell {
            connect_timeout: Duration::from_secs(20),
            command_timeout: Duration::from_secs(30 * 60),
            known: Arc::default(),
        }
    }
}

impl RusshShell {
    pub fn new(connect_timeout: Duration, command_timeout: Duration) -> Self {
        RusshShell {
            connect_timeout,
            command_timeout,
            known: Arc::default(),
        }
    }

    /// The fingerprint recorded for `host:port`, if any.
    pub fn known_fingerprint(&self, addr: &str) -> Option<String> {
        self.known
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(addr)
            .cloned()
    }

    async fn open(
        &self,
        target: &SshTarget,
        private_key: &str,
    ) -> Result<Handle<HostKeys>, RescueError> {
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
        let handler = HostKeys {
            addr: addr.clone(),
            known: self.known.clone(),
        };
        let mut handle = client::connect(config, (target.host.as_str(), target.port), handler)
            .await
            .map_err(|e| RescueError::Unreachable(format!("{addr}: {e}")))?;
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
            AuthResult::Success => Ok(handle),
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
    ) -> Result<Box<dyn RescueSession>, RescueError> {
        let handle = timeout(self.connect_timeout, self.open(target, private_key))
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
            command_timeout: self.command_timeout,
        }))
    }
}

/// Checks server host keys: trust on first use, fingerprint logged.
struct HostKeys {
    addr: String,
    known: Arc<Mutex<HashMap<String, String>>>,
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
        let previous = self
            .known
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(self.addr.clone(), fingerprint.clone());
        match previous {
            None => info!(addr = %self.addr, %fingerprint, "trusting rescue host key on first use"),
            Some(old) if old != fingerprint => {
                warn!(addr = %self.addr, %fingerprint, previous = %old, "rescue host key changed (new rescue boot?)")
            }
            Some(_) => {}
        }
        Ok(true)
    }
}

struct RusshSession {
    handle: Handle<HostKeys>,
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
