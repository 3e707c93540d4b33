#![forbid(unsafe_code)]
//! Karpenter cloud provider for Scaleway Elastic Metal.
//!
//! Layers (house style §1): `scaleway` (domain model + trait of the EM API),
//! `install` (the install engine, pure state machine plus its ports), `rescue`
//! (SSH to the rescue system), `talos` (maintenance API client and config
//! rendering) import neither kube nor tonic; `grpc` (the CloudProvider service)
//! and `nodeclass` (CRD and reconciler) are adapters; `main` only wires.

pub mod catalog;
pub mod config;
pub mod grpc;
pub mod metrics;
pub mod nodeclass;
pub mod provider;
pub mod scaleway;
pub mod install;
pub mod k8s_nodes;
pub mod rescue;
pub mod talos;
