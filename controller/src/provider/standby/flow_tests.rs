//! The standby flows at the provider level, over the Elastic Metal fake: the
//! pass (ordering, publishing, re-imaging, resuming, releasing), adoption by
//! Create and recycling by Delete (those two in `flow_adopt_tests.rs`). The
//! standby engine is a recording fake: these tests check what the provider
//! asks of it, not the install itself (`install/*standby_tests.rs` do).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::*;
use crate::catalog::{
    Billing as CatalogBilling, ClassKind, Offering, instance_types, reservation_id,
};
use crate::install::Target;
use crate::nodeclass::{Standby, StandbyPool};
use crate::provider::tests::{
    Fixture, PROJECT, RecordingInstaller, ZONE, claim, fixture, node_class_spec,
};
use crate::provider::{ClusterPorts, NodeClassRecord, Provider, ProviderError, ProviderSettings};
use crate::scaleway::fake::{FakeElasticMetal, Op, sample_offers};
use crate::scaleway::{
    ApiError, BootType, CreateServerRequest, ElasticMetal, Offer, ServerFilter, ServerStatus,
    SshKey, SubscriptionPeriod,
};

const CLASS: &str = "warm";
const OFFER: &str = "EM-A115X-SSD";

#[derive(Default)]
struct FakeEvents {
    /// (NodeClass, warning, reason, note).
    events: Mutex<Vec<(String, bool, String, String)>>,
}

impl FakeEvents {
    fn reasons(&self) -> Vec<String> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .map(|e| e.2.clone())
            .collect()
    }
}

#[async_trait]
impl StandbyEvents for FakeEvents {
    async fn record(&self, class: &str, warning: bool, reason: &str, note: String) {
        self.events
            .lock()
            .unwrap()
            .push((class.into(), warning, reason.into(), note));
    }
}

/// The fixture's fake, except that every call first yields to the runtime,
/// as a real API call does: two Creates joined in one task then interleave
/// at each call (the same way every run), and a race is a real race.
struct Yielding(Arc<FakeElasticMetal>, StaleList);

/// What the next server listing answers instead of the fake's state (a
/// listing read before the servers' last tag writes).
type StaleList = Arc<Mutex<Option<Vec<Server>>>>;

#[async_trait]
impl ElasticMetal for Yielding {
    async fn list_offers(&self, z: &str, p: SubscriptionPeriod) -> Result<Vec<Offer>, ApiError> {
        tokio::task::yield_now().await;
        self.0.list_offers(z, p).await
    }
    async fn create_server(&self, z: &str, r: &CreateServerRequest) -> Result<Server, ApiError> {
        tokio::task::yield_now().await;
        self.0.create_server(z, r).await
    }
    async fn get_server(&self, z: &str, id: &str) -> Result<Server, ApiError> {
        tokio::task::yield_now().await;
        self.0.get_server(z, id).await
    }
    async fn list_servers(&self, z: &str, f: &ServerFilter) -> Result<Vec<Server>, ApiError> {
        tokio::task::yield_now().await;
        let live = self.0.list_servers(z, f).await?;
        match self.1.lock().unwrap().take() {
            Some(stale) => Ok(stale
                .into_iter()
                .filter(|s| s.zone == z && f.matches(s))
                .collect()),
            None => Ok(live),
        }
    }
    async fn delete_server(&self, z: &str, id: &str) -> Result<Server, ApiError> {
        tokio::task::yield_now().await;
        self.0.delete_server(z, id).await
    }
    async fn update_server_tags(
        &self,
        z: &str,
        id: &str,
        t: &[String],
    ) -> Result<Server, ApiError> {
        tokio::task::yield_now().await;
        self.0.update_server_tags(z, id, t).await
    }
    async fn reboot_server(
        &self,
        z: &str,
        id: &str,
        b: BootType,
        k: &[String],
    ) -> Result<Server, ApiError> {
        tokio::task::yield_now().await;
        self.0.reboot_server(z, id, b, k).await
    }
    async fn list_ssh_keys(&self, p: &str) -> Result<Vec<SshKey>, ApiError> {
        tokio::task::yield_now().await;
        self.0.list_ssh_keys(p).await
    }
}

/// A provider serving standby, over the fixture's fakes; the standby engine
/// records what it is asked.
struct Warm {
    f: Fixture,
    engine: Arc<RecordingInstaller>,
    events: Arc<FakeEvents>,
    provider: Arc<Provider>,
    stale_list: StaleList,
}

fn t(s: &str) -> DateTime<Utc> {
    DateTime::parse_from_rfc3339(s).unwrap().with_timezone(&Utc)
}

fn pool(offer: &str, min: i32, max: i32, keep: Option<&str>) -> StandbyPool {
    StandbyPool {
        offer: offer.into(),
        zone: ZONE.into(),
        min,
        max,
        idle_hourly_keep: keep.map(str::to_string),
        planner: None,
    }
}

fn set_pools(f: &Fixture, pools: Vec<StandbyPool>) {
    let mut spec = node_class_spec();
    spec.standby = Some(Standby { pools });
    f.classes.classes.lock().unwrap().insert(
        CLASS.into(),
        NodeClassRecord {
            name: CLASS.into(),
            spec,
            readiness: crate::provider::Readiness::Ready,
            private_networks: Vec::new(),
        },
    );
}

fn settings() -> ProviderSettings {
    ProviderSettings {
        cluster_name: "test".into(),
        project_id: PROJECT.into(),
        zones: vec![ZONE.into(), "nl-ams-1".into()],
        instance_zones: vec![ZONE.into()],
    }
}

fn warm(pools: Vec<StandbyPool>) -> Warm {
    let f = fixture();
    set_pools(&f, pools);
    let view = (vec![ZONE.to_string()], CatalogBilling::Hourly);
    f.catalog.set_node_classes(
        ClassKind::ElasticMetal,
        BTreeMap::from([
            ("default".to_string(), view.clone()),
            (CLASS.to_string(), view),
        ]),
    );
    let engine = Arc::new(RecordingInstaller::default());
    let events = Arc::new(FakeEvents::default());
    let port = Arc::new(StandbyNodePort::new(f.api.clone(), events.clone()));
    let stale_list = StaleList::default();
    let provider = Provider::new(
        Arc::new(Yielding(f.api.clone(), stale_list.clone())),
        f.catalog.clone(),
        f.classes.clone(),
        f.installer.clone(),
        ClusterPorts {
            tokens: f.tokens.clone(),
            nodes: f.nodes.clone(),
        },
        settings(),
    )
    .with_standby(StandbyPorts {
        book: Arc::default(),
        engine: engine.clone(),
        port,
        events: events.clone(),
        periods: Periods::default(),
    });
    Warm {
        f,
        engine,
        events,
        provider: Arc::new(provider),
        stale_list,
    }
}

/// The standby-image tag of what the test NodeClass installs on amd64.
fn image() -> String {
    image_tag(&node_class_spec(), "amd64").unwrap()
}

fn idle_since(since: &str) -> Progress {
    Progress {
        phase: Some(Phase::Standby),
        phase_since: Some(t(since)),
        disk: Some("nvme0n1".into()),
        mac: Some("52:54:00:aa:bb:01".into()),
        ..Progress::default()
    }
}

fn server(id: &str, created: &str, tags: Vec<String>) -> Server {
    Server {
        id: id.into(),
        organization_id: PROJECT.into(),
        project_id: PROJECT.into(),
        name: format!("standby-warm-{id}"),
        description: String::new(),
        status: ServerStatus::Ready,
        offer_id: format!("{ZONE}-a115x"),
        offer_name: OFFER.into(),
        tags,
        ips: vec![],
        boot_type: BootType::Normal,
        zone: ZONE.into(),
        rescue_server: None,
        created_at: created.into(),
        updated_at: String::new(),
    }
}

/// A standby server of `warm` with the current image and `progress`.
fn standby(id: &str, created: &str, billing: &str, progress: &Progress) -> Server {
    let tags = vec![
        "karpenter.scaleway.com/cluster=test".to_string(),
        format!("karpenter.scaleway.com/nodeclass={CLASS}"),
        format!("karpenter.scaleway.com/standby={CLASS}"),
        format!("karpenter.scaleway.com/billing={billing}"),
        format!("karpenter.scaleway.com/standby-image={}", image()),
        "team=infra".to_string(),
    ];
    server(id, created, with_progress(&tags, progress))
}

/// The server of node `claim` of `warm`.
fn node_server(id: &str, claim: &str, billing: &str) -> Server {
    server(
        id,
        "2026-11-24T09:00:00Z",
        vec![
            "karpenter.scaleway.com/cluster=test".to_string(),
            format!("karpenter.sh/nodeclaim={claim}"),
            "karpenter.sh/nodepool=default".to_string(),
            format!("karpenter.scaleway.com/nodeclass={CLASS}"),
            format!("karpenter.scaleway.com/billing={billing}"),
            "team=infra".to_string(),
        ],
    )
}

fn rid() -> String {
    reservation_id(CLASS, OFFER, ZONE)
}

/// A NodeClaim of `warm` for EM-A115X-SSD allowing `capacity_types`, and
/// launched into `reservation` when given.
fn warm_claim(name: &str, capacity_types: &[&str], reservation: Option<&str>) -> Value {
    let mut c = claim(name, &[OFFER]);
    c["spec"]["nodeClassRef"]["name"] = json!(CLASS);
    let reqs = c["spec"]["requirements"].as_array_mut().unwrap();
    reqs[1] =
        json!({"key": "karpenter.sh/capacity-type", "operator": "In", "values": capacity_types});
    if let Some(id) = reservation {
        reqs.push(json!({"key": TAG_RESERVATION, "operator": "In", "values": [id]}));
    }
    c
}

/// A NodeClaim of `warm` whose node is `server_id`; Initialized when asked.
fn node_claim(name: &str, server_id: &str, initialized: bool) -> Value {
    let mut c = warm_claim(name, &["on-demand"], None);
    c["status"] = json!({"providerID": crate::provider::provider_id(ZONE, server_id)});
    if initialized {
        c["status"]["conditions"] = json!([{"type": "Initialized", "status": "True"}]);
    }
    c
}

/// The reserved offering of `offer` in `warm`'s catalog view.
fn reserved(w: &Warm, offer: &str) -> Option<Offering> {
    let snap = w.f.catalog.snapshot();
    snap.for_class(ClassKind::ElasticMetal, Some(CLASS))
        .iter()
        .find(|t| t.name == offer)?
        .offerings
        .iter()
        .find(|o| o.reservation.is_some())
        .cloned()
}

fn capacity(w: &Warm) -> (u32, bool) {
    let o = reserved(w, OFFER).expect("the pool is a reserved offering");
    (o.reservation.unwrap().capacity, o.available)
}

fn has(server: &Server, tag: &str) -> bool {
    server.tags.iter().any(|t| t == tag)
}

fn key() -> PoolKey {
    (CLASS.into(), OFFER.into(), ZONE.into())
}

// ---- the pass: ordering ---------------------------------------------------

#[tokio::test]
async fn the_pass_orders_what_the_pool_lacks_up_to_min() {
    let w = warm(vec![pool(OFFER, 2, 3, None)]);
    let report = w.provider.standby_pass(Utc::now()).await.unwrap();
    assert_eq!(report.ordered.len(), 2, "min 2, none yet: {report:?}");
    let servers = w.f.api.servers();
    assert_eq!(servers.len(), 2);
    for s in &servers {
        assert!(report.ordered.contains(&(key(), s.id.clone())));
        assert_eq!(
            s.offer_id,
            format!("{ZONE}-a115x"),
            "hourly: the hourly offer"
        );
        for tag in [
            "karpenter.scaleway.com/cluster=test".to_string(),
            format!("karpenter.scaleway.com/nodeclass={CLASS}"),
            format!("karpenter.scaleway.com/standby={CLASS}"),
            "karpenter.scaleway.com/billing=hourly".to_string(),
            format!("karpenter.scaleway.com/standby-image={}", image()),
            "team=infra".to_string(),
        ] {
            assert!(has(s, &tag), "missing tag {tag} in {:?}", s.tags);
        }
        assert!(tag_value(s, TAG_NODECLAIM).is_none());
    }
    {
        let started = w.engine.started.lock().unwrap();
        assert_eq!(started.len(), 2);
        for (spec, s) in started.iter().zip(&servers) {
            assert_eq!(spec.target, Target::Standby);
            assert_eq!(spec.server_id, s.id);
            assert_eq!(spec.node_claim_name, format!("{ZONE}/{}", s.id));
            assert_eq!(spec.rescue_private_key.expose(), "PRIVATE");
        }
    }
    assert!(
        w.f.installer.started.lock().unwrap().is_empty(),
        "standby installs run in the standby engine, not the nodes' one"
    );
    assert_eq!(w.events.reasons(), ["StandbyOrdered", "StandbyOrdered"]);
    // The engine runs them now (a real engine knows their phase).
    for s in &servers {
        w.engine
            .phases
            .lock()
            .unwrap()
            .insert(s.id.clone(), Phase::Ordered);
    }

    let report = w.provider.standby_pass(Utc::now()).await.unwrap();
    assert!(report.ordered.is_empty(), "min reached: {report:?}");
    assert!(report.resumed.is_empty(), "running installs are left alone");
    assert_eq!(w.f.api.count(Op::CreateServer), 2);
    // Two installing, none idle: listed, not available.
    assert_eq!(capacity(&w), (0, false));

    // One goes (a failed install deletes its server): exactly one more.
    w.f.api.set_status(&servers[0].id, ServerStatus::Deleting);
    let report = w.provider.standby_pass(Utc::now()).await.unwrap();
    assert_eq!(report.ordered.len(), 1, "{report:?}");
    assert_eq!(w.f.api.count(Op::CreateServer), 3);
    assert_eq!(w.engine.started.lock().unwrap().len(), 3);
    assert!(w.engine.resumed.lock().unwrap().is_empty());
}

#[tokio::test]
async fn an_unavailable_offering_orders_no_standby() {
    // Refused lately (the catalog's unavailable cache).
    let w = warm(vec![pool(OFFER, 1, 2, None)]);
    w.f.catalog.mark_unavailable(OFFER, ZONE);
    let report = w.provider.standby_pass(Utc::now()).await.unwrap();
    assert!(report.ordered.is_empty());
    assert_eq!(w.f.api.count(Op::CreateServer), 0);

    // Out of stock in the catalog.
    let w = warm(vec![pool(OFFER, 1, 2, None)]);
    let mut offers = sample_offers(ZONE);
    offers.iter_mut().find(|o| o.name == OFFER).unwrap().stock = "empty".into();
    w.f.api.set_offers(ZONE, offers.clone());
    w.f.catalog
        .set_base(instance_types(&BTreeMap::from([(ZONE.to_string(), offers)])).0);
    let report = w.provider.standby_pass(Utc::now()).await.unwrap();
    assert!(report.ordered.is_empty());
    assert_eq!(w.f.api.count(Op::CreateServer), 0);

    // In stock for the catalog, refused by the API: a Warning, and the
    // offering is unavailable for the next pass.
    let w = warm(vec![pool(OFFER, 1, 2, None)]);
    w.f.api
        .fail_next(Op::CreateServer, ApiError::OutOfStock(OFFER.into()));
    let report = w.provider.standby_pass(Utc::now()).await.unwrap();
    assert!(report.ordered.is_empty());
    assert_eq!(w.events.reasons(), ["StandbyOrderFailed"]);
    assert!(w.events.events.lock().unwrap()[0].1, "a Warning");
    assert!(w.f.catalog.refusal(OFFER, ZONE).is_some());
    w.provider.standby_pass(Utc::now()).await.unwrap();
    assert_eq!(w.f.api.count(Op::CreateServer), 1, "no order until the TTL");
    assert!(w.engine.started.lock().unwrap().is_empty());
}

// ---- the pass: what Karpenter sees ---------------------------------------

#[tokio::test]
async fn idle_standbys_are_a_reserved_offering_and_an_empty_pool_stays_listed() {
    let w = warm(vec![
        pool(OFFER, 2, 3, None),
        pool("EM-I215E-NVME", 0, 1, None),
    ]);
    let idle = idle_since("2026-11-24T09:12:00Z");
    w.f.api
        .insert_server(standby("a", "2026-11-24T09:00:00Z", "hourly", &idle));
    w.f.api
        .insert_server(standby("b", "2026-11-24T09:01:00Z", "hourly", &idle));
    let report = w
        .provider
        .standby_pass(t("2026-11-24T09:30:00Z"))
        .await
        .unwrap();
    assert!(report.ordered.is_empty() && report.released.is_empty());
    assert_eq!(report.idle[&key()], 2);

    let a115x = reserved(&w, OFFER).unwrap();
    let r = a115x.reservation.as_ref().unwrap();
    assert_eq!((r.id.as_str(), r.capacity), (rid().as_str(), 2));
    assert!(a115x.available);
    assert_eq!(a115x.zone, ZONE);
    assert!((a115x.price - 0.091 / 10_000_000.0).abs() < 1e-15);

    let i215e = reserved(&w, "EM-I215E-NVME").expect("an empty pool stays listed");
    assert_eq!(i215e.reservation.unwrap().capacity, 0);
    assert!(!i215e.available);

    // Another NodeClass's view has no reserved offering.
    let snap = w.f.catalog.snapshot();
    assert!(
        snap.for_class(ClassKind::ElasticMetal, Some("default"))
            .iter()
            .flat_map(|t| &t.offerings)
            .all(|o| o.reservation.is_none())
    );
}

#[tokio::test]
async fn an_idle_standby_with_an_older_image_is_written_again_not_offered() {
    let w = warm(vec![pool(OFFER, 1, 2, None)]);
    let mut old = standby(
        "a",
        "2026-11-24T09:00:00Z",
        "hourly",
        &idle_since("2026-11-24T09:12:00Z"),
    );
    for tag in &mut old.tags {
        if tag.starts_with(TAG_IMAGE) {
            *tag = format!("{TAG_IMAGE}=00000000000000ff");
        }
    }
    w.f.api.insert_server(old);
    let report = w
        .provider
        .standby_pass(t("2026-11-24T09:30:00Z"))
        .await
        .unwrap();
    assert_eq!(report.idle[&key()], 0, "not offered: {report:?}");
    assert_eq!(capacity(&w), (0, false));
    assert!(report.ordered.is_empty(), "it counts toward min");

    let s = w.f.api.server("a").unwrap();
    assert!(
        has(&s, "install.karpenter.scaleway.com/phase=ready"),
        "{:?}",
        s.tags
    );
    assert!(has(&s, &format!("{TAG_IMAGE}={}", image())));
    assert!(has(&s, &format!("{TAG_STANDBY}={CLASS}")));
    assert!(!has(&s, &format!("{TAG_RECYCLED}=true")), "never a node");
    assert_eq!(s.status, ServerStatus::Ready, "not deleted");
    {
        let resumed = w.engine.resumed.lock().unwrap();
        assert_eq!(resumed.len(), 1);
        assert_eq!(resumed[0].0.target, Target::Standby);
        assert_eq!(resumed[0].0.server_id, "a");
        assert_eq!(resumed[0].1.phase, Some(Phase::Ready));
    }
    assert!(w.events.reasons().contains(&"StandbyReimaged".to_string()));

    // Nothing to adopt meanwhile.
    let err = w
        .provider
        .create(warm_claim("warm-a", &["reserved"], Some(&rid())))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ProviderError::InsufficientCapacity(_)),
        "{err:?}"
    );
    assert!(tag_value(&w.f.api.server("a").unwrap(), TAG_NODECLAIM).is_none());
}

/// Found by the `standby_monthly` e2e under load: a standby install of this
/// process finished (tags: idle standby) after the pass had listed the
/// servers (tags: booting); the pass resumed it from the listing and the
/// server was installed, and made ready, twice. An install that ended here
/// is judged on the server as it is now.
#[tokio::test]
async fn an_install_that_ended_here_after_the_listing_is_not_run_again() {
    let w = warm(vec![pool(OFFER, 1, 2, None)]);
    let booting = Progress {
        phase: Some(Phase::Booting),
        phase_since: Some(t("2026-11-24T09:05:00Z")),
        disk: Some("nvme0n1".into()),
        image_attempts: 1,
        ..Progress::default()
    };
    // Now: idle in standby, the install of this process ended.
    w.f.api.insert_server(standby(
        "a",
        "2026-11-24T09:00:00Z",
        "hourly",
        &idle_since("2026-11-24T09:06:00Z"),
    ));
    w.engine
        .phases
        .lock()
        .unwrap()
        .insert("a".into(), Phase::Standby);
    // The listing was read while it was still booting.
    *w.stale_list.lock().unwrap() = Some(vec![standby(
        "a",
        "2026-11-24T09:00:00Z",
        "hourly",
        &booting,
    )]);
    let report = w
        .provider
        .standby_pass(t("2026-11-24T09:10:00Z"))
        .await
        .unwrap();
    assert!(report.resumed.is_empty(), "{report:?}");
    assert!(w.engine.resumed.lock().unwrap().is_empty());

    // Had it not ended (another process's wipe still under way), the
    // server as it is now still says so and the install is resumed.
    w.f.api
        .insert_server(standby("a", "2026-11-24T09:00:00Z", "hourly", &booting));
    *w.stale_list.lock().unwrap() = Some(vec![standby(
        "a",
        "2026-11-24T09:00:00Z",
        "hourly",
        &booting,
    )]);
    let report = w
        .provider
        .standby_pass(t("2026-11-24T09:10:00Z"))
        .await
        .unwrap();
    assert_eq!(report.resumed, ["a"]);
}

#[tokio::test]
async fn a_standby_install_no_engine_runs_is_resumed_from_its_tags() {
    let w = warm(vec![pool(OFFER, 1, 2, None)]);
    let imaging = Progress {
        phase: Some(Phase::Imaging),
        phase_since: Some(t("2026-11-24T09:05:00Z")),
        disk: Some("nvme0n1".into()),
        image_attempts: 1,
        ..Progress::default()
    };
    w.f.api
        .insert_server(standby("a", "2026-11-24T09:00:00Z", "hourly", &imaging));
    let report = w
        .provider
        .standby_pass(t("2026-11-24T09:10:00Z"))
        .await
        .unwrap();
    assert_eq!(report.resumed, ["a"]);
    assert!(
        report.ordered.is_empty(),
        "an installing server counts toward min"
    );
    {
        let resumed = w.engine.resumed.lock().unwrap();
        assert_eq!(resumed.len(), 1);
        let (spec, progress) = &resumed[0];
        assert_eq!(spec.target, Target::Standby);
        assert_eq!(spec.node_claim_name, format!("{ZONE}/a"));
        assert_eq!(progress, &imaging);
    }
    // Once the engine runs it, later passes leave it alone.
    w.engine
        .phases
        .lock()
        .unwrap()
        .insert("a".into(), Phase::Imaging);
    let report = w
        .provider
        .standby_pass(t("2026-11-24T09:11:00Z"))
        .await
        .unwrap();
    assert!(report.resumed.is_empty());
    assert_eq!(w.engine.resumed.lock().unwrap().len(), 1);
}

// ---- the pass: release ----------------------------------------------------

#[tokio::test]
async fn an_idle_hourly_standby_above_min_goes_at_the_end_of_its_paid_hour() {
    let w = warm(vec![pool(OFFER, 0, 2, None)]);
    // Ordered 09:10, idle from 09:20: its paid hour ends 10:10, released
    // 2 minutes before.
    w.f.api.insert_server(standby(
        "a",
        "2026-11-24T09:10:00Z",
        "hourly",
        &idle_since("2026-11-24T09:20:00Z"),
    ));
    for now in ["2026-11-24T09:21:00Z", "2026-11-24T10:07:59Z"] {
        let report = w.provider.standby_pass(t(now)).await.unwrap();
        assert!(report.released.is_empty(), "{now}: {report:?}");
    }
    assert_eq!(w.f.api.count(Op::DeleteServer), 0);
    let report = w
        .provider
        .standby_pass(t("2026-11-24T10:08:00Z"))
        .await
        .unwrap();
    assert_eq!(report.released.len(), 1);
    assert_eq!(report.released[0].0, "a");
    assert_eq!(w.f.api.server("a").unwrap().status, ServerStatus::Deleting);
    assert!(w.events.reasons().contains(&"StandbyReleased".to_string()));
    assert_eq!(capacity(&w), (0, false));
}

#[tokio::test]
async fn idle_hourly_keep_holds_an_idle_standby_into_later_hours() {
    let w = warm(vec![pool(OFFER, 0, 2, Some("30m"))]);
    // Idle from 09:50, kept 30 min: 10:20 is in the hour ending 11:10.
    w.f.api.insert_server(standby(
        "a",
        "2026-11-24T09:10:00Z",
        "hourly",
        &idle_since("2026-11-24T09:50:00Z"),
    ));
    let report = w
        .provider
        .standby_pass(t("2026-11-24T11:07:59Z"))
        .await
        .unwrap();
    assert!(report.released.is_empty(), "{report:?}");
    let report = w
        .provider
        .standby_pass(t("2026-11-24T11:08:00Z"))
        .await
        .unwrap();
    assert_eq!(report.released.len(), 1);
}

#[tokio::test]
async fn an_idle_monthly_standby_goes_only_when_its_730_hours_end() {
    let w = warm(vec![pool(OFFER, 0, 2, None)]);
    // 730 h after 2026-10-01T00:00Z is 2026-10-31T10:00Z.
    w.f.api.insert_server(standby(
        "m",
        "2026-10-01T00:00:00Z",
        "monthly",
        &idle_since("2026-10-01T00:15:00Z"),
    ));
    for now in [
        "2026-10-01T01:00:00Z",
        "2026-10-15T00:00:00Z",
        "2026-10-31T09:57:59Z",
    ] {
        let report = w.provider.standby_pass(t(now)).await.unwrap();
        assert!(report.released.is_empty(), "{now}: {report:?}");
    }
    assert_eq!(w.f.api.count(Op::DeleteServer), 0);
    let report = w
        .provider
        .standby_pass(t("2026-10-31T09:58:00Z"))
        .await
        .unwrap();
    assert_eq!(report.released.len(), 1);
    assert_eq!(w.f.api.server("m").unwrap().status, ServerStatus::Deleting);
}

#[tokio::test]
async fn a_pool_removed_from_the_spec_releases_its_hourly_standbys() {
    let w = warm(vec![pool(OFFER, 1, 2, None)]);
    let idle = idle_since("2026-11-24T09:12:00Z");
    w.f.api
        .insert_server(standby("h", "2026-11-24T09:00:00Z", "hourly", &idle));
    w.f.api
        .insert_server(standby("m", "2026-11-24T09:00:00Z", "monthly", &idle));
    let now = t("2026-11-24T09:30:00Z");
    let report = w.provider.standby_pass(now).await.unwrap();
    assert!(report.released.is_empty());
    assert_eq!(capacity(&w), (2, true));

    set_pools(&w.f, vec![pool("EM-I215E-NVME", 0, 1, None)]);
    let report = w.provider.standby_pass(now).await.unwrap();
    let released: Vec<&str> = report.released.iter().map(|r| r.0.as_str()).collect();
    assert_eq!(released, ["h"], "the monthly one waits for its month's end");
    assert_eq!(w.f.api.server("h").unwrap().status, ServerStatus::Deleting);
    assert_eq!(w.f.api.server("m").unwrap().status, ServerStatus::Ready);
    assert!(
        reserved(&w, OFFER).is_none(),
        "its reserved offering is gone"
    );
    assert!(report.ordered.is_empty());
}

#[tokio::test]
async fn a_monthly_standby_left_mid_install_by_a_deleted_nodeclass_goes_at_its_month_end() {
    // Its NodeClass is gone and no engine here runs its install (a restart):
    // nothing can finish it, so it must not wait to become idle.
    let w = warm(vec![pool(OFFER, 0, 1, None)]);
    let imaging = Progress {
        phase: Some(Phase::Imaging),
        ..Progress::default()
    };
    let mut orphan = standby("m", "2026-10-01T00:00:00Z", "monthly", &imaging);
    for tag in &mut orphan.tags {
        if tag.starts_with(TAG_STANDBY) || tag.starts_with("karpenter.scaleway.com/nodeclass=") {
            *tag = tag.replace(CLASS, "gone");
        }
    }
    w.f.api.insert_server(orphan);
    // While an engine here runs it, it finishes first.
    w.engine
        .phases
        .lock()
        .unwrap()
        .insert("m".into(), Phase::Imaging);
    let report = w
        .provider
        .standby_pass(t("2026-10-31T09:58:00Z"))
        .await
        .unwrap();
    assert!(report.released.is_empty(), "{report:?}");
    w.engine.phases.lock().unwrap().clear();
    let report = w
        .provider
        .standby_pass(t("2026-10-31T09:57:59Z"))
        .await
        .unwrap();
    assert!(
        report.released.is_empty() && report.resumed.is_empty(),
        "{report:?}"
    );
    let report = w
        .provider
        .standby_pass(t("2026-10-31T09:58:00Z"))
        .await
        .unwrap();
    assert_eq!(report.released.len(), 1, "{report:?}");
    assert_eq!(w.f.api.server("m").unwrap().status, ServerStatus::Deleting);
}

#[path = "flow_port_tests.rs"]
mod port;

#[path = "flow_adopt_tests.rs"]
mod adopt;

#[path = "flow_planner_tests.rs"]
mod planner_flow;
