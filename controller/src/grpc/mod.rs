//! The CloudProvider gRPC service (`proto/karpenter/cloudprovider/v1`) on a
//! Unix socket: an adapter that decodes JSON, calls the provider and maps its
//! errors through the proto's error table.

mod convert;

use std::path::Path;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use futures::{Stream, StreamExt};
use serde_json::Value;
use tokio::net::UnixListener;
use tokio_stream::wrappers::{UnixListenerStream, WatchStream};
use tonic::{Request, Response, Status};
use tracing::{debug, info, warn};

use crate::catalog::{CatalogStore, ClassKind, PROVIDER_LABELS};
use crate::nodeclass;
use crate::provider::{PROVIDER_NAME, Provider, ProviderError, RepairAction, RepairPolicy};

pub use convert::RpcStatus;

pub mod pb {
    tonic::include_proto!("karpenter.cloudprovider.v1");
}

use pb::cloud_provider_server::{CloudProvider, CloudProviderServer};

/// Whether this replica holds Karpenter's leader lease, as the bridge reports.
#[derive(Debug, Default, Clone)]
pub struct Leadership(Arc<AtomicBool>);

impl Leadership {
    pub fn is_leader(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    fn set(&self, leader: bool) -> bool {
        self.0.swap(leader, Ordering::SeqCst)
    }
}

pub struct CloudProviderService {
    /// `None` in catalog-only mode.
    provider: Option<Arc<Provider>>,
    catalog: Arc<CatalogStore>,
    leadership: Leadership,
    /// Answered to RepairPolicies (computed from the install deadlines, see
    /// `provider/repair.rs`).
    repair_policies: Vec<RepairPolicy>,
}

impl CloudProviderService {
    /// Starts as a follower: mutating calls are refused until the bridge says
    /// this replica leads.
    pub fn new(
        provider: Arc<Provider>,
        leadership: Leadership,
        repair_policies: Vec<RepairPolicy>,
    ) -> Self {
        CloudProviderService {
            catalog: provider.catalog().clone(),
            provider: Some(provider),
            leadership,
            repair_policies,
        }
    }

    /// Serves the read-only half of the contract (Info, GetInstanceTypes,
    /// WatchInstanceTypes, RepairPolicies, SetLeadership) from a catalog and
    /// answers UNIMPLEMENTED to the calls that need the cloud and the cluster.
    /// `karpenter-scaleway catalog --serve` uses it to let Karpenter's
    /// scheduler (or the bridge benchmark) see a live catalog without a
    /// cluster. It declares no repair policies: it installs nothing, so it
    /// has no install to protect nor node to repair.
    pub fn catalog_only(catalog: Arc<CatalogStore>) -> Self {
        CloudProviderService {
            provider: None,
            catalog,
            leadership: Leadership::default(),
            repair_policies: Vec::new(),
        }
    }

    fn provider(&self) -> Result<&Arc<Provider>, Status> {
        self.provider.as_ref().ok_or_else(|| {
            Status::unimplemented("this provider serves the instance-type catalog only")
        })
    }

    fn require_leader(&self) -> Result<(), Status> {
        if self.leadership.is_leader() {
            Ok(())
        } else {
            Err(convert::not_leader())
        }
    }
}

fn decode(bytes: &[u8], what: &str) -> Result<Value, Status> {
    serde_json::from_slice(bytes)
        .map_err(|e| Status::invalid_argument(format!("decoding {what} JSON: {e}")))
}

fn encode(value: &Value) -> Result<Vec<u8>, Status> {
    serde_json::to_vec(value).map_err(|e| Status::internal(format!("encoding JSON: {e}")))
}

fn claim_name(claim: &Value) -> &str {
    claim
        .pointer("/metadata/name")
        .and_then(Value::as_str)
        .unwrap_or("")
}

/// Logs a failed call once, at the level its meaning deserves.
fn log_error(rpc: &str, subject: &str, err: &ProviderError) {
    match err {
        ProviderError::NotFound(_) => debug!(rpc, subject, error = %err, "call answered NotFound"),
        _ => warn!(rpc, subject, error = %err, "call failed"),
    }
}

/// Whole seconds on the wire, rounded up: a toleration must never come out
/// shorter than configured.
fn repair_policy(p: &RepairPolicy) -> pb::RepairPolicy {
    let seconds = |d: Duration| {
        let s = d.as_secs() + u64::from(d.subsec_nanos() > 0);
        i64::try_from(s).unwrap_or(i64::MAX)
    };
    let action = match p.action {
        RepairAction::Reboot => pb::repair_policy::Action::RebootNode,
        RepairAction::Replace => pb::repair_policy::Action::ReplaceNode,
    };
    pb::RepairPolicy {
        condition_type: p.condition_type.clone(),
        condition_status: p.condition_status.clone(),
        toleration_seconds: seconds(p.toleration),
        reason_regex: p.reason_regex.clone(),
        termination_grace_period_seconds: p.termination_grace_period.map(seconds),
        priority: i32::from(p.priority),
        action: action.into(),
    }
}

type WatchStreamOut =
    Pin<Box<dyn Stream<Item = Result<pb::WatchInstanceTypesResponse, Status>> + Send>>;

#[tonic::async_trait]
impl CloudProvider for CloudProviderService {
    async fn create(
        &self,
        req: Request<pb::CreateRequest>,
    ) -> Result<Response<pb::CreateResponse>, Status> {
        let provider = self.provider()?;
        self.require_leader()?;
        let claim = decode(&req.get_ref().node_claim_json, "NodeClaim")?;
        let name = claim_name(&claim).to_string();
        match provider.create(claim).await {
            Ok(hydrated) => Ok(Response::new(pb::CreateResponse {
                node_claim_json: encode(&hydrated)?,
            })),
            Err(e @ ProviderError::InsufficientCapacity(_)) => {
                log_error("Create", &name, &e);
                // The refused offering was marked before Create returned, so
                // the current revision holds the mark.
                let revision = self.catalog.snapshot().revision;
                Err(convert::insufficient_capacity(e, revision))
            }
            Err(e) => {
                log_error("Create", &name, &e);
                Err(convert::error_status(e))
            }
        }
    }

    async fn delete(
        &self,
        req: Request<pb::DeleteRequest>,
    ) -> Result<Response<pb::DeleteResponse>, Status> {
        let provider = self.provider()?;
        self.require_leader()?;
        let claim = decode(&req.get_ref().node_claim_json, "NodeClaim")?;
        match provider.delete(&claim).await {
            Ok(()) => Ok(Response::new(pb::DeleteResponse {})),
            Err(e) => {
                log_error("Delete", claim_name(&claim), &e);
                Err(convert::error_status(e))
            }
        }
    }

    async fn get(&self, req: Request<pb::GetRequest>) -> Result<Response<pb::GetResponse>, Status> {
        let pid = &req.get_ref().provider_id;
        match self.provider()?.get(pid).await {
            Ok(claim) => Ok(Response::new(pb::GetResponse {
                node_claim_json: encode(&claim)?,
            })),
            Err(e) => {
                log_error("Get", pid, &e);
                Err(convert::error_status(e))
            }
        }
    }

    async fn list(
        &self,
        _req: Request<pb::ListRequest>,
    ) -> Result<Response<pb::ListResponse>, Status> {
        match self.provider()?.list().await {
            Ok(claims) => Ok(Response::new(pb::ListResponse {
                node_claims_json: claims.iter().map(encode).collect::<Result<_, _>>()?,
            })),
            Err(e) => {
                log_error("List", "", &e);
                Err(convert::error_status(e))
            }
        }
    }

    async fn get_instance_types(
        &self,
        req: Request<pb::GetInstanceTypesRequest>,
    ) -> Result<Response<pb::GetInstanceTypesResponse>, Status> {
        let pool = decode(&req.get_ref().node_pool_json, "NodePool")?;
        let class_ref = |field: &str| {
            pool.pointer(&format!("/spec/template/spec/nodeClassRef/{field}"))
                .and_then(Value::as_str)
        };
        let (kind, class) = (ClassKind::of(class_ref("kind")), class_ref("name"));
        let snapshot = self.catalog.snapshot();
        if !snapshot.is_loaded() {
            return Err(Status::unavailable(
                "the offer catalog has not been read yet",
            ));
        }
        Ok(Response::new(pb::GetInstanceTypesResponse {
            instance_types: convert::instance_types(&snapshot.for_class(kind, class)),
        }))
    }

    type WatchInstanceTypesStream = WatchStreamOut;

    /// One message per catalog change. The first goes out as soon as the
    /// catalog has been read once (at once when it already has): an empty
    /// catalog would look like every instance type vanished.
    async fn watch_instance_types(
        &self,
        _req: Request<pb::WatchInstanceTypesRequest>,
    ) -> Result<Response<Self::WatchInstanceTypesStream>, Status> {
        let stream = WatchStream::new(self.catalog.subscribe())
            .filter(|s| futures::future::ready(s.is_loaded()))
            .map(|s| Ok(convert::watch_response(&s)));
        Ok(Response::new(Box::pin(stream)))
    }

    async fn is_drifted(
        &self,
        req: Request<pb::IsDriftedRequest>,
    ) -> Result<Response<pb::IsDriftedResponse>, Status> {
        let claim = decode(&req.get_ref().node_claim_json, "NodeClaim")?;
        let reason = self
            .provider()?
            .is_drifted(&claim)
            .map_err(convert::error_status)?;
        Ok(Response::new(pb::IsDriftedResponse { reason }))
    }

    async fn repair_policies(
        &self,
        _req: Request<pb::RepairPoliciesRequest>,
    ) -> Result<Response<pb::RepairPoliciesResponse>, Status> {
        Ok(Response::new(pb::RepairPoliciesResponse {
            policies: self.repair_policies.iter().map(repair_policy).collect(),
        }))
    }

    async fn reboot(
        &self,
        req: Request<pb::RebootRequest>,
    ) -> Result<Response<pb::RebootResponse>, Status> {
        let provider = self.provider()?;
        self.require_leader()?;
        let claim = decode(&req.get_ref().node_claim_json, "NodeClaim")?;
        let operation_id = &req.get_ref().operation_id;
        if operation_id.is_empty() {
            return Err(Status::invalid_argument("Reboot needs an operation_id"));
        }
        match provider.reboot(&claim, operation_id).await {
            Ok(()) => Ok(Response::new(pb::RebootResponse {})),
            Err(e) => {
                log_error("Reboot", claim_name(&claim), &e);
                Err(convert::error_status(e))
            }
        }
    }

    async fn info(
        &self,
        _req: Request<pb::InfoRequest>,
    ) -> Result<Response<pb::InfoResponse>, Status> {
        // The Instance kind only when it is served (its CRD is installed):
        // core watches every kind listed here, and a watch on a missing CRD
        // never syncs.
        let mut kinds = vec![nodeclass::KIND];
        if self.provider.as_ref().is_some_and(|p| p.serves_instances()) {
            kinds.push(nodeclass::instance::KIND);
        }
        Ok(Response::new(pb::InfoResponse {
            name: PROVIDER_NAME.into(),
            node_classes: kinds
                .into_iter()
                .map(|kind| pb::NodeClassKind {
                    group: nodeclass::GROUP.into(),
                    version: nodeclass::VERSION.into(),
                    kind: kind.into(),
                })
                .collect(),
            well_known_labels: PROVIDER_LABELS.iter().map(|l| l.to_string()).collect(),
            reservation_id_label: crate::catalog::LABEL_RESERVATION_ID.to_string(),
            provider_version: env!("CARGO_PKG_VERSION").into(),
        }))
    }

    async fn set_leadership(
        &self,
        req: Request<pb::SetLeadershipRequest>,
    ) -> Result<Response<pb::SetLeadershipResponse>, Status> {
        let r = req.get_ref();
        let was = self.leadership.set(r.leader);
        if was != r.leader {
            info!(leader = r.leader, identity = %r.identity, "leadership changed");
        }
        Ok(Response::new(pb::SetLeadershipResponse {}))
    }
}

/// Serves the service on the Unix socket at `path` until `shutdown` resolves.
/// A socket file left by a previous run is removed first; any other file at
/// that path is an error rather than something to delete.
pub async fn serve(
    path: &Path,
    service: CloudProviderService,
    shutdown: impl Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    use std::os::unix::fs::FileTypeExt;
    match std::fs::symlink_metadata(path) {
        Ok(meta) if meta.file_type().is_socket() => std::fs::remove_file(path)?,
        Ok(_) => anyhow::bail!("{} exists and is not a socket", path.display()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e.into()),
    }
    if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
        std::fs::create_dir_all(dir)?;
    }
    let listener = UnixListener::bind(path)?;
    info!(socket = %path.display(), "serving CloudProvider gRPC");
    let result = tonic::transport::Server::builder()
        .add_service(CloudProviderServer::new(service))
        .serve_with_incoming_shutdown(UnixListenerStream::new(listener), shutdown)
        .await;
    let _ = std::fs::remove_file(path);
    result.map_err(Into::into)
}

#[cfg(test)]
mod tests;
