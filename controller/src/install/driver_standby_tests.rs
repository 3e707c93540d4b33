//! Standby installs (ending in Talos maintenance mode), their adoption by a
//! node, and which launches the engine lets run on a server, end to end
//! against the fakes on paused time.

use std::time::Duration;

use tokio::time::Instant;

use super::*;
use crate::install::Target;

const MAC: &str = "52:54:00:aa:bb:cc";

/// A standby install of `srv-1`, known to its NodePort as `key`.
fn standby_spec(key: &str) -> InstallSpec {
    InstallSpec {
        node_claim_name: key.into(),
        target: Target::Standby,
        ..spec(URL)
    }
}

/// How many installs ended with `result`, process-wide.
fn outcomes(result: &str) -> u64 {
    crate::metrics::install_metrics().outcomes(result)
}

fn count(w: &World, reason: &str) -> usize {
    w.nodes.reasons().iter().filter(|r| *r == reason).count()
}

fn claims(w: &World) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    for (claim, _) in w.nodes.saved_by.lock().unwrap().iter() {
        if out.last() != Some(claim) {
            out.push(claim.clone());
        }
    }
    out
}

/// Hands `srv-1`, a standby in maintenance mode, to NodeClaim `default-abc12`.
fn adopt(w: &World) {
    w.engine.adopt(
        spec(URL),
        "nvme0n1".into(),
        MAC.into(),
        Some(HOST_KEY.into()),
    );
}

/// Runs a standby install of `srv-1` for `key` to its end.
async fn standby_installed(w: &World, key: &str) {
    w.engine.start(standby_spec(key));
    wait_for(&w.engine, Phase::Standby).await;
    settle().await;
}

#[tokio::test(start_paused = true)]
async fn a_standby_install_ends_in_maintenance_mode_and_stays_there() {
    let w = world(
        FakeRescue::reachable(),
        FakeTalos {
            down_for: 2,
            ..Default::default()
        },
    );
    w.em.deliver("srv-1");
    let before = outcomes("standby");
    w.engine.start(standby_spec("standby-srv-1"));
    wait_for(&w.engine, Phase::Standby).await;
    settle().await;

    // Installed exactly like a node: rescue, one verified write, normal boot.
    assert_eq!(w.reboots(), [BootType::Rescue, BootType::Normal]);
    assert_eq!(w.rescue.writes(), 1);
    assert_eq!(*w.talos.probes.lock().unwrap(), 3);

    // No config, no Node, no token.
    assert!(w.talos.applied.lock().unwrap().is_empty());
    assert_eq!(*w.nodes.readiness_reads.lock().unwrap(), 0);
    assert!(w.nodes.initialized.lock().unwrap().is_empty());
    assert!(w.nodes.joined.lock().unwrap().is_empty());

    // `standby` is the last save, with what an adoption needs, all under the
    // install's key.
    assert_eq!(
        w.nodes.saved_phases(),
        [
            Phase::Ordered,
            Phase::Ready,
            Phase::Rescue,
            Phase::Imaging,
            Phase::Booting,
            Phase::Standby
        ]
    );
    assert_eq!(
        w.nodes.log.lock().unwrap().last().map(String::as_str),
        Some("save:standby")
    );
    assert!(
        w.nodes
            .log
            .lock()
            .unwrap()
            .iter()
            .all(|l| l.starts_with("save:")),
        "{:?}",
        w.nodes.log.lock().unwrap()
    );
    assert_eq!(claims(&w), ["standby-srv-1"]);
    let last = w.nodes.last_progress();
    assert_eq!(last.phase, Some(Phase::Standby));
    assert_eq!(last.disk.as_deref(), Some("nvme0n1"));
    assert_eq!(last.mac.as_deref(), Some(MAC));
    assert_eq!(last.host_key.as_deref(), Some(HOST_KEY));

    // Events: the phases, then StandbyReady; no warning.
    let events = w.nodes.events();
    assert!(events.iter().all(|(_, warning, _)| !warning), "{events:?}");
    let phases: Vec<&str> = events
        .iter()
        .map(|(_, _, m)| m.split(':').next().unwrap())
        .collect();
    assert_eq!(
        phases,
        [
            "ordered", "ready", "rescue", "imaging", "imaging", "booting", "standby", "standby"
        ]
    );
    let address = w.em.server("srv-1").unwrap().ipv4().unwrap().to_string();
    assert_eq!(
        events[6].2,
        format!(
            "standby: Talos maintenance API up on {address} (install disk /dev/nvme0n1, primary NIC {MAC}); the server waits without config to be adopted"
        )
    );
    let (reason, _, message) = events.last().unwrap();
    assert_eq!(reason, "StandbyReady");
    assert!(
        message.starts_with(
            "standby: server srv-1 (EM-A115X-SSD, fr-par-2) is installed and waits in Talos maintenance mode, "
        ),
        "{message}"
    );
    assert_eq!(w.engine.phase("srv-1"), Some(Phase::Standby));
    assert!(outcomes("standby") > before, "the outcome is counted");

    // The server is kept, and the finished install touches it no more.
    assert_eq!(w.em.count(Op::DeleteServer), 0);
    assert!(w.nodes.deleted.lock().unwrap().is_empty());
    assert_eq!(w.em.server("srv-1").unwrap().status, ServerStatus::Ready);
    let calls = w.em.calls().len();
    let probes = *w.talos.probes.lock().unwrap();
    settle().await;
    assert_eq!(w.em.calls().len(), calls);
    assert_eq!(*w.talos.probes.lock().unwrap(), probes);
    assert_eq!(w.nodes.events().len(), events.len());
}

#[tokio::test(start_paused = true)]
async fn adopting_a_standby_server_applies_its_config_once_and_joins() {
    let w = world(
        FakeRescue::reachable(),
        FakeTalos {
            booted: true,
            ..Default::default()
        },
    );
    w.em.deliver("srv-1");
    let spec = spec(URL);
    let t0 = Instant::now();
    w.engine.adopt(
        spec.clone(),
        "nvme0n1".into(),
        MAC.into(),
        Some(HOST_KEY.into()),
    );
    wait_for(&w.engine, Phase::Joined).await;
    let took = t0.elapsed();
    settle().await;

    // Straight to the maintenance API: no reboot, no SSH, no image.
    assert!(
        w.em.calls().iter().all(|c| c.op == Op::GetServer),
        "{:?}",
        w.em.calls()
    );
    assert!(w.reboots().is_empty());
    assert!(w.rescue.connects.lock().unwrap().is_empty());
    assert!(w.rescue.commands().is_empty());
    assert!(
        took <= Duration::from_secs(10),
        "adopted and joined in {took:?}"
    );

    // One apply, of this node's config on the standby's disk and NIC.
    let applied = w.talos.applied.lock().unwrap().clone();
    assert_eq!(applied.len(), 1);
    let address = w.em.server("srv-1").unwrap().ipv4().unwrap().to_string();
    assert_eq!(applied[0].0, format!("{address}:50000"));
    let expected =
        render_machine_config(BASE_CONFIG, &node_settings(&spec, "nvme0n1", MAC)).unwrap();
    assert_eq!(applied[0].1, expected);

    // The join's side effects, all under the NodeClaim.
    assert_eq!(
        *w.nodes.log.lock().unwrap(),
        [
            "save:maintenance",
            "save:configured",
            "initialize:default-abc12",
            "release:default-abc12",
            "save:joined"
        ]
    );
    assert_eq!(claims(&w), ["default-abc12"]);
    let first = w.nodes.progress.lock().unwrap()[0].clone();
    assert_eq!(
        (first.disk.as_deref(), first.mac.as_deref()),
        (Some("nvme0n1"), Some(MAC))
    );
    assert_eq!(first.host_key.as_deref(), Some(HOST_KEY));
    assert!(first.started.is_some());

    let events = w.nodes.events();
    assert!(events.iter().all(|(_, warning, _)| !warning), "{events:?}");
    let reasons: Vec<&str> = events.iter().map(|(r, _, _)| r.as_str()).collect();
    assert_eq!(reasons, ["StandbyAdopted", "InstallPhase", "InstallJoined"]);
    assert_eq!(
        events[0].2,
        "maintenance: adopted standby server srv-1 (EM-A115X-SSD, fr-par-2), installed and waiting in Talos maintenance mode; applying this node's machine config"
    );
    assert_eq!(
        events[1].2,
        format!(
            "configured: machine config applied (install disk /dev/nvme0n1, primary NIC {MAC}); waiting for Node default-abc12 to be Ready"
        )
    );
    assert!(
        events[2]
            .2
            .starts_with("joined: Node default-abc12 is Ready, "),
        "{}",
        events[2].2
    );
    assert_eq!(w.em.count(Op::DeleteServer), 0);
}

/// Unlike a resumed maintenance (`resumed_maintenance_with_the_api_gone_waits_for_the_node`),
/// a silent maintenance API on an adopted server never means the config was
/// applied: no config was ever sent to it.
#[tokio::test(start_paused = true)]
async fn an_adopted_server_whose_maintenance_api_stays_silent_fails_at_the_deadline() {
    let w = world_with(
        FakeRescue::reachable(),
        FakeTalos {
            never_up_boots: usize::MAX,
            booted: true,
            ..Default::default()
        },
        true,
    );
    w.em.deliver("srv-1");
    adopt(&w);
    wait_for(&w.engine, Phase::Failed).await;
    settle().await;
    assert_eq!(
        *w.nodes.readiness_reads.lock().unwrap(),
        0,
        "the Node is never asked"
    );
    assert!(w.talos.applied.lock().unwrap().is_empty());
    assert!(w.nodes.joined.lock().unwrap().is_empty());
    assert_eq!(
        *w.nodes.deleted.lock().unwrap(),
        [(
            "default-abc12".to_string(),
            "phase maintenance did not complete within 300s".to_string()
        )]
    );
    assert!(w.reboots().is_empty(), "no return to rescue");
    assert_eq!(count(&w, "StandbyAdopted"), 1);
}

#[tokio::test(start_paused = true)]
async fn a_standby_server_is_adopted_by_a_node_without_a_second_install() {
    let w = world(FakeRescue::reachable(), FakeTalos::default());
    w.em.deliver("srv-1");
    standby_installed(&w, "standby-srv-1").await;
    let standby = w.nodes.last_progress();

    w.engine.adopt(
        spec(URL),
        standby.disk.clone().unwrap(),
        standby.mac.clone().unwrap(),
        standby.host_key.clone(),
    );
    wait_for(&w.engine, Phase::Joined).await;
    settle().await;

    assert_eq!(
        w.reboots(),
        [BootType::Rescue, BootType::Normal],
        "only the standby install's"
    );
    assert_eq!(w.rescue.writes(), 1);
    assert_eq!(w.talos.applied.lock().unwrap().len(), 1);
    assert_eq!(claims(&w), ["standby-srv-1", "default-abc12"]);
    let reasons = w.nodes.reasons();
    let after_standby: Vec<&str> = reasons
        .iter()
        .skip_while(|r| *r != "StandbyReady")
        .map(String::as_str)
        .collect();
    assert_eq!(
        after_standby,
        [
            "StandbyReady",
            "StandbyAdopted",
            "InstallPhase",
            "InstallJoined"
        ]
    );
    assert_eq!(*w.nodes.joined.lock().unwrap(), ["default-abc12"]);
}

#[tokio::test(start_paused = true)]
async fn after_standby_a_start_by_another_claim_runs_a_new_install() {
    let w = world(FakeRescue::reachable(), FakeTalos::default());
    w.em.deliver("srv-1");
    standby_installed(&w, "k").await;

    w.engine.start(spec(URL));
    assert_eq!(w.engine.phase("srv-1"), Some(Phase::Ordered));
    wait_for(&w.engine, Phase::Joined).await;
    settle().await;
    assert_eq!(
        w.reboots(),
        [
            BootType::Rescue,
            BootType::Normal,
            BootType::Rescue,
            BootType::Normal
        ]
    );
    assert_eq!(w.rescue.writes(), 2);
    assert_eq!(w.talos.applied.lock().unwrap().len(), 1);
    assert_eq!(claims(&w), ["k", "default-abc12"]);
    assert_eq!(count(&w, "InstallJoined"), 1);
}

#[tokio::test(start_paused = true)]
async fn after_standby_a_start_by_the_same_key_runs_again() {
    let w = world(FakeRescue::reachable(), FakeTalos::default());
    w.em.deliver("srv-1");
    standby_installed(&w, "k").await;
    assert_eq!(count(&w, "StandbyReady"), 1);

    w.engine.start(standby_spec("k"));
    assert_eq!(w.engine.phase("srv-1"), Some(Phase::Ordered));
    wait_for(&w.engine, Phase::Standby).await;
    settle().await;
    assert_eq!(count(&w, "StandbyReady"), 2);
    assert_eq!(w.rescue.writes(), 2);
    assert_eq!(w.reboots().len(), 4);
    assert!(w.talos.applied.lock().unwrap().is_empty());
}

/// A server that another NodeClaim's install finished on (a recycled
/// server) is installed again for the new owner.
#[tokio::test(start_paused = true)]
async fn after_a_join_a_start_by_another_claim_runs_a_new_install() {
    let w = world(FakeRescue::reachable(), FakeTalos::default());
    w.em.deliver("srv-1");
    w.engine.start(InstallSpec {
        node_claim_name: "a".into(),
        ..spec(URL)
    });
    wait_for(&w.engine, Phase::Joined).await;
    settle().await;
    // The same claim again: a retried Create, left alone.
    w.engine.start(InstallSpec {
        node_claim_name: "a".into(),
        ..spec(URL)
    });
    assert_eq!(w.engine.phase("srv-1"), Some(Phase::Joined));

    w.engine.start(spec(URL));
    assert_eq!(w.engine.phase("srv-1"), Some(Phase::Ordered));
    wait_for(&w.engine, Phase::Joined).await;
    settle().await;
    assert_eq!(w.rescue.writes(), 2);
    assert_eq!(w.talos.applied.lock().unwrap().len(), 2);
    assert_eq!(claims(&w), ["a", "default-abc12"]);
    assert_eq!(*w.nodes.joined.lock().unwrap(), ["a", "default-abc12"]);
}

#[tokio::test(start_paused = true)]
async fn a_second_launch_by_the_same_claim_during_an_install_is_ignored() {
    let w = world(
        FakeRescue::reachable(),
        FakeTalos {
            down_for: 10,
            ..Default::default()
        },
    );
    w.em.deliver("srv-1");
    w.engine.start(spec(URL));
    wait_for(&w.engine, Phase::Booting).await;
    // A retried Create, a resume pass and an adoption, all by the same claim.
    w.engine.start(spec(URL));
    w.engine.resume(
        spec(URL),
        Progress {
            phase: Some(Phase::Booting),
            ..w.nodes.last_progress()
        },
    );
    adopt(&w);
    assert_eq!(w.engine.phase("srv-1"), Some(Phase::Booting));
    wait_for(&w.engine, Phase::Joined).await;
    settle().await;
    assert_eq!(w.reboots(), [BootType::Rescue, BootType::Normal]);
    assert_eq!(w.rescue.writes(), 1);
    assert_eq!(w.talos.applied.lock().unwrap().len(), 1, "one apply only");
    assert_eq!(count(&w, "InstallJoined"), 1);
    assert_eq!(count(&w, "StandbyAdopted"), 0);
    assert!(
        !w.nodes
            .events()
            .iter()
            .any(|(_, _, m)| m.contains("install resumed")),
        "{:?}",
        w.nodes.events()
    );
}

/// A Create retried while its adoption runs (before anything changed phase)
/// must not start a second one on the same server.
#[tokio::test(start_paused = true)]
async fn a_retried_adoption_is_ignored_while_the_first_runs() {
    let w = world(
        FakeRescue::reachable(),
        FakeTalos {
            booted: true,
            ..Default::default()
        },
    );
    w.em.deliver("srv-1");
    adopt(&w);
    assert_eq!(w.engine.phase("srv-1"), Some(Phase::Maintenance));
    adopt(&w);
    tokio::task::yield_now().await;
    adopt(&w);
    wait_for(&w.engine, Phase::Joined).await;
    settle().await;
    assert_eq!(w.talos.applied.lock().unwrap().len(), 1, "one apply only");
    assert_eq!(count(&w, "StandbyAdopted"), 1);
    assert_eq!(count(&w, "InstallJoined"), 1);
    assert_eq!(*w.nodes.joined.lock().unwrap(), ["default-abc12"]);
}

/// A finished standby handed to its own standby install again (e.g. by a
/// pass over the pool after a restart) is checked and left unconfigured.
#[tokio::test(start_paused = true)]
async fn a_standby_resumed_by_its_standby_install_is_not_configured() {
    let w = world(
        FakeRescue::reachable(),
        FakeTalos {
            booted: true,
            ..Default::default()
        },
    );
    w.em.deliver("srv-1");
    let progress = Progress {
        phase: Some(Phase::Standby),
        phase_since: Some(chrono::Utc::now()),
        disk: Some("nvme0n1".into()),
        mac: Some(MAC.into()),
        image_attempts: 1,
        rescue_returns: 0,
        host_key: Some(HOST_KEY.into()),
        started: Some(chrono::Utc::now() - chrono::Duration::minutes(15)),
    };
    w.engine.resume(standby_spec("standby-srv-1"), progress);
    settle().await;
    assert_eq!(w.engine.phase("srv-1"), Some(Phase::Standby));
    assert!(w.talos.applied.lock().unwrap().is_empty());
    assert_eq!(*w.nodes.readiness_reads.lock().unwrap(), 0);
    assert!(w.reboots().is_empty());
    assert_eq!(w.nodes.last_progress().phase, Some(Phase::Standby));
    assert_eq!(count(&w, "StandbyAdopted"), 0, "nothing adopted it");
    assert_eq!(count(&w, "StandbyReady"), 1);
    assert_eq!(w.em.count(Op::DeleteServer), 0);
}
