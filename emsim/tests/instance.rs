//! The Instance and Block API subset over a real socket: catalog paging,
//! server lifecycle on the simulated clock, user data, volumes, errors.

mod common;

use std::collections::BTreeSet;

use common::Sim;
use emsim::state::{DEFAULT_PROJECT_ID, DEFAULT_SECRET_KEY};
use reqwest::header::HeaderMap;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

const ZONE: &str = "/instance/v1/zones/fr-par-2";
const BLOCK: &str = "/block/v1/zones/fr-par-2";

/// The simulated clock stands still but for `advance` (real time at scale
/// 1000: a test lasting a second moves it 1 ms).
async fn start() -> Sim {
    common::start_with(emsim::Config {
        time_scale: 1000.0,
        ..emsim::Config::default()
    })
    .await
}

/// An authenticated call returning status, headers and raw body.
async fn raw(
    sim: &Sim,
    method: Method,
    path: &str,
    body: Option<(&str, Vec<u8>)>,
) -> (StatusCode, HeaderMap, Vec<u8>) {
    let mut req = sim
        .client
        .request(method, format!("{}{path}", sim.base))
        .header("X-Auth-Token", DEFAULT_SECRET_KEY);
    if let Some((content_type, bytes)) = body {
        req = req.header("Content-Type", content_type).body(bytes);
    }
    let resp = req.send().await.expect("request");
    let status = resp.status();
    let headers = resp.headers().clone();
    (status, headers, resp.bytes().await.expect("body").to_vec())
}

async fn advance(sim: &Sim, seconds: f64) {
    let (status, _) = sim
        .admin(
            Method::POST,
            "/_emsim/clock/advance",
            Some(json!({ "seconds": seconds })),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
}

async fn image(sim: &Sim, name: &str) -> String {
    let (status, body) = sim.get(&format!("{ZONE}/images?name={name}")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    body["images"][0]["id"]
        .as_str()
        .expect("an image")
        .to_string()
}

async fn create(sim: &Sim, commercial_type: &str, name: &str, tags: &[&str]) -> Value {
    let image = image(sim, "talos-v1.11.5-amd64").await;
    let (status, body) = sim
        .post(
            &format!("{ZONE}/servers"),
            json!({"name": name, "commercial_type": commercial_type, "image": image,
                   "project": DEFAULT_PROJECT_ID, "tags": tags}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    body["server"].clone()
}

async fn action(sim: &Sim, id: &str, action: &str) -> (StatusCode, Value) {
    sim.post(
        &format!("{ZONE}/servers/{id}/action"),
        json!({ "action": action }),
    )
    .await
}

/// `(state, state_detail)`, or the 404 body once gone.
async fn state(sim: &Sim, id: &str) -> Result<(String, String), Value> {
    let (status, body) = sim.get(&format!("{ZONE}/servers/{id}")).await;
    match status {
        StatusCode::OK => Ok((
            body["server"]["state"].as_str().unwrap().into(),
            body["server"]["state_detail"].as_str().unwrap().into(),
        )),
        StatusCode::NOT_FOUND => Err(body),
        other => panic!("{other}: {body}"),
    }
}

fn pair(state: &str, detail: &str) -> Result<(String, String), Value> {
    Ok((state.into(), detail.into()))
}

fn total(headers: &HeaderMap) -> u64 {
    headers["x-total-count"].to_str().unwrap().parse().unwrap()
}

#[tokio::test]
async fn products_page_by_headers_without_total_count() {
    let sim = start().await;
    let mut seen = BTreeSet::new();
    let mut expected_total = None;
    for page in 1..=3 {
        let (status, headers, body) = raw(
            &sim,
            Method::GET,
            &format!("{ZONE}/products/servers?page={page}&per_page=5"),
            None,
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        let body: Value = serde_json::from_slice(&body).unwrap();
        assert!(body.get("total_count").is_none(), "{body}");
        let servers = body["servers"].as_object().unwrap();
        for name in servers.keys() {
            assert!(seen.insert(name.clone()), "{name} on two pages");
        }
        let t = total(&headers);
        assert_eq!(*expected_total.get_or_insert(t), t);
        let link = headers["link"].to_str().unwrap();
        assert_eq!(link.contains(r#"rel="next""#), page < 3, "{link}");
        assert!(
            link.contains(r#"</products/servers?page=3&per_page=5&>; rel="last""#),
            "{link}"
        );
    }
    assert_eq!(Some(seen.len() as u64), expected_total, "all or nothing");
    assert_eq!(seen.len(), 12, "{seen:?}");
    for name in ["H100-SXM-8-80G", "GP1-XS", "BASIC2-A2C-4G", "L40S-1-48G"] {
        assert!(seen.contains(name), "{name}");
    }
    let (_, headers, body) = raw(
        &sim,
        Method::GET,
        &format!("{ZONE}/products/servers?page=4&per_page=5"),
        None,
    )
    .await;
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(body, json!({"servers": {}}));
    assert_eq!(total(&headers), 12);

    let (status, body) = sim
        .get(&format!("{ZONE}/products/servers?per_page=101"))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["details"][0]["argument_name"], "per_page");
    let (status, body) = sim.get("/instance/v1/zones/mars-1/products/servers").await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
}

#[tokio::test]
async fn prices_are_per_zone_and_gpus_are_described() {
    let sim = start().await;
    let (_, par2) = sim.get(&format!("{ZONE}/products/servers")).await;
    let (_, par3) = sim
        .get("/instance/v1/zones/fr-par-3/products/servers")
        .await;
    let p2 = par2["servers"]["POP2-2C-8G"]["hourly_price"]
        .as_f64()
        .unwrap();
    let p3 = par3["servers"]["POP2-2C-8G"]["hourly_price"]
        .as_f64()
        .unwrap();
    assert_eq!(p2, 0.0735);
    assert!((p3 - p2 * 1.5).abs() < 1e-9, "{p3}");
    assert!(par3["servers"].get("H100-1-80G").is_none());
    let h100 = &par2["servers"]["H100-1-80G"];
    assert_eq!(h100["gpu"], 1);
    assert_eq!(h100["gpu_info"]["gpu_name"], "H100");
    assert_eq!(h100["ncpus"], 24);
    assert_eq!(h100["end_of_service"], false);
    assert_eq!(par2["servers"]["GP1-XS"]["end_of_service"], true);
    assert_eq!(par2["servers"]["BASIC2-A2C-4G"]["arch"], "arm64");
}

#[tokio::test]
async fn availability_is_listed_and_set_at_runtime() {
    let sim = start().await;
    let (status, headers, body) = raw(
        &sim,
        Method::GET,
        &format!("{ZONE}/products/servers/availability"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(total(&headers), 12);
    let body: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        body["servers"]["H100-1-80G"],
        json!({"availability": "shortage"})
    );
    assert_eq!(body["servers"]["L40S-1-48G"]["availability"], "scarce");
    assert_eq!(body["servers"]["POP2-2C-8G"]["availability"], "available");

    let set =
        json!({"zone": "fr-par-2", "commercial_type": "POP2-2C-8G", "availability": "shortage"});
    let (status, _) = sim
        .admin(Method::PUT, "/_emsim/instance/availability", Some(set))
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (_, body) = sim
        .get(&format!("{ZONE}/products/servers/availability"))
        .await;
    assert_eq!(body["servers"]["POP2-2C-8G"]["availability"], "shortage");
    let not_sold = json!({"zone": "fr-par-1", "commercial_type": "H100-SXM-8-80G", "availability": "available"});
    let (status, _) = sim
        .admin(Method::PUT, "/_emsim/instance/availability", Some(not_sold))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn create_answers_a_stopped_server_with_a_location() {
    let sim = start().await;
    let image = image(&sim, "talos-v1.11.5-amd64").await;
    let body = json!({"name": "node-a", "commercial_type": "POP2-2C-8G", "image": image,
        "volumes": {"0": {"size": 20000000000u64, "volume_type": "sbs_volume"}}, "tags": ["a"]});
    let (status, headers, bytes) = raw(
        &sim,
        Method::POST,
        &format!("{ZONE}/servers"),
        Some(("application/json", body.to_string().into_bytes())),
    )
    .await;
    assert_eq!(status, StatusCode::CREATED);
    let server = serde_json::from_slice::<Value>(&bytes).unwrap()["server"].clone();
    let id = server["id"].as_str().unwrap();
    assert_eq!(
        headers["location"].to_str().unwrap(),
        format!("{ZONE}/servers/{id}")
    );
    assert_eq!(server["state"], "stopped");
    assert_eq!(server["allowed_actions"], json!(["poweron", "backup"]));
    assert_eq!(server["public_ip"], Value::Null);
    assert_eq!(server["public_ips"], json!([]));
    assert_eq!(server["dynamic_ip_required"], true);
    assert_eq!(server["commercial_type"], "POP2-2C-8G");
    assert_eq!(server["project"], DEFAULT_PROJECT_ID);
    assert_eq!(server["image"]["id"], image.as_str());
    assert_eq!(server["volumes"]["0"]["volume_type"], "sbs_volume");
    // The recorded create answer has exactly these top-level fields.
    let recorded: Value = serde_json::from_str(include_str!(
        "fixtures/server-create-L40S-1-48G-fr-par-2.json"
    ))
    .unwrap();
    let keys = |v: &Value| -> BTreeSet<String> { v.as_object().unwrap().keys().cloned().collect() };
    assert_eq!(keys(&server), keys(&recorded["server"]));

    let volume_id = server["volumes"]["0"]["id"].as_str().unwrap();
    let (status, volume) = sim.get(&format!("{BLOCK}/volumes/{volume_id}")).await;
    assert_eq!(status, StatusCode::OK, "{volume}");
    assert_eq!(volume["size"], 20_000_000_000u64);
    assert_eq!(volume["status"], "in_use");
    assert_eq!(volume["references"][0]["product_resource_id"], id);
}

#[tokio::test]
async fn create_errors_have_the_real_shapes() {
    let sim = start().await;
    let (status, body) = sim
        .post(&format!("{ZONE}/servers"), json!({"name": "x"}))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        body,
        json!({"type": "invalid_arguments", "message": "invalid argument(s)",
               "details": [{"argument_name": "commercial_type", "reason": "required",
                            "help_message": "required key not provided"}]})
    );
    let image = image(&sim, "talos-v1.11.5-amd64").await;
    let (status, body) = sim
        .post(
            &format!("{ZONE}/servers"),
            json!({"commercial_type": "GPU-3070-S", "image": image}),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["type"], "not_found");
    assert_eq!(body["resource_id"], "GPU-3070-S");
    let unknown = "00000000-0000-4000-8000-000000000000";
    let (status, body) = sim
        .post(
            &format!("{ZONE}/servers"),
            json!({"commercial_type": "POP2-2C-8G", "image": unknown}),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(
        body,
        json!({"type": "not_found", "message": "resource is not found",
               "resource": "instance_image", "resource_id": unknown})
    );
    // H100-1-80G has a quota of 1 per project in the seeded catalog.
    create(&sim, "H100-1-80G", "gpu-a", &[]).await;
    let (status, body) = sim
        .post(
            &format!("{ZONE}/servers"),
            json!({"commercial_type": "H100-1-80G", "image": image}),
        )
        .await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(
        body,
        json!({"type": "invalid_request_error", "message": "Quota exceeded for this resource.",
               "resource": "compute_servers_type_h100_1_80g_available"})
    );
    let raise = json!({"commercial_type": "H100-1-80G", "quota": null});
    let (status, _) = sim
        .admin(Method::PUT, "/_emsim/instance/quota", Some(raise))
        .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    create(&sim, "H100-1-80G", "gpu-b", &[]).await;

    let (status, body) = sim.get(&format!("{ZONE}/servers/{unknown}")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(
        body,
        json!({"type": "not_found", "message": "resource is not found",
               "resource": "instance_server", "resource_id": unknown})
    );
}

#[tokio::test]
async fn poweron_runs_after_allocation_with_a_dynamic_ip_and_poweroff_stops() {
    let sim = start().await;
    let id = create(&sim, "POP2-2C-8G", "node-a", &[]).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let (status, body) = action(&sim, &id, "poweron").await;
    assert_eq!(status, StatusCode::ACCEPTED, "{body}");
    assert_eq!(body["task"]["status"], "pending");
    assert_eq!(body["task"]["href_result"], format!("/servers/{id}"));
    assert_eq!(state(&sim, &id).await, pair("starting", "allocating node"));
    advance(&sim, 8.0).await;
    assert_eq!(state(&sim, &id).await, pair("starting", "allocating node"));
    advance(&sim, 3.0).await;
    assert_eq!(state(&sim, &id).await, pair("running", "booting kernel"));
    let (_, body) = sim.get(&format!("{ZONE}/servers/{id}")).await;
    assert_eq!(body["server"]["public_ip"]["dynamic"], true);
    assert_eq!(body["server"]["public_ip"]["address"], "127.77.0.10");
    assert_eq!(body["server"]["public_ips"].as_array().unwrap().len(), 1);

    let (status, body) = action(&sim, &id, "poweron").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        body,
        json!({"type": "invalid_request_error", "message": "server should be stopped"})
    );
    let (status, _) = action(&sim, &id, "poweroff").await;
    assert_eq!(status, StatusCode::ACCEPTED);
    let (_, body) = sim.get(&format!("{ZONE}/servers/{id}")).await;
    assert_eq!(body["server"]["state"], "stopping");
    assert_eq!(body["server"]["public_ip"], Value::Null, "dies at poweroff");
    advance(&sim, 40.0).await;
    assert_eq!(state(&sim, &id).await.unwrap().0, "stopping");
    advance(&sim, 6.0).await;
    assert_eq!(state(&sim, &id).await, pair("stopped", ""));
    let (status, body) = action(&sim, &id, "terminate").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(
        body,
        json!({"type": "invalid_request_error", "message": "server should be running"})
    );
}

#[tokio::test]
async fn gpu_types_provision_before_running() {
    let sim = start().await;
    let id = create(&sim, "L4-1-24G", "gpu", &[]).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    action(&sim, &id, "poweron").await;
    advance(&sim, 11.0).await;
    assert_eq!(
        state(&sim, &id).await,
        pair("starting", "provisioning node")
    );
    advance(&sim, 15.0).await;
    assert_eq!(
        state(&sim, &id).await,
        pair("starting", "provisioning node")
    );
    advance(&sim, 6.0).await;
    assert_eq!(state(&sim, &id).await, pair("running", "booting kernel"));
}

/// talos-sim reports a VM's hardware on its Node: the admin record gives
/// its type's vCPUs, memory and GPUs and its root volume's size.
#[tokio::test]
async fn admin_records_carry_the_hardware_a_vm_boots_on() {
    let sim = start().await;
    let gpu = create(&sim, "L4-1-24G", "gpu", &[]).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let image = image(&sim, "talos-v1.11.5-amd64").await;
    let (status, body) = sim
        .post(
            &format!("{ZONE}/servers"),
            json!({"name": "cpu", "commercial_type": "POP2-2C-8G", "image": image,
                   "volumes": {"0": {"size": 20_000_000_000u64, "volume_type": "sbs_volume"}}}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let cpu = body["server"]["id"].as_str().unwrap().to_string();
    let (_, admin) = sim
        .admin(Method::GET, "/_emsim/instance/servers", None)
        .await;
    let hardware = |id: &str| {
        admin["servers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|s| s["id"] == id)
            .unwrap()["hardware"]
            .clone()
    };
    assert_eq!(
        hardware(&gpu),
        json!({"ncpus": 8, "ram": 51_539_607_552u64, "gpu": 1,
               "gpu_info": {"gpu_manufacturer": "NVIDIA", "gpu_name": "L4", "gpu_memory": 25_769_803_776u64},
               "root_volume_size": 10_000_000_000u64})
    );
    assert_eq!(
        hardware(&cpu),
        json!({"ncpus": 2, "ram": 8_589_934_592u64, "gpu": 0, "gpu_info": null,
               "root_volume_size": 20_000_000_000u64})
    );
}

#[tokio::test]
async fn shortage_and_the_poweron_fault_fall_back_to_stopped() {
    let sim = start().await;
    // H100-1-80G is in shortage in fr-par-2 in the seeded catalog.
    let id = create(&sim, "H100-1-80G", "gpu", &[]).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    action(&sim, &id, "poweron").await;
    advance(&sim, 11.0).await;
    assert_eq!(state(&sim, &id).await, pair("stopped", ""));
    advance(&sim, 60.0).await;
    assert_eq!(state(&sim, &id).await, pair("stopped", ""), "never ran");

    let pop = create(&sim, "POP2-2C-8G", "cpu", &[]).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let fault = json!({"kind": "out_of_stock_after_poweron", "commercial_type": "POP2-2C-8G",
                       "zone": "fr-par-2", "count": 1});
    let (status, body) = sim.admin(Method::POST, "/_emsim/faults", Some(fault)).await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    action(&sim, &pop, "poweron").await;
    advance(&sim, 11.0).await;
    assert_eq!(state(&sim, &pop).await, pair("stopped", ""));
    action(&sim, &pop, "poweron").await;
    advance(&sim, 11.0).await;
    assert_eq!(
        state(&sim, &pop).await.unwrap().0,
        "running",
        "count 1 spent"
    );
    let (_, admin) = sim
        .admin(Method::GET, "/_emsim/instance/servers", None)
        .await;
    let actions: Vec<&Value> = admin["servers"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["id"] == id.as_str())
        .flat_map(|s| s["actions"].as_array().unwrap())
        .map(|a| &a["action"])
        .collect();
    assert_eq!(actions, vec!["create", "poweron"]);
}

#[tokio::test]
async fn terminate_leaves_the_sbs_root_detached_then_404() {
    let sim = start().await;
    let server = create(&sim, "POP2-2C-8G", "node-t", &[]).await;
    let id = server["id"].as_str().unwrap().to_string();
    let volume = server["volumes"]["0"]["id"].as_str().unwrap().to_string();
    action(&sim, &id, "poweron").await;
    advance(&sim, 11.0).await;
    let (status, _) = action(&sim, &id, "terminate").await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_eq!(state(&sim, &id).await, pair("stopping", "terminating"));
    let (status, body) = raw(
        &sim,
        Method::DELETE,
        &format!("{BLOCK}/volumes/{volume}"),
        None,
    )
    .await
    .into_status_and_json();
    assert_eq!(status, StatusCode::PRECONDITION_FAILED, "{body}");
    assert_eq!(body["type"], "precondition_failed");
    advance(&sim, 4.9).await;
    assert!(state(&sim, &id).await.is_ok(), "not before 5 s");
    advance(&sim, 10.2).await;
    let gone = state(&sim, &id).await.unwrap_err();
    assert_eq!(gone["resource"], "instance_server");

    let (status, body) = sim.get(&format!("{BLOCK}/volumes/{volume}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["status"], "available");
    assert_eq!(body["references"], json!([]));
    assert!(body["last_detached_at"].is_string());
    let (status, list) = sim.get(&format!("{BLOCK}/volumes")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(list["total_count"], 1);
    let (status, _, _) = raw(
        &sim,
        Method::DELETE,
        &format!("{BLOCK}/volumes/{volume}"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, body) = sim.get(&format!("{BLOCK}/volumes/{volume}")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["type"], "not_found");
}

#[tokio::test]
async fn delete_needs_a_stopped_server_and_drops_local_volumes() {
    let sim = start().await;
    let image = image(&sim, "talos-v1.11.5-amd64").await;
    let (status, body) = sim
        .post(
            &format!("{ZONE}/servers"),
            json!({"name": "dev", "commercial_type": "DEV1-S", "image": image,
                   "volumes": {"0": {"volume_type": "sbs_volume"},
                               "1": {"size": 10000000000u64, "volume_type": "l_ssd"}}}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let id = body["server"]["id"].as_str().unwrap().to_string();
    let root = body["server"]["volumes"]["0"]["id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(body["server"]["volumes"]["1"]["volume_type"], "l_ssd");
    assert_eq!(body["server"]["volumes"]["1"]["server"]["id"], id.as_str());
    action(&sim, &id, "poweron").await;
    let (status, _, bytes) = raw(&sim, Method::DELETE, &format!("{ZONE}/servers/{id}"), None).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let refused: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(refused["type"], "invalid_request_error");
    advance(&sim, 11.0).await;
    action(&sim, &id, "poweroff").await;
    advance(&sim, 46.0).await;
    let (status, _, bytes) = raw(&sim, Method::DELETE, &format!("{ZONE}/servers/{id}"), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert!(bytes.is_empty());
    assert!(state(&sim, &id).await.is_err());
    let (_, volumes) = sim
        .admin(Method::GET, "/_emsim/instance/volumes", None)
        .await;
    let left: Vec<&Value> = volumes["volumes"].as_array().unwrap().iter().collect();
    assert_eq!(left.len(), 1, "the l_ssd died: {volumes}");
    assert_eq!(left[0]["id"], root.as_str());
    assert_eq!(left[0]["server"], Value::Null);
}

#[tokio::test]
async fn user_data_round_trips_as_plain_text() {
    let sim = start().await;
    let id = create(&sim, "POP2-2C-8G", "node-u", &[]).await["id"]
        .as_str()
        .unwrap()
        .to_string();
    let url = format!("{ZONE}/servers/{id}/user_data/cloud-init");
    let config = b"version: v1alpha1\nmachine:\n  token: abcdef.0123456789abcdef\n".to_vec();
    let (status, _, bytes) = raw(
        &sim,
        Method::PATCH,
        &url,
        Some(("text/plain", config.clone())),
    )
    .await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert!(bytes.is_empty());
    let (status, headers, bytes) = raw(&sim, Method::GET, &url, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers["content-type"], "text/plain");
    assert_eq!(bytes, config);
    let (_, keys) = sim.get(&format!("{ZONE}/servers/{id}/user_data")).await;
    assert_eq!(keys, json!({"user_data": ["cloud-init"]}));
    let (status, _, bytes) = raw(
        &sim,
        Method::GET,
        &format!("/_emsim/instance/servers/{id}/user_data/cloud-init"),
        None,
    )
    .await;
    assert_eq!((status, bytes), (StatusCode::OK, config.clone()));
    let (_, admin) = sim
        .admin(Method::GET, "/_emsim/instance/servers", None)
        .await;
    assert!(
        !admin.to_string().contains("abcdef"),
        "no values in records"
    );
    assert_eq!(admin["servers"][0]["user_data_keys"], json!(["cloud-init"]));

    let (status, _, _) = raw(&sim, Method::DELETE, &url, None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, _, bytes) = raw(&sim, Method::GET, &url, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert!(bytes.is_empty(), "404 with an empty body");
    let (_, keys) = sim.get(&format!("{ZONE}/servers/{id}/user_data")).await;
    assert_eq!(keys, json!({"user_data": []}));
    let (status, _, _) = raw(
        &sim,
        Method::GET,
        &format!("/_emsim/instance/servers/{id}/user_data/cloud-init"),
        None,
    )
    .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn list_filters_by_tags_name_type_and_state_with_paging_headers() {
    let sim = start().await;
    let mut ids = Vec::new();
    for i in 0..5 {
        let tags: &[&str] = if i % 2 == 0 {
            &["owner=karpenter", "pool=a"]
        } else {
            &["owner=karpenter"]
        };
        let server = create(&sim, "POP2-2C-8G", &format!("node-{i}"), tags).await;
        ids.push(server["id"].as_str().unwrap().to_string());
        advance(&sim, 1.0).await;
    }
    create(&sim, "PRO2-S", "other", &[]).await;
    action(&sim, &ids[0], "poweron").await;

    let mut pages = Vec::new();
    for page in 1..=3 {
        let (status, headers, bytes) = raw(
            &sim,
            Method::GET,
            &format!("{ZONE}/servers?tags=owner%3Dkarpenter&per_page=2&page={page}"),
            None,
        )
        .await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(total(&headers), 5);
        let body: Value = serde_json::from_slice(&bytes).unwrap();
        assert!(body.get("total_count").is_none());
        pages.extend(
            body["servers"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["id"].as_str().unwrap().to_string()),
        );
    }
    let newest_first: Vec<String> = ids.iter().rev().cloned().collect();
    assert_eq!(pages, newest_first, "creation_date_desc by default");

    let ids_of = |body: &Value| -> Vec<String> {
        body["servers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap().to_string())
            .collect()
    };
    let (_, both) = sim
        .get(&format!(
            "{ZONE}/servers?tags=owner%3Dkarpenter,pool%3Da&order=creation_date_asc"
        ))
        .await;
    assert_eq!(ids_of(&both), vec!["node-0", "node-2", "node-4"]);
    let (_, named) = sim.get(&format!("{ZONE}/servers?name=ode-3")).await;
    assert_eq!(ids_of(&named), vec!["node-3"]);
    let (_, typed) = sim
        .get(&format!("{ZONE}/servers?commercial_type=PRO2-S"))
        .await;
    assert_eq!(ids_of(&typed), vec!["other"]);
    let (_, starting) = sim.get(&format!("{ZONE}/servers?state=starting")).await;
    assert_eq!(ids_of(&starting), vec!["node-0"]);
    let (_, project) = sim
        .get(&format!("{ZONE}/servers?project={DEFAULT_PROJECT_ID}"))
        .await;
    assert_eq!(project["servers"].as_array().unwrap().len(), 6);
    let (_, elsewhere) = sim.get("/instance/v1/zones/fr-par-1/servers").await;
    assert_eq!(elsewhere, json!({"servers": []}));

    let (status, body) = sim
        .call(
            Method::PATCH,
            &format!("{ZONE}/servers/{}", ids[1]),
            Some(json!({"name": "renamed", "tags": ["x"]})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["server"]["name"], "renamed");
    assert_eq!(body["server"]["tags"], json!(["x"]));
}

#[tokio::test]
async fn flexible_ips_survive_terminate_until_deleted() {
    let sim = start().await;
    let (status, body) = sim
        .post(
            &format!("{ZONE}/ips"),
            json!({"type": "routed_ipv4", "tags": ["t"]}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let ip = body["ip"]["id"].as_str().unwrap().to_string();
    assert_eq!(body["ip"]["state"], "detached");
    let image = image(&sim, "talos-v1.11.5-amd64").await;
    let (_, body) = sim
        .post(
            &format!("{ZONE}/servers"),
            json!({"commercial_type": "POP2-2C-8G", "image": image, "public_ips": [ip],
                   "dynamic_ip_required": false}),
        )
        .await;
    let id = body["server"]["id"].as_str().unwrap().to_string();
    assert_eq!(body["server"]["public_ips"][0]["id"], ip.as_str());
    assert_eq!(body["server"]["public_ips"][0]["dynamic"], false);
    action(&sim, &id, "poweron").await;
    advance(&sim, 11.0).await;
    let (_, body) = sim.get(&format!("{ZONE}/servers/{id}")).await;
    assert_eq!(
        body["server"]["public_ips"].as_array().unwrap().len(),
        1,
        "no dynamic IP when not required"
    );
    action(&sim, &id, "terminate").await;
    advance(&sim, 16.0).await;
    let (status, body) = sim.get(&format!("{ZONE}/ips/{ip}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body["ip"]["server"], Value::Null);
    let (status, headers, _) = raw(&sim, Method::GET, &format!("{ZONE}/ips"), None).await;
    assert_eq!((status, total(&headers)), (StatusCode::OK, 1));
    let (status, _, _) = raw(&sim, Method::DELETE, &format!("{ZONE}/ips/{ip}"), None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, body) = sim.get(&format!("{ZONE}/ips/{ip}")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["resource"], "instance_ip");
}

trait IntoStatusAndJson {
    fn into_status_and_json(self) -> (StatusCode, Value);
}

impl IntoStatusAndJson for (StatusCode, HeaderMap, Vec<u8>) {
    fn into_status_and_json(self) -> (StatusCode, Value) {
        (
            self.0,
            serde_json::from_slice(&self.2).unwrap_or(Value::Null),
        )
    }
}
