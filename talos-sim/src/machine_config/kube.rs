//! Where a node's Kubernetes settings and install target live: in the
//! v1alpha1 document (`machine.kubelet`, `machine.nodeLabels`,
//! `machine.install`, `cluster.controlPlane`, `cluster.ca`), or, as Talos
//! 1.14's `talosctl gen config` writes them, in typed documents
//! (`KubeletConfig`, `KubeNodeConfig`, `UnattendedInstallConfig`,
//! `KubeClusterConfig`, `KubeAPIServerCAConfig`; machinery v1.14.1
//! `config/types/k8s`, `config/types/runtime`). A setting present in both is
//! refused with Talos' `V1Alpha1ConflictValidate` message.

use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use serde_yaml_ng::Value;

use super::text;

/// The typed documents of a config, in order: (kind, document).
pub(super) type Typed = [(String, Value)];

pub(super) fn find<'a>(typed: &'a Typed, kind: &str) -> Option<&'a Value> {
    typed.iter().find(|(k, _)| k == kind).map(|(_, v)| v)
}

/// Whether a v1alpha1 field is set (Talos tests the Go pointer: present
/// and not null, an empty mapping counts).
fn set(v: Option<&Value>) -> bool {
    v.is_some_and(|v| !v.is_null())
}

/// The node's labels, annotations, taints (`key: value:effect`) and nodeIP
/// block: `KubeNodeConfig` (`labels`, `annotations`, `taints`, `nodeIP`) or
/// the v1alpha1 `machine.nodeLabels`, `.nodeAnnotations`, `.nodeTaints`,
/// `.kubelet.nodeIP`.
pub(super) struct NodeSource<'a> {
    pub labels: &'a Value,
    pub labels_field: &'static str,
    pub annotations: &'a Value,
    pub annotations_field: &'static str,
    pub taints: &'a Value,
    pub taints_field: &'static str,
    pub node_ip: &'a Value,
}

pub(super) fn node_source<'a>(
    machine: &'a Value,
    typed: &'a Typed,
    errors: &mut Vec<String>,
) -> NodeSource<'a> {
    let Some(doc) = find(typed, "KubeNodeConfig") else {
        return NodeSource {
            labels: &machine["nodeLabels"],
            labels_field: "machine.nodeLabels",
            annotations: &machine["nodeAnnotations"],
            annotations_field: "machine.nodeAnnotations",
            taints: &machine["nodeTaints"],
            taints_field: "machine.nodeTaints",
            node_ip: &machine["kubelet"]["nodeIP"],
        };
    };
    let kubelet = &machine["kubelet"];
    for (value, field) in [
        (
            kubelet.get("skipNodeRegistration"),
            "kubelet.skipNodeRegistration",
        ),
        (kubelet.get("registerWithFQDN"), "kubelet.registerWithFQDN"),
        (kubelet.get("nodeIP"), "kubelet.nodeIP"),
        (machine.get("nodeLabels"), "nodeLabels"),
        (machine.get("nodeAnnotations"), "nodeAnnotations"),
        (machine.get("nodeTaints"), "nodeTaints"),
    ] {
        if set(value) {
            errors.push(format!(
                ".machine.{field} is already set in v1alpha1 config"
            ));
        }
    }
    NodeSource {
        labels: &doc["labels"],
        labels_field: "KubeNodeConfig.labels",
        annotations: &doc["annotations"],
        annotations_field: "KubeNodeConfig.annotations",
        taints: &doc["taints"],
        taints_field: "KubeNodeConfig.taints",
        node_ip: &doc["nodeIP"],
    }
}

/// The kubelet's image, `extraArgs` and KubeletConfiguration fields:
/// `KubeletConfig` (`image`, `extraArgs`, `config`) or the v1alpha1
/// `machine.kubelet` (`image`, `extraArgs`, `extraConfig`).
pub(super) struct KubeletSource<'a> {
    pub image: Option<&'a str>,
    pub extra_args: &'a Value,
    pub extra_args_field: &'static str,
    pub config: &'a Value,
    pub config_field: &'static str,
}

pub(super) fn kubelet_source<'a>(
    machine: &'a Value,
    typed: &'a Typed,
    errors: &mut Vec<String>,
) -> KubeletSource<'a> {
    let (doc, args_field, config, config_field) = match find(typed, "KubeletConfig") {
        Some(doc) => {
            if set(machine.get("kubelet")) {
                errors.push(
                    "kubelet config is already set in v1alpha1 config (.machine.kubelet)".into(),
                );
            }
            (
                doc,
                "KubeletConfig.extraArgs",
                &doc["config"],
                "KubeletConfig.config",
            )
        }
        None => {
            let kubelet = &machine["kubelet"];
            (
                kubelet,
                "machine.kubelet.extraArgs",
                &kubelet["extraConfig"],
                "machine.kubelet.extraConfig",
            )
        }
    };
    KubeletSource {
        image: text(doc.get("image")),
        extra_args: &doc["extraArgs"],
        extra_args_field: args_field,
        config,
        config_field,
    }
}

/// The install disk and installer image: `UnattendedInstallConfig`
/// (`provisioning.diskSelector.match`, `installer.image`) or the v1alpha1
/// `machine.install` (`disk`, `image`). One of them is required.
pub(super) fn install(
    machine: &Value,
    typed: &Typed,
    errors: &mut Vec<String>,
) -> (Option<String>, Option<String>) {
    let v1alpha1 = &machine["install"];
    let Some(doc) = find(typed, "UnattendedInstallConfig") else {
        if !v1alpha1.is_mapping() {
            errors.push("install instructions are required in \"metal\" mode".into());
        } else if v1alpha1.get("disk").is_none() && v1alpha1.get("diskSelector").is_none() {
            errors.push("either install disk or diskSelector should be defined".into());
        }
        return (
            text(v1alpha1.get("disk")).map(str::to_string),
            text(v1alpha1.get("image")).map(str::to_string),
        );
    };
    if set(machine.get("install")) {
        errors.push(
            "UnattendedInstallConfig config is incompatible with v1alpha1 config (.machine.install)"
                .into(),
        );
    }
    let disk = text(doc["provisioning"]["diskSelector"].get("match")).and_then(dev_path_of);
    let image = text(doc["installer"].get("image"))
        .filter(|i| !i.is_empty())
        .map(str::to_string);
    (disk, image)
}

/// The disk of `disk.dev_path == "/dev/sda"` (the selector the provider
/// writes); other CEL expressions select no disk talos-sim can name.
pub fn dev_path_of(expr: &str) -> Option<String> {
    let compact: String = expr.chars().filter(|c| !c.is_whitespace()).collect();
    let (left, right) = compact.split_once("==")?;
    let value = match (left, right) {
        ("disk.dev_path", v) | (v, "disk.dev_path") => v,
        _ => return None,
    };
    value
        .strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .filter(|v| !v.is_empty() && !v.contains('"'))
        .map(str::to_string)
}

/// The API server endpoint: `KubeClusterConfig.endpoint`, else
/// `cluster.controlPlane.endpoint`.
pub(super) fn endpoint<'a>(cluster: &'a Value, typed: &'a Typed) -> Option<&'a str> {
    find(typed, "KubeClusterConfig")
        .and_then(|doc| text(doc.get("endpoint")))
        .or_else(|| text(cluster["controlPlane"].get("endpoint")))
}

/// The Kubernetes CA the kubelet trusts, as base64 of the PEM (the
/// v1alpha1 `cluster.ca.crt` form): that field, else the first of
/// `KubeAPIServerCAConfig.acceptedCAs` (PEM as written).
pub(super) fn cluster_ca(cluster: &Value, typed: &Typed) -> Option<String> {
    if let Some(crt) = text(cluster["ca"].get("crt")).filter(|c| !c.is_empty()) {
        return Some(crt.to_string());
    }
    let doc = find(typed, "KubeAPIServerCAConfig")?;
    let pem = doc["acceptedCAs"]
        .as_sequence()?
        .iter()
        .filter_map(Value::as_str)
        .find(|p| !p.trim().is_empty())?;
    Some(B64.encode(pem.as_bytes()))
}

#[cfg(test)]
#[path = "kube_tests.rs"]
mod tests;
