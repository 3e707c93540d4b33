//! The engine end to end in-process: the fake Elastic Metal API and recording
//! fakes of the rescue shell, the Talos API and the Kubernetes side, on paused
//! tokio time.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;

use super::tests_support::{BASE_CONFIG, spec};
use super::*;
use crate::rescue::{CommandOutput, RescueError, RescueSession, SshTarget};
use crate::scaleway::fake::{FakeElasticMetal, Op};
use crate::scaleway::{BootType, Server, ServerStatus};
use crate::talos::{TalosError, TalosVersion, render_machine_config};

const URL: &str = "https://factory.talos.dev/image/376567988ad3/v1.13.9/metal-amd64.raw.xz";
const IP_LINK: &str = "1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue state UNKNOWN mode DEFAULT group default qlen 1000\\    link/loopback 00:00:00:00:00:00 brd 00:00:00:00:00:00\n2: eth0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc mq state UP mode DEFAULT group default qlen 1000\\    link/ether 52:54:00:aa:bb:cc brd ff:ff:ff:ff:ff:ff\n";

/// Rescue system: refuses connections until `reachable_after` attempts, then
/// answers the standard commands.
#[derive(Default)]
struct FakeRescue {
    reachable_after: Option<usize>,
    connects: Mutex<Vec<(SshTarget, String)>>,
    commands: Arc<Mutex<Vec<String>>>,
}

#[async_trait]
impl RescueShell for FakeRescue {
    async fn connect(
        &self,
        target: &SshTarget,
        private_key: &str,
    ) -> Result<Box<dyn RescueSession>, RescueError> {
        let mut connects = self.connects.lock().unwrap();
        connects.push((target.clone(), private_key.to_string()));
        match self.reachable_after {
            Some(n) if connects.len() > n => Ok(Box::new(FakeSession {
                commands: self.commands.clone(),
            })),
            _ => Err(RescueError::Unreachable("connection refused".into())),
        }
    }
}

struct FakeSession {
    commands: Arc<Mutex<Vec<String>>>,
}

#[async_trait]
impl RescueSession for FakeSession {
    async fn run(&mut self, command: &str) -> Result<CommandOutput, RescueError> {
        self.commands.lock().unwrap().push(command.to_string());
        let stdout = match command {
            "lsblk -dno NAME,TYPE" => "loop0 loop\nnvme0n1 disk\nnvme1n1 disk\n",
            "ip -o link" => IP_LINK,
            _ => "",
        };
        Ok(CommandOutput {
            exit_status: 0,
            stdout: stdout.into(),
            stderr: String::new(),
        })
    }

    async fn close(self: Box<Self>) {}
}

/// Talos: down for the first `down_for` probes, then in maintenance mode.
#[derive(Default)]
struct FakeTalos {
    down_for: usize,
    probes: Mutex<usize>,
    applied: Mutex<Vec<(String, String)>>,
}

#[async_trait]
impl TalosMaintenance for FakeTalos {
    async fn version(&self, _addr: &str) -> Result<TalosVersion, TalosError> {
        let mut probes = self.probes.lock().unwrap();
        *probes += 1;
        if *probes <= self.down_for {
            return Err(TalosError::Unavailable("connection refused".into()));
        }
        Ok(TalosVersion::default())
    }

    async fn apply_configuration(
        &self,
        addr: &str,
        config: &str,
    ) -> Result<Vec<String>, TalosError> {
        self.applied
            .lock()
            .unwrap()
            .push((addr.to_string(), config.to_string()));
        Ok(vec![])
    }
}

/// Kubernetes: the Node turns Ready once Talos has a config.
struct FakeNodes {
    talos: Arc<FakeTalos>,
    deleted: Mutex<Vec<(String, String)>>,
    progress: Mutex<Vec<Progress>>,
    events: Mutex<Vec<InstallEvent>>,
    joined: Mutex<Vec<String>>,
}

#[async_trait]
impl NodePort for FakeNodes {
    async fn node_ready(&self, _node_name: &str) -> Result<Option<bool>, NodePortError> {
        Ok(if self.talos.applied.lock().unwrap().is_empty() {
            Some(false)
        } else {
            Some(true)
        })
    }

    async fn delete_node_claim(&self, name: &str, reason: &str) -> Result<(), NodePortError> {
        self.deleted
            .lock()
            .unwrap()
            .push((name.to_string(), reason.to_string()));
        Ok(())
    }

    async fn save_progress(&self, _claim: &str, progress: &Progress) -> Result<(), NodePortError> {
        self.progress.lock().unwrap().push(progress.clone());
        Ok(())
    }

    async fn event(&self, _claim: &str, event: InstallEvent) {
        self.events.lock().unwrap().push(event);
    }

    async fn joined(&self, claim: &str) -> Result<(), NodePortError> {
        self.joined.lock().unwrap().push(claim.to_string());
        Ok(())
    }
}

#[derive(Default)]
struct FakeCapacity {
    unavailable: Mutex<Vec<(String, String)>>,
}

impl CapacityPort for FakeCapacity {
    fn mark_unavailable(&self, offer: &str, zone: &str) {
        self.unavailable
            .lock()
            .unwrap()
            .push((offer.to_string(), zone.to_string()));
    }
}

struct World {
    engine: InstallEngine,
    em: Arc<FakeElasticMetal>,
    rescue: Arc<FakeRescue>,
    talos: Arc<FakeTalos>,
    nodes: Arc<FakeNodes>,
}

fn world(rescue: FakeRescue, talos: FakeTalos) -> World {
    let em = Arc::new(FakeElasticMetal::new());
    em.insert_server(Server {
        id: "srv-1".into(),
        organization_id: String::new(),
        project_id: "proj".into(),
        name: "default-abc12".into(),
        description: String::new(),
        status: ServerStatus::Delivering,
        offer_id: "offer-1".into(),
        offer_name: "EM-A115X-SSD".into(),
        tags: vec![],
        ips: vec![],
        boot_type: BootType::Normal,
        zone: "fr-par-2".into(),
        rescue_server: None,
        created_at: String::new(),
        updated_at: String::new(),
    });
    let rescue = Arc::new(rescue);
    let talos = Arc::new(talos);
    let nodes = Arc::new(FakeNodes {
        talos: talos.clone(),
        deleted: Mutex::default(),
        progress: Mutex::default(),
        events: Mutex::default(),
        joined: Mutex::default(),
    });
    let settings = InstallSettings {
        poll_interval: Duration::from_secs(10),
        ssh_port: 2222,
        talos_port: 50000,
        ..InstallSettings::default()
    };
    let engine = InstallEngine::new(EngineDeps {
        elastic_metal: em.clone(),
        capacity: Arc::new(FakeCapacity::default()),
        rescue: rescue.clone(),
        talos: talos.clone(),
        nodes: nodes.clone(),
        settings,
    });
    World {
        engine,
        em,
        rescue,
        talos,
        nodes,
    }
}

/// Lets simulated time run until the install reaches `phase` (or a day passes).
async fn wait_for(engine: &InstallEngine, phase: Phase) {
    for _ in 0..(24 * 3600) {
        if engine.phase("srv-1") == Some(phase) {
            return;
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    panic!(
        "install stuck in {:?}, wanted {phase:?}",
        engine.phase("srv-1")
    );
}

#[tokio::test(start_paused = true)]
async fn happy_path_installs_talos_and_waits_for_the_node() {
    let w = world(
        FakeRescue {
            reachable_after: Some(2),
            ..Default::default()
        },
        FakeTalos {
            down_for: 3,
            ..Default::default()
        },
    );
    let spec = spec(URL);
    w.engine.start(spec.clone());
    w.engine.start(spec.clone()); // a retried Create must not start a second install
    assert_eq!(w.engine.phase("srv-1"), Some(Phase::Ordered));

    wait_for(&w.engine, Phase::Delivering).await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(w.engine.phase("srv-1"), Some(Phase::Delivering));
    w.em.deliver("srv-1");
    wait_for(&w.engine, Phase::Joined).await;

    // Reboots: rescue with our key, then normal.
    let reboots: Vec<(Option<BootType>, Vec<String>)> =
        w.em.calls()
            .into_iter()
            .filter(|c| c.op == Op::RebootServer)
            .map(|c| (c.boot_type, c.ssh_key_ids))
            .collect();
    assert_eq!(
        reboots,
        [
            (Some(BootType::Rescue), vec!["key-1".to_string()]),
            (Some(BootType::Normal), vec![])
        ]
    );

    // SSH: retried until the rescue system answered, as the rescue user, with our key.
    let connects = w.rescue.connects.lock().unwrap().clone();
    assert_eq!(connects.len(), 3);
    let address = w.em.server("srv-1").unwrap().ipv4().unwrap().to_string();
    for (target, key) in &connects {
        assert_eq!(
            target,
            &SshTarget {
                host: address.clone(),
                port: 2222,
                user: "rescue".into()
            }
        );
        assert_eq!(key, spec.rescue_private_key.expose());
    }
    assert_eq!(
        *w.rescue.commands.lock().unwrap(),
        [
            "lsblk -dno NAME,TYPE",
            "ip -o link",
            "set -o pipefail; curl -fsSL 'https://factory.talos.dev/image/376567988ad3/v1.13.9/metal-amd64.raw.xz' | xz -d | sudo dd of=/dev/nvme0n1 bs=4M oflag=direct status=none",
            "sudo sync",
        ]
    );

    // Talos: probed until up, then exactly one ApplyConfiguration with the rendered config.
    assert_eq!(*w.talos.probes.lock().unwrap(), 4);
    let applied = w.talos.applied.lock().unwrap().clone();
    assert_eq!(applied.len(), 1);
    let (addr, config) = &applied[0];
    assert_eq!(addr, &format!("{address}:50000"));
    let expected = render_machine_config(
        BASE_CONFIG,
        &node_settings(&spec, "nvme0n1", "52:54:00:aa:bb:cc"),
    )
    .unwrap();
    assert_eq!(config, &expected);
    assert!(
        config.contains("provider-id: scaleway://baremetal/fr-par-2/srv-1\n"),
        "{config}"
    );
    assert!(
        config.contains("kind: HostnameConfig\nauto: off\nhostname: default-abc12\n"),
        "{config}"
    );
    assert!(
        config.contains("match: mac(link.permanent_addr) == \"52:54:00:aa:bb:cc\"\n"),
        "{config}"
    );
    assert!(config.contains("disk: /dev/nvme0n1\n"), "{config}");

    // Nothing was cleaned up.
    assert_eq!(w.em.count(Op::DeleteServer), 0);
    assert!(w.nodes.deleted.lock().unwrap().is_empty());
    assert_eq!(w.em.server("srv-1").unwrap().status, ServerStatus::Ready);
}

#[tokio::test(start_paused = true)]
async fn unreachable_rescue_fails_and_deletes_server_and_node_claim() {
    let w = world(FakeRescue::default(), FakeTalos::default());
    w.em.deliver("srv-1");
    w.engine.start(spec(URL));
    wait_for(&w.engine, Phase::Rescue).await;
    wait_for(&w.engine, Phase::Failed).await;
    // Let the cleanup finish.
    tokio::time::sleep(Duration::from_secs(60)).await;

    let attempts = w.rescue.connects.lock().unwrap().len();
    // ~15 min rescue deadline at a 10 s poll interval.
    assert!((80..=95).contains(&attempts), "{attempts} SSH attempts");
    assert!(w.rescue.commands.lock().unwrap().is_empty());
    assert_eq!(w.em.count(Op::DeleteServer), 1);
    assert_eq!(w.em.server("srv-1").unwrap().status, ServerStatus::Deleting);
    let deleted = w.nodes.deleted.lock().unwrap().clone();
    assert_eq!(
        deleted,
        [(
            "default-abc12".to_string(),
            "phase rescue did not complete within 900s".to_string()
        )]
    );
    assert!(w.talos.applied.lock().unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn an_image_we_cannot_decompress_fails_at_once() {
    let w = world(FakeRescue::default(), FakeTalos::default());
    w.engine.start(spec("https://img.example/metal-amd64.iso"));
    wait_for(&w.engine, Phase::Failed).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert_eq!(w.em.count(Op::RebootServer), 0);
    assert_eq!(w.em.count(Op::DeleteServer), 1);
    let deleted = w.nodes.deleted.lock().unwrap().clone();
    assert_eq!(deleted.len(), 1);
    assert_eq!(
        deleted[0].1,
        "image URL https://img.example/metal-amd64.iso does not end in .raw.xz, .raw.zst or .raw"
    );
}

#[tokio::test(start_paused = true)]
async fn a_server_that_vanishes_fails_the_install() {
    let w = world(FakeRescue::default(), FakeTalos::default());
    w.engine.start(spec(URL));
    wait_for(&w.engine, Phase::Delivering).await;
    w.em.set_status("srv-1", ServerStatus::Deleting);
    w.em.finish_deletions();
    wait_for(&w.engine, Phase::Failed).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let deleted = w.nodes.deleted.lock().unwrap().clone();
    assert_eq!(
        deleted,
        [(
            "default-abc12".to_string(),
            "the server no longer exists".to_string()
        )]
    );
}

#[test]
fn node_settings_register_every_taint_once_plus_unregistered() {
    let mut s = spec(URL);
    s.startup_taints.push(Taint {
        key: "dedicated".into(),
        value: Some("other".into()),
        effect: "NoSchedule".into(),
    });
    s.machine_config_patches = vec!["machine: {}\n".into()];
    let n = node_settings(&s, "sda", "52:54:00:aa:bb:cc");
    let taints: Vec<(&str, Option<&str>, &str)> = n
        .register_taints
        .iter()
        .map(|t| (t.key.as_str(), t.value.as_deref(), t.effect.as_str()))
        .collect();
    assert_eq!(
        taints,
        [
            ("dedicated", Some("metal"), "NoSchedule"),
            ("cilium.io/agent-not-ready", None, "NoExecute"),
            ("karpenter.sh/unregistered", None, "NoExecute"),
        ]
    );
    assert_eq!(n.hostname, "default-abc12");
    assert_eq!(n.provider_id, "scaleway://baremetal/fr-par-2/srv-1");
    assert_eq!(n.install_disk, "sda");
    assert_eq!(n.primary_mac, "52:54:00:aa:bb:cc");
    assert_eq!(n.labels, s.labels);
    assert_eq!(n.patches, s.machine_config_patches);
}

#[test]
fn secrets_never_print() {
    let s = spec(URL);
    let debug = format!("{s:?}");
    assert!(!debug.contains("OPENSSH"), "{debug}");
    assert!(!debug.contains("wc0ou0"), "{debug}");
    assert_eq!(format!("{}", s.rescue_private_key), "<redacted>");
}
