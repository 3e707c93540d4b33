//! talos-sim: plays the operating system of the servers emsim simulates.
//! It follows emsim's event stream and, per server, runs the rescue system
//! (an SSH server with a strict shell over the server's disk file), checks
//! the disk on a normal boot, serves Talos' maintenance API, and once
//! configured acts as the node's kubelet.
#![forbid(unsafe_code)]

pub mod admin;
mod boot_network;
pub mod disk;
pub mod faults;
pub mod follower;
pub mod image;
pub mod instance;
pub mod killable;
pub mod kubelet;
pub mod machine_config;
pub mod manager;
pub mod model;
pub mod network;
pub mod os;
pub mod private_links;
pub mod records;
pub mod shell;
pub mod ssh;
pub mod talos_api;
pub mod timings;
pub mod validator;

/// Makes ring the process' rustls provider. Several providers end up linked
/// into the workspace, and then rustls (through reqwest and kube) needs one
/// chosen explicitly; the first call wins, later ones are no-ops.
pub fn install_crypto_provider() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Generated from `proto/talos/machine/machine.proto`.
pub mod proto {
    #![allow(clippy::all, clippy::pedantic)]
    tonic::include_proto!("machine");
}
