//! Create: adopt the server already ordered for this NodeClaim, or order the
//! cheapest compatible offering; hand it to the install engine; return the
//! hydrated NodeClaim at once (Create must not block: core's whole
//! provisioning waits while any NodeClaim lacks a providerID).

use std::collections::BTreeMap;

use serde_json::Value;
use tracing::{info, warn};

use super::nodeclaim::{self, Hydration, NodeClaimView};
use super::{
    KubeError, NodeClassRecord, NodeRegistration, Provider, ProviderError, TAG_NODECLAIM,
    TAG_NODECLASS, TAG_NODEPOOL, candidates, provider_id, tag, tag_value,
};
use crate::catalog::{
    Billing, ClassKind, InstanceType, KubeletReservations, Snapshot, Unavailability,
};
use crate::churn;
use crate::install::{InstallSpec, Secret, Taint, UNREGISTERED_TAINT_KEY};
use crate::nodeclass::conditions::Readiness;
use crate::nodeclass::{self, NodeClassSpec, SecretKeyRef};
use crate::scaleway::{ApiError, CreateServerRequest, Server, ServerFilter, ServerStatus};

/// How long a Create waits for another order of the same offering to be
/// answered before ordering anyway (Create must stay fast: core's whole
/// provisioning waits while a NodeClaim has no providerID).
const ORDER_TURN_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

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
        // A timed-out order may still have been placed: the retry finds it by
        // its NodeClaim tag before ordering again (find_claimed_server).
        other @ (ApiError::TransientState(_)
        | ApiError::Throttled
        | ApiError::Unavailable(_)
        | ApiError::Timeout(_)
        | ApiError::Inconsistent(_)) => create_failed("ScalewayAPIUnavailable", other.to_string()),
    }
}

/// The NodeClass Secrets an install reads.
pub struct ClassSecrets {
    pub rescue_private_key: Secret,
    pub base_machine_config: Secret,
}

/// Where a NodeClaim's server is and what it is: what [`install_spec`] needs
/// beyond the NodeClaim and its NodeClass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Placement {
    pub zone: String,
    pub server_id: String,
    /// The offer ordered, e.g. `EM-A115X-SSD`.
    pub offer_name: String,
    /// `amd64` or `arm64`.
    pub arch: String,
    /// The instance type's node labels in `zone` ([`InstanceType::node_labels`]).
    pub type_labels: BTreeMap<String, String>,
    /// The kubelet reservations for the type's hardware: the numbers its
    /// catalog overhead was computed from, written into the machine config
    /// so that the Node's allocatable keeps the catalog's promise. `None`
    /// when the hardware is unknown (`render-config` without a catalog).
    pub kubelet_reservations: Option<KubeletReservations>,
    /// The Private Network the node joins in `zone`
    /// ([`super::network::node_network`]); `None` without one.
    pub network: Option<super::network::NodeNetwork>,
}

impl Placement {
    pub fn of(it: &InstanceType, zone: &str, server_id: &str) -> Placement {
        Placement {
            zone: zone.to_string(),
            server_id: server_id.to_string(),
            offer_name: it.name.clone(),
            arch: it.arch.clone(),
            type_labels: it.node_labels(zone),
            kubelet_reservations: Some(KubeletReservations::for_capacity(&it.capacity)),
            network: None,
        }
    }
}

/// The install of one NodeClaim's server: one function for Create, the
/// resume loop and `render-config`, so that all three describe the same node.
/// `Err` is a NodeClass problem (an image URL that cannot be resolved).
pub fn install_spec(
    view: &NodeClaimView,
    class: &NodeClassSpec,
    placement: &Placement,
    secrets: ClassSecrets,
    bootstrap_token: Secret,
) -> Result<InstallSpec, String> {
    let arch = placement.arch.as_str();
    let image_url = nodeclass::resolve_image_url(&class.image, arch)?;
    // The NodeClaim's own labels win over the instance type's, as when
    // Karpenter core copies them onto the Node.
    let mut labels = placement.type_labels.clone();
    labels.extend(view.labels.clone());
    Ok(InstallSpec {
        zone: placement.zone.clone(),
        server_id: placement.server_id.clone(),
        provider_id: provider_id(&placement.zone, &placement.server_id),
        node_name: view.name.clone(),
        node_claim_name: view.name.clone(),
        labels,
        taints: view.taints.clone(),
        startup_taints: view.startup_taints.clone(),
        arch: arch.to_string(),
        image_url,
        install_disk: class.install_disk.as_ref().and_then(|d| d.name.clone()),
        rescue_ssh_key_id: class.rescue_ssh_key.iam_key_id.clone(),
        rescue_private_key: secrets.rescue_private_key,
        base_machine_config: secrets.base_machine_config,
        machine_config_patches: class.machine_config_patches.clone(),
        offer_name: placement.offer_name.clone(),
        image_sha256: class
            .image
            .sha256
            .as_ref()
            .and_then(|m| m.get(arch).cloned()),
        bootstrap_token,
        kubelet_reservations: placement.kubelet_reservations,
        target: crate::install::Target::Node,
        private_network: placement.network.clone(),
    })
}

/// The Node registered before the install: the labels the kubelet would
/// register, and taints that keep every pod off it until the install is done
/// (`uninitialized`, removed by the install engine once the Node is Ready)
/// and Karpenter has synced the NodeClaim (`unregistered`). `not-ready` is
/// there too, but the node lifecycle controller drops it from a Node that has
/// no Ready condition yet, which is why it is not enough on its own: without
/// `uninitialized`, pods were bound to a server still being delivered.
/// The NodeClaim's taints and startup taints are included because a kubelet
/// adopting an existing Node does not apply its own `registerWithTaints`.
pub(super) fn node_registration(
    view: &NodeClaimView,
    provider_id: &str,
    type_labels: &BTreeMap<String, String>,
) -> NodeRegistration {
    let mut labels = type_labels.clone();
    labels.extend(view.labels.clone());
    let mut taints: Vec<Taint> = Vec::new();
    let required = [
        Taint {
            key: UNREGISTERED_TAINT_KEY.to_string(),
            value: None,
            effect: "NoExecute".to_string(),
        },
        Taint {
            key: NOT_READY_TAINT_KEY.to_string(),
            value: None,
            effect: "NoSchedule".to_string(),
        },
        Taint {
            key: UNINITIALIZED_TAINT_KEY.to_string(),
            value: Some("true".to_string()),
            effect: "NoSchedule".to_string(),
        },
    ];
    for taint in view
        .taints
        .iter()
        .chain(&view.startup_taints)
        .chain(&required)
    {
        // The API server refuses two taints with the same key and effect.
        if !taints
            .iter()
            .any(|t| t.key == taint.key && t.effect == taint.effect)
        {
            taints.push(taint.clone());
        }
    }
    NodeRegistration {
        name: view.name.clone(),
        provider_id: provider_id.to_string(),
        labels,
        taints,
        owner_uid: view.uid.clone(),
    }
}

/// The Private Network a node of `class` in `zone` joins; a selector with no
/// network resolved in the zone's region is the NodeClass's to fix.
pub(super) fn class_network(
    class: &NodeClassRecord,
    zone: &str,
) -> Result<Option<super::network::NodeNetwork>, ProviderError> {
    super::network::node_network(
        class.spec.private_network.as_ref(),
        &class.private_networks,
        zone,
    )
    .map_err(ProviderError::NodeClassNotReady)
}

/// The taint the node lifecycle controller removes once the kubelet reports Ready.
pub const NOT_READY_TAINT_KEY: &str = "node.kubernetes.io/not-ready";
pub use crate::install::UNINITIALIZED_TAINT_KEY;

impl Provider {
    pub async fn create(&self, mut claim: Value) -> Result<Value, ProviderError> {
        let view = nodeclaim::parse(&claim).map_err(ProviderError::Invalid)?;
        if let Some(r) = view.node_class_ref.as_ref().filter(|r| {
            r.kind == nodeclass::instance::KIND
                && (r.group.is_empty() || r.group == nodeclass::GROUP)
        }) {
            let name = r.name.clone();
            return self.create_vm(claim, view, &name).await;
        }
        let class = self.node_class_of(&view).await?;
        let zones = self.zones_for(&class);
        if zones.is_empty() {
            return Err(ProviderError::NodeClassNotReady(format!(
                "none of the zones of NodeClass {} is served by this provider ({})",
                class.name,
                self.settings.zones.join(",")
            )));
        }
        // Before anything is ordered: a server that could not join its
        // network would be billed for nothing.
        for zone in &zones {
            class_network(&class, zone)?;
        }
        let secrets = self.class_secrets(&class.spec).await?;
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
            None if super::standby::wants_reservation(&view) => {
                self.adopt_standby(&view, &class, &snapshot, &zones).await?
            }
            None => {
                self.booked_address_free(&class, &zones).await?;
                self.order(&view, &class, &snapshot, &zones).await?
            }
        };
        // A server adopted from standby is reserved capacity of its
        // reservation for its whole life.
        let reservation = tag_value(&server, super::standby::TAG_RESERVATION).map(str::to_string);

        // Registration deadline: Karpenter deletes a NodeClaim whose Node has
        // not appeared 15 minutes after the NodeClaim was created (a constant
        // in core, counted from creation), while an Elastic Metal install takes
        // 10-15 minutes when all goes well and longer when delivery is slow or
        // the image is written twice. So the Node object is registered now,
        // tainted so that nothing runs on it, and the kubelet adopts it when
        // Talos boots; the engine's own deadlines decide when an install has
        // failed. Any failure here fails Create with a retryable error: the
        // retry adopts the server by its tag, so it never orders a second one.
        let zone = server.zone.clone();
        let pid = provider_id(&zone, &server.id);
        let node_labels = match &reservation {
            Some(id) => it.reserved_node_labels(&zone, id),
            None => it.node_labels(&zone),
        };
        let registration = node_registration(&view, &pid, &node_labels);
        self.cluster
            .nodes
            .register(&registration)
            .await
            .map_err(|e| match e {
                KubeError::Conflict(m) => create_failed("NodeNameConflict", m),
                other => create_failed(
                    "NodeRegistrationFailed",
                    format!("registering Node {}: {other}", view.name),
                ),
            })?;
        let token = self.cluster.tokens.ensure(&view.name).await.map_err(|e| {
            create_failed(
                "BootstrapTokenFailed",
                format!("bootstrap token of NodeClaim {}: {e}", view.name),
            )
        })?;
        let mut placement = Placement::of(&it, &zone, &server.id);
        placement.type_labels = node_labels.clone();
        placement.network = class_network(&class, &zone)?;
        let spec = install_spec(&view, &class.spec, &placement, secrets, token)
            .map_err(ProviderError::NodeClassNotReady)?;
        let image_url = spec.image_url.clone();
        // An adopted standby server waits in maintenance mode: its install
        // goes on from there (its disk and NIC were found by its standby
        // install). Anything else is installed from the start.
        let standby = super::standby::progress_of(&server);
        match (
            reservation.as_ref(),
            standby.phase,
            standby.disk,
            standby.mac,
        ) {
            (Some(_), Some(crate::install::Phase::Standby), Some(disk), Some(mac)) => {
                self.installer.adopt(spec, disk, mac, standby.host_key)
            }
            _ => self.installer.start(spec),
        }
        nodeclaim::hydrate(
            &mut claim,
            &Hydration {
                labels: node_labels,
                // Both paths (ordered now, or adopted by a retried Create)
                // stamp the NodeClass this install was just started with.
                annotations: super::drift::stamp(&class.spec),
                provider_id: pid,
                image_id: image_url,
                capacity: it.capacity.to_quantities(true),
                allocatable: it.allocatable().to_quantities(true),
            },
        );
        Ok(claim)
    }

    /// The NodeClass Secrets every install needs.
    pub(super) async fn class_secrets(
        &self,
        spec: &NodeClassSpec,
    ) -> Result<ClassSecrets, ProviderError> {
        Ok(ClassSecrets {
            rescue_private_key: self
                .secret(
                    &spec.rescue_ssh_key.private_key_secret_ref,
                    "rescue SSH private key",
                )
                .await?,
            base_machine_config: self
                .secret(&spec.machine_config_secret_ref, "machine config")
                .await?,
        })
    }

    async fn node_class_of(&self, view: &NodeClaimView) -> Result<NodeClassRecord, ProviderError> {
        let r = view.node_class_ref.as_ref().ok_or_else(|| {
            ProviderError::Invalid(format!("NodeClaim {} has no nodeClassRef", view.name))
        })?;
        if r.kind != nodeclass::KIND || !(r.group.is_empty() || r.group == nodeclass::GROUP) {
            return Err(ProviderError::Invalid(format!(
                "NodeClaim {} references {}/{}, not {}/{} or {}/{}",
                view.name,
                r.group,
                r.kind,
                nodeclass::GROUP,
                nodeclass::KIND,
                nodeclass::GROUP,
                nodeclass::instance::KIND
            )));
        }
        if let Some(class) = self.node_classes.get(&r.name).filter(|c| c.ready()) {
            return Ok(class);
        }
        // Core deletes a NodeClaim that Create refuses as NodeClassNotReady,
        // so only a verdict refuses: the cache may not have seen the
        // reconciler's own `Ready` write yet (a NodeClaim made together with
        // its NodeClass), so the API server decides, and a NodeClass not yet
        // reconciled is a wait (retryable), not a verdict.
        match self.node_classes.get_live(&r.name).await {
            Ok(Some(class)) => match class.readiness {
                Readiness::Ready => Ok(class),
                Readiness::NotReady => Err(ProviderError::NodeClassNotReady(format!(
                    "NodeClass {} is not Ready",
                    r.name
                ))),
                Readiness::Unknown => Err(create_failed(
                    "NodeClassReadinessUnknown",
                    format!("NodeClass {} has not been reconciled yet", r.name),
                )),
            },
            Ok(None) => Err(ProviderError::NodeClassNotReady(format!(
                "NodeClass {} not found",
                r.name
            ))),
            Err(e) => Err(create_failed(
                "NodeClassReadFailed",
                format!("reading NodeClass {}: {e}", r.name),
            )),
        }
    }

    /// The NodeClass's zones that this provider serves (all served zones when
    /// the NodeClass names none).
    fn zones_for(&self, class: &NodeClassRecord) -> Vec<String> {
        Self::allowed_zones(&self.settings.zones, &class.spec.zones)
    }

    pub(super) async fn secret(
        &self,
        r: &SecretKeyRef,
        what: &str,
    ) -> Result<Secret, ProviderError> {
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
        let filter = &filter;
        let mut found: Vec<Server> = self
            .every_zone(|z| async move { self.api.list_servers(&z, filter).await })
            .await
            .map_err(|e| {
                create_failed(
                    "ScalewayAPIUnavailable",
                    format!("looking for a server already ordered for NodeClaim {claim}: {e}"),
                )
            })?
            .into_iter()
            .filter(|s| s.status != ServerStatus::Deleting)
            .collect();
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

    /// Orders the cheapest available offering compatible with the NodeClaim,
    /// in the NodeClass's billing (the monthly twin when it bills monthly).
    /// Exactly one order per Create: when it is refused for lack of stock or
    /// quota, the offering is marked unavailable for the TTL and Create
    /// answers InsufficientCapacity, so that Karpenter deletes the NodeClaim
    /// and schedules again on a catalog without that offering (the next offer,
    /// zone or NodePool, by its own price and weight rules). Falling through
    /// to other offerings here would hold Create for several API round trips
    /// and order types the scheduler did not pick.
    async fn order(
        &self,
        view: &NodeClaimView,
        class: &NodeClassRecord,
        snapshot: &Snapshot,
        zones: &[String],
    ) -> Result<(Server, InstanceType), ProviderError> {
        let billing = match class.spec.billing {
            nodeclass::Billing::Hourly => Billing::Hourly,
            nodeclass::Billing::Monthly => Billing::Monthly,
        };
        let types = snapshot.for_class(ClassKind::ElasticMetal, Some(&class.name));
        let Some((it, offering, offer_id)) = candidates(&types, &view.requirements, zones)
            .into_iter()
            // Reserved offerings are standby servers, adopted, never ordered.
            .filter(|(_, o)| o.reservation.is_none())
            .find_map(|(it, o)| Some((it, o, o.order_offer_id(billing)?.to_string())))
        else {
            return Err(ProviderError::InsufficientCapacity(format!(
                "no available offering in {} matches the requirements of NodeClaim {}",
                zones.join(","),
                view.name
            )));
        };
        self.guard_churn(view, &it.name, &offering.zone).await?;
        let mut tags = self.ownership_tags(view, &class.name, &class.spec.tags);
        tags.push(tag(
            super::standby::TAG_BILLING,
            super::standby::billing_str(billing),
        ));
        let _turn = self.order_turn(&it.name, &offering.zone).await?;
        let req = CreateServerRequest {
            offer_id,
            project_id: self.settings.project_id.clone(),
            name: view.name.clone(),
            description: format!(
                "Karpenter NodeClaim {} (cluster {})",
                view.name, self.settings.cluster_name
            ),
            tags,
            install: None,
        };
        match self.api.create_server(&offering.zone, &req).await {
            Ok(server) => {
                info!(nodeclaim = %view.name, server_id = %server.id, zone = %offering.zone,
                    offer = %it.name, billing = ?billing, price = offering.price, "ordered server");
                Ok((server, it.clone()))
            }
            // NotFound: the offer vanished since the catalog was read.
            Err(e) => Err(self.order_refused(e, &view.name, &it.name, &offering.zone)),
        }
    }

    /// The consolidation churn guard (`churn/mod.rs`): while a disruption
    /// command is in flight, an order whose whole request fits an idle,
    /// Initialized sibling of the same NodePool, offer and zone is refused
    /// (InsufficientCapacity; the offering unavailable for
    /// [`churn::REFUSAL_TTL`]) and the sibling is held from disruption, so
    /// that core's next pass moves the pods onto it instead of buying
    /// another server. The guard never blocks an order it cannot judge: when
    /// the cluster cannot be read, the order is made as before.
    async fn guard_churn(
        &self,
        view: &NodeClaimView,
        offer: &str,
        zone: &str,
    ) -> Result<(), ProviderError> {
        let (Some(siblings), Some(source)) = (&self.siblings, &self.node_claims) else {
            return Ok(());
        };
        let Some(nodepool) = view.labels.get(TAG_NODEPOOL) else {
            return Ok(());
        };
        let claims = match source.list().await {
            Ok(c) => c,
            Err(e) => {
                warn!(nodeclaim = %view.name, error = %e,
                    "churn guard: NodeClaims not readable; ordering unguarded");
                return Ok(());
            }
        };
        let requests = claims
            .iter()
            .find(|c| c.pointer("/metadata/name").and_then(Value::as_str) == Some(&view.name))
            .map(|c| churn::quantities(c.pointer("/spec/resources/requests")))
            .unwrap_or_default();
        let claims: Vec<churn::ClaimView> =
            claims.iter().filter_map(churn::ClaimView::parse).collect();
        let order = churn::Order {
            claim: &view.name,
            nodepool,
            offer,
            zone,
            requests: &requests,
        };
        let candidates = churn::guard_candidates(&order, &claims);
        if candidates.is_empty() {
            return Ok(());
        }
        // A static NodePool (`spec.replicas`) keeps its count whatever runs
        // on its nodes, and core never consolidates it: its orders (a drift
        // replacement, a scale-up) are never churn. Found by core's
        // regression suite (StaticCapacity, drift during a scale-up): the
        // guard refused the drift replacements because the new idle node
        // "could take their pods", and drift stalled.
        match siblings.static_pool(nodepool).await {
            Ok(false) => {}
            Ok(true) => return Ok(()),
            Err(e) => {
                warn!(nodeclaim = %view.name, nodepool = %nodepool, error = %e,
                    "churn guard: NodePool not readable; ordering unguarded");
                return Ok(());
            }
        }
        for sibling in candidates {
            let Some(node) = sibling.node_name.as_deref() else {
                continue;
            };
            let state = match siblings.state(node).await {
                Ok(Some(s)) => s,
                Ok(None) => continue,
                Err(e) => {
                    warn!(nodeclaim = %view.name, node, error = %e,
                        "churn guard: Node not readable; ordering unguarded");
                    return Ok(());
                }
            };
            if !state.idle() || !state.has_room(&requests, &sibling.allocatable) {
                continue;
            }
            let refusal = churn::Refusal::new(&order, sibling, chrono::Utc::now());
            let reason = format!(
                "took the place of NodeClaim {} ({offer}), refused while {} stood idle",
                view.name, sibling.name
            );
            match siblings.hold(node, refusal.hold_until, &reason).await {
                Ok(true) => {}
                Ok(false) => info!(
                    node,
                    "churn guard: the idle Node carries someone else's do-not-disrupt; not held"
                ),
                Err(e) => warn!(node, error = %e, "churn guard: the idle Node could not be held"),
            }
            self.catalog.mark_unavailable_until(
                offer,
                zone,
                &format!("NodeClaim {} stands idle", sibling.name),
                churn::REFUSAL_TTL,
            );
            crate::metrics::churn_metrics().refused(nodepool, offer);
            let message = refusal.message();
            warn!(nodeclaim = %view.name, nodepool = %nodepool, offer, zone,
                sibling = %sibling.name, "consolidation churn refused: {message}");
            return Err(ProviderError::InsufficientCapacity(message));
        }
        Ok(())
    }

    /// The tags that prove a machine is this cluster's and whose it is
    /// (cluster, NodeClaim, NodeClass, NodePool), then the NodeClass's own.
    pub(super) fn ownership_tags(
        &self,
        view: &NodeClaimView,
        class: &str,
        extra: &[String],
    ) -> Vec<String> {
        let mut tags = vec![
            self.cluster_tag(),
            tag(TAG_NODECLAIM, &view.name),
            tag(TAG_NODECLASS, class),
        ];
        if let Some(pool) = view.labels.get(TAG_NODEPOOL) {
            tags.push(tag(TAG_NODEPOOL, pool));
        }
        tags.extend(extra.iter().cloned());
        tags
    }

    /// Orders for one offering take turns (bounded wait): a refusal seen
    /// while waiting ends this Create without a second doomed order. The
    /// turn is held until the caller's order is answered.
    pub(super) async fn order_turn(
        &self,
        offer: &str,
        zone: &str,
    ) -> Result<Option<tokio::sync::OwnedMutexGuard<()>>, ProviderError> {
        let turn = self.catalog.order_slot(offer, zone, ORDER_TURN_WAIT).await;
        match self.catalog.refusal(offer, zone) {
            Some(reason) => Err(ProviderError::InsufficientCapacity(format!(
                "{offer} in {zone}: an order was just refused ({reason})"
            ))),
            None => Ok(turn),
        }
    }

    /// An order (a server or a VM) the API did not take. A refusal for
    /// stock, quota or a vanished offer/image marks the offering unavailable
    /// for the TTL and is insufficient capacity: core deletes the NodeClaim
    /// and schedules again without it. Anything else is [`order_error`]'s.
    pub(super) fn order_refused(
        &self,
        err: ApiError,
        claim: &str,
        offer: &str,
        zone: &str,
    ) -> ProviderError {
        let reason = match err {
            ApiError::OutOfStock(_) => Unavailability::OutOfStock,
            ApiError::QuotaExceeded(_) => Unavailability::QuotaExceeded,
            ApiError::NotFound(_) => Unavailability::NotFound,
            other => return order_error(other),
        };
        warn!(nodeclaim = claim, zone, offer, error = %err,
            "order refused; the offering is unavailable until the TTL passes");
        self.catalog.mark_unavailable_for(offer, zone, reason);
        ProviderError::InsufficientCapacity(format!("{offer} in {zone}: {err}"))
    }
}
