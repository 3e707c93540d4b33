use super::*;

/// A worker config shaped like `talosctl gen config` output plus the
/// provider's per-node patches (shared with the integration tests).
pub(crate) const WORKER: &str = include_str!("../tests/fixtures/worker.yaml");

fn invalid(yaml: &str) -> Vec<String> {
    match parse(yaml) {
        Err(ConfigError::Invalid(errors)) => errors,
        other => panic!("expected validation errors, got {other:?}"),
    }
}

#[test]
fn worker_config_is_read() {
    let cfg = parse(WORKER).unwrap();
    assert_eq!(cfg.hostname.as_deref(), Some("default-abcde"));
    assert_eq!(cfg.control_plane_endpoint, "https://127.0.0.1:6443");
    assert_eq!(
        cfg.provider_id.as_deref(),
        Some("scaleway://baremetal/fr-par-2/11111111-2222-3333-4444-555555555555")
    );
    assert_eq!(cfg.node_labels["karpenter.sh/nodepool"], "default");
    assert_eq!(
        cfg.node_taints,
        vec![
            Taint {
                key: "dedicated".into(),
                value: "gpu".into(),
                effect: "NoSchedule".into()
            },
            Taint {
                key: "example.com/flag".into(),
                value: "".into(),
                effect: "PreferNoSchedule".into()
            },
        ]
    );
    assert_eq!(
        cfg.register_with_taints,
        vec![Taint {
            key: "karpenter.sh/unregistered".into(),
            value: "".into(),
            effect: "NoExecute".into()
        }]
    );
    assert_eq!(cfg.max_pods, Some(250));
    assert_eq!(cfg.system_reserved["memory"], "512Mi");
    assert_eq!(
        cfg.kubelet_image.as_deref(),
        Some("ghcr.io/siderolabs/kubelet:v1.35.2")
    );
    assert_eq!(cfg.install_disk.as_deref(), Some("/dev/nvme0n1"));
    assert_eq!(cfg.cluster_ca_crt.as_deref(), Some("LS0tLS1CRUdJTi=="));
    let token = cfg.bootstrap_token.as_ref().unwrap();
    assert_eq!(token.expose(), "k8sabc.0123456789abcdef");
    // The token is never printed, even through the config's Debug.
    assert!(!format!("{cfg:?}").contains("0123456789abcdef"));
    assert!(format!("{token:?}") == "<redacted>");
}

#[test]
fn provider_id_may_be_a_list() {
    let yaml = WORKER.replace(
        "provider-id: scaleway://baremetal/fr-par-2/11111111-2222-3333-4444-555555555555",
        "provider-id: [\"scaleway://baremetal/fr-par-2/x\"]",
    );
    assert_eq!(
        parse(&yaml).unwrap().provider_id.as_deref(),
        Some("scaleway://baremetal/fr-par-2/x")
    );
}

#[test]
fn deprecated_network_hostname_is_a_fallback() {
    let base = WORKER.split("\n---\n").next().unwrap();
    assert_eq!(parse(base).unwrap().hostname, None);
    let yaml = base.replace(
        "  type: worker\n",
        "  type: worker\n  network:\n    hostname: legacy-node\n",
    );
    assert_eq!(
        parse(&yaml).unwrap().hostname.as_deref(),
        Some("legacy-node")
    );
}

#[test]
fn missing_essentials_are_reported_together() {
    let yaml = WORKER
        .replace(
            "    endpoint: https://127.0.0.1:6443\n",
            "    endpoint: \"\"\n",
        )
        .replace("  token: k8sabc.0123456789abcdef\n", "");
    let errors = invalid(&yaml);
    assert_eq!(
        errors,
        vec![
            "invalid controlplane endpoint: \"\" is not an https URL".to_string(),
            "cluster.token is required on worker machines".to_string(),
        ]
    );
    let message = ConfigError::Invalid(errors).to_string();
    assert!(message.starts_with("2 errors occurred:\n\t* invalid controlplane endpoint"));
    assert!(message.ends_with("\n\n"));
}

#[test]
fn controlplane_and_unknown_types_are_refused() {
    assert_eq!(
        invalid(&WORKER.replace("type: worker", "type: controlplane")),
        vec!["talos-sim only simulates worker machines, got machine.type \"controlplane\""]
    );
    assert_eq!(
        invalid(&WORKER.replace("type: worker", "type: toaster")),
        vec!["unknown machine type \"toaster\""]
    );
}

#[test]
fn secrets_are_never_echoed() {
    let yaml = WORKER.replace("k8sabc.0123456789abcdef", "SuperSecret.Value");
    let message = parse(&yaml).unwrap_err().to_string();
    assert!(message.contains("not a valid bootstrap token"));
    assert!(!message.contains("SuperSecret"));
}

#[test]
fn ca_keys_on_workers_are_refused() {
    let yaml = WORKER.replacen(
        "    key: \"\"",
        "    key: LS0tLS1CRUdJTiBFQyBQUklWQVRFIEtFWS0tLS0t",
        1,
    );
    assert_eq!(
        invalid(&yaml),
        vec!["issuing Talos API CA key is not allowed on non-controlplane nodes (.machine.ca)"]
    );
}

#[test]
fn structural_problems() {
    assert!(matches!(
        parse("machine: [").unwrap_err(),
        ConfigError::Decode(_)
    ));
    assert!(
        matches!(parse("foo: bar").unwrap_err(), ConfigError::Decode(m) if m == "missing kind")
    );
    assert_eq!(
        parse(&WORKER.replace("persist: true", "persist: true\nbogus: 1")).unwrap_err(),
        ConfigError::Decode("unknown keys found during decoding:\nbogus".into())
    );
    assert_eq!(
        invalid("apiVersion: v1alpha1\nkind: HostnameConfig\nhostname: a\n"),
        vec!["the applied machine configuration doesn't contain v1alpha1 config"]
    );
    assert_eq!(
        invalid("version: v1alpha1\ncluster: {}\n"),
        vec!["machine instructions are required"]
    );
    let doubled = format!("{WORKER}---\napiVersion: v1alpha1\nkind: HostnameConfig\nhostname: b\n");
    assert!(
        matches!(parse(&doubled).unwrap_err(), ConfigError::Decode(m) if m.contains("duplicate"))
    );
}

#[test]
fn bad_labels_taints_and_hostnames() {
    let yaml = WORKER
        .replace("karpenter.sh/nodepool: default", "\"bad key!\": default")
        .replace("dedicated: gpu:NoSchedule", "dedicated: gpu:Sometimes")
        .replace("hostname: default-abcde", "hostname: Not_A_Host");
    let errors = invalid(&yaml);
    assert!(
        errors.contains(&"invalid hostname \"Not_A_Host\"".to_string()),
        "{errors:?}"
    );
    assert!(
        errors.contains(&"invalid machine node labels: invalid label key \"bad key!\"".to_string())
    );
    assert!(
        errors.contains(
            &"invalid machine node taints: invalid taint effect: \"Sometimes\"".to_string()
        )
    );
}

#[test]
fn a_hostname_document_next_to_v1alpha1_hostname_fields_is_refused() {
    let stable = WORKER.replacen(
        "  type: worker\n",
        "  type: worker\n  features:\n    stableHostname: true\n",
        1,
    );
    assert_eq!(
        invalid(&stable),
        ["stable hostname is already set in v1alpha1 config"]
    );
    let static_name = WORKER.replacen(
        "  type: worker\n",
        "  type: worker\n  network:\n    hostname: legacy-node\n",
        1,
    );
    assert_eq!(
        invalid(&static_name),
        ["static hostname is already set in v1alpha1 config"]
    );
    // `stableHostname: false` says nothing Talos would contradict.
    let off = WORKER.replacen(
        "  type: worker\n",
        "  type: worker\n  features:\n    stableHostname: false\n",
        1,
    );
    assert!(parse(&off).is_ok());
}
