//! The simulated API over a real socket: lifecycle, listing, errors.

mod common;

use common::{ZONE_URL, start, start_with_catalog};
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

const TINY: &str = r#"
offers:
  - name: EM-SLOW
    zones: [fr-par-2]
    delivery: 3600
    quota: 1
    price_per_hour: 0.1
    price_per_month: 30
"#;

fn is_api_time(v: &Value) -> bool {
    let s = v.as_str().unwrap_or("");
    // 2025-10-24T13:43:11.051888Z
    s.len() == 27
        && s.ends_with('Z')
        && s.as_bytes()[19] == b'.'
        && chrono::DateTime::parse_from_rfc3339(s).is_ok()
}

#[tokio::test]
async fn create_delivers_then_ready_with_a_loopback_ip() {
    let sim = start().await;
    let (status, created) = sim.create("EM-A115X-SSD", "node-a", &["owner=test"]).await;
    assert_eq!(status, StatusCode::OK, "{created}");
    assert_eq!(created["status"], "delivering");
    assert_eq!(created["ips"], json!([]));
    assert_eq!(created["offer_name"], "EM-A115X-SSD");
    assert_eq!(created["zone"], "fr-par-2");
    assert_eq!(created["install"], Value::Null);
    assert!(
        is_api_time(&created["created_at"]),
        "{}",
        created["created_at"]
    );

    let id = created["id"].as_str().unwrap();
    let ready = sim.wait_ready(id).await;
    let ipv4: Vec<&Value> = ready["ips"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|ip| ip["version"] == "IPv4")
        .collect();
    assert_eq!(ipv4.len(), 1);
    assert_eq!(ipv4[0]["address"], "127.77.0.10");
    assert_eq!(ready["boot_type"], "normal");
    assert_eq!(ready["created_at"], created["created_at"]);
    assert!(ready["updated_at"].as_str() > created["updated_at"].as_str());
}

#[tokio::test]
async fn power_actions_while_delivering_are_refused() {
    let sim = start_with_catalog(1.0, TINY).await;
    let (_, created) = sim.create("EM-SLOW", "slow", &[]).await;
    let id = created["id"].as_str().unwrap();
    for action in ["reboot", "start"] {
        let (status, body) = sim
            .post(
                &format!("{ZONE_URL}/servers/{id}/{action}"),
                json!({"boot_type": "rescue", "ssh_key_ids": null}),
            )
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{action}");
        assert_eq!(body, json!({"message": "Server is not delivered"}));
    }
    let (status, body) = sim
        .post(&format!("{ZONE_URL}/servers/{id}/stop"), json!({}))
        .await;
    assert_eq!(
        (status, body),
        (
            StatusCode::BAD_REQUEST,
            json!({"message": "Server is not delivered"})
        )
    );
}

#[tokio::test]
async fn listing_paginates_orders_and_counts() {
    let sim = start().await;
    let mut ids = Vec::new();
    for i in 0..5 {
        let (_, s) = sim.create("EM-A115X-SSD", &format!("node-{i}"), &[]).await;
        ids.push(s["id"].as_str().unwrap().to_string());
    }
    let mut seen = Vec::new();
    for page in 1..=3 {
        let (status, list) = sim
            .get(&format!("{ZONE_URL}/servers?page={page}&page_size=2"))
            .await;
        assert_eq!(status, StatusCode::OK);
        assert_eq!(list["total_count"], 5);
        let servers = list["servers"].as_array().unwrap();
        assert_eq!(servers.len(), if page < 3 { 2 } else { 1 });
        seen.extend(
            servers
                .iter()
                .map(|s| s["id"].as_str().unwrap().to_string()),
        );
    }
    assert_eq!(seen, ids, "created_at_asc by default");
    let (_, beyond) = sim
        .get(&format!("{ZONE_URL}/servers?page=4&page_size=2"))
        .await;
    assert_eq!(beyond["servers"], json!([]));
    assert_eq!(beyond["total_count"], 5);

    let (_, desc) = sim
        .get(&format!(
            "{ZONE_URL}/servers?order_by=created_at_desc&page_size=1"
        ))
        .await;
    assert_eq!(desc["servers"][0]["id"], ids[4].as_str());
    let (status, bad) = sim.get(&format!("{ZONE_URL}/servers?page_size=1000")).await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(bad["type"], "invalid_arguments");
    assert_eq!(bad["details"][0]["argument_name"], "page_size");
    // Other zones do not see them.
    let (_, other) = sim.get("/baremetal/v1/zones/fr-par-1/servers").await;
    assert_eq!(other["total_count"], 0);
}

#[tokio::test]
async fn tag_filter_requires_every_tag_exactly() {
    let sim = start().await;
    sim.create("EM-A115X-SSD", "ab", &["karpenter=yes", "pool=a"])
        .await;
    sim.create("EM-A115X-SSD", "a", &["karpenter=yes"]).await;
    sim.create("EM-A115X-SSD", "c", &["other"]).await;
    let names = |list: &Value| -> Vec<String> {
        list["servers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|s| s["name"].as_str().unwrap().to_string())
            .collect()
    };
    let (_, one_tag) = sim
        .get(&format!("{ZONE_URL}/servers?tags=karpenter%3Dyes"))
        .await;
    assert_eq!(names(&one_tag), ["ab", "a"]);
    assert_eq!(one_tag["total_count"], 2);
    let (_, both) = sim
        .get(&format!(
            "{ZONE_URL}/servers?tags=karpenter%3Dyes&tags=pool%3Da"
        ))
        .await;
    assert_eq!(names(&both), ["ab"]);
    let (_, prefix) = sim.get(&format!("{ZONE_URL}/servers?tags=karpenter")).await;
    assert_eq!(prefix["total_count"], 0, "no substring matching");
    let (_, by_name) = sim.get(&format!("{ZONE_URL}/servers?name=a")).await;
    assert_eq!(names(&by_name), ["ab", "a"], "name is a substring filter");
    let (_, by_status) = sim
        .get(&format!("{ZONE_URL}/servers?status=deleting"))
        .await;
    assert_eq!(by_status["total_count"], 0);
}

#[tokio::test]
async fn delete_answers_deleting_then_404() {
    let sim = start().await;
    let (_, created) = sim.create("EM-A115X-SSD", "gone", &[]).await;
    let id = created["id"].as_str().unwrap();
    sim.wait_ready(id).await;
    let (status, deleting) = sim
        .call(Method::DELETE, &format!("{ZONE_URL}/servers/{id}"), None)
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(deleting["status"], "deleting");
    let (status, body) = sim.wait_server(id, |s, _| s == StatusCode::NOT_FOUND).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body, json!({"message": "Not Found"}));

    let (_, live) = sim.admin(Method::GET, "/_emsim/servers", None).await;
    assert_eq!(live["servers"], json!([]));
    let (_, all) = sim
        .admin(Method::GET, "/_emsim/servers?include_deleted=true", None)
        .await;
    assert_eq!(all["servers"][0]["id"], id);
    assert_eq!(all["servers"][0]["status"], "deleting");
    assert!(all["servers"][0]["deleted_at"].is_string());
}

#[tokio::test]
async fn out_of_stock_and_stock_control() {
    let sim = start().await;
    let (status, body) = sim.create("EM-T620E-H100", "gpu", &[]).await;
    assert_eq!(status, StatusCode::PRECONDITION_FAILED);
    assert_eq!(body["type"], "out_of_stock");
    assert_eq!(body["message"], "resource is out of stock");

    let (status, _) = sim
        .admin(
            Method::PUT,
            "/_emsim/stock",
            Some(json!({"zone": "fr-par-2", "offer": "EM-T620E-H100", "stock": 1})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (status, body) = sim.create("EM-T620E-H100", "gpu", &[]).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let (_, offer) = sim
        .get(&format!("{ZONE_URL}/offers?name=EM-T620E-H100"))
        .await;
    assert_eq!(
        offer["offers"][0]["stock"], "empty",
        "the counted stock ran out"
    );
}

#[tokio::test]
async fn quota_exceeded_is_403() {
    let sim = start_with_catalog(1.0, TINY).await;
    assert_eq!(sim.create("EM-SLOW", "one", &[]).await.0, StatusCode::OK);
    let (status, body) = sim.create("EM-SLOW", "two", &[]).await;
    assert_eq!(status, StatusCode::FORBIDDEN);
    assert_eq!(body["type"], "quotas_exceeded");
    assert_eq!(
        body["details"],
        json!([{"resource": "EM_SLOW", "quota": 1, "current": 1}])
    );
}

#[tokio::test]
async fn authentication_is_required_on_the_api_only() {
    let sim = start().await;
    let path = format!("{ZONE_URL}/servers");
    let (status, body) = sim
        .call_with_token(
            Method::GET,
            &path,
            None,
            Some("4d6b8a36-2f5b-4e1c-9c51-5b1b3a3f0a11"),
        )
        .await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(
        body,
        json!({"message": "authentication is denied", "method": "api_key", "reason": "not_found", "type": "denied_authentication"})
    );
    let (status, body) = sim.call_with_token(Method::GET, &path, None, None).await;
    assert_eq!(status, StatusCode::UNAUTHORIZED);
    assert_eq!(body["reason"], "invalid_argument");
    assert_eq!(
        sim.admin(Method::GET, "/_emsim/servers", None).await.0,
        StatusCode::OK
    );

    let (_, counters) = sim.admin(Method::GET, "/_emsim/counters", None).await;
    assert_eq!(
        counters["endpoints"]["GET /baremetal/v1/zones/{zone}/servers"]["by_status"]["401"],
        2
    );
}

#[tokio::test]
async fn offers_are_hourly_by_default_with_monthly_twins() {
    let sim = start().await;
    let (_, hourly) = sim.get(&format!("{ZONE_URL}/offers")).await;
    let offers = hourly["offers"].as_array().unwrap();
    assert_eq!(
        hourly["total_count"].as_u64().unwrap() as usize,
        offers.len()
    );
    assert!(
        offers
            .iter()
            .all(|o| o["subscription_period"] == "hourly" && o["price_per_month"].is_null())
    );
    let a115 = offers.iter().find(|o| o["name"] == "EM-A115X-SSD").unwrap();
    assert_eq!(
        a115["price_per_hour"],
        json!({"currency_code": "EUR", "units": 0, "nanos": 91_000_000})
    );
    assert_eq!(a115["disks"][0]["type"], "SSD");

    let twin = a115["monthly_offer_id"].as_str().unwrap();
    let (status, monthly) = sim.get(&format!("{ZONE_URL}/offers/{twin}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(monthly["subscription_period"], "monthly");
    assert_eq!(
        monthly["fee"],
        json!({"currency_code": "EUR", "units": 32, "nanos": 990_000_000})
    );
    let (_, monthly_list) = sim
        .get(&format!("{ZONE_URL}/offers?subscription_period=monthly"))
        .await;
    assert!(
        monthly_list["offers"]
            .as_array()
            .unwrap()
            .iter()
            .any(|o| o["id"] == twin)
    );

    let (status, missing) = sim
        .get(&format!(
            "{ZONE_URL}/offers/00000000-0000-4000-8000-000000000000"
        ))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(missing["type"], "not_found");
    let (status, _) = sim.get("/baremetal/v1/zones/mars-1/offers").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[tokio::test]
async fn ssh_keys_drop_the_comment_and_delete_with_204() {
    let sim = start().await;
    let (status, key) = sim
        .post(
            "/iam/v1alpha1/ssh-keys",
            json!({"name": "provider", "public_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAICJEoOOgQBLJPs4g/XcPTKT82NywNPpxeuA20FlOPlpO opensource@scaleway.com", "project_id": emsim::state::DEFAULT_PROJECT_ID}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{key}");
    assert_eq!(
        key["public_key"],
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAICJEoOOgQBLJPs4g/XcPTKT82NywNPpxeuA20FlOPlpO"
    );
    assert_eq!(
        key["fingerprint"],
        "256 MD5:6b:cd:72:8a:ae:45:24:4b:2b:72:f6:d0:6a:8d:16:06 (ssh-ed25519)"
    );
    assert_eq!(key["disabled"], false);
    let (_, list) = sim
        .get(&format!(
            "/iam/v1alpha1/ssh-keys?project_id={}",
            emsim::state::DEFAULT_PROJECT_ID
        ))
        .await;
    assert_eq!(list["total_count"], 1);
    assert_eq!(list["ssh_keys"][0]["id"], key["id"]);

    let id = key["id"].as_str().unwrap();
    let (status, body) = sim
        .call(
            Method::DELETE,
            &format!("/iam/v1alpha1/ssh-keys/{id}"),
            None,
        )
        .await;
    assert_eq!((status, body), (StatusCode::NO_CONTENT, Value::Null));
    let (status, body) = sim.get(&format!("/iam/v1alpha1/ssh-keys/{id}")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(
        body,
        json!({"message": "resource is not found", "resource": "ssh_key", "resource_id": id, "type": "not_found"})
    );
    let (status, bad) = sim
        .post(
            "/iam/v1alpha1/ssh-keys",
            json!({"name": "x", "public_key": "nope"}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(bad["details"][0]["argument_name"], "public_key");
}

#[tokio::test]
async fn injected_faults_answer_before_the_handler_and_are_counted() {
    let sim = start().await;
    let endpoint = "POST /baremetal/v1/zones/{zone}/servers";
    let (status, _) = sim
        .admin(
            Method::POST,
            "/_emsim/faults",
            Some(json!({"endpoint": endpoint, "status": 503, "body": {"message": "maintenance"}, "count": 1})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, body) = sim.create("EM-A115X-SSD", "x", &[]).await;
    assert_eq!(
        (status, body),
        (
            StatusCode::SERVICE_UNAVAILABLE,
            json!({"message": "maintenance"})
        )
    );
    assert_eq!(sim.create("EM-A115X-SSD", "x", &[]).await.0, StatusCode::OK);

    let (_, counters) = sim.admin(Method::GET, "/_emsim/counters", None).await;
    let create = &counters["endpoints"][endpoint];
    assert_eq!(create["total"], 2);
    assert_eq!(create["by_status"], json!({"200": 1, "503": 1}));

    let (status, typo) = sim
        .admin(
            Method::POST,
            "/_emsim/faults",
            Some(json!({"endpoint": "POST /servers", "status": 500})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{typo}");

    let (status, _) = sim.admin(Method::POST, "/_emsim/reset", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (_, list) = sim.get(&format!("{ZONE_URL}/servers")).await;
    assert_eq!(list["total_count"], 0);
}

#[tokio::test]
async fn rate_limit_answers_429() {
    let sim = common::start_with(emsim::Config {
        rate_limit: Some(0.01),
        ..emsim::Config::default()
    })
    .await;
    let path = format!("{ZONE_URL}/offers");
    assert_eq!(sim.get(&path).await.0, StatusCode::OK);
    let (status, body) = sim.get(&path).await;
    assert_eq!(status, StatusCode::TOO_MANY_REQUESTS);
    assert_eq!(body["type"], "too_many_requests");
}

#[tokio::test]
async fn rate_limit_is_set_and_lifted_at_run_time() {
    let sim = common::start().await;
    let path = format!("{ZONE_URL}/offers");
    let (_, body) = sim.admin(Method::GET, "/_emsim/rate-limit", None).await;
    assert_eq!(body["per_second"], Value::Null);
    assert_eq!(sim.get(&path).await.0, StatusCode::OK);
    assert_eq!(sim.get(&path).await.0, StatusCode::OK);

    let limit = json!({"per_second": 0.01});
    let (status, _) = sim
        .admin(Method::PUT, "/_emsim/rate-limit", Some(limit))
        .await;
    assert_eq!(status, StatusCode::OK);
    let (_, body) = sim.admin(Method::GET, "/_emsim/rate-limit", None).await;
    assert_eq!(body["per_second"], 0.01);
    // A fresh bucket holds one call.
    assert_eq!(sim.get(&path).await.0, StatusCode::OK);
    assert_eq!(sim.get(&path).await.0, StatusCode::TOO_MANY_REQUESTS);

    for bad in [
        json!({"per_second": 0}),
        json!({"per_second": -1}),
        json!({"rps": 1}),
    ] {
        let (status, _) = sim
            .admin(Method::PUT, "/_emsim/rate-limit", Some(bad.clone()))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}");
    }
    let (status, _) = sim
        .admin(
            Method::PUT,
            "/_emsim/rate-limit",
            Some(json!({"per_second": null})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(sim.get(&path).await.0, StatusCode::OK);
    let counters = sim.admin(Method::GET, "/_emsim/counters", None).await.1;
    assert_eq!(
        counters["endpoints"]["GET /baremetal/v1/zones/{zone}/offers"]["by_status"]["429"],
        1
    );
}
