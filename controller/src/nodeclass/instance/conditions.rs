//! `ScalewayInstanceNodeClass` status, computed from one snapshot of what the
//! reconciler observed (house style §7), in the style of the Elastic Metal
//! conditions and finished by the same code (`Ready`, kept verdicts on an
//! inconclusive check, transition times).

use crate::nodeclass::SecretKeyRef;
use crate::nodeclass::conditions::{SecretCheck, Verdict, finish, ok, verdict};
use crate::nodeclass::content_check::Problem;

use super::{ImageArch, InstanceNodeClassSpec, InstanceNodeClassStatus, ResolvedImage};

pub const CREDENTIALS_VALID: &str = "CredentialsValid";
pub const IMAGE_RESOLVED: &str = "ImageResolved";
pub const SECURITY_GROUP_FOUND: &str = "SecurityGroupFound";
pub use crate::nodeclass::conditions::{MACHINE_CONFIG_VALID, READY};

/// What the lookup of the image of one (zone, architecture) found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ImageOutcome {
    Resolved {
        id: String,
        name: String,
    },
    /// No image matches the selector, or `image.ids` lists none for the pair.
    NotFound,
    /// `image.ids` names an image the zone does not have.
    IdNotFound {
        id: String,
    },
    /// `image.ids` names an image of another architecture.
    WrongArch {
        id: String,
        actual: String,
    },
    /// The image exists but cannot boot a VM yet (`creating`, `error`).
    NotAvailable {
        id: String,
        state: String,
    },
    /// 401/403: Scaleway refused the provider's credentials.
    Refused(String),
    /// The lookup failed (5xx, 429, timeout); says nothing about the image.
    Error(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ImageLookup {
    pub zone: String,
    pub arch: ImageArch,
    pub outcome: ImageOutcome,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupCheck {
    Found,
    NotFound,
    Refused(String),
    Error(String),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Observations {
    /// The zones the NodeClass covers (its own, or the provider's).
    pub zones: Vec<String>,
    pub images: Vec<ImageLookup>,
    /// `None` when `securityGroupId` is not set.
    pub security_group: Option<GroupCheck>,
    pub machine_config: SecretCheck,
    /// `None` when the machine config could not be read.
    pub machine_config_content: Option<Result<(), Problem>>,
    /// `spec.privateNetwork` judged (`None` when it is not set).
    pub private_network: Option<crate::nodeclass::Resolution>,
}

/// The whole status: the conditions and the resolved images. `previous` is
/// the current status: an image whose lookup was inconclusive keeps the id
/// it resolved to for the same generation.
pub fn compute(
    spec: &InstanceNodeClassSpec,
    generation: Option<i64>,
    observed: &Observations,
    previous: &InstanceNodeClassStatus,
    now: &str,
) -> InstanceNodeClassStatus {
    let images = resolved_images(generation, observed, previous);
    let mut verdicts = vec![
        credentials_verdict(observed),
        image_verdict(observed, &images),
        security_group_verdict(spec, observed),
        machine_config_verdict(&spec.machine_config_secret_ref, observed),
    ];
    let mut private_networks = Vec::new();
    if let Some(resolution) = &observed.private_network {
        verdicts.push(crate::nodeclass::private_network_verdict(resolution));
        private_networks =
            crate::nodeclass::status_networks(resolution, &previous.private_networks);
    }
    InstanceNodeClassStatus {
        conditions: finish(verdicts, generation, &previous.conditions, now),
        images,
        private_networks,
    }
}

fn same_generation(previous: &InstanceNodeClassStatus, generation: Option<i64>) -> bool {
    previous
        .conditions
        .iter()
        .any(|c| c.type_ == IMAGE_RESOLVED && c.observed_generation == generation)
}

fn resolved_images(
    generation: Option<i64>,
    observed: &Observations,
    previous: &InstanceNodeClassStatus,
) -> Vec<ResolvedImage> {
    let keep = same_generation(previous, generation);
    let mut out: Vec<ResolvedImage> = observed
        .images
        .iter()
        .filter_map(|l| match &l.outcome {
            ImageOutcome::Resolved { id, name } => Some(ResolvedImage {
                zone: l.zone.clone(),
                arch: l.arch.as_str().to_string(),
                id: id.clone(),
                name: name.clone(),
            }),
            ImageOutcome::Refused(_) | ImageOutcome::Error(_) if keep => previous
                .images
                .iter()
                .find(|p| p.zone == l.zone && p.arch == l.arch.as_str())
                .cloned(),
            _ => None,
        })
        .collect();
    out.sort_by(|a, b| (&a.zone, &a.arch).cmp(&(&b.zone, &b.arch)));
    out
}

fn credentials_verdict(observed: &Observations) -> Verdict {
    let refused = observed.images.iter().find_map(|l| match &l.outcome {
        ImageOutcome::Refused(e) => Some(e.clone()),
        _ => None,
    });
    let refused = refused.or_else(|| match &observed.security_group {
        Some(GroupCheck::Refused(e)) => Some(e.clone()),
        _ => None,
    });
    if let Some(e) = refused {
        return verdict(
            CREDENTIALS_VALID,
            "False",
            "CredentialsRefused",
            format!(
                "Scaleway refused the provider's credentials when looking up Instance images ({e}): check the secret key the provider runs with (SCW_SECRET_KEY) and that its IAM policy grants InstancesFullAccess and BlockStorageFullAccess in the project (SCW_DEFAULT_PROJECT_ID)"
            ),
        );
    }
    let answered = observed
        .images
        .iter()
        .any(|l| !matches!(l.outcome, ImageOutcome::Error(_)));
    if !answered
        && let Some(e) = observed.images.iter().find_map(|l| match &l.outcome {
            ImageOutcome::Error(e) => Some(e.clone()),
            _ => None,
        })
    {
        return verdict(
            CREDENTIALS_VALID,
            "Unknown",
            "CredentialsCheckFailed",
            format!("looking up Instance images: {e}"),
        );
    }
    ok(CREDENTIALS_VALID)
}

fn image_verdict(observed: &Observations, images: &[ResolvedImage]) -> Verdict {
    if observed.zones.is_empty() {
        return verdict(
            IMAGE_RESOLVED,
            "False",
            "NoZone",
            "the NodeClass covers no zone: set spec.zones, or the zones the provider serves (SCW_ZONES)".to_string(),
        );
    }
    let mut problems = Vec::new();
    let mut transient = Vec::new();
    let mut unused = Vec::new();
    for l in &observed.images {
        let (zone, arch) = (&l.zone, l.arch.as_str());
        match &l.outcome {
            ImageOutcome::Resolved { .. } => {}
            ImageOutcome::NotFound => unused.push(format!("{arch} in {zone}")),
            ImageOutcome::WrongArch { id, actual } => problems.push((
                "ImageWrongArch",
                format!(
                    "image {id} given for {arch} in {zone} is an {actual} image: give the id of the {arch} image of that zone in spec.image.ids"
                ),
            )),
            ImageOutcome::IdNotFound { id } => problems.push((
                "ImageNotFound",
                format!(
                    "image {id} given for {arch} in {zone} does not exist in {zone}: images are per zone; give the id of the image imported there (`scw instance image list zone={zone}`) in spec.image.ids"
                ),
            )),
            // Not fatal while another architecture serves the zone: only
            // this one's types wait for the import.
            ImageOutcome::NotAvailable { id, state } => {
                let message = format!(
                    "image {id} ({arch} in {zone}) is {state}, not available: wait for the import to finish, or import the Talos scaleway image again (docs/instance-nodeclass.md)"
                );
                if images.iter().any(|i| &i.zone == zone) {
                    unused.push(format!("{arch} in {zone} (image {id} is {state})"));
                } else {
                    problems.push(("ImageNotAvailable", message));
                }
            }
            ImageOutcome::Refused(_) => {
                transient.push(format!("{arch} in {zone}: see CredentialsValid"))
            }
            ImageOutcome::Error(e) => transient.push(format!("{arch} in {zone}: {e}")),
        }
    }
    if let Some((reason, message)) = problems.into_iter().next() {
        return verdict(IMAGE_RESOLVED, "False", reason, message);
    }
    // Every zone needs an image of some architecture; a missing pair only
    // keeps the types of that architecture out of that zone.
    let bare: Vec<&String> = observed
        .zones
        .iter()
        .filter(|z| !images.iter().any(|i| &i.zone == *z))
        .collect();
    if !transient.is_empty() && !bare.is_empty() {
        return verdict(
            IMAGE_RESOLVED,
            "Unknown",
            "ImageLookupFailed",
            transient.join("; "),
        );
    }
    if !bare.is_empty() {
        let zones: Vec<&str> = bare.iter().map(|z| z.as_str()).collect();
        return verdict(
            IMAGE_RESOLVED,
            "False",
            "ImageNotFound",
            format!(
                "no Talos image matches spec.image in {}: import the Talos scaleway image (factory.talos.dev .../scaleway-<arch>.raw.zst) into each zone (docs/instance-nodeclass.md), then name it in spec.image (ids, or name and/or tags)",
                zones.join(", ")
            ),
        );
    }
    let mut message = String::new();
    if !unused.is_empty() {
        message = format!(
            "no image for {}: types of that architecture are not offered there",
            unused.join(", ")
        );
    }
    verdict(IMAGE_RESOLVED, "True", IMAGE_RESOLVED, message)
}

fn security_group_verdict(spec: &InstanceNodeClassSpec, observed: &Observations) -> Verdict {
    let id = spec.security_group_id.as_deref().unwrap_or_default();
    let zone = observed.zones.first().map(String::as_str).unwrap_or("?");
    match &observed.security_group {
        None => verdict(
            SECURITY_GROUP_FOUND,
            "True",
            "DefaultSecurityGroup",
            "securityGroupId is not set: VMs get the zone's default security group".to_string(),
        ),
        Some(GroupCheck::Found) => ok(SECURITY_GROUP_FOUND),
        Some(GroupCheck::NotFound) => verdict(
            SECURITY_GROUP_FOUND,
            "False",
            "SecurityGroupNotFound",
            format!(
                "security group {id} does not exist in {zone}: set spec.securityGroupId to a group of that zone (`scw instance security-group list zone={zone}`), or unset it"
            ),
        ),
        Some(GroupCheck::Refused(_)) => verdict(
            SECURITY_GROUP_FOUND,
            "Unknown",
            "CredentialsRefused",
            "the security group cannot be read: see CredentialsValid".to_string(),
        ),
        Some(GroupCheck::Error(e)) => verdict(
            SECURITY_GROUP_FOUND,
            "Unknown",
            "SecurityGroupLookupFailed",
            format!("reading security group {id}: {e}"),
        ),
    }
}

/// As for Elastic Metal, and the Secret's own problems said here (this kind
/// has no other Secret to sum up in a SecretsResolved).
fn machine_config_verdict(r: &SecretKeyRef, observed: &Observations) -> Verdict {
    let at = format!("Secret {}/{} key {:?}", r.namespace, r.name, r.key);
    match (&observed.machine_config, &observed.machine_config_content) {
        (SecretCheck::Present, Some(Ok(()))) => ok(MACHINE_CONFIG_VALID),
        (SecretCheck::Present, Some(Err(p))) => {
            verdict(MACHINE_CONFIG_VALID, "False", p.reason, p.message.clone())
        }
        (SecretCheck::SecretNotFound, _) => verdict(
            MACHINE_CONFIG_VALID,
            "False",
            "SecretNotFound",
            format!(
                "machine config Secret {}/{} not found: create it in namespace {} with key {:?} (the worker.yaml of `talosctl gen config`)",
                r.namespace, r.name, r.namespace, r.key
            ),
        ),
        (SecretCheck::KeyMissing, _) => verdict(
            MACHINE_CONFIG_VALID,
            "False",
            "SecretKeyMissing",
            format!("machine config {at} is missing or empty: add the key to the Secret"),
        ),
        (SecretCheck::Error(e), _) => verdict(
            MACHINE_CONFIG_VALID,
            "Unknown",
            "SecretReadFailed",
            format!("reading machine config {at}: {e}"),
        ),
        (SecretCheck::Present, None) => verdict(
            MACHINE_CONFIG_VALID,
            "Unknown",
            "MachineConfigNotRead",
            format!("machine config {at} was not read"),
        ),
    }
}

#[cfg(test)]
#[path = "conditions_tests.rs"]
mod tests;
