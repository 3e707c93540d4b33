//! The contract with emsim's `/_emsim/private-links`, against emsim itself
//! (in-process, its clock moved by hand): an Elastic Metal server attached
//! to a Private Network and a VM with a private NIC, read by talos-sim's
//! client and configured by the documents the provider renders. The links
//! come up with the IPAM address only when the VLAN and the MACs are
//! emsim's.

use emsim::pn::PnSpec;
use emsim::state::{DEFAULT_PROJECT_ID, DEFAULT_SECRET_KEY};
use serde_json::{Value, json};
use talos_sim::machine_config::network::NetworkConfig;
use talos_sim::model::mac_for;
use talos_sim::network::{LinkState, Nic, configure};
use talos_sim::private_links::PrivateLinks;

const EM: &str = "/baremetal/v1/zones/fr-par-2";
const V3: &str = "/baremetal/v3/zones/fr-par-2";
const VM: &str = "/instance/v1/zones/fr-par-2";

struct Emsim {
    base: String,
    http: reqwest::Client,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Emsim {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Emsim {
    /// The clock stands still but for `advance`.
    async fn start() -> Self {
        talos_sim::install_crypto_provider();
        let state = emsim::AppState::new(emsim::Config {
            time_scale: 1000.0,
            private_networks: vec![PnSpec {
                id: None,
                name: "prod".into(),
                region: "fr-par".into(),
                subnets: vec!["127.80.0.0/24".into()],
                tags: vec![],
                project_id: None,
                vpc_id: None,
                dhcp_enabled: true,
            }],
            ..emsim::Config::default()
        })
        .unwrap();
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move { emsim::serve(listener, state).await.unwrap() });
        Self {
            base,
            http: reqwest::Client::builder().no_proxy().build().unwrap(),
            task,
        }
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.base))
            .header("X-Auth-Token", DEFAULT_SECRET_KEY);
        if let Some(body) = body {
            req = req.json(&body);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status();
        let body: Value = resp.json().await.unwrap_or(Value::Null);
        assert!(status.is_success(), "{path}: {status} {body}");
        body
    }

    async fn get(&self, path: &str) -> Value {
        self.call(reqwest::Method::GET, path, None).await
    }

    async fn post(&self, path: &str, body: Value) -> Value {
        self.call(reqwest::Method::POST, path, Some(body)).await
    }

    async fn advance(&self, seconds: f64) {
        self.post("/_emsim/clock/advance", json!({ "seconds": seconds }))
            .await;
    }
}

fn network(docs: &str) -> NetworkConfig {
    let mut cfg = NetworkConfig::default();
    let mut errors = Vec::new();
    for doc in docs.split("\n---\n") {
        let value: serde_yaml_ng::Value = serde_yaml_ng::from_str(doc).unwrap();
        let kind = value["kind"].as_str().unwrap().to_string();
        cfg.read(&kind, &value, &mut errors);
    }
    assert!(errors.is_empty(), "{errors:?}");
    cfg
}

/// What the provider renders for an Elastic Metal node on VLAN `vlan`.
fn vlan_docs(mac: &str, vlan: u64) -> String {
    format!(
        "apiVersion: v1alpha1\nkind: LinkAliasConfig\nname: net0\nselector:\n  match: mac(link.permanent_addr) == \"{mac}\"\n---\n\
         apiVersion: v1alpha1\nkind: VLANConfig\nname: net0.{vlan}\nvlanID: {vlan}\nvlanMode: 802.1q\nparent: net0\nup: true\n---\n\
         apiVersion: v1alpha1\nkind: DHCPv4Config\nname: net0.{vlan}\n"
    )
}

#[tokio::test]
async fn an_attached_elastic_metal_server_gets_its_vlan_address() {
    let emsim = Emsim::start().await;
    let pn = emsim
        .get("/vpc/v2/regions/fr-par/private-networks?name=prod")
        .await["private_networks"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let offers = emsim.get(&format!("{EM}/offers?name=EM-A115X-SSD")).await;
    let offer = &offers["offers"][0];
    let option = offer["options"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o.get("private_network").is_some())
        .unwrap()["id"]
        .clone();
    let server = emsim
        .post(
            &format!("{EM}/servers"),
            json!({"offer_id": offer["id"], "project_id": DEFAULT_PROJECT_ID, "name": "node-a",
                   "description": "", "tags": [], "install": null}),
        )
        .await;
    let id = server["id"].as_str().unwrap().to_string();
    emsim.advance(13.0).await;
    emsim
        .post(
            &format!("{EM}/servers/{id}/options/{}", option.as_str().unwrap()),
            json!({}),
        )
        .await;
    emsim
        .post(
            &format!("{V3}/servers/{id}/private-networks"),
            json!({"private_network_id": pn}),
        )
        .await;

    let links = PrivateLinks::new(&emsim.base).unwrap();
    let attaching = links.of(&id).await.unwrap().expect("the server is listed");
    assert_eq!(
        attaching.mac_address.as_deref(),
        Some(mac_for(&id).as_str())
    );
    let down = configure(
        Nic::Metal(&mac_for(&id)),
        &attaching.links,
        &network(&vlan_docs(&mac_for(&id), 100)),
    );
    assert_eq!(down[0].state, LinkState::Down, "{down:?}");

    emsim.advance(11.0).await;
    let attached = links.of(&id).await.unwrap().unwrap();
    let vlan = attached.links[0].vlan.expect("a VLAN once attached");
    let up = configure(
        Nic::Metal(&mac_for(&id)),
        &attached.links,
        &network(&vlan_docs(&mac_for(&id), u64::from(vlan))),
    );
    assert_eq!(up[0].state, LinkState::Up, "{up:?}");
    assert_eq!(up[0].address.as_deref(), Some("127.80.0.2/24"));
    // Another VLAN id, or a VLAN over another MAC: no address.
    let wrong_vlan = network(&vlan_docs(&mac_for(&id), u64::from(vlan) + 1));
    let wrong_mac = network(&vlan_docs("02:00:00:00:00:01", u64::from(vlan)));
    for cfg in [wrong_vlan, wrong_mac] {
        let down = configure(Nic::Metal(&mac_for(&id)), &attached.links, &cfg);
        assert_eq!(down[0].address, None, "{down:?}");
    }
    assert!(
        links.of("not-a-server").await.unwrap().is_none(),
        "an unknown server has no links"
    );
}

#[tokio::test]
async fn a_vm_private_nic_gets_its_address_once_available() {
    let emsim = Emsim::start().await;
    let pn = emsim
        .get("/vpc/v2/regions/fr-par/private-networks?name=prod")
        .await["private_networks"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let images = emsim
        .get(&format!("{VM}/images?name=talos-v1.11.5-amd64"))
        .await;
    let vm = emsim
        .post(
            &format!("{VM}/servers"),
            json!({"name": "vm-a", "commercial_type": "POP2-2C-8G",
                   "image": images["images"][0]["id"], "project": DEFAULT_PROJECT_ID}),
        )
        .await;
    let id = vm["server"]["id"].as_str().unwrap().to_string();
    let nic = emsim
        .post(
            &format!("{VM}/servers/{id}/private_nics"),
            json!({"private_network_id": pn}),
        )
        .await;
    let mac = nic["private_nic"]["mac_address"]
        .as_str()
        .unwrap()
        .to_string();
    let docs = format!(
        "apiVersion: v1alpha1\nkind: LinkAliasConfig\nname: priv0\nselector:\n  match: mac(link.permanent_addr) == \"{mac}\"\n---\n\
         apiVersion: v1alpha1\nkind: LinkConfig\nname: priv0\nup: true\n---\n\
         apiVersion: v1alpha1\nkind: DHCPv4Config\nname: priv0\n"
    );
    let links = PrivateLinks::new(&emsim.base).unwrap();
    let syncing = links.of(&id).await.unwrap().unwrap();
    assert_eq!(syncing.kind, "instance");
    let down = configure(Nic::Instance, &syncing.links, &network(&docs));
    assert!(
        down[0].reason.as_deref().unwrap().contains("syncing"),
        "{down:?}"
    );
    emsim.advance(3.0).await;
    let available = links.of(&id).await.unwrap().unwrap();
    let up = configure(Nic::Instance, &available.links, &network(&docs));
    assert_eq!(up[0].state, LinkState::Up, "{up:?}");
    assert_eq!(up[0].mac_address.as_deref(), Some(mac.as_str()));
    assert!(up[0].address.as_deref().unwrap().starts_with("127.80.0."));
}
