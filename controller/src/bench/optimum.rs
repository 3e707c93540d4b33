//! The hindsight optimum: the cheapest schedule of servers and VMs that
//! covers the load at every minute, knowing the whole trace. Computing it
//! exactly is an integer program; this module brackets it:
//!
//! - **`lower`, a proven lower bound.** Cut the load into layers, layer k
//!   being what the k-th server would hold: at minute t it is worth
//!   `w_k(t) = g_t(k-1) - g_t(k)` of VMs, where `g_t(m)` is the VM cost per
//!   minute of what m servers leave, counted in whole VMs paid by the
//!   minute (never more than real VMs cost: they are whole, and billed by
//!   the started hour). Each layer is solved on its own by a dynamic
//!   program over minutes with three states: on VMs (`w_k(t)`), on an
//!   hourly server (its price per minute, and `lead`
//!   minutes of it on entering), on a monthly server (its setup fee and
//!   `lead` minutes on entering, its month pro rata per minute, kept to the
//!   end). Any real schedule, its servers stacked from the bottom layer
//!   (monthly ones lowest: they stay), costs at least the sum of the layers'
//!   optima: docs/planner.md gives the proof, with the one credit it needs
//!   (a layer turning from hourly to monthly gets back `lead` minutes of the
//!   hourly price). The VMs can also be counted by the started hour at
//!   points an hour apart (`started_hours`); the bound is the higher of the
//!   two sums.
//! - **`upper`, a real schedule.** The same layers with billing exact (per
//!   started hour from the order), each layer's servers kept in it, and the
//!   load they leave run on the replay's VM fleet. Its cost is what that
//!   schedule would really be billed, so the optimum is at most that.

use super::fleet::{Fleet, Minute};
use super::replay::{Minutes, servers_for};
use super::setup::Setup;

/// The bracket.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Optimum {
    pub lower: f64,
    /// A lower bound on what any policy that orders servers only for load
    /// present at the order can cost (docs/planner.md): what the planner
    /// without `ahead` can be compared with.
    pub reactive: f64,
    pub upper: f64,
    /// Servers the upper schedule orders.
    pub upper_orders: u32,
}

struct Prices {
    /// EUR per minute: hourly server, monthly server (pro rata); the
    /// monthly setup fee; the lead in minutes.
    hourly: f64,
    monthly: f64,
    fee: f64,
    lead: f64,
}

fn prices(setup: &Setup) -> Prices {
    Prices {
        hourly: setup.offer.hourly / 60.0,
        monthly: setup.offer.monthly / (730.0 * 60.0),
        fee: setup.offer.monthly,
        lead: super::fleet::minutes(setup.durations.install) as f64,
    }
}

/// EUR per minute of the whole VMs that hold what `m` servers leave at
/// minute `t`: the layers' weights of both the bound and the real schedule.
fn vm_rate(load: &Minutes, setup: &Setup, t: usize, m: u64) -> f64 {
    let (sc, sm) = setup.server();
    let fleet = Fleet::new(setup.vm_size(), setup.vm.hourly, 1);
    let n = fleet.needed(
        load.cpu_millis[t].saturating_sub(m * sc),
        load.memory_bytes[t].saturating_sub(m * sm),
    );
    n as f64 * setup.vm.hourly / 60.0
}

/// The layers' weights: `w[k][t]`.
fn weights(load: &Minutes, setup: &Setup) -> Vec<Vec<f64>> {
    let server = setup.server();
    let layers = (0..load.len() as usize)
        .map(|t| servers_for(server, load.cpu_millis[t], load.memory_bytes[t]))
        .max()
        .unwrap_or(0) as u64;
    (1..=layers)
        .map(|k| {
            (0..load.len() as usize)
                .map(|t| vm_rate(load, setup, t, k - 1) - vm_rate(load, setup, t, k))
                .collect()
        })
        .collect()
}

/// The lower bound of one layer.
fn layer_lower(w: &[f64], p: &Prices, may_enter: impl Fn(usize) -> bool) -> f64 {
    let (mut vm, mut hourly, mut monthly) = (0.0f64, f64::INFINITY, f64::INFINITY);
    for (t, &wt) in w.iter().enumerate() {
        let (enter_hourly, enter_monthly) = if may_enter(t) {
            (p.hourly * p.lead, p.fee + p.monthly * p.lead)
        } else {
            (f64::INFINITY, f64::INFINITY)
        };
        let next_monthly = monthly
            .min(vm + enter_monthly)
            .min(hourly + enter_monthly - p.hourly * p.lead)
            + p.monthly;
        let next_hourly = hourly.min(vm + enter_hourly) + p.hourly;
        let next_vm = vm.min(hourly) + wt;
        (vm, hourly, monthly) = (next_vm, next_hourly, next_monthly);
    }
    vm.min(hourly).min(monthly)
}

/// One layer's cheapest real schedule: the minutes it is on a server, the
/// metal cost, the servers ordered.
fn layer_upper(w: &[f64], setup: &Setup) -> (Vec<bool>, f64, u32) {
    // States after a minute: 0 on VMs; 1..=60 on an hourly server with
    // (state - 1) minutes of its paid hour left; 61 on a monthly server; 62
    // before the first minute. A stretch on VMs that starts is charged an
    // hour of them (what the VMs launched then are billed at least): that
    // only steers which schedule is chosen, whose cost is then computed for
    // real.
    const VM: usize = 0;
    const MONTHLY: usize = 61;
    const BEFORE: usize = 62;
    let p = prices(setup);
    let lead = p.lead as usize;
    let hour = setup.offer.hourly;
    // Entering at this minute: ordered `lead` minutes ago, every hour begun
    // since is paid.
    let entry_hours = (lead / 60 + 1) as f64;
    let entry_state = (lead / 60 + 1) * 60 - lead; // (left after it) + 1
    let enter_monthly = p.fee + p.monthly * (p.lead + 1.0);
    let mut cost = [f64::INFINITY; 63];
    cost[BEFORE] = 0.0;
    let mut from: Vec<[u8; 63]> = Vec::with_capacity(w.len());
    for &wt in w {
        let mut next = [f64::INFINITY; 63];
        let mut back = [0u8; 63];
        let mut relax = |state: usize, c: f64, prev: usize| {
            if c < next[state] {
                next[state] = c;
                back[state] = prev as u8;
            }
        };
        for (s, &c) in cost.iter().enumerate() {
            if !c.is_finite() {
                continue;
            }
            match s {
                VM | BEFORE => {
                    relax(VM, c + if s == VM { wt } else { wt * 60.0 }, s);
                    relax(entry_state, c + entry_hours * hour, s);
                    relax(MONTHLY, c + enter_monthly, s);
                }
                MONTHLY => relax(MONTHLY, c + p.monthly, s),
                1 => {
                    relax(VM, c + wt * 60.0, s);
                    relax(60, c + hour, s);
                }
                _ => {
                    relax(VM, c + wt * 60.0, s);
                    relax(s - 1, c, s);
                }
            }
        }
        from.push(back);
        cost = next;
    }
    let mut state = (0..63)
        .min_by(|a, b| cost[*a].total_cmp(&cost[*b]))
        .unwrap_or(VM);
    let mut covered = vec![false; w.len()];
    let (mut orders, mut metal) = (0, 0.0);
    for t in (0..w.len()).rev() {
        let prev = from[t][state] as usize;
        covered[t] = state != VM;
        let entered = prev == VM || prev == BEFORE;
        metal += match state {
            VM => 0.0,
            MONTHLY if entered => enter_monthly,
            MONTHLY => p.monthly,
            _ if entered => entry_hours * hour,
            60 if prev == 1 => hour,
            _ => 0.0,
        };
        orders += u32::from(state != VM && entered);
        state = prev;
    }
    (covered, metal, orders)
}

/// How each minute's VMs count in the started-hour form of the bounds: a
/// whole hour at a point (a minute where the load needs one server more
/// than the minute before, points at least an hour apart), nothing within
/// 59 minutes of a point, one minute elsewhere. A billed VM hour holds at
/// most one point and lies within 59 minutes of it, so the VMs any schedule
/// runs are billed at least this (docs/planner.md).
fn started_hours(need: &[u32]) -> Vec<f64> {
    let mut points = Vec::new();
    for (t, &n) in need.iter().enumerate() {
        let before = if t == 0 { 0 } else { need[t - 1] };
        if n > before && points.last().is_none_or(|&p| t >= p + 60) {
            points.push(t);
        }
    }
    let mut count = vec![1.0; need.len()];
    for &p in &points {
        let around = p.saturating_sub(59)..(p + 60).min(need.len());
        count[around].iter_mut().for_each(|c| *c = 0.0);
    }
    for &p in &points {
        count[p] = 60.0;
    }
    count
}

/// The sum of the layers' bounds, VMs by the minute or in the started-hour
/// form, whichever is higher: both are bounds, their maximum too (not a
/// layer-by-layer maximum, which no schedule need respect).
fn layered(w: &[Vec<f64>], hours: &[f64], bound: impl Fn(usize, &[f64]) -> f64) -> f64 {
    let by_minute = w.iter().enumerate().map(|(k, l)| bound(k, l)).sum::<f64>();
    let by_hour = w
        .iter()
        .enumerate()
        .map(|(k, l)| {
            let l: Vec<f64> = l.iter().zip(hours).map(|(w, c)| w * c).collect();
            bound(k, &l)
        })
        .sum::<f64>();
    by_minute.max(by_hour)
}

/// The bracket of the hindsight optimum for `load` under `setup`.
pub fn optimum(load: &Minutes, setup: &Setup) -> Optimum {
    let p = prices(setup);
    let w = weights(load, setup);
    let server = setup.server();
    let lead = p.lead as usize;
    let need: Vec<u32> = (0..load.len() as usize)
        .map(|t| servers_for(server, load.cpu_millis[t], load.memory_bytes[t]))
        .collect();
    let hours = started_hours(&need);
    let lower = layered(&w, &hours, |_, layer| layer_lower(layer, &p, |_| true));
    // Reactive: a server that is usable at t was ordered at t - lead, when
    // the load needed at least as many servers as its layer.
    let reactive = layered(&w, &hours, |k, layer| {
        layer_lower(layer, &p, |t| need[t.saturating_sub(lead)] as usize > k)
    });
    let mut servers = vec![0u64; load.len() as usize];
    let (mut metal, mut orders) = (0.0, 0);
    for layer in &w {
        let (covered, cost, n) = layer_upper(layer, setup);
        metal += cost;
        orders += n;
        for (s, c) in servers.iter_mut().zip(covered) {
            *s += u64::from(c);
        }
    }
    let server = setup.server();
    let consolidate = super::fleet::minutes(setup.durations.consolidate_after);
    let mut fleet = Fleet::new(setup.vm_size(), setup.vm.hourly, consolidate);
    for (t, m) in servers.iter().enumerate() {
        let need = fleet.needed(
            load.cpu_millis[t].saturating_sub(m * server.0),
            load.memory_bytes[t].saturating_sub(m * server.1),
        );
        fleet.step(t as Minute, need);
    }
    fleet.close(load.len());
    Optimum {
        lower,
        reactive,
        upper: metal + fleet.cost,
        upper_orders: orders,
    }
}
