//! The `ScalewayInstanceNodeClass` custom resource (Scaleway Instances: VMs
//! and GPU VMs) and its status reconciler. Not yet served by Create: the
//! provider only orders Elastic Metal servers today.

pub mod conditions;
mod observe;
mod reconciler;
mod types;

pub use reconciler::{InstanceNodeClassController, kind_served};
pub use types::*;
