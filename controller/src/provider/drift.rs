//! Drift: which NodeClass a node was built from, and whether the NodeClass
//! has changed since in a way that makes the node wrong.
//!
//! Create stamps two annotations on the NodeClaim it returns (Karpenter core
//! copies them onto the stored object): a per-component hash of the NodeClass
//! spec and the version of the hashing scheme. IsDrifted compares the stamp
//! with the NodeClass in memory, component by component, so that the reason
//! says *what* changed. The version exists so that a provider upgrade that
//! changes how a component is hashed does not mark every node drifted: a
//! NodeClaim stamped with another version is never drifted, and the leader's
//! re-stamp pass (`k8s/drift_stamp.rs`) brings it to the current version.
//!
//! What is hashed (and what is not) is the contract with users; it is
//! documented in `docs/nodeclass.md` ("Drift").

use std::collections::BTreeMap;
use std::fmt;

use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use tracing::{debug, warn};

use super::Provider;
use crate::nodeclass::{self, NodeClassSpec};

/// The per-component hash of the NodeClass the node was built from.
pub const HASH_ANNOTATION: &str = "karpenter.scaleway.com/nodeclass-hash";
/// The hashing scheme [`HASH_ANNOTATION`] was computed with.
pub const HASH_VERSION_ANNOTATION: &str = "karpenter.scaleway.com/nodeclass-hash-version";
/// The current hashing scheme. Bump it whenever the hash of an unchanged
/// NodeClass would change (a field added to a component's input without being
/// omitted when unset, a normalisation changed, a component added): stamps of
/// another version are not compared, and the re-stamp pass rewrites them.
pub const HASH_VERSION: &str = "v1";

/// The parts of a NodeClass that, when changed, make its nodes drift. Order
/// matters: the first differing component names the drift.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Component {
    /// Every field that decides which bytes are written to the disk.
    Image,
    /// The machine config: base config reference and patches.
    Config,
    /// The install disk selector.
    Disk,
    /// `spec.privateNetwork`. Present in a stamp only when the NodeClass
    /// selects a network, so that stamps of NodeClasses without one keep
    /// their hash (and [`HASH_VERSION`]).
    Network,
}

impl Component {
    /// The components every stamp carries, in comparison order.
    pub const ALL: [Component; 3] = [Component::Image, Component::Config, Component::Disk];

    /// The key in the annotation value.
    pub fn key(self) -> &'static str {
        match self {
            Component::Image => "image",
            Component::Config => "config",
            Component::Disk => "disk",
            Component::Network => "network",
        }
    }

    /// The Drifted condition reason. Karpenter validates reasons against
    /// `^([A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?|)$`.
    pub fn drift_reason(self) -> &'static str {
        match self {
            Component::Image => "ImageDrift",
            Component::Config => "MachineConfigDrift",
            Component::Disk => "DiskSelectorDrift",
            Component::Network => "PrivateNetworkDrift",
        }
    }

    fn index(self) -> usize {
        self as usize
    }

    /// The input of this component's hash. Optional inputs are omitted when
    /// unset (and empty collections treated as unset where that means the
    /// same thing), so that adding an optional field to a component later does
    /// not change the hash of NodeClasses that do not use it.
    fn input(self, spec: &NodeClassSpec) -> Value {
        match self {
            // The resolved URL is not used: a NodeClass whose template cannot
            // be resolved for some arch still needs a hash, and the declared
            // fields are what users edit.
            Component::Image => {
                let image = &spec.image;
                let mut v = json!({
                    "urlTemplate": image.url_template,
                    "version": image.version,
                    "schematic": image.schematic,
                });
                if let Some(sums) = image.sha256.as_ref().filter(|m| !m.is_empty()) {
                    v["sha256"] = json!(sums);
                }
                v
            }
            // The Secret is hashed by reference, not by content: IsDrifted is
            // answered from memory (reading Secrets for every NodeClaim every
            // few minutes would load the API server), a digest of secret
            // material does not belong in an annotation anyone can read, and
            // a Secret rewritten in place (a rotation, a re-apply) must not
            // replace the fleet unasked. To roll out a new base config, point
            // the NodeClass at a new Secret or key.
            Component::Config => {
                let r = &spec.machine_config_secret_ref;
                json!({
                    "machineConfigSecretRef": {
                        "name": r.name,
                        "namespace": r.namespace,
                        "key": r.key,
                    },
                    "machineConfigPatches": spec.machine_config_patches,
                })
            }
            // No selector and an empty one both mean "the first disk";
            // `sda` and `/dev/sda` name the same disk.
            Component::Disk => match spec.install_disk.as_ref().and_then(|d| d.name.as_deref()) {
                Some(name) => json!({ "name": name.strip_prefix("/dev/").unwrap_or(name) }),
                None => json!({}),
            },
            // The selection as declared (the id or name and tags, the
            // address policy and its booked ids, the InternalIP source), not
            // what it resolved to: a network recreated under the same name is
            // a change of the cloud, not of the NodeClass.
            Component::Network => match spec.private_network.as_ref() {
                Some(pn) => {
                    let mut v = json!({
                        "addresses": pn.addresses,
                        "nodeIP": pn.node_ip,
                    });
                    if let Some(id) = &pn.id {
                        v["id"] = json!(id);
                    }
                    if !pn.name.is_empty() {
                        v["name"] = json!(pn.name);
                    }
                    if !pn.tags.is_empty() {
                        v["tags"] = json!(pn.tags);
                    }
                    if !pn.ipam_ip_ids.is_empty() {
                        v["ipamIpIds"] = json!(pn.ipam_ip_ids);
                    }
                    v
                }
                None => Value::Null,
            },
        }
    }
}

/// JSON with object keys sorted and no whitespace, so that the same value
/// always gives the same bytes whatever the map order of the serializer.
fn canonical_json(value: &Value, out: &mut String) {
    match value {
        Value::Object(map) => {
            let mut keys: Vec<&String> = map.keys().collect();
            keys.sort();
            out.push('{');
            for (i, k) in keys.into_iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                out.push_str(&Value::String(k.clone()).to_string());
                out.push(':');
                canonical_json(&map[k], out);
            }
            out.push('}');
        }
        Value::Array(items) => {
            out.push('[');
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    out.push(',');
                }
                canonical_json(item, out);
            }
            out.push(']');
        }
        scalar => out.push_str(&scalar.to_string()),
    }
}

/// The first 8 hex digits of the sha256 of the canonical JSON: 32 bits tell
/// one NodeClass revision from the next; this is not a security digest.
pub(super) fn short_hash(value: &Value) -> String {
    let mut text = String::new();
    canonical_json(value, &mut text);
    let digest = Sha256::digest(text.as_bytes());
    digest[..4].iter().map(|b| format!("{b:02x}")).collect()
}

/// The per-component hash, written `image=<h8>,config=<h8>,disk=<h8>`,
/// then `,network=<h8>` when the NodeClass selects a Private Network.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeClassHash([String; 3], Option<String>);

impl NodeClassHash {
    pub fn of(spec: &NodeClassSpec) -> Self {
        NodeClassHash(
            Component::ALL.map(|c| short_hash(&c.input(spec))),
            spec.private_network
                .is_some()
                .then(|| short_hash(&Component::Network.input(spec))),
        )
    }

    /// Reads an annotation value of the current version: every component
    /// exactly once, in any order, nothing else.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut parts: [Option<String>; 3] = Default::default();
        let mut network: Option<String> = None;
        for item in text.split(',') {
            let (key, hash) = item
                .split_once('=')
                .ok_or_else(|| format!("{item:?} is not key=hash"))?;
            let component = Component::ALL
                .into_iter()
                .chain([Component::Network])
                .find(|c| c.key() == key)
                .ok_or_else(|| format!("unknown component {key:?}"))?;
            if hash.len() != 8 || !hash.bytes().all(|b| b.is_ascii_hexdigit()) {
                return Err(format!("{key}: {hash:?} is not 8 hex digits"));
            }
            let slot = match component {
                Component::Network => &mut network,
                other => &mut parts[other.index()],
            };
            if slot.is_some() {
                return Err(format!("{key} appears twice"));
            }
            *slot = Some(hash.to_ascii_lowercase());
        }
        let [image, config, disk] = parts;
        match (image, config, disk) {
            (Some(i), Some(c), Some(d)) => Ok(NodeClassHash([i, c, d], network)),
            _ => Err("a component is missing".into()),
        }
    }

    /// The first component whose hash differs from `current`'s.
    pub fn first_difference(&self, current: &NodeClassHash) -> Option<Component> {
        Component::ALL
            .into_iter()
            .find(|c| self.0[c.index()] != current.0[c.index()])
            .or_else(|| (self.1 != current.1).then_some(Component::Network))
    }
}

impl fmt::Display for NodeClassHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, c) in Component::ALL.into_iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{}={}", c.key(), self.0[c.index()])?;
        }
        if let Some(network) = &self.1 {
            write!(f, ",{}={network}", Component::Network.key())?;
        }
        Ok(())
    }
}

/// The annotations Create puts on a NodeClaim built from `spec`.
pub fn stamp(spec: &NodeClassSpec) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            HASH_ANNOTATION.to_string(),
            NodeClassHash::of(spec).to_string(),
        ),
        (
            HASH_VERSION_ANNOTATION.to_string(),
            HASH_VERSION.to_string(),
        ),
    ])
}

/// Why a NodeClaim stamped with `annotations` has drifted from `spec`, or
/// `None`. A stamp that is missing, of another version or unreadable is not
/// drift: replacing nodes is the expensive mistake here.
pub fn drift(
    annotations: &BTreeMap<String, String>,
    spec: &NodeClassSpec,
) -> Result<Option<Component>, String> {
    let (Some(version), Some(stamped)) = (
        annotations.get(HASH_VERSION_ANNOTATION),
        annotations.get(HASH_ANNOTATION),
    ) else {
        return Ok(None);
    };
    if version != HASH_VERSION {
        return Ok(None);
    }
    let stamped = NodeClassHash::parse(stamped)?;
    Ok(stamped.first_difference(&NodeClassHash::of(spec)))
}

pub(super) fn str_at<'a>(v: &'a Value, pointer: &str) -> Option<&'a str> {
    v.pointer(pointer).and_then(Value::as_str)
}

pub(super) fn annotations_of(claim: &Value) -> BTreeMap<String, String> {
    claim
        .pointer("/metadata/annotations")
        .and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// The name of the NodeClass of ours the NodeClaim references, if it does.
fn node_class_name(claim: &Value) -> Option<&str> {
    let r = claim.pointer("/spec/nodeClassRef")?;
    let group = str_at(r, "/group").unwrap_or("");
    let ours = str_at(r, "/kind") == Some(nodeclass::KIND)
        && (group.is_empty() || group == nodeclass::GROUP);
    ours.then(|| str_at(r, "/name")).flatten()
}

pub(super) fn drifted_condition(claim: &Value) -> bool {
    claim
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|cs| {
            cs.iter().any(|c| {
                str_at(c, "/type") == Some("Drifted") && str_at(c, "/status") == Some("True")
            })
        })
}

/// One NodeClaim to bring to the current hash version: merge-patch these
/// annotations, provided it is still at `resource_version`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Restamp {
    pub name: String,
    pub resource_version: String,
    /// The version it was stamped with (`None`: never stamped).
    pub from_version: Option<String>,
    pub annotations: BTreeMap<String, String>,
}

impl Provider {
    /// IsDrifted: the reason of the first NodeClass component that changed
    /// since the NodeClaim was created, or "". Answered from the NodeClass
    /// cache, without any API call. A NodeClass that is gone is "" too:
    /// Karpenter core already marks the NodePool `NodeClassReady=False`
    /// (`NodeClassNotFound`) and stops provisioning from it, and replacing
    /// nodes because their NodeClass was deleted would destroy capacity that
    /// cannot be recreated (Karpenter's AWS provider also answers "" then).
    pub(super) fn drift_reason(&self, claim: &Value) -> String {
        let name = str_at(claim, "/metadata/name").unwrap_or("");
        let Some(class_name) = node_class_name(claim) else {
            return String::new();
        };
        let Some(class) = self.node_classes.get(class_name) else {
            debug!(
                nodeclaim = name,
                nodeclass = class_name,
                "drift: NodeClass not found"
            );
            return String::new();
        };
        match drift(&annotations_of(claim), &class.spec) {
            Ok(Some(component)) => {
                debug!(
                    nodeclaim = name,
                    nodeclass = class_name,
                    component = component.key(),
                    "NodeClaim drifted from its NodeClass"
                );
                component.drift_reason().to_string()
            }
            Ok(None) => String::new(),
            Err(error) => {
                warn!(nodeclaim = name, %error, annotation = HASH_ANNOTATION,
                    "unreadable NodeClass hash; treating the node as not drifted");
                String::new()
            }
        }
    }

    /// The NodeClaims whose stamp is not of the current version (or that
    /// have none), with the stamp of their NodeClass now. Skipped: NodeClaims
    /// not launched yet (Create stamps them), being deleted, already Drifted
    /// (their drift cannot be re-judged under another scheme, and they are
    /// being replaced anyway), of another provider, or whose NodeClass is not
    /// in the cache (tried again next pass).
    pub fn restamps(&self, claims: &[Value]) -> Vec<Restamp> {
        claims
            .iter()
            .filter_map(|claim| {
                let name = str_at(claim, "/metadata/name").filter(|n| !n.is_empty())?;
                let resource_version =
                    str_at(claim, "/metadata/resourceVersion").filter(|v| !v.is_empty())?;
                let launched = str_at(claim, "/status/providerID").is_some_and(|p| !p.is_empty());
                let deleting = claim.pointer("/metadata/deletionTimestamp").is_some();
                if !launched || deleting || drifted_condition(claim) {
                    return None;
                }
                let annotations = annotations_of(claim);
                let from_version = annotations.get(HASH_VERSION_ANNOTATION).cloned();
                if from_version.as_deref() == Some(HASH_VERSION) {
                    return None;
                }
                let class = self.node_classes.get(node_class_name(claim)?)?;
                Some(Restamp {
                    name: name.to_string(),
                    resource_version: resource_version.to_string(),
                    from_version,
                    annotations: stamp(&class.spec),
                })
            })
            .collect()
    }
}

#[cfg(test)]
#[path = "drift_tests.rs"]
mod tests;
