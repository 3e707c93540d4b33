//! Talos' maintenance API: `machine.MachineService` over TLS with a fresh
//! self-signed certificate (clients connect with verification off, like
//! `talosctl --insecure`), serving `ApplyConfiguration` and `Version`.
//!
//! ApplyConfiguration answers like Talos 1.13, whose maintenance mode is
//! served by machined's own `ApplyConfiguration`
//! (`internal/app/machined/internal/server/v1alpha1/v1alpha1_server.go`):
//! with a validator (Talos' machinery, see [`crate::validator`]), a config
//! that does not load or does not validate is `InvalidArgument` with Talos'
//! message verbatim, and a valid one's warnings are in the reply.
//! talos-sim's own, stricter checks follow.

use std::net::{IpAddr, Ipv4Addr};
use std::sync::Arc;
use std::time::Duration;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::sync::{Mutex, mpsc};
use tokio::task::JoinSet;
use tokio_rustls::TlsAcceptor;
use tokio_util::sync::CancellationToken;
use tonic::{Request, Response, Status};

use crate::disk::Disk;
use crate::machine_config::{self, NodeConfig};
use crate::proto::apply_configuration_request::Mode;
use crate::proto::machine_service_server::{MachineService, MachineServiceServer};
use crate::proto::{
    ApplyConfiguration, ApplyConfigurationRequest, ApplyConfigurationResponse, Metadata,
    PlatformInfo, Version, VersionInfo, VersionResponse,
};
use crate::records::{AppliedConfig, Record};
use crate::validator::{ConfigValidator, Verdict};

/// A config accepted for installation: the node installs it and reboots.
#[derive(Debug, Clone)]
pub struct Applied {
    pub yaml: String,
    pub node: NodeConfig,
}

/// The maintenance-mode API of one booted server.
pub struct MaintenanceApi {
    server_id: String,
    address: Ipv4Addr,
    image_version: String,
    image_arch: String,
    image_sha256: String,
    disk: Disk,
    record: Record,
    applied_tx: mpsc::Sender<Applied>,
    /// Held during an apply; `true` once a config was accepted for install.
    applied: Mutex<bool>,
    /// Talos' machinery, when talos-sim was given it.
    validator: Option<ConfigValidator>,
    /// The image's Talos platform (`metal`, `scaleway`).
    platform: &'static str,
    /// How long ApplyConfiguration takes before anything happens.
    apply_latency: Duration,
}

impl MaintenanceApi {
    #[allow(clippy::too_many_arguments)]
    pub fn new(
        server_id: &str,
        address: Ipv4Addr,
        image_version: &str,
        image_arch: &str,
        image_sha256: &str,
        disk: Disk,
        record: Record,
        applied_tx: mpsc::Sender<Applied>,
    ) -> Self {
        Self {
            server_id: server_id.to_string(),
            address,
            image_version: image_version.to_string(),
            image_arch: image_arch.to_string(),
            image_sha256: image_sha256.to_string(),
            disk,
            record,
            applied_tx,
            applied: Mutex::new(false),
            validator: None,
            platform: "metal",
            apply_latency: Duration::ZERO,
        }
    }

    /// ApplyConfiguration waits this long before it reads the request, as
    /// a node that validates and writes a config slowly does; tests use it
    /// to hold the installer in its `maintenance` phase.
    pub fn with_apply_latency(mut self, latency: Duration) -> Self {
        self.apply_latency = latency;
        self
    }

    /// The platform `Version` reports: `metal`, or `scaleway` for a VM
    /// (whose runtime mode is `cloud`).
    pub fn with_platform(mut self, platform: &'static str) -> Self {
        self.platform = platform;
        self
    }

    /// Validates every applied config with Talos' machinery first.
    pub fn with_validator(mut self, validator: Option<ConfigValidator>) -> Self {
        self.validator = validator;
        self
    }

    /// Talos' verdict on the config, as its maintenance API answers it;
    /// the warnings of a valid one.
    async fn talos_validation(&self, yaml: &str) -> Result<Vec<String>, Status> {
        let Some(validator) = &self.validator else {
            return Ok(Vec::new());
        };
        let verdict = validator.check(yaml.as_bytes()).await.map_err(|e| {
            tracing::error!(server_id = %self.server_id, error = %format!("{e:#}"), "config validator failed");
            Status::internal(format!("talos-sim: the config validator failed: {e:#}"))
        })?;
        let refusal = match verdict {
            Verdict::Valid { warnings } => return Ok(warnings),
            Verdict::Invalid(message) | Verdict::Unparsable(message) => {
                Status::invalid_argument(message)
            }
        };
        tracing::info!(server_id = %self.server_id, error = %refusal.message(), "machine config refused by Talos' validation");
        Err(refusal)
    }

    fn metadata(&self) -> Option<Metadata> {
        Some(Metadata {
            hostname: self.address.to_string(),
            error: String::new(),
        })
    }

    /// Serves on `listener` until `cancel` fires; connections die with it.
    pub async fn serve(
        self,
        listener: TcpListener,
        cancel: CancellationToken,
    ) -> anyhow::Result<()> {
        let tls = TlsAcceptor::from(Arc::new(tls_config(IpAddr::V4(self.address))?));
        let server_id = self.server_id.clone();
        let routes = tonic::service::Routes::new(MachineServiceServer::new(self)).prepare();
        let mut connections = JoinSet::new();
        loop {
            let accepted = tokio::select! {
                _ = cancel.cancelled() => return Ok(()),
                accepted = listener.accept() => accepted,
            };
            while connections.try_join_next().is_some() {}
            let (tcp, peer) = match accepted {
                Ok(a) => a,
                Err(e) => {
                    tracing::warn!(%server_id, error = %e, "maintenance API accept failed");
                    continue;
                }
            };
            let tls = tls.clone();
            let service = TowerToHyperService::new(routes.clone());
            connections.spawn(async move {
                let stream = match tls.accept(tcp).await {
                    Ok(s) => s,
                    Err(e) => {
                        tracing::debug!(%peer, error = %e, "maintenance API TLS handshake failed");
                        return;
                    }
                };
                let served = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
                if let Err(e) = served {
                    tracing::debug!(%peer, error = %e, "maintenance API connection ended with an error");
                }
            });
        }
    }
}

/// A self-signed certificate for the server's address, generated per boot
/// like Talos' maintenance-mode certificate.
pub fn tls_config(ip: IpAddr) -> anyhow::Result<rustls::ServerConfig> {
    let rcgen::CertifiedKey { cert, signing_key } =
        rcgen::generate_simple_self_signed(vec![ip.to_string()])?;
    let key = rustls::pki_types::PrivateKeyDer::Pkcs8(signing_key.serialize_der().into());
    let mut config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()?
    .with_no_client_auth()
    .with_single_cert(vec![cert.der().clone()], key)?;
    // gRPC clients (grpc-go in particular) insist on negotiating h2.
    config.alpn_protocols = vec![b"h2".to_vec()];
    Ok(config)
}

#[tonic::async_trait]
impl MachineService for MaintenanceApi {
    async fn apply_configuration(
        &self,
        request: Request<ApplyConfigurationRequest>,
    ) -> Result<Response<ApplyConfigurationResponse>, Status> {
        if !self.apply_latency.is_zero() {
            tokio::time::sleep(self.apply_latency).await;
        }
        let request = request.into_inner();
        let mode = Mode::try_from(request.mode).map_err(|_| {
            Status::invalid_argument(format!("unknown apply mode {}", request.mode))
        })?;
        let Ok(mut applied) = self.applied.try_lock() else {
            return Err(Status::failed_precondition(
                "another apply configuration is already in progress",
            ));
        };
        if *applied {
            return Err(Status::failed_precondition(
                "configuration was already applied and node is rebooting, cannot apply more configuration changes until next reboot",
            ));
        }
        let yaml = String::from_utf8(request.data)
            .map_err(|_| Status::invalid_argument("failed to decode config: not valid UTF-8"))?;
        let warnings = self.talos_validation(&yaml).await?;
        let node = machine_config::parse(&yaml).map_err(|e| {
            tracing::info!(server_id = %self.server_id, error = %e, "machine config rejected");
            Status::invalid_argument(e.to_string())
        })?;
        // In maintenance mode a reboot-less apply means "install now".
        let (mode_out, details) = match mode {
            Mode::Reboot | Mode::Auto | Mode::NoReboot => {
                (Mode::NoReboot, "Applied configuration without a reboot")
            }
            Mode::Staged => (
                Mode::Staged,
                "Staged configuration to be applied after the next reboot",
            ),
            Mode::Try => {
                return Err(Status::unimplemented(
                    "talos-sim does not simulate the try apply mode",
                ));
            }
        };
        if request.dry_run {
            return Ok(self.reply(
                mode_out,
                format!("Dry run summary:\n{details} (skipped in dry-run).\n"),
                warnings,
            ));
        }
        self.record.update(|r| {
            r.applied_configs.push(AppliedConfig {
                at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
                mode: mode.as_str_name().to_string(),
                yaml: yaml.clone(),
            })
        });
        tracing::info!(
            server_id = %self.server_id,
            hostname = node.hostname.as_deref().unwrap_or(""),
            mode = mode.as_str_name(),
            "machine config applied"
        );
        if mode_out == Mode::Staged {
            self.disk
                .install_config(&yaml)
                .map_err(|e| Status::internal(format!("failed to persist config: {e}")))?;
        } else {
            *applied = true;
            self.applied_tx
                .send(Applied { yaml, node })
                .await
                .map_err(|_| Status::unavailable("node is shutting down"))?;
        }
        Ok(self.reply(mode_out, details.to_string(), warnings))
    }

    async fn version(&self, _request: Request<()>) -> Result<Response<VersionResponse>, Status> {
        Ok(Response::new(VersionResponse {
            messages: vec![Version {
                metadata: self.metadata(),
                version: Some(VersionInfo {
                    tag: self.image_version.clone(),
                    sha: self.image_sha256.chars().take(8).collect(),
                    built: String::new(),
                    go_version: "go1.25".into(),
                    os: "linux".into(),
                    arch: self.image_arch.clone(),
                }),
                platform: Some(PlatformInfo {
                    name: self.platform.into(),
                    mode: if self.platform == "metal" {
                        "metal".into()
                    } else {
                        "cloud".into()
                    },
                }),
            }],
        }))
    }
}

impl MaintenanceApi {
    fn reply(
        &self,
        mode: Mode,
        details: String,
        warnings: Vec<String>,
    ) -> Response<ApplyConfigurationResponse> {
        Response::new(ApplyConfigurationResponse {
            messages: vec![ApplyConfiguration {
                metadata: self.metadata(),
                warnings,
                mode: mode as i32,
                mode_details: details,
            }],
        })
    }
}

#[cfg(test)]
#[path = "talos_api_tests.rs"]
mod tests;
