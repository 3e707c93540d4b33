//! The replay record of a reboot: one NodeClaim annotation, written before
//! the reboot call (`issuing`) and after the API accepted it (`accepted`), so
//! that a repeated call for the same operation, from this process, a
//! restarted one or the next leader, reboots the machine once.

use std::collections::BTreeMap;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

/// The NodeClaim annotation holding the [`RebootRecord`] (JSON).
pub const REBOOT_ANNOTATION: &str = "karpenter.scaleway.com/reboot";

/// Core's annotation with the Node's `bootID` before the reboot
/// (`v1.RebootPreBootIDAnnotationKey`), written before its first Reboot call
/// of an episode and removed when the episode ends.
pub const PRE_BOOT_ID_ANNOTATION: &str = "karpenter.sh/reboot-pre-boot-id";

/// Which kind of machine a NodeClaim runs on (the `kind` of the metric).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum MachineKind {
    /// An Elastic Metal server (`scaleway://baremetal/...`).
    Baremetal,
    /// An Instance, a VM (`scaleway://instance/...`).
    Instance,
}

impl MachineKind {
    pub fn as_str(self) -> &'static str {
        match self {
            MachineKind::Baremetal => "baremetal",
            MachineKind::Instance => "instance",
        }
    }

    /// How Events name it.
    pub fn noun(self) -> &'static str {
        match self {
            MachineKind::Baremetal => "Elastic Metal server",
            MachineKind::Instance => "VM",
        }
    }
}

/// How far a reboot call got.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum RebootState {
    /// Written just before the call; whether the call landed is unknown
    /// until the server's timestamp is read again.
    Issuing,
    /// The API accepted the call.
    Accepted,
}

/// One reboot operation as the NodeClaim remembers it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RebootRecord {
    /// Core's operation id (`<uid>-<requested unix nanos>-<pre-boot bootID>`).
    pub operation: String,
    pub state: RebootState,
    pub kind: MachineKind,
    pub zone: String,
    pub server_id: String,
    /// The server's `updated_at` (Elastic Metal) or `modification_date`
    /// (Instance) read just before the call: a call that landed moves it.
    pub server_stamp: String,
    /// Core's pre-boot `bootID` of this episode, when it was on the
    /// NodeClaim: what the deadline compares the Node's `bootID` with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pre_boot_id: Option<String>,
    /// When `issuing` was written: the call was made right after, and the
    /// reboot deadline counts from here.
    pub issued_at: DateTime<Utc>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub accepted_at: Option<DateTime<Utc>>,
}

impl RebootRecord {
    /// The record on a NodeClaim's annotations; a malformed one reads as
    /// none (the next operation replaces it).
    pub fn of(annotations: &BTreeMap<String, String>) -> Option<RebootRecord> {
        serde_json::from_str(annotations.get(REBOOT_ANNOTATION)?).ok()
    }

    /// The annotation's value.
    pub fn to_json(&self) -> String {
        serde_json::to_string(self).expect("a record always serialises")
    }

    /// The same record, accepted at `at` (an accepted record keeps its time).
    pub fn accepted(&self, at: DateTime<Utc>) -> RebootRecord {
        RebootRecord {
            state: RebootState::Accepted,
            accepted_at: self.accepted_at.or(Some(at)),
            ..self.clone()
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record() -> RebootRecord {
        RebootRecord {
            operation: "uid-1-1700000000000000000-boot-a".into(),
            state: RebootState::Issuing,
            kind: MachineKind::Baremetal,
            zone: "fr-par-2".into(),
            server_id: "srv-1".into(),
            server_stamp: "2026-11-22T10:00:10.000000Z".into(),
            pre_boot_id: Some("boot-a".into()),
            issued_at: "2026-11-22T10:05:00Z".parse().unwrap(),
            accepted_at: None,
        }
    }

    #[test]
    fn round_trips_through_the_annotation() {
        let r = record();
        let json = r.to_json();
        assert!(json.contains("\"state\":\"issuing\""), "{json}");
        assert!(json.contains("\"kind\":\"baremetal\""), "{json}");
        assert!(json.contains("\"serverStamp\""), "{json}");
        assert!(!json.contains("acceptedAt"), "{json}");
        let annotations = BTreeMap::from([(REBOOT_ANNOTATION.to_string(), json)]);
        assert_eq!(RebootRecord::of(&annotations), Some(r.clone()));

        let at: DateTime<Utc> = "2026-11-22T10:05:01Z".parse().unwrap();
        let accepted = r.accepted(at);
        assert_eq!(accepted.state, RebootState::Accepted);
        assert_eq!(accepted.accepted_at, Some(at));
        assert_eq!(accepted.issued_at, r.issued_at);
        let later: DateTime<Utc> = "2026-11-22T10:09:00Z".parse().unwrap();
        assert_eq!(accepted.accepted(later).accepted_at, Some(at));
    }

    #[test]
    fn a_malformed_or_missing_record_reads_as_none() {
        assert_eq!(RebootRecord::of(&BTreeMap::new()), None);
        let bad = BTreeMap::from([(REBOOT_ANNOTATION.to_string(), "{\"operation\":1}".into())]);
        assert_eq!(RebootRecord::of(&bad), None);
    }
}
