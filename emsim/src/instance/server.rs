//! One simulated Instance: its state machine (which actions each state allows,
//! what each step leads to) and its wire form. Pure: time, ids and the volumes
//! it points at come from the caller.

use std::collections::BTreeMap;
use std::fmt;
use std::net::Ipv4Addr;

use axum::http::StatusCode;
use serde::Serialize;

use crate::clock::{SimTime, format_time};
use crate::error::ApiError;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum VmState {
    #[serde(rename = "stopped")]
    Stopped,
    #[serde(rename = "starting")]
    Starting,
    #[serde(rename = "running")]
    Running,
    #[serde(rename = "stopping")]
    Stopping,
}

impl VmState {
    pub fn as_str(self) -> &'static str {
        match self {
            VmState::Stopped => "stopped",
            VmState::Starting => "starting",
            VmState::Running => "running",
            VmState::Stopping => "stopping",
        }
    }

    /// What the recorded answers list (terraform-provider-scaleway
    /// `instance/testdata/action-server-basic.cassette.yaml`: stopped,
    /// `starting`/`allocating node`, `stopping`/`rebooting`,
    /// `starting`/`rebooting`, running).
    pub fn allowed_actions(self) -> Vec<&'static str> {
        match self {
            VmState::Stopped => vec!["poweron", "backup"],
            VmState::Running => vec!["poweroff", "terminate", "reboot", "stop_in_place", "backup"],
            VmState::Starting | VmState::Stopping => vec!["stop_in_place", "backup"],
        }
    }
}

/// `POST /servers/{id}/action` actions that emsim simulates.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VmAction {
    Poweron,
    Poweroff,
    Reboot,
    Terminate,
}

impl VmAction {
    pub fn parse(action: &str) -> Result<Self, ApiError> {
        match action {
            "poweron" => Ok(VmAction::Poweron),
            "poweroff" => Ok(VmAction::Poweroff),
            "reboot" => Ok(VmAction::Reboot),
            "terminate" => Ok(VmAction::Terminate),
            "" => Err(ApiError::invalid(
                "action",
                "required",
                "required key not provided",
            )),
            other => Err(ApiError::invalid(
                "action",
                "constraint",
                format!("emsim simulates poweron, poweroff, reboot and terminate, not {other:?}"),
            )),
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            VmAction::Poweron => "poweron",
            VmAction::Poweroff => "poweroff",
            VmAction::Reboot => "reboot",
            VmAction::Terminate => "terminate",
        }
    }
}

/// What happens when a server's pending deadline passes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(tag = "step", rename_all = "snake_case")]
pub enum Step {
    /// The end of `allocating node`: no capacity sends the server back to
    /// `stopped` without it ever running.
    Allocated {
        out_of_stock: bool,
    },
    /// The end of a GPU type's `provisioning node`.
    Provisioned,
    /// A reboot's `stopping` ends: `starting`/`rebooting` until `Rebooted`.
    RebootHalted,
    /// The end of a reboot.
    Rebooted,
    Stopped,
    /// The server disappears (GET answers 404).
    Terminated,
}

#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct VmPending {
    #[serde(serialize_with = "ser_time")]
    pub at: SimTime,
    #[serde(flatten)]
    pub step: Step,
}

/// Bytes that must never reach a log: user data holds a bootstrap token.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Secret(pub Vec<u8>);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<{} bytes>", self.0.len())
    }
}

#[derive(Debug, Clone)]
pub struct VmRecord {
    pub id: String,
    pub zone: String,
    pub name: String,
    pub commercial_type: String,
    pub arch: String,
    pub gpus: u32,
    pub organization: String,
    pub project: String,
    pub tags: Vec<String>,
    pub image_id: Option<String>,
    pub boot_type: String,
    pub state: VmState,
    pub state_detail: &'static str,
    pub pending: Option<VmPending>,
    /// Index (`"0"` is the root) to volume id.
    pub volumes: BTreeMap<String, String>,
    pub dynamic_ip_required: bool,
    /// The dynamic IP's id while it exists (from running to poweroff).
    pub dynamic_ip_id: Option<String>,
    /// Flexible IPs attached at creation.
    pub flexible_ips: Vec<String>,
    /// Loopback address of the VM (where talos-sim would serve it), also its
    /// public IPv4.
    pub address: Ipv4Addr,
    pub mac_address: String,
    pub security_group: Option<String>,
    pub placement_group: Option<String>,
    pub protected: bool,
    pub user_data: BTreeMap<String, Secret>,
    pub created_at: SimTime,
    pub modified_at: SimTime,
    /// `modified_at` before the reboot in progress: what the API shows again
    /// while the reboot is `starting` (as recorded).
    pub modified_before_reboot: Option<SimTime>,
    /// Actions asked, for tests: `(at, action)`.
    pub history: Vec<(SimTime, &'static str)>,
    pub deleted_at: Option<SimTime>,
}

impl VmRecord {
    /// Whether `action` is allowed now. The message for a server that is not
    /// running is the SDK's recorded one; the others follow it (INFERENCE).
    pub fn check(&self, action: VmAction) -> Result<(), ApiError> {
        let wanted = match action {
            VmAction::Poweron => VmState::Stopped,
            VmAction::Poweroff | VmAction::Reboot | VmAction::Terminate => VmState::Running,
        };
        if self.state != wanted {
            return Err(ApiError::invalid_request(
                StatusCode::BAD_REQUEST,
                format!("server should be {}", wanted.as_str()),
            ));
        }
        if self.protected && action == VmAction::Terminate {
            return Err(self.protected_error());
        }
        Ok(())
    }

    /// `DELETE /servers/{id}` works on a stopped server only.
    pub fn check_delete(&self) -> Result<(), ApiError> {
        if self.state != VmState::Stopped {
            return Err(ApiError::invalid_request(
                StatusCode::BAD_REQUEST,
                "server should be stopped",
            ));
        }
        if self.protected {
            return Err(self.protected_error());
        }
        Ok(())
    }

    fn protected_error(&self) -> ApiError {
        ApiError::invalid_request(StatusCode::BAD_REQUEST, "server is protected")
    }

    pub fn is_on(&self) -> bool {
        self.state == VmState::Running
    }
}

pub fn ser_time<S: serde::Serializer>(t: &SimTime, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&format_time(*t))
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::Utc;

    fn vm(state: VmState) -> VmRecord {
        let now = Utc::now();
        VmRecord {
            id: "6bc4b49b-bd60-4d64-8ffc-9346f18ef88b".into(),
            zone: "fr-par-2".into(),
            name: "n".into(),
            commercial_type: "POP2-2C-8G".into(),
            arch: "x86_64".into(),
            gpus: 0,
            organization: "o".into(),
            project: "p".into(),
            tags: vec![],
            image_id: None,
            boot_type: "local".into(),
            state,
            state_detail: "",
            pending: None,
            volumes: BTreeMap::new(),
            dynamic_ip_required: true,
            dynamic_ip_id: None,
            flexible_ips: vec![],
            address: Ipv4Addr::new(127, 77, 0, 10),
            mac_address: String::new(),
            security_group: None,
            placement_group: None,
            protected: false,
            user_data: BTreeMap::from([("cloud-init".into(), Secret(b"token: abc".to_vec()))]),
            created_at: now,
            modified_at: now,
            modified_before_reboot: None,
            history: vec![],
            deleted_at: None,
        }
    }

    #[test]
    fn actions_follow_the_state() {
        let stopped = vm(VmState::Stopped);
        assert_eq!(stopped.check(VmAction::Poweron), Ok(()));
        assert_eq!(stopped.check_delete(), Ok(()));
        let refused = stopped.check(VmAction::Terminate).unwrap_err();
        assert_eq!(refused.status(), StatusCode::BAD_REQUEST);
        assert_eq!(
            refused.body().unwrap(),
            serde_json::json!({"message":"server should be running","type":"invalid_request_error"})
        );
        let running = vm(VmState::Running);
        for action in [VmAction::Poweroff, VmAction::Reboot, VmAction::Terminate] {
            assert_eq!(running.check(action), Ok(()), "{action:?}");
        }
        assert!(running.check(VmAction::Poweron).is_err());
        assert!(running.check_delete().is_err());
        for state in [VmState::Starting, VmState::Stopping] {
            let busy = vm(state);
            assert!(busy.check(VmAction::Poweron).is_err());
            assert!(busy.check(VmAction::Poweroff).is_err());
            assert!(busy.check_delete().is_err());
        }
        let mut protected = vm(VmState::Running);
        protected.protected = true;
        assert!(protected.check(VmAction::Terminate).is_err());
        assert_eq!(protected.check(VmAction::Poweroff), Ok(()));
    }

    #[test]
    fn user_data_never_shows_in_debug_output() {
        let record = vm(VmState::Stopped);
        let debug = format!("{record:?}");
        assert!(!debug.contains("token"), "{debug}");
        assert!(debug.contains("<10 bytes>"), "{debug}");
    }

    #[test]
    fn unknown_and_missing_actions_are_invalid_arguments() {
        assert_eq!(VmAction::parse("poweron"), Ok(VmAction::Poweron));
        for (action, reason) in [("", "required"), ("backup", "constraint")] {
            let body = VmAction::parse(action).unwrap_err().body().unwrap();
            assert_eq!(body["type"], "invalid_arguments");
            assert_eq!(body["details"][0]["reason"], reason);
        }
    }
}
