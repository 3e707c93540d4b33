//! `karpenter-scaleway render-config`: prints the machine config a node would
//! get, from a NodeClass (and its machine-config Secret) and a NodeClaim read
//! from the cluster or from a file, before any server is bought.
//!
//! Both NodeClass kinds are rendered by the code Create uses. Elastic Metal:
//! `install::node_settings` on the spec Create would build
//! (`provider::install_spec`). Instance (VM): `provider::vm::node_settings`.
//! Then `talos::render_machine_config` for both. Only what is unknown before
//! a server exists is a placeholder: the server id (unless the NodeClaim was
//! launched), the MAC address of the primary NIC (Elastic Metal) and the
//! node's bootstrap token, which Create mints per node. Secrets are printed
//! as `<redacted>` unless asked for.
//!
//! The kind is `--kind`, else the `kind` of the `--nodeclass-file` manifest,
//! else the NodeClaim's `nodeClassRef.kind` (absent: Elastic Metal).
//!
//! With `--nodeclass-file`, `--base-config-file` and `--nodeclaim-file` it
//! reads no cluster at all: CI renders configs this way and validates them
//! with Talos' machinery (talos-sim/conformance).
//!
//! A node's Private Network link is known only once its server is attached
//! (the VLAN id or the private NIC's MAC, the IPAM address): `--private-vlan`
//! or `--private-mac`, with `--private-address` and `--private-subnet`, say
//! which link to render.

use std::collections::BTreeMap;
use std::path::PathBuf;

use anyhow::Context as _;
use base64::Engine as _;
use clap::{ArgGroup, Args, ValueEnum};
use serde_json::Value;
use serde_yaml_ng::Value as Yaml;

use crate::catalog::{
    CAPACITY_TYPE_ON_DEMAND, ClassKind, LABEL_ARCH, LABEL_CAPACITY_TYPE, LABEL_INSTANCE_DISK_TYPE,
    LABEL_INSTANCE_TYPE, LABEL_OS, LABEL_REGION, LABEL_ZONE, region_of,
};
use crate::config::parse_zone;
use crate::install::{self, Secret};
use crate::nodeclass::instance::{InstanceNodeClassSpec, PublicIpMode, ScalewayInstanceNodeClass};
use crate::nodeclass::{NodeClassSpec, ScalewayElasticMetalNodeClass, read_secret_key};
use crate::provider::nodeclaim::{self, NodeClaimView};
use crate::provider::vm::{self, VmPlacement};
use crate::provider::{ClassSecrets, MachineId, Placement, install_spec, parse_machine_id};
use crate::scaleway::instance::USER_DATA_KEY;
use crate::talos::{PrivateLink, render_machine_config};

/// A locally administered, unicast MAC: obviously not a real NIC's.
pub const PLACEHOLDER_MAC: &str = "02:00:00:00:00:01";
/// Stands for the server id of a NodeClaim that has not been launched.
pub const PLACEHOLDER_SERVER_ID: &str = "00000000-0000-0000-0000-000000000000";
/// Stands for the per-node bootstrap token Create mints (well formed, so
/// that the config validates; it authenticates nothing).
pub const PLACEHOLDER_TOKEN: &str = "xxxxxx.xxxxxxxxxxxxxxxx";
pub const REDACTED: &str = "<redacted>";

/// `--kind`: which NodeClass kind renders the node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum NodeClassKind {
    /// `ScalewayElasticMetalNodeClass`.
    ElasticMetal,
    /// `ScalewayInstanceNodeClass` (VMs).
    Instance,
}

impl NodeClassKind {
    fn class_kind(self) -> ClassKind {
        match self {
            NodeClassKind::ElasticMetal => ClassKind::ElasticMetal,
            NodeClassKind::Instance => ClassKind::Instance,
        }
    }
}

#[derive(Debug, Clone, Args)]
#[command(group(ArgGroup::new("claim").required(true).args(["nodeclaim", "nodeclaim_file"])))]
#[command(group(ArgGroup::new("class").required(true).args(["nodeclass", "nodeclass_file"])))]
#[command(group(ArgGroup::new("private_link").args(["private_vlan", "private_mac"])))]
pub struct RenderConfigArgs {
    /// The NodeClass (ScalewayElasticMetalNodeClass or
    /// ScalewayInstanceNodeClass, see `--kind`) whose base machine config and
    /// patches apply.
    #[arg(long)]
    pub nodeclass: Option<String>,
    /// The NodeClass kind: `elastic-metal` or `instance`. Default: the
    /// `kind` of the `--nodeclass-file` manifest, else the NodeClaim's
    /// `nodeClassRef.kind`, else `elastic-metal`.
    #[arg(long, value_enum)]
    pub kind: Option<NodeClassKind>,
    /// A NodeClass manifest in a YAML or JSON file, instead of one in the
    /// cluster.
    #[arg(long, value_name = "FILE")]
    pub nodeclass_file: Option<PathBuf>,
    /// The base machine config (a `talosctl gen config` worker file) instead
    /// of the NodeClass's machine-config Secret.
    #[arg(long, value_name = "FILE")]
    pub base_config_file: Option<PathBuf>,
    /// A NodeClaim in the cluster.
    #[arg(long)]
    pub nodeclaim: Option<String>,
    /// A NodeClaim in a YAML or JSON file (e.g. one you are about to create).
    #[arg(long, value_name = "FILE")]
    pub nodeclaim_file: Option<PathBuf>,
    /// Offer name (e.g. EM-A115X-SSD) or, for a VM, commercial type (e.g.
    /// POP2-2C-8G). Default: the NodeClaim's instance-type label, else its
    /// instance-type requirement when it allows one value.
    #[arg(long)]
    pub offer: Option<String>,
    /// Zone. Default: the NodeClaim's providerID or zone label, else the
    /// NodeClass's zone when it names exactly one.
    #[arg(long, value_parser = parse_zone)]
    pub zone: Option<String>,
    /// Install disk as the rescue system names it (Elastic Metal only).
    /// Default: the NodeClass disk selector, else from the offer's disk type
    /// (NVMe: nvme0n1, eMMC: mmcblk0, others: sda).
    #[arg(long, value_parser = parse_disk)]
    pub disk: Option<String>,
    /// MAC address of the primary NIC (found in rescue on a real install;
    /// Elastic Metal only: a VM's one NIC is eth0).
    #[arg(long, default_value = PLACEHOLDER_MAC, value_parser = parse_mac)]
    pub mac: String,
    /// Print secrets (machine and cluster keys and tokens) instead of `<redacted>`.
    #[arg(long)]
    pub show_secrets: bool,
    /// Renders a Private Network link on the primary NIC: the VLAN id of the
    /// server's attachment (Elastic Metal only).
    #[arg(long, value_name = "ID", value_parser = clap::value_parser!(u32).range(1..=4094), conflicts_with = "private_mac")]
    pub private_vlan: Option<u32>,
    /// Renders a Private Network link on a private NIC of this MAC address
    /// (Instance only).
    #[arg(long, value_name = "MAC", value_parser = parse_mac)]
    pub private_mac: Option<String>,
    /// The node's private address with the subnet's prefix length (e.g.
    /// 172.16.0.7/22). Default: DHCP on the private link.
    #[arg(long, value_name = "CIDR", requires = "private_link")]
    pub private_address: Option<String>,
    /// A subnet of the Private Network (repeatable): the kubelet's node IP is
    /// taken from them unless `--public-node-ip`.
    #[arg(long, value_name = "CIDR", requires = "private_link")]
    pub private_subnet: Vec<String>,
    /// Keep the public address as the Node's InternalIP (the NodeClass's
    /// `privateNetwork.nodeIP: Public`).
    #[arg(long, requires = "private_link")]
    pub public_node_ip: bool,
}

impl RenderConfigArgs {
    /// The Private Network link the flags describe, if any, for a node of `kind`.
    pub fn private_link(&self, kind: ClassKind) -> Result<Option<PrivateLink>, String> {
        match (kind, &self.private_vlan, &self.private_mac) {
            (_, None, None) => return Ok(None),
            (ClassKind::ElasticMetal, _, Some(_)) => {
                return Err("--private-mac applies to Instances only: an Elastic Metal server reaches a Private Network through a VLAN on its NIC (--private-vlan)".into());
            }
            (ClassKind::Instance, Some(_), _) => {
                return Err("--private-vlan applies to Elastic Metal only: an Instance reaches a Private Network through a private NIC of its own (--private-mac)".into());
            }
            _ => {}
        }
        Ok(Some(PrivateLink {
            vlan: self.private_vlan,
            mac: self.private_mac.clone(),
            address: self.private_address.clone(),
            subnets: self.private_subnet.clone(),
            internal_ip: !self.public_node_ip,
        }))
    }
}

fn parse_disk(text: &str) -> Result<String, String> {
    let name = text.strip_prefix("/dev/").unwrap_or(text);
    if !name.is_empty()
        && name.len() <= 32
        && name
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    {
        Ok(name.to_string())
    } else {
        Err(format!(
            "invalid disk {text:?} (expected a kernel name such as nvme0n1 or sda)"
        ))
    }
}

fn parse_mac(text: &str) -> Result<String, String> {
    let parts: Vec<&str> = text.split(':').collect();
    if parts.len() == 6
        && parts
            .iter()
            .all(|p| p.len() == 2 && p.bytes().all(|b| b.is_ascii_hexdigit()))
    {
        Ok(text.to_ascii_lowercase())
    } else {
        Err(format!(
            "invalid MAC address {text:?} (expected e.g. {PLACEHOLDER_MAC})"
        ))
    }
}

/// Why nothing could be rendered.
#[derive(Debug, thiserror::Error)]
pub enum RenderConfigError {
    #[error("NodeClaim: {0}")]
    Claim(String),
    /// Something only the user can tell (which offer, which zone).
    #[error("{0}")]
    Ambiguous(String),
    #[error("NodeClass: {0}")]
    NodeClass(String),
    #[error(transparent)]
    Render(#[from] crate::talos::RenderError),
}

/// Everything `render` needs, already read.
pub struct RenderRequest<'a> {
    pub claim: &'a Value,
    pub class: &'a NodeClassSpec,
    pub base_config: Secret,
    pub offer: Option<&'a str>,
    pub zone: Option<&'a str>,
    pub disk: Option<&'a str>,
    pub mac: &'a str,
    /// The node's Private Network link (`--private-vlan`).
    pub private_link: Option<&'a PrivateLink>,
    pub show_secrets: bool,
}

/// Everything `render_vm` needs, already read: a VM of a
/// `ScalewayInstanceNodeClass` has no install disk and no MAC to select.
pub struct VmRenderRequest<'a> {
    pub claim: &'a Value,
    pub class: &'a InstanceNodeClassSpec,
    pub base_config: Secret,
    /// The commercial type (`--offer`).
    pub commercial_type: Option<&'a str>,
    pub zone: Option<&'a str>,
    /// The node's Private Network link (`--private-mac`).
    pub private_link: Option<&'a PrivateLink>,
    pub show_secrets: bool,
}

/// The single value an `In` requirement on `key` allows, if exactly one.
fn single_requirement(view: &NodeClaimView, key: &str) -> Option<String> {
    view.requirements
        .iter()
        .find(|r| r.key == key && r.operator == crate::catalog::Operator::In)
        .filter(|r| r.values.len() == 1)
        .map(|r| r.values[0].clone())
}

/// The flag, else the NodeClaim's instance-type label or single requirement.
fn resolve_type(
    flag: Option<&str>,
    view: &NodeClaimView,
    what: &str,
) -> Result<String, RenderConfigError> {
    if let Some(t) = flag {
        return Ok(t.to_string());
    }
    view.labels
        .get(LABEL_INSTANCE_TYPE)
        .cloned()
        .or_else(|| single_requirement(view, LABEL_INSTANCE_TYPE))
        .ok_or_else(|| {
            RenderConfigError::Ambiguous(format!(
                "NodeClaim {} does not name one {what}; pass --offer",
                view.name
            ))
        })
}

fn resolve_zone(
    flag: Option<&str>,
    class_zones: &[String],
    view: &NodeClaimView,
    launched_zone: Option<&str>,
) -> Result<String, RenderConfigError> {
    if let Some(zone) = flag.or(launched_zone) {
        return Ok(zone.to_string());
    }
    if let Some(zone) = view
        .labels
        .get(LABEL_ZONE)
        .cloned()
        .or_else(|| single_requirement(view, LABEL_ZONE))
    {
        return Ok(zone);
    }
    match class_zones {
        [only] => Ok(only.clone()),
        _ => Err(RenderConfigError::Ambiguous(format!(
            "cannot tell which zone NodeClaim {} would be placed in; pass --zone",
            view.name
        ))),
    }
}

fn resolve_arch(view: &NodeClaimView) -> String {
    view.labels
        .get(LABEL_ARCH)
        .cloned()
        .or_else(|| single_requirement(view, LABEL_ARCH))
        .unwrap_or_else(|| "amd64".to_string())
}

/// The well-known labels of the type; a launched NodeClaim carries every
/// instance-type label (Create returned them) and those win.
fn type_labels(instance_type: &str, arch: &str, zone: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (LABEL_INSTANCE_TYPE.to_string(), instance_type.to_string()),
        (LABEL_ARCH.to_string(), arch.to_string()),
        (LABEL_OS.to_string(), "linux".to_string()),
        (
            LABEL_CAPACITY_TYPE.to_string(),
            CAPACITY_TYPE_ON_DEMAND.to_string(),
        ),
        (LABEL_ZONE.to_string(), zone.to_string()),
        (LABEL_REGION.to_string(), region_of(zone).to_string()),
    ])
}

/// The (zone, server id) of a NodeClaim launched on a machine of `kind`;
/// a providerID of the other kind is an error (wrong NodeClass kind).
fn launched_on(
    view: &NodeClaimView,
    kind: ClassKind,
) -> Result<Option<(&str, &str)>, RenderConfigError> {
    let Some(machine) = view.provider_id.as_deref().and_then(parse_machine_id) else {
        return Ok(None);
    };
    match (machine, kind) {
        (MachineId::Baremetal { zone, id }, ClassKind::ElasticMetal)
        | (MachineId::Instance { zone, id }, ClassKind::Instance) => Ok(Some((zone, id))),
        (MachineId::Baremetal { .. }, ClassKind::Instance) => {
            Err(RenderConfigError::Claim(format!(
                "{} runs on Elastic Metal ({}): render it with its ScalewayElasticMetalNodeClass (--kind elastic-metal)",
                view.name,
                view.provider_id.as_deref().unwrap_or_default()
            )))
        }
        (MachineId::Instance { .. }, ClassKind::ElasticMetal) => {
            Err(RenderConfigError::Claim(format!(
                "{} runs on an Instance ({}): render it with its ScalewayInstanceNodeClass (--kind instance)",
                view.name,
                view.provider_id.as_deref().unwrap_or_default()
            )))
        }
    }
}

/// The disk the rescue system would show for this offer.
fn resolve_disk(req: &RenderRequest<'_>, view: &NodeClaimView, offer: &str) -> String {
    if let Some(disk) = req.disk {
        return disk.to_string();
    }
    if let Some(name) = req.class.install_disk.as_ref().and_then(|d| d.name.clone()) {
        return name;
    }
    let disk_type = view
        .labels
        .get(LABEL_INSTANCE_DISK_TYPE)
        .map(|t| t.to_ascii_lowercase())
        .or_else(|| {
            // Offer names end in their disk type (EM-I215E-NVME, EM-A115X-SSD).
            offer
                .rsplit('-')
                .next()
                .map(|suffix| suffix.to_ascii_lowercase())
        })
        .unwrap_or_default();
    match disk_type.as_str() {
        "nvme" => "nvme0n1".to_string(),
        "emmc" => "mmcblk0".to_string(),
        _ => "sda".to_string(),
    }
}

/// Renders the machine config the NodeClaim's node would get on Elastic Metal.
pub fn render(req: &RenderRequest<'_>) -> Result<String, RenderConfigError> {
    let view = nodeclaim::parse(req.claim).map_err(RenderConfigError::Claim)?;
    let launched = launched_on(&view, ClassKind::ElasticMetal)?;
    let offer = resolve_type(req.offer, &view, "offer")?;
    let zone = resolve_zone(req.zone, &req.class.zones, &view, launched.map(|l| l.0))?;
    let arch = resolve_arch(&view);
    let server_id = launched
        .map(|(_, id)| id.to_string())
        .unwrap_or_else(|| PLACEHOLDER_SERVER_ID.to_string());
    let placement = Placement {
        type_labels: type_labels(&offer, &arch, &zone),
        zone,
        server_id,
        offer_name: offer.clone(),
        arch,
        // The offer's hardware is not read here (no Scaleway API call); the
        // header says what Create adds.
        kubelet_reservations: None,
        // The link is given by the --private-* flags (the attachment's VLAN
        // and address are the API's to know).
        network: None,
    };
    let spec = install_spec(
        &view,
        req.class,
        &placement,
        ClassSecrets {
            // Not needed to render; never read by this command.
            rescue_private_key: Secret::default(),
            base_machine_config: req.base_config.clone(),
        },
        Secret::new(PLACEHOLDER_TOKEN),
    )
    .map_err(RenderConfigError::NodeClass)?;
    let disk = resolve_disk(req, &view, &offer);
    let mut settings = install::node_settings(&spec, &disk, req.mac);
    settings.private_network = req.private_link.cloned();
    let config = render_machine_config(spec.base_machine_config.expose(), &settings)?;
    let mut first = format!(
        "# Machine config of NodeClaim {} ({} in {}, disk /dev/{disk}, primary NIC {}).\n",
        view.name, placement.offer_name, placement.zone, req.mac
    );
    describe_private_link(&mut first, req.private_link);
    finish(first, launched.is_some(), &config, req.show_secrets)
}

/// Renders the machine config the NodeClaim's VM would read from its user
/// data: the settings come from `provider::vm::node_settings`, the function
/// Create uses.
pub fn render_vm(req: &VmRenderRequest<'_>) -> Result<String, RenderConfigError> {
    let view = nodeclaim::parse(req.claim).map_err(RenderConfigError::Claim)?;
    let launched = launched_on(&view, ClassKind::Instance)?;
    let commercial_type = resolve_type(req.commercial_type, &view, "commercial type")?;
    let zone = resolve_zone(req.zone, &req.class.zones, &view, launched.map(|l| l.0))?;
    let arch = resolve_arch(&view);
    let placement = VmPlacement {
        type_labels: type_labels(&commercial_type, &arch, &zone),
        zone,
        server_id: launched
            .map(|(_, id)| id.to_string())
            .unwrap_or_else(|| PLACEHOLDER_SERVER_ID.to_string()),
        // The type's hardware is not read here; the header says so.
        kubelet_reservations: None,
    };
    let mut settings = vm::node_settings(
        &view,
        req.class,
        &placement,
        &Secret::new(PLACEHOLDER_TOKEN),
    );
    settings.private_network = req.private_link.cloned();
    let config = render_machine_config(req.base_config.expose(), &settings)?;
    let mut first = format!(
        "# Machine config of NodeClaim {} (Instance {} in {}), as the VM reads it from its user data key {USER_DATA_KEY}.\n",
        view.name, commercial_type, placement.zone
    );
    describe_private_link(&mut first, req.private_link);
    if req.class.public_ip == PublicIpMode::None {
        first.push_str(
            "# publicIp: none: Talos' scaleway platform runs no DHCP without a public IPv4, so the network must come from the NodeClass's patches.\n",
        );
    }
    finish(first, launched.is_some(), &config, req.show_secrets)
}

/// One header line naming the Private Network link rendered, if any.
fn describe_private_link(out: &mut String, link: Option<&PrivateLink>) {
    let Some(link) = link else {
        return;
    };
    let address = link.address.as_deref().unwrap_or("DHCP");
    let node_ip = if link.internal_ip {
        format!(
            "private (kubelet nodeIP.validSubnets {})",
            link.subnets.join(", ")
        )
    } else {
        "public".to_string()
    };
    out.push_str(&format!(
        "# Private Network link {} ({address}); the Node's InternalIP: {node_ip}.\n",
        link.link_name()
    ));
}

/// The header (what is a placeholder, what is not shown) and the config,
/// redacted unless asked.
fn finish(
    mut out: String,
    launched: bool,
    config: &str,
    show_secrets: bool,
) -> Result<String, RenderConfigError> {
    let body = if show_secrets {
        config.to_string()
    } else {
        redact(config)?
    };
    if !launched {
        out.push_str(&format!(
            "# Not launched: the server id in the provider-id is a placeholder ({PLACEHOLDER_SERVER_ID}).\n"
        ));
    }
    out.push_str(
        "# Not shown: the kubelet's maxPods, kubeReserved, systemReserved and evictionHard, which Create sets from the type's hardware.\n",
    );
    out.push_str(&format!(
        "# cluster.token is a placeholder ({PLACEHOLDER_TOKEN}): Create mints one bootstrap token per node.\n"
    ));
    if !show_secrets {
        out.push_str("# Secrets are shown as <redacted>; --show-secrets prints them.\n");
    }
    out.push_str(&body);
    Ok(out)
}

/// Fields of the v1alpha1 document that hold secrets, by path.
const SECRET_PATHS: &[&[&str]] = &[
    &["machine", "token"],
    &["machine", "ca", "key"],
    &["cluster", "token"],
    &["cluster", "secret"],
    &["cluster", "ca", "key"],
    &["cluster", "aggregatorCA", "key"],
    &["cluster", "serviceAccount", "key"],
    &["cluster", "etcd", "ca", "key"],
    &["cluster", "secretboxEncryptionSecret"],
    &["cluster", "aescbcEncryptionSecret"],
];

/// Maps whose keys are user data (label names, file paths), not field names:
/// a label called `token` is not a secret.
/// (`labels`, `annotations`, `taints`: Talos 1.14's `KubeNodeConfig`.)
const FREE_FORM_MAPS: &[&str] = &[
    "nodeLabels",
    "nodeAnnotations",
    "nodeTaints",
    "extraArgs",
    "labels",
    "annotations",
    "taints",
];

/// A field name that holds key material or a credential wherever it appears
/// (Talos documents and user patches alike). A bare `key` is only secret next
/// to a `crt` (Talos' certificate-and-key pairs); elsewhere it is a name (a
/// taint's key, for instance).
fn secret_field(name: &str, siblings: &serde_yaml_ng::Mapping) -> bool {
    match name {
        "key" => siblings.contains_key("crt"),
        "token" | "secret" | "password" | "privateKey" | "bootstrapToken" => true,
        "publicKey" => false,
        _ => name.ends_with("Secret") || name.ends_with("Key") || name.ends_with("Token"),
    }
}

/// A value that is a private key whatever its field: PEM, or base64 of PEM
/// (how Talos stores keys).
fn looks_like_private_key(text: &str) -> bool {
    if text.contains("PRIVATE KEY-----") {
        return true;
    }
    let compact: String = text.chars().filter(|c| !c.is_whitespace()).collect();
    compact.len() >= 40
        && base64::engine::general_purpose::STANDARD
            .decode(compact.as_bytes())
            .is_ok_and(|bytes| String::from_utf8_lossy(&bytes).contains("PRIVATE KEY-----"))
}

/// Null or `""`: nothing to hide, and showing it tells the reader the base
/// config leaves the field empty (a worker config has no CA keys).
fn is_empty(value: &Yaml) -> bool {
    value.is_null() || value.as_str() == Some("")
}

fn redact_tree(value: &mut Yaml, free_form: bool) {
    match value {
        Yaml::Mapping(map) => {
            let secret: Vec<Yaml> = map
                .iter()
                .filter(|(k, v)| {
                    !free_form && !is_empty(v) && secret_field(k.as_str().unwrap_or(""), map)
                })
                .map(|(k, _)| k.clone())
                .collect();
            for (key, child) in map.iter_mut() {
                let name = key.as_str().unwrap_or("");
                if secret.contains(key) {
                    *child = Yaml::from(REDACTED);
                } else {
                    redact_tree(child, FREE_FORM_MAPS.contains(&name));
                }
            }
        }
        Yaml::Sequence(items) => items.iter_mut().for_each(|v| redact_tree(v, false)),
        Yaml::String(text) if looks_like_private_key(text) => *text = REDACTED.to_string(),
        _ => {}
    }
}

fn redact_path(doc: &mut Yaml, path: &[&str]) {
    let Some((last, parents)) = path.split_last() else {
        return;
    };
    let mut current = doc;
    for key in parents {
        match current.get_mut(*key) {
            Some(next) => current = next,
            None => return,
        }
    }
    if let Yaml::Mapping(map) = current
        && let Some(v) = map.get_mut(*last)
        && !is_empty(v)
    {
        *v = Yaml::from(REDACTED);
    }
}

/// The config with every secret replaced by `<redacted>`.
pub fn redact(config: &str) -> Result<String, RenderConfigError> {
    use serde::Deserialize as _;
    let mut out = String::new();
    for de in serde_yaml_ng::Deserializer::from_str(config) {
        let mut doc = Yaml::deserialize(de).map_err(|e| {
            RenderConfigError::Render(crate::talos::RenderError::InvalidBase(e.to_string()))
        })?;
        if doc.is_null() {
            continue;
        }
        for path in SECRET_PATHS {
            redact_path(&mut doc, path);
        }
        redact_tree(&mut doc, false);
        if !out.is_empty() {
            out.push_str("---\n");
        }
        out.push_str(&crate::talos::yaml::to_string(&doc).map_err(|e| {
            RenderConfigError::Render(crate::talos::RenderError::InvalidBase(e.to_string()))
        })?);
    }
    Ok(out)
}

/// Reads a YAML or JSON file into `T`.
fn read_file<T: serde::de::DeserializeOwned>(
    path: &std::path::Path,
    what: &str,
) -> anyhow::Result<T> {
    let text =
        std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?;
    serde_yaml_ng::from_str(&text)
        .with_context(|| format!("{} is not a YAML or JSON {what}", path.display()))
}

/// The cluster client, connected on first use: inputs that all come from
/// files need none.
struct LazyClient(Option<kube::Client>);

impl LazyClient {
    async fn get(&mut self) -> anyhow::Result<kube::Client> {
        if let Some(client) = &self.0 {
            return Ok(client.clone());
        }
        let client = kube::Client::try_default()
            .await
            .context("connecting to the Kubernetes API (KUBECONFIG)")?;
        self.0 = Some(client.clone());
        Ok(client)
    }
}

/// The NodeClass kind to render with: `--kind`, else the `kind` of the
/// `--nodeclass-file` manifest, else the NodeClaim's `nodeClassRef.kind`
/// (absent or unknown: Elastic Metal, as core's NodeClaims of this provider
/// were before there were two kinds).
pub fn class_kind(
    flag: Option<NodeClassKind>,
    manifest_kind: Option<&str>,
    claim: &Value,
) -> Result<ClassKind, String> {
    let from_manifest = match manifest_kind {
        None => None,
        Some(k) => Some(
            ClassKind::ALL
                .into_iter()
                .find(|c| c.name() == k)
                .ok_or_else(|| {
                    format!(
                        "the NodeClass file is a {k:?}, not a {} or a {}",
                        ClassKind::ElasticMetal.name(),
                        ClassKind::Instance.name()
                    )
                })?,
        ),
    };
    match (flag.map(NodeClassKind::class_kind), from_manifest) {
        (Some(f), Some(m)) if f != m => Err(format!(
            "--kind says {} but the NodeClass file is a {}",
            f.name(),
            m.name()
        )),
        (Some(k), _) | (None, Some(k)) => Ok(k),
        (None, None) => Ok(ClassKind::of(
            claim
                .pointer("/spec/nodeClassRef/kind")
                .and_then(Value::as_str),
        )),
    }
}

/// A NodeClass from its manifest, else from the cluster.
async fn load_class<K>(
    client: &mut LazyClient,
    name: Option<&str>,
    manifest: Option<Yaml>,
    kind: ClassKind,
) -> anyhow::Result<K>
where
    K: kube::Resource<DynamicType = ()> + serde::de::DeserializeOwned + Clone + std::fmt::Debug,
{
    match (manifest, name) {
        (Some(manifest), _) => serde_yaml_ng::from_value(manifest)
            .with_context(|| format!("the NodeClass file is not a valid {}", kind.name())),
        (None, Some(name)) => kube::Api::<K>::all(client.get().await?)
            .get(name)
            .await
            .with_context(|| format!("reading {} {name}", kind.name())),
        (None, None) => anyhow::bail!("pass --nodeclass or --nodeclass-file"),
    }
}

/// The NodeClass read, of either kind.
enum Class {
    ElasticMetal(ScalewayElasticMetalNodeClass),
    Instance(ScalewayInstanceNodeClass),
}

/// Reads the inputs from the cluster (kubeconfig or in-cluster account) and
/// the file system, then prints the rendered config on stdout.
pub async fn run(args: RenderConfigArgs) -> anyhow::Result<()> {
    let mut client = LazyClient(None);
    let claim: Value = match (&args.nodeclaim, &args.nodeclaim_file) {
        (Some(name), _) => {
            let api = kube::Api::<kube::api::DynamicObject>::all_with(
                client.get().await?,
                &crate::k8s::nodes::node_claim_resource(),
            );
            let object = api
                .get(name)
                .await
                .with_context(|| format!("reading NodeClaim {name}"))?;
            serde_json::to_value(object)?
        }
        (None, Some(path)) => read_file(path, "NodeClaim")?,
        (None, None) => anyhow::bail!("pass --nodeclaim or --nodeclaim-file"),
    };
    let manifest: Option<Yaml> = match &args.nodeclass_file {
        Some(path) => Some(read_file(path, "NodeClass manifest")?),
        None => None,
    };
    let manifest_kind = manifest
        .as_ref()
        .and_then(|m| m.get("kind"))
        .and_then(Yaml::as_str)
        .map(str::to_string);
    let kind =
        class_kind(args.kind, manifest_kind.as_deref(), &claim).map_err(anyhow::Error::msg)?;
    if kind == ClassKind::Instance && (args.disk.is_some() || args.mac != PLACEHOLDER_MAC) {
        anyhow::bail!(
            "--disk and --mac apply to Elastic Metal only: a VM runs the image it was created from and has one NIC (eth0)"
        );
    }
    let private_link = args.private_link(kind).map_err(anyhow::Error::msg)?;
    let name = args.nodeclass.as_deref();
    let class = match kind {
        ClassKind::ElasticMetal => {
            Class::ElasticMetal(load_class(&mut client, name, manifest, kind).await?)
        }
        ClassKind::Instance => {
            Class::Instance(load_class(&mut client, name, manifest, kind).await?)
        }
    };
    let (class_name, secret_ref) = match &class {
        Class::ElasticMetal(c) => (c.metadata.name.clone(), &c.spec.machine_config_secret_ref),
        Class::Instance(c) => (c.metadata.name.clone(), &c.spec.machine_config_secret_ref),
    };
    let class_name = class_name.unwrap_or_default();
    let referenced = (
        claim
            .pointer("/spec/nodeClassRef/kind")
            .and_then(Value::as_str),
        claim
            .pointer("/spec/nodeClassRef/name")
            .and_then(Value::as_str),
    );
    if let (ref_kind, Some(ref_name)) = referenced
        && (ref_name != class_name || ClassKind::of(ref_kind) != kind)
    {
        eprintln!(
            "note: the NodeClaim references {} {ref_name}; rendering with {} {class_name} as asked",
            ClassKind::of(ref_kind).name(),
            kind.name()
        );
    }
    let base = match &args.base_config_file {
        Some(path) => std::fs::read(path).with_context(|| format!("reading {}", path.display()))?,
        None => {
            let r = secret_ref;
            read_secret_key(&client.get().await?, r)
                .await
                .with_context(|| format!("reading Secret {}/{}", r.namespace, r.name))?
                .with_context(|| {
                    format!(
                        "Secret {}/{} has no key {:?} (the base machine config)",
                        r.namespace, r.name, r.key
                    )
                })?
        }
    };
    let base =
        Secret::new(String::from_utf8(base).context("the base machine config is not UTF-8")?);
    let out = match &class {
        Class::ElasticMetal(c) => render(&RenderRequest {
            claim: &claim,
            class: &c.spec,
            base_config: base,
            offer: args.offer.as_deref(),
            zone: args.zone.as_deref(),
            disk: args.disk.as_deref(),
            mac: &args.mac,
            private_link: private_link.as_ref(),
            show_secrets: args.show_secrets,
        })?,
        Class::Instance(c) => render_vm(&VmRenderRequest {
            claim: &claim,
            class: &c.spec,
            base_config: base,
            commercial_type: args.offer.as_deref(),
            zone: args.zone.as_deref(),
            private_link: private_link.as_ref(),
            show_secrets: args.show_secrets,
        })?,
    };
    print!("{out}");
    Ok(())
}

#[cfg(test)]
#[path = "render_config_tests.rs"]
mod tests;
