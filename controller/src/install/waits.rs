//! What one install saw of its waits: brackets each delivery and each
//! normal boot between the last look that found it going on and the first
//! that found it over, for the offer's history (`history.rs`). Pure: the
//! driver feeds it every transition with when the look was sent and when it
//! was answered.

use tokio::time::Instant;

use super::Phase;
use super::history::{Seen, Wait};
use super::machine::{State, Step};

/// What the last action found, as far as the waits are concerned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Look {
    /// The server's status was read.
    Status,
    /// A reboot call was accepted.
    Rebooted,
    /// The Talos maintenance API did not answer.
    TalosDown,
    /// The Talos maintenance API answered.
    TalosUp,
    Other,
}

#[derive(Debug, Default)]
pub struct WaitWatch {
    /// When the last read that found the server undelivered was sent (the
    /// order itself for a new one).
    undelivered: Option<Instant>,
    /// Status reads made while waiting for delivery.
    delivery_reads: u32,
    /// The normal boot under way: when it began (the phase clock the
    /// cadence counts from) and when the last probe that found Talos down
    /// was sent.
    boot: Option<(Instant, Option<Instant>)>,
}

impl WaitWatch {
    /// For an install that ordered its server at `ordered` (None for a
    /// resumed one: its delivery is bracketed from the first read on).
    pub fn new(ordered: Option<Instant>) -> Self {
        WaitWatch {
            undelivered: ordered,
            delivery_reads: 0,
            boot: None,
        }
    }

    /// Counts a look made at `step`, as soon as it is answered (before the
    /// transition it leads to is computed).
    pub fn looked(&mut self, step: Step, look: Look) {
        if (step, look) == (Step::AwaitDelivery, Look::Status) {
            self.delivery_reads += 1;
        }
    }

    /// Status reads made so far while waiting for delivery.
    pub fn delivery_reads(&self) -> u32 {
        self.delivery_reads
    }

    /// Follows one transition; returns the wait that just ended, measured
    /// from its start, when both ends of its bracket are known.
    pub fn observe(
        &mut self,
        before: &State,
        after: &State,
        look: Look,
        sent: Instant,
        answered: Instant,
    ) -> Option<(Wait, Seen)> {
        let since = |t: Instant| t.saturating_duration_since(before.since);
        match (before.step, look) {
            (Step::AwaitDelivery, Look::Status) if after.step == Step::AwaitDelivery => {
                self.undelivered = Some(sent);
                None
            }
            (Step::AwaitDelivery, Look::Status) => {
                let undelivered = self.undelivered.take()?;
                (after.phase == Phase::Ready).then(|| {
                    let seen = Seen {
                        after: since(undelivered),
                        by: since(answered),
                    };
                    (Wait::Delivery, seen)
                })
            }
            (Step::RebootNormal, Look::Rebooted) if after.phase == Phase::Booting => {
                self.boot = Some((after.since, None));
                None
            }
            (Step::ProbeTalos, Look::TalosDown) if after.phase == Phase::Booting => {
                if let Some((_, down)) = &mut self.boot {
                    *down = Some(sent);
                }
                None
            }
            (Step::ProbeTalos, Look::TalosUp) if before.phase == Phase::Booting => {
                let (began, down) = self.boot.take()?;
                let since = |t: Instant| t.saturating_duration_since(began);
                down.map(|down| {
                    let seen = Seen {
                        after: since(down),
                        by: since(answered),
                    };
                    (Wait::Boot, seen)
                })
            }
            _ => {
                if after.phase != Phase::Booting {
                    self.boot = None;
                }
                None
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn s(secs: u64) -> Duration {
        Duration::from_secs(secs)
    }

    fn at(t0: Instant, phase: Phase, step: Step, since: u64) -> State {
        State {
            phase,
            step,
            since: t0 + s(since),
            ..State::start(t0)
        }
    }

    #[test]
    fn a_delivery_is_bracketed_by_the_last_undelivered_read_and_the_first_delivered_one() {
        let t0 = Instant::now();
        let t = |x: u64| t0 + s(x);
        let mut w = WaitWatch::new(Some(t0));
        let delivering = at(t0, Phase::Delivering, Step::AwaitDelivery, 0);
        let ready = at(t0, Phase::Ready, Step::RebootRescue, 250);
        w.looked(Step::AwaitDelivery, Look::Status);
        assert_eq!(
            w.observe(&delivering, &delivering, Look::Status, t(240), t(241)),
            None
        );
        w.looked(Step::AwaitDelivery, Look::Status);
        let seen = w.observe(&delivering, &ready, Look::Status, t(249), t(250));
        assert_eq!(
            seen,
            Some((
                Wait::Delivery,
                Seen {
                    after: s(240),
                    by: s(250)
                }
            ))
        );
        // Recorded once.
        assert_eq!(
            w.observe(&delivering, &ready, Look::Status, t(251), t(251)),
            None
        );
        w.looked(Step::AwaitRescue, Look::Status);
        assert_eq!(
            w.delivery_reads(),
            2,
            "reads after the delivery do not count"
        );
    }

    #[test]
    fn a_resumed_delivery_is_recorded_only_once_a_read_found_it_undelivered() {
        let t0 = Instant::now();
        let t = |x: u64| t0 + s(x);
        let delivering = at(t0, Phase::Delivering, Step::AwaitDelivery, 0);
        let ready = at(t0, Phase::Ready, Step::RebootRescue, 250);
        let mut w = WaitWatch::new(None);
        assert_eq!(
            w.observe(&delivering, &ready, Look::Status, t(249), t(250)),
            None
        );
        // A failed read (not a status) moves nothing.
        let mut w = WaitWatch::new(None);
        assert_eq!(
            w.observe(&delivering, &delivering, Look::Other, t(100), t(101)),
            None
        );
        assert_eq!(
            w.observe(&delivering, &ready, Look::Status, t(249), t(250)),
            None
        );
    }

    #[test]
    fn a_boot_is_bracketed_by_the_talos_probes_from_the_phase_clock() {
        let t0 = Instant::now();
        let t = |x: u64| t0 + s(x);
        let mut w = WaitWatch::new(None);
        let rebooting = at(t0, Phase::Booting, Step::RebootNormal, 100);
        let probing = at(t0, Phase::Booting, Step::ProbeTalos, 100);
        let maintenance = at(t0, Phase::Maintenance, Step::ApplyConfig, 112);
        assert_eq!(
            w.observe(&rebooting, &probing, Look::Rebooted, t(100), t(100)),
            None
        );
        assert_eq!(
            w.observe(&probing, &probing, Look::TalosDown, t(110), t(110)),
            None
        );
        let seen = w.observe(&probing, &maintenance, Look::TalosUp, t(112), t(112));
        assert_eq!(
            seen,
            Some((
                Wait::Boot,
                Seen {
                    after: s(10),
                    by: s(12)
                }
            ))
        );
    }

    #[test]
    fn a_boot_without_a_probe_that_found_talos_down_or_cut_short_is_not_recorded() {
        let t0 = Instant::now();
        let t = |x: u64| t0 + s(x);
        let rebooting = at(t0, Phase::Booting, Step::RebootNormal, 100);
        let probing = at(t0, Phase::Booting, Step::ProbeTalos, 100);
        let maintenance = at(t0, Phase::Maintenance, Step::ApplyConfig, 112);
        let mut w = WaitWatch::new(None);
        w.observe(&rebooting, &probing, Look::Rebooted, t(100), t(100));
        assert_eq!(
            w.observe(&probing, &maintenance, Look::TalosUp, t(101), t(101)),
            None
        );
        // Back to rescue in between: that boot ended elsewhere.
        let mut w = WaitWatch::new(None);
        w.observe(&rebooting, &probing, Look::Rebooted, t(100), t(100));
        w.observe(&probing, &probing, Look::TalosDown, t(110), t(110));
        let rescue = at(t0, Phase::Ready, Step::RebootRescue, 700);
        w.observe(&probing, &rescue, Look::Other, t(700), t(700));
        assert_eq!(
            w.observe(&probing, &maintenance, Look::TalosUp, t(800), t(800)),
            None
        );
    }
}
