//! Failure handling end to end: re-imaging, back to rescue, capacity.

use super::*;

#[tokio::test(start_paused = true)]
async fn a_write_that_does_not_read_back_is_written_again_before_rebooting() {
    let w = world(FakeRescue::reachable(), FakeTalos::default());
    w.rescue.disk.lock().unwrap().corrupt_writes = 1;
    w.em.deliver("srv-1");
    w.engine.start(spec(URL));
    wait_for(&w.engine, Phase::Joined).await;

    assert_eq!(w.rescue.writes(), 2);
    // No reboot between the two writes: only one normal boot in all.
    assert_eq!(w.reboots(), [BootType::Rescue, BootType::Normal]);
    let retries: Vec<String> = w
        .nodes
        .events()
        .into_iter()
        .filter(|(r, _, _)| r == "InstallRetry")
        .map(|(_, _, m)| m)
        .collect();
    assert_eq!(
        retries,
        [format!(
            "imaging: the {IMAGE_BYTES} bytes read back from /dev/nvme0n1 have sha256 {CORRUPT_SHA}, not {IMAGE_SHA} as streamed; writing the image again"
        )]
    );
    assert_eq!(w.nodes.last_progress().image_attempts, 2);
}

#[tokio::test(start_paused = true)]
async fn a_session_lost_mid_stream_reconnects_with_the_trusted_key_and_writes_again() {
    let w = world(FakeRescue::reachable(), FakeTalos::default());
    w.rescue.disk.lock().unwrap().drop_writes = 1;
    w.em.deliver("srv-1");
    w.engine.start(spec(URL));
    wait_for(&w.engine, Phase::Joined).await;

    assert_eq!(w.rescue.writes(), 2);
    let trusted: Vec<Option<String>> = w
        .rescue
        .connects
        .lock()
        .unwrap()
        .iter()
        .map(|(_, _, t)| t.clone())
        .collect();
    assert_eq!(trusted, [None, Some(HOST_KEY.to_string())]);
    assert!(w.nodes.reasons().contains(&"InstallRetry".to_string()));
}

#[tokio::test(start_paused = true)]
async fn maintenance_never_up_goes_back_to_rescue_then_joins() {
    let w = world(
        FakeRescue::reachable(),
        FakeTalos {
            never_up_boots: 1,
            ..Default::default()
        },
    );
    w.em.deliver("srv-1");
    w.engine.start(spec(URL));
    wait_for(&w.engine, Phase::Joined).await;

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
    // The second rescue boot is trusted afresh.
    let trusted: Vec<Option<String>> = w
        .rescue
        .connects
        .lock()
        .unwrap()
        .iter()
        .map(|(_, _, t)| t.clone())
        .collect();
    assert_eq!(trusted, [None, None]);
    let last = w.nodes.last_progress();
    assert_eq!((last.rescue_returns, last.image_attempts), (1, 1));
    assert!(
        w.nodes.events().iter().any(|(r, warning, m)| {
            r == "InstallRetry"
            && *warning
            && m.starts_with(
                "booting: the Talos maintenance API did not come up within 600s of the normal boot"
            )
        }),
        "{:?}",
        w.nodes.events()
    );
    assert_eq!(w.em.count(Op::DeleteServer), 0);
}

#[tokio::test(start_paused = true)]
async fn maintenance_never_up_twice_fails_and_cleans_up() {
    let w = world(
        FakeRescue::reachable(),
        FakeTalos {
            never_up_boots: 2,
            ..Default::default()
        },
    );
    w.em.deliver("srv-1");
    w.engine.start(spec(URL));
    wait_for(&w.engine, Phase::Failed).await;
    settle().await;

    let reason = "the Talos maintenance API did not come up within 600s of the normal boot, after 1 return(s) to rescue";
    assert_eq!(w.reboots().len(), 4);
    assert_eq!(w.em.count(Op::DeleteServer), 1);
    assert_eq!(w.em.server("srv-1").unwrap().status, ServerStatus::Deleting);
    assert_eq!(
        *w.nodes.deleted.lock().unwrap(),
        [("default-abc12".to_string(), reason.to_string())]
    );
    assert_eq!(
        w.nodes.events().last().cloned().unwrap(),
        (
            "InstallFailed".to_string(),
            true,
            format!("failed: {reason}")
        )
    );
    assert_eq!(w.nodes.last_progress().phase, Some(Phase::Failed));
    assert!(w.talos.applied.lock().unwrap().is_empty());
}

#[tokio::test(start_paused = true)]
async fn out_of_stock_after_the_order_marks_the_offering_and_cleans_up() {
    let w = world(FakeRescue::reachable(), FakeTalos::default());
    w.engine.start(spec(URL));
    wait_for(&w.engine, Phase::Delivering).await;
    w.em.set_status("srv-1", ServerStatus::OutOfStock);
    wait_for(&w.engine, Phase::Failed).await;
    settle().await;

    assert_eq!(
        *w.capacity.unavailable.lock().unwrap(),
        [("EM-A115X-SSD".to_string(), "fr-par-2".to_string())]
    );
    let events = w.nodes.events();
    let tail: Vec<(&str, bool)> = events[events.len() - 2..]
        .iter()
        .map(|(r, w, _)| (r.as_str(), *w))
        .collect();
    assert_eq!(
        tail,
        [("InsufficientCapacity", true), ("InstallFailed", true)]
    );
    assert_eq!(
        events[events.len() - 2].2,
        "offer EM-A115X-SSD went out of stock in fr-par-2 after the order; marked unavailable so that Karpenter picks another offering"
    );
    assert_eq!(w.em.count(Op::DeleteServer), 1);
    assert_eq!(w.nodes.deleted.lock().unwrap().len(), 1);
    assert_eq!(w.em.count(Op::RebootServer), 0);
}

#[tokio::test(start_paused = true)]
async fn the_server_deletion_is_retried_with_backoff_until_it_succeeds() {
    let w = world(FakeRescue::reachable(), FakeTalos::default());
    for _ in 0..3 {
        w.em.fail_next(
            Op::DeleteServer,
            crate::scaleway::ApiError::TransientState("server is rebooting".into()),
        );
    }
    w.em.fail_next(
        Op::DeleteServer,
        crate::scaleway::ApiError::Unauthorized("token expired".into()),
    );
    w.engine.start(spec(URL));
    wait_for(&w.engine, Phase::Delivering).await;
    w.em.set_status("srv-1", ServerStatus::Error);
    wait_for(&w.engine, Phase::Failed).await;
    settle().await;

    assert_eq!(w.em.count(Op::DeleteServer), 5);
    assert_eq!(w.em.server("srv-1").unwrap().status, ServerStatus::Deleting);
    // The NodeClaim is not held up by the server's retries.
    assert_eq!(
        *w.nodes.deleted.lock().unwrap(),
        [(
            "default-abc12".to_string(),
            "the server is in status error".to_string()
        )]
    );
}

#[tokio::test(start_paused = true)]
async fn an_empty_bootstrap_token_fails_instead_of_rendering() {
    let w = world(FakeRescue::reachable(), FakeTalos::default());
    w.em.deliver("srv-1");
    let mut s = spec(URL);
    s.bootstrap_token = Secret::default();
    w.engine.start(s);
    wait_for(&w.engine, Phase::Failed).await;
    settle().await;
    assert!(w.talos.applied.lock().unwrap().is_empty());
    assert_eq!(
        w.nodes.deleted.lock().unwrap()[0].1,
        "cannot render the machine config: no bootstrap token for this node"
    );
}
