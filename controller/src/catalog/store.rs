//! The in-memory catalog: last good offers, the unavailable-offerings cache and
//! the per-NodeClass views, published through a `tokio::sync::watch` channel so
//! that `GetInstanceTypes` reads without waiting and `WatchInstanceTypes` sends
//! one snapshot per change.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

// tokio's clock (the same as std's unless a test pauses it), so that expiry
// can be driven deterministically in tests.
use tokio::time::Instant;

use futures::future::join_all;
use tokio::sync::{Notify, watch};
use tracing::{info, warn};

use super::{Billing, InstanceType, Resources, instance_types};
use crate::scaleway::{ElasticMetal, Offer, SubscriptionPeriod};

/// One published catalog.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Increases with every change of content.
    pub revision: u64,
    /// Every configured zone, hourly billing: for NodePools whose NodeClass
    /// is not known yet.
    pub default: Arc<Vec<InstanceType>>,
    /// Per NodeClass: only the zones the NodeClass allows, priced for its billing.
    pub per_class: BTreeMap<String, Arc<Vec<InstanceType>>>,
    /// When the oldest offers in this catalog were read: the time of the last
    /// refresh when every zone answered, older when a zone's listing failed
    /// and its last good offers are served. `None` until offers were read once.
    pub refreshed_at: Option<SystemTime>,
}

impl Snapshot {
    pub fn is_loaded(&self) -> bool {
        self.refreshed_at.is_some()
    }

    /// Seconds since the oldest offers of this catalog were read.
    pub fn age(&self) -> Option<Duration> {
        self.refreshed_at
            .map(|t| SystemTime::now().duration_since(t).unwrap_or_default())
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

/// What the catalog needs to know about a NodeClass.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClassView {
    /// Empty = every configured zone.
    pub zones: Vec<String>,
    pub billing: Billing,
}

impl From<Vec<String>> for ClassView {
    fn from(zones: Vec<String>) -> Self {
        ClassView {
            zones,
            billing: Billing::Hourly,
        }
    }
}

impl From<(Vec<String>, Billing)> for ClassView {
    fn from((zones, billing): (Vec<String>, Billing)) -> Self {
        ClassView { zones, billing }
    }
}

/// (offer name, zone).
type OfferingKey = (String, String);

/// An offering refused for lack of stock or quota.
#[derive(Debug, Clone)]
struct Refusal {
    until: Instant,
    /// The same moment on the wall clock, to show operators.
    until_wall: SystemTime,
    reason: String,
}

#[derive(Default)]
struct Inputs {
    base: Vec<InstanceType>,
    refreshed_at: Option<SystemTime>,
    /// (offer name, zone) → until when the offering counts as unavailable.
    unavailable: HashMap<(String, String), Refusal>,
    /// NodeClass name → its zones and billing.
    classes: BTreeMap<String, ClassView>,
    /// Offer name → the lowest allocatable a registered Node of it reported.
    observed: HashMap<String, Resources>,
}

pub struct CatalogStore {
    inputs: Mutex<Inputs>,
    tx: watch::Sender<Arc<Snapshot>>,
    unavailable_ttl: Duration,
    /// One lock per (offer, zone), held while an order for it is in flight.
    order_locks: Mutex<HashMap<OfferingKey, Arc<tokio::sync::Mutex<()>>>>,
    /// Woken when an offering is marked unavailable, so that the refresher
    /// schedules its expiry.
    marked: Notify,
}

impl CatalogStore {
    /// `unavailable_ttl`: how long an offering that failed an order for lack
    /// of stock or quota stays unavailable. Bare-metal stock moves slowly
    /// (servers are racked and freed by the hour, not by the minute), so this
    /// is long, tens of minutes, unlike the 3 minutes cloud VMs use; see
    /// docs/nodeclass.md.
    pub fn new(unavailable_ttl: Duration) -> Arc<Self> {
        let (tx, _) = watch::channel(Arc::new(Snapshot::default()));
        Arc::new(CatalogStore {
            inputs: Mutex::new(Inputs::default()),
            tx,
            unavailable_ttl,
            order_locks: Mutex::new(HashMap::new()),
            marked: Notify::new(),
        })
    }

    /// Waits, at most `wait`, for the order in flight for `offer` in `zone`
    /// (if any) to finish, and returns a slot held until the caller's own
    /// order is answered. Karpenter launches the NodeClaims of one batch in
    /// parallel: without this, N NodeClaims picking an offer that just sold
    /// out would send N orders that are all refused; with it, the first
    /// refusal marks the offering and the others see the mark
    /// ([`refusal`](Self::refusal)) instead of ordering. The wait is bounded
    /// so that a slow API cannot hold Create (and with it the whole cluster's
    /// provisioning) behind a queue of orders; `None` = waited long enough,
    /// order anyway.
    pub async fn order_slot(
        &self,
        offer: &str,
        zone: &str,
        wait: Duration,
    ) -> Option<tokio::sync::OwnedMutexGuard<()>> {
        let lock = self
            .order_locks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .entry((offer.to_string(), zone.to_string()))
            .or_default()
            .clone();
        tokio::time::timeout(wait, lock.lock_owned()).await.ok()
    }

    /// Why `offer` in `zone` is marked unavailable after a refused order, if it is.
    pub fn refusal(&self, offer: &str, zone: &str) -> Option<String> {
        let inputs = self.lock();
        inputs
            .unavailable
            .get(&(offer.to_string(), zone.to_string()))
            .filter(|r| r.until > Instant::now())
            .map(|r| r.reason.clone())
    }

    pub fn unavailable_ttl(&self) -> Duration {
        self.unavailable_ttl
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

    /// A successful refresh, all zones read now.
    pub fn set_base(&self, types: Vec<InstanceType>) {
        self.set_base_read_at(types, SystemTime::now());
    }

    /// A refresh whose oldest offers were read at `read_at`.
    pub fn set_base_read_at(&self, types: Vec<InstanceType>, read_at: SystemTime) {
        let mut inputs = self.lock();
        inputs.base = types;
        inputs.refreshed_at = Some(read_at);
        self.publish(&inputs, Instant::now());
    }

    /// The NodeClasses, their zones and billing (the full set: absent names
    /// are dropped). A bare list of zones means hourly billing.
    pub fn set_node_classes<V: Into<ClassView>>(&self, classes: BTreeMap<String, V>) {
        let classes: BTreeMap<String, ClassView> =
            classes.into_iter().map(|(k, v)| (k, v.into())).collect();
        let mut inputs = self.lock();
        if inputs.classes != classes {
            inputs.classes = classes;
            self.publish(&inputs, Instant::now());
        }
    }

    /// An order of `offer` in `zone` failed for lack of capacity: the offering
    /// is unavailable until the TTL passes, so that Karpenter stops choosing it.
    pub fn mark_unavailable(&self, offer: &str, zone: &str) {
        self.mark_unavailable_for(offer, zone, "out of stock");
    }

    /// Like [`mark_unavailable`](Self::mark_unavailable) with the reason shown
    /// to operators; returns the revision of the catalog that holds the mark,
    /// so that a caller can wait for a watcher to have seen it.
    pub fn mark_unavailable_for(&self, offer: &str, zone: &str, reason: &str) -> u64 {
        self.mark_unavailable_at(offer, zone, reason, Instant::now())
    }

    fn mark_unavailable_at(&self, offer: &str, zone: &str, reason: &str, now: Instant) -> u64 {
        let mut inputs = self.lock();
        inputs.unavailable.insert(
            (offer.to_string(), zone.to_string()),
            Refusal {
                until: now + self.unavailable_ttl,
                until_wall: SystemTime::now() + self.unavailable_ttl,
                reason: reason.to_string(),
            },
        );
        info!(
            offer,
            zone,
            reason,
            ttl_s = self.unavailable_ttl.as_secs(),
            "offering marked unavailable"
        );
        let revision = self.publish(&inputs, now);
        self.marked.notify_one();
        revision
    }

    /// When the earliest unavailable mark runs out, if any.
    fn next_expiry(&self) -> Option<Instant> {
        self.lock().unavailable.values().map(|r| r.until).min()
    }

    /// A registered Node of `offer` reports `allocatable`. The catalog keeps
    /// the lowest report per offer and never promises more than that.
    pub fn observe_allocatable(&self, offer: &str, allocatable: Resources) {
        let mut inputs = self.lock();
        let entry = inputs
            .observed
            .entry(offer.to_string())
            .or_insert(allocatable);
        let lowest = Resources {
            cpu_millis: min_nonzero(entry.cpu_millis, allocatable.cpu_millis),
            memory_bytes: min_nonzero(entry.memory_bytes, allocatable.memory_bytes),
            ephemeral_storage_bytes: min_nonzero(
                entry.ephemeral_storage_bytes,
                allocatable.ephemeral_storage_bytes,
            ),
            pods: min_nonzero(entry.pods, allocatable.pods),
            nvidia_gpus: min_nonzero(entry.nvidia_gpus, allocatable.nvidia_gpus),
        };
        *entry = lowest;
        self.publish(&inputs, Instant::now());
    }

    /// Drops expired unavailable entries (the refresher calls it when the
    /// earliest one runs out).
    pub fn expire(&self) {
        self.expire_at(Instant::now());
    }

    fn expire_at(&self, now: Instant) {
        let mut inputs = self.lock();
        let before = inputs.unavailable.len();
        inputs.unavailable.retain(|(offer, zone), r| {
            let keep = r.until > now;
            if !keep {
                info!(offer, zone, "offering no longer marked unavailable");
            }
            keep
        });
        if inputs.unavailable.len() != before {
            self.publish(&inputs, now);
        }
    }

    /// Recomputes the views; a snapshot with new content gets the next
    /// revision and wakes the watchers, one with the same content only updates
    /// the refresh time, silently. Returns the current revision.
    fn publish(&self, inputs: &Inputs, now: Instant) -> u64 {
        let view = |zones: &[String], billing| Arc::new(view(inputs, now, zones, billing));
        let default = view(&[], Billing::Hourly);
        let per_class = inputs
            .classes
            .iter()
            .map(|(name, c)| (name.clone(), view(&c.zones, c.billing)))
            .collect();
        let mut next = Snapshot {
            revision: 0,
            default,
            per_class,
            refreshed_at: inputs.refreshed_at,
        };
        let mut revision = 0;
        self.tx.send_if_modified(|current| {
            let changed = !next.same_content(current) || current.is_loaded() != next.is_loaded();
            next.revision = current.revision + u64::from(changed);
            revision = next.revision;
            *current = Arc::new(std::mem::take(&mut next));
            changed
        });
        revision
    }
}

fn min_nonzero(a: u64, b: u64) -> u64 {
    match (a, b) {
        (0, x) | (x, 0) => x,
        (a, b) => a.min(b),
    }
}

/// The catalog of `zones` (empty = all) for `billing`: observed allocatable
/// applied, offerings priced, recent refusals marked.
fn view(inputs: &Inputs, now: Instant, zones: &[String], billing: Billing) -> Vec<InstanceType> {
    inputs
        .base
        .iter()
        .filter_map(|it| {
            let mut it = it.clone();
            if let Some(observed) = inputs.observed.get(&it.name) {
                it.overhead = it.overhead.at_most_allocatable(&it.capacity, observed);
            }
            if !zones.is_empty() {
                it.offerings.retain(|o| zones.contains(&o.zone));
            }
            for o in &mut it.offerings {
                o.bill(billing);
                let key = (it.name.clone(), o.zone.clone());
                if let Some(r) = inputs.unavailable.get(&key).filter(|r| r.until > now) {
                    o.available = false;
                    let until = chrono::DateTime::<chrono::Utc>::from(r.until_wall)
                        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
                    o.unavailable_reason =
                        Some(format!("order refused ({}) until {until}", r.reason));
                }
            }
            (!it.offerings.is_empty()).then_some(it)
        })
        .collect()
}

/// Background refresh: reads the hourly and monthly offers of every zone
/// every `interval` and publishes the catalog. A zone whose listing fails
/// keeps its last good offers (and the catalog's age grows); until the first
/// success the loop retries every few seconds. An unavailable offering comes
/// back the moment its TTL runs out (not at the next tick of some period: a
/// NodePool waiting for a restocked offer should not wait longer than it was
/// told).
pub async fn run_refresher(
    store: Arc<CatalogStore>,
    api: Arc<dyn ElasticMetal>,
    zones: Vec<String>,
    interval: Duration,
) {
    let mut state = RefreshState::default();
    let retry = interval.min(Duration::from_secs(5));
    let mut next_refresh = Instant::now();
    loop {
        let next_expiry = store.next_expiry();
        let expiry = async {
            match next_expiry {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            _ = tokio::time::sleep_until(next_refresh) => {
                let ok = refresh_once(&store, api.as_ref(), &zones, &mut state).await;
                next_refresh = Instant::now() + if ok { interval } else { retry };
            }
            _ = expiry => store.expire(),
            // A new mark: compute the next expiry again.
            _ = store.marked.notified() => {}
        }
    }
}

/// What the refresher remembers between two refreshes.
#[derive(Default)]
pub(crate) struct RefreshState {
    /// Zone → its last good offers (both periods) and when they were read.
    last_good: BTreeMap<String, (Vec<Offer>, SystemTime)>,
    /// Offers already logged as left out (logged once per process).
    logged_exclusions: HashSet<(String, String)>,
}

/// Reads the offers of both billing periods of one zone; an error in either
/// fails the zone (a catalog without monthly prices would misprice monthly
/// NodeClasses).
pub async fn read_zone(
    api: &dyn ElasticMetal,
    zone: &str,
) -> Result<Vec<Offer>, crate::scaleway::ApiError> {
    let (hourly, monthly) = futures::join!(
        api.list_offers(zone, SubscriptionPeriod::Hourly),
        api.list_offers(zone, SubscriptionPeriod::Monthly)
    );
    let mut offers = hourly?;
    offers.extend(monthly?);
    Ok(offers)
}

/// One refresh; true when every zone answered.
pub(crate) async fn refresh_once(
    store: &CatalogStore,
    api: &dyn ElasticMetal,
    zones: &[String],
    state: &mut RefreshState,
) -> bool {
    let results = join_all(zones.iter().map(|z| read_zone(api, z))).await;
    let mut all_ok = true;
    let now = SystemTime::now();
    for (zone, result) in zones.iter().zip(results) {
        match result {
            Ok(offers) => {
                state.last_good.insert(zone.clone(), (offers, now));
            }
            Err(error) => {
                all_ok = false;
                let kept = state
                    .last_good
                    .get(zone)
                    .map(|(_, at)| now.duration_since(*at).unwrap_or_default().as_secs());
                warn!(zone, %error, kept_last_good_age_s = ?kept, "listing offers failed; serving the last good offers of this zone");
            }
        }
    }
    if state.last_good.is_empty() {
        return false;
    }
    let by_zone: BTreeMap<String, Vec<Offer>> = state
        .last_good
        .iter()
        .map(|(z, (offers, _))| (z.clone(), offers.clone()))
        .collect();
    let oldest = state
        .last_good
        .values()
        .map(|(_, at)| *at)
        .min()
        .unwrap_or(now);
    let (types, excluded) = instance_types(&by_zone);
    for e in excluded {
        if state
            .logged_exclusions
            .insert((e.offer.clone(), e.reason.clone()))
        {
            info!(offer = %e.offer, zone = %e.zone, reason = %e.reason, "offer left out of the catalog");
        }
    }
    store.set_base_read_at(types, oldest);
    all_ok
}

#[cfg(test)]
mod tests {
    use super::*;
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
        s.for_class(class)
            .iter()
            .find(|t| t.name == name)?
            .offerings
            .iter()
            .find(|o| o.zone == zone)
            .cloned()
    }

    fn offering_available(
        s: &Snapshot,
        class: Option<&str>,
        name: &str,
        zone: &str,
    ) -> Option<bool> {
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
        let rev = store.mark_unavailable_at("EM-A115X-SSD", "fr-par-2", "out of stock", t0);
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

    #[test]
    fn monthly_classes_see_amortised_prices_and_the_twin() {
        let store = CatalogStore::new(Duration::from_secs(60));
        store.set_base(base());
        store.set_node_classes(BTreeMap::from([
            ("hourly".to_string(), ClassView::from(vec![])),
            (
                "monthly".to_string(),
                ClassView::from((vec!["fr-par-2".to_string()], Billing::Monthly)),
            ),
        ]));
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
        store.mark_unavailable_for("EM-A115X-SSD", "fr-par-2", "out of stock");
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
}
