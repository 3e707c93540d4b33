//! Create for a VM: adopt the server already created for this NodeClaim, or
//! create the cheapest compatible type; store the node's rendered Talos
//! config as its user data, power it on, and answer at once (a few API calls,
//! well under a second: core's provisioning waits while any NodeClaim lacks
//! a providerID). The join that follows is `join.rs`'s. A NodeClass with a
//! Private Network gets the VM a private NIC before the power-on
//! (`private_nic.rs`).

use serde_json::Value;
use tracing::{info, warn};

use super::super::nodeclaim::{self, Hydration, NodeClaimView};
use super::super::{Provider, ProviderError, TAG_NODECLAIM, candidates, instance_provider_id, tag};
use super::private_nic::Reserved;
use super::{
    InstanceClassRecord, TAG_PRIVATE_NETWORK, VOLUMES_ANNOTATION, VmPlacement, VmPorts,
    node_settings,
};
use crate::catalog::{ClassKind, InstanceType, KubeletReservations, Snapshot};
use crate::nodeclass::conditions::Readiness;
use crate::nodeclass::instance::{self as ic, PublicIpMode, RootVolumeType};
use crate::scaleway::ApiError;
use crate::scaleway::block::VolumeUpdate;
use crate::scaleway::instance::{
    CreateServerRequest, Server, ServerAction, ServerFilter, ServerState, USER_DATA_KEY,
    VolumeTemplate, VolumeType,
};
use crate::scaleway::private_network::PrivateNetworks;
use crate::talos::render_machine_config;

fn create_failed(reason: &str, message: impl Into<String>) -> ProviderError {
    ProviderError::CreateFailed {
        reason: reason.to_string(),
        message: message.into(),
    }
}

impl Provider {
    pub(crate) fn vm_ports(&self) -> Result<&VmPorts, ProviderError> {
        self.vms.as_ref().ok_or_else(|| {
            ProviderError::NodeClassNotReady(format!(
                "this provider does not serve {} (started without the Instance API)",
                ic::KIND
            ))
        })
    }

    async fn instance_class_of(
        &self,
        vms: &VmPorts,
        view: &NodeClaimView,
        name: &str,
    ) -> Result<InstanceClassRecord, ProviderError> {
        if let Some(class) = vms.classes.get(name).filter(|c| c.ready()) {
            return Ok(class);
        }
        // As for Elastic Metal (`node_class_of`): the cache may lag the
        // reconciler's own `Ready` write, so the API server decides, and only
        // a verdict (`Ready=False`) refuses.
        match vms.classes.get_live(name).await {
            Ok(Some(class)) => match class.readiness {
                Readiness::Ready => Ok(class),
                Readiness::NotReady => Err(ProviderError::NodeClassNotReady(format!(
                    "{} {name} (NodeClaim {}) is not Ready",
                    ic::KIND,
                    view.name
                ))),
                Readiness::Unknown => Err(create_failed(
                    "NodeClassReadinessUnknown",
                    format!("{} {name} has not been reconciled yet", ic::KIND),
                )),
            },
            Ok(None) => Err(ProviderError::NodeClassNotReady(format!(
                "{} {name} not found",
                ic::KIND
            ))),
            Err(e) => Err(create_failed(
                "NodeClassReadFailed",
                format!("reading {} {name}: {e}", ic::KIND),
            )),
        }
    }

    /// Create for a NodeClaim whose NodeClass is a `ScalewayInstanceNodeClass`.
    pub(crate) async fn create_vm(
        &self,
        mut claim: Value,
        view: NodeClaimView,
        class_name: &str,
    ) -> Result<Value, ProviderError> {
        let vms = self.vm_ports()?;
        let class = self.instance_class_of(vms, &view, class_name).await?;
        let zones = Self::allowed_zones(&self.settings.instance_zones, &class.spec.zones);
        if zones.is_empty() {
            return Err(ProviderError::NodeClassNotReady(format!(
                "none of the zones of {} {} is served by this provider ({})",
                ic::KIND,
                class.name,
                self.settings.instance_zones.join(",")
            )));
        }
        let networks = self.vm_networks(&class)?;
        let base_config = self
            .secret(&class.spec.machine_config_secret_ref, "machine config")
            .await?;
        let snapshot = self.catalog.snapshot();
        if !snapshot.is_loaded_for(ClassKind::Instance) {
            return Err(create_failed(
                "CatalogNotLoaded",
                "the Instance catalog has not been read yet",
            ));
        }
        let (server, it, reserved) = match self.find_claimed_vm(vms, &view.name).await? {
            Some(server) => {
                let it =
                    vm_type(&snapshot, &class.name, &server.commercial_type).ok_or_else(|| {
                        create_failed(
                            "InstanceTypeNotFound",
                            format!(
                                "server {} is a {} which is not in the Instance catalog",
                                server.id, server.commercial_type
                            ),
                        )
                    })?;
                info!(nodeclaim = %view.name, server_id = %server.id, zone = %server.zone,
                    "adopting the VM already created for this NodeClaim");
                (server, it, None)
            }
            None => {
                self.order_vm(vms, &view, &class, &snapshot, &zones, networks)
                    .await?
            }
        };
        let zone = server.zone.clone();
        // A VM powered on already has read (or is reading) the config it was
        // given then, with the NIC it had then: nothing to add.
        let private_link = match networks {
            Some(networks) if server.state == ServerState::Stopped => {
                match Self::vm_network(&class, &zone)? {
                    Some(network) => Some(
                        self.ensure_private_nic(networks, &network, &server, &view.name, reserved)
                            .await?,
                    ),
                    None => None,
                }
            }
            _ => None,
        };
        let token = self.cluster.tokens.ensure(&view.name).await.map_err(|e| {
            create_failed(
                "BootstrapTokenFailed",
                format!("bootstrap token of NodeClaim {}: {e}", view.name),
            )
        })?;
        let placement = VmPlacement {
            zone: zone.clone(),
            server_id: server.id.clone(),
            type_labels: it.node_labels(&zone),
            kubelet_reservations: Some(KubeletReservations::for_capacity(&it.capacity)),
        };
        let mut settings = node_settings(&view, &class.spec, &placement, &token);
        settings.private_network = private_link;
        let config = render_machine_config(base_config.expose(), &settings).map_err(|e| {
            ProviderError::NodeClassNotReady(format!(
                "rendering the machine config of NodeClaim {}: {e}",
                view.name
            ))
        })?;
        self.boot_vm(vms, &server, &config).await?;
        let mut annotations = super::stamp_instance(&class.spec);
        let volumes = server.sbs_volume_ids();
        if !volumes.is_empty() {
            annotations.insert(VOLUMES_ANNOTATION.to_string(), volumes.join(","));
        }
        let image_id = server
            .image
            .as_ref()
            .map(|i| i.id.clone())
            .unwrap_or_default();
        nodeclaim::hydrate(
            &mut claim,
            &Hydration {
                labels: placement.type_labels,
                annotations,
                provider_id: instance_provider_id(&zone, &server.id),
                image_id,
                capacity: it.capacity.to_quantities(true),
                allocatable: it.allocatable().to_quantities(true),
            },
        );
        Ok(claim)
    }

    /// Stores the config as user data and powers the VM on, unless it is on
    /// already (a Create retried after the power-on: the VM has read, or is
    /// reading, the config it was given then).
    async fn boot_vm(
        &self,
        vms: &VmPorts,
        server: &Server,
        config: &str,
    ) -> Result<(), ProviderError> {
        let unavailable = |doing: &str, e: ApiError| {
            create_failed(
                "ScalewayAPIUnavailable",
                format!("{doing} of VM {}: {e}", server.id),
            )
        };
        if server.state != ServerState::Stopped {
            return Ok(());
        }
        vms.api
            .set_user_data(&server.zone, &server.id, USER_DATA_KEY, config)
            .await
            .map_err(|e| unavailable("setting the user data", e))?;
        match vms
            .api
            .server_action(&server.zone, &server.id, ServerAction::Poweron)
            .await
        {
            // Already starting (a retry raced the first power-on).
            Ok(_) | Err(ApiError::TransientState(_)) => Ok(()),
            Err(e) => Err(unavailable("powering on", e)),
        }
    }

    /// The live VM tagged for this NodeClaim in any served zone. When the
    /// lookup fails Create fails too, rather than risk a second server.
    async fn find_claimed_vm(
        &self,
        vms: &VmPorts,
        claim: &str,
    ) -> Result<Option<Server>, ProviderError> {
        let filter = ServerFilter {
            tags: vec![self.cluster_tag(), tag(TAG_NODECLAIM, claim)],
            name: None,
            project: Some(self.settings.project_id.clone()),
        };
        let filter = &filter;
        let mut found: Vec<Server> = self
            .every_vm_zone(|z| async move { vms.api.list_servers(&z, filter).await })
            .await
            .map_err(|e| {
                create_failed(
                    "ScalewayAPIUnavailable",
                    format!("looking for a VM already created for NodeClaim {claim}: {e}"),
                )
            })?
            .into_iter()
            .filter(|s| !s.state_detail.contains("terminating"))
            .collect();
        found.sort_by(|a, b| a.creation_date.cmp(&b.creation_date));
        if found.len() > 1 {
            warn!(
                nodeclaim = claim,
                servers = found.len(),
                "several VMs carry this NodeClaim's tag; adopting the oldest"
            );
        }
        Ok(found.into_iter().next())
    }

    /// Creates the cheapest compatible type where the NodeClass has an image
    /// for its arch. One server per Create: a refusal for stock or quota marks
    /// the offering unavailable and answers InsufficientCapacity, so that
    /// core schedules again without it (as for Elastic Metal). With a
    /// Private Network, nothing is ordered unless the zone has the network
    /// resolved and, for booked addresses, one is free: that one is
    /// answered, still held (`private_nic.rs`).
    async fn order_vm(
        &self,
        vms: &VmPorts,
        view: &NodeClaimView,
        class: &InstanceClassRecord,
        snapshot: &Snapshot,
        zones: &[String],
        networks: Option<&std::sync::Arc<dyn PrivateNetworks>>,
    ) -> Result<(Server, InstanceType, Option<Reserved>), ProviderError> {
        let types = snapshot.for_class(ClassKind::Instance, Some(&class.name));
        let Some((it, offering, image)) = candidates(&types, &view.requirements, zones)
            .into_iter()
            .find_map(|(it, o)| Some((it, o, class.image(&o.zone, &it.arch)?)))
        else {
            // The catalog's view of the NodeClass is built from the informer
            // cache, which may lag the status Create read past it (a
            // NodeClass made together with its NodeClaim): a type the
            // NodeClass has an image for that the view lacks altogether is
            // our lag, not a lack of capacity, which would make core delete
            // the NodeClaim. Core retries Create instead.
            let every = snapshot.default_for(ClassKind::Instance);
            let lagging = candidates(&every, &view.requirements, zones)
                .into_iter()
                .any(|(it, o)| {
                    class.image(&o.zone, &it.arch).is_some()
                        && !types.iter().any(|t| t.name == it.name)
                });
            if lagging {
                return Err(create_failed(
                    "NodeClassCatalogPending",
                    format!(
                        "the catalog has not yet taken in the images of NodeClass {}; retrying",
                        class.name
                    ),
                ));
            }
            return Err(ProviderError::InsufficientCapacity(format!(
                "no available Instance type in {} matches the requirements of NodeClaim {}",
                zones.join(","),
                view.name
            )));
        };
        let mut tags = self.ownership_tags(view, &class.name, &class.spec.tags);
        let _turn = self.order_turn(&it.name, &offering.zone).await?;
        let mut reserved = None;
        if let Some(networks) = networks
            && let Some(network) = Self::vm_network(class, &offering.zone)?
        {
            // Delete reads it: the VM has a private NIC to delete first.
            tags.push(tag(TAG_PRIVATE_NETWORK, &network.id));
            reserved = Self::reserve_address(networks, &network, &view.name).await?;
        }
        let root = class.spec.root_volume.clone().unwrap_or_default();
        let mut req = CreateServerRequest::new(&view.name, &it.name, &self.settings.project_id);
        req.image = Some(image.id.clone());
        req.volumes.insert(
            "0".into(),
            match root.volume_type {
                RootVolumeType::SbsVolume => VolumeTemplate::sbs_root(root.size_bytes),
                RootVolumeType::LSsd => VolumeTemplate {
                    size: Some(root.size_bytes),
                    volume_type: VolumeType::LSsd,
                    boot: None,
                },
            },
        );
        req.dynamic_ip_required = class.spec.public_ip == PublicIpMode::Dynamic;
        req.tags = tags;
        req.security_group = class.spec.security_group_id.clone();
        req.placement_group = class.spec.placement_group_id.clone();
        match vms.api.create_server(&offering.zone, &req).await {
            Ok(server) => {
                info!(nodeclaim = %view.name, server_id = %server.id, zone = %offering.zone,
                    commercial_type = %it.name, price = offering.price, image = %image.id,
                    "created VM");
                // The Instance API gives the root volume no tags. With ours,
                // the sweeper recognises it once it is detached, even if
                // every NodeClaim that knew it is gone. Best effort: Delete
                // knows the volume from the NodeClaim and the server anyway.
                // The IOPS class goes with the tags: the Instance API's
                // volume template has no field for it.
                let update = VolumeUpdate {
                    tags: Some(req.tags.clone()),
                    perf_iops: root.iops,
                };
                for volume in server.sbs_volume_ids() {
                    if let Err(error) = vms
                        .block
                        .update_volume(&offering.zone, &volume, &update)
                        .await
                    {
                        warn!(nodeclaim = %view.name, volume_id = %volume, %error,
                            "could not tag the VM's root volume or set its IOPS class; the sweeper will not recognise it if it is ever left behind");
                    }
                }
                Ok((server, it.clone(), reserved))
            }
            // NotFound: the type or the image vanished since they were read.
            Err(e) => Err(self.order_refused(e, &view.name, &it.name, &offering.zone)),
        }
    }
}

/// The Instance type of a VM: from its NodeClass's view, else the kind's
/// catalog (a type the view no longer offers still describes the VM).
pub(super) fn vm_type(snapshot: &Snapshot, class: &str, name: &str) -> Option<InstanceType> {
    let find = |types: &[InstanceType]| types.iter().find(|t| t.name == name).cloned();
    find(&snapshot.for_class(ClassKind::Instance, Some(class)))
        .or_else(|| find(&snapshot.default_for(ClassKind::Instance)))
}
