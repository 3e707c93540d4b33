//! The NodeClass custom resource, its CRD and its status reconciler.

pub mod conditions;
pub mod content_check;
mod crd;
pub mod go_duration;
mod image;
pub mod image_check;
pub mod instance;
mod private_network;
mod reconciler;
pub mod rules;
mod source;
mod types;
mod verifications;

pub use crd::{CRD_PATH, NodeClassKind, all_crds_yaml, crd, crd_yaml};
pub use image::resolve_image_url;
pub use private_network::*;
pub use reconciler::{NodeClassController, ReconcileError};
pub use source::{KubeNodeClasses, read_secret_key};
pub use types::*;
