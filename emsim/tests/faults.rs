//! Fault kinds over a real socket: what a client sees, and what the admin API
//! reports about them.

mod common;

use std::time::{Duration, Instant};

use common::{ZONE_URL, start, start_with_catalog};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

const SERVERS: &str = "POST /baremetal/v1/zones/{zone}/servers";
const OFFERS: &str = "GET /baremetal/v1/zones/{zone}/offers";

async fn arm(sim: &common::Sim, fault: Value) -> Value {
    let (status, body) = sim
        .admin(Method::POST, "/_emsim/faults", Some(fault.clone()))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{fault} -> {body}");
    body
}

async fn faults(sim: &common::Sim) -> Vec<Value> {
    let (status, body) = sim.admin(Method::GET, "/_emsim/faults", None).await;
    assert_eq!(status, StatusCode::OK);
    body["faults"].as_array().expect("faults array").clone()
}

#[tokio::test]
async fn latency_delays_then_the_handler_answers() {
    let sim = start().await;
    let armed = arm(
        &sim,
        json!({"kind": "http", "endpoint": OFFERS, "latency_ms": 300, "count": 1}),
    )
    .await;
    assert_eq!(armed["fired"], 0);
    let started = Instant::now();
    let (status, body) = sim.get(&format!("{ZONE_URL}/offers")).await;
    assert!(started.elapsed() >= Duration::from_millis(300));
    assert_eq!(status, StatusCode::OK);
    assert!(body["total_count"].as_u64().unwrap() > 0);
    assert!(faults(&sim).await.is_empty(), "count 1 is spent");
}

#[tokio::test]
async fn timeout_holds_until_the_client_gives_up() {
    let sim = start().await;
    arm(
        &sim,
        json!({"endpoint": OFFERS, "timeout": true, "count": 1}),
    )
    .await;
    let result = sim
        .client
        .get(format!("{}{ZONE_URL}/offers", sim.base))
        .header("X-Auth-Token", emsim::state::DEFAULT_SECRET_KEY)
        // Long enough to reach the gate on a loaded machine: a timeout
        // before it would leave the hold armed for the next call.
        .timeout(Duration::from_secs(2))
        .send()
        .await;
    let error = result.expect_err("no answer while held");
    assert!(error.is_timeout(), "{error}");
    // The next call is answered.
    assert_eq!(
        sim.get(&format!("{ZONE_URL}/offers")).await.0,
        StatusCode::OK
    );
    let (_, counters) = sim.admin(Method::GET, "/_emsim/counters", None).await;
    assert_eq!(
        counters["endpoints"][OFFERS]["by_status"],
        json!({"0": 1, "200": 1})
    );
}

/// The order is placed and the answer withheld: the caller must find its
/// server without the id. Waited for by the counter the gate records once
/// the handler has acted, never by a timer.
#[tokio::test]
async fn lose_answer_commits_the_order_and_never_answers() {
    let sim = start().await;
    arm(
        &sim,
        json!({"endpoint": SERVERS, "lose_answer": true, "count": 1}),
    )
    .await;
    let held = async {
        loop {
            let (_, counters) = sim.admin(Method::GET, "/_emsim/counters", None).await;
            if counters["endpoints"][SERVERS]["by_status"]["0"] == 1 {
                return;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    };
    tokio::select! {
        answer = sim.create("EM-A115X-SSD", "lost-answer", &["k=v"]) => {
            panic!("the order was answered: {answer:?}")
        }
        () = held => {}
    }
    let (status, list) = sim
        .get(&format!("{ZONE_URL}/servers?name=lost-answer"))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(list["total_count"], 1, "{list}");
    assert_eq!(list["servers"][0]["tags"], json!(["k=v"]));
    // Spent: the next order is answered.
    let (status, _) = sim.create("EM-A115X-SSD", "answered", &[]).await;
    assert_eq!(status, StatusCode::OK);
}

#[tokio::test]
async fn rate_fails_a_seeded_share_of_calls() {
    async fn run() -> Vec<u16> {
        let sim = start().await;
        arm(
            &sim,
            json!({"endpoint": OFFERS, "status": 503, "rate": 0.5}),
        )
        .await;
        let mut statuses = Vec::new();
        for _ in 0..40 {
            statuses.push(sim.get(&format!("{ZONE_URL}/offers")).await.0.as_u16());
        }
        let listed = faults(&sim).await;
        let failed = statuses.iter().filter(|s| **s == 503).count();
        assert_eq!(listed[0]["fired"], failed as u64);
        assert_eq!(listed[0]["rate"], 0.5);
        statuses
    }
    let first = run().await;
    let failed = first.iter().filter(|s| **s == 503).count();
    assert!((5..=35).contains(&failed), "{failed}/40 failed at rate 0.5");
    assert!(first.iter().all(|s| *s == 503 || *s == 200));
    assert_eq!(first, run().await, "same seed, same calls: same failures");
}

#[tokio::test]
async fn out_of_stock_after_order_is_accepted_then_fails() {
    let sim = start().await;
    arm(
        &sim,
        json!({"kind": "out_of_stock_after_order", "offer": "EM-A115X-SSD", "zone": "fr-par-2", "count": 1}),
    )
    .await;
    let (status, created) = sim.create("EM-A115X-SSD", "doomed", &[]).await;
    assert_eq!(status, StatusCode::OK, "{created}");
    assert_eq!(created["status"], "delivering");
    let id = created["id"].as_str().unwrap();
    let failed = sim
        .wait_server(id, |s, b| {
            s == StatusCode::OK && b["status"] != "delivering"
        })
        .await
        .1;
    assert_eq!(failed["status"], "out_of_stock");
    assert_eq!(failed["ips"], json!([]));
    let (status, body) = sim
        .post(
            &format!("{ZONE_URL}/servers/{id}/reboot"),
            json!({"boot_type": "rescue"}),
        )
        .await;
    assert_eq!(
        (status, body),
        (
            StatusCode::BAD_REQUEST,
            json!({"message": "Server is not delivered"})
        )
    );
    let (status, _) = sim
        .call(Method::DELETE, &format!("{ZONE_URL}/servers/{id}"), None)
        .await;
    assert_eq!(status, StatusCode::OK);
    // Spent: the next order is delivered.
    let (_, ok) = sim.create("EM-A115X-SSD", "fine", &[]).await;
    sim.wait_ready(ok["id"].as_str().unwrap()).await;
}

#[tokio::test]
async fn stuck_and_slow_deliveries() {
    let sim = start_with_catalog(
        0.001,
        r#"
offers:
  - name: EM-FAST
    zones: [fr-par-2, fr-par-1]
    delivery: 5
    price_per_hour: 0.1
"#,
    )
    .await;
    arm(
        &sim,
        json!({"kind": "stuck_delivery", "offer": "EM-FAST", "zone": "fr-par-2", "count": 1}),
    )
    .await;
    arm(
        &sim,
        json!({"kind": "delivery_seconds", "seconds": 3600.0, "zone": "fr-par-2", "count": 1}),
    )
    .await;
    let (_, stuck) = sim.create("EM-FAST", "stuck", &[]).await;
    let stuck_id = stuck["id"].as_str().unwrap().to_string();
    let (_, fast) = sim.create("EM-FAST", "fast", &[]).await;
    sim.wait_ready(fast["id"].as_str().unwrap()).await;

    let (_, servers) = sim.admin(Method::GET, "/_emsim/servers", None).await;
    let stuck_admin = servers["servers"]
        .as_array()
        .unwrap()
        .iter()
        .find(|s| s["id"] == stuck_id.as_str())
        .unwrap()
        .clone();
    assert_eq!(stuck_admin["status"], "delivering");
    assert_eq!(stuck_admin["pending"], Value::Null, "stuck: nothing due");

    // The delivery_seconds fault fired on the stuck order too (both match it):
    // both are spent now.
    let listed = faults(&sim).await;
    assert!(listed.is_empty(), "{listed:?}");

    // 100 simulated hours (6 real minutes at time scale 0.001): after the
    // first advance the server still has a real minute to go, far more
    // than the read needs on a loaded machine.
    arm(
        &sim,
        json!({"kind": "delivery_seconds", "seconds": 360000.0, "offer": "EM-FAST"}),
    )
    .await;
    let (_, slow) = sim.create("EM-FAST", "slow", &[]).await;
    let slow_id = slow["id"].as_str().unwrap();
    let (status, _) = sim
        .admin(
            Method::POST,
            "/_emsim/clock/advance",
            Some(json!({"seconds": 300000})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (_, still) = sim.get(&format!("{ZONE_URL}/servers/{slow_id}")).await;
    assert_eq!(still["status"], "delivering");
    sim.admin(
        Method::POST,
        "/_emsim/clock/advance",
        Some(json!({"seconds": 60000})),
    )
    .await;
    sim.wait_ready(slow_id).await;
    let (_, still_stuck) = sim.get(&format!("{ZONE_URL}/servers/{stuck_id}")).await;
    assert_eq!(still_stuck["status"], "delivering");

    let (status, _) = sim.admin(Method::DELETE, "/_emsim/faults", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert!(faults(&sim).await.is_empty());
}

#[tokio::test]
async fn bad_faults_are_refused_with_the_reason() {
    let sim = start().await;
    for (fault, argument) in [
        (json!({"kind": "http", "endpoint": SERVERS}), "status"),
        (
            json!({"endpoint": SERVERS, "status": 500, "rate": 2}),
            "rate",
        ),
        (
            json!({"kind": "stuck_delivery", "zone": "xx-yyy-1"}),
            "zone",
        ),
        (
            json!({"kind": "delivery_seconds", "seconds": -5}),
            "seconds",
        ),
    ] {
        let (status, body) = sim
            .admin(Method::POST, "/_emsim/faults", Some(fault.clone()))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{fault}");
        assert_eq!(body["details"][0]["argument_name"], argument, "{body}");
    }
    let (status, body) = sim
        .admin(
            Method::POST,
            "/_emsim/faults",
            Some(json!({"kind": "meteor"})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert!(
        body["details"][0]["help_message"]
            .as_str()
            .unwrap()
            .contains("meteor"),
        "{body}"
    );
}

const LIST_SERVERS: &str = "GET /baremetal/v1/zones/{zone}/servers";

/// Three servers in fr-par-2, listed two per page.
async fn three_servers(sim: &common::Sim) {
    for name in ["a", "b", "c"] {
        let (status, body) = sim.create("EM-A115X-SSD", name, &[]).await;
        assert_eq!(status, StatusCode::OK, "{body}");
    }
}

#[tokio::test]
async fn missing_page_keeps_total_count_and_loses_items() {
    let sim = start().await;
    three_servers(&sim).await;
    arm(
        &sim,
        json!({"kind": "list_missing_page", "endpoint": LIST_SERVERS, "page": 2, "count": 1}),
    )
    .await;
    let (status, page1) = sim.get(&format!("{ZONE_URL}/servers?page_size=2")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(page1["total_count"], 3);
    assert_eq!(
        page1["servers"].as_array().unwrap().len(),
        2,
        "page 1 intact"
    );
    let (status, page2) = sim
        .get(&format!("{ZONE_URL}/servers?page=2&page_size=2"))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(page2, json!({"total_count": 3, "servers": []}));
    // Spent: page 2 comes back.
    let (_, page2) = sim
        .get(&format!("{ZONE_URL}/servers?page=2&page_size=2"))
        .await;
    assert_eq!(page2["servers"].as_array().unwrap().len(), 1);

    // A page short of one item (one page holds every server).
    arm(
        &sim,
        json!({"kind": "list_missing_page", "endpoint": LIST_SERVERS, "drop": 1, "count": 1}),
    )
    .await;
    let (_, short) = sim.get(&format!("{ZONE_URL}/servers")).await;
    assert_eq!(short["total_count"], 3);
    assert_eq!(short["servers"].as_array().unwrap().len(), 2);
    let (_, counters) = sim.admin(Method::GET, "/_emsim/counters", None).await;
    assert_eq!(
        counters["endpoints"][LIST_SERVERS]["by_status"],
        json!({"200": 4})
    );
}

#[tokio::test]
async fn total_count_mismatch_and_errors_left_alone() {
    let sim = start().await;
    three_servers(&sim).await;
    arm(
        &sim,
        json!({"kind": "list_total_count", "endpoint": LIST_SERVERS, "delta": 2}),
    )
    .await;
    let (_, body) = sim.get(&format!("{ZONE_URL}/servers")).await;
    assert_eq!(body["total_count"], 5);
    assert_eq!(body["servers"].as_array().unwrap().len(), 3);
    // A refused call is not a list answer: it keeps its error untouched.
    let (status, body) = sim.get(&format!("{ZONE_URL}/servers?page=0")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["type"], "invalid_arguments");
    let listed = faults(&sim).await;
    assert_eq!(listed[0]["fired"], 1, "{listed:?}");
    // Other list endpoints are not touched.
    let (_, offers) = sim.get(&format!("{ZONE_URL}/offers")).await;
    assert_eq!(
        offers["total_count"].as_u64().unwrap(),
        offers["offers"].as_array().unwrap().len() as u64
    );
}

#[tokio::test]
async fn empty_200_answers() {
    let sim = start().await;
    three_servers(&sim).await;
    arm(
        &sim,
        json!({"endpoint": LIST_SERVERS, "status": 200, "count": 1}),
    )
    .await;
    let resp = sim
        .client
        .get(format!("{}{ZONE_URL}/servers", sim.base))
        .header("X-Auth-Token", emsim::state::DEFAULT_SECRET_KEY)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::OK);
    assert!(resp.bytes().await.unwrap().is_empty(), "an empty body");
    arm(
        &sim,
        json!({"endpoint": LIST_SERVERS, "status": 200, "body": {}, "count": 1}),
    )
    .await;
    assert_eq!(
        sim.get(&format!("{ZONE_URL}/servers")).await,
        (StatusCode::OK, json!({}))
    );
}

#[tokio::test]
async fn list_faults_only_on_list_endpoints() {
    let sim = start().await;
    for (fault, argument) in [
        (
            json!({"kind": "list_missing_page", "endpoint": SERVERS}),
            "endpoint",
        ),
        (
            json!({"kind": "list_missing_page", "endpoint": "GET /baremetal/v1/zones/{zone}/servers/{server_id}"}),
            "endpoint",
        ),
        (
            json!({"kind": "list_total_count", "endpoint": LIST_SERVERS, "delta": 0}),
            "delta",
        ),
    ] {
        let (status, body) = sim
            .admin(Method::POST, "/_emsim/faults", Some(fault.clone()))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{fault}");
        assert_eq!(body["details"][0]["argument_name"], argument, "{body}");
    }
}
