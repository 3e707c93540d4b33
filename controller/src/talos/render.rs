//! Machine config rendering.

/// Per-node settings.
#[derive(Debug, Clone, Default)]
pub struct NodeSettings {}

#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum RenderError {
    #[error("invalid base config: {0}")]
    InvalidBase(String),
}

pub fn render_machine_config(base: &str, _node: &NodeSettings) -> Result<String, RenderError> {
    Ok(base.to_string())
}
