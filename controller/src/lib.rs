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
//! reconciler), `k8s` (the kube adapters of the domain ports: Nodes and
//! NodeClaims, bootstrap tokens, early Node registration, Events, Node
//! allocatable for the catalog, and the leader's resume and re-stamp loops),
//! `gc` (the orphan sweeper: a pure decision, its driver and its Event
//! adapter) and `cli` (operator commands). `main` only wires.

pub mod bench;
pub mod catalog;
pub mod churn;
pub mod cli;
pub mod config;
pub mod crashpoint;
pub mod gc;
pub mod grpc;
pub mod install;
pub mod k8s;
pub mod metrics;
pub mod nodeclass;
pub mod provider;
pub mod rescue;
pub mod scaleway;
pub mod talos;

#[cfg(test)]
mod layout_tests;
