//! Shared by the Private Network tests (`pn_*.rs`): a simulator with two
//! seeded networks in fr-par, a delivered Elastic Metal server, a VM.

use emsim::pn::PnSpec;
use emsim::state::DEFAULT_PROJECT_ID;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

use super::{Sim, ZONE_URL};

pub const V3: &str = "/baremetal/v3/zones/fr-par-2";
pub const VPC: &str = "/vpc/v2/regions/fr-par";
pub const IPAM: &str = "/ipam/v1/regions/fr-par";
pub const VM_ZONE: &str = "/instance/v1/zones/fr-par-2";

pub fn spec(name: &str, subnet: &str, tags: &[&str]) -> PnSpec {
    PnSpec {
        id: None,
        name: name.into(),
        region: "fr-par".into(),
        subnets: vec![subnet.into()],
        tags: tags.iter().map(|t| t.to_string()).collect(),
        project_id: None,
        vpc_id: None,
        dhcp_enabled: true,
    }
}

/// The clock stands still but for `advance` (scale 1000: a second of test
/// moves it a millisecond). Networks `prod` (127.80.0.0/24, tag k8s) and
/// `dev` (127.81.0.0/28).
pub async fn start() -> Sim {
    super::start_with(emsim::Config {
        time_scale: 1000.0,
        private_networks: vec![
            spec("prod", "127.80.0.0/24", &["k8s"]),
            spec("dev", "127.81.0.0/28", &["dev"]),
        ],
        ..emsim::Config::default()
    })
    .await
}

pub async fn advance(sim: &Sim, seconds: f64) {
    let (status, _) = sim
        .admin(
            Method::POST,
            "/_emsim/clock/advance",
            Some(json!({ "seconds": seconds })),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
}

pub async fn pn_id(sim: &Sim, name: &str) -> String {
    let (status, body) = sim
        .get(&format!("{VPC}/private-networks?name={name}"))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["private_networks"][0]["id"]
        .as_str()
        .unwrap_or_else(|| panic!("network {name}: {body}"))
        .into()
}

pub async fn delete(sim: &Sim, path: &str) -> (StatusCode, Value) {
    sim.call(Method::DELETE, path, None).await
}

pub async fn put(sim: &Sim, path: &str, body: Value) -> (StatusCode, Value) {
    sim.call(Method::PUT, path, Some(body)).await
}

/// A delivered EM-A115X-SSD (instant: at most 12 s), with the Private
/// Network option when `option`.
pub async fn em_server(sim: &Sim, name: &str, option: bool) -> String {
    let (status, server) = sim.create("EM-A115X-SSD", name, &[]).await;
    assert_eq!(status, StatusCode::OK, "{server}");
    let id = server["id"].as_str().unwrap().to_string();
    advance(sim, 13.0).await;
    let (_, server) = sim.get(&format!("{ZONE_URL}/servers/{id}")).await;
    assert_eq!(server["status"], "ready", "{server}");
    if option {
        let option_id = pn_option(sim).await;
        let (status, body) = sim
            .post(
                &format!("{ZONE_URL}/servers/{id}/options/{option_id}"),
                json!({}),
            )
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
    id
}

/// The `private_network` option's id, read from the offer's options.
pub async fn pn_option(sim: &Sim) -> String {
    let (_, offers) = sim
        .get(&format!("{ZONE_URL}/offers?name=EM-A115X-SSD"))
        .await;
    let options = offers["offers"][0]["options"].as_array().unwrap().clone();
    options
        .iter()
        .find(|o| o.get("private_network").is_some())
        .and_then(|o| o["id"].as_str())
        .unwrap_or_else(|| panic!("no private_network option: {offers}"))
        .into()
}

pub async fn attachments(sim: &Sim, query: &str) -> Value {
    let (status, body) = sim
        .get(&format!("{V3}/server-private-networks?{query}"))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body
}

pub async fn vm(sim: &Sim, name: &str) -> String {
    let (_, images) = sim
        .get(&format!("{VM_ZONE}/images?name=talos-v1.11.5-amd64"))
        .await;
    let image = images["images"][0]["id"].as_str().unwrap();
    let (status, body) = sim
        .post(
            &format!("{VM_ZONE}/servers"),
            json!({"name": name, "commercial_type": "POP2-2C-8G", "image": image,
                   "project": DEFAULT_PROJECT_ID}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    body["server"]["id"].as_str().unwrap().into()
}

pub async fn book(
    sim: &Sim,
    pn: &str,
    address: Option<&str>,
    tags: &[&str],
) -> (StatusCode, Value) {
    let mut body = json!({"project_id": DEFAULT_PROJECT_ID, "source": {"private_network_id": pn},
                          "is_ipv6": false, "tags": tags});
    if let Some(a) = address {
        body["address"] = json!(a);
    }
    sim.post(&format!("{IPAM}/ips"), body).await
}
