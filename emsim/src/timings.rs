//! The durations emsim draws for its slow transitions (Elastic Metal delivery
//! and boots, Instance boots), the named profiles of them, and the overrides
//! the flags give.
//!
//! Every default is the one the test suites are tuned to; the `real` profile
//! holds Scaleway's figures, for runs by hand at time scale 1. A fixed span
//! draws nothing from the RNG, so the default profile replays the same ids
//! and times as before spans existed.

use std::fmt;
use std::str::FromStr;

use rand::Rng;
use serde::{Deserialize, Deserializer};

/// A duration in simulated seconds: fixed, or drawn uniformly from a range
/// with the world's seeded RNG.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Span {
    Fixed(f64),
    Between(f64, f64),
}

impl Span {
    /// The seconds of one transition. Only a range consumes a draw.
    pub fn draw(self, rng: &mut impl Rng) -> f64 {
        match self {
            Span::Fixed(s) => s,
            Span::Between(lo, hi) => rng.random_range(lo..=hi),
        }
    }
}

/// `240` or `180-300` (seconds).
impl FromStr for Span {
    type Err = String;

    fn from_str(s: &str) -> Result<Self, String> {
        let seconds = |v: &str| -> Result<f64, String> {
            match v.trim().parse::<f64>() {
                Ok(x) if x.is_finite() && x >= 0.0 => Ok(x),
                _ => Err(format!(
                    "{s:?}: expected seconds (`240`) or a range (`180-300`)"
                )),
            }
        };
        match s.split_once('-') {
            None => seconds(s).map(Span::Fixed),
            Some((lo, hi)) => {
                let (lo, hi) = (seconds(lo)?, seconds(hi)?);
                if lo > hi {
                    return Err(format!("{s:?}: the range ends before it starts"));
                }
                Ok(Span::Between(lo, hi))
            }
        }
    }
}

impl fmt::Display for Span {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Span::Fixed(s) => write!(f, "{s}s"),
            Span::Between(lo, hi) => write!(f, "{lo}-{hi}s"),
        }
    }
}

/// A catalog field: a number of seconds or a `"180-300"` range.
impl<'de> Deserialize<'de> for Span {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        #[serde(untagged)]
        enum Raw {
            Seconds(f64),
            Text(String),
        }
        match Raw::deserialize(d)? {
            Raw::Seconds(s) => s.to_string().parse(),
            Raw::Text(t) => t.parse(),
        }
        .map_err(serde::de::Error::custom)
    }
}

/// Elastic Metal delivery of the `standard` kind: 3 min 45 s to 4 min 47 s in
/// the recordings.
pub const STANDARD_DELIVERY: Span = Span::Between(225.0, 287.0);
/// An Elastic Metal reboot or start, either boot type: "ready at the next
/// poll" (15 s polling) in the recordings of the API's status. The default.
pub const DEFAULT_BOOT: Span = Span::Fixed(12.0);
/// An Elastic Metal machine's real reboot, into rescue or back to its disk:
/// 3 to 5 minutes until it answers again.
pub const REAL_BOOT: Span = Span::Between(180.0, 300.0);
/// A Scaleway Instance from `poweron` (or `reboot`) to running: about a minute.
pub const REAL_VM_BOOT: Span = Span::Between(45.0, 75.0);

/// A named set of timings (`--timings`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Profile {
    /// The catalogs' own timings: what every test suite expects.
    #[default]
    Default,
    /// Scaleway's figures: delivery 225–287 s for every offer, boots 180–300 s,
    /// VM boots 45–75 s.
    Real,
}

impl Profile {
    pub fn overrides(self) -> TimingOverrides {
        match self {
            Profile::Default => TimingOverrides::default(),
            Profile::Real => TimingOverrides {
                delivery: Some(STANDARD_DELIVERY),
                boot: Some(REAL_BOOT),
                vm_boot: Some(REAL_VM_BOOT),
            },
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

/// Durations that replace the catalogs' own; `None` keeps them.
#[derive(Debug, Clone, Copy, PartialEq, Default)]
pub struct TimingOverrides {
    /// Every Elastic Metal offer's delivery.
    pub delivery: Option<Span>,
    /// Every Elastic Metal offer's boot (reboot or start, normal or rescue).
    pub boot: Option<Span>,
    /// An Instance's `poweron` or `reboot` until it runs (GPU types then
    /// still provision).
    pub vm_boot: Option<Span>,
}

impl TimingOverrides {
    /// These, and `base`'s where these say nothing: explicit flags over a
    /// profile.
    pub fn or(self, base: TimingOverrides) -> Self {
        Self {
            delivery: self.delivery.or(base.delivery),
            boot: self.boot.or(base.boot),
            vm_boot: self.vm_boot.or(base.vm_boot),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use rand::SeedableRng;
    use rand::rngs::StdRng;

    #[test]
    fn spans_parse_from_flags_and_catalogs() {
        assert_eq!("240".parse(), Ok(Span::Fixed(240.0)));
        assert_eq!("180-300".parse(), Ok(Span::Between(180.0, 300.0)));
        assert_eq!(" 45 - 75 ".parse(), Ok(Span::Between(45.0, 75.0)));
        for bad in ["", "soon", "300-180", "-5", "1-2-3", "NaN"] {
            assert!(bad.parse::<Span>().is_err(), "{bad:?}");
        }
        let yaml: Vec<Span> = serde_yaml_ng::from_str("[12, 2.5, \"180-300\"]").unwrap();
        assert_eq!(
            yaml,
            [
                Span::Fixed(12.0),
                Span::Fixed(2.5),
                Span::Between(180.0, 300.0)
            ]
        );
        assert!(serde_yaml_ng::from_str::<Span>("\"later\"").is_err());
    }

    #[test]
    fn a_fixed_span_leaves_the_rng_alone() {
        let mut a = StdRng::seed_from_u64(3);
        let mut b = StdRng::seed_from_u64(3);
        assert_eq!(DEFAULT_BOOT.draw(&mut a), 12.0);
        assert_eq!(a.random::<u64>(), b.random::<u64>());
        let drawn = REAL_BOOT.draw(&mut a);
        assert!((180.0..=300.0).contains(&drawn), "{drawn}");
    }

    #[test]
    fn flags_win_over_the_profile() {
        assert_eq!(Profile::Default.overrides(), TimingOverrides::default());
        let real = Profile::Real.overrides();
        assert_eq!(real.delivery, Some(Span::Between(225.0, 287.0)));
        assert_eq!(real.boot, Some(Span::Between(180.0, 300.0)));
        assert_eq!(real.vm_boot, Some(Span::Between(45.0, 75.0)));
        let flags = TimingOverrides {
            boot: Some(Span::Fixed(60.0)),
            ..TimingOverrides::default()
        };
        let merged = flags.or(real);
        assert_eq!(merged.boot, Some(Span::Fixed(60.0)));
        assert_eq!(merged.delivery, real.delivery);
        assert_eq!("real".parse(), Ok(Profile::Real));
        assert!("fast".parse::<Profile>().is_err());
    }
}
