//! The engine end to end in-process: the fake Elastic Metal API and recording
//! fakes of the rescue shell, the Talos API and the Kubernetes side, on paused
//! tokio time.

use std::time::Duration;

use super::driver_fakes::*;
use super::tests_support::{BASE_CONFIG, spec};
use super::*;
use crate::rescue::SshTarget;
use crate::scaleway::fake::Op;
use crate::scaleway::{BootType, ServerStatus};
use crate::talos::render_machine_config;

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
    // The first two saves fail (ordered, delivering): the delivering one is
    // tried again at the next poll, while the server is still delivering.
    *w.nodes.failing_saves.lock().unwrap() = 2;
    let spec = spec(URL);
    w.engine.start(spec.clone());
    w.engine.start(spec.clone()); // a retried Create must not start a second install
    assert_eq!(w.engine.phase("srv-1"), Some(Phase::Ordered));

    wait_for(&w.engine, Phase::Delivering).await;
    tokio::time::sleep(Duration::from_secs(60)).await;
    assert_eq!(w.engine.phase("srv-1"), Some(Phase::Delivering));
    assert_eq!(w.nodes.saved_phases(), [Phase::Delivering]);
    w.em.deliver("srv-1");
    wait_for(&w.engine, Phase::Joined).await;

    // Reboots: rescue with our key, then normal.
    assert_eq!(w.reboots(), [BootType::Rescue, BootType::Normal]);
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
    for (target, key, trusted) in &connects {
        assert_eq!(trusted, &None, "nothing trusted before the first session");
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
        w.rescue.commands(),
        [
            "lsblk -dno NAME,TYPE",
            "ip -o link",
            "set -o pipefail; curl -fsSL 'https://factory.talos.dev/image/376567988ad3/v1.13.9/metal-amd64.raw.xz' | xz -d | dd bs=4M iflag=fullblock | sudo tee /dev/nvme0n1 | sha256sum",
            "sudo sync",
            "sudo dd if=/dev/nvme0n1 bs=4M iflag=direct,count_bytes count=1306525696 status=none | sha256sum",
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
        config.contains("kind: HostnameConfig\nhostname: default-abc12\n"),
        "{config}"
    );
    assert!(
        config.contains("match: mac(link.permanent_addr) == \"52:54:00:aa:bb:cc\"\n"),
        "{config}"
    );
    assert!(config.contains("disk: /dev/nvme0n1\n"), "{config}");

    assert!(
        config.contains("token: abcdef.0123456789abcdef\n"),
        "the node's own bootstrap token"
    );

    // Progress: saved at every phase, with what the install learned.
    assert_eq!(
        w.nodes.saved_phases(),
        [
            Phase::Delivering,
            Phase::Ready,
            Phase::Rescue,
            Phase::Imaging,
            Phase::Booting,
            Phase::Maintenance,
            Phase::Configured,
            Phase::Joined
        ]
    );
    let last = w.nodes.last_progress();
    assert_eq!(last.disk.as_deref(), Some("nvme0n1"));
    assert_eq!(last.mac.as_deref(), Some("52:54:00:aa:bb:cc"));
    assert_eq!((last.image_attempts, last.rescue_returns), (1, 0));
    assert_eq!(last.host_key.as_deref(), Some(HOST_KEY));
    assert!(last.started.is_some() && last.phase_since >= last.started);

    // Events: the phase history, then the join.
    let events = w.nodes.events();
    let phases: Vec<&str> = events
        .iter()
        .map(|(_, _, m)| m.split(':').next().unwrap())
        .collect();
    assert_eq!(
        phases,
        [
            "ordered",
            "delivering",
            "ready",
            "rescue",
            "imaging",
            "imaging",
            "booting",
            "maintenance",
            "configured",
            "joined"
        ]
    );
    assert!(events.iter().all(|(_, warning, _)| !warning), "{events:?}");
    let (reason, _, message) = events.last().unwrap();
    assert_eq!(reason, "InstallJoined");
    assert!(
        message.starts_with("joined: Node default-abc12 is Ready, "),
        "{message}"
    );
    assert_eq!(*w.nodes.joined.lock().unwrap(), ["default-abc12"]);

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
    // The 15 min rescue deadline at the 2 s probe interval (not the 10 s
    // poll interval): one attempt at once, then one every probe interval.
    assert!((445..=455).contains(&attempts), "{attempts} SSH attempts");
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
    let (reason, warning, message) = w.nodes.events().last().cloned().unwrap();
    assert_eq!(
        (reason.as_str(), warning, message.as_str()),
        (
            "InstallFailed",
            true,
            "failed: phase rescue did not complete within 900s"
        )
    );
    assert_eq!(w.nodes.last_progress().phase, Some(Phase::Failed));
    assert!(w.nodes.joined.lock().unwrap().is_empty());
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
    assert!(!debug.contains("4dxidj"), "{debug}");
    assert_eq!(format!("{}", s.rescue_private_key), "<redacted>");
}

#[path = "driver_network_tests.rs"]
mod network;

#[path = "driver_recovery_tests.rs"]
mod recovery;

#[path = "driver_resume_tests.rs"]
mod resume;

#[path = "driver_cadence_tests.rs"]
mod cadence;

#[path = "driver_delivery_tests.rs"]
mod delivery;

#[path = "driver_standby_tests.rs"]
mod standby;
