//! The end-to-end scenarios: each module is one scenario against its own stack
//! (control plane, simulators, bridge, provider), on its own loopback address
//! block and work directory.
//!
//! They are modules of one test binary so that the suite links once.
//! `hack/e2e-run.py` runs each module in a process of its own, several at a
//! time; by hand, `cargo test -p e2e --test scenarios -- walking_skeleton::`
//! runs one (add `--nocapture` to watch it).

mod bad_input;
mod catalog_ice;
mod consolidation_churn;
mod controlplane;
mod drift;
mod hybrid;
mod install_disks;
mod install_faults;
mod install_join_crash;
mod install_registration;
mod install_resume;
mod instance_mixed;
mod instances;
mod leadership;
mod list_faults;
mod lost_answers;
mod orphans;
mod private_network;
mod reboot;
mod reboot_kinds;
mod soak;
mod standby;
mod standby_crash;
mod standby_monthly;
mod standby_race;
mod standby_safety;
mod walking_skeleton;
