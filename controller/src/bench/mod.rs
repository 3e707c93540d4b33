//! The planner replay (issue 28, in progress): load traces replayed through
//! the planner, standby and billing code the controller runs, in simulated
//! time, against what a user would do instead and the hindsight optimum.
//! Landed so far: the trace format and the shipped traces (`trace.rs`).

pub mod trace;
