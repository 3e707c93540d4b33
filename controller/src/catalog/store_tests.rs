use super::*;
use std::collections::BTreeSet;

use crate::scaleway::ApiError;
use crate::scaleway::fake::{FakeElasticMetal, Op, sample_monthly_offers, sample_offers};

fn offers(zone: &str) -> Vec<Offer> {
    let mut all = sample_offers(zone);
    all.extend(sample_monthly_offers(zone));
    all
}

fn base() -> Vec<InstanceType> {
    let by_zone = BTreeMap::from([
        ("fr-par-2".to_string(), offers("fr-par-2")),
        ("nl-ams-1".to_string(), offers("nl-ams-1")),
    ]);
    instance_types(&by_zone).0
}

fn offering(
    s: &Snapshot,
    class: Option<&str>,
    name: &str,
    zone: &str,
) -> Option<super::super::Offering> {
    s.for_class(ClassKind::ElasticMetal, class)
        .iter()
        .find(|t| t.name == name)?
        .offerings
        .iter()
        .find(|o| o.zone == zone)
        .cloned()
}

fn offering_available(s: &Snapshot, class: Option<&str>, name: &str, zone: &str) -> Option<bool> {
    offering(s, class, name, zone).map(|o| o.available)
}

#[test]
fn revisions_move_only_on_change() {
    let store = CatalogStore::new(Duration::from_secs(1800));
    let rx = store.subscribe();
    assert!(!store.snapshot().is_loaded());
    store.set_base(base());
    let s1 = store.snapshot();
    assert!(s1.is_loaded());
    assert_eq!(s1.revision, 1);
    assert!(rx.has_changed().unwrap());
    store.set_base(base());
    assert_eq!(store.snapshot().revision, 1, "same offers: no new revision");
}

#[test]
fn unavailable_offerings_expire() {
    let store = CatalogStore::new(Duration::from_secs(60));
    store.set_base(base());
    let t0 = Instant::now();
    let rev = store.mark_unavailable_at("EM-A115X-SSD", "fr-par-2", Unavailability::OutOfStock, t0);
    let s = store.snapshot();
    assert_eq!(s.revision, 2);
    assert_eq!(rev, 2, "the revision holding the mark is returned");
    let o = offering(&s, None, "EM-A115X-SSD", "fr-par-2").unwrap();
    assert!(!o.available);
    let why = o.unavailable_reason.unwrap();
    assert!(
        why.starts_with("order refused (out of stock) until "),
        "{why}"
    );
    assert_eq!(
        offering_available(&s, None, "EM-A115X-SSD", "nl-ams-1"),
        Some(true)
    );
    // Still listed: the type stays in the catalog.
    store.expire_at(t0 + Duration::from_secs(30));
    assert_eq!(store.snapshot().revision, 2);
    store.expire_at(t0 + Duration::from_secs(61));
    let s = store.snapshot();
    assert_eq!(s.revision, 3);
    assert_eq!(
        offering_available(&s, None, "EM-A115X-SSD", "fr-par-2"),
        Some(true)
    );
}

#[test]
fn node_class_views_restrict_zones() {
    let store = CatalogStore::new(Duration::from_secs(60));
    store.set_base(base());
    store.set_node_classes(
        ClassKind::ElasticMetal,
        BTreeMap::from([
            ("par".to_string(), vec!["fr-par-2".to_string()]),
            ("all".to_string(), vec![]),
        ]),
    );
    let s = store.snapshot();
    assert_eq!(
        offering_available(&s, Some("par"), "EM-A115X-SSD", "nl-ams-1"),
        None
    );
    assert_eq!(
        offering_available(&s, Some("par"), "EM-A115X-SSD", "fr-par-2"),
        Some(true)
    );
    assert_eq!(
        s.for_class(ClassKind::ElasticMetal, Some("all")).len(),
        s.default.len()
    );
    assert_eq!(
        s.for_class(ClassKind::ElasticMetal, Some("unknown")).len(),
        s.default.len()
    );
    let zones = s.for_class(ClassKind::ElasticMetal, Some("par"))[0].zones();
    assert_eq!(zones.into_iter().collect::<Vec<_>>(), vec!["fr-par-2"]);
}

#[test]
fn monthly_classes_see_amortised_prices_and_the_twin() {
    let store = CatalogStore::new(Duration::from_secs(60));
    store.set_base(base());
    store.set_node_classes(
        ClassKind::ElasticMetal,
        BTreeMap::from([
            ("hourly".to_string(), ClassView::from(vec![])),
            (
                "monthly".to_string(),
                ClassView::from((vec!["fr-par-2".to_string()], Billing::Monthly)),
            ),
        ]),
    );
    let s = store.snapshot();
    let h = offering(&s, Some("hourly"), "EM-A115X-SSD", "fr-par-2").unwrap();
    assert_eq!(h.price, 0.091);
    assert_eq!(h.order_offer_id(Billing::Hourly), Some("fr-par-2-a115x"));
    let m = offering(&s, Some("monthly"), "EM-A115X-SSD", "fr-par-2").unwrap();
    assert!((m.price - 32.99 / 730.0).abs() < 1e-12, "{}", m.price);
    assert!(m.available);
    assert_eq!(m.billing, Billing::Monthly);
    assert_eq!(
        m.order_offer_id(Billing::Monthly),
        Some("fr-par-2-a115x-monthly")
    );
    // Monthly is cheaper per hour here, as on Scaleway's price list.
    assert!(m.price < h.price);
    // The marks of the order path apply whatever the billing.
    store.mark_unavailable("EM-A115X-SSD", "fr-par-2");
    let s = store.snapshot();
    assert_eq!(
        offering_available(&s, Some("monthly"), "EM-A115X-SSD", "fr-par-2"),
        Some(false)
    );
}

#[test]
fn observed_allocatable_lowers_the_promise_of_that_offer() {
    let store = CatalogStore::new(Duration::from_secs(60));
    store.set_base(base());
    let before = store.snapshot();
    let it = before
        .default
        .iter()
        .find(|t| t.name == "EM-A115X-SSD")
        .unwrap();
    let predicted = it.allocatable();
    let mut seen = predicted;
    seen.memory_bytes -= 1 << 30;
    store.observe_allocatable("EM-A115X-SSD", seen);
    // A second Node reporting more does not raise it back.
    store.observe_allocatable("EM-A115X-SSD", predicted);
    let after = store.snapshot();
    assert_eq!(after.revision, before.revision + 1);
    let it = after
        .default
        .iter()
        .find(|t| t.name == "EM-A115X-SSD")
        .unwrap();
    assert_eq!(
        it.allocatable().memory_bytes,
        predicted.memory_bytes - (1 << 30)
    );
    assert_eq!(
        it.capacity.memory_bytes,
        32 << 30,
        "capacity is the hardware"
    );
    let other = after
        .default
        .iter()
        .find(|t| t.name == "EM-I215E-NVME")
        .unwrap();
    let other_before = before
        .default
        .iter()
        .find(|t| t.name == "EM-I215E-NVME")
        .unwrap();
    assert_eq!(other.allocatable(), other_before.allocatable());
}

/// The refresher brings an offering back the moment its TTL runs out,
/// not at some later tick: a restocked offer is chosen again as soon as
/// the operator was told it would be.
#[tokio::test(start_paused = true)]
async fn an_unavailable_offering_comes_back_exactly_when_its_ttl_runs_out() {
    let store = CatalogStore::new(Duration::from_secs(60));
    let api = Arc::new(crate::scaleway::fake::FakeElasticMetal::new());
    api.set_offers("fr-par-2", offers("fr-par-2"));
    let refresher = tokio::spawn(run_refresher(
        store.clone(),
        api,
        vec!["fr-par-2".into()],
        Duration::from_secs(3600),
    ));
    let mut rx = store.subscribe();
    rx.wait_for(|s| s.is_loaded()).await.unwrap();

    tokio::time::sleep(Duration::from_secs(7)).await;
    store.mark_unavailable("EM-A115X-SSD", "fr-par-2");
    let available = || offering_available(&store.snapshot(), None, "EM-A115X-SSD", "fr-par-2");
    assert_eq!(available(), Some(false));
    tokio::time::sleep(Duration::from_millis(59_990)).await;
    assert_eq!(available(), Some(false), "10 ms before the TTL runs out");
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert_eq!(available(), Some(true), "10 ms after");

    // A second mark after a quiet period is scheduled too.
    tokio::time::sleep(Duration::from_secs(600)).await;
    store.mark_unavailable("EM-A115X-SSD", "fr-par-2");
    tokio::time::sleep(Duration::from_millis(60_010)).await;
    assert_eq!(available(), Some(true));
    refresher.abort();
}

#[tokio::test]
async fn concurrent_orders_for_one_offering_take_turns() {
    let store = CatalogStore::new(Duration::from_secs(60));
    store.set_base(base());
    let first = store
        .order_slot("EM-A115X-SSD", "fr-par-2", Duration::from_secs(5))
        .await
        .expect("free slot");
    // Another offering is not held up.
    assert!(
        store
            .order_slot("EM-A115X-SSD", "nl-ams-1", Duration::from_millis(10))
            .await
            .is_some()
    );
    // The same offering waits for the order in flight; a bounded wait
    // gives up and lets the caller order anyway.
    assert!(
        store
            .order_slot("EM-A115X-SSD", "fr-par-2", Duration::from_millis(20))
            .await
            .is_none()
    );
    let waiter = {
        let store = store.clone();
        tokio::spawn(async move {
            let slot = store
                .order_slot("EM-A115X-SSD", "fr-par-2", Duration::from_secs(5))
                .await;
            (slot.is_some(), store.refusal("EM-A115X-SSD", "fr-par-2"))
        })
    };
    tokio::time::sleep(Duration::from_millis(20)).await;
    store.mark_unavailable_for("EM-A115X-SSD", "fr-par-2", Unavailability::OutOfStock);
    drop(first);
    let (got_slot, refusal) = waiter.await.unwrap();
    assert!(got_slot);
    assert_eq!(
        refusal.as_deref(),
        Some("out of stock"),
        "the waiter sees the refusal"
    );
    assert_eq!(store.refusal("EM-A115X-SSD", "nl-ams-1"), None);
}

#[tokio::test]
async fn refresh_keeps_last_good_zone_on_failure() {
    let store = CatalogStore::new(Duration::from_secs(60));
    let api = FakeElasticMetal::new();
    api.set_offers("fr-par-2", offers("fr-par-2"));
    api.set_offers("nl-ams-1", offers("nl-ams-1"));
    let zones = vec!["fr-par-2".to_string(), "nl-ams-1".to_string()];
    let mut state = RefreshState::default();
    assert!(refresh_once(&store, &api, &zones, &mut state).await);
    assert_eq!(
        state.logged_exclusions.len(),
        1,
        "the RISC-V offer is logged once"
    );
    let before = store.snapshot();
    let monthly = before.default[0].offerings[0].monthly.clone();
    assert!(monthly.is_some(), "monthly twins were read");

    api.fail_next(Op::ListOffers, ApiError::Unavailable("503".into()));
    api.set_offers("nl-ams-1", vec![]);
    assert!(!refresh_once(&store, &api, &zones, &mut state).await);
    let after = store.snapshot();
    // fr-par-2 failed and kept its offers; nl-ams-1 answered with none.
    assert!(
        after
            .default
            .iter()
            .all(|t| t.zones().into_iter().eq(["fr-par-2".to_string()]))
    );
    assert_eq!(after.default.len(), before.default.len());
    assert!(after.revision > before.revision);
    // The age is that of the oldest offers served (fr-par-2's).
    assert_eq!(after.refreshed_at, before.refreshed_at);
    assert_eq!(state.logged_exclusions.len(), 1);
}

/// Instance types (Scaleway VMs) as recorded in fr-par-2, sold in nl-ams-1 too.
fn vm_types() -> Vec<InstanceType> {
    use crate::catalog::{ZoneProducts, vm_instance_types};
    use crate::scaleway::instance::fake::{recorded_availability, recorded_types};
    let zone = |availability| ZoneProducts {
        types: recorded_types(),
        availability,
    };
    let by_zone = BTreeMap::from([
        ("fr-par-2".to_string(), zone(recorded_availability())),
        ("nl-ams-1".to_string(), zone(BTreeMap::new())),
    ]);
    vm_instance_types(&by_zone, 20_000_000_000).0
}

fn names(types: &[InstanceType]) -> Vec<String> {
    types.iter().map(|t| t.name.clone()).collect()
}

fn only_em(types: &[InstanceType]) -> bool {
    !types.is_empty() && types.iter().all(|t| t.name.starts_with("EM-"))
}

fn no_em(types: &[InstanceType]) -> bool {
    !types.is_empty() && types.iter().all(|t| !t.name.starts_with("EM-"))
}

fn zones_of(types: &[InstanceType]) -> BTreeSet<String> {
    types.iter().flat_map(|t| t.zones()).collect()
}

#[test]
fn one_name_in_both_kinds_gets_each_kinds_types() {
    let store = CatalogStore::new(Duration::from_secs(60));
    store.set_base(base());
    store.set_kind_types(ClassKind::Instance, vm_types());
    let par = || BTreeMap::from([("default".to_string(), vec!["fr-par-2".to_string()])]);
    let ams = || BTreeMap::from([("default".to_string(), vec!["nl-ams-1".to_string()])]);
    store.set_node_classes(ClassKind::ElasticMetal, par());
    store.set_node_classes(ClassKind::Instance, ams());
    let s = store.snapshot();
    let em = s.for_class(ClassKind::ElasticMetal, Some("default"));
    let vm = s.for_class(ClassKind::Instance, Some("default"));
    assert!(only_em(&em), "{:?}", names(&em));
    assert_eq!(zones_of(&em), BTreeSet::from(["fr-par-2".to_string()]));
    assert!(no_em(&vm), "{:?}", names(&vm));
    assert!(names(&vm).contains(&"POP2-2C-8G".to_string()));
    assert_eq!(zones_of(&vm), BTreeSet::from(["nl-ams-1".to_string()]));

    // Each kind's reconciler sets its own classes; the other kind's stay.
    let rev = s.revision;
    store.set_node_classes(ClassKind::ElasticMetal, par());
    assert_eq!(
        store.snapshot().revision,
        rev,
        "same classes: no new revision"
    );
    store.set_node_classes(ClassKind::Instance, BTreeMap::<String, Vec<String>>::new());
    let s = store.snapshot();
    assert_eq!(s.revision, rev + 1);
    assert_eq!(s.for_class(ClassKind::ElasticMetal, Some("default")), em);
    let vm = s.for_class(ClassKind::Instance, Some("default"));
    assert_eq!(
        vm,
        s.default_for(ClassKind::Instance),
        "unlisted: the Instance default"
    );
    assert_eq!(zones_of(&vm).len(), 2);
}

#[test]
fn an_instance_nodepool_of_an_unlisted_class_never_gets_elastic_metal_types() {
    let store = CatalogStore::new(Duration::from_secs(60));
    store.set_base(base());
    store.set_node_classes(
        ClassKind::Instance,
        BTreeMap::from([("vms".to_string(), vec!["fr-par-2".to_string()])]),
    );
    // Before the Instance types are read: empty, not the Elastic Metal default.
    let s = store.snapshot();
    assert!(
        s.for_class(ClassKind::Instance, Some("unlisted"))
            .is_empty()
    );
    assert!(s.for_class(ClassKind::Instance, None).is_empty());
    assert!(s.for_class(ClassKind::Instance, Some("vms")).is_empty());

    let rev = s.revision;
    store.set_kind_types(ClassKind::Instance, vm_types());
    let s = store.snapshot();
    assert_eq!(s.revision, rev + 1);
    let default = s.default_for(ClassKind::Instance);
    assert!(no_em(&default), "{:?}", names(&default));
    assert_eq!(s.for_class(ClassKind::Instance, Some("unlisted")), default);
    assert_eq!(s.for_class(ClassKind::Instance, None), default);
    let vms = s.for_class(ClassKind::Instance, Some("vms"));
    assert!(no_em(&vms));
    assert_eq!(zones_of(&vms), BTreeSet::from(["fr-par-2".to_string()]));
    // The marks of the order path apply to Instance offerings too.
    store.mark_unavailable("POP2-2C-8G", "fr-par-2");
    let s = store.snapshot();
    let pop2 = s.for_class(ClassKind::Instance, Some("vms"));
    let pop2 = pop2.iter().find(|t| t.name == "POP2-2C-8G").unwrap();
    assert!(!pop2.offerings[0].available);

    store.set_kind_types(ClassKind::Instance, vm_types());
    assert_eq!(
        store.snapshot().revision,
        s.revision,
        "same types: no new revision"
    );
}

#[test]
fn an_elastic_metal_nodepool_is_unchanged_by_the_instance_kind() {
    let store = CatalogStore::new(Duration::from_secs(60));
    store.set_base(base());
    store.set_node_classes(
        ClassKind::ElasticMetal,
        BTreeMap::from([("par".to_string(), vec!["fr-par-2".to_string()])]),
    );
    let before = store.snapshot();
    store.set_kind_types(ClassKind::Instance, vm_types());
    store.set_node_classes(
        ClassKind::Instance,
        BTreeMap::from([("par".to_string(), vec!["nl-ams-1".to_string()])]),
    );
    let after = store.snapshot();
    assert!(after.revision > before.revision);
    assert!(only_em(&after.default));
    assert_eq!(after.default, before.default);
    assert_eq!(after.default_for(ClassKind::ElasticMetal), before.default);
    for class in [Some("par"), Some("unknown"), None] {
        assert_eq!(
            after.for_class(ClassKind::ElasticMetal, class),
            before.for_class(ClassKind::ElasticMetal, class),
            "{class:?}"
        );
    }
    // A nodeClassRef naming no kind, or a kind we do not serve, is Elastic Metal.
    for kind in [None, Some(""), Some("SomeOtherNodeClass")] {
        assert_eq!(
            after.for_class(ClassKind::of(kind), Some("par")),
            before.for_class(ClassKind::ElasticMetal, Some("par")),
            "{kind:?}"
        );
    }
}

#[test]
fn an_instance_class_sees_only_pairs_with_an_image_and_its_root_volume() {
    let store = CatalogStore::new(Duration::from_secs(60));
    store.set_kind_types(ClassKind::Instance, vm_types());
    // An amd64 image in fr-par-2 only, and a 50 GB root volume.
    let view = ClassView {
        images: Some(BTreeSet::from([(
            "fr-par-2".to_string(),
            "amd64".to_string(),
        )])),
        ephemeral_storage_bytes: Some(50_000_000_000),
        ..ClassView::default()
    };
    // The recorded types are all amd64: an arm64-only image offers nothing.
    let arm_only = ClassView {
        images: Some(BTreeSet::from([(
            "fr-par-2".to_string(),
            "arm64".to_string(),
        )])),
        ..ClassView::default()
    };
    store.set_node_classes(
        ClassKind::Instance,
        BTreeMap::from([("vms".to_string(), view), ("arm".to_string(), arm_only)]),
    );
    let s = store.snapshot();
    let vm = s.for_class(ClassKind::Instance, Some("vms"));
    assert!(!vm.is_empty());
    assert_eq!(zones_of(&vm), BTreeSet::from(["fr-par-2".to_string()]));
    assert!(s.for_class(ClassKind::Instance, Some("arm")).is_empty());
    let default = s.default_for(ClassKind::Instance);
    assert_eq!(
        zones_of(&default),
        BTreeSet::from(["fr-par-2".to_string(), "nl-ams-1".to_string()])
    );
    let pop2 = vm.iter().find(|t| t.name == "POP2-2C-8G").unwrap();
    assert_eq!(pop2.capacity.ephemeral_storage_bytes, 50_000_000_000);
    let pop2_default = default.iter().find(|t| t.name == "POP2-2C-8G").unwrap();
    assert_eq!(
        pop2_default.capacity.ephemeral_storage_bytes,
        20_000_000_000
    );
    // The overhead follows the larger disk (eviction thresholds are a share of it).
    assert_eq!(pop2.overhead, Overhead::estimate(&pop2.capacity));
}

fn reserved(s: &Snapshot, class: &str, name: &str) -> Vec<super::super::Offering> {
    s.for_class(ClassKind::ElasticMetal, Some(class))
        .iter()
        .find(|t| t.name == name)
        .map(|t| {
            t.offerings
                .iter()
                .filter(|o| o.reservation.is_some())
                .cloned()
                .collect()
        })
        .unwrap_or_default()
}

#[test]
fn standby_pools_are_reserved_offerings_of_their_class_only() {
    let store = CatalogStore::new(Duration::from_secs(60));
    store.set_base(base());
    store.set_node_classes(
        ClassKind::ElasticMetal,
        BTreeMap::from([
            ("warm".to_string(), ClassView::default()),
            ("cold".to_string(), ClassView::default()),
        ]),
    );
    let before = store.snapshot().revision;
    let id = super::super::reservation_id("warm", "EM-A115X-SSD", "fr-par-2");
    assert_eq!(id, "warm.em-a115x-ssd.fr-par-2");
    store.set_reservations(
        "warm",
        vec![ReservedPool {
            offer: "EM-A115X-SSD".into(),
            zone: "fr-par-2".into(),
            id: id.clone(),
            idle: 2,
        }],
    );
    let s = store.snapshot();
    assert_eq!(s.revision, before + 1, "a new pool is a new catalog");
    let on_demand = offering(&s, Some("warm"), "EM-A115X-SSD", "fr-par-2").unwrap();
    let r = reserved(&s, "warm", "EM-A115X-SSD");
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].zone, "fr-par-2");
    assert!(r[0].available);
    assert_eq!(
        r[0].reservation,
        Some(super::super::OfferingReservation {
            id: id.clone(),
            capacity: 2
        })
    );
    assert!((r[0].price - on_demand.price / 10_000_000.0).abs() < 1e-15);
    assert!(r[0].price > 0.0, "a price of 0 would stop consolidation");
    let reqs = r[0].requirements();
    assert!(reqs.contains(&super::super::Requirement::is_in(
        "karpenter.sh/capacity-type",
        ["reserved".to_string()]
    )));
    assert!(reqs.contains(&super::super::Requirement::is_in(
        "karpenter.scaleway.com/reservation-id",
        [id.clone()]
    )));
    // The type now admits both capacity types.
    let it = s
        .for_class(ClassKind::ElasticMetal, Some("warm"))
        .iter()
        .find(|t| t.name == "EM-A115X-SSD")
        .cloned()
        .unwrap();
    let type_reqs = it.requirements();
    let ct = type_reqs
        .iter()
        .find(|r| r.key == "karpenter.sh/capacity-type")
        .unwrap();
    assert_eq!(
        ct.values,
        vec!["on-demand".to_string(), "reserved".to_string()]
    );
    assert!(
        type_reqs
            .iter()
            .all(|r| r.key != "karpenter.scaleway.com/reservation-id"),
        "the reservation id is the offerings' to say"
    );
    // The on-demand offering says it has no reservation.
    assert!(
        on_demand
            .requirements()
            .iter()
            .any(|r| r.key == "karpenter.scaleway.com/reservation-id"
                && r.operator == super::super::Operator::DoesNotExist)
    );
    // Other classes and the default catalog are untouched.
    assert!(reserved(&s, "cold", "EM-A115X-SSD").is_empty());
    assert!(
        s.default
            .iter()
            .all(|t| t.offerings.iter().all(|o| o.reservation.is_none()))
    );

    // The last idle server taken: still listed, unavailable, capacity 0.
    store.set_reservations(
        "warm",
        vec![ReservedPool {
            offer: "EM-A115X-SSD".into(),
            zone: "fr-par-2".into(),
            id: id.clone(),
            idle: 0,
        }],
    );
    let s = store.snapshot();
    assert_eq!(s.revision, before + 2);
    let r = reserved(&s, "warm", "EM-A115X-SSD");
    assert_eq!(r.len(), 1);
    assert!(!r[0].available);
    assert_eq!(r[0].reservation.as_ref().unwrap().capacity, 0);
    // The same pools again: no new revision.
    store.set_reservations(
        "warm",
        vec![ReservedPool {
            offer: "EM-A115X-SSD".into(),
            zone: "fr-par-2".into(),
            id,
            idle: 0,
        }],
    );
    assert_eq!(store.snapshot().revision, before + 2);
    // A refused order of the offer leaves the reservation available: its
    // servers exist already.
    store.set_reservations(
        "warm",
        vec![ReservedPool {
            offer: "EM-A115X-SSD".into(),
            zone: "fr-par-2".into(),
            id: "warm.em-a115x-ssd.fr-par-2".into(),
            idle: 1,
        }],
    );
    store.mark_unavailable("EM-A115X-SSD", "fr-par-2");
    let s = store.snapshot();
    assert_eq!(
        offering_available(&s, Some("warm"), "EM-A115X-SSD", "fr-par-2"),
        Some(false)
    );
    assert!(reserved(&s, "warm", "EM-A115X-SSD")[0].available);
    store.set_reservations("warm", vec![]);
    assert!(reserved(&store.snapshot(), "warm", "EM-A115X-SSD").is_empty());
}

#[test]
fn pools_outside_the_view_add_nothing() {
    let store = CatalogStore::new(Duration::from_secs(60));
    store.set_base(base());
    store.set_node_classes(
        ClassKind::ElasticMetal,
        BTreeMap::from([("warm".to_string(), vec!["nl-ams-1".to_string()])]),
    );
    store.set_reservations(
        "warm",
        vec![
            ReservedPool {
                offer: "EM-A115X-SSD".into(),
                zone: "fr-par-2".into(),
                id: "a".into(),
                idle: 1,
            },
            ReservedPool {
                offer: "EM-NOPE".into(),
                zone: "nl-ams-1".into(),
                id: "b".into(),
                idle: 1,
            },
        ],
    );
    let s = store.snapshot();
    assert!(
        s.for_class(ClassKind::ElasticMetal, Some("warm"))
            .iter()
            .all(|t| t.offerings.iter().all(|o| o.reservation.is_none()))
    );
}

#[test]
fn long_reservation_ids_are_hashed_to_a_label_value() {
    let class = "a".repeat(60);
    let id = super::super::reservation_id(&class, "EM-A115X-SSD", "fr-par-2");
    assert!(id.starts_with("standby-"), "{id}");
    assert_eq!(id.len(), "standby-".len() + 16);
    assert_ne!(
        id,
        super::super::reservation_id(&class, "EM-A115X-SSD", "fr-par-1")
    );
}

/// The sample offers with the `private_network` option: 0.02 €/h on the
/// hourly A115X, 10 €/month on its monthly twin; included on the I215E.
fn offers_with_network_option(zone: &str) -> Vec<Offer> {
    use crate::scaleway::{Money, OfferOption, PrivateNetworkOption};
    let option = |price: f64, period: &str, enabled: bool| OfferOption {
        id: "opt-pn".into(),
        name: "Private Network".into(),
        enabled,
        subscription_period: period.into(),
        price: Some(Money {
            currency_code: "EUR".into(),
            units: price.trunc() as i64,
            nanos: ((price.fract() * 1e9).round()) as i32,
        }),
        manageable: true,
        private_network: Some(PrivateNetworkOption {
            bandwidth_in_bps: 1_000_000_000,
        }),
    };
    let mut all = offers(zone);
    for o in &mut all {
        o.options = match (o.name.as_str(), o.is_monthly()) {
            ("EM-A115X-SSD", false) => vec![option(0.02, "hourly", false)],
            ("EM-A115X-SSD", true) => vec![option(10.0, "monthly", false)],
            ("EM-I215E-NVME", _) => vec![option(0.05, "hourly", true)],
            _ => vec![],
        };
    }
    all
}

#[test]
fn a_class_with_a_private_network_pays_the_option_where_the_offer_sells_it() {
    let store = CatalogStore::new(Duration::from_secs(60));
    let by_zone = BTreeMap::from([(
        "fr-par-2".to_string(),
        offers_with_network_option("fr-par-2"),
    )]);
    store.set_base(instance_types(&by_zone).0);
    let networked = |zones: Vec<String>, billing| ClassView {
        private_network: true,
        ..ClassView::from((zones, billing))
    };
    store.set_node_classes(
        ClassKind::ElasticMetal,
        BTreeMap::from([
            ("plain".to_string(), ClassView::from(vec![])),
            ("pn".to_string(), networked(vec![], Billing::Hourly)),
            (
                "pn-monthly".to_string(),
                networked(vec![], Billing::Monthly),
            ),
        ]),
    );
    let s = store.snapshot();
    let price =
        |class: &str, name: &str| offering(&s, Some(class), name, "fr-par-2").unwrap().price;
    assert_eq!(price("plain", "EM-A115X-SSD"), 0.091);
    assert!(
        (price("pn", "EM-A115X-SSD") - 0.111).abs() < 1e-12,
        "{}",
        price("pn", "EM-A115X-SSD")
    );
    let monthly = price("pn-monthly", "EM-A115X-SSD");
    assert!(
        (monthly - (32.99 + 10.0) / 730.0).abs() < 1e-12,
        "{monthly}"
    );
    // Included in the offer: nothing added.
    assert_eq!(
        price("pn", "EM-I215E-NVME"),
        price("plain", "EM-I215E-NVME")
    );
}
