//! tonic adapter of [`TalosMaintenance`]: gRPC over TLS to a node in
//! maintenance mode, without verifying its self-signed certificate (what
//! `talosctl --insecure` does). The handshake signature is still checked, so
//! the peer holds the certificate's key; who the peer is stays unproven, which
//! is inherent to maintenance mode.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use async_trait::async_trait;
use http::Uri;
use hyper_util::rt::TokioIo;
use rustls::client::danger::{HandshakeSignatureValid, ServerCertVerified, ServerCertVerifier};
use rustls::crypto::{CryptoProvider, verify_tls12_signature, verify_tls13_signature};
use rustls::pki_types::{CertificateDer, ServerName, UnixTime};
use rustls::{ClientConfig, DigitallySignedStruct, SignatureScheme};
use tokio::net::TcpStream;
use tokio_rustls::TlsConnector;
use tokio_rustls::client::TlsStream;
use tonic::Code;
use tonic::transport::{Channel, Endpoint};

use super::{TalosError, TalosMaintenance, TalosVersion};

mod pb {
    tonic::include_proto!("machine");
}

use pb::apply_configuration_request::Mode;
use pb::machine_service_client::MachineServiceClient;

/// Maintenance API client. Each call opens its own connection: calls are rare
/// (a probe every poll interval, one apply per install) and nodes reboot
/// between them.
#[derive(Clone)]
pub struct GrpcTalos {
    pub connect_timeout: Duration,
    pub request_timeout: Duration,
    tls: TlsConnector,
}

impl std::fmt::Debug for GrpcTalos {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("GrpcTalos")
            .field("connect_timeout", &self.connect_timeout)
            .field("request_timeout", &self.request_timeout)
            .finish_non_exhaustive()
    }
}

impl Default for GrpcTalos {
    fn default() -> Self {
        Self::new(Duration::from_secs(10), Duration::from_secs(60))
    }
}

impl GrpcTalos {
    pub fn new(connect_timeout: Duration, request_timeout: Duration) -> Self {
        GrpcTalos {
            connect_timeout,
            request_timeout,
            tls: TlsConnector::from(Arc::new(insecure_client_config())),
        }
    }

    async fn client(&self, addr: &str) -> Result<MachineServiceClient<Channel>, TalosError> {
        // TLS happens in our connector, so tonic sees a plain `http` URI.
        let endpoint = Endpoint::from_shared(format!("http://{addr}"))
            .map_err(|e| TalosError::Other(format!("bad address {addr}: {e}")))?
            .connect_timeout(self.connect_timeout)
            .timeout(self.request_timeout);
        let connector = InsecureTls {
            tls: self.tls.clone(),
        };
        let channel = endpoint
            .connect_with_connector(connector)
            .await
            .map_err(|e| TalosError::Unavailable(format!("{addr}: {}", error_chain(&e))))?;
        Ok(MachineServiceClient::new(channel))
    }
}

#[async_trait]
impl TalosMaintenance for GrpcTalos {
    async fn version(&self, addr: &str) -> Result<TalosVersion, TalosError> {
        let mut client = self.client(addr).await?;
        match client.version(()).await {
            Ok(response) => {
                let message = response
                    .into_inner()
                    .messages
                    .into_iter()
                    .next()
                    .unwrap_or_default();
                let version = message.version.unwrap_or_default();
                Ok(TalosVersion {
                    tag: version.tag,
                    arch: version.arch,
                    platform: message.platform.map(|p| p.mode).unwrap_or_default(),
                })
            }
            // Maintenance mode answers Version only to clients with the admin
            // role, which an unauthenticated client never has: the refusal
            // still proves the API is up.
            Err(status) if status.code() == Code::Unimplemented => Ok(TalosVersion::default()),
            Err(status) => Err(classify(&status, false)),
        }
    }

    async fn apply_configuration(
        &self,
        addr: &str,
        config: &str,
    ) -> Result<Vec<String>, TalosError> {
        let mut client = self.client(addr).await?;
        let request = pb::ApplyConfigurationRequest {
            data: config.as_bytes().to_vec(),
            mode: Mode::Auto as i32,
            dry_run: false,
            try_mode_timeout: None,
        };
        let response = client
            .apply_configuration(request)
            .await
            .map_err(|s| classify(&s, true))?;
        let mut warnings = Vec::new();
        for message in response.into_inner().messages {
            if let Some(error) = message.metadata.map(|m| m.error).filter(|e| !e.is_empty()) {
                return Err(TalosError::Other(error));
            }
            warnings.extend(message.warnings);
        }
        Ok(warnings)
    }
}

/// Classifies a gRPC status once. For ApplyConfiguration, Talos answers a
/// config that fails validation with `InvalidArgument` and an unsupported
/// mode with `Unimplemented`: both are final.
fn classify(status: &tonic::Status, apply: bool) -> TalosError {
    let message = format!("{:?}: {}", status.code(), status.message());
    match status.code() {
        Code::InvalidArgument | Code::Unimplemented if apply => TalosError::Rejected(message),
        Code::Unavailable
        | Code::DeadlineExceeded
        | Code::Cancelled
        | Code::Aborted
        | Code::ResourceExhausted => TalosError::Unavailable(message),
        _ => TalosError::Other(message),
    }
}

fn error_chain(err: &dyn std::error::Error) -> String {
    let mut text = err.to_string();
    let mut source = err.source();
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// rustls settings for maintenance mode: any certificate, HTTP/2 by ALPN.
fn insecure_client_config() -> ClientConfig {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider.clone())
        .with_safe_default_protocol_versions()
        .expect("ring supports the default protocol versions")
        .dangerous()
        .with_custom_certificate_verifier(Arc::new(AcceptAnyCertificate { provider }))
        .with_no_client_auth();
    config.alpn_protocols = vec![b"h2".to_vec()];
    config
}

/// Accepts whatever certificate the node presents, but still verifies the
/// handshake signatures made with its key.
#[derive(Debug)]
struct AcceptAnyCertificate {
    provider: Arc<CryptoProvider>,
}

impl ServerCertVerifier for AcceptAnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &CertificateDer<'_>,
        _intermediates: &[CertificateDer<'_>],
        _server_name: &ServerName<'_>,
        _ocsp_response: &[u8],
        _now: UnixTime,
    ) -> Result<ServerCertVerified, rustls::Error> {
        Ok(ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls12_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &CertificateDer<'_>,
        dss: &DigitallySignedStruct,
    ) -> Result<HandshakeSignatureValid, rustls::Error> {
        verify_tls13_signature(
            message,
            cert,
            dss,
            &self.provider.signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<SignatureScheme> {
        self.provider
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// A tower connector for tonic: TCP, then TLS with [`AcceptAnyCertificate`].
#[derive(Clone)]
struct InsecureTls {
    tls: TlsConnector,
}

type BoxError = Box<dyn std::error::Error + Send + Sync>;

impl tower::Service<Uri> for InsecureTls {
    type Response = TokioIo<TlsStream<TcpStream>>;
    type Error = BoxError;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, BoxError>> + Send>>;

    fn poll_ready(&mut self, _cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let tls = self.tls.clone();
        Box::pin(async move {
            let host = uri.host().ok_or("address without a host")?.to_string();
            let port = uri.port_u16().ok_or("address without a port")?;
            let tcp = TcpStream::connect((host.as_str(), port)).await?;
            tcp.set_nodelay(true)?;
            let name = ServerName::try_from(host)?;
            let stream = tls.connect(name, tcp).await?;
            Ok(TokioIo::new(stream))
        })
    }
}

#[cfg(test)]
#[path = "grpc_tests.rs"]
mod tests;
