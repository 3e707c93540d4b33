//! Injected failures of the simulated machines (`/_talossim/faults`): the
//! ways a real install or a running node goes wrong that a provider must
//! survive, each firing a bounded number of times so a scenario can assert
//! the recovery.
//!
//! A fault is armed with a kind, optionally a server id and/or a node name
//! (absent: any server) and a count (default 1; `unhealthy_after_every_boot`
//! defaults to every boot until cleared). Each occurrence consumes one unit
//! of count; a spent fault stays listed with its `fired` counter so tests
//! can check that it really happened, until the list is cleared.

use std::sync::Mutex;

use serde::{Deserialize, Serialize};
use tokio::sync::Notify;

/// How long a node hit by `unhealthy_after_every_boot` reports Ready after
/// each boot unless the fault says otherwise: two of Karpenter core's 15 s
/// polls, so that core sees the reboot succeed before the node fails again.
pub const DEFAULT_UNHEALTHY_DELAY_MS: u64 = 30_000;

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
    /// The running kubelet reports Ready=False (its container runtime is
    /// down) until the machine reboots.
    NotReadyUntilReboot,
    /// The running kubelet stops posting status and renewing its Lease (a
    /// wedged kernel) until the machine reboots.
    SilentUntilReboot,
    /// The next normal boot hangs before the OS starts: a reboot that
    /// never brings the node back.
    RebootNeverReturns,
    /// After every boot the node reports Ready, then Ready=False after
    /// `delay_ms`: a fault no reboot cures.
    UnhealthyAfterEveryBoot,
}

impl FaultKind {
    pub fn as_str(self) -> &'static str {
        match self {
            FaultKind::SshDropDuringDd => "ssh_drop_during_dd",
            FaultKind::CorruptDownload => "corrupt_download",
            FaultKind::CorruptWrite => "corrupt_write",
            FaultKind::MaintenanceNeverUp => "maintenance_never_up",
            FaultKind::NeverReady => "never_ready",
            FaultKind::NotReadyUntilReboot => "not_ready_until_reboot",
            FaultKind::SilentUntilReboot => "silent_until_reboot",
            FaultKind::RebootNeverReturns => "reboot_never_returns",
            FaultKind::UnhealthyAfterEveryBoot => "unhealthy_after_every_boot",
        }
    }

    /// Faults of an installed node, which knows its node name: they may be
    /// aimed at it by `node_name`.
    fn acts_on_nodes(self) -> bool {
        matches!(
            self,
            FaultKind::NeverReady
                | FaultKind::NotReadyUntilReboot
                | FaultKind::SilentUntilReboot
                | FaultKind::RebootNeverReturns
                | FaultKind::UnhealthyAfterEveryBoot
        )
    }
}

/// A fault as posted.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct FaultSpec {
    pub kind: FaultKind,
    #[serde(default)]
    pub server_id: Option<String>,
    /// The Node's name (the kubelet's faults only).
    #[serde(default)]
    pub node_name: Option<String>,
    /// Occurrences before the fault is spent; default 1 (every boot for
    /// `unhealthy_after_every_boot`), at least 1.
    #[serde(default)]
    pub count: Option<u32>,
    /// `unhealthy_after_every_boot` only: real milliseconds between the
    /// kubelet's first Ready report of a boot and its NotReady.
    #[serde(default)]
    pub delay_ms: Option<u64>,
}

/// A fault as listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Fault {
    pub id: u64,
    pub kind: FaultKind,
    pub server_id: Option<String>,
    pub node_name: Option<String>,
    /// `None` (null): until cleared.
    pub count: Option<u32>,
    /// Occurrences left before the fault is spent (`None`: unlimited).
    pub remaining: Option<u32>,
    /// Occurrences so far.
    pub fired: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub delay_ms: Option<u64>,
}

impl Fault {
    fn live(&self) -> bool {
        self.remaining != Some(0)
    }

    fn applies_to(&self, kind: FaultKind, target: &Target<'_>) -> bool {
        self.kind == kind
            && self.live()
            && self
                .server_id
                .as_deref()
                .is_none_or(|id| id == target.server_id)
            && self
                .node_name
                .as_deref()
                .is_none_or(|name| Some(name) == target.node_name)
    }
}

/// The machine a fault may fire on: its server id and, once it has one,
/// its node name.
#[derive(Debug, Clone, Copy)]
pub struct Target<'a> {
    pub server_id: &'a str,
    pub node_name: Option<&'a str>,
}

impl<'a> Target<'a> {
    pub fn server(server_id: &'a str) -> Self {
        Self {
            server_id,
            node_name: None,
        }
    }

    pub fn node(server_id: &'a str, node_name: Option<&'a str>) -> Self {
        Self {
            server_id,
            node_name,
        }
    }
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FaultError {
    #[error("count must be at least 1")]
    ZeroCount,
    #[error("server_id must not be empty")]
    EmptyServerId,
    #[error("node_name must not be empty")]
    EmptyNodeName,
    #[error("node_name does not apply to {0}: it acts before a node exists")]
    NodeNameNotApplicable(&'static str),
    #[error("delay_ms applies to unhealthy_after_every_boot only, not {0}")]
    DelayNotApplicable(&'static str),
}

#[derive(Debug, Default)]
pub struct Faults {
    inner: Mutex<Inner>,
    /// Woken whenever a fault is armed, so a running kubelet takes the
    /// faults aimed at it at once.
    armed: Notify,
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
        let count = match (spec.count, spec.kind) {
            (Some(0), _) => return Err(FaultError::ZeroCount),
            (None, FaultKind::UnhealthyAfterEveryBoot) => None,
            (count, _) => Some(count.unwrap_or(1)),
        };
        if spec.server_id.as_deref() == Some("") {
            return Err(FaultError::EmptyServerId);
        }
        match spec.node_name.as_deref() {
            Some("") => return Err(FaultError::EmptyNodeName),
            Some(_) if !spec.kind.acts_on_nodes() => {
                return Err(FaultError::NodeNameNotApplicable(spec.kind.as_str()));
            }
            _ => {}
        }
        let delay_ms = match (spec.kind, spec.delay_ms) {
            (FaultKind::UnhealthyAfterEveryBoot, delay) => {
                Some(delay.unwrap_or(DEFAULT_UNHEALTHY_DELAY_MS))
            }
            (_, None) => None,
            (kind, Some(_)) => return Err(FaultError::DelayNotApplicable(kind.as_str())),
        };
        let fault = {
            let mut inner = self.lock();
            inner.next_id += 1;
            let fault = Fault {
                id: inner.next_id,
                kind: spec.kind,
                server_id: spec.server_id,
                node_name: spec.node_name,
                count,
                remaining: count,
                fired: 0,
                delay_ms,
            };
            inner.faults.push(fault.clone());
            fault
        };
        tracing::info!(kind = fault.kind.as_str(), server_id = ?fault.server_id, node = ?fault.node_name, count = ?count, "fault armed");
        self.armed.notify_waiters();
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
        self.take_for(kind, Target::server(server_id)).is_some()
    }

    /// Consumes one occurrence of the oldest live fault of `kind` that
    /// applies to `target`; the fault as it is after firing.
    pub fn take_for(&self, kind: FaultKind, target: Target<'_>) -> Option<Fault> {
        let mut inner = self.lock();
        let fault = inner
            .faults
            .iter_mut()
            .find(|f| f.applies_to(kind, &target))?;
        if let Some(remaining) = fault.remaining.as_mut() {
            *remaining -= 1;
        }
        fault.fired += 1;
        tracing::warn!(kind = kind.as_str(), server_id = %target.server_id, node = ?target.node_name, remaining = ?fault.remaining, "fault fired");
        Some(fault.clone())
    }

    /// Whether a live fault of `kind` applies to `server_id`, without
    /// consuming it (to decide whether watching for its trigger is needed).
    pub fn armed(&self, kind: FaultKind, server_id: &str) -> bool {
        let target = Target::server(server_id);
        self.lock()
            .faults
            .iter()
            .any(|f| f.applies_to(kind, &target))
    }

    /// Resolves once a fault is armed after this call. Create it before
    /// looking at the faults (then `enable` it), so that none armed in
    /// between is missed.
    pub fn armed_later(&self) -> tokio::sync::futures::Notified<'_> {
        self.armed.notified()
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
        assert_eq!((listed[0].fired, listed[0].remaining), (2, Some(0)));
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

    #[test]
    fn node_faults_aim_at_a_node_name_and_check_their_fields() {
        let faults = Faults::default();
        let fault = faults
            .add(spec(
                r#"{"kind":"not_ready_until_reboot","node_name":"default-abcde"}"#,
            ))
            .unwrap();
        assert_eq!(fault.count, Some(1));
        let json = serde_json::to_value(&fault).unwrap();
        assert_eq!(json["node_name"], "default-abcde");
        assert!(
            json.get("delay_ms").is_none(),
            "only where it means something"
        );
        let kind = FaultKind::NotReadyUntilReboot;
        assert!(faults.take_for(kind, Target::server("srv-1")).is_none());
        assert!(
            faults
                .take_for(kind, Target::node("srv-1", Some("other")))
                .is_none()
        );
        let fired = faults
            .take_for(kind, Target::node("srv-1", Some("default-abcde")))
            .unwrap();
        assert_eq!((fired.fired, fired.remaining), (1, Some(0)));

        // Server and node name together: both must match.
        faults
            .add(spec(
                r#"{"kind":"silent_until_reboot","server_id":"a","node_name":"n"}"#,
            ))
            .unwrap();
        let kind = FaultKind::SilentUntilReboot;
        assert!(
            faults
                .take_for(kind, Target::node("b", Some("n")))
                .is_none()
        );
        assert!(
            faults
                .take_for(kind, Target::node("a", Some("n")))
                .is_some()
        );

        for (body, error) in [
            (
                r#"{"kind":"corrupt_write","node_name":"n"}"#,
                FaultError::NodeNameNotApplicable("corrupt_write"),
            ),
            (
                r#"{"kind":"reboot_never_returns","node_name":""}"#,
                FaultError::EmptyNodeName,
            ),
            (
                r#"{"kind":"never_ready","delay_ms":10}"#,
                FaultError::DelayNotApplicable("never_ready"),
            ),
        ] {
            assert_eq!(faults.add(spec(body)), Err(error), "{body}");
        }
    }

    #[test]
    fn unhealthy_after_every_boot_lasts_until_cleared_unless_counted() {
        let faults = Faults::default();
        let kind = FaultKind::UnhealthyAfterEveryBoot;
        let every = faults
            .add(spec(
                r#"{"kind":"unhealthy_after_every_boot","server_id":"a"}"#,
            ))
            .unwrap();
        assert_eq!((every.count, every.remaining), (None, None));
        assert_eq!(every.delay_ms, Some(DEFAULT_UNHEALTHY_DELAY_MS));
        let json = serde_json::to_value(&every).unwrap();
        assert!(json["count"].is_null() && json["remaining"].is_null());
        for n in 1..=5 {
            assert_eq!(faults.take_for(kind, Target::server("a")).unwrap().fired, n);
        }
        faults.clear();
        let twice = faults
            .add(spec(
                r#"{"kind":"unhealthy_after_every_boot","count":2,"delay_ms":1500}"#,
            ))
            .unwrap();
        assert_eq!(twice.delay_ms, Some(1500));
        assert!(faults.take_for(kind, Target::server("a")).is_some());
        assert!(faults.take_for(kind, Target::server("b")).is_some());
        assert!(faults.take_for(kind, Target::server("a")).is_none());
    }

    #[tokio::test]
    async fn arming_wakes_whoever_waits_for_faults() {
        let faults = std::sync::Arc::new(Faults::default());
        let (waiting_tx, waiting_rx) = tokio::sync::oneshot::channel();
        let waiter = {
            let faults = faults.clone();
            tokio::spawn(async move {
                let armed = faults.armed_later();
                tokio::pin!(armed);
                armed.as_mut().enable();
                waiting_tx.send(()).unwrap();
                armed.await;
                faults.list().len()
            })
        };
        waiting_rx.await.unwrap();
        faults.add(spec(r#"{"kind":"never_ready"}"#)).unwrap();
        let woke = tokio::time::timeout(std::time::Duration::from_secs(10), waiter).await;
        assert_eq!(woke.expect("the waiter never woke").unwrap(), 1);
    }
}
