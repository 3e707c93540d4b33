//! The standby install's port (progress on the server's tags, Events on the
//! NodeClass), with the helpers of `flow_tests.rs`.

use super::*;

#[tokio::test]
async fn the_standby_port_keeps_progress_on_the_servers_tags() {
    use crate::install::{InstallEvent, NodePort, NodePortError};
    use futures::FutureExt as _;

    let f = fixture();
    let events = Arc::new(FakeEvents::default());
    let port = StandbyNodePort::new(f.api.clone(), events.clone());
    let imaging = Progress {
        phase: Some(Phase::Imaging),
        ..Progress::default()
    };
    f.api
        .insert_server(standby("a", "2026-11-24T09:00:00Z", "hourly", &imaging));
    let key = format!("{ZONE}/a");
    let idle = port.idle_signal();

    port.save_progress(&key, &idle_since("2026-11-24T09:12:00Z"))
        .await
        .unwrap();
    let s = f.api.server("a").unwrap();
    assert!(has(&s, "install.karpenter.scaleway.com/phase=standby"));
    assert!(!has(&s, "install.karpenter.scaleway.com/phase=imaging"));
    assert!(has(&s, "team=infra") && has(&s, &format!("{TAG_STANDBY}={CLASS}")));
    assert_eq!(StandbyServer::of(&s).unwrap().state, State::Idle);
    assert!(
        idle.notified().now_or_never().is_some(),
        "an idle server is signalled at once"
    );
    // The same progress again writes nothing.
    let writes = f.api.count(Op::UpdateServerTags);
    port.save_progress(&key, &idle_since("2026-11-24T09:12:00Z"))
        .await
        .unwrap();
    assert_eq!(f.api.count(Op::UpdateServerTags), writes);

    // Adopted meanwhile: its progress is the NodeClaim's, the tags stay.
    f.api.insert_server(node_server("n", "warm-n", "hourly"));
    port.save_progress(&format!("{ZONE}/n"), &imaging)
        .await
        .unwrap();
    assert_eq!(f.api.count(Op::UpdateServerTags), writes);
    assert!(!has(
        &f.api.server("n").unwrap(),
        "install.karpenter.scaleway.com/phase=imaging"
    ));

    assert!(matches!(
        port.save_progress("not-a-key", &imaging).await,
        Err(NodePortError::Refused(_))
    ));
    f.api
        .fail_next(Op::GetServer, ApiError::Unavailable("503".into()));
    assert!(matches!(
        port.save_progress(&key, &imaging).await,
        Err(NodePortError::Unavailable(_))
    ));

    // Events go to the NodeClass: warnings and Standby… reasons only.
    let event = |warning: bool, reason: &str| InstallEvent {
        warning,
        reason: reason.into(),
        message: "m".into(),
    };
    port.event(&key, event(true, "InstallRetry")).await;
    assert!(
        events.events.lock().unwrap().is_empty(),
        "no NodeClass known yet"
    );
    port.register(&key, CLASS);
    port.event(&key, event(true, "InstallRetry")).await;
    port.event(&key, event(false, "InstallPhase")).await;
    port.event(&key, event(false, "StandbyReady")).await;
    let got = events.events.lock().unwrap().clone();
    assert_eq!(
        got,
        [
            (
                CLASS.to_string(),
                true,
                "StandbyInstallRetry".to_string(),
                "standby server a: m".to_string()
            ),
            (
                CLASS.to_string(),
                false,
                "StandbyReady".to_string(),
                "standby server a: m".to_string()
            ),
        ]
    );
}
