//! The rescue system's SSH server: public-key authentication for the rescue
//! user with exactly the keys emsim lists, and `exec` requests run by the
//! strict rescue shell with stdin/stdout/stderr streamed over the channel.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use russh::keys::{PrivateKey, PublicKey};
use russh::server::{Auth, ChannelOpenHandle, Msg, PublicKeyOffer, Session, VerifiedPublicKey};
use russh::{Channel, ChannelId, ChannelMsg};
use tokio::net::TcpListener;
use tokio::sync::mpsc;
use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use crate::killable::Killable;
use crate::records::Record;
use crate::shell::io::{Input, PIPE_DEPTH, Stdio, pipe};
use crate::shell::{ShellEnv, run_line};

/// One server's rescue SSH service.
pub struct RescueSsh {
    pub server_id: String,
    pub user: String,
    pub authorized: Vec<PublicKey>,
    pub host_key: PrivateKey,
    pub env: Arc<ShellEnv>,
    pub record: Record,
}

/// Parses `authorized_keys`-style lines, skipping (and logging) bad ones.
pub fn parse_authorized_keys(server_id: &str, lines: &[String]) -> Vec<PublicKey> {
    lines
        .iter()
        .filter_map(|line| match PublicKey::from_openssh(line.trim()) {
            Ok(key) => Some(key),
            Err(e) => {
                tracing::warn!(%server_id, error = %e, "ignoring unparsable rescue SSH public key");
                None
            }
        })
        .collect()
}

impl RescueSsh {
    /// Accepts connections on `listener` until `cancel` fires; every session
    /// and command dies with it.
    pub async fn serve(self, listener: &TcpListener, cancel: CancellationToken) {
        let config = Arc::new(russh::server::Config {
            server_id: russh::SshId::Standard("SSH-2.0-OpenSSH_9.6p1 Ubuntu-3ubuntu13.5".into()),
            // Only the listed keys open the rescue system.
            methods: russh::MethodSet::from(&[russh::MethodKind::PublicKey][..]),
            keys: vec![self.host_key.clone()],
            // Rejections are slowed down by russh for timing safety; a test
            // system gains nothing from a long delay.
            auth_rejection_time: Duration::from_millis(50),
            auth_rejection_time_initial: Some(Duration::ZERO),
            inactivity_timeout: Some(Duration::from_secs(3600)),
            ..Default::default()
        });
        let shared = Arc::new(self);
        let mut sessions = JoinSet::new();
        loop {
            let accepted = tokio::select! {
                _ = cancel.cancelled() => return,
                accepted = listener.accept() => accepted,
            };
            while sessions.try_join_next().is_some() {}
            let (stream, peer) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(server_id = %shared.server_id, error = %e, "rescue SSH accept failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let handler = Connection {
                shared: shared.clone(),
                cancel: cancel.clone(),
                channels: HashMap::new(),
                peer,
            };
            let stream = Killable::new(stream, cancel.clone());
            let config = config.clone();
            sessions.spawn(async move {
                match russh::server::run_stream(config, stream, handler).await {
                    Ok(session) => {
                        if let Err(e) = session.await {
                            tracing::debug!(%peer, error = %e, "rescue SSH session ended with an error");
                        }
                    }
                    Err(e) => tracing::debug!(%peer, error = %e, "rescue SSH handshake failed"),
                }
            });
        }
    }
}

struct Connection {
    shared: Arc<RescueSsh>,
    cancel: CancellationToken,
    channels: HashMap<ChannelId, Channel<Msg>>,
    peer: SocketAddr,
}

impl Connection {
    fn allowed(&self, user: &str, key: &PublicKey) -> bool {
        user == self.shared.user
            && self
                .shared
                .authorized
                .iter()
                .any(|k| k.key_data() == key.key_data())
    }
}

impl russh::server::Handler for Connection {
    type Error = russh::Error;

    async fn auth_publickey_offered(
        &mut self,
        user: &str,
        offer: PublicKeyOffer<'_>,
    ) -> Result<Auth, Self::Error> {
        Ok(if self.allowed(user, offer.public_key) {
            Auth::Accept
        } else {
            Auth::reject()
        })
    }

    async fn auth_publickey(
        &mut self,
        user: &str,
        key: VerifiedPublicKey<'_>,
    ) -> Result<Auth, Self::Error> {
        let ok = self.allowed(user, key.public_key);
        let server_id = &self.shared.server_id;
        if ok {
            tracing::info!(%server_id, peer = %self.peer, %user, "rescue SSH login accepted");
            self.shared.record.update(|r| r.rescue_sessions += 1);
            Ok(Auth::Accept)
        } else {
            tracing::info!(%server_id, peer = %self.peer, %user, "rescue SSH login refused");
            Ok(Auth::reject())
        }
    }

    async fn channel_open_session(
        &mut self,
        channel: Channel<Msg>,
        reply: ChannelOpenHandle,
        _session: &mut Session,
    ) -> Result<(), Self::Error> {
        self.channels.insert(channel.id(), channel);
        reply.accept().await;
        Ok(())
    }

    async fn env_request(
        &mut self,
        channel: ChannelId,
        _name: &str,
        _value: &str,
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        // OpenSSH's default AcceptEnv drops most variables; so do we.
        session.channel_success(channel)?;
        Ok(())
    }

    async fn shell_request(
        &mut self,
        channel: ChannelId,
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        // Only non-interactive `exec` is simulated.
        session.channel_failure(channel)?;
        Ok(())
    }

    async fn exec_request(
        &mut self,
        channel: ChannelId,
        data: &[u8],
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        let Some(chan) = self.channels.remove(&channel) else {
            session.channel_failure(channel)?;
            return Ok(());
        };
        let line = String::from_utf8_lossy(data).into_owned();
        self.shared.record.push_command(&line);
        // Command lines may carry URLs with credentials: log the program only.
        let program = line.split_whitespace().next().unwrap_or("").to_string();
        tracing::info!(server_id = %self.shared.server_id, %program, len = line.len(), "rescue exec");
        session.channel_success(channel)?;
        let env = self.shared.env.clone();
        let cancel = self.cancel.clone();
        tokio::spawn(async move {
            tokio::select! {
                _ = cancel.cancelled() => {}
                _ = exec(chan, line, env) => {}
            }
        });
        Ok(())
    }
}

/// Runs one command line on a session channel, then reports its exit status
/// and closes the channel like OpenSSH's sshd.
async fn exec(channel: Channel<Msg>, line: String, env: Arc<ShellEnv>) {
    let (mut reader, writer) = channel.split();
    let (stdin_tx, stdin_rx) = mpsc::channel(PIPE_DEPTH);
    let (stdout, stdout_rx) = pipe();
    let (stderr, stderr_rx) = pipe();

    let feed_stdin = async move {
        while let Some(msg) = reader.wait().await {
            let data = match msg {
                ChannelMsg::Data { data } => data,
                ChannelMsg::Eof | ChannelMsg::Close => break,
                _ => continue,
            };
            if stdin_tx.send(data).await.is_err() {
                break;
            }
        }
    };
    let run = run_line(
        env,
        &line,
        Stdio {
            stdin: Input::from_receiver(stdin_rx),
            stdout,
            stderr,
        },
    );
    let forward_stdout = async {
        while let Some(chunk) = stdout_rx.read().await {
            if writer.data_bytes(chunk).await.is_err() {
                break;
            }
        }
    };
    let forward_stderr = async {
        while let Some(chunk) = stderr_rx.read().await {
            if writer.extended_data_bytes(1, chunk).await.is_err() {
                break;
            }
        }
    };
    let finished = async { tokio::join!(run, forward_stdout, forward_stderr).0 };
    // stdin may never reach EOF: the command's end decides.
    let feed = async {
        feed_stdin.await;
        std::future::pending::<i32>().await
    };
    let status = tokio::select! {
        status = finished => status,
        status = feed => status,
    };
    let _ = writer
        .exit_status(u32::try_from(status).unwrap_or(255))
        .await;
    let _ = writer.eof().await;
    let _ = writer.close().await;
}
