//! The `ScalewayInstanceNodeClass` custom resource (Scaleway Instances: VMs
//! and GPU VMs) and its status reconciler, whose cache Create reads
//! ([`InstanceClassCache`]) and which tells the catalog each NodeClass's view.

pub mod conditions;
mod observe;
mod reconciler;
mod types;

pub use reconciler::{
    InstanceClassCache, InstanceNodeClassController, KindAnswer, ProbeWindows, kind_served,
    probe_served,
};
pub use types::*;
