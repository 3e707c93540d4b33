//! An in-memory [`Instance`] and [`Block`] for unit tests: the catalog,
//! servers, user data, SBS volumes and flexible IPs held in maps, every call
//! recorded, and errors injected per operation.
//!
//! It follows the real API where tests depend on it: a server is created
//! `stopped` with an SBS root volume; `poweron` of a type in `shortage` falls
//! back to `stopped`; actions asked in the wrong state answer "server should
//! be ..." (`TransientState`); terminate and delete leave the SBS volumes
//! detached and the flexible IPs unattached (deleting a volume still attached
//! is `TransientState`); missing user data is `NotFound`. It is otherwise
//! deliberately simple: time does not pass on its own, tests move servers
//! along with [`FakeInstance::finish_actions`] (or let every action finish at
//! once with [`FakeInstance::set_auto_finish`]).

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;

use async_trait::async_trait;
use serde::Deserialize;

use super::{
    Availability, CreateServerRequest, Image, ImageFilter, Instance, PublicIp, SecurityGroup,
    Server, ServerAction, ServerFilter, ServerPatch, ServerState, ServerType, ServerVolume, Task,
    TypeAvailability, VolumeType,
};
use crate::scaleway::ApiError;
use crate::scaleway::block::{Block, Reference, Volume, VolumeFilter, VolumeStatus, VolumeUpdate};

/// The root volume size when a create does not choose one.
const DEFAULT_ROOT_BYTES: u64 = 10_000_000_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    ListServerTypes,
    ListAvailability,
    CreateServer,
    GetServer,
    ListServers,
    UpdateServer,
    DeleteServer,
    Action,
    SetUserData,
    GetUserData,
    DeleteUserData,
    DeleteIp,
    GetVolume,
    DeleteVolume,
    ListVolumes,
    UpdateVolume,
    ListImages,
    GetImage,
    GetSecurityGroup,
}

/// One recorded call (user data values are not recorded: they are secrets
/// in production, and tests read them with [`FakeInstance::user_data`]).
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub op: Op,
    pub zone: String,
    /// The server, volume or IP the call is about.
    pub id: Option<String>,
    pub action: Option<ServerAction>,
}

struct FlexibleIp {
    zone: String,
    address: String,
    server: Option<String>,
}

#[derive(Default)]
struct State {
    types: BTreeMap<String, BTreeMap<String, ServerType>>,
    availability: BTreeMap<String, BTreeMap<String, Availability>>,
    servers: BTreeMap<String, Server>,
    /// (server id, key) → value.
    user_data: BTreeMap<(String, String), String>,
    volumes: BTreeMap<String, Volume>,
    ips: BTreeMap<String, FlexibleIp>,
    /// Images and security groups by id (each knows its zone).
    images: BTreeMap<String, Image>,
    security_groups: BTreeMap<String, SecurityGroup>,
    failures: HashMap<Op, VecDeque<ApiError>>,
    calls: Vec<Call>,
    next_id: u64,
    auto_finish: bool,
}

#[derive(Default)]
pub struct FakeInstance {
    state: Mutex<State>,
}

impl FakeInstance {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A test that panicked while holding the lock already failed.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn set_types(&self, zone: &str, types: BTreeMap<String, ServerType>) {
        self.lock().types.insert(zone.to_string(), types);
    }

    pub fn set_availability(&self, zone: &str, availability: BTreeMap<String, Availability>) {
        self.lock()
            .availability
            .insert(zone.to_string(), availability);
    }

    /// Actions finish as soon as they are asked.
    pub fn set_auto_finish(&self, on: bool) {
        self.lock().auto_finish = on;
    }

    /// The next call of `op` fails with `err` (queued: several calls fail in order).
    pub fn fail_next(&self, op: Op, err: ApiError) {
        self.lock().failures.entry(op).or_default().push_back(err);
    }

    pub fn insert_image(&self, image: Image) {
        self.lock().images.insert(image.id.clone(), image);
    }

    pub fn insert_security_group(&self, group: SecurityGroup) {
        self.lock().security_groups.insert(group.id.clone(), group);
    }

    pub fn insert_server(&self, server: Server) {
        self.lock().servers.insert(server.id.clone(), server);
    }

    pub fn server(&self, id: &str) -> Option<Server> {
        self.lock().servers.get(id).cloned()
    }

    pub fn servers(&self) -> Vec<Server> {
        self.lock().servers.values().cloned().collect()
    }

    pub fn volumes(&self) -> Vec<Volume> {
        self.lock().volumes.values().cloned().collect()
    }

    /// A volume of the test's making (a left-over, a foreign one...).
    pub fn insert_volume(&self, volume: Volume) {
        self.lock().volumes.insert(volume.id.clone(), volume);
    }

    pub fn user_data(&self, server_id: &str, key: &str) -> Option<String> {
        self.lock()
            .user_data
            .get(&(server_id.to_string(), key.to_string()))
            .cloned()
    }

    /// A flexible IP attached to `server_id` (listed in its `public_ips`).
    pub fn attach_flexible_ip(&self, zone: &str, server_id: &str) -> String {
        let mut st = self.lock();
        let id = next_id(&mut st);
        let address = format!("127.78.{}.{}", st.next_id / 256, st.next_id % 256);
        if let Some(s) = st.servers.get_mut(server_id) {
            s.public_ips.push(PublicIp {
                id: id.clone(),
                address: address.clone(),
                dynamic: false,
                family: "inet".into(),
            });
        }
        st.ips.insert(
            id.clone(),
            FlexibleIp {
                zone: zone.to_string(),
                address,
                server: Some(server_id.to_string()),
            },
        );
        id
    }

    /// Ids of the flexible IPs that still exist (billed).
    pub fn flexible_ips(&self) -> Vec<String> {
        self.lock().ips.keys().cloned().collect()
    }

    /// Every action under way ends: `starting` → `running` (or back to
    /// `stopped` when the type is in `shortage` in its zone), `stopping` →
    /// `stopped`, a terminate → the server is gone.
    pub fn finish_actions(&self) {
        let mut st = self.lock();
        let ids: Vec<String> = st.servers.keys().cloned().collect();
        for id in ids {
            finish(&mut st, &id);
        }
    }

    pub fn calls(&self) -> Vec<Call> {
        self.lock().calls.clone()
    }

    pub fn count(&self, op: Op) -> usize {
        self.lock().calls.iter().filter(|c| c.op == op).count()
    }

    fn begin(&self, call: Call) -> Result<std::sync::MutexGuard<'_, State>, ApiError> {
        let mut st = self.lock();
        let op = call.op;
        st.calls.push(call);
        if let Some(err) = st.failures.get_mut(&op).and_then(VecDeque::pop_front) {
            return Err(err);
        }
        Ok(st)
    }
}

fn call(op: Op, zone: &str, id: Option<&str>) -> Call {
    Call {
        op,
        zone: zone.to_string(),
        id: id.map(str::to_string),
        action: None,
    }
}

fn next_id(st: &mut State) -> String {
    st.next_id += 1;
    format!("00000000-0000-4000-9000-{:012}", st.next_id)
}

fn not_found(kind: &str, id: &str) -> ApiError {
    ApiError::NotFound(format!("{kind} {id}"))
}

fn server_in<'a>(st: &'a mut State, zone: &str, id: &str) -> Result<&'a mut Server, ApiError> {
    st.servers
        .get_mut(id)
        .filter(|s| s.zone == zone)
        .ok_or_else(|| not_found("instance_server", id))
}

fn wrong_state(should_be: &str) -> ApiError {
    ApiError::TransientState(format!("server should be {should_be}"))
}

fn set_state(server: &mut Server, state: ServerState, detail: &str) {
    server.allowed_actions = match state {
        ServerState::Running => vec![
            ServerAction::Poweroff,
            ServerAction::Terminate,
            ServerAction::Reboot,
            ServerAction::StopInPlace,
            ServerAction::Backup,
        ],
        ServerState::Stopped | ServerState::StoppedInPlace => {
            vec![ServerAction::Poweron, ServerAction::Backup]
        }
        _ => Vec::new(),
    };
    server.state = state;
    server.state_detail = detail.to_string();
    server.modification_date =
        Some(chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, false));
}

/// Ends the action under way on one server.
fn finish(st: &mut State, id: &str) {
    let Some(server) = st.servers.get(id).cloned() else {
        return;
    };
    match server.state {
        // A reboot keeps the hypervisor and the addresses.
        ServerState::Starting if server.state_detail == "rebooting" => {
            let s = st.servers.get_mut(id).expect("cloned above");
            set_state(s, ServerState::Running, "booting kernel");
        }
        ServerState::Starting => {
            let shortage = st
                .availability
                .get(&server.zone)
                .and_then(|a| a.get(&server.commercial_type))
                == Some(&Availability::Shortage);
            let address = format!("127.79.{}.{}", st.next_id / 256, st.next_id % 256);
            let dyn_id = next_id(st);
            let s = st.servers.get_mut(id).expect("cloned above");
            if shortage {
                set_state(s, ServerState::Stopped, "");
            } else {
                set_state(s, ServerState::Running, "booting kernel");
                if s.dynamic_ip_required {
                    let ip = PublicIp {
                        id: dyn_id,
                        address,
                        dynamic: true,
                        family: "inet".into(),
                    };
                    s.public_ip = Some(ip.clone());
                    s.public_ips.insert(0, ip);
                }
            }
        }
        ServerState::Stopping if server.state_detail == "terminating" => remove(st, id),
        ServerState::Stopping => {
            let s = st.servers.get_mut(id).expect("cloned above");
            s.public_ips.retain(|ip| !ip.dynamic);
            s.public_ip = s.public_ips.first().cloned();
            set_state(s, ServerState::Stopped, "");
        }
        _ => {}
    }
}

/// The server goes; local volumes with it, SBS volumes and flexible IPs stay.
fn remove(st: &mut State, id: &str) {
    let Some(server) = st.servers.remove(id) else {
        return;
    };
    st.user_data.retain(|(sid, _), _| sid != id);
    for v in server.volumes.values() {
        if let Some(vol) = st.volumes.get_mut(&v.id) {
            vol.status = VolumeStatus::Available;
            vol.references.clear();
            vol.last_detached_at = Some(chrono::Utc::now().to_rfc3339());
        }
    }
    for ip in st.ips.values_mut() {
        if ip.server.as_deref() == Some(id) {
            ip.server = None;
        }
    }
}

#[async_trait]
impl Instance for FakeInstance {
    async fn list_server_types(
        &self,
        zone: &str,
    ) -> Result<BTreeMap<String, ServerType>, ApiError> {
        let st = self.begin(call(Op::ListServerTypes, zone, None))?;
        Ok(st.types.get(zone).cloned().unwrap_or_default())
    }

    async fn list_server_availability(
        &self,
        zone: &str,
    ) -> Result<BTreeMap<String, Availability>, ApiError> {
        let st = self.begin(call(Op::ListAvailability, zone, None))?;
        Ok(st.availability.get(zone).cloned().unwrap_or_default())
    }

    async fn create_server(
        &self,
        zone: &str,
        req: &CreateServerRequest,
    ) -> Result<Server, ApiError> {
        let mut st = self.begin(call(Op::CreateServer, zone, None))?;
        let ty = st
            .types
            .get(zone)
            .and_then(|t| t.get(&req.commercial_type))
            .cloned()
            .ok_or_else(|| {
                ApiError::Invalid(format!(
                    "commercial type {} is not sold in {zone}",
                    req.commercial_type
                ))
            })?;
        if ty.end_of_service {
            return Err(ApiError::Invalid(format!(
                "commercial type {} is end of service",
                req.commercial_type
            )));
        }
        let id = next_id(&mut st);
        let volume_id = next_id(&mut st);
        let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, false);
        let root = req.volumes.get("0");
        st.volumes.insert(
            volume_id.clone(),
            Volume {
                id: volume_id.clone(),
                name: format!("{}-root", req.name),
                kind: "sbs_5k".into(),
                size: root.and_then(|v| v.size).unwrap_or(DEFAULT_ROOT_BYTES),
                project_id: req.project.clone(),
                status: VolumeStatus::InUse,
                references: vec![Reference {
                    id: format!("ref-{volume_id}"),
                    product_resource_type: "instance_server".into(),
                    product_resource_id: id.clone(),
                    status: "attached".into(),
                }],
                tags: Vec::new(),
                zone: zone.to_string(),
                created_at: Some(now.clone()),
                last_detached_at: None,
            },
        );
        let mut server = Server {
            id: id.clone(),
            name: req.name.clone(),
            commercial_type: req.commercial_type.clone(),
            arch: Some(ty.arch),
            state: ServerState::Stopped,
            state_detail: String::new(),
            allowed_actions: Vec::new(),
            public_ip: None,
            public_ips: Vec::new(),
            volumes: BTreeMap::from([(
                "0".to_string(),
                ServerVolume {
                    id: volume_id,
                    volume_type: VolumeType::SbsVolume,
                    boot: false,
                    size: None,
                    state: Some("available".into()),
                    name: None,
                    zone: zone.to_string(),
                },
            )]),
            tags: req.tags.clone(),
            zone: zone.to_string(),
            project: req.project.clone(),
            creation_date: Some(now.clone()),
            modification_date: Some(now),
            image: req.image.as_ref().map(|id| super::Ref {
                id: id.clone(),
                name: String::new(),
            }),
            security_group: req.security_group.as_ref().map(|id| super::Ref {
                id: id.clone(),
                name: String::new(),
            }),
            placement_group: req.placement_group.as_ref().map(|id| super::Ref {
                id: id.clone(),
                name: String::new(),
            }),
            boot_type: Some(req.boot_type.clone().unwrap_or_else(|| "local".into())),
            dynamic_ip_required: req.dynamic_ip_required,
        };
        set_state(&mut server, ServerState::Stopped, "");
        st.servers.insert(id, server.clone());
        Ok(server)
    }

    async fn get_server(&self, zone: &str, id: &str) -> Result<Server, ApiError> {
        let mut st = self.begin(call(Op::GetServer, zone, Some(id)))?;
        server_in(&mut st, zone, id).map(|s| s.clone())
    }

    async fn list_servers(
        &self,
        zone: &str,
        filter: &ServerFilter,
    ) -> Result<Vec<Server>, ApiError> {
        let st = self.begin(call(Op::ListServers, zone, None))?;
        Ok(st
            .servers
            .values()
            .filter(|s| s.zone == zone && filter.matches(s))
            .cloned()
            .collect())
    }

    async fn update_server(
        &self,
        zone: &str,
        id: &str,
        patch: &ServerPatch,
    ) -> Result<Server, ApiError> {
        let mut st = self.begin(call(Op::UpdateServer, zone, Some(id)))?;
        let s = server_in(&mut st, zone, id)?;
        if let Some(name) = &patch.name {
            s.name = name.clone();
        }
        if let Some(tags) = &patch.tags {
            s.tags = tags.clone();
        }
        let reference = |id: &String| super::Ref {
            id: id.clone(),
            name: String::new(),
        };
        if let Some(sg) = &patch.security_group {
            s.security_group = Some(reference(sg));
        }
        if let Some(pg) = &patch.placement_group {
            s.placement_group = Some(reference(pg));
        }
        Ok(s.clone())
    }

    async fn delete_server(&self, zone: &str, id: &str) -> Result<(), ApiError> {
        let mut st = self.begin(call(Op::DeleteServer, zone, Some(id)))?;
        let s = server_in(&mut st, zone, id)?;
        if s.state != ServerState::Stopped {
            return Err(wrong_state("stopped"));
        }
        remove(&mut st, id);
        Ok(())
    }

    async fn server_action(
        &self,
        zone: &str,
        id: &str,
        action: ServerAction,
    ) -> Result<Task, ApiError> {
        let mut c = call(Op::Action, zone, Some(id));
        c.action = Some(action);
        let mut st = self.begin(c)?;
        let auto_finish = st.auto_finish;
        let s = server_in(&mut st, zone, id)?;
        let stopped = matches!(s.state, ServerState::Stopped | ServerState::StoppedInPlace);
        let running = s.state == ServerState::Running;
        match action {
            ServerAction::Poweron if stopped => {
                set_state(s, ServerState::Starting, "allocating node")
            }
            ServerAction::Poweron => return Err(wrong_state("stopped")),
            ServerAction::Poweroff if running => set_state(s, ServerState::Stopping, ""),
            ServerAction::Terminate if running => {
                set_state(s, ServerState::Stopping, "terminating")
            }
            ServerAction::Reboot if running => set_state(s, ServerState::Starting, "rebooting"),
            ServerAction::Poweroff | ServerAction::Terminate | ServerAction::Reboot => {
                return Err(wrong_state("running"));
            }
            ServerAction::StopInPlace | ServerAction::Backup | ServerAction::Other => {
                return Err(ApiError::Invalid(format!(
                    "the fake does not do {action:?}"
                )));
            }
        }
        if auto_finish {
            finish(&mut st, id);
        }
        Ok(Task {
            id: next_id(&mut st),
            description: format!("server_batch_{action:?}").to_ascii_lowercase(),
            status: "pending".into(),
        })
    }

    async fn set_user_data(
        &self,
        zone: &str,
        id: &str,
        key: &str,
        value: &str,
    ) -> Result<(), ApiError> {
        let mut st = self.begin(call(Op::SetUserData, zone, Some(id)))?;
        server_in(&mut st, zone, id)?;
        st.user_data
            .insert((id.to_string(), key.to_string()), value.to_string());
        Ok(())
    }

    async fn get_user_data(&self, zone: &str, id: &str, key: &str) -> Result<String, ApiError> {
        let mut st = self.begin(call(Op::GetUserData, zone, Some(id)))?;
        server_in(&mut st, zone, id)?;
        st.user_data
            .get(&(id.to_string(), key.to_string()))
            .cloned()
            .ok_or_else(|| not_found("user_data", key))
    }

    async fn delete_user_data(&self, zone: &str, id: &str, key: &str) -> Result<(), ApiError> {
        let mut st = self.begin(call(Op::DeleteUserData, zone, Some(id)))?;
        server_in(&mut st, zone, id)?;
        st.user_data.remove(&(id.to_string(), key.to_string()));
        Ok(())
    }

    async fn delete_ip(&self, zone: &str, id: &str) -> Result<(), ApiError> {
        let mut st = self.begin(call(Op::DeleteIp, zone, Some(id)))?;
        let ip = st
            .ips
            .get(id)
            .filter(|ip| ip.zone == zone)
            .ok_or_else(|| not_found("instance_ip", id))?;
        if let Some(server) = ip.server.clone() {
            let address = ip.address.clone();
            if let Some(s) = st.servers.get_mut(&server) {
                s.public_ips.retain(|p| p.address != address);
            }
        }
        st.ips.remove(id);
        Ok(())
    }

    async fn list_images(&self, zone: &str, filter: &ImageFilter) -> Result<Vec<Image>, ApiError> {
        let st = self.begin(call(Op::ListImages, zone, None))?;
        Ok(st
            .images
            .values()
            .filter(|i| i.zone == zone && filter.matches(i))
            .cloned()
            .collect())
    }

    async fn get_image(&self, zone: &str, id: &str) -> Result<Image, ApiError> {
        let st = self.begin(call(Op::GetImage, zone, Some(id)))?;
        st.images
            .get(id)
            .filter(|i| i.zone == zone)
            .cloned()
            .ok_or_else(|| not_found("instance_image", id))
    }

    async fn get_security_group(&self, zone: &str, id: &str) -> Result<SecurityGroup, ApiError> {
        let st = self.begin(call(Op::GetSecurityGroup, zone, Some(id)))?;
        st.security_groups
            .get(id)
            .filter(|g| g.zone == zone)
            .cloned()
            .ok_or_else(|| not_found("instance_security_group", id))
    }
}

#[async_trait]
impl Block for FakeInstance {
    async fn get_volume(&self, zone: &str, id: &str) -> Result<Volume, ApiError> {
        let st = self.begin(call(Op::GetVolume, zone, Some(id)))?;
        st.volumes
            .get(id)
            .filter(|v| v.zone == zone)
            .cloned()
            .ok_or_else(|| not_found("volume", id))
    }

    async fn delete_volume(&self, zone: &str, id: &str) -> Result<(), ApiError> {
        let mut st = self.begin(call(Op::DeleteVolume, zone, Some(id)))?;
        let v = st
            .volumes
            .get(id)
            .filter(|v| v.zone == zone)
            .ok_or_else(|| not_found("volume", id))?;
        if v.status == VolumeStatus::InUse {
            return Err(ApiError::TransientState(
                "precondition is not respected (precondition=resource_still_in_use)".into(),
            ));
        }
        st.volumes.remove(id);
        Ok(())
    }

    async fn list_volumes(
        &self,
        zone: &str,
        filter: &VolumeFilter,
    ) -> Result<Vec<Volume>, ApiError> {
        let st = self.begin(call(Op::ListVolumes, zone, None))?;
        Ok(st
            .volumes
            .values()
            .filter(|v| v.zone == zone && filter.matches(v))
            .cloned()
            .collect())
    }

    async fn update_volume(
        &self,
        zone: &str,
        id: &str,
        update: &VolumeUpdate,
    ) -> Result<Volume, ApiError> {
        let mut st = self.begin(call(Op::UpdateVolume, zone, Some(id)))?;
        let v = st
            .volumes
            .get_mut(id)
            .filter(|v| v.zone == zone)
            .ok_or_else(|| not_found("volume", id))?;
        if let Some(tags) = &update.tags {
            v.tags = tags.clone();
        }
        match update.perf_iops {
            Some(5000) => v.kind = "sbs_5k".into(),
            Some(15000) => v.kind = "sbs_15k".into(),
            Some(other) => {
                return Err(ApiError::Invalid(format!(
                    "perf_iops {other}: must be 5000 or 15000"
                )));
            }
            None => {}
        }
        Ok(v.clone())
    }
}

#[derive(Deserialize)]
struct TypesBody {
    servers: BTreeMap<String, ServerType>,
}

#[derive(Deserialize)]
struct AvailabilityBody {
    servers: BTreeMap<String, TypeAvailability>,
}

/// The fr-par-2 types recorded against the real API (`testdata/instance/`):
/// POP2-2C-8G, L4-1-24G, H100-SXM-2-80G.
pub fn recorded_types() -> BTreeMap<String, ServerType> {
    let body = include_str!("../../../testdata/instance/products-servers-fr-par-2.excerpt.json");
    serde_json::from_str::<TypesBody>(body)
        .expect("recorded types decode")
        .servers
}

/// The fr-par-2 availability recorded against the real API (6 types; H100-1-80G
/// in `shortage`, L40S-1-48G and GP1-L `scarce`).
pub fn recorded_availability() -> BTreeMap<String, Availability> {
    let body = include_str!(
        "../../../testdata/instance/products-servers-availability-fr-par-2.excerpt.json"
    );
    serde_json::from_str::<AvailabilityBody>(body)
        .expect("recorded availability decodes")
        .servers
        .into_iter()
        .map(|(name, a)| (name, a.availability))
        .collect()
}

#[cfg(test)]
#[path = "fake_tests.rs"]
mod tests;
