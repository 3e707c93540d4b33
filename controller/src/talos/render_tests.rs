use super::*;

/// Worker configs as `talosctl gen config` of each supported Talos minor
/// writes them (`just talos-testdata`).
const BASE: &str = include_str!("testdata/worker-v1.13.yaml");
const BASE_V1_14: &str = include_str!("testdata/worker-v1.14.yaml");
const BASE_V1_12: &str = include_str!("testdata/worker-v1.12.yaml");
const BASE_V1_11: &str = include_str!("testdata/worker-v1.11.yaml");
/// `cluster.token` of BASE: the shared token no node may join with.
fn base_token() -> String {
    let main: Value = serde_yaml_ng::Deserializer::from_str(BASE)
        .map(|d| Value::deserialize(d).unwrap())
        .next()
        .unwrap();
    main["cluster"]["token"].as_str().unwrap().to_string()
}

fn node() -> NodeSettings {
    NodeSettings {
        hostname: "default-abc12".into(),
        labels: BTreeMap::from([
            ("karpenter.sh/nodepool".to_string(), "default".to_string()),
            (
                "topology.kubernetes.io/zone".to_string(),
                "fr-par-2".to_string(),
            ),
        ]),
        register_taints: vec![
            Taint {
                key: "dedicated".into(),
                value: Some("metal".into()),
                effect: "NoSchedule".into(),
            },
            Taint {
                key: "karpenter.sh/unregistered".into(),
                value: None,
                effect: "NoExecute".into(),
            },
        ],
        provider_id: "scaleway://baremetal/fr-par-2/srv-1".into(),
        install_disk: "nvme0n1".into(),
        primary_mac: "A0:36:9F:00:00:02".into(),
        patches: vec![],
        bootstrap_token: "k8s0a1.0123456789abcdef".into(),
        kubelet_reservations: None,
        private_network: None,
    }
}

/// A 16-thread, 64 GiB server's reservations, as Create computes them.
fn reserved_node() -> NodeSettings {
    NodeSettings {
        kubelet_reservations: Some(KubeletReservations::for_capacity(
            &crate::catalog::Resources {
                cpu_millis: 16_000,
                memory_bytes: 64 << 30,
                ephemeral_storage_bytes: 960_000_000_000,
                pods: 110,
                nvidia_gpus: 0,
            },
        )),
        ..node()
    }
}

fn docs(rendered: &str) -> Vec<Value> {
    serde_yaml_ng::Deserializer::from_str(rendered)
        .map(|d| Value::deserialize(d).expect("rendered YAML parses"))
        .collect()
}

fn at<'a>(doc: &'a Value, path: &[&str]) -> &'a Value {
    path.iter().fold(doc, |v, k| {
        v.get(*k)
            .unwrap_or_else(|| panic!("missing {}", path.join(".")))
    })
}

fn yaml(text: &str) -> Value {
    serde_yaml_ng::from_str(text).expect("test YAML")
}

#[test]
fn per_node_settings_land_in_their_v1_13_places() {
    let out = render_machine_config(BASE, &node()).expect("renders");
    let docs = docs(&out);
    assert_eq!(docs.len(), 3, "{out}");
    let main = &docs[0];
    assert_eq!(at(main, &["version"]), &yaml("v1alpha1"));
    assert_eq!(
        at(main, &["machine", "nodeLabels"]),
        &yaml("{karpenter.sh/nodepool: default, topology.kubernetes.io/zone: fr-par-2}")
    );
    assert_eq!(
        at(main, &["machine", "kubelet", "extraArgs"]),
        &yaml("{provider-id: 'scaleway://baremetal/fr-par-2/srv-1'}")
    );
    assert_eq!(
        at(
            main,
            &["machine", "kubelet", "extraConfig", "registerWithTaints"]
        ),
        &yaml(
            "[{key: dedicated, value: metal, effect: NoSchedule}, {key: karpenter.sh/unregistered, effect: NoExecute}]"
        )
    );
    assert_eq!(
        at(main, &["machine", "install", "disk"]),
        &yaml("/dev/nvme0n1")
    );
    // The base's own settings survive.
    assert_eq!(
        at(main, &["machine", "install", "grubUseUKICmdline"]),
        &Value::Bool(true)
    );
    assert_eq!(
        at(main, &["machine", "kubelet", "image"]),
        &yaml("ghcr.io/siderolabs/kubelet:v1.35.0")
    );
    assert_eq!(
        at(main, &["cluster", "controlPlane", "endpoint"]),
        &yaml("https://10.0.0.1:6443")
    );
    assert_eq!(
        at(main, &["cluster", "token"]),
        &yaml("k8s0a1.0123456789abcdef")
    );
    assert!(
        !out.contains(&base_token()),
        "the base's shared token is replaced"
    );
    // The rest of the cluster section survives.
    assert_eq!(at(main, &["cluster", "clusterName"]), &yaml("demo"));

    // The base's `HostnameConfig {auto: stable}` is replaced, not duplicated.
    assert_eq!(
        docs[1],
        yaml("{apiVersion: v1alpha1, kind: HostnameConfig, hostname: default-abc12}")
    );
    assert_eq!(
        docs[2],
        yaml(
            r#"{apiVersion: v1alpha1, kind: LinkAliasConfig, name: net0, selector: {match: 'mac(link.permanent_addr) == "a0:36:9f:00:00:02"'}}"#
        )
    );
}

#[test]
fn output_is_multi_document_yaml_in_talos_order() {
    let out = render_machine_config(BASE, &node()).expect("renders");
    assert!(out.starts_with("version: v1alpha1\n"), "{out}");
    assert_eq!(out.matches("\n---\n").count(), 2);
    assert!(
        out.contains("\nkind: HostnameConfig\nhostname: default-abc12\n"),
        "{out}"
    );
}

#[test]
fn each_talos_minors_base_gets_the_hostname_where_that_minor_reads_it() {
    for (minor, base) in [("v1.12", BASE_V1_12), ("v1.13", BASE)] {
        let out = render_machine_config(base, &node()).expect("renders");
        let docs = docs(&out);
        let kinds: Vec<&str> = docs[1..]
            .iter()
            .map(|d| d["kind"].as_str().unwrap())
            .collect();
        assert_eq!(kinds, ["HostnameConfig", "LinkAliasConfig"], "{minor}");
        assert_eq!(docs[1]["hostname"], yaml("default-abc12"), "{minor}");
        assert!(docs[1].get("auto").is_none(), "{minor}: {out}");
        let machine = &docs[0]["machine"];
        assert!(machine["network"].get("hostname").is_none(), "{minor}");
        assert!(
            machine["features"].get("stableHostname").is_none(),
            "{minor}"
        );
    }
    // Talos 1.11 knows no HostnameConfig or LinkAliasConfig document: the
    // v1alpha1 field, and no alias.
    let out = render_machine_config(BASE_V1_11, &node()).expect("renders");
    let docs = docs(&out);
    assert_eq!(docs.len(), 1, "{out}");
    assert!(!out.contains("\nkind:"), "{out}");
    let machine = &docs[0]["machine"];
    assert_eq!(machine["network"], yaml("{hostname: default-abc12}"));
    // A static hostname overrides the stable one; leaving the flag would say
    // two things at once.
    assert!(machine["features"].get("stableHostname").is_none(), "{out}");
    assert_eq!(machine["features"]["rbac"], Value::Bool(true));
    // Everything else is rendered the same way.
    assert_eq!(
        machine["kubelet"]["extraArgs"]["provider-id"],
        yaml("scaleway://baremetal/fr-par-2/srv-1")
    );
    assert_eq!(machine["install"]["disk"], yaml("/dev/nvme0n1"));
    assert_eq!(
        at(&docs[0], &["cluster", "token"]),
        &yaml("k8s0a1.0123456789abcdef")
    );
}

#[test]
fn a_patch_with_a_network_document_marks_an_old_base_as_multi_document() {
    let mut n = node();
    n.patches = vec![
        "apiVersion: v1alpha1\nkind: ResolverConfig\nnameservers:\n  - address: 1.1.1.1\n".into(),
    ];
    let out = render_machine_config(BASE_V1_11, &n).expect("renders");
    let rendered = docs(&out);
    let kinds: Vec<&str> = rendered[1..]
        .iter()
        .map(|d| d["kind"].as_str().unwrap())
        .collect();
    assert_eq!(
        kinds,
        ["HostnameConfig", "LinkAliasConfig", "ResolverConfig"],
        "{out}"
    );
    let machine = &rendered[0]["machine"];
    assert!(machine["features"].get("stableHostname").is_none(), "{out}");
    assert!(machine["network"].get("hostname").is_none(), "{out}");

    // Deleting a document is no sign of the node's version.
    n.patches = vec!["apiVersion: v1alpha1\nkind: HostnameConfig\n$patch: delete\n".into()];
    let out = render_machine_config(BASE_V1_11, &n).expect("renders");
    assert_eq!(docs(&out).len(), 1, "{out}");
}

#[test]
fn yaml11_boolean_look_alikes_are_quoted_in_the_output() {
    let mut n = node();
    n.labels.insert("example.com/enabled".into(), "yes".into());
    n.patches = vec![
        "apiVersion: v1alpha1\nkind: HostnameConfig\nauto: off\nhostname: custom\n".into(),
        "machine:\n  sysctls:\n    net.ipv4.ip_forward: on\n".into(),
    ];
    let out = render_machine_config(BASE, &n).expect("renders");
    assert!(out.contains("example.com/enabled: 'yes'\n"), "{out}");
    assert!(out.contains("net.ipv4.ip_forward: 'on'\n"), "{out}");
    // (The patch is merged into the node's HostnameConfig: its keys first.)
    assert!(
        out.contains("kind: HostnameConfig\nhostname: custom\nauto: 'off'\n"),
        "{out}"
    );
    // Booleans stay booleans.
    assert!(out.contains("wipe: false\n"), "{out}");
}

#[test]
fn a_v1alpha1_base_gets_its_hostname_replaced_and_its_disk_selector_removed() {
    let base = "version: v1alpha1\nmachine:\n  type: worker\n  network:\n    hostname: old-name\n  install:\n    diskSelector:\n      size: '> 100GB'\n  nodeLabels:\n    team: infra\n  kubelet:\n    extraConfig:\n      maxPods: 250\n      registerWithTaints:\n        - {key: dedicated, value: old, effect: NoSchedule}\n        - {key: gpu, effect: NoSchedule}\ncluster: {}\n";
    let out = render_machine_config(base, &node()).expect("renders");
    let main = &docs(&out)[0];
    assert_eq!(
        at(main, &["machine", "network"]),
        &yaml("{hostname: default-abc12}")
    );
    assert!(
        main["machine"]["install"].get("diskSelector").is_none(),
        "{out}"
    );
    assert_eq!(at(main, &["machine", "nodeLabels", "team"]), &yaml("infra"));
    assert_eq!(
        at(main, &["machine", "kubelet", "extraConfig", "maxPods"]),
        &yaml("250")
    );
    assert_eq!(
        at(
            main,
            &["machine", "kubelet", "extraConfig", "registerWithTaints"]
        ),
        &yaml(
            "[{key: gpu, effect: NoSchedule}, {key: dedicated, value: metal, effect: NoSchedule}, {key: karpenter.sh/unregistered, effect: NoExecute}]"
        )
    );
    // No typed documents: the base is for a Talos that may know none.
    assert_eq!(docs(&out).len(), 1);
}

#[test]
fn a_documents_base_loses_the_deprecated_hostname_fields() {
    // A hand-edited base with both forms, which Talos refuses as it is.
    let base = "version: v1alpha1\nmachine:\n  network:\n    hostname: old-name\n  features:\n    stableHostname: true\n    rbac: true\ncluster: {}\n---\napiVersion: v1alpha1\nkind: HostnameConfig\nauto: stable\n";
    let out = render_machine_config(base, &node()).expect("renders");
    let docs = docs(&out);
    assert!(docs[0]["machine"].get("network").is_none(), "{out}");
    assert_eq!(docs[0]["machine"]["features"], yaml("{rbac: true}"));
    assert_eq!(docs[1]["hostname"], yaml("default-abc12"));
}

#[test]
fn other_network_settings_are_kept() {
    let base = "version: v1alpha1\nmachine:\n  network:\n    hostname: x\n    nameservers: [1.1.1.1]\ncluster: {}\n";
    let out = render_machine_config(base, &node()).expect("renders");
    assert_eq!(
        at(&docs(&out)[0], &["machine", "network"]),
        &yaml("{hostname: default-abc12, nameservers: [1.1.1.1]}")
    );
    let out = render_machine_config(
        &format!("{base}---\napiVersion: v1alpha1\nkind: HostnameConfig\nauto: stable\n"),
        &node(),
    )
    .expect("renders");
    assert_eq!(
        at(&docs(&out)[0], &["machine", "network"]),
        &yaml("{nameservers: [1.1.1.1]}")
    );
}

#[test]
fn patches_merge_v1alpha1_and_replace_or_delete_typed_documents() {
    let mut n = node();
    n.patches = vec![
        "machine:\n  kubelet:\n    extraArgs:\n      rotate-server-certificates: 'true'\n  certSANs: [10.1.0.1]\n  install:\n    wipe: true\n  features:\n    hostDNS:\n      $patch: delete\n".into(),
        "apiVersion: v1alpha1\nkind: LinkAliasConfig\nname: net0\nselector:\n  match: link.driver == \"ixgbe\"\n---\napiVersion: v1alpha1\nkind: ResolverConfig\nnameservers:\n  - address: 1.1.1.1\n".into(),
        "apiVersion: v1alpha1\nkind: HostnameConfig\n$patch: delete\n".into(),
    ];
    let out = render_machine_config(BASE, &n).expect("renders");
    let docs = docs(&out);
    let main = &docs[0];
    assert_eq!(
        at(main, &["machine", "kubelet", "extraArgs"]),
        &yaml(
            "{provider-id: 'scaleway://baremetal/fr-par-2/srv-1', rotate-server-certificates: 'true'}"
        )
    );
    assert_eq!(at(main, &["machine", "certSANs"]), &yaml("[10.1.0.1]"));
    assert_eq!(
        at(main, &["machine", "install", "wipe"]),
        &Value::Bool(true)
    );
    assert_eq!(
        at(main, &["machine", "install", "disk"]),
        &yaml("/dev/nvme0n1")
    );
    assert!(main["machine"]["features"].get("hostDNS").is_none());
    assert!(main["machine"]["features"].get("kubePrism").is_some());

    let kinds: Vec<&str> = docs[1..]
        .iter()
        .map(|d| d["kind"].as_str().unwrap())
        .collect();
    assert_eq!(kinds, ["LinkAliasConfig", "ResolverConfig"]);
    assert_eq!(
        at(&docs[1], &["selector", "match"]),
        &yaml("link.driver == \"ixgbe\"")
    );
}

#[test]
fn lists_from_patches_are_appended() {
    let mut n = node();
    n.patches = vec!["machine:\n  kubelet:\n    extraConfig:\n      registerWithTaints:\n        - {key: extra, effect: NoSchedule}\n".into()];
    let out = render_machine_config(BASE, &n).expect("renders");
    let taints = at(
        &docs(&out)[0],
        &["machine", "kubelet", "extraConfig", "registerWithTaints"],
    )
    .clone();
    assert_eq!(taints.as_sequence().map(Vec::len), Some(3));
    assert_eq!(taints[2], yaml("{key: extra, effect: NoSchedule}"));
}

#[test]
fn invalid_inputs_are_reported_without_their_content() {
    assert_eq!(
        render_machine_config(
            "apiVersion: v1alpha1\nkind: HostnameConfig\nauto: stable\n",
            &node()
        ),
        Err(RenderError::InvalidBase("no v1alpha1 document".into()))
    );
    assert_eq!(
        render_machine_config("version: v1alpha1\n---\nversion: v1alpha1\n", &node()),
        Err(RenderError::InvalidBase(
            "more than one v1alpha1 document".into()
        ))
    );
    assert_eq!(
        render_machine_config("version: v1alpha2\nmachine: {}\n", &node()),
        Err(RenderError::InvalidBase(
            "the main document is not version v1alpha1".into()
        ))
    );
    assert_eq!(
        render_machine_config("version: v1alpha1\nmachine: [secret-value]\n", &node()),
        Err(RenderError::InvalidBase("machine is not a mapping".into()))
    );
    let err = render_machine_config("- just a list\n", &node()).unwrap_err();
    assert_eq!(
        err,
        RenderError::InvalidBase("a document is not a mapping".into())
    );

    let mut n = node();
    n.patches = vec!["machine: {}\n".into(), "machine: [unclosed\n".into()];
    match render_machine_config(BASE, &n) {
        Err(RenderError::InvalidPatch { index: 1, reason }) => {
            assert!(!reason.contains("unclosed"), "{reason}")
        }
        other => panic!("expected InvalidPatch #1, got {other:?}"),
    }
}

#[test]
fn the_bootstrap_token_wins_over_patches() {
    let mut n = node();
    n.patches = vec!["cluster:\n  token: aaaaaa.bbbbbbbbbbbbbbbb\n".into()];
    let out = render_machine_config(BASE, &n).expect("renders");
    assert_eq!(
        at(&docs(&out)[0], &["cluster", "token"]),
        &yaml("k8s0a1.0123456789abcdef")
    );
    // A base without a cluster section gets one.
    let out = render_machine_config("version: v1alpha1\nmachine: {type: worker}\n", &node())
        .expect("renders");
    assert_eq!(
        at(&docs(&out)[0], &["cluster", "token"]),
        &yaml("k8s0a1.0123456789abcdef")
    );
}

#[test]
fn a_missing_or_malformed_bootstrap_token_is_an_error_without_its_value() {
    let mut n = node();
    n.bootstrap_token = String::new();
    assert_eq!(
        render_machine_config(BASE, &n),
        Err(RenderError::MissingBootstrapToken)
    );
    for bad in [
        "k8s0a1",
        "k8s0a1.0123456789ABCDEF",
        "k8s0a.0123456789abcdef",
        "k8s0a1.0123456789abcdef0",
        "k8s0a1-0123456789abcdef",
    ] {
        n.bootstrap_token = bad.into();
        let err = render_machine_config(BASE, &n).unwrap_err();
        assert_eq!(err, RenderError::InvalidBootstrapToken, "{bad}");
        assert!(!err.to_string().contains(bad), "{err}");
    }
}

#[test]
fn debug_output_redacts_the_bootstrap_token() {
    let debug = format!("{:?}", node());
    assert!(!debug.contains("0123456789abcdef"), "{debug}");
    assert!(debug.contains("<redacted>"), "{debug}");
}

#[test]
fn kubelet_reservations_land_in_extra_config_next_to_the_taints() {
    let out = render_machine_config(BASE, &reserved_node()).expect("renders");
    let docs = docs(&out);
    // The v1.13 multi-document form is unchanged by the extra settings.
    assert_eq!(docs.len(), 3, "{out}");
    assert!(out.starts_with("version: v1alpha1\n"), "{out}");
    let extra = at(&docs[0], &["machine", "kubelet", "extraConfig"]);
    assert_eq!(extra["maxPods"], yaml("110"));
    // cpu: 6% + 1% + 2 × 0.5% + 12 × 0.25% of a thread = 110m;
    // memory: 255Mi + 11Mi × 110 pods = 1465Mi.
    assert_eq!(
        extra["kubeReserved"],
        yaml("{cpu: 110m, memory: 1465Mi, ephemeral-storage: 1Gi}")
    );
    assert_eq!(
        extra["systemReserved"],
        yaml("{cpu: 50m, memory: 384Mi, ephemeral-storage: 256Mi}")
    );
    assert_eq!(
        extra["evictionHard"],
        yaml("{memory.available: 100Mi, nodefs.available: 10%}")
    );
    // Quantities are strings, as the KubeletConfiguration expects them.
    assert!(extra["kubeReserved"]["cpu"].is_string());
    assert_eq!(
        extra["registerWithTaints"].as_sequence().map(Vec::len),
        Some(2)
    );
    assert_eq!(
        at(&docs[0], &["machine", "kubelet", "image"]),
        &yaml("ghcr.io/siderolabs/kubelet:v1.35.0")
    );
}

#[test]
fn kubelet_reservations_agree_with_the_catalog_overhead_inputs() {
    let node = reserved_node();
    let reservations = node.kubelet_reservations.expect("set");
    let out = render_machine_config(BASE, &node).expect("renders");
    let extra = at(&docs(&out)[0], &["machine", "kubelet", "extraConfig"]).clone();
    for (key, quantities) in reservations.kubelet_config_maps() {
        let expected: Mapping = quantities
            .into_iter()
            .map(|(k, v)| (Value::from(k), Value::from(v)))
            .collect();
        assert_eq!(extra[key], Value::Mapping(expected), "{key}");
    }
}

#[test]
fn without_reservations_the_base_kubelet_settings_are_left_alone() {
    let out = render_machine_config(BASE, &node()).expect("renders");
    let docs = docs(&out);
    let extra = at(&docs[0], &["machine", "kubelet", "extraConfig"]);
    for key in ["maxPods", "kubeReserved", "systemReserved", "evictionHard"] {
        assert!(extra.get(key).is_none(), "{key} in {out}");
    }
}

#[test]
fn a_patch_overrides_kubelet_reservations_key_by_key() {
    let mut n = reserved_node();
    n.patches = vec![
        "machine:\n  kubelet:\n    extraConfig:\n      maxPods: 250\n      kubeReserved:\n        memory: 4Gi\n".into(),
    ];
    let out = render_machine_config(BASE, &n).expect("renders");
    let docs = docs(&out);
    let extra = at(&docs[0], &["machine", "kubelet", "extraConfig"]);
    assert_eq!(extra["maxPods"], yaml("250"));
    assert_eq!(
        extra["kubeReserved"],
        yaml("{cpu: 110m, memory: 4Gi, ephemeral-storage: 1Gi}")
    );
    assert_eq!(
        extra["systemReserved"],
        yaml("{cpu: 50m, memory: 384Mi, ephemeral-storage: 256Mi}")
    );
}

#[test]
fn a_vm_keeps_the_base_install_section_and_gets_no_link_alias() {
    // A VM boots its image (nothing to install) and has one NIC whose MAC
    // the provider does not know before it runs.
    let vm = NodeSettings {
        install_disk: String::new(),
        primary_mac: String::new(),
        provider_id: "scaleway://instance/fr-par-2/vm-1".into(),
        ..node()
    };
    let base_install = at(&docs(BASE)[0], &["machine", "install"]).clone();
    let rendered = render_machine_config(BASE, &vm).unwrap();
    let docs = docs(&rendered);
    assert_eq!(at(&docs[0], &["machine", "install"]), &base_install);
    let kinds: Vec<&str> = docs[1..]
        .iter()
        .filter_map(|d| d.get("kind").and_then(Value::as_str))
        .collect();
    assert_eq!(kinds, ["HostnameConfig"]);
    assert_eq!(
        at(
            &docs[0],
            &["machine", "kubelet", "extraArgs", "provider-id"]
        ),
        &Value::from("scaleway://instance/fr-par-2/vm-1")
    );
}

/// The typed document of `kind` in a rendered config.
fn typed<'a>(docs: &'a [Value], kind: &str) -> &'a Value {
    docs.iter()
        .find(|d| d["kind"].as_str() == Some(kind))
        .unwrap_or_else(|| panic!("no {kind} document"))
}

#[test]
fn a_talos_1_14_base_gets_the_node_settings_in_its_documents() {
    let out = render_machine_config(BASE_V1_14, &reserved_node()).expect("renders");
    let docs = docs(&out);
    let machine = &docs[0]["machine"];
    // Talos 1.14 refuses these next to KubeletConfig, KubeNodeConfig and
    // UnattendedInstallConfig documents.
    for key in ["kubelet", "nodeLabels", "install"] {
        assert!(machine.get(key).is_none(), "machine.{key} written");
    }
    let kubelet = typed(&docs, "KubeletConfig");
    assert_eq!(
        kubelet["extraArgs"]["provider-id"],
        yaml("scaleway://baremetal/fr-par-2/srv-1")
    );
    assert_eq!(
        kubelet["config"]["registerWithTaints"]
            .as_sequence()
            .map(Vec::len),
        Some(2)
    );
    assert_eq!(kubelet["config"]["maxPods"], yaml("110"));
    assert!(kubelet["config"].get("kubeReserved").is_some());
    // The base's own fields stay.
    assert!(
        kubelet["image"]
            .as_str()
            .unwrap()
            .starts_with("ghcr.io/siderolabs/kubelet:")
    );
    assert_eq!(
        typed(&docs, "KubeNodeConfig")["labels"]["karpenter.sh/nodepool"],
        yaml("default")
    );
    assert_eq!(
        typed(&docs, "UnattendedInstallConfig")["provisioning"]["diskSelector"]["match"],
        yaml("disk.dev_path == \"/dev/nvme0n1\"")
    );
    assert_eq!(
        typed(&docs, "HostnameConfig")["hostname"],
        yaml("default-abc12")
    );
    assert_eq!(
        at(&docs[0], &["cluster", "token"]),
        &yaml("k8s0a1.0123456789abcdef")
    );
}

#[test]
fn a_typed_patch_is_merged_into_the_document_of_its_kind_and_name() {
    let mut n = node();
    n.patches = vec![
        "apiVersion: v1alpha1\nkind: KubeletConfig\nextraArgs:\n  rotate-server-certificates: 'true'\nconfig:\n  maxPods: 250\n".into(),
    ];
    let out = render_machine_config(BASE_V1_14, &n).expect("renders");
    let docs = docs(&out);
    let kubelet = typed(&docs, "KubeletConfig");
    assert_eq!(
        kubelet["extraArgs"],
        yaml(
            "{provider-id: 'scaleway://baremetal/fr-par-2/srv-1', rotate-server-certificates: 'true'}"
        )
    );
    assert_eq!(kubelet["config"]["maxPods"], yaml("250"));
    assert!(kubelet.get("image").is_some());
    assert_eq!(
        docs.iter()
            .filter(|d| d["kind"].as_str() == Some("KubeletConfig"))
            .count(),
        1
    );
}
