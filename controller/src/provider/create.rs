//! Create: adopt the server already ordered for this NodeClaim, or order the
//! cheapest compatible offering; hand it to the install engine; return the
//! hydrated NodeClaim at once (Create must not block: core's whole
//! provisioning waits while any NodeClaim lacks a providerID).

use futures::future::join_all;
use serde_json::Value;
use tracing::{info, warn};

use super::nodeclaim::{self, Hydration, NodeClaimView};
use super::{
    NodeClassRecord, Provider, ProviderError, TAG_NODECLAIM, TAG_NODECLASS, TAG_NODEPOOL,
    candidates, provider_id, tag,
};
use crate::catalog::{InstanceType, Snapshot};
use crate::install::{InstallSpec, Secret};
use crate::nodeclass::{self, SecretKeyRef};
use crate::scaleway::{ApiError, CreateServerRequest, Server, ServerFilter, ServerStatus};

fn create_failed(reason: &str, message: impl Into<String>) -> ProviderError {
    ProviderError::CreateFailed {
        reason: reason.to_string(),
        message: message.into(),
    }
}

/// An API error while ordering, as core should see it.
fn order_error(err: ApiError) -> ProviderError {
    match err {
        ApiError::OutOfStock(m) | ApiError::QuotaExceeded(m) => {
            ProviderError::InsufficientCapacity(m)
        }
        ApiError::Unauthorized(m) => create_failed("ScalewayUnauthorized", m),
        ApiError::Invalid(m) | ApiError::NotFound(m) => create_failed("ScalewayOrderRejected", m),
        other @ (ApiError::TransientState(_) | ApiError::Throttled | ApiError::Unavailable(_)) => {
            create_failed("ScalewayAPIUnavailable", other.to_string())
        }
    }
}

impl Provider {
    pub async fn create(&self, mut claim: Value) -> Result<Value, ProviderError> {
        let view = nodeclaim::parse(&claim).map_err(ProviderError::Invalid)?;
        let class = self.node_class_of(&view)?;
        let zones = self.zones_for(&class);
        if zones.is_empty() {
            return Err(ProviderError::NodeClassNotReady(format!(
                "none of the zones of NodeClass {} is served by this provider ({})",
                class.name,
                self.settings.zones.join(",")
            )));
        }
        let spec = &class.spec;
        let private_key = self
            .secret(
                &spec.rescue_ssh_key.private_key_secret_ref,
                "rescue SSH private key",
            )
            .await?;
        let machine_config = self
            .secret(&spec.machine_config_secret_ref, "machine config")
            .await?;
        let snapshot = self.catalog.snapshot();
        if !snapshot.is_loaded() {
            return Err(create_failed(
                "CatalogNotLoaded",
                "the offer catalog has not been read yet",
            ));
        }

        let (server, it) = match self.find_claimed_server(&view.name).await? {
            Some(server) => {
                let it = snapshot
                    .default
                    .iter()
                    .find(|t| t.name == server.offer_name)
                    .cloned()
                    .ok_or_else(|| {
                        create_failed(
                            "InstanceTypeNotFound",
                            format!(
                                "server {} has offer {} which is not in the catalog",
                                server.id, server.offer_name
                            ),
                        )
                    })?;
                info!(nodeclaim = %view.name, server_id = %server.id, zone = %server.zone,
                    "adopting the server already ordered for this NodeClaim");
                (server, it)
            }
            None => self.order(&view, &class, &snapshot, &zones).await?,
        };

        let zone = server.zone.clone();
        let image_url = nodeclass::resolve_image_url(&spec.image, &it.arch)
            .map_err(ProviderError::NodeClassNotReady)?;
        let node_labels = it.node_labels(&zone);
        let mut labels = node_labels.clone();
        labels.extend(view.labels.clone());
        let pid = provider_id(&zone, &server.id);
        self.installer.start(InstallSpec {
            zone: zone.clone(),
            server_id: server.id.clone(),
            provider_id: pid.clone(),
            node_name: view.name.clone(),
            node_claim_name: view.name.clone(),
            labels,
            taints: view.taints.clone(),
            startup_taints: view.startup_taints.clone(),
            arch: it.arch.clone(),
            image_url: image_url.clone(),
            install_disk: spec.install_disk.as_ref().and_then(|d| d.name.clone()),
            rescue_ssh_key_id: spec.rescue_ssh_key.iam_key_id.clone(),
            rescue_private_key: private_key,
            base_machine_config: machine_config,
            machine_config_patches: spec.machine_config_patches.clone(),
            offer_name: server.offer_name.clone(),
            image_sha256: spec.image.sha256.as_ref().and_then(|m| m.get(&it.arch).cloned()),
            // INTERFACE PLACEHOLDER (session 2): the per-node bootstrap token
            // replaces the base config's cluster token here.
            bootstrap_token: Secret::default(),
        });
        nodeclaim::hydrate(
            &mut claim,
            &Hydration {
                labels: node_labels,
                annotations: Default::default(),
                provider_id: pid,
                image_id: image_url,
                capacity: it.capacity.to_quantities(true),
                allocatable: it.allocatable().to_quantities(true),
            },
        );
        Ok(claim)
    }

    fn node_class_of(&self, view: &NodeClaimView) -> Result<NodeClassRecord, ProviderError> {
        let r = view.node_class_ref.as_ref().ok_or_else(|| {
            ProviderError::Invalid(format!("NodeClaim {} has no nodeClassRef", view.name))
        })?;
        if r.kind != nodeclass::KIND || !(r.group.is_empty() || r.group == nodeclass::GROUP) {
            return Err(ProviderError::Invalid(format!(
                "NodeClaim {} references {}/{}, not {}/{}",
                view.name,
                r.group,
                r.kind,
                nodeclass::GROUP,
                nodeclass::KIND
            )));
        }
        let class = self.node_classes.get(&r.name).ok_or_else(|| {
            ProviderError::NodeClassNotReady(format!("NodeClass {} not found", r.name))
        })?;
        if !class.ready {
            return Err(ProviderError::NodeClassNotReady(format!(
                "NodeClass {} is not Ready",
                r.name
            )));
        }
        Ok(class)
    }

    /// The NodeClass's zones that this provider serves (all served zones when
    /// the NodeClass names none).
    fn zones_for(&self, class: &NodeClassRecord) -> Vec<String> {
        let served = &self.settings.zones;
        if class.spec.zones.is_empty() {
            served.clone()
        } else {
            served
                .iter()
                .filter(|z| class.spec.zones.contains(z))
                .cloned()
                .collect()
        }
    }

    async fn secret(&self, r: &SecretKeyRef, what: &str) -> Result<Secret, ProviderError> {
        match self.node_classes.secret(r).await {
            Ok(Some(secret)) => Ok(secret),
            Ok(None) => Err(ProviderError::NodeClassNotReady(format!(
                "{what} Secret {}/{} key {:?} not found",
                r.namespace, r.name, r.key
            ))),
            Err(e) => Err(create_failed(
                "SecretReadFailed",
                format!("reading {what} Secret: {e}"),
            )),
        }
    }

    /// The live server tagged for this NodeClaim in any served zone (adopt
    /// before create: Create is called again after restarts and leader
    /// changes). When the lookup fails Create fails too, rather than risk a
    /// second order.
    async fn find_claimed_server(&self, claim: &str) -> Result<Option<Server>, ProviderError> {
        let filter = ServerFilter {
            tags: vec![self.cluster_tag(), tag(TAG_NODECLAIM, claim)],
            name: None,
            project_id: Some(self.settings.project_id.clone()),
        };
        let results = join_all(
            self.settings
                .zones
                .iter()
                .map(|z| self.api.list_servers(z, &filter)),
        )
        .await;
        let mut found = Vec::new();
        for result in results {
            let servers = result.map_err(|e| {
                create_failed(
                    "ScalewayAPIUnavailable",
                    format!("looking for a server already ordered for NodeClaim {claim}: {e}"),
                )
            })?;
            found.extend(
                servers
                    .into_iter()
                    .filter(|s| s.status != ServerStatus::Deleting),
            );
        }
        found.sort_by(|a, b| a.created_at.cmp(&b.created_at));
        if found.len() > 1 {
            warn!(
                nodeclaim = claim,
                servers = found.len(),
                "several servers carry this NodeClaim's tag; adopting the oldest"
            );
        }
        Ok(found.into_iter().next())
    }

    /// Orders the cheapest compatible offering; an offering refused for lack of
    /// stock or quota is marked unavailable and the next one is tried, up to
    /// `max_order_attempts`.
    async fn order(
        &self,
        view: &NodeClaimView,
        class: &NodeClassRecord,
        snapshot: &Snapshot,
        zones: &[String],
    ) -> Result<(Server, InstanceType), ProviderError> {
        let types = snapshot.for_class(Some(&class.name));
        let options = candidates(&types, &view.requirements, zones);
        if options.is_empty() {
            return Err(ProviderError::InsufficientCapacity(format!(
                "no available offering in {} matches the requirements of NodeClaim {}",
                zones.join(","),
                view.name
            )));
        }
        let mut tags = vec![
            self.cluster_tag(),
            tag(TAG_NODECLAIM, &view.name),
            tag(TAG_NODECLASS, &class.name),
        ];
        if let Some(pool) = view.labels.get(TAG_NODEPOOL) {
            tags.push(tag(TAG_NODEPOOL, pool));
        }
        tags.extend(class.spec.tags.iter().cloned());
        let mut last = String::new();
        for (it, offering) in options
            .into_iter()
            .take(self.settings.max_order_attempts.max(1))
        {
            let req = CreateServerRequest {
                offer_id: offering.offer_id.clone(),
                project_id: self.settings.project_id.clone(),
                name: view.name.clone(),
                description: format!(
                    "Karpenter NodeClaim {} (cluster {})",
                    view.name, self.settings.cluster_name
                ),
                tags: tags.clone(),
                install: None,
            };
            match self.api.create_server(&offering.zone, &req).await {
                Ok(server) => {
                    info!(nodeclaim = %view.name, server_id = %server.id, zone = %offering.zone,
                        offer = %it.name, price = offering.price, "ordered server");
                    return Ok((server, it.clone()));
                }
                Err(
                    e @ (ApiError::OutOfStock(_)
                    | ApiError::QuotaExceeded(_)
                    | ApiError::NotFound(_)),
                ) => {
                    // NotFound: the offer vanished since the catalog was read.
                    warn!(nodeclaim = %view.name, zone = %offering.zone, offer = %it.name, error = %e,
                        "order refused; trying the next offering");
                    self.catalog.mark_unavailable(&it.name, &offering.zone);
                    last = e.to_string();
                }
                Err(e) => return Err(order_error(e)),
            }
        }
        Err(ProviderError::InsufficientCapacity(last))
    }
}
