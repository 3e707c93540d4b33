//! The planner replay (docs/planner.md, "What it saves"): load traces replayed
//! through the planner, standby and billing code the controller runs, in
//! simulated time, against what a user would do instead (VMs only, metal
//! sized for the peak) and the hindsight optimum.

pub mod fleet;
pub mod optimum;
pub mod replay;
pub mod setup;
pub mod trace;

use std::fmt::Write as _;

use fleet::Fleet;
use optimum::Optimum;
use replay::{Minutes, Outcome, servers_for};
use setup::Setup;

/// Every figure of one trace.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    pub trace: String,
    pub days: f64,
    pub vms_only: f64,
    pub peak_servers: u32,
    pub peak_hourly: f64,
    pub peak_monthly: f64,
    pub planner: Outcome,
    pub optimum: Optimum,
}

impl Comparison {
    /// The planner's cost over the optimum's lower bound: at least its
    /// distance to the optimum.
    pub fn ratio(&self) -> f64 {
        self.planner.euros() / self.optimum.lower
    }

    pub fn vs_vms(&self) -> f64 {
        self.planner.euros() / self.vms_only
    }
}

/// Everything on VMs.
pub fn vms_only(load: &Minutes, setup: &Setup) -> f64 {
    let after = fleet::minutes(setup.durations.consolidate_after);
    let mut fleet = Fleet::new(setup.vm_size(), setup.vm.hourly, after);
    for t in 0..load.len() {
        let need = fleet.needed(load.cpu_millis[t as usize], load.memory_bytes[t as usize]);
        fleet.step(t, need);
    }
    fleet.close(load.len());
    fleet.cost
}

/// `m` servers ordered before the trace and held to its end, the load they
/// leave on VMs (billed as the replay bills them): what keeping servers
/// ready for load no history foresees costs.
pub fn held(load: &Minutes, setup: &Setup, m: u32) -> f64 {
    let server = setup.server();
    let lead = fleet::minutes(setup.durations.install);
    let metal = f64::from(m) * replay::server_cost(setup, setup.pool.billing, 0, load.len() + lead);
    let after = fleet::minutes(setup.durations.consolidate_after);
    let mut fleet = Fleet::new(setup.vm_size(), setup.vm.hourly, after);
    let m = u64::from(m);
    for t in 0..load.len() {
        let (cpu, memory) = (load.cpu_millis[t as usize], load.memory_bytes[t as usize]);
        let need = fleet.needed(
            cpu.saturating_sub(m * server.0),
            memory.saturating_sub(m * server.1),
        );
        fleet.step(t, need);
    }
    fleet.close(load.len());
    metal + fleet.cost
}

/// Compares everything on one trace.
pub fn compare(name: &str, load: &Minutes, setup: &Setup) -> Comparison {
    let server = setup.server();
    let peak_servers = (0..load.len() as usize)
        .map(|t| servers_for(server, load.cpu_millis[t], load.memory_bytes[t]))
        .max()
        .unwrap_or(0);
    // Ordered before the trace starts, so that they are ready at its start.
    let lead = fleet::minutes(setup.durations.install);
    let span = load.len() + lead;
    let each = |billing| replay::server_cost(setup, billing, 0, span);
    let planner = replay::replay(load, setup);
    Comparison {
        trace: name.to_string(),
        days: load.len() as f64 / 1440.0,
        vms_only: vms_only(load, setup),
        peak_servers,
        peak_hourly: f64::from(peak_servers) * each(crate::catalog::Billing::Hourly),
        peak_monthly: f64::from(peak_servers) * each(crate::catalog::Billing::Monthly),
        planner,
        optimum: optimum::optimum(load, setup),
    }
}

/// The table of comparisons (EUR over each trace).
pub fn table(rows: &[Comparison]) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<13} {:>4} {:>8} {:>8} {:>8} {:>8} {:>15} {:>6} {:>8} {:>6} {:>6} {:>7} {:>6} {:>5} {:>4}",
        "TRACE",
        "DAYS",
        "VMS-ONLY",
        "PEAK-H",
        "PEAK-M",
        "PLANNER",
        "OPTIMUM",
        "/OPT",
        "REACTIVE",
        "/REACT",
        "/VMS",
        "VM-CH-I",
        "BOUGHT",
        "MOVES",
        "OFF"
    );
    for r in rows {
        let _ = writeln!(
            out,
            "{:<13} {:>4.1} {:>8.2} {:>8.2} {:>8.2} {:>8.2} {:>15} {:>6.3} {:>8.2} {:>6.3} {:>6.3} {:>7.1} {:>6} {:>5} {:>4}",
            r.trace,
            r.days,
            r.vms_only,
            r.peak_hourly,
            r.peak_monthly,
            r.planner.euros(),
            format!("{:.2}-{:.2}", r.optimum.lower, r.optimum.upper),
            r.ratio(),
            r.optimum.reactive,
            r.planner.euros() / r.optimum.reactive,
            r.vs_vms(),
            r.planner.vm_core_hours_installing,
            r.planner.orders,
            r.planner.adoptions,
            r.planner.metal_removals,
        );
    }
    out
}

#[cfg(test)]
#[path = "bench_tests.rs"]
mod tests;
