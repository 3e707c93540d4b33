//! One simulated server: its state, which requests its status allows, and its
//! wire form. Pure: time and randomness come from the caller.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use axum::http::StatusCode;
use serde::Serialize;

use crate::clock::{SimTime, format_time};
use crate::error::ApiError;
use crate::events::{Cause, Event};
use crate::model::{self, Ip, RescueServer, Server, ServerOption};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Delivering,
    Ready,
    Stopping,
    Stopped,
    Starting,
    Deleting,
    /// The order could not be fulfilled after all (a fault): only delete works.
    OutOfStock,
}

impl Status {
    pub fn as_str(self) -> &'static str {
        match self {
            Status::Delivering => "delivering",
            Status::Ready => "ready",
            Status::Stopping => "stopping",
            Status::Stopped => "stopped",
            Status::Starting => "starting",
            Status::Deleting => "deleting",
            Status::OutOfStock => "out_of_stock",
        }
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum BootType {
    Normal,
    Rescue,
}

impl BootType {
    pub fn as_str(self) -> &'static str {
        match self {
            BootType::Normal => "normal",
            BootType::Rescue => "rescue",
        }
    }

    /// `unknown_boot_type` is the SDK's zero value; the API boots normally.
    pub fn parse(s: Option<&str>) -> Result<Self, ApiError> {
        match s {
            None | Some("normal") | Some("unknown_boot_type") => Ok(BootType::Normal),
            Some("rescue") => Ok(BootType::Rescue),
            Some(other) => Err(ApiError::invalid(
                "boot_type",
                "constraint",
                format!("unknown boot type {other:?}, expected normal or rescue"),
            )),
        }
    }
}

/// What happens when a server's pending deadline passes.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "action", rename_all = "snake_case")]
pub enum Action {
    Deliver,
    /// Delivery fails: the server turns `out_of_stock` (an injected fault).
    OutOfStock,
    /// Reach `ready` booted as asked, with the rescue keys fixed at request time.
    Boot {
        boot_type: BootType,
        rescue_keys: Vec<String>,
        /// Reboot or start: what the `power_on` event says.
        #[serde(skip)]
        cause: Cause,
    },
    Stop,
    Delete,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Pending {
    #[serde(serialize_with = "ser_time")]
    pub at: SimTime,
    #[serde(flatten)]
    pub action: Action,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct BootRecord {
    #[serde(serialize_with = "ser_time")]
    pub at: SimTime,
    pub boot_type: BootType,
    pub ssh_key_ids: Vec<String>,
}

/// Power requests checked against the current status.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Request {
    Reboot,
    Start,
    Stop,
    Delete,
}

/// Simulated seconds from `POST /install` to `installing` and to `completed`
/// (recordings: installing at ~30 s, completed at ~6 min).
pub const INSTALL_STARTS_AFTER: f64 = 30.0;
pub const INSTALL_COMPLETES_AFTER: f64 = 360.0;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum InstallStatus {
    ToInstall,
    Installing,
    Completed,
}

impl InstallStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            InstallStatus::ToInstall => "to_install",
            InstallStatus::Installing => "installing",
            InstallStatus::Completed => "completed",
        }
    }
}

#[derive(Debug, Clone)]
pub struct InstallRecord {
    pub os_id: String,
    pub hostname: String,
    pub ssh_key_ids: Vec<String>,
    pub user: String,
    pub started_at: SimTime,
    pub status: InstallStatus,
}

/// One entry of `GET /servers/{id}/events`.
#[derive(Debug, Clone)]
pub struct ActionRecord {
    pub action: &'static str,
    pub at: SimTime,
}

#[derive(Debug, Clone)]
pub struct ServerRecord {
    pub id: String,
    pub zone: String,
    pub organization_id: String,
    pub project_id: String,
    pub name: String,
    pub description: String,
    pub tags: Vec<String>,
    pub offer_id: String,
    pub offer_name: String,
    pub quota_name: String,
    pub status: Status,
    pub boot_type: BootType,
    pub created_at: SimTime,
    pub updated_at: SimTime,
    pub address: Ipv4Addr,
    pub ipv6: Ipv6Addr,
    pub ip_ids: [String; 2],
    pub delivered: bool,
    pub rescue_server: Option<RescueServer>,
    pub pending: Option<Pending>,
    /// The `power_on` event of the current boot, replayed to new stream
    /// subscribers; `None` while the server is off.
    pub powered_on: Option<Arc<Event>>,
    pub boot_history: Vec<BootRecord>,
    pub deleted_at: Option<SimTime>,
    pub protected: bool,
    pub user_data: Option<String>,
    pub install: Option<InstallRecord>,
    pub options: Vec<ServerOption>,
    pub actions: Vec<ActionRecord>,
}

impl ServerRecord {
    /// Whether `req` is allowed in the current status. The real API answers 400
    /// "Server is not delivered" for power actions during delivery; the other
    /// refusals are INFERENCE (409 `transient_state` while a transition runs).
    pub fn check(&self, req: Request) -> Result<(), ApiError> {
        use Request::*;
        use Status::*;
        match (self.status, req) {
            (Deleting, _) => Err(self.transient()),
            (_, Delete) => Ok(()),
            (Delivering | OutOfStock, _) => Err(ApiError::not_delivered()),
            (Stopping | Starting, _) => Err(self.transient()),
            (Ready, Reboot | Stop) | (Stopped, Reboot | Start) => Ok(()),
            (Ready, Start) => Err(ApiError::message(
                StatusCode::BAD_REQUEST,
                "Server is already started",
            )),
            (Stopped, Stop) => Err(ApiError::message(
                StatusCode::BAD_REQUEST,
                "Server is already stopped",
            )),
        }
    }

    fn transient(&self) -> ApiError {
        ApiError::TransientState {
            resource: "baremetal_server".into(),
            resource_id: self.id.clone(),
            current_state: self.status.as_str().into(),
        }
    }

    pub fn domain(&self) -> String {
        format!("{}.{}.baremetal.scw.cloud", self.id, self.zone)
    }

    /// The domain and reverse DNS are set once an installation started
    /// (recordings: `domain: ""` and reverses `""`/`unknown` before).
    fn has_domain(&self) -> bool {
        self.install
            .as_ref()
            .is_some_and(|i| i.status != InstallStatus::ToInstall)
    }

    /// `GET /servers/{id}/events`, oldest first; ids derived from the server
    /// id and position so they are stable without using the RNG.
    pub fn events_wire(&self) -> Vec<model::ServerEvent> {
        self.actions
            .iter()
            .enumerate()
            .map(|(n, a)| model::ServerEvent {
                id: uuid::Builder::from_md5_bytes(
                    md5::compute(format!("emsim-event:{}:{n}", self.id)).0,
                )
                .into_uuid()
                .to_string(),
                action: a.action.into(),
                created_at: format_time(a.at),
                updated_at: format_time(a.at),
            })
            .collect()
    }

    /// The server as `GET /servers/{id}` returns it.
    pub fn to_wire(&self) -> Server {
        let ips = if self.delivered {
            // The real API lists the IPv6 first: clients must pick by version.
            let (reverse, reverse_status) = if self.has_domain() {
                (self.domain(), "active")
            } else {
                (String::new(), "unknown")
            };
            let ip = |id: &str, address: String, version: &str| Ip {
                id: id.to_string(),
                address,
                reverse: reverse.clone(),
                version: version.into(),
                reverse_status: reverse_status.into(),
                reverse_status_message: String::new(),
            };
            vec![
                ip(&self.ip_ids[0], self.ipv6.to_string(), "IPv6"),
                ip(&self.ip_ids[1], self.address.to_string(), "IPv4"),
            ]
        } else {
            vec![]
        };
        let ping_status = match (self.delivered, self.status) {
            (false, _) => "ping_status_unknown",
            (true, Status::Ready) => "ping_status_up",
            (true, _) => "ping_status_down",
        };
        Server {
            id: self.id.clone(),
            organization_id: self.organization_id.clone(),
            name: self.name.clone(),
            description: self.description.clone(),
            updated_at: format_time(self.updated_at),
            created_at: format_time(self.created_at),
            status: self.status.as_str().into(),
            offer_id: self.offer_id.clone(),
            offer_name: self.offer_name.clone(),
            install: self.install.as_ref().map(|i| model::Install {
                os_id: i.os_id.clone(),
                hostname: i.hostname.clone(),
                ssh_key_ids: i.ssh_key_ids.clone(),
                status: i.status.as_str().into(),
                user: i.user.clone(),
                service_user: String::new(),
                service_url: String::new(),
                partitioning_schema: None,
            }),
            tags: self.tags.clone(),
            ips,
            domain: if self.has_domain() {
                self.domain()
            } else {
                String::new()
            },
            boot_type: self.boot_type.as_str().into(),
            ping_status: ping_status.into(),
            project_id: self.project_id.clone(),
            zone: self.zone.clone(),
            options: self.options.clone(),
            rescue_server: self.rescue_server.clone(),
            protected: self.protected,
            user_data: self.user_data.clone(),
        }
    }
}

fn ser_time<S: serde::Serializer>(t: &SimTime, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format_time(*t))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;

    fn record(status: Status) -> ServerRecord {
        let now = Utc::now();
        ServerRecord {
            id: "3d3662cd-1da0-4b00-8828-61d44fa9ee49".into(),
            zone: "fr-par-2".into(),
            organization_id: "o".into(),
            project_id: "p".into(),
            name: "n".into(),
            description: String::new(),
            tags: vec![],
            offer_id: "offer".into(),
            offer_name: "EM-A115X-SSD".into(),
            quota_name: "EM_A115X_SSD".into(),
            status,
            boot_type: BootType::Normal,
            created_at: now,
            updated_at: now,
            address: Ipv4Addr::new(127, 77, 0, 10),
            ipv6: "2001:db8::a".parse().unwrap(),
            ip_ids: ["a".into(), "b".into()],
            delivered: status != Status::Delivering,
            rescue_server: None,
            pending: None,
            powered_on: None,
            boot_history: vec![],
            deleted_at: None,
            protected: false,
            user_data: None,
            install: None,
            options: vec![],
            actions: vec![],
        }
    }

    #[test]
    fn power_requests_follow_the_status() {
        let delivering = record(Status::Delivering);
        for req in [Request::Reboot, Request::Start, Request::Stop] {
            assert_eq!(delivering.check(req), Err(ApiError::not_delivered()));
        }
        assert_eq!(delivering.check(Request::Delete), Ok(()));

        let ready = record(Status::Ready);
        assert_eq!(ready.check(Request::Reboot), Ok(()));
        assert_eq!(ready.check(Request::Stop), Ok(()));
        assert_eq!(
            ready.check(Request::Start).unwrap_err().status(),
            StatusCode::BAD_REQUEST
        );

        let stopped = record(Status::Stopped);
        assert_eq!(stopped.check(Request::Start), Ok(()));
        assert_eq!(stopped.check(Request::Reboot), Ok(()));
        assert!(stopped.check(Request::Stop).is_err());

        for status in [Status::Stopping, Status::Starting] {
            let r = record(status);
            assert_eq!(
                r.check(Request::Reboot).unwrap_err().status(),
                StatusCode::CONFLICT
            );
            assert_eq!(r.check(Request::Delete), Ok(()));
        }
        let deleting = record(Status::Deleting);
        assert_eq!(
            deleting.check(Request::Delete).unwrap_err().status(),
            StatusCode::CONFLICT
        );
    }

    #[test]
    fn ips_appear_once_delivered_ipv6_first() {
        let delivering = record(Status::Delivering).to_wire();
        assert!(delivering.ips.is_empty());
        assert_eq!(delivering.domain, "");
        assert_eq!(delivering.ping_status, "ping_status_unknown");
        let ready = record(Status::Ready).to_wire();
        assert_eq!(ready.ips.len(), 2);
        assert_eq!(ready.ips[0].version, "IPv6");
        assert_eq!(ready.ips[1].version, "IPv4");
        assert_eq!(ready.ips[1].address, "127.77.0.10");
        assert_eq!(ready.domain, "", "no domain before an install");
        assert_eq!(ready.ips[1].reverse_status, "unknown");
        let mut installed = record(Status::Ready);
        installed.install = Some(InstallRecord {
            os_id: "os".into(),
            hostname: "h".into(),
            ssh_key_ids: vec![],
            user: "ubuntu".into(),
            started_at: Utc::now(),
            status: InstallStatus::Installing,
        });
        let installed = installed.to_wire();
        assert_eq!(
            installed.domain,
            "3d3662cd-1da0-4b00-8828-61d44fa9ee49.fr-par-2.baremetal.scw.cloud"
        );
        assert_eq!(installed.ips[0].reverse, installed.domain);
        assert_eq!(installed.install.unwrap().status, "installing");
    }

    #[test]
    fn boot_type_parsing() {
        assert_eq!(BootType::parse(None), Ok(BootType::Normal));
        assert_eq!(
            BootType::parse(Some("unknown_boot_type")),
            Ok(BootType::Normal)
        );
        assert_eq!(BootType::parse(Some("rescue")), Ok(BootType::Rescue));
        assert!(BootType::parse(Some("pxe")).is_err());
    }
}
