//! Reading and hydrating NodeClaims as Kubernetes JSON.
//!
//! The NodeClaim crosses the wire as JSON and goes back hydrated; it is edited
//! as a `serde_json::Value` so that fields this provider does not know (newer
//! Karpenter versions) survive the round trip.

use std::collections::BTreeMap;

use serde_json::{Map, Value, json};

use crate::catalog::{Operator, Requirement};
use crate::install::Taint;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeClassRef {
    pub group: String,
    pub kind: String,
    pub name: String,
}

/// The parts of a NodeClaim the provider reads.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeClaimView {
    pub name: String,
    pub labels: BTreeMap<String, String>,
    pub requirements: Vec<Requirement>,
    pub node_class_ref: Option<NodeClassRef>,
    pub taints: Vec<Taint>,
    pub startup_taints: Vec<Taint>,
    pub provider_id: Option<String>,
    /// `metadata.uid`: the Node registered ahead of its kubelet is owned by
    /// the NodeClaim through it.
    pub uid: Option<String>,
}

fn str_at<'a>(v: &'a Value, path: &[&str]) -> Option<&'a str> {
    path.iter()
        .try_fold(v, |v, k| v.get(k))
        .and_then(Value::as_str)
}

fn string_map(v: Option<&Value>) -> BTreeMap<String, String> {
    v.and_then(Value::as_object)
        .map(|m| {
            m.iter()
                .filter_map(|(k, v)| v.as_str().map(|s| (k.clone(), s.to_string())))
                .collect()
        })
        .unwrap_or_default()
}

/// Karpenter core writes a NodePool's `Gt 7` into its NodeClaims as `Gte 8`
/// (and `Lt` as `Lte`), so both spellings arrive here. On integers,
/// `>= n` is `> n-1` and `<= n` is `< n+1`.
fn operator_and_values(
    key: &str,
    op: &str,
    values: Vec<String>,
) -> Result<(Operator, Vec<String>), String> {
    let shifted = |delta: i64, op: Operator| -> Result<(Operator, Vec<String>), String> {
        let shifted = values
            .iter()
            .map(|v| {
                v.trim()
                    .parse::<i64>()
                    .ok()
                    .and_then(|n| n.checked_add(delta))
                    .map(|n| n.to_string())
                    .ok_or_else(|| {
                        format!(
                            "requirement {key} {op_name} needs an integer, got {v:?}",
                            op_name = if delta < 0 { "Gte" } else { "Lte" }
                        )
                    })
            })
            .collect::<Result<Vec<_>, _>>()?;
        Ok((op, shifted))
    };
    match op {
        "Gte" => shifted(-1, Operator::Gt),
        "Lte" => shifted(1, Operator::Lt),
        other => Ok((operator(other)?, values)),
    }
}

fn operator(op: &str) -> Result<Operator, String> {
    Ok(match op {
        "In" => Operator::In,
        "NotIn" => Operator::NotIn,
        "Exists" => Operator::Exists,
        "DoesNotExist" => Operator::DoesNotExist,
        "Gt" => Operator::Gt,
        "Lt" => Operator::Lt,
        other => return Err(format!("unknown requirement operator {other:?}")),
    })
}

fn taints(v: Option<&Value>) -> Vec<Taint> {
    v.and_then(Value::as_array)
        .map(|a| {
            a.iter()
                .filter_map(|t| {
                    Some(Taint {
                        key: t.get("key")?.as_str()?.to_string(),
                        value: t.get("value").and_then(Value::as_str).map(str::to_string),
                        effect: t.get("effect")?.as_str()?.to_string(),
                    })
                })
                .collect()
        })
        .unwrap_or_default()
}

/// Reads a NodeClaim; an error is a malformed object (no name, a bad operator).
pub fn parse(claim: &Value) -> Result<NodeClaimView, String> {
    let name = str_at(claim, &["metadata", "name"])
        .filter(|n| !n.is_empty())
        .ok_or("NodeClaim has no metadata.name")?
        .to_string();
    let spec = claim.get("spec");
    let mut requirements = Vec::new();
    for r in spec
        .and_then(|s| s.get("requirements"))
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
    {
        let key = r
            .get("key")
            .and_then(Value::as_str)
            .ok_or("requirement without key")?;
        let op_name = r.get("operator").and_then(Value::as_str).unwrap_or("");
        let values: Vec<String> = r
            .get("values")
            .and_then(Value::as_array)
            .map(|a| {
                a.iter()
                    .filter_map(|v| v.as_str().map(str::to_string))
                    .collect()
            })
            .unwrap_or_default();
        let (op, values) = operator_and_values(key, op_name, values)?;
        requirements.push(Requirement {
            key: key.to_string(),
            operator: op,
            values,
        });
    }
    let node_class_ref = spec.and_then(|s| s.get("nodeClassRef")).and_then(|r| {
        Some(NodeClassRef {
            group: r
                .get("group")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            kind: r
                .get("kind")
                .and_then(Value::as_str)
                .unwrap_or("")
                .to_string(),
            name: r.get("name")?.as_str()?.to_string(),
        })
    });
    Ok(NodeClaimView {
        name,
        labels: string_map(claim.pointer("/metadata/labels")),
        requirements,
        node_class_ref,
        taints: taints(spec.and_then(|s| s.get("taints"))),
        startup_taints: taints(spec.and_then(|s| s.get("startupTaints"))),
        provider_id: str_at(claim, &["status", "providerID"])
            .filter(|p| !p.is_empty())
            .map(str::to_string),
        uid: str_at(claim, &["metadata", "uid"])
            .filter(|u| !u.is_empty())
            .map(str::to_string),
    })
}

/// What Create adds to the NodeClaim.
#[derive(Debug, Clone, Default)]
pub struct Hydration {
    pub labels: BTreeMap<String, String>,
    pub annotations: BTreeMap<String, String>,
    pub provider_id: String,
    pub image_id: String,
    pub capacity: BTreeMap<String, String>,
    pub allocatable: BTreeMap<String, String>,
}

fn object_at<'a>(parent: &'a mut Value, key: &str) -> &'a mut Map<String, Value> {
    if !parent.get(key).is_some_and(Value::is_object) {
        parent[key] = json!({});
    }
    parent[key].as_object_mut().expect("just made an object")
}

/// Writes the hydration into the NodeClaim, keeping everything else. The
/// NodeClaim's own labels win over ours (as Karpenter core does when it copies
/// them); annotations, providerID, imageID, capacity and allocatable are ours.
pub fn hydrate(claim: &mut Value, h: &Hydration) {
    if !claim.is_object() {
        *claim = json!({});
    }
    let metadata = object_at(claim, "metadata");
    let mut labels = metadata.remove("labels").unwrap_or_else(|| json!({}));
    if !labels.is_object() {
        labels = json!({});
    }
    for (k, v) in &h.labels {
        labels
            .as_object_mut()
            .expect("labels is an object")
            .entry(k.clone())
            .or_insert_with(|| json!(v));
    }
    metadata.insert("labels".into(), labels);
    if !h.annotations.is_empty() {
        let mut annotations = metadata.remove("annotations").unwrap_or_else(|| json!({}));
        if !annotations.is_object() {
            annotations = json!({});
        }
        for (k, v) in &h.annotations {
            annotations[k] = json!(v);
        }
        metadata.insert("annotations".into(), annotations);
    }
    let status = object_at(claim, "status");
    status.insert("providerID".into(), json!(h.provider_id));
    status.insert("imageID".into(), json!(h.image_id));
    status.insert("capacity".into(), json!(h.capacity));
    status.insert("allocatable".into(), json!(h.allocatable));
}

/// Whether the NodeClaim's condition `kind` is `True`.
fn condition_true(claim: &Value, kind: &str) -> bool {
    claim
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|conditions| {
            conditions.iter().any(|c| {
                c.get("type").and_then(Value::as_str) == Some(kind)
                    && c.get("status").and_then(Value::as_str) == Some("True")
            })
        })
}

/// Whether Karpenter has marked the NodeClaim `Initialized`.
pub fn initialized(claim: &Value) -> bool {
    condition_true(claim, "Initialized")
}

/// Whether Karpenter (v1.15) is rebooting the node in place: `Rebooting`
/// is True from the repair's decision until the reboot ends, and meanwhile
/// `Initialized` turns `Unknown` (reason `Rebooting`) once the reboot call
/// was accepted.
pub fn rebooting(claim: &Value) -> bool {
    condition_true(claim, "Rebooting")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claim() -> Value {
        json!({
            "apiVersion": "karpenter.sh/v1",
            "kind": "NodeClaim",
            "metadata": {
                "name": "default-abcde",
                "uid": "1234",
                "labels": {"karpenter.sh/nodepool": "default", "kubernetes.io/arch": "amd64"},
                "annotations": {"karpenter.sh/nodepool-hash": "42"},
                "finalizers": ["karpenter.sh/termination"]
            },
            "spec": {
                "requirements": [
                    {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["EM-A115X-SSD", "EM-I215E-NVME"]},
                    {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]},
                    {"key": "karpenter.scaleway.com/instance-cpu", "operator": "Gt", "values": ["2"], "minValues": 1}
                ],
                "resources": {"requests": {"cpu": "1", "pods": "3"}},
                "taints": [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}],
                "startupTaints": [{"key": "cilium.io/agent-not-ready", "effect": "NoExecute"}],
                "nodeClassRef": {"group": "karpenter.scaleway.com", "kind": "ScalewayElasticMetalNodeClass", "name": "default"},
                "futureField": {"x": 1}
            },
            "status": {"conditions": [{"type": "Launched", "status": "Unknown"}]}
        })
    }

    #[test]
    fn parses_the_fields_the_provider_uses() {
        let v = parse(&claim()).unwrap();
        assert_eq!(v.name, "default-abcde");
        assert_eq!(v.labels["karpenter.sh/nodepool"], "default");
        assert_eq!(v.requirements.len(), 3);
        assert_eq!(v.requirements[2].operator, Operator::Gt);
        assert_eq!(v.node_class_ref.as_ref().unwrap().name, "default");
        assert_eq!(v.taints[0].value.as_deref(), Some("ml"));
        assert_eq!(v.startup_taints[0].value, None);
        assert_eq!(v.provider_id, None);
    }

    #[test]
    fn reads_gte_and_lte_as_core_writes_them() {
        // Core turns a NodePool's `Gt 7` into `Gte 8` in the NodeClaim.
        let mut c = claim();
        c["spec"]["requirements"][2] = json!({"key": "karpenter.scaleway.com/instance-cpu", "operator": "Gte", "values": ["8"]});
        c["spec"]["requirements"][1] = json!({"key": "karpenter.scaleway.com/instance-memory", "operator": "Lte", "values": ["65536"]});
        let v = parse(&c).unwrap();
        assert_eq!(v.requirements[2].operator, Operator::Gt);
        assert_eq!(v.requirements[2].values, vec!["7".to_string()]);
        assert_eq!(v.requirements[1].operator, Operator::Lt);
        assert_eq!(v.requirements[1].values, vec!["65537".to_string()]);

        c["spec"]["requirements"][2]["values"] = json!(["eight"]);
        let err = parse(&c).unwrap_err();
        assert!(err.contains("needs an integer"), "{err}");
    }

    #[test]
    fn rejects_malformed_claims() {
        assert!(parse(&json!({"metadata": {}})).is_err());
        let mut c = claim();
        c["spec"]["requirements"][0]["operator"] = json!("Near");
        assert!(parse(&c).is_err());
    }

    #[test]
    fn hydrates_and_keeps_unknown_fields() {
        let mut c = claim();
        let h = Hydration {
            labels: BTreeMap::from([
                ("kubernetes.io/arch".to_string(), "arm64".to_string()),
                (
                    "topology.kubernetes.io/zone".to_string(),
                    "fr-par-2".to_string(),
                ),
            ]),
            annotations: BTreeMap::from([(
                "karpenter.scaleway.com/offer".to_string(),
                "x".to_string(),
            )]),
            provider_id: "scaleway://baremetal/fr-par-2/abc".into(),
            image_id: "img".into(),
            capacity: BTreeMap::from([("cpu".to_string(), "4".to_string())]),
            allocatable: BTreeMap::from([("cpu".to_string(), "3920m".to_string())]),
        };
        hydrate(&mut c, &h);
        assert_eq!(
            c["metadata"]["labels"]["kubernetes.io/arch"], "amd64",
            "the claim's label wins"
        );
        assert_eq!(
            c["metadata"]["labels"]["topology.kubernetes.io/zone"],
            "fr-par-2"
        );
        assert_eq!(
            c["metadata"]["annotations"]["karpenter.sh/nodepool-hash"],
            "42"
        );
        assert_eq!(
            c["metadata"]["annotations"]["karpenter.scaleway.com/offer"],
            "x"
        );
        assert_eq!(c["metadata"]["finalizers"][0], "karpenter.sh/termination");
        assert_eq!(c["spec"]["futureField"]["x"], 1);
        assert_eq!(
            c["status"]["providerID"],
            "scaleway://baremetal/fr-par-2/abc"
        );
        assert_eq!(c["status"]["allocatable"]["cpu"], "3920m");
        assert_eq!(c["status"]["conditions"][0]["type"], "Launched");
        assert_eq!(
            parse(&c).unwrap().provider_id.as_deref(),
            Some("scaleway://baremetal/fr-par-2/abc")
        );
    }
}
