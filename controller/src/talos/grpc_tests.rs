//! The client against an in-process tonic server with a self-signed
//! certificate on a real loopback socket, as a maintenance-mode node has.

use std::sync::{Arc, Mutex};

use tokio::net::TcpListener;
use tokio_stream::wrappers::TcpListenerStream;
use tonic::transport::{Identity, Server, ServerTlsConfig};
use tonic::{Request, Response, Status};

use super::pb::machine_service_server::{MachineService, MachineServiceServer};
use super::pb::{self, ApplyConfigurationRequest, ApplyConfigurationResponse, VersionResponse};
use super::*;

#[derive(Clone, Default)]
struct Node {
    /// Answer Version like maintenance mode does to a client without a role.
    refuse_version: bool,
    applied: Arc<Mutex<Vec<(String, i32)>>>,
}

#[tonic::async_trait]
impl MachineService for Node {
    async fn apply_configuration(
        &self,
        request: Request<ApplyConfigurationRequest>,
    ) -> Result<Response<ApplyConfigurationResponse>, Status> {
        let request = request.into_inner();
        let config = String::from_utf8(request.data)
            .map_err(|_| Status::unknown("failed to parse config"))?;
        if !config.contains("version: v1alpha1") {
            return Err(Status::invalid_argument(
                "configuration validation failed: no v1alpha1 document",
            ));
        }
        self.applied.lock().unwrap().push((config, request.mode));
        Ok(Response::new(ApplyConfigurationResponse {
            messages: vec![pb::ApplyConfiguration {
                metadata: None,
                warnings: vec![".machine.install.extensions is deprecated".into()],
                mode: request.mode,
                mode_details: String::new(),
            }],
        }))
    }

    async fn version(&self, _: Request<()>) -> Result<Response<VersionResponse>, Status> {
        if self.refuse_version {
            return Err(Status::unimplemented(
                "API is not implemented in maintenance mode",
            ));
        }
        Ok(Response::new(VersionResponse {
            messages: vec![pb::Version {
                metadata: None,
                version: Some(pb::VersionInfo {
                    tag: "v1.13.9".into(),
                    arch: "amd64".into(),
                    ..Default::default()
                }),
                platform: Some(pb::PlatformInfo {
                    name: "metal".into(),
                    mode: "metal".into(),
                }),
            }],
        }))
    }
}

/// Serves `node` over TLS with a fresh self-signed certificate; returns `host:port`.
async fn serve(node: Node) -> String {
    let cert =
        rcgen::generate_simple_self_signed(vec!["talos-maintenance".to_string()]).expect("cert");
    let identity = Identity::from_pem(cert.cert.pem(), cert.signing_key.serialize_pem());
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    tokio::spawn(async move {
        Server::builder()
            .tls_config(ServerTlsConfig::new().identity(identity))
            .expect("tls config")
            .add_service(MachineServiceServer::new(node))
            .serve_with_incoming(TcpListenerStream::new(listener))
            .await
            .expect("serve");
    });
    addr
}

#[tokio::test]
async fn version_over_tls_with_a_self_signed_certificate() {
    let addr = serve(Node::default()).await;
    let version = GrpcTalos::default().version(&addr).await.expect("version");
    assert_eq!(
        version,
        TalosVersion {
            tag: "v1.13.9".into(),
            arch: "amd64".into(),
            platform: "metal".into()
        }
    );
}

#[tokio::test]
async fn maintenance_refusal_of_version_still_means_up() {
    let addr = serve(Node {
        refuse_version: true,
        ..Node::default()
    })
    .await;
    assert_eq!(
        GrpcTalos::default().version(&addr).await,
        Ok(TalosVersion::default())
    );
}

#[tokio::test]
async fn apply_sends_the_config_in_auto_mode_and_returns_warnings() {
    let node = Node::default();
    let addr = serve(node.clone()).await;
    let config = "version: v1alpha1\nmachine:\n  type: worker\n---\napiVersion: v1alpha1\nkind: HostnameConfig\nauto: off\nhostname: n1\n";
    let warnings = GrpcTalos::default()
        .apply_configuration(&addr, config)
        .await
        .expect("applied");
    assert_eq!(warnings, [".machine.install.extensions is deprecated"]);
    assert_eq!(
        *node.applied.lock().unwrap(),
        [(config.to_string(), Mode::Auto as i32)]
    );
}

#[tokio::test]
async fn invalid_config_is_rejected() {
    let addr = serve(Node::default()).await;
    let err = GrpcTalos::default()
        .apply_configuration(&addr, "kind: Nothing\n")
        .await
        .unwrap_err();
    assert_eq!(
        err,
        TalosError::Rejected(
            "InvalidArgument: configuration validation failed: no v1alpha1 document".into()
        )
    );
}

#[tokio::test]
async fn nothing_listening_is_unavailable() {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    drop(listener);
    let err = GrpcTalos::default().version(&addr).await.unwrap_err();
    assert!(matches!(err, TalosError::Unavailable(_)), "{err:?}");
}

#[tokio::test]
async fn a_plaintext_server_is_unavailable_not_trusted() {
    // A server that does not speak TLS must not be mistaken for Talos.
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let addr = listener.local_addr().expect("addr").to_string();
    tokio::spawn(async move {
        Server::builder()
            .add_service(MachineServiceServer::new(Node::default()))
            .serve_with_incoming(TcpListenerStream::new(listener))
            .await
            .expect("serve");
    });
    let err = GrpcTalos::default().version(&addr).await.unwrap_err();
    assert!(matches!(err, TalosError::Unavailable(_)), "{err:?}");
}
