//! Go durations (`time.ParseDuration`) as the API server's CEL reads them, for
//! NodeClass fields validated with `duration(self)`. `config::parse_duration`
//! reads the provider's flags (`15s`, or a bare number of seconds) and knows
//! no compound values such as `1h30m`, so it cannot stand in for this one.

use std::time::Duration;

/// Nanoseconds per unit, longest names first where one is a prefix of another.
const UNITS: [(&str, u128); 8] = [
    ("ns", 1),
    ("us", 1_000),
    ("µs", 1_000),
    ("μs", 1_000),
    ("ms", 1_000_000),
    ("s", 1_000_000_000),
    ("m", 60_000_000_000),
    ("h", 3_600_000_000_000),
];

/// Go's limit: a `time.Duration` is an `int64` of nanoseconds.
const MAX_NANOS: u128 = i64::MAX as u128;

/// `0`, or one or more of a decimal number and a unit (`ns`, `us`, `µs`,
/// `ms`, `s`, `m`, `h`): `30m`, `1h30m`, `1.5h`, `.5s`. Exactly the grammar of
/// `rules::GO_DURATION_PATTERN`, i.e. Go's without a sign (a negative keep
/// means nothing; Go's `+` is refused with it). Fractions below a nanosecond
/// are dropped, as Go does.
pub fn parse(text: &str) -> Result<Duration, String> {
    let invalid = || format!("{text:?} is not a Go duration such as 0s, 30m or 1h30m");
    if text == "0" {
        return Ok(Duration::ZERO);
    }
    if text.is_empty() {
        return Err(invalid());
    }
    let mut rest = text;
    let mut total: u128 = 0;
    while !rest.is_empty() {
        let int_len = rest
            .find(|c: char| !c.is_ascii_digit())
            .unwrap_or(rest.len());
        let (int, after) = rest.split_at(int_len);
        let (frac, after) = match after.strip_prefix('.') {
            Some(after) => {
                let len = after
                    .find(|c: char| !c.is_ascii_digit())
                    .unwrap_or(after.len());
                after.split_at(len)
            }
            None => ("", after),
        };
        if int.is_empty() && frac.is_empty() {
            return Err(invalid());
        }
        let unit_end = after
            .find(|c: char| c == '.' || c.is_ascii_digit())
            .unwrap_or(after.len());
        let (unit, after) = after.split_at(unit_end);
        let per_unit = UNITS
            .iter()
            .find(|(name, _)| *name == unit)
            .map(|(_, nanos)| *nanos)
            .ok_or_else(invalid)?;
        let whole: u128 = if int.is_empty() {
            0
        } else {
            // More than 20 digits overflows whatever the unit.
            int.parse().map_err(|_| invalid())?
        };
        let mut part = whole.checked_mul(per_unit).ok_or_else(invalid)?;
        // The fraction, truncated to whole nanoseconds; digits past the 19th
        // cannot change it (a unit is at most 3.6e12 ns).
        let mut scale: u128 = 1;
        let mut numerator: u128 = 0;
        for digit in frac.bytes().take(19) {
            numerator = numerator * 10 + u128::from(digit - b'0');
            scale *= 10;
        }
        part += numerator * per_unit / scale;
        total = total.checked_add(part).ok_or_else(invalid)?;
        if total > MAX_NANOS {
            return Err(format!("{text:?} is too long for a Go duration"));
        }
        rest = after;
    }
    Ok(Duration::from_nanos(total as u64))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nodeclass::StandbyPool;

    #[test]
    fn reads_go_durations() {
        let s = Duration::from_secs;
        for (text, want) in [
            ("0", s(0)),
            ("0s", s(0)),
            ("30m", s(1800)),
            ("1h30m", s(5400)),
            ("1h0m0s", s(3600)),
            ("24h", s(86400)),
            ("1.5h", s(5400)),
            (".5m", s(30)),
            ("1.m", s(60)),
            ("2h45m30s", s(2 * 3600 + 45 * 60 + 30)),
            ("300ms", Duration::from_millis(300)),
            ("1us", Duration::from_micros(1)),
            ("1µs", Duration::from_micros(1)),
            ("1μs", Duration::from_micros(1)),
            ("7ns", Duration::from_nanos(7)),
            ("1.0000000001s", s(1)),
            ("10m10m", s(1200)),
        ] {
            assert_eq!(parse(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn refuses_what_go_or_the_crd_refuses() {
        for text in [
            "", "1", "30", "h", "1d", "1w", "-1h", "+1h", "1h ", " 1h", "1H", "1hour", ".", ".h",
            "1..5h", "1h-30m", "30m1", "1e3s",
        ] {
            assert!(parse(text).is_err(), "{text:?} was accepted");
        }
    }

    #[test]
    fn refuses_what_overflows_go() {
        // Go's limit is 2562047h47m16.854775807s.
        assert!(parse("2562047h").is_ok());
        assert!(parse("2562048h").is_err());
        assert!(parse("99999999999999999999999h").is_err());
    }

    fn pool(keep: Option<&str>) -> StandbyPool {
        StandbyPool {
            offer: "EM-A115X-SSD".into(),
            zone: "fr-par-2".into(),
            min: 1,
            max: 2,
            idle_hourly_keep: keep.map(str::to_string),
            planner: None,
        }
    }

    #[test]
    fn idle_hourly_keep_defaults_to_zero_and_stops_at_a_day() {
        assert_eq!(pool(None).idle_hourly_keep(), Ok(Duration::ZERO));
        assert_eq!(
            pool(Some("1h30m")).idle_hourly_keep(),
            Ok(Duration::from_secs(5400))
        );
        assert_eq!(
            pool(Some("24h")).idle_hourly_keep(),
            Ok(Duration::from_secs(86400))
        );
        let too_long = pool(Some("24h1s")).idle_hourly_keep().unwrap_err();
        assert!(too_long.contains("EM-A115X-SSD/fr-par-2"), "{too_long}");
        assert!(too_long.contains("longer than 24h"), "{too_long}");
        let bad = pool(Some("1d")).idle_hourly_keep().unwrap_err();
        assert!(bad.contains("not a Go duration"), "{bad}");
    }
}
