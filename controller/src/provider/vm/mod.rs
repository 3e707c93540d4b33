//! Scaleway Instances (VMs and GPU VMs): Create, Delete, Get and List for
//! NodeClaims whose NodeClass is a `ScalewayInstanceNodeClass`, and the join
//! that follows (`join.rs`). A VM needs no install: it boots its Talos image
//! and reads its machine config from the user data key `cloud-init`, so the
//! provider renders the node's config (the same renderer as Elastic Metal),
//! stores it there and powers the VM on.

use std::collections::BTreeMap;

use super::nodeclaim::NodeClaimView;
use crate::catalog::KubeletReservations;
use crate::install::{Secret, register_taints};
use crate::nodeclass::instance::InstanceNodeClassSpec;
use crate::talos::NodeSettings;

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
/// no MAC to select a link by (one NIC, `eth0`).
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
    }
}
