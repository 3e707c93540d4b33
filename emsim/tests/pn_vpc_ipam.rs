//! VPC v2 Private Networks and IPAM v1 addresses over a real socket:
//! seeding, filters, paging, booking, release, errors.

mod common;

use common::pn::*;
use emsim::state::DEFAULT_PROJECT_ID;
use reqwest::{Method, StatusCode};
use serde_json::json;

#[tokio::test]
async fn private_networks_list_filter_page_and_get() {
    let sim = start().await;
    let (status, body) = sim.get(&format!("{VPC}/private-networks")).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["total_count"], 2);
    let prod = &body["private_networks"][0];
    assert_eq!(prod["name"], "prod", "created_at_asc, seeds in order");
    assert_eq!(prod["region"], "fr-par");
    assert_eq!(prod["project_id"], DEFAULT_PROJECT_ID);
    assert_eq!(prod["tags"], json!(["k8s"]));
    assert_eq!(prod["subnets"][0]["subnet"], "127.80.0.0/24");
    assert_eq!(prod["subnets"][0]["private_network_id"], prod["id"]);
    assert_eq!(prod["subnets"][0]["vpc_id"], prod["vpc_id"]);
    assert_eq!(prod["dhcp_enabled"], true);
    let prod_id = prod["id"].as_str().unwrap().to_string();

    for (query, names) in [
        ("name=pro", vec!["prod"]),
        ("tags=dev&tags=nope", vec!["dev"]),
        (
            &format!("private_network_ids={prod_id}") as &str,
            vec!["prod"],
        ),
        (
            &format!("project_id={DEFAULT_PROJECT_ID}"),
            vec!["prod", "dev"],
        ),
        ("project_id=33333333-3333-4333-8333-333333333333", vec![]),
        (
            &format!("vpc_id={}", prod["vpc_id"].as_str().unwrap()),
            vec!["prod", "dev"],
        ),
        ("order_by=name_asc", vec!["dev", "prod"]),
        ("order_by=created_at_desc", vec!["dev", "prod"]),
    ] {
        let (status, body) = sim.get(&format!("{VPC}/private-networks?{query}")).await;
        assert_eq!(status, StatusCode::OK, "{query}: {body}");
        let got: Vec<&str> = body["private_networks"]
            .as_array()
            .unwrap()
            .iter()
            .map(|n| n["name"].as_str().unwrap())
            .collect();
        assert_eq!(got, names, "{query}");
        assert_eq!(body["total_count"], names.len(), "{query}");
    }

    let (_, page2) = sim
        .get(&format!("{VPC}/private-networks?page=2&page_size=1"))
        .await;
    assert_eq!(page2["total_count"], 2);
    assert_eq!(page2["private_networks"][0]["name"], "dev");
    let (_, page3) = sim
        .get(&format!("{VPC}/private-networks?page=3&page_size=1"))
        .await;
    assert_eq!(page3["private_networks"], json!([]));

    let (status, got) = sim.get(&format!("{VPC}/private-networks/{prod_id}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(got, *prod);
    // Regional: not found from another region.
    let (status, body) = sim
        .get(&format!(
            "/vpc/v2/regions/nl-ams/private-networks/{prod_id}"
        ))
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["type"], "not_found");
    let (status, body) = sim.get("/vpc/v2/regions/us-east/private-networks").await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["type"], "invalid_arguments");
    let (status, _) = sim
        .get(&format!("{VPC}/private-networks?order_by=size"))
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    // The public API creates nothing.
    let (status, _) = sim
        .post(&format!("{VPC}/private-networks"), json!({"name": "x"}))
        .await;
    assert_ne!(status, StatusCode::OK);
}

#[tokio::test]
async fn networks_are_seeded_through_the_admin_api_until_reset() {
    let sim = start().await;
    let (status, body) = sim
        .admin(
            Method::POST,
            "/_emsim/private-networks",
            Some(json!({"name": "extra", "region": "nl-ams", "subnets": ["127.82.0.0/24"], "tags": ["a"]})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    assert_eq!(body["subnets"][0]["subnet"], "127.82.0.0/24");
    let (_, list) = sim.get("/vpc/v2/regions/nl-ams/private-networks").await;
    assert_eq!(list["total_count"], 1);
    for bad in [
        json!({"name": "y", "region": "nl-ams", "subnets": ["127.82.0.0/25"]}),
        json!({"name": "y", "region": "nl-ams", "subnets": ["127.83.0.1/24"]}),
        json!({"name": "y", "region": "mars", "subnets": ["127.84.0.0/24"]}),
        json!({"name": "y", "region": "nl-ams", "subnets": ["127.77.0.0/24"]}),
        json!({"name": "y", "region": "nl-ams", "subnets": []}),
        json!({"name": "y", "region": "nl-ams", "subnets": ["127.85.0.0/24"], "colour": 1}),
    ] {
        let (status, body) = sim
            .admin(Method::POST, "/_emsim/private-networks", Some(bad.clone()))
            .await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
    }
    let (_, admin) = sim
        .admin(Method::GET, "/_emsim/private-networks", None)
        .await;
    assert_eq!(admin["private_networks"].as_array().unwrap().len(), 3);
    sim.admin(Method::POST, "/_emsim/reset", None).await;
    let (_, list) = sim.get("/vpc/v2/regions/nl-ams/private-networks").await;
    assert_eq!(list["total_count"], 0, "admin networks go at reset");
    let (_, list) = sim.get(&format!("{VPC}/private-networks")).await;
    assert_eq!(list["total_count"], 2, "seeds stay");
}

#[tokio::test]
async fn ipam_books_lists_and_releases() {
    let sim = start().await;
    let dev = pn_id(&sim, "dev").await;
    let prod = pn_id(&sim, "prod").await;
    let (status, ip) = book(&sim, &dev, None, &["k8s"]).await;
    assert_eq!(status, StatusCode::OK, "{ip}");
    assert_eq!(ip["address"], "127.81.0.2/28", "lowest free, .1 kept");
    assert_eq!(ip["is_ipv6"], false);
    assert_eq!(ip["resource"], json!(null));
    assert_eq!(ip["zone"], json!(null));
    assert_eq!(ip["region"], "fr-par");
    assert_eq!(ip["project_id"], DEFAULT_PROJECT_ID);
    assert_eq!(ip["tags"], json!(["k8s"]));
    let (_, network) = sim.get(&format!("{VPC}/private-networks/{dev}")).await;
    assert_eq!(
        ip["source"],
        json!({"subnet_id": network["subnets"][0]["id"]})
    );
    let id = ip["id"].as_str().unwrap().to_string();

    let (status, chosen) = book(&sim, &dev, Some("127.81.0.9"), &[]).await;
    assert_eq!(status, StatusCode::OK, "{chosen}");
    assert_eq!(chosen["address"], "127.81.0.9/28");
    let (status, _) = book(&sim, &dev, Some("127.81.0.9"), &[]).await;
    assert_eq!(status, StatusCode::CONFLICT, "already reserved");
    for bad in ["127.81.0.1", "127.81.0.15", "127.80.0.9", "10.0.0.1/24"] {
        let (status, body) = book(&sim, &dev, Some(bad), &[]).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{bad}: {body}");
    }
    let (status, _) = book(&sim, "33333333-3333-4333-8333-333333333333", None, &[]).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, _) = sim
        .post(
            &format!("{IPAM}/ips"),
            json!({"source": {"zonal": "fr-par-2"}}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, _) = sim
        .post(
            &format!("{IPAM}/ips"),
            json!({"source": {"private_network_id": dev}, "is_ipv6": true}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let (status, by_subnet) = sim
        .post(
            &format!("{IPAM}/ips"),
            json!({"source": {"subnet_id": network["subnets"][0]["id"]}}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{by_subnet}");
    // Later than the others (the clock only moves by `advance`).
    advance(&sim, 1.0).await;
    let (_, prod_ip) = book(&sim, &prod, None, &[]).await;
    assert_eq!(prod_ip["address"], "127.80.0.2/24");

    for (query, count) in [
        ("".to_string(), 4),
        (format!("private_network_id={dev}"), 3),
        ("tags=k8s".into(), 1),
        ("attached=false".into(), 4),
        ("attached=true".into(), 0),
        ("is_ipv6=true".into(), 0),
        ("resource_type=baremetal_private_nic".into(), 0),
        (format!("ip_ids={id}"), 1),
        ("zonal=fr-par-2".into(), 0),
    ] {
        let (status, body) = sim.get(&format!("{IPAM}/ips?{query}")).await;
        assert_eq!(status, StatusCode::OK, "{query}: {body}");
        assert_eq!(body["total_count"], count, "{query}: {body}");
        assert_eq!(body["ips"].as_array().unwrap().len(), count, "{query}");
    }
    let (_, page) = sim
        .get(&format!(
            "{IPAM}/ips?page=2&page_size=3&order_by=ip_address_asc"
        ))
        .await;
    assert_eq!(page["total_count"], 4);
    assert_eq!(page["ips"][0]["address"], "127.81.0.9/28");
    let (_, newest) = sim.get(&format!("{IPAM}/ips?page_size=1")).await;
    assert_eq!(
        newest["ips"][0]["id"], prod_ip["id"],
        "created_at_desc by default"
    );

    let (status, got) = sim.get(&format!("{IPAM}/ips/{id}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(got, ip);
    let (status, _) = sim.get(&format!("/ipam/v1/regions/nl-ams/ips/{id}")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    let (status, body) = delete(&sim, &format!("{IPAM}/ips/{id}")).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let (status, body) = sim.get(&format!("{IPAM}/ips/{id}")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["type"], "not_found");
    let (status, _) = delete(&sim, &format!("{IPAM}/ips/{id}")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    // The freed address is handed out again.
    let (_, again) = book(&sim, &dev, None, &[]).await;
    assert_eq!(again["address"], "127.81.0.2/28");
}

#[tokio::test]
async fn list_faults_act_on_the_new_lists() {
    let sim = start().await;
    let dev = pn_id(&sim, "dev").await;
    for _ in 0..3 {
        book(&sim, &dev, None, &[]).await;
    }
    for endpoint in [
        "GET /ipam/v1/regions/{region}/ips",
        "GET /vpc/v2/regions/{region}/private-networks",
    ] {
        let (status, body) = sim
            .admin(
                Method::POST,
                "/_emsim/faults",
                Some(json!({"kind": "list_missing_page", "endpoint": endpoint, "drop": 1, "count": 1})),
            )
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
    }
    let (_, ips) = sim.get(&format!("{IPAM}/ips")).await;
    assert_eq!(ips["total_count"], 3);
    assert_eq!(ips["ips"].as_array().unwrap().len(), 2, "one short");
    let (_, pns) = sim.get(&format!("{VPC}/private-networks")).await;
    assert_eq!(pns["total_count"], 2);
    assert_eq!(pns["private_networks"].as_array().unwrap().len(), 1);
    let (_, ips) = sim.get(&format!("{IPAM}/ips")).await;
    assert_eq!(ips["ips"].as_array().unwrap().len(), 3, "spent");
    let (status, _) = sim
        .admin(
            Method::POST,
            "/_emsim/faults",
            Some(
                json!({"endpoint": "GET /ipam/v1/regions/{region}/ips", "status": 503, "count": 1}),
            ),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (status, _) = sim.get(&format!("{IPAM}/ips")).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let (_, counters) = sim.admin(Method::GET, "/_emsim/counters", None).await;
    assert_eq!(
        counters["endpoints"]["GET /ipam/v1/regions/{region}/ips"]["by_status"]["503"],
        1
    );
}
