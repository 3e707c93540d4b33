//! Load traces for the planner replay (issue 28): the summed requests of the
//! pods on the planner's NodePools over time, as a step function (a value
//! holds until the next sample).
//!
//! The CSV format (docs/planner.md, "Traces"):
//!
//! ```text
//! # comment lines start with '#'
//! time,cpu,memory
//! 2026-11-02T00:00:00Z,12,48Gi
//! 2026-11-02T08:00:00Z,40500m,160Gi
//! ```
//!
//! `time` is RFC 3339 (or seconds since the trace's start); `cpu` and
//! `memory` are Kubernetes quantities (`12`, `40500m`; `48Gi`, `51539607552`).
//! Rows are in time order. A Prometheus range query of
//! `sum(kube_pod_container_resource_requests{resource="cpu"})` and of the
//! memory resource, joined on the timestamp, is such a file.
//!
//! The shipped traces are generated here, deterministically (a seeded
//! generator), so that a table computed from them can be reproduced.

use std::fmt::Write as _;

use chrono::{DateTime, Datelike, Duration, TimeZone, Timelike, Utc, Weekday};

use crate::catalog::parse_quantity_milli;

/// One sample: the load from `at` until the next sample.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    pub at: DateTime<Utc>,
    pub cpu_millis: u64,
    pub memory_bytes: u64,
}

/// A load trace: samples in strictly increasing time order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Trace {
    pub name: String,
    pub samples: Vec<Sample>,
}

/// What is wrong with a trace file, with its line.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("line {line}: {message}")]
pub struct TraceError {
    pub line: usize,
    pub message: String,
}

fn err(line: usize, message: impl Into<String>) -> TraceError {
    TraceError {
        line,
        message: message.into(),
    }
}

impl Trace {
    /// Reads the CSV format above. `start` anchors times given in seconds.
    pub fn parse(name: &str, text: &str, start: DateTime<Utc>) -> Result<Trace, TraceError> {
        let mut samples: Vec<Sample> = Vec::new();
        let mut header = false;
        for (i, raw) in text.lines().enumerate() {
            let line = i + 1;
            let row = raw.trim();
            if row.is_empty() || row.starts_with('#') {
                continue;
            }
            let fields: Vec<&str> = row.split(',').map(str::trim).collect();
            if !header {
                if fields != ["time", "cpu", "memory"] {
                    return Err(err(
                        line,
                        format!("the header must be `time,cpu,memory`, not {row:?}"),
                    ));
                }
                header = true;
                continue;
            }
            let [time, cpu, memory] = fields[..] else {
                return Err(err(
                    line,
                    format!("3 fields expected (time,cpu,memory), got {}", fields.len()),
                ));
            };
            let at = parse_time(time, start).ok_or_else(|| {
                err(
                    line,
                    format!("time {time:?} is neither RFC 3339 nor seconds"),
                )
            })?;
            let cpu_millis = parse_quantity_milli(cpu)
                .and_then(|m| u64::try_from(m).ok())
                .ok_or_else(|| {
                    err(
                        line,
                        format!("cpu {cpu:?} is not a quantity such as 12 or 500m"),
                    )
                })?;
            let memory_bytes = parse_quantity_milli(memory)
                .and_then(|m| u64::try_from(m / 1000).ok())
                .ok_or_else(|| {
                    err(
                        line,
                        format!("memory {memory:?} is not a quantity such as 48Gi"),
                    )
                })?;
            if let Some(last) = samples.last()
                && at <= last.at
            {
                return Err(err(
                    line,
                    format!("time {at} is not after the previous row's {}", last.at),
                ));
            }
            samples.push(Sample {
                at,
                cpu_millis,
                memory_bytes,
            });
        }
        if !header {
            return Err(err(0, "no `time,cpu,memory` header"));
        }
        if samples.is_empty() {
            return Err(err(0, "no samples"));
        }
        Ok(Trace {
            name: name.to_string(),
            samples,
        })
    }

    /// Writes the CSV format (cpu in millicores, memory in bytes).
    pub fn to_csv(&self) -> String {
        let mut out = format!("# load trace {}\ntime,cpu,memory\n", self.name);
        for s in &self.samples {
            let _ = writeln!(
                out,
                "{},{}m,{}",
                s.at.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
                s.cpu_millis,
                s.memory_bytes
            );
        }
        out
    }

    /// The load at `t` (the last sample at or before it; none before the
    /// first sample).
    pub fn at(&self, t: DateTime<Utc>) -> Option<&Sample> {
        let i = self.samples.partition_point(|s| s.at <= t);
        i.checked_sub(1).map(|i| &self.samples[i])
    }

    pub fn start(&self) -> DateTime<Utc> {
        self.samples[0].at
    }

    pub fn end(&self) -> DateTime<Utc> {
        self.samples[self.samples.len() - 1].at
    }
}

fn parse_time(text: &str, start: DateTime<Utc>) -> Option<DateTime<Utc>> {
    if let Ok(t) = DateTime::parse_from_rfc3339(text) {
        return Some(t.with_timezone(&Utc));
    }
    let seconds: f64 = text
        .parse()
        .ok()
        .filter(|s: &f64| s.is_finite() && *s >= 0.0)?;
    Some(start + Duration::milliseconds((seconds * 1000.0).round() as i64))
}

/// The shipped traces' shapes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Shape {
    /// 12 hours a day (08:00–20:00) on working days, a small base otherwise.
    WorkingDays,
    /// A weekly cycle: a daily wave, lower on weekends.
    Weekly,
    /// A base, then a step up at the start of day 3 that stays.
    Step,
    /// Spiky noise (short bursts) over a steady base.
    Spiky,
    /// A slow ramp from the base to the peak over the whole trace.
    Ramp,
}

impl Shape {
    pub const ALL: [Shape; 5] = [
        Shape::WorkingDays,
        Shape::Weekly,
        Shape::Step,
        Shape::Spiky,
        Shape::Ramp,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Shape::WorkingDays => "working-days",
            Shape::Weekly => "weekly",
            Shape::Step => "step",
            Shape::Spiky => "spiky",
            Shape::Ramp => "ramp",
        }
    }
}

/// How a generated trace is scaled: `base` and `peak` in CPU cores (memory
/// follows at `gib_per_core`), sampled every `step`, for `days` from a
/// Monday 00:00 UTC.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Scale {
    pub base_cores: f64,
    pub peak_cores: f64,
    pub gib_per_core: f64,
    pub step: Duration,
    pub days: i64,
    pub seed: u64,
}

impl Default for Scale {
    fn default() -> Self {
        Scale {
            base_cores: 4.0,
            peak_cores: 64.0,
            gib_per_core: 4.0,
            step: Duration::minutes(5),
            days: 14,
            seed: 28,
        }
    }
}

/// A small deterministic generator (SplitMix64): the traces must not depend
/// on a crate's random stream changing between versions.
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in [0, 1).
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// The shipped trace of `shape` at `scale`, from Monday 2026-11-02 00:00 UTC.
pub fn generate(shape: Shape, scale: &Scale) -> Trace {
    let start = Utc.with_ymd_and_hms(2026, 11, 2, 0, 0, 0).unwrap();
    let end = start + Duration::days(scale.days);
    let (base, peak) = (scale.base_cores, scale.peak_cores);
    let mut rng = SplitMix(scale.seed);
    // Spikes: (start, end, extra cores), drawn once for the whole trace.
    let mut spikes: Vec<(DateTime<Utc>, DateTime<Utc>, f64)> = Vec::new();
    if shape == Shape::Spiky {
        let mut t = start;
        loop {
            // On average one spike every 3 hours, lasting 5–45 minutes.
            let gap = Duration::minutes((rng.unit() * 360.0) as i64 + 1);
            t += gap;
            if t >= end {
                break;
            }
            let length = Duration::minutes(5 + (rng.unit() * 40.0) as i64);
            spikes.push((t, t + length, (peak - base) * (0.3 + 0.7 * rng.unit())));
            t += length;
        }
    }
    let mut samples = Vec::new();
    let mut t = start;
    while t < end {
        let hour = f64::from(t.hour()) + f64::from(t.minute()) / 60.0;
        let weekend = matches!(t.weekday(), Weekday::Sat | Weekday::Sun);
        let cores = match shape {
            Shape::WorkingDays => {
                if !weekend && (8.0..20.0).contains(&hour) {
                    peak
                } else {
                    base
                }
            }
            Shape::Weekly => {
                // A daily wave peaking at 14:00, at 40% on weekends.
                let wave = 0.5 - 0.5 * ((hour - 2.0) / 24.0 * std::f64::consts::TAU).cos();
                let height = if weekend { 0.4 } else { 1.0 };
                base + (peak - base) * wave * height
            }
            Shape::Step => {
                if t >= start + Duration::days(2) {
                    peak
                } else {
                    base
                }
            }
            Shape::Spiky => {
                base + spikes
                    .iter()
                    .filter(|(from, to, _)| *from <= t && t < *to)
                    .map(|(_, _, extra)| extra)
                    .sum::<f64>()
            }
            Shape::Ramp => {
                let done = (t - start).num_seconds() as f64 / (end - start).num_seconds() as f64;
                base + (peak - base) * done
            }
        };
        let cpu_millis = (cores * 1000.0).round() as u64;
        let memory_bytes = (cores * scale.gib_per_core * 1024.0 * 1024.0 * 1024.0).round() as u64;
        samples.push(Sample {
            at: t,
            cpu_millis,
            memory_bytes,
        });
        t += scale.step;
    }
    Trace {
        name: shape.name().to_string(),
        samples,
    }
}

#[cfg(test)]
#[path = "trace_tests.rs"]
mod tests;
