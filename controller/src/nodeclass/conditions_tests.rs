use std::collections::BTreeMap;

use super::*;
use crate::nodeclass::{Billing, RescueSshKey, SecretKeyRef, TalosImage};

const PUBLIC: &str = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOurs";
const URL: &str = "https://factory.talos.dev/image/abc/v1.13.9/metal-amd64.raw.xz";

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
                "https://factory.talos.dev/image/{schematic}/{version}/metal-{arch}.raw.xz".into(),
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
        standby: None,
        private_network: None,
    }
}

fn pinned_spec() -> NodeClassSpec {
    let mut s = spec();
    s.image.sha256 = Some(BTreeMap::from([("amd64".into(), "ab".repeat(32))]));
    s
}

fn image(probe: Probe, verification: Option<VerifyState>) -> Vec<ImageArch> {
    vec![ImageArch {
        arch: "amd64".into(),
        url: URL.into(),
        probe,
        verification,
    }]
}

fn all_good() -> Observations {
    Observations {
        ssh_key: SshKeyCheck::Registered {
            public_key: format!("{PUBLIC} me@laptop"),
        },
        private_key: SecretCheck::Present,
        machine_config: SecretCheck::Present,
        private_key_content: Some(PrivateKeyCheck::Public(PUBLIC.into())),
        machine_config_content: Some(Ok(())),
        image: image(Probe::Reachable, None),
        private_network: None,
    }
}

fn get<'a>(conds: &'a [Condition], t: &str) -> &'a Condition {
    conds
        .iter()
        .find(|c| c.type_ == t)
        .unwrap_or_else(|| panic!("no condition {t}"))
}

/// Ready=False with this reason, and the sub-condition `type_` False with it too.
fn assert_blocked_by(conds: &[Condition], type_: &str, reason: &str) {
    let sub = get(conds, type_);
    assert_eq!(
        (sub.status.as_str(), sub.reason.as_str()),
        ("False", reason),
        "{sub:?}"
    );
    let ready = get(conds, READY);
    assert_eq!(ready.status, "False", "{ready:?}");
    assert_eq!(ready.reason, reason, "{ready:?}");
    assert!(ready.message.contains(&sub.message), "{ready:?}");
    assert!(!is_ready(conds));
}

#[test]
fn all_true_is_ready() {
    let c = compute(&spec(), Some(3), &all_good(), &[], "T1");
    assert_eq!(c.len(), 8);
    assert!(
        c.iter()
            .all(|c| c.status == "True" && c.observed_generation == Some(3)),
        "{c:?}"
    );
    assert!(is_ready(&c));
    assert_eq!(get(&c, READY).last_transition_time, "T1");
    assert_eq!(get(&c, IMAGE_VERIFIED).reason, "NoChecksum");
}

#[test]
fn refused_credentials_are_not_ready() {
    let mut obs = all_good();
    obs.ssh_key = SshKeyCheck::Refused("unauthorized: HTTP 401".into());
    let c = compute(&spec(), Some(1), &obs, &[], "T1");
    assert_blocked_by(&c, CREDENTIALS_VALID, "CredentialsRefused");
    assert!(
        get(&c, CREDENTIALS_VALID)
            .message
            .contains("SCW_SECRET_KEY")
    );
    // The key itself cannot be judged.
    assert_eq!(get(&c, SSH_KEY_REGISTERED).status, "Unknown");
}

#[test]
fn missing_secret_or_key_is_not_ready() {
    let mut obs = all_good();
    obs.machine_config = SecretCheck::SecretNotFound;
    obs.machine_config_content = None;
    let c = compute(&spec(), Some(1), &obs, &[], "T1");
    assert_blocked_by(&c, SECRETS_RESOLVED, "SecretNotFound");
    assert!(
        get(&c, SECRETS_RESOLVED)
            .message
            .contains("karpenter/talos")
    );
    assert_eq!(get(&c, MACHINE_CONFIG_VALID).status, "False");

    let mut obs = all_good();
    obs.private_key = SecretCheck::KeyMissing;
    obs.private_key_content = None;
    let c = compute(&spec(), Some(1), &obs, &[], "T1");
    assert_blocked_by(&c, SECRETS_RESOLVED, "SecretKeyMissing");
}

#[test]
fn invalid_machine_config_is_not_ready() {
    for reason in [
        "MachineConfigInvalid",
        "MachineConfigNotWorker",
        "MachineConfigPatchInvalid",
    ] {
        let mut obs = all_good();
        obs.machine_config_content = Some(Err(Problem {
            reason,
            message: "what to fix".into(),
        }));
        let c = compute(&spec(), Some(1), &obs, &[], "T1");
        assert_blocked_by(&c, MACHINE_CONFIG_VALID, reason);
    }
}

#[test]
fn unusable_private_key_is_not_ready() {
    let mut obs = all_good();
    obs.private_key_content = Some(PrivateKeyCheck::Invalid(Problem {
        reason: "SSHPrivateKeyInvalid",
        message: "cannot be used".into(),
    }));
    let c = compute(&spec(), Some(1), &obs, &[], "T1");
    assert_blocked_by(&c, SECRETS_RESOLVED, "SSHPrivateKeyInvalid");

    let mut obs = all_good();
    obs.private_key_content = Some(PrivateKeyCheck::Public(
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIOther".into(),
    ));
    let c = compute(&spec(), Some(1), &obs, &[], "T1");
    assert_blocked_by(&c, SSH_KEY_REGISTERED, "SSHKeyMismatch");
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
        assert_blocked_by(&c, SSH_KEY_REGISTERED, reason);
        assert!(get(&c, SSH_KEY_REGISTERED).message.contains("key-1"));
    }
}

#[test]
fn bad_template_is_not_ready() {
    let mut s = spec();
    s.image.url_template = "https://x/{flavour}.raw.xz".into();
    let mut obs = all_good();
    obs.image = vec![];
    let c = compute(&s, Some(1), &obs, &[], "T1");
    assert_blocked_by(&c, IMAGE_TEMPLATE_VALID, "ImageTemplateInvalid");
    assert!(get(&c, IMAGE_TEMPLATE_VALID).message.contains("flavour"));
}

#[test]
fn unreachable_image_is_not_ready() {
    for (probe, reason) in [
        (Probe::NotFound(404), "ImageNotFound"),
        (Probe::Refused(403), "ImageURLRefused"),
        (
            Probe::Unreachable("connection refused".into()),
            "ImageUnreachable",
        ),
    ] {
        let mut obs = all_good();
        obs.image = image(probe, None);
        let c = compute(&spec(), Some(1), &obs, &[], "T1");
        assert_blocked_by(&c, IMAGE_REACHABLE, reason);
        assert!(get(&c, IMAGE_REACHABLE).message.contains(URL));
    }
}

#[test]
fn checksum_is_verified_before_ready() {
    let mut obs = all_good();
    obs.image = image(Probe::Reachable, Some(VerifyState::Running));
    let running = compute(&pinned_spec(), Some(1), &obs, &[], "T1");
    assert_eq!(get(&running, IMAGE_VERIFIED).status, "Unknown");
    assert_eq!(get(&running, READY).status, "Unknown");
    assert_eq!(get(&running, READY).reason, "ImageVerifying");

    obs.image = image(
        Probe::Reachable,
        Some(VerifyState::Done(Verification::Mismatch {
            actual: "cd".repeat(32),
            bytes: 42,
        })),
    );
    let c = compute(&pinned_spec(), Some(1), &obs, &running, "T2");
    assert_blocked_by(&c, IMAGE_VERIFIED, "ImageChecksumMismatch");
    let m = &get(&c, IMAGE_VERIFIED).message;
    assert!(
        m.contains(&"cd".repeat(32)) && m.contains(&"ab".repeat(32)),
        "{m}"
    );

    obs.image = image(
        Probe::Reachable,
        Some(VerifyState::Done(Verification::Matches { bytes: 42 })),
    );
    let c = compute(&pinned_spec(), Some(1), &obs, &c, "T3");
    assert!(is_ready(&c), "{c:?}");
    assert_eq!(get(&c, IMAGE_VERIFIED).reason, "ImageChecksumVerified");
}

#[test]
fn the_first_problem_names_ready_and_the_others_are_listed() {
    let mut obs = all_good();
    obs.ssh_key = SshKeyCheck::NotFound;
    obs.image = image(Probe::NotFound(404), None);
    let c = compute(&spec(), Some(1), &obs, &[], "T1");
    let ready = get(&c, READY);
    assert_eq!(ready.reason, "SSHKeyNotFound");
    assert!(
        ready
            .message
            .contains("ImageReachable=False (ImageNotFound)"),
        "{ready:?}"
    );
}

#[test]
fn api_error_keeps_previous_verdict_or_is_unknown() {
    let mut obs = all_good();
    obs.ssh_key = SshKeyCheck::Error("HTTP 503".into());
    obs.image = image(Probe::Transient("HTTP 502".into()), None);
    let first = compute(&spec(), Some(1), &obs, &[], "T1");
    assert_eq!(get(&first, SSH_KEY_REGISTERED).status, "Unknown");
    assert_eq!(get(&first, IMAGE_REACHABLE).status, "Unknown");
    assert_eq!(get(&first, READY).status, "Unknown");

    let ready = compute(&spec(), Some(1), &all_good(), &[], "T1");
    let later = compute(&spec(), Some(1), &obs, &ready, "T2");
    assert_eq!(
        later, ready,
        "a transient error must not change a conclusive status"
    );

    let mut missing = all_good();
    missing.ssh_key = SshKeyCheck::NotFound;
    let broken = compute(&spec(), Some(1), &missing, &[], "T1");
    let later = compute(&spec(), Some(1), &obs, &broken, "T2");
    assert_eq!(later, broken, "nor turn a not-ready NodeClass ready");
}

#[test]
fn a_spec_change_does_not_inherit_the_previous_verdict() {
    let ready = compute(&pinned_spec(), Some(1), &all_good_pinned(), &[], "T1");
    assert!(is_ready(&ready));
    // A new sha256 is being verified: not Ready on the strength of the old one.
    let mut obs = all_good();
    obs.image = image(Probe::Reachable, Some(VerifyState::Running));
    let c = compute(&pinned_spec(), Some(2), &obs, &ready, "T2");
    assert_eq!(get(&c, IMAGE_VERIFIED).status, "Unknown");
    assert!(!is_ready(&c));
}

fn all_good_pinned() -> Observations {
    let mut obs = all_good();
    obs.image = image(
        Probe::Reachable,
        Some(VerifyState::Done(Verification::Matches { bytes: 1 })),
    );
    obs
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

#[test]
fn ready_counts_only_for_the_generation_it_judged() {
    let c = compute(&spec(), Some(4), &all_good(), &[], "T1");
    assert!(is_ready_at(&c, Some(4)));
    assert!(!is_ready_at(&c, Some(5)), "a spec change not yet judged");
    let mut obs = all_good();
    obs.ssh_key = SshKeyCheck::NotFound;
    let c = compute(&spec(), Some(4), &obs, &[], "T1");
    assert!(!is_ready_at(&c, Some(4)));
}

#[test]
fn readiness_is_a_verdict_only_for_the_generation_it_judged() {
    let c = compute(&spec(), Some(4), &all_good(), &[], "T1");
    assert_eq!(readiness_at(&c, Some(4)), Readiness::Ready);
    assert_eq!(
        readiness_at(&c, Some(5)),
        Readiness::Unknown,
        "a spec change not yet judged is a wait"
    );
    assert_eq!(readiness_at(&[], Some(1)), Readiness::Unknown);
    let mut obs = all_good();
    obs.ssh_key = SshKeyCheck::NotFound;
    let c = compute(&spec(), Some(4), &obs, &[], "T1");
    assert_eq!(readiness_at(&c, Some(4)), Readiness::NotReady);
    assert_eq!(readiness_at(&c, Some(5)), Readiness::Unknown);
}

fn resolved() -> crate::nodeclass::Resolution {
    crate::nodeclass::Resolution::Resolved(vec![crate::nodeclass::ResolvedPrivateNetwork {
        region: "fr-par".into(),
        id: "11111111-1111-4111-8111-111111111111".into(),
        name: "prod".into(),
        vpc_id: "vpc".into(),
        subnets: vec!["172.16.0.0/22".into()],
    }])
}

#[test]
fn private_network_ready_is_there_only_with_a_selection_and_gates_ready() {
    use crate::nodeclass::{PRIVATE_NETWORK_READY, Resolution};
    let without = compute(&spec(), Some(1), &all_good(), &[], "T1");
    assert!(without.iter().all(|c| c.type_ != PRIVATE_NETWORK_READY));

    let mut obs = all_good();
    obs.private_network = Some(resolved());
    let ok = compute(&spec(), Some(1), &obs, &[], "T1");
    assert_eq!(get(&ok, PRIVATE_NETWORK_READY).status, "True");
    assert!(is_ready(&ok));

    obs.private_network = Some(Resolution::Invalid {
        reason: "PrivateNetworkAmbiguous",
        message: "2 Private Networks match".into(),
    });
    let bad = compute(&spec(), Some(1), &obs, &ok, "T2");
    assert_eq!(get(&bad, PRIVATE_NETWORK_READY).status, "False");
    assert!(!is_ready(&bad));
    assert_eq!(get(&bad, READY).reason, "PrivateNetworkAmbiguous");
    assert_eq!(
        get(&bad, READY).message,
        "PrivateNetworkReady: 2 Private Networks match"
    );

    // A failed lookup keeps the verdict of the same generation.
    obs.private_network = Some(Resolution::Unknown {
        reason: "PrivateNetworkLookupFailed",
        message: "503".into(),
    });
    let kept = compute(&spec(), Some(1), &obs, &ok, "T3");
    assert_eq!(get(&kept, PRIVATE_NETWORK_READY).status, "True");
    assert!(is_ready(&kept));
}
