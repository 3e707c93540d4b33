//! Wire types: the JSON objects exactly as the Elastic Metal v1 and IAM APIs
//! send them (`facts/scaleway-api.md`). Field order follows real recordings.

use serde::{Deserialize, Serialize};

/// `{currency_code, units, nanos}`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Money {
    pub currency_code: String,
    pub units: i64,
    pub nanos: i32,
}

impl Money {
    /// Euros given as a decimal number, rounded to the nano.
    pub fn eur(amount: f64) -> Self {
        let total_nanos = (amount * 1e9).round() as i64;
        Self {
            currency_code: "EUR".into(),
            units: total_nanos.div_euclid(1_000_000_000),
            nanos: total_nanos.rem_euclid(1_000_000_000) as i32,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Disk {
    pub capacity: u64,
    #[serde(rename = "type")]
    pub kind: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Cpu {
    pub name: String,
    pub core_count: u32,
    pub thread_count: u32,
    pub frequency: u32,
    #[serde(default)]
    pub benchmark: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Memory {
    pub capacity: u64,
    #[serde(rename = "type")]
    pub kind: String,
    pub frequency: u32,
    pub is_ecc: bool,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Gpu {
    pub name: String,
    pub vram: u64,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Offer {
    pub id: String,
    pub name: String,
    pub stock: String,
    pub bandwidth: u64,
    pub max_bandwidth: u64,
    pub commercial_range: String,
    pub price_per_hour: Option<Money>,
    pub price_per_month: Option<Money>,
    pub disks: Vec<Disk>,
    pub enable: bool,
    pub cpus: Vec<Cpu>,
    pub memories: Vec<Memory>,
    pub quota_name: String,
    pub persistent_memories: Vec<serde_json::Value>,
    pub raid_controllers: Vec<serde_json::Value>,
    pub incompatible_os_ids: Vec<String>,
    pub subscription_period: String,
    pub operation_path: String,
    pub fee: Money,
    pub options: Vec<serde_json::Value>,
    pub private_bandwidth: u64,
    pub shared_bandwidth: bool,
    pub tags: Vec<String>,
    pub gpus: Vec<Gpu>,
    pub monthly_offer_id: Option<String>,
    pub zone: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Ip {
    pub id: String,
    pub address: String,
    pub reverse: String,
    pub version: String,
    pub reverse_status: String,
    pub reverse_status_message: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RescueServer {
    pub user: String,
    pub password: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Server {
    pub id: String,
    pub organization_id: String,
    pub name: String,
    pub description: String,
    pub updated_at: String,
    pub created_at: String,
    pub status: String,
    pub offer_id: String,
    pub offer_name: String,
    pub install: Option<Install>,
    pub tags: Vec<String>,
    pub ips: Vec<Ip>,
    pub domain: String,
    pub boot_type: String,
    pub ping_status: String,
    pub project_id: String,
    pub zone: String,
    pub options: Vec<ServerOption>,
    pub rescue_server: Option<RescueServer>,
    pub protected: bool,
    pub user_data: Option<String>,
}

/// `server.install`: what `POST /servers/{id}/install` asked for and how far it got.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Install {
    pub os_id: String,
    pub hostname: String,
    pub ssh_key_ids: Vec<String>,
    /// `to_install`, `installing`, `completed`.
    pub status: String,
    pub user: String,
    pub service_user: String,
    pub service_url: String,
    pub partitioning_schema: Option<serde_json::Value>,
}

/// The kind-specific part of an option: exactly one is set.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct OptionKind {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub remote_access: Option<serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_network: Option<Bandwidth>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub public_bandwidth: Option<Bandwidth>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub certification: Option<serde_json::Value>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Bandwidth {
    pub bandwidth_in_bps: u64,
}

/// An option of the zone (`GET /options`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OptionInfo {
    pub id: String,
    pub name: String,
    pub manageable: bool,
    #[serde(flatten)]
    pub kind: OptionKind,
}

/// An option on a server (`server.options`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerOption {
    pub id: String,
    pub name: String,
    pub status: String,
    pub manageable: bool,
    pub expires_at: Option<String>,
    #[serde(flatten)]
    pub kind: OptionKind,
}

/// `{editable, required, default_value}` of an OS's installation field.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OsField {
    pub editable: bool,
    pub required: bool,
    pub default_value: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Os {
    pub id: String,
    pub name: String,
    pub version: String,
    pub logo_url: String,
    pub ssh: OsField,
    pub user: OsField,
    pub password: OsField,
    pub service_user: OsField,
    pub service_password: OsField,
    pub enabled: bool,
    pub license_required: bool,
    pub allowed: bool,
    pub custom_partitioning_supported: bool,
    pub cloud_init_supported: bool,
    pub cloud_init_version: Option<String>,
    pub zone: String,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ServerEvent {
    pub id: String,
    pub action: String,
    pub updated_at: String,
    pub created_at: String,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ListOs {
    pub total_count: u64,
    pub os: Vec<Os>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ListOptions {
    pub total_count: u64,
    pub options: Vec<OptionInfo>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ListServerEvents {
    pub total_count: u64,
    pub events: Vec<ServerEvent>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SshKey {
    pub id: String,
    pub name: String,
    pub public_key: String,
    pub fingerprint: String,
    pub created_at: String,
    pub updated_at: String,
    pub organization_id: String,
    pub project_id: String,
    pub disabled: bool,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ListOffers {
    pub total_count: u64,
    pub offers: Vec<Offer>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ListServers {
    pub total_count: u64,
    pub servers: Vec<Server>,
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct ListSshKeys {
    pub ssh_keys: Vec<SshKey>,
    pub total_count: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn money_from_decimal_euros() {
        assert_eq!(Money::eur(0.091).units, 0);
        assert_eq!(Money::eur(0.091).nanos, 91_000_000);
        let m = Money::eur(329.99);
        assert_eq!((m.units, m.nanos), (329, 990_000_000));
        let m = Money::eur(9.589);
        assert_eq!((m.units, m.nanos), (9, 589_000_000));
        assert_eq!(Money::eur(0.0).nanos, 0);
        assert_eq!(Money::eur(0.0).currency_code, "EUR");
    }
}
