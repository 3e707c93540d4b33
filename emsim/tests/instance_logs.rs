//! User data holds a bootstrap token: it must never reach the logs, whatever
//! the level. Alone in its binary so that its log capture sees every line.

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};

use emsim::state::DEFAULT_SECRET_KEY;
use reqwest::Method;
use serde_json::json;

#[derive(Clone, Default)]
struct Capture(Arc<Mutex<Vec<u8>>>);

impl Write for Capture {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[tokio::test]
async fn user_data_never_appears_in_logs() {
    let capture = Capture::default();
    let writer = capture.clone();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::TRACE)
        .with_writer(move || writer.clone())
        .finish();
    // The test runtime is single-threaded: the simulator's tasks log here.
    let _guard = tracing::subscriber::set_default(subscriber);
    let sim = common::start_with(emsim::Config {
        time_scale: 1000.0,
        ..emsim::Config::default()
    })
    .await;
    let zone = "/instance/v1/zones/fr-par-2";
    let (_, images) = sim.get(&format!("{zone}/images?name=talos")).await;
    let (_, created) = sim
        .post(
            &format!("{zone}/servers"),
            json!({"commercial_type": "POP2-2C-8G", "image": images["images"][0]["id"]}),
        )
        .await;
    let id = created["server"]["id"].as_str().unwrap();
    let secret = "bootstrap-token-7f3a9c";
    let url = format!("{}{zone}/servers/{id}/user_data/cloud-init", sim.base);
    let resp = sim
        .client
        .patch(&url)
        .header("X-Auth-Token", DEFAULT_SECRET_KEY)
        .header("Content-Type", "text/plain")
        .body(format!("machine:\n  token: {secret}\n"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 204);
    let resp = sim
        .client
        .get(&url)
        .header("X-Auth-Token", DEFAULT_SECRET_KEY)
        .send()
        .await
        .unwrap();
    assert!(resp.text().await.unwrap().contains(secret));
    let admin = sim
        .client
        .get(format!(
            "{}/_emsim/instance/servers/{id}/user_data/cloud-init",
            sim.base
        ))
        .send()
        .await
        .unwrap();
    assert!(admin.text().await.unwrap().contains(secret));
    sim.call(Method::DELETE, &url.replace(&sim.base, ""), None)
        .await;

    let logs = String::from_utf8(capture.0.lock().unwrap().clone()).unwrap();
    assert!(logs.contains("user data set"), "the capture works: {logs}");
    assert!(!logs.contains(secret), "{logs}");
}
