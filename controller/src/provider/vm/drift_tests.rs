//! The stamp of `spec.privateNetwork`: left out when unset, so that the
//! stamps of NodeClasses without a network do not change; counted both ways
//! when set.

use std::collections::BTreeMap;

use super::super::super::drift::{HASH_ANNOTATION, HASH_VERSION_ANNOTATION};
use super::super::tests::spec;
use super::*;
use crate::nodeclass::{NodeIpSource, PrivateNetworkSelector};

fn with_network() -> InstanceNodeClassSpec {
    let mut s = spec();
    s.private_network = Some(PrivateNetworkSelector {
        name: "vpc-nodes".into(),
        ..Default::default()
    });
    s
}

fn keys(stamp: &BTreeMap<String, String>) -> Vec<&str> {
    stamp[HASH_ANNOTATION]
        .split(',')
        .filter_map(|kv| kv.split_once('=').map(|(k, _)| k))
        .collect()
}

#[test]
fn a_class_without_a_network_stamps_what_it_stamped_before() {
    let stamp = stamp_instance(&spec());
    assert_eq!(keys(&stamp), ["config", "image", "network", "root"]);
    assert_eq!(stamp[HASH_VERSION_ANNOTATION], VM_HASH_VERSION);
    assert_eq!(vm_drift(&stamp, &spec()), None);
}

#[test]
fn a_class_with_a_network_stamps_it() {
    let stamp = stamp_instance(&with_network());
    assert_eq!(
        keys(&stamp),
        ["config", "image", "network", "privateNetwork", "root"]
    );
    assert_eq!(vm_drift(&stamp, &with_network()), None);
}

#[test]
fn gaining_changing_or_dropping_the_network_is_drift() {
    let without = stamp_instance(&spec());
    assert_eq!(
        vm_drift(&without, &with_network()),
        Some(VmComponent::PrivateNetwork),
        "the VMs have no private NIC"
    );
    let with = stamp_instance(&with_network());
    let mut public = with_network();
    public.private_network.as_mut().unwrap().node_ip = NodeIpSource::Public;
    assert_eq!(vm_drift(&with, &public), Some(VmComponent::PrivateNetwork));
    assert_eq!(vm_drift(&with, &spec()), Some(VmComponent::PrivateNetwork));
    assert_eq!(
        VmComponent::PrivateNetwork.drift_reason(),
        "PrivateNetworkDrift"
    );
}

/// The other components keep their rule: missing from a stamp is no drift.
#[test]
fn a_stamp_missing_another_component_is_not_drift() {
    let mut stamp = stamp_instance(&spec());
    let kept: Vec<String> = stamp[HASH_ANNOTATION]
        .split(',')
        .filter(|kv| !kv.starts_with("root="))
        .map(String::from)
        .collect();
    stamp.insert(HASH_ANNOTATION.to_string(), kept.join(","));
    let mut other = spec();
    other.root_volume.as_mut().unwrap().size_bytes += 1;
    assert_eq!(vm_drift(&stamp, &other), None);
}
