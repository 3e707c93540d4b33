//! Rendering of one node's machine config: the user's base worker config (the
//! multi-document YAML `talosctl gen config` writes) plus what is specific to
//! this node, then the NodeClass patches.
//!
//! The `v1alpha1` document carries labels, kubelet settings and the install
//! disk. Where the hostname goes depends on the Talos minor the base config
//! was written for (see [`HostnameForm`]): in a `HostnameConfig` document on
//! Talos 1.12 and later, with a `LinkAliasConfig` naming the primary NIC; in
//! `machine.network.hostname` for a base config of Talos 1.11 or older, which
//! knows neither document kind.
//! Talos 1.14's `talosctl gen config` also moved the node's Kubernetes settings
//! and the install target out of the v1alpha1 document (`KubeNodeConfig`,
//! `KubeletConfig`, `UnattendedInstallConfig`): each setting goes where the base
//! keeps it (see [`Place`]). A Private Network link ([`PrivateLink`]) becomes
//! network documents (`private_network.rs`).
//! A pure function: no I/O, and the output holds secrets from the base config,
//! so callers never log it.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_yaml_ng::{Mapping, Value};

use crate::catalog::KubeletReservations;

pub use super::private_network::PrivateLink;

/// The alias given to the primary NIC (selected by its MAC address) so that
/// NodeClass patches can configure it whatever name Talos gives the link.
pub const PRIMARY_LINK_ALIAS: &str = "net0";

/// A Kubernetes taint to register the Node with.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taint {
    pub key: String,
    pub value: Option<String>,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    pub effect: String,
}

/// What is specific to one node. `Debug` leaves the bootstrap token out.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct NodeSettings {
    /// Talos hostname, which is also the Node name.
    pub hostname: String,
    pub labels: BTreeMap<String, String>,
    /// Registered by the kubelet when it creates the Node.
    pub register_taints: Vec<Taint>,
    /// kubelet `--provider-id`.
    pub provider_id: String,
    /// Kernel name of the install disk, e.g. `nvme0n1`.
    pub install_disk: String,
    /// MAC address of the primary NIC.
    pub primary_mac: String,
    /// NodeClass patches, each one or more YAML documents, applied in order.
    pub patches: Vec<String>,
    /// This node's own bootstrap token `<id>.<secret>` (the kubelet's
    /// `cluster.token`). Secret: never logged.
    pub bootstrap_token: String,
    /// The kubelet's `maxPods`, `kubeReserved`, `systemReserved` and
    /// `evictionHard`: the same numbers the catalog subtracted from the
    /// offer's capacity, so the Node's allocatable is what Karpenter was
    /// promised. `None` leaves the base config's (or Talos') defaults.
    pub kubelet_reservations: Option<KubeletReservations>,
    /// The node's link to a Private Network; `None`: the public network only.
    pub private_network: Option<PrivateLink>,
}

impl std::fmt::Debug for NodeSettings {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NodeSettings")
            .field("hostname", &self.hostname)
            .field("labels", &self.labels)
            .field("register_taints", &self.register_taints)
            .field("provider_id", &self.provider_id)
            .field("install_disk", &self.install_disk)
            .field("primary_mac", &self.primary_mac)
            .field("patches", &self.patches.len())
            .field("bootstrap_token", &"<redacted>")
            .field("kubelet_reservations", &self.kubelet_reservations)
            .field("private_network", &self.private_network)
            .finish()
    }
}

/// Why a config could not be rendered. Messages never quote the config.
#[derive(Debug, Clone, thiserror::Error, PartialEq, Eq)]
pub enum RenderError {
    #[error("base machine config: {0}")]
    InvalidBase(String),
    #[error("machine config patch #{index}: {reason}")]
    InvalidPatch { index: usize, reason: String },
    /// The node has no bootstrap token: a config without one would leave the
    /// kubelet unable to join, or join with a shared token.
    #[error("no bootstrap token for this node")]
    MissingBootstrapToken,
    /// Not `[a-z0-9]{6}.[a-z0-9]{16}`; the message never quotes the token.
    #[error("the node's bootstrap token is not of the form [a-z0-9]{{6}}.[a-z0-9]{{16}}")]
    InvalidBootstrapToken,
    /// The base config (and patches) is of Talos 1.11 or older: its network
    /// is configured in the deprecated v1alpha1 `machine.network.interfaces`,
    /// which the renderer never writes.
    #[error(
        "Private Networks need a base machine config of Talos 1.12 or later (multi-document network configuration); this one is of Talos 1.11 or older: regenerate it with a newer talosctl gen config, or add its `kind: HostnameConfig` document (`auto: stable`)"
    )]
    PrivateNetworkNeedsTalos112,
    /// The node's Private Network link is inconsistent (a bug of the caller,
    /// or an address IPAM returned in an unexpected form).
    #[error("private network link: {0}")]
    InvalidPrivateLink(String),
}

/// Checks the `<id>.<secret>` form the API server's bootstrap authenticator
/// accepts (`[a-z0-9]{6}.[a-z0-9]{16}`).
fn check_bootstrap_token(token: &str) -> Result<(), RenderError> {
    if token.is_empty() {
        return Err(RenderError::MissingBootstrapToken);
    }
    let valid = |part: &str, len: usize| {
        part.len() == len
            && part
                .bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    };
    match token.split_once('.') {
        Some((id, secret)) if valid(id, 6) && valid(secret, 16) => Ok(()),
        _ => Err(RenderError::InvalidBootstrapToken),
    }
}

/// One YAML document of a machine config.
#[derive(Debug, Clone, PartialEq)]
enum Document {
    /// The `version: v1alpha1` document.
    V1Alpha1(Mapping),
    /// A typed document (`apiVersion` + `kind`), identified by kind and name.
    Typed(Mapping),
}

impl Document {
    fn classify(value: Value) -> Result<Self, String> {
        let Value::Mapping(map) = value else {
            return Err("a document is not a mapping".to_string());
        };
        if map.contains_key("kind") {
            Ok(Document::Typed(map))
        } else {
            Ok(Document::V1Alpha1(map))
        }
    }

    /// `(kind, name)` of a typed document; unnamed kinds have one instance.
    fn identity(map: &Mapping) -> (Option<&str>, Option<&str>) {
        (
            map.get("kind").and_then(Value::as_str),
            map.get("name").and_then(Value::as_str),
        )
    }
}

fn parse_documents(text: &str) -> Result<Vec<Document>, String> {
    let mut docs = Vec::new();
    for de in serde_yaml_ng::Deserializer::from_str(text) {
        // Errors from serde_yaml_ng quote positions, not content.
        let value = Value::deserialize(de).map_err(|e| e.to_string())?;
        if value.is_null() {
            continue;
        }
        docs.push(Document::classify(value)?);
    }
    Ok(docs)
}

/// Document kinds of Talos' multi-document network config, which Talos 1.12
/// introduced (1.13 added `VRFConfig` to `KubeSpanConfig`, 1.14 the last
/// three): a config that holds one is for a
/// node that knows `HostnameConfig` and `LinkAliasConfig`. Talos 1.11 refuses
/// any of them (`"HostnameConfig" "v1alpha1": not registered`).
const MULTIDOC_NETWORK_KINDS: &[&str] = &[
    "HostnameConfig",
    "LinkConfig",
    "LinkAliasConfig",
    "DHCPv4Config",
    "DHCPv6Config",
    "ResolverConfig",
    "StaticHostConfig",
    "TimeSyncConfig",
    "BondConfig",
    "BridgeConfig",
    "VLANConfig",
    "DummyLinkConfig",
    "WireguardConfig",
    "Layer2VIPConfig",
    "HCloudVIPConfig",
    "VRFConfig",
    "BlackholeRouteConfig",
    "RoutingRuleConfig",
    "TCPProbeConfig",
    "KubeSpanConfig",
    "VethConfig",
    "HTTPProbeConfig",
    "BGPInstanceConfig",
];

/// Where the node's static hostname goes, chosen from the shape of the base
/// config (and patches) so that the result never contradicts it. Talos'
/// validation (pkg/machinery `config/types/network/hostname.go`,
/// `V1Alpha1ConflictValidate`) refuses a `HostnameConfig` document next to a
/// v1alpha1 `machine.network.hostname` ("static hostname is already set in
/// v1alpha1 config") or next to `machine.features.stableHostname: true`
/// ("stable hostname is already set in v1alpha1 config").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum HostnameForm {
    /// `talosctl gen config` of Talos 1.12 and later writes a
    /// `HostnameConfig {auto: stable}` document: it is replaced by
    /// `HostnameConfig {hostname: <name>}` (Talos' own example of a static
    /// hostname), the deprecated v1alpha1 hostname fields are removed, and a
    /// `LinkAliasConfig` names the primary NIC [`PRIMARY_LINK_ALIAS`].
    Documents,
    /// Talos 1.11 and older write `machine.features.stableHostname: true`
    /// and know no network documents: the hostname goes to
    /// `machine.network.hostname`, `stableHostname` is removed (a static
    /// hostname overrides it anyway), and there is no link alias. Talos 1.12
    /// and 1.13 still accept this form, so an upgraded cluster that kept its
    /// old worker file works too.
    V1Alpha1,
}

impl HostnameForm {
    /// `Documents` when the base or a patch holds a multi-document network
    /// config document (a patch deleting one does not count).
    fn of<'a>(docs: impl IntoIterator<Item = &'a Mapping>) -> Self {
        let multidoc = docs.into_iter().any(|doc| {
            !is_delete(doc)
                && Document::identity(doc)
                    .0
                    .is_some_and(|kind| MULTIDOC_NETWORK_KINDS.contains(&kind))
        });
        if multidoc {
            HostnameForm::Documents
        } else {
            HostnameForm::V1Alpha1
        }
    }

    fn apply(
        self,
        config: &mut Mapping,
        typed: &mut Vec<Mapping>,
        node: &NodeSettings,
    ) -> Result<(), String> {
        let machine = mapping_at(config, &["machine"])?;
        if let Some(Value::Mapping(features)) = machine.get_mut("features") {
            features.shift_remove("stableHostname");
        }
        match self {
            HostnameForm::Documents => {
                if let Some(Value::Mapping(network)) = machine.get_mut("network")
                    && network.shift_remove("hostname").is_some()
                    && network.is_empty()
                {
                    machine.shift_remove("network");
                }
                typed.retain(|doc| Document::identity(doc).0 != Some("HostnameConfig"));
                upsert_typed(typed, hostname_config(&node.hostname));
                // Without a known MAC (a VM: its one NIC is `eth0`) there is
                // no link to select, so no alias.
                if !node.primary_mac.is_empty() {
                    upsert_typed(typed, link_alias_config(&node.primary_mac));
                }
            }
            HostnameForm::V1Alpha1 => {
                mapping_at(config, &["machine", "network"])?
                    .insert("hostname".into(), node.hostname.as_str().into());
            }
        }
        Ok(())
    }
}

/// Renders the machine config of one node.
pub fn render_machine_config(base: &str, node: &NodeSettings) -> Result<String, RenderError> {
    check_bootstrap_token(&node.bootstrap_token)?;
    let docs = parse_documents(base).map_err(RenderError::InvalidBase)?;
    let mut machine_config = None;
    let mut typed = Vec::new();
    for doc in docs {
        match doc {
            Document::V1Alpha1(map) if machine_config.is_none() => machine_config = Some(map),
            Document::V1Alpha1(_) => {
                return Err(RenderError::InvalidBase(
                    "more than one v1alpha1 document".to_string(),
                ));
            }
            Document::Typed(map) => typed.push(map),
        }
    }
    let mut machine_config = machine_config
        .ok_or_else(|| RenderError::InvalidBase("no v1alpha1 document".to_string()))?;
    if machine_config.get("version").and_then(Value::as_str) != Some("v1alpha1") {
        return Err(RenderError::InvalidBase(
            "the main document is not version v1alpha1".to_string(),
        ));
    }
    // Parsed before anything is applied: their documents, too, tell which
    // Talos minor the config is for.
    let mut patches = Vec::with_capacity(node.patches.len());
    for (index, patch) in node.patches.iter().enumerate() {
        patches.push(
            parse_documents(patch).map_err(|reason| RenderError::InvalidPatch { index, reason })?,
        );
    }
    let form =
        HostnameForm::of(typed.iter().chain(patches.iter().flatten().filter_map(
            |doc| match doc {
                Document::Typed(map) => Some(map),
                Document::V1Alpha1(_) => None,
            },
        )));
    let private_docs = match &node.private_network {
        Some(_) if form == HostnameForm::V1Alpha1 => {
            return Err(RenderError::PrivateNetworkNeedsTalos112);
        }
        Some(link) => link.documents(&node.primary_mac)?,
        None => Vec::new(),
    };
    apply_node_settings(&mut machine_config, &mut typed, node).map_err(RenderError::InvalidBase)?;
    form.apply(&mut machine_config, &mut typed, node)
        .map_err(RenderError::InvalidBase)?;
    for doc in private_docs {
        upsert_typed(&mut typed, doc);
    }

    for doc in patches.into_iter().flatten() {
        match doc {
            Document::V1Alpha1(patch) => merge(&mut machine_config, patch),
            Document::Typed(doc) if is_delete(&doc) => {
                let id = Document::identity(&doc);
                typed.retain(|d| Document::identity(d) != id);
            }
            Document::Typed(doc) => merge_typed(&mut typed, doc),
        }
    }
    // Set last, after the patches: each node joins with its own token, never
    // with the base config's shared one or one a patch carries.
    mapping_at(&mut machine_config, &["cluster"])
        .map_err(RenderError::InvalidBase)?
        .insert("token".into(), node.bootstrap_token.as_str().into());

    let mut out = String::new();
    for map in std::iter::once(machine_config).chain(typed) {
        if !out.is_empty() {
            out.push_str("---\n");
        }
        let text = super::yaml::to_string(&Value::Mapping(map))
            .map_err(|e| RenderError::InvalidBase(format!("cannot serialise: {e}")))?;
        out.push_str(&text);
    }
    Ok(out)
}

/// A static hostname, written as Talos documents it (`auto` left out: it
/// defaults to `off`, and `auto: stable` next to `hostname` fails validation).
fn hostname_config(hostname: &str) -> Mapping {
    let mut doc = Mapping::new();
    doc.insert("apiVersion".into(), "v1alpha1".into());
    doc.insert("kind".into(), "HostnameConfig".into());
    doc.insert("hostname".into(), hostname.into());
    doc
}

fn link_alias_config(mac: &str) -> Mapping {
    let mut selector = Mapping::new();
    // CEL over the LinkStatus resource; the permanent address is the burned-in
    // MAC, which is what the rescue system's `ip -o link` showed.
    selector.insert(
        "match".into(),
        format!(
            "mac(link.permanent_addr) == \"{}\"",
            mac.to_ascii_lowercase()
        )
        .into(),
    );
    let mut doc = Mapping::new();
    doc.insert("apiVersion".into(), "v1alpha1".into());
    doc.insert("kind".into(), "LinkAliasConfig".into());
    doc.insert("name".into(), PRIMARY_LINK_ALIAS.into());
    doc.insert("selector".into(), Value::Mapping(selector));
    doc
}

/// A typed patch document is merged into the document of the same kind and
/// name, as Talos' strategic merge patches do (a Talos 1.14 `KubeletConfig`
/// patch keeps the node's `provider-id`), or added when there is none.
fn merge_typed(docs: &mut Vec<Mapping>, doc: Mapping) {
    let id = Document::identity(&doc);
    match docs.iter().position(|d| Document::identity(d) == id) {
        Some(i) => merge(&mut docs[i], doc),
        None => docs.push(doc),
    }
}

fn upsert_typed(docs: &mut Vec<Mapping>, doc: Mapping) {
    let id = Document::identity(&doc);
    match docs.iter().position(|d| Document::identity(d) == id) {
        Some(i) => docs[i] = doc,
        None => docs.push(doc),
    }
}

fn is_delete(doc: &Mapping) -> bool {
    doc.get("$patch").and_then(Value::as_str) == Some("delete")
}

/// The mapping at `path` under `root`, created if missing.
fn mapping_at<'a>(root: &'a mut Mapping, path: &[&str]) -> Result<&'a mut Mapping, String> {
    let mut current = root;
    for (depth, key) in path.iter().enumerate() {
        let entry = current
            .entry(Value::from(*key))
            .or_insert_with(|| Value::Mapping(Mapping::new()));
        if entry.is_null() {
            *entry = Value::Mapping(Mapping::new());
        }
        current = entry
            .as_mapping_mut()
            .ok_or_else(|| format!("{} is not a mapping", path[..=depth].join(".")))?;
    }
    Ok(current)
}

/// Where a node setting goes: under `path` of the base's typed document of
/// `kind` when the base has one (Talos 1.14 writes them, and refuses the
/// v1alpha1 field next to it, e.g. "kubelet config is already set in v1alpha1
/// config (.machine.kubelet)"), else at `v1alpha1` in the v1alpha1 document.
struct Place {
    kind: &'static str,
    path: &'static [&'static str],
    v1alpha1: &'static [&'static str],
}

const LABELS: Place = Place {
    kind: "KubeNodeConfig",
    path: &["labels"],
    v1alpha1: &["machine", "nodeLabels"],
};
const NODE_IP: Place = Place {
    kind: "KubeNodeConfig",
    path: &["nodeIP"],
    v1alpha1: &["machine", "kubelet", "nodeIP"],
};
const KUBELET_ARGS: Place = Place {
    kind: "KubeletConfig",
    path: &["extraArgs"],
    v1alpha1: &["machine", "kubelet", "extraArgs"],
};
/// KubeletConfiguration fields: `config` of the document, `extraConfig` of
/// the v1alpha1 kubelet.
const KUBELET_CONFIG: Place = Place {
    kind: "KubeletConfig",
    path: &["config"],
    v1alpha1: &["machine", "kubelet", "extraConfig"],
};
const UNATTENDED_INSTALL: &str = "UnattendedInstallConfig";

impl Place {
    fn get<'a>(
        &self,
        config: &'a mut Mapping,
        typed: &'a mut [Mapping],
    ) -> Result<&'a mut Mapping, String> {
        match typed_doc(typed, self.kind) {
            Some(doc) => {
                mapping_at(doc, self.path).map_err(|e| format!("{} document: {e}", self.kind))
            }
            None => mapping_at(config, self.v1alpha1),
        }
    }
}

fn typed_doc<'a>(typed: &'a mut [Mapping], kind: &str) -> Option<&'a mut Mapping> {
    typed
        .iter_mut()
        .find(|doc| !is_delete(doc) && Document::identity(doc).0 == Some(kind))
}

fn apply_node_settings(
    config: &mut Mapping,
    typed: &mut [Mapping],
    node: &NodeSettings,
) -> Result<(), String> {
    let labels = LABELS.get(config, typed)?;
    for (key, value) in &node.labels {
        labels.insert(key.as_str().into(), value.as_str().into());
    }

    let extra_args = KUBELET_ARGS.get(config, typed)?;
    extra_args.insert("provider-id".into(), node.provider_id.as_str().into());

    let extra_config = KUBELET_CONFIG.get(config, typed)?;
    let mut taints: Vec<Value> = match extra_config.remove("registerWithTaints") {
        Some(Value::Sequence(existing)) => existing,
        Some(Value::Null) | None => Vec::new(),
        Some(_) => {
            return Err("the kubelet's registerWithTaints is not a list".to_string());
        }
    };
    for taint in &node.register_taints {
        // Ours win over a base taint with the same key and effect.
        taints.retain(|t| {
            t.get("key").and_then(Value::as_str) != Some(&taint.key)
                || t.get("effect").and_then(Value::as_str) != Some(&taint.effect)
        });
        let mut entry = Mapping::new();
        entry.insert("key".into(), taint.key.as_str().into());
        if let Some(value) = &taint.value {
            entry.insert("value".into(), value.as_str().into());
        }
        entry.insert("effect".into(), taint.effect.as_str().into());
        taints.push(Value::Mapping(entry));
    }
    if !taints.is_empty() {
        extra_config.insert("registerWithTaints".into(), Value::Sequence(taints));
    }
    // Before the NodeClass patches, so a user can still override them (at
    // the cost of the allocatable Karpenter schedules against).
    if let Some(reservations) = &node.kubelet_reservations {
        extra_config.insert("maxPods".into(), reservations.max_pods.into());
        for (key, quantities) in reservations.kubelet_config_maps() {
            let map: Mapping = quantities
                .into_iter()
                .map(|(name, quantity)| (Value::from(name), Value::from(quantity)))
                .collect();
            extra_config.insert(key.into(), Value::Mapping(map));
        }
    }

    // The Node's InternalIP: the private address, whichever the kubelet finds
    // in the network's subnets.
    if let Some(link) = node.private_network.as_ref().filter(|l| l.internal_ip) {
        let subnets = link
            .subnets
            .iter()
            .map(|s| Value::from(s.as_str()))
            .collect();
        NODE_IP
            .get(config, typed)?
            .insert("validSubnets".into(), Value::Sequence(subnets));
    }

    // A VM boots the image it was created from: Talos is installed already
    // and there is no disk to name, so the base config's install section stays.
    if !node.install_disk.is_empty() {
        let disk = format!("/dev/{}", node.install_disk);
        match typed_doc(typed, UNATTENDED_INSTALL) {
            // Talos 1.14 selects the install disk with a CEL expression.
            Some(doc) => {
                mapping_at(doc, &["provisioning", "diskSelector"])
                    .map_err(|e| format!("{UNATTENDED_INSTALL} document: {e}"))?
                    .insert(
                        "match".into(),
                        format!("disk.dev_path == \"{disk}\"").into(),
                    );
            }
            None => {
                let install = mapping_at(config, &["machine", "install"])?;
                install.insert("disk".into(), disk.into());
                // A selector would compete with the disk we just wrote the image to.
                install.shift_remove("diskSelector");
            }
        }
    }
    Ok(())
}

/// Merges a v1alpha1 patch the way Talos merges config patches: mappings
/// recursively, lists appended, scalars replaced, `$patch: delete` removes
/// the key it sits under.
fn merge(target: &mut Mapping, patch: Mapping) {
    for (key, value) in patch {
        match value {
            Value::Mapping(ref m) if m.get("$patch").and_then(Value::as_str) == Some("delete") => {
                target.shift_remove(&key);
            }
            Value::Mapping(m) => match target.get_mut(&key) {
                Some(Value::Mapping(existing)) => merge(existing, m),
                _ => {
                    target.insert(key, Value::Mapping(m));
                }
            },
            Value::Sequence(items) => match target.get_mut(&key) {
                Some(Value::Sequence(existing)) => existing.extend(items),
                _ => {
                    target.insert(key, Value::Sequence(items));
                }
            },
            other => {
                target.insert(key, other);
            }
        }
    }
}

#[cfg(test)]
#[path = "render_tests.rs"]
mod tests;
