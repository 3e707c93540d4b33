//! Drift of VMs. Create stamps the NodeClaim with a per-component hash of
//! its `ScalewayInstanceNodeClass` (the same annotations as Elastic Metal,
//! under its own hashing scheme [`VM_HASH_VERSION`]); IsDrifted compares the
//! stamp with the NodeClass in memory, and the image with the one the
//! NodeClass resolves now for the VM's zone and arch, so that importing a
//! newer image under the same name or tags replaces the VMs too.
//!
//! Not hashed: `zones` (core handles requirements), `tags` (labels only).
//! The machine config Secret counts by reference, as for Elastic Metal.
//!
//! `spec.privateNetwork` is hashed only when set, and left out of the stamp
//! otherwise: stamps of NodeClasses without a network are what they were
//! before it existed (no new scheme, no drift), while its presence counts
//! both ways. A NodeClass that gains a network drifts its VMs (they have no
//! private NIC), one that drops it drifts the VMs that joined it.

use std::collections::BTreeMap;

use serde_json::{Value, json};
use tracing::debug;

use super::super::drift::{
    HASH_ANNOTATION, HASH_VERSION_ANNOTATION, annotations_of, short_hash, str_at,
};
use super::super::{MachineId, Provider, parse_machine_id};
use crate::catalog::LABEL_ARCH;
use crate::nodeclass::instance::{InstanceNodeClassSpec, KIND};

/// The hashing scheme of VM stamps.
pub const VM_HASH_VERSION: &str = "instance-v1";

/// What changes make a VM drift, in the order reasons are given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VmComponent {
    /// The image: the selector, or the image it resolves to now.
    Image,
    /// The machine config: Secret reference and patches.
    Config,
    /// The root volume: type, size, IOPS class.
    RootVolume,
    /// Security group, placement group, public IP mode.
    Network,
    /// `spec.privateNetwork`: which network, the address policy, the
    /// InternalIP source.
    PrivateNetwork,
}

impl VmComponent {
    const HASHED: [VmComponent; 5] = [
        VmComponent::Image,
        VmComponent::Config,
        VmComponent::RootVolume,
        VmComponent::Network,
        VmComponent::PrivateNetwork,
    ];

    fn key(self) -> &'static str {
        match self {
            VmComponent::Image => "image",
            VmComponent::Config => "config",
            VmComponent::RootVolume => "root",
            VmComponent::Network => "network",
            VmComponent::PrivateNetwork => "privateNetwork",
        }
    }

    pub fn drift_reason(self) -> &'static str {
        match self {
            VmComponent::Image => "ImageDrift",
            VmComponent::Config => "MachineConfigDrift",
            VmComponent::RootVolume => "RootVolumeDrift",
            VmComponent::Network => "NetworkDrift",
            VmComponent::PrivateNetwork => "PrivateNetworkDrift",
        }
    }

    /// Whether the component's presence in the stamp counts: it is left out
    /// of stamps when unset, and stamps from before it lack it.
    fn optional(self) -> bool {
        self == VmComponent::PrivateNetwork
    }

    /// What is hashed; `None`: left out of the stamp.
    fn input(self, spec: &InstanceNodeClassSpec) -> Option<Value> {
        Some(match self {
            VmComponent::Image => json!(spec.image),
            VmComponent::Config => {
                let r = &spec.machine_config_secret_ref;
                json!({
                    "machineConfigSecretRef": {"name": r.name, "namespace": r.namespace, "key": r.key},
                    "machineConfigPatches": spec.machine_config_patches,
                })
            }
            VmComponent::RootVolume => json!(spec.root_volume.clone().unwrap_or_default()),
            VmComponent::Network => json!({
                "securityGroupId": spec.security_group_id,
                "placementGroupId": spec.placement_group_id,
                "publicIp": spec.public_ip,
            }),
            VmComponent::PrivateNetwork => json!(spec.private_network.as_ref()?),
        })
    }
}

fn hashes(spec: &InstanceNodeClassSpec) -> BTreeMap<&'static str, String> {
    VmComponent::HASHED
        .into_iter()
        .filter_map(|c| Some((c.key(), short_hash(&c.input(spec)?))))
        .collect()
}

/// The annotations Create puts on a VM's NodeClaim.
pub fn stamp_instance(spec: &InstanceNodeClassSpec) -> BTreeMap<String, String> {
    let value: Vec<String> = hashes(spec)
        .into_iter()
        .map(|(k, h)| format!("{k}={h}"))
        .collect();
    BTreeMap::from([
        (HASH_ANNOTATION.to_string(), value.join(",")),
        (
            HASH_VERSION_ANNOTATION.to_string(),
            VM_HASH_VERSION.to_string(),
        ),
    ])
}

/// The first hashed component that differs from the stamp; `None` when the
/// stamp is missing, of another scheme or unreadable (replacing nodes is the
/// expensive mistake). A component missing from the stamp counts only if
/// it is optional and set now (see the module's notes).
pub fn vm_drift(
    annotations: &BTreeMap<String, String>,
    spec: &InstanceNodeClassSpec,
) -> Option<VmComponent> {
    if annotations.get(HASH_VERSION_ANNOTATION).map(String::as_str) != Some(VM_HASH_VERSION) {
        return None;
    }
    let stamped: BTreeMap<&str, &str> = annotations
        .get(HASH_ANNOTATION)?
        .split(',')
        .filter_map(|kv| kv.split_once('='))
        .collect();
    let now = hashes(spec);
    VmComponent::HASHED.into_iter().find(|c| {
        let now = now.get(c.key()).map(String::as_str);
        match stamped.get(c.key()) {
            Some(h) => now != Some(*h),
            None => c.optional() && now.is_some(),
        }
    })
}

/// The name of the Instance NodeClass a NodeClaim references, if it does.
pub(crate) fn instance_class_name(claim: &Value) -> Option<&str> {
    let r = claim.pointer("/spec/nodeClassRef")?;
    let group = str_at(r, "/group").unwrap_or("");
    let ours =
        str_at(r, "/kind") == Some(KIND) && (group.is_empty() || group == crate::nodeclass::GROUP);
    ours.then(|| str_at(r, "/name")).flatten()
}

impl Provider {
    /// IsDrifted for a VM: "" unless a component changed or the NodeClass
    /// now resolves another image for the VM's zone and arch.
    pub(crate) fn vm_drift_reason(&self, claim: &Value) -> String {
        let (Some(vms), Some(class_name)) = (self.vms.as_ref(), instance_class_name(claim)) else {
            return String::new();
        };
        let name = str_at(claim, "/metadata/name").unwrap_or("");
        let Some(class) = vms.classes.get(class_name) else {
            debug!(
                nodeclaim = name,
                nodeclass = class_name,
                "drift: Instance NodeClass not found"
            );
            return String::new();
        };
        if let Some(c) = vm_drift(&annotations_of(claim), &class.spec) {
            debug!(
                nodeclaim = name,
                component = c.key(),
                "VM drifted from its NodeClass"
            );
            return c.drift_reason().to_string();
        }
        let zone = match str_at(claim, "/status/providerID").and_then(parse_machine_id) {
            Some(MachineId::Instance { zone, .. }) => zone,
            _ => return String::new(),
        };
        let arch = str_at(
            claim,
            &format!("/metadata/labels/{}", LABEL_ARCH.replace('/', "~1")),
        );
        let used = str_at(claim, "/status/imageID").filter(|i| !i.is_empty());
        if let (Some(arch), Some(used)) = (arch, used)
            && let Some(now) = class.image(zone, arch)
            && now.id != used
        {
            debug!(nodeclaim = name, used, now = %now.id, "VM image drifted");
            return VmComponent::Image.drift_reason().to_string();
        }
        String::new()
    }
}

#[cfg(test)]
#[path = "drift_tests.rs"]
mod tests;
