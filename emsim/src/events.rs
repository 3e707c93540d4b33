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

#[derive(Debug, Clone, Serialize)]
pub struct Event {
    pub seq: u64,
    #[serde(rename = "type")]
    pub kind: EventKind,
    pub at: String,
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
