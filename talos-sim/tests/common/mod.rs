//! Helpers shared by the integration tests: real sockets on 127.x
//! addresses, an HTTP file server, an SSH client and a Talos API client that
//! skips certificate verification like `talosctl --insecure`.
#![allow(dead_code)]

pub mod apiserver;

use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use russh::keys::ssh_key::private::Ed25519Keypair;
use russh::keys::{PrivateKey, PrivateKeyWithHashAlg, PublicKeyOrCertificate};
use russh::{ChannelMsg, client};
use talos_sim::image::{Compression, write_image};
use talos_sim::model::{
    BootType, Command, Machine, Offer, OfferCpu, OfferDisk, OfferMemory, Platform, PowerOn,
};
use talos_sim::proto::machine_service_client::MachineServiceClient;
use talos_sim::records::ServerRecord;
use tokio::net::TcpStream;

pub const WORKER_YAML: &str = include_str!("../fixtures/worker.yaml");

pub fn keypair() -> PrivateKey {
    PrivateKey::from(Ed25519Keypair::from_seed(&rand::random::<[u8; 32]>()))
}

pub fn authorized_line(key: &PrivateKey) -> String {
    key.public_key().to_openssh().expect("openssh encoding")
}

pub fn image(version: &str, size: u64, compression: Compression) -> Vec<u8> {
    let mut out = Vec::new();
    write_image(version, "amd64", size, compression, &mut out).expect("image");
    out
}

pub fn offer(disk_kind: &str, disk_size: u64) -> Offer {
    Offer {
        name: "EM-TEST".into(),
        disks: vec![OfferDisk {
            capacity: disk_size,
            kind: disk_kind.into(),
        }],
        cpus: vec![OfferCpu {
            name: "AMD EPYC 7313P".into(),
            core_count: 16,
            thread_count: 32,
        }],
        memories: vec![OfferMemory { capacity: 64 << 30 }],
        tags: vec![],
        gpus: vec![],
    }
}

pub fn power_on(
    id: &str,
    boot_type: BootType,
    address: Ipv4Addr,
    keys: Vec<String>,
    offer: &Offer,
) -> Command {
    Command::PowerOn(Box::new(PowerOn {
        server_id: id.into(),
        server_name: format!("name-{id}"),
        boot_type,
        address,
        rescue_ssh_public_keys: keys,
        rescue_user: "rescue".into(),
        machine: Machine::from_offer(id, offer).expect("machine"),
        platform: Platform::Metal,
        cause: None,
    }))
}

/// Serves `files` (path → body) over HTTP; other paths are 404.
pub async fn serve_files(files: Vec<(&'static str, Vec<u8>)>) -> SocketAddr {
    let mut router = axum::Router::new();
    for (path, body) in files {
        router = router.route(
            path,
            axum::routing::get(move || async move { body.clone() }),
        );
    }
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind http");
    let addr = listener.local_addr().expect("addr");
    tokio::spawn(async move { axum::serve(listener, router).await });
    addr
}

struct AcceptAnyHostKey;

impl client::Handler for AcceptAnyHostKey {
    type Error = russh::Error;

    async fn check_server_key(
        &mut self,
        _key: &PublicKeyOrCertificate,
    ) -> Result<bool, Self::Error> {
        Ok(true)
    }
}

pub struct Ssh(client::Handle<AcceptAnyHostKey>);

/// Output of one remote command.
#[derive(Debug)]
pub struct Exec {
    pub status: Option<u32>,
    pub stdout: Vec<u8>,
    pub stderr: String,
}

/// Connects and authenticates; `Ok(None)` when the key is refused.
pub async fn ssh(addr: SocketAddr, user: &str, key: &PrivateKey) -> anyhow::Result<Option<Ssh>> {
    let config = Arc::new(client::Config {
        inactivity_timeout: Some(Duration::from_secs(30)),
        ..Default::default()
    });
    let mut handle = client::connect(config, addr, AcceptAnyHostKey).await?;
    let auth = handle
        .authenticate_publickey(
            user,
            PrivateKeyWithHashAlg::new(Arc::new(key.clone()), None),
        )
        .await?;
    Ok(auth.success().then_some(Ssh(handle)))
}

impl Ssh {
    pub async fn exec(&self, command: &str) -> anyhow::Result<Exec> {
        let mut channel = self.0.channel_open_session().await?;
        channel.exec(true, command).await?;
        channel.eof().await?;
        let mut out = Exec {
            status: None,
            stdout: Vec::new(),
            stderr: String::new(),
        };
        while let Some(msg) = channel.wait().await {
            match msg {
                ChannelMsg::Data { data } => out.stdout.extend_from_slice(&data),
                ChannelMsg::ExtendedData { data, ext: 1 } => {
                    out.stderr.push_str(&String::from_utf8_lossy(&data))
                }
                ChannelMsg::ExitStatus { exit_status } => out.status = Some(exit_status),
                _ => {}
            }
        }
        Ok(out)
    }
}

/// A verifier that accepts any certificate: the maintenance API's is
/// self-signed, and clients connect like `talosctl --insecure`.
#[derive(Debug)]
struct Insecure(Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for Insecure {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &self.0.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// A Talos API client over TLS without certificate verification.
pub async fn talos(
    addr: SocketAddr,
) -> anyhow::Result<MachineServiceClient<tonic::transport::Channel>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(Insecure(provider)))
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"h2".to_vec()];
    let connector = tokio_rustls::TlsConnector::from(Arc::new(tls));
    let ip = match addr.ip() {
        IpAddr::V4(v4) => v4,
        IpAddr::V6(_) => anyhow::bail!("IPv4 only"),
    };
    let channel = tonic::transport::Endpoint::from_shared(format!("http://{addr}"))?
        .connect_with_connector(tower::service_fn(move |_uri| {
            let connector = connector.clone();
            async move {
                let tcp = TcpStream::connect(addr).await?;
                let name = rustls::pki_types::ServerName::IpAddress(IpAddr::V4(ip).into());
                let stream = connector.connect(name, tcp).await?;
                Ok::<_, std::io::Error>(hyper_util::rt::TokioIo::new(stream))
            }
        }))
        .await?;
    Ok(MachineServiceClient::new(channel))
}

/// Polls `read` until `done` holds for the record of `id`.
pub async fn wait_for<F, Fut>(
    what: &str,
    read: F,
    done: impl Fn(&ServerRecord) -> bool,
) -> ServerRecord
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = Vec<ServerRecord>>,
{
    // Up to 60 s (TLS bootstrap, CSR polling, image checks on a loaded
    // machine); over as soon as it holds.
    for _ in 0..1200 {
        if let Some(r) = read().await.into_iter().find(|r| done(r)) {
            return r;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}: {:#?}", read().await);
}

/// Polls `done` until it holds.
pub async fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    // Up to 60 s (TLS bootstrap, CSR polling, image checks on a loaded
    // machine); over as soon as it holds.
    for _ in 0..1200 {
        if done() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("timed out waiting for {what}");
}
