//! The russh client against a tiny russh server on a real loopback socket.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use russh::keys::ssh_key::LineEnding;
use russh::keys::ssh_key::private::Ed25519Keypair;
use russh::keys::{PrivateKey, PublicKey};
use russh::server::{self, Auth, ChannelOpenHandle, Msg, Session, VerifiedPublicKey};
use russh::{Channel, ChannelId};
use tokio::net::TcpListener;

use super::*;

fn key(seed: u8) -> PrivateKey {
    PrivateKey::from(Ed25519Keypair::from_seed(&[seed; 32]))
}

fn openssh(key: &PrivateKey) -> String {
    key.to_openssh(LineEnding::LF)
        .expect("encode key")
        .to_string()
}

#[derive(Clone)]
struct Rescue {
    authorized: PublicKey,
    commands: Arc<Mutex<Vec<String>>>,
}

impl server::Handler for Rescue {
    type Error = russh::Error;

    async fn auth_publickey(
        &mut self,
        user: &str,
        key: VerifiedPublicKey<'_>,
    ) -> Result<Auth, Self::Error> {
        if user == "rescue" && key.public_key.key_data() == self.authorized.key_data() {
            Ok(Auth::Accept)
        } else {
            Ok(Auth::reject())
        }
    }

    async fn channel_open_session(
        &mut self,
        _channel: Channel<Msg>,
        reply: ChannelOpenHandle,
        _session: &mut Session,
    ) -> Result<(), Self::Error> {
        reply.accept().await;
        Ok(())
    }

    async fn exec_request(
        &mut self,
        channel: ChannelId,
        data: &[u8],
        session: &mut Session,
    ) -> Result<(), Self::Error> {
        let command = String::from_utf8_lossy(data).into_owned();
        self.commands.lock().unwrap().push(command.clone());
        session.channel_success(channel)?;
        match command.as_str() {
            "lsblk -dno NAME,TYPE" => {
                session.data(channel, b"nvme0n1 disk\n".to_vec())?;
                session.exit_status_request(channel, 0)?;
            }
            "sleep forever" => return Ok(()),
            other => {
                let word = other.split_whitespace().next().unwrap_or_default();
                session.extended_data(
                    channel,
                    1,
                    format!("sh: {word}: command not found\n").into_bytes(),
                )?;
                session.exit_status_request(channel, 127)?;
            }
        }
        session.eof(channel)?;
        session.close(channel)?;
        Ok(())
    }
}

/// Serves SSH on an ephemeral loopback port; returns the port and the log of
/// commands run.
async fn serve(authorized: &PrivateKey) -> (u16, Arc<Mutex<Vec<String>>>) {
    let config = Arc::new(server::Config {
        keys: vec![key(200)],
        auth_rejection_time: Duration::from_millis(10),
        auth_rejection_time_initial: Some(Duration::ZERO),
        ..Default::default()
    });
    let commands = Arc::new(Mutex::new(Vec::new()));
    let handler = Rescue {
        authorized: authorized.public_key().clone(),
        commands: commands.clone(),
    };
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    tokio::spawn(async move {
        while let Ok((socket, _)) = listener.accept().await {
            let (config, handler) = (config.clone(), handler.clone());
            tokio::spawn(async move {
                if let Ok(session) = server::run_stream(config, socket, handler).await {
                    let _ = session.await;
                }
            });
        }
    });
    (port, commands)
}

fn target(port: u16, user: &str) -> SshTarget {
    SshTarget {
        host: "127.0.0.1".into(),
        port,
        user: user.into(),
    }
}

#[tokio::test]
async fn runs_commands_and_collects_output_and_status() {
    let client_key = key(1);
    let (port, commands) = serve(&client_key).await;
    let shell = RusshShell::default();

    let mut session = shell
        .connect(&target(port, "rescue"), &openssh(&client_key), None)
        .await
        .expect("connect");
    let expected = key(200)
        .public_key()
        .fingerprint(HashAlg::Sha256)
        .to_string();
    assert!(expected.starts_with("SHA256:"), "{expected}");
    assert_eq!(session.host_key(), expected);
    let out = session.run("lsblk -dno NAME,TYPE").await.expect("run");
    assert_eq!(
        out,
        CommandOutput {
            exit_status: 0,
            stdout: "nvme0n1 disk\n".into(),
            stderr: String::new()
        }
    );
    let out = session.run("zstd -d").await.expect("run");
    assert_eq!(out.exit_status, 127);
    assert_eq!(out.stderr, "sh: zstd: command not found\n");
    assert!(!out.success());
    session.close().await;

    assert_eq!(
        *commands.lock().unwrap(),
        ["lsblk -dno NAME,TYPE", "zstd -d"]
    );
}

#[tokio::test]
async fn the_trusted_host_key_is_accepted_and_another_refused() {
    let client_key = key(1);
    let (port, commands) = serve(&client_key).await;
    let shell = RusshShell::default();
    let presented = key(200)
        .public_key()
        .fingerprint(HashAlg::Sha256)
        .to_string();

    let mut session = shell
        .connect(
            &target(port, "rescue"),
            &openssh(&client_key),
            Some(&presented),
        )
        .await
        .expect("the trusted key connects");
    assert_eq!(session.host_key(), presented);
    session.run("lsblk -dno NAME,TYPE").await.expect("run");
    session.close().await;

    let trusted = key(201)
        .public_key()
        .fingerprint(HashAlg::Sha256)
        .to_string();
    let err = shell
        .connect(
            &target(port, "rescue"),
            &openssh(&client_key),
            Some(&trusted),
        )
        .await
        .err()
        .expect("refused");
    assert_eq!(err, RescueError::HostKeyMismatch { trusted, presented });
    // Refused before anything ran on the impostor.
    assert_eq!(*commands.lock().unwrap(), ["lsblk -dno NAME,TYPE"]);
}

#[tokio::test]
async fn a_key_the_server_does_not_know_is_rejected() {
    let (port, _) = serve(&key(1)).await;
    let err = RusshShell::default()
        .connect(&target(port, "rescue"), &openssh(&key(2)), None)
        .await
        .err()
        .expect("rejected");
    assert_eq!(err, RescueError::AuthRejected("rescue".into()));
}

#[tokio::test]
async fn nothing_listening_is_unreachable() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let port = listener.local_addr().expect("addr").port();
    drop(listener);
    let err = RusshShell::default()
        .connect(&target(port, "rescue"), &openssh(&key(1)), None)
        .await
        .err()
        .expect("unreachable");
    assert!(matches!(err, RescueError::Unreachable(_)), "{err:?}");
}

#[tokio::test]
async fn an_invalid_key_is_reported_without_its_content() {
    let text = "-----BEGIN OPENSSH PRIVATE KEY-----\nc2VjcmV0LW1hdGVyaWFs\n-----END OPENSSH PRIVATE KEY-----\n";
    let err = RusshShell::default()
        .connect(&target(1, "rescue"), text, None)
        .await
        .err()
        .expect("invalid");
    let RescueError::InvalidKey(message) = &err else {
        panic!("expected InvalidKey, got {err:?}")
    };
    assert!(!message.contains("c2VjcmV0"), "{message}");
}

#[tokio::test]
async fn a_command_that_never_ends_times_out() {
    let client_key = key(1);
    let (port, _) = serve(&client_key).await;
    let shell = RusshShell::new(Duration::from_secs(10), Duration::from_millis(300));
    let mut session = shell
        .connect(&target(port, "rescue"), &openssh(&client_key), None)
        .await
        .expect("connect");
    let err = session.run("sleep forever").await.expect_err("times out");
    assert!(matches!(err, RescueError::Timeout(_)), "{err:?}");
}
