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
//!
//! A call dropped while it waits (its caller's deadline passed: Karpenter's
//! gRPC calls are cancelled after a few seconds) gives its turn back, and the
//! next call takes it. Found by core's regression suite (Utilization, 100
//! nodes deleted at once): before, each cancelled waiter kept its slot, so
//! every Get and Delete that core retried pushed the pace further into the
//! future, every later call waited past its deadline and was cancelled in
//! turn, and no server could be read or deleted for as long as core kept
//! asking.

use std::collections::{BTreeSet, HashMap};
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
    lanes: Mutex<HashMap<&'static str, Lane>>,
}

#[derive(Debug)]
struct Lane {
    /// When the pace would allow the next call if no burst credit were used
    /// (the "theoretical arrival time").
    tat: Instant,
    /// Turns reserved by calls that were dropped before them: taken again
    /// (earliest first) before the pace is extended.
    given_back: BTreeSet<Instant>,
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
            lanes: Mutex::new(HashMap::new()),
        }
    }

    /// Reserves the next turn of `endpoint` if it comes within `patience`,
    /// and says when it is.
    fn reserve(&self, endpoint: &'static str, now: Instant, patience: Duration) -> Option<Instant> {
        let mut lanes = self.lanes.lock().unwrap_or_else(|e| e.into_inner());
        let lane = lanes.entry(endpoint).or_insert(Lane {
            tat: now,
            given_back: BTreeSet::new(),
        });
        // A turn given back that has passed is gone (the pace caught up).
        lane.given_back = lane.given_back.split_off(&now);
        if let Some(&turn) = lane.given_back.first() {
            if turn > now + patience {
                return None;
            }
            lane.given_back.remove(&turn);
            return Some(turn);
        }
        let tat = lane.tat.max(now);
        let start = tat.checked_sub(self.burst).unwrap_or(now).max(now);
        if start > now + patience {
            return None;
        }
        lane.tat = tat + self.spacing;
        Some(start)
    }

    /// Gives back a reserved turn that will not be used.
    fn give_back(&self, endpoint: &'static str, turn: Instant) {
        let mut lanes = self.lanes.lock().unwrap_or_else(|e| e.into_inner());
        if let Some(lane) = lanes.get_mut(endpoint) {
            lane.given_back.insert(turn);
        }
    }

    /// Waits for the turn of `endpoint` (at most `patience`). Dropping the
    /// future before the turn comes gives the turn back.
    pub async fn turn(&self, endpoint: &'static str, patience: Duration) -> Turn {
        let now = Instant::now();
        match self.reserve(endpoint, now, patience) {
            None => Turn::Refused,
            Some(start) if start <= now => Turn::Now,
            Some(start) => {
                let mut pending = Pending {
                    pacer: self,
                    endpoint,
                    turn: start,
                    used: false,
                };
                tokio::time::sleep_until(start).await;
                pending.used = true;
                Turn::Waited(start - now)
            }
        }
    }
}

/// A reserved turn being waited for: given back if the wait is dropped.
struct Pending<'a> {
    pacer: &'a Pacer,
    endpoint: &'static str,
    turn: Instant,
    used: bool,
}

impl Drop for Pending<'_> {
    fn drop(&mut self) {
        if !self.used {
            self.pacer.give_back(self.endpoint, self.turn);
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

    /// Core's regression suite (100 nodes deleted at once): Gets and Deletes
    /// cancelled by their gRPC deadline while they waited kept their turns,
    /// so the pace ran away and no later call was ever sent in time.
    #[tokio::test(start_paused = true)]
    async fn a_call_dropped_while_it_waits_gives_its_turn_back() {
        let p = Pacer::new(4.0);
        for _ in 0..4 {
            assert_eq!(p.turn("GET /s", PATIENT).await, Turn::Now);
        }
        // A hundred callers give up after 1 ms, before their turns.
        for _ in 0..100 {
            let waited =
                tokio::time::timeout(Duration::from_millis(1), p.turn("GET /s", PATIENT)).await;
            assert!(waited.is_err(), "its turn was further away");
        }
        // The next caller waits for the first free turn, not behind a
        // hundred turns nobody will use.
        let t = Instant::now();
        match p.turn("GET /s", PATIENT).await {
            Turn::Waited(d) => assert!(d <= Duration::from_millis(250), "waited {d:?}"),
            other => panic!("{other:?}"),
        }
        assert!(Instant::now() - t <= Duration::from_millis(250));
    }

    #[tokio::test(start_paused = true)]
    async fn a_turn_given_back_goes_to_the_next_caller_and_keeps_the_pace() {
        let p = Pacer::new(2.0);
        let t0 = Instant::now();
        assert_eq!(p.turn("GET /a", PATIENT).await, Turn::Now);
        assert_eq!(p.turn("GET /a", PATIENT).await, Turn::Now);
        // Two waiters reserve t0+0.5 s and t0+1 s; the first is dropped.
        let first = p.reserve("GET /a", t0, PATIENT).unwrap();
        let second = p.reserve("GET /a", t0, PATIENT).unwrap();
        assert_eq!(
            (first - t0, second - t0),
            (Duration::from_millis(500), Duration::from_millis(1000))
        );
        p.give_back("GET /a", first);
        // The next caller takes the turn given back, the one after it the
        // next turn of the pace: never two calls in one turn.
        assert_eq!(p.reserve("GET /a", t0, PATIENT), Some(first));
        assert_eq!(
            p.reserve("GET /a", t0, PATIENT),
            Some(t0 + Duration::from_millis(1500))
        );
        // A turn given back and not taken before it passed is gone.
        p.give_back("GET /a", first);
        tokio::time::sleep(Duration::from_secs(5)).await;
        let now = Instant::now();
        assert_eq!(p.reserve("GET /a", now, PATIENT), Some(now));
    }
}
