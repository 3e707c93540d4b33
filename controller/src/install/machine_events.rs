//! The Events the machine emits: phase changes and retries.

use super::{Plan, State};
use crate::install::{InstallEvent, Phase};

pub(in crate::install) fn phase_event(message: String) -> InstallEvent {
    InstallEvent {
        warning: false,
        reason: "InstallPhase".to_string(),
        message,
    }
}

pub(in crate::install) fn retry_event(message: String) -> InstallEvent {
    InstallEvent {
        warning: true,
        reason: "InstallRetry".to_string(),
        message,
    }
}

/// The InstallPhase message for entering `state.phase`; `None` for the
/// terminal phases (the driver reports those with their own reasons).
pub fn phase_message(plan: &Plan, state: &State) -> Option<String> {
    let or_unknown = |v: &Option<String>| v.clone().unwrap_or_else(|| "?".to_string());
    Some(match state.phase {
        Phase::Ordered => format!(
            "ordered: server {} ({}) ordered in {}; waiting for delivery",
            plan.server_id, plan.offer_name, plan.zone
        ),
        Phase::Delivering => format!(
            "delivering: server {} ({}) is being delivered in {}",
            plan.server_id, plan.offer_name, plan.zone
        ),
        Phase::Ready if state.rescue_returns > 0 => format!(
            "ready: rebooting server {} into rescue mode again (return {}/{}) with SSH key {}",
            plan.server_id, state.rescue_returns, plan.rescue_returns, plan.rescue_ssh_key_id
        ),
        Phase::Ready if state.step == super::Step::AttachNetwork => format!(
            "ready: server {} is delivered; attaching it to Private Network {}",
            plan.server_id,
            plan.private_network.as_deref().unwrap_or("?")
        ),
        Phase::Ready => format!(
            "ready: server {} is delivered; rebooting into rescue mode with SSH key {}",
            plan.server_id, plan.rescue_ssh_key_id
        ),
        Phase::Rescue => {
            "rescue: rescue boot requested; waiting for the rescue system's SSH".to_string()
        }
        Phase::Imaging => format!(
            "imaging: SSH session open as {}@{} (host key {}); finding the install disk and the primary NIC",
            or_unknown(&state.user),
            or_unknown(&state.host),
            or_unknown(&state.host_key)
        ),
        Phase::Booting => match &state.written {
            Some(w) => format!(
                "booting: image verified on /dev/{} ({} bytes, sha256 {}); rebooting into Talos",
                or_unknown(&state.disk),
                w.bytes,
                w.sha256
            ),
            None => "booting: rebooting into Talos".to_string(),
        },
        Phase::Maintenance => format!(
            "maintenance: Talos maintenance API up on {}; applying the machine config",
            or_unknown(&state.host)
        ),
        Phase::Configured => format!(
            "configured: machine config applied (install disk /dev/{}, primary NIC {}); waiting for Node {} to be Ready",
            or_unknown(&state.disk),
            or_unknown(&state.mac),
            plan.node_name
        ),
        Phase::Standby => format!(
            "standby: Talos maintenance API up on {} (install disk /dev/{}, primary NIC {}); the server waits without config to be adopted",
            or_unknown(&state.host),
            or_unknown(&state.disk),
            or_unknown(&state.mac)
        ),
        Phase::Joined | Phase::Failed => return None,
    })
}
