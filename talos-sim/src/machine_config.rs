//! Reads a Talos machine config (multi-document YAML) the way a worker in
//! maintenance mode would: validates what Talos validates for the parts the
//! simulator relies on, and extracts what the kubelet stand-in needs.
//! Error messages follow Talos' wording and never quote secret values.
//! Node settings are read from the v1alpha1 document or from Talos 1.14's
//! typed documents (`kube`); the network documents of a Private Network link
//! are read by `network`.

use std::collections::BTreeMap;

use serde::Deserialize;
use serde_yaml_ng::Value;

pub mod kube;
pub mod network;

pub use network::NetworkConfig;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taint {
    pub key: String,
    pub value: String,
    pub effect: String,
}

/// A secret taken from the config (the bootstrap token): compared and
/// cloned like a string, never printed.
#[derive(Clone, PartialEq, Eq, Default)]
pub struct Sensitive(String);

impl Sensitive {
    pub fn new(value: impl Into<String>) -> Self {
        Self(value.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Sensitive {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("<redacted>")
    }
}

/// What the simulated node takes from its machine config.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeConfig {
    /// From a `HostnameConfig` document (or the deprecated
    /// `machine.network.hostname`); `None` means Talos picks one.
    pub hostname: Option<String>,
    pub control_plane_endpoint: String,
    /// `cluster.ca.crt` as written (base64 of the PEM): the kubelet trusts
    /// the API server with it; decoded when the kubelet starts.
    pub cluster_ca_crt: Option<String>,
    /// `cluster.token`, the kubelet's bootstrap token (`<id>.<secret>`).
    pub bootstrap_token: Option<Sensitive>,
    pub node_labels: BTreeMap<String, String>,
    pub node_annotations: BTreeMap<String, String>,
    /// `machine.nodeTaints`, applied by Talos itself after registration.
    pub node_taints: Vec<Taint>,
    /// `registerWithTaints` of the kubelet's configuration, applied by the
    /// kubelet when it creates its Node.
    pub register_with_taints: Vec<Taint>,
    pub provider_id: Option<String>,
    pub kubelet_image: Option<String>,
    pub max_pods: Option<u64>,
    pub system_reserved: BTreeMap<String, String>,
    pub kube_reserved: BTreeMap<String, String>,
    pub eviction_hard: BTreeMap<String, String>,
    /// `machine.install.disk`, or the disk of `UnattendedInstallConfig`'s
    /// `disk.dev_path == "..."` selector.
    pub install_disk: Option<String>,
    /// `machine.install.image` or `UnattendedInstallConfig.installer.image`.
    pub install_image: Option<String>,
    /// `nodeIP.validSubnets` (`machine.kubelet.nodeIP` or `KubeNodeConfig`):
    /// the kubelet's InternalIP is the node's address in them.
    pub node_ip_subnets: Vec<String>,
    /// The network documents talos-sim plays (Private Network links).
    pub network: NetworkConfig,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    #[error("failed to decode config: {0}")]
    Decode(String),
    #[error("{}", multierror(.0))]
    Invalid(Vec<String>),
}

/// hashicorp/go-multierror's format, which Talos' validation errors use.
fn multierror(errors: &[String]) -> String {
    let head = if errors.len() == 1 {
        "1 error occurred:".to_string()
    } else {
        format!("{} errors occurred:", errors.len())
    };
    let items: String = errors.iter().map(|e| format!("\n\t* {e}")).collect();
    format!("{head}{items}\n\n")
}

const V1ALPHA1_KEYS: [&str; 5] = ["version", "debug", "persist", "machine", "cluster"];
const TAINT_EFFECTS: [&str; 3] = ["NoSchedule", "PreferNoSchedule", "NoExecute"];
/// Typed documents a config holds at most one of (per name).
const SINGLETONS: [&str; 10] = [
    "HostnameConfig",
    "KubeNodeConfig",
    "KubeletConfig",
    "UnattendedInstallConfig",
    "KubeClusterConfig",
    "KubeAPIServerCAConfig",
    "LinkAliasConfig",
    "VLANConfig",
    "LinkConfig",
    "DHCPv4Config",
];

pub fn parse(yaml: &str) -> Result<NodeConfig, ConfigError> {
    let mut v1alpha1 = None;
    let mut typed: Vec<(String, Value)> = Vec::new();
    for document in serde_yaml_ng::Deserializer::from_str(yaml) {
        let value = Value::deserialize(document).map_err(|e| ConfigError::Decode(e.to_string()))?;
        if value.is_null() {
            continue;
        }
        let Value::Mapping(map) = &value else {
            return Err(ConfigError::Decode("document is not a mapping".into()));
        };
        if let (Some(api), Some(kind)) = (text(map.get("apiVersion")), text(map.get("kind"))) {
            if api != "v1alpha1" {
                return Err(ConfigError::Decode(format!(
                    "unknown apiVersion {api:?} for kind {kind:?}"
                )));
            }
            // Documents without a name are one per config; named ones
            // (links, aliases) one per name.
            let name = text(map.get("name"));
            if SINGLETONS.contains(&kind)
                && typed
                    .iter()
                    .any(|(k, v)| k == kind && text(v.get("name")) == name)
            {
                return Err(ConfigError::Decode(format!("duplicate document: {kind}")));
            }
            typed.push((kind.to_string(), value.clone()));
        } else if map.contains_key("version") {
            if v1alpha1.is_some() {
                return Err(ConfigError::Decode("duplicate v1alpha1 document".into()));
            }
            if let Some(key) = map
                .keys()
                .filter_map(|k| k.as_str())
                .find(|k| !V1ALPHA1_KEYS.contains(k))
            {
                return Err(ConfigError::Decode(format!(
                    "unknown keys found during decoding:\n{key}"
                )));
            }
            if text(map.get("version")) != Some("v1alpha1") {
                return Err(ConfigError::Decode("invalid config version".into()));
            }
            v1alpha1 = Some(value.clone());
        } else {
            return Err(ConfigError::Decode("missing kind".into()));
        }
    }
    let Some(root) = v1alpha1 else {
        return Err(ConfigError::Invalid(vec![
            "the applied machine configuration doesn't contain v1alpha1 config".into(),
        ]));
    };
    let mut errors = Vec::new();
    let mut config = NodeConfig::default();
    let machine = &root["machine"];
    if !machine.is_mapping() {
        return Err(ConfigError::Invalid(vec![
            "machine instructions are required".into(),
        ]));
    }
    check_cluster(&root["cluster"], &typed, &mut config, &mut errors);
    check_machine(machine, &root["cluster"], &mut errors);

    config.hostname = hostname(kube::find(&typed, "HostnameConfig"), machine, &mut errors);
    let node = kube::node_source(machine, &typed, &mut errors);
    config.node_labels = string_map(node.labels, node.labels_field, &mut errors);
    for (k, v) in &config.node_labels {
        if let Err(e) = validate_label(k, v) {
            errors.push(format!("invalid machine node labels: {e}"));
        }
    }
    config.node_annotations = string_map(node.annotations, node.annotations_field, &mut errors);
    for (key, val) in string_map(node.taints, node.taints_field, &mut errors) {
        let (value, effect) = val.split_once(':').unwrap_or(("", val.as_str()));
        if !TAINT_EFFECTS.contains(&effect) {
            errors.push(format!(
                "invalid machine node taints: invalid taint effect: {effect:?}"
            ));
        }
        config.node_taints.push(Taint {
            key,
            value: value.to_string(),
            effect: effect.to_string(),
        });
    }
    config.node_ip_subnets = node_ip_subnets(node.node_ip, &mut errors);

    let kubelet = kube::kubelet_source(machine, &typed, &mut errors);
    config.kubelet_image = kubelet.image.map(str::to_string);
    config.provider_id = match kubelet.extra_args.get("provider-id") {
        None => None,
        Some(Value::String(s)) => Some(s.clone()),
        Some(Value::Sequence(list)) => list.first().and_then(Value::as_str).map(str::to_string),
        Some(_) => {
            errors.push(format!(
                "{}.provider-id must be a string",
                kubelet.extra_args_field
            ));
            None
        }
    };
    let extra = kubelet.config;
    config.register_with_taints = register_taints(
        &extra["registerWithTaints"],
        kubelet.config_field,
        &mut errors,
    );
    config.max_pods = extra.get("maxPods").and_then(Value::as_u64);
    config.system_reserved = string_map(&extra["systemReserved"], "systemReserved", &mut errors);
    config.kube_reserved = string_map(&extra["kubeReserved"], "kubeReserved", &mut errors);
    config.eviction_hard = string_map(&extra["evictionHard"], "evictionHard", &mut errors);
    (config.install_disk, config.install_image) = kube::install(machine, &typed, &mut errors);

    for (kind, doc) in &typed {
        config.network.read(kind, doc, &mut errors);
    }

    if errors.is_empty() {
        Ok(config)
    } else {
        Err(ConfigError::Invalid(errors))
    }
}

/// `nodeIP.validSubnets`: CIDRs or addresses, `!` excluding (Talos'
/// `KubeNodeConfig` validation wording).
fn node_ip_subnets(node_ip: &Value, errors: &mut Vec<String>) -> Vec<String> {
    let mut out = Vec::new();
    for entry in node_ip["validSubnets"]
        .as_sequence()
        .map(Vec::as_slice)
        .unwrap_or_default()
    {
        let cidr = entry.as_str().unwrap_or("");
        let bare = cidr.strip_prefix('!').unwrap_or(cidr);
        if network::is_prefix(bare) || bare.parse::<std::net::IpAddr>().is_ok() {
            out.push(cidr.to_string());
        } else {
            errors.push(format!("nodeIP subnet is not valid: {cidr:?}"));
        }
    }
    out
}

fn text(v: Option<&Value>) -> Option<&str> {
    v.and_then(Value::as_str)
}

fn check_cluster(
    cluster: &Value,
    typed: &kube::Typed,
    config: &mut NodeConfig,
    errors: &mut Vec<String>,
) {
    if !cluster.is_mapping() {
        errors.push("cluster instructions are required".into());
        return;
    }
    match kube::endpoint(cluster, typed) {
        None => errors.push("cluster controlplane endpoint is required".into()),
        Some(endpoint) => match reqwest::Url::parse(endpoint) {
            Ok(url) if url.scheme() == "https" && url.host_str().is_some() => {
                config.control_plane_endpoint = endpoint.to_string();
            }
            _ => errors.push(format!(
                "invalid controlplane endpoint: {endpoint:?} is not an https URL"
            )),
        },
    }
    match text(cluster.get("token")) {
        None | Some("") => errors.push("cluster.token is required on worker machines".into()),
        Some(token) if !is_bootstrap_token(token) => errors
            .push("cluster.token is not a valid bootstrap token ([a-z0-9]{6}.[a-z0-9]{16})".into()),
        Some(token) => config.bootstrap_token = Some(Sensitive::new(token)),
    }
    config.cluster_ca_crt = kube::cluster_ca(cluster, typed);
}

fn check_machine(machine: &Value, cluster: &Value, errors: &mut Vec<String>) {
    match text(machine.get("type")).unwrap_or("") {
        "worker" => {}
        t @ ("controlplane" | "init") => errors.push(format!(
            "talos-sim only simulates worker machines, got machine.type {t:?}"
        )),
        other => errors.push(format!("unknown machine type {other:?}")),
    }
    let ca = &machine["ca"];
    let has_ca_crt = text(ca.get("crt")).is_some_and(|c| !c.is_empty());
    let has_accepted = machine["acceptedCAs"]
        .as_sequence()
        .is_some_and(|s| !s.is_empty());
    if !has_ca_crt && !has_accepted {
        errors.push(
            "trusted CA certificates are required on non-controlplane nodes (.machine.ca.crt, .machine.acceptedCAs)"
                .into(),
        );
    }
    if text(ca.get("key")).is_some_and(|k| !k.is_empty()) {
        errors.push(
            "issuing Talos API CA key is not allowed on non-controlplane nodes (.machine.ca)"
                .into(),
        );
    }
    if text(cluster["ca"].get("key")).is_some_and(|k| !k.is_empty()) {
        errors.push(
            "issuing Kubernetes API CA key is not allowed on non-controlplane nodes (.cluster.ca)"
                .into(),
        );
    }
}

fn hostname(doc: Option<&Value>, machine: &Value, errors: &mut Vec<String>) -> Option<String> {
    let name = match doc {
        Some(doc) => {
            let name = text(doc.get("hostname")).filter(|h| !h.is_empty());
            let auto = text(doc.get("auto"));
            match (name, auto) {
                (None, None) => errors.push("either 'auto' or 'hostname' must be set".into()),
                (Some(_), Some(a)) if a != "off" => {
                    errors.push("'auto' and 'hostname' cannot be set at the same time".into())
                }
                _ => {}
            }
            // Talos' V1Alpha1ConflictValidate of the document: the
            // deprecated v1alpha1 fields may not say anything else.
            if text(machine["network"].get("hostname")).is_some_and(|h| !h.is_empty()) {
                errors.push("static hostname is already set in v1alpha1 config".into());
            } else if machine["features"].get("stableHostname") == Some(&Value::Bool(true)) {
                errors.push("stable hostname is already set in v1alpha1 config".into());
            }
            name
        }
        None => text(machine["network"].get("hostname")).filter(|h| !h.is_empty()),
    }?;
    if !is_hostname(name) {
        errors.push(format!("invalid hostname {name:?}"));
    }
    Some(name.to_string())
}

fn string_map(v: &Value, field: &str, errors: &mut Vec<String>) -> BTreeMap<String, String> {
    let mut out = BTreeMap::new();
    match v {
        Value::Null => {}
        Value::Mapping(map) => {
            for (k, val) in map {
                let key = k.as_str().map(str::to_string);
                let value = match val {
                    Value::String(s) => Some(s.clone()),
                    Value::Number(n) => Some(n.to_string()),
                    Value::Bool(b) => Some(b.to_string()),
                    _ => None,
                };
                match (key, value) {
                    (Some(k), Some(v)) => {
                        out.insert(k, v);
                    }
                    _ => errors.push(format!("{field} must map strings to strings")),
                }
            }
        }
        _ => errors.push(format!("{field} must be a mapping")),
    }
    out
}

fn register_taints(v: &Value, field: &str, errors: &mut Vec<String>) -> Vec<Taint> {
    let Some(list) = v.as_sequence() else {
        if !v.is_null() {
            errors.push(format!("{field}.registerWithTaints must be a list"));
        }
        return Vec::new();
    };
    let mut taints = Vec::new();
    for item in list {
        let key = text(item.get("key")).unwrap_or("");
        let effect = text(item.get("effect")).unwrap_or("");
        if key.is_empty() || !TAINT_EFFECTS.contains(&effect) {
            errors.push(format!(
                "invalid registerWithTaints entry: key {key:?}, effect {effect:?}"
            ));
            continue;
        }
        taints.push(Taint {
            key: key.to_string(),
            value: text(item.get("value")).unwrap_or("").to_string(),
            effect: effect.to_string(),
        });
    }
    taints
}

fn is_bootstrap_token(token: &str) -> bool {
    let ok = |s: &str, n: usize| {
        s.len() == n
            && s.bytes()
                .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    };
    matches!(token.split_once('.'), Some((id, secret)) if ok(id, 6) && ok(secret, 16))
}

fn is_dns_label(label: &str) -> bool {
    !label.is_empty()
        && label.len() <= 63
        && label
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !label.starts_with('-')
        && !label.ends_with('-')
}

fn is_hostname(name: &str) -> bool {
    name.len() <= 253 && name.split('.').all(is_dns_label)
}

/// Kubernetes label syntax: `[prefix/]name`, values up to 63 characters.
fn validate_label(key: &str, value: &str) -> Result<(), String> {
    let name_ok = |s: &str| {
        !s.is_empty()
            && s.len() <= 63
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
            && s.as_bytes()[0].is_ascii_alphanumeric()
            && s.as_bytes()[s.len() - 1].is_ascii_alphanumeric()
    };
    let (prefix, name) = key
        .rsplit_once('/')
        .map_or((None, key), |(p, n)| (Some(p), n));
    if prefix.is_some_and(|p| !is_hostname(p)) || !name_ok(name) {
        return Err(format!("invalid label key {key:?}"));
    }
    if !value.is_empty() && !name_ok(value) {
        return Err(format!("invalid label value {value:?} for key {key:?}"));
    }
    Ok(())
}

#[cfg(test)]
#[path = "machine_config_tests.rs"]
pub(crate) mod tests;
