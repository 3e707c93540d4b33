//! Wire model of the Elastic Metal v1 and IAM objects, field names as the API
//! sends them (`facts/scaleway-api.md`). Unknown fields are ignored so that new
//! API fields never break decoding.

use serde::{Deserialize, Deserializer, Serialize};

/// A field the API may send as `null` (Go's nil slices and maps) decoded as
/// its default: `#[serde(default, deserialize_with = "...nullable")]`.
pub(crate) fn nullable<'de, D, T>(de: D) -> Result<T, D::Error>
where
    D: Deserializer<'de>,
    T: Deserialize<'de> + Default,
{
    Ok(Option::<T>::deserialize(de)?.unwrap_or_default())
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum BootType {
    #[default]
    UnknownBootType,
    Normal,
    Rescue,
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ServerStatus {
    Unknown,
    Delivering,
    Ready,
    Stopping,
    Stopped,
    Starting,
    Error,
    Deleting,
    Locked,
    OutOfStock,
    Ordered,
    Resetting,
    Migrating,
    /// A status this client does not know yet.
    #[serde(other)]
    Other,
}

/// `{currency_code, units, nanos}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct Money {
    pub currency_code: String,
    pub units: i64,
    pub nanos: i32,
}

impl Money {
    pub fn as_f64(&self) -> f64 {
        self.units as f64 + f64::from(self.nanos) / 1e9
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ip {
    pub id: String,
    pub address: String,
    #[serde(default)]
    pub reverse: String,
    pub version: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct RescueServer {
    pub user: String,
    pub password: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Server {
    pub id: String,
    #[serde(default)]
    pub organization_id: String,
    #[serde(default)]
    pub project_id: String,
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub status: ServerStatus,
    pub offer_id: String,
    #[serde(default)]
    pub offer_name: String,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default)]
    pub ips: Vec<Ip>,
    #[serde(default)]
    pub boot_type: BootType,
    pub zone: String,
    #[serde(default)]
    pub rescue_server: Option<RescueServer>,
    pub created_at: String,
    #[serde(default)]
    pub updated_at: String,
}

impl Server {
    pub fn ipv4(&self) -> Option<&str> {
        self.ips
            .iter()
            .find(|ip| ip.version == "IPv4")
            .map(|ip| ip.address.as_str())
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Disk {
    /// Bytes.
    pub capacity: u64,
    /// e.g. `NVMe`, `SSD`, `HDD`, `SATA`.
    #[serde(rename = "type")]
    pub kind: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cpu {
    pub name: String,
    pub core_count: u32,
    pub thread_count: u32,
    #[serde(default)]
    pub frequency: u32,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Memory {
    /// Bytes.
    pub capacity: u64,
    #[serde(rename = "type", default)]
    pub kind: String,
    #[serde(default)]
    pub frequency: u32,
    #[serde(default)]
    pub is_ecc: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Gpu {
    pub name: String,
    /// Bytes.
    pub vram: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Offer {
    pub id: String,
    pub name: String,
    /// `empty`, `low` or `available`.
    pub stock: String,
    /// Bits per second.
    #[serde(default)]
    pub bandwidth: u64,
    #[serde(default)]
    pub commercial_range: String,
    #[serde(default)]
    pub price_per_hour: Option<Money>,
    #[serde(default)]
    pub price_per_month: Option<Money>,
    #[serde(default)]
    pub disks: Vec<Disk>,
    #[serde(default)]
    pub enable: bool,
    #[serde(default)]
    pub cpus: Vec<Cpu>,
    #[serde(default)]
    pub memories: Vec<Memory>,
    #[serde(default)]
    pub gpus: Vec<Gpu>,
    /// `hourly` or `monthly`.
    #[serde(default)]
    pub subscription_period: String,
    #[serde(default)]
    pub monthly_offer_id: Option<String>,
    #[serde(default)]
    pub tags: Vec<String>,
    #[serde(default)]
    pub zone: String,
    /// The options this offer can be sold with (private network, public
    /// bandwidth, licenses...), each with its price.
    #[serde(default, deserialize_with = "nullable")]
    pub options: Vec<OfferOption>,
}

impl Offer {
    /// The option that gives a server of this offer access to Private
    /// Networks (the one carrying a `private_network` field).
    pub fn private_network_option(&self) -> Option<&OfferOption> {
        self.options.iter().find(|o| o.private_network.is_some())
    }

    /// A monthly offer (the "twin" of an hourly one): `price_per_hour` is
    /// null and the first month is paid up front as `fee`.
    pub fn is_monthly(&self) -> bool {
        self.subscription_period == SubscriptionPeriod::Monthly.as_str()
    }
}

/// Billing period of an offer; `GET /offers` lists one period at a time
/// (hourly when the parameter is absent).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SubscriptionPeriod {
    Hourly,
    Monthly,
}

impl SubscriptionPeriod {
    pub fn as_str(self) -> &'static str {
        match self {
            SubscriptionPeriod::Hourly => "hourly",
            SubscriptionPeriod::Monthly => "monthly",
        }
    }

    /// Whether an offer's `subscription_period` field is this period (an
    /// absent field is hourly, the API's default).
    pub fn matches(self, field: &str) -> bool {
        match self {
            SubscriptionPeriod::Hourly => field.is_empty() || field == "hourly",
            SubscriptionPeriod::Monthly => field == "monthly",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, Default)]
pub struct CreateServerRequest {
    pub offer_id: String,
    pub project_id: String,
    pub name: String,
    pub description: String,
    pub tags: Vec<String>,
    /// Always `null`: the provider installs Talos itself through rescue mode.
    pub install: Option<serde_json::Value>,
}

/// Query filters of `GET /servers`. Scaleway's tag matching semantics are not
/// documented, so callers filter the result again on their side.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct ServerFilter {
    pub tags: Vec<String>,
    pub name: Option<String>,
    pub project_id: Option<String>,
}

impl ServerFilter {
    /// The filter applied on our side: every tag present exactly, same name,
    /// same project.
    pub fn matches(&self, server: &Server) -> bool {
        self.tags.iter().all(|t| server.tags.contains(t))
            && self.name.as_ref().is_none_or(|n| &server.name == n)
            && self
                .project_id
                .as_ref()
                .is_none_or(|p| server.project_id.is_empty() || &server.project_id == p)
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SshKey {
    pub id: String,
    pub name: String,
    pub public_key: String,
    #[serde(default)]
    pub fingerprint: String,
    #[serde(default)]
    pub project_id: String,
    #[serde(default)]
    pub disabled: bool,
}

/// `{bandwidth_in_bps}` of a `private_network` option.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, Default)]
pub struct PrivateNetworkOption {
    #[serde(default)]
    pub bandwidth_in_bps: u64,
}

/// One entry of `Offer.options` (`OfferOptionOffer`): an option the offer can
/// be sold with. Exactly one kind field is set; only `private_network` is
/// read here, the others (`license`, `public_bandwidth`, `remote_access`,
/// `certification`) are ignored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct OfferOption {
    pub id: String,
    #[serde(default)]
    pub name: String,
    /// Included in the offer by default (no need to add it).
    #[serde(default)]
    pub enabled: bool,
    /// `hourly`, `monthly` or `unknown_subscription_period`.
    #[serde(default)]
    pub subscription_period: String,
    #[serde(default)]
    pub price: Option<Money>,
    /// May be added to or removed from a server.
    #[serde(default)]
    pub manageable: bool,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_network: Option<PrivateNetworkOption>,
}

/// Status of an option on a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
#[serde(rename_all = "snake_case")]
pub enum OptionStatus {
    #[default]
    OptionStatusUnknown,
    OptionStatusEnable,
    OptionStatusEnabling,
    OptionStatusDisabling,
    OptionStatusError,
    /// A status this client does not know yet.
    #[serde(other)]
    Other,
}

/// One entry of `Server.options` (`ServerOption`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ServerOption {
    pub id: String,
    #[serde(default)]
    pub name: String,
    #[serde(default)]
    pub status: OptionStatus,
    #[serde(default)]
    pub manageable: bool,
    #[serde(default)]
    pub expires_at: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_network: Option<PrivateNetworkOption>,
}

impl ServerOption {
    /// The option is on (or being turned on): nothing to add.
    pub fn is_on(&self) -> bool {
        matches!(
            self.status,
            OptionStatus::OptionStatusEnable | OptionStatus::OptionStatusEnabling
        )
    }
}
