//! The demand planner: how many servers of a standby pool the sustained part
//! of the migratable load needs. Pure: it reads samples of the pods'
//! requests (taken by the standby pass through a [`super::LoadSource`]) and
//! the time, and decides a target with hysteresis. `demand.rs` keeps the
//! samples and applies the target; docs/planner.md explains the rules.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::nodeclass::{StandbyPool, go_duration, rules::PLANNER_MAX_SECONDS};

/// Defaults of `spec.standby.pools[].planner`.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(2 * 3600);
pub const DEFAULT_HOLD: Duration = Duration::from_secs(30 * 60);

/// A pool's planner settings, parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannerConfig {
    pub node_pools: BTreeSet<String>,
    pub window: Duration,
    pub at_least: Duration,
    pub hold: Duration,
    /// `ahead`: stage ahead of the load seen a day or a week before.
    pub ahead: Option<Duration>,
    /// Most servers (adopted + standby) staged for the load.
    pub max_servers: u32,
    pub dry_run: bool,
}

/// The planner of `pool`, parsed; `Ok(None)` when it has none, `Err` for a
/// value the API server would have refused.
pub fn config_of(pool: &StandbyPool) -> Result<Option<PlannerConfig>, String> {
    let Some(p) = &pool.planner else {
        return Ok(None);
    };
    let at = |field: &str, text: &Option<String>, default: Duration| -> Result<Duration, String> {
        let Some(text) = text.as_deref() else {
            return Ok(default);
        };
        let value = go_duration::parse(text).map_err(|e| {
            format!(
                "standby pool {}/{}: planner.{field}: {e}",
                pool.offer, pool.zone
            )
        })?;
        if value > Duration::from_secs(PLANNER_MAX_SECONDS) {
            return Err(format!(
                "standby pool {}/{}: planner.{field} {text:?} is longer than 168h",
                pool.offer, pool.zone
            ));
        }
        Ok(value)
    };
    let window = at("window", &p.window, DEFAULT_WINDOW)?;
    let at_least = at("atLeast", &p.at_least, window)?;
    if at_least > window {
        return Err(format!(
            "standby pool {}/{}: planner.atLeast is longer than planner.window",
            pool.offer, pool.zone
        ));
    }
    Ok(Some(PlannerConfig {
        node_pools: p.node_pools.iter().cloned().collect(),
        window,
        at_least,
        hold: at("hold", &p.hold, DEFAULT_HOLD)?,
        ahead: match &p.ahead {
            Some(_) => Some(at("ahead", &p.ahead, Duration::ZERO)?),
            None => None,
        },
        max_servers: p.max_servers.unwrap_or(pool.max).max(0) as u32,
        dry_run: p.dry_run,
    }))
}

/// What the planner is told to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannerSpec {
    /// The span of history judged.
    pub window: Duration,
    /// A load level counts once present this long within `window`.
    pub at_least: Duration,
    /// A target is lowered only to what the load stayed under for this
    /// long, and never sooner than this after its last change.
    pub hold: Duration,
    /// Look this far ahead into the load seen at the same time a day or a
    /// week before (`None`: only the load seen counts).
    pub ahead: Option<Duration>,
    /// Most servers the target may ask for.
    pub max: u32,
    /// What one server of the staged offer holds for these pods (its
    /// allocatable less what DaemonSets take on a node).
    pub server_cpu_millis: u64,
    pub server_memory_bytes: u64,
}

/// The migratable pods' requests summed at one instant; it stays in force
/// until the next sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    pub at: DateTime<Utc>,
    pub cpu_millis: u64,
    pub memory_bytes: u64,
}

/// Which way a decision moved the target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    Unchanged,
    Raised,
    Lowered,
}

/// The planner's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub target: u32,
    pub change: Change,
    /// The sustained load (`None`: the samples do not cover the window yet).
    pub sustained: Option<(u64, u64)>,
    /// Servers the sustained load needs, before the bounds.
    pub needed: u32,
    pub reason: String,
}

fn chrono(d: Duration) -> chrono::Duration {
    chrono::Duration::from_std(d).unwrap_or(chrono::Duration::MAX)
}

/// The stretches of `[start, now]` each sample was in force: (cpu, memory,
/// length). `None` when no sample is in force at `start`.
fn stretches(
    samples: &[Sample],
    start: DateTime<Utc>,
    now: DateTime<Utc>,
) -> Option<Vec<(u64, u64, chrono::Duration)>> {
    let mut sorted: Vec<&Sample> = samples.iter().filter(|s| s.at <= now).collect();
    sorted.sort_by_key(|s| s.at);
    let first = sorted.iter().rposition(|s| s.at <= start)?;
    let live = &sorted[first..];
    Some(
        live.iter()
            .enumerate()
            .map(|(i, s)| {
                let from = s.at.max(start);
                let to = live.get(i + 1).map_or(now, |n| n.at);
                (s.cpu_millis, s.memory_bytes, to - from)
            })
            .collect(),
    )
}

/// The highest level the resource stayed at or above for `at_least` of the
/// stretches in all.
fn level_held(mut levels: Vec<(u64, chrono::Duration)>, at_least: chrono::Duration) -> u64 {
    levels.sort_by_key(|l| std::cmp::Reverse(l.0));
    let mut total = chrono::Duration::zero();
    for (level, length) in levels {
        total += length;
        if total >= at_least {
            return level;
        }
    }
    0
}

/// The load present at least `at_least` of the last `window`, CPU and
/// memory each on its own: with `at_least == window`, the least seen over
/// the window. `None` while the samples do not reach back that far.
pub fn sustained(
    samples: &[Sample],
    window: Duration,
    at_least: Duration,
    now: DateTime<Utc>,
) -> Option<(u64, u64)> {
    let parts = stretches(samples, now - chrono(window), now)?;
    let at_least = chrono(at_least.min(window));
    let cpu = level_held(parts.iter().map(|p| (p.0, p.2)).collect(), at_least);
    let memory = level_held(parts.iter().map(|p| (p.1, p.2)).collect(), at_least);
    Some((cpu, memory))
}

/// The most load present at any time in the last `span` (`None` while the
/// samples do not reach back that far).
pub fn peak(samples: &[Sample], span: Duration, now: DateTime<Utc>) -> Option<(u64, u64)> {
    let parts = stretches(samples, now - chrono(span), now)?;
    Some((
        parts.iter().map(|p| p.0).max()?,
        parts.iter().map(|p| p.1).max()?,
    ))
}

/// How far back `ahead` looks: the same time a day and a week before.
pub const LOOK_BACK: [Duration; 2] = [Duration::from_secs(86_400), Duration::from_secs(7 * 86_400)];

/// What the samples must reach back to for `spec`: the window and the
/// hold, and with `ahead` the week it looks back on.
pub fn history(spec_window: Duration, hold: Duration, ahead: Option<Duration>) -> Duration {
    let mut keep = spec_window.max(hold);
    if ahead.is_some() {
        keep = keep.max(LOOK_BACK[1] + Duration::from_secs(60));
    }
    keep
}

/// The load seen at the same time on an earlier day.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Foreseen {
    pub cpu_millis: u64,
    pub memory_bytes: u64,
    /// How long ago (a day or a week).
    pub lag: Duration,
    pub ahead: Duration,
}

fn in_force(samples: &[Sample], at: DateTime<Utc>) -> Option<&Sample> {
    samples.iter().filter(|s| s.at <= at).max_by_key(|s| s.at)
}

/// With `spec.ahead`: the most load that was sustained (by `window` and
/// `at_least`) over the window starting `ahead` after this time of day,
/// a day or a week before, among the days whose load at this time needed no
/// more servers than today's does now (a day unlike today is no guide: a
/// Saturday is not staged for from a Friday once Saturday's morning stays
/// quiet). A lag shorter than `ahead + window` is skipped (that window would
/// reach into the future).
pub fn foreseen(spec: &PlannerSpec, samples: &[Sample], now: DateTime<Utc>) -> Option<Foreseen> {
    let ahead = spec.ahead.filter(|a| !a.is_zero())?;
    let latest = in_force(samples, now)?;
    let today = servers_for(spec, latest.cpu_millis, latest.memory_bytes);
    let mut best: Option<(u32, Foreseen)> = None;
    for lag in LOOK_BACK {
        if lag < ahead + spec.window {
            continue;
        }
        let then = now - chrono(lag);
        let Some(was) = in_force(samples, then) else {
            continue;
        };
        if servers_for(spec, was.cpu_millis, was.memory_bytes) > today {
            continue;
        }
        let until = then + chrono(ahead) + chrono(spec.window);
        let Some((cpu, memory)) = sustained(samples, spec.window, spec.at_least, until) else {
            continue;
        };
        let n = servers_for(spec, cpu, memory);
        if best.is_none_or(|(m, _)| n > m) {
            best = Some((
                n,
                Foreseen {
                    cpu_millis: cpu,
                    memory_bytes: memory,
                    lag,
                    ahead,
                },
            ));
        }
    }
    best.map(|(_, f)| f)
}

/// Servers of `spec`'s offer that hold `cpu` and `memory`.
pub fn servers_for(spec: &PlannerSpec, cpu_millis: u64, memory_bytes: u64) -> u32 {
    let by = |need: u64, per: u64| {
        if need == 0 {
            0
        } else if per == 0 {
            u64::MAX
        } else {
            need.div_ceil(per)
        }
    };
    by(cpu_millis, spec.server_cpu_millis)
        .max(by(memory_bytes, spec.server_memory_bytes))
        .min(u64::from(u32::MAX)) as u32
}

fn gib(bytes: u64) -> String {
    format!("{:.1} GiB", bytes as f64 / f64::from(1u32 << 30))
}

/// The target now, from `current`:
/// - above `max` (the bounds were lowered): down to `max` at once;
/// - raised as soon as the sustained load needs more servers (up to `max`);
/// - lowered only to what the load stayed under for all of the last `hold`,
///   and only `hold` after the last change;
/// - while the samples cover neither `window` nor `hold`, unchanged.
pub fn decide(
    spec: &PlannerSpec,
    samples: &[Sample],
    current: u32,
    last_change: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Decision {
    let covered =
        sustained(samples, spec.window, spec.at_least, now).zip(peak(samples, spec.hold, now));
    let Some(((cpu, memory), recent)) = covered else {
        let target = current.min(spec.max);
        return Decision {
            target,
            change: if target < current {
                Change::Lowered
            } else {
                Change::Unchanged
            },
            sustained: None,
            needed: 0,
            reason: format!(
                "not enough history yet: the load must have been watched for {}s",
                spec.window.max(spec.hold).as_secs()
            ),
        };
    };
    let reactive = servers_for(spec, cpu, memory);
    let mut load = format!(
        "sustained load {cpu}m CPU, {} memory needs {reactive} server(s)",
        gib(memory)
    );
    let mut needed = reactive;
    if let Some(seen) = foreseen(spec, samples, now) {
        let more = servers_for(spec, seen.cpu_millis, seen.memory_bytes);
        if more > reactive {
            needed = more;
            let _ = write!(
                load,
                "; {} at this time, the load sustained over the next {}s was {}m CPU, {} memory: {more} server(s), staged {}s ahead",
                if seen.lag >= Duration::from_secs(7 * 86_400) {
                    "a week ago"
                } else {
                    "a day ago"
                },
                spec.window.as_secs(),
                seen.cpu_millis,
                gib(seen.memory_bytes),
                seen.ahead.as_secs(),
            );
        }
    }
    let up = needed.min(spec.max);
    if up > current {
        let capped = if needed > spec.max {
            format!(" (capped at {})", spec.max)
        } else {
            String::new()
        };
        return Decision {
            target: up,
            change: Change::Raised,
            sustained: Some((cpu, memory)),
            needed,
            reason: format!("{load}{capped}"),
        };
    }
    let stayed_under = servers_for(spec, recent.0, recent.1).max(needed);
    let down = stayed_under.min(spec.max);
    let held = last_change.is_some_and(|t| now - t < chrono(spec.hold));
    let (target, change, reason) = if current > spec.max {
        (
            spec.max,
            Change::Lowered,
            format!("{load}; the target is above the bound {}", spec.max),
        )
    } else if down < current && !held {
        (
            down,
            Change::Lowered,
            format!(
                "{load}; the load stayed within {stayed_under} server(s) for {}s",
                spec.hold.as_secs()
            ),
        )
    } else if down < current {
        (
            current,
            Change::Unchanged,
            format!(
                "{load}; lowered to {down} no sooner than {}s after the last change",
                spec.hold.as_secs()
            ),
        )
    } else if stayed_under > needed && needed < current {
        (
            current,
            Change::Unchanged,
            format!(
                "{load}; kept at {current}: the load reached {stayed_under} server(s) within the last {}s",
                spec.hold.as_secs()
            ),
        )
    } else {
        (current, Change::Unchanged, load)
    };
    Decision {
        target,
        change,
        sustained: Some((cpu, memory)),
        needed,
        reason,
    }
}

/// The cluster's nodes and running pods, as the planner sees them.
pub type Observed = (Vec<NodeView>, Vec<PodView>);

/// A node as the planner sees it (from its labels).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeView {
    pub name: String,
    /// `karpenter.sh/nodepool`.
    pub node_pool: Option<String>,
    /// `karpenter.scaleway.com/reservation-id`.
    pub reservation: Option<String>,
    /// `node.kubernetes.io/instance-type`.
    pub instance_type: Option<String>,
    /// `topology.kubernetes.io/zone`.
    pub zone: Option<String>,
    /// `karpenter.sh/capacity-type`.
    pub capacity_type: Option<String>,
}

/// A pod bound to a node and not finished, with its effective requests.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct PodView {
    pub node: String,
    pub cpu_millis: u64,
    pub memory_bytes: u64,
    /// Owned by a DaemonSet: it runs on every node, wherever the load goes.
    pub daemon_set: bool,
}

/// What runs now on the nodes a pool's planner counts.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Load {
    pub cpu_millis: u64,
    pub memory_bytes: u64,
    pub pods: usize,
    /// The most DaemonSet pods ask for on one of those nodes: what a server
    /// of the pool gives up before holding migrated pods.
    pub daemon_cpu_millis: u64,
    pub daemon_memory_bytes: u64,
    /// The nodes counted: of the planner's NodePools, or adopted from the
    /// pool (`reservation`).
    pub nodes: Vec<NodeView>,
}

/// The load of the pods on nodes of `node_pools` or of the reservation
/// `reservation` (the pool's own adopted nodes), DaemonSet pods left out.
pub fn load_of(
    nodes: &[NodeView],
    pods: &[PodView],
    node_pools: &BTreeSet<String>,
    reservation: &str,
) -> Load {
    let counted: Vec<&NodeView> = nodes
        .iter()
        .filter(|n| {
            n.reservation.as_deref() == Some(reservation)
                || n.node_pool.as_ref().is_some_and(|p| node_pools.contains(p))
        })
        .collect();
    let names: BTreeSet<&str> = counted.iter().map(|n| n.name.as_str()).collect();
    let mut load = Load {
        nodes: counted.into_iter().cloned().collect(),
        ..Load::default()
    };
    let mut daemons: std::collections::BTreeMap<&str, (u64, u64)> = Default::default();
    for pod in pods.iter().filter(|p| names.contains(p.node.as_str())) {
        if pod.daemon_set {
            let d = daemons.entry(pod.node.as_str()).or_default();
            d.0 += pod.cpu_millis;
            d.1 += pod.memory_bytes;
        } else {
            load.cpu_millis += pod.cpu_millis;
            load.memory_bytes += pod.memory_bytes;
            load.pods += 1;
        }
    }
    load.daemon_cpu_millis = daemons.values().map(|d| d.0).max().unwrap_or(0);
    load.daemon_memory_bytes = daemons.values().map(|d| d.1).max().unwrap_or(0);
    load
}

#[cfg(test)]
#[path = "planner_tests.rs"]
mod tests;
