//! The in-memory catalog: last good offers, the unavailable-offerings cache and
//! the per-NodeClass views, keyed by (kind, name), published through a
//! `tokio::sync::watch` channel so that `GetInstanceTypes` reads without
//! waiting and `WatchInstanceTypes` sends one snapshot per change.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

// tokio's clock (the same as std's unless a test pauses it), so that expiry
// can be driven deterministically in tests.
use tokio::time::Instant;

use futures::future::join_all;
use tokio::sync::{Notify, watch};
use tracing::{info, warn};

use super::{Billing, ClassKey, ClassKind, InstanceType, Overhead, Resources, instance_types};
use crate::scaleway::{ElasticMetal, Offer, SubscriptionPeriod};

/// One published catalog.
#[derive(Debug, Clone, Default)]
pub struct Snapshot {
    /// Increases with every change of content.
    pub revision: u64,
    /// Elastic Metal, every configured zone, hourly billing: for Elastic
    /// Metal NodePools whose NodeClass is not known yet.
    pub default: Arc<Vec<InstanceType>>,
    /// The same for every other kind (each kind of [`ClassKind::ALL`] but
    /// Elastic Metal; empty until that kind's types are set).
    pub kind_defaults: BTreeMap<ClassKind, Arc<Vec<InstanceType>>>,
    /// Per (kind, NodeClass): only the zones the NodeClass allows, priced for
    /// its billing, drawn from its kind's types only.
    pub per_class: BTreeMap<ClassKey, Arc<Vec<InstanceType>>>,
    /// When the oldest offers in this catalog were read: the time of the last
    /// refresh when every zone answered, older when a zone's listing failed
    /// and its last good offers are served. `None` until offers were read once.
    pub refreshed_at: Option<SystemTime>,
    /// The same for each other kind whose types were read at least once.
    pub kind_refreshed_at: BTreeMap<ClassKind, SystemTime>,
}

impl Snapshot {
    pub fn is_loaded(&self) -> bool {
        self.refreshed_at.is_some()
    }

    /// Whether the types of `kind` were read at least once.
    pub fn is_loaded_for(&self, kind: ClassKind) -> bool {
        match kind {
            ClassKind::ElasticMetal => self.is_loaded(),
            other => self.kind_refreshed_at.contains_key(&other),
        }
    }

    /// Seconds since the oldest offers of this catalog were read.
    pub fn age(&self) -> Option<Duration> {
        self.refreshed_at
            .map(|t| SystemTime::now().duration_since(t).unwrap_or_default())
    }

    /// The catalog for NodePools of `kind` whose NodeClass is not listed.
    pub fn default_for(&self, kind: ClassKind) -> Arc<Vec<InstanceType>> {
        match kind {
            ClassKind::ElasticMetal => self.default.clone(),
            other => self.kind_defaults.get(&other).cloned().unwrap_or_default(),
        }
    }

    /// The catalog a NodePool whose `nodeClassRef` is (`kind`, `name`) sees:
    /// its NodeClass's view, else its kind's default, never another kind's
    /// types. A NodePool's raw `nodeClassRef.kind` goes through
    /// [`ClassKind::of`] (absent or unknown = Elastic Metal).
    pub fn for_class(&self, kind: ClassKind, name: Option<&str>) -> Arc<Vec<InstanceType>> {
        name.and_then(|n| self.per_class.get(&(kind, n.to_string())))
            .cloned()
            .unwrap_or_else(|| self.default_for(kind))
    }

    fn same_content(&self, other: &Snapshot) -> bool {
        self.default == other.default
            && self.kind_defaults == other.kind_defaults
            && self.per_class == other.per_class
    }
}

/// What the catalog needs to know about a NodeClass.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ClassView {
    /// Empty = every configured zone.
    pub zones: Vec<String>,
    pub billing: Billing,
    /// The (zone, architecture) pairs the NodeClass has a boot image for
    /// (Instances: images are per zone and arch); an offering outside them
    /// is left out of the view. `None` = no such restriction (Elastic Metal,
    /// whose image is a URL per arch).
    pub images: Option<BTreeSet<(String, String)>>,
    /// The node's ephemeral storage when the NodeClass, not the type, decides
    /// it (an Instance's root volume size). `None` = the type's own.
    pub ephemeral_storage_bytes: Option<u64>,
    /// The NodeClass selects a Private Network: Elastic Metal offerings cost
    /// their `private_network` option too.
    pub private_network: bool,
}

impl From<Vec<String>> for ClassView {
    fn from(zones: Vec<String>) -> Self {
        ClassView {
            zones,
            ..ClassView::default()
        }
    }
}

impl From<(Vec<String>, Billing)> for ClassView {
    fn from((zones, billing): (Vec<String>, Billing)) -> Self {
        ClassView {
            zones,
            billing,
            ..ClassView::default()
        }
    }
}

/// (offer name, zone).
type OfferingKey = (String, String);

/// Why an offering is marked unavailable: a small set, so that it can label
/// a metric (`karpenter_scaleway_catalog_unavailable_offerings{reason}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Unavailability {
    /// An order was refused: out of stock.
    OutOfStock,
    /// An order was refused: the account's quota.
    QuotaExceeded,
    /// An order was refused: the offer (or its image) is gone.
    NotFound,
    /// A VM fell back to stopped after power-on (no capacity on the host).
    StoppedAfterPowerOn,
    /// The churn guard refused an order an idle sibling can take.
    ChurnGuard,
}

impl Unavailability {
    /// The metric label.
    pub fn label(self) -> &'static str {
        match self {
            Unavailability::OutOfStock => "out_of_stock",
            Unavailability::QuotaExceeded => "quota_exceeded",
            Unavailability::NotFound => "not_found",
            Unavailability::StoppedAfterPowerOn => "stopped_after_power_on",
            Unavailability::ChurnGuard => "churn_guard",
        }
    }
}

/// What operators read (the offering's `unavailable_reason`, logs).
impl std::fmt::Display for Unavailability {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Unavailability::OutOfStock => "out of stock",
            Unavailability::QuotaExceeded => "quota exceeded",
            Unavailability::NotFound => "not found",
            Unavailability::StoppedAfterPowerOn => "fell back to stopped after power-on",
            Unavailability::ChurnGuard => "an idle sibling can take the pods",
        })
    }
}

/// One offering marked unavailable now (for `/metrics`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct UnavailableOffering {
    pub offer: String,
    pub zone: String,
    pub reason: &'static str,
}

/// An offering refused for lack of stock or quota.
#[derive(Debug, Clone)]
struct Refusal {
    until: Instant,
    /// The same moment on the wall clock, to show operators.
    until_wall: SystemTime,
    kind: Unavailability,
    /// What operators read: the kind, or the churn guard's details.
    reason: String,
}

#[derive(Default)]
struct Inputs {
    /// Kind → every instance type of that kind (all zones, both billings).
    base: BTreeMap<ClassKind, Vec<InstanceType>>,
    /// When the Elastic Metal offers were read.
    refreshed_at: Option<SystemTime>,
    /// When each other kind's types were read.
    kind_refreshed_at: BTreeMap<ClassKind, SystemTime>,
    /// (offer name, zone) → until when the offering counts as unavailable.
    /// Offer names do not overlap between kinds (`EM-…` vs Instance
    /// commercial types), so one map serves both.
    unavailable: HashMap<(String, String), Refusal>,
    /// (kind, NodeClass name) → its zones and billing.
    classes: BTreeMap<ClassKey, ClassView>,
    /// Offer name → the lowest allocatable a registered Node of it reported.
    observed: HashMap<String, Resources>,
    /// Elastic Metal NodeClass name → its standby pools, served as reserved
    /// offerings of that NodeClass's view.
    reservations: BTreeMap<String, Vec<ReservedPool>>,
}

/// A standby pool as the catalog serves it: a `reserved` offering of `offer`
/// in `zone` with `idle` as its capacity.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReservedPool {
    pub offer: String,
    pub zone: String,
    /// The reservation id ([`super::LABEL_RESERVATION_ID`]).
    pub id: String,
    /// Idle installed standby servers.
    pub idle: u32,
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

    /// The offerings marked unavailable now (expired marks left out), sorted.
    pub fn unavailable_offerings(&self) -> Vec<UnavailableOffering> {
        let now = Instant::now();
        let mut out: Vec<UnavailableOffering> = self
            .lock()
            .unavailable
            .iter()
            .filter(|(_, r)| r.until > now)
            .map(|((offer, zone), r)| UnavailableOffering {
                offer: offer.clone(),
                zone: zone.clone(),
                reason: r.kind.label(),
            })
            .collect();
        out.sort();
        out
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

    /// A successful Elastic Metal refresh, all zones read now.
    pub fn set_base(&self, types: Vec<InstanceType>) {
        self.set_base_read_at(types, SystemTime::now());
    }

    /// An Elastic Metal refresh whose oldest offers were read at `read_at`.
    pub fn set_base_read_at(&self, types: Vec<InstanceType>, read_at: SystemTime) {
        let mut inputs = self.lock();
        inputs.base.insert(ClassKind::ElasticMetal, types);
        inputs.refreshed_at = Some(read_at);
        self.publish(&inputs, Instant::now());
    }

    /// Every instance type of `kind` (all zones): its default catalog and
    /// what its NodeClasses' views are drawn from. Elastic Metal's are set by
    /// [`set_base`](Self::set_base), which also dates the catalog.
    pub fn set_kind_types(&self, kind: ClassKind, types: Vec<InstanceType>) {
        self.set_kind_types_read_at(kind, types, SystemTime::now());
    }

    /// Like [`set_kind_types`](Self::set_kind_types), with the time the
    /// oldest of them was read (a zone whose listing failed keeps its last
    /// good types).
    pub fn set_kind_types_read_at(
        &self,
        kind: ClassKind,
        types: Vec<InstanceType>,
        read_at: SystemTime,
    ) {
        if kind == ClassKind::ElasticMetal {
            return self.set_base_read_at(types, read_at);
        }
        let mut inputs = self.lock();
        let first = inputs.kind_refreshed_at.insert(kind, read_at).is_none();
        if first || inputs.base.get(&kind) != Some(&types) {
            inputs.base.insert(kind, types);
        }
        // Published either way: the read time moves (silently when nothing
        // else changed, see `publish`).
        self.publish(&inputs, Instant::now());
    }

    /// The NodeClasses of `kind`, their zones and billing (the full set of
    /// that kind: absent names are dropped; other kinds' are kept). A bare
    /// list of zones means hourly billing.
    pub fn set_node_classes<V: Into<ClassView>>(
        &self,
        kind: ClassKind,
        classes: BTreeMap<String, V>,
    ) {
        let classes: BTreeMap<String, ClassView> =
            classes.into_iter().map(|(k, v)| (k, v.into())).collect();
        let mut inputs = self.lock();
        let current: BTreeMap<&String, &ClassView> = inputs
            .classes
            .iter()
            .filter(|((k, _), _)| *k == kind)
            .map(|((_, name), view)| (name, view))
            .collect();
        if current != classes.iter().collect() {
            inputs.classes.retain(|(k, _), _| *k != kind);
            inputs
                .classes
                .extend(classes.into_iter().map(|(name, v)| ((kind, name), v)));
            self.publish(&inputs, Instant::now());
        }
    }

    /// The standby pools of the Elastic Metal NodeClass `class` (all of
    /// them: an empty list removes its reserved offerings). Published at once
    /// when anything changed, so that an adoption that took the last idle
    /// server is seen by the next scheduling round.
    pub fn set_reservations(&self, class: &str, pools: Vec<ReservedPool>) {
        let mut inputs = self.lock();
        let current = inputs.reservations.get(class).map(Vec::as_slice);
        if current.unwrap_or_default() == pools.as_slice() {
            return;
        }
        if pools.is_empty() {
            inputs.reservations.remove(class);
        } else {
            inputs.reservations.insert(class.to_string(), pools);
        }
        self.publish(&inputs, Instant::now());
    }

    /// An order of `offer` in `zone` failed for lack of capacity: the offering
    /// is unavailable until the TTL passes, so that Karpenter stops choosing it.
    pub fn mark_unavailable(&self, offer: &str, zone: &str) {
        self.mark_unavailable_for(offer, zone, Unavailability::OutOfStock);
    }

    /// Like [`mark_unavailable`](Self::mark_unavailable) with the reason shown
    /// to operators; returns the revision of the catalog that holds the mark,
    /// so that a caller can wait for a watcher to have seen it.
    pub fn mark_unavailable_for(&self, offer: &str, zone: &str, reason: Unavailability) -> u64 {
        self.mark_unavailable_at(offer, zone, reason, Instant::now())
    }

    /// A server of `offer` this provider owned is gone: the project's quota
    /// of its range has room again, so the offering's quota marks (in every
    /// zone: quotas are the project's) are lifted at once rather than at the
    /// end of their TTL. Other marks (stock) stay. Returns whether any was
    /// lifted.
    pub fn quota_freed(&self, offer: &str) -> bool {
        let mut inputs = self.lock();
        let before = inputs.unavailable.len();
        inputs
            .unavailable
            .retain(|(o, _), r| !(o == offer && r.kind == Unavailability::QuotaExceeded));
        let lifted = inputs.unavailable.len() != before;
        if lifted {
            self.publish(&inputs, Instant::now());
        }
        lifted
    }

    /// A refusal by the churn guard ([`Unavailability::ChurnGuard`], `detail`
    /// shown to operators), which only needs core to stop asking for a
    /// while: for `ttl` (at most the store's TTL), never shortening a longer
    /// mark.
    pub fn mark_unavailable_until(
        &self,
        offer: &str,
        zone: &str,
        detail: &str,
        ttl: Duration,
    ) -> u64 {
        let ttl = ttl.min(self.unavailable_ttl);
        let now = Instant::now();
        let longer = self
            .lock()
            .unavailable
            .get(&(offer.to_string(), zone.to_string()))
            .is_some_and(|r| r.until > now + ttl);
        if longer {
            return self.snapshot().revision;
        }
        let refusal = (Unavailability::ChurnGuard, detail.to_string());
        self.mark_unavailable_ttl(offer, zone, refusal, now, ttl)
    }

    fn mark_unavailable_at(
        &self,
        offer: &str,
        zone: &str,
        reason: Unavailability,
        now: Instant,
    ) -> u64 {
        let refusal = (reason, reason.to_string());
        self.mark_unavailable_ttl(offer, zone, refusal, now, self.unavailable_ttl)
    }

    /// `(kind, reason)`: the mark's class and what operators read.
    fn mark_unavailable_ttl(
        &self,
        offer: &str,
        zone: &str,
        (kind, reason): (Unavailability, String),
        now: Instant,
        ttl: Duration,
    ) -> u64 {
        let mut inputs = self.lock();
        inputs.unavailable.insert(
            (offer.to_string(), zone.to_string()),
            Refusal {
                until: now + ttl,
                until_wall: SystemTime::now() + ttl,
                kind,
                reason: reason.clone(),
            },
        );
        info!(
            offer,
            zone,
            %reason,
            ttl_s = ttl.as_secs(),
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
        let view = |kind, class: &ClassView, pools: &[ReservedPool]| {
            let base = inputs.base.get(&kind).map_or(&[][..], Vec::as_slice);
            let mut types = view(inputs, base, now, class);
            add_reservations(&mut types, pools);
            Arc::new(types)
        };
        let any = ClassView::default();
        let default = view(ClassKind::ElasticMetal, &any, &[]);
        let kind_defaults = ClassKind::ALL
            .into_iter()
            .filter(|k| *k != ClassKind::ElasticMetal)
            .map(|k| (k, view(k, &any, &[])))
            .collect();
        let per_class = inputs
            .classes
            .iter()
            .map(|((kind, name), c)| {
                let pools = match kind {
                    ClassKind::ElasticMetal => {
                        inputs.reservations.get(name).map_or(&[][..], Vec::as_slice)
                    }
                    _ => &[][..],
                };
                ((*kind, name.clone()), view(*kind, c, pools))
            })
            .collect();
        let mut next = Snapshot {
            revision: 0,
            default,
            kind_defaults,
            per_class,
            refreshed_at: inputs.refreshed_at,
            kind_refreshed_at: inputs.kind_refreshed_at.clone(),
        };
        let mut revision = 0;
        self.tx.send_if_modified(|current| {
            let changed = !next.same_content(current)
                || current.is_loaded() != next.is_loaded()
                || current.kind_refreshed_at.len() != next.kind_refreshed_at.len();
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

/// The catalog of `base` as `class` sees it (its zones, empty = all; its
/// images; its root volume), priced for its billing: observed allocatable
/// applied, recent refusals marked.
fn view(
    inputs: &Inputs,
    base: &[InstanceType],
    now: Instant,
    class: &ClassView,
) -> Vec<InstanceType> {
    let (zones, billing) = (&class.zones, class.billing);
    base.iter()
        .filter_map(|it| {
            let mut it = it.clone();
            if let Some(bytes) = class.ephemeral_storage_bytes
                && bytes != it.capacity.ephemeral_storage_bytes
            {
                it.capacity.ephemeral_storage_bytes = bytes;
                it.overhead = Overhead::estimate(&it.capacity);
            }
            if let Some(observed) = inputs.observed.get(&it.name) {
                it.overhead = it.overhead.at_most_allocatable(&it.capacity, observed);
            }
            if !zones.is_empty() {
                it.offerings.retain(|o| zones.contains(&o.zone));
            }
            if let Some(images) = &class.images {
                it.offerings
                    .retain(|o| images.contains(&(o.zone.clone(), it.arch.clone())));
            }
            for o in &mut it.offerings {
                o.bill(billing);
                if class.private_network {
                    o.price += o.private_network_price();
                }
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

/// Adds one `reserved` offering per standby pool to its type, priced at the
/// type's on-demand offering in that zone (as the view bills it) divided by
/// [`super::RESERVED_PRICE_DIVISOR`]. A pool whose offer or zone is not in
/// the view (unknown offer, zone outside the NodeClass) adds nothing: there
/// is no price to derive and nothing a NodePool of this NodeClass could use.
/// A pool with no idle server stays listed, unavailable with capacity 0
/// (core drifts nodes whose offering disappears).
fn add_reservations(types: &mut [InstanceType], pools: &[ReservedPool]) {
    for pool in pools {
        let Some(it) = types.iter_mut().find(|t| t.name == pool.offer) else {
            continue;
        };
        let Some(on_demand) = it
            .offerings
            .iter()
            .find(|o| o.zone == pool.zone && o.reservation.is_none())
            .cloned()
        else {
            continue;
        };
        let available = pool.idle > 0;
        it.offerings.push(super::Offering {
            price: on_demand.price / super::RESERVED_PRICE_DIVISOR,
            available,
            unavailable_reason: (!available).then(|| "no idle standby server".to_string()),
            reservation: Some(super::OfferingReservation {
                id: pool.id.clone(),
                capacity: pool.idle,
            }),
            ..on_demand
        });
    }
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

/// What a refresher remembers between two refreshes, for either kind:
/// each zone's last good answer `T` and when it was read, so that a zone
/// whose listing fails keeps serving it (and the catalog's age grows).
pub(crate) struct RefreshState<T = Vec<Offer>> {
    /// Zone → its last good answer and when it was read.
    last_good: BTreeMap<String, (T, SystemTime)>,
    /// Types already logged as left out (logged once per process).
    pub(crate) logged_exclusions: HashSet<(String, String)>,
}

impl<T> Default for RefreshState<T> {
    fn default() -> Self {
        RefreshState {
            last_good: BTreeMap::new(),
            logged_exclusions: HashSet::new(),
        }
    }
}

impl<T: Clone> RefreshState<T> {
    /// Keeps this round's good answers (`results` in `zones` order) and
    /// logs the zones that failed; true when every zone answered.
    pub(crate) fn record(
        &mut self,
        zones: &[String],
        results: Vec<Result<T, crate::scaleway::ApiError>>,
        what: &str,
    ) -> bool {
        let now = SystemTime::now();
        let mut all_ok = true;
        for (zone, result) in zones.iter().zip(results) {
            match result {
                Ok(answer) => {
                    self.last_good.insert(zone.clone(), (answer, now));
                }
                Err(error) => {
                    all_ok = false;
                    let kept = self
                        .last_good
                        .get(zone)
                        .map(|(_, at)| now.duration_since(*at).unwrap_or_default().as_secs());
                    warn!(zone, %error, kept_last_good_age_s = ?kept,
                        "listing {what} failed; serving the last good {what} of this zone");
                }
            }
        }
        all_ok
    }

    /// Every zone's last good answer and when the oldest was read; `None`
    /// before any zone has answered.
    pub(crate) fn current(&self) -> Option<(BTreeMap<String, T>, SystemTime)> {
        let oldest = self.last_good.values().map(|(_, at)| *at).min()?;
        let by_zone = self
            .last_good
            .iter()
            .map(|(z, (answer, _))| (z.clone(), answer.clone()))
            .collect();
        Some((by_zone, oldest))
    }

    /// Logs each type left out of the catalog, once per process.
    pub(crate) fn log_exclusions(&mut self, excluded: Vec<super::Excluded>) {
        for e in excluded {
            if self
                .logged_exclusions
                .insert((e.offer.clone(), e.reason.clone()))
            {
                info!(offer = %e.offer, zone = %e.zone, reason = %e.reason, "left out of the catalog");
            }
        }
    }
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
    let all_ok = state.record(zones, results, "offers");
    let Some((by_zone, oldest)) = state.current() else {
        return false;
    };
    let (types, excluded) = instance_types(&by_zone);
    state.log_exclusions(excluded);
    store.set_base_read_at(types, oldest);
    all_ok
}

#[cfg(test)]
#[path = "store_tests.rs"]
mod tests;
