//! The standby loop (leader only): one pass lists this cluster's servers,
//! resumes the standby installs this process does not run, keeps every pool
//! between its bounds (ordering, releasing), rebuilds the [`Book`] Create
//! takes from, and publishes each pool's idle servers to the catalog as a
//! reserved offering. Every pass starts from the API: nothing is lost when
//! the provider restarts or another replica takes over.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use tracing::{info, warn};

use super::plan::{self, Step};
use super::port::install_key;
use super::{
    Book, PoolKey, PoolSpec, StandbyServer, State, TAG_BILLING, TAG_IMAGE, TAG_STANDBY,
    billing_str, class_billing, image_tag, pools_of,
};
use crate::catalog::{Billing, ClassKind, ReservedPool, reservation_id};
use crate::install::{InstallSpec, Phase, Secret, Target};
use crate::metrics::standby_metrics;
use crate::nodeclass;
use crate::provider::{
    NodeClassRecord, Provider, TAG_NODECLAIM, TAG_NODECLASS, provider_id, tag, tag_value,
};
use crate::scaleway::{ApiError, CreateServerRequest, Server, ServerStatus};

/// What one pass did (for logs and tests).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct PassReport {
    /// Servers ordered: (pool key, server id).
    pub ordered: Vec<(PoolKey, String)>,
    /// Servers released: (server id, reason).
    pub released: Vec<(String, String)>,
    /// Standby installs resumed here.
    pub resumed: Vec<String>,
    /// Idle servers per pool after the pass.
    pub idle: BTreeMap<PoolKey, usize>,
}

/// Runs passes while this replica leads.
pub struct StandbyController {
    provider: Arc<Provider>,
    /// NodeClasses whose reservations were published last pass.
    published: Mutex<BTreeSet<String>>,
}

impl StandbyController {
    pub fn new(provider: Arc<Provider>) -> Self {
        StandbyController {
            provider,
            published: Mutex::default(),
        }
    }

    /// One pass; `Err` when the servers could not be listed (nothing done).
    pub async fn pass(&self) -> Result<PassReport, String> {
        // Paid periods count from `created_at`, on the API's clock.
        let report = self
            .provider
            .standby_pass(crate::scaleway::api_clock::now())
            .await?;
        let classes: BTreeSet<String> = report.idle.keys().map(|k| k.0.clone()).collect();
        let mut published = self.published.lock().unwrap_or_else(|p| p.into_inner());
        for gone in published.difference(&classes) {
            self.provider.catalog.set_reservations(gone, Vec::new());
        }
        *published = classes;
        Ok(report)
    }
}

/// Every `interval` while `leader()` holds, until `stop` resolves.
pub async fn run_standby(
    controller: StandbyController,
    interval: Duration,
    leader: Arc<dyn Fn() -> bool + Send + Sync>,
    stop: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(stop);
    // Every `soon` the loop looks whether a pass is due: the interval has
    // passed, a standby server just became idle, or a NodeClass changed what
    // its pools need (created, edited, Ready again, deleted): a user who
    // raises `min` sees the order at once. A replica that just won the lease
    // passes within `soon`; a pass that could not list the servers is tried
    // again after `retry`.
    let soon = interval.min(Duration::from_secs(1));
    let retry = interval.min(Duration::from_secs(5));
    let idle = controller
        .provider
        .standby
        .as_ref()
        .map(|sb| sb.port.idle_signal())
        .unwrap_or_default();
    let mut due = tokio::time::Instant::now();
    let mut seen: Option<u64> = None;
    loop {
        let mut woken = false;
        tokio::select! {
            _ = &mut stop => return,
            _ = tokio::time::sleep(soon) => {}
            _ = idle.notified() => woken = true,
        }
        if !leader() {
            if seen.is_some() {
                controller.provider.forget_demand();
            }
            seen = None;
            continue;
        }
        let classes = controller.provider.standby_fingerprint();
        let now = tokio::time::Instant::now();
        if !(woken || now >= due || seen != Some(classes)) {
            continue;
        }
        seen = Some(classes);
        match controller.pass().await {
            Ok(report) => {
                due = tokio::time::Instant::now() + interval;
                if !report.ordered.is_empty() || !report.released.is_empty() {
                    info!(
                        ordered = report.ordered.len(),
                        released = report.released.len(),
                        resumed = report.resumed.len(),
                        "standby pass"
                    );
                }
            }
            Err(error) => {
                due = tokio::time::Instant::now() + retry;
                warn!(%error, "standby pass skipped: the servers could not be listed");
            }
        }
    }
}

impl Provider {
    /// A digest of what the standby pools depend on in the NodeClasses (each
    /// one's name, readiness, billing, image and pools): a change calls for
    /// a pass now.
    pub(crate) fn standby_fingerprint(&self) -> u64 {
        use std::hash::{Hash, Hasher};
        let mut h = std::collections::hash_map::DefaultHasher::new();
        let mut classes = self.node_classes.list();
        classes.sort_by(|a, b| a.name.cmp(&b.name));
        for c in &classes {
            c.name.hash(&mut h);
            c.readiness.hash(&mut h);
            serde_json::to_string(&(&c.spec.standby, &c.spec.billing, &c.spec.image))
                .unwrap_or_default()
                .hash(&mut h);
        }
        h.finish()
    }

    /// One standby pass at `now` (see the module doc).
    pub(crate) async fn standby_pass(&self, now: DateTime<Utc>) -> Result<PassReport, String> {
        let Some(sb) = self.standby.clone() else {
            return Ok(PassReport::default());
        };
        let mut report = PassReport::default();
        let servers = self
            .list_zones_raw(&self.owned_filter())
            .await
            .map_err(|e| format!("listing servers: {e}"))?;
        let standbys: Vec<StandbyServer> = servers
            .iter()
            .filter(|s| s.status != ServerStatus::Deleting)
            .filter_map(StandbyServer::of)
            .collect();
        let claimed: HashSet<String> = servers
            .iter()
            .filter(|s| tag_value(s, TAG_NODECLAIM).is_some())
            .map(|s| s.id.clone())
            .collect();
        let classes: BTreeMap<String, NodeClassRecord> = self
            .node_classes
            .list()
            .into_iter()
            .map(|c| (c.name.clone(), c))
            .collect();
        let mut pools: BTreeMap<PoolKey, PoolSpec> = BTreeMap::new();
        for class in classes.values() {
            let (specs, errors) = pools_of(&class.spec);
            for error in errors {
                warn!(nodeclass = %class.name, %error, "standby pool left out");
            }
            let zones = Self::allowed_zones(&self.settings.zones, &class.spec.zones);
            for pool in specs {
                if !zones.contains(&pool.zone) {
                    warn!(nodeclass = %class.name, offer = %pool.offer, zone = %pool.zone,
                        "standby pool in a zone this NodeClass or provider does not serve; left out");
                    continue;
                }
                pools.insert(
                    (class.name.clone(), pool.offer.clone(), pool.zone.clone()),
                    pool,
                );
            }
        }
        standby_metrics().know_nodeclasses(pools.keys().map(|k| k.0.as_str()));

        // Standby installs no engine here runs: resumed where their tags say.
        for listed in &standbys {
            let here = sb.engine.phase(&listed.server.id);
            if listed.state == State::Idle
                || listed.progress.phase == Some(Phase::Failed)
                || here.is_some_and(|p| !p.is_terminal())
            {
                continue;
            }
            // An install of this process that ended after the listing was
            // read (its last tags are newer than the list): the server as it
            // is now decides, or the ended install would be run again
            // (found by the `standby_monthly` e2e under load: a standby
            // install finished, then resumed from the listing's `booting`,
            // and the server was made ready twice).
            let fresh;
            let s = if here.is_some() {
                match self
                    .api
                    .get_server(&listed.server.zone, &listed.server.id)
                    .await
                {
                    Ok(server) => match StandbyServer::of(&server) {
                        Some(now)
                            if now.state != State::Idle
                                && now.progress.phase != Some(Phase::Failed) =>
                        {
                            fresh = now;
                            &fresh
                        }
                        _ => continue,
                    },
                    Err(error) => {
                        warn!(server_id = %listed.server.id, %error,
                            "cannot read the server before resuming its standby install; next pass");
                        continue;
                    }
                }
            } else {
                listed
            };
            let Some(class) = classes.get(&s.class).filter(|c| c.ready()) else {
                continue;
            };
            match self.standby_spec(class, &s.server).await {
                Ok(spec) => {
                    sb.port.register(&spec.node_claim_name, &class.name);
                    info!(server_id = %s.server.id, nodeclass = %class.name,
                        phase = s.progress.phase.map_or("none", Phase::as_str), "resuming standby install");
                    sb.engine.resume(spec, s.progress.clone());
                    report.resumed.push(s.server.id.clone());
                }
                Err(error) => {
                    warn!(server_id = %s.server.id, %error, "cannot resume standby install")
                }
            }
        }

        // Idle servers installed with an image their NodeClass no longer
        // asks for are written again before anyone adopts them.
        let mut rewiped: HashSet<String> = HashSet::new();
        for s in &standbys {
            let Some(class) = classes.get(&s.class).filter(|c| c.ready()) else {
                continue;
            };
            let expected = self.expected_image(class, &s.server);
            if s.state != State::Idle
                || expected.is_none()
                || tag_value(&s.server, TAG_IMAGE).map(str::to_string) == expected
            {
                continue;
            }
            // Under the pool's lock and read again, as for a release: a
            // server a Create claimed since the listing is left alone.
            let key: PoolKey = (
                s.class.clone(),
                s.server.offer_name.clone(),
                s.server.zone.clone(),
            );
            let lock = sb.book.lock_of(&key);
            let _held = lock.lock().await;
            let Some(fresh) = self.still_standby(s).await else {
                continue;
            };
            info!(server_id = %s.server.id, nodeclass = %class.name,
                "idle standby server has another image than its NodeClass now; writing it again");
            match self.wipe(&fresh, class, false).await {
                Ok(_) => {
                    rewiped.insert(s.server.id.clone());
                    sb.events
                        .record(
                            &class.name,
                            false,
                            "StandbyReimaged",
                            format!(
                                "standby server {} ({}, {}) has an older image than NodeClass {} asks for; writing the new one (rescue + dd)",
                                s.server.id, s.server.offer_name, s.server.zone, class.name
                            ),
                        )
                        .await;
                }
                Err(error) => {
                    warn!(server_id = %s.server.id, %error, "cannot re-image standby server")
                }
            }
        }

        // Each pool between its bounds.
        let snapshot = self.catalog.snapshot();
        let mut members: HashMap<PoolKey, Vec<&StandbyServer>> = HashMap::new();
        for s in &standbys {
            members
                .entry((
                    s.class.clone(),
                    s.server.offer_name.clone(),
                    s.server.zone.clone(),
                ))
                .or_default()
                .push(s);
        }
        // The demand planner's targets in place of `min`.
        let pools = self
            .plan_demand(&pools, &classes, &servers, &members, &snapshot)
            .await;
        let mut releases: Vec<(String, &StandbyServer, String)> = Vec::new();
        // A standby install that failed deletes its server; one whose
        // deletion did not happen (a restart in between, the API refusing)
        // is deleted here, or it would count toward min for ever.
        for s in &standbys {
            if s.progress.phase == Some(Phase::Failed)
                && sb
                    .engine
                    .phase(&s.server.id)
                    .is_none_or(|p| p.is_terminal())
            {
                releases.push((s.class.clone(), s, "its standby install failed".to_string()));
            }
        }
        let failed: HashSet<String> = releases
            .iter()
            .map(|(_, s, _)| s.server.id.clone())
            .collect();
        for (key, pool) in &pools {
            let class = &classes[&key.0];
            let fallback = class_billing(&class.spec);
            let list: Vec<&StandbyServer> = members
                .get(key)
                .cloned()
                .unwrap_or_default()
                .into_iter()
                .filter(|s| !failed.contains(&s.server.id))
                .collect();
            let view: Vec<plan::Member> = list.iter().map(|s| s.member(fallback)).collect();
            let orderable = class.ready() && self.standby_orderable(class, pool, &snapshot);
            for step in plan::plan(pool, &view, orderable, &sb.periods, now) {
                match step {
                    Step::Order { reason } => {
                        match self.order_standby(class, pool, &reason).await {
                            Ok(id) => report.ordered.push((key.clone(), id)),
                            Err(error) => {
                                warn!(nodeclass = %class.name, offer = %pool.offer, zone = %pool.zone,
                                    %error, "standby order failed");
                                sb.events
                                    .record(
                                        &class.name,
                                        true,
                                        "StandbyOrderFailed",
                                        format!(
                                            "ordering a standby server of {} in {}: {error}",
                                            pool.offer, pool.zone
                                        ),
                                    )
                                    .await;
                            }
                        }
                    }
                    Step::Release { id, reason } => {
                        if let Some(s) = list.iter().find(|s| s.server.id == id) {
                            releases.push((key.0.clone(), s, reason));
                        }
                    }
                }
            }
        }
        // Standby servers no pool asks for any more.
        for (key, list) in &members {
            if pools.contains_key(key) {
                continue;
            }
            let fallback = classes
                .get(&key.0)
                .map_or(Billing::Hourly, |c| class_billing(&c.spec));
            // An install no engine here runs and that nothing can resume
            // (its NodeClass is gone or not Ready) will never end idle: it
            // goes as an idle one would, or a monthly one stays for ever.
            let resumable = classes.get(&key.0).is_some_and(|c| c.ready());
            let view: Vec<plan::Member> = list
                .iter()
                .filter(|s| !failed.contains(&s.server.id))
                .map(|s| {
                    let mut m = s.member(fallback);
                    let running = sb
                        .engine
                        .phase(&s.server.id)
                        .is_some_and(|p| !p.is_terminal());
                    if !resumable && !running {
                        m.state = State::Idle;
                    }
                    m
                })
                .collect();
            for step in plan::plan_orphaned(&view, &sb.periods, now) {
                if let Step::Release { id, reason } = step
                    && let Some(s) = list.iter().find(|s| s.server.id == id)
                {
                    releases.push((key.0.clone(), s, reason));
                }
            }
        }
        let mut released: HashSet<String> = HashSet::new();
        for (class, s, reason) in releases {
            // Under the pool's lock, as adoption claims, and read again: a
            // server a Create claimed since the listing is a node now and is
            // never released.
            let key: PoolKey = (
                s.class.clone(),
                s.server.offer_name.clone(),
                s.server.zone.clone(),
            );
            let lock = sb.book.lock_of(&key);
            let _held = lock.lock().await;
            if self.still_standby(s).await.is_none() {
                continue;
            }
            match self.api.delete_server(&s.server.zone, &s.server.id).await {
                Ok(_) => {
                    info!(server_id = %s.server.id, nodeclass = %class, %reason, "released standby server");
                    standby_metrics().count_release(&class);
                    sb.events
                        .record(
                            &class,
                            false,
                            "StandbyReleased",
                            format!(
                                "released standby server {} ({}, {}): {reason}",
                                s.server.id, s.server.offer_name, s.server.zone
                            ),
                        )
                        .await;
                    released.insert(s.server.id.clone());
                    report.released.push((s.server.id.clone(), reason));
                }
                Err(error) => {
                    warn!(server_id = %s.server.id, %error, "releasing standby server failed; next pass tries again")
                }
            }
        }

        // The book Create takes from, and the catalog's reserved offerings.
        let mut idle: HashMap<PoolKey, Vec<Server>> = HashMap::new();
        let mut counts: HashMap<PoolKey, usize> = HashMap::new();
        for (key, list) in &members {
            let kept: Vec<&&StandbyServer> = list
                .iter()
                .filter(|s| !released.contains(&s.server.id))
                .collect();
            counts.insert(key.clone(), kept.len());
            let mut ready: Vec<&&StandbyServer> = kept
                .into_iter()
                .filter(|s| {
                    s.state == State::Idle
                        && s.server.status == ServerStatus::Ready
                        && !rewiped.contains(&s.server.id)
                })
                .collect();
            ready.sort_by_key(|s| s.idle_since());
            idle.insert(
                key.clone(),
                ready.iter().map(|s| s.server.clone()).collect(),
            );
        }
        for (key, _) in &report.ordered {
            *counts.entry(key.clone()).or_default() += 1;
        }
        let listed: HashSet<String> = standbys.iter().map(|s| s.server.id.clone()).collect();
        sb.book.replace(idle, counts.clone(), &claimed, &listed);
        self.publish_reservations(&sb.book, &pools, &classes);
        for key in pools.keys() {
            report.idle.insert(key.clone(), sb.book.idle_count(key));
        }
        for class in classes.keys() {
            if !pools.keys().any(|k| &k.0 == class) {
                self.catalog.set_reservations(class, Vec::new());
            }
        }
        self.record_standby_metrics(&members, &released, &pools, &snapshot);
        Ok(report)
    }

    /// The server of `s` read again, when it is still an unclaimed standby
    /// server in the state the listing showed; `None` (logged) when a Create
    /// took it or anything else changed since, or it cannot be read. The
    /// caller holds the pool's lock (adoption claims under it).
    async fn still_standby(&self, s: &StandbyServer) -> Option<Server> {
        match self.api.get_server(&s.server.zone, &s.server.id).await {
            Ok(fresh)
                if fresh.status != ServerStatus::Deleting
                    && StandbyServer::of(&fresh).is_some_and(|f| f.state == s.state) =>
            {
                Some(fresh)
            }
            Ok(_) => {
                info!(server_id = %s.server.id, nodeclass = %s.class,
                    "standby server taken or changed since the listing; left alone this pass");
                None
            }
            Err(ApiError::NotFound(_)) => None,
            Err(error) => {
                warn!(server_id = %s.server.id, %error,
                    "cannot read standby server again; next pass tries again");
                None
            }
        }
    }

    /// Each NodeClass's pools as reserved offerings, with the book's idle counts.
    pub(super) fn publish_reservations(
        &self,
        book: &Book,
        pools: &BTreeMap<PoolKey, PoolSpec>,
        classes: &BTreeMap<String, NodeClassRecord>,
    ) {
        for class in classes.keys() {
            let list: Vec<ReservedPool> = pools
                .keys()
                .filter(|k| &k.0 == class)
                .map(|k| ReservedPool {
                    offer: k.1.clone(),
                    zone: k.2.clone(),
                    id: reservation_id(&k.0, &k.1, &k.2),
                    idle: book.idle_count(k) as u32,
                })
                .collect();
            if !list.is_empty() {
                self.catalog.set_reservations(class, list);
            }
        }
    }

    /// The pool's offering is in this NodeClass's catalog, available (stock,
    /// enabled, no refusal), with an offer id for its billing.
    fn standby_orderable(
        &self,
        class: &NodeClassRecord,
        pool: &PoolSpec,
        snapshot: &crate::catalog::Snapshot,
    ) -> bool {
        let billing = class_billing(&class.spec);
        snapshot
            .for_class(ClassKind::ElasticMetal, Some(&class.name))
            .iter()
            .filter(|t| t.name == pool.offer)
            .flat_map(|t| &t.offerings)
            .any(|o| {
                o.zone == pool.zone
                    && o.reservation.is_none()
                    && o.available
                    && o.order_offer_id(billing).is_some()
            })
            && self.catalog.refusal(&pool.offer, &pool.zone).is_none()
    }

    /// Orders one standby server for `pool` and starts its install.
    async fn order_standby(
        &self,
        class: &NodeClassRecord,
        pool: &PoolSpec,
        reason: &str,
    ) -> Result<String, String> {
        let sb = self.standby.as_ref().ok_or("standby is not served")?;
        let billing = class_billing(&class.spec);
        let snapshot = self.catalog.snapshot();
        let offer_id = snapshot
            .for_class(ClassKind::ElasticMetal, Some(&class.name))
            .iter()
            .filter(|t| t.name == pool.offer)
            .flat_map(|t| &t.offerings)
            .find(|o| o.zone == pool.zone && o.reservation.is_none())
            .and_then(|o| o.order_offer_id(billing).map(str::to_string))
            .ok_or_else(|| format!("{} is not sold in {}", pool.offer, pool.zone))?;
        let _turn = self
            .order_turn(&pool.offer, &pool.zone)
            .await
            .map_err(|e| e.to_string())?;
        let mut tags = vec![
            self.cluster_tag(),
            tag(TAG_NODECLASS, &class.name),
            tag(TAG_STANDBY, &class.name),
            tag(TAG_BILLING, billing_str(billing)),
        ];
        if let Some(image) = snapshot
            .default
            .iter()
            .find(|t| t.name == pool.offer)
            .and_then(|t| image_tag(&class.spec, &t.arch))
        {
            tags.push(tag(TAG_IMAGE, &image));
        }
        tags.extend(class.spec.tags.iter().cloned());
        let name = format!(
            "standby-{}-{}",
            class.name,
            uuid::Uuid::new_v4()
                .simple()
                .to_string()
                .get(..8)
                .unwrap_or("0")
        );
        let req = CreateServerRequest {
            offer_id,
            project_id: self.settings.project_id.clone(),
            name: name.clone(),
            description: format!(
                "Karpenter standby server of NodeClass {} (cluster {})",
                class.name, self.settings.cluster_name
            ),
            tags,
            install: None,
        };
        let server = match self.api.create_server(&pool.zone, &req).await {
            Ok(server) => server,
            Err(e) => {
                return Err(self
                    .order_refused(e, &name, &pool.offer, &pool.zone)
                    .to_string());
            }
        };
        info!(server_id = %server.id, nodeclass = %class.name, offer = %pool.offer, zone = %pool.zone,
            billing = billing_str(billing), %reason, "ordered standby server");
        standby_metrics().count_order(&class.name);
        sb.events
            .record(
                &class.name,
                false,
                "StandbyOrdered",
                format!(
                    "ordered standby server {} ({}, {}, billed {}): {reason}",
                    server.id,
                    pool.offer,
                    pool.zone,
                    billing_str(billing)
                ),
            )
            .await;
        match self.standby_spec(class, &server).await {
            Ok(spec) => {
                sb.port.register(&spec.node_claim_name, &class.name);
                sb.engine.start(spec);
            }
            // The next pass resumes it once the NodeClass can be read.
            Err(error) => {
                warn!(server_id = %server.id, %error, "cannot start the standby install yet")
            }
        }
        Ok(server.id)
    }

    /// The install of a standby server: the NodeClass's image and disk, the
    /// rescue key; no node, no config.
    pub(super) async fn standby_spec(
        &self,
        class: &NodeClassRecord,
        server: &Server,
    ) -> Result<InstallSpec, String> {
        let snapshot = self.catalog.snapshot();
        let it = snapshot
            .default
            .iter()
            .find(|t| t.name == server.offer_name)
            .ok_or_else(|| format!("offer {} is not in the catalog", server.offer_name))?;
        let arch = it.arch.clone();
        let image_url = nodeclass::resolve_image_url(&class.spec.image, &arch)?;
        let rescue_private_key = self
            .secret(
                &class.spec.rescue_ssh_key.private_key_secret_ref,
                "rescue SSH private key",
            )
            .await
            .map_err(|e| e.to_string())?;
        Ok(InstallSpec {
            zone: server.zone.clone(),
            server_id: server.id.clone(),
            provider_id: provider_id(&server.zone, &server.id),
            node_name: server.name.clone(),
            node_claim_name: install_key(&server.zone, &server.id),
            labels: BTreeMap::new(),
            taints: Vec::new(),
            startup_taints: Vec::new(),
            image_sha256: class
                .spec
                .image
                .sha256
                .as_ref()
                .and_then(|m| m.get(&arch).cloned()),
            arch,
            image_url,
            install_disk: class
                .spec
                .install_disk
                .as_ref()
                .and_then(|d| d.name.clone()),
            rescue_ssh_key_id: class.spec.rescue_ssh_key.iam_key_id.clone(),
            rescue_private_key,
            base_machine_config: Secret::default(),
            machine_config_patches: Vec::new(),
            offer_name: server.offer_name.clone(),
            bootstrap_token: Secret::default(),
            kubelet_reservations: None,
            target: Target::Standby,
            // Attached while staged, so that an adoption stays fast.
            private_network: super::super::create::class_network(class, &server.zone)
                .map_err(|e| e.to_string())?,
        })
    }

    fn record_standby_metrics(
        &self,
        members: &HashMap<PoolKey, Vec<&StandbyServer>>,
        released: &HashSet<String>,
        pools: &BTreeMap<PoolKey, PoolSpec>,
        snapshot: &crate::catalog::Snapshot,
    ) {
        let mut by_state: BTreeMap<(String, String, String, String), usize> = BTreeMap::new();
        for key in pools.keys() {
            for state in State::ALL {
                by_state.insert(
                    (
                        key.0.clone(),
                        key.1.clone(),
                        key.2.clone(),
                        state.as_str().into(),
                    ),
                    0,
                );
            }
        }
        let mut idle_cost: BTreeMap<String, f64> = BTreeMap::new();
        for class in pools.keys().map(|k| k.0.clone()) {
            idle_cost.insert(class, 0.0);
        }
        for (key, list) in members {
            for s in list.iter().filter(|s| !released.contains(&s.server.id)) {
                *by_state
                    .entry((
                        key.0.clone(),
                        key.1.clone(),
                        key.2.clone(),
                        s.state.as_str().into(),
                    ))
                    .or_default() += 1;
                if s.state == State::Idle {
                    let price = hourly_cost(snapshot, &s.server);
                    *idle_cost.entry(key.0.clone()).or_default() += price;
                }
            }
        }
        standby_metrics().set_servers(by_state);
        standby_metrics().set_idle_cost(idle_cost);
    }
}

/// What a server costs per hour under its billing (monthly: the monthly
/// price over 730 h), from the catalog; 0 when the catalog does not know it.
pub(super) fn hourly_cost(snapshot: &crate::catalog::Snapshot, server: &Server) -> f64 {
    let billing = match tag_value(server, TAG_BILLING) {
        Some("monthly") => Billing::Monthly,
        _ => Billing::Hourly,
    };
    snapshot
        .default
        .iter()
        .find(|t| t.name == server.offer_name)
        .and_then(|t| t.offerings.iter().find(|o| o.zone == server.zone))
        .map(|o| match (billing, &o.monthly) {
            (Billing::Monthly, Some(m)) => m.price_per_month / crate::catalog::HOURS_PER_MONTH,
            _ => o.hourly_price,
        })
        .unwrap_or(0.0)
}
