use std::time::Duration;

use chrono::{TimeZone, Utc};

use super::replay::{Minutes, replay, servers_for};
use super::setup::{PoolSettings, Setup};
use super::trace::{Sample, Scale, Shape, Trace, generate};
use super::{compare, held, optimum, vms_only};

/// `cores` from each (start minute, cores) until the next, over `minutes`.
fn trace(steps: &[(i64, u64)], minutes: i64) -> Minutes {
    let start = Utc.with_ymd_and_hms(2026, 11, 2, 0, 0, 0).unwrap();
    let cores = |m: i64| steps.iter().rev().find(|s| s.0 <= m).map_or(0, |s| s.1);
    Minutes {
        start,
        cpu_millis: (0..minutes).map(|m| cores(m) * 1000).collect(),
        memory_bytes: (0..minutes).map(|m| cores(m) * (4 << 30)).collect(),
    }
}

fn recommended() -> Setup {
    Setup {
        pool: PoolSettings {
            window: Duration::from_secs(3600),
            at_least: Duration::from_secs(3600),
            hold: Duration::from_secs(600),
            ahead: Some(Duration::from_secs(1200)),
            ..PoolSettings::default()
        },
        ..Setup::default()
    }
}

#[test]
fn minutes_hold_each_sample_until_the_next() {
    let start = Utc.with_ymd_and_hms(2026, 11, 2, 0, 0, 0).unwrap();
    let at = |m: i64, cpu: u64| Sample {
        at: start + chrono::Duration::minutes(m),
        cpu_millis: cpu,
        memory_bytes: 1,
    };
    let m = Minutes::of(&Trace {
        name: "t".into(),
        samples: vec![at(0, 1000), at(5, 3000)],
    });
    // The last sample lasts as long as the one before it.
    assert_eq!(m.len(), 10);
    assert_eq!(m.cpu_millis[..6], [1000, 1000, 1000, 1000, 1000, 3000]);
    assert_eq!(m.at(5), start + chrono::Duration::minutes(5));
}

#[test]
fn a_planner_that_may_stage_nothing_costs_what_vms_only_cost() {
    let load = Minutes::of(&generate(Shape::WorkingDays, &Scale::default()));
    let setup = Setup {
        pool: PoolSettings {
            max: 0,
            max_servers: 0,
            ..PoolSettings::default()
        },
        ..Setup::default()
    };
    let out = replay(&load, &setup);
    assert_eq!(out.orders, 0);
    assert_eq!(out.metal_euros, 0.0);
    assert!((out.vm_euros - vms_only(&load, &setup)).abs() < 1e-9);
}

#[test]
fn a_burst_shorter_than_the_window_orders_nothing() {
    // Nothing, then 30 cores for 40 minutes, then nothing, over 6 hours.
    let load = trace(&[(0, 0), (120, 30), (160, 0)], 360);
    let out = replay(&load, &recommended());
    assert_eq!((out.orders, out.metal_euros), (0, 0.0));
    assert!(out.vm_euros > 0.0);
    // Hindsight would have staged servers for it: the bound is below.
    let o = optimum::optimum(&load, &recommended());
    assert!(o.lower < out.euros(), "{o:?} {out:?}");
}

#[test]
fn a_load_that_stays_is_moved_onto_the_servers_it_needs() {
    // 30 cores from the second hour on, for two days.
    let load = trace(&[(0, 0), (60, 30)], 2 * 1440);
    let setup = recommended();
    let out = replay(&load, &setup);
    let needed = servers_for(setup.server(), 30_000, 30 * (4 << 30));
    assert_eq!((needed, out.orders, out.adoptions), (3, 3, 3));
    assert_eq!(out.metal_removals, 0);
    // VMs only for the window and the install.
    assert!(out.vm_core_hours < 30.0 * 2.0, "{out:?}");
    assert!(out.vm_core_hours_installing > 0.0);
}

#[test]
fn the_lower_bound_holds_for_every_schedule_the_bench_computes() {
    // The shipped traces, and spikes drawn from other seeds (bursts shorter
    // than an hour are where the started-hour form of the bounds counts).
    let spiky = |seed| Scale {
        seed,
        ..Scale::default()
    };
    let traces = Shape::ALL
        .map(|shape| (shape, Scale::default()))
        .into_iter()
        .chain((1..=3).map(|seed| (Shape::Spiky, spiky(seed))));
    for (shape, scale) in traces {
        let load = Minutes::of(&generate(shape, &scale));
        for setup in [Setup::default(), recommended()] {
            let c = compare(shape.name(), &load, &setup);
            let o = c.optimum;
            assert!(o.lower <= o.reactive + 1e-9, "{shape:?} {o:?}");
            assert!(o.lower <= o.upper, "{shape:?} {o:?}");
            assert!(o.lower <= c.planner.euros(), "{shape:?} {c:?}");
            assert!(
                o.lower <= c.vms_only && o.lower <= c.peak_hourly,
                "{shape:?} {c:?}"
            );
            for m in 0..=c.peak_servers {
                assert!(o.lower <= held(&load, &setup, m), "{shape:?} {m} {o:?}");
            }
            // VMs only orders no server: a reactive policy.
            assert!(o.reactive <= c.vms_only, "{shape:?} {c:?}");
            if setup.pool.ahead.is_none() {
                // Without `ahead` the planner orders only for load present.
                assert!(o.reactive <= c.planner.euros(), "{shape:?} {c:?}");
            }
        }
    }
}

#[test]
fn the_lower_bound_of_a_flat_load_is_one_server_paid_from_its_order() {
    // Exactly one server's allocatable for 3 hours: the bound is that
    // server from its order (13 minutes of lead) to the end, per minute.
    let setup = Setup::default();
    let (cpu, _) = setup.server();
    let mut load = trace(&[(0, 1)], 180);
    load.cpu_millis.iter_mut().for_each(|c| *c = cpu);
    load.memory_bytes.iter_mut().for_each(|m| *m = 1 << 30);
    let o = optimum::optimum(&load, &setup);
    let expected = setup.offer.hourly * (180.0 + 13.0) / 60.0;
    assert!((o.lower - expected).abs() < 1e-9, "{o:?} vs {expected}");
    // The real schedule: one server, four started hours (13 + 180 minutes).
    assert!((o.upper - 4.0 * setup.offer.hourly).abs() < 1e-9, "{o:?}");
    assert_eq!(o.upper_orders, 1);
}

#[test]
fn the_shipped_traces_meet_the_figures_docs_planner_md_gives() {
    let setup = recommended();
    let ratio = |shape| {
        let load = Minutes::of(&generate(shape, &Scale::default()));
        compare("t", &load, &setup)
    };
    let working = ratio(Shape::WorkingDays);
    assert!(working.ratio() <= 1.10, "{working:?}");
    assert!(working.vs_vms() < 0.5, "{working:?}");
    for shape in [Shape::Weekly, Shape::Step, Shape::Ramp] {
        let c = ratio(shape);
        assert!(c.ratio() <= 1.10, "{shape:?} {c:?}");
    }
    // docs/planner.md: spiky misses, within 1.65× of the real hindsight
    // schedule (the spikes paid on VMs by the started hour), and no policy
    // that orders servers only for load present comes within 1.10× of it.
    let spiky = ratio(Shape::Spiky);
    assert!(spiky.ratio() > 1.10, "{spiky:?}");
    assert!(
        spiky.optimum.reactive > 1.10 * spiky.optimum.upper,
        "{spiky:?}"
    );
    assert!(
        spiky.planner.euros() <= 1.65 * spiky.optimum.upper,
        "{spiky:?}"
    );
}

#[test]
fn the_lower_bound_counts_whole_vms() {
    // 1.5 VMs' worth of CPU for 30 minutes: no server pays (13 minutes of
    // lead plus 30 at 0.153 EUR/h is more), so the bound is 2 whole VMs for
    // 30 minutes, not 1.5 (the real schedules pay at least a started hour).
    let setup = Setup::default();
    let (vm_cpu, _) = setup.vm_size();
    let mut load = trace(&[(0, 1)], 30);
    load.cpu_millis.iter_mut().for_each(|c| *c = vm_cpu * 3 / 2);
    load.memory_bytes.iter_mut().for_each(|m| *m = 1 << 30);
    let o = optimum::optimum(&load, &setup);
    let expected = 2.0 * setup.vm.hourly * 30.0 / 60.0;
    assert!((o.lower - expected).abs() < 1e-9, "{o:?} vs {expected}");
    assert!(o.upper >= 2.0 * setup.vm.hourly, "{o:?}");
}

#[test]
fn holding_servers_for_the_spikes_stays_far_from_the_hindsight_schedule() {
    // docs/planner.md "Against the goal": on `spiky`, servers held the whole
    // trace (the base's and m - 1 idle for the spikes) are the alternative
    // to paying each spike on VMs. One more than the base pays a little;
    // none comes near 1.10× the hindsight schedule.
    let setup = recommended();
    let load = Minutes::of(&generate(Shape::Spiky, &Scale::default()));
    let c = compare("spiky", &load, &setup);
    let held: Vec<f64> = (0..=c.peak_servers)
        .map(|m| held(&load, &setup, m))
        .collect();
    eprintln!("spiky, servers held the whole trace (m: EUR): {held:.2?}; {c:?}");
    assert!((held[0] - c.vms_only).abs() < 1e-9, "{held:?} {c:?}");
    assert!(
        held[2] < held[1] && held[2] < c.planner.euros(),
        "{held:?} {c:?}"
    );
    assert!(
        held.iter().all(|&e| e > 1.10 * c.optimum.upper),
        "{held:?} {c:?}"
    );
}

#[test]
fn a_burst_shorter_than_an_hour_costs_a_reactive_policy_its_vms_started_hour() {
    // 5 cores for 20 minutes: on VMs from its first minute for any policy
    // that orders servers only for load present, and those VMs are billed
    // an hour. The planner (no `ahead`) pays exactly that; hindsight pays a
    // server ordered 13 minutes before, per minute in the bound.
    let setup = Setup::default();
    let load = trace(&[(0, 0), (100, 5), (120, 0)], 300);
    let vms = setup.vm_size();
    let n = super::fleet::Fleet::new(vms, setup.vm.hourly, 1).needed(5000, 5 * (4 << 30));
    let o = optimum::optimum(&load, &setup);
    let hour = n as f64 * setup.vm.hourly;
    assert!((o.reactive - hour).abs() < 1e-9, "{o:?} vs {hour}");
    let planner = replay(&load, &setup);
    assert!((planner.euros() - hour).abs() < 1e-9, "{planner:?}");
    let server = setup.offer.hourly * (13.0 + 20.0) / 60.0;
    assert!((o.lower - server).abs() < 1e-9, "{o:?} vs {server}");
}
