//! Delete, Get and List for VMs. Delete leaves nothing billed behind: the
//! server is terminated (running) or deleted (stopped), then its SBS
//! volumes, which both only detach, are deleted through the Block API; a
//! flexible IP is released first, and the private NIC of a VM on a Private
//! Network (best effort, `private_nic.rs`). List is all-or-error and proves
//! absence, as for Elastic Metal (`super::super::lifecycle`).

use std::collections::{BTreeMap, BTreeSet, HashSet};

use futures::StreamExt as _;
use serde_json::Value;
use tracing::{debug, info, warn};

use super::super::lifecycle::{MachineClaim, machine_claim};
use super::super::nodeclaim::NodeClaimView;
use super::super::{
    MachineId, Provider, ProviderError, TAG_NODECLAIM, TAG_NODEPOOL, instance_provider_id,
    parse_machine_id, tag,
};
use super::{VOLUMES_ANNOTATION, VmPorts, has_tag, vm_tag_value};
use crate::catalog::ClassKind;
use crate::provider::TAG_CLUSTER;
use crate::scaleway::ApiError;
use crate::scaleway::block::VolumeStatus;
use crate::scaleway::instance::{Server, ServerAction, ServerFilter, ServerState};

/// VMs looked up at once while proving absence.
const ABSENCE_LOOKUPS: usize = 8;

/// A VM being terminated still answers GET for a few seconds.
fn terminating(server: &Server) -> bool {
    server.state_detail.contains("terminating")
}

impl Provider {
    fn owns_vm(&self, server: &Server) -> bool {
        has_tag(server, TAG_CLUSTER, &self.settings.cluster_name)
    }

    fn vm_filter(&self, extra: Option<String>) -> ServerFilter {
        let mut tags = vec![self.cluster_tag()];
        tags.extend(extra);
        ServerFilter {
            tags,
            name: None,
            project: Some(self.settings.project_id.clone()),
        }
    }

    /// Delete for a VM NodeClaim: `Ok` while deletion is under way, NotFound
    /// once the server and its volumes are gone.
    pub(crate) async fn delete_vm(
        &self,
        view: &NodeClaimView,
        annotations: &BTreeMap<String, String>,
    ) -> Result<(), ProviderError> {
        let vms = self.vm_ports()?;
        let mut volumes: BTreeSet<String> = annotations
            .get(VOLUMES_ANNOTATION)
            .map(|v| {
                v.split(',')
                    .filter(|s| !s.is_empty())
                    .map(String::from)
                    .collect()
            })
            .unwrap_or_default();
        let servers = match view.provider_id.as_deref().and_then(parse_machine_id) {
            Some(MachineId::Instance { zone, id }) => match vms.api.get_server(zone, id).await {
                Ok(server) if self.owns_vm(&server) => vec![server],
                Ok(_) => {
                    warn!(nodeclaim = %view.name, server_id = id, zone,
                        "VM lacks this cluster's ownership tag; reporting it gone instead of deleting it");
                    return Err(ProviderError::NotFound(instance_provider_id(zone, id)));
                }
                Err(ApiError::NotFound(_)) => Vec::new(),
                Err(e) => return Err(ProviderError::from_api(e)),
            },
            Some(MachineId::Baremetal { .. }) => {
                return Err(ProviderError::Invalid(format!(
                    "NodeClaim {} of an Instance NodeClass has providerID {:?}",
                    view.name, view.provider_id
                )));
            }
            // Another provider's providerID (core's e2e suite's
            // `Provider:///AZ/i-…`) names no VM of ours: gone, so that core
            // lets its NodeClaim go; a malformed Scaleway one is refused.
            None if let Some(pid) = view.provider_id.as_deref() => {
                return Err(super::super::unreadable_provider_id(pid));
            }
            // Create may have created the VM and lost the answer: its tag finds it.
            _ => self
                .list_vms(vms, &self.vm_filter(Some(tag(TAG_NODECLAIM, &view.name))))
                .await
                .map_err(|e| ProviderError::Unavailable(format!("listing VMs: {e}")))?,
        };
        let zone = servers.first().map(|s| s.zone.clone()).or_else(|| {
            view.provider_id
                .as_deref()
                .and_then(parse_machine_id)
                .map(|m| m.zone().to_string())
        });
        let mut under_way = false;
        for server in &servers {
            volumes.extend(server.sbs_volume_ids());
            if self.stop_vm(vms, server, &view.name).await? {
                // Deleted while stopped: its volumes are detached now, and
                // when core never got the providerID (no annotation), this
                // is the last call that knows them.
                for volume in server.sbs_volume_ids() {
                    self.delete_volume(vms, &server.zone, &volume, &view.name)
                        .await?;
                }
            }
            under_way = true;
        }
        if under_way {
            return Ok(());
        }
        // The server is gone: its volumes are what is left to pay for.
        let Some(zone) = zone else {
            return Err(ProviderError::NotFound(format!(
                "no VM for NodeClaim {}",
                view.name
            )));
        };
        let mut pending = false;
        for volume in &volumes {
            pending |= self.delete_volume(vms, &zone, volume, &view.name).await?;
        }
        if pending {
            Ok(())
        } else {
            Err(ProviderError::NotFound(format!(
                "VM of NodeClaim {} and its volumes are gone",
                view.name
            )))
        }
    }

    /// One step towards the server's end: release flexible IPs, delete
    /// private NICs, then terminate a running server, delete a stopped one,
    /// wait otherwise.
    /// `true` when the server was deleted by this call (it was stopped).
    async fn stop_vm(
        &self,
        vms: &VmPorts,
        server: &Server,
        claim: &str,
    ) -> Result<bool, ProviderError> {
        if terminating(server) {
            return Ok(false);
        }
        for ip in server.flexible_ip_ids() {
            match vms.api.delete_ip(&server.zone, &ip).await {
                Ok(()) | Err(ApiError::NotFound(_)) => {
                    info!(nodeclaim = claim, server_id = %server.id, ip_id = %ip, "released flexible IP");
                }
                Err(e) => return Err(ProviderError::from_api(e)),
            }
        }
        if matches!(
            server.state,
            ServerState::Running | ServerState::Stopped | ServerState::StoppedInPlace
        ) {
            self.delete_private_nics(server, claim).await;
        }
        let result = match server.state {
            ServerState::Running => vms
                .api
                .server_action(&server.zone, &server.id, ServerAction::Terminate)
                .await
                .map(drop),
            ServerState::Stopped | ServerState::StoppedInPlace => {
                vms.api.delete_server(&server.zone, &server.id).await
            }
            // Starting, stopping, locked: asked again on core's next call.
            _ => {
                debug!(nodeclaim = claim, server_id = %server.id, state = ?server.state,
                    "VM in a transient state; deleting it once it settles");
                return Ok(false);
            }
        };
        match result {
            Ok(()) => {
                info!(nodeclaim = claim, server_id = %server.id, zone = %server.zone,
                    state = ?server.state, reason = "NodeClaim deleted", "deleting VM");
                Ok(server.state != ServerState::Running)
            }
            Err(ApiError::NotFound(_) | ApiError::TransientState(_)) => Ok(false),
            Err(e) => Err(ProviderError::from_api(e)),
        }
    }

    /// Deletes a detached volume; `true` while it is still attached or being
    /// deleted (asked again later).
    async fn delete_volume(
        &self,
        vms: &VmPorts,
        zone: &str,
        id: &str,
        claim: &str,
    ) -> Result<bool, ProviderError> {
        match vms.block.get_volume(zone, id).await {
            Err(ApiError::NotFound(_)) => return Ok(false),
            Err(e) => return Err(ProviderError::from_api(e)),
            Ok(v) if v.status == VolumeStatus::Deleting => return Ok(true),
            Ok(v) if !v.references.is_empty() || v.status == VolumeStatus::InUse => {
                return Ok(true);
            }
            Ok(_) => {}
        }
        match vms.block.delete_volume(zone, id).await {
            Ok(()) => {
                info!(
                    nodeclaim = claim,
                    volume_id = id,
                    zone,
                    "deleted the VM's SBS volume"
                );
                Ok(true)
            }
            Err(ApiError::NotFound(_)) => Ok(false),
            Err(ApiError::TransientState(_)) => Ok(true),
            Err(e) => Err(ProviderError::from_api(e)),
        }
    }

    pub(crate) async fn get_vm(&self, zone: &str, id: &str) -> Result<Value, ProviderError> {
        let vms = self.vm_ports()?;
        match vms.api.get_server(zone, id).await {
            Ok(server) => Ok(self.vm_to_claim(&server)),
            Err(ApiError::NotFound(_)) => {
                Err(ProviderError::NotFound(instance_provider_id(zone, id)))
            }
            Err(e) => Err(ProviderError::from_api(e)),
        }
    }

    /// Every served zone, all pages, this cluster's VMs only; the first
    /// failure fails the whole listing.
    pub(crate) async fn list_vms(
        &self,
        vms: &VmPorts,
        filter: &ServerFilter,
    ) -> Result<Vec<Server>, ApiError> {
        let servers = self
            .every_vm_zone(|z| async move { vms.api.list_servers(&z, filter).await })
            .await?;
        Ok(servers
            .into_iter()
            .filter(|s| filter.matches(s) && self.owns_vm(s))
            .collect())
    }

    /// List's VM half: the listing, plus each VM a NodeClaim points at that
    /// the listing missed, proven gone by a 404 (see `lifecycle.rs`).
    pub(crate) async fn list_vms_proven(
        &self,
        claims: &[Value],
    ) -> Result<Vec<Value>, (ApiError, String)> {
        let Some(vms) = self.vms.as_ref() else {
            return Ok(Vec::new());
        };
        let filter = self.vm_filter(None);
        let mut servers = self
            .list_vms(vms, &filter)
            .await
            .map_err(|e| (e, "listing VMs".to_string()))?;
        let listed: HashSet<(String, String)> = servers
            .iter()
            .map(|s| (s.zone.clone(), s.id.clone()))
            .collect();
        let missing: BTreeSet<(String, String)> = claims
            .iter()
            .filter_map(|c| c.pointer("/status/providerID").and_then(Value::as_str))
            .filter_map(|p| match parse_machine_id(p)? {
                MachineId::Instance { zone, id } => Some((zone.to_string(), id.to_string())),
                MachineId::Baremetal { .. } => None,
            })
            .filter(|key| !listed.contains(key))
            .collect();
        let lookups = futures::stream::iter(missing.into_iter().map(|(zone, id)| async move {
            let result = vms.api.get_server(&zone, &id).await;
            (zone, id, result)
        }))
        .buffer_unordered(ABSENCE_LOOKUPS)
        .collect::<Vec<_>>()
        .await;
        for (zone, id, result) in lookups {
            match result {
                Err(ApiError::NotFound(_)) => {
                    debug!(server_id = %id, %zone, "VM of a NodeClaim is gone (404)");
                }
                Err(e) => return Err((e, format!("confirming that VM {id} in {zone} is gone"))),
                Ok(server) if !(filter.matches(&server) && self.owns_vm(&server)) => {
                    debug!(server_id = %id, %zone, "VM of a NodeClaim is not this cluster's");
                }
                Ok(server) if !self.settings.instance_zones.contains(&zone) => servers.push(server),
                Ok(_) => {
                    return Err((
                        ApiError::Inconsistent(format!(
                            "VM {id} exists but was not listed in {zone}"
                        )),
                        "listing VMs".to_string(),
                    ));
                }
            }
        }
        Ok(servers.iter().map(|s| self.vm_to_claim(s)).collect())
    }

    /// A VM as the NodeClaim core compares against its own.
    pub(crate) fn vm_to_claim(&self, server: &Server) -> Value {
        let snapshot = self.catalog.snapshot();
        let types = snapshot.default_for(ClassKind::Instance);
        machine_claim(&MachineClaim {
            name: vm_tag_value(server, TAG_NODECLAIM).unwrap_or(&server.name),
            zone: &server.zone,
            provider_id: instance_provider_id(&server.zone, &server.id),
            instance_type: types.iter().find(|t| t.name == server.commercial_type),
            nodepool: vm_tag_value(server, TAG_NODEPOOL),
            created_at: server.creation_date.as_deref(),
            deleting: terminating(server),
            image_id: server.image.as_ref().map(|i| i.id.as_str()),
            reservation: None,
        })
    }
}
