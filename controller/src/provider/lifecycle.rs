//! Delete, Get and List: the cloud is the source of truth for what exists.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use futures::StreamExt as _;
use serde_json::{Value, json};
use tracing::{debug, info, warn};

use super::nodeclaim;
use super::standby::{StandbyServer, TAG_RESERVATION, TAG_STANDBY};
use super::{
    MachineId, Provider, ProviderError, TAG_NODECLAIM, TAG_NODEPOOL, parse_machine_id,
    parse_provider_id, provider_id, tag, tag_value,
};
use crate::catalog::{
    CAPACITY_TYPE_ON_DEMAND, CAPACITY_TYPE_RESERVED, LABEL_CAPACITY_TYPE, LABEL_INSTANCE_TYPE,
    LABEL_REGION, LABEL_RESERVATION_ID, LABEL_ZONE, region_of,
};
use crate::metrics::safety_metrics;
use crate::scaleway::{ApiError, Server, ServerFilter, ServerStatus};

/// Servers looked up at once while proving absence.
const ABSENCE_LOOKUPS: usize = 8;

/// Why a List failed, the `reason` label of
/// `karpenter_scaleway_list_failures_total`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ListFailureReason {
    /// 5xx and transport errors.
    ApiUnavailable,
    /// 429 after the client's retries.
    RateLimited,
    /// No answer in time.
    Timeout,
    /// 401/403: the credentials were refused.
    Auth,
    /// Pages that contradict each other, or a server that exists (GET) but
    /// was missing from the listing.
    Inconsistent,
    /// The NodeClaims could not be read from the API server.
    KubeUnavailable,
}

impl ListFailureReason {
    pub fn as_str(self) -> &'static str {
        match self {
            ListFailureReason::ApiUnavailable => "api_unavailable",
            ListFailureReason::RateLimited => "rate_limited",
            ListFailureReason::Timeout => "timeout",
            ListFailureReason::Auth => "auth",
            ListFailureReason::Inconsistent => "inconsistent",
            ListFailureReason::KubeUnavailable => "kube_unavailable",
        }
    }

    /// The reason of an Elastic Metal error.
    pub fn of_api(err: &ApiError) -> Self {
        match err {
            ApiError::Throttled => ListFailureReason::RateLimited,
            ApiError::Unauthorized(_) => ListFailureReason::Auth,
            ApiError::Timeout(_) => ListFailureReason::Timeout,
            ApiError::Inconsistent(_) => ListFailureReason::Inconsistent,
            _ => ListFailureReason::ApiUnavailable,
        }
    }
}

struct ListFailure {
    reason: ListFailureReason,
    error: ProviderError,
}

impl ListFailure {
    fn api(err: ApiError, doing: &str) -> Self {
        ListFailure {
            reason: ListFailureReason::of_api(&err),
            error: ProviderError::Unavailable(format!("{doing}: {err}")),
        }
    }
}

impl Provider {
    /// Triggers deletion of the NodeClaim's server. `Ok` = deletion under way
    /// (core calls again every few seconds), `NotFound` = gone. Cheap and
    /// idempotent: a server already `deleting` is not deleted again.
    ///
    /// The NodeClaim's bootstrap token goes with it: the node it was made for
    /// will never use it. Its deletion is best effort (the periodic sweep
    /// removes tokens whose NodeClaim is gone) and never holds up the server's.
    pub async fn delete(&self, claim: &Value) -> Result<(), ProviderError> {
        let view = nodeclaim::parse(claim).map_err(ProviderError::Invalid)?;
        let result = self.delete_machine(&view, claim).await;
        if let Err(error) = self.cluster.tokens.delete(&view.name).await {
            warn!(nodeclaim = %view.name, %error,
                "could not delete the NodeClaim's bootstrap token; the sweep will");
        }
        if let Err(ProviderError::NotFound(_)) = &result {
            // The machine is gone; a Node core never registered is not
            // deleted by core (see `NodeRegistrar::forget`). Until it is,
            // Delete is not over: core calls again.
            self.cluster
                .nodes
                .forget(&view.name, view.provider_id.as_deref())
                .await
                .map_err(|e| {
                    ProviderError::Unavailable(format!(
                        "machine of NodeClaim {} gone, its Node not yet deleted: {e}",
                        view.name
                    ))
                })?;
        }
        result
    }

    async fn delete_machine(
        &self,
        view: &nodeclaim::NodeClaimView,
        claim: &Value,
    ) -> Result<(), ProviderError> {
        let vm_class = super::vm::instance_class_name(claim).is_some();
        let vm_pid = view
            .provider_id
            .as_deref()
            .and_then(parse_machine_id)
            .is_some_and(|m| matches!(m, MachineId::Instance { .. }));
        if vm_class || vm_pid {
            return self
                .delete_vm(view, &super::drift::annotations_of(claim))
                .await;
        }
        let Some(pid) = view.provider_id.as_deref() else {
            // Create may have ordered a server and lost the answer (restart):
            // the NodeClaim tag still finds it.
            return self.delete_by_claim_tag(&view.name, claim).await;
        };
        let (zone, id) =
            parse_provider_id(pid).ok_or_else(|| super::unreadable_provider_id(pid))?;
        let server = match self.api.get_server(zone, id).await {
            Ok(server) => server,
            Err(ApiError::NotFound(_)) => {
                // Its deletion is over: the quota it held is free again.
                if let Some(offer) = view.labels.get(LABEL_INSTANCE_TYPE)
                    && self.catalog.quota_freed(offer)
                {
                    info!(nodeclaim = %view.name, offer, "server gone; the offering's quota marks lifted");
                }
                return Err(ProviderError::NotFound(pid.to_string()));
            }
            Err(e) => return Err(ProviderError::from_api(e)),
        };
        if !self.owned(&server) {
            // Never delete what this cluster cannot prove it owns.
            warn!(nodeclaim = %view.name, server_id = %id, zone,
                "server lacks this cluster's ownership tag; reporting it gone instead of deleting it");
            return Err(ProviderError::NotFound(pid.to_string()));
        }
        // A server another NodeClaim adopted since, or one back in standby,
        // is no longer this NodeClaim's machine.
        match tag_value(&server, TAG_NODECLAIM) {
            Some(owner) if owner != view.name => {
                info!(nodeclaim = %view.name, server_id = %id, owner,
                    "the server belongs to another NodeClaim now; reporting this one's gone");
                return Err(ProviderError::NotFound(pid.to_string()));
            }
            None if tag_value(&server, TAG_STANDBY).is_some() => {
                info!(nodeclaim = %view.name, server_id = %id,
                    "the server is a standby server now; reporting this NodeClaim's gone");
                return Err(ProviderError::NotFound(pid.to_string()));
            }
            _ => {}
        }
        if server.status != ServerStatus::Deleting
            && let Some(result) = self.recycle_on_delete(claim, &server).await
        {
            return result;
        }
        self.delete_server(&server, &view.name).await
    }

    async fn delete_server(&self, server: &Server, claim: &str) -> Result<(), ProviderError> {
        if server.status == ServerStatus::Deleting {
            return Ok(());
        }
        match self.api.delete_server(&server.zone, &server.id).await {
            Ok(_) => {
                info!(nodeclaim = claim, server_id = %server.id, zone = %server.zone,
                    reason = "NodeClaim deleted", "deleting server");
                Ok(())
            }
            Err(ApiError::NotFound(_)) => Err(ProviderError::NotFound(provider_id(
                &server.zone,
                &server.id,
            ))),
            Err(e) => Err(ProviderError::from_api(e)),
        }
    }

    async fn delete_by_claim_tag(
        &self,
        claim: &str,
        claim_object: &Value,
    ) -> Result<(), ProviderError> {
        let filter = ServerFilter {
            tags: vec![self.cluster_tag(), tag(TAG_NODECLAIM, claim)],
            name: None,
            project_id: Some(self.settings.project_id.clone()),
        };
        let servers = self.list_zones(&filter).await?;
        if servers.is_empty() {
            return Err(ProviderError::NotFound(format!(
                "no server for NodeClaim {claim}"
            )));
        }
        let mut recycled = 0;
        for server in &servers {
            // An adopted standby whose NodeClaim never launched goes back
            // to its pool rather than away.
            if server.status != ServerStatus::Deleting
                && let Some(result) = self.recycle_on_delete(claim_object, server).await
            {
                match result {
                    Ok(()) | Err(ProviderError::NotFound(_)) => recycled += 1,
                    Err(e) => return Err(e),
                }
                continue;
            }
            match self.delete_server(server, claim).await {
                Ok(()) | Err(ProviderError::NotFound(_)) => {}
                Err(e) => return Err(e),
            }
        }
        if recycled == servers.len() {
            return Err(ProviderError::NotFound(format!(
                "the server of NodeClaim {claim} went back to standby"
            )));
        }
        Ok(())
    }

    /// The machine behind a providerID. `NotFound` only when the API says the
    /// server is gone: core then drops the Node without draining it.
    pub async fn get(&self, pid: &str) -> Result<Value, ProviderError> {
        if let Some(MachineId::Instance { zone, id }) = parse_machine_id(pid) {
            return self.get_vm(zone, id).await;
        }
        let (zone, id) =
            parse_provider_id(pid).ok_or_else(|| super::unreadable_provider_id(pid))?;
        match self.api.get_server(zone, id).await {
            Ok(server) => Ok(self.server_to_claim(&server)),
            Err(ApiError::NotFound(_)) => Err(ProviderError::NotFound(pid.to_string())),
            Err(e) => Err(ProviderError::from_api(e)),
        }
    }

    /// Every server of this cluster in every served zone, all pages, or an
    /// error: a partial list would make core delete live NodeClaims.
    ///
    /// Absence is proven, not inferred: core garbage-collects a registered
    /// NodeClaim whose providerID is missing from this answer, so each
    /// NodeClaim pointing at a server the listing did not return is looked up
    /// (`GET`). Only a 404, or a server that is not this cluster's, confirms
    /// it gone; a server that exists but was not listed (an empty or short
    /// answer passed off as complete) or a failed lookup fails the whole List.
    /// The NodeClaims are read first, so that a server ordered while List
    /// runs can never look like one the listing missed.
    ///
    /// Every failure is counted (`karpenter_scaleway_list_failures_total`) and
    /// logged once with its reason.
    pub async fn list(&self) -> Result<Vec<Value>, ProviderError> {
        match self.list_proven().await {
            Ok(claims) => Ok(claims),
            Err(ListFailure { reason, error }) => {
                safety_metrics().count_list_failure(reason.as_str());
                warn!(reason = reason.as_str(), %error,
                    "List failed; answering an error rather than a partial list");
                Err(error)
            }
        }
    }

    async fn list_proven(&self) -> Result<Vec<Value>, ListFailure> {
        let claims = match &self.node_claims {
            Some(source) => source.list().await.map_err(|e| ListFailure {
                reason: ListFailureReason::KubeUnavailable,
                error: ProviderError::Unavailable(format!("listing NodeClaims: {e}")),
            })?,
            None => Vec::new(),
        };
        let filter = self.owned_filter();
        let mut servers = self
            .list_zones_raw(&filter)
            .await
            .map_err(|e| ListFailure::api(e, "listing servers"))?;
        let listed: HashSet<(String, String)> = servers
            .iter()
            .map(|s| (s.zone.clone(), s.id.clone()))
            .collect();
        let mut missing: BTreeSet<(String, String)> = BTreeSet::new();
        for claim in &claims {
            let Some((zone, id)) = claim
                .pointer("/status/providerID")
                .and_then(Value::as_str)
                .and_then(parse_provider_id)
            else {
                continue;
            };
            if !listed.contains(&(zone.to_string(), id.to_string())) {
                missing.insert((zone.to_string(), id.to_string()));
            }
        }
        let lookups = futures::stream::iter(missing.into_iter().map(|(zone, id)| async move {
            let result = self.api.get_server(&zone, &id).await;
            (zone, id, result)
        }))
        .buffer_unordered(ABSENCE_LOOKUPS)
        .collect::<Vec<_>>()
        .await;
        for (zone, id, result) in lookups {
            match result {
                Err(ApiError::NotFound(_)) => {
                    debug!(server_id = %id, %zone, "server of a NodeClaim is gone (404)");
                }
                Err(e) => {
                    return Err(ListFailure::api(
                        e,
                        &format!("confirming that server {id} in {zone} is gone"),
                    ));
                }
                Ok(server) if !(filter.matches(&server) && self.owned(&server)) => {
                    debug!(server_id = %id, %zone,
                        "server of a NodeClaim is not this cluster's; left out of List");
                }
                Ok(server) if !self.settings.zones.contains(&zone) => {
                    // A zone removed from --zones is not listed, yet its
                    // servers still run: what GET proves to exist is reported.
                    servers.push(server);
                }
                Ok(_) => {
                    return Err(ListFailure {
                        reason: ListFailureReason::Inconsistent,
                        error: ProviderError::Unavailable(format!(
                            "list inconsistent: server {id} exists but was not listed in {zone}"
                        )),
                    });
                }
            }
        }
        // Standby servers are owned, but no NodeClaim's: core must neither
        // see them as nodes nor collect them (the standby pools own them).
        let mut out: Vec<Value> = servers
            .iter()
            .filter(|s| StandbyServer::of(s).is_none())
            .map(|s| self.server_to_claim(s))
            .collect();
        out.extend(
            self.list_vms_proven(&claims)
                .await
                .map_err(|(e, doing)| ListFailure::api(e, &doing))?,
        );
        Ok(out)
    }

    /// The servers this cluster owns: its ownership tag, its project.
    pub(super) fn owned_filter(&self) -> ServerFilter {
        ServerFilter {
            tags: vec![self.cluster_tag()],
            name: None,
            project_id: Some(self.settings.project_id.clone()),
        }
    }

    async fn list_zones(&self, filter: &ServerFilter) -> Result<Vec<Server>, ProviderError> {
        self.list_zones_raw(filter)
            .await
            .map_err(|e| ProviderError::Unavailable(format!("listing servers: {e}")))
    }

    /// Every served zone, all pages (the client checks them), re-filtered on
    /// our side; the first failure fails the whole listing.
    pub(super) async fn list_zones_raw(
        &self,
        filter: &ServerFilter,
    ) -> Result<Vec<Server>, ApiError> {
        let servers = self
            .every_zone(|z| async move { self.api.list_servers(&z, filter).await })
            .await?;
        // The client filters already; this guard keeps foreign servers out
        // whatever the implementation behind the trait does.
        Ok(servers
            .into_iter()
            .filter(|s| filter.matches(s) && self.owned(s))
            .collect())
    }

    /// A server as the NodeClaim core compares against its own: providerID,
    /// labels of its instance type, capacity, creation time, and a deletion
    /// timestamp while the server is being deleted.
    fn server_to_claim(&self, server: &Server) -> Value {
        let snapshot = self.catalog.snapshot();
        let it = snapshot
            .default
            .iter()
            .find(|t| t.name == server.offer_name);
        machine_claim(&MachineClaim {
            name: tag_value(server, TAG_NODECLAIM).unwrap_or(&server.name),
            zone: &server.zone,
            provider_id: provider_id(&server.zone, &server.id),
            instance_type: it,
            nodepool: tag_value(server, TAG_NODEPOOL),
            created_at: Some(&server.created_at),
            deleting: server.status == ServerStatus::Deleting,
            image_id: None,
            reservation: tag_value(server, TAG_RESERVATION),
        })
    }
}

/// What core compares of a machine of either kind ([`machine_claim`]).
pub(super) struct MachineClaim<'a> {
    /// The NodeClaim's name (the tag), else the server's.
    pub name: &'a str,
    pub zone: &'a str,
    pub provider_id: String,
    /// The machine's type in the catalog, when known.
    pub instance_type: Option<&'a crate::catalog::InstanceType>,
    pub nodepool: Option<&'a str>,
    /// RFC 3339.
    pub created_at: Option<&'a str>,
    /// Being deleted: the claim gets a deletion timestamp.
    pub deleting: bool,
    pub image_id: Option<&'a str>,
    /// The reservation of a node adopted from standby (reserved capacity).
    pub reservation: Option<&'a str>,
}

/// A machine as a NodeClaim: providerID, the labels of its type in its zone
/// (zone, region, capacity type, NodePool), capacity and allocatable,
/// creation time, and a deletion timestamp while it is being deleted.
pub(super) fn machine_claim(m: &MachineClaim) -> Value {
    let mut labels: BTreeMap<String, String> = m
        .instance_type
        .map(|t| t.node_labels(m.zone))
        .unwrap_or_default();
    labels.insert(LABEL_ZONE.into(), m.zone.to_string());
    labels.insert(LABEL_REGION.into(), region_of(m.zone).to_string());
    match m.reservation {
        Some(id) => {
            labels.insert(LABEL_CAPACITY_TYPE.into(), CAPACITY_TYPE_RESERVED.into());
            labels.insert(LABEL_RESERVATION_ID.into(), id.to_string());
        }
        None => {
            labels.insert(LABEL_CAPACITY_TYPE.into(), CAPACITY_TYPE_ON_DEMAND.into());
        }
    }
    if let Some(pool) = m.nodepool {
        labels.insert(TAG_NODEPOOL.into(), pool.to_string());
    }
    let mut metadata = json!({
        "name": m.name,
        "labels": labels,
        "annotations": {},
    });
    if let Some(created) = m.created_at.and_then(kube_time) {
        metadata["creationTimestamp"] = json!(created);
    }
    if m.deleting {
        metadata["deletionTimestamp"] = json!(kube_time_now());
    }
    let mut status = json!({ "providerID": m.provider_id });
    if let Some(image) = m.image_id {
        status["imageID"] = json!(image);
    }
    if let Some(it) = m.instance_type {
        status["capacity"] = json!(it.capacity.to_quantities(true));
        status["allocatable"] = json!(it.allocatable().to_quantities(true));
    }
    json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": metadata,
        "status": status,
    })
}

/// Kubernetes timestamps have second precision (`metav1.Time`).
fn kube_time(rfc3339: &str) -> Option<String> {
    chrono::DateTime::parse_from_rfc3339(rfc3339).ok().map(|t| {
        t.with_timezone(&chrono::Utc)
            .format("%Y-%m-%dT%H:%M:%SZ")
            .to_string()
    })
}

fn kube_time_now() -> String {
    chrono::Utc::now().format("%Y-%m-%dT%H:%M:%SZ").to_string()
}

#[cfg(test)]
#[path = "lifecycle_tests.rs"]
mod tests;

/// The orphan sweeper releases the servers of a NodeClaim deleted before
/// core learnt them as Delete would have: by the NodeClaim tag, an adopted
/// standby back to its pool, anything else deleted, the token removed.
#[async_trait::async_trait]
impl crate::gc::ClaimRelease for Provider {
    async fn release(&self, nodeclaim: &str) -> Result<(), String> {
        let claim = json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {"name": nodeclaim},
        });
        match self.delete(&claim).await {
            Ok(()) | Err(ProviderError::NotFound(_)) => Ok(()),
            Err(e) => Err(e.to_string()),
        }
    }

    async fn forget_node(&self, nodeclaim: &str, provider_id: &str) -> Result<(), String> {
        self.cluster
            .nodes
            .forget(nodeclaim, Some(provider_id))
            .await
            .map(drop)
            .map_err(|e| e.to_string())
    }
}
