//! The `ScalewayInstanceNodeClass` custom resource (Scaleway Instances: VMs
//! and GPU VMs) and its status reconciler. Not yet served by Create: the
//! provider only orders Elastic Metal servers today.

mod types;

pub use types::*;
