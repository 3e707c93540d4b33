//! The Scaleway API's clock, as its `Date` headers give it. Billing periods
//! count from a server's `created_at`, which the API writes on its own
//! clock: comparing it with the local clock would be off by the local
//! clock's skew (and, against a time-scaled simulator, by a lot). Every
//! answer's `Date` updates the offset; before the first one, the offset is 0.

use std::sync::atomic::{AtomicI64, Ordering};

use chrono::{DateTime, Utc};

/// The API's clock minus the local one, in milliseconds.
static OFFSET_MS: AtomicI64 = AtomicI64::new(0);

/// An answer's `Date` header (`Tue, 24 Nov 2026 18:12:00 GMT`), received now.
pub fn observe(date: &str) {
    if let Some(ms) = offset_ms(date, Utc::now()) {
        // `Date` has a resolution of one second: the offset is known to
        // within a second, plenty for billing periods of an hour or a month.
        OFFSET_MS.store(ms, Ordering::Relaxed);
    }
}

/// The API's clock minus `local` as a `Date` header received at `local`
/// says; `None` when the header is not a date.
fn offset_ms(date: &str, local: DateTime<Utc>) -> Option<i64> {
    let api = DateTime::parse_from_rfc2822(date.trim()).ok()?;
    Some((api.with_timezone(&Utc) - local).num_milliseconds())
}

/// Now, on the API's clock.
pub fn now() -> DateTime<Utc> {
    Utc::now() + chrono::Duration::milliseconds(OFFSET_MS.load(Ordering::Relaxed))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_offset_is_what_the_date_header_says() {
        let local = DateTime::parse_from_rfc3339("2026-11-24T18:00:00Z")
            .unwrap()
            .with_timezone(&Utc);
        assert_eq!(
            offset_ms("Tue, 24 Nov 2026 19:40:00 GMT", local),
            Some(100 * 60 * 1000)
        );
        assert_eq!(
            offset_ms("Tue, 24 Nov 2026 17:59:59 GMT", local),
            Some(-1000)
        );
        assert_eq!(offset_ms("yesterday", local), None);
    }
}
