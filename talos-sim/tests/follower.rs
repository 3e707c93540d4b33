//! The event follower against a fake NDJSON server: it reads events in
//! order across chunk boundaries, skips bad lines, and reconnects when emsim
//! closes the stream.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use talos_sim::follower::{EventSink, follow};
use talos_sim::model::{BootType, Command};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

#[derive(Default, Clone)]
struct Recorder(Arc<Mutex<Vec<String>>>);

impl EventSink for Recorder {
    async fn handle(&self, command: Command) {
        let entry = match command {
            Command::PowerOn(on) => format!(
                "power_on {} {} {} {}",
                on.server_id,
                if on.boot_type == BootType::Rescue {
                    "rescue"
                } else {
                    "normal"
                },
                on.address,
                on.machine.disk_name
            ),
            Command::PowerOff { server_id, .. } => format!("power_off {server_id}"),
            Command::Deleted { server_id } => format!("deleted {server_id}"),
        };
        self.0.lock().unwrap().push(entry);
    }
}

fn event(seq: u64, kind: &str, id: &str, boot: &str) -> String {
    let offer = r#"{"name":"EM-A115X-SSD","disks":[{"capacity":1024209543168,"type":"SSD"}],"cpus":[{"name":"Xeon","core_count":4,"thread_count":4}],"memories":[{"capacity":34359738368}]}"#;
    format!(
        r#"{{"seq":{seq},"type":"{kind}","at":"2026-11-22T10:00:00.000000Z","server":{{"id":"{id}","name":"n","status":"ready","ips":[]}},"boot_type":"{boot}","address":"127.77.0.10","rescue_ssh_public_keys":[],"rescue_user":"rescue","offer":{offer}}}"#
    ) + "\n"
}

/// Answers each connection with the next script: the lines to send (each
/// write separately) and whether to keep the connection open afterwards.
async fn fake_emsim(scripts: Vec<(Vec<String>, bool)>) -> (String, Arc<Mutex<Vec<String>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let paths = Arc::new(Mutex::new(Vec::new()));
    let seen = paths.clone();
    tokio::spawn(async move {
        for (writes, keep_open) in scripts {
            let (mut conn, _) = listener.accept().await.unwrap();
            let mut request = vec![0u8; 4096];
            let n = conn.read(&mut request).await.unwrap();
            let first = String::from_utf8_lossy(&request[..n])
                .lines()
                .next()
                .unwrap_or("")
                .to_string();
            seen.lock().unwrap().push(first);
            conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Type: application/x-ndjson\r\nConnection: close\r\n\r\n")
                .await
                .unwrap();
            for w in writes {
                conn.write_all(w.as_bytes()).await.unwrap();
                conn.flush().await.unwrap();
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            if keep_open {
                tokio::time::sleep(Duration::from_secs(3600)).await;
            }
        }
    });
    (url, paths)
}

#[tokio::test]
async fn follows_reconnects_and_skips_bad_lines() {
    let first = event(1, "power_on", "s1", "rescue");
    let (head, tail) = first.split_at(40);
    let scripts = vec![
        (
            vec![
                head.to_string(),
                tail.to_string() + &event(2, "power_off", "s1", "rescue"),
                "this is not json\n".to_string(),
                event(3, "exploded", "s1", "normal"),
            ],
            false,
        ),
        (
            vec![
                event(4, "power_on", "s1", "normal"),
                event(5, "deleted", "s1", "normal"),
            ],
            true,
        ),
    ];
    let (url, requests) = fake_emsim(scripts).await;
    let recorder = Recorder::default();
    let sink = recorder.clone();
    let follower = tokio::spawn(async move { follow(&format!("{url}/"), &sink).await });

    let want = vec![
        "power_on s1 rescue 127.77.0.10 sda".to_string(),
        "power_off s1".to_string(),
        "power_on s1 normal 127.77.0.10 sda".to_string(),
        "deleted s1".to_string(),
    ];
    for _ in 0..100 {
        if recorder.0.lock().unwrap().len() >= want.len() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    follower.abort();
    assert_eq!(*recorder.0.lock().unwrap(), want);
    let requests = requests.lock().unwrap().clone();
    assert_eq!(requests, vec!["GET /_emsim/events HTTP/1.1".to_string(); 2]);
}
