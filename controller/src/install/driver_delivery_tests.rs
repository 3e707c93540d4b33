//! Status reads during delivery on paused time: the first delivery of an
//! offer is read every poll interval; the next ones, knowing when the first
//! ended, are read sparsely before that and fast around it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use tokio::time::Instant;

use crate::install::driver_fakes::*;
use crate::install::tests_support::spec;
use crate::install::*;
use crate::scaleway::fake::FakeElasticMetal;
use crate::scaleway::{
    ApiError, BootType, CreateServerRequest, ElasticMetal, Offer, Server, ServerFilter, SshKey,
    SubscriptionPeriod,
};

/// Elastic Metal that delivers each server at a set instant and logs every
/// status read (server id, seconds since the test began).
struct TimedDeliveries {
    inner: Arc<FakeElasticMetal>,
    ready_at: Mutex<HashMap<String, Instant>>,
    start: Instant,
    reads: Mutex<Vec<(String, u64)>>,
    /// The API's pace has no spare turn: reads made only if idle are not made.
    busy: bool,
}

impl TimedDeliveries {
    fn order(&self, id: &str, delivered_after: Duration) {
        let server = Server {
            id: id.into(),
            ..delivering_server()
        };
        self.inner.insert_server(server);
        self.ready_at
            .lock()
            .unwrap()
            .insert(id.into(), Instant::now() + delivered_after);
    }

    /// Seconds (since the test began) of the status reads of `id`.
    fn reads_of(&self, id: &str) -> Vec<u64> {
        let reads = self.reads.lock().unwrap();
        reads
            .iter()
            .filter(|(s, _)| s == id)
            .map(|(_, t)| *t)
            .collect()
    }
}

#[async_trait]
impl ElasticMetal for TimedDeliveries {
    async fn list_offers(
        &self,
        zone: &str,
        period: SubscriptionPeriod,
    ) -> Result<Vec<Offer>, ApiError> {
        self.inner.list_offers(zone, period).await
    }

    async fn create_server(
        &self,
        zone: &str,
        req: &CreateServerRequest,
    ) -> Result<Server, ApiError> {
        self.inner.create_server(zone, req).await
    }

    async fn get_server(&self, zone: &str, id: &str) -> Result<Server, ApiError> {
        let due = self.ready_at.lock().unwrap().get(id).copied();
        if due.is_some_and(|t| Instant::now() >= t) {
            self.ready_at.lock().unwrap().remove(id);
            self.inner.deliver(id);
        }
        let at = (Instant::now() - self.start).as_secs();
        self.reads.lock().unwrap().push((id.to_string(), at));
        self.inner.get_server(zone, id).await
    }

    async fn get_server_if_idle(&self, zone: &str, id: &str) -> Result<Option<Server>, ApiError> {
        if self.busy {
            return Ok(None);
        }
        self.get_server(zone, id).await.map(Some)
    }

    async fn list_servers(
        &self,
        zone: &str,
        filter: &ServerFilter,
    ) -> Result<Vec<Server>, ApiError> {
        self.inner.list_servers(zone, filter).await
    }

    async fn delete_server(&self, zone: &str, id: &str) -> Result<Server, ApiError> {
        self.inner.delete_server(zone, id).await
    }

    async fn update_server_tags(
        &self,

        zone: &str,

        id: &str,

        tags: &[String],
    ) -> Result<Server, ApiError> {
        self.inner.update_server_tags(zone, id, tags).await
    }

    async fn reboot_server(
        &self,
        zone: &str,
        id: &str,
        boot_type: BootType,
        ssh_key_ids: &[String],
    ) -> Result<Server, ApiError> {
        self.inner
            .reboot_server(zone, id, boot_type, ssh_key_ids)
            .await
    }

    async fn list_ssh_keys(&self, project_id: &str) -> Result<Vec<SshKey>, ApiError> {
        self.inner.list_ssh_keys(project_id).await
    }
}

fn engine(em: Arc<TimedDeliveries>) -> InstallEngine {
    engine_paced(em, None)
}

fn engine_paced(em: Arc<TimedDeliveries>, status_read_spacing: Option<Duration>) -> InstallEngine {
    let talos = Arc::new(FakeTalos::default());
    *talos.em.lock().unwrap() = Some(em.inner.clone());
    InstallEngine::new(EngineDeps {
        elastic_metal: em,
        capacity: Arc::new(FakeCapacity::default()),
        rescue: Arc::new(FakeRescue::reachable()),
        talos: talos.clone(),
        nodes: Arc::new(FakeNodes {
            talos,
            ..Default::default()
        }),
        networks: None,
        settings: InstallSettings {
            poll_interval: Duration::from_secs(10),
            probe_interval: Duration::from_secs(2),
            status_read_spacing,
            ..InstallSettings::default()
        },
    })
}

fn install_of(id: &str) -> InstallSpec {
    InstallSpec {
        server_id: id.into(),
        ..spec(URL)
    }
}

/// Lets paused time run until `id`'s install left delivery.
async fn until_delivered(engine: &InstallEngine, id: &str) {
    for _ in 0..3600 {
        if !matches!(
            engine.phase(id),
            None | Some(Phase::Ordered | Phase::Delivering)
        ) {
            return;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    panic!("{id} never left delivery: {:?}", engine.phase(id));
}

fn world() -> (Arc<TimedDeliveries>, InstallEngine) {
    world_with(false)
}

fn world_with(busy: bool) -> (Arc<TimedDeliveries>, InstallEngine) {
    let em = Arc::new(TimedDeliveries {
        inner: Arc::new(FakeElasticMetal::new()),
        ready_at: Mutex::default(),
        start: Instant::now(),
        reads: Mutex::default(),
        busy,
    });
    let engine = engine(em.clone());
    (em, engine)
}

/// The first delivery, without history: one read every poll interval (10 s);
/// delivered at 243 s, seen at 250 s. History: after 240 s, by 250 s, so a
/// window 230 s .. 260 s after the order; one read every 10 s until the
/// mean (245 s) would be 24.5 reads, 4 go before the window (every 60 s, the
/// last at its opening), which leaves one every 0.73 s: 1 s, the fastest.
async fn first_delivery(em: &TimedDeliveries, engine: &InstallEngine) {
    em.order("srv-1", Duration::from_secs(243));
    engine.start(install_of("srv-1"));
    until_delivered(engine, "srv-1").await;
    let plain: Vec<u64> = (1..=25).map(|i| i * 10).collect();
    assert_eq!(em.reads_of("srv-1")[..25], plain[..]);
}

/// The reads of `id` ordered at 300 s, relative to its order.
async fn second_delivery(em: &TimedDeliveries, engine: &InstallEngine, after: u64) -> Vec<u64> {
    tokio::time::sleep_until(em.start + Duration::from_secs(300)).await;
    em.order("srv-2", Duration::from_secs(after));
    engine.start(install_of("srv-2"));
    until_delivered(engine, "srv-2").await;
    em.reads_of("srv-2").iter().map(|t| t - 300).collect()
}

#[tokio::test(start_paused = true)]
async fn the_offers_last_deliveries_set_when_the_status_is_read() {
    let (em, engine) = world();
    first_delivery(&em, &engine).await;
    // Delivered 245 s after its order: seen at once, in 19 reads instead of
    // 25, instead of 5 s late.
    let reads = second_delivery(&em, &engine, 245).await;
    let expected: Vec<u64> = [60, 120, 180, 230].into_iter().chain(231..=245).collect();
    assert_eq!(reads[..expected.len()], expected[..], "{reads:?}");
}

#[tokio::test(start_paused = true)]
async fn a_delivery_later_than_every_one_seen_falls_back_to_the_poll_interval() {
    let (em, engine) = world();
    first_delivery(&em, &engine).await;
    // Fast reads until the one delivery seen (245 s on average); waited
    // longer than it, the plain cadence again.
    let reads = second_delivery(&em, &engine, 275).await;
    let expected: Vec<u64> = [60, 120, 180, 230]
        .into_iter()
        .chain(231..=245)
        .chain([255, 265, 275])
        .collect();
    assert_eq!(reads[..expected.len()], expected[..], "{reads:?}");
}

#[tokio::test(start_paused = true)]
async fn window_reads_use_only_spare_turns_of_the_api() {
    // Every fast read finds the pace busy: none is made, and the first read
    // after the window (at its closing, 260 s) sees the delivery. The reads
    // before the window are made whatever the load.
    let (em, engine) = world_with(true);
    first_delivery(&em, &engine).await;
    let reads = second_delivery(&em, &engine, 245).await;
    assert_eq!(reads[..4], [60, 120, 180, 260], "{reads:?}");
}

#[tokio::test(start_paused = true)]
async fn window_reads_share_what_the_clients_pace_leaves() {
    // The client reads the status at most every 2 s (0.5 a second): the
    // window's fast reads get 80 % of it, one every 2.5 s instead of 1 s.
    let em = Arc::new(TimedDeliveries {
        inner: Arc::new(FakeElasticMetal::new()),
        ready_at: Mutex::default(),
        start: Instant::now(),
        reads: Mutex::default(),
        busy: false,
    });
    let engine = engine_paced(em.clone(), Some(Duration::from_secs(2)));
    first_delivery(&em, &engine).await;
    let reads = second_delivery(&em, &engine, 245).await;
    assert_eq!(
        reads[..10],
        [60, 120, 180, 230, 232, 235, 237, 240, 242, 245],
        "{reads:?}"
    );
}
