//! The Instance side of a sweeper pass: list this cluster's VMs and SBS
//! volumes in every zone (every page, or nothing), act on the decisions of
//! [`decide_instances`], and finish the teardowns begun in earlier passes.
//!
//! Terminate and `DELETE /servers` leave a VM's SBS volumes and flexible IPs
//! behind. Their ids are known only while the VM is listed, so the sweeper
//! remembers them ([`Teardowns`]) and deletes them once the VM is gone (a
//! `GET` answering 404), in the same pass or a later one. The memory is this
//! process's: after a restart in between, the tagged volumes are still found
//! by the volume rule, the flexible IPs are not.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use futures::future::join_all;
use tracing::{debug, info, warn};

use super::instance::tag_in;
use super::instance::{InstanceDecision, Step, Subject, decide_instances};
use super::{SweepError, SweepPolicy, Sweeper, Verdict};
use crate::metrics::safety_metrics;
use crate::provider::{TAG_CLUSTER, TAG_NODECLAIM, instance_provider_id, tag};
use crate::scaleway::ApiError;
use crate::scaleway::block::{Block, Volume, VolumeFilter};
use crate::scaleway::instance::{Instance, Server, ServerAction, ServerFilter};

/// What a deleted VM left behind, to delete once it is gone.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Leftovers {
    zone: String,
    volumes: Vec<String>,
    ips: Vec<String>,
    /// The NodeClaim name the VM's kubelet registered its Node under: a
    /// Node nobody else deletes (core never registered it).
    node: Option<String>,
}

impl Leftovers {
    fn is_empty(&self) -> bool {
        self.volumes.is_empty() && self.ips.is_empty() && self.node.is_none()
    }
}

/// The VMs this sweeper terminated or deleted whose SBS volumes and
/// flexible IPs are still to delete, by server id.
#[derive(Debug, Default)]
pub struct Teardowns(Mutex<BTreeMap<String, Leftovers>>);

impl Teardowns {
    fn lock(&self) -> std::sync::MutexGuard<'_, BTreeMap<String, Leftovers>> {
        self.0.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Server ids whose leftovers are still to delete.
    pub fn pending(&self) -> Vec<String> {
        self.lock().keys().cloned().collect()
    }
}

/// This cluster's VMs and volumes in every zone, listed by the cluster tag in
/// this project, or the first error. Not re-filtered: the decision refuses
/// what it cannot prove is ours.
pub async fn list_owned_instances(
    instance: &dyn Instance,
    block: &dyn Block,
    zones: &[String],
    policy: &SweepPolicy,
) -> Result<(Vec<Server>, Vec<Volume>), SweepError> {
    let owned = tag(TAG_CLUSTER, &policy.cluster_name);
    let servers_filter = ServerFilter {
        tags: vec![owned.clone()],
        name: None,
        project: Some(policy.project_id.clone()),
    };
    let results = join_all(
        zones
            .iter()
            .map(|z| instance.list_servers(z, &servers_filter)),
    )
    .await;
    let mut servers = Vec::new();
    for (zone, result) in zones.iter().zip(results) {
        servers.extend(result.map_err(|error| SweepError::Instances {
            zone: zone.clone(),
            error,
        })?);
    }
    // After the VMs: a VM ordered in between shows its volume attached.
    let volumes_filter = VolumeFilter {
        tags: vec![owned],
        project_id: Some(policy.project_id.clone()),
    };
    let results = join_all(zones.iter().map(|z| block.list_volumes(z, &volumes_filter))).await;
    let mut volumes = Vec::new();
    for (zone, result) in zones.iter().zip(results) {
        volumes.extend(result.map_err(|error| SweepError::Volumes {
            zone: zone.clone(),
            error,
        })?);
    }
    Ok((servers, volumes))
}

/// The Instance and Block ports, when both are configured.
pub(super) struct InstancePorts<'a> {
    pub instance: &'a Arc<dyn Instance>,
    pub block: &'a Arc<dyn Block>,
}

impl Sweeper {
    pub(super) fn instance_ports(&self) -> Option<InstancePorts<'_>> {
        Some(InstancePorts {
            instance: self.instance.as_ref()?,
            block: self.block.as_ref()?,
        })
    }

    /// Decides about the listed VMs and volumes, acts, then finishes the
    /// teardowns whose VM is gone. Returns the decisions carried out.
    pub(super) async fn sweep_instances(
        &self,
        ports: &InstancePorts<'_>,
        servers: &[Server],
        volumes: &[Volume],
        claims: &[serde_json::Value],
    ) -> Vec<InstanceDecision> {
        let decisions = decide_instances(
            servers,
            volumes,
            claims,
            chrono::Utc::now(),
            &self.policy,
            self.instance_grace,
        );
        let mut acted = Vec::with_capacity(decisions.len());
        for decision in decisions {
            if let Some(d) = self.act_instance(ports, decision).await {
                acted.push(d);
            }
        }
        self.finish_teardowns(ports).await;
        acted
    }

    /// Carries out one decision; `None` when the step was not done (it is
    /// decided again next pass).
    async fn act_instance(
        &self,
        ports: &InstancePorts<'_>,
        decision: InstanceDecision,
    ) -> Option<InstanceDecision> {
        if let (Verdict::Deleted, Some(step)) = (decision.verdict, decision.step) {
            let (zone, id) = (decision.zone().to_string(), decision.id().to_string());
            let result = match step {
                Step::Terminate => ports
                    .instance
                    .server_action(&zone, &id, ServerAction::Terminate)
                    .await
                    .map(drop),
                Step::Poweroff => ports
                    .instance
                    .server_action(&zone, &id, ServerAction::Poweroff)
                    .await
                    .map(drop),
                Step::DeleteServer => ports.instance.delete_server(&zone, &id).await,
                Step::DeleteVolume => ports.block.delete_volume(&zone, &id).await,
            };
            match result {
                Ok(()) => {
                    info!(kind = decision.kind(), id = %id, %zone, name = %decision.name(),
                        step = step.as_str(), "sweeping an orphan");
                    if let Subject::Vm(server) = &decision.subject
                        && matches!(step, Step::Terminate | Step::DeleteServer)
                    {
                        self.remember_leftovers(server);
                    }
                }
                Err(ApiError::NotFound(_)) => {
                    debug!(kind = decision.kind(), id = %id, %zone, "orphan already gone");
                    return None;
                }
                Err(error) => {
                    safety_metrics().count_sweeper_delete_failure();
                    warn!(kind = decision.kind(), id = %id, %zone, step = step.as_str(), %error,
                        "sweeping an orphan failed; retrying next pass");
                    return None;
                }
            }
        }
        safety_metrics()
            .count_sweeper_decision(decision.verdict.as_str(), decision.reason.as_str());
        if decision.needs_event() {
            self.events.record_instance(&decision).await;
        }
        Some(decision)
    }

    fn remember_leftovers(&self, server: &Server) {
        let leftovers = Leftovers {
            zone: server.zone.clone(),
            volumes: server.sbs_volume_ids(),
            ips: server.flexible_ip_ids(),
            node: tag_in(&server.tags, TAG_NODECLAIM).map(String::from),
        };
        if !leftovers.is_empty() {
            self.teardowns.lock().insert(server.id.clone(), leftovers);
        }
    }

    /// Deletes what each remembered VM left behind once a `GET` says it is
    /// gone; what fails (a volume still detaching) is tried next pass.
    async fn finish_teardowns(&self, ports: &InstancePorts<'_>) {
        let pending: Vec<(String, Leftovers)> = self
            .teardowns
            .lock()
            .iter()
            .map(|(id, l)| (id.clone(), l.clone()))
            .collect();
        for (id, mut left) in pending {
            match ports.instance.get_server(&left.zone, &id).await {
                Err(ApiError::NotFound(_)) => {}
                Ok(_) => {
                    debug!(server_id = %id, "terminated orphan not gone yet");
                    continue;
                }
                Err(error) => {
                    debug!(server_id = %id, %error, "reading a terminated orphan");
                    continue;
                }
            }
            let zone = left.zone.clone();
            let mut volumes = Vec::new();
            for volume in std::mem::take(&mut left.volumes) {
                match ports.block.delete_volume(&zone, &volume).await {
                    Ok(()) => info!(server_id = %id, volume_id = %volume, %zone,
                        "deleted the SBS volume an orphan left"),
                    Err(ApiError::NotFound(_)) => {}
                    Err(error) => {
                        debug!(server_id = %id, volume_id = %volume, %error,
                            "deleting an orphan's volume; retrying next pass");
                        volumes.push(volume);
                    }
                }
            }
            let mut ips = Vec::new();
            for ip in std::mem::take(&mut left.ips) {
                match ports.instance.delete_ip(&zone, &ip).await {
                    Ok(()) => info!(server_id = %id, ip_id = %ip, %zone,
                        "released the flexible IP an orphan left"),
                    Err(ApiError::NotFound(_)) => {}
                    Err(error) => {
                        debug!(server_id = %id, ip_id = %ip, %error,
                            "releasing an orphan's flexible IP; retrying next pass");
                        ips.push(ip);
                    }
                }
            }
            // Only now that the VM is gone: a running kubelet would
            // register its Node again.
            let node = match (left.node.take(), &self.release) {
                (Some(name), Some(release)) => match release
                    .forget_node(&name, &instance_provider_id(&zone, &id))
                    .await
                {
                    Ok(()) => None,
                    Err(error) => {
                        debug!(server_id = %id, node = %name, %error,
                            "deleting an orphan's Node; retrying next pass");
                        Some(name)
                    }
                },
                _ => None,
            };
            let left = Leftovers {
                zone,
                volumes,
                ips,
                node,
            };
            let mut teardowns = self.teardowns.lock();
            if left.is_empty() {
                teardowns.remove(&id);
            } else {
                teardowns.insert(id, left);
            }
        }
    }
}

#[cfg(test)]
#[path = "instance_pass_tests.rs"]
mod tests;
