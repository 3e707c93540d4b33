//! `/_emsim/private-networks`, `/_emsim/private-links`,
//! `/_emsim/private-network-records`: seeding Private Networks, what
//! talos-sim needs to play the servers' private links, and what a leak check
//! reads. No authentication.

use axum::Json;
use axum::Router;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::Serialize;
use serde_json::{Value, json};

use super::extract::{ApiJson, Params};
use crate::error::ApiError;
use crate::pn::{IpRecord, PnRecord, PnSpec, PnWorld, em_mac};
use crate::sim::World;
use crate::state::AppState;

pub fn routes() -> Router<AppState> {
    Router::new()
        .route(
            "/_emsim/private-networks",
            get(list_networks).post(add_network),
        )
        .route("/_emsim/private-links", get(private_links))
        .route("/_emsim/private-network-records", get(records))
}

fn admin_network(n: &PnRecord) -> Value {
    json!(n.to_wire())
}

async fn list_networks(State(state): State<AppState>) -> Json<Value> {
    let (world, _) = state.world();
    let list: Vec<Value> = world.pn().networks().map(admin_network).collect();
    Json(json!({ "private_networks": list }))
}

async fn add_network(
    State(state): State<AppState>,
    ApiJson(spec): ApiJson<PnSpec>,
) -> Result<Response, ApiError> {
    let (mut world, now) = state.world();
    let network = world
        .pn_mut()
        .add_network(spec, now)
        .map_err(|e| ApiError::invalid("private_network", "constraint", e))?;
    Ok((StatusCode::CREATED, Json(admin_network(network))).into_response())
}

/// One private link of a server, as its OS must configure it.
#[derive(Serialize)]
struct Link {
    private_network_id: String,
    private_network_name: String,
    /// Elastic Metal: the attachment's status; Instance: the NIC's state.
    status: &'static str,
    /// Elastic Metal: the VLAN on the server's NIC (null until attached).
    #[serde(skip_serializing_if = "is_instance")]
    vlan: Option<Option<u32>>,
    /// Instance: the private NIC's MAC (Elastic Metal: the server's NIC,
    /// in the server's `mac_address`).
    #[serde(skip_serializing_if = "Option::is_none")]
    mac_address: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    private_nic_id: Option<String>,
    ipam_ip_id: Option<String>,
    /// The IPAM address with the subnet's prefix (`127.80.0.2/24`).
    address: Option<String>,
    /// The subnet the address is in.
    subnet: Option<String>,
    /// Every subnet of the network.
    subnets: Vec<String>,
}

#[derive(Serialize)]
struct ServerLinks {
    server_id: String,
    /// `elastic_metal` or `instance`.
    kind: &'static str,
    zone: String,
    /// The server's public (loopback) IPv4, as talos-sim binds it.
    address: String,
    /// Elastic Metal: the NIC's MAC (the one talos-sim gives `eth0`).
    #[serde(skip_serializing_if = "Option::is_none")]
    mac_address: Option<String>,
    links: Vec<Link>,
}

fn link(
    pn: &PnWorld,
    network_id: &str,
    ip_ids: &[String],
) -> (
    String,
    Option<String>,
    Option<String>,
    Option<String>,
    Vec<String>,
) {
    let network = pn.networks.get(network_id);
    let ip: Option<&IpRecord> = ip_ids.first().and_then(|id| pn.ips.get(id));
    let subnet = ip.and_then(|ip| {
        network?
            .subnets
            .iter()
            .find(|s| s.id == ip.subnet_id)
            .map(|s| s.cidr.to_string())
    });
    (
        network.map(|n| n.name.clone()).unwrap_or_default(),
        ip.map(|ip| ip.id.clone()),
        ip.map(IpRecord::cidr),
        subnet,
        network
            .map(|n| n.subnets.iter().map(|s| s.cidr.to_string()).collect())
            .unwrap_or_default(),
    )
}

fn is_instance(vlan: &Option<Option<u32>>) -> bool {
    vlan.is_none()
}

fn all_links(world: &World) -> Vec<ServerLinks> {
    let pn = world.pn();
    let mut out = Vec::new();
    for s in world
        .all_servers()
        .into_iter()
        .filter(|s| s.deleted_at.is_none())
    {
        let links = pn
            .attachments_of(&s.id)
            .into_iter()
            .map(|a| {
                let (name, ipam_ip_id, address, subnet, subnets) =
                    link(pn, &a.private_network_id, &a.ipam_ip_ids);
                Link {
                    private_network_id: a.private_network_id.clone(),
                    private_network_name: name,
                    status: a.status.as_str(),
                    vlan: Some(a.to_wire().vlan),
                    mac_address: None,
                    private_nic_id: None,
                    ipam_ip_id,
                    address,
                    subnet,
                    subnets,
                }
            })
            .collect();
        out.push(ServerLinks {
            server_id: s.id.clone(),
            kind: "elastic_metal",
            zone: s.zone.clone(),
            address: s.address.to_string(),
            mac_address: Some(em_mac(&s.id)),
            links,
        });
    }
    for vm in world
        .instance()
        .all_servers()
        .into_iter()
        .filter(|s| s.deleted_at.is_none())
    {
        let links = pn
            .nics_of(&vm.id)
            .into_iter()
            .map(|n| {
                let (name, ipam_ip_id, address, subnet, subnets) =
                    link(pn, &n.private_network_id, &n.ipam_ip_ids);
                Link {
                    private_network_id: n.private_network_id.clone(),
                    private_network_name: name,
                    status: n.state.as_str(),
                    vlan: None,
                    mac_address: Some(n.mac_address.clone()),
                    private_nic_id: Some(n.id.clone()),
                    ipam_ip_id,
                    address,
                    subnet,
                    subnets,
                }
            })
            .collect();
        out.push(ServerLinks {
            server_id: vm.id.clone(),
            kind: "instance",
            zone: vm.zone.clone(),
            address: vm.address.to_string(),
            mac_address: None,
            links,
        });
    }
    out
}

/// Every live server (Elastic Metal and Instance) with its private links;
/// `?server=` (an id or the public address) keeps that one.
async fn private_links(State(state): State<AppState>, params: Params) -> Json<Value> {
    let (world, _) = state.world();
    let wanted = params.get("server");
    let servers: Vec<ServerLinks> = all_links(&world)
        .into_iter()
        .filter(|s| wanted.is_none_or(|w| s.server_id == w || s.address == w))
        .collect();
    Json(json!({ "servers": servers }))
}

/// Every attachment, private NIC and IPAM address, with counts: what is
/// left (and billed) after a test.
async fn records(State(state): State<AppState>) -> Json<Value> {
    let (world, _) = state.world();
    let pn = world.pn();
    let attachments: Vec<Value> = pn
        .all_attachments()
        .map(|a| {
            let mut v = json!(a.to_wire());
            v["zone"] = json!(a.zone);
            v
        })
        .collect();
    let nics: Vec<Value> = pn.all_nics().map(|n| json!(n.to_wire())).collect();
    let ips: Vec<Value> = pn
        .all_ips()
        .map(|ip| {
            let mut v = json!(ip.to_wire());
            v["booked"] = json!(ip.booked);
            v
        })
        .collect();
    let booked = pn.all_ips().filter(|ip| ip.booked).count();
    Json(json!({
        "counts": {
            "attachments": attachments.len(),
            "private_nics": nics.len(),
            "booked_ips": booked,
            "allocated_ips": ips.len() - booked,
        },
        "attachments": attachments,
        "private_nics": nics,
        "ips": ips,
    }))
}
