//! Resuming from each persisted phase, end to end.

use std::time::Duration;

use super::*;

fn progress(phase: Phase, ago: Duration) -> Progress {
    Progress {
        phase: Some(phase),
        phase_since: Some(chrono::Utc::now() - chrono::Duration::from_std(ago).unwrap()),
        disk: Some("nvme0n1".into()),
        mac: Some("52:54:00:aa:bb:cc".into()),
        image_attempts: 1,
        rescue_returns: 0,
        host_key: Some(HOST_KEY.into()),
        started: Some(chrono::Utc::now() - chrono::Duration::minutes(20)),
    }
}

fn first_event(w: &World) -> String {
    w.nodes.events().first().cloned().unwrap().2
}

#[tokio::test(start_paused = true)]
async fn resumed_delivery_keeps_its_deadline() {
    let w = world(FakeRescue::reachable(), FakeTalos::default());
    let ago = Duration::from_secs(29 * 60);
    w.engine.resume(spec(URL), progress(Phase::Delivering, ago));
    assert_eq!(w.engine.phase("srv-1"), Some(Phase::Delivering));
    wait_for(&w.engine, Phase::Failed).await;
    settle().await;
    assert_eq!(
        w.nodes.deleted.lock().unwrap()[0].1,
        "phase delivering did not complete within 1800s"
    );
    // About a minute of polling, not another half hour.
    let polls = w.em.count(Op::GetServer);
    assert!((5..=8).contains(&polls), "{polls} polls");
    assert_eq!(
        first_event(&w),
        "delivering: install resumed after a controller restart (persisted phase delivering)"
    );
}

#[tokio::test(start_paused = true)]
async fn resumed_ready_reissues_the_rescue_reboot() {
    let w = world(FakeRescue::reachable(), FakeTalos::default());
    w.em.deliver("srv-1");
    w.engine
        .resume(spec(URL), progress(Phase::Ready, Duration::from_secs(5)));
    wait_for(&w.engine, Phase::Joined).await;
    assert_eq!(w.reboots(), [BootType::Rescue, BootType::Normal]);
    // A new rescue boot: the persisted host key is not trusted any more.
    assert_eq!(w.rescue.connects.lock().unwrap()[0].2, None);
}

#[tokio::test(start_paused = true)]
async fn resumed_imaging_reconnects_with_the_trusted_key_and_writes_from_scratch() {
    let w = world(FakeRescue::reachable(), FakeTalos::default());
    w.in_rescue();
    w.engine.resume(
        spec(URL),
        progress(Phase::Imaging, Duration::from_secs(19 * 60)),
    );
    wait_for(&w.engine, Phase::Joined).await;
    // No rescue reboot: the server was still in rescue.
    assert_eq!(w.reboots(), [BootType::Normal]);
    assert_eq!(
        w.rescue.connects.lock().unwrap()[0].2.as_deref(),
        Some(HOST_KEY)
    );
    assert_eq!(w.rescue.commands()[0], "lsblk -dno NAME,TYPE");
    assert_eq!(w.rescue.writes(), 1);
    assert!(
        w.nodes
            .events()
            .iter()
            .any(|(_, _, m)| m.ends_with("to /dev/nvme0n1 (attempt 2/3)")),
        "{:?}",
        w.nodes.events()
    );
}

#[tokio::test(start_paused = true)]
async fn resumed_rescue_refuses_another_host_key() {
    let w = world(FakeRescue::reachable(), FakeTalos::default());
    w.in_rescue();
    *w.rescue.host_key.lock().unwrap() = "SHA256:someone-else".into();
    w.engine
        .resume(spec(URL), progress(Phase::Rescue, Duration::from_secs(60)));
    wait_for(&w.engine, Phase::Failed).await;
    settle().await;
    assert!(w.rescue.commands().is_empty());
    let reason = &w.nodes.deleted.lock().unwrap()[0].1;
    assert!(
        reason.contains("presented host key SHA256:someone-else, but SHA256:47DEQ"),
        "{reason}"
    );
    assert_eq!(w.em.count(Op::DeleteServer), 1);
}

#[tokio::test(start_paused = true)]
async fn resumed_booting_still_in_rescue_issues_the_normal_reboot() {
    let w = world(FakeRescue::reachable(), FakeTalos::default());
    w.in_rescue();
    w.engine
        .resume(spec(URL), progress(Phase::Booting, Duration::from_secs(1)));
    wait_for(&w.engine, Phase::Joined).await;
    assert_eq!(w.reboots(), [BootType::Normal]);
    assert!(w.rescue.connects.lock().unwrap().is_empty());
    assert_eq!(w.talos.applied.lock().unwrap().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn resumed_booting_after_the_normal_reboot_only_probes() {
    let w = world(FakeRescue::reachable(), FakeTalos::default());
    w.em.deliver("srv-1");
    // A normal boot already happened (recorded by the fake as a reboot).
    w.em.reboot_server("fr-par-2", "srv-1", BootType::Normal, &[])
        .await
        .unwrap();
    w.engine
        .resume(spec(URL), progress(Phase::Booting, Duration::from_secs(1)));
    wait_for(&w.engine, Phase::Joined).await;
    assert_eq!(
        w.reboots(),
        [BootType::Normal],
        "no reboot from the resumed install"
    );
    let (_, config) = w.talos.applied.lock().unwrap()[0].clone();
    assert!(config.contains("disk: /dev/nvme0n1\n"), "{config}");
}

#[tokio::test(start_paused = true)]
async fn resumed_maintenance_with_the_api_gone_waits_for_the_node() {
    let w = world_with(
        FakeRescue::reachable(),
        FakeTalos {
            never_up_boots: usize::MAX,
            ..Default::default()
        },
        true,
    );
    w.em.deliver("srv-1");
    w.engine.resume(
        spec(URL),
        progress(Phase::Maintenance, Duration::from_secs(1)),
    );
    wait_for(&w.engine, Phase::Joined).await;
    assert!(w.talos.applied.lock().unwrap().is_empty());
    assert!(w.em.calls().iter().all(|c| c.op == Op::GetServer));
    assert_eq!(*w.nodes.joined.lock().unwrap(), ["default-abc12"]);
}

#[tokio::test(start_paused = true)]
async fn resumed_maintenance_with_the_api_up_applies() {
    let w = world(FakeRescue::reachable(), FakeTalos::default());
    w.em.deliver("srv-1");
    w.em.reboot_server("fr-par-2", "srv-1", BootType::Normal, &[])
        .await
        .unwrap();
    w.engine.resume(
        spec(URL),
        progress(Phase::Maintenance, Duration::from_secs(1)),
    );
    wait_for(&w.engine, Phase::Joined).await;
    assert_eq!(w.talos.applied.lock().unwrap().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn resumed_configured_waits_for_the_node_only() {
    let w = world_with(FakeRescue::reachable(), FakeTalos::default(), true);
    w.em.deliver("srv-1");
    w.engine.resume(
        spec(URL),
        progress(Phase::Configured, Duration::from_secs(1)),
    );
    wait_for(&w.engine, Phase::Joined).await;
    assert!(w.em.calls().is_empty());
    assert_eq!(*w.nodes.joined.lock().unwrap(), ["default-abc12"]);
    let (reason, _, message) = w.nodes.events().last().cloned().unwrap();
    assert_eq!(reason, "InstallJoined");
    // The total counts from the persisted start, 20 minutes before the restart.
    assert!(
        message.starts_with("joined: Node default-abc12 is Ready, 20m0"),
        "{message}"
    );
}

#[tokio::test(start_paused = true)]
async fn resumed_joined_only_finishes_the_join_again() {
    let w = world(FakeRescue::reachable(), FakeTalos::default());
    *w.nodes.failing_initializes.lock().unwrap() = 2;
    w.engine
        .resume(spec(URL), progress(Phase::Joined, Duration::from_secs(600)));
    assert_eq!(w.engine.phase("srv-1"), Some(Phase::Joined));
    settle().await;
    assert_eq!(
        *w.nodes.log.lock().unwrap(),
        ["initialize:default-abc12", "release:default-abc12"]
    );
    assert!(w.em.calls().is_empty());
    assert!(w.nodes.events().is_empty());
    assert!(w.nodes.progress.lock().unwrap().is_empty());
}

/// A join that cannot be finished now (the API server keeps failing) is
/// forgotten after its attempts, so that the next resume pass tries again.
#[tokio::test(start_paused = true)]
async fn an_unfinished_join_is_handed_over_again_by_the_next_resume() {
    let w = world(FakeRescue::reachable(), FakeTalos::default());
    *w.nodes.failing_initializes.lock().unwrap() = 7;
    w.engine
        .resume(spec(URL), progress(Phase::Joined, Duration::from_secs(600)));
    settle().await;
    assert_eq!(w.engine.phase("srv-1"), None, "forgotten after 5 attempts");
    assert!(w.nodes.log.lock().unwrap().is_empty());

    w.engine
        .resume(spec(URL), progress(Phase::Joined, Duration::from_secs(600)));
    settle().await;
    assert_eq!(
        *w.nodes.log.lock().unwrap(),
        ["initialize:default-abc12", "release:default-abc12"]
    );
    assert_eq!(w.engine.phase("srv-1"), Some(Phase::Joined));
}

#[tokio::test(start_paused = true)]
async fn resumed_failed_is_cleaned_up_again() {
    let w = world(FakeRescue::reachable(), FakeTalos::default());
    w.engine
        .resume(spec(URL), progress(Phase::Failed, Duration::from_secs(600)));
    settle().await;
    assert_eq!(w.em.count(Op::DeleteServer), 1);
    assert_eq!(w.nodes.deleted.lock().unwrap().len(), 1);
    assert!(w.nodes.events().is_empty());
    // The engine does not start a second install for the same server while
    // one runs, but a failed one may be handed again.
    assert_eq!(w.engine.phase("srv-1"), Some(Phase::Failed));
}

#[tokio::test(start_paused = true)]
async fn a_running_install_is_not_resumed_twice() {
    let w = world(FakeRescue::reachable(), FakeTalos::default());
    w.engine.start(spec(URL));
    w.engine.resume(
        spec(URL),
        progress(Phase::Configured, Duration::from_secs(1)),
    );
    assert_eq!(w.engine.phase("srv-1"), Some(Phase::Ordered));
    wait_for(&w.engine, Phase::Delivering).await;
}

/// The join's side effects in order, and `joined` persisted only after all of
/// them: a restart at any point in between resumes from `configured`.
#[tokio::test(start_paused = true)]
async fn joined_is_persisted_only_after_the_taint_and_the_token_are_gone() {
    let w = world_with(FakeRescue::reachable(), FakeTalos::default(), true);
    *w.nodes.failing_initializes.lock().unwrap() = 2;
    w.engine.resume(
        spec(URL),
        progress(Phase::Configured, Duration::from_secs(1)),
    );
    wait_for(&w.engine, Phase::Joined).await;
    settle().await;
    let log = w.nodes.log.lock().unwrap().clone();
    assert_eq!(
        log,
        [
            "save:configured",
            "initialize:default-abc12",
            "release:default-abc12",
            "save:joined"
        ]
    );
    // Both failed taint removals were retried, with no warning (a conflict
    // is the kubelet updating the Node).
    assert!(w.nodes.events().iter().all(|(_, warning, _)| !warning));
}
