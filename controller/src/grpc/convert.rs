//! Domain types → proto messages, and provider errors → gRPC statuses (the
//! error table of `cloudprovider.proto`).

use prost::Message;
use tonic::{Code, Status};

use super::pb;
use crate::catalog::{ClassKind, InstanceType, Operator, Requirement, Snapshot};
use crate::provider::ProviderError;

const CREATE_ERROR_DETAIL_URL: &str =
    "type.googleapis.com/karpenter.cloudprovider.v1.CreateErrorDetail";
const INSUFFICIENT_CAPACITY_DETAIL_URL: &str =
    "type.googleapis.com/karpenter.cloudprovider.v1.InsufficientCapacityDetail";
const NOT_LEADER_DETAIL_URL: &str =
    "type.googleapis.com/karpenter.cloudprovider.v1.NotLeaderDetail";

/// `google.rpc.Status`, the payload of the `grpc-status-details-bin` trailer.
#[derive(Clone, PartialEq, prost::Message)]
pub struct RpcStatus {
    #[prost(int32, tag = "1")]
    pub code: i32,
    #[prost(string, tag = "2")]
    pub message: String,
    #[prost(message, repeated, tag = "3")]
    pub details: Vec<prost_types::Any>,
}

fn with_detail(code: Code, message: String, type_url: &str, detail: Vec<u8>) -> Status {
    let rpc = RpcStatus {
        code: code as i32,
        message: message.clone(),
        details: vec![prost_types::Any {
            type_url: type_url.to_string(),
            value: detail,
        }],
    };
    Status::with_details(code, message, rpc.encode_to_vec().into())
}

pub fn not_leader() -> Status {
    with_detail(
        Code::FailedPrecondition,
        "this replica is not the leader".into(),
        NOT_LEADER_DETAIL_URL,
        pb::NotLeaderDetail {}.encode_to_vec(),
    )
}

/// RESOURCE_EXHAUSTED with the catalog revision that marks the refused
/// offering unavailable (the bridge waits for it before answering core).
pub fn insufficient_capacity(err: ProviderError, catalog_revision: u64) -> Status {
    with_detail(
        Code::ResourceExhausted,
        err.to_string(),
        INSUFFICIENT_CAPACITY_DETAIL_URL,
        pb::InsufficientCapacityDetail { catalog_revision }.encode_to_vec(),
    )
}

pub fn error_status(err: ProviderError) -> Status {
    let message = err.to_string();
    match err {
        ProviderError::InsufficientCapacity(_) => Status::resource_exhausted(message),
        ProviderError::NodeClassNotReady(_) => Status::failed_precondition(message),
        ProviderError::CreateFailed {
            reason,
            message: detail,
        } => with_detail(
            Code::Internal,
            message,
            CREATE_ERROR_DETAIL_URL,
            pb::CreateErrorDetail {
                condition_reason: reason,
                condition_message: detail,
            }
            .encode_to_vec(),
        ),
        ProviderError::NotFound(_) => Status::not_found(message),
        ProviderError::Invalid(_) => Status::invalid_argument(message),
        ProviderError::Unavailable(_) => Status::unavailable(message),
        ProviderError::RebootRefused(_) => Status::failed_precondition(message),
        ProviderError::PermissionDenied(_) => Status::permission_denied(message),
        ProviderError::NotNow(_) => Status::aborted(message),
    }
}

fn requirement(r: &Requirement) -> pb::Requirement {
    use pb::requirement::Operator as Op;
    let op = match r.operator {
        Operator::In => Op::In,
        Operator::NotIn => Op::NotIn,
        Operator::Exists => Op::Exists,
        Operator::DoesNotExist => Op::DoesNotExist,
        Operator::Gt => Op::Gt,
        Operator::Lt => Op::Lt,
    };
    pb::Requirement {
        key: r.key.clone(),
        operator: op as i32,
        values: r.values.clone(),
        min_values: None,
    }
}

pub fn instance_type(it: &InstanceType) -> pb::InstanceType {
    pb::InstanceType {
        name: it.name.clone(),
        requirements: it.requirements().iter().map(requirement).collect(),
        offerings: it
            .offerings
            .iter()
            .map(|o| pb::Offering {
                requirements: o.requirements().iter().map(requirement).collect(),
                price: o.price,
                available: o.available,
                reservation_capacity: o
                    .reservation
                    .as_ref()
                    .map_or(0, |r| i32::try_from(r.capacity).unwrap_or(i32::MAX)),
            })
            .collect(),
        capacity: it.capacity.to_quantities(true).into_iter().collect(),
        overhead: Some(pb::Overhead {
            kube_reserved: it
                .overhead
                .kube_reserved
                .to_quantities(false)
                .into_iter()
                .collect(),
            system_reserved: it
                .overhead
                .system_reserved
                .to_quantities(false)
                .into_iter()
                .collect(),
            eviction_threshold: it
                .overhead
                .eviction_threshold
                .to_quantities(false)
                .into_iter()
                .collect(),
        }),
    }
}

pub fn instance_types(types: &[InstanceType]) -> Vec<pb::InstanceType> {
    types.iter().map(instance_type).collect()
}

/// Elastic Metal goes on the wire as the empty kind, as it did before there
/// were two kinds (a bridge of that time reads every catalog as its own).
fn kind_on_wire(kind: ClassKind) -> String {
    match kind {
        ClassKind::ElasticMetal => String::new(),
        other => other.name().to_string(),
    }
}

pub fn watch_response(s: &Snapshot) -> pb::WatchInstanceTypesResponse {
    pb::WatchInstanceTypesResponse {
        revision: s.revision,
        catalogs: s
            .per_class
            .iter()
            .map(|((kind, name), types)| pb::NodeClassCatalog {
                node_class_name: name.clone(),
                instance_types: instance_types(types),
                node_class_kind: kind_on_wire(*kind),
            })
            .collect(),
        default_catalog: instance_types(&s.default),
        kind_defaults: s
            .kind_defaults
            .iter()
            .map(|(kind, types)| pb::NodeClassCatalog {
                node_class_name: String::new(),
                instance_types: instance_types(types),
                node_class_kind: kind_on_wire(*kind),
            })
            .collect(),
        offers_read_at_unix: s
            .refreshed_at
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_secs() as i64),
    }
}
