//! The VM follower against a fake admin list: each request gets the next
//! answer of a script (an error first, then listings), the last one again
//! and again. The follower reads one listing fully before asking for the
//! next, so a request served after the script ended means every listing of
//! the script was handled: no waiting on time.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use talos_sim::follower::EventSink;
use talos_sim::instance::follower::follow;
use talos_sim::model::{Command, Platform};
use tokio::sync::Notify;

#[derive(Default, Clone)]
struct Recorder(Arc<Mutex<Vec<String>>>);

impl EventSink for Recorder {
    async fn handle(&self, command: Command) {
        let entry = match command {
            Command::PowerOn(on) => match on.platform {
                Platform::Scaleway(vm) => format!("power_on {} boot {}", on.server_id, vm.boot),
                Platform::Metal => format!("power_on {} metal", on.server_id),
            },
            Command::PowerOff { server_id, .. } => format!("power_off {server_id}"),
            Command::Deleted { server_id } => format!("deleted {server_id}"),
        };
        self.0.lock().unwrap().push(entry);
    }
}

struct Script {
    answers: Vec<Option<Value>>,
    served: AtomicUsize,
    /// Woken at every request.
    asked: Notify,
}

async fn list(State(s): State<Arc<Script>>) -> Response {
    let n = s.served.fetch_add(1, Ordering::SeqCst);
    s.asked.notify_waiters();
    match &s.answers[n.min(s.answers.len() - 1)] {
        Some(listing) => Json(listing.clone()).into_response(),
        None => (StatusCode::INTERNAL_SERVER_ERROR, "boom").into_response(),
    }
}

fn vm(id: &str, state: &str, actions: &[&str]) -> Value {
    json!({
        "id": id, "name": id, "hostname": id, "zone": "fr-par-2", "state": state,
        "arch": "x86_64", "commercial_type": "POP2-2C-8G",
        "image": {"id": "img", "name": "talos-v1.11.5-amd64"}, "address": "127.77.0.30",
        "actions": actions.iter().map(|a| json!({"at": "2026-11-22T10:00:00.000000Z", "action": a}))
            .collect::<Vec<_>>(),
        "hardware": {"ncpus": 2, "ram": 8_589_934_592u64, "gpu": 0, "gpu_info": null,
                     "root_volume_size": 10_000_000_000u64},
    })
}

fn listing(servers: Vec<Value>) -> Option<Value> {
    Some(json!({ "servers": servers }))
}

#[tokio::test]
async fn follows_vms_through_the_admin_list() {
    let script = Arc::new(Script {
        answers: vec![
            None,
            listing(vec![vm("a", "stopped", &["create"])]),
            listing(vec![
                vm("a", "running", &["create", "poweron"]),
                vm("b", "starting", &["create", "poweron"]),
            ]),
            listing(vec![
                vm("a", "running", &["create", "poweron"]),
                vm("b", "running", &["create", "poweron"]),
            ]),
            listing(vec![
                vm("a", "running", &["create", "poweron", "reboot"]),
                vm("b", "stopping", &["create", "poweron", "terminate"]),
            ]),
            listing(vec![vm("a", "running", &["create", "poweron", "reboot"])]),
        ],
        served: AtomicUsize::new(0),
        asked: Notify::new(),
    });
    let app = axum::Router::new()
        .route("/_emsim/instance/servers", axum::routing::get(list))
        .with_state(script.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}/", listener.local_addr().unwrap());
    tokio::spawn(async move { axum::serve(listener, app).await });

    let recorder = Recorder::default();
    let sink = recorder.clone();
    let follower = tokio::spawn(async move { follow(&url, &sink, Duration::from_millis(1)).await });
    // Two requests past the script: its last listing was handled, and
    // handled again without any change.
    let enough = script.answers.len() + 2;
    while script.served.load(Ordering::SeqCst) < enough {
        let asked = script.asked.notified();
        if script.served.load(Ordering::SeqCst) >= enough {
            break;
        }
        tokio::time::timeout(Duration::from_secs(10), asked)
            .await
            .expect("the follower keeps asking");
    }
    follower.abort();
    assert_eq!(
        *recorder.0.lock().unwrap(),
        vec![
            "power_on a boot 1",
            "power_on b boot 1",
            "power_on a boot 2",
            "power_off b",
            "deleted b",
        ]
    );
}
