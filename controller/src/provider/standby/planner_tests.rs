use super::*;

fn t(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

const GIB: u64 = 1 << 30;

fn spec() -> PlannerSpec {
    PlannerSpec {
        window: Duration::from_secs(2 * 3600),
        hold: Duration::from_secs(3600),
        min: 0,
        max: 4,
        server_cpu_millis: 3_500,
        server_memory_bytes: 28 * GIB,
    }
}

fn sample(at: &str, cpu: u64, memory_gib: u64) -> Sample {
    Sample {
        at: t(at),
        cpu_millis: cpu,
        memory_bytes: memory_gib * GIB,
    }
}

#[test]
fn sustained_load_is_the_least_seen_over_the_whole_window() {
    let samples = [
        sample("2026-11-24T07:30:00Z", 1_000, 4),
        sample("2026-11-24T08:00:00Z", 9_000, 40),
        sample("2026-11-24T09:00:00Z", 8_000, 50),
        sample("2026-11-24T09:30:00Z", 12_000, 60),
    ];
    // The window 08:00-10:00: the sample in force at 08:00 is 9000m/40 GiB.
    assert_eq!(
        sustained(
            &samples,
            Duration::from_secs(7200),
            t("2026-11-24T10:00:00Z")
        ),
        Some((8_000, 40 * GIB))
    );
    // 07:45-09:45: the 07:30 sample was still in force at 07:45.
    assert_eq!(
        sustained(
            &samples,
            Duration::from_secs(7200),
            t("2026-11-24T09:45:00Z")
        ),
        Some((1_000, 4 * GIB))
    );
    // Not enough history.
    assert_eq!(
        sustained(
            &samples,
            Duration::from_secs(7200),
            t("2026-11-24T09:00:00Z")
        ),
        None
    );
}

#[test]
fn servers_are_counted_by_the_scarcer_resource() {
    let s = spec();
    assert_eq!(servers_for(&s, 0, 0), 0);
    assert_eq!(servers_for(&s, 3_500, GIB), 1);
    assert_eq!(servers_for(&s, 3_501, GIB), 2);
    assert_eq!(servers_for(&s, 100, 57 * GIB), 3, "memory decides");
}

#[test]
fn the_target_rises_once_sustained_and_stays_within_bounds() {
    let s = spec();
    let samples = [
        sample("2026-11-24T08:00:00Z", 8_000, 40),
        sample("2026-11-24T09:00:00Z", 9_000, 40),
    ];
    let d = decide(&s, &samples, 0, None, t("2026-11-24T10:00:00Z"));
    assert_eq!((d.target, d.needed), (3, 3), "{d:?}");
    // Far more load than max allows: capped.
    let big = [sample("2026-11-24T08:00:00Z", 80_000, 400)];
    let d = decide(&s, &big, 0, None, t("2026-11-24T10:00:00Z"));
    assert_eq!(d.target, 4);
    // A burst younger than the window changes nothing.
    let burst = [
        sample("2026-11-24T08:00:00Z", 0, 0),
        sample("2026-11-24T09:50:00Z", 80_000, 400),
    ];
    let d = decide(&s, &burst, 0, None, t("2026-11-24T10:00:00Z"));
    assert_eq!(d.target, 0);
    assert_eq!(d.needed, 0);
}

#[test]
fn the_target_falls_only_after_the_hold() {
    let s = spec();
    let quiet = [sample("2026-11-24T06:00:00Z", 1_000, 4)];
    let changed = Some(t("2026-11-24T09:30:00Z"));
    let d = decide(&s, &quiet, 3, changed, t("2026-11-24T10:00:00Z"));
    assert_eq!(d.target, 3, "held: {d:?}");
    let d = decide(&s, &quiet, 3, changed, t("2026-11-24T10:30:00Z"));
    assert_eq!(d.target, 1, "{d:?}");
    // Never below min.
    let s = PlannerSpec { min: 2, ..spec() };
    let d = decide(&s, &quiet, 3, None, t("2026-11-24T10:30:00Z"));
    assert_eq!(d.target, 2);
}

#[test]
fn without_history_the_current_target_stays_within_bounds() {
    let s = PlannerSpec { min: 1, ..spec() };
    let d = decide(&s, &[], 0, None, t("2026-11-24T10:00:00Z"));
    assert_eq!(d.target, 1);
    assert!(d.sustained.is_none());
}
