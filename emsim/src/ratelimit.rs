//! A token bucket per endpoint (`--rate-limit`), in real time: rate limits are
//! about how fast a client calls, which the simulated clock does not change.

use std::collections::HashMap;
use std::time::Instant;

#[derive(Debug)]
pub struct RateLimiter {
    per_second: f64,
    burst: f64,
    buckets: HashMap<String, (f64, Instant)>,
}

impl RateLimiter {
    /// `per_second` > 0; the burst is one second's worth (at least one call).
    pub fn new(per_second: f64) -> Self {
        Self {
            per_second,
            burst: per_second.ceil().max(1.0),
            buckets: HashMap::new(),
        }
    }

    pub fn per_second(&self) -> f64 {
        self.per_second
    }

    /// Calls allowed per window, as reported in the 429 body.
    pub fn quota(&self) -> u64 {
        self.burst as u64
    }

    pub fn allow(&mut self, endpoint: &str, now: Instant) -> bool {
        let (tokens, last) = self
            .buckets
            .entry(endpoint.to_string())
            .or_insert((self.burst, now));
        let elapsed = now.saturating_duration_since(*last).as_secs_f64();
        *tokens = (*tokens + elapsed * self.per_second).min(self.burst);
        *last = now;
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }

    pub fn clear(&mut self) {
        self.buckets.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    #[test]
    fn refills_over_time_per_endpoint() {
        let mut r = RateLimiter::new(2.0);
        let t = Instant::now();
        assert!(r.allow("a", t));
        assert!(r.allow("a", t));
        assert!(!r.allow("a", t));
        assert!(r.allow("b", t), "buckets are per endpoint");
        assert!(r.allow("a", t + Duration::from_millis(500)));
        assert!(!r.allow("a", t + Duration::from_millis(500)));
        assert_eq!(r.quota(), 2);
    }
}
