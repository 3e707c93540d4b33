//! Reboots driven through emsim's API: emsim runs in-process on a fast
//! clock, talos-sim follows its event stream and its VM list, and the
//! kubelet stand-in talks to the fake API server of `common::apiserver`.
//! A joined node (Elastic Metal or Instance) comes back from a reboot with a
//! new bootID, Ready, its pods running again, without its bootstrap token;
//! and the faults of a running node behave as the README says.

mod common;

use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use common::apiserver::{Fake, GOOD_TOKEN, fake_apiserver};
use common::*;
use emsim::state::DEFAULT_SECRET_KEY;
use serde_json::{Value, json};
use talos_sim::disk::Disk;
use talos_sim::image::Compression;
use talos_sim::instance::metadata::Metadata;
use talos_sim::manager::Simulator;
use talos_sim::os::Settings;
use talos_sim::records::{KubeletReport, OsState, ServerRecord};
use tokio::task::JoinHandle;
use tower::ServiceExt;

const EM: &str = "/baremetal/v1/zones/fr-par-2";
const VM: &str = "/instance/v1/zones/fr-par-2";
/// The node name the fixture's `HostnameConfig` gives.
const NODE: &str = "default-abcde";
const DISK: u64 = 64 << 20;
/// The kubelet's heartbeat in these tests (a kubelet's is 10 s).
const HEARTBEAT: Duration = Duration::from_millis(200);
/// emsim's clock: a 12 s Elastic Metal boot takes 120 ms, a VM's 10 s 100 ms.
const TIME_SCALE: f64 = 0.01;

const CATALOG: &str = r#"
offers:
  - name: EM-REBOOT
    zones: [fr-par-2]
    price_per_hour: 0.1
    delivery: 1
    boot: 12
    disks: [{capacity: 67108864, type: NVMe}]
    cpus: [{name: AMD EPYC 7313P, core_count: 16, thread_count: 32, frequency: 3000}]
    memories: [{capacity: 68719476736, type: DDR4, frequency: 3200, is_ecc: true}]
"#;

/// emsim, talos-sim following it, and the fake API server, on addresses of
/// their own (`127.96.<net>.x` for the servers, `127.97.<net>.50` for the
/// API server).
struct Stack {
    emsim: String,
    http: reqwest::Client,
    sim: Arc<Simulator>,
    fake: Arc<Fake>,
    api_url: String,
    ca_pem: String,
    dir: tempfile::TempDir,
    tasks: Vec<JoinHandle<()>>,
}

impl Drop for Stack {
    fn drop(&mut self) {
        for task in &self.tasks {
            task.abort();
        }
    }
}

async fn stack(net: u8) -> Stack {
    talos_sim::install_crypto_provider();
    let (fake, api_url, ca_pem) = fake_apiserver(Ipv4Addr::new(127, 97, net, 50)).await;
    let state = emsim::AppState::new(emsim::Config {
        time_scale: TIME_SCALE,
        ip_range: format!("127.96.{net}.0/24").parse().unwrap(),
        catalog: emsim::catalog::Catalog::parse(CATALOG).unwrap(),
        ..emsim::Config::default()
    })
    .unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let emsim = format!("http://{}", listener.local_addr().unwrap());
    let mut tasks = vec![tokio::spawn(async move {
        emsim::serve(listener, state).await.unwrap();
    })];
    let dir = tempfile::tempdir().unwrap();
    let sim = Simulator::new(Settings {
        ssh_port: 2225,
        talos_port: 50004,
        metadata: Some(Metadata::new(&emsim).unwrap()),
        kubelet_heartbeat: HEARTBEAT,
        ..Settings::new(dir.path())
    });
    let (url, follower) = (emsim.clone(), sim.clone());
    tasks.push(tokio::spawn(async move {
        talos_sim::follower::follow(&url, &*follower).await
    }));
    let (url, follower) = (emsim.clone(), sim.clone());
    tasks.push(tokio::spawn(async move {
        talos_sim::instance::follower::follow(&url, &*follower, Duration::from_millis(50)).await
    }));
    Stack {
        emsim,
        http: reqwest::Client::builder()
            .no_proxy()
            .timeout(Duration::from_secs(10))
            .build()
            .unwrap(),
        sim,
        fake,
        api_url,
        ca_pem,
        dir,
        tasks,
    }
}

impl Stack {
    /// A Scaleway API call; status and JSON body (`Null` when empty).
    async fn api(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> (u16, Value) {
        let mut req = self
            .http
            .request(method, format!("{}{path}", self.emsim))
            .header("X-Auth-Token", DEFAULT_SECRET_KEY);
        if let Some(body) = body {
            req = req.json(&body);
        }
        let resp = req.send().await.unwrap();
        let status = resp.status().as_u16();
        let bytes = resp.bytes().await.unwrap();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    async fn post(&self, path: &str, body: Value) -> Value {
        let (status, answer) = self.api(reqwest::Method::POST, path, Some(body)).await;
        assert!(
            (200..300).contains(&status),
            "POST {path}: {status} {answer}"
        );
        answer
    }

    async fn get(&self, path: &str) -> Value {
        let (status, answer) = self.api(reqwest::Method::GET, path, None).await;
        assert_eq!(status, 200, "GET {path}: {answer}");
        answer
    }

    /// The worker fixture pointed at the fake API server, for `provider_id`.
    fn config(&self, provider_id: &str) -> String {
        let yaml = WORKER_YAML
            .replace("https://127.0.0.1:6443", &self.api_url)
            .replace(
                "token: k8sabc.0123456789abcdef",
                &format!("token: {GOOD_TOKEN}"),
            )
            .replace(
                "  ca:\n    crt: LS0tLS1CRUdJTi==\n    key: \"\"\n---",
                &format!(
                    "  ca:\n    crt: {}\n    key: \"\"\n---",
                    B64.encode(&self.ca_pem)
                ),
            )
            .replace(
                "scaleway://baremetal/fr-par-2/11111111-2222-3333-4444-555555555555",
                provider_id,
            );
        assert!(
            yaml.contains(&self.api_url) && yaml.contains(provider_id),
            "fixture changed"
        );
        yaml
    }

    async fn record(&self, id: &str) -> ServerRecord {
        self.sim
            .records()
            .await
            .into_iter()
            .find(|r| r.id == id)
            .expect("a record")
    }

    async fn wait_record(
        &self,
        what: &str,
        id: &str,
        done: impl Fn(&ServerRecord) -> bool,
    ) -> ServerRecord {
        wait_for(what, || self.sim.records(), |r| r.id == id && done(r)).await
    }

    /// Waits until the API server got a status report `done` accepts.
    async fn wait_report(&self, what: &str, done: impl Fn(&Report) -> bool) -> Report {
        let mut found = None;
        wait_until(what, || {
            found = self.reports().into_iter().find(|r| done(r));
            found.is_some()
        })
        .await;
        found.unwrap()
    }

    fn reports(&self) -> Vec<Report> {
        let reports = self.fake.seen.lock().unwrap().reports();
        reports
            .into_iter()
            .map(|(ready, reason, message, boot_id)| Report {
                ready,
                reason,
                message,
                boot_id,
            })
            .collect()
    }

    fn leases(&self) -> usize {
        self.fake.seen.lock().unwrap().leases.len()
    }

    /// Orders an Elastic Metal server and waits for its first boot, which
    /// finds a blank disk; then puts Talos and the node's config on that
    /// disk as an install would, and reboots it through emsim: the kubelet
    /// joins with the bootstrap token. Returns the server id and its boot id.
    async fn joined_em_node(&self, name: &str) -> (String, String) {
        let offers = self.get(&format!("{EM}/offers?name=EM-REBOOT")).await;
        let offer_id = offers["offers"][0]["id"].as_str().unwrap().to_string();
        let server = self
            .post(
                &format!("{EM}/servers"),
                json!({"offer_id": offer_id, "name": name}),
            )
            .await;
        let id = server["id"].as_str().unwrap().to_string();
        self.wait_record("the first boot", &id, |r| {
            r.state == OsState::NoBootableDevice
        })
        .await;
        let disk = Disk::new(self.dir.path(), &id, "nvme0n1", DISK);
        disk.ensure().unwrap();
        let img = image("v1.13.9", 8 << 20, Compression::None);
        let mut bytes = std::fs::read(&disk.path).unwrap();
        bytes[..img.len()].copy_from_slice(&img);
        std::fs::write(&disk.path, bytes).unwrap();
        disk.install_config(&self.config(&format!("scaleway://baremetal/fr-par-2/{id}")))
            .unwrap();
        self.reboot_em(&id).await;
        let joined = self
            .wait_record("the kubelet to join", &id, |r| {
                r.kubelet == Some(KubeletReport::Ready)
            })
            .await;
        let boot_id = joined.boot_id.unwrap();
        self.wait_report("a Ready report of the first boot", |r| {
            r.is_ready_in(&boot_id)
        })
        .await;
        // What the provider and core do once the node joined: the token is
        // deleted, the registration taint removed.
        self.fake.revoke_token();
        self.fake
            .edit_node(NODE, |n| n["spec"]["taints"] = json!([]));
        (id, boot_id)
    }

    /// `POST .../reboot {"boot_type": "normal"}`; the server as answered.
    async fn reboot_em(&self, id: &str) -> Value {
        self.post(
            &format!("{EM}/servers/{id}/reboot"),
            json!({"boot_type": "normal"}),
        )
        .await
    }

    /// Reboots and waits until the kubelet of a boot after `old` reported;
    /// that boot's id.
    async fn reboot_and_wait(&self, id: &str, old: &str) -> String {
        self.reboot_em(id).await;
        let back = self
            .wait_record("the next boot's kubelet", id, |r| {
                r.boot_id.as_deref().is_some_and(|b| b != old) && r.kubelet.is_some()
            })
            .await;
        let boot_id = back.boot_id.unwrap();
        self.wait_report("a report of the new boot", |r| r.boot_id == boot_id)
            .await;
        boot_id
    }

    /// Calls talos-sim's admin API; status and JSON body.
    async fn admin(&self, method: Method, path: &str, body: Option<Value>) -> (StatusCode, Value) {
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header("content-type", "application/json")
            .body(body.map_or_else(Body::empty, |b| Body::from(b.to_string())))
            .unwrap();
        let response = talos_sim::admin::app(self.sim.clone())
            .oneshot(request)
            .await
            .unwrap();
        let status = response.status();
        let bytes = axum::body::to_bytes(response.into_body(), 1 << 20)
            .await
            .unwrap();
        (
            status,
            serde_json::from_slice(&bytes).unwrap_or(Value::Null),
        )
    }

    async fn arm(&self, fault: Value) -> Value {
        let (status, body) = self
            .admin(Method::POST, "/_talossim/faults", Some(fault))
            .await;
        assert_eq!(status, StatusCode::CREATED, "{body}");
        body
    }

    /// The reports of `boot_id`, once at least `n` of them arrived.
    async fn reports_of(&self, boot_id: &str, n: usize) -> Vec<Report> {
        let of = |all: Vec<Report>| -> Vec<Report> {
            all.into_iter().filter(|r| r.boot_id == boot_id).collect()
        };
        wait_until(&format!("{n} reports of boot {boot_id}"), || {
            of(self.reports()).len() >= n
        })
        .await;
        of(self.reports())
    }
}

/// One status report as the API server received it.
#[derive(Debug, Clone, PartialEq)]
struct Report {
    ready: String,
    reason: String,
    message: String,
    boot_id: String,
}

impl Report {
    fn is_ready_in(&self, boot_id: &str) -> bool {
        self.ready == "True" && self.boot_id == boot_id
    }
}

fn pod_restarts(pod: &Value) -> i64 {
    pod["status"]["containerStatuses"][0]["restartCount"]
        .as_i64()
        .unwrap_or(-1)
}

fn pod_ready(pod: &Value) -> bool {
    pod["status"]["phase"] == "Running"
        && pod["status"]["conditions"].as_array().is_some_and(|c| {
            c.iter()
                .any(|c| c["type"] == "Ready" && c["status"] == "True")
        })
}

/// Observes `window` and returns how many status reports and Lease
/// renewals arrived meanwhile: for the faults that must silence a node,
/// which no bounded wait on a condition can show.
async fn quiet_over(s: &Stack, window: Duration) -> (usize, usize) {
    let (reports, leases) = (s.reports().len(), s.leases());
    tokio::time::sleep(window).await;
    (s.reports().len() - reports, s.leases() - leases)
}

/// Waits (at most 10 s) for two heartbeats without a report or a renewal:
/// a request already on its way when the node fell silent has landed.
/// A kubelet that still posts never gets there.
async fn settle_quiet(s: &Stack) {
    for _ in 0..25 {
        if quiet_over(s, HEARTBEAT * 2).await == (0, 0) {
            return;
        }
    }
    panic!("the node kept posting: {:?}", s.reports().last());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_em_node_rebooted_through_emsim_comes_back_with_a_new_boot_id_and_its_pods() {
    let s = stack(1).await;
    s.fake.add_pod("web", NODE, "Always");
    s.fake.add_pod("once", NODE, "Never");
    let (id, first) = s.joined_em_node("node-a").await;
    wait_until("the pods to run", || {
        pod_ready(&s.fake.pod("web")) && pod_ready(&s.fake.pod("once"))
    })
    .await;
    assert_eq!(pod_restarts(&s.fake.pod("web")), 0);

    let before = s.get(&format!("{EM}/servers/{id}")).await;
    let called = s.reboot_em(&id).await;
    assert_eq!(called["status"], "stopping");
    assert_ne!(
        called["updated_at"], before["updated_at"],
        "a reboot call changes updated_at: the provider's proof that it landed"
    );

    let back = s
        .wait_report("Ready with a new bootID", |r| {
            r.ready == "True" && !r.boot_id.is_empty() && r.boot_id != first
        })
        .await;
    wait_until("the pod to run again", || {
        let web = s.fake.pod("web");
        pod_ready(&web) && pod_restarts(&web) == 1
    })
    .await;
    let web = s.fake.pod("web");
    let lost = &web["status"]["containerStatuses"][0]["lastState"]["terminated"];
    assert_eq!(
        (lost["exitCode"].as_i64(), lost["reason"].as_str()),
        (Some(255), Some("Unknown"))
    );
    let once = s.fake.pod("once");
    assert_eq!(
        once["status"]["phase"], "Failed",
        "restartPolicy Never: {once}"
    );

    // The old kubelet went quiet at the power-off: once the new boot
    // reports, the old one never does again.
    let ids: Vec<String> = s.reports().into_iter().map(|r| r.boot_id).collect();
    let switch = ids.iter().position(|b| *b == back.boot_id).unwrap();
    assert!(ids[..switch].iter().all(|b| *b == first), "{ids:?}");
    assert!(ids[switch..].iter().all(|b| *b == back.boot_id), "{ids:?}");
    {
        let seen = s.fake.seen.lock().unwrap();
        assert_eq!(seen.csrs.len(), 1, "the kept certificate, no token");
        assert_eq!(seen.node_creates, 1, "the Node is adopted, not created");
    }
    let node = s.fake.node(NODE).unwrap();
    assert_eq!(
        node["spec"]["taints"],
        json!([]),
        "no registration taint again"
    );
    assert_eq!(node["status"]["nodeInfo"]["bootID"], back.boot_id.as_str());

    // What a test reads in talos-sim's records, over the admin API.
    let (_, records) = s.admin(Method::GET, "/_talossim/servers", None).await;
    let r = records
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["id"] == id.as_str())
        .unwrap();
    assert_eq!(r["boot_id"], back.boot_id.as_str());
    assert_eq!(r["kubelet"], "ready");
    assert_eq!(r["state"], "running");
    let off = r["power_offs"].as_array().unwrap().last().unwrap();
    assert_eq!(
        (off["cause"].as_str(), off["boot_id"].as_str()),
        (Some("reboot"), Some(first.as_str()))
    );
    let boot = r["boots"].as_array().unwrap().last().unwrap();
    assert_eq!(boot["boot_id"], back.boot_id.as_str());
    assert_eq!(
        (boot["boot_type"].as_str(), boot["cause"].as_str()),
        (Some("normal"), Some("reboot"))
    );
    assert!(boot["kubelet_joined_at"].is_string());
    assert_eq!(r["faults_fired"], json!([]));

    let after = s.get(&format!("{EM}/servers/{id}")).await;
    assert_eq!(after["status"], "ready");
    assert_ne!(
        after["updated_at"], called["updated_at"],
        "and again when it is ready"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_ready_and_silent_until_reboot_last_until_the_next_boot() {
    let s = stack(2).await;
    let (id, b1) = s.joined_em_node("node-b").await;

    // not_ready_until_reboot, aimed by node name: NotReady at once, same
    // boot, the Lease still renewed.
    let fault = s
        .arm(json!({"kind": "not_ready_until_reboot", "node_name": NODE}))
        .await;
    assert_eq!(fault["node_name"], NODE);
    let down = s
        .wait_report("a NotReady report", |r| r.ready == "False")
        .await;
    assert_eq!(
        (
            down.reason.as_str(),
            down.message.as_str(),
            down.boot_id.as_str()
        ),
        ("KubeletNotReady", "container runtime is down", b1.as_str())
    );
    let leases = s.leases();
    wait_until("a Lease renewal while NotReady", || s.leases() > leases).await;
    let r = s.record(&id).await;
    assert_eq!(r.kubelet, Some(KubeletReport::NotReady));
    assert_eq!(r.faults_fired[0].kind, "not_ready_until_reboot");
    assert_eq!(r.faults_fired[0].boot_id.as_deref(), Some(b1.as_str()));

    let b2 = s.reboot_and_wait(&id, &b1).await;
    let reports = s.reports_of(&b2, 5).await;
    assert!(
        reports.iter().all(|r| r.ready == "True"),
        "cleared by the reboot: {reports:?}"
    );

    // silent_until_reboot: no status, no Lease until the next boot.
    s.arm(json!({"kind": "silent_until_reboot", "server_id": id}))
        .await;
    s.wait_record("the kubelet to go silent", &id, |r| {
        r.kubelet == Some(KubeletReport::Silent)
    })
    .await;
    settle_quiet(&s).await;
    let (posts, renewals) = quiet_over(&s, HEARTBEAT * 10).await;
    assert_eq!((posts, renewals), (0, 0), "a wedged node posts nothing");
    let r = s.record(&id).await;
    assert_eq!(r.state, OsState::Running);
    assert!(r.boot_error.unwrap().contains("silent_until_reboot"));

    let b3 = s.reboot_and_wait(&id, &b2).await;
    let leases = s.leases();
    wait_until("Lease renewals again", || s.leases() > leases).await;
    let reports = s.reports_of(&b3, 3).await;
    assert!(reports.iter().all(|r| r.ready == "True"), "{reports:?}");
    let (_, faults) = s.admin(Method::GET, "/_talossim/faults", None).await;
    let fired: Vec<(u64, u64)> = faults
        .as_array()
        .unwrap()
        .iter()
        .map(|f| {
            (
                f["fired"].as_u64().unwrap(),
                f["remaining"].as_u64().unwrap(),
            )
        })
        .collect();
    assert_eq!(fired, vec![(1, 0), (1, 0)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reboot_never_returns_and_unhealthy_after_every_boot() {
    let s = stack(3).await;
    let (id, b1) = s.joined_em_node("node-c").await;

    // The next reboot never brings the OS back: emsim says ready, nothing
    // reports, the Node keeps the old bootID.
    s.arm(json!({"kind": "reboot_never_returns", "node_name": NODE}))
        .await;
    s.reboot_em(&id).await;
    let hung = s
        .wait_record("the hung boot", &id, |r| {
            r.faults_fired
                .iter()
                .any(|f| f.kind == "reboot_never_returns")
        })
        .await;
    let hung_boot = hung.boot_id.clone().unwrap();
    assert_ne!(hung_boot, b1);
    assert_eq!(hung.kubelet, None);
    assert_eq!(hung.state, OsState::Off);
    assert!(hung.boot_error.unwrap().contains("reboot_never_returns"));
    settle_quiet(&s).await;
    let (posts, renewals) = quiet_over(&s, HEARTBEAT * 10).await;
    assert_eq!((posts, renewals), (0, 0));
    assert_eq!(
        s.get(&format!("{EM}/servers/{id}")).await["status"],
        "ready"
    );
    let node = s.fake.node(NODE).unwrap();
    assert_eq!(node["status"]["nodeInfo"]["bootID"], b1.as_str());
    assert!(s.reports().iter().all(|r| r.boot_id == b1));

    // The reboot after that one works.
    let b3 = s.reboot_and_wait(&id, &hung_boot).await;
    assert!(s.reports_of(&b3, 1).await[0].ready == "True");

    // unhealthy_after_every_boot: Ready after each boot, NotReady 300 ms
    // later, boot after boot, until cleared.
    let fault = s
        .arm(json!({"kind": "unhealthy_after_every_boot", "server_id": id, "delay_ms": 300}))
        .await;
    assert_eq!(
        (fault["count"].clone(), fault["delay_ms"].as_u64()),
        (Value::Null, Some(300))
    );
    let mut boot = b3;
    for _ in 0..2 {
        boot = s.reboot_and_wait(&id, &boot).await;
        let b = boot.clone();
        let down = s
            .wait_report("NotReady after the delay", |r| {
                r.boot_id == b && r.ready == "False"
            })
            .await;
        assert_eq!(down.reason, "KubeletNotReady");
        assert!(
            down.message.starts_with("PLEG is not healthy"),
            "{}",
            down.message
        );
        let of_boot: Vec<Report> = s
            .reports()
            .into_iter()
            .filter(|r| r.boot_id == boot)
            .collect();
        assert_eq!(of_boot[0].ready, "True", "Ready first: {of_boot:?}");
    }
    let r = s.record(&id).await;
    let kinds: Vec<&str> = r.faults_fired.iter().map(|f| f.kind).collect();
    assert_eq!(
        kinds,
        vec![
            "reboot_never_returns",
            "unhealthy_after_every_boot",
            "unhealthy_after_every_boot"
        ]
    );

    // Cleared: the next boot stays Ready.
    let (status, _) = s.admin(Method::DELETE, "/_talossim/faults", None).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    let healthy = s.reboot_and_wait(&id, &boot).await;
    // Five reports span three heartbeats (600 ms), twice the old delay.
    let reports = s.reports_of(&healthy, 5).await;
    assert!(reports.iter().all(|r| r.ready == "True"), "{reports:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_instance_rebooted_through_emsim_comes_back_from_its_state_partition() {
    let s = stack(4).await;
    s.fake.add_pod("web", NODE, "Always");
    let image = s
        .get(&format!("{VM}/images?name=talos-v1.11.5-amd64"))
        .await["images"][0]["id"]
        .as_str()
        .unwrap()
        .to_string();
    let created = s
        .post(
            &format!("{VM}/servers"),
            json!({"name": "vm-node", "commercial_type": "POP2-2C-8G", "image": image}),
        )
        .await;
    let id = created["server"]["id"].as_str().unwrap().to_string();
    let user_data = s.config(&format!("scaleway://instance/fr-par-2/{id}"));
    let resp = s
        .http
        .patch(format!("{}{VM}/servers/{id}/user_data/cloud-init", s.emsim))
        .header("X-Auth-Token", DEFAULT_SECRET_KEY)
        .header("Content-Type", "text/plain")
        .body(user_data)
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status().as_u16(), 204);
    s.post(
        &format!("{VM}/servers/{id}/action"),
        json!({"action": "poweron"}),
    )
    .await;
    let joined = s
        .wait_record("the VM's kubelet", &id, |r| {
            r.kubelet == Some(KubeletReport::Ready)
        })
        .await;
    let first = joined.boot_id.unwrap();
    wait_until("the pod to run", || pod_ready(&s.fake.pod("web"))).await;

    // The provider deletes the user data and the token once the node joined.
    let (status, _) = s
        .api(
            reqwest::Method::DELETE,
            &format!("{VM}/servers/{id}/user_data/cloud-init"),
            None,
        )
        .await;
    assert_eq!(status, 204);
    s.fake.revoke_token();

    let before = s.get(&format!("{VM}/servers/{id}")).await["server"].clone();
    s.post(
        &format!("{VM}/servers/{id}/action"),
        json!({"action": "reboot"}),
    )
    .await;
    let rebooting = s.get(&format!("{VM}/servers/{id}")).await["server"].clone();
    assert_ne!(
        rebooting["modification_date"], before["modification_date"],
        "a reboot action changes modification_date"
    );
    let back = s
        .wait_report("Ready with a new bootID", |r| {
            r.ready == "True" && r.boot_id != first
        })
        .await;
    wait_until("the pod to run again", || {
        let web = s.fake.pod("web");
        pod_ready(&web) && pod_restarts(&web) == 1
    })
    .await;
    let r = s.record(&id).await;
    assert_eq!(r.platform, "scaleway");
    assert_eq!(r.boot_id.as_deref(), Some(back.boot_id.as_str()));
    assert_eq!(
        r.power_offs.last().unwrap().cause.as_deref(),
        Some("reboot")
    );
    assert_eq!(
        r.power_offs.last().unwrap().boot_id.as_deref(),
        Some(first.as_str())
    );
    assert_eq!(r.boots.last().unwrap().cause.as_deref(), Some("reboot"));
    assert_eq!(
        r.user_data_reads.len(),
        1,
        "booted from its STATE partition"
    );
    let seen = s.fake.seen.lock().unwrap();
    assert_eq!(seen.csrs.len(), 1);
    assert_eq!(seen.node_creates, 1);
}
