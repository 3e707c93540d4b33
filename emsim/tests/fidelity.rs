//! The endpoints beyond the provider's flow: update, install, events, monthly
//! migration, options and OS, as a third-party client would use them.

mod common;

use common::{ZONE_URL, start};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

const KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAICJEoOOgQBLJPs4g/XcPTKT82NywNPpxeuA20FlOPlpO me@host";

async fn ready_server(sim: &common::Sim, name: &str, tags: &[&str]) -> String {
    let (status, created) = sim.create("EM-A115X-SSD", name, tags).await;
    assert_eq!(status, StatusCode::OK, "{created}");
    let id = created["id"].as_str().unwrap().to_string();
    sim.wait_ready(&id).await;
    id
}

async fn patch(sim: &common::Sim, id: &str, body: Value) -> (StatusCode, Value) {
    sim.call(
        Method::PATCH,
        &format!("{ZONE_URL}/servers/{id}"),
        Some(body),
    )
    .await
}

#[tokio::test]
async fn update_changes_only_the_given_fields_and_protects() {
    let sim = start().await;
    let id = ready_server(&sim, "before", &["a"]).await;
    let (status, updated) = patch(&sim, &id, json!({"tags": ["a", "b=c"]})).await;
    assert_eq!(status, StatusCode::OK, "{updated}");
    assert_eq!(updated["tags"], json!(["a", "b=c"]));
    assert_eq!(updated["name"], "before");

    let (_, listed) = sim.get(&format!("{ZONE_URL}/servers?tags=b%3Dc")).await;
    assert_eq!(listed["total_count"], 1);

    let (_, updated) = patch(&sim, &id, json!({"name": "after", "protected": true})).await;
    assert_eq!(
        (updated["name"].clone(), updated["protected"].clone()),
        (json!("after"), json!(true))
    );
    let (status, body) = sim
        .call(Method::DELETE, &format!("{ZONE_URL}/servers/{id}"), None)
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body, json!({"message": "Server is protected"}));
    patch(&sim, &id, json!({"protected": false})).await;
    let (status, _) = sim
        .call(Method::DELETE, &format!("{ZONE_URL}/servers/{id}"), None)
        .await;
    assert_eq!(status, StatusCode::OK);

    let (status, body) = patch(&sim, &id, json!({"nmae": "typo"})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    let (status, _) = patch(&sim, "6a0bd2f6-5bb7-4a62-8f6b-6a5b4c5e2b11", json!({})).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn install_needs_an_os_and_a_key_then_progresses() {
    let sim = start().await;
    let id = ready_server(&sim, "inst", &[]).await;
    let (_, os) = sim.get(&format!("{ZONE_URL}/os")).await;
    assert!(os["total_count"].as_u64().unwrap() >= 2, "{os}");
    let ubuntu = os["os"][0].clone();
    assert_eq!(ubuntu["name"], "Ubuntu");
    assert_eq!(ubuntu["zone"], "fr-par-2");
    let os_id = ubuntu["id"].as_str().unwrap();
    let (status, got) = sim.get(&format!("{ZONE_URL}/os/{os_id}")).await;
    assert_eq!((status, &got), (StatusCode::OK, &ubuntu));
    let (status, missing) = sim
        .get(&format!(
            "{ZONE_URL}/os/6a0bd2f6-5bb7-4a62-8f6b-6a5b4c5e2b11"
        ))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(missing["type"], "not_found");

    let install = format!("{ZONE_URL}/servers/{id}/install");
    let (status, body) = sim
        .post(
            &install,
            json!({"os_id": os_id, "hostname": "h", "ssh_key_ids": []}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["details"][0]["argument_name"], "ssh_key_ids");

    let (_, key) = sim
        .post(
            "/iam/v1alpha1/ssh-keys",
            json!({"name": "k", "public_key": KEY}),
        )
        .await;
    let (status, server) = sim
        .post(
            &install,
            json!({"os_id": os_id, "hostname": "h", "ssh_key_ids": [key["id"]]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{server}");
    assert_eq!(server["status"], "ready");
    assert_eq!(server["install"]["status"], "to_install");
    assert_eq!(server["install"]["user"], "ubuntu");
    assert_eq!(server["domain"], "");
    let (status, again) = sim
        .post(
            &install,
            json!({"os_id": os_id, "hostname": "h", "ssh_key_ids": [key["id"]]}),
        )
        .await;
    assert_eq!(status, StatusCode::CONFLICT, "{again}");

    sim.admin(
        Method::POST,
        "/_emsim/clock/advance",
        Some(json!({"seconds": 400})),
    )
    .await;
    let (_, done) = sim.get(&format!("{ZONE_URL}/servers/{id}")).await;
    assert_eq!(done["install"]["status"], "completed");
    assert!(
        done["domain"]
            .as_str()
            .unwrap()
            .ends_with(".fr-par-2.baremetal.scw.cloud")
    );

    let (_, events) = sim
        .get(&format!(
            "{ZONE_URL}/servers/{id}/events?order_by=created_at_desc"
        ))
        .await;
    let actions: Vec<&str> = events["events"]
        .as_array()
        .unwrap()
        .iter()
        .map(|e| e["action"].as_str().unwrap())
        .collect();
    assert_eq!(actions, ["install", "create"]);
    assert_eq!(events["total_count"], 2);
}

#[tokio::test]
async fn migrate_to_monthly_switches_the_offer_once() {
    let sim = start().await;
    let id = ready_server(&sim, "m", &[]).await;
    let hourly = sim.offer_id("EM-A115X-SSD").await;
    let (_, offer) = sim.get(&format!("{ZONE_URL}/offers/{hourly}")).await;
    let monthly = offer["monthly_offer_id"].clone();
    let path = format!("{ZONE_URL}/servers/{id}/migrate-offer-monthly");
    let (status, server) = sim.post(&path, json!({})).await;
    assert_eq!(status, StatusCode::OK, "{server}");
    assert_eq!(server["offer_id"], monthly);
    assert_eq!(server["offer_name"], "EM-A115X-SSD");
    let (status, body) = sim.post(&path, json!({})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
}

#[tokio::test]
async fn options_list_add_and_remove() {
    let sim = start().await;
    let id = ready_server(&sim, "o", &[]).await;
    let (_, options) = sim.get(&format!("{ZONE_URL}/options?name=private")).await;
    assert_eq!(options["total_count"], 1, "{options}");
    let option = options["options"][0].clone();
    assert_eq!(
        option["private_network"]["bandwidth_in_bps"],
        1_000_000_000u64
    );
    let option_id = option["id"].as_str().unwrap();

    let path = format!("{ZONE_URL}/servers/{id}/options/{option_id}");
    let (status, server) = sim.post(&path, json!({})).await;
    assert_eq!(status, StatusCode::OK, "{server}");
    assert_eq!(server["options"][0]["status"], "option_status_enable");
    assert_eq!(server["options"][0]["id"], option["id"]);
    let (_, filtered) = sim
        .get(&format!("{ZONE_URL}/servers?option_id={option_id}"))
        .await;
    assert_eq!(filtered["total_count"], 1);
    let (status, _) = sim.post(&path, json!({})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "already enabled");
    let (status, server) = sim.call(Method::DELETE, &path, None).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(server["options"], json!([]));
    let (status, body) = sim.call(Method::DELETE, &path, None).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["resource"], "baremetal_option");
}

#[tokio::test]
async fn list_pages_with_filters() {
    let sim = start().await;
    for n in 0..5 {
        let tags: &[&str] = if n % 2 == 0 { &["pool=a"] } else { &["pool=b"] };
        sim.create("EM-A115X-SSD", &format!("node-{n}"), tags).await;
    }
    let mut names = Vec::new();
    for page in 1..=3 {
        let (_, list) = sim
            .get(&format!(
                "{ZONE_URL}/servers?tags=pool%3Da&page={page}&page_size=1"
            ))
            .await;
        assert_eq!(list["total_count"], 3);
        names.extend(
            list["servers"]
                .as_array()
                .unwrap()
                .iter()
                .map(|s| s["name"].as_str().unwrap().to_string()),
        );
    }
    assert_eq!(names, ["node-0", "node-2", "node-4"]);
    let (_, empty) = sim
        .get(&format!(
            "{ZONE_URL}/servers?tags=pool%3Da&page=4&page_size=1"
        ))
        .await;
    assert_eq!(empty["servers"], json!([]));
    let (_, by_name) = sim.get(&format!("{ZONE_URL}/servers?name=node-3")).await;
    assert_eq!(by_name["total_count"], 1);
    let (_, other_project) = sim
        .get(&format!(
            "{ZONE_URL}/servers?project_id=6a0bd2f6-5bb7-4a62-8f6b-6a5b4c5e2b11"
        ))
        .await;
    assert_eq!(other_project["total_count"], 0);
}
