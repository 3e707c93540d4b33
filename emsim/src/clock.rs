//! The simulated clock. Every duration the simulator models (delivery, reboot,
//! deletion) is expressed in simulated seconds; `--time-scale` maps them to real
//! time so that a four-minute delivery can take 240 ms in a test. JSON timestamps
//! follow this clock, so a client sees consistent `created_at`/`updated_at`
//! values whatever the scale.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use chrono::{DateTime, TimeDelta, Utc};

pub type SimTime = DateTime<Utc>;

#[derive(Debug)]
pub struct SimClock {
    real_start: Instant,
    sim_start: SimTime,
    /// Real seconds per simulated second.
    scale: f64,
    /// Simulated time added by `POST /_emsim/clock/advance`.
    skipped: Mutex<TimeDelta>,
}

impl SimClock {
    /// `scale` must be finite and > 0 (checked by the caller's config).
    pub fn new(scale: f64, sim_start: SimTime) -> Self {
        Self {
            real_start: Instant::now(),
            sim_start,
            scale,
            skipped: Mutex::new(TimeDelta::zero()),
        }
    }

    pub fn scale(&self) -> f64 {
        self.scale
    }

    pub fn now(&self) -> SimTime {
        let real = self.real_start.elapsed().as_secs_f64();
        self.sim_start + secs(real / self.scale) + self.skipped()
    }

    /// Jumps the simulated clock forward (never backward).
    pub fn advance(&self, by: TimeDelta) {
        if by > TimeDelta::zero() {
            *self.skipped.lock().expect("clock lock") += by;
        }
    }

    /// The real instant at which the simulated clock reads `at`.
    pub fn real_instant(&self, at: SimTime) -> Instant {
        let sim_elapsed = (at - self.sim_start - self.skipped()).as_seconds_f64();
        if sim_elapsed <= 0.0 {
            return self.real_start;
        }
        // Cap far-future deadlines: Instant + huge Duration panics on overflow.
        let real = (sim_elapsed * self.scale).min(10.0 * 365.0 * 86_400.0);
        self.real_start + Duration::from_secs_f64(real)
    }

    fn skipped(&self) -> TimeDelta {
        *self.skipped.lock().expect("clock lock")
    }
}

/// Fractional seconds as a `TimeDelta`, with microsecond precision.
pub fn secs(s: f64) -> TimeDelta {
    TimeDelta::microseconds((s * 1e6).round() as i64)
}

/// RFC 3339 with exactly six fractional digits and `Z`, as the API writes it
/// (`2025-10-24T13:43:11.051888Z`).
pub fn format_time(t: SimTime) -> String {
    t.format("%Y-%m-%dT%H:%M:%S%.6fZ").to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn formats_with_microseconds_and_z() {
        let t = Utc.with_ymd_and_hms(2025, 10, 24, 13, 43, 11).unwrap()
            + TimeDelta::microseconds(51_888);
        assert_eq!(format_time(t), "2025-10-24T13:43:11.051888Z");
        let whole = Utc.with_ymd_and_hms(2026, 1, 2, 3, 4, 5).unwrap();
        assert_eq!(format_time(whole), "2026-01-02T03:04:05.000000Z");
    }

    #[test]
    fn scaled_clock_runs_faster_and_advance_skips() {
        let start = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let clock = SimClock::new(0.001, start);
        std::thread::sleep(Duration::from_millis(20));
        // 20 ms real at scale 0.001 is at least 20 s simulated.
        assert!(clock.now() - start >= TimeDelta::seconds(20));
        let before = clock.now();
        clock.advance(TimeDelta::hours(1));
        assert!(clock.now() - before >= TimeDelta::hours(1));
        clock.advance(TimeDelta::hours(-5));
        assert!(clock.now() - before >= TimeDelta::hours(1));
    }

    #[test]
    fn real_instant_maps_deadlines_back() {
        let start = Utc.with_ymd_and_hms(2026, 1, 1, 0, 0, 0).unwrap();
        let clock = SimClock::new(0.5, start);
        let deadline = start + TimeDelta::seconds(10);
        let real = clock.real_instant(deadline);
        assert_eq!(real - clock.real_start, Duration::from_secs(5));
        clock.advance(TimeDelta::seconds(4));
        let real = clock.real_instant(deadline);
        assert_eq!(real - clock.real_start, Duration::from_secs(3));
        assert_eq!(clock.real_instant(start), clock.real_start);
    }
}
