use super::*;

#[test]
fn the_install_disk_is_read_from_a_dev_path_selector() {
    assert_eq!(
        dev_path_of(r#"disk.dev_path == "/dev/sda""#).as_deref(),
        Some("/dev/sda")
    );
    assert_eq!(
        dev_path_of(r#""/dev/nvme0n1"==disk.dev_path"#).as_deref(),
        Some("/dev/nvme0n1")
    );
    assert_eq!(dev_path_of("disk.size > 10u * GB"), None);
    assert_eq!(dev_path_of(r#"disk.model == "x""#), None);
}

/// A Talos 1.14 `talosctl gen config` worker with the provider's node
/// settings in the typed documents.
const WORKER_V114: &str = include_str!("../../tests/fixtures/worker-v1.14.yaml");

fn invalid(yaml: &str) -> Vec<String> {
    match crate::machine_config::parse(yaml) {
        Err(crate::machine_config::ConfigError::Invalid(errors)) => errors,
        other => panic!("expected validation errors, got {other:?}"),
    }
}

#[test]
fn a_talos_1_14_config_is_read_from_its_typed_documents() {
    use crate::machine_config::{Taint, parse};
    let cfg = parse(WORKER_V114).unwrap();
    assert_eq!(cfg.hostname.as_deref(), Some("default-abcde"));
    assert_eq!(cfg.control_plane_endpoint, "https://10.0.0.1:6443");
    // acceptedCAs holds the PEM; the kubelet gets it as cluster.ca.crt would.
    let ca = B64.decode(cfg.cluster_ca_crt.as_deref().unwrap()).unwrap();
    assert!(
        String::from_utf8(ca)
            .unwrap()
            .starts_with("-----BEGIN CERTIFICATE-----")
    );
    assert_eq!(
        cfg.bootstrap_token.as_ref().unwrap().expose(),
        "d1qqj5.zuavv91ltbolc4zc"
    );
    assert_eq!(cfg.node_labels["karpenter.sh/nodepool"], "default");
    assert_eq!(cfg.node_annotations["example.com/owner"], "team-a");
    assert_eq!(
        cfg.node_taints,
        vec![Taint {
            key: "dedicated".into(),
            value: "gpu".into(),
            effect: "NoSchedule".into()
        }]
    );
    assert_eq!(cfg.node_ip_subnets, vec!["127.80.0.0/24"]);
    assert_eq!(
        cfg.provider_id.as_deref(),
        Some("scaleway://baremetal/fr-par-2/11111111-2222-3333-4444-555555555555")
    );
    assert_eq!(
        cfg.kubelet_image.as_deref(),
        Some("ghcr.io/siderolabs/kubelet:v1.35.0")
    );
    assert_eq!(cfg.max_pods, Some(110));
    assert_eq!(cfg.kube_reserved["cpu"], "70m");
    assert_eq!(cfg.register_with_taints[0].key, "karpenter.sh/unregistered");
    assert_eq!(cfg.install_disk.as_deref(), Some("/dev/nvme0n1"));
    assert_eq!(
        cfg.install_image.as_deref(),
        Some("factory.talos.dev/metal-installer/abc:v1.14.1")
    );
    assert_eq!(cfg.network.vlans[0].vlan, Some(100));
    assert_eq!(cfg.network.vlans[0].parent.as_deref(), Some("net0"));
}

#[test]
fn the_v1alpha1_form_gives_the_same_settings() {
    let cfg = crate::machine_config::parse(crate::machine_config::tests::WORKER).unwrap();
    assert_eq!(
        cfg.install_image.as_deref(),
        Some("factory.talos.dev/metal-installer/abc:v1.13.9")
    );
    assert!(cfg.node_ip_subnets.is_empty());
    let yaml = crate::machine_config::tests::WORKER.replace(
        "  kubelet:\n",
        "  kubelet:\n    nodeIP:\n      validSubnets: [127.80.0.0/24, \"!127.80.0.1/32\"]\n",
    );
    let cfg = crate::machine_config::parse(&yaml).unwrap();
    assert_eq!(cfg.node_ip_subnets, vec!["127.80.0.0/24", "!127.80.0.1/32"]);
}

#[test]
fn a_setting_in_both_forms_is_refused_as_talos_does() {
    let both = WORKER_V114.replace(
        "machine:\n    type: worker\n",
        "machine:\n    type: worker\n    nodeLabels: {a: b}\n    kubelet:\n        image: x\n    install:\n        disk: /dev/sda\n",
    );
    let errors = invalid(&both);
    for expected in [
        ".machine.nodeLabels is already set in v1alpha1 config",
        "kubelet config is already set in v1alpha1 config (.machine.kubelet)",
        "UnattendedInstallConfig config is incompatible with v1alpha1 config (.machine.install)",
    ] {
        assert!(
            errors.iter().any(|e| e == expected),
            "{expected}: {errors:?}"
        );
    }
}

#[test]
fn invalid_node_ip_subnets_are_refused() {
    let yaml = WORKER_V114.replace("- 127.80.0.0/24", "- 127.80.0.0/99");
    assert_eq!(
        invalid(&yaml),
        vec!["nodeIP subnet is not valid: \"127.80.0.0/99\"".to_string()]
    );
}

#[test]
fn a_vlan_document_is_checked_as_talos_checks_it() {
    let yaml = WORKER_V114
        .replace("vlanID: 100", "vlanID: 5000")
        .replace("- address: 127.80.0.2/24", "- address: 127.80.0.2");
    let errors = invalid(&yaml);
    assert!(
        errors.contains(
            &"VLANConfig \"net0.100\": vlanID must be specified and between 1 and 4094".to_string()
        ),
        "{errors:?}"
    );
    assert!(
        errors
            .contains(&"VLANConfig \"net0.100\": address 0 must be a valid IP prefix".to_string()),
        "{errors:?}"
    );
}
