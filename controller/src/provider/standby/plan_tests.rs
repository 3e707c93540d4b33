use super::*;

fn t(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn pool(min: u32, max: u32) -> PoolSpec {
    PoolSpec {
        offer: "EM-A115X-SSD".into(),
        zone: "fr-par-2".into(),
        min,
        max,
        idle_hourly_keep: Duration::ZERO,
        billing: Billing::Hourly,
    }
}

fn member(id: &str, state: State, billing: Billing, created: &str, idle: Option<&str>) -> Member {
    Member {
        id: id.into(),
        state,
        created_at: t(created),
        idle_since: idle.map(t),
        billing,
    }
}

fn ids(steps: &[Step]) -> Vec<String> {
    steps
        .iter()
        .map(|s| match s {
            Step::Order { .. } => "order".to_string(),
            Step::Release { id, .. } => id.clone(),
        })
        .collect()
}

#[test]
fn orders_what_is_missing_up_to_min_at_once() {
    let p = Periods::default();
    let now = t("2026-11-24T10:00:00Z");
    assert_eq!(
        ids(&plan(&pool(2, 3), &[], true, &p, now)),
        ["order", "order"]
    );
    let one = [member(
        "a",
        State::Installing,
        Billing::Hourly,
        "2026-11-24T09:55:00Z",
        None,
    )];
    assert_eq!(ids(&plan(&pool(2, 3), &one, true, &p, now)), ["order"]);
    // Installing and wiping servers count toward min: they will be idle.
    let two = [
        one[0].clone(),
        member(
            "b",
            State::Wiping,
            Billing::Hourly,
            "2026-11-24T08:00:00Z",
            None,
        ),
    ];
    assert!(plan(&pool(2, 3), &two, true, &p, now).is_empty());
    // Out of stock or refused lately: nothing is ordered.
    assert!(plan(&pool(2, 3), &[], false, &p, now).is_empty());
    // max caps min.
    assert!(plan(&pool(2, 1), &one, true, &p, now).is_empty());
}

#[test]
fn an_idle_hourly_server_above_min_goes_at_the_end_of_its_paid_hour() {
    let p = Periods::default();
    let m = member(
        "a",
        State::Idle,
        Billing::Hourly,
        "2026-11-24T09:10:00Z",
        Some("2026-11-24T10:20:00Z"),
    );
    // Its second paid hour ends at 11:10; released 2 minutes before.
    assert!(
        plan(
            &pool(0, 3),
            std::slice::from_ref(&m),
            true,
            &p,
            t("2026-11-24T11:07:59Z")
        )
        .is_empty()
    );
    assert_eq!(
        ids(&plan(
            &pool(0, 3),
            std::slice::from_ref(&m),
            true,
            &p,
            t("2026-11-24T11:08:00Z")
        )),
        ["a"]
    );
    // At min it stays whatever the hour.
    assert!(
        plan(
            &pool(1, 3),
            std::slice::from_ref(&m),
            true,
            &p,
            t("2026-11-24T15:08:00Z")
        )
        .is_empty()
    );
    // idleHourlyKeep 90m: idle at 10:20 + 1h30 = 11:50, in the hour ending 12:10.
    let keep = PoolSpec {
        idle_hourly_keep: Duration::from_secs(90 * 60),
        ..pool(0, 3)
    };
    assert!(
        plan(
            &keep,
            std::slice::from_ref(&m),
            true,
            &p,
            t("2026-11-24T11:08:00Z")
        )
        .is_empty()
    );
    assert_eq!(
        ids(&plan(&keep, &[m], true, &p, t("2026-11-24T12:08:00Z"))),
        ["a"]
    );
}

#[test]
fn an_idle_monthly_server_is_never_released_before_its_month_ends() {
    let p = Periods::default();
    let created = "2026-11-01T00:00:00Z";
    let m = member(
        "m",
        State::Idle,
        Billing::Monthly,
        created,
        Some("2026-11-02T00:00:00Z"),
    );
    let month_end = t(created) + chrono::Duration::hours(730);
    let before = month_end - chrono::Duration::minutes(3);
    assert!(plan(&pool(0, 1), std::slice::from_ref(&m), true, &p, before).is_empty());
    let at = month_end - chrono::Duration::minutes(2);
    assert_eq!(
        ids(&plan(&pool(0, 1), std::slice::from_ref(&m), true, &p, at)),
        ["m"]
    );
    // The next month: the same rule from its own end.
    let second = month_end + chrono::Duration::hours(1);
    assert!(plan(&pool(0, 1), &[m], true, &p, second).is_empty());
}

#[test]
fn only_the_excess_above_min_is_released_soonest_paid_first() {
    let p = Periods::default();
    let now = t("2026-11-24T11:09:00Z");
    let members = [
        member(
            "late",
            State::Idle,
            Billing::Hourly,
            "2026-11-24T09:30:00Z",
            Some("2026-11-24T10:00:00Z"),
        ),
        member(
            "early",
            State::Idle,
            Billing::Hourly,
            "2026-11-24T09:10:00Z",
            Some("2026-11-24T10:00:00Z"),
        ),
        member(
            "busy",
            State::Wiping,
            Billing::Hourly,
            "2026-11-24T08:10:00Z",
            None,
        ),
    ];
    // 3 servers, min 2: one goes, the one whose hour ends first (11:10).
    assert_eq!(ids(&plan(&pool(2, 3), &members, true, &p, now)), ["early"]);
    // min 0: each idle one at the end of the hour it is in; the wiping one
    // is never released here. At 11:29 "early" is 19 minutes into a paid
    // hour that ends at 12:10, "late" 2 minutes before its hour ends.
    let later = t("2026-11-24T11:29:00Z");
    assert_eq!(ids(&plan(&pool(0, 3), &members, true, &p, later)), ["late"]);
    assert_eq!(
        ids(&plan(
            &pool(0, 3),
            &members,
            true,
            &p,
            t("2026-11-24T12:08:00Z")
        )),
        ["early"]
    );
}

#[test]
fn a_server_that_turns_excess_mid_hour_stays_until_that_hour_ends() {
    let p = Periods::default();
    // Idle at min since 09:20, in a pool whose min dropped (or that a
    // recycled server joined) at 11:30: its hour 11:10-12:10 is paid.
    let m = member(
        "a",
        State::Idle,
        Billing::Hourly,
        "2026-11-24T09:10:00Z",
        Some("2026-11-24T09:20:00Z"),
    );
    for now in ["2026-11-24T11:30:00Z", "2026-11-24T12:07:59Z"] {
        assert!(
            plan(&pool(0, 3), std::slice::from_ref(&m), true, &p, t(now)).is_empty(),
            "released at {now}, inside a paid hour"
        );
    }
    assert_eq!(
        ids(&plan(
            &pool(0, 3),
            std::slice::from_ref(&m),
            true,
            &p,
            t("2026-11-24T12:08:00Z")
        )),
        ["a"]
    );
    // Inside the margin of the hour it is in: at once.
    assert_eq!(
        ids(&plan(
            &pool(0, 3),
            std::slice::from_ref(&m),
            true,
            &p,
            t("2026-11-24T12:09:59Z")
        )),
        ["a"]
    );
    // A pass that comes just after the hour ended waits for the next one.
    assert!(plan(&pool(0, 3), &[m], true, &p, t("2026-11-24T12:10:00Z")).is_empty());
}

#[test]
fn orphaned_pools_release_hourly_at_once_and_monthly_at_period_end() {
    let p = Periods::default();
    let created = "2026-11-01T00:00:00Z";
    let members = [
        member("h", State::Installing, Billing::Hourly, created, None),
        member("m", State::Idle, Billing::Monthly, created, Some(created)),
        member("w", State::Wiping, Billing::Monthly, created, None),
    ];
    let mid = t("2026-11-10T00:00:00Z");
    assert_eq!(ids(&plan_orphaned(&members, &p, mid)), ["h"]);
    let end = t(created) + chrono::Duration::hours(730) - chrono::Duration::minutes(1);
    assert_eq!(ids(&plan_orphaned(&members, &p, end)), ["h", "m"]);
}

#[test]
fn recycling_follows_billing_and_the_pool() {
    let p = pool(1, 2);
    // Without a pool: an hourly server goes, a monthly one waits for the
    // end of its paid month.
    assert!(matches!(
        recycle(None, 0, Billing::Hourly),
        Recycle::Delete { .. }
    ));
    assert!(matches!(
        recycle(None, 0, Billing::Monthly),
        Recycle::Recycle { .. }
    ));
    assert!(matches!(
        recycle(Some(&p), 1, Billing::Hourly),
        Recycle::Recycle { .. }
    ));
    match recycle(Some(&p), 2, Billing::Hourly) {
        Recycle::Delete { reason } => assert!(reason.contains("full"), "{reason}"),
        other => panic!("{other:?}"),
    }
    // A monthly server is paid until its month ends: recycled above max too.
    assert!(matches!(
        recycle(Some(&p), 5, Billing::Monthly),
        Recycle::Recycle { .. }
    ));
}

#[test]
fn paid_periods_count_from_the_order() {
    let p = Periods::default();
    let created = t("2026-11-24T09:10:00Z");
    assert_eq!(
        p.paid_until(Billing::Hourly, created, created),
        t("2026-11-24T10:10:00Z")
    );
    assert_eq!(
        p.paid_until(Billing::Hourly, created, t("2026-11-24T10:09:59Z")),
        t("2026-11-24T10:10:00Z")
    );
    assert_eq!(
        p.paid_until(Billing::Hourly, created, t("2026-11-24T10:10:00Z")),
        t("2026-11-24T11:10:00Z")
    );
    let short = Periods {
        hour: Duration::from_secs(60),
        month: Duration::from_secs(600),
        release_margin: Duration::from_secs(5),
    };
    assert_eq!(
        short.paid_until(Billing::Monthly, created, t("2026-11-24T09:25:00Z")),
        t("2026-11-24T09:30:00Z")
    );
}

#[test]
fn savings_count_only_recycled_servers() {
    let p = Periods::default();
    let created = t("2026-11-24T09:00:00Z");
    let now = t("2026-11-24T09:45:00Z");
    assert_eq!(
        adoption_savings(Billing::Hourly, false, created, now, 0.2, None, &p),
        0.0
    );
    let hourly = adoption_savings(Billing::Hourly, true, created, now, 0.2, None, &p);
    assert!((hourly - 0.05).abs() < 1e-9, "{hourly}");
    let monthly = adoption_savings(Billing::Monthly, true, created, now, 0.045, Some(32.99), &p);
    assert!((monthly - 32.99).abs() < 1e-9);
}
