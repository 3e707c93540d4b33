//! The NodeClass custom resource, its CRD and its status reconciler.

pub mod conditions;
pub mod content_check;
mod crd;
mod image;
pub mod image_check;
mod reconciler;
mod source;
mod types;
mod verifications;

pub use crd::{CRD_PATH, crd, crd_yaml};
pub use image::resolve_image_url;
pub use reconciler::{NodeClassController, ReconcileError};
pub use source::{KubeNodeClasses, read_secret_key};
pub use types::*;
