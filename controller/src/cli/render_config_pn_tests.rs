//! `render-config` with a Private Network link (`--private-*` flags).

use super::*;

const WORKER_V1_14: &str = include_str!("../talos/testdata/worker-v1.14.yaml");
const WORKER_V1_11: &str = include_str!("../talos/testdata/worker-v1.11.yaml");

fn kinds(docs: &[Yaml], kind: &str) -> Vec<Yaml> {
    docs.iter()
        .filter(|d| d.get("kind").and_then(Yaml::as_str) == Some(kind))
        .cloned()
        .collect()
}

fn em_link() -> PrivateLink {
    PrivateLink {
        vlan: Some(12),
        mac: None,
        address: Some("127.16.0.7/22".into()),
        subnets: vec!["127.16.0.0/22".into()],
        internal_ip: true,
    }
}

#[test]
fn an_elastic_metal_node_gets_its_vlan() {
    let claim = claim();
    let class = class();
    let link = em_link();
    let req = RenderRequest {
        private_link: Some(&link),
        ..request(&claim, &class, WORKER)
    };
    let out = render(&req).unwrap();
    let docs = docs(&out);
    let vlan = kinds(&docs, "VLANConfig");
    assert_eq!(vlan.len(), 1);
    assert_eq!(vlan[0]["name"].as_str(), Some("net0.12"));
    assert_eq!(
        at(&docs[0], &["machine", "kubelet", "nodeIP", "validSubnets"]),
        &serde_yaml_ng::from_str::<Yaml>("[127.16.0.0/22]").unwrap()
    );
    assert!(out.contains(
        "# Private Network link net0.12 (127.16.0.7/22); the Node's InternalIP: private (kubelet nodeIP.validSubnets 127.16.0.0/22).\n"
    ));
    // Without the flags: no link, no header line.
    let plain = render(&request(&claim, &class, WORKER)).unwrap();
    assert!(kinds(&self::docs(&plain), "VLANConfig").is_empty());
    assert!(!plain.contains("Private Network"));
}

#[test]
fn a_vm_gets_its_private_nic() {
    let claim = vm_claim();
    let class = vm_class();
    let link = PrivateLink {
        vlan: None,
        mac: Some("02:00:00:00:00:aa".into()),
        address: None,
        internal_ip: false,
        ..em_link()
    };
    let req = VmRenderRequest {
        private_link: Some(&link),
        ..vm_request(&claim, &class, WORKER_V1_14)
    };
    let out = render_vm(&req).unwrap();
    let docs = docs(&out);
    assert_eq!(
        kinds(&docs, "LinkConfig")[0]["name"].as_str(),
        Some("priv0")
    );
    assert_eq!(
        kinds(&docs, "DHCPv4Config")[0]["name"].as_str(),
        Some("priv0")
    );
    assert!(out.contains("# Private Network link priv0 (DHCP); the Node's InternalIP: public.\n"));
    // Talos 1.14 keeps the kubelet in documents: no nodeIP was added.
    assert!(
        kinds(&docs, "KubeNodeConfig")[0]["nodeIP"]
            .get("validSubnets")
            .is_none()
    );
}

#[test]
fn a_talos_1_11_base_cannot_have_a_private_network() {
    let claim = claim();
    let class = class();
    let link = em_link();
    let req = RenderRequest {
        private_link: Some(&link),
        ..request(&claim, &class, WORKER_V1_11)
    };
    let err = render(&req).unwrap_err();
    assert!(err.to_string().contains("Talos 1.12 or later"), "{err}");
}

#[test]
fn private_link_flags_are_parsed_and_checked_against_the_kind() {
    let base = ["--nodeclass", "default", "--nodeclaim", "x"];
    let args = |extra: &[&str]| parse_args(&[&base[..], extra].concat());

    let a = args(&[
        "--private-vlan",
        "12",
        "--private-address",
        "127.16.0.7/22",
        "--private-subnet",
        "127.16.0.0/22",
        "--private-subnet",
        "127.17.0.0/22",
    ])
    .unwrap();
    assert_eq!(
        a.private_link(ClassKind::ElasticMetal).unwrap(),
        Some(PrivateLink {
            subnets: vec!["127.16.0.0/22".into(), "127.17.0.0/22".into()],
            ..em_link()
        })
    );
    assert!(
        a.private_link(ClassKind::Instance)
            .unwrap_err()
            .contains("--private-mac")
    );

    let a = args(&["--private-mac", "02:00:00:00:00:AA", "--public-node-ip"]).unwrap();
    let link = a.private_link(ClassKind::Instance).unwrap().unwrap();
    assert_eq!(link.mac.as_deref(), Some("02:00:00:00:00:aa"));
    assert_eq!((link.address, link.internal_ip), (None, false));
    assert!(
        a.private_link(ClassKind::ElasticMetal)
            .unwrap_err()
            .contains("--private-vlan")
    );

    assert_eq!(
        args(&[]).unwrap().private_link(ClassKind::ElasticMetal),
        Ok(None)
    );
    // Out of range, both kinds at once, details without a link, a bad MAC.
    for bad in [
        &["--private-vlan", "0"][..],
        &["--private-vlan", "4095"],
        &["--private-vlan", "1", "--private-mac", "02:00:00:00:00:aa"],
        &["--private-address", "127.16.0.7/22"],
        &["--private-subnet", "127.16.0.0/22"],
        &["--public-node-ip"],
        &["--private-mac", "02:00:00:00:aa"],
    ] {
        assert!(args(bad).is_err(), "{bad:?}");
    }
}
