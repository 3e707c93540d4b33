//! How long deliveries of an offer take in a zone, from the ones this
//! process watched, and when the next one is therefore expected to end.
//!
//! The engine notices a delivery at its next status read, half a poll
//! interval late on average: most of what the provider adds to an install
//! at the real time scale (docs/figures.md, "Install overhead"). Reading
//! faster throughout would multiply the reads of a wait that lasts minutes.
//! Deliveries of one offer in one zone take about the same time, so the
//! status is read faster only inside the window where the deliveries seen so
//! far ended, and more slowly before it, which pays for the faster reads
//! (see `machine_cadence.rs`). Without history (a new offer, a restarted
//! process) the poll interval applies throughout.
//!
//! Each delivery is known to a bracket: after the last read that showed the
//! server undelivered, by the first that showed it delivered. In memory only:
//! a restarted provider learns again from its next deliveries.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

/// Deliveries kept per offer and zone: recent enough to follow a change of
/// the platform's pace, enough to tell its spread.
pub const KEPT: usize = 16;

/// The fast reads of one window are bounded: a history whose deliveries are
/// spread over more than this many fast reads predicts too little to pay
/// for them, and the poll interval applies instead.
pub const MAX_WINDOW_READS: u32 = 120;

/// One delivery watched, as times since the order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Delivered {
    /// The last status read that showed the server undelivered (or the
    /// order itself).
    pub after: Duration,
    /// The first status read that showed it delivered.
    pub by: Duration,
}

/// Where the next delivery is expected to end, as times since the order.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DeliveryWindow {
    pub opens: Duration,
    pub closes: Duration,
}

/// The window the deliveries seen predict: from the earliest to the latest,
/// widened on each side by twice the mean gap between two of them (a next
/// delivery falls beyond the ones seen about once in `n + 1`), and at least
/// by one poll interval. `None` without history, or when the window would
/// hold more than [`MAX_WINDOW_READS`] reads at `fast`.
pub fn window(seen: &[Delivered], poll: Duration, fast: Duration) -> Option<DeliveryWindow> {
    let earliest = seen.iter().map(|d| d.after).min()?;
    let latest = seen.iter().map(|d| d.by.max(d.after)).max()?;
    let spread = latest - earliest;
    let gap = spread.mul_f64(2.0 / (seen.len() as f64 + 1.0));
    let margin = gap.max(poll);
    let w = DeliveryWindow {
        opens: earliest.saturating_sub(margin),
        closes: latest + margin,
    };
    (w.closes - w.opens <= fast * MAX_WINDOW_READS).then_some(w)
}

/// Recent deliveries per (offer, zone), shared by every install of the
/// engine.
#[derive(Debug, Default)]
pub struct DeliveryHistory {
    seen: Mutex<HashMap<(String, String), VecDeque<Delivered>>>,
}

impl DeliveryHistory {
    pub fn record(&self, offer: &str, zone: &str, delivered: Delivered) {
        let mut seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let recent = seen
            .entry((offer.to_string(), zone.to_string()))
            .or_default();
        if recent.len() == KEPT {
            recent.pop_front();
        }
        recent.push_back(delivered);
    }

    /// The deliveries of `offer` in `zone` seen lately, oldest first.
    pub fn recent(&self, offer: &str, zone: &str) -> Vec<Delivered> {
        let seen = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        seen.get(&(offer.to_string(), zone.to_string()))
            .map(|r| r.iter().copied().collect())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(secs: u64) -> Duration {
        Duration::from_secs(secs)
    }

    fn seen(after: u64, by: u64) -> Delivered {
        Delivered {
            after: s(after),
            by: s(by),
        }
    }

    #[test]
    fn no_history_no_window() {
        assert_eq!(window(&[], s(5), s(1)), None);
    }

    #[test]
    fn one_delivery_is_widened_by_one_poll_interval() {
        let w = window(&[seen(240, 241)], s(5), s(1)).unwrap();
        assert_eq!((w.opens, w.closes), (s(235), s(246)));
    }

    #[test]
    fn several_are_widened_by_twice_their_mean_gap() {
        // Five deliveries over 60 s: a mean gap of 10 s, widened by 20 s.
        let all = [
            seen(225, 226),
            seen(240, 241),
            seen(250, 251),
            seen(270, 271),
            seen(284, 285),
        ];
        let w = window(&all, s(5), s(1)).unwrap();
        assert_eq!((w.opens, w.closes), (s(205), s(305)));
    }

    #[test]
    fn a_history_too_spread_to_pay_for_fast_reads_gives_no_window() {
        let all = [seen(60, 61), seen(600, 601)];
        assert_eq!(window(&all, s(5), s(1)), None);
        // The same spread in a world ten times slower to read is fine.
        assert!(window(&all, s(50), s(10)).is_some());
    }

    #[test]
    fn a_window_never_opens_before_the_order() {
        let w = window(&[seen(2, 3)], s(5), s(1)).unwrap();
        assert_eq!((w.opens, w.closes), (s(0), s(8)));
    }

    #[test]
    fn history_is_per_offer_and_zone_and_keeps_the_latest() {
        let h = DeliveryHistory::default();
        for i in 0..(KEPT as u64 + 3) {
            h.record("EM-B112X-SSD", "fr-par-2", seen(i, i + 1));
        }
        h.record("EM-B112X-SSD", "nl-ams-1", seen(500, 501));
        let recent = h.recent("EM-B112X-SSD", "fr-par-2");
        assert_eq!(recent.len(), KEPT);
        assert_eq!(recent[0], seen(3, 4));
        assert_eq!(h.recent("EM-B112X-SSD", "nl-ams-1"), [seen(500, 501)]);
        assert!(h.recent("EM-A115X-SSD", "fr-par-2").is_empty());
    }
}
