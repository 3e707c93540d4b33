use serde::Deserialize as _;
use serde_json::json;

use super::*;
use crate::nodeclass::instance::InstanceImageSelector;
use crate::nodeclass::{Billing, DiskSelector, RescueSshKey, SecretKeyRef, TalosImage};

const WORKER: &str = include_str!("../talos/testdata/worker-v1.13.yaml");

/// A base config whose every secret field is filled, with distinctive values
/// that must not survive redaction.
const FULL_SECRETS: &str = r#"version: v1alpha1
machine:
  type: worker
  token: mtok01.machinetokensecret
  ca:
    crt: PUBLIC-MACHINE-CA-CRT
    key: SECRET-MACHINE-CA-KEY
  kubelet:
    image: ghcr.io/siderolabs/kubelet:v1.35.0
  install: {}
cluster:
  id: CLUSTER-ID
  secret: SECRET-CLUSTER-SECRET
  controlPlane:
    endpoint: https://10.0.0.1:6443
  token: ctok01.clustertokensecret
  secretboxEncryptionSecret: SECRET-SECRETBOX
  aescbcEncryptionSecret: SECRET-AESCBC
  ca:
    crt: PUBLIC-CLUSTER-CA-CRT
    key: SECRET-CLUSTER-CA-KEY
  aggregatorCA:
    crt: PUBLIC-AGG-CRT
    key: SECRET-AGG-KEY
  serviceAccount:
    key: SECRET-SA-KEY
  etcd:
    ca:
      crt: PUBLIC-ETCD-CRT
      key: SECRET-ETCD-KEY
"#;

fn class() -> NodeClassSpec {
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
            private_key_secret_ref: secret("rescue", "id_ed25519"),
        },
        machine_config_secret_ref: secret("talos", "worker.yaml"),
        machine_config_patches: vec![],
        tags: vec![],
        standby: None,
        private_network: None,
    }
}

fn claim() -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1",
        "kind": "NodeClaim",
        "metadata": {"name": "default-x7k2p", "labels": {"karpenter.sh/nodepool": "default", "team": "ml"}},
        "spec": {
            "requirements": [
                {"key": "node.kubernetes.io/instance-type", "operator": "In", "values": ["EM-I215E-NVME"]},
                {"key": "karpenter.sh/capacity-type", "operator": "In", "values": ["on-demand"]}
            ],
            "taints": [{"key": "dedicated", "value": "ml", "effect": "NoSchedule"}],
            "startupTaints": [{"key": "cilium.io/agent-not-ready", "effect": "NoExecute"}],
            "nodeClassRef": {"group": "karpenter.scaleway.com", "kind": "ScalewayElasticMetalNodeClass", "name": "default"}
        }
    })
}

fn request<'a>(claim: &'a Value, class: &'a NodeClassSpec, base: &str) -> RenderRequest<'a> {
    RenderRequest {
        claim,
        class,
        base_config: Secret::new(base),
        offer: None,
        zone: None,
        disk: None,
        mac: PLACEHOLDER_MAC,
        private_link: None,
        show_secrets: false,
    }
}

fn docs(text: &str) -> Vec<Yaml> {
    serde_yaml_ng::Deserializer::from_str(text)
        .map(|d| Yaml::deserialize(d).expect("output parses as YAML"))
        .filter(|d| !d.is_null())
        .collect()
}

fn at<'a>(doc: &'a Yaml, path: &[&str]) -> &'a Yaml {
    path.iter().fold(doc, |v, k| {
        v.get(*k)
            .unwrap_or_else(|| panic!("missing {}", path.join(".")))
    })
}

#[test]
fn output_describes_the_node() {
    let claim = claim();
    let class = class();
    let out = render(&request(&claim, &class, WORKER)).unwrap();
    let docs = docs(&out);
    let main = &docs[0];
    assert_eq!(
        at(main, &["machine", "kubelet", "extraArgs", "provider-id"]).as_str(),
        Some(format!("scaleway://baremetal/fr-par-2/{PLACEHOLDER_SERVER_ID}").as_str())
    );
    let labels = at(main, &["machine", "nodeLabels"]);
    assert_eq!(labels["karpenter.sh/nodepool"].as_str(), Some("default"));
    assert_eq!(labels["team"].as_str(), Some("ml"));
    assert_eq!(
        labels["node.kubernetes.io/instance-type"].as_str(),
        Some("EM-I215E-NVME")
    );
    assert_eq!(
        labels["topology.kubernetes.io/zone"].as_str(),
        Some("fr-par-2")
    );
    let taints = at(
        main,
        &["machine", "kubelet", "extraConfig", "registerWithTaints"],
    )
    .as_sequence()
    .unwrap();
    let keys: Vec<&str> = taints.iter().filter_map(|t| t["key"].as_str()).collect();
    assert!(keys.contains(&"dedicated"), "{keys:?}");
    assert!(keys.contains(&"cilium.io/agent-not-ready"), "{keys:?}");
    assert!(keys.contains(&"karpenter.sh/unregistered"), "{keys:?}");
    // NVMe offer: the first NVMe disk.
    assert_eq!(
        at(main, &["machine", "install", "disk"]).as_str(),
        Some("/dev/nvme0n1")
    );
    let hostname = docs
        .iter()
        .find(|d| d.get("kind").and_then(Yaml::as_str) == Some("HostnameConfig"))
        .expect("a HostnameConfig document");
    assert_eq!(hostname["hostname"].as_str(), Some("default-x7k2p"));
    let alias = docs
        .iter()
        .find(|d| d.get("kind").and_then(Yaml::as_str) == Some("LinkAliasConfig"))
        .expect("a LinkAliasConfig document");
    assert!(
        alias["selector"]["match"]
            .as_str()
            .unwrap()
            .contains(PLACEHOLDER_MAC)
    );
    assert!(out.starts_with("# Machine config of NodeClaim default-x7k2p"));
}

#[test]
fn secrets_are_redacted_unless_asked() {
    let claim = claim();
    let mut class = class();
    // Key material in a user patch is hidden too.
    class.machine_config_patches = vec![
        "machine:\n  files:\n    - path: /var/etc/key.pem\n      op: create\n      content: |\n        -----BEGIN EC PRIVATE KEY-----\n        SECRET-PEM-BODY\n        -----END EC PRIVATE KEY-----\n".into(),
    ];
    let out = render(&request(&claim, &class, FULL_SECRETS)).unwrap();
    // The header comment names the placeholder token; the config must not.
    let body: String = out
        .lines()
        .filter(|l| !l.starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n");
    for secret in [
        "mtok01",
        "machinetokensecret",
        "clustertokensecret",
        "SECRET-",
        PLACEHOLDER_TOKEN,
    ] {
        assert!(!body.contains(secret), "{secret} leaked:\n{out}");
    }
    let main = &docs(&out)[0];
    for path in [
        &["machine", "token"][..],
        &["machine", "ca", "key"],
        &["cluster", "token"],
        &["cluster", "secret"],
        &["cluster", "ca", "key"],
        &["cluster", "aggregatorCA", "key"],
        &["cluster", "serviceAccount", "key"],
        &["cluster", "etcd", "ca", "key"],
        &["cluster", "secretboxEncryptionSecret"],
        &["cluster", "aescbcEncryptionSecret"],
    ] {
        assert_eq!(
            at(main, path).as_str(),
            Some(REDACTED),
            "{}",
            path.join(".")
        );
    }
    // Public material and plain settings stay readable.
    assert_eq!(
        at(main, &["cluster", "ca", "crt"]).as_str(),
        Some("PUBLIC-CLUSTER-CA-CRT")
    );
    assert_eq!(at(main, &["cluster", "id"]).as_str(), Some("CLUSTER-ID"));
    assert_eq!(
        at(main, &["machine", "files"])[0]["content"].as_str(),
        Some(REDACTED)
    );

    let mut shown = request(&claim, &class, FULL_SECRETS);
    shown.show_secrets = true;
    let out = render(&shown).unwrap();
    assert!(out.contains("SECRET-CLUSTER-CA-KEY"));
    assert!(out.contains("SECRET-PEM-BODY"));
    assert!(!out.contains(REDACTED));
}

#[test]
fn redaction_spares_user_labels_and_public_keys() {
    let text = "machine:\n  nodeLabels:\n    token: visible\n  features:\n    publicKey: PUB\n    someToken: hidden\n  pair:\n    crt: CRT\n    key: hidden\n  taint:\n    key: dedicated\n";
    let out = redact(text).unwrap();
    let doc = &docs(&out)[0];
    assert_eq!(
        at(doc, &["machine", "nodeLabels", "token"]).as_str(),
        Some("visible")
    );
    assert_eq!(
        at(doc, &["machine", "features", "publicKey"]).as_str(),
        Some("PUB")
    );
    assert_eq!(
        at(doc, &["machine", "features", "someToken"]).as_str(),
        Some(REDACTED)
    );
    assert_eq!(
        at(doc, &["machine", "pair", "key"]).as_str(),
        Some(REDACTED)
    );
    assert_eq!(at(doc, &["machine", "pair", "crt"]).as_str(), Some("CRT"));
    assert_eq!(
        at(doc, &["machine", "taint", "key"]).as_str(),
        Some("dedicated")
    );
    // Base64 of a PEM private key, as Talos stores keys, under any field name.
    let pem = base64::engine::general_purpose::STANDARD
        .encode("-----BEGIN ED25519 PRIVATE KEY-----\nAAAA\n-----END ED25519 PRIVATE KEY-----\n");
    let out = redact(&format!("machine:\n  blob: {pem}\n")).unwrap();
    assert!(!out.contains(&pem));
}

#[test]
fn launched_claims_use_their_provider_id_and_labels() {
    let mut claim = claim();
    claim["status"] = json!({"providerID": "scaleway://baremetal/nl-ams-1/srv-42"});
    claim["metadata"]["labels"]["karpenter.scaleway.com/instance-disk-type"] = json!("ssd");
    claim["metadata"]["labels"]["karpenter.scaleway.com/instance-cpu"] = json!("16");
    let class = class();
    let out = render(&request(&claim, &class, WORKER)).unwrap();
    let main = &docs(&out)[0];
    assert_eq!(
        at(main, &["machine", "kubelet", "extraArgs", "provider-id"]).as_str(),
        Some("scaleway://baremetal/nl-ams-1/srv-42")
    );
    assert_eq!(
        at(
            main,
            &[
                "machine",
                "nodeLabels",
                "karpenter.scaleway.com/instance-cpu"
            ]
        )
        .as_str(),
        Some("16")
    );
    assert_eq!(
        at(
            main,
            &["machine", "nodeLabels", "topology.kubernetes.io/zone"]
        )
        .as_str(),
        Some("nl-ams-1")
    );
    // The claim's disk type label wins over the offer name's suffix.
    assert_eq!(
        at(main, &["machine", "install", "disk"]).as_str(),
        Some("/dev/sda")
    );
    assert!(!out.contains("Not launched"));
}

#[test]
fn disk_choice_follows_flag_then_nodeclass_then_offer() {
    let claim = claim();
    let mut class = class();
    let disk = |req: &RenderRequest<'_>| {
        let out = render(req).unwrap();
        at(&docs(&out)[0], &["machine", "install", "disk"])
            .as_str()
            .unwrap()
            .to_string()
    };
    let mut req = request(&claim, &class, WORKER);
    req.offer = Some("EM-A115X-SSD");
    assert_eq!(disk(&req), "/dev/sda");
    req.disk = Some("sdb");
    assert_eq!(disk(&req), "/dev/sdb");

    class.install_disk = Some(DiskSelector {
        name: Some("nvme1n1".into()),
    });
    let req = request(&claim, &class, WORKER);
    assert_eq!(disk(&req), "/dev/nvme1n1");
}

#[test]
fn ambiguous_inputs_ask_for_flags() {
    let mut claim = claim();
    claim["spec"]["requirements"][0]["values"] = json!(["EM-A115X-SSD", "EM-I215E-NVME"]);
    let mut class = class();
    let err = render(&request(&claim, &class, WORKER)).unwrap_err();
    assert!(err.to_string().contains("--offer"), "{err}");

    class.zones = vec!["fr-par-2".into(), "nl-ams-1".into()];
    let mut req = request(&claim, &class, WORKER);
    req.offer = Some("EM-A115X-SSD");
    let err = render(&req).unwrap_err();
    assert!(err.to_string().contains("--zone"), "{err}");
    req.zone = Some("nl-ams-1");
    assert!(render(&req).unwrap().contains("nl-ams-1"));
}

#[test]
fn flag_parsers_reject_bad_values() {
    assert_eq!(parse_disk("/dev/nvme0n1"), Ok("nvme0n1".to_string()));
    assert!(parse_disk("../etc").is_err());
    assert!(parse_disk("").is_err());
    assert_eq!(
        parse_mac("A0:36:9F:00:00:02"),
        Ok("a0:36:9f:00:00:02".to_string())
    );
    assert!(parse_mac("a0:36:9f:00:00").is_err());
    assert!(parse_mac("zz:36:9f:00:00:02").is_err());
}

#[derive(clap::Parser, Debug)]
struct Cli {
    #[command(flatten)]
    args: RenderConfigArgs,
}

fn parse_args(args: &[&str]) -> Result<RenderConfigArgs, clap::Error> {
    use clap::Parser as _;
    Cli::try_parse_from(std::iter::once("render-config").chain(args.iter().copied()))
        .map(|c| c.args)
}

#[test]
fn the_nodeclass_comes_from_the_cluster_or_a_file() {
    let files = parse_args(&[
        "--nodeclass-file",
        "nc.yaml",
        "--base-config-file",
        "worker.yaml",
        "--nodeclaim-file",
        "claim.yaml",
    ])
    .expect("files only");
    assert_eq!(files.nodeclass, None);
    assert_eq!(files.nodeclass_file, Some(PathBuf::from("nc.yaml")));
    assert_eq!(files.base_config_file, Some(PathBuf::from("worker.yaml")));

    assert!(parse_args(&["--nodeclass", "default", "--nodeclaim", "x"]).is_ok());
    // One source of NodeClass, exactly.
    assert!(parse_args(&["--nodeclaim", "x"]).is_err());
    assert!(
        parse_args(&[
            "--nodeclass",
            "default",
            "--nodeclass-file",
            "nc.yaml",
            "--nodeclaim",
            "x"
        ])
        .is_err()
    );
}

#[test]
fn a_nodeclass_manifest_file_is_read() {
    let dir = std::env::temp_dir().join(format!("render-config-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("nodeclass.yaml");
    let manifest = serde_json::json!({
        "apiVersion": "karpenter.scaleway.com/v1alpha1",
        "kind": "ScalewayElasticMetalNodeClass",
        "metadata": {"name": "default"},
        "spec": serde_json::to_value(class()).unwrap(),
    });
    std::fs::write(&path, serde_yaml_ng::to_string(&manifest).unwrap()).unwrap();
    let read: ScalewayElasticMetalNodeClass = read_file(&path, "NodeClass").unwrap();
    assert_eq!(read.metadata.name.as_deref(), Some("default"));
    assert_eq!(read.spec.image.version, "v1.13.9");
    std::fs::write(&path, "spec: [").unwrap();
    let err = read_file::<ScalewayElasticMetalNodeClass>(&path, "NodeClass").unwrap_err();
    assert!(
        err.to_string().contains("is not a YAML or JSON NodeClass"),
        "{err}"
    );
    std::fs::remove_dir_all(&dir).unwrap();
}

// ---- Instance (VM) NodeClasses. ----

fn vm_class() -> InstanceNodeClassSpec {
    InstanceNodeClassSpec {
        zones: vec!["fr-par-2".into()],
        image: InstanceImageSelector {
            ids: vec![],
            name: "talos-v1.13.9".into(),
            tags: vec![],
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
        machine_config_patches: vec![
            "machine:\n  sysctls:\n    vm.max_map_count: \"262144\"\n".into(),
        ],
        tags: vec![],
        private_network: None,
    }
}

fn vm_claim() -> Value {
    let mut claim = claim();
    claim["metadata"]["name"] = json!("vms-q9z4m");
    claim["spec"]["requirements"][0]["values"] = json!(["POP2-2C-8G"]);
    claim["spec"]["nodeClassRef"] = json!({
        "group": "karpenter.scaleway.com", "kind": "ScalewayInstanceNodeClass", "name": "vms"
    });
    claim
}

fn vm_request<'a>(
    claim: &'a Value,
    class: &'a InstanceNodeClassSpec,
    base: &str,
) -> VmRenderRequest<'a> {
    VmRenderRequest {
        claim,
        class,
        base_config: Secret::new(base),
        commercial_type: None,
        zone: None,
        private_link: None,
        show_secrets: false,
    }
}

fn kind_of_doc(docs: &[Yaml], kind: &str) -> bool {
    docs.iter()
        .any(|d| d.get("kind").and_then(Yaml::as_str) == Some(kind))
}

#[test]
fn a_vm_config_describes_the_node_as_create_would() {
    let claim = vm_claim();
    let class = vm_class();
    let out = render_vm(&vm_request(&claim, &class, WORKER)).unwrap();
    let docs = docs(&out);
    let main = &docs[0];
    assert_eq!(
        at(main, &["machine", "kubelet", "extraArgs", "provider-id"]).as_str(),
        Some(format!("scaleway://instance/fr-par-2/{PLACEHOLDER_SERVER_ID}").as_str())
    );
    let labels = at(main, &["machine", "nodeLabels"]);
    assert_eq!(
        labels["node.kubernetes.io/instance-type"].as_str(),
        Some("POP2-2C-8G")
    );
    assert_eq!(
        labels["topology.kubernetes.io/region"].as_str(),
        Some("fr-par")
    );
    assert_eq!(labels["team"].as_str(), Some("ml"));
    let taints = at(
        main,
        &["machine", "kubelet", "extraConfig", "registerWithTaints"],
    )
    .as_sequence()
    .unwrap();
    let keys: Vec<&str> = taints.iter().filter_map(|t| t["key"].as_str()).collect();
    for key in [
        "dedicated",
        "cilium.io/agent-not-ready",
        "karpenter.sh/unregistered",
    ] {
        assert!(keys.contains(&key), "{key} in {keys:?}");
    }
    // The NodeClass's patch is applied.
    assert_eq!(
        at(main, &["machine", "sysctls", "vm.max_map_count"]).as_str(),
        Some("262144")
    );
    // The VM runs its image: the base install section stays, and with one
    // NIC there is no link alias.
    assert_eq!(
        at(main, &["machine", "install", "disk"]).as_str(),
        Some("/dev/sda")
    );
    assert!(!kind_of_doc(&docs, "LinkAliasConfig"), "{out}");
    assert!(kind_of_doc(&docs, "HostnameConfig"), "{out}");
    assert!(
        out.starts_with(
            "# Machine config of NodeClaim vms-q9z4m (Instance POP2-2C-8G in fr-par-2)"
        ),
        "{out}"
    );
    assert!(out.contains("user data key cloud-init"), "{out}");
    assert!(out.contains("Not launched"), "{out}");
    assert!(!out.contains("disk /dev/"), "{out}");
    assert!(!out.contains("publicIp: none"), "{out}");

    let mut class = class;
    class.public_ip = PublicIpMode::None;
    let out = render_vm(&vm_request(&claim, &class, WORKER)).unwrap();
    assert!(out.contains("# publicIp: none: "), "{out}");
}

#[test]
fn a_vm_config_is_the_one_vm_node_settings_makes() {
    // The command adds nothing of its own between node_settings and the
    // renderer: the same inputs give the same config.
    let claim = vm_claim();
    let class = vm_class();
    let mut req = vm_request(&claim, &class, WORKER);
    req.show_secrets = true;
    let out = render_vm(&req).unwrap();
    let view = nodeclaim::parse(&claim).unwrap();
    let placement = VmPlacement {
        zone: "fr-par-2".into(),
        server_id: PLACEHOLDER_SERVER_ID.into(),
        type_labels: type_labels("POP2-2C-8G", "amd64", "fr-par-2"),
        kubelet_reservations: None,
    };
    let settings = vm::node_settings(&view, &class, &placement, &Secret::new(PLACEHOLDER_TOKEN));
    let expected = render_machine_config(WORKER, &settings).unwrap();
    let body: String = out
        .lines()
        .skip_while(|l| l.starts_with('#'))
        .map(|l| format!("{l}\n"))
        .collect();
    assert_eq!(body, expected);
}

#[test]
fn a_launched_vm_uses_its_provider_id() {
    let mut claim = vm_claim();
    claim["status"] = json!({"providerID": "scaleway://instance/nl-ams-1/vm-42"});
    claim["metadata"]["labels"]["karpenter.scaleway.com/instance-family"] = json!("POP2");
    let class = vm_class();
    let out = render_vm(&vm_request(&claim, &class, WORKER)).unwrap();
    let main = &docs(&out)[0];
    assert_eq!(
        at(main, &["machine", "kubelet", "extraArgs", "provider-id"]).as_str(),
        Some("scaleway://instance/nl-ams-1/vm-42")
    );
    let labels = at(main, &["machine", "nodeLabels"]);
    assert_eq!(
        labels["topology.kubernetes.io/zone"].as_str(),
        Some("nl-ams-1")
    );
    assert_eq!(
        labels["karpenter.scaleway.com/instance-family"].as_str(),
        Some("POP2")
    );
    assert!(!out.contains("Not launched"), "{out}");
}

#[test]
fn a_vm_config_hides_its_secrets() {
    let claim = vm_claim();
    let class = vm_class();
    let out = render_vm(&vm_request(&claim, &class, FULL_SECRETS)).unwrap();
    let body: String = out
        .lines()
        .filter(|l| !l.starts_with('#'))
        .collect::<Vec<_>>()
        .join("\n");
    for secret in [
        "machinetokensecret",
        "clustertokensecret",
        "SECRET-",
        PLACEHOLDER_TOKEN,
    ] {
        assert!(!body.contains(secret), "{secret} leaked:\n{out}");
    }
    assert_eq!(
        at(&docs(&out)[0], &["cluster", "token"]).as_str(),
        Some(REDACTED)
    );
}

#[test]
fn a_vm_needs_one_type_and_one_zone() {
    let mut claim = vm_claim();
    claim["spec"]["requirements"][0]["values"] = json!(["POP2-2C-8G", "POP2-4C-16G"]);
    let mut class = vm_class();
    let err = render_vm(&vm_request(&claim, &class, WORKER)).unwrap_err();
    assert!(
        err.to_string().contains("commercial type; pass --offer"),
        "{err}"
    );
    class.zones = vec![];
    let mut req = vm_request(&claim, &class, WORKER);
    req.commercial_type = Some("POP2-4C-16G");
    let err = render_vm(&req).unwrap_err();
    assert!(err.to_string().contains("--zone"), "{err}");
    req.zone = Some("pl-waw-2");
    let out = render_vm(&req).unwrap();
    assert!(out.contains("(Instance POP2-4C-16G in pl-waw-2)"), "{out}");
}

#[test]
fn a_machine_of_the_other_kind_is_refused() {
    let mut claim = vm_claim();
    claim["status"] = json!({"providerID": "scaleway://baremetal/fr-par-2/srv-1"});
    let class = vm_class();
    let err = render_vm(&vm_request(&claim, &class, WORKER)).unwrap_err();
    assert!(err.to_string().contains("--kind elastic-metal"), "{err}");

    let mut claim = self::claim();
    claim["status"] = json!({"providerID": "scaleway://instance/fr-par-2/vm-1"});
    let class = self::class();
    let err = render(&request(&claim, &class, WORKER)).unwrap_err();
    assert!(err.to_string().contains("--kind instance"), "{err}");
}

#[test]
fn the_kind_comes_from_the_flag_the_file_or_the_claim() {
    let em = claim();
    let vm = vm_claim();
    let instance = Some("ScalewayInstanceNodeClass");
    assert_eq!(class_kind(None, None, &em), Ok(ClassKind::ElasticMetal));
    assert_eq!(class_kind(None, None, &vm), Ok(ClassKind::Instance));
    assert_eq!(class_kind(None, instance, &em), Ok(ClassKind::Instance));
    assert_eq!(
        class_kind(Some(NodeClassKind::ElasticMetal), None, &vm),
        Ok(ClassKind::ElasticMetal)
    );
    assert_eq!(
        class_kind(Some(NodeClassKind::Instance), instance, &em),
        Ok(ClassKind::Instance)
    );
    let err = class_kind(Some(NodeClassKind::ElasticMetal), instance, &em).unwrap_err();
    assert!(err.contains("--kind"), "{err}");
    let err = class_kind(None, Some("NodePool"), &em).unwrap_err();
    assert!(err.contains("\"NodePool\""), "{err}");
    let mut no_ref = claim();
    no_ref["spec"]
        .as_object_mut()
        .unwrap()
        .remove("nodeClassRef");
    assert_eq!(class_kind(None, None, &no_ref), Ok(ClassKind::ElasticMetal));
}

#[tokio::test]
async fn an_instance_nodeclass_manifest_is_read_without_a_cluster() {
    let manifest: Yaml = serde_yaml_ng::to_value(json!({
        "apiVersion": "karpenter.scaleway.com/v1alpha1",
        "kind": "ScalewayInstanceNodeClass",
        "metadata": {"name": "vms"},
        "spec": serde_json::to_value(vm_class()).unwrap(),
    }))
    .unwrap();
    let mut client = LazyClient(None);
    let read: ScalewayInstanceNodeClass =
        load_class(&mut client, None, Some(manifest), ClassKind::Instance)
            .await
            .unwrap();
    assert_eq!(read.metadata.name.as_deref(), Some("vms"));
    assert_eq!(read.spec, vm_class());
    assert!(client.0.is_none(), "no cluster connection for a file");

    let broken: Yaml =
        serde_yaml_ng::from_str("kind: ScalewayInstanceNodeClass\nspec: {zones: 3}\n").unwrap();
    let err = load_class::<ScalewayInstanceNodeClass>(
        &mut LazyClient(None),
        None,
        Some(broken),
        ClassKind::Instance,
    )
    .await
    .unwrap_err();
    assert!(
        err.to_string()
            .contains("not a valid ScalewayInstanceNodeClass"),
        "{err}"
    );
}

#[test]
fn the_kind_flag_is_parsed() {
    let args = parse_args(&[
        "--nodeclass",
        "vms",
        "--nodeclaim",
        "x",
        "--kind",
        "instance",
    ])
    .unwrap();
    assert_eq!(args.kind, Some(NodeClassKind::Instance));
    let args = parse_args(&["--nodeclass", "vms", "--nodeclaim", "x"]).unwrap();
    assert_eq!(args.kind, None);
    assert!(parse_args(&["--nodeclass", "vms", "--nodeclaim", "x", "--kind", "vm"]).is_err());
}

#[path = "render_config_pn_tests.rs"]
mod private_network;
