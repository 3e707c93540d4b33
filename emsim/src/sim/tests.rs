use super::*;
use crate::catalog::StockLevel;
use crate::timings::{Profile, Span, TimingOverrides};
use chrono::{TimeZone, Utc};

const CATALOG: &str = r#"
offers:
  - name: EM-FAST
    zones: [fr-par-1]
    delivery: 10
    quota: 2
    price_per_hour: 0.1
    disks: [{capacity: 1000000000000, type: SSD}]
  - name: EM-COUNTED
    zones: [fr-par-1]
    stock: 1
    delivery: 10
    price_per_hour: 0.2
"#;

fn t0() -> SimTime {
    Utc.with_ymd_and_hms(2026, 11, 22, 10, 0, 0).unwrap()
}

fn world() -> World {
    world_with(Catalog::parse(CATALOG).unwrap())
}

fn world_with(catalog: Catalog) -> World {
    let config = WorldConfig {
        seed: 7,
        project_id: "22222222-2222-4222-8222-222222222222".into(),
        organization_id: "33333333-3333-4333-8333-333333333333".into(),
        ip_range: "127.77.0.0/16".parse().unwrap(),
        timings: Timings::default(),
        instance_timings: InstanceTimings::default(),
        rescue_user: "rescue".into(),
    };
    World::new(config, catalog, Arc::new(Notify::new()))
}

fn offer_id(w: &World, name: &str) -> String {
    w.offers("fr-par-1")
        .into_iter()
        .find(|o| o.name == name)
        .unwrap()
        .id
}

fn order(w: &mut World, name: &str, now: SimTime) -> Result<model::Server, ApiError> {
    order_with(w, name, now, &mut Faults::new(0))
}

fn order_with(
    w: &mut World,
    name: &str,
    now: SimTime,
    faults: &mut Faults,
) -> Result<model::Server, ApiError> {
    let offer_id = offer_id(w, name);
    w.create_server(
        now,
        "fr-par-1",
        NewServer {
            offer_id,
            project_id: None,
            name: "node".into(),
            description: String::new(),
            tags: vec!["karpenter.sh/nodeclaim=a".into()],
            protected: false,
            user_data: None,
        },
        faults,
    )
}

fn add_key(w: &mut World, now: SimTime) -> model::SshKey {
    let key = crate::ssh_key::parse(
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAICJEoOOgQBLJPs4g/XcPTKT82NywNPpxeuA20FlOPlpO me@host",
    )
    .unwrap();
    w.create_ssh_key(now, "k".into(), key, None)
}

#[test]
fn delivery_then_power_on_event_with_address() {
    let mut w = world();
    let (snapshot, mut rx) = w.subscribe();
    assert!(snapshot.is_empty());
    let s = order(&mut w, "EM-FAST", t0()).unwrap();
    assert_eq!(s.status, "delivering");
    assert!(s.ips.is_empty());
    assert_eq!(w.next_deadline(), Some(t0() + secs(10.0)));

    w.advance(t0() + secs(9.9));
    assert_eq!(
        w.server("fr-par-1", &s.id).unwrap().status,
        Status::Delivering
    );
    w.advance(t0() + secs(10.0));
    let wire = w.server("fr-par-1", &s.id).unwrap().to_wire();
    assert_eq!(wire.status, "ready");
    assert_eq!(wire.ips[1].address, "127.77.0.10");
    assert_eq!(wire.updated_at, "2026-11-22T10:00:10.000000Z");

    let e = rx.try_recv().unwrap();
    assert_eq!((e.seq, e.kind), (1, EventKind::PowerOn));
    assert_eq!(e.boot_type.as_deref(), Some("normal"));
    assert_eq!(e.address, "127.77.0.10");
    assert_eq!(e.server, wire);
    assert_eq!(e.offer.name, "EM-FAST");
    assert_eq!(e.rescue_ssh_public_keys, Some(vec![]));
    assert_eq!(e.rescue_user, None);
    assert_eq!(w.next_deadline(), None);
}

#[test]
fn rescue_reboot_carries_project_and_extra_keys() {
    let mut w = world();
    let key = add_key(&mut w, t0());
    let s = order(&mut w, "EM-FAST", t0()).unwrap();
    let err = w
        .boot(
            t0(),
            "fr-par-1",
            &s.id,
            Request::Reboot,
            BootType::Rescue,
            vec![],
        )
        .unwrap_err();
    assert_eq!(err, ApiError::not_delivered());
    w.advance(t0() + secs(10.0));
    let (snapshot, mut rx) = w.subscribe();
    assert_eq!(snapshot.len(), 1);

    let now = t0() + secs(60.0);
    let rebooted = w
        .boot(
            now,
            "fr-par-1",
            &s.id,
            Request::Reboot,
            BootType::Rescue,
            vec![key.id.clone()],
        )
        .unwrap();
    assert_eq!(rebooted.status, "stopping");
    assert_eq!(rebooted.boot_type, "rescue");
    let rescue = rebooted.rescue_server.unwrap();
    assert_eq!(rescue.user, "rescue");
    assert_eq!(rescue.password.len(), 16);
    let off = rx.try_recv().unwrap();
    assert_eq!(off.kind, EventKind::PowerOff);
    assert!(
        w.subscribe().0.is_empty(),
        "off servers are not in the snapshot"
    );

    w.advance(now + secs(12.0));
    let on = rx.try_recv().unwrap();
    assert_eq!(on.kind, EventKind::PowerOn);
    assert_eq!(on.boot_type.as_deref(), Some("rescue"));
    assert_eq!(on.rescue_user.as_deref(), Some("rescue"));
    // The project key and the same key named on the call: listed once.
    assert_eq!(
        on.rescue_ssh_public_keys.as_ref().unwrap(),
        &vec![key.public_key.clone()]
    );
    assert_eq!(on.seq, off.seq + 1);
    let history = &w.server("fr-par-1", &s.id).unwrap().boot_history;
    assert_eq!(history.len(), 1);
    assert_eq!(history[0].ssh_key_ids, vec![key.id]);

    let unknown = w.boot(
        now + secs(20.0),
        "fr-par-1",
        &s.id,
        Request::Reboot,
        BootType::Rescue,
        vec!["00000000-0000-4000-8000-000000000000".into()],
    );
    assert_eq!(unknown.unwrap_err().status(), http::StatusCode::BAD_REQUEST);

    let normal = w
        .boot(
            now + secs(30.0),
            "fr-par-1",
            &s.id,
            Request::Reboot,
            BootType::Normal,
            vec![],
        )
        .unwrap();
    assert_eq!(normal.rescue_server, None);
}

/// A normal reboot, of a node and of a server in rescue: `stopping` then
/// `ready`, `updated_at` moved by the call and again by the boot (what a
/// provider compares to learn whether its call landed), and events whose
/// `cause` tells a reboot from a stop and start.
#[test]
fn normal_reboot_moves_updated_at_and_streams_its_cause() {
    let mut w = world();
    let key = add_key(&mut w, t0());
    let (_, mut rx) = w.subscribe();
    let s = order(&mut w, "EM-FAST", t0()).unwrap();
    w.advance(t0() + secs(10.0));
    let delivered = rx.try_recv().unwrap();
    assert_eq!(delivered.cause, Cause::Deliver);
    let before = w.server("fr-par-1", &s.id).unwrap().to_wire();
    assert_eq!(before.updated_at, "2026-11-22T10:00:10.000000Z");

    for (boot_type, keys) in [(BootType::Normal, vec![]), (BootType::Rescue, vec![key.id])] {
        let at = w.server("fr-par-1", &s.id).unwrap().updated_at + secs(60.0);
        let before = w.server("fr-par-1", &s.id).unwrap().to_wire();
        let called = w
            .boot(at, "fr-par-1", &s.id, Request::Reboot, boot_type, keys)
            .unwrap();
        assert_eq!(called.status, "stopping");
        assert_ne!(called.updated_at, before.updated_at, "the call moves it");
        assert_eq!(called.updated_at, format_time(at));
        let off = rx.try_recv().unwrap();
        assert_eq!((off.kind, off.cause), (EventKind::PowerOff, Cause::Reboot));
        assert_eq!(off.server.status, "stopping");
        w.advance(at + secs(12.0));
        let ready = w.server("fr-par-1", &s.id).unwrap().to_wire();
        assert_eq!(ready.status, "ready");
        assert_eq!(ready.updated_at, format_time(at + secs(12.0)));
        let on = rx.try_recv().unwrap();
        assert_eq!((on.kind, on.cause), (EventKind::PowerOn, Cause::Reboot));
        assert_eq!(on.boot_type.as_deref(), Some(boot_type.as_str()));
    }

    // Out of rescue with a normal reboot: the rescue credentials go.
    let at = t0() + secs(300.0);
    let called = w
        .boot(
            at,
            "fr-par-1",
            &s.id,
            Request::Reboot,
            BootType::Normal,
            vec![],
        )
        .unwrap();
    assert_eq!(called.boot_type, "normal");
    assert_eq!(called.rescue_server, None);
    assert_eq!(rx.try_recv().unwrap().cause, Cause::Reboot);
    w.advance(at + secs(12.0));
    let on = rx.try_recv().unwrap();
    assert_eq!(
        (on.kind, on.boot_type.as_deref()),
        (EventKind::PowerOn, Some("normal"))
    );
    assert_eq!(on.rescue_ssh_public_keys, Some(vec![]));

    // Stop, start and delete say so.
    w.stop(t0() + secs(400.0), "fr-par-1", &s.id).unwrap();
    assert_eq!(rx.try_recv().unwrap().cause, Cause::Stop);
    w.advance(t0() + secs(410.0));
    w.boot(
        t0() + secs(410.0),
        "fr-par-1",
        &s.id,
        Request::Start,
        BootType::Normal,
        vec![],
    )
    .unwrap();
    w.advance(t0() + secs(422.0));
    assert_eq!(rx.try_recv().unwrap().cause, Cause::Start);
    w.delete(t0() + secs(430.0), "fr-par-1", &s.id).unwrap();
    w.advance(t0() + secs(440.0));
    let causes: Vec<_> = std::iter::from_fn(|| rx.try_recv().ok())
        .map(|e| (e.kind, e.cause))
        .collect();
    assert_eq!(
        causes,
        vec![
            (EventKind::PowerOff, Cause::Delete),
            (EventKind::Deleted, Cause::Delete)
        ]
    );
}

#[test]
fn delete_frees_address_and_stock_then_404() {
    let mut w = world();
    let s = order(&mut w, "EM-COUNTED", t0()).unwrap();
    assert_eq!(w.offer("fr-par-1", &s.offer_id).unwrap().stock, "empty");
    let again = order(&mut w, "EM-COUNTED", t0()).unwrap_err();
    assert_eq!(again.body().unwrap()["type"], "out_of_stock");
    w.advance(t0() + secs(10.0));
    let (_, mut rx) = w.subscribe();

    let deleting = w.delete(t0() + secs(20.0), "fr-par-1", &s.id).unwrap();
    assert_eq!(deleting.status, "deleting");
    assert_eq!(rx.try_recv().unwrap().kind, EventKind::PowerOff);
    assert!(w.delete(t0() + secs(21.0), "fr-par-1", &s.id).is_err());
    w.advance(t0() + secs(25.0));
    let gone = rx.try_recv().unwrap();
    assert_eq!(gone.kind, EventKind::Deleted);
    assert_eq!(gone.address, "127.77.0.10");
    assert_eq!(
        w.server("fr-par-1", &s.id).unwrap_err(),
        ApiError::server_not_found()
    );
    assert_eq!(w.offer("fr-par-1", &s.offer_id).unwrap().stock, "low");
    let record = w.all_servers()[0];
    assert_eq!(record.deleted_at, Some(t0() + secs(25.0)));
}

#[test]
fn quota_counts_live_servers_of_the_project() {
    let mut w = world();
    order(&mut w, "EM-FAST", t0()).unwrap();
    order(&mut w, "EM-FAST", t0()).unwrap();
    let err = order(&mut w, "EM-FAST", t0()).unwrap_err();
    assert_eq!(
        err,
        ApiError::QuotasExceeded {
            resource: "EM_FAST".into(),
            quota: 2,
            current: 2
        }
    );
    assert!(w.set_quota("EM-FAST", None));
    order(&mut w, "EM-FAST", t0()).unwrap();
}

#[test]
fn stock_can_be_set_by_name() {
    let mut w = world();
    assert_eq!(
        w.set_stock("fr-par-1", "EM-FAST", Stock::Level(StockLevel::Empty)),
        1
    );
    assert_eq!(
        order(&mut w, "EM-FAST", t0()).unwrap_err().status(),
        http::StatusCode::PRECONDITION_FAILED
    );
    assert_eq!(w.set_stock("fr-par-1", "nope", Stock::Count(1)), 0);
}

#[test]
fn same_seed_same_ids_and_reset_replays() {
    let mut a = world();
    let mut b = world();
    let sa = order(&mut a, "EM-FAST", t0()).unwrap();
    let sb = order(&mut b, "EM-FAST", t0()).unwrap();
    assert_eq!(sa.id, sb.id);
    a.advance(t0() + secs(10.0));
    let (_, mut rx) = a.subscribe();
    a.reset(t0() + secs(11.0));
    assert_eq!(rx.try_recv().unwrap().kind, EventKind::PowerOff);
    assert_eq!(rx.try_recv().unwrap().kind, EventKind::Deleted);
    assert!(a.all_servers().is_empty());
    let again = order(&mut a, "EM-FAST", t0()).unwrap();
    assert_eq!(again.id, sa.id);
}

#[test]
fn stop_and_start_cycle() {
    let mut w = world();
    let s = order(&mut w, "EM-FAST", t0()).unwrap();
    w.advance(t0() + secs(10.0));
    let stopping = w.stop(t0() + secs(20.0), "fr-par-1", &s.id).unwrap();
    assert_eq!(stopping.status, "stopping");
    w.advance(t0() + secs(28.0));
    assert_eq!(w.server("fr-par-1", &s.id).unwrap().status, Status::Stopped);
    assert!(w.subscribe().0.is_empty());
    let starting = w
        .boot(
            t0() + secs(30.0),
            "fr-par-1",
            &s.id,
            Request::Start,
            BootType::Normal,
            vec![],
        )
        .unwrap();
    assert_eq!(starting.status, "starting");
    w.advance(t0() + secs(42.0));
    assert_eq!(w.server("fr-par-1", &s.id).unwrap().status, Status::Ready);
    assert_eq!(w.subscribe().0.len(), 1);
}

fn armed(body: serde_json::Value) -> Faults {
    let mut faults = Faults::new(0);
    faults
        .add(
            crate::faults::FaultSpec::from_json(body).unwrap(),
            &[],
            crate::catalog::ZONES,
        )
        .unwrap();
    faults
}

#[test]
fn out_of_stock_after_order_accepts_then_fails_delivery() {
    let mut w = world();
    let (_, mut rx) = w.subscribe();
    let mut faults = armed(
        serde_json::json!({"kind": "out_of_stock_after_order", "offer": "EM-FAST", "count": 1}),
    );
    let s = order_with(&mut w, "EM-FAST", t0(), &mut faults).unwrap();
    assert_eq!(s.status, "delivering");
    assert!(faults.list().is_empty(), "count 1 spent by the order");
    w.advance(t0() + secs(10.0));
    let record = w.server("fr-par-1", &s.id).unwrap();
    assert_eq!(record.status, Status::OutOfStock);
    let wire = record.to_wire();
    assert_eq!(wire.status, "out_of_stock");
    assert!(wire.ips.is_empty());
    assert!(rx.try_recv().is_err(), "never powered on");
    assert_eq!(
        w.boot(
            t0() + secs(11.0),
            "fr-par-1",
            &s.id,
            Request::Reboot,
            BootType::Rescue,
            vec![]
        ),
        Err(ApiError::not_delivered())
    );
    assert_eq!(
        w.delete(t0() + secs(11.0), "fr-par-1", &s.id)
            .unwrap()
            .status,
        "deleting"
    );
    // The next order is not affected.
    let next = order(&mut w, "EM-FAST", t0() + secs(12.0)).unwrap();
    w.advance(t0() + secs(30.0));
    assert_eq!(
        w.server("fr-par-1", &next.id).unwrap().status,
        Status::Ready
    );
}

#[test]
fn stuck_delivery_and_delivery_seconds() {
    let mut w = world();
    let mut faults =
        armed(serde_json::json!({"kind": "stuck_delivery", "zone": "fr-par-1", "count": 1}));
    let stuck = order_with(&mut w, "EM-FAST", t0(), &mut faults).unwrap();
    w.advance(t0() + secs(86_400.0));
    assert_eq!(
        w.server("fr-par-1", &stuck.id).unwrap().status,
        Status::Delivering
    );
    assert_eq!(w.next_deadline(), None);

    let mut faults = armed(serde_json::json!({"kind": "delivery_seconds", "seconds": 100.0}));
    let slow = order_with(&mut w, "EM-FAST", t0(), &mut faults).unwrap();
    w.advance(t0() + secs(99.0));
    assert_eq!(
        w.server("fr-par-1", &slow.id).unwrap().status,
        Status::Delivering
    );
    w.advance(t0() + secs(100.0));
    assert_eq!(
        w.server("fr-par-1", &slow.id).unwrap().status,
        Status::Ready
    );
    assert_eq!(faults.list()[0].fired, 1);
}

/// Seconds from `from` to the server's next transition.
fn pending_after(w: &World, id: &str, from: SimTime) -> f64 {
    let pending = w.server("fr-par-1", id).unwrap().pending.as_ref().unwrap();
    (pending.at - from).as_seconds_f64()
}

fn reboot(w: &mut World, id: &str, now: SimTime, boot_type: BootType) -> f64 {
    w.advance(now);
    w.boot(now, "fr-par-1", id, Request::Reboot, boot_type, vec![])
        .unwrap();
    pending_after(w, id, now)
}

#[test]
fn boots_take_twelve_seconds_unless_the_offer_or_the_timings_say_otherwise() {
    let mut w = world();
    let s = order(&mut w, "EM-FAST", t0()).unwrap();
    assert_eq!(
        reboot(&mut w, &s.id, t0() + secs(10.0), BootType::Rescue),
        12.0
    );
    assert_eq!(
        reboot(&mut w, &s.id, t0() + secs(30.0), BootType::Normal),
        12.0
    );

    let mut catalog = Catalog::parse(&CATALOG.replace(
        "delivery: 10\n    quota",
        "delivery: 10\n    boot: 30\n    quota",
    ))
    .unwrap();
    assert_eq!(catalog.offers[0].boot, Span::Fixed(30.0));
    let mut w = world_with(catalog.clone());
    let s = order(&mut w, "EM-FAST", t0()).unwrap();
    assert_eq!(
        reboot(&mut w, &s.id, t0() + secs(10.0), BootType::Rescue),
        30.0
    );

    // The flag or profile replaces what the offer says.
    catalog.apply(&TimingOverrides {
        boot: Some(Span::Fixed(100.0)),
        ..TimingOverrides::default()
    });
    let mut w = world_with(catalog);
    let s = order(&mut w, "EM-FAST", t0()).unwrap();
    w.advance(t0() + secs(10.0));
    w.stop(t0() + secs(10.0), "fr-par-1", &s.id).unwrap();
    w.advance(t0() + secs(20.0));
    w.boot(
        t0() + secs(20.0),
        "fr-par-1",
        &s.id,
        Request::Start,
        BootType::Normal,
        vec![],
    )
    .unwrap();
    assert_eq!(pending_after(&w, &s.id, t0() + secs(20.0)), 100.0);
}

#[test]
fn real_timings_deliver_in_about_four_minutes_and_boot_in_three_to_five() {
    let run = || {
        let mut catalog = Catalog::parse(CATALOG).unwrap();
        catalog.apply(&Profile::Real.overrides());
        let mut w = world_with(catalog);
        let s = order(&mut w, "EM-FAST", t0()).unwrap();
        let delivery = pending_after(&w, &s.id, t0());
        let ready = t0() + secs(delivery);
        let rescue = reboot(&mut w, &s.id, ready, BootType::Rescue);
        let back = reboot(&mut w, &s.id, ready + secs(rescue + 60.0), BootType::Normal);
        let boots = w.server("fr-par-1", &s.id).unwrap().boot_history.len();
        (s.id, delivery, rescue, back, boots)
    };
    let (id, delivery, rescue, back, boots) = run();
    assert!((225.0..=287.0).contains(&delivery), "delivery {delivery} s");
    for s in [rescue, back] {
        assert!((180.0..=300.0).contains(&s), "boot {s} s");
    }
    assert_ne!(rescue, back, "each boot draws its own time");
    assert_eq!(boots, 2);
    assert_eq!(run(), (id, delivery, rescue, back, boots), "a seed replays");
}
