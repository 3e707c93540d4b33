//! Shared state of one simulator instance and the background ticker that fires
//! transitions on time (so the event stream moves even when nobody polls).

use std::collections::HashSet;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Instant;

use axum::http::HeaderMap;
use chrono::Utc;
use tokio::sync::Notify;

use crate::catalog::{Catalog, is_uuid};
use crate::clock::{SimClock, SimTime};
use crate::counters::Counters;
use crate::error::ApiError;
use crate::faults::Faults;
use crate::instance::{InstanceCatalog, InstanceTimings};
use crate::pn::{PnSpec, PnTimings, PnWorld};
use crate::ratelimit::RateLimiter;
use crate::sim::{IpRange, Timings, World, WorldConfig};
use crate::timings::TimingOverrides;

/// Everything a simulator instance is built from (the binary fills it from flags).
#[derive(Debug, Clone)]
pub struct Config {
    /// Real seconds per simulated second (`0.01`: everything 100x faster).
    pub time_scale: f64,
    pub seed: u64,
    /// Accepted `X-Auth-Token` values.
    pub secret_keys: Vec<String>,
    pub project_id: String,
    /// Organization owning the project; `None`: the project id (as for an
    /// organization's default project).
    pub organization_id: Option<String>,
    pub ip_range: IpRange,
    /// Calls per second per endpoint before answering 429; `None`: no limit.
    pub rate_limit: Option<f64>,
    pub catalog: Catalog,
    pub instance_catalog: InstanceCatalog,
    /// Where the simulated clock starts; `None`: the real time at start-up.
    pub sim_start: Option<SimTime>,
    /// Durations replacing the catalogs' (`--timings real`, `--boot-seconds`...);
    /// none by default.
    pub timings: TimingOverrides,
    /// Private Networks present from the start and after every reset
    /// (`--private-networks FILE`); none by default.
    pub private_networks: Vec<PnSpec>,
    /// Attach, detach and private NIC sync durations.
    pub pn_timings: PnTimings,
}

pub const DEFAULT_SECRET_KEY: &str = "11111111-1111-4111-8111-111111111111";
pub const DEFAULT_PROJECT_ID: &str = "22222222-2222-4222-8222-222222222222";

impl Default for Config {
    fn default() -> Self {
        Self {
            time_scale: 1.0,
            seed: 0,
            secret_keys: vec![DEFAULT_SECRET_KEY.into()],
            project_id: DEFAULT_PROJECT_ID.into(),
            organization_id: None,
            ip_range: "127.77.0.0/16".parse().expect("valid default range"),
            rate_limit: None,
            catalog: Catalog::seeded(),
            instance_catalog: InstanceCatalog::seeded(),
            sim_start: None,
            timings: TimingOverrides::default(),
            private_networks: Vec::new(),
            pn_timings: PnTimings::default(),
        }
    }
}

pub struct Shared {
    pub clock: SimClock,
    world: Mutex<World>,
    pub counters: Mutex<Counters>,
    pub faults: Mutex<Faults>,
    /// `None`: no limit. Set at start (`--rate-limit`) and changed by
    /// `PUT /_emsim/rate-limit`.
    limiter: Mutex<Option<RateLimiter>>,
    secret_keys: HashSet<String>,
    wake: Arc<Notify>,
}

#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl std::ops::Deref for AppState {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.0
    }
}

impl AppState {
    pub fn new(config: Config) -> anyhow::Result<Self> {
        if !(config.time_scale.is_finite() && config.time_scale > 0.0) {
            anyhow::bail!("time scale must be a positive number");
        }
        for (what, id) in [
            ("project", Some(&config.project_id)),
            ("organization", config.organization_id.as_ref()),
        ] {
            if let Some(id) = id
                && !is_uuid(id)
            {
                anyhow::bail!("the {what} id must be a lowercase UUID, got {id:?}");
            }
        }
        if config.secret_keys.is_empty() {
            anyhow::bail!("at least one secret key is needed");
        }
        if let Some(rate) = config.rate_limit {
            check_rate_limit(rate).map_err(anyhow::Error::msg)?;
        }
        let wake = Arc::new(Notify::new());
        let mut catalog = config.catalog;
        catalog.apply(&config.timings);
        let sim_start = config.sim_start.unwrap_or_else(Utc::now);
        for (what, s) in [
            ("attach", config.pn_timings.attach),
            ("detach", config.pn_timings.detach),
            ("private NIC sync", config.pn_timings.nic_sync),
        ] {
            if !(s.is_finite() && s >= 0.0) {
                anyhow::bail!("the Private Network {what} time must be a non-negative number");
            }
        }
        let organization_id = config
            .organization_id
            .clone()
            .unwrap_or_else(|| config.project_id.clone());
        let pn = PnWorld::new(
            config.private_networks,
            config.seed,
            &organization_id,
            &config.project_id,
            config.pn_timings,
            sim_start,
            Some(config.ip_range.cidr()),
        )?;
        let mut world = World::with_instances(
            WorldConfig {
                seed: config.seed,
                organization_id: config
                    .organization_id
                    .clone()
                    .unwrap_or_else(|| config.project_id.clone()),
                project_id: config.project_id.clone(),
                ip_range: config.ip_range,
                timings: Timings::default(),
                instance_timings: InstanceTimings::default().with_boot(config.timings.vm_boot),
                rescue_user: "rescue".into(),
            },
            catalog,
            config.instance_catalog,
            wake.clone(),
        );
        world.install_private_networks(pn);
        Ok(Self(Arc::new(Shared {
            clock: SimClock::new(config.time_scale, sim_start),
            world: Mutex::new(world),
            counters: Mutex::default(),
            faults: Mutex::new(Faults::new(config.seed)),
            limiter: Mutex::new(config.rate_limit.map(RateLimiter::new)),
            secret_keys: config.secret_keys.into_iter().collect(),
            wake,
        })))
    }

    /// The world and the faults (for orders), in the one lock order used
    /// everywhere: world first.
    pub fn world_and_faults(&self) -> (MutexGuard<'_, World>, MutexGuard<'_, Faults>, SimTime) {
        let (world, now) = self.world();
        (world, self.faults.lock().expect("faults lock"), now)
    }

    /// The world brought up to the simulated present, and that present.
    pub fn world(&self) -> (MutexGuard<'_, World>, SimTime) {
        let mut world = self.world.lock().expect("world lock");
        let now = self.clock.now();
        world.advance(now);
        (world, now)
    }

    /// Fires transitions when they are due. Runs until the runtime stops.
    pub fn spawn_ticker(&self) -> tokio::task::JoinHandle<()> {
        let state = self.clone();
        tokio::spawn(async move {
            loop {
                let next = state.world().0.next_deadline();
                match next {
                    Some(at) => {
                        let when = tokio::time::Instant::from_std(state.clock.real_instant(at));
                        tokio::select! {
                            _ = tokio::time::sleep_until(when) => {}
                            _ = state.wake.notified() => {}
                        }
                    }
                    None => state.wake.notified().await,
                }
            }
        })
    }

    /// Wakes the ticker, e.g. after the clock jumped.
    pub fn wake(&self) {
        self.wake.notify_one();
    }

    /// Checks the secret key. Never logs it.
    pub fn authenticate(&self, headers: &HeaderMap) -> Result<(), ApiError> {
        let token = headers
            .get("x-auth-token")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .trim();
        if !token.is_empty() && self.secret_keys.contains(token) {
            return Ok(());
        }
        let reason = if is_uuid(token) {
            "not_found"
        } else {
            "invalid_argument"
        };
        Err(ApiError::DeniedAuthentication { reason })
    }

    pub fn rate_limit(&self, endpoint: &str) -> Result<(), ApiError> {
        let mut limiter = self.limiter.lock().expect("limiter lock");
        let Some(limiter) = limiter.as_mut() else {
            return Ok(());
        };
        if limiter.allow(endpoint, Instant::now()) {
            Ok(())
        } else {
            Err(ApiError::TooManyRequests {
                quota: limiter.quota(),
                window_seconds: 1,
            })
        }
    }

    /// Back to the state at start-up (clock excepted): world, counters, faults
    /// and rate-limit buckets.
    pub fn reset(&self) {
        let (mut world, now) = self.world();
        world.reset(now);
        drop(world);
        *self.counters.lock().expect("counters lock") = Counters::default();
        self.faults.lock().expect("faults lock").reset();
        if let Some(limiter) = self.limiter.lock().expect("limiter lock").as_mut() {
            limiter.clear();
        }
        self.wake();
    }

    /// Calls per second allowed per endpoint (`None`: no limit).
    pub fn rate_limit_per_second(&self) -> Option<f64> {
        self.limiter
            .lock()
            .expect("limiter lock")
            .as_ref()
            .map(RateLimiter::per_second)
    }

    /// Turns the per-endpoint limit on (with full buckets), changes it, or
    /// turns it off (`None`), from now on: a benchmark sets it once the
    /// stack is up, so that its own setup calls are not throttled.
    pub fn set_rate_limit(&self, per_second: Option<f64>) -> Result<(), String> {
        if let Some(rate) = per_second {
            check_rate_limit(rate)?;
        }
        *self.limiter.lock().expect("limiter lock") = per_second.map(RateLimiter::new);
        Ok(())
    }
}

fn check_rate_limit(rate: f64) -> Result<(), String> {
    if rate.is_finite() && rate > 0.0 {
        Ok(())
    } else {
        Err("rate limit must be a positive number".to_string())
    }
}
