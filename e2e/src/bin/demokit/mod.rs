//! The demo's two stories: the mission (VMs first, then bare metal) and
//! bare metal only.

pub mod metal;
pub mod mission;
