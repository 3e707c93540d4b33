//! What the Instance NodeClass reconciler asks Scaleway, through the narrow
//! [`Instance`] trait (so the unit tests run it on the fake): the image of
//! each (zone, architecture), and the security group when one is set.

use futures::future::join_all;

use super::conditions::{GroupCheck, ImageLookup, ImageOutcome};
use super::{ImageArch, InstanceNodeClassSpec};
use crate::scaleway::ApiError;
use crate::scaleway::instance::{Arch, Image, ImageFilter, ImageState, Instance};

fn arch_of(arch: ImageArch) -> Arch {
    match arch {
        ImageArch::Amd64 => Arch::X86_64,
        ImageArch::Arm64 => Arch::Arm64,
    }
}

fn failed(e: ApiError) -> ImageOutcome {
    match e {
        ApiError::NotFound(_) => ImageOutcome::NotFound,
        e @ ApiError::Unauthorized(_) => ImageOutcome::Refused(e.to_string()),
        e => ImageOutcome::Error(e.to_string()),
    }
}

fn state_name(state: ImageState) -> String {
    match state {
        ImageState::Available => "available",
        ImageState::Creating => "creating",
        ImageState::Error => "in error",
        ImageState::Other => "in an unknown state",
    }
    .to_string()
}

/// The image of every (zone, architecture) the NodeClass covers, one lookup
/// per zone (name/tags) or per listed id, zones in parallel.
pub async fn lookup_images(
    api: &dyn Instance,
    spec: &InstanceNodeClassSpec,
    zones: &[String],
    project: &str,
) -> Vec<ImageLookup> {
    let per_zone = zones.iter().map(|zone| async move {
        if spec.image.ids.is_empty() {
            by_selector(api, spec, zone, project).await
        } else {
            by_ids(api, spec, zone).await
        }
    });
    join_all(per_zone).await.into_iter().flatten().collect()
}

async fn by_ids(api: &dyn Instance, spec: &InstanceNodeClassSpec, zone: &str) -> Vec<ImageLookup> {
    let mut out = Vec::new();
    for arch in ImageArch::ALL {
        let Some(entry) = spec
            .image
            .ids
            .iter()
            .find(|e| e.zone == zone && e.arch == arch)
        else {
            out.push(lookup(zone, arch, ImageOutcome::NotFound));
            continue;
        };
        let outcome = match api.get_image(zone, &entry.id).await {
            Ok(image) if image.arch != arch_of(arch) => ImageOutcome::WrongArch {
                id: image.id,
                actual: image.arch.kubernetes().unwrap_or("unknown").to_string(),
            },
            Ok(image) => judge(&[image]),
            Err(ApiError::NotFound(_)) => ImageOutcome::IdNotFound {
                id: entry.id.clone(),
            },
            Err(e) => failed(e),
        };
        out.push(lookup(zone, arch, outcome));
    }
    out
}

async fn by_selector(
    api: &dyn Instance,
    spec: &InstanceNodeClassSpec,
    zone: &str,
    project: &str,
) -> Vec<ImageLookup> {
    let filter = ImageFilter {
        name: Some(spec.image.name.clone()).filter(|n| !n.is_empty()),
        tags: spec.image.tags.clone(),
        project: Some(project.to_string()).filter(|p| !p.is_empty()),
        arch: None,
    };
    match api.list_images(zone, &filter).await {
        Ok(images) => ImageArch::ALL
            .into_iter()
            .map(|arch| {
                let mine: Vec<Image> = images
                    .iter()
                    .filter(|i| i.arch == arch_of(arch))
                    .cloned()
                    .collect();
                lookup(zone, arch, judge(&mine))
            })
            .collect(),
        Err(e) => {
            let outcome = failed(e);
            ImageArch::ALL
                .into_iter()
                .map(|arch| lookup(zone, arch, outcome.clone()))
                .collect()
        }
    }
}

/// The newest available image among `images` (RFC 3339 dates sort as
/// text), or why none can boot a VM.
fn judge(images: &[Image]) -> ImageOutcome {
    let newest = images
        .iter()
        .filter(|i| i.state == ImageState::Available)
        .max_by(|a, b| (&a.creation_date, &a.id).cmp(&(&b.creation_date, &b.id)));
    match (newest, images.first()) {
        (Some(i), _) => ImageOutcome::Resolved {
            id: i.id.clone(),
            name: i.name.clone(),
        },
        (None, Some(i)) => ImageOutcome::NotAvailable {
            id: i.id.clone(),
            state: state_name(i.state),
        },
        (None, None) => ImageOutcome::NotFound,
    }
}

fn lookup(zone: &str, arch: ImageArch, outcome: ImageOutcome) -> ImageLookup {
    ImageLookup {
        zone: zone.to_string(),
        arch,
        outcome,
    }
}

/// `None` when no security group is set; groups are per zone and the CRD
/// requires a single zone with one.
pub async fn check_security_group(
    api: &dyn Instance,
    spec: &InstanceNodeClassSpec,
    zones: &[String],
) -> Option<GroupCheck> {
    let id = spec.security_group_id.as_deref()?;
    let zone = zones.first()?;
    Some(match api.get_security_group(zone, id).await {
        Ok(_) => GroupCheck::Found,
        Err(ApiError::NotFound(_)) => GroupCheck::NotFound,
        Err(e @ ApiError::Unauthorized(_)) => GroupCheck::Refused(e.to_string()),
        Err(e) => GroupCheck::Error(e.to_string()),
    })
}
