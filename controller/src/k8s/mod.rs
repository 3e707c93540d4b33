//! Kubernetes adapters of the domain modules (house style §1): the kube
//! implementations of ports declared elsewhere, and the leader's loops that
//! read or write Karpenter's NodeClaims.
//!
//! The ports live with the logic that calls them, so that `install` and
//! `provider` never import kube: `nodes` implements the engine's
//! [`NodePort`](crate::install::NodePort), `bootstrap_tokens` and
//! `node_registration` the provider's
//! [`BootstrapTokens`](crate::provider::BootstrapTokens) and
//! [`NodeRegistrar`](crate::provider::NodeRegistrar), and `catalog` feeds the
//! [`CatalogStore`](crate::catalog::CatalogStore) what registered Nodes
//! report. `resume` and `drift_stamp` are the leader-only passes over
//! NodeClaims (resuming installs, re-stamping NodeClass hashes); `events`
//! writes the Events that the engine's and the sweeper's adapters record;
//! `standby_events` records the standby pools' Events on their NodeClass.
//!
//! The other adapters sit next to what they adapt: `grpc` (the tonic
//! service), `nodeclass` (CRDs and reconcilers), `gc::k8s` (the sweeper's
//! Events) and `churn::watch` (the consolidation churn watch).

pub mod bootstrap_tokens;
pub mod catalog;
pub mod drift_stamp;
pub mod events;
pub mod node_registration;
pub mod nodes;
pub mod planner;
pub mod resume;
pub mod standby_events;
