use std::collections::BTreeMap;

use serde::Deserialize;
use serde_yaml_ng::Value;

use super::*;
use crate::talos::render::{NodeSettings, render_machine_config};

const BASE_V1_14: &str = include_str!("testdata/worker-v1.14.yaml");
const BASE_V1_13: &str = include_str!("testdata/worker-v1.13.yaml");
const BASE_V1_12: &str = include_str!("testdata/worker-v1.12.yaml");
const BASE_V1_11: &str = include_str!("testdata/worker-v1.11.yaml");

fn metal(link: PrivateLink) -> NodeSettings {
    NodeSettings {
        hostname: "default-abc12".into(),
        labels: BTreeMap::from([("karpenter.sh/nodepool".into(), "default".into())]),
        provider_id: "scaleway://baremetal/fr-par-2/srv-1".into(),
        install_disk: "nvme0n1".into(),
        primary_mac: "A0:36:9F:00:00:02".into(),
        bootstrap_token: "k8s0a1.0123456789abcdef".into(),
        private_network: Some(link),
        ..Default::default()
    }
}

/// A VM: no install disk, no primary MAC (its one public NIC needs no alias).
fn vm(link: PrivateLink) -> NodeSettings {
    NodeSettings {
        provider_id: "scaleway://instance/fr-par-2/srv-1".into(),
        install_disk: String::new(),
        primary_mac: String::new(),
        ..metal(link)
    }
}

fn em_link(address: Option<&str>) -> PrivateLink {
    PrivateLink {
        vlan: Some(2345),
        mac: None,
        address: address.map(Into::into),
        subnets: vec!["127.16.0.0/22".into()],
        internal_ip: true,
    }
}

fn vm_link(address: Option<&str>) -> PrivateLink {
    PrivateLink {
        vlan: None,
        mac: Some("02:00:00:AB:CD:EF".into()),
        ..em_link(address)
    }
}

fn docs(rendered: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(rendered)
        .map(|d| Value::deserialize(d).expect("rendered YAML parses"))
        .collect()
}

/// The typed documents of `kind`, by name.
fn kind<'a>(docs: &'a [Value], kind: &str) -> Vec<&'a Value> {
    docs.iter()
        .filter(|d| d["kind"].as_str() == Some(kind))
        .collect()
}

fn yaml(text: &str) -> Value {
    serde_yaml_ng::from_str(text).expect("test YAML")
}

fn valid_subnets(main: &Value) -> &Value {
    &main["machine"]["kubelet"]["nodeIP"]["validSubnets"]
}

#[test]
fn elastic_metal_static_address_is_a_vlan_on_net0() {
    let out = render_machine_config(BASE_V1_13, &metal(em_link(Some("127.16.0.7/22")))).unwrap();
    let docs = docs(&out);
    assert_eq!(
        kind(&docs, "VLANConfig"),
        [&yaml(
            "{apiVersion: v1alpha1, kind: VLANConfig, name: net0.2345, vlanID: 2345, vlanMode: 802.1q, parent: net0, up: true, addresses: [{address: 127.16.0.7/22}]}"
        )]
    );
    // The parent alias is there, and no DHCP on a link with a known address.
    assert_eq!(kind(&docs, "LinkAliasConfig").len(), 1);
    assert_eq!(kind(&docs, "LinkAliasConfig")[0]["name"], yaml("net0"));
    assert!(kind(&docs, "DHCPv4Config").is_empty());
    assert!(kind(&docs, "LinkConfig").is_empty());
    assert_eq!(valid_subnets(&docs[0]), &yaml("[127.16.0.0/22]"));
    // Never the deprecated v1alpha1 interfaces.
    assert!(docs[0]["machine"].get("network").is_none());
}

#[test]
fn elastic_metal_without_an_address_asks_dhcp_on_the_vlan() {
    let out = render_machine_config(BASE_V1_12, &metal(em_link(None))).unwrap();
    let docs = docs(&out);
    let vlan = kind(&docs, "VLANConfig");
    assert_eq!(vlan.len(), 1);
    assert!(vlan[0].get("addresses").is_none());
    assert_eq!(vlan[0]["up"], Value::Bool(true));
    assert_eq!(
        kind(&docs, "DHCPv4Config"),
        [&yaml(
            "{apiVersion: v1alpha1, kind: DHCPv4Config, name: net0.2345}"
        )]
    );
}

#[test]
fn a_vm_private_nic_gets_an_alias_by_mac_and_a_link_config() {
    let out = render_machine_config(BASE_V1_13, &vm(vm_link(Some("127.16.1.9/22")))).unwrap();
    let docs = docs(&out);
    assert_eq!(
        kind(&docs, "LinkAliasConfig"),
        [&yaml(
            "{apiVersion: v1alpha1, kind: LinkAliasConfig, name: priv0, selector: {match: 'mac(link.permanent_addr) == \"02:00:00:ab:cd:ef\"'}}"
        )]
    );
    assert_eq!(
        kind(&docs, "LinkConfig"),
        [&yaml(
            "{apiVersion: v1alpha1, kind: LinkConfig, name: priv0, up: true, addresses: [{address: 127.16.1.9/22}]}"
        )]
    );
    assert!(kind(&docs, "VLANConfig").is_empty());
    assert!(kind(&docs, "DHCPv4Config").is_empty());
    assert_eq!(valid_subnets(&docs[0]), &yaml("[127.16.0.0/22]"));
}

#[test]
fn a_vm_private_nic_without_an_address_asks_dhcp() {
    let out = render_machine_config(BASE_V1_12, &vm(vm_link(None))).unwrap();
    let docs = docs(&out);
    let link = kind(&docs, "LinkConfig");
    assert_eq!(link.len(), 1);
    assert!(link[0].get("addresses").is_none());
    assert_eq!(
        kind(&docs, "DHCPv4Config"),
        [&yaml(
            "{apiVersion: v1alpha1, kind: DHCPv4Config, name: priv0}"
        )]
    );
}

#[test]
fn a_public_internal_ip_leaves_the_kubelet_node_ip_alone() {
    let link = PrivateLink {
        internal_ip: false,
        ..em_link(Some("127.16.0.7/22"))
    };
    let out = render_machine_config(BASE_V1_13, &metal(link)).unwrap();
    let docs = docs(&out);
    assert_eq!(kind(&docs, "VLANConfig").len(), 1);
    assert!(docs[0]["machine"]["kubelet"].get("nodeIP").is_none());
}

#[test]
fn a_talos_1_14_base_gets_the_subnets_in_its_kube_node_config() {
    let out = render_machine_config(BASE_V1_14, &metal(em_link(Some("127.16.0.7/22")))).unwrap();
    let docs = docs(&out);
    assert_eq!(
        kind(&docs, "KubeNodeConfig")[0]["nodeIP"]["validSubnets"],
        yaml("[127.16.0.0/22]")
    );
    // Talos 1.14 refuses .machine.kubelet next to a KubeletConfig document.
    assert!(docs[0]["machine"].get("kubelet").is_none());
    assert_eq!(kind(&docs, "VLANConfig").len(), 1);
}

#[test]
fn a_talos_1_11_base_is_refused_with_the_reason() {
    for link in [em_link(Some("127.16.0.7/22")), vm_link(None)] {
        let err = render_machine_config(BASE_V1_11, &metal_or_vm(link)).unwrap_err();
        assert_eq!(err, RenderError::PrivateNetworkNeedsTalos112);
        let message = err.to_string();
        assert!(message.contains("Talos 1.12 or later"), "{message}");
    }
    // Without a Private Network the same base renders.
    let plain = NodeSettings {
        private_network: None,
        ..metal(em_link(None))
    };
    render_machine_config(BASE_V1_11, &plain).unwrap();
}

fn metal_or_vm(link: PrivateLink) -> NodeSettings {
    if link.vlan.is_some() {
        metal(link)
    } else {
        vm(link)
    }
}

#[test]
fn a_talos_1_11_base_with_a_network_document_patch_may_have_one() {
    let mut node = metal(em_link(None));
    node.patches = vec!["apiVersion: v1alpha1\nkind: HostnameConfig\nauto: stable\n".into()];
    let out = render_machine_config(BASE_V1_11, &node).unwrap();
    assert_eq!(kind(&docs(&out), "VLANConfig").len(), 1);
}

#[test]
fn patches_still_override_the_private_link() {
    let mut node = metal(em_link(Some("127.16.0.7/22")));
    node.patches = vec![
        "apiVersion: v1alpha1\nkind: VLANConfig\nname: net0.2345\nmtu: 1400\nup: false\n".into(),
        "machine:\n  kubelet:\n    nodeIP:\n      validSubnets: ['!127.16.0.9/32']\n".into(),
    ];
    let out = render_machine_config(BASE_V1_13, &node).unwrap();
    let docs = docs(&out);
    let vlan = kind(&docs, "VLANConfig")[0];
    assert_eq!(vlan["mtu"], yaml("1400"));
    assert_eq!(vlan["up"], Value::Bool(false));
    assert_eq!(vlan["vlanID"], yaml("2345"));
    assert_eq!(
        valid_subnets(&docs[0]),
        &yaml("[127.16.0.0/22, '!127.16.0.9/32']")
    );

    // A patch may delete the link altogether.
    node.patches =
        vec!["apiVersion: v1alpha1\nkind: VLANConfig\nname: net0.2345\n$patch: delete\n".into()];
    let out = render_machine_config(BASE_V1_13, &node).unwrap();
    assert!(kind(&docs_of(&out), "VLANConfig").is_empty());
}

fn docs_of(out: &str) -> Vec<Value> {
    docs(out)
}

#[test]
fn inconsistent_links_are_refused() {
    let cases = [
        (
            PrivateLink {
                mac: Some("02:00:00:00:00:01".into()),
                ..em_link(None)
            },
            "both a VLAN",
        ),
        (
            PrivateLink {
                vlan: None,
                ..em_link(None)
            },
            "neither a VLAN",
        ),
        (
            PrivateLink {
                vlan: Some(0),
                ..em_link(None)
            },
            "between 1 and 4094",
        ),
        (
            PrivateLink {
                vlan: Some(4095),
                ..em_link(None)
            },
            "between 1 and 4094",
        ),
        (em_link(Some("127.16.0.7")), "prefix length"),
        (em_link(Some("127.16.0.7/33")), "prefix length"),
        (em_link(Some("0.0.0.0/22")), "prefix length"),
        (vm_link(Some("not-an-ip/22")), "prefix length"),
        (
            PrivateLink {
                mac: Some("02:00:00:00:01".into()),
                ..vm_link(None)
            },
            "MAC",
        ),
        (
            PrivateLink {
                subnets: vec![],
                ..em_link(None)
            },
            "no subnet",
        ),
        (
            PrivateLink {
                subnets: vec!["127.16.0.0".into()],
                ..em_link(None)
            },
            "not a CIDR",
        ),
    ];
    for (link, want) in cases {
        let err = render_machine_config(BASE_V1_13, &metal(link.clone())).unwrap_err();
        assert!(
            matches!(&err, RenderError::InvalidPrivateLink(m) if m.contains(want)),
            "{link:?}: want {want:?}, got {err}"
        );
    }
    // A VLAN rides net0, which needs the primary NIC's MAC.
    let mut node = metal(em_link(None));
    node.primary_mac.clear();
    let err = render_machine_config(BASE_V1_13, &node).unwrap_err();
    assert!(
        matches!(&err, RenderError::InvalidPrivateLink(m) if m.contains("net0")),
        "{err}"
    );
}

#[test]
fn ipv6_addresses_and_subnets_are_accepted() {
    let link = PrivateLink {
        address: Some("fd5f:519c:6d46:2728::7/64".into()),
        subnets: vec!["127.16.0.0/22".into(), "fd5f:519c:6d46:2728::/64".into()],
        ..em_link(None)
    };
    let out = render_machine_config(BASE_V1_13, &metal(link)).unwrap();
    let docs = docs(&out);
    assert_eq!(
        kind(&docs, "VLANConfig")[0]["addresses"],
        yaml("[{address: 'fd5f:519c:6d46:2728::7/64'}]")
    );
}
