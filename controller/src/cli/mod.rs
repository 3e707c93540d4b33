//! Operator commands of the `karpenter-scaleway` binary (besides `serve`).
//! Each command is a module with its clap `Args` and a `run` function; `main`
//! only dispatches.

pub mod catalog;
pub mod plan;
pub mod plan_replay;
pub mod render_config;
pub mod servers;

#[cfg(test)]
mod scw_profile_tests;
