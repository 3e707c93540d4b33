//! The Instance side of the simulated world: servers, their volumes (Block
//! SBS and local), flexible IPs, availability and quotas. Driven by the
//! caller's `now` like the Elastic Metal world; addresses come from the shared
//! pool so that VMs and bare-metal servers never get the same loopback address.

use std::collections::{BTreeMap, HashMap};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::catalog::{Availability, Image, InstanceCatalog, TypeSpec};
use super::server::{Secret, Step, VmAction, VmPending, VmRecord, VmState};
use super::volumes::{FlexIpRecord, VolumeKind, VolumeRecord};
use crate::clock::{SimTime, secs};
use crate::error::ApiError;
use crate::faults::Faults;
use crate::sim::IpPool;
use crate::timings::Span;

/// Keeps the Instance ids apart from the Elastic Metal ones, so adding
/// Instance calls to a scenario does not change its bare-metal ids.
const RNG_SALT: u64 = 0x696e_7374_616e_6365;

/// The last simulated seconds of a reboot, spent `starting`/`rebooting`
/// (recorded on DEV1-S, terraform-provider-scaleway
/// `instance/testdata/action-server-basic.cassette.yaml`: `stopping`/`rebooting`
/// for ~36 s, `starting`/`rebooting` under a second, then `running`).
pub const REBOOT_STARTING: f64 = 1.0;

/// Simulated seconds of the Instance transitions (`facts/scaleway-instances.md`
/// §1: poweroff ~45 s on DEV1-S, GPU `provisioning node` ~20 s, terminate
/// 5–15 s; allocation is INFERENCE, a reboot ~37 s in one recording).
#[derive(Debug, Clone, Copy)]
pub struct InstanceTimings {
    /// `poweron` to running (GPU types: to `provisioning node`).
    pub allocate: Span,
    pub provision_gpu: f64,
    /// `reboot` to running.
    pub reboot: Span,
    pub stop: f64,
    pub terminate: (f64, f64),
}

impl Default for InstanceTimings {
    fn default() -> Self {
        Self {
            allocate: Span::Fixed(10.0),
            provision_gpu: 20.0,
            reboot: Span::Fixed(10.0),
            stop: 45.0,
            terminate: (5.0, 15.0),
        }
    }
}

impl InstanceTimings {
    /// These timings with `vm_boot` (`--vm-boot-seconds`) as the time from
    /// `poweron` or `reboot` to running, when it is set.
    pub fn with_boot(self, vm_boot: Option<Span>) -> Self {
        match vm_boot {
            Some(boot) => Self {
                allocate: boot,
                reboot: boot,
                ..self
            },
            None => self,
        }
    }
}

/// The root volume size when the request gives none (INFERENCE).
pub const DEFAULT_ROOT_SIZE: u64 = 10_000_000_000;

/// One volume of `POST /servers`, validated by the handler.
#[derive(Debug, Clone)]
pub struct VolumeRequest {
    pub kind: VolumeKind,
    pub size: Option<u64>,
    /// An existing SBS volume to attach.
    pub id: Option<String>,
}

/// What `POST /servers` asks for.
#[derive(Debug, Clone)]
pub struct NewVm {
    pub name: String,
    pub commercial_type: String,
    pub image: Option<String>,
    /// Index → volume; empty: an SBS root of the default size.
    pub volumes: BTreeMap<String, VolumeRequest>,
    pub dynamic_ip_required: bool,
    pub public_ips: Vec<String>,
    pub boot_type: String,
    pub project: Option<String>,
    pub tags: Vec<String>,
    pub security_group: Option<String>,
    pub placement_group: Option<String>,
    pub protected: bool,
}

/// `PATCH /servers/{id}`: absent fields are kept.
#[derive(Debug, Clone, Default)]
pub struct VmPatch {
    pub name: Option<String>,
    pub tags: Option<Vec<String>>,
    pub security_group: Option<String>,
    pub placement_group: Option<Option<String>>,
    pub protected: Option<bool>,
    pub dynamic_ip_required: Option<bool>,
}

pub struct InstanceWorld {
    pub(crate) catalog: InstanceCatalog,
    pub(crate) timings: InstanceTimings,
    seed: u64,
    pub(crate) organization: String,
    pub(crate) project: String,
    availability: HashMap<(String, String), Availability>,
    quotas: HashMap<String, Option<u64>>,
    pub(crate) servers: BTreeMap<String, VmRecord>,
    pub(crate) tombstones: Vec<VmRecord>,
    pub(crate) volumes: BTreeMap<String, VolumeRecord>,
    pub(crate) ips: BTreeMap<String, FlexIpRecord>,
    rng: StdRng,
}

impl InstanceWorld {
    pub fn new(catalog: InstanceCatalog, seed: u64, organization: &str, project: &str) -> Self {
        let mut world = Self {
            catalog,
            timings: InstanceTimings::default(),
            seed,
            organization: organization.into(),
            project: project.into(),
            availability: HashMap::new(),
            quotas: HashMap::new(),
            servers: BTreeMap::new(),
            tombstones: Vec::new(),
            volumes: BTreeMap::new(),
            ips: BTreeMap::new(),
            rng: StdRng::seed_from_u64(seed ^ RNG_SALT),
        };
        world.reset_catalog_state();
        world
    }

    fn reset_catalog_state(&mut self) {
        self.availability.clear();
        self.quotas = self
            .catalog
            .types
            .iter()
            .map(|t| (t.name.clone(), t.quota))
            .collect();
    }

    /// Forgets servers, volumes, IPs, availability and quota changes, and
    /// re-seeds the RNG. The caller's pool is reset too.
    pub fn reset(&mut self) {
        self.servers.clear();
        self.tombstones.clear();
        self.volumes.clear();
        self.ips.clear();
        self.rng = StdRng::seed_from_u64(self.seed ^ RNG_SALT);
        self.reset_catalog_state();
    }

    pub fn catalog(&self) -> &InstanceCatalog {
        &self.catalog
    }

    pub fn availability(&self, zone: &str, t: &TypeSpec) -> Availability {
        self.availability
            .get(&(zone.to_string(), t.name.clone()))
            .copied()
            .unwrap_or_else(|| t.availability_in(zone))
    }

    /// Sets the availability of a type in a zone; false if not sold there.
    pub fn set_availability(&mut self, zone: &str, name: &str, a: Availability) -> bool {
        if self.catalog.find(zone, name).is_none() {
            return false;
        }
        self.availability
            .insert((zone.to_string(), name.to_string()), a);
        true
    }

    /// Sets the per-project quota of a type; false if the type is unknown.
    pub fn set_quota(&mut self, name: &str, quota: Option<u64>) -> bool {
        match self.quotas.get_mut(name) {
            Some(q) => {
                *q = quota;
                true
            }
            None => false,
        }
    }

    pub fn uuid(&mut self) -> String {
        uuid::Builder::from_random_bytes(self.rng.random())
            .into_uuid()
            .to_string()
    }

    fn not_found(resource: &str, id: &str) -> ApiError {
        ApiError::NotFound {
            resource: resource.into(),
            resource_id: id.into(),
        }
    }

    pub fn server(&self, zone: &str, id: &str) -> Result<&VmRecord, ApiError> {
        self.servers
            .get(id)
            .filter(|s| s.zone == zone)
            .ok_or_else(|| Self::not_found("instance_server", id))
    }

    fn server_mut(&mut self, zone: &str, id: &str) -> Result<&mut VmRecord, ApiError> {
        self.servers
            .get_mut(id)
            .filter(|s| s.zone == zone)
            .ok_or_else(|| Self::not_found("instance_server", id))
    }

    /// Live servers of a zone, oldest first.
    pub fn servers_in(&self, zone: &str) -> Vec<&VmRecord> {
        let mut list: Vec<_> = self.servers.values().filter(|s| s.zone == zone).collect();
        list.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
        list
    }

    pub fn image(&self, zone: &str, id: &str) -> Option<&Image> {
        self.catalog.image(zone, id)
    }

    /// Creates a stopped server, its volumes, and attaches the flexible IPs.
    pub fn create(
        &mut self,
        now: SimTime,
        zone: &str,
        req: NewVm,
        pool: &mut IpPool,
    ) -> Result<String, ApiError> {
        let Some(spec) = self.catalog.find(zone, &req.commercial_type).cloned() else {
            return Err(Self::not_found(
                "instance_server_type",
                &req.commercial_type,
            ));
        };
        if let Some(image_id) = &req.image {
            let image = self
                .image(zone, image_id)
                .ok_or_else(|| Self::not_found("instance_image", image_id))?;
            if image.arch != spec.arch {
                return Err(ApiError::invalid(
                    "image",
                    "constraint",
                    format!(
                        "image arch {} does not match {} ({})",
                        image.arch, spec.name, spec.arch
                    ),
                ));
            }
        }
        let project = req.project.clone().unwrap_or_else(|| self.project.clone());
        if let Some(Some(quota)) = self.quotas.get(&spec.name) {
            let current = self
                .servers
                .values()
                .filter(|s| s.project == project && s.commercial_type == spec.name)
                .count() as u64;
            if current >= *quota {
                return Err(ApiError::legacy_quota(spec.quota_name()));
            }
        }
        self.check_volumes(zone, &spec, &req.volumes)?;
        for ip in &req.public_ips {
            match self.ips.get(ip) {
                Some(r) if r.zone == zone && r.server.is_none() => {}
                Some(r) if r.zone == zone => {
                    return Err(ApiError::invalid(
                        "public_ips",
                        "constraint",
                        format!(
                            "ip {ip} is attached to server {}",
                            r.server.as_ref().map_or("", |s| s.as_str())
                        ),
                    ));
                }
                _ => return Err(Self::not_found("instance_ip", ip)),
            }
        }
        let address = pool.allocate().ok_or_else(|| {
            ApiError::invalid_request(
                axum::http::StatusCode::BAD_REQUEST,
                "emsim: no address left in --ip-range",
            )
        })?;
        let id = self.uuid();
        let root_snapshot = req
            .image
            .as_ref()
            .and_then(|i| self.image(zone, i))
            .map(|i| i.root_snapshot_id.clone());
        let mut wanted = req.volumes.clone();
        wanted.entry("0".into()).or_insert(VolumeRequest {
            kind: VolumeKind::Sbs,
            size: None,
            id: None,
        });
        let mut volumes = BTreeMap::new();
        for (index, v) in wanted {
            let volume_id = match v.id {
                Some(existing) => existing,
                None => {
                    let volume_id = self.uuid();
                    let record = VolumeRecord {
                        id: volume_id.clone(),
                        name: format!("{}-vol-{index}", req.name),
                        kind: v.kind,
                        size: v.size.unwrap_or(DEFAULT_ROOT_SIZE),
                        zone: zone.to_string(),
                        organization: self.organization.clone(),
                        project: project.clone(),
                        tags: vec![],
                        server: None,
                        parent_snapshot_id: (index == "0").then(|| root_snapshot.clone()).flatten(),
                        perf_iops: 5000,
                        created_at: now,
                        updated_at: now,
                        last_detached_at: None,
                    };
                    self.volumes.insert(volume_id.clone(), record);
                    volume_id
                }
            };
            let volume = self
                .volumes
                .get_mut(&volume_id)
                .expect("checked or created");
            volume.server = Some((id.clone(), req.name.clone()));
            volume.updated_at = now;
            volumes.insert(index, volume_id);
        }
        for ip in &req.public_ips {
            self.ips.get_mut(ip).expect("checked above").server = Some(id.clone());
        }
        let octets = address.octets();
        let record = VmRecord {
            id: id.clone(),
            zone: zone.to_string(),
            name: req.name,
            commercial_type: spec.name.clone(),
            arch: spec.arch.clone(),
            gpus: spec.gpus(),
            organization: self.organization.clone(),
            project,
            tags: req.tags,
            image_id: req.image,
            boot_type: req.boot_type,
            state: VmState::Stopped,
            state_detail: "",
            pending: None,
            volumes,
            dynamic_ip_required: req.dynamic_ip_required,
            dynamic_ip_id: None,
            flexible_ips: req.public_ips,
            address,
            mac_address: format!(
                "de:00:00:{:02x}:{:02x}:{:02x}",
                octets[1], octets[2], octets[3]
            ),
            security_group: req.security_group,
            placement_group: req.placement_group,
            protected: req.protected,
            user_data: BTreeMap::new(),
            created_at: now,
            modified_at: now,
            modified_before_reboot: None,
            history: vec![(now, "create")],
            deleted_at: None,
        };
        tracing::info!(server_id = %id, %zone, commercial_type = %spec.name, %address, "instance created");
        self.servers.insert(id.clone(), record);
        Ok(id)
    }

    fn check_volumes(
        &self,
        zone: &str,
        spec: &TypeSpec,
        volumes: &BTreeMap<String, VolumeRequest>,
    ) -> Result<(), ApiError> {
        let mut local = 0u64;
        for (index, v) in volumes {
            let argument = format!("volumes.{index}");
            if let Some(existing) = &v.id {
                match self.volumes.get(existing) {
                    Some(r)
                        if r.zone == zone && r.kind == VolumeKind::Sbs && r.server.is_none() => {}
                    Some(r) if r.zone == zone && r.kind == VolumeKind::Sbs => {
                        return Err(ApiError::invalid(
                            &argument,
                            "constraint",
                            format!("volume {existing} is attached to another server"),
                        ));
                    }
                    _ => return Err(Self::not_found("instance_volume", existing)),
                }
                continue;
            }
            if let Some(size) = v.size
                && (size == 0 || size % 512 != 0)
            {
                return Err(ApiError::invalid(
                    &argument,
                    "constraint",
                    "size must be a positive multiple of 512 bytes",
                ));
            }
            let size = v.size.unwrap_or(DEFAULT_ROOT_SIZE);
            match v.kind {
                VolumeKind::Sbs => {}
                VolumeKind::LSsd => {
                    if size > spec.l_ssd_max_size {
                        return Err(ApiError::invalid(
                            &argument,
                            "constraint",
                            format!(
                                "{} allows l_ssd volumes up to {} bytes",
                                spec.name, spec.l_ssd_max_size
                            ),
                        ));
                    }
                    local += size;
                }
                VolumeKind::Scratch => {
                    if size > spec.scratch_storage_max_size {
                        return Err(ApiError::invalid(
                            &argument,
                            "constraint",
                            format!(
                                "{} allows {} bytes of scratch storage",
                                spec.name, spec.scratch_storage_max_size
                            ),
                        ));
                    }
                }
            }
        }
        if local > spec.volumes_max_size {
            return Err(ApiError::invalid(
                "volumes",
                "constraint",
                format!(
                    "{} allows {} bytes of local volumes",
                    spec.name, spec.volumes_max_size
                ),
            ));
        }
        Ok(())
    }

    pub fn update(
        &mut self,
        now: SimTime,
        zone: &str,
        id: &str,
        patch: VmPatch,
    ) -> Result<(), ApiError> {
        let server = self.server_mut(zone, id)?;
        if let Some(name) = patch.name {
            server.name = name;
        }
        if let Some(tags) = patch.tags {
            server.tags = tags;
        }
        if let Some(sg) = patch.security_group {
            server.security_group = Some(sg);
        }
        if let Some(pg) = patch.placement_group {
            server.placement_group = pg;
        }
        if let Some(protected) = patch.protected {
            server.protected = protected;
        }
        if let Some(dynamic) = patch.dynamic_ip_required {
            server.dynamic_ip_required = dynamic;
        }
        server.modified_at = now;
        tracing::info!(server_id = %id, "instance updated");
        Ok(())
    }

    /// `POST /servers/{id}/action`. `faults` decides, with the zone's
    /// availability, whether a poweron finds capacity.
    pub fn act(
        &mut self,
        now: SimTime,
        zone: &str,
        id: &str,
        action: VmAction,
        faults: &mut Faults,
    ) -> Result<(), ApiError> {
        self.server(zone, id)?.check(action)?;
        let timings = self.timings;
        let terminate_after = self
            .rng
            .random_range(timings.terminate.0..=timings.terminate.1);
        // After the terminate draw, and none at all for a fixed span, so
        // that the default timings replay the ids they always gave.
        let boot_after = match action {
            VmAction::Poweron => timings.allocate.draw(&mut self.rng),
            VmAction::Reboot => timings.reboot.draw(&mut self.rng),
            VmAction::Poweroff | VmAction::Terminate => 0.0,
        };
        let out_of_stock = action == VmAction::Poweron && {
            let server = &self.servers[id];
            let spec = self
                .catalog
                .find(zone, &server.commercial_type)
                .expect("a server's type stays in the catalog");
            let shortage = self.availability(zone, spec) == Availability::Shortage;
            // Taken even when the zone is short, so that a counted fault
            // acts on the poweron it was armed for.
            let fault = faults.take_poweron(&server.commercial_type, zone);
            shortage || fault
        };
        let server = self.server_mut(zone, id)?;
        let (state, detail, after, step) = match action {
            VmAction::Poweron => (
                VmState::Starting,
                "allocating node",
                boot_after,
                Step::Allocated { out_of_stock },
            ),
            VmAction::Poweroff => (VmState::Stopping, "stopping", timings.stop, Step::Stopped),
            VmAction::Reboot => (
                VmState::Stopping,
                "rebooting",
                (boot_after - REBOOT_STARTING).max(0.0),
                Step::RebootHalted,
            ),
            VmAction::Terminate => (
                VmState::Stopping,
                "terminating",
                terminate_after,
                Step::Terminated,
            ),
        };
        server.state = state;
        server.state_detail = detail;
        server.modified_before_reboot = (action == VmAction::Reboot).then_some(server.modified_at);
        server.modified_at = now;
        server.history.push((now, action.as_str()));
        server.pending = Some(VmPending {
            at: now + secs(after),
            step,
        });
        // A dynamic IP dies at poweroff (and with the server).
        if matches!(action, VmAction::Poweroff | VmAction::Terminate) {
            server.dynamic_ip_id = None;
        }
        tracing::info!(server_id = %id, action = action.as_str(), out_of_stock, "instance action");
        Ok(())
    }

    /// `DELETE /servers/{id}` on a stopped server: local volumes go with it,
    /// SBS volumes and flexible IPs are only detached.
    pub fn delete(
        &mut self,
        now: SimTime,
        zone: &str,
        id: &str,
        pool: &mut IpPool,
    ) -> Result<(), ApiError> {
        self.server(zone, id)?.check_delete()?;
        self.remove(now, id, pool);
        tracing::info!(server_id = %id, "instance deleted");
        Ok(())
    }

    fn remove(&mut self, at: SimTime, id: &str, pool: &mut IpPool) {
        let Some(mut server) = self.servers.remove(id) else {
            return;
        };
        for volume_id in server.volumes.values() {
            let Some(volume) = self.volumes.get_mut(volume_id) else {
                continue;
            };
            if volume.kind == VolumeKind::Sbs {
                volume.server = None;
                volume.updated_at = at;
                volume.last_detached_at = Some(at);
            } else {
                self.volumes.remove(volume_id);
            }
        }
        for ip in &server.flexible_ips {
            if let Some(ip) = self.ips.get_mut(ip) {
                ip.server = None;
            }
        }
        pool.release(server.address);
        server.deleted_at = Some(at);
        server.pending = None;
        server.user_data.clear();
        self.tombstones.push(server);
    }

    pub fn next_deadline(&self) -> Option<SimTime> {
        self.servers
            .values()
            .filter_map(|s| s.pending.as_ref().map(|p| p.at))
            .min()
    }

    /// Applies every step due at or before `now`, earliest first.
    pub fn advance(&mut self, now: SimTime, pool: &mut IpPool) {
        while let Some((id, at)) = self
            .servers
            .values()
            .filter_map(|s| s.pending.as_ref().map(|p| (s.id.clone(), p.at)))
            .filter(|(_, at)| *at <= now)
            .min_by(|a, b| a.1.cmp(&b.1).then(a.0.cmp(&b.0)))
        {
            self.fire(&id, at, pool);
        }
    }

    fn fire(&mut self, id: &str, at: SimTime, pool: &mut IpPool) {
        let provision = self.timings.provision_gpu;
        let server = self.servers.get_mut(id).expect("pending server exists");
        let Some(pending) = server.pending.take() else {
            return;
        };
        server.modified_at = at;
        let run = match pending.step {
            Step::Allocated { out_of_stock: true } => {
                server.state = VmState::Stopped;
                server.state_detail = "";
                tracing::info!(server_id = %id, "instance out of stock: back to stopped");
                false
            }
            Step::Allocated {
                out_of_stock: false,
            } if server.gpus > 0 => {
                server.state_detail = "provisioning node";
                server.pending = Some(VmPending {
                    at: at + secs(provision),
                    step: Step::Provisioned,
                });
                false
            }
            Step::RebootHalted => {
                // As recorded: `starting`, and `modification_date` back to
                // what it was before the reboot call until the VM runs.
                server.state = VmState::Starting;
                if let Some(before) = server.modified_before_reboot.take() {
                    server.modified_at = before;
                }
                server.pending = Some(VmPending {
                    at: at + secs(REBOOT_STARTING),
                    step: Step::Rebooted,
                });
                false
            }
            Step::Allocated { .. } | Step::Provisioned | Step::Rebooted => true,
            Step::Stopped => {
                server.state = VmState::Stopped;
                server.state_detail = "";
                tracing::info!(server_id = %id, "instance stopped");
                false
            }
            Step::Terminated => {
                self.remove(at, id, pool);
                tracing::info!(server_id = %id, "instance terminated");
                return;
            }
        };
        if run {
            server.state = VmState::Running;
            server.state_detail = "booting kernel";
            let dynamic = server.dynamic_ip_required && server.dynamic_ip_id.is_none();
            tracing::info!(server_id = %id, "instance running");
            if dynamic {
                let ip_id = self.uuid();
                self.servers.get_mut(id).expect("exists").dynamic_ip_id = Some(ip_id);
            }
        }
    }

    // ----- user data -----

    pub fn set_user_data(
        &mut self,
        now: SimTime,
        zone: &str,
        id: &str,
        key: &str,
        value: Vec<u8>,
    ) -> Result<(), ApiError> {
        let server = self.server_mut(zone, id)?;
        let bytes = value.len();
        server.user_data.insert(key.to_string(), Secret(value));
        server.modified_at = now;
        // The size only: the value holds a bootstrap token.
        tracing::info!(server_id = %id, %key, bytes, "user data set");
        Ok(())
    }

    pub fn delete_user_data(&mut self, zone: &str, id: &str, key: &str) -> Result<(), ApiError> {
        let server = self.server_mut(zone, id)?;
        server.user_data.remove(key);
        tracing::info!(server_id = %id, %key, "user data deleted");
        Ok(())
    }

    /// Records for the admin API: every server ever created, oldest first.
    pub fn all_servers(&self) -> Vec<&VmRecord> {
        let mut list: Vec<_> = self
            .servers
            .values()
            .chain(self.tombstones.iter())
            .collect();
        list.sort_by(|a, b| a.created_at.cmp(&b.created_at).then(a.id.cmp(&b.id)));
        list
    }
}

#[cfg(test)]
#[path = "world_tests.rs"]
mod tests;
