use std::collections::BTreeMap;

use serde_json::{Value, json};

use super::*;
use crate::nodeclass::{
    Billing, DiskSelector, NodeClassSpec, RescueSshKey, SecretKeyRef, TalosImage,
};
use crate::provider::NodeClasses;
use crate::provider::tests::{claim, fixture};

/// A NodeClass written out in full here, not shared with other tests, so that
/// the pinned hashes below change only when the hashing does.
fn spec() -> NodeClassSpec {
    NodeClassSpec {
        zones: vec!["fr-par-2".into()],
        billing: Billing::Hourly,
        image: TalosImage {
            url_template:
                "https://factory.talos.dev/image/{schematic}/{version}/metal-{arch}.raw.xz".into(),
            version: "v1.13.9".into(),
            schematic: "376567988ad370138ad8b2698212367b8edcb69b5fd68c80be1f2ec7d603b4ba".into(),
            sha256: Some(BTreeMap::from([
                ("arm64".to_string(), "cd".repeat(32)),
                ("amd64".to_string(), "ab".repeat(32)),
            ])),
        },
        install_disk: Some(DiskSelector {
            name: Some("nvme0n1".into()),
        }),
        rescue_ssh_key: RescueSshKey {
            iam_key_id: "key-1".into(),
            private_key_secret_ref: SecretKeyRef {
                name: "rescue".into(),
                namespace: "karpenter".into(),
                key: "id_ed25519".into(),
            },
        },
        machine_config_secret_ref: SecretKeyRef {
            name: "talos".into(),
            namespace: "karpenter".into(),
            key: "worker.yaml".into(),
        },
        machine_config_patches: vec![
            "machine:\n  sysctls:\n    vm.max_map_count: \"262144\"\n".into(),
        ],
        tags: vec!["team=infra".into()],
        standby: None,
        private_network: None,
    }
}

/// The v1 hash of [`spec`]. If this test fails, the hashing of an unchanged
/// NodeClass has changed, and every node in every cluster running the
/// previous release would be compared against a different value: bump
/// `HASH_VERSION` (the re-stamp pass then rewrites old stamps instead of
/// letting the fleet drift) and pin the new value here. Never just update
/// the expected string. The values were computed independently of this code
/// (Python: `json.dumps(v, sort_keys=True, separators=(",", ":"),
/// ensure_ascii=False)`, sha256, first 8 hex digits).
#[test]
fn the_v1_hash_of_a_fixed_spec_is_pinned() {
    assert_eq!(HASH_VERSION, "v1");
    assert_eq!(
        NodeClassHash::of(&spec()).to_string(),
        "image=35559a4d,config=a9331f21,disk=3762939b"
    );
    // The same pins for the smallest spec: no checksums, no disk selector,
    // no patches.
    let mut minimal = spec();
    minimal.image.sha256 = None;
    minimal.install_disk = None;
    minimal.machine_config_patches.clear();
    assert_eq!(
        NodeClassHash::of(&minimal).to_string(),
        "image=c4ab4e17,config=bfab8773,disk=44136fa3"
    );
}

#[test]
fn canonical_json_sorts_keys_at_every_level() {
    let mut out = String::new();
    canonical_json(
        &json!({"b": 1, "a": [{"d": "x\"y", "c": null}, true], "é": {"z": 1.5, "y": []}}),
        &mut out,
    );
    assert_eq!(
        out,
        r#"{"a":[{"c":null,"d":"x\"y"},true],"b":1,"é":{"y":[],"z":1.5}}"#
    );
}

fn drift_of(changed: &NodeClassSpec) -> Option<Component> {
    NodeClassHash::of(&spec()).first_difference(&NodeClassHash::of(changed))
}

#[test]
fn each_change_names_its_component() {
    type Edit = fn(&mut NodeClassSpec);
    let cases: [(&str, Edit, Component); 10] = [
        (
            "version",
            |s| s.image.version = "v1.13.10".into(),
            Component::Image,
        ),
        (
            "schematic",
            |s| s.image.schematic = "abc".into(),
            Component::Image,
        ),
        (
            "url template",
            |s| s.image.url_template = "https://mirror/{version}-{arch}.raw.zst".into(),
            Component::Image,
        ),
        (
            "checksum",
            |s| {
                s.image
                    .sha256
                    .as_mut()
                    .unwrap()
                    .insert("amd64".into(), "ef".repeat(32));
            },
            Component::Image,
        ),
        (
            "config secret",
            |s| s.machine_config_secret_ref.name = "talos-2".into(),
            Component::Config,
        ),
        (
            "config key",
            |s| s.machine_config_secret_ref.key = "w2.yaml".into(),
            Component::Config,
        ),
        (
            "patch added",
            |s| s.machine_config_patches.push("machine: {}".into()),
            Component::Config,
        ),
        (
            "patches cleared",
            |s| s.machine_config_patches.clear(),
            Component::Config,
        ),
        (
            "disk",
            |s| {
                s.install_disk = Some(DiskSelector {
                    name: Some("sda".into()),
                })
            },
            Component::Disk,
        ),
        ("disk removed", |s| s.install_disk = None, Component::Disk),
    ];
    for (what, edit, component) in cases {
        let mut changed = spec();
        edit(&mut changed);
        assert_eq!(drift_of(&changed), Some(component), "{what}");
    }
    // Patch order is part of the config: patches apply in order.
    let mut a = spec();
    a.machine_config_patches = vec!["p1".into(), "p2".into()];
    let mut b = a.clone();
    b.machine_config_patches.reverse();
    assert_eq!(
        NodeClassHash::of(&a).first_difference(&NodeClassHash::of(&b)),
        Some(Component::Config)
    );
    // Several changes: the first component in order gives the reason.
    let mut both = spec();
    both.install_disk = None;
    both.image.version = "v1.14.0".into();
    assert_eq!(drift_of(&both), Some(Component::Image));
}

#[test]
fn placement_billing_tags_and_the_rescue_key_do_not_drift() {
    let mut changed = spec();
    changed.zones = vec!["nl-ams-1".into(), "fr-par-1".into()];
    changed.billing = Billing::Monthly;
    changed.tags = vec!["team=platform".into()];
    changed.rescue_ssh_key.iam_key_id = "key-2".into();
    changed.rescue_ssh_key.private_key_secret_ref.name = "rescue-2".into();
    assert_eq!(NodeClassHash::of(&changed), NodeClassHash::of(&spec()));
}

#[test]
fn spellings_of_the_same_intent_hash_alike() {
    let mut a = spec();
    a.install_disk = None;
    let mut b = spec();
    b.install_disk = Some(DiskSelector { name: None });
    assert_eq!(NodeClassHash::of(&a), NodeClassHash::of(&b));
    a.image.sha256 = None;
    b.image.sha256 = Some(BTreeMap::new());
    assert_eq!(NodeClassHash::of(&a), NodeClassHash::of(&b));
    let mut dev = spec();
    dev.install_disk = Some(DiskSelector {
        name: Some("/dev/nvme0n1".into()),
    });
    assert_eq!(NodeClassHash::of(&dev), NodeClassHash::of(&spec()));
}

#[test]
fn annotation_values_round_trip_and_bad_ones_are_refused() {
    let hash = NodeClassHash::of(&spec());
    let text = hash.to_string();
    assert_eq!(NodeClassHash::parse(&text), Ok(hash.clone()));
    let mut parts: Vec<&str> = text.split(',').collect();
    parts.reverse();
    assert_eq!(NodeClassHash::parse(&parts.join(",")), Ok(hash.clone()));
    assert_eq!(
        NodeClassHash::parse(
            &text
                .to_ascii_uppercase()
                .replace("IMAGE", "image")
                .replace("CONFIG", "config")
                .replace("DISK", "disk")
        ),
        Ok(hash),
        "hex case does not matter"
    );
    for bad in [
        "",
        "image=0123abcd,config=0123abcd",
        "image=0123abcd,config=0123abcd,disk=0123abcd,disk=0123abcd",
        "image=0123abcd,config=0123abcd,disk=0123abcd,kernel=0123abcd",
        "image=0123abcd,config=0123abcd,disk=0123abc",
        "image=0123abcd,config=0123abcd,disk=0123abcg",
        "image:0123abcd,config=0123abcd,disk=0123abcd",
    ] {
        assert!(NodeClassHash::parse(bad).is_err(), "{bad:?} accepted");
    }
}

/// Karpenter's validation of the Drifted condition reason.
fn karpenter_accepts_reason(reason: &str) -> bool {
    let bytes = reason.as_bytes();
    let inner = |b: &u8| b.is_ascii_alphanumeric() || matches!(b, b'_' | b',' | b':');
    let last = |b: &u8| b.is_ascii_alphanumeric() || *b == b'_';
    match bytes {
        [] => true,
        [first] => first.is_ascii_alphabetic(),
        [first, middle @ .., end] => {
            first.is_ascii_alphabetic() && middle.iter().all(inner) && last(end)
        }
    }
}

#[test]
fn reasons_pass_karpenters_validation() {
    assert!(
        !karpenter_accepts_reason("Image-Drift"),
        "the check can fail"
    );
    assert!(!karpenter_accepts_reason("1Drift"), "the check can fail");
    let reasons: Vec<&str> = Component::ALL.iter().map(|c| c.drift_reason()).collect();
    assert_eq!(
        reasons,
        ["ImageDrift", "MachineConfigDrift", "DiskSelectorDrift"]
    );
    for r in reasons {
        assert!(karpenter_accepts_reason(r), "{r}");
    }
}

#[test]
fn only_a_current_stamp_is_compared() {
    let mut changed = spec();
    changed.image.version = "v1.14.0".into();
    let stamped = stamp(&spec());
    assert_eq!(drift(&stamped, &changed), Ok(Some(Component::Image)));
    assert_eq!(drift(&stamped, &spec()), Ok(None));
    assert_eq!(drift(&BTreeMap::new(), &changed), Ok(None), "no stamp");
    let mut old = stamped.clone();
    old.insert(HASH_VERSION_ANNOTATION.into(), "v0".into());
    assert_eq!(drift(&old, &changed), Ok(None), "another version");
    let mut only_hash = stamped.clone();
    only_hash.remove(HASH_VERSION_ANNOTATION);
    assert_eq!(drift(&only_hash, &changed), Ok(None), "no version");
    let mut garbled = stamped;
    garbled.insert(HASH_ANNOTATION.into(), "image=nope".into());
    assert!(drift(&garbled, &changed).is_err());
}

fn annotations(v: &Value) -> BTreeMap<String, String> {
    annotations_of(v)
}

#[tokio::test]
async fn create_stamps_the_nodeclass_hash_when_ordering_and_when_adopting() {
    let f = fixture();
    let class = f.classes.get("default").unwrap();
    let expected = stamp(&class.spec);
    let first = f
        .provider
        .create(claim("default-a", &["EM-A115X-SSD"]))
        .await
        .unwrap();
    let a = annotations(&first);
    assert_eq!(a.get(HASH_ANNOTATION), expected.get(HASH_ANNOTATION));
    assert_eq!(
        a.get(HASH_VERSION_ANNOTATION).map(String::as_str),
        Some("v1")
    );

    // A retried Create adopts the server and stamps what it starts the
    // install with now.
    f.classes
        .classes
        .lock()
        .unwrap()
        .get_mut("default")
        .unwrap()
        .spec
        .machine_config_patches
        .push("machine: {}".into());
    let second = f
        .provider
        .create(claim("default-a", &["EM-A115X-SSD"]))
        .await
        .unwrap();
    assert_eq!(
        f.api.count(crate::scaleway::fake::Op::CreateServer),
        1,
        "adopted"
    );
    let now = stamp(&f.classes.get("default").unwrap().spec);
    assert_ne!(now, expected);
    assert_eq!(annotations(&second), now);
}

fn launched(name: &str) -> Value {
    let mut c = claim(name, &["EM-A115X-SSD"]);
    c["metadata"]["resourceVersion"] = json!("42");
    c["status"] = json!({"providerID": format!("scaleway://baremetal/fr-par-2/{name}")});
    c
}

fn set_stamp(c: &mut Value, stamp: &BTreeMap<String, String>) {
    c["metadata"]["annotations"] = json!(stamp);
}

#[test]
fn is_drifted_compares_with_the_nodeclass_in_memory() {
    let f = fixture();
    let mut c = launched("default-a");
    set_stamp(&mut c, &stamp(&f.classes.get("default").unwrap().spec));
    assert_eq!(f.provider.is_drifted(&c), Ok(String::new()));

    let edit = |e: fn(&mut NodeClassSpec)| {
        let mut classes = f.classes.classes.lock().unwrap();
        e(&mut classes.get_mut("default").unwrap().spec);
    };
    edit(|s| s.tags.push("cost-center=42".into()));
    assert_eq!(
        f.provider.is_drifted(&c),
        Ok(String::new()),
        "tags do not drift"
    );
    edit(|s| {
        s.install_disk = Some(DiskSelector {
            name: Some("sda".into()),
        })
    });
    assert_eq!(f.provider.is_drifted(&c), Ok("DiskSelectorDrift".into()));
    edit(|s| s.machine_config_patches.clear());
    assert_eq!(f.provider.is_drifted(&c), Ok("MachineConfigDrift".into()));
    edit(|s| s.image.version = "v1.14.0".into());
    assert_eq!(f.provider.is_drifted(&c), Ok("ImageDrift".into()));

    // Another hash version, no stamp, another provider's NodeClass kind or a
    // NodeClass that is gone: not drifted.
    let mut old = c.clone();
    old["metadata"]["annotations"][HASH_VERSION_ANNOTATION] = json!("v0");
    assert_eq!(f.provider.is_drifted(&old), Ok(String::new()));
    assert_eq!(
        f.provider.is_drifted(&launched("default-b")),
        Ok(String::new())
    );
    let mut foreign = c.clone();
    foreign["spec"]["nodeClassRef"]["kind"] = json!("EC2NodeClass");
    assert_eq!(f.provider.is_drifted(&foreign), Ok(String::new()));
    f.classes.classes.lock().unwrap().clear();
    assert_eq!(f.provider.is_drifted(&c), Ok(String::new()));
}

#[test]
fn restamps_cover_launched_claims_of_another_version_only() {
    let f = fixture();
    let current = stamp(&f.classes.get("default").unwrap().spec);
    let mut old_stamp = current.clone();
    old_stamp.insert(HASH_VERSION_ANNOTATION.into(), "v0".into());
    old_stamp.insert(HASH_ANNOTATION.into(), "sha=whatever".into());

    let mut up_to_date = launched("up-to-date");
    set_stamp(&mut up_to_date, &current);
    let mut old = launched("old");
    set_stamp(&mut old, &old_stamp);
    let never = launched("never-stamped");
    let not_launched = claim("not-launched", &["EM-A115X-SSD"]);
    let mut deleting = launched("deleting");
    deleting["metadata"]["deletionTimestamp"] = json!("2026-11-22T07:00:00Z");
    let mut drifted = launched("drifted");
    set_stamp(&mut drifted, &old_stamp);
    drifted["status"]["conditions"] = json!([{"type": "Drifted", "status": "True"}]);
    let mut foreign = launched("foreign");
    foreign["spec"]["nodeClassRef"]["name"] = json!("no-such-class");
    let mut no_rv = launched("no-rv");
    no_rv["metadata"]
        .as_object_mut()
        .unwrap()
        .remove("resourceVersion");

    let plan = f.provider.restamps(&[
        up_to_date,
        old,
        never,
        not_launched,
        deleting,
        drifted,
        foreign,
        no_rv,
    ]);
    assert_eq!(
        plan,
        vec![
            Restamp {
                name: "old".into(),
                resource_version: "42".into(),
                from_version: Some("v0".into()),
                annotations: current.clone(),
            },
            Restamp {
                name: "never-stamped".into(),
                resource_version: "42".into(),
                from_version: None,
                annotations: current,
            },
        ]
    );
}

fn with_network(selector: crate::nodeclass::PrivateNetworkSelector) -> NodeClassSpec {
    NodeClassSpec {
        private_network: Some(selector),
        ..spec()
    }
}

/// The network component is written only for a NodeClass that selects a
/// network: the pins of [`the_v1_hash_of_a_fixed_spec_is_pinned`] hold for
/// every NodeClass without one, so no version bump was needed. Values
/// computed independently (Python, as above).
#[test]
fn the_network_component_is_pinned_and_only_present_with_a_network() {
    use crate::nodeclass::{AddressPolicy, NodeIpSource, PrivateNetworkSelector};
    let by_name = with_network(PrivateNetworkSelector {
        name: "prod".into(),
        ..Default::default()
    });
    assert_eq!(
        NodeClassHash::of(&by_name).to_string(),
        "image=35559a4d,config=a9331f21,disk=3762939b,network=140fa2ab"
    );
    let booked = with_network(PrivateNetworkSelector {
        id: Some("0b7f2c4e-1111-4222-8333-444455556666".into()),
        addresses: AddressPolicy::Booked,
        ipam_ip_ids: vec!["11111111-2222-4333-8444-555566667777".into()],
        node_ip: NodeIpSource::Public,
        ..Default::default()
    });
    let text = NodeClassHash::of(&booked).to_string();
    assert!(text.ends_with(",network=62d58a27"), "{text}");
    assert_eq!(NodeClassHash::parse(&text), Ok(NodeClassHash::of(&booked)));
    assert!(NodeClassHash::parse(&format!("{text},network=62d58a27")).is_err());
}

#[test]
fn gaining_losing_or_changing_the_network_drifts_and_nothing_else_does() {
    use crate::nodeclass::{AddressPolicy, NodeIpSource, PrivateNetworkSelector};
    let prod = PrivateNetworkSelector {
        name: "prod".into(),
        ..Default::default()
    };
    let stamped = |s: &NodeClassSpec| stamp(s);
    let none = spec();
    let on = with_network(prod.clone());
    // Unchanged, with or without a network: no drift.
    assert_eq!(drift(&stamped(&none), &none), Ok(None));
    assert_eq!(drift(&stamped(&on), &on), Ok(None));
    // Gained, lost, or selecting another way.
    assert_eq!(drift(&stamped(&none), &on), Ok(Some(Component::Network)));
    assert_eq!(drift(&stamped(&on), &none), Ok(Some(Component::Network)));
    for changed in [
        PrivateNetworkSelector {
            name: "staging".into(),
            ..prod.clone()
        },
        PrivateNetworkSelector {
            node_ip: NodeIpSource::Public,
            ..prod.clone()
        },
        PrivateNetworkSelector {
            addresses: AddressPolicy::Booked,
            ipam_ip_ids: vec!["11111111-2222-4333-8444-555566667777".into()],
            ..prod.clone()
        },
    ] {
        assert_eq!(
            drift(&stamped(&on), &with_network(changed.clone())),
            Ok(Some(Component::Network)),
            "{changed:?}"
        );
    }
    // An image change with a network still names the image first.
    let mut image = with_network(prod);
    image.image.version = "v1.14.1".into();
    assert_eq!(drift(&stamped(&on), &image), Ok(Some(Component::Image)));
    assert!(karpenter_accepts_reason(Component::Network.drift_reason()));
}
