//! Scaleway Instances (VMs and GPU VMs): Create, Delete, Get and List for
//! NodeClaims whose NodeClass is a `ScalewayInstanceNodeClass`, and the join
//! that follows (`join.rs`). A VM needs no install: it boots its Talos image
//! and reads its machine config from the user data key `cloud-init`, so the
//! provider renders the node's config (the same renderer as Elastic Metal),
//! stores it there and powers the VM on.

mod create;
mod drift;
mod join;
mod lifecycle;
mod private_nic;
#[cfg(test)]
mod private_nic_fake;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::nodeclaim::NodeClaimView;
use crate::catalog::KubeletReservations;
use crate::install::{Secret, register_taints};
use crate::nodeclass::instance::{InstanceNodeClassSpec, ResolvedImage};
use crate::scaleway::block::Block;
use crate::scaleway::instance::{Instance, Server};
use crate::talos::NodeSettings;

pub(crate) use drift::instance_class_name;
pub use drift::{VM_HASH_VERSION, VmComponent, stamp_instance, vm_drift};
pub use join::{JoinOutcome, VmJoiner, run_vm_joiner};

/// The annotation Create writes on a VM's NodeClaim with the ids of its SBS
/// volumes (comma-separated): terminate only detaches them, and once the
/// server is gone the NodeClaim is the only place that still knows them.
pub const VOLUMES_ANNOTATION: &str = "karpenter.scaleway.com/sbs-volumes";

/// The tag Create puts on a VM it adds to a Private Network, with the
/// network's id: Delete deletes the VM's private NICs first.
pub const TAG_PRIVATE_NETWORK: &str = "karpenter.scaleway.com/private-network";

/// An Instance NodeClass as the provider needs it.
#[derive(Debug, Clone, PartialEq)]
pub struct InstanceClassRecord {
    pub name: String,
    pub spec: InstanceNodeClassSpec,
    /// The image each (zone, arch) resolved to (`status.images`).
    pub images: Vec<ResolvedImage>,
    /// The root `Ready` condition, for the current generation.
    pub readiness: crate::nodeclass::conditions::Readiness,
    /// What `spec.privateNetwork` resolved to, per region
    /// (`status.privateNetworks`); empty without a network.
    pub private_networks: Vec<crate::nodeclass::ResolvedPrivateNetwork>,
}

impl InstanceClassRecord {
    pub fn ready(&self) -> bool {
        self.readiness.is_ready()
    }

    /// The image id for `arch` in `zone`, if one resolved.
    pub fn image(&self, zone: &str, arch: &str) -> Option<&ResolvedImage> {
        self.images
            .iter()
            .find(|i| i.zone == zone && i.arch == arch)
    }

    /// The (zone, arch) pairs with an image: where its types are offered.
    pub fn image_pairs(&self) -> BTreeSet<(String, String)> {
        self.images
            .iter()
            .map(|i| (i.zone.clone(), i.arch.clone()))
            .collect()
    }
}

/// The Instance NodeClasses (from their reconciler's cache).
#[async_trait::async_trait]
pub trait InstanceClasses: Send + Sync + 'static {
    fn get(&self, name: &str) -> Option<InstanceClassRecord>;
    /// The NodeClass as the API server has it now, read past the cache (see
    /// [`crate::provider::NodeClasses::get_live`]).
    async fn get_live(&self, name: &str) -> Result<Option<InstanceClassRecord>, String> {
        Ok(self.get(name))
    }
}

/// What the provider needs to serve Instance NodeClasses.
#[derive(Clone)]
pub struct VmPorts {
    pub api: Arc<dyn Instance>,
    pub block: Arc<dyn Block>,
    pub classes: Arc<dyn InstanceClasses>,
}

/// Whether a server carries the `key=value` tag.
fn has_tag(server: &Server, key: &str, value: &str) -> bool {
    server.tags.contains(&super::tag(key, value))
}

/// The value of a server's `key=` tag, if any.
fn vm_tag_value<'a>(server: &'a Server, key: &str) -> Option<&'a str> {
    server
        .tags
        .iter()
        .find_map(|t| t.strip_prefix(key).and_then(|rest| rest.strip_prefix('=')))
}

/// Where a NodeClaim's VM is and what it is: what [`node_settings`] needs
/// beyond the NodeClaim and its NodeClass.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VmPlacement {
    pub zone: String,
    pub server_id: String,
    /// The instance type's node labels in `zone`.
    pub type_labels: BTreeMap<String, String>,
    /// The kubelet reservations the catalog's overhead was computed from
    /// (`None` when the type is unknown: `render-config` without a catalog).
    pub kubelet_reservations: Option<KubeletReservations>,
}

/// The per-node part of a VM's machine config: one function for Create and
/// `render-config`, so that both describe the same node. The kubelet
/// registers the Node itself (a VM boots in about a minute, well inside
/// core's registration deadline), with the NodeClaim's taints, its startup
/// taints and `karpenter.sh/unregistered`, which core removes once it has
/// synced the NodeClaim. There is no install disk (the VM runs its image) and
/// no MAC to select the primary link by (`eth0`); a private NIC's link is
/// selected by its own MAC.
pub fn node_settings(
    view: &NodeClaimView,
    class: &InstanceNodeClassSpec,
    placement: &VmPlacement,
    bootstrap_token: &Secret,
) -> NodeSettings {
    let mut labels = placement.type_labels.clone();
    labels.extend(view.labels.clone());
    let register_taints = register_taints(&view.taints, &view.startup_taints);
    NodeSettings {
        hostname: view.name.clone(),
        labels,
        register_taints,
        provider_id: super::instance_provider_id(&placement.zone, &placement.server_id),
        install_disk: String::new(),
        primary_mac: String::new(),
        patches: class.machine_config_patches.clone(),
        bootstrap_token: bootstrap_token.expose().to_string(),
        kubelet_reservations: placement.kubelet_reservations,
        // Create sets the link of the VM's private NIC (`private_nic.rs`),
        // `render-config` the one its flags describe.
        private_network: None,
    }
}

#[cfg(test)]
#[path = "tests.rs"]
pub(crate) mod tests;
