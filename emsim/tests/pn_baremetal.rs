//! Elastic Metal Private Networks over a real socket: the offer's and the
//! server's `private_network` option, baremetal v3 attach/set/list/detach
//! with their statuses on the simulated clock, IPAM addresses, faults, the
//! admin links talos-sim reads.

mod common;

use common::ZONE_URL;
use common::pn::*;
use emsim::pn::em_mac;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

#[tokio::test]
async fn offers_list_the_private_network_option_with_its_price() {
    let sim = start().await;
    let (_, offers) = sim.get(&format!("{ZONE_URL}/offers")).await;
    for offer in offers["offers"].as_array().unwrap() {
        let option = offer["options"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o.get("private_network").is_some())
            .unwrap_or_else(|| panic!("{offer}"));
        assert_eq!(option["name"], "Private Network");
        assert_eq!(option["enabled"], false);
        assert_eq!(option["manageable"], true);
        assert_eq!(option["subscription_period"], "hourly");
        assert_eq!(option["price"]["currency_code"], "EUR");
        assert_eq!(
            option["private_network"]["bandwidth_in_bps"],
            1_000_000_000u64
        );
    }
    // The same id as in GET /options.
    let (_, options) = sim.get(&format!("{ZONE_URL}/options?name=private")).await;
    assert_eq!(options["options"][0]["id"], pn_option(&sim).await);
}

#[tokio::test]
async fn attach_needs_the_option_then_settles_and_detaches() {
    let sim = start().await;
    let prod = pn_id(&sim, "prod").await;
    let id = em_server(&sim, "node-a", false).await;
    let path = format!("{V3}/servers/{id}/private-networks");
    let (status, body) = sim.post(&path, json!({"private_network_id": prod})).await;
    assert_eq!(status, StatusCode::PRECONDITION_FAILED, "{body}");
    assert_eq!(body["type"], "precondition_failed");

    let option = pn_option(&sim).await;
    let (status, server) = sim
        .post(
            &format!("{ZONE_URL}/servers/{id}/options/{option}"),
            json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(
        server["options"][0]["private_network"]["bandwidth_in_bps"],
        1_000_000_000u64
    );
    let (status, _) = sim
        .post(
            &format!("{ZONE_URL}/servers/{id}/options/{option}"),
            json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "already enabled");
    let (status, _) = sim
        .post(
            &format!("{ZONE_URL}/servers/{id}/options/33333333-3333-4333-8333-333333333333"),
            json!({}),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND, "unknown option");

    let (status, spn) = sim.post(&path, json!({"private_network_id": prod})).await;
    assert_eq!(status, StatusCode::OK, "{spn}");
    assert_eq!(spn["status"], "attaching");
    assert_eq!(spn["server_id"], id.as_str());
    assert_eq!(spn["private_network_id"], prod.as_str());
    assert_eq!(spn["vlan"], json!(null), "no VLAN until attached");
    let ip_id = spn["ipam_ip_ids"][0].as_str().unwrap().to_string();
    let (_, ip) = sim.get(&format!("{IPAM}/ips/{ip_id}")).await;
    assert_eq!(ip["address"], "127.80.0.2/24");
    assert_eq!(
        ip["resource"],
        json!({"type": "baremetal_private_nic", "id": id, "mac_address": em_mac(&id), "name": "node-a"})
    );
    let (_, by_resource) = sim
        .get(&format!("{IPAM}/ips?resource_id={id}&resource_type=baremetal_private_nic&private_network_id={prod}"))
        .await;
    assert_eq!(by_resource["total_count"], 1);
    let (_, by_mac) = sim
        .get(&format!(
            "{IPAM}/ips?mac_address={}",
            em_mac(&id).to_uppercase()
        ))
        .await;
    assert_eq!(by_mac["total_count"], 1);

    let (status, body) = sim.post(&path, json!({"private_network_id": prod})).await;
    assert_eq!(status, StatusCode::BAD_REQUEST, "twice: {body}");
    let (status, body) = delete(&sim, &format!("{ZONE_URL}/servers/{id}/options/{option}")).await;
    assert_eq!(
        status,
        StatusCode::BAD_REQUEST,
        "the option stays while attached: {body}"
    );
    let (status, body) = delete(&sim, &format!("{path}/{prod}")).await;
    assert_eq!(
        status,
        StatusCode::CONFLICT,
        "detach while attaching: {body}"
    );
    assert_eq!(body["type"], "transient_state");

    advance(&sim, 9.0).await;
    let list = attachments(&sim, &format!("server_id={id}")).await;
    assert_eq!(list["server_private_networks"][0]["status"], "attaching");
    advance(&sim, 1.5).await;
    let list = attachments(&sim, &format!("server_id={id}")).await;
    assert_eq!(list["total_count"], 1);
    let attached = &list["server_private_networks"][0];
    assert_eq!(attached["status"], "attached");
    let vlan = attached["vlan"].as_u64().expect("a VLAN once attached");
    assert_ne!(attached["updated_at"], spn["updated_at"]);

    let (status, body) = delete(&sim, &format!("{path}/{prod}")).await;
    assert_eq!(status, StatusCode::NO_CONTENT, "{body}");
    let list = attachments(&sim, &format!("server_id={id}")).await;
    assert_eq!(list["server_private_networks"][0]["status"], "detaching");
    let (status, _) = delete(&sim, &format!("{path}/{prod}")).await;
    assert_eq!(status, StatusCode::CONFLICT);
    advance(&sim, 5.5).await;
    let list = attachments(&sim, &format!("server_id={id}")).await;
    assert_eq!(list["total_count"], 0);
    let (status, _) = sim.get(&format!("{IPAM}/ips/{ip_id}")).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "allocated address released");
    let (status, _) = delete(&sim, &format!("{path}/{prod}")).await;
    assert_eq!(status, StatusCode::NOT_FOUND);

    // Attached again: the same VLAN.
    sim.post(&path, json!({"private_network_id": prod})).await;
    advance(&sim, 10.0).await;
    let list = attachments(&sim, &format!("server_id={id}")).await;
    assert_eq!(list["server_private_networks"][0]["vlan"], vlan);
}

#[tokio::test]
async fn attach_refusals() {
    let sim = start().await;
    let prod = pn_id(&sim, "prod").await;
    let id = em_server(&sim, "node-b", true).await;
    let path = format!("{V3}/servers/{id}/private-networks");
    for (body, status) in [
        (json!({}), StatusCode::BAD_REQUEST),
        (
            json!({"private_network_id": "nope"}),
            StatusCode::BAD_REQUEST,
        ),
        (
            json!({"private_network_id": prod, "colour": 1}),
            StatusCode::BAD_REQUEST,
        ),
        (
            json!({"private_network_id": "33333333-3333-4333-8333-333333333333"}),
            StatusCode::NOT_FOUND,
        ),
        (
            json!({"private_network_id": prod, "ipam_ip_ids": ["33333333-3333-4333-8333-333333333333"]}),
            StatusCode::NOT_FOUND,
        ),
    ] {
        let (got, answer) = sim.post(&path, body.clone()).await;
        assert_eq!(got, status, "{body}: {answer}");
    }
    let (status, body) = sim
        .post(
            &format!("{V3}/servers/33333333-3333-4333-8333-333333333333/private-networks"),
            json!({"private_network_id": prod}),
        )
        .await;
    assert_eq!(status, StatusCode::NOT_FOUND);
    assert_eq!(body, json!({"message": "Not Found"}));
    // Another network's booked address.
    let dev = pn_id(&sim, "dev").await;
    let (_, ip) = book(&sim, &dev, None, &[]).await;
    let (status, _) = sim
        .post(
            &path,
            json!({"private_network_id": prod, "ipam_ip_ids": [ip["id"]]}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    // Not delivered yet.
    let (_, fresh) = sim.create("EM-A115X-SSD", "fresh", &[]).await;
    let (status, body) = sim
        .post(
            &format!(
                "{V3}/servers/{}/private-networks",
                fresh["id"].as_str().unwrap()
            ),
            json!({"private_network_id": prod}),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(body["message"], "Server is not delivered");
    let (status, _) = sim
        .get("/baremetal/v3/zones/us-east-1/server-private-networks")
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    // Nothing above left an attachment or an address behind.
    let (_, records) = sim
        .admin(Method::GET, "/_emsim/private-network-records", None)
        .await;
    assert_eq!(
        records["counts"],
        json!({"attachments": 0, "private_nics": 0, "booked_ips": 1, "allocated_ips": 0})
    );
}

#[tokio::test]
async fn booked_addresses_outlive_the_server_and_allocated_ones_do_not() {
    let sim = start().await;
    let (prod, dev) = (pn_id(&sim, "prod").await, pn_id(&sim, "dev").await);
    let id = em_server(&sim, "node-c", true).await;
    let (_, booked) = book(&sim, &prod, Some("127.80.0.77"), &[]).await;
    let booked_id = booked["id"].as_str().unwrap().to_string();
    let path = format!("{V3}/servers/{id}/private-networks");
    let (status, spn) = sim
        .post(
            &path,
            json!({"private_network_id": prod, "ipam_ip_ids": [booked_id]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{spn}");
    assert_eq!(spn["ipam_ip_ids"], json!([booked_id]));
    let (_, spn_dev) = sim.post(&path, json!({"private_network_id": dev})).await;
    let allocated = spn_dev["ipam_ip_ids"][0].as_str().unwrap().to_string();
    let (status, body) = delete(&sim, &format!("{IPAM}/ips/{booked_id}")).await;
    assert_eq!(status, StatusCode::PRECONDITION_FAILED, "attached: {body}");
    assert_eq!(body["type"], "precondition_failed");
    advance(&sim, 10.0).await;

    let (status, server) = delete(&sim, &format!("{ZONE_URL}/servers/{id}")).await;
    assert_eq!(status, StatusCode::OK, "{server}");
    let list = attachments(&sim, &format!("server_id={id}")).await;
    let statuses: Vec<&Value> = list["server_private_networks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|a| &a["status"])
        .collect();
    assert_eq!(statuses, [&json!("detaching"), &json!("detaching")]);
    advance(&sim, 6.0).await;
    let list = attachments(&sim, &format!("server_id={id}")).await;
    assert_eq!(list["total_count"], 0);
    let (status, ip) = sim.get(&format!("{IPAM}/ips/{booked_id}")).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(ip["resource"], json!(null), "booked: kept, detached");
    let (status, _) = sim.get(&format!("{IPAM}/ips/{allocated}")).await;
    assert_eq!(status, StatusCode::NOT_FOUND, "allocated: released");
    let (status, _) = delete(&sim, &format!("{IPAM}/ips/{booked_id}")).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
}

#[tokio::test]
async fn set_lists_and_pages() {
    let sim = start().await;
    let (prod, dev) = (pn_id(&sim, "prod").await, pn_id(&sim, "dev").await);
    let a = em_server(&sim, "node-d", true).await;
    let b = em_server(&sim, "node-e", true).await;
    let (status, body) = put(
        &sim,
        &format!("{V3}/servers/{a}/private-networks"),
        json!({"per_private_network_ipam_ip_ids": {prod.clone(): [], dev.clone(): []}}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(body["server_private_networks"].as_array().unwrap().len(), 2);
    advance(&sim, 1.0).await;
    let (_, on_b) = sim
        .post(
            &format!("{V3}/servers/{b}/private-networks"),
            json!({"private_network_id": prod}),
        )
        .await;
    advance(&sim, 10.0).await;

    let all = attachments(&sim, "").await;
    assert_eq!(all["total_count"], 3);
    let mut seen = Vec::new();
    for page in 1..=3 {
        let body = attachments(
            &sim,
            &format!("page={page}&page_size=1&order_by=created_at_desc"),
        )
        .await;
        assert_eq!(body["total_count"], 3);
        seen.push(body["server_private_networks"][0]["id"].clone());
    }
    assert_eq!(seen[0], on_b["id"], "newest first");
    seen.sort_by_key(|v| v.to_string());
    seen.dedup();
    assert_eq!(seen.len(), 3);
    assert_eq!(
        attachments(&sim, &format!("private_network_id={prod}")).await["total_count"],
        2
    );
    let ip = on_b["ipam_ip_ids"][0].as_str().unwrap();
    assert_eq!(
        attachments(&sim, &format!("ipam_ip_ids={ip}")).await["total_count"],
        1
    );
    assert_eq!(
        attachments(&sim, "project_id=33333333-3333-4333-8333-333333333333").await["total_count"],
        0
    );
    // VLANs differ on one server and on one network.
    let vlans: Vec<(String, String, u64)> = all["server_private_networks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| {
            (
                s["server_id"].as_str().unwrap().into(),
                s["private_network_id"].as_str().unwrap().into(),
                s["vlan"].as_u64().unwrap(),
            )
        })
        .collect();
    for (n, x) in vlans.iter().enumerate() {
        for y in &vlans[n + 1..] {
            if x.0 == y.0 || x.1 == y.1 {
                assert_ne!(x.2, y.2, "{x:?} {y:?}");
            }
        }
    }

    // PUT with only `dev`: `prod` detaches.
    let (status, body) = put(
        &sim,
        &format!("{V3}/servers/{a}/private-networks"),
        json!({"per_private_network_ipam_ip_ids": {dev.clone(): null}}),
    )
    .await;
    assert_eq!(status, StatusCode::OK, "{body}");
    assert_eq!(
        body["server_private_networks"][0]["private_network_id"],
        dev.as_str()
    );
    let on_a = attachments(&sim, &format!("server_id={a}&private_network_id={prod}")).await;
    assert_eq!(on_a["server_private_networks"][0]["status"], "detaching");
    let (_, status_page) = sim
        .get(&format!("{V3}/server-private-networks?order_by=size"))
        .await;
    assert_eq!(status_page["type"], "invalid_arguments");

    // A list fault acts on this list as on the servers'.
    let (status, _) = sim
        .admin(
            Method::POST,
            "/_emsim/faults",
            Some(json!({"kind": "list_total_count", "endpoint": "GET /baremetal/v3/zones/{zone}/server-private-networks", "delta": 2, "count": 1})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(attachments(&sim, "").await["total_count"], 5);
    assert_eq!(attachments(&sim, "").await["total_count"], 3);
}

#[tokio::test]
async fn a_fault_makes_an_attachment_end_in_error() {
    let sim = start().await;
    let (prod, dev) = (pn_id(&sim, "prod").await, pn_id(&sim, "dev").await);
    let id = em_server(&sim, "node-f", true).await;
    let (status, body) = sim
        .admin(
            Method::POST,
            "/_emsim/faults",
            Some(json!({"kind": "private_network_attach_error", "private_network": "PROD", "zone": "fr-par-2", "count": 1})),
        )
        .await;
    assert_eq!(status, StatusCode::CREATED, "{body}");
    let (status, _) = sim
        .admin(
            Method::POST,
            "/_emsim/faults",
            Some(json!({"kind": "private_network_attach_error", "zone": "mars-1"})),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    let path = format!("{V3}/servers/{id}/private-networks");
    sim.post(&path, json!({"private_network_id": dev})).await;
    let (_, failing) = sim.post(&path, json!({"private_network_id": prod})).await;
    assert_eq!(failing["status"], "attaching");
    advance(&sim, 10.0).await;
    let list = attachments(&sim, &format!("server_id={id}&private_network_id={prod}")).await;
    assert_eq!(list["server_private_networks"][0]["status"], "error");
    let list = attachments(&sim, &format!("server_id={id}&private_network_id={dev}")).await;
    assert_eq!(list["server_private_networks"][0]["status"], "attached");
    let (_, faults) = sim.admin(Method::GET, "/_emsim/faults", None).await;
    assert_eq!(faults["faults"], json!([]), "spent");
    // An attachment in error can be detached.
    let (status, _) = delete(&sim, &format!("{path}/{prod}")).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
}

#[tokio::test]
async fn admin_links_tell_talos_sim_what_to_configure() {
    let sim = start().await;
    let prod = pn_id(&sim, "prod").await;
    let id = em_server(&sim, "node-g", true).await;
    let (status, _) = sim
        .post(
            &format!("{V3}/servers/{id}/private-networks"),
            json!({"private_network_id": prod}),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (_, server) = sim.get(&format!("{ZONE_URL}/servers/{id}")).await;
    let address = server["ips"]
        .as_array()
        .unwrap()
        .iter()
        .find(|ip| ip["version"] == "IPv4")
        .unwrap()["address"]
        .as_str()
        .unwrap()
        .to_string();
    for key in [&id, &address] {
        let (status, body) = sim
            .admin(
                Method::GET,
                &format!("/_emsim/private-links?server={key}"),
                None,
            )
            .await;
        assert_eq!(status, StatusCode::OK);
        let servers = body["servers"].as_array().unwrap();
        assert_eq!(servers.len(), 1, "{body}");
        assert_eq!(servers[0]["kind"], "elastic_metal");
        assert_eq!(servers[0]["address"], address.as_str());
        assert_eq!(servers[0]["mac_address"], em_mac(&id));
        let link = &servers[0]["links"][0];
        assert_eq!(link["status"], "attaching");
        assert_eq!(link["vlan"], json!(null), "none until attached");
        assert_eq!(link["address"], "127.80.0.2/24");
        assert_eq!(link["subnet"], "127.80.0.0/24");
        assert_eq!(link["subnets"], json!(["127.80.0.0/24"]));
        assert_eq!(link["private_network_name"], "prod");
    }
    advance(&sim, 10.0).await;
    let (_, body) = sim
        .admin(
            Method::GET,
            &format!("/_emsim/private-links?server={id}"),
            None,
        )
        .await;
    assert_eq!(body["servers"][0]["links"][0]["status"], "attached");
    let list = attachments(&sim, &format!("server_id={id}")).await;
    assert_eq!(
        body["servers"][0]["links"][0]["vlan"],
        list["server_private_networks"][0]["vlan"]
    );
    assert!(
        list["server_private_networks"][0]["vlan"]
            .as_u64()
            .is_some()
    );
    let (_, records) = sim
        .admin(Method::GET, "/_emsim/private-network-records", None)
        .await;
    assert_eq!(records["counts"]["attachments"], 1);
    assert_eq!(records["counts"]["allocated_ips"], 1);
    assert_eq!(records["ips"][0]["booked"], false);
    sim.admin(Method::POST, "/_emsim/reset", None).await;
    let (_, records) = sim
        .admin(Method::GET, "/_emsim/private-network-records", None)
        .await;
    assert_eq!(
        records["counts"],
        json!({"attachments": 0, "private_nics": 0, "booked_ips": 0, "allocated_ips": 0})
    );
}
