//! The gate (authentication, counters, rate limit, http and list faults)
//! covers the Instance and Block endpoints as it covers Elastic Metal's.

mod common;

use common::Sim;
use emsim::state::DEFAULT_SECRET_KEY;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

const ZONE: &str = "/instance/v1/zones/fr-par-2";
const SERVERS: &str = "POST /instance/v1/zones/{zone}/servers";
const GET_SERVER: &str = "GET /instance/v1/zones/{zone}/servers/{server_id}";
const PRODUCTS: &str = "GET /instance/v1/zones/{zone}/products/servers";

async fn start() -> Sim {
    common::start_with(emsim::Config {
        time_scale: 1000.0,
        ..emsim::Config::default()
    })
    .await
}

async fn arm(sim: &Sim, fault: Value) {
    let (status, body) = sim
        .admin(Method::POST, "/_emsim/faults", Some(fault.clone()))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{fault} -> {body}");
}

async fn create(sim: &Sim) -> (StatusCode, Value) {
    let (_, images) = sim.get(&format!("{ZONE}/images?name=talos")).await;
    let image = images["images"][0]["id"].clone();
    sim.post(
        &format!("{ZONE}/servers"),
        json!({"commercial_type": "POP2-2C-8G", "image": image}),
    )
    .await
}

/// Products of fr-par-2 page `page` (5 per page): `(X-Total-Count, names)`.
async fn products(sim: &Sim, page: u32) -> (u64, Vec<String>) {
    let resp = sim
        .client
        .get(format!(
            "{}{ZONE}/products/servers?per_page=5&page={page}",
            sim.base
        ))
        .header("X-Auth-Token", DEFAULT_SECRET_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    let total = resp.headers()["x-total-count"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let body: Value = resp.json().await.unwrap();
    let names = body["servers"]
        .as_object()
        .unwrap()
        .keys()
        .cloned()
        .collect();
    (total, names)
}

#[tokio::test]
async fn calls_need_a_key_and_are_counted_per_endpoint_and_server() {
    let sim = start().await;
    let (status, body) = sim
        .call_with_token(Method::GET, &format!("{ZONE}/servers"), None, None)
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(body["type"], "denied_authentication");
    let (status, created) = create(&sim).await;
    assert_eq!(status, StatusCode::CREATED);
    let id = created["server"]["id"].as_str().unwrap();
    sim.get(&format!("{ZONE}/servers/{id}")).await;
    sim.post(
        &format!("{ZONE}/servers/{id}/action"),
        json!({"action": "poweron"}),
    )
    .await;
    let (_, counters) = sim.admin(Method::GET, "/_emsim/counters", None).await;
    let endpoints = &counters["endpoints"];
    assert_eq!(
        endpoints["GET /instance/v1/zones/{zone}/servers"]["by_status"],
        json!({"401": 1})
    );
    assert_eq!(endpoints[SERVERS]["by_status"], json!({"201": 1}));
    assert_eq!(endpoints[GET_SERVER]["by_status"], json!({"200": 1}));
    let mine = &counters["servers"][id];
    assert_eq!(mine[GET_SERVER]["total"], 1);
    assert_eq!(
        mine["POST /instance/v1/zones/{zone}/servers/{server_id}/action"]["by_status"],
        json!({"202": 1})
    );
}

#[tokio::test]
async fn http_faults_and_the_rate_limit_apply() {
    let sim = start().await;
    arm(
        &sim,
        json!({"endpoint": SERVERS, "status": 503, "body": {"message": "try again"}, "count": 1}),
    )
    .await;
    let (status, body) = create(&sim).await;
    assert_eq!(
        (status, body),
        (
            StatusCode::SERVICE_UNAVAILABLE,
            json!({"message": "try again"})
        )
    );
    let (_, worlds) = sim
        .admin(Method::GET, "/_emsim/instance/servers", None)
        .await;
    assert_eq!(worlds["servers"], json!([]), "the fault touched nothing");
    assert_eq!(create(&sim).await.0, StatusCode::CREATED);

    let (status, _) = sim
        .admin(
            Method::PUT,
            "/_emsim/rate-limit",
            Some(json!({"per_second": 1})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(sim.get(&format!("{ZONE}/servers")).await.0, StatusCode::OK);
    let (status, body) = sim.get(&format!("{ZONE}/servers")).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(body["type"], "too_many_requests");
    // Buckets are per endpoint: the products list is untouched.
    assert_eq!(products(&sim, 1).await.1.len(), 5);
}

#[tokio::test]
async fn list_faults_shorten_pages_and_move_the_header_total() {
    let sim = start().await;
    let (total, full) = products(&sim, 2).await;
    assert_eq!((total, full.len()), (12, 5));
    arm(
        &sim,
        json!({"kind": "list_missing_page", "endpoint": PRODUCTS, "page": 2, "drop": 2, "count": 1}),
    )
    .await;
    let (total, short) = products(&sim, 2).await;
    assert_eq!(total, 12, "the header keeps the true total");
    assert_eq!(short, full[..3].to_vec());
    arm(
        &sim,
        json!({"kind": "list_total_count", "endpoint": PRODUCTS, "delta": -1, "count": 1}),
    )
    .await;
    let (total, names) = products(&sim, 1).await;
    assert_eq!((total, names.len()), (11, 5));
    assert_eq!(products(&sim, 1).await.0, 12, "spent");
}

#[tokio::test]
async fn block_and_ip_endpoints_are_known_to_faults() {
    let sim = start().await;
    for endpoint in [
        "DELETE /block/v1/zones/{zone}/volumes/{volume_id}",
        "DELETE /instance/v1/zones/{zone}/ips/{ip_id}",
        "PATCH /instance/v1/zones/{zone}/servers/{server_id}/user_data/{key}",
    ] {
        arm(&sim, json!({"endpoint": endpoint, "status": 500})).await;
    }
    let fault = json!({"kind": "out_of_stock_after_poweron", "zone": "mars-1"});
    let (status, body) = sim.admin(Method::POST, "/_emsim/faults", Some(fault)).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["details"][0]["argument_name"], "zone");
}

#[tokio::test]
async fn reset_forgets_the_instance_side_and_replays_its_ids() {
    let sim = start().await;
    let (_, first) = create(&sim).await;
    let set =
        json!({"zone": "fr-par-2", "commercial_type": "POP2-2C-8G", "availability": "shortage"});
    sim.admin(Method::PUT, "/_emsim/instance/availability", Some(set))
        .await;
    let (status, _) = sim.admin(Method::POST, "/_emsim/reset", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (_, records) = sim
        .admin(
            Method::GET,
            "/_emsim/instance/servers?include_deleted=true",
            None,
        )
        .await;
    assert_eq!(records["servers"], json!([]));
    let (_, volumes) = sim
        .admin(Method::GET, "/_emsim/instance/volumes", None)
        .await;
    assert_eq!(volumes["volumes"], json!([]));
    let (_, availability) = sim
        .get(&format!("{ZONE}/products/servers/availability"))
        .await;
    assert_eq!(
        availability["servers"]["POP2-2C-8G"]["availability"],
        "available"
    );
    let (_, again) = create(&sim).await;
    assert_eq!(
        again["server"]["id"], first["server"]["id"],
        "same seed, same ids"
    );
}
