//! Injected failures of the simulated machines (`/_talossim/faults`): the
//! ways a real install goes wrong that a provider must survive, each
//! firing a bounded number of times so a scenario can assert the recovery.
//!
//! A fault is armed with a kind, optionally a server id (absent: any
//! server) and a count (default 1). Each occurrence consumes one unit of
//! count; a spent fault stays listed with its `fired` counter so tests can
//! check that it really happened, until the list is cleared.

use std::sync::Mutex;

use serde::{Deserialize, Serialize};

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FaultKind {
    /// The rescue SSH connection drops once about half the image reached
    /// the disk (every connection to the server, as a network cut would).
    SshDropDuringDd,
    /// `curl` flips a byte of the body it streams.
    CorruptDownload,
    /// The disk writer (`tee`, `dd of=`) stores one byte different from
    /// the stream it passes on.
    CorruptWrite,
    /// A normal boot of a good image never starts the maintenance API.
    MaintenanceNeverUp,
    /// The kubelet joins but reports its Node not Ready for the whole boot.
    NeverReady,
}

impl FaultKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FaultKind::SshDropDuringDd => "ssh_drop_during_dd",
            FaultKind::CorruptDownload => "corrupt_download",
            FaultKind::CorruptWrite => "corrupt_write",
            FaultKind::MaintenanceNeverUp => "maintenance_never_up",
            FaultKind::NeverReady => "never_ready",
        }
    }
}

/// A fault as posted.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultSpec {
    pub kind: FaultKind,
    #[serde(default)]
    pub server_id: Option<String>,
    /// Occurrences before the fault is spent; default 1, at least 1.
    #[serde(default)]
    pub count: Option<u32>,
}

/// A fault as listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Fault {
    pub id: u64,
    pub kind: FaultKind,
    pub server_id: Option<String>,
    pub count: u32,
    /// Occurrences left before the fault is spent.
    pub remaining: u32,
    /// Occurrences so far.
    pub fired: u64,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FaultError {
    #[error("count must be at least 1")]
    ZeroCount,
    #[error("server_id must not be empty")]
    EmptyServerId,
}

#[derive(Debug, Default)]
pub struct Faults {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    next_id: u64,
    faults: Vec<Fault>,
}

impl Faults {
    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        // A panic elsewhere leaves a list that is still consistent.
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    pub fn add(&self, spec: FaultSpec) -> Result<Fault, FaultError> {
        let count = spec.count.unwrap_or(1);
        if count == 0 {
            return Err(FaultError::ZeroCount);
        }
        if spec.server_id.as_deref() == Some("") {
            return Err(FaultError::EmptyServerId);
        }
        let mut inner = self.lock();
        inner.next_id += 1;
        let fault = Fault {
            id: inner.next_id,
            kind: spec.kind,
            server_id: spec.server_id,
            count,
            remaining: count,
            fired: 0,
        };
        inner.faults.push(fault.clone());
        tracing::info!(kind = fault.kind.as_str(), server_id = ?fault.server_id, count, "fault armed");
        Ok(fault)
    }

    pub fn list(&self) -> Vec<Fault> {
        self.lock().faults.clone()
    }

    pub fn clear(&self) {
        self.lock().faults.clear();
    }

    /// Consumes one occurrence of the oldest live fault of `kind` that
    /// applies to `server_id`; whether one fired.
    pub fn take(&self, kind: FaultKind, server_id: &str) -> bool {
        let mut inner = self.lock();
        let Some(fault) = inner.faults.iter_mut().find(|f| {
            f.kind == kind
                && f.remaining > 0
                && f.server_id.as_deref().is_none_or(|id| id == server_id)
        }) else {
            return false;
        };
        fault.remaining -= 1;
        fault.fired += 1;
        tracing::warn!(kind = kind.as_str(), %server_id, remaining = fault.remaining, "fault fired");
        true
    }

    /// Whether a live fault of `kind` applies to `server_id`, without
    /// consuming it (to decide whether watching for its trigger is needed).
    pub fn armed(&self, kind: FaultKind, server_id: &str) -> bool {
        self.lock().faults.iter().any(|f| {
            f.kind == kind
                && f.remaining > 0
                && f.server_id.as_deref().is_none_or(|id| id == server_id)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(json: &str) -> FaultSpec {
        serde_json::from_str(json).unwrap()
    }

    #[test]
    fn posted_bodies_parse_and_bad_ones_are_refused() {
        let s = spec(r#"{"kind":"corrupt_write","server_id":"srv-1","count":2}"#);
        assert_eq!(s.kind, FaultKind::CorruptWrite);
        assert_eq!(s.server_id.as_deref(), Some("srv-1"));
        assert_eq!(s.count, Some(2));
        assert_eq!(spec(r#"{"kind":"never_ready"}"#).count, None);
        assert!(serde_json::from_str::<FaultSpec>(r#"{"kind":"melt"}"#).is_err());
        assert!(serde_json::from_str::<FaultSpec>(r#"{"kind":"never_ready","x":1}"#).is_err());
        let faults = Faults::default();
        assert_eq!(
            faults.add(spec(r#"{"kind":"never_ready","count":0}"#)),
            Err(FaultError::ZeroCount)
        );
        assert_eq!(
            faults.add(spec(r#"{"kind":"never_ready","server_id":""}"#)),
            Err(FaultError::EmptyServerId)
        );
        assert!(faults.list().is_empty());
    }

    #[test]
    fn faults_fire_count_times_for_their_server_then_stay_listed() {
        let faults = Faults::default();
        faults
            .add(spec(
                r#"{"kind":"corrupt_download","server_id":"a","count":2}"#,
            ))
            .unwrap();
        assert!(!faults.take(FaultKind::CorruptDownload, "b"));
        assert!(!faults.take(FaultKind::CorruptWrite, "a"));
        assert!(faults.armed(FaultKind::CorruptDownload, "a"));
        assert!(faults.take(FaultKind::CorruptDownload, "a"));
        assert!(faults.take(FaultKind::CorruptDownload, "a"));
        assert!(!faults.take(FaultKind::CorruptDownload, "a"));
        assert!(!faults.armed(FaultKind::CorruptDownload, "a"));
        let listed = faults.list();
        assert_eq!(listed.len(), 1);
        assert_eq!((listed[0].fired, listed[0].remaining), (2, 0));
        let json = serde_json::to_value(&listed[0]).unwrap();
        assert_eq!(json["kind"], "corrupt_download");
        assert_eq!(json["fired"], 2);
        faults.clear();
        assert!(faults.list().is_empty());
    }

    #[test]
    fn a_fault_without_server_applies_to_any_and_oldest_fires_first() {
        let faults = Faults::default();
        let any = faults.add(spec(r#"{"kind":"never_ready"}"#)).unwrap();
        let b = faults
            .add(spec(r#"{"kind":"never_ready","server_id":"b"}"#))
            .unwrap();
        assert!(faults.take(FaultKind::NeverReady, "b"));
        assert!(faults.take(FaultKind::NeverReady, "b"));
        assert!(!faults.take(FaultKind::NeverReady, "z"));
        let fired: Vec<(u64, u64)> = faults.list().iter().map(|f| (f.id, f.fired)).collect();
        assert_eq!(fired, vec![(any.id, 1), (b.id, 1)]);
    }
}
