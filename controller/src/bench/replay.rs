//! A trace replayed minute by minute, in simulated time, through the code the
//! controller runs: the planner's samples and decisions
//! ([`planner::decide`], [`push_sample`]), the standby count it asks of the
//! pool ([`standby_count`]), the pool's orders and releases at the end of
//! paid periods ([`plan::plan`], [`Periods`]), and what happens to a deleted
//! node's server ([`plan::recycle`]). What the replay models itself is what
//! the cluster and Scaleway do around that code:
//!
//! - an ordered server is idle after `install`, a wiped one after `wipe`;
//! - Karpenter's consolidation adopts an idle standby server while load runs
//!   on VMs (a reserved offering priced near zero always beats VMs); the
//!   pods are on it `adopt` later;
//! - a metal node is deleted once the load has fitted on one server fewer
//!   for `consolidateAfter`; its server goes back to the pool (wiped) or is
//!   deleted, as `recycle` says;
//! - VMs hold what metal does not ([`Fleet`]).

use chrono::{DateTime, Utc};

use super::fleet::{Fleet, Minute, minutes};
use super::setup::Setup;
use super::trace::Trace;
use crate::catalog::Billing;
use crate::provider::standby::plan::{self, Member, Periods, PoolSpec, Recycle, Step};
use crate::provider::standby::planner::{self, Change, PlannerSpec, Sample};
use crate::provider::standby::{State, push_sample, standby_count};

/// A trace as the load of each minute.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Minutes {
    pub start: DateTime<Utc>,
    pub cpu_millis: Vec<u64>,
    pub memory_bytes: Vec<u64>,
}

impl Minutes {
    /// The load of every minute from the trace's first sample to its last
    /// one's end (the last sample lasts as long as the one before it).
    pub fn of(trace: &Trace) -> Minutes {
        let start = trace.start();
        let last = trace.samples.len() - 1;
        let tail = if last > 0 {
            trace.samples[last].at - trace.samples[last - 1].at
        } else {
            chrono::Duration::minutes(1)
        };
        let minutes = ((trace.end() + tail - start).num_seconds() / 60).max(1);
        let (mut cpu, mut memory) = (Vec::new(), Vec::new());
        for i in 0..minutes {
            let at = trace
                .at(start + chrono::Duration::minutes(i))
                .copied()
                .unwrap_or(trace.samples[0]);
            cpu.push(at.cpu_millis);
            memory.push(at.memory_bytes);
        }
        Minutes {
            start,
            cpu_millis: cpu,
            memory_bytes: memory,
        }
    }

    pub fn len(&self) -> Minute {
        self.cpu_millis.len() as Minute
    }

    pub fn is_empty(&self) -> bool {
        self.cpu_millis.is_empty()
    }

    pub fn at(&self, minute: Minute) -> DateTime<Utc> {
        self.start + chrono::Duration::minutes(minute)
    }
}

/// What one server costs from its order at `created` to `gone` (minutes):
/// per started hour, or, billed monthly, its setup fee and its months pro
/// rata (docs/planner.md says why pro rata).
pub fn server_cost(setup: &Setup, billing: Billing, created: Minute, gone: Minute) -> f64 {
    let lived = (gone - created).max(1);
    match billing {
        Billing::Hourly => ((lived + 59) / 60) as f64 * setup.offer.hourly,
        Billing::Monthly => setup.offer.monthly * (1.0 + lived as f64 / (730.0 * 60.0)),
    }
}

/// Servers of `size` that hold the load.
pub fn servers_for(size: (u64, u64), cpu_millis: u64, memory_bytes: u64) -> u32 {
    cpu_millis
        .div_ceil(size.0.max(1))
        .max(memory_bytes.div_ceil(size.1.max(1))) as u32
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Where {
    Installing {
        ready: Minute,
    },
    Idle {
        since: Minute,
    },
    Wiping {
        ready: Minute,
    },
    /// Adopted; its pods are on it from `from`. `pending`: adopted for
    /// pods no VM held (core's provisioning chose the reserved capacity), so
    /// no VM runs for them meanwhile; otherwise core's consolidation is
    /// moving pods off VMs, which run until the move is done.
    Moving {
        from: Minute,
        pending: bool,
    },
    Node,
}

#[derive(Debug, Clone)]
struct Server {
    id: String,
    created: Minute,
    billing: Billing,
    at: Where,
}

/// What a replay measured.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Outcome {
    pub metal_euros: f64,
    pub vm_euros: f64,
    /// Servers ordered.
    pub orders: u32,
    /// Moves onto metal (adoptions) and off it (metal nodes consolidated).
    pub adoptions: u32,
    pub metal_removals: u32,
    /// Core-hours run on VMs while a server was being installed.
    pub vm_core_hours_installing: f64,
    pub vm_core_hours: f64,
    pub vms_launched: u32,
    /// Changes of the planner's target.
    pub target_changes: u32,
    pub most_servers: u32,
}

impl Outcome {
    pub fn euros(&self) -> f64 {
        self.metal_euros + self.vm_euros
    }
}

/// Replays `load` with `setup`'s pool and planner.
pub fn replay(load: &Minutes, setup: &Setup) -> Outcome {
    let server = setup.server();
    let d = &setup.durations;
    let settings = &setup.pool;
    let periods = Periods::default();
    let spec = PlannerSpec {
        window: settings.window,
        at_least: settings.at_least,
        hold: settings.hold,
        ahead: settings.ahead,
        max: settings.max_servers,
        server_cpu_millis: server.0,
        server_memory_bytes: server.1,
    };
    let mut pool = PoolSpec {
        offer: setup.offer.name.to_string(),
        zone: "fr-par-2".into(),
        min: 0,
        max: settings.max,
        idle_hourly_keep: settings.idle_hourly_keep,
        billing: settings.billing,
    };
    let keep = planner::history(settings.window, settings.hold, settings.ahead);
    let consolidate_after = minutes(d.consolidate_after).max(1);
    let mut fleet = Fleet::new(setup.vm_size(), setup.vm.hourly, consolidate_after);
    let mut out = Outcome::default();
    let mut servers: Vec<Server> = Vec::new();
    let mut samples: Vec<Sample> = Vec::new();
    let (mut target, mut last_change) = (0u32, None);
    let mut fitted_fewer: Minute = 0;
    let mut ids = 0u32;
    let end = load.len();
    for i in 0..end {
        let now = load.at(i);
        let (cpu, memory) = (load.cpu_millis[i as usize], load.memory_bytes[i as usize]);
        for s in &mut servers {
            s.at = match s.at {
                Where::Installing { ready } | Where::Wiping { ready } if i >= ready => {
                    Where::Idle { since: i }
                }
                Where::Moving { from, .. } if i >= from => Where::Node,
                other => other,
            };
        }
        let count = |servers: &[Server], f: fn(&Where) -> bool| {
            servers.iter().filter(|s| f(&s.at)).count() as u32
        };
        // Core adopts idle servers while load is left to VMs: pods that no
        // VM holds yet go straight to an idle server (provisioning prefers
        // the metal NodePool's reserved capacity), pods on VMs are moved by
        // consolidation.
        loop {
            let holding = count(&servers, |w| {
                matches!(w, Where::Node | Where::Moving { .. })
            });
            let (left_cpu, left_memory) = (
                cpu.saturating_sub(u64::from(holding) * server.0),
                memory.saturating_sub(u64::from(holding) * server.1),
            );
            let idle = servers
                .iter_mut()
                .filter(|s| matches!(s.at, Where::Idle { .. }))
                .min_by_key(|s| s.created);
            match idle {
                Some(s) if left_cpu + left_memory > 0 => {
                    s.at = Where::Moving {
                        from: i + minutes(d.adopt),
                        pending: fleet.needed(left_cpu, left_memory) > fleet.running(),
                    };
                    out.adoptions += 1;
                }
                _ => break,
            }
        }
        // Core deletes a metal node once the load fits on one fewer.
        let nodes = count(&servers, |w| matches!(w, Where::Node));
        if nodes > 0 && servers_for(server, cpu, memory) < nodes {
            fitted_fewer += 1;
        } else {
            fitted_fewer = 0;
        }
        if fitted_fewer >= consolidate_after {
            fitted_fewer = 0;
            let members = servers
                .iter()
                .filter(|s| !matches!(s.at, Where::Node | Where::Moving { .. }))
                .count();
            if let Some(k) = servers.iter().rposition(|s| s.at == Where::Node) {
                out.metal_removals += 1;
                match plan::recycle(Some(&pool), members, servers[k].billing) {
                    Recycle::Recycle { .. } => {
                        servers[k].at = Where::Wiping {
                            ready: i + minutes(d.wipe),
                        }
                    }
                    Recycle::Delete { .. } => {
                        let s = servers.remove(k);
                        out.metal_euros += server_cost(setup, s.billing, s.created, i);
                    }
                }
            }
        }
        // VMs hold the rest.
        let nodes = u64::from(count(&servers, |w| {
            matches!(w, Where::Node | Where::Moving { pending: true, .. })
        }));
        let (vm_cpu, vm_memory) = (
            cpu.saturating_sub(nodes * server.0),
            memory.saturating_sub(nodes * server.1),
        );
        fleet.step(i, fleet.needed(vm_cpu, vm_memory));
        let vm_core_hours = vm_cpu as f64 / 1000.0 / 60.0;
        out.vm_core_hours += vm_core_hours;
        if servers
            .iter()
            .any(|s| matches!(s.at, Where::Installing { .. }))
        {
            out.vm_core_hours_installing += vm_core_hours;
        }
        // The planner, as the standby pass runs it.
        push_sample(
            &mut samples,
            Sample {
                at: now,
                cpu_millis: cpu,
                memory_bytes: memory,
            },
            keep,
        );
        let decision = planner::decide(&spec, &samples, target, last_change, now);
        if decision.change != Change::Unchanged {
            target = decision.target;
            last_change = Some(now);
            out.target_changes += 1;
        }
        let adopted = count(&servers, |w| {
            matches!(w, Where::Node | Where::Moving { .. })
        });
        pool.min = standby_count(
            target,
            adopted,
            &PoolSpec {
                min: settings.min,
                ..pool.clone()
            },
        );
        let members: Vec<Member> = servers
            .iter()
            .filter_map(|s| {
                let (state, idle_since) = match s.at {
                    Where::Installing { .. } => (State::Installing, None),
                    Where::Wiping { .. } => (State::Wiping, None),
                    Where::Idle { since } => (State::Idle, Some(load.at(since))),
                    Where::Moving { .. } | Where::Node => return None,
                };
                Some(Member {
                    id: s.id.clone(),
                    state,
                    created_at: load.at(s.created),
                    idle_since,
                    billing: s.billing,
                })
            })
            .collect();
        for step in plan::plan(&pool, &members, true, &periods, now) {
            match step {
                Step::Order { .. } => {
                    ids += 1;
                    out.orders += 1;
                    servers.push(Server {
                        id: format!("s{ids}"),
                        created: i,
                        billing: pool.billing,
                        at: Where::Installing {
                            ready: i + minutes(d.install),
                        },
                    });
                }
                Step::Release { id, .. } => {
                    if let Some(k) = servers.iter().position(|s| s.id == id) {
                        let s = servers.remove(k);
                        out.metal_euros += server_cost(setup, s.billing, s.created, i);
                    }
                }
            }
        }
        out.most_servers = out.most_servers.max(servers.len() as u32);
    }
    for s in servers {
        out.metal_euros += server_cost(setup, s.billing, s.created, end);
    }
    fleet.close(end);
    out.vm_euros = fleet.cost;
    out.vms_launched = fleet.launched;
    out
}
