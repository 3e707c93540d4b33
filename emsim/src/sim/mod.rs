//! The simulated world: servers, IAM SSH keys, stock and quotas, and the event
//! stream. Every operation takes the simulated `now`; `advance` applies the
//! transitions whose deadline has passed, in deadline order, so that API reads and
//! the background ticker see the same history.

mod ips;
mod server;
mod ssh_keys;
mod world_extras;
mod world_pn;

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::Serialize;
use tokio::sync::{Notify, broadcast};

pub use ips::{IpPool, IpRange};
pub use server::{
    Action, ActionRecord, BootRecord, BootType, INSTALL_COMPLETES_AFTER, INSTALL_STARTS_AFTER,
    InstallRecord, InstallStatus, Pending, Request, ServerRecord, Status,
};

use crate::catalog::{Catalog, CatalogOffer, Stock, extras};
use crate::clock::{SimTime, format_time, secs};
use crate::error::ApiError;
use crate::events::{Cause, Event, EventKind};
use crate::faults::{Faults, Order};
use crate::instance::{InstanceCatalog, InstanceTimings, InstanceWorld};
use crate::model::{self, RescueServer};
use crate::pn::{PnTimings, PnWorld};
use crate::timings::DEFAULT_BOOT;

/// Simulated durations of the quick power transitions, in seconds. From the
/// recordings: stop < 15 s, delete ~5 s. Boots and deliveries are the
/// offer's (`CatalogOffer::boot`, `delivery`).
#[derive(Debug, Clone, Copy)]
pub struct Timings {
    pub stop: f64,
    pub delete: f64,
}

impl Default for Timings {
    fn default() -> Self {
        Self {
            stop: 8.0,
            delete: 5.0,
        }
    }
}

#[derive(Debug, Clone)]
pub struct WorldConfig {
    pub seed: u64,
    /// Project of the orders and keys that name none.
    pub project_id: String,
    pub organization_id: String,
    pub ip_range: IpRange,
    pub timings: Timings,
    pub instance_timings: InstanceTimings,
    pub rescue_user: String,
}

/// What `POST /servers` asks for, validated by the handler.
#[derive(Debug, Clone)]
pub struct NewServer {
    pub offer_id: String,
    pub project_id: Option<String>,
    pub name: String,
    pub description: String,
    pub tags: Vec<String>,
    pub protected: bool,
    pub user_data: Option<String>,
}

/// `PATCH /servers/{id}`: absent fields stay as they are.
#[derive(Debug, Clone, Default)]
pub struct ServerPatch {
    pub name: Option<String>,
    pub description: Option<String>,
    pub tags: Option<Vec<String>>,
    pub protected: Option<bool>,
    pub user_data: Option<String>,
}

/// `POST /servers/{id}/install`, validated by the handler.
#[derive(Debug, Clone)]
pub struct InstallRequest {
    pub os_id: String,
    pub hostname: String,
    pub ssh_key_ids: Vec<String>,
    pub user: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct SshKeyRecord {
    pub id: String,
    pub name: String,
    pub public_key: String,
    pub fingerprint: String,
    pub created_at: SimTime,
    pub updated_at: SimTime,
    pub project_id: String,
    pub organization_id: String,
    pub disabled: bool,
}

impl SshKeyRecord {
    pub fn to_wire(&self) -> model::SshKey {
        model::SshKey {
            id: self.id.clone(),
            name: self.name.clone(),
            public_key: self.public_key.clone(),
            fingerprint: self.fingerprint.clone(),
            created_at: format_time(self.created_at),
            updated_at: format_time(self.updated_at),
            organization_id: self.organization_id.clone(),
            project_id: self.project_id.clone(),
            disabled: self.disabled,
        }
    }
}

pub struct World {
    config: WorldConfig,
    catalog: Catalog,
    /// Live stock per offer id (offer ids are unique across zones).
    stock: HashMap<String, Stock>,
    quotas: HashMap<String, Option<u64>>,
    servers: BTreeMap<String, ServerRecord>,
    /// Deleted servers, kept for the admin records.
    tombstones: Vec<ServerRecord>,
    ssh_keys: Vec<SshKeyRecord>,
    rng: StdRng,
    ips: IpPool,
    seq: u64,
    events: broadcast::Sender<Arc<Event>>,
    /// Wakes the ticker when a nearer deadline appears.
    wake: Arc<Notify>,
    /// The Instance API's servers, volumes and IPs.
    instance: InstanceWorld,
    /// Private Networks, IPAM addresses, attachments and private NICs.
    pn: PnWorld,
}

impl World {
    pub fn new(config: WorldConfig, catalog: Catalog, wake: Arc<Notify>) -> Self {
        Self::with_instances(config, catalog, InstanceCatalog::seeded(), wake)
    }

    pub fn with_instances(
        config: WorldConfig,
        catalog: Catalog,
        instance_catalog: InstanceCatalog,
        wake: Arc<Notify>,
    ) -> Self {
        let (events, _) = broadcast::channel(4096);
        let mut instance = InstanceWorld::new(
            instance_catalog,
            config.seed,
            &config.organization_id,
            &config.project_id,
        );
        instance.timings = config.instance_timings;
        let pn = PnWorld::new(
            Vec::new(),
            config.seed,
            &config.organization_id,
            &config.project_id,
            PnTimings::default(),
            SimTime::UNIX_EPOCH,
            Some(config.ip_range.cidr()),
        )
        .expect("no seeds to refuse");
        let mut world = Self {
            instance,
            pn,
            rng: StdRng::seed_from_u64(config.seed),
            ips: IpPool::new(config.ip_range),
            stock: HashMap::new(),
            quotas: HashMap::new(),
            servers: BTreeMap::new(),
            tombstones: Vec::new(),
            ssh_keys: Vec::new(),
            seq: 0,
            events,
            wake,
            config,
            catalog,
        };
        world.restore_catalog_state();
        world
    }

    fn restore_catalog_state(&mut self) {
        self.stock = self
            .catalog
            .offers
            .iter()
            .map(|o| (o.offer.id.clone(), o.stock))
            .collect();
        self.quotas = self
            .catalog
            .offers
            .iter()
            .map(|o| (o.offer.quota_name.clone(), o.quota))
            .collect();
    }

    pub fn project_id(&self) -> &str {
        &self.config.project_id
    }

    /// Forgets every server, key, stock and quota change, and re-seeds the RNG so a
    /// run replays. Live servers get `power_off`/`deleted` events so that
    /// followers drop them too; `seq` keeps increasing.
    pub fn reset(&mut self, now: SimTime) {
        let ids: Vec<String> = self.servers.keys().cloned().collect();
        for id in ids {
            if let Some(mut server) = self.servers.remove(&id) {
                if server.powered_on.take().is_some() {
                    self.emit(EventKind::PowerOff, Cause::Reset, now, &server, None, None);
                }
                self.emit(EventKind::Deleted, Cause::Reset, now, &server, None, None);
            }
        }
        self.tombstones.clear();
        self.ssh_keys.clear();
        self.rng = StdRng::seed_from_u64(self.config.seed);
        self.ips = IpPool::new(self.config.ip_range);
        self.restore_catalog_state();
        self.instance.reset();
        self.pn.reset(now);
    }

    // ----- instances -----

    pub fn instance(&self) -> &InstanceWorld {
        &self.instance
    }

    /// The Instance world and the address pool it shares with bare metal.
    pub fn instance_mut(&mut self) -> (&mut InstanceWorld, &mut IpPool) {
        // A call may have set a nearer deadline.
        self.wake.notify_one();
        (&mut self.instance, &mut self.ips)
    }

    // ----- offers -----

    /// Offers of a zone with their live stock.
    pub fn offers(&self, zone: &str) -> Vec<model::Offer> {
        self.catalog
            .offers
            .iter()
            .filter(|o| o.offer.zone == zone)
            .map(|o| self.live_offer(o))
            .collect()
    }

    pub fn offer(&self, zone: &str, id: &str) -> Option<model::Offer> {
        self.catalog.find(zone, id).map(|o| self.live_offer(o))
    }

    fn live_offer(&self, o: &CatalogOffer) -> model::Offer {
        let mut offer = o.offer.clone();
        if let Some(stock) = self.stock.get(&offer.id) {
            offer.stock = stock.as_str().into();
        }
        offer
    }

    /// Sets the stock of the offers of `zone` whose id or name is `offer` (by
    /// name, both the hourly offer and its monthly twin). Returns how many.
    pub fn set_stock(&mut self, zone: &str, offer: &str, stock: Stock) -> usize {
        let ids: Vec<String> = self
            .catalog
            .offers
            .iter()
            .filter(|o| o.offer.zone == zone && (o.offer.id == offer || o.offer.name == offer))
            .map(|o| o.offer.id.clone())
            .collect();
        for id in &ids {
            self.stock.insert(id.clone(), stock);
        }
        ids.len()
    }

    /// Sets the quota of the quota name of `offer` (an offer name, id, or quota
    /// name). Returns false when nothing matched.
    pub fn set_quota(&mut self, offer: &str, quota: Option<u64>) -> bool {
        let quota_name = self
            .catalog
            .offers
            .iter()
            .find(|o| o.offer.id == offer || o.offer.name == offer || o.offer.quota_name == offer)
            .map(|o| o.offer.quota_name.clone());
        match quota_name {
            Some(name) => {
                self.quotas.insert(name, quota);
                true
            }
            None => false,
        }
    }

    // ----- servers -----

    /// Orders a server. Order faults matching the accepted order fire here and
    /// shape its delivery.
    pub fn create_server(
        &mut self,
        now: SimTime,
        zone: &str,
        req: NewServer,
        faults: &mut Faults,
    ) -> Result<model::Server, ApiError> {
        let Some(catalog_offer) = self.catalog.find(zone, &req.offer_id).cloned() else {
            return Err(ApiError::NotFound {
                resource: "baremetal_offer".into(),
                resource_id: req.offer_id,
            });
        };
        let offer = &catalog_offer.offer;
        let project_id = req
            .project_id
            .unwrap_or_else(|| self.config.project_id.clone());

        if let Some(Some(quota)) = self.quotas.get(&offer.quota_name) {
            let current = self
                .servers
                .values()
                .filter(|s| s.project_id == project_id && s.quota_name == offer.quota_name)
                .count() as u64;
            if current >= *quota {
                return Err(ApiError::QuotasExceeded {
                    resource: offer.quota_name.clone(),
                    quota: *quota,
                    current,
                });
            }
        }
        let out_of_stock = || ApiError::OutOfStock {
            resource: offer.name.clone(),
        };
        let stock = self.stock.get_mut(&offer.id).ok_or_else(out_of_stock)?;
        let mut probe = *stock;
        if !probe.take() {
            return Err(out_of_stock());
        }
        let address = self.ips.allocate().ok_or_else(out_of_stock)?;
        stock.take();

        let offset = self.ips.offset(address);
        let id = self.uuid();
        let ip_ids = [self.uuid(), self.uuid()];
        // Drawn even when a fault overrides it, so that arming a fault does not
        // shift the ids and times of the orders after it.
        let drawn = catalog_offer.delivery.draw(&mut self.rng);
        let effects = faults.take_order(Order {
            offer_id: &offer.id,
            offer_name: &offer.name,
            zone,
        });
        let delivery = effects.delivery_seconds.unwrap_or(drawn);
        let pending = (!effects.stuck).then(|| Pending {
            at: now + secs(delivery),
            action: if effects.out_of_stock {
                Action::OutOfStock
            } else {
                Action::Deliver
            },
        });
        let server = ServerRecord {
            id: id.clone(),
            zone: zone.to_string(),
            organization_id: self.config.organization_id.clone(),
            project_id,
            name: req.name,
            description: req.description,
            tags: req.tags,
            offer_id: offer.id.clone(),
            offer_name: offer.name.clone(),
            quota_name: offer.quota_name.clone(),
            status: Status::Delivering,
            boot_type: BootType::Normal,
            created_at: now,
            updated_at: now,
            address,
            ipv6: std::net::Ipv6Addr::new(
                0x2001,
                0xdb8,
                0x77,
                0,
                0,
                0,
                (offset >> 16) as u16,
                offset as u16,
            ),
            ip_ids,
            delivered: false,
            rescue_server: None,
            pending,
            powered_on: None,
            boot_history: Vec::new(),
            deleted_at: None,
            protected: req.protected,
            user_data: req.user_data,
            install: None,
            options: Vec::new(),
            actions: vec![ActionRecord {
                action: "create",
                at: now,
            }],
        };
        tracing::info!(server_id = %id, %zone, offer = %offer.name, %address, delivery_s = delivery, stuck = effects.stuck, out_of_stock_after_order = effects.out_of_stock, "server ordered");
        let wire = server.to_wire();
        self.servers.insert(id, server);
        self.wake.notify_one();
        Ok(wire)
    }

    pub fn server(&self, zone: &str, id: &str) -> Result<&ServerRecord, ApiError> {
        self.servers
            .get(id)
            .filter(|s| s.zone == zone)
            .ok_or_else(ApiError::server_not_found)
    }

    /// Live servers of a zone, oldest first.
    pub fn servers(&self, zone: &str) -> Vec<&ServerRecord> {
        let mut list: Vec<_> = self.servers.values().filter(|s| s.zone == zone).collect();
        list.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
        list
    }

    /// Every server ever ordered, deleted ones included, oldest first.
    pub fn all_servers(&self) -> Vec<&ServerRecord> {
        let mut list: Vec<_> = self
            .servers
            .values()
            .chain(self.tombstones.iter())
            .collect();
        list.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
        list
    }

    /// Reboot (`start == false`) or start a server into `boot_type`.
    pub fn boot(
        &mut self,
        now: SimTime,
        zone: &str,
        id: &str,
        request: Request,
        boot_type: BootType,
        ssh_key_ids: Vec<String>,
    ) -> Result<model::Server, ApiError> {
        self.server(zone, id)?.check(request)?;
        let rescue_keys = match boot_type {
            BootType::Rescue => self.rescue_keys(&self.servers[id].project_id, &ssh_key_ids)?,
            BootType::Normal => {
                self.resolve_keys(&ssh_key_ids)?;
                Vec::new()
            }
        };
        let password = (boot_type == BootType::Rescue).then(|| self.password());
        let boot = self
            .catalog
            .find(zone, &self.servers[id].offer_id)
            .map_or(DEFAULT_BOOT, |o| o.boot);
        // Drawn after the password, so that a fixed boot time (no draw)
        // keeps the ids and passwords of the runs before boot ranges.
        let duration = boot.draw(&mut self.rng);
        let rescue_user = self.config.rescue_user.clone();
        let server = self.servers.get_mut(id).expect("checked above");
        server.status = match request {
            Request::Start => Status::Starting,
            _ => Status::Stopping,
        };
        server.boot_type = boot_type;
        server.rescue_server = password.map(|password| RescueServer {
            user: rescue_user,
            password,
        });
        server.updated_at = now;
        server.boot_history.push(BootRecord {
            at: now,
            boot_type,
            ssh_key_ids,
        });
        server.actions.push(ActionRecord {
            action: match request {
                Request::Start => "start",
                _ => "reboot",
            },
            at: now,
        });
        let cause = match request {
            Request::Start => Cause::Start,
            _ => Cause::Reboot,
        };
        server.pending = Some(Pending {
            at: now + secs(duration),
            action: Action::Boot {
                boot_type,
                rescue_keys,
                cause,
            },
        });
        let was_on = server.powered_on.take().is_some();
        let server = server.clone();
        if was_on {
            self.emit(EventKind::PowerOff, cause, now, &server, None, None);
        }
        tracing::info!(server_id = %id, ?request, boot_type = boot_type.as_str(), boot_s = duration, "boot requested");
        self.wake.notify_one();
        Ok(server.to_wire())
    }

    pub fn stop(&mut self, now: SimTime, zone: &str, id: &str) -> Result<model::Server, ApiError> {
        self.server(zone, id)?.check(Request::Stop)?;
        let stop = self.config.timings.stop;
        let server = self.servers.get_mut(id).expect("checked above");
        server.status = Status::Stopping;
        server.updated_at = now;
        server.actions.push(ActionRecord {
            action: "stop",
            at: now,
        });
        server.pending = Some(Pending {
            at: now + secs(stop),
            action: Action::Stop,
        });
        let was_on = server.powered_on.take().is_some();
        let server = server.clone();
        if was_on {
            self.emit(EventKind::PowerOff, Cause::Stop, now, &server, None, None);
        }
        tracing::info!(server_id = %id, "stop requested");
        self.wake.notify_one();
        Ok(server.to_wire())
    }

    pub fn delete(
        &mut self,
        now: SimTime,
        zone: &str,
        id: &str,
    ) -> Result<model::Server, ApiError> {
        let record = self.server(zone, id)?;
        record.check(Request::Delete)?;
        if record.protected {
            return Err(ApiError::message(
                axum::http::StatusCode::BAD_REQUEST,
                "Server is protected",
            ));
        }
        let delete = self.config.timings.delete;
        self.pn.server_deleting(now, id);
        let server = self.servers.get_mut(id).expect("checked above");
        server.status = Status::Deleting;
        server.updated_at = now;
        server.pending = Some(Pending {
            at: now + secs(delete),
            action: Action::Delete,
        });
        let was_on = server.powered_on.take().is_some();
        let server = server.clone();
        if was_on {
            self.emit(EventKind::PowerOff, Cause::Delete, now, &server, None, None);
        }
        tracing::info!(server_id = %id, "delete requested");
        self.wake.notify_one();
        Ok(server.to_wire())
    }

    /// `PATCH /servers/{id}`. Refused only while the server is being deleted.
    pub fn update(
        &mut self,
        now: SimTime,
        zone: &str,
        id: &str,
        patch: ServerPatch,
    ) -> Result<model::Server, ApiError> {
        let record = self.server(zone, id)?;
        if record.status == Status::Deleting {
            return Err(record.check(Request::Delete).expect_err("deleting refuses"));
        }
        let server = self.servers.get_mut(id).expect("checked above");
        if let Some(name) = patch.name {
            server.name = name;
        }
        if let Some(description) = patch.description {
            server.description = description;
        }
        if let Some(tags) = patch.tags {
            server.tags = tags;
        }
        if let Some(protected) = patch.protected {
            server.protected = protected;
        }
        if let Some(user_data) = patch.user_data {
            server.user_data = Some(user_data);
        }
        server.updated_at = now;
        tracing::info!(server_id = %id, "server updated");
        Ok(server.to_wire())
    }

    /// Applies every transition due at or before `now`, earliest first.
    pub fn advance(&mut self, now: SimTime) {
        while let Some((id, at)) = self
            .servers
            .values()
            .filter_map(|s| s.pending.as_ref().map(|p| (s.id.clone(), p.at)))
            .filter(|(_, at)| *at <= now)
            .min_by(|a, b| a.1.cmp(&b.1).then(a.0.cmp(&b.0)))
        {
            self.fire(&id, at);
        }
        self.instance.advance(now, &mut self.ips);
        let (servers, vms) = (&self.servers, &self.instance.servers);
        self.pn.advance(
            now,
            |id| servers.contains_key(id),
            |id| vms.contains_key(id),
        );
        for server in self.servers.values_mut() {
            if let Some(install) = server.install.as_mut() {
                let elapsed = (now - install.started_at).as_seconds_f64();
                install.status = if elapsed >= INSTALL_COMPLETES_AFTER {
                    InstallStatus::Completed
                } else if elapsed >= INSTALL_STARTS_AFTER {
                    InstallStatus::Installing
                } else {
                    InstallStatus::ToInstall
                };
            }
        }
    }

    pub fn next_deadline(&self) -> Option<SimTime> {
        self.servers
            .values()
            .filter_map(|s| s.pending.as_ref().map(|p| p.at))
            .chain(self.instance.next_deadline())
            .chain(self.pn.next_deadline())
            .min()
    }

    fn fire(&mut self, id: &str, at: SimTime) {
        let server = self.servers.get_mut(id).expect("pending server exists");
        let Some(pending) = server.pending.take() else {
            return;
        };
        server.updated_at = at;
        match pending.action {
            Action::Deliver | Action::Boot { .. } => {
                let (boot_type, keys, cause) = match pending.action {
                    Action::Boot {
                        boot_type,
                        rescue_keys,
                        cause,
                    } => (boot_type, rescue_keys, cause),
                    _ => (BootType::Normal, Vec::new(), Cause::Deliver),
                };
                server.delivered = true;
                server.status = Status::Ready;
                let server = server.clone();
                let event = self.emit(
                    EventKind::PowerOn,
                    cause,
                    at,
                    &server,
                    Some(boot_type),
                    Some(keys),
                );
                self.servers.get_mut(id).expect("exists").powered_on = Some(event);
                tracing::info!(server_id = %id, boot_type = boot_type.as_str(), "server ready");
            }
            Action::OutOfStock => {
                server.status = Status::OutOfStock;
                tracing::info!(server_id = %id, "delivery failed: out of stock (injected)");
            }
            Action::Stop => {
                server.status = Status::Stopped;
                tracing::info!(server_id = %id, "server stopped");
            }
            Action::Delete => {
                let mut server = self.servers.remove(id).expect("exists");
                server.deleted_at = Some(at);
                self.ips.release(server.address);
                if let Some(stock) = self.stock.get_mut(&server.offer_id) {
                    stock.give_back();
                }
                self.emit(EventKind::Deleted, Cause::Delete, at, &server, None, None);
                tracing::info!(server_id = %id, "server deleted");
                self.tombstones.push(server);
            }
        }
    }

    fn emit(
        &mut self,
        kind: EventKind,
        cause: Cause,
        at: SimTime,
        server: &ServerRecord,
        boot_type: Option<BootType>,
        rescue_keys: Option<Vec<String>>,
    ) -> Arc<Event> {
        self.seq += 1;
        let offer = self
            .offer(&server.zone, &server.offer_id)
            .expect("a server's offer stays in the catalog");
        let event = Arc::new(Event {
            seq: self.seq,
            kind,
            at: format_time(at),
            cause,
            server: server.to_wire(),
            address: server.address.to_string(),
            boot_type: boot_type.map(|b| b.as_str().to_string()),
            rescue_user: (boot_type == Some(BootType::Rescue))
                .then(|| self.config.rescue_user.clone()),
            rescue_ssh_public_keys: rescue_keys,
            offer,
        });
        // No receiver is fine: nobody is following the stream.
        let _ = self.events.send(event.clone());
        event
    }

    /// The `power_on` events of the servers that are on now (in `seq` order), and
    /// a receiver for what follows; taken together under the world lock so that
    /// nothing falls between the snapshot and the live events.
    pub fn subscribe(&self) -> (Vec<Arc<Event>>, broadcast::Receiver<Arc<Event>>) {
        let mut snapshot: Vec<_> = self
            .servers
            .values()
            .filter_map(|s| s.powered_on.clone())
            .collect();
        snapshot.sort_by_key(|e| e.seq);
        (snapshot, self.events.subscribe())
    }

    fn uuid(&mut self) -> String {
        uuid::Builder::from_random_bytes(self.rng.random())
            .into_uuid()
            .to_string()
    }

    fn password(&mut self) -> String {
        const ALPHABET: &[u8] = b"abcdefghijkmnopqrstuvwxyzABCDEFGHJKLMNPQRSTUVWXYZ23456789";
        (0..16)
            .map(|_| ALPHABET[self.rng.random_range(0..ALPHABET.len())] as char)
            .collect()
    }
}

#[cfg(test)]
mod tests;
