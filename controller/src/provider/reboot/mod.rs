//! Reboot: restart the machine of a NodeClaim in place (core v1.15's
//! `CloudProvider.Reboot`): an Elastic Metal server with the reboot API
//! (`boot_type: normal`: Talos boots from its disk with its saved config), a
//! VM with the `reboot` action. OK once the API accepted the call; core then
//! watches the Node's `bootID`.
//!
//! - Never a reboot into a half-done install, a standby or a wipe: only a
//!   NodeClaim whose install joined, on a server still tagged for it
//!   (`decide.rs`, pure).
//! - Once per operation (`record.rs`): a NodeClaim annotation written before
//!   the call (`issuing`, guarded by the NodeClaim's `resourceVersion`) and
//!   after it (`accepted`); a repeated call finds `accepted` and answers OK,
//!   or finds `issuing` and reads the server's timestamp to learn whether
//!   the call landed.
//! - A reboot whose node never comes back is ended by the provider before
//!   core's 20-minute window (`watch.rs`).
//!
//! Each call runs in a task of its own: a call cut short by the RPC's
//! deadline still finishes what it began (the record, the call, the Event).

mod decide;
mod record;
mod watch;

#[cfg(test)]
mod decide_tests;
#[cfg(test)]
pub(crate) mod fakes;
#[cfg(test)]
mod flow_cut_tests;
#[cfg(test)]
mod flow_tests;
#[cfg(test)]
mod flow_vm_tests;
#[cfg(test)]
mod watch_tests;

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use serde_json::Value;
use tracing::{debug, info, warn};

use super::vm::VmPorts;
use super::{
    Installer, KubeError, MachineId, NodeClaimSource, Provider, ProviderError, parse_machine_id,
};
use crate::crashpoint::{self, CrashPoint};
use crate::install::{InstallEvent, NodePort};
use crate::metrics::reboot_metrics;
use crate::scaleway::instance::ServerAction;
use crate::scaleway::{BootType, ElasticMetal};
use decide::{Claim, Decision, Machine, annotations};
pub use record::{
    MachineKind, PRE_BOOT_ID_ANNOTATION, REBOOT_ANNOTATION, RebootRecord, RebootState,
};
pub use watch::{RebootWatch, WatchOutcome, run_reboot_watch};

/// `--instance-reboot-deadline`: a VM reboots in about a minute and Talos
/// is up a minute later; five minutes leave room for a slow hypervisor and
/// stay far inside core's 20-minute window.
pub const DEFAULT_INSTANCE_REBOOT_DEADLINE: Duration = Duration::from_secs(5 * 60);

/// Added to the call bound for an `issuing` record that may still land:
/// the clocks of two replicas differ a little.
const IN_FLIGHT_MARGIN: Duration = Duration::from_secs(5);

/// How long a reboot may take, per kind, and one call.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RebootSettings {
    /// From the accepted call until the Node shows a new `bootID`, for an
    /// Elastic Metal server: the install engine's booting deadline (a
    /// normal reboot until Talos answers, `--booting-deadline`).
    pub baremetal_deadline: Duration,
    /// The same for a VM (`--instance-reboot-deadline`).
    pub instance_deadline: Duration,
    /// Bound on each call (the NodeClaim, the server, the reboot itself).
    pub call_timeout: Duration,
}

impl Default for RebootSettings {
    fn default() -> Self {
        RebootSettings {
            baremetal_deadline: crate::install::Deadlines::default().booting,
            instance_deadline: DEFAULT_INSTANCE_REBOOT_DEADLINE,
            call_timeout: Duration::from_secs(60),
        }
    }
}

impl RebootSettings {
    pub fn deadline(&self, kind: MachineKind) -> Duration {
        match kind {
            MachineKind::Baremetal => self.baremetal_deadline,
            MachineKind::Instance => self.instance_deadline,
        }
    }

    /// How long after an `issuing` record its call may still land: the call
    /// is made within `call_timeout` of the record or not at all.
    pub fn in_flight(&self) -> Duration {
        self.call_timeout + IN_FLIGHT_MARGIN
    }
}

/// A Node's boot id (`status.nodeInfo.bootID`), as the deadline reads it.
#[async_trait]
pub trait NodeBoots: Send + Sync + 'static {
    /// `None` when the Node does not exist (or reports no boot id).
    async fn boot_id(&self, node: &str) -> Result<Option<String>, KubeError>;
}

/// What Reboot needs besides the machine APIs.
#[derive(Clone)]
pub struct RebootPorts {
    /// The NodeClaim, read fresh, and its replay record.
    pub claims: Arc<dyn NodeClaimSource>,
    /// Events on the NodeClaim, and its deletion when a reboot never ends.
    pub nodes: Arc<dyn NodePort>,
    pub settings: RebootSettings,
    /// The cluster's clock (records and deadlines are wall-clock times).
    pub clock: Arc<dyn Fn() -> DateTime<Utc> + Send + Sync>,
}

impl Provider {
    /// Restarts the machine of `claim` in place, once per `operation_id`;
    /// see the module doc and the proto's Reboot.
    pub async fn reboot(&self, claim: &Value, operation_id: &str) -> Result<(), ProviderError> {
        let name = claim
            .pointer("/metadata/name")
            .and_then(Value::as_str)
            .filter(|n| !n.is_empty())
            .ok_or_else(|| ProviderError::Invalid("NodeClaim has no metadata.name".into()))?
            .to_string();
        let Some(ports) = self.reboots.clone() else {
            return Err(ProviderError::RebootRefused(
                "this provider was started without the NodeClaim ports Reboot needs".into(),
            ));
        };
        let rebooter = Rebooter {
            api: self.api.clone(),
            vms: self.vms.clone(),
            installer: self.installer.clone(),
            cluster: self.settings.cluster_name.clone(),
            ports,
        };
        let task = tokio::spawn(rebooter.call(name, claim.clone(), operation_id.to_string()));
        task.await.unwrap_or_else(|e| {
            Err(ProviderError::Unavailable(format!(
                "the reboot task ended abnormally: {e}"
            )))
        })
    }

    /// The reboot ports, for the deadline watch.
    pub(crate) fn reboot_ports(&self) -> Option<&RebootPorts> {
        self.reboots.as_ref()
    }
}

/// What one call is about, as far as it is known yet.
#[derive(Debug, Clone)]
struct Subject {
    name: String,
    operation: String,
    kind: Option<MachineKind>,
    zone: String,
    server_id: String,
}

impl Subject {
    /// `Elastic Metal server <id>`, for Events.
    fn machine(&self) -> String {
        match self.kind {
            Some(kind) => format!("{} {}", kind.noun(), self.server_id),
            None => "the machine".into(),
        }
    }
}

/// How a call succeeded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Done {
    /// Accepted before: nothing called.
    Replayed,
    /// An `issuing` call found landed: recorded `accepted`, nothing called.
    Confirmed,
    /// Called now, and accepted.
    Accepted,
}

/// Everything one call needs, owned, so that it runs in a task of its own.
#[derive(Clone)]
struct Rebooter {
    api: Arc<dyn ElasticMetal>,
    vms: Option<VmPorts>,
    installer: Arc<dyn Installer>,
    cluster: String,
    ports: RebootPorts,
}

/// Bounds a call; a call without an answer is `Unavailable`.
async fn bounded<T>(
    limit: Duration,
    doing: &str,
    call: impl std::future::Future<Output = T>,
) -> Result<T, ProviderError> {
    tokio::time::timeout(limit, call).await.map_err(|_| {
        ProviderError::Unavailable(format!("{doing}: no answer within {}s", limit.as_secs()))
    })
}

impl Rebooter {
    async fn call(
        self,
        name: String,
        passed: Value,
        operation: String,
    ) -> Result<(), ProviderError> {
        let mut subject = Subject {
            name,
            operation,
            kind: None,
            zone: String::new(),
            server_id: String::new(),
        };
        let result = self.attempt(&passed, &mut subject).await;
        self.report(&subject, &result).await;
        result.map(drop)
    }

    async fn attempt(&self, passed: &Value, s: &mut Subject) -> Result<Done, ProviderError> {
        let limit = self.ports.settings.call_timeout;
        let reading = format!("reading NodeClaim {}", s.name);
        let fresh = bounded(limit, &reading, self.ports.claims.get(&s.name))
            .await?
            .map_err(|e| decide::kube_error(&reading, e))?
            .ok_or_else(|| ProviderError::NotFound(format!("NodeClaim {} is gone", s.name)))?;
        let uid = |c: &Value| {
            c.pointer("/metadata/uid")
                .and_then(Value::as_str)
                .map(String::from)
        };
        if let (Some(asked), Some(found)) = (uid(passed), uid(&fresh))
            && asked != found
        {
            return Err(ProviderError::NotFound(format!(
                "NodeClaim {} was replaced (uid {asked} is gone)",
                s.name
            )));
        }
        let pid = [&fresh, passed]
            .into_iter()
            .find_map(|c| c.pointer("/status/providerID").and_then(Value::as_str))
            .filter(|p| !p.is_empty())
            .ok_or_else(|| {
                ProviderError::Invalid(format!("NodeClaim {} has no providerID", s.name))
            })?;
        let (kind, zone, id) = match parse_machine_id(pid) {
            Some(MachineId::Baremetal { zone, id }) => (MachineKind::Baremetal, zone, id),
            Some(MachineId::Instance { zone, id }) => (MachineKind::Instance, zone, id),
            None => {
                return Err(ProviderError::Invalid(format!(
                    "NodeClaim {} has providerID {pid:?}, not one of this provider",
                    s.name
                )));
            }
        };
        s.kind = Some(kind);
        s.zone = zone.to_string();
        s.server_id = id.to_string();
        let record = RebootRecord::of(&annotations(&fresh));
        if decide::replayed(record.as_ref(), &s.operation) {
            return Ok(Done::Replayed);
        }
        let (machine, install) = self.read_machine(s, &fresh).await?;
        let claim = Claim {
            deleting: fresh.pointer("/metadata/deletionTimestamp").is_some(),
            install,
        };
        let now = (self.ports.clock)();
        let in_flight = self.ports.settings.in_flight();
        match decide::decide(
            &s.operation,
            record.as_ref(),
            &claim,
            &machine,
            now,
            in_flight,
        ) {
            Decision::Confirm => {
                let accepted = record.expect("Confirm comes from a record").accepted(now);
                self.save_accepted(s, &accepted).await;
                Ok(Done::Confirmed)
            }
            Decision::NotNow(why) => Err(ProviderError::NotNow(why)),
            Decision::Refuse(why) => Err(ProviderError::RebootRefused(why)),
            Decision::Issue => self
                .issue(s, &fresh, &machine, now)
                .await
                .map(|()| Done::Accepted),
        }
    }

    /// The server now, and the install of its node.
    async fn read_machine(
        &self,
        s: &Subject,
        fresh: &Value,
    ) -> Result<(Machine, decide::Install), ProviderError> {
        let limit = self.ports.settings.call_timeout;
        let reading = format!("reading {}", s.machine());
        match s.kind {
            Some(MachineKind::Instance) => {
                let vms = self.vms.as_ref().ok_or_else(|| {
                    ProviderError::RebootRefused(
                        "this provider does not serve Instances (started without their CRD)".into(),
                    )
                })?;
                let server = bounded(limit, &reading, vms.api.get_server(&s.zone, &s.server_id))
                    .await?
                    .map_err(|e| decide::api_error(&reading, e))?;
                Ok((
                    decide::vm_machine(&server, &self.cluster, &s.name),
                    decide::vm_install(fresh),
                ))
            }
            _ => {
                let server = bounded(limit, &reading, self.api.get_server(&s.zone, &s.server_id))
                    .await?
                    .map_err(|e| decide::api_error(&reading, e))?;
                Ok((
                    decide::em_machine(&server, &self.cluster, &s.name),
                    decide::em_install(fresh, self.installer.phase(&s.server_id)),
                ))
            }
        }
    }

    /// Records `issuing` (only if the NodeClaim is still as read: of two
    /// callers, one passes), calls the API (within the call bound of the
    /// record, or not at all), records `accepted`.
    async fn issue(
        &self,
        s: &Subject,
        fresh: &Value,
        machine: &Machine,
        now: DateTime<Utc>,
    ) -> Result<(), ProviderError> {
        let started = tokio::time::Instant::now();
        let limit = self.ports.settings.call_timeout;
        let version = fresh
            .pointer("/metadata/resourceVersion")
            .and_then(Value::as_str)
            .ok_or_else(|| {
                ProviderError::Unavailable(format!("NodeClaim {} has no resourceVersion", s.name))
            })?;
        let record = RebootRecord {
            operation: s.operation.clone(),
            state: RebootState::Issuing,
            kind: machine.kind,
            zone: machine.zone.clone(),
            server_id: machine.server_id.clone(),
            server_stamp: machine.stamp.clone(),
            pre_boot_id: annotations(fresh).get(PRE_BOOT_ID_ANNOTATION).cloned(),
            issued_at: now,
            accepted_at: None,
        };
        let recording = format!("recording the reboot on NodeClaim {}", s.name);
        let json = record.to_json();
        bounded(
            limit,
            &recording,
            self.ports
                .claims
                .annotate(&s.name, REBOOT_ANNOTATION, &json, Some(version)),
        )
        .await?
        .map_err(|e| decide::kube_error(&recording, e))?;
        debug!(nodeclaim = %s.name, server_id = %s.server_id, operation = %s.operation,
            stamp = %machine.stamp, "reboot recorded as issuing");
        crashpoint::reached(CrashPoint::RebootIssuing, &s.name);
        let rebooting = format!("rebooting {}", s.machine());
        let call = async {
            match machine.kind {
                MachineKind::Baremetal => self
                    .api
                    .reboot_server(&s.zone, &s.server_id, BootType::Normal, &[])
                    .await
                    .map(drop),
                MachineKind::Instance => match &self.vms {
                    Some(vms) => vms
                        .api
                        .server_action(&s.zone, &s.server_id, ServerAction::Reboot)
                        .await
                        .map(drop),
                    None => unreachable!("an Instance is read through the Instance API first"),
                },
            }
        };
        match tokio::time::timeout_at(started + limit, call).await {
            Err(_) => {
                return Err(ProviderError::Unavailable(format!(
                    "{rebooting}: no answer within {}s (a later call learns from the server whether it landed)",
                    limit.as_secs()
                )));
            }
            Ok(Err(e)) => return Err(decide::api_error(&rebooting, e)),
            Ok(Ok(())) => {}
        }
        crashpoint::reached(CrashPoint::RebootAccepted, &s.name);
        self.save_accepted(s, &record.accepted((self.ports.clock)()))
            .await;
        Ok(())
    }

    /// Best effort: a record left `issuing` is confirmed by the next call of
    /// the operation from the server's timestamp.
    async fn save_accepted(&self, s: &Subject, record: &RebootRecord) {
        let json = record.to_json();
        let saving = self
            .ports
            .claims
            .annotate(&s.name, REBOOT_ANNOTATION, &json, None);
        match bounded(self.ports.settings.call_timeout, "recording", saving).await {
            Ok(Ok(())) => {}
            Ok(Err(error)) => warn!(nodeclaim = %s.name, server_id = %s.server_id,
                operation = %s.operation, %error,
                "reboot accepted but not recorded as such; a repeated call confirms it from the server"),
            Err(error) => warn!(nodeclaim = %s.name, server_id = %s.server_id,
                operation = %s.operation, %error,
                "reboot accepted but not recorded as such; a repeated call confirms it from the server"),
        }
    }

    /// The log line, the metric and the Event of a call's outcome.
    async fn report(&self, s: &Subject, result: &Result<Done, ProviderError>) {
        let kind = s.kind.map(MachineKind::as_str);
        let (outcome, event) = match result {
            Ok(Done::Replayed) => {
                debug!(nodeclaim = %s.name, server_id = %s.server_id, operation = %s.operation,
                    "reboot already accepted for this operation; not called again");
                ("replayed", None)
            }
            Ok(done) => {
                let how = if *done == Done::Confirmed {
                    "its call before a restart landed (the server's timestamp moved); not called again"
                } else {
                    "accepted by the API"
                };
                info!(nodeclaim = %s.name, server_id = %s.server_id, zone = %s.zone,
                    operation = %s.operation, kind, "reboot {how}");
                let message = match s.kind {
                    Some(MachineKind::Instance) => format!(
                        "VM {} in {}: reboot action {how} (operation {})",
                        s.server_id, s.zone, s.operation
                    ),
                    _ => format!(
                        "Elastic Metal server {} in {}: reboot with boot type normal {how} (operation {})",
                        s.server_id, s.zone, s.operation
                    ),
                };
                ("accepted", Some((false, "RebootRequested", message)))
            }
            Err(e) => {
                let outcome = decide::outcome(e);
                warn!(nodeclaim = %s.name, server_id = %s.server_id, operation = %s.operation,
                    kind, outcome, error = %e, "reboot not issued");
                let event = match outcome {
                    "refused" => Some((
                        true,
                        "RebootRefused",
                        format!(
                            "not rebooting {}: {e}; Karpenter replaces the node instead",
                            s.machine()
                        ),
                    )),
                    "not_now" => Some((
                        false,
                        "RebootDeferred",
                        format!("not rebooting {} yet: {e}", s.machine()),
                    )),
                    "failed" => Some((
                        true,
                        "RebootFailed",
                        format!("cannot reboot {}: {e}", s.machine()),
                    )),
                    _ => None,
                };
                (outcome, event)
            }
        };
        if let Some(kind) = kind {
            reboot_metrics().count(kind, outcome);
        }
        if let Some((warning, reason, message)) = event {
            self.ports
                .nodes
                .event(
                    &s.name,
                    InstallEvent {
                        warning,
                        reason: reason.into(),
                        message,
                    },
                )
                .await;
        }
    }
}
