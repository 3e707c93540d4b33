//! How long the simulated machines take to do their slow work, in real time
//! (talos-sim has no clock of its own). Every default is immediate, which is
//! what the test suites expect; the `real` profile holds a real machine's
//! figures for runs by hand at emsim's time scale 1 (`emsim --timings real`
//! gives the matching delivery and boot times).

use std::str::FromStr;
use std::time::{Duration, Instant};

/// An NVMe or SSD of an Elastic Metal server writing a raw image: a
/// 1.5 GB Talos image takes 10 s.
pub const REAL_DISK_WRITE_MB_PER_S: f64 = 150.0;

/// A named set of timings (`--timings`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Profile {
    /// Disk writes as fast as the host allows.
    #[default]
    Default,
    /// Disk writes at 150 MB/s.
    Real,
}

impl Profile {
    pub fn disk_write_rate(self) -> Option<WriteRate> {
        match self {
            Profile::Default => None,
            Profile::Real => Some(WriteRate::mb_per_s(REAL_DISK_WRITE_MB_PER_S)),
        }
    }
}

impl FromStr for Profile {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s {
            "default" => Ok(Profile::Default),
            "real" => Ok(Profile::Real),
            other => Err(format!("unknown timings {other:?} (default | real)")),
        }
    }
}

/// How fast a disk takes writes, in bytes per second.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WriteRate(f64);

impl WriteRate {
    /// `mb` must be finite and positive (`FromStr` checks it).
    pub fn mb_per_s(mb: f64) -> Self {
        Self(mb * 1e6)
    }

    pub fn bytes_per_s(self) -> f64 {
        self.0
    }
}

/// MB/s (10^6 bytes per second), as dd reports them: `150`, `37.5`.
impl FromStr for WriteRate {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        match s.trim().parse::<f64>() {
            Ok(mb) if mb.is_finite() && mb > 0.0 => Ok(Self::mb_per_s(mb)),
            _ => Err(format!("{s:?}: expected a positive number of MB/s")),
        }
    }
}

/// Paces one stream of writes to a rate: after each write, the writer
/// sleeps until the bytes so far would have taken that long. Runs on a
/// blocking thread (dd and tee write from one).
#[derive(Debug)]
pub struct Throttle {
    rate: WriteRate,
    started: Instant,
    bytes: u64,
}

impl Throttle {
    pub fn new(rate: WriteRate) -> Self {
        Self {
            rate,
            started: Instant::now(),
            bytes: 0,
        }
    }

    /// Counts `n` bytes written and waits for the rate to catch up.
    pub fn wrote(&mut self, n: u64) {
        self.bytes += n;
        let wait = behind(self.bytes, self.rate, self.started.elapsed());
        if !wait.is_zero() {
            std::thread::sleep(wait);
        }
    }
}

/// How much longer `bytes` should have taken at `rate` than `elapsed`.
fn behind(bytes: u64, rate: WriteRate, elapsed: Duration) -> Duration {
    let due = Duration::from_secs_f64(bytes as f64 / rate.bytes_per_s());
    due.saturating_sub(elapsed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_parse_in_megabytes_per_second() {
        assert_eq!("150".parse(), Ok(WriteRate::mb_per_s(150.0)));
        assert_eq!(
            "37.5".parse::<WriteRate>().unwrap().bytes_per_s(),
            37_500_000.0
        );
        for bad in ["", "0", "-3", "fast", "inf"] {
            assert!(bad.parse::<WriteRate>().is_err(), "{bad:?}");
        }
        assert_eq!(Profile::Default.disk_write_rate(), None);
        assert_eq!(
            "real".parse::<Profile>().unwrap().disk_write_rate(),
            Some(WriteRate::mb_per_s(150.0))
        );
        assert!("slow".parse::<Profile>().is_err());
    }

    #[test]
    fn the_wait_is_what_the_bytes_are_ahead_of_the_rate() {
        let rate = WriteRate::mb_per_s(150.0);
        // A 1.5 GB image is due after 10 s.
        assert_eq!(
            behind(1_500_000_000, rate, Duration::from_secs(4)),
            Duration::from_secs(6)
        );
        assert_eq!(
            behind(1_500_000_000, rate, Duration::from_secs(11)),
            Duration::ZERO
        );
        assert_eq!(behind(0, rate, Duration::ZERO), Duration::ZERO);
    }

    #[test]
    fn a_throttle_sleeps_until_the_rate_is_met() {
        let started = Instant::now();
        let mut throttle = Throttle::new(WriteRate::mb_per_s(10.0));
        for _ in 0..4 {
            throttle.wrote(500_000);
        }
        // 2 MB at 10 MB/s.
        let took = started.elapsed();
        // No upper bound: a loaded machine can take any time; that the
        // throttle waits no longer than the rate asks is `behind`'s test.
        assert!(took >= Duration::from_millis(200), "{took:?}");
    }
}
