//! An in-memory [`ElasticMetal`] for unit tests: servers, offers and IAM keys
//! held in a map, every call recorded, and errors injected per operation.
//!
//! It follows the real API where tests depend on it (ordering an offer that is
//! out of stock fails, rebooting a server that is still delivering answers
//! "Server is not delivered", DELETE leaves the server `deleting` until
//! [`FakeElasticMetal::finish_deletions`]), and is otherwise deliberately
//! simple: time does not pass on its own, tests move servers along.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::sync::Mutex;

use async_trait::async_trait;

use super::{
    ApiError, BootType, CreateServerRequest, ElasticMetal, Ip, Offer, RescueServer, Server,
    ServerFilter, ServerStatus, SshKey, SubscriptionPeriod,
};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    ListOffers,
    CreateServer,
    GetServer,
    ListServers,
    DeleteServer,
    UpdateServerTags,
    RebootServer,
    ListSshKeys,
}

/// One recorded call.
#[derive(Debug, Clone, PartialEq)]
pub struct Call {
    pub op: Op,
    pub zone: String,
    pub server_id: Option<String>,
    pub boot_type: Option<BootType>,
    pub ssh_key_ids: Vec<String>,
}

#[derive(Default)]
struct State {
    offers: BTreeMap<String, Vec<Offer>>,
    servers: BTreeMap<String, Server>,
    ssh_keys: Vec<SshKey>,
    failures: HashMap<Op, VecDeque<ApiError>>,
    calls: Vec<Call>,
    next_ip: u32,
    next_id: u64,
    auto_deliver: bool,
}

#[derive(Default)]
pub struct FakeElasticMetal {
    state: Mutex<State>,
}

impl FakeElasticMetal {
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A test that panicked while holding the lock already failed.
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn set_offers(&self, zone: &str, offers: Vec<Offer>) {
        self.lock().offers.insert(zone.to_string(), offers);
    }

    pub fn add_ssh_key(&self, key: SshKey) {
        self.lock().ssh_keys.push(key);
    }

    /// Newly ordered servers are `ready` with an address at once instead of
    /// `delivering`.
    pub fn set_auto_deliver(&self, on: bool) {
        self.lock().auto_deliver = on;
    }

    /// The next call of `op` fails with `err` (queued: several calls fail in order).
    pub fn fail_next(&self, op: Op, err: ApiError) {
        self.lock().failures.entry(op).or_default().push_back(err);
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

    pub fn set_status(&self, id: &str, status: ServerStatus) {
        if let Some(s) = self.lock().servers.get_mut(id) {
            s.status = status;
        }
    }

    /// Delivery done: `ready`, with an IPv4 address.
    pub fn deliver(&self, id: &str) {
        let mut st = self.lock();
        let ip = next_ip(&mut st);
        if let Some(s) = st.servers.get_mut(id) {
            s.status = ServerStatus::Ready;
            if s.ips.is_empty() {
                s.ips.push(ip);
            }
        }
    }

    /// Servers left `deleting` disappear (GET answers 404 from now on).
    pub fn finish_deletions(&self) {
        self.lock()
            .servers
            .retain(|_, s| s.status != ServerStatus::Deleting);
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

fn call(op: Op, zone: &str, server_id: Option<&str>) -> Call {
    Call {
        op,
        zone: zone.to_string(),
        server_id: server_id.map(str::to_string),
        boot_type: None,
        ssh_key_ids: Vec::new(),
    }
}

fn next_ip(st: &mut State) -> Ip {
    st.next_ip += 1;
    let n = st.next_ip + 9;
    Ip {
        id: format!("ip-{n}"),
        address: format!("127.77.{}.{}", n / 256, n % 256),
        reverse: String::new(),
        version: "IPv4".into(),
    }
}

/// The API's timestamp format (`updated_at` moves on every change).
fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true)
}

fn not_found(kind: &str, id: &str) -> ApiError {
    ApiError::NotFound(format!("{kind} {id}"))
}

fn server_in<'a>(st: &'a mut State, zone: &str, id: &str) -> Result<&'a mut Server, ApiError> {
    st.servers
        .get_mut(id)
        .filter(|s| s.zone == zone)
        .ok_or_else(|| not_found("server", id))
}

#[async_trait]
impl ElasticMetal for FakeElasticMetal {
    async fn list_offers(
        &self,
        zone: &str,
        period: SubscriptionPeriod,
    ) -> Result<Vec<Offer>, ApiError> {
        let st = self.begin(call(Op::ListOffers, zone, None))?;
        Ok(st
            .offers
            .get(zone)
            .map(|offers| {
                offers
                    .iter()
                    .filter(|o| period.matches(&o.subscription_period))
                    .cloned()
                    .collect()
            })
            .unwrap_or_default())
    }

    async fn create_server(
        &self,
        zone: &str,
        req: &CreateServerRequest,
    ) -> Result<Server, ApiError> {
        let mut st = self.begin(call(Op::CreateServer, zone, None))?;
        let offer = st
            .offers
            .get(zone)
            .and_then(|offers| offers.iter().find(|o| o.id == req.offer_id))
            .cloned()
            .ok_or_else(|| not_found("offer", &req.offer_id))?;
        if !offer.enable || offer.stock == "empty" {
            return Err(ApiError::OutOfStock(format!("offer {}", offer.name)));
        }
        st.next_id += 1;
        let id = format!("00000000-0000-4000-8000-{:012}", st.next_id);
        let mut server = Server {
            id: id.clone(),
            organization_id: req.project_id.clone(),
            project_id: req.project_id.clone(),
            name: req.name.clone(),
            description: req.description.clone(),
            status: ServerStatus::Delivering,
            offer_id: offer.id.clone(),
            offer_name: offer.name.clone(),
            tags: req.tags.clone(),
            ips: Vec::new(),
            boot_type: BootType::Normal,
            zone: zone.to_string(),
            rescue_server: None,
            created_at: now(),
            updated_at: now(),
        };
        if st.auto_deliver {
            server.status = ServerStatus::Ready;
            server.ips.push(next_ip(&mut st));
        }
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

    async fn delete_server(&self, zone: &str, id: &str) -> Result<Server, ApiError> {
        let mut st = self.begin(call(Op::DeleteServer, zone, Some(id)))?;
        let server = server_in(&mut st, zone, id)?;
        server.status = ServerStatus::Deleting;
        Ok(server.clone())
    }

    async fn update_server_tags(
        &self,
        zone: &str,
        id: &str,
        tags: &[String],
    ) -> Result<Server, ApiError> {
        let mut st = self.begin(call(Op::UpdateServerTags, zone, Some(id)))?;
        let server = server_in(&mut st, zone, id)?;
        server.tags = tags.to_vec();
        server.updated_at = now();
        Ok(server.clone())
    }

    async fn reboot_server(
        &self,
        zone: &str,
        id: &str,
        boot_type: BootType,
        ssh_key_ids: &[String],
    ) -> Result<Server, ApiError> {
        let mut c = call(Op::RebootServer, zone, Some(id));
        c.boot_type = Some(boot_type);
        c.ssh_key_ids = ssh_key_ids.to_vec();
        let mut st = self.begin(c)?;
        let server = server_in(&mut st, zone, id)?;
        if matches!(
            server.status,
            ServerStatus::Delivering | ServerStatus::Ordered
        ) {
            return Err(ApiError::TransientState("Server is not delivered".into()));
        }
        server.status = ServerStatus::Ready;
        server.boot_type = boot_type;
        server.updated_at = now();
        server.rescue_server = (boot_type == BootType::Rescue).then(|| RescueServer {
            user: "rescue".into(),
            password: "fake-password".into(),
        });
        Ok(server.clone())
    }

    async fn list_ssh_keys(&self, project_id: &str) -> Result<Vec<SshKey>, ApiError> {
        let st = self.begin(call(Op::ListSshKeys, "", None))?;
        Ok(st
            .ssh_keys
            .iter()
            .filter(|k| k.project_id == project_id)
            .cloned()
            .collect())
    }
}

/// Real offers from `facts/scaleway-api.md`, in the API's JSON shape, for
/// tests. Hardware the facts do not record (the H100 and RISC-V hosts' memory
/// and disks) is plausible filler.
pub fn sample_offers(zone: &str) -> Vec<Offer> {
    let offers = serde_json::json!([
        {
            "id": format!("{zone}-a115x"), "monthly_offer_id": format!("{zone}-a115x-monthly"), "name": "EM-A115X-SSD", "stock": "available",
            "bandwidth": 1_000_000_000u64, "commercial_range": "aluminium",
            "price_per_hour": {"currency_code": "EUR", "units": 0, "nanos": 91_000_000},
            "price_per_month": null, "enable": true, "subscription_period": "hourly",
            "disks": [{"capacity": 1_024_209_543_168u64, "type": "SSD"},
                      {"capacity": 1_024_209_543_168u64, "type": "SSD"}],
            "cpus": [{"name": "Intel Xeon E3 1220", "core_count": 4, "thread_count": 4,
                      "frequency": 3100, "benchmark": "5000"}],
            "memories": [{"capacity": 34_359_738_368u64, "type": "DDR3", "frequency": 1600, "is_ecc": true}],
            "gpus": [], "tags": [], "zone": zone
        },
        {
            "id": format!("{zone}-i215e"), "monthly_offer_id": format!("{zone}-i215e-monthly"), "name": "EM-I215E-NVME", "stock": "low",
            "bandwidth": 1_000_000_000u64, "commercial_range": "iridium",
            "price_per_hour": {"currency_code": "EUR", "units": 0, "nanos": 904_000_000},
            "price_per_month": null, "enable": true, "subscription_period": "hourly",
            "disks": [{"capacity": 1_920_383_410_176u64, "type": "NVMe"},
                      {"capacity": 1_920_383_410_176u64, "type": "NVMe"}],
            "cpus": [{"name": "AMD EPYC 7313P", "core_count": 16, "thread_count": 32,
                      "frequency": 3000, "benchmark": "40000"}],
            "memories": [{"capacity": 274_877_906_944u64, "type": "DDR4", "frequency": 3200, "is_ecc": true}],
            "gpus": [], "tags": [], "zone": zone
        },
        {
            "id": format!("{zone}-t620e"), "monthly_offer_id": format!("{zone}-t620e-monthly"), "name": "EM-T620E-H100", "stock": "empty",
            "bandwidth": 10_000_000_000u64, "commercial_range": "titanium",
            "price_per_hour": {"currency_code": "EUR", "units": 9, "nanos": 589_000_000},
            "price_per_month": null, "enable": true, "subscription_period": "hourly",
            "disks": [{"capacity": 3_840_755_982_336u64, "type": "NVMe"}],
            "cpus": [{"name": "AMD EPYC 9334", "core_count": 32, "thread_count": 64,
                      "frequency": 2700, "benchmark": "90000"}],
            "memories": [{"capacity": 412_316_860_416u64, "type": "DDR5", "frequency": 4800, "is_ecc": true}],
            "gpus": [{"name": "NVIDIA H100", "vram": 80_000_000_000u64},
                     {"name": "NVIDIA H100", "vram": 80_000_000_000u64}],
            "tags": [], "zone": zone
        },
        {
            "id": format!("{zone}-rv1"), "name": "EM-RV1-C4M16S128-A", "stock": "available",
            "bandwidth": 100_000_000u64, "commercial_range": "labs",
            "price_per_hour": {"currency_code": "EUR", "units": 0, "nanos": 42_000_000},
            "price_per_month": null, "enable": true, "subscription_period": "hourly",
            "disks": [{"capacity": 128_000_000_000u64, "type": "eMMC"}],
            "cpus": [{"name": "T-Head TH1520", "core_count": 4, "thread_count": 4,
                      "frequency": 1850, "benchmark": "0"}],
            "memories": [{"capacity": 17_179_869_184u64, "type": "LPDDR4", "frequency": 0, "is_ecc": false}],
            "gpus": [], "tags": ["riscv"], "zone": zone
        }
    ]);
    serde_json::from_value(offers).expect("sample offers decode")
}

/// The monthly twins of [`sample_offers`] (the RISC-V offer has none), shaped
/// as the API lists them with `subscription_period=monthly`: no hourly price,
/// a monthly price and a fee of one month. EM-A115X-SSD's €32.99 is from the
/// facts; the others are the published prices of those offers.
pub fn sample_monthly_offers(zone: &str) -> Vec<Offer> {
    let monthly = [
        ("a115x", 32, 990_000_000),
        ("i215e", 329, 990_000_000),
        ("t620e", 3499, 990_000_000),
    ];
    sample_offers(zone)
        .into_iter()
        .filter_map(|hourly| {
            let short = hourly.id.strip_prefix(&format!("{zone}-"))?.to_string();
            let (_, units, nanos) = monthly.iter().find(|(s, _, _)| *s == short)?;
            let price = super::Money {
                currency_code: "EUR".into(),
                units: *units,
                nanos: *nanos,
            };
            Some(Offer {
                id: format!("{zone}-{short}-monthly"),
                price_per_hour: None,
                price_per_month: Some(price),
                subscription_period: "monthly".into(),
                monthly_offer_id: None,
                ..hourly
            })
        })
        .collect()
}
