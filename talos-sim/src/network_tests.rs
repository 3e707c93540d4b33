use super::*;
use crate::machine_config::{NodeConfig, parse, tests::WORKER};

const NIC: &str = "a6:9b:84:98:a1:fb";
const VM_NIC: &str = "02:00:00:3c:1f:9a";

/// The worker fixture plus network documents, as the provider renders them
/// (`controller/src/talos/private_network.rs`).
fn config(docs: &str) -> NodeConfig {
    parse(&format!("{WORKER}\n---\n{docs}")).expect("valid config")
}

/// `net0` on the server's NIC and `net0.<vlan>` over it.
fn vlan_docs(alias_mac: &str, vlan: u32, address: Option<&str>) -> String {
    let mut docs = format!(
        "apiVersion: v1alpha1\nkind: LinkAliasConfig\nname: net1\nselector:\n  match: mac(link.permanent_addr) == \"{alias_mac}\"\n---\n\
         apiVersion: v1alpha1\nkind: VLANConfig\nname: net1.{vlan}\nvlanID: {vlan}\nvlanMode: 802.1q\nparent: net1\nup: true\n"
    );
    match address {
        Some(a) => docs.push_str(&format!("addresses:\n  - address: {a}\n")),
        None => docs.push_str(&format!(
            "---\napiVersion: v1alpha1\nkind: DHCPv4Config\nname: net1.{vlan}\n"
        )),
    }
    docs
}

fn attached(vlan: u32) -> Delivered {
    Delivered {
        private_network_id: "pn-1".into(),
        private_network_name: "prod".into(),
        status: "attached".into(),
        vlan: Some(vlan),
        mac_address: None,
        address: Some("127.80.0.2/24".into()),
        subnet: Some("127.80.0.0/24".into()),
    }
}

fn vm_nic(state: &str) -> Delivered {
    Delivered {
        private_network_id: "pn-1".into(),
        private_network_name: "prod".into(),
        status: state.into(),
        vlan: None,
        mac_address: Some(VM_NIC.into()),
        address: Some("127.80.0.3/24".into()),
        subnet: Some("127.80.0.0/24".into()),
    }
}

fn one(links: Vec<PrivateLink>) -> PrivateLink {
    assert_eq!(links.len(), 1, "{links:?}");
    links.into_iter().next().unwrap()
}

fn reason(link: &PrivateLink) -> &str {
    assert_eq!(link.state, LinkState::Down, "{link:?}");
    assert_eq!(link.address, None);
    link.reason.as_deref().unwrap()
}

#[test]
fn the_right_vlan_on_the_right_mac_brings_the_link_up_with_its_static_address() {
    let cfg = config(&vlan_docs(NIC, 100, Some("127.80.0.2/24")));
    let link = one(configure(Nic::Metal(NIC), &[attached(100)], &cfg.network));
    assert_eq!(link.state, LinkState::Up, "{link:?}");
    assert_eq!(link.link.as_deref(), Some("net1.100"));
    assert_eq!(link.address.as_deref(), Some("127.80.0.2/24"));
    assert_eq!(link.source, Some("static"));
    assert_eq!(link.ip(), Some(Ipv4Addr::new(127, 80, 0, 2)));
    // The selector's MAC is compared without regard to case.
    let cfg = config(&vlan_docs(&NIC.to_uppercase(), 100, Some("127.80.0.2/24")));
    let link = one(configure(Nic::Metal(NIC), &[attached(100)], &cfg.network));
    assert_eq!(link.state, LinkState::Up);
}

#[test]
fn dhcp_on_the_vlan_takes_the_ipam_address() {
    let cfg = config(&vlan_docs(NIC, 100, None));
    let link = one(configure(Nic::Metal(NIC), &[attached(100)], &cfg.network));
    assert_eq!(link.state, LinkState::Up);
    assert_eq!(link.address.as_deref(), Some("127.80.0.2/24"));
    assert_eq!(link.source, Some("dhcp"));
    let mut no_ip = attached(100);
    no_ip.address = None;
    let link = one(configure(Nic::Metal(NIC), &[no_ip], &cfg.network));
    assert!(reason(&link).contains("DHCP got no lease"));
}

#[test]
fn a_wrong_vlan_leaves_the_machine_without_a_private_address() {
    let cfg = config(&vlan_docs(NIC, 101, Some("127.80.0.2/24")));
    let link = one(configure(Nic::Metal(NIC), &[attached(100)], &cfg.network));
    assert_eq!(
        reason(&link),
        "no VLANConfig for VLAN 100: the config has net1.101 (vlanID 101)"
    );
    assert_eq!(link.link, None);
}

#[test]
fn a_vlan_over_another_nic_leaves_the_machine_without_a_private_address() {
    let cfg = config(&vlan_docs("02:11:22:33:44:55", 100, Some("127.80.0.2/24")));
    let link = one(configure(Nic::Metal(NIC), &[attached(100)], &cfg.network));
    assert_eq!(
        reason(&link),
        format!(
            "VLANConfig net1.100: parent net1 selects MAC 02:11:22:33:44:55, the server's NIC is {NIC}"
        )
    );
    // A parent that is no alias: talos-sim cannot tell which NIC it is.
    let docs = vlan_docs(NIC, 100, None).replace("parent: net1", "parent: enp1s0f0");
    let link = one(configure(
        Nic::Metal(NIC),
        &[attached(100)],
        &config(&docs).network,
    ));
    assert!(reason(&link).contains("parent \"enp1s0f0\" is not a LinkAliasConfig"));
}

#[test]
fn without_a_vlan_document_there_is_no_private_address() {
    // The fixture's own alias net0 (another MAC) and nothing else.
    let cfg = config("apiVersion: v1alpha1\nkind: ResolverConfig\nnameservers: []\n");
    let link = one(configure(Nic::Metal(NIC), &[attached(100)], &cfg.network));
    assert_eq!(reason(&link), "no VLANConfig document for VLAN 100");
}

#[test]
fn a_static_address_that_is_not_the_ipam_one_stays_down() {
    let cfg = config(&vlan_docs(NIC, 100, Some("127.80.0.9/24")));
    let link = one(configure(Nic::Metal(NIC), &[attached(100)], &cfg.network));
    assert_eq!(
        reason(&link),
        "net1.100: static address 127.80.0.9/24 is not the IPAM address 127.80.0.2/24"
    );
    assert_eq!(link.link.as_deref(), Some("net1.100"));
}

#[test]
fn an_attachment_not_attached_yet_carries_nothing() {
    let cfg = config(&vlan_docs(NIC, 100, None));
    let mut attaching = attached(100);
    attaching.status = "attaching".into();
    attaching.vlan = None;
    let link = one(configure(Nic::Metal(NIC), &[attaching], &cfg.network));
    assert!(reason(&link).contains("attaching"));
    let docs = vlan_docs(NIC, 100, None).replace("up: true", "up: false");
    let link = one(configure(
        Nic::Metal(NIC),
        &[attached(100)],
        &config(&docs).network,
    ));
    assert_eq!(reason(&link), "VLANConfig net1.100: up is false");
}

fn vm_docs(mac: &str, link: &str) -> String {
    format!(
        "apiVersion: v1alpha1\nkind: LinkAliasConfig\nname: priv0\nselector:\n  match: mac(link.permanent_addr) == \"{mac}\"\n---\n{link}"
    )
}

const VM_STATIC: &str = "apiVersion: v1alpha1\nkind: LinkConfig\nname: priv0\nup: true\naddresses:\n  - address: 127.80.0.3/24\n";
const VM_DHCP: &str = "apiVersion: v1alpha1\nkind: DHCPv4Config\nname: priv0\n";

#[test]
fn a_vm_private_nic_is_up_when_an_alias_selects_its_mac() {
    let cfg = config(&vm_docs(VM_NIC, VM_STATIC));
    let link = one(configure(
        Nic::Instance,
        &[vm_nic("available")],
        &cfg.network,
    ));
    assert_eq!(link.state, LinkState::Up, "{link:?}");
    assert_eq!(link.link.as_deref(), Some("priv0"));
    assert_eq!(link.source, Some("static"));
    let cfg = config(&vm_docs(VM_NIC, VM_DHCP));
    let link = one(configure(
        Nic::Instance,
        &[vm_nic("available")],
        &cfg.network,
    ));
    assert_eq!(link.address.as_deref(), Some("127.80.0.3/24"));
    assert_eq!(link.source, Some("dhcp"));
}

#[test]
fn a_vm_alias_on_another_mac_or_without_a_link_config_stays_down() {
    let cfg = config(&vm_docs("02:00:00:00:00:01", VM_STATIC));
    let link = one(configure(
        Nic::Instance,
        &[vm_nic("available")],
        &cfg.network,
    ));
    assert!(
        reason(&link).starts_with(&format!(
            "no LinkAliasConfig selects the private NIC's MAC {VM_NIC}: the config's aliases select"
        )),
        "{link:?}"
    );
    let cfg = config(&vm_docs(
        VM_NIC,
        "apiVersion: v1alpha1\nkind: ResolverConfig\nnameservers: []\n",
    ));
    let link = one(configure(
        Nic::Instance,
        &[vm_nic("available")],
        &cfg.network,
    ));
    assert!(reason(&link).contains("no LinkConfig or DHCPv4Config"));
    let cfg = config(&vm_docs(VM_NIC, VM_DHCP));
    let link = one(configure(Nic::Instance, &[vm_nic("syncing")], &cfg.network));
    assert!(reason(&link).contains("syncing"));
}

#[test]
fn the_node_ip_is_the_address_in_the_valid_subnets() {
    let public = Ipv4Addr::new(127, 77, 0, 10);
    let private = [Ipv4Addr::new(127, 80, 0, 2)];
    assert_eq!(node_ip(public, &private, &[]), Ok(public));
    let subnets = vec!["127.80.0.0/24".to_string()];
    assert_eq!(node_ip(public, &private, &subnets), Ok(private[0]));
    // A negative entry removes; negatives alone keep nothing.
    let both = vec!["127.0.0.0/8".to_string(), "!127.77.0.0/16".to_string()];
    assert_eq!(node_ip(public, &private, &both), Ok(private[0]));
    let err = node_ip(public, &private, &["!127.77.0.0/16".to_string()]).unwrap_err();
    assert_eq!(err.addresses, vec!["127.77.0.10", "127.80.0.2"]);
    // No private link up: no address matches, the kubelet does not start.
    let err = node_ip(public, &[], &subnets).unwrap_err();
    assert!(
        err.to_string()
            .starts_with("no suitable node IP found, please make sure .machine.kubelet.nodeIP")
    );
    // A bare address counts as a /32.
    assert_eq!(
        node_ip(public, &private, &["127.80.0.2".to_string()]),
        Ok(private[0])
    );
}

#[test]
fn selectors_are_read_in_the_provider_s_form() {
    use crate::machine_config::network::{Selector, parse_selector};
    assert_eq!(
        parse_selector(r#"mac(link.permanent_addr) == "AA:bb:cc:dd:ee:ff""#),
        Selector::Mac("aa:bb:cc:dd:ee:ff".into())
    );
    assert_eq!(
        parse_selector(r#""aa:bb:cc:dd:ee:ff"==mac(link.hardware_addr)"#),
        Selector::Mac("aa:bb:cc:dd:ee:ff".into())
    );
    assert!(matches!(
        parse_selector("link.type == 1"),
        Selector::Other(_)
    ));
}

#[test]
fn links_the_network_does_not_deliver_are_named() {
    let cfg = config(&vlan_docs(NIC, 101, None));
    assert_eq!(
        undelivered(Nic::Metal(NIC), &[attached(100)], &cfg.network),
        vec!["VLANConfig net1.101: VLAN 101 is not attached to this server"]
    );
    assert!(undelivered(Nic::Metal(NIC), &[attached(101)], &cfg.network).is_empty());
    let cfg = config(&vm_docs("02:00:00:00:00:01", VM_DHCP));
    assert_eq!(
        undelivered(Nic::Instance, &[vm_nic("available")], &cfg.network),
        vec!["link priv0: MAC 02:00:00:00:00:01 is no private NIC of this server"]
    );
    let cfg = config(&vm_docs(VM_NIC, VM_DHCP));
    assert!(undelivered(Nic::Instance, &[vm_nic("available")], &cfg.network).is_empty());
}
