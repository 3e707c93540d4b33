//! A VM on a Private Network, on real sockets: emsim's admin endpoints
//! (user data and `/_emsim/private-links`) played by a small fake, the
//! kubelet against the fake API server of `common::apiserver`. The kubelet
//! waits for an address in `nodeIP.validSubnets`, and reports it as the
//! Node's InternalIP once the private NIC carries it.

mod common;

use std::net::Ipv4Addr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use common::apiserver::{GOOD_TOKEN, fake_apiserver};
use common::*;
use serde_json::{Value, json};
use talos_sim::instance::listing::AdminVm;
use talos_sim::instance::metadata::Metadata;
use talos_sim::manager::Simulator;
use talos_sim::model::Command;
use talos_sim::os::Settings;
use talos_sim::private_links::PrivateLinks;
use talos_sim::records::OsState;

const NIC_MAC: &str = "02:00:00:3c:1f:9a";

/// emsim's admin endpoints the VM reads: one user data value and the
/// private NIC's state.
struct Emsim {
    user_data: String,
    nic_state: Mutex<&'static str>,
}

async fn user_data(
    State(e): State<Arc<Emsim>>,
    Path((_, key)): Path<(String, String)>,
) -> Response {
    if key == "cloud-init" {
        e.user_data.clone().into_response()
    } else {
        StatusCode::NOT_FOUND.into_response()
    }
}

async fn private_links(State(e): State<Arc<Emsim>>) -> Json<Value> {
    let state = *e.nic_state.lock().unwrap();
    Json(json!({"servers": [{
        "server_id": "vm-pn", "kind": "instance", "zone": "fr-par-2", "address": "127.98.0.20",
        "links": [{"private_network_id": "pn-1", "private_network_name": "prod", "status": state,
                   "mac_address": NIC_MAC, "private_nic_id": "nic-1", "ipam_ip_id": "ip-1",
                   "address": "127.98.1.3/24", "subnet": "127.98.1.0/24",
                   "subnets": ["127.98.1.0/24"]}]}]}))
}

async fn emsim(user_data_yaml: String) -> (Arc<Emsim>, String) {
    let e = Arc::new(Emsim {
        user_data: user_data_yaml,
        nic_state: Mutex::new("syncing"),
    });
    let app = axum::Router::new()
        .route(
            "/_emsim/instance/servers/{id}/user_data/{key}",
            axum::routing::get(user_data),
        )
        .route("/_emsim/private-links", axum::routing::get(private_links))
        .with_state(e.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });
    (e, url)
}

fn running_vm(ip: Ipv4Addr) -> Command {
    let vm: AdminVm = serde_json::from_value(json!({
        "id": "vm-pn", "name": "pn-x7k2p", "hostname": "pn-x7k2p", "zone": "fr-par-2",
        "state": "running", "arch": "x86_64", "commercial_type": "PRO2-S",
        "image": {"id": "0b5d7a6c-1f4e-4b7a-9d1b-2a8c3e4f5a6b", "name": "talos-v1.14.1-amd64"},
        "address": ip.to_string(),
        "actions": [{"at": "2026-11-22T10:00:00.000000Z", "action": "poweron"}],
        "hardware": {"ncpus": 2, "ram": 8_589_934_592u64, "root_volume_size": 20_000_000_000u64},
    }))
    .unwrap();
    Command::PowerOn(Box::new(vm.power_on().unwrap()))
}

/// The worker fixture for a VM with the private NIC as the provider
/// renders it: alias `priv0` on its MAC, DHCP, the kubelet's node IP in the
/// network's subnet.
fn config(url: &str, ca_pem: &str) -> String {
    let yaml = WORKER_YAML
        .replace("https://127.0.0.1:6443", url)
        .replace(
            "token: k8sabc.0123456789abcdef",
            &format!("token: {GOOD_TOKEN}"),
        )
        .replace(
            "  ca:\n    crt: LS0tLS1CRUdJTi==\n    key: \"\"\n---",
            &format!("  ca:\n    crt: {}\n    key: \"\"\n---", B64.encode(ca_pem)),
        )
        .replace(
            "  kubelet:\n",
            "  kubelet:\n    nodeIP:\n      validSubnets:\n        - 127.98.1.0/24\n",
        );
    format!(
        "{yaml}\n---\napiVersion: v1alpha1\nkind: LinkAliasConfig\nname: priv0\nselector:\n  match: mac(link.permanent_addr) == \"{NIC_MAC}\"\n\
         ---\napiVersion: v1alpha1\nkind: LinkConfig\nname: priv0\nup: true\n\
         ---\napiVersion: v1alpha1\nkind: DHCPv4Config\nname: priv0\n"
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_kubelet_waits_for_the_private_address_and_reports_it_as_internal_ip() {
    let ip = Ipv4Addr::new(127, 98, 0, 20);
    let (fake, url, ca_pem) = fake_apiserver(Ipv4Addr::new(127, 98, 0, 50)).await;
    let (emsim, emsim_url) = emsim(config(&url, &ca_pem)).await;
    let dir = tempfile::tempdir().unwrap();
    let sim = Simulator::new(Settings {
        talos_port: 50004,
        metadata: Some(Metadata::new(&emsim_url).unwrap()),
        private_links: Some(PrivateLinks::new(&emsim_url).unwrap()),
        links_poll: Duration::from_millis(50),
        ..Settings::new(dir.path())
    });

    sim.apply(running_vm(ip)).await;
    // The NIC is still syncing: no private address, no node IP, no kubelet.
    let waiting = wait_for(
        "the kubelet to wait for a node IP",
        || sim.records(),
        |r| {
            r.boot_error
                .as_deref()
                .is_some_and(|e| e.starts_with("kubelet not started: no suitable node IP found"))
        },
    )
    .await;
    assert_eq!(waiting.state, OsState::Configured);
    assert_eq!(waiting.node_ip, None);
    let link = serde_json::to_value(&waiting.private_links[0]).unwrap();
    assert_eq!(link["state"], "down");
    assert_eq!(link["mac_address"], NIC_MAC);
    assert!(
        link["reason"].as_str().unwrap().contains("syncing"),
        "{link}"
    );
    assert!(fake.seen.lock().unwrap().csrs.is_empty(), "no kubelet");

    *emsim.nic_state.lock().unwrap() = "available";
    let joined = wait_for(
        "the node to join",
        || sim.records(),
        |r| r.state == OsState::Running,
    )
    .await;
    assert_eq!(joined.node_ip.as_deref(), Some("127.98.1.3"));
    assert_eq!(joined.boot_error, None);
    let link = serde_json::to_value(&joined.private_links[0]).unwrap();
    assert_eq!(
        link,
        json!({"private_network_id": "pn-1", "private_network_name": "prod", "link": "priv0",
               "vlan": null, "mac_address": NIC_MAC, "state": "up",
               "address": "127.98.1.3/24", "source": "dhcp", "reason": null})
    );
    wait_until("a status report", || {
        !fake.seen.lock().unwrap().statuses.is_empty()
    })
    .await;
    let seen = fake.seen.lock().unwrap();
    assert_eq!(
        seen.statuses[0]["addresses"][0],
        json!({"type": "InternalIP", "address": "127.98.1.3"})
    );
}
