use std::time::Duration;

use tokio::time::Instant;

use super::*;
use crate::install::machine::{Action, FailureClass, Step};

fn progress(phase: Option<Phase>) -> Progress {
    Progress {
        phase,
        disk: Some("sda".into()),
        mac: Some("52:54:00:aa:bb:cc".into()),
        image_attempts: 2,
        rescue_returns: 1,
        host_key: Some("SHA256:key".into()),
        ..Progress::default()
    }
}

#[test]
fn each_persisted_phase_has_its_entry_point() {
    let now = Instant::now();
    let since = now - Duration::from_secs(300);
    let cases = [
        (
            None,
            Phase::Ordered,
            Step::AwaitDelivery,
            Action::PollServer,
        ),
        (
            Some(Phase::Ordered),
            Phase::Ordered,
            Step::AwaitDelivery,
            Action::PollServer,
        ),
        (
            Some(Phase::Delivering),
            Phase::Delivering,
            Step::AwaitDelivery,
            Action::PollServer,
        ),
        (
            Some(Phase::Ready),
            Phase::Ready,
            Step::RebootRescue,
            Action::RebootRescue,
        ),
        (
            Some(Phase::Rescue),
            Phase::Rescue,
            Step::ResumeRescue,
            Action::PollServer,
        ),
        (
            Some(Phase::Imaging),
            Phase::Rescue,
            Step::ResumeRescue,
            Action::PollServer,
        ),
        (
            Some(Phase::Booting),
            Phase::Booting,
            Step::ResumeBooting,
            Action::PollServer,
        ),
        (
            Some(Phase::Maintenance),
            Phase::Maintenance,
            Step::ResumeMaintenance,
            Action::PollServer,
        ),
        // An adoption: at maintenance, without doubt about an earlier apply.
        (
            Some(Phase::Standby),
            Phase::Maintenance,
            Step::Adopt,
            Action::PollServer,
        ),
        (
            Some(Phase::Configured),
            Phase::Configured,
            Step::AwaitNode,
            Action::PollNode,
        ),
        (
            Some(Phase::Joined),
            Phase::Joined,
            Step::Done,
            Action::Finish,
        ),
    ];
    for (persisted, phase, step, action) in cases {
        let (s, a) = resume(&progress(persisted), since, now);
        assert_eq!((s.phase, s.step, a), (phase, step, action), "{persisted:?}");
        // What the install learned comes back.
        assert_eq!(s.disk.as_deref(), Some("sda"));
        assert_eq!(s.mac.as_deref(), Some("52:54:00:aa:bb:cc"));
        assert_eq!((s.image_attempts, s.rescue_returns), (2, 1));
        assert_eq!(s.host_key.as_deref(), Some("SHA256:key"));
        // Deadlines continue, except for an interrupted write and an
        // adoption (the standby phase has no deadline to continue).
        let expected_since = match persisted {
            Some(Phase::Imaging | Phase::Standby) => now,
            _ => since,
        };
        assert_eq!(s.since, expected_since, "{persisted:?}");
        assert_eq!(s.apply_uncertain_since, None, "{persisted:?}");
    }
    let (s, a) = resume(&progress(Some(Phase::Failed)), since, now);
    assert_eq!(s.phase, Phase::Failed);
    assert!(matches!(
        a,
        Action::Fail {
            class: FailureClass::Internal,
            ..
        }
    ));
}

#[test]
fn booting_maintenance_or_standby_without_disk_and_mac_installs_again() {
    let now = Instant::now();
    for phase in [Phase::Booting, Phase::Maintenance, Phase::Standby] {
        for (disk, mac) in [
            (Some("sda"), None),
            (None, Some("52:54:00:aa:bb:cc")),
            (None, None),
        ] {
            let p = Progress {
                disk: disk.map(str::to_string),
                mac: mac.map(str::to_string),
                ..progress(Some(phase))
            };
            let (s, a) = resume(&p, now - Duration::from_secs(60), now);
            assert_eq!(
                (s.phase, s.step, a),
                (Phase::Ready, Step::RebootRescue, Action::RebootRescue),
                "{phase:?} {disk:?} {mac:?}"
            );
            assert_eq!((s.since, s.image_attempts), (now, 0));
        }
    }
}

#[test]
fn every_phase_round_trips_through_its_name() {
    let all = [
        Phase::Ordered,
        Phase::Delivering,
        Phase::Ready,
        Phase::Rescue,
        Phase::Imaging,
        Phase::Booting,
        Phase::Maintenance,
        Phase::Configured,
        Phase::Joined,
        Phase::Failed,
        Phase::Standby,
    ];
    for phase in all {
        assert_eq!(Phase::parse(phase.as_str()), Some(phase));
        assert_eq!(phase.to_string(), phase.as_str());
    }
    assert_eq!(Phase::Standby.as_str(), "standby");
    assert_eq!(Phase::parse("standby"), Some(Phase::Standby));
    assert_eq!(Phase::parse("Standby"), None);
    let names: std::collections::HashSet<&str> = all.iter().map(|p| p.as_str()).collect();
    assert_eq!(names.len(), all.len(), "every name is distinct");
    let terminal: Vec<Phase> = all.into_iter().filter(|p| p.is_terminal()).collect();
    assert_eq!(terminal, [Phase::Joined, Phase::Failed, Phase::Standby]);
}

#[test]
fn standby_progress_round_trips_through_annotations() {
    let p = Progress {
        phase: Some(Phase::Standby),
        phase_since: Some("2026-03-01T10:12:40Z".parse().unwrap()),
        started: Some("2026-03-01T10:00:00Z".parse().unwrap()),
        ..progress(Some(Phase::Standby))
    };
    let annotations = p.to_annotations();
    let get = |key: &str| {
        annotations
            .get(&format!("install.karpenter.scaleway.com/{key}"))
            .map(String::as_str)
    };
    assert_eq!(get("phase"), Some("standby"));
    assert_eq!(get("disk"), Some("sda"));
    assert_eq!(get("mac"), Some("52:54:00:aa:bb:cc"));
    let back = Progress::from_annotations(&annotations);
    assert_eq!(back, p);
    // What an adoption needs comes back with it.
    let (s, _) = resume(&back, Instant::now(), Instant::now());
    assert_eq!((s.phase, s.step), (Phase::Maintenance, Step::Adopt));
}

#[test]
fn progress_round_trips_through_annotations() {
    let p = Progress {
        phase: Some(Phase::Imaging),
        phase_since: Some("2026-03-01T10:00:05Z".parse().unwrap()),
        started: Some("2026-03-01T09:51:00Z".parse().unwrap()),
        ..progress(Some(Phase::Imaging))
    };
    let annotations = p.to_annotations();
    assert_eq!(
        annotations
            .get("install.karpenter.scaleway.com/started")
            .map(String::as_str),
        Some("2026-03-01T09:51:00Z")
    );
    assert_eq!(Progress::from_annotations(&annotations), p);
}

#[test]
fn deadlines_are_overridden_by_name() {
    let mut d = crate::install::Deadlines::default();
    d.set("booting", Duration::from_secs(30)).expect("known");
    assert_eq!(d.booting, Duration::from_secs(30));
    assert_eq!(d.imaging, Duration::from_secs(20 * 60), "others unchanged");
    assert_eq!(
        d.set("boot", Duration::from_secs(1)),
        Err("unknown install deadline \"boot\" (one of delivery, rescue, imaging, booting, maintenance, join)".into())
    );
    assert!(d.set("join", Duration::ZERO).is_err());
}
