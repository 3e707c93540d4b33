//! The Block API's volume listing and update over a real socket: paging by
//! the body's `total_count`, the `tags` and `project_id` filters, `PATCH`
//! of name and tags.

mod common;

use common::Sim;
use emsim::state::DEFAULT_PROJECT_ID;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

const ZONE: &str = "/instance/v1/zones/fr-par-2";
const BLOCK: &str = "/block/v1/zones/fr-par-2";

async fn start() -> Sim {
    common::start_with(emsim::Config {
        time_scale: 1000.0,
        ..emsim::Config::default()
    })
    .await
}

/// A VM with an SBS root; returns the root volume's id.
async fn vm_root(sim: &Sim, name: &str) -> String {
    let (status, body) = sim
        .get(&format!("{ZONE}/images?name=talos-v1.11.5-amd64"))
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    let image = body["images"][0]["id"].as_str().unwrap().to_string();
    let (status, body) = sim
        .post(
            &format!("{ZONE}/servers"),
            json!({"name": name, "commercial_type": "POP2-2C-8G", "image": image,
                   "project": DEFAULT_PROJECT_ID,
                   "volumes": {"0": {"size": 20_000_000_000u64, "volume_type": "sbs_volume"}}}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    body["server"]["volumes"]["0"]["id"]
        .as_str()
        .unwrap()
        .to_string()
}

async fn set_tags(sim: &Sim, id: &str, tags: &[&str]) -> (StatusCode, Value) {
    sim.call(
        Method::PATCH,
        &format!("{BLOCK}/volumes/{id}"),
        Some(json!({ "tags": tags })),
    )
    .await
}

fn ids(list: &Value) -> Vec<String> {
    let mut ids: Vec<String> = list["volumes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|v| v["id"].as_str().unwrap().to_string())
        .collect();
    ids.sort();
    ids
}

#[tokio::test]
async fn patch_sets_tags_and_name_and_answers_the_volume() {
    let sim = start().await;
    let root = vm_root(&sim, "node-a").await;
    let (status, body) = set_tags(&sim, &root, &["cluster=prod", "nodeclaim=node-a"]).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["id"], root.as_str());
    assert_eq!(body["tags"], json!(["cluster=prod", "nodeclaim=node-a"]));
    assert_eq!(body["status"], "in_use");
    let (status, body) = sim
        .call(
            Method::PATCH,
            &format!("{BLOCK}/volumes/{root}"),
            Some(json!({"name": "node-a-root"})),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["name"], "node-a-root");
    assert_eq!(
        body["tags"],
        json!(["cluster=prod", "nodeclaim=node-a"]),
        "kept"
    );
    let (_, read) = sim.get(&format!("{BLOCK}/volumes/{root}")).await;
    assert_eq!(read["name"], "node-a-root");

    let (status, body) = set_tags(&sim, "6a0bd2f6-5bb7-4a62-8f6b-6a5b4c5e2b11", &[]).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["type"], "not_found");
    let (status, body) = sim
        .call(
            Method::PATCH,
            &format!("{BLOCK}/volumes/{root}"),
            Some(json!({"size": 1})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
}

#[tokio::test]
async fn patch_sets_the_iops_class_and_refuses_others() {
    let sim = start().await;
    let root = vm_root(&sim, "node-a").await;
    let (_, before) = sim.get(&format!("{BLOCK}/volumes/{root}")).await;
    assert_eq!(before["type"], "sbs_5k");
    assert_eq!(before["specs"]["perf_iops"], 5000);
    let path = format!("{BLOCK}/volumes/{root}");
    let patch = |iops: u32| sim.call(Method::PATCH, &path, Some(json!({"perf_iops": iops})));
    let (status, body) = patch(15000).await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["type"], "sbs_15k");
    assert_eq!(body["specs"]["perf_iops"], 15000);
    let (status, body) = patch(7000).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "{body}");
    assert_eq!(body["details"][0]["argument_name"], "perf_iops", "{body}");
    let (_, after) = sim.get(&format!("{BLOCK}/volumes/{root}")).await;
    assert_eq!(
        after["specs"]["perf_iops"], 15000,
        "a refused patch changes nothing"
    );
}

#[tokio::test]
async fn list_pages_by_the_body_total_and_filters_by_any_tag_and_project() {
    let sim = start().await;
    let a = vm_root(&sim, "node-a").await;
    let b = vm_root(&sim, "node-b").await;
    let c = vm_root(&sim, "node-c").await;
    set_tags(&sim, &a, &["cluster=prod", "nodeclaim=node-a"]).await;
    set_tags(&sim, &b, &["cluster=prod", "nodeclaim=node-b"]).await;
    set_tags(&sim, &c, &["cluster=staging"]).await;

    let mut seen = Vec::new();
    for page in 1..=3 {
        let (status, body) = sim
            .get(&format!("{BLOCK}/volumes?page={page}&page_size=1"))
            .await;
        assert_eq!(status, StatusCode::OK, "{body}");
        assert_eq!(body["total_count"], 3);
        assert_eq!(body["volumes"].as_array().unwrap().len(), 1);
        seen.extend(ids(&body));
    }
    seen.sort();
    let mut all = vec![a.clone(), b.clone(), c.clone()];
    all.sort();
    assert_eq!(seen, all);

    let (_, body) = sim.get(&format!("{BLOCK}/volumes?tags=cluster=prod")).await;
    assert_eq!(body["total_count"], 2);
    let mut prod = vec![a.clone(), b.clone()];
    prod.sort();
    assert_eq!(ids(&body), prod);
    // Repeated `tags`: one or more of them matches.
    let (_, body) = sim
        .get(&format!(
            "{BLOCK}/volumes?tags=nodeclaim=node-a&tags=cluster=staging"
        ))
        .await;
    let mut either = vec![a.clone(), c.clone()];
    either.sort();
    assert_eq!(ids(&body), either);
    let (_, body) = sim
        .get(&format!(
            "{BLOCK}/volumes?tags=cluster=prod&project_id={DEFAULT_PROJECT_ID}"
        ))
        .await;
    assert_eq!(body["total_count"], 2);
    let (_, body) = sim
        .get(&format!(
            "{BLOCK}/volumes?project_id=6a0bd2f6-5bb7-4a62-8f6b-6a5b4c5e2b11"
        ))
        .await;
    assert_eq!(body["total_count"], 0);
    assert_eq!(body["volumes"], json!([]));
}
