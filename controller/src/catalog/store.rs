//! The in-memory catalog: last good offers, the unavailable-offerings cache and
//! the per-NodeClass views, published through a `tokio::sync::watch` channel so
//! that `GetInstanceTypes` reads without waiting and `WatchInstanceTypes` sends
//! one snapshot per change.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use futures::future::join_all;
use tokio::sync::watch;
use tracing::{info, warn};

use super::{InstanceType, instance_types};
use crate::scaleway::{ElasticMetal, Offer};

/// One published catalog.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Increases with every change of content.
    pub revision: u64,
    /// Every configured zone: for NodePools whose NodeClass is not known yet.
    pub default: Arc<Vec<InstanceType>>,
    /// Per NodeClass: only the zones the NodeClass allows.
    pub per_class: BTreeMap<String, Arc<Vec<InstanceType>>>,
    /// Time of the last successful refresh; `None` until offers were read once.
    pub refreshed_at: Option<SystemTime>,
}

impl Snapshot {
    pub fn is_loaded(&self) -> bool {
        self.refreshed_at.is_some()
    }

    /// The catalog a NodePool using `node_class` sees.
    pub fn for_class(&self, node_class: Option<&str>) -> Arc<Vec<InstanceType>> {
        node_class
            .and_then(|n| self.per_class.get(n))
            .unwrap_or(&self.default)
            .clone()
    }

    fn same_content(&self, other: &Snapshot) -> bool {
        self.default == other.default && self.per_class == other.per_class
    }
}

#[derive(Default)]
struct Inputs {
    base: Vec<InstanceType>,
    refreshed_at: Option<SystemTime>,
    /// (offer name, zone) → until when the offering counts as unavailable.
    unavailable: HashMap<(String, String), Instant>,
    /// NodeClass name → its zones (empty = every configured zone).
    classes: BTreeMap<String, Vec<String>>,
}

pub struct CatalogStore {
    inputs: Mutex<Inputs>,
    tx: watch::Sender<Arc<Snapshot>>,
    unavailable_ttl: Duration,
}

impl CatalogStore {
    /// `unavailable_ttl`: how long an offering that failed an order for lack
    /// of stock or quota stays unavailable. Bare-metal stock moves slowly, so
    /// this is long (tens of minutes), unlike the 3 minutes cloud VMs use.
    pub fn new(unavailable_ttl: Duration) -> Arc<Self> {
        let (tx, _) = watch::channel(Arc::new(Snapshot::default()));
        Arc::new(CatalogStore {
            inputs: Mutex::new(Inputs::default()),
            tx,
            unavailable_ttl,
        })
    }

    pub fn subscribe(&self) -> watch::Receiver<Arc<Snapshot>> {
        self.tx.subscribe()
    }

    pub fn snapshot(&self) -> Arc<Snapshot> {
        self.tx.borrow().clone()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inputs> {
        self.inputs.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A successful refresh.
    pub fn set_base(&self, types: Vec<InstanceType>) {
        let mut inputs = self.lock();
        inputs.base = types;
        inputs.refreshed_at = Some(SystemTime::now());
        self.publish(&inputs, Instant::now());
    }

    /// The NodeClasses and their zones (the full set: absent names are dropped).
    pub fn set_node_classes(&self, classes: BTreeMap<String, Vec<String>>) {
        let mut inputs = self.lock();
        if inputs.classes != classes {
            inputs.classes = classes;
            self.publish(&inputs, Instant::now());
        }
    }

    /// An order of `offer` in `zone` failed for lack of capacity: the offering
    /// is unavailable until the TTL passes, so that Karpenter stops choosing it.
    pub fn mark_unavailable(&self, offer: &str, zone: &str) {
        self.mark_unavailable_at(offer, zone, Instant::now());
    }

    fn mark_unavailable_at(&self, offer: &str, zone: &str, now: Instant) {
        let mut inputs = self.lock();
        inputs.unavailable.insert(
            (offer.to_string(), zone.to_string()),
            now + self.unavailable_ttl,
        );
        info!(
            offer,
            zone,
            ttl_s = self.unavailable_ttl.as_secs(),
            "offering marked unavailable"
        );
        self.publish(&inputs, now);
    }

    /// Drops expired unavailable entries (called periodically).
    pub fn expire(&self) {
        self.expire_at(Instant::now());
    }

    fn expire_at(&self, now: Instant) {
        let mut inputs = self.lock();
        let before = inputs.unavailable.len();
        inputs.unavailable.retain(|_, until| *until > now);
        if inputs.unavailable.len() != before {
            self.publish(&inputs, now);
        }
    }

    /// Recomputes the views; a snapshot with new content gets the next
    /// revision and wakes the watchers, one with the same content only updates
    /// the refresh time, silently.
    fn publish(&self, inputs: &Inputs, now: Instant) {
        let mut default = inputs.base.clone();
        for it in &mut default {
            for o in &mut it.offerings {
                let key = (it.name.clone(), o.zone.clone());
                if inputs
                    .unavailable
                    .get(&key)
                    .is_some_and(|until| *until > now)
                {
                    o.available = false;
                }
            }
        }
        let per_class = inputs
            .classes
            .iter()
            .map(|(name, zones)| (name.clone(), Arc::new(restrict(&default, zones))))
            .collect();
        let mut next = Snapshot {
            revision: 0,
            default: Arc::new(default),
            per_class,
            refreshed_at: inputs.refreshed_at,
        };
        self.tx.send_if_modified(|current| {
            let changed = !next.same_content(current) || current.is_loaded() != next.is_loaded();
            next.revision = current.revision + u64::from(changed);
            *current = Arc::new(std::mem::take(&mut next));
            changed
        });
    }
}

/// The types offered in `zones` (empty = all), with only those offerings.
fn restrict(types: &[InstanceType], zones: &[String]) -> Vec<InstanceType> {
    if zones.is_empty() {
        return types.to_vec();
    }
    types
        .iter()
        .filter_map(|it| {
            let mut it = it.clone();
            it.offerings.retain(|o| zones.contains(&o.zone));
            (!it.offerings.is_empty()).then_some(it)
        })
        .collect()
}

/// Background refresh: reads the offers of every zone every `interval` and
/// publishes the catalog. A zone whose listing fails keeps its last good
/// offers; until the first success the loop retries every few seconds.
/// Expired unavailable-offering entries are dropped on every tick.
pub async fn run_refresher(
    store: Arc<CatalogStore>,
    api: Arc<dyn ElasticMetal>,
    zones: Vec<String>,
    interval: Duration,
) {
    let mut last_good: BTreeMap<String, Vec<Offer>> = BTreeMap::new();
    let mut logged_exclusions: HashSet<String> = HashSet::new();
    let retry = interval.min(Duration::from_secs(5));
    let mut next_refresh = tokio::time::Instant::now();
    let mut expiry = tokio::time::interval(Duration::from_secs(15).min(interval));
    loop {
        tokio::select! {
            _ = tokio::time::sleep_until(next_refresh) => {
                let ok = refresh_once(&store, api.as_ref(), &zones, &mut last_good, &mut logged_exclusions).await;
                next_refresh = tokio::time::Instant::now() + if ok { interval } else { retry };
            }
            _ = expiry.tick() => store.expire(),
        }
    }
}

/// One refresh; true when every zone answered.
async fn refresh_once(
    store: &CatalogStore,
    api: &dyn ElasticMetal,
    zones: &[String],
    last_good: &mut BTreeMap<String, Vec<Offer>>,
    logged_exclusions: &mut HashSet<String>,
) -> bool {
    let results = join_all(zones.iter().map(|z| api.list_offers(z))).await;
    let mut all_ok = true;
    for (zone, result) in zones.iter().zip(results) {
        match result {
            Ok(offers) => {
                last_good.insert(zone.clone(), offers);
            }
            Err(error) => {
                all_ok = false;
                warn!(zone, %error, kept_last_good = last_good.contains_key(zone), "listing offers failed");
            }
        }
    }
    if last_good.is_empty() {
        return false;
    }
    let (types, excluded) = instance_types(last_good);
    for e in excluded {
        if logged_exclusions.insert(e.offer.clone()) {
            info!(offer = %e.offer, zone = %e.zone, reason = %e.reason, "offer left out of the catalog");
        }
    }
    store.set_base(types);
    all_ok
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scaleway::ApiError;
    use crate::scaleway::fake::{FakeElasticMetal, Op, sample_offers};

    fn base() -> Vec<InstanceType> {
        let by_zone = BTreeMap::from([
            ("fr-par-2".to_string(), sample_offers("fr-par-2")),
            ("nl-ams-1".to_string(), sample_offers("nl-ams-1")),
        ]);
        instance_types(&by_zone).0
    }

    fn offering_available(
        s: &Snapshot,
        class: Option<&str>,
        name: &str,
        zone: &str,
    ) -> Option<bool> {
        s.for_class(class)
            .iter()
            .find(|t| t.name == name)?
            .offerings
            .iter()
            .find(|o| o.zone == zone)
            .map(|o| o.available)
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
        store.mark_unavailable_at("EM-A115X-SSD", "fr-par-2", t0);
        let s = store.snapshot();
        assert_eq!(s.revision, 2);
        assert_eq!(
            offering_available(&s, None, "EM-A115X-SSD", "fr-par-2"),
            Some(false)
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
        store.set_node_classes(BTreeMap::from([
            ("par".to_string(), vec!["fr-par-2".to_string()]),
            ("all".to_string(), vec![]),
        ]));
        let s = store.snapshot();
        assert_eq!(
            offering_available(&s, Some("par"), "EM-A115X-SSD", "nl-ams-1"),
            None
        );
        assert_eq!(
            offering_available(&s, Some("par"), "EM-A115X-SSD", "fr-par-2"),
            Some(true)
        );
        assert_eq!(s.for_class(Some("all")).len(), s.default.len());
        assert_eq!(s.for_class(Some("unknown")).len(), s.default.len());
        let zones = s.for_class(Some("par"))[0].zones();
        assert_eq!(zones.into_iter().collect::<Vec<_>>(), vec!["fr-par-2"]);
    }

    #[tokio::test]
    async fn refresh_keeps_last_good_zone_on_failure() {
        let store = CatalogStore::new(Duration::from_secs(60));
        let api = FakeElasticMetal::new();
        api.set_offers("fr-par-2", sample_offers("fr-par-2"));
        api.set_offers("nl-ams-1", sample_offers("nl-ams-1"));
        let zones = vec!["fr-par-2".to_string(), "nl-ams-1".to_string()];
        let mut last_good = BTreeMap::new();
        let mut logged = HashSet::new();
        assert!(refresh_once(&store, &api, &zones, &mut last_good, &mut logged).await);
        assert_eq!(logged.len(), 1, "the RISC-V offer is logged once");
        let before = store.snapshot();

        api.fail_next(Op::ListOffers, ApiError::Unavailable("503".into()));
        api.set_offers("nl-ams-1", vec![]);
        assert!(!refresh_once(&store, &api, &zones, &mut last_good, &mut logged).await);
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
    }
}
