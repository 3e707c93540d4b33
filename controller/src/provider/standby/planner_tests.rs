use super::*;

fn t(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

const GIB: u64 = 1 << 30;
const H: u64 = 3600;

fn spec() -> PlannerSpec {
    PlannerSpec {
        window: Duration::from_secs(2 * H),
        at_least: Duration::from_secs(2 * H),
        hold: Duration::from_secs(H),
        ahead: None,
        max: 4,
        server_cpu_millis: 3_500,
        server_memory_bytes: 28 * GIB,
    }
}

fn sample(at: &str, cpu: u64, memory_gib: u64) -> Sample {
    Sample {
        at: t(at),
        cpu_millis: cpu,
        memory_bytes: memory_gib * GIB,
    }
}

fn window() -> Duration {
    Duration::from_secs(2 * H)
}

#[test]
fn sustained_load_is_the_least_seen_over_the_whole_window() {
    let samples = [
        sample("2026-11-24T07:30:00Z", 1_000, 4),
        sample("2026-11-24T08:00:00Z", 9_000, 40),
        sample("2026-11-24T09:00:00Z", 8_000, 50),
        sample("2026-11-24T09:30:00Z", 12_000, 60),
    ];
    // The window 08:00-10:00: the sample in force at 08:00 is 9000m/40 GiB.
    assert_eq!(
        sustained(&samples, window(), window(), t("2026-11-24T10:00:00Z")),
        Some((8_000, 40 * GIB))
    );
    // 07:45-09:45: the 07:30 sample was still in force at 07:45.
    assert_eq!(
        sustained(&samples, window(), window(), t("2026-11-24T09:45:00Z")),
        Some((1_000, 4 * GIB))
    );
    // Not enough history.
    assert_eq!(
        sustained(&samples, window(), window(), t("2026-11-24T09:00:00Z")),
        None
    );
}

#[test]
fn at_least_counts_what_runs_that_long_within_the_window() {
    // A day: 10 000m from 08:00 to 22:00 (14 h), 2 000m otherwise; memory
    // 40 GiB for only 6 h.
    let samples = [
        sample("2026-11-23T00:00:00Z", 2_000, 8),
        sample("2026-11-23T08:00:00Z", 10_000, 40),
        sample("2026-11-23T14:00:00Z", 10_000, 16),
        sample("2026-11-23T22:00:00Z", 2_000, 8),
    ];
    let day = Duration::from_secs(24 * H);
    let now = t("2026-11-24T00:00:00Z");
    // More than 12 h a day: the daytime CPU counts, the 6 h memory peak not.
    assert_eq!(
        sustained(&samples, day, Duration::from_secs(12 * H), now),
        Some((10_000, 16 * GIB))
    );
    // More than 15 h a day: only the night level.
    assert_eq!(
        sustained(&samples, day, Duration::from_secs(15 * H), now),
        Some((2_000, 8 * GIB))
    );
    // Up to 6 h: the memory peak counts.
    assert_eq!(
        sustained(&samples, day, Duration::from_secs(6 * H), now),
        Some((10_000, 40 * GIB))
    );
}

#[test]
fn servers_follow_the_scarcer_resource() {
    let s = spec();
    assert_eq!(servers_for(&s, 0, 0), 0);
    assert_eq!(servers_for(&s, 3_500, GIB), 1);
    assert_eq!(servers_for(&s, 3_501, GIB), 2);
    assert_eq!(servers_for(&s, 1_000, 57 * GIB), 3);
    // A server that holds nothing (DaemonSets take it all) holds no load.
    let empty = PlannerSpec {
        server_cpu_millis: 0,
        ..spec()
    };
    assert_eq!(servers_for(&empty, 1, 0), u32::MAX);
    assert_eq!(servers_for(&empty, 0, 0), 0);
}

#[test]
fn the_target_rises_once_the_load_stayed_for_the_window_and_within_max() {
    let s = spec();
    let mut samples = vec![sample("2026-11-24T08:00:00Z", 8_000, 20)];
    // 1 h in: not enough history; the target stays.
    let d = decide(&s, &samples, 0, None, t("2026-11-24T09:00:00Z"));
    assert_eq!(
        (d.target, d.change, d.sustained),
        (0, Change::Unchanged, None)
    );
    // 2 h in: 8000m needs 3 servers of 3500m.
    let d = decide(&s, &samples, 0, None, t("2026-11-24T10:00:00Z"));
    assert_eq!((d.target, d.change, d.needed), (3, Change::Raised, 3));
    assert!(d.reason.contains("8000m CPU"), "{}", d.reason);
    // Far more load: capped at max.
    samples.push(sample("2026-11-24T10:00:00Z", 40_000, 20));
    let d = decide(&s, &samples, 3, None, t("2026-11-24T12:00:00Z"));
    assert_eq!((d.target, d.needed), (4, 12));
    assert!(d.reason.contains("capped at 4"), "{}", d.reason);
}

#[test]
fn a_short_burst_never_raises_the_target() {
    let s = spec();
    let samples = [
        sample("2026-11-24T08:00:00Z", 0, 0),
        sample("2026-11-24T09:00:00Z", 30_000, 100),
        sample("2026-11-24T09:50:00Z", 0, 0),
    ];
    for now in ["2026-11-24T10:00:00Z", "2026-11-24T11:00:00Z"] {
        let d = decide(&s, &samples, 0, None, t(now));
        assert_eq!((d.target, d.needed), (0, 0), "{now}");
    }
}

#[test]
fn the_target_falls_only_after_the_load_stayed_lower_for_the_hold() {
    let s = spec();
    let raised = t("2026-11-24T10:00:00Z");
    let samples = vec![
        sample("2026-11-24T08:00:00Z", 8_000, 20),
        // A dip of 10 min (a rollout) and back.
        sample("2026-11-24T11:00:00Z", 1_000, 4),
        sample("2026-11-24T11:10:00Z", 8_000, 20),
        // Then down for good.
        sample("2026-11-24T12:00:00Z", 1_000, 4),
    ];
    // During the dip: the hold since the raise is over, but the load was at
    // 3 servers within the last hour: kept.
    let d = decide(&s, &samples, 3, Some(raised), t("2026-11-24T11:05:00Z"));
    assert_eq!((d.target, d.change, d.needed), (3, Change::Unchanged, 1));
    assert!(d.reason.contains("kept at 3"), "{}", d.reason);
    // 30 min after the fall: still within the hold of the load.
    let d = decide(&s, &samples, 3, Some(raised), t("2026-11-24T12:30:00Z"));
    assert_eq!((d.target, d.change), (3, Change::Unchanged));
    // An hour after the fall: lowered to what the load needs.
    let d = decide(&s, &samples, 3, Some(raised), t("2026-11-24T13:00:00Z"));
    assert_eq!((d.target, d.change, d.needed), (1, Change::Lowered, 1));
}

#[test]
fn a_recent_change_holds_the_target_even_when_the_load_left() {
    let s = spec();
    let samples = [
        sample("2026-11-24T06:00:00Z", 8_000, 20),
        sample("2026-11-24T09:00:00Z", 0, 0),
    ];
    // Load gone for 2 h, but the target was set 30 min ago (e.g. a user
    // raised max): not lowered yet.
    let now = t("2026-11-24T11:00:00Z");
    let d = decide(&s, &samples, 3, Some(t("2026-11-24T10:30:00Z")), now);
    assert_eq!((d.target, d.change), (3, Change::Unchanged));
    assert!(d.reason.contains("no sooner than"), "{}", d.reason);
    let d = decide(&s, &samples, 3, Some(t("2026-11-24T10:00:00Z")), now);
    assert_eq!((d.target, d.change), (0, Change::Lowered));
}

#[test]
fn a_lowered_bound_lowers_the_target_at_once() {
    let s = PlannerSpec { max: 1, ..spec() };
    let samples = [sample("2026-11-24T08:00:00Z", 8_000, 20)];
    let now = t("2026-11-24T10:00:00Z");
    let d = decide(&s, &samples, 3, Some(now), now);
    assert_eq!((d.target, d.change), (1, Change::Lowered));
    // Even without history.
    let d = decide(&s, &[], 3, Some(now), now);
    assert_eq!((d.target, d.change), (1, Change::Lowered));
}

fn node(name: &str, pool: &str, reservation: Option<&str>) -> NodeView {
    NodeView {
        name: name.into(),
        node_pool: Some(pool.into()),
        reservation: reservation.map(str::to_string),
        ..NodeView::default()
    }
}

fn pod(node: &str, cpu: u64, memory_gib: u64, daemon_set: bool) -> PodView {
    PodView {
        node: node.into(),
        cpu_millis: cpu,
        memory_bytes: memory_gib * GIB,
        daemon_set,
    }
}

#[test]
fn load_counts_the_planners_node_pools_and_the_pools_own_nodes_without_daemonsets() {
    let nodes = [
        node("vm-1", "vms", None),
        node("vm-2", "vms", None),
        node("metal-1", "metal", Some("warm.em-a115x-ssd.fr-par-2")),
        node("metal-2", "metal", Some("other.em-a115x-ssd.fr-par-2")),
        node("gpu-1", "gpus", None),
    ];
    let pods = [
        pod("vm-1", 1_000, 2, false),
        pod("vm-1", 100, 1, true),
        pod("vm-2", 500, 1, false),
        pod("vm-2", 250, 1, true),
        pod("vm-2", 50, 0, true),
        pod("metal-1", 2_000, 4, false),
        pod("metal-1", 100, 1, true),
        pod("metal-2", 9_000, 9, false),
        pod("gpu-1", 9_000, 9, false),
        pod("unscheduled-node", 9_000, 9, false),
    ];
    let pools = BTreeSet::from(["vms".to_string()]);
    let load = load_of(&nodes, &pods, &pools, "warm.em-a115x-ssd.fr-par-2");
    assert_eq!(
        (load.cpu_millis, load.memory_bytes, load.pods),
        (3_500, 7 * GIB, 3)
    );
    assert_eq!(
        (load.daemon_cpu_millis, load.daemon_memory_bytes),
        (300, GIB)
    );
    let names: Vec<&str> = load.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["vm-1", "vm-2", "metal-1"]);
}

fn pool_with(planner: Option<crate::nodeclass::StandbyPlanner>) -> StandbyPool {
    StandbyPool {
        offer: "EM-A115X-SSD".into(),
        zone: "fr-par-2".into(),
        min: 0,
        max: 3,
        idle_hourly_keep: None,
        planner,
    }
}

fn planner(window: Option<&str>, at_least: Option<&str>) -> crate::nodeclass::StandbyPlanner {
    crate::nodeclass::StandbyPlanner {
        node_pools: vec!["vms".into()],
        window: window.map(str::to_string),
        at_least: at_least.map(str::to_string),
        hold: None,
        ahead: None,
        max_servers: None,
        dry_run: false,
    }
}

#[test]
fn config_defaults_and_refusals() {
    assert_eq!(config_of(&pool_with(None)), Ok(None));
    let c = config_of(&pool_with(Some(planner(None, None))))
        .unwrap()
        .unwrap();
    assert_eq!(
        (c.window, c.at_least, c.hold, c.max_servers, c.dry_run),
        (DEFAULT_WINDOW, DEFAULT_WINDOW, DEFAULT_HOLD, 3, false)
    );
    let c = config_of(&pool_with(Some(planner(Some("24h"), Some("12h")))))
        .unwrap()
        .unwrap();
    assert_eq!(c.at_least, Duration::from_secs(12 * H));
    let e = config_of(&pool_with(Some(planner(Some("1h"), Some("2h"))))).unwrap_err();
    assert!(e.contains("atLeast is longer"), "{e}");
    let e = config_of(&pool_with(Some(planner(Some("169h"), None)))).unwrap_err();
    assert!(e.contains("EM-A115X-SSD/fr-par-2: planner.window"), "{e}");
}

/// A working day: 1 core at night, 10 cores 08:00–20:00, on `day`.
fn working_day(day: &str) -> Vec<Sample> {
    vec![
        sample(&format!("{day}T00:00:00Z"), 1_000, 1),
        sample(&format!("{day}T08:00:00Z"), 10_000, 10),
        sample(&format!("{day}T20:00:00Z"), 1_000, 1),
    ]
}

fn ahead_spec() -> PlannerSpec {
    PlannerSpec {
        ahead: Some(Duration::from_secs(20 * 60)),
        ..spec()
    }
}

#[test]
fn ahead_stages_for_the_load_seen_at_this_time_yesterday() {
    let mut samples = working_day("2026-11-24");
    samples.push(sample("2026-11-25T00:00:00Z", 1_000, 1));
    // 07:45: yesterday from 08:05 the load needed 3 servers for all of the
    // window; today's load now is what it was then.
    let now = t("2026-11-25T07:45:00Z");
    let seen = foreseen(&ahead_spec(), &samples, now).unwrap();
    assert_eq!((seen.cpu_millis, seen.lag), (10_000, LOOK_BACK[0]));
    let d = decide(&ahead_spec(), &samples, 1, None, now);
    assert_eq!((d.target, d.change, d.needed), (3, Change::Raised, 3));
    assert!(d.reason.contains("a day ago at this time"), "{}", d.reason);
    assert!(d.reason.contains("staged 1200s ahead"), "{}", d.reason);
    // Without `ahead`, only the load seen counts.
    let d = decide(&spec(), &samples, 1, None, now);
    assert_eq!((d.target, d.change), (1, Change::Unchanged));
    // 07:30: yesterday 07:50–09:50 was not loaded all of the window.
    assert_eq!(
        decide(&ahead_spec(), &samples, 1, None, t("2026-11-25T07:30:00Z")).target,
        1
    );
}

#[test]
fn ahead_ignores_a_day_unlike_today() {
    // A quiet Saturday after a working Friday: at 08:30 today's load needs
    // fewer servers than Friday's did at 08:30, so Friday is no guide.
    let mut samples = working_day("2026-11-27");
    samples.push(sample("2026-11-28T00:00:00Z", 1_000, 1));
    let now = t("2026-11-28T08:30:00Z");
    assert_eq!(foreseen(&ahead_spec(), &samples, now), None);
    let d = decide(&ahead_spec(), &samples, 3, None, now);
    assert_eq!((d.target, d.change), (1, Change::Lowered));
}

#[test]
fn ahead_looks_a_week_back_when_yesterday_was_quiet() {
    // Monday after a quiet Sunday: the Monday a week before was loaded.
    let mut samples = working_day("2026-11-16");
    samples.push(sample("2026-11-17T00:00:00Z", 1_000, 1));
    let now = t("2026-11-23T07:45:00Z");
    let seen = foreseen(&ahead_spec(), &samples, now).unwrap();
    assert_eq!((seen.cpu_millis, seen.lag), (10_000, LOOK_BACK[1]));
    let d = decide(&ahead_spec(), &samples, 1, None, now);
    assert!(d.reason.contains("a week ago at this time"), "{}", d.reason);
    // A window longer than a day less `ahead` cannot look a day back.
    let long = PlannerSpec {
        window: Duration::from_secs(24 * H),
        at_least: Duration::from_secs(H),
        ..ahead_spec()
    };
    let mut samples = working_day("2026-11-24");
    samples.push(sample("2026-11-25T00:00:00Z", 1_000, 1));
    assert_eq!(foreseen(&long, &samples, t("2026-11-25T07:45:00Z")), None);
}

#[test]
fn ahead_is_parsed_and_keeps_a_week_of_samples() {
    let mut p = planner(None, None);
    p.ahead = Some("20m".into());
    let c = config_of(&pool_with(Some(p.clone()))).unwrap().unwrap();
    assert_eq!(c.ahead, Some(Duration::from_secs(20 * 60)));
    assert_eq!(
        config_of(&pool_with(Some(planner(None, None))))
            .unwrap()
            .unwrap()
            .ahead,
        None
    );
    p.ahead = Some("20 minutes".into());
    let e = config_of(&pool_with(Some(p))).unwrap_err();
    assert!(e.contains("planner.ahead"), "{e}");
    assert_eq!(history(window(), Duration::from_secs(H), None), window());
    assert!(
        history(
            window(),
            Duration::from_secs(H),
            Some(Duration::from_secs(60))
        ) > LOOK_BACK[1]
    );
}
