//! The pure install state machine.
