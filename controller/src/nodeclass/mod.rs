//! The NodeClass custom resource and its status reconciler.

mod types;

pub use types::*;
