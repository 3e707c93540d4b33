//! The demand planner (issue 14, first part): how many standby servers the
//! sustained part of the migratable load needs. Pure: it reads samples of
//! the pods' requests (taken elsewhere) and the time, and decides a target
//! for the pool's `min`, with hysteresis. Not wired yet.

use std::time::Duration;

use chrono::{DateTime, Utc};

/// What the planner is told to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannerSpec {
    /// Load counts as sustained once it has been there this long.
    pub window: Duration,
    /// A target is never lowered sooner than this after its last change.
    pub hold: Duration,
    /// Bounds of the target.
    pub min: u32,
    pub max: u32,
    /// What one server of the staged offer holds (its allocatable).
    pub server_cpu_millis: u64,
    pub server_memory_bytes: u64,
}

/// The migratable pods' requests summed at one instant (daemonsets left out
/// by whoever samples).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    pub at: DateTime<Utc>,
    pub cpu_millis: u64,
    pub memory_bytes: u64,
}

/// The planner's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Decision {
    pub target: u32,
    /// The load present during the whole window (`None`: the samples do not
    /// cover the window yet).
    pub sustained: Option<(u64, u64)>,
    /// Servers that load needs, before the bounds.
    pub needed: u32,
    pub reason: String,
}

/// The least load present at every sample of the last `window`: what has
/// stayed all along. `None` while the samples do not reach back that far.
pub fn sustained(samples: &[Sample], window: Duration, now: DateTime<Utc>) -> Option<(u64, u64)> {
    let start = now - chrono::Duration::from_std(window).ok()?;
    if !samples.iter().any(|s| s.at <= start) {
        return None;
    }
    // The sample in force at `start` counts, and every later one.
    let in_force = samples
        .iter()
        .filter(|s| s.at <= start)
        .max_by_key(|s| s.at)?;
    let recent = samples.iter().filter(|s| s.at > start && s.at <= now);
    let all: Vec<&Sample> = std::iter::once(in_force).chain(recent).collect();
    let cpu = all.iter().map(|s| s.cpu_millis).min()?;
    let memory = all.iter().map(|s| s.memory_bytes).min()?;
    Some((cpu, memory))
}

/// Servers of `spec`'s offer that hold `cpu` and `memory`.
pub fn servers_for(spec: &PlannerSpec, cpu_millis: u64, memory_bytes: u64) -> u32 {
    let by = |need: u64, per: u64| {
        if per == 0 { 0 } else { need.div_ceil(per) }
    };
    by(cpu_millis, spec.server_cpu_millis)
        .max(by(memory_bytes, spec.server_memory_bytes))
        .min(u64::from(u32::MAX)) as u32
}

/// The target now: raised as soon as sustained load needs more servers (up
/// to `max`), lowered only `hold` after the last change (down to `min`);
/// while the window is not covered, the current target stays.
pub fn decide(
    spec: &PlannerSpec,
    samples: &[Sample],
    current: u32,
    last_change: Option<DateTime<Utc>>,
    now: DateTime<Utc>,
) -> Decision {
    let Some((cpu, memory)) = sustained(samples, spec.window, now) else {
        return Decision {
            target: current.clamp(spec.min, spec.max.max(spec.min)),
            sustained: None,
            needed: 0,
            reason: format!(
                "not enough history yet: the load must be seen for {}s",
                spec.window.as_secs()
            ),
        };
    };
    let needed = servers_for(spec, cpu, memory);
    let bounded = needed.clamp(spec.min, spec.max.max(spec.min));
    let held = last_change
        .is_some_and(|t| now - t < chrono::Duration::from_std(spec.hold).unwrap_or_default());
    let (target, reason) = if bounded > current {
        (
            bounded,
            format!("sustained load {cpu}m CPU, {memory} B memory needs {needed} server(s)"),
        )
    } else if bounded < current && !held {
        (
            bounded,
            format!("sustained load {cpu}m CPU, {memory} B memory needs only {needed} server(s)"),
        )
    } else if bounded < current {
        (
            current,
            format!(
                "sustained load needs {needed} server(s), but the target changed less than {}s ago",
                spec.hold.as_secs()
            ),
        )
    } else {
        (current, "unchanged".to_string())
    };
    Decision {
        target,
        sustained: Some((cpu, memory)),
        needed,
        reason,
    }
}

#[cfg(test)]
#[path = "planner_tests.rs"]
mod tests;
