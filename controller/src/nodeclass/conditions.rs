//! NodeClass status conditions, computed from one snapshot of what the
//! reconciler observed (house style §7): a pure function, so every outcome is
//! unit-tested without a cluster.
//!
//! `Ready` is the root condition Karpenter reads: it is `True` only when every
//! sub-condition is, and otherwise carries the reason and message of the first
//! sub-condition that is not (in the order of [`compute`]), so that
//! `kubectl get` of the NodeClass says what is wrong and what to fix.

use super::content_check::{PrivateKeyCheck, Problem, key_body};
use super::image_check::{Probe, Verification};
use super::{Condition, NodeClassSpec, resolve_image_url};

pub const READY: &str = "Ready";
pub const CREDENTIALS_VALID: &str = "CredentialsValid";
pub const SSH_KEY_REGISTERED: &str = "SSHKeyRegistered";
pub const SECRETS_RESOLVED: &str = "SecretsResolved";
pub const MACHINE_CONFIG_VALID: &str = "MachineConfigValid";
pub const IMAGE_TEMPLATE_VALID: &str = "ImageTemplateValid";
pub const IMAGE_REACHABLE: &str = "ImageReachable";
pub const IMAGE_VERIFIED: &str = "ImageVerified";

/// What the reconciler found for one Secret reference.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretCheck {
    Present,
    SecretNotFound,
    KeyMissing,
    /// The read failed (API error); says nothing about the Secret.
    Error(String),
}

/// What the reconciler found for the IAM SSH key (the listing of the
/// project's keys is also the check of the provider's credentials).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SshKeyCheck {
    /// Registered and enabled; its public half as IAM stores it.
    Registered {
        public_key: String,
    },
    NotFound,
    Disabled,
    /// 401/403: Scaleway refused the provider's credentials.
    Refused(String),
    /// The lookup failed (5xx, 429, timeout); says nothing about the key.
    Error(String),
}

/// Where the whole-image checksum verification of one URL stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum VerifyState {
    Running,
    Done(Verification),
}

/// The image as seen for one architecture the NodeClass may be installed on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageArch {
    pub arch: String,
    pub url: String,
    pub probe: Probe,
    /// `Some` when `image.sha256` pins this architecture.
    pub verification: Option<VerifyState>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observations {
    pub ssh_key: SshKeyCheck,
    pub private_key: SecretCheck,
    pub machine_config: SecretCheck,
    /// `None` when the private key could not be read.
    pub private_key_content: Option<PrivateKeyCheck>,
    /// `None` when the machine config could not be read.
    pub machine_config_content: Option<Result<(), Problem>>,
    /// One entry per architecture checked; empty when the URL template does
    /// not resolve.
    pub image: Vec<ImageArch>,
    /// `spec.privateNetwork` judged (`None` when it is not set).
    pub private_network: Option<super::Resolution>,
}

/// A condition before timestamps: what changed is decided on these fields.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Verdict {
    pub(super) type_: &'static str,
    pub(super) status: &'static str,
    pub(super) reason: String,
    pub(super) message: String,
}

pub(super) fn verdict(
    type_: &'static str,
    status: &'static str,
    reason: &str,
    message: String,
) -> Verdict {
    Verdict {
        type_,
        status,
        reason: reason.to_string(),
        message,
    }
}

pub(super) fn ok(type_: &'static str) -> Verdict {
    verdict(type_, "True", type_, String::new())
}

/// The full condition list for the NodeClass. `previous` is the current status:
/// a condition keeps its `lastTransitionTime` while its status does not change.
/// An inconclusive check (an API error, a timeout, a 5xx, a download still
/// running) keeps the previous conclusive verdict of the same generation
/// instead of flapping the NodeClass (and every NodePool using it) to
/// not-ready; after a spec change there is no such verdict, and the condition
/// is `Unknown` until the check concludes.
pub fn compute(
    spec: &NodeClassSpec,
    generation: Option<i64>,
    observed: &Observations,
    previous: &[Condition],
    now: &str,
) -> Vec<Condition> {
    let template = image_template_verdict(spec);
    let template_ok = template.status == "True";
    let mut verdicts = vec![
        credentials_verdict(&observed.ssh_key),
        ssh_key_verdict(spec, observed),
        secrets_verdict(spec, observed),
        machine_config_verdict(observed),
        template,
        image_reachable_verdict(template_ok, &observed.image),
        image_verified_verdict(spec, template_ok, &observed.image),
    ];
    if let Some(resolution) = &observed.private_network {
        verdicts.push(super::private_network_verdict(resolution));
    }
    finish(verdicts, generation, previous, now)
}

/// The sub-verdicts made conditions (shared by both NodeClass kinds): an
/// inconclusive one keeps the previous conclusive verdict of the same
/// generation, `Ready` sums them up, and a condition keeps its
/// `lastTransitionTime` while its status does not change.
pub(super) fn finish(
    mut verdicts: Vec<Verdict>,
    generation: Option<i64>,
    previous: &[Condition],
    now: &str,
) -> Vec<Condition> {
    for v in verdicts.iter_mut() {
        if v.status == "Unknown"
            && let Some(prev) = previous.iter().find(|c| c.type_ == v.type_)
            && prev.status != "Unknown"
            && prev.observed_generation == generation
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

fn credentials_verdict(check: &SshKeyCheck) -> Verdict {
    match check {
        SshKeyCheck::Refused(e) => verdict(
            CREDENTIALS_VALID,
            "False",
            "CredentialsRefused",
            format!(
                "Scaleway refused the provider's credentials when listing the project's IAM SSH keys ({e}): check the secret key the provider runs with (SCW_SECRET_KEY) and that its IAM policy grants ElasticMetalFullAccess and SSHKeysReadOnly in the project (SCW_DEFAULT_PROJECT_ID)"
            ),
        ),
        SshKeyCheck::Error(e) => verdict(
            CREDENTIALS_VALID,
            "Unknown",
            "CredentialsCheckFailed",
            format!("listing IAM SSH keys: {e}"),
        ),
        _ => ok(CREDENTIALS_VALID),
    }
}

fn ssh_key_verdict(spec: &NodeClassSpec, observed: &Observations) -> Verdict {
    let id = &spec.rescue_ssh_key.iam_key_id;
    let r = &spec.rescue_ssh_key.private_key_secret_ref;
    match &observed.ssh_key {
        SshKeyCheck::Registered { public_key } => match &observed.private_key_content {
            Some(PrivateKeyCheck::Public(ours)) if *ours != key_body(public_key) => verdict(
                SSH_KEY_REGISTERED,
                "False",
                "SSHKeyMismatch",
                format!(
                    "the private key in Secret {}/{} key {:?} is not the private half of IAM SSH key {id}: the rescue system would refuse it; store the matching private key, or set rescueSshKey.iamKeyId to the key registered for it",
                    r.namespace, r.name, r.key
                ),
            ),
            _ => ok(SSH_KEY_REGISTERED),
        },
        SshKeyCheck::NotFound => verdict(
            SSH_KEY_REGISTERED,
            "False",
            "SSHKeyNotFound",
            format!(
                "IAM SSH key {id} is not registered in the provider's project: register the public key (`scw iam ssh-key create`) and set rescueSshKey.iamKeyId to its id (`scw iam ssh-key list`)"
            ),
        ),
        SshKeyCheck::Disabled => verdict(
            SSH_KEY_REGISTERED,
            "False",
            "SSHKeyDisabled",
            format!("IAM SSH key {id} is disabled: enable it (`scw iam ssh-key enable`)"),
        ),
        SshKeyCheck::Refused(_) => verdict(
            SSH_KEY_REGISTERED,
            "Unknown",
            "CredentialsRefused",
            "the IAM SSH keys cannot be listed: see CredentialsValid".to_string(),
        ),
        SshKeyCheck::Error(e) => verdict(
            SSH_KEY_REGISTERED,
            "Unknown",
            "SSHKeyLookupFailed",
            format!("listing IAM SSH keys: {e}"),
        ),
    }
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
                    format!(
                        "{what} Secret {}/{} not found: create it in namespace {} with key {:?}",
                        r.namespace, r.name, r.namespace, r.key
                    ),
                );
            }
            SecretCheck::KeyMissing => {
                return verdict(
                    SECRETS_RESOLVED,
                    "False",
                    "SecretKeyMissing",
                    format!("{what} Secret {at} is missing or empty: add the key to the Secret"),
                );
            }
            SecretCheck::Error(e) => unknown.push(format!("reading {what} Secret {at}: {e}")),
        }
    }
    if let Some(PrivateKeyCheck::Invalid(p)) = &observed.private_key_content {
        return verdict(SECRETS_RESOLVED, "False", p.reason, p.message.clone());
    }
    if unknown.is_empty() {
        ok(SECRETS_RESOLVED)
    } else {
        verdict(
            SECRETS_RESOLVED,
            "Unknown",
            "SecretReadFailed",
            unknown.join("; "),
        )
    }
}

fn machine_config_verdict(observed: &Observations) -> Verdict {
    match (&observed.machine_config, &observed.machine_config_content) {
        (SecretCheck::Present, Some(Ok(()))) => ok(MACHINE_CONFIG_VALID),
        (SecretCheck::Present, Some(Err(p))) => {
            verdict(MACHINE_CONFIG_VALID, "False", p.reason, p.message.clone())
        }
        (SecretCheck::SecretNotFound | SecretCheck::KeyMissing, _) => verdict(
            MACHINE_CONFIG_VALID,
            "False",
            "MachineConfigMissing",
            "the machine config Secret cannot be read: see SecretsResolved".to_string(),
        ),
        _ => verdict(
            MACHINE_CONFIG_VALID,
            "Unknown",
            "MachineConfigNotRead",
            "the machine config Secret could not be read: see SecretsResolved".to_string(),
        ),
    }
}

fn image_template_verdict(spec: &NodeClassSpec) -> Verdict {
    match resolve_image_url(&spec.image, "amd64") {
        Ok(_) => ok(IMAGE_TEMPLATE_VALID),
        Err(e) => verdict(
            IMAGE_TEMPLATE_VALID,
            "False",
            "ImageTemplateInvalid",
            format!("{e}: fix spec.image.urlTemplate"),
        ),
    }
}

fn image_reachable_verdict(template_ok: bool, image: &[ImageArch]) -> Verdict {
    if !template_ok {
        return verdict(
            IMAGE_REACHABLE,
            "Unknown",
            "ImageTemplateInvalid",
            "see ImageTemplateValid".to_string(),
        );
    }
    let mut transient = Vec::new();
    for a in image {
        let url = &a.url;
        let problem = match &a.probe {
            Probe::Reachable => continue,
            Probe::NotFound(status) => (
                "ImageNotFound",
                format!(
                    "the {} image {url} answers HTTP {status}: check spec.image (urlTemplate, version, schematic) names an image that exists",
                    a.arch
                ),
            ),
            Probe::Refused(status) => (
                "ImageURLRefused",
                format!(
                    "the {} image {url} answers HTTP {status}: the server refuses to serve it; use a URL the provider may download without credentials",
                    a.arch
                ),
            ),
            Probe::Unreachable(e) => (
                "ImageUnreachable",
                format!(
                    "the {} image {url} cannot be reached ({e}): check the host name in spec.image.urlTemplate and that the provider (and the servers' rescue system) can reach it",
                    a.arch
                ),
            ),
            Probe::Transient(e) => {
                transient.push(format!("{url}: {e}"));
                continue;
            }
        };
        return verdict(IMAGE_REACHABLE, "False", problem.0, problem.1);
    }
    if transient.is_empty() {
        ok(IMAGE_REACHABLE)
    } else {
        verdict(
            IMAGE_REACHABLE,
            "Unknown",
            "ImageCheckFailed",
            transient.join("; "),
        )
    }
}

fn image_verified_verdict(spec: &NodeClassSpec, template_ok: bool, image: &[ImageArch]) -> Verdict {
    if spec.image.sha256.as_ref().is_none_or(|m| m.is_empty()) {
        return verdict(
            IMAGE_VERIFIED,
            "True",
            "NoChecksum",
            "image.sha256 is not set: the image is not verified before installs".to_string(),
        );
    }
    if !template_ok {
        return verdict(
            IMAGE_VERIFIED,
            "Unknown",
            "ImageTemplateInvalid",
            "see ImageTemplateValid".to_string(),
        );
    }
    let expected = |arch: &str| {
        spec.image
            .sha256
            .as_ref()
            .and_then(|m| m.get(arch))
            .cloned()
            .unwrap_or_default()
    };
    let mut pending = Vec::new();
    let mut verified = Vec::new();
    for a in image {
        let url = &a.url;
        match &a.verification {
            None => {}
            // 0 bytes: verified for this generation before a restart.
            Some(VerifyState::Done(Verification::Matches { bytes: 0 })) => {
                verified.push(url.clone());
            }
            Some(VerifyState::Done(Verification::Matches { bytes })) => {
                verified.push(format!("{url} ({bytes} bytes)"));
            }
            Some(VerifyState::Done(Verification::Mismatch { actual, bytes })) => {
                return verdict(
                    IMAGE_VERIFIED,
                    "False",
                    "ImageChecksumMismatch",
                    format!(
                        "the {arch} image {url} decompresses to {bytes} bytes with sha256 {actual}, not image.sha256.{arch} {want}: correct image.sha256.{arch}, or the image (version, schematic) it is meant for",
                        arch = a.arch,
                        want = expected(&a.arch),
                    ),
                );
            }
            Some(VerifyState::Done(Verification::Failed(e))) => {
                pending.push(format!("verifying {url}: {e} (retried)"));
            }
            Some(VerifyState::Running) => {
                pending.push(format!("downloading {url} to check its sha256"));
            }
        }
    }
    if !pending.is_empty() {
        return verdict(
            IMAGE_VERIFIED,
            "Unknown",
            "ImageVerifying",
            pending.join("; "),
        );
    }
    verdict(
        IMAGE_VERIFIED,
        "True",
        "ImageChecksumVerified",
        format!("sha256 verified: {}", verified.join(", ")),
    )
}

fn ready_verdict(parts: &[Verdict]) -> Verdict {
    let first = |status: &'static str| parts.iter().find(|v| v.status == status);
    if let Some(cause) = first("False").or_else(|| first("Unknown")) {
        let others: Vec<String> = parts
            .iter()
            .filter(|v| v.status != "True" && v.type_ != cause.type_)
            .map(|v| format!("{}={} ({})", v.type_, v.status, v.reason))
            .collect();
        let mut message = format!("{}: {}", cause.type_, cause.message);
        if !others.is_empty() {
            message.push_str(&format!("; also {}", others.join(", ")));
        }
        return verdict(READY, cause.status, &cause.reason, message);
    }
    verdict(READY, "True", "Ready", String::new())
}

/// Whether the NodeClass's root condition is `Ready=True`.
pub fn is_ready(conditions: &[Condition]) -> bool {
    conditions
        .iter()
        .any(|c| c.type_ == READY && c.status == "True")
}

/// A NodeClass's root `Ready` condition as Create reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Readiness {
    /// `Ready=True` for the current generation.
    Ready,
    /// `Ready=False` for the current generation: the reconciler's verdict.
    NotReady,
    /// Not reconciled yet (no condition, `Unknown`, or a verdict on an older
    /// generation): a wait, not a verdict. Karpenter's providers answer
    /// Create with a retryable error here, not NodeClassNotReady, since core
    /// deletes a NodeClaim refused as NodeClassNotReady.
    Unknown,
}

impl Readiness {
    pub fn is_ready(self) -> bool {
        self == Readiness::Ready
    }
}

/// The root `Ready` condition for this `generation` of the spec (any
/// generation when `generation` is `None`).
pub fn readiness_at(conditions: &[Condition], generation: Option<i64>) -> Readiness {
    let current = conditions.iter().find(|c| {
        c.type_ == READY && (generation.is_none() || c.observed_generation == generation)
    });
    match current.map(|c| c.status.as_str()) {
        Some("True") => Readiness::Ready,
        Some("False") => Readiness::NotReady,
        _ => Readiness::Unknown,
    }
}

/// Whether `Ready=True` was reached for this `generation` of the spec: a
/// verdict on an older spec says nothing about the current one (Karpenter
/// core reads such a condition as Unknown too).
pub fn is_ready_at(conditions: &[Condition], generation: Option<i64>) -> bool {
    conditions.iter().any(|c| {
        c.type_ == READY
            && c.status == "True"
            && (generation.is_none() || c.observed_generation == generation)
    })
}

#[cfg(test)]
#[path = "conditions_tests.rs"]
mod tests;
