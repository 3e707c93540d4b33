//! A simulator on an ephemeral loopback port, and a small client for it.

#![allow(dead_code)]

pub mod pn;

use std::time::Duration;

use emsim::catalog::Catalog;
use emsim::state::{DEFAULT_PROJECT_ID, DEFAULT_SECRET_KEY};
use emsim::{AppState, Config};
use futures::StreamExt;
use reqwest::{Method, StatusCode};
use serde_json::{Value, json};

pub const ZONE_URL: &str = "/baremetal/v1/zones/fr-par-2";

pub struct Sim {
    pub base: String,
    pub client: reqwest::Client,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for Sim {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Seeded catalog, everything 1000x faster than real time.
pub async fn start() -> Sim {
    start_with(Config {
        time_scale: 0.001,
        ..Config::default()
    })
    .await
}

pub async fn start_with_catalog(time_scale: f64, catalog: &str) -> Sim {
    start_with(Config {
        time_scale,
        catalog: Catalog::parse(catalog).expect("test catalog"),
        ..Config::default()
    })
    .await
}

pub async fn start_with(config: Config) -> Sim {
    // Several tests race to install it; any winner is fine.
    let _ = rustls::crypto::ring::default_provider().install_default();
    let state = AppState::new(config).expect("valid config");
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let base = format!("http://{}", listener.local_addr().expect("addr"));
    let task = tokio::spawn(async move {
        emsim::serve(listener, state).await.expect("serve");
    });
    Sim {
        base,
        client: reqwest::Client::builder()
            .timeout(Duration::from_secs(10))
            .build()
            .expect("client"),
        task,
    }
}

impl Sim {
    /// An authenticated API call; returns status and JSON body (Null if empty).
    pub async fn call(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        self.call_with_token(method, path, body, Some(DEFAULT_SECRET_KEY))
            .await
    }

    pub async fn call_with_token(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
        token: Option<&str>,
    ) -> (StatusCode, Value) {
        let mut req = self.client.request(method, format!("{}{path}", self.base));
        if let Some(token) = token {
            req = req.header("X-Auth-Token", token);
        }
        if let Some(body) = body {
            req = req.json(&body);
        }
        let resp = req.send().await.expect("request");
        let status = resp.status();
        let bytes = resp.bytes().await.expect("body");
        let value = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).expect("JSON body")
        };
        (status, value)
    }

    pub async fn get(&self, path: &str) -> (StatusCode, Value) {
        self.call(Method::GET, path, None).await
    }

    pub async fn post(&self, path: &str, body: Value) -> (StatusCode, Value) {
        self.call(Method::POST, path, Some(body)).await
    }

    /// Hourly offer id by name in fr-par-2.
    pub async fn offer_id(&self, name: &str) -> String {
        let (status, list) = self.get(&format!("{ZONE_URL}/offers?name={name}")).await;
        assert_eq!(status, StatusCode::OK, "{list}");
        list["offers"][0]["id"]
            .as_str()
            .unwrap_or_else(|| panic!("offer {name}: {list}"))
            .to_string()
    }

    pub async fn create(&self, offer: &str, name: &str, tags: &[&str]) -> (StatusCode, Value) {
        let offer_id = self.offer_id(offer).await;
        self.post(
            &format!("{ZONE_URL}/servers"),
            json!({
                "offer_id": offer_id, "project_id": DEFAULT_PROJECT_ID, "name": name,
                "description": "", "tags": tags, "install": null
            }),
        )
        .await
    }

    /// Polls a server until `done` holds for its (status, body), within 10 s real.
    pub async fn wait_server(
        &self,
        id: &str,
        done: impl Fn(StatusCode, &Value) -> bool,
    ) -> (StatusCode, Value) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
        loop {
            let (status, body) = self.get(&format!("{ZONE_URL}/servers/{id}")).await;
            if done(status, &body) {
                return (status, body);
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "server {id} stuck at {status} {body}"
            );
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    }

    pub async fn wait_ready(&self, id: &str) -> Value {
        self.wait_server(id, |s, b| s == StatusCode::OK && b["status"] == "ready")
            .await
            .1
    }

    pub async fn admin(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
    ) -> (StatusCode, Value) {
        self.call_with_token(method, path, body, None).await
    }

    pub async fn follow_events(&self) -> EventFollower {
        let resp = self
            .client
            .get(format!("{}/_emsim/events", self.base))
            .timeout(Duration::from_secs(3600))
            .send()
            .await
            .expect("events");
        assert_eq!(resp.status(), StatusCode::OK);
        assert_eq!(resp.headers()["content-type"], "application/x-ndjson");
        EventFollower {
            stream: Box::pin(resp.bytes_stream()),
            buffer: Vec::new(),
        }
    }
}

pub struct EventFollower {
    stream: futures::stream::BoxStream<'static, reqwest::Result<bytes::Bytes>>,
    buffer: Vec<u8>,
}

impl EventFollower {
    /// The next event, within 10 s real.
    pub async fn next(&mut self) -> Value {
        tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                if let Some(pos) = self.buffer.iter().position(|&b| b == b'\n') {
                    let line: Vec<u8> = self.buffer.drain(..=pos).collect();
                    return serde_json::from_slice(&line).expect("one JSON object per line");
                }
                let chunk = self
                    .stream
                    .next()
                    .await
                    .expect("stream open")
                    .expect("chunk");
                self.buffer.extend_from_slice(&chunk);
            }
        })
        .await
        .expect("an event within 10 s")
    }
}
