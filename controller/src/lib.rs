#![forbid(unsafe_code)]
//! Karpenter cloud provider for Scaleway Elastic Metal.
//!
//! Layers (house style §1). Domain modules import neither kube nor tonic:
//! `scaleway` (EM model, `ElasticMetal` trait, error classification, reqwest
//! client), `catalog` (offers -> instance types), `install` (the install state
//! machine and its ports), `rescue` (the SSH port and its russh client),
//! `talos` (config rendering and the maintenance port; only its `grpc`
//! submodule, the client adapter, uses tonic), `provider` (the CloudProvider
//! logic). Adapters: `grpc` (the tonic service), `nodeclass` (CRD and
//! reconciler), `k8s_nodes` (kube ports of the engine), `bootstrap_token` and
//! `node_registration` (kube ports of the provider), `resume` (the loop that
//! resumes installs after a restart), `drift_stamp` (the leader's re-stamp of
//! NodeClass hashes), `gc` (the orphan sweeper: a pure
//! decision, its driver and its Event adapter), `k8s_events` (Event writing
//! with series, shared by the engine's and the sweeper's adapters) and `cli`
//! (operator commands). `main` only wires.

pub mod bootstrap_token;
pub mod catalog;
pub mod churn;
pub mod cli;
pub mod config;
pub mod crashpoint;
pub mod drift_stamp;
pub mod gc;
pub mod grpc;
pub mod install;
pub mod k8s_catalog;
pub mod k8s_events;
pub mod k8s_nodes;
pub mod metrics;
pub mod node_registration;
pub mod nodeclass;
pub mod provider;
pub mod rescue;
pub mod resume;
pub mod scaleway;
pub mod talos;
