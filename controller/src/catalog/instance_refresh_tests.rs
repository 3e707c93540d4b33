use super::*;

use crate::scaleway::instance::fake::{FakeInstance, Op, recorded_availability, recorded_types};

fn fake_with(zones: &[&str]) -> FakeInstance {
    let fake = FakeInstance::new();
    for zone in zones {
        fake.set_types(zone, recorded_types());
        fake.set_availability(zone, recorded_availability());
    }
    fake
}

fn zones(names: &[&str]) -> Vec<String> {
    names.iter().map(|z| z.to_string()).collect()
}

#[tokio::test]
async fn every_zone_becomes_the_instance_kinds_types() {
    let fake = fake_with(&["fr-par-2", "nl-ams-1"]);
    let store = CatalogStore::new(Duration::from_secs(60));
    assert!(!store.snapshot().is_loaded_for(ClassKind::Instance));
    let mut state = InstanceRefreshState::default();
    let ok =
        refresh_instances_once(&store, &fake, &zones(&["fr-par-2", "nl-ams-1"]), &mut state).await;
    assert!(ok);
    let s = store.snapshot();
    assert!(s.is_loaded_for(ClassKind::Instance));
    assert!(
        !s.is_loaded_for(ClassKind::ElasticMetal),
        "the Elastic Metal catalog has its own read time"
    );
    let types = s.default_for(ClassKind::Instance);
    let pop2 = types.iter().find(|t| t.name == "POP2-2C-8G").unwrap();
    let zones_of: Vec<&str> = pop2.offerings.iter().map(|o| o.zone.as_str()).collect();
    assert_eq!(zones_of, ["fr-par-2", "nl-ams-1"]);
    assert_eq!(
        pop2.capacity.ephemeral_storage_bytes, DEFAULT_ROOT_BYTES,
        "the kind's default catalog assumes the default root volume"
    );
    assert!(
        s.default.is_empty(),
        "Instance types never reach the Elastic Metal catalog"
    );
}

#[tokio::test]
async fn a_failing_zone_keeps_its_last_good_types_and_fails_the_refresh() {
    let fake = fake_with(&["fr-par-2", "nl-ams-1"]);
    let store = CatalogStore::new(Duration::from_secs(60));
    let mut state = InstanceRefreshState::default();
    let all = zones(&["fr-par-2", "nl-ams-1"]);
    assert!(refresh_instances_once(&store, &fake, &all, &mut state).await);
    let before = store.snapshot().default_for(ClassKind::Instance);

    fake.fail_next(Op::ListAvailability, ApiError::Unavailable("502".into()));
    assert!(!refresh_instances_once(&store, &fake, &all, &mut state).await);
    assert_eq!(store.snapshot().default_for(ClassKind::Instance), before);
}

#[tokio::test]
async fn nothing_is_published_before_a_first_zone_answers() {
    let fake = fake_with(&["fr-par-2"]);
    let store = CatalogStore::new(Duration::from_secs(60));
    let mut state = InstanceRefreshState::default();
    fake.fail_next(Op::ListServerTypes, ApiError::Timeout("read".into()));
    assert!(!refresh_instances_once(&store, &fake, &zones(&["fr-par-2"]), &mut state).await);
    assert!(!store.snapshot().is_loaded_for(ClassKind::Instance));
    assert!(refresh_instances_once(&store, &fake, &zones(&["fr-par-2"]), &mut state).await);
    assert!(store.snapshot().is_loaded_for(ClassKind::Instance));
}
