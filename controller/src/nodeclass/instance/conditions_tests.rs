//! Each condition of the Instance NodeClass, observed through the fake
//! Instance API (`observe`) and computed by the pure `compute`.

use super::*;
use crate::nodeclass::content_check::check_machine_config;
use crate::nodeclass::instance::observe::{check_security_group, lookup_images};
use crate::nodeclass::instance::{InstanceImageSelector, PublicIpMode, ZoneImage};
use crate::scaleway::ApiError;
use crate::scaleway::instance::fake::{FakeInstance, Op};
use crate::scaleway::instance::{Arch, Image, ImageState, SecurityGroup};

const PAR: &str = "fr-par-2";
const AMS: &str = "nl-ams-1";
const NOW: &str = "2026-11-24T13:00:00Z";
const WORKER: &str = "version: v1alpha1\nmachine:\n  type: worker\ncluster:\n  controlPlane:\n    endpoint: https://10.0.0.1:6443\n";
const SG: &str = "11111111-2222-4333-8444-555555555555";

fn spec(zones: &[&str]) -> InstanceNodeClassSpec {
    InstanceNodeClassSpec {
        zones: zones.iter().map(|z| z.to_string()).collect(),
        image: InstanceImageSelector {
            ids: vec![],
            name: "talos-v1.13.9".into(),
            tags: vec!["talos".into()],
        },
        root_volume: None,
        security_group_id: None,
        placement_group_id: None,
        public_ip: PublicIpMode::Dynamic,
        machine_config_secret_ref: SecretKeyRef {
            name: "talos".into(),
            namespace: "karpenter".into(),
            key: "worker.yaml".into(),
        },
        machine_config_patches: vec![],
        tags: vec![],
        private_network: None,
    }
}

fn image(id: &str, zone: &str, arch: Arch, state: ImageState, created: &str) -> Image {
    Image {
        id: id.into(),
        name: "talos-v1.13.9".into(),
        arch,
        state,
        tags: vec!["talos".into(), "v1.13.9".into()],
        project: "proj".into(),
        public: false,
        zone: zone.into(),
        creation_date: Some(created.into()),
    }
}

/// Both zones have an amd64 image; fr-par-2 an older one too, and arm64.
fn fake() -> FakeInstance {
    let f = FakeInstance::new();
    f.insert_image(image(
        "par-old",
        PAR,
        Arch::X86_64,
        ImageState::Available,
        "2026-01-01T00:00:00Z",
    ));
    f.insert_image(image(
        "par-new",
        PAR,
        Arch::X86_64,
        ImageState::Available,
        "2026-06-01T00:00:00Z",
    ));
    f.insert_image(image(
        "par-arm",
        PAR,
        Arch::Arm64,
        ImageState::Available,
        "2026-06-01T00:00:00Z",
    ));
    f.insert_image(image(
        "ams",
        AMS,
        Arch::X86_64,
        ImageState::Available,
        "2026-06-01T00:00:00Z",
    ));
    f.insert_security_group(SecurityGroup {
        id: SG.into(),
        name: "nodes".into(),
        project: "proj".into(),
        zone: PAR.into(),
    });
    f
}

async fn observe(api: &FakeInstance, spec: &InstanceNodeClassSpec, config: &str) -> Observations {
    let zones = spec.zones.clone();
    Observations {
        images: lookup_images(api, spec, &zones, "proj").await,
        security_group: check_security_group(api, spec, &zones).await,
        zones,
        machine_config: SecretCheck::Present,
        machine_config_content: Some(check_machine_config(
            config.as_bytes(),
            &spec.machine_config_patches,
            "Secret karpenter/talos key \"worker.yaml\"",
        )),
        private_network: None,
    }
}

fn status(spec: &InstanceNodeClassSpec, observed: &Observations) -> InstanceNodeClassStatus {
    compute(
        spec,
        Some(1),
        observed,
        &InstanceNodeClassStatus::default(),
        NOW,
    )
}

fn cond<'a>(s: &'a InstanceNodeClassStatus, type_: &str) -> &'a crate::nodeclass::Condition {
    s.conditions
        .iter()
        .find(|c| c.type_ == type_)
        .unwrap_or_else(|| panic!("no {type_} in {:?}", s.conditions))
}

#[tokio::test]
async fn all_good_is_ready_with_the_newest_image_of_each_pair() {
    let api = fake();
    let spec = spec(&[PAR, AMS]);
    let s = status(&spec, &observe(&api, &spec, WORKER).await);
    let types: Vec<&str> = s.conditions.iter().map(|c| c.type_.as_str()).collect();
    assert_eq!(
        types,
        [
            CREDENTIALS_VALID,
            IMAGE_RESOLVED,
            SECURITY_GROUP_FOUND,
            MACHINE_CONFIG_VALID,
            READY
        ]
    );
    assert!(
        s.conditions.iter().all(|c| c.status == "True"),
        "{:?}",
        s.conditions
    );
    let images: Vec<(&str, &str, &str)> = s
        .images
        .iter()
        .map(|i| (i.zone.as_str(), i.arch.as_str(), i.id.as_str()))
        .collect();
    assert_eq!(
        images,
        [
            (PAR, "amd64", "par-new"),
            (PAR, "arm64", "par-arm"),
            (AMS, "amd64", "ams"),
        ]
    );
    // nl-ams-1 has no arm64 image: its arm64 types are left out, said so.
    assert!(
        cond(&s, IMAGE_RESOLVED)
            .message
            .contains("arm64 in nl-ams-1")
    );
    assert_eq!(
        cond(&s, SECURITY_GROUP_FOUND).reason,
        "DefaultSecurityGroup"
    );
    // One listing per zone.
    assert_eq!(api.count(Op::ListImages), 2);
}

#[tokio::test]
async fn refused_credentials_say_which_policy_to_grant() {
    let api = fake();
    for _ in 0..2 {
        api.fail_next(
            Op::ListImages,
            ApiError::Unauthorized("denied_authentication".into()),
        );
    }
    let spec = spec(&[PAR, AMS]);
    let s = status(&spec, &observe(&api, &spec, WORKER).await);
    let c = cond(&s, CREDENTIALS_VALID);
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "CredentialsRefused")
    );
    assert!(c.message.contains("InstancesFullAccess"), "{}", c.message);
    assert_eq!(cond(&s, IMAGE_RESOLVED).status, "Unknown");
    let ready = cond(&s, READY);
    assert_eq!(
        (ready.status.as_str(), ready.reason.as_str()),
        ("False", "CredentialsRefused")
    );
}

#[tokio::test]
async fn a_zone_without_an_image_is_not_found_with_the_import_fix() {
    let api = fake();
    let spec = spec(&[PAR, "pl-waw-2"]);
    let s = status(&spec, &observe(&api, &spec, WORKER).await);
    let c = cond(&s, IMAGE_RESOLVED);
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "ImageNotFound")
    );
    assert!(
        c.message.contains("pl-waw-2") && c.message.contains("scaleway-<arch>.raw.zst"),
        "{}",
        c.message
    );
    assert!(!c.message.contains(PAR), "{}", c.message);
    assert_eq!(cond(&s, READY).reason, "ImageNotFound");
}

#[tokio::test]
async fn an_image_still_importing_is_not_available() {
    let api = FakeInstance::new();
    api.insert_image(image(
        "new",
        PAR,
        Arch::X86_64,
        ImageState::Creating,
        "2026-06-01T00:00:00Z",
    ));
    let spec = spec(&[PAR]);
    let s = status(&spec, &observe(&api, &spec, WORKER).await);
    let c = cond(&s, IMAGE_RESOLVED);
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "ImageNotAvailable")
    );
    assert!(
        c.message.contains("new") && c.message.contains("creating"),
        "{}",
        c.message
    );
    assert!(s.images.is_empty());
}

#[tokio::test]
async fn an_arch_still_importing_beside_one_that_serves_the_zone_is_only_noted() {
    let api = fake();
    api.insert_image(image(
        "ams-arm",
        AMS,
        Arch::Arm64,
        ImageState::Creating,
        "2026-07-01T00:00:00Z",
    ));
    let spec = spec(&[PAR, AMS]);
    let s = status(&spec, &observe(&api, &spec, WORKER).await);
    let c = cond(&s, IMAGE_RESOLVED);
    assert_eq!(c.status, "True");
    assert!(
        c.message
            .contains("arm64 in nl-ams-1 (image ams-arm is creating)"),
        "{}",
        c.message
    );
    assert_eq!(s.images.len(), 3);
}

#[tokio::test]
async fn an_id_unknown_in_its_zone_is_not_found_with_the_per_zone_fix() {
    let api = fake();
    let mut spec = spec(&[AMS]);
    spec.image = InstanceImageSelector {
        // The fr-par-2 image, listed for nl-ams-1: images are per zone.
        ids: vec![ZoneImage {
            zone: AMS.into(),
            arch: ImageArch::Amd64,
            id: "par-new".into(),
        }],
        ..InstanceImageSelector::default()
    };
    let s = status(&spec, &observe(&api, &spec, WORKER).await);
    let c = cond(&s, IMAGE_RESOLVED);
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "ImageNotFound")
    );
    assert!(
        c.message.contains("par-new") && c.message.contains("images are per zone"),
        "{}",
        c.message
    );
}

#[tokio::test]
async fn ids_are_checked_for_their_architecture() {
    let api = fake();
    let mut spec = spec(&[PAR]);
    spec.image = InstanceImageSelector {
        ids: vec![ZoneImage {
            zone: PAR.into(),
            arch: ImageArch::Arm64,
            id: "par-new".into(),
        }],
        ..InstanceImageSelector::default()
    };
    let s = status(&spec, &observe(&api, &spec, WORKER).await);
    let c = cond(&s, IMAGE_RESOLVED);
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "ImageWrongArch")
    );
    assert!(c.message.contains("amd64 image"), "{}", c.message);

    spec.image.ids[0].arch = ImageArch::Amd64;
    let s = status(&spec, &observe(&api, &spec, WORKER).await);
    assert_eq!(cond(&s, IMAGE_RESOLVED).status, "True");
    assert_eq!(s.images.len(), 1);
    assert_eq!(s.images[0].id, "par-new");
    assert_eq!(api.count(Op::GetImage), 2);
}

#[tokio::test]
async fn a_failed_lookup_keeps_the_images_and_verdict_of_this_generation() {
    let api = fake();
    let spec = spec(&[PAR]);
    let first = status(&spec, &observe(&api, &spec, WORKER).await);
    assert_eq!(cond(&first, READY).status, "True");
    api.fail_next(Op::ListImages, ApiError::Unavailable("503".into()));
    let observed = observe(&api, &spec, WORKER).await;
    let later = compute(&spec, Some(1), &observed, &first, "2026-11-24T14:00:00Z");
    assert_eq!(later.images, first.images);
    assert_eq!(cond(&later, IMAGE_RESOLVED).status, "True");
    assert_eq!(
        cond(&later, READY).last_transition_time,
        NOW,
        "no transition on an inconclusive check"
    );
    // After a spec change the old images say nothing: Unknown until it concludes.
    api.fail_next(Op::ListImages, ApiError::Unavailable("503".into()));
    let observed = observe(&api, &spec, WORKER).await;
    let changed = compute(&spec, Some(2), &observed, &first, NOW);
    assert!(changed.images.is_empty());
    assert_eq!(cond(&changed, IMAGE_RESOLVED).status, "Unknown");
    assert_eq!(cond(&changed, READY).status, "Unknown");
}

#[tokio::test]
async fn a_security_group_is_looked_up_in_the_zone() {
    let api = fake();
    let mut spec = spec(&[PAR]);
    spec.security_group_id = Some(SG.into());
    let s = status(&spec, &observe(&api, &spec, WORKER).await);
    let c = cond(&s, SECURITY_GROUP_FOUND);
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("True", SECURITY_GROUP_FOUND)
    );

    spec.zones = vec![AMS.into()];
    let s = status(&spec, &observe(&api, &spec, WORKER).await);
    let c = cond(&s, SECURITY_GROUP_FOUND);
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "SecurityGroupNotFound")
    );
    assert!(c.message.contains("zone=nl-ams-1"), "{}", c.message);
    assert_eq!(api.count(Op::GetSecurityGroup), 2);

    api.fail_next(Op::GetSecurityGroup, ApiError::Throttled);
    let s = status(&spec, &observe(&api, &spec, WORKER).await);
    assert_eq!(
        cond(&s, SECURITY_GROUP_FOUND).reason,
        "SecurityGroupLookupFailed"
    );
    assert_eq!(cond(&s, SECURITY_GROUP_FOUND).status, "Unknown");
}

#[tokio::test]
async fn the_machine_config_is_checked_by_the_em_code() {
    let api = fake();
    let spec_ = spec(&[PAR]);
    let controlplane = WORKER.replace("type: worker", "type: controlplane");
    let s = status(&spec_, &observe(&api, &spec_, &controlplane).await);
    let c = cond(&s, MACHINE_CONFIG_VALID);
    assert_eq!(
        (c.status.as_str(), c.reason.as_str()),
        ("False", "MachineConfigNotWorker")
    );

    let mut bad_patch = spec(&[PAR]);
    bad_patch.machine_config_patches = vec!["machine: [".into()];
    let s = status(&bad_patch, &observe(&api, &bad_patch, WORKER).await);
    assert_eq!(
        cond(&s, MACHINE_CONFIG_VALID).reason,
        "MachineConfigPatchInvalid"
    );

    for (check, reason, status_) in [
        (SecretCheck::SecretNotFound, "SecretNotFound", "False"),
        (SecretCheck::KeyMissing, "SecretKeyMissing", "False"),
        (
            SecretCheck::Error("timeout".into()),
            "SecretReadFailed",
            "Unknown",
        ),
    ] {
        let mut observed = observe(&api, &spec_, WORKER).await;
        observed.machine_config = check;
        observed.machine_config_content = None;
        let s = status(&spec_, &observed);
        let c = cond(&s, MACHINE_CONFIG_VALID);
        assert_eq!((c.status.as_str(), c.reason.as_str()), (status_, reason));
        assert!(c.message.contains("karpenter/talos"), "{}", c.message);
    }
}

#[test]
fn no_zone_at_all_is_said() {
    let spec = spec(&[]);
    let observed = Observations {
        zones: vec![],
        images: vec![],
        security_group: None,
        machine_config: SecretCheck::Present,
        machine_config_content: Some(Ok(())),
        private_network: None,
    };
    let s = status(&spec, &observed);
    assert_eq!(cond(&s, IMAGE_RESOLVED).reason, "NoZone");
    assert_eq!(cond(&s, READY).status, "False");
}

#[tokio::test]
async fn the_private_network_status_follows_the_resolution() {
    use crate::nodeclass::{PRIVATE_NETWORK_READY, Resolution, ResolvedPrivateNetwork};
    let api = fake();
    let spec = spec(&[PAR]);
    let mut observed = observe(&api, &spec, WORKER).await;
    let network = ResolvedPrivateNetwork {
        region: "fr-par".into(),
        id: "11111111-1111-4111-8111-111111111111".into(),
        name: "prod".into(),
        vpc_id: "vpc".into(),
        subnets: vec!["172.16.0.0/22".into()],
    };
    observed.private_network = Some(Resolution::Resolved(vec![network.clone()]));
    let resolved = status(&spec, &observed);
    assert_eq!(cond(&resolved, PRIVATE_NETWORK_READY).status, "True");
    assert_eq!(resolved.private_networks, vec![network.clone()]);
    // Serialized even when empty, so the status merge patch clears it.
    let empty = status(&spec, &observe(&api, &spec, WORKER).await);
    assert_eq!(
        serde_json::to_value(&empty).unwrap()["privateNetworks"],
        serde_json::json!([])
    );

    observed.private_network = Some(Resolution::Unknown {
        reason: "PrivateNetworkLookupFailed",
        message: "503".into(),
    });
    let kept = compute(&spec, Some(1), &observed, &resolved, NOW);
    assert_eq!(kept.private_networks, vec![network]);
    assert_eq!(cond(&kept, PRIVATE_NETWORK_READY).status, "True");

    observed.private_network = Some(Resolution::Invalid {
        reason: "PrivateNetworkNotFound",
        message: "no Private Network".into(),
    });
    let gone = compute(&spec, Some(1), &observed, &resolved, NOW);
    assert!(gone.private_networks.is_empty());
    assert_eq!(cond(&gone, READY).reason, "PrivateNetworkNotFound");
}
