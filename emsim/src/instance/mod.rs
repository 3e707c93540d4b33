//! The Scaleway Instance API subset (servers, user data, product catalog,
//! flexible IPs) and the Block volumes their root disks live on
//! (`facts/scaleway-instances.md`).

pub mod catalog;
pub mod model;
pub mod server;
pub mod volumes;
pub mod wire;
pub mod world;

pub use catalog::{Availability, INSTANCE_ZONES, InstanceCatalog};
pub use server::{VmAction, VmState};
pub use world::{InstanceTimings, InstanceWorld, NewVm, VmPatch, VolumeRequest};
