//! What an install is planned with, and the classes its failures fall in.

use std::time::Duration;

use tokio::time::Instant;

use super::commands::{self, Compression};
use crate::install::history::Window;
use crate::install::{Deadlines, InstallSettings, InstallSpec, Phase};

/// What an install is planned with. Only `delivery` and `boot` change
/// during an install: the driver refreshes them from what other installs of
/// the same offer and zone saw while this one waits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Plan {
    pub image_url: String,
    pub compression: Compression,
    pub install_disk: Option<String>,
    pub deadlines: Deadlines,
    /// Image writes allowed per rescue boot.
    pub image_attempts: u32,
    /// NodeClass checksum (lowercase hex) the streamed image must match.
    pub image_sha256: Option<String>,
    /// Returns to rescue allowed when the maintenance API never comes up.
    pub rescue_returns: u32,
    /// Consecutive failed Elastic Metal calls tolerated within a phase.
    pub api_failures: u32,
    /// How long the maintenance API may stay unreachable after an apply whose
    /// outcome is unknown before the config is assumed applied.
    pub apply_grace: Duration,
    /// Cadence of the Elastic Metal status polls.
    pub poll_interval: Duration,
    /// Cadence of the local probes (rescue SSH, Talos, Node), never longer
    /// than `poll_interval`.
    pub probe_interval: Duration,
    /// When deliveries of this offer in this zone ended lately, relative to
    /// their order (`None`: none seen, or too spread to tell); sets the
    /// status-read cadence during delivery (`machine_cadence.rs`).
    pub delivery: Option<Window>,
    /// The same for normal boots (reboot requested -> Talos maintenance API
    /// answering); sets the Talos probe cadence while booting.
    pub boot: Option<Window>,
    /// For Events.
    pub server_id: String,
    pub zone: String,
    pub offer_name: String,
    pub node_name: String,
    pub rescue_ssh_key_id: String,
    /// Where the install ends (a node, or a standby server).
    pub target: crate::install::Target,
    /// The Private Network the server joins after delivery, by id.
    pub private_network: Option<String>,
}

impl Plan {
    /// Fails when the spec cannot be installed at all (e.g. an image format we
    /// cannot decompress, a checksum that is not a sha256).
    pub fn new(spec: &InstallSpec, settings: &InstallSettings) -> Result<Self, String> {
        let image_sha256 = match spec.image_sha256.as_deref().map(str::trim) {
            None | Some("") => None,
            Some(hash) if hash.len() == 64 && hash.chars().all(|c| c.is_ascii_hexdigit()) => {
                Some(hash.to_ascii_lowercase())
            }
            Some(_) => {
                return Err(format!(
                    "the NodeClass image checksum for {} is not a sha256 (64 hex digits)",
                    spec.arch
                ));
            }
        };
        Ok(Plan {
            compression: Compression::from_url(&spec.image_url)?,
            image_url: spec.image_url.clone(),
            install_disk: spec.install_disk.clone(),
            deadlines: settings.deadlines.clone(),
            image_attempts: settings.image_attempts.max(1),
            image_sha256,
            rescue_returns: settings.rescue_returns,
            api_failures: settings.api_failure_budget.max(1),
            apply_grace: settings.apply_grace,
            poll_interval: settings.poll_interval,
            probe_interval: settings.probe_interval.min(settings.poll_interval),
            delivery: None,
            boot: None,
            server_id: spec.server_id.clone(),
            zone: spec.zone.clone(),
            offer_name: spec.offer_name.clone(),
            node_name: spec.node_name.clone(),
            rescue_ssh_key_id: spec.rescue_ssh_key_id.clone(),
            target: spec.target,
            private_network: spec.private_network.as_ref().map(|n| n.id.clone()),
        })
    }

    pub fn deadline(&self, phase: Phase) -> Option<Duration> {
        let d = &self.deadlines;
        match phase {
            Phase::Ordered | Phase::Delivering => Some(d.delivery),
            Phase::Ready | Phase::Rescue => Some(d.rescue),
            Phase::Imaging => Some(d.imaging),
            Phase::Booting => Some(d.booting),
            Phase::Maintenance => Some(d.maintenance),
            Phase::Configured => Some(d.join),
            Phase::Joined | Phase::Failed | Phase::Standby => None,
        }
    }

    /// When the first status read of a server ordered at `now` is due.
    pub fn first_status_read(&self, now: Instant) -> Instant {
        super::cadence::delivery_read(self, now, now)
    }

    /// Whether a status read at `now` of a server ordered at `ordered` is one
    /// of its delivery window's fast reads.
    pub fn watching_delivery(&self, ordered: Instant, now: Instant) -> bool {
        super::cadence::in_delivery_window(self, ordered, now)
    }

    /// The image URL as Events may show it (no query string).
    pub(super) fn url(&self) -> &str {
        commands::display_url(&self.image_url)
    }
}

/// Why an install failed, in classes: the metric label, and what the driver
/// does beyond the cleanup (out of stock marks the offering unavailable).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FailureClass {
    /// The server went `out_of_stock` after the order.
    OutOfStock,
    /// The server went `error` or `locked`.
    ServerStatus,
    /// The server was deleted under us.
    ServerGone,
    /// A phase did not complete within its deadline.
    Deadline,
    /// The Talos maintenance API never came up, even after going back to rescue.
    MaintenanceNeverUp,
    /// Every image write allowed failed (download, write or verification).
    ImageAttempts,
    /// The image does not match the NodeClass checksum, or cannot be used.
    Image,
    /// The Elastic Metal API refused a call, or failed too many times in a row.
    Api,
    /// The server could not be attached to its Private Network.
    PrivateNetwork,
    /// The rescue system could not be used (disk, NIC, key, commands).
    Rescue,
    /// The rescue host key changed within one rescue boot.
    HostKey,
    /// The machine config could not be rendered or Talos rejected it.
    Config,
    /// An observation the machine did not expect (a bug).
    Internal,
}

impl FailureClass {
    /// Every class, for series written at 0 before their first count.
    pub const ALL: [FailureClass; 13] = [
        FailureClass::OutOfStock,
        FailureClass::ServerStatus,
        FailureClass::ServerGone,
        FailureClass::Deadline,
        FailureClass::MaintenanceNeverUp,
        FailureClass::ImageAttempts,
        FailureClass::Image,
        FailureClass::Api,
        FailureClass::PrivateNetwork,
        FailureClass::Rescue,
        FailureClass::HostKey,
        FailureClass::Config,
        FailureClass::Internal,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            FailureClass::OutOfStock => "out_of_stock",
            FailureClass::ServerStatus => "server_status",
            FailureClass::ServerGone => "server_gone",
            FailureClass::Deadline => "deadline",
            FailureClass::MaintenanceNeverUp => "maintenance_never_up",
            FailureClass::ImageAttempts => "image_attempts",
            FailureClass::Image => "image",
            FailureClass::Api => "api",
            FailureClass::PrivateNetwork => "private_network",
            FailureClass::Rescue => "rescue",
            FailureClass::HostKey => "host_key",
            FailureClass::Config => "config",
            FailureClass::Internal => "internal",
        }
    }
}
