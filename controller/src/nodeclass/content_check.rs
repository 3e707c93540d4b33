//! Checks of what the NodeClass's Secrets hold, made before any server is
//! ordered: a machine config that Talos would refuse, or a rescue key that the
//! rescue system would not accept, is otherwise found only once a server has
//! been ordered and its disk overwritten. Messages name the problem and never
//! quote Secret content.

use russh::keys::decode_secret_key;
use serde_yaml_ng::Value;

use crate::talos::{NodeSettings, RenderError, render_machine_config};

/// A problem with a Secret's content: a condition reason and what to fix.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub reason: &'static str,
    pub message: String,
}

fn problem(reason: &'static str, message: String) -> Problem {
    Problem { reason, message }
}

/// Checks the base machine config (`where_` names its Secret key for the
/// message) and the NodeClass patches by rendering them exactly as an install
/// would, for a placeholder node.
pub fn check_machine_config(base: &[u8], patches: &[String], where_: &str) -> Result<(), Problem> {
    let invalid = |what: String| {
        problem(
            "MachineConfigInvalid",
            format!(
                "the machine config in {where_} is not a Talos machine config ({what}): store the worker.yaml of `talosctl gen config` there"
            ),
        )
    };
    let text = std::str::from_utf8(base).map_err(|_| invalid("not UTF-8 text".into()))?;
    let main = first_v1alpha1(text).map_err(invalid)?;
    match main
        .get("machine")
        .and_then(|m| m.get("type"))
        .and_then(Value::as_str)
    {
        // `join` is the name older Talos releases gave the worker type.
        Some("worker") | Some("join") => {}
        Some(other) => {
            return Err(problem(
                "MachineConfigNotWorker",
                format!(
                    "the machine config in {where_} has machine.type {other:?}: it must be a worker config (worker.yaml of `talosctl gen config`, not controlplane.yaml)"
                ),
            ));
        }
        None => return Err(invalid("no machine.type".into())),
    }
    let endpoint = main
        .get("cluster")
        .and_then(|c| c.get("controlPlane"))
        .and_then(|c| c.get("endpoint"))
        .and_then(Value::as_str);
    if endpoint.is_none_or(str::is_empty) {
        return Err(invalid(
            "no cluster.controlPlane.endpoint: the node would not know where to join".into(),
        ));
    }
    render_machine_config(text, &placeholder_node(patches)).map_err(|e| match e {
        RenderError::InvalidPatch { index, reason } => problem(
            "MachineConfigPatchInvalid",
            format!(
                "spec.machineConfigPatches[{index}] is not a valid Talos config patch ({reason}): fix its YAML"
            ),
        ),
        other => invalid(other.to_string()),
    })?;
    Ok(())
}

/// The first `version: v1alpha1`-style document (no `kind`) of the config.
fn first_v1alpha1(text: &str) -> Result<Value, String> {
    use serde::Deserialize;
    for de in serde_yaml_ng::Deserializer::from_str(text) {
        // serde_yaml_ng errors quote positions, not content.
        let value = Value::deserialize(de).map_err(|e| format!("YAML: {e}"))?;
        if value.is_mapping() && value.get("kind").is_none() {
            return Ok(value);
        }
    }
    Err("no v1alpha1 document".into())
}

/// A node for the dry render: every field an install fills, with values of
/// the right shape.
fn placeholder_node(patches: &[String]) -> NodeSettings {
    NodeSettings {
        hostname: "nodeclass-validation".into(),
        provider_id: "scaleway://baremetal/fr-par-1/00000000-0000-0000-0000-000000000000".into(),
        install_disk: "sda".into(),
        primary_mac: "02:00:00:00:00:01".into(),
        patches: patches.to_vec(),
        bootstrap_token: "abcdef.0123456789abcdef".into(),
        ..Default::default()
    }
}

/// What the reconciler makes of the rescue private key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PrivateKeyCheck {
    /// Its public half in OpenSSH form (`<algorithm> <base64>`).
    Public(String),
    Invalid(Problem),
}

/// Parses the rescue private key as the SSH client will (unencrypted
/// OpenSSH or PEM key).
pub fn check_private_key(pem: &[u8], where_: &str) -> PrivateKeyCheck {
    let invalid = |what: String| {
        PrivateKeyCheck::Invalid(problem(
            "SSHPrivateKeyInvalid",
            format!(
                "the rescue SSH private key in {where_} cannot be used ({what}): store the unencrypted OpenSSH private key of the IAM SSH key there"
            ),
        ))
    };
    let Ok(text) = std::str::from_utf8(pem) else {
        return invalid("not UTF-8 text".into());
    };
    // The parse error names the problem, never the key material.
    match decode_secret_key(text, None) {
        Ok(key) => match key.public_key().to_openssh() {
            Ok(public) => PrivateKeyCheck::Public(key_body(&public).to_string()),
            Err(e) => invalid(e.to_string()),
        },
        Err(e) => invalid(e.to_string()),
    }
}

/// `<algorithm> <base64>` of an OpenSSH public key line, without its comment.
pub fn key_body(line: &str) -> String {
    line.split_whitespace()
        .take(2)
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    const WORKER: &str = "version: v1alpha1\nmachine:\n  type: worker\n  install:\n    disk: /dev/sda\ncluster:\n  controlPlane:\n    endpoint: https://10.0.0.1:6443\n";

    #[test]
    fn a_worker_config_with_valid_patches_passes() {
        assert_eq!(check_machine_config(WORKER.as_bytes(), &[], "ns/s"), Ok(()));
        let patches = vec!["machine:\n  sysctls:\n    vm.max_map_count: \"262144\"\n".to_string()];
        assert_eq!(
            check_machine_config(WORKER.as_bytes(), &patches, "ns/s"),
            Ok(())
        );
        let legacy = WORKER.replace("type: worker", "type: join");
        assert_eq!(check_machine_config(legacy.as_bytes(), &[], "ns/s"), Ok(()));
    }

    #[test]
    fn each_problem_has_its_reason() {
        let reason = |base: &str, patches: &[&str]| {
            let patches: Vec<String> = patches.iter().map(|p| p.to_string()).collect();
            check_machine_config(
                base.as_bytes(),
                &patches,
                "karpenter/talos key \"worker.yaml\"",
            )
            .unwrap_err()
        };
        let p = reason("machine: [unclosed", &[]);
        assert_eq!(p.reason, "MachineConfigInvalid");
        assert!(p.message.contains("karpenter/talos"), "{}", p.message);
        assert_eq!(reason("just text", &[]).reason, "MachineConfigInvalid");
        assert_eq!(
            reason(&WORKER.replace("type: worker", "type: controlplane"), &[]).reason,
            "MachineConfigNotWorker"
        );
        assert_eq!(
            reason(&WORKER.replace("https://10.0.0.1:6443", "\"\""), &[]).reason,
            "MachineConfigInvalid"
        );
        assert_eq!(
            reason(&WORKER.replace("version: v1alpha1", "version: v2"), &[]).reason,
            "MachineConfigInvalid"
        );
        let p = reason(WORKER, &["machine: {}", "machine: [unclosed"]);
        assert_eq!(p.reason, "MachineConfigPatchInvalid");
        assert!(
            p.message.contains("machineConfigPatches[1]"),
            "{}",
            p.message
        );
        assert_eq!(
            reason(WORKER, &["- a list"]).reason,
            "MachineConfigPatchInvalid"
        );
        assert_eq!(
            check_machine_config(&[0xff, 0xfe], &[], "x")
                .unwrap_err()
                .reason,
            "MachineConfigInvalid"
        );
    }

    #[test]
    fn messages_never_quote_the_config() {
        let secret = "s3cr3t-t0ken-value";
        let base =
            format!("version: v1alpha1\nmachine:\n  type: controlplane\n  token: {secret}\n");
        let p = check_machine_config(base.as_bytes(), &[], "x").unwrap_err();
        assert!(!p.message.contains(secret));
        let base = format!("version: v1alpha1\nmachine: [{secret}\n");
        let p = check_machine_config(base.as_bytes(), &[], "x").unwrap_err();
        assert!(!p.message.contains(secret), "{}", p.message);
    }

    #[test]
    fn private_keys_are_parsed_and_their_public_half_returned() {
        use russh::keys::PrivateKey;
        use russh::keys::ssh_key::LineEnding;
        use russh::keys::ssh_key::private::Ed25519Keypair;
        let key = PrivateKey::from(Ed25519Keypair::from_seed(&[7; 32]));
        let pem = key.to_openssh(LineEnding::LF).unwrap();
        let public = key.public_key().to_openssh().unwrap();
        assert_eq!(
            check_private_key(pem.as_bytes(), "x"),
            PrivateKeyCheck::Public(key_body(&public))
        );
        assert_eq!(key_body(&format!("{public} user@host")), key_body(&public));
        let PrivateKeyCheck::Invalid(p) = check_private_key(b"not a key", "karpenter/rescue")
        else {
            panic!("accepted");
        };
        assert_eq!(p.reason, "SSHPrivateKeyInvalid");
        assert!(p.message.contains("karpenter/rescue"));
    }
}
