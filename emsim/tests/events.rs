//! The event stream and the boot records, through a real socket.

mod common;

use common::{ZONE_URL, start};
use reqwest::{Method, StatusCode};
use serde_json::json;

const KEY: &str =
    "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAICJEoOOgQBLJPs4g/XcPTKT82NywNPpxeuA20FlOPlpO";

#[tokio::test]
async fn rescue_reboot_is_recorded_and_streamed() {
    let sim = start().await;
    let mut events = sim.follow_events().await;
    let (_, key) = sim
        .post(
            "/iam/v1alpha1/ssh-keys",
            json!({"name": "provider", "public_key": format!("{KEY} me@host")}),
        )
        .await;
    let (_, created) = sim.create("EM-A115X-SSD", "node", &[]).await;
    let id = created["id"].as_str().unwrap();

    let delivered = events.next().await;
    assert_eq!(delivered["type"], "power_on");
    assert_eq!(delivered["boot_type"], "normal");
    assert_eq!(delivered["cause"], "deliver");
    assert_eq!(delivered["server"]["id"], id);
    assert_eq!(delivered["address"], "127.77.0.10");
    sim.wait_ready(id).await;

    let (status, rebooting) = sim
        .post(
            &format!("{ZONE_URL}/servers/{id}/reboot"),
            json!({"boot_type": "rescue", "ssh_key_ids": [key["id"]]}),
        )
        .await;
    assert_eq!(status, StatusCode::OK, "{rebooting}");
    assert_eq!(rebooting["status"], "stopping");
    assert_eq!(rebooting["rescue_server"]["user"], "rescue");

    let off = events.next().await;
    assert_eq!(off["type"], "power_off");
    assert_eq!(off["cause"], "reboot");
    assert_eq!(
        off["seq"].as_u64().unwrap(),
        delivered["seq"].as_u64().unwrap() + 1
    );
    let on = events.next().await;
    assert_eq!(on["type"], "power_on");
    assert_eq!(
        on["seq"].as_u64().unwrap(),
        off["seq"].as_u64().unwrap() + 1
    );
    assert_eq!(on["boot_type"], "rescue");
    assert_eq!(on["cause"], "reboot");
    assert_eq!(on["rescue_user"], "rescue");
    assert_eq!(on["rescue_ssh_public_keys"], json!([KEY]));
    assert_eq!(on["address"], "127.77.0.10");
    assert_eq!(on["offer"]["name"], "EM-A115X-SSD");
    assert_eq!(on["offer"]["disks"][0]["type"], "SSD");
    assert_eq!(on["server"]["status"], "ready");
    assert_eq!(on["server"]["boot_type"], "rescue");
    assert_eq!(on["server"]["rescue_server"], rebooting["rescue_server"]);
    // The event carries the server exactly as GET returns it.
    let (_, now) = sim.get(&format!("{ZONE_URL}/servers/{id}")).await;
    assert_eq!(on["server"], now);

    let (_, admin) = sim.admin(Method::GET, "/_emsim/servers", None).await;
    let history = &admin["servers"][0]["boot_history"];
    assert_eq!(history.as_array().unwrap().len(), 1);
    assert_eq!(history[0]["boot_type"], "rescue");
    assert_eq!(history[0]["ssh_key_ids"], json!([key["id"]]));
    assert_eq!(history[0]["at"], rebooting["updated_at"]);
    assert_eq!(admin["servers"][0]["powered_on"], true);
    // The Server JSON is at the top level of each record.
    assert_eq!(admin["servers"][0]["id"], id);
    assert_eq!(admin["servers"][0]["offer_name"], "EM-A115X-SSD");
    assert_eq!(admin["servers"][0]["boot_type"], "rescue");
    assert_eq!(admin["servers"][0]["address"], "127.77.0.10");
}

#[tokio::test]
async fn a_new_follower_first_gets_the_servers_that_are_on() {
    let sim = start().await;
    let (_, on) = sim.create("EM-A115X-SSD", "on", &[]).await;
    let (_, off) = sim.create("EM-A115X-SSD", "off", &[]).await;
    let on_id = on["id"].as_str().unwrap();
    let off_id = off["id"].as_str().unwrap();
    sim.wait_ready(on_id).await;
    sim.wait_ready(off_id).await;
    let (status, _) = sim
        .post(&format!("{ZONE_URL}/servers/{off_id}/stop"), json!({}))
        .await;
    assert_eq!(status, StatusCode::OK);
    sim.wait_server(off_id, |_, b| b["status"] == "stopped")
        .await;

    let mut events = sim.follow_events().await;
    let first = events.next().await;
    assert_eq!(first["type"], "power_on");
    assert_eq!(first["server"]["id"], on_id);
    assert_eq!(first["address"], "127.77.0.10");

    // Then live events only: nothing about the stopped server was replayed.
    let (_, _) = sim
        .call(Method::DELETE, &format!("{ZONE_URL}/servers/{on_id}"), None)
        .await;
    let power_off = events.next().await;
    assert_eq!(
        (
            power_off["type"].as_str(),
            power_off["server"]["id"].as_str()
        ),
        (Some("power_off"), Some(on_id))
    );
    assert!(power_off["seq"].as_u64() > first["seq"].as_u64());
    let deleted = events.next().await;
    assert_eq!(deleted["type"], "deleted");
    assert_eq!(deleted["server"]["id"], on_id);
    assert_eq!(deleted["address"], "127.77.0.10");
}

#[tokio::test]
async fn clock_advance_delivers_without_waiting() {
    let sim = common::start_with(emsim::Config::default()).await; // real time
    let (_, created) = sim.create("EM-I215E-NVME", "slow", &[]).await;
    let id = created["id"].as_str().unwrap();
    let (_, still) = sim.get(&format!("{ZONE_URL}/servers/{id}")).await;
    assert_eq!(still["status"], "delivering");
    let (status, _) = sim
        .admin(
            Method::POST,
            "/_emsim/clock/advance",
            Some(json!({"seconds": 300})),
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    let (_, ready) = sim.get(&format!("{ZONE_URL}/servers/{id}")).await;
    assert_eq!(ready["status"], "ready");
}
