//! The NodeClass custom resource, its CRD and its status reconciler.

pub mod conditions;
mod crd;
mod image;
mod reconciler;
mod source;
mod types;

pub use crd::{CRD_PATH, crd, crd_yaml};
pub use image::resolve_image_url;
pub use reconciler::{NodeClassController, ReconcileError};
pub use source::{KubeNodeClasses, read_secret_key};
pub use types::*;
