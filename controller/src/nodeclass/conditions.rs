//! NodeClass status conditions, computed from one snapshot of what the
//! reconciler observed (house style §7): a pure function, so every outcome is
//! unit-tested without a cluster.

use super::{Condition, NodeClassSpec, resolve_image_url};

pub const READY: &str = "Ready";
pub const SECRETS_RESOLVED: &str = "SecretsResolved";
pub const SSH_KEY_REGISTERED: &str = "SSHKeyRegistered";
pub const IMAGE_TEMPLATE_VALID: &str = "ImageTemplateValid";

/// What the reconciler found for one Secret reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretCheck {
    Present,
    SecretNotFound,
    KeyMissing,
    /// The read failed (API error); says nothing about the Secret.
    Error(String),
}

/// What the reconciler found for the IAM SSH key.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SshKeyCheck {
    Registered,
    NotFound,
    Disabled,
    /// The lookup failed (API error); says nothing about the key.
    Error(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observations {
    pub private_key: SecretCheck,
    pub machine_config: SecretCheck,
    pub ssh_key: SshKeyCheck,
}

/// A condition before timestamps: what changed is decided on these fields.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Verdict {
    type_: &'static str,
    status: &'static str,
    reason: String,
    message: String,
}

fn verdict(type_: &'static str, status: &'static str, reason: &str, message: String) -> Verdict {
    Verdict {
        type_,
        status,
        reason: reason.to_string(),
        message,
    }
}

/// The full condition list for the NodeClass. `previous` is the current status:
/// a condition keeps its `lastTransitionTime` while its status does not change,
/// and a failed lookup (API error) keeps the previous verdict instead of
/// flapping the NodeClass (and every NodePool using it) to not-ready.
pub fn compute(
    spec: &NodeClassSpec,
    generation: Option<i64>,
    observed: &Observations,
    previous: &[Condition],
    now: &str,
) -> Vec<Condition> {
    let mut verdicts = vec![
        secrets_verdict(spec, observed),
        ssh_key_verdict(spec, &observed.ssh_key),
        image_verdict(spec),
    ];
    // An inconclusive lookup keeps the last conclusive answer.
    for v in verdicts.iter_mut() {
        if v.status == "Unknown"
            && let Some(prev) = previous.iter().find(|c| c.type_ == v.type_)
            && prev.status != "Unknown"
        {
            *v = Verdict {
                type_: v.type_,
                status: if prev.status == "True" {
                    "True"
                } else {
                    "False"
                },
                reason: prev.reason.clone(),
                message: prev.message.clone(),
            };
        }
    }
    verdicts.push(ready_verdict(&verdicts));
    verdicts
        .into_iter()
        .map(|v| {
            let since = previous
                .iter()
                .find(|c| c.type_ == v.type_ && c.status == v.status)
                .map(|c| c.last_transition_time.clone())
                .unwrap_or_else(|| now.to_string());
            Condition {
                type_: v.type_.to_string(),
                status: v.status.to_string(),
                reason: v.reason,
                message: v.message,
                last_transition_time: since,
                observed_generation: generation,
            }
        })
        .collect()
}

fn secrets_verdict(spec: &NodeClassSpec, observed: &Observations) -> Verdict {
    let refs = [
        (
            "rescue SSH private key",
            &spec.rescue_ssh_key.private_key_secret_ref,
            &observed.private_key,
        ),
        (
            "machine config",
            &spec.machine_config_secret_ref,
            &observed.machine_config,
        ),
    ];
    let mut unknown = Vec::new();
    for (what, r, check) in refs {
        let at = format!("{}/{} key {:?}", r.namespace, r.name, r.key);
        match check {
            SecretCheck::Present => {}
            SecretCheck::SecretNotFound => {
                return verdict(
                    SECRETS_RESOLVED,
                    "False",
                    "SecretNotFound",
                    format!("{what} Secret {}/{} not found", r.namespace, r.name),
                );
            }
            SecretCheck::KeyMissing => {
                return verdict(
                    SECRETS_RESOLVED,
                    "False",
                    "SecretKeyMissing",
                    format!("{what} Secret {at} is missing or empty"),
                );
            }
            SecretCheck::Error(e) => unknown.push(format!("reading {what} Secret {at}: {e}")),
        }
    }
    if unknown.is_empty() {
        verdict(SECRETS_RESOLVED, "True", "SecretsResolved", String::new())
    } else {
        verdict(
            SECRETS_RESOLVED,
            "Unknown",
            "SecretReadFailed",
            unknown.join("; "),
        )
    }
}

fn ssh_key_verdict(spec: &NodeClassSpec, check: &SshKeyCheck) -> Verdict {
    let id = &spec.rescue_ssh_key.iam_key_id;
    match check {
        SshKeyCheck::Registered => verdict(
            SSH_KEY_REGISTERED,
            "True",
            "SSHKeyRegistered",
            String::new(),
        ),
        SshKeyCheck::NotFound => verdict(
            SSH_KEY_REGISTERED,
            "False",
            "SSHKeyNotFound",
            format!("IAM SSH key {id} is not registered in the project"),
        ),
        SshKeyCheck::Disabled => verdict(
            SSH_KEY_REGISTERED,
            "False",
            "SSHKeyDisabled",
            format!("IAM SSH key {id} is disabled"),
        ),
        SshKeyCheck::Error(e) => verdict(
            SSH_KEY_REGISTERED,
            "Unknown",
            "SSHKeyLookupFailed",
            format!("listing IAM SSH keys: {e}"),
        ),
    }
}

fn image_verdict(spec: &NodeClassSpec) -> Verdict {
    match resolve_image_url(&spec.image, "amd64") {
        Ok(_) => verdict(
            IMAGE_TEMPLATE_VALID,
            "True",
            "ImageTemplateValid",
            String::new(),
        ),
        Err(e) => verdict(IMAGE_TEMPLATE_VALID, "False", "ImageTemplateInvalid", e),
    }
}

fn ready_verdict(parts: &[Verdict]) -> Verdict {
    let not_true: Vec<&Verdict> = parts.iter().filter(|v| v.status != "True").collect();
    if not_true.is_empty() {
        return verdict(READY, "True", "Ready", String::new());
    }
    let message = not_true
        .iter()
        .map(|v| format!("{}={}", v.type_, v.status))
        .collect::<Vec<_>>()
        .join(", ");
    if not_true.iter().any(|v| v.status == "False") {
        verdict(READY, "False", "NotReady", message)
    } else {
        verdict(READY, "Unknown", "AwaitingReconciliation", message)
    }
}

/// Whether the NodeClass's root condition is `Ready=True`.
pub fn is_ready(conditions: &[Condition]) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == READY && c.status == "True")
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::nodeclass::{Billing, RescueSshKey, SecretKeyRef, TalosImage};

    fn spec() -> NodeClassSpec {
        let secret = |name: &str, key: &str| SecretKeyRef {
            name: name.into(),
            namespace: "karpenter".into(),
            key: key.into(),
        };
        NodeClassSpec {
            zones: vec!["fr-par-2".into()],
            billing: Billing::Hourly,
            image: TalosImage {
                url_template:
                    "https://factory.talos.dev/image/{schematic}/{version}/metal-{arch}.raw.xz"
                        .into(),
                version: "v1.13.9".into(),
                schematic: "abc".into(),
                sha256: None,
            },
            install_disk: None,
            rescue_ssh_key: RescueSshKey {
                iam_key_id: "key-1".into(),
                private_key_secret_ref: secret("rescue-key", "id_ed25519"),
            },
            machine_config_secret_ref: secret("talos", "worker.yaml"),
            machine_config_patches: vec![],
            tags: vec![],
        }
    }

    fn all_good() -> Observations {
        Observations {
            private_key: SecretCheck::Present,
            machine_config: SecretCheck::Present,
            ssh_key: SshKeyCheck::Registered,
        }
    }

    fn get<'a>(conds: &'a [Condition], t: &str) -> &'a Condition {
        conds.iter().find(|c| c.type_ == t).unwrap()
    }

    #[test]
    fn all_true_is_ready() {
        let c = compute(&spec(), Some(3), &all_good(), &[], "T1");
        assert_eq!(c.len(), 4);
        assert!(
            c.iter()
                .all(|c| c.status == "True" && c.observed_generation == Some(3))
        );
        assert!(is_ready(&c));
        assert_eq!(get(&c, READY).last_transition_time, "T1");
    }

    #[test]
    fn missing_secret_or_key_is_not_ready() {
        let mut obs = all_good();
        obs.machine_config = SecretCheck::SecretNotFound;
        let c = compute(&spec(), Some(1), &obs, &[], "T1");
        assert_eq!(get(&c, SECRETS_RESOLVED).reason, "SecretNotFound");
        assert!(
            get(&c, SECRETS_RESOLVED)
                .message
                .contains("karpenter/talos")
        );
        assert_eq!(get(&c, READY).status, "False");
        assert!(!is_ready(&c));

        let mut obs = all_good();
        obs.private_key = SecretCheck::KeyMissing;
        let c = compute(&spec(), Some(1), &obs, &[], "T1");
        assert_eq!(get(&c, SECRETS_RESOLVED).reason, "SecretKeyMissing");
    }

    #[test]
    fn unregistered_or_disabled_key_is_not_ready() {
        for (check, reason) in [
            (SshKeyCheck::NotFound, "SSHKeyNotFound"),
            (SshKeyCheck::Disabled, "SSHKeyDisabled"),
        ] {
            let mut obs = all_good();
            obs.ssh_key = check;
            let c = compute(&spec(), Some(1), &obs, &[], "T1");
            assert_eq!(get(&c, SSH_KEY_REGISTERED).status, "False");
            assert_eq!(get(&c, SSH_KEY_REGISTERED).reason, reason);
            assert_eq!(get(&c, READY).status, "False");
        }
    }

    #[test]
    fn bad_template_is_not_ready() {
        let mut s = spec();
        s.image.url_template = "https://x/{flavour}.raw.xz".into();
        let c = compute(&s, Some(1), &all_good(), &[], "T1");
        assert_eq!(get(&c, IMAGE_TEMPLATE_VALID).status, "False");
        assert!(get(&c, IMAGE_TEMPLATE_VALID).message.contains("flavour"));
    }

    #[test]
    fn api_error_keeps_previous_verdict_or_is_unknown() {
        let mut obs = all_good();
        obs.ssh_key = SshKeyCheck::Error("HTTP 503".into());
        let first = compute(&spec(), Some(1), &obs, &[], "T1");
        assert_eq!(get(&first, SSH_KEY_REGISTERED).status, "Unknown");
        assert_eq!(get(&first, READY).status, "Unknown");

        let ready = compute(&spec(), Some(1), &all_good(), &[], "T1");
        let later = compute(&spec(), Some(1), &obs, &ready, "T2");
        assert_eq!(
            later, ready,
            "a transient error must not change a conclusive status"
        );
    }

    #[test]
    fn transition_time_moves_only_on_status_change() {
        let ready = compute(&spec(), Some(1), &all_good(), &[], "T1");
        let same = compute(&spec(), Some(2), &all_good(), &ready, "T2");
        assert_eq!(get(&same, READY).last_transition_time, "T1");
        assert_eq!(get(&same, READY).observed_generation, Some(2));

        let mut obs = all_good();
        obs.ssh_key = SshKeyCheck::NotFound;
        let broken = compute(&spec(), Some(2), &obs, &same, "T3");
        assert_eq!(get(&broken, READY).last_transition_time, "T3");
        assert_eq!(get(&broken, SECRETS_RESOLVED).last_transition_time, "T1");
    }
}
