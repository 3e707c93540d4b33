//! Crash points: named places between two side effects of the install engine
//! (or of a reboot) where a test can make the process die on purpose, as a
//! SIGKILL would, to prove that a restarted provider (or the next leader)
//! finishes what the dead one was doing. Timing-based kills only land in a
//! window by luck; these land in it every time.
//!
//! Disarmed unless the process is started with `--test-crash-at <point>`
//! (`KPS_TEST_CRASH_AT`): a hidden flag for fault-injection tests, which
//! production never sets. An armed point aborts the process the first time
//! any install reaches it; nothing is flushed or cleaned up, exactly like a
//! killed pod.

use std::sync::OnceLock;

/// Where a crash can be injected, in the order an install reaches them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CrashPoint {
    /// Talos accepted the machine config; the phase persisted is still
    /// `maintenance`.
    ConfigApplied,
    /// The Node was seen Ready; its `uninitialized` taint is still there.
    NodeReady,
    /// The taint is removed; the bootstrap token still exists.
    NodeInitialized,
    /// The token is deleted; the phase persisted is still `configured`.
    TokenReleased,
    /// `joined` is persisted; the `InstallJoined` Event is not recorded yet.
    JoinedSaved,
    /// Create claimed a standby server (its tags name the NodeClaim); no
    /// Node is registered and no install runs yet.
    StandbyClaimed,
    /// Delete retagged a node's server as a standby to wipe; the wipe has
    /// not started (the server still runs the old node).
    WipeTagged,
    /// A standby install (a new standby server or a wipe) has written its
    /// image; the phase persisted on the server's tags is still `imaging`.
    StandbyImaged,
    /// Reboot: the `issuing` record is on the NodeClaim; the reboot call has
    /// not been made (a replay must call, once).
    RebootIssuing,
    /// Reboot: the API accepted the call; the record still says `issuing`
    /// (a replay must see the server's timestamp moved and not call again).
    RebootAccepted,
}

impl CrashPoint {
    pub const ALL: [CrashPoint; 10] = [
        CrashPoint::ConfigApplied,
        CrashPoint::NodeReady,
        CrashPoint::NodeInitialized,
        CrashPoint::TokenReleased,
        CrashPoint::JoinedSaved,
        CrashPoint::StandbyClaimed,
        CrashPoint::WipeTagged,
        CrashPoint::StandbyImaged,
        CrashPoint::RebootIssuing,
        CrashPoint::RebootAccepted,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            CrashPoint::ConfigApplied => "config-applied",
            CrashPoint::NodeReady => "node-ready",
            CrashPoint::NodeInitialized => "node-initialized",
            CrashPoint::TokenReleased => "token-released",
            CrashPoint::JoinedSaved => "joined-saved",
            CrashPoint::StandbyClaimed => "standby-claimed",
            CrashPoint::WipeTagged => "wipe-tagged",
            CrashPoint::StandbyImaged => "standby-imaged",
            CrashPoint::RebootIssuing => "reboot-issuing-saved",
            CrashPoint::RebootAccepted => "reboot-accepted",
        }
    }

    pub fn parse(s: &str) -> Result<CrashPoint, String> {
        CrashPoint::ALL
            .into_iter()
            .find(|p| p.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<_> = CrashPoint::ALL.iter().map(|p| p.as_str()).collect();
                format!("unknown crash point {s:?} (one of {})", names.join(", "))
            })
    }
}

static ARMED: OnceLock<CrashPoint> = OnceLock::new();

/// Arms `point` for the rest of the process (once; later calls are ignored).
pub fn arm(point: CrashPoint) {
    if ARMED.set(point).is_ok() {
        tracing::warn!(
            crash_point = point.as_str(),
            "test crash point armed: the process aborts when an install reaches it"
        );
    }
}

/// Whether reaching `point` would abort the process.
pub fn armed(point: CrashPoint) -> bool {
    ARMED.get() == Some(&point)
}

/// Aborts the process if `point` is armed.
pub fn reached(point: CrashPoint, nodeclaim: &str) {
    if armed(point) {
        // stderr directly: the log pipeline may buffer, and the test reads
        // this line to know where the process died.
        eprintln!(
            "test crash point {} reached by NodeClaim {nodeclaim}: aborting",
            point.as_str()
        );
        std::process::abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_unknown_names_are_refused() {
        for point in CrashPoint::ALL {
            assert_eq!(CrashPoint::parse(point.as_str()), Ok(point));
        }
        let err = CrashPoint::parse("after-lunch").unwrap_err();
        assert!(err.contains("config-applied"), "{err}");
    }

    #[test]
    fn nothing_is_armed_unless_asked() {
        // Tests never arm a point: this process would abort.
        for point in CrashPoint::ALL {
            assert!(!armed(point));
        }
    }
}
