//! How long an offer's deliveries and normal boots take in a zone, from the
//! ones this process watched, and when the next one is therefore expected
//! to end.
//!
//! The engine notices the end of a wait at its next look: a delivery at the
//! next status read (half a poll interval late on average, most of what the
//! provider added to an install at the real time scale, docs/figures.md
//! "Install overhead"), a normal boot at the next Talos probe. Looking
//! faster throughout would multiply the looks at a wait that lasts minutes.
//! Waits of one offer in one zone take about the same time, so the engine
//! looks faster only inside the window where the waits seen so far ended
//! (see `machine_cadence.rs`). Status reads are a remote, rate-limited API:
//! they are fewer before the window, and the window's pace is chosen so that
//! a delivery costs on average no more reads than one every poll interval
//! would. Talos probes are local and cost no API call: only faster inside
//! the window. Without history (a new offer, a restarted process) the plain
//! cadence applies.
//!
//! Each wait is known to a bracket: after the last look that found it going
//! on, by the first that found it over. In memory only: a restarted provider
//! learns again from its next installs.

use std::collections::{HashMap, VecDeque};
use std::sync::Mutex;
use std::time::Duration;

/// Waits kept per kind, offer and zone: recent enough to follow a change of
/// the platform's pace, enough to tell its spread.
pub const KEPT: usize = 16;

/// A window never holds more looks than this: a history too spread to
/// predict the end gives no window, and the plain cadence applies.
pub const MAX_WINDOW_LOOKS: u32 = 120;

/// Before a delivery window opens, the status is read this many poll
/// intervals apart: what is saved there pays for the window's faster reads.
pub const READS_BEFORE_WINDOW: u32 = 6;

/// The fastest status reads inside a delivery window: this many per poll
/// interval (every 0.5 s at the 5 s default).
pub const FASTEST_READS: u32 = 10;

/// Inside a boot window, the Talos maintenance API is probed this many
/// times per probe interval.
pub const BOOT_PROBES: u32 = 4;

/// The waits whose ends are learnt.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Wait {
    /// Order accepted -> server delivered (`ready`), read from the API.
    Delivery,
    /// Normal reboot requested -> Talos maintenance API answering, probed.
    Boot,
}

/// One wait watched, as times since it began.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    /// The last look that found the wait going on (or its start).
    pub after: Duration,
    /// The first look that found it over.
    pub by: Duration,
}

/// Where the next wait is expected to end, as times since it began, and
/// how often to look inside.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    pub opens: Duration,
    pub closes: Duration,
    pub every: Duration,
}

/// From the earliest end seen to the latest, widened on each side by twice
/// the mean gap between two of them (a next wait ends beyond the ones seen
/// about once in `n + 1`), and at least by `interval`.
fn span(seen: &[Seen], interval: Duration) -> Option<(Duration, Duration)> {
    let earliest = seen.iter().map(|s| s.after).min()?;
    let latest = seen.iter().map(|s| s.by.max(s.after)).max()?;
    let gap = (latest - earliest).mul_f64(2.0 / (seen.len() as f64 + 1.0));
    let margin = gap.max(interval);
    Some((earliest.saturating_sub(margin), latest + margin))
}

fn bounded(opens: Duration, closes: Duration, every: Duration) -> Option<Window> {
    let looks = (closes - opens).as_secs_f64() / every.as_secs_f64().max(1e-9);
    (looks <= f64::from(MAX_WINDOW_LOOKS)).then_some(Window {
        opens,
        closes,
        every,
    })
}

/// A delivery under way, as far as its reads go.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Progress {
    /// Time since the order.
    pub elapsed: Duration,
    /// Status reads made so far.
    pub reads: u32,
}

/// The status-read window for a delivery, given the deliveries seen, the
/// poll interval `poll` and how far this delivery got. Its pace spends the
/// reads one every poll interval would make until the mean of the
/// deliveries seen that ended later than this one's wait so far, less those
/// already made and those still to make before the window (every
/// [`READS_BEFORE_WINDOW`] intervals), and is never faster than
/// poll / [`FASTEST_READS`]. The cost grows linearly with the delivery
/// time on both cadences, so at the mean they are equal and on average a
/// delivery costs no more reads than the plain cadence, even for an install
/// that learnt the window halfway (one ordered with the deliveries that
/// taught it). `None` without history, when this delivery already waited
/// longer than every one seen, when nothing is left to spend, or when the
/// window would be too long.
pub fn delivery_window(seen: &[Seen], poll: Duration, now: Progress) -> Option<Window> {
    let (opens, closes) = span(seen, poll)?;
    // The deliveries seen that this one may still be like: those that ended
    // after the time it has already waited.
    let later: Vec<f64> = seen
        .iter()
        .map(|s| (s.after + s.by.max(s.after)).as_secs_f64() / 2.0)
        .filter(|mid| *mid > now.elapsed.as_secs_f64())
        .collect();
    if later.is_empty() {
        return None;
    }
    let mean = later.iter().sum::<f64>() / later.len() as f64;
    let p = poll.as_secs_f64();
    let until_opening = opens.saturating_sub(now.elapsed).as_secs_f64();
    let before =
        f64::from(now.reads) + (until_opening / (p * f64::from(READS_BEFORE_WINDOW))).ceil();
    let left = mean / p - before;
    let to_mean = mean - opens.max(now.elapsed).as_secs_f64();
    if left < 1.0 || to_mean <= 0.0 {
        return None;
    }
    let fastest = poll / FASTEST_READS;
    let every = Duration::from_secs_f64(to_mean / left).max(fastest);
    bounded(opens, closes, every)
}

/// The Talos probe window for a normal boot, given the boots seen and the
/// probe interval: probes every probe / [`BOOT_PROBES`] inside it.
pub fn boot_window(seen: &[Seen], probe: Duration) -> Option<Window> {
    let (opens, closes) = span(seen, probe)?;
    bounded(opens, closes, probe / BOOT_PROBES)
}

/// Share of the API's spare pace the fast reads of all delivery windows
/// may use together: the rest is headroom for the reads that are not
/// planned (a status read at once after a reboot, a retry, another caller).
pub const FAST_READS_SHARE: f64 = 0.8;

/// A delivery window's pace once shared: the client allows `pace` status
/// reads a second, `reading` installs read the status at the plain cadence
/// (one every `poll`), and `watching` installs (this one included) are
/// inside a window at once. Their fast reads share [`FAST_READS_SHARE`] of
/// what the plain reads leave, fairly: ten windows at once read ten times
/// slower than one. `None` when nothing is left: the plain cadence then.
pub fn shared(
    window: Window,
    pace: f64,
    reading: usize,
    watching: usize,
    poll: Duration,
) -> Option<Window> {
    let spare = FAST_READS_SHARE * (pace - reading as f64 / poll.as_secs_f64());
    if spare <= 0.0 {
        return None;
    }
    let share = Duration::from_secs_f64(watching.max(1) as f64 / spare);
    Some(Window {
        every: window.every.max(share),
        ..window
    })
}

/// Recent waits per (kind, offer, zone), shared by every install of the
/// engine.
#[derive(Debug, Default)]
pub struct History {
    seen: Mutex<HashMap<(Wait, String, String), VecDeque<Seen>>>,
}

impl History {
    pub fn record(&self, wait: Wait, offer: &str, zone: &str, seen: Seen) {
        let mut all = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        let recent = all
            .entry((wait, offer.to_string(), zone.to_string()))
            .or_default();
        if recent.len() == KEPT {
            recent.pop_front();
        }
        recent.push_back(seen);
    }

    /// The waits of this kind for `offer` in `zone` seen lately, oldest first.
    pub fn recent(&self, wait: Wait, offer: &str, zone: &str) -> Vec<Seen> {
        let all = self.seen.lock().unwrap_or_else(|e| e.into_inner());
        all.get(&(wait, offer.to_string(), zone.to_string()))
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

    /// A delivery that learns its window at its order.
    const START: Progress = Progress {
        elapsed: Duration::ZERO,
        reads: 0,
    };

    fn seen(after: u64, by: u64) -> Seen {
        Seen {
            after: s(after),
            by: s(by),
        }
    }

    #[test]
    fn no_history_no_window() {
        assert_eq!(delivery_window(&[], s(5), START), None);
        assert_eq!(boot_window(&[], s(2)), None);
    }

    #[test]
    fn one_delivery_is_widened_by_one_poll_interval() {
        // Seen between 240 s and 250 s: the window is 230 s .. 260 s. Until
        // the mean (245 s) one read every 5 s would make 49 reads; 8 go
        // before the window (every 30 s, the last at its opening), 41 are
        // left for the 15 s from the opening to the mean: more than one every
        // 0.5 s, the fastest allowed.
        let w = delivery_window(&[seen(240, 250)], s(5), START).unwrap();
        assert_eq!((w.opens, w.closes), (s(230), s(260)));
        assert_eq!(w.every, Duration::from_millis(500));
    }

    #[test]
    fn several_are_widened_by_twice_their_mean_gap_and_spend_the_plain_reads() {
        // Five deliveries over 60 s: a mean gap of 10 s, widened by 20 s.
        let all = [
            seen(225, 226),
            seen(240, 241),
            seen(250, 251),
            seen(270, 271),
            seen(284, 285),
        ];
        let w = delivery_window(&all, s(5), START).unwrap();
        assert_eq!((w.opens, w.closes), (s(205), s(305)));
        // Mean 254.3 s: 50.86 plain reads, 7 before the window, 43.86 left
        // for the 49.3 s from the opening to the mean.
        let every = w.every.as_secs_f64();
        assert!((every - 49.3 / 43.86).abs() < 0.01, "{every}");
    }

    #[test]
    fn a_history_too_spread_to_predict_gives_no_window() {
        let all = [seen(60, 61), seen(600, 601)];
        assert_eq!(delivery_window(&all, s(5), START), None);
        assert_eq!(boot_window(&all, s(2)), None);
    }

    #[test]
    fn a_window_learnt_halfway_spends_only_what_the_plain_reads_left() {
        let all = [seen(240, 250)];
        // Ordered with the delivery that taught the window and read every
        // 5 s since: at 235 s, 47 reads are made, 2 are left until the mean
        // (245 s), one every 5 s: no faster than the plain cadence.
        let halfway = Progress {
            elapsed: s(235),
            reads: 47,
        };
        let w = delivery_window(&all, s(5), halfway).unwrap();
        assert_eq!(w.every, s(5));
        // Read every 30 s since its order (it knew a window then): 8 reads
        // made, 41 left for the 10 s to the mean: the fastest pace.
        let thrifty = Progress {
            elapsed: s(235),
            reads: 8,
        };
        let w = delivery_window(&all, s(5), thrifty).unwrap();
        assert_eq!(w.every, Duration::from_millis(500));
        // Nothing left at all: the plain cadence.
        let spent = Progress {
            elapsed: s(244),
            reads: 49,
        };
        assert_eq!(delivery_window(&all, s(5), spent), None);
        // Waited longer than every delivery seen: the plain cadence.
        let late = Progress {
            elapsed: s(246),
            reads: 9,
        };
        assert_eq!(delivery_window(&all, s(5), late), None);
    }

    #[test]
    fn a_short_delivery_leaves_nothing_to_spend() {
        // Seen within the first poll interval: the plain cadence is as cheap
        // as it gets.
        assert_eq!(delivery_window(&[seen(0, 4)], s(5), START), None);
    }

    #[test]
    fn boots_are_probed_four_times_faster_in_their_window() {
        let w = boot_window(&[seen(10, 12), seen(10, 12)], s(2)).unwrap();
        assert_eq!(
            (w.opens, w.closes, w.every),
            (s(8), s(14), Duration::from_millis(500))
        );
    }

    #[test]
    fn windows_at_once_share_the_pace_the_plain_reads_leave() {
        let w = Window {
            opens: s(200),
            closes: s(300),
            every: Duration::from_millis(500),
        };
        // 8 reads a second, 10 installs reading every 5 s (2 a second):
        // 4.8 a second for the windows. One window keeps its own pace.
        let one = shared(w, 8.0, 10, 1, s(5)).unwrap();
        assert_eq!(one.every, Duration::from_millis(500));
        // Ten at once: one read every 10 / 4.8 s each.
        let ten = shared(w, 8.0, 10, 10, s(5)).unwrap();
        assert!(
            (ten.every.as_secs_f64() - 10.0 / 4.8).abs() < 1e-6,
            "{ten:?}"
        );
        assert_eq!((ten.opens, ten.closes), (w.opens, w.closes));
        // The plain reads take the whole pace: no fast reads.
        assert_eq!(shared(w, 8.0, 40, 1, s(5)), None);
    }

    #[test]
    fn history_is_per_kind_offer_and_zone_and_keeps_the_latest() {
        let h = History::default();
        for i in 0..(KEPT as u64 + 3) {
            h.record(Wait::Delivery, "EM-B112X-SSD", "fr-par-2", seen(i, i + 1));
        }
        h.record(Wait::Delivery, "EM-B112X-SSD", "nl-ams-1", seen(500, 501));
        h.record(Wait::Boot, "EM-B112X-SSD", "fr-par-2", seen(10, 12));
        let recent = h.recent(Wait::Delivery, "EM-B112X-SSD", "fr-par-2");
        assert_eq!(recent.len(), KEPT);
        assert_eq!(recent[0], seen(3, 4));
        assert_eq!(
            h.recent(Wait::Delivery, "EM-B112X-SSD", "nl-ams-1"),
            [seen(500, 501)]
        );
        assert_eq!(
            h.recent(Wait::Boot, "EM-B112X-SSD", "fr-par-2"),
            [seen(10, 12)]
        );
        assert!(
            h.recent(Wait::Delivery, "EM-A115X-SSD", "fr-par-2")
                .is_empty()
        );
    }
}
