//! Client-side pacing of the Elastic Metal API: at most `per_second` calls
//! per endpoint, each call waiting for its turn instead of being refused.
//!
//! Why: the API limits calls per endpoint and answers 429 beyond the limit,
//! while the provider's demand grows with the installs in flight (one status
//! read per installing server per poll interval: 100 installs at a 5 s
//! interval want 20 reads a second). Unpaced, the excess came back as 429s,
//! each retried by the client up to five times, so that most calls of a
//! 100-node scale-up were refused ones (docs/figures.md, "Scale"). Paced, the
//! excess waits here, the install loops slow down to what the API serves, and
//! no call is sent that the API would refuse.
//!
//! Turns are handed out in call order (a virtual-scheduling token bucket: each
//! call reserves the next free slot, a burst of one second's worth is
//! allowed). A call whose turn is further away than its patience is not
//! sent: it fails at once as throttled, without taking a slot, so that a
//! Create that must answer within seconds fails back to Karpenter (which
//! calls it again) rather than outliving its caller's deadline.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use tokio::time::Instant;

/// Per-endpoint pacing.
#[derive(Debug)]
pub struct Pacer {
    /// Time between two calls of one endpoint.
    spacing: Duration,
    /// How far ahead of the steady pace a burst may run.
    burst: Duration,
    /// Per endpoint: when the pace would allow the next call if no burst
    /// credit were used (the "theoretical arrival time").
    next: Mutex<HashMap<&'static str, Instant>>,
}

/// What pacing did to one call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Turn {
    /// Sent at once.
    Now,
    /// Sent after waiting this long for its turn.
    Waited(Duration),
    /// Not sent: the turn was further away than the call's patience.
    Refused,
}

impl Pacer {
    /// `per_second` > 0 calls per endpoint; a burst of one second's worth.
    pub fn new(per_second: f64) -> Pacer {
        let spacing = Duration::from_secs_f64(1.0 / per_second);
        let burst_calls = per_second.ceil().max(1.0);
        Pacer {
            spacing,
            burst: spacing.mul_f64(burst_calls - 1.0),
            next: Mutex::new(HashMap::new()),
        }
    }

    /// Reserves the next turn of `endpoint` if it comes within `patience`,
    /// and says when it is.
    fn reserve(&self, endpoint: &'static str, now: Instant, patience: Duration) -> Option<Instant> {
        let mut next = self.next.lock().unwrap_or_else(|e| e.into_inner());
        let tat = next.get(endpoint).copied().unwrap_or(now).max(now);
        let start = tat.checked_sub(self.burst).unwrap_or(now).max(now);
        if start > now + patience {
            return None;
        }
        next.insert(endpoint, tat + self.spacing);
        Some(start)
    }

    /// Waits for the turn of `endpoint` (at most `patience`).
    pub async fn turn(&self, endpoint: &'static str, patience: Duration) -> Turn {
        let now = Instant::now();
        match self.reserve(endpoint, now, patience) {
            None => Turn::Refused,
            Some(start) if start <= now => Turn::Now,
            Some(start) => {
                tokio::time::sleep_until(start).await;
                Turn::Waited(start - now)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const PATIENT: Duration = Duration::from_secs(3600);

    #[tokio::test(start_paused = true)]
    async fn a_burst_goes_at_once_then_one_call_per_spacing() {
        let p = Pacer::new(4.0);
        let t0 = Instant::now();
        for _ in 0..4 {
            assert_eq!(p.turn("GET /a", PATIENT).await, Turn::Now);
        }
        assert_eq!(
            p.turn("GET /a", PATIENT).await,
            Turn::Waited(Duration::from_millis(250))
        );
        assert_eq!(Instant::now() - t0, Duration::from_millis(250));
        // Another endpoint has its own turns.
        assert_eq!(p.turn("GET /b", PATIENT).await, Turn::Now);
        // Waiters queue in call order, one spacing apart.
        let second = p.reserve("GET /a", Instant::now(), PATIENT).unwrap();
        let third = p.reserve("GET /a", Instant::now(), PATIENT).unwrap();
        assert_eq!(third - second, Duration::from_millis(250));
    }

    #[tokio::test(start_paused = true)]
    async fn a_call_whose_turn_is_too_far_is_refused_without_taking_a_slot() {
        let p = Pacer::new(1.0);
        assert_eq!(p.turn("POST /s", PATIENT).await, Turn::Now);
        let t = Instant::now();
        assert_eq!(p.reserve("POST /s", t, Duration::from_millis(500)), None);
        assert_eq!(p.reserve("POST /s", t, Duration::from_millis(500)), None);
        // The refusals took nothing: the next patient call gets the first
        // free turn, one second after the first call.
        assert_eq!(
            p.reserve("POST /s", t, PATIENT),
            Some(t + Duration::from_secs(1))
        );
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_endpoint_regains_its_burst() {
        let p = Pacer::new(2.0);
        for _ in 0..3 {
            p.turn("GET /a", PATIENT).await;
        }
        tokio::time::sleep(Duration::from_secs(10)).await;
        assert_eq!(p.turn("GET /a", PATIENT).await, Turn::Now);
        assert_eq!(p.turn("GET /a", PATIENT).await, Turn::Now);
        assert!(matches!(p.turn("GET /a", PATIENT).await, Turn::Waited(_)));
    }
}
