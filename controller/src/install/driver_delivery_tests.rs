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
        settings: InstallSettings {
            poll_interval: Duration::from_secs(10),
            probe_interval: Duration::from_secs(2),
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

#[tokio::test(start_paused = true)]
async fn the_offers_last_deliveries_set_when_the_status_is_read() {
    let em = Arc::new(TimedDeliveries {
        inner: Arc::new(FakeElasticMetal::new()),
        ready_at: Mutex::default(),
        start: Instant::now(),
        reads: Mutex::default(),
    });
    let engine = engine(em.clone());

    // No history: one read every poll interval (10 s); the delivery at
    // 243 s is seen at 250 s.
    em.order("srv-1", Duration::from_secs(243));
    engine.start(install_of("srv-1"));
    until_delivered(&engine, "srv-1").await;
    let first: Vec<u64> = (1..=25).map(|i| i * 10).collect();
    assert_eq!(em.reads_of("srv-1")[..25], first[..]);

    // The next order at 300 s, delivered 245 s later. The history (after
    // 240 s, by 250 s) opens a window 230 s .. 260 s after the order: a read
    // every 30 s before it, the first at its opening, then every 2 s.
    tokio::time::sleep_until(em.start + Duration::from_secs(300)).await;
    em.order("srv-2", Duration::from_secs(245));
    engine.start(install_of("srv-2"));
    until_delivered(&engine, "srv-2").await;
    let reads: Vec<u64> = em.reads_of("srv-2").iter().map(|t| t - 300).collect();
    let expected: Vec<u64> = [30, 60, 90, 120, 150, 180, 210, 230]
        .into_iter()
        .chain((232..=246).step_by(2))
        .collect();
    // Noticed 1 s after the delivery instead of 5 s, in 16 reads instead
    // of 25.
    assert_eq!(reads[..expected.len()], expected[..], "{reads:?}");
}

#[tokio::test(start_paused = true)]
async fn a_delivery_later_than_every_one_seen_falls_back_to_the_poll_interval() {
    let em = Arc::new(TimedDeliveries {
        inner: Arc::new(FakeElasticMetal::new()),
        ready_at: Mutex::default(),
        start: Instant::now(),
        reads: Mutex::default(),
    });
    let engine = engine(em.clone());
    em.order("srv-1", Duration::from_secs(43));
    engine.start(install_of("srv-1"));
    until_delivered(&engine, "srv-1").await;
    // History: after 40 s, by 50 s -> window 30 s .. 60 s.
    tokio::time::sleep_until(em.start + Duration::from_secs(100)).await;
    em.order("srv-2", Duration::from_secs(95));
    engine.start(install_of("srv-2"));
    until_delivered(&engine, "srv-2").await;
    let reads: Vec<u64> = em.reads_of("srv-2").iter().map(|t| t - 100).collect();
    let expected: Vec<u64> = [30]
        .into_iter()
        .chain((32..=60).step_by(2))
        .chain((70..=100).step_by(10))
        .collect();
    assert_eq!(reads[..expected.len()], expected[..], "{reads:?}");
}
