//! Instance private NICs over a real socket: create/list/get/delete, the
//! `syncing` → `available` state, IPAM addresses, the server's
//! `private_nics`, what deleting the VM does.

mod common;

use common::pn::*;
use reqwest::{Method, StatusCode};
use serde_json::json;

async fn nics(
    sim: &common::Sim,
    vm: &str,
    query: &str,
) -> (StatusCode, reqwest::header::HeaderMap, serde_json::Value) {
    let resp = sim
        .client
        .get(format!(
            "{}{VM_ZONE}/servers/{vm}/private_nics?{query}",
            sim.base
        ))
        .header("X-Auth-Token", emsim::state::DEFAULT_SECRET_KEY)
        .send()
        .await
        .unwrap();
    let status = resp.status();
    let headers = resp.headers().clone();
    (status, headers, resp.json().await.unwrap())
}

#[tokio::test]
async fn private_nics_sync_list_and_delete() {
    let sim = start().await;
    let (prod, dev) = (pn_id(&sim, "prod").await, pn_id(&sim, "dev").await);
    let vm = vm(&sim, "vm-a").await;
    let path = format!("{VM_ZONE}/servers/{vm}/private_nics");
    let (status, body) = sim
        .post(&path, json!({"private_network_id": prod, "tags": ["k8s"]}))
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let nic = body["private_nic"].clone();
    assert_eq!(nic["state"], "syncing");
    assert_eq!(nic["server_id"], vm.as_str());
    assert_eq!(nic["private_network_id"], prod.as_str());
    assert_eq!(nic["zone"], "fr-par-2");
    assert_eq!(nic["tags"], json!(["k8s"]));
    assert!(
        nic["mac_address"]
            .as_str()
            .unwrap()
            .starts_with("02:00:00:")
    );
    assert!(nic["creation_date"].as_str().unwrap().ends_with("+00:00"));
    let nic_id = nic["id"].as_str().unwrap().to_string();
    let ip_id = nic["ipam_ip_ids"][0].as_str().unwrap().to_string();
    let (_, ip) = sim.get(&format!("{IPAM}/ips/{ip_id}")).await;
    assert_eq!(ip["address"], "127.80.0.2/24");
    assert_eq!(
        ip["resource"],
        json!({"type": "instance_private_nic", "id": nic_id, "mac_address": nic["mac_address"], "name": "vm-a"})
    );

    let (status, body) = sim.post(&path, json!({"private_network_id": prod})).await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "the same network twice: {body}"
    );
    // The second NIC is newer (the clock only moves by `advance`).
    advance(&sim, 1.0).await;
    let (_, booked) = book(&sim, &dev, Some("127.81.0.5"), &[]).await;
    let (status, second) = sim
        .post(
            &path,
            json!({"private_network_id": dev, "ipam_ip_ids": [booked["id"]]}),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{second}");
    assert_eq!(second["private_nic"]["ipam_ip_ids"], json!([booked["id"]]));

    let (_, server) = sim.get(&format!("{VM_ZONE}/servers/{vm}")).await;
    assert_eq!(
        server["server"]["private_nics"].as_array().unwrap().len(),
        2
    );
    assert_eq!(server["server"]["private_nics"][0]["id"], nic_id.as_str());

    let (status, headers, page) = nics(&sim, &vm, "per_page=1&page=2").await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(headers["x-total-count"], "2");
    assert!(headers["link"].to_str().unwrap().contains("rel=\"last\""));
    assert_eq!(page["total_count"], 2);
    assert_eq!(page["private_nics"].as_array().unwrap().len(), 1);
    assert_eq!(page["private_nics"][0]["id"], second["private_nic"]["id"]);
    let (_, headers, tagged) = nics(&sim, &vm, "tags=k8s").await;
    assert_eq!(headers["x-total-count"], "1");
    assert_eq!(tagged["private_nics"][0]["id"], nic_id.as_str());

    advance(&sim, 3.0).await;
    let (status, got) = sim.get(&format!("{path}/{nic_id}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(got["private_nic"]["state"], "available");

    let (status, _) = delete(&sim, &format!("{path}/{nic_id}")).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (status, body) = sim.get(&format!("{path}/{nic_id}")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["type"], "not_found");
    let (status, _) = sim.get(&format!("{IPAM}/ips/{ip_id}")).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "allocated address released");

    // Deleting the (stopped) VM removes its NICs; the booked address stays.
    let (status, _) = delete(&sim, &format!("{VM_ZONE}/servers/{vm}")).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let (_, records) = sim
        .admin(Method::GET, "/_emsim/private-network-records", None)
        .await;
    assert_eq!(
        records["counts"],
        json!({"attachments": 0, "private_nics": 0, "booked_ips": 1, "allocated_ips": 0})
    );
    let (_, ip) = sim
        .get(&format!("{IPAM}/ips/{}", booked["id"].as_str().unwrap()))
        .await;
    assert_eq!(ip["resource"], json!(null));
}

#[tokio::test]
async fn private_nic_refusals_and_links() {
    let sim = start().await;
    let prod = pn_id(&sim, "prod").await;
    let vm = vm(&sim, "vm-b").await;
    let path = format!("{VM_ZONE}/servers/{vm}/private_nics");
    for (body, status) in [
        (json!({}), StatusCode::BAD_REQUEST),
        (json!({"private_network_id": "x"}), StatusCode::BAD_REQUEST),
        (
            json!({"private_network_id": "33333333-3333-4333-8333-333333333333"}),
            StatusCode::NOT_FOUND,
        ),
        (
            json!({"private_network_id": prod, "ip_ids": ["33333333-3333-4333-8333-333333333333"]}),
            StatusCode::BAD_REQUEST,
        ),
    ] {
        let (got, answer) = sim.post(&path, body.clone()).await;
        assert_eq!(got, status, "{body}: {answer}");
    }
    let (status, body) = sim
        .post(
            &format!("{VM_ZONE}/servers/33333333-3333-4333-8333-333333333333/private_nics"),
            json!({"private_network_id": prod}),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body["resource"], "instance_server");
    let (status, _, _) = nics(&sim, "33333333-3333-4333-8333-333333333333", "").await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    let (_, created) = sim.post(&path, json!({"private_network_id": prod})).await;
    let (_, body) = sim
        .admin(
            Method::GET,
            &format!("/_emsim/private-links?server={vm}"),
            None,
        )
        .await;
    let server = &body["servers"][0];
    assert_eq!(server["kind"], "instance");
    let link = &server["links"][0];
    assert_eq!(link["mac_address"], created["private_nic"]["mac_address"]);
    assert_eq!(link["private_nic_id"], created["private_nic"]["id"]);
    assert_eq!(link["address"], "127.80.0.2/24");
    assert_eq!(link["subnets"], json!(["127.80.0.0/24"]));
    assert!(link.get("vlan").is_none());

    let (status, _) = sim
        .admin(
            Method::POST,
            "/_emsim/faults",
            Some(json!({"kind": "list_missing_page", "endpoint": "GET /instance/v1/zones/{zone}/servers/{server_id}/private_nics", "count": 1})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    let (_, headers, page) = nics(&sim, &vm, "").await;
    assert_eq!(headers["x-total-count"], "1");
    assert_eq!(page["total_count"], 1);
    assert_eq!(page["private_nics"], json!([]));
}
