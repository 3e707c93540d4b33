//! The event stream talos-sim follows (`docs/simulator-contracts.md`): one JSON
//! object per line, `seq` increasing by one per event.

use serde::Serialize;

use crate::model::{Offer, Server};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EventKind {
    /// The server finished booting (delivery done, reboot or start reached `ready`).
    PowerOn,
    /// The server began stopping, rebooting or deleting.
    PowerOff,
    /// The server is gone; GET answers 404.
    Deleted,
}

/// What brought the event about: the request behind it, or the delivery.
/// talos-sim tells a reboot from a stop and start by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Cause {
    /// The order was delivered (`power_on`).
    Deliver,
    /// `POST .../reboot`: `power_off` at the call (when the server was on),
    /// `power_on` once it is `ready` again.
    Reboot,
    /// `POST .../start`: `power_on` once `ready`.
    Start,
    /// `POST .../stop`: `power_off` at the call.
    Stop,
    /// `DELETE /servers/{id}`: `power_off` at the call, `deleted` when gone.
    Delete,
    /// `POST /_emsim/reset`: `power_off` and `deleted` for every server.
    Reset,
}

impl Cause {
    pub fn as_str(self) -> &'static str {
        match self {
            Cause::Deliver => "deliver",
            Cause::Reboot => "reboot",
            Cause::Start => "start",
            Cause::Stop => "stop",
            Cause::Delete => "delete",
            Cause::Reset => "reset",
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Event {
    pub seq: u64,
    #[serde(rename = "type")]
    pub kind: EventKind,
    pub at: String,
    pub cause: Cause,
    /// The server exactly as `GET /servers/{id}` returned it at that moment.
    pub server: Server,
    /// Present on every event: the address is allocated at order time.
    pub address: String,
    /// `power_on` only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub boot_type: Option<String>,
    /// `power_on` only; empty for a normal boot.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rescue_ssh_public_keys: Option<Vec<String>>,
    /// `power_on` in rescue only.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub rescue_user: Option<String>,
    pub offer: Offer,
}

impl Event {
    /// One NDJSON line, newline included.
    pub fn to_line(&self) -> String {
        let mut line = serde_json::to_string(self).expect("events always serialize");
        line.push('\n');
        line
    }
}
