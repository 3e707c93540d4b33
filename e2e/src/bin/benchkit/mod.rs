//! What the benchmark binaries share: emsim's counters and knobs, the
//! provider's log on throttling, `/proc` readings of the stack's processes.
//! Each binary uses a part of it.
#![allow(dead_code)]

pub mod api;
pub mod logs;
pub mod procstat;
