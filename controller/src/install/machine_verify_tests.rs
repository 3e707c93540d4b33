//! The verified image write: stream hash, read-back, NodeClass checksum.

use tokio::time::Instant;

use super::*;

fn writing(attempts: u32) -> State {
    imaging(Instant::now(), Step::WriteImage, attempts)
}

#[test]
fn a_write_that_reads_back_identically_boots() {
    let p = plan();
    let t0 = Instant::now();
    let t = advance(&p, &writing(1), written(IMAGE_SHA), t0);
    assert_eq!(
        t.state.written,
        Some(Written {
            bytes: 1_306_525_696,
            sha256: IMAGE_SHA.into()
        })
    );
    let (s, _) = next(&p, &t.state, ok(""), t0);
    assert_eq!(s.step, Step::Verify);
    let t = advance(&p, &s, read_back(&IMAGE_SHA.to_uppercase()), t0);
    assert_eq!(
        (t.state.phase, &t.action),
        (Phase::Booting, &Action::RebootNormal)
    );
    assert_eq!(
        events(&t),
        [(
            "InstallPhase",
            false,
            "booting: image verified on /dev/nvme0n1 (1306525696 bytes, sha256 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08); rebooting into Talos"
        )]
    );
}

#[test]
fn a_read_back_mismatch_writes_again_before_any_reboot() {
    let p = plan();
    let t0 = Instant::now();
    let first = State {
        rescue_returns: 1,
        ..writing(1)
    };
    let (s, _) = next(&p, &first, written(IMAGE_SHA), t0);
    let (s, _) = next(&p, &s, ok(""), t0);
    let t = advance(&p, &s, read_back(OTHER_SHA), t0 + Duration::from_secs(30));
    assert_eq!(
        (t.state.phase, t.state.step, t.state.image_attempts),
        (Phase::Imaging, Step::WriteImage, 2)
    );
    assert_eq!(t.state.since, t0 + Duration::from_secs(30));
    assert_eq!(
        t.action,
        Action::Run {
            command: WRITE_AS_USER.into()
        }
    );
    assert_eq!(
        events(&t),
        [
            (
                "InstallRetry",
                true,
                "imaging: the 1306525696 bytes read back from /dev/nvme0n1 have sha256 60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752, not 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08 as streamed; writing the image again"
            ),
            (
                "InstallPhase",
                false,
                "imaging: writing https://img.example/v1.13.9/metal-amd64.raw.xz to /dev/nvme0n1 (attempt 2/2)"
            ),
        ]
    );
    // The second write does not verify either: the budget is spent.
    let (s, _) = next(&p, &t.state, written(IMAGE_SHA), t0);
    let (s, _) = next(&p, &s, ok(""), t0);
    let (s, a) = next(&p, &s, read_back(OTHER_SHA), t0);
    assert_eq!(s.phase, Phase::Failed);
    assert_eq!(class(&a), FailureClass::ImageAttempts);
    assert!(
        reason(&a).starts_with("the image write failed 2 time(s) in this rescue boot, after 1 return(s) to rescue; last: the 1306525696 bytes read back"),
        "{}",
        reason(&a)
    );
}

#[test]
fn a_failed_read_back_counts_as_a_bad_write() {
    let p = plan();
    let t0 = Instant::now();
    let s = State {
        written: Some(Written {
            bytes: 10,
            sha256: IMAGE_SHA.into(),
        }),
        ..imaging(t0, Step::Verify, 1)
    };
    let (s2, _) = next(&p, &s, failed(1, "dd: error reading '/dev/nvme0n1'"), t0);
    assert_eq!((s2.step, s2.image_attempts), (Step::WriteImage, 2));
    let (s3, _) = next(&p, &s, ok("garbage\n"), t0);
    assert_eq!((s3.step, s3.image_attempts), (Step::WriteImage, 2));
}

#[test]
fn the_stream_must_match_the_node_class_checksum() {
    let p = Plan {
        image_sha256: Some(IMAGE_SHA.into()),
        ..plan()
    };
    let t0 = Instant::now();
    // Matches: on to sync.
    let (s, _) = next(&p, &writing(1), written(IMAGE_SHA), t0);
    assert_eq!(s.step, Step::Sync);

    // Differs: written again without syncing or verifying.
    let t = advance(&p, &writing(1), written(OTHER_SHA), t0);
    assert_eq!(
        (t.state.step, t.state.image_attempts),
        (Step::WriteImage, 2)
    );
    assert_eq!(t.state.checksum_mismatches, 1);
    assert_eq!(
        events(&t)[0],
        (
            "InstallRetry",
            true,
            "imaging: image https://img.example/v1.13.9/metal-amd64.raw.xz streamed sha256 60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752, but the NodeClass expects 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08; writing the image again"
        )
    );
    // Differs on every attempt: the mirror or the checksum is wrong.
    let (s, a) = next(&p, &t.state, written(OTHER_SHA), t0);
    assert_eq!(s.phase, Phase::Failed);
    assert_eq!(class(&a), FailureClass::Image);
    assert_eq!(
        reason(&a),
        "image https://img.example/v1.13.9/metal-amd64.raw.xz streamed sha256 60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752, but the NodeClass expects 9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08 (on each of the 2 attempts)"
    );

    // A mismatch after another kind of failure is an exhausted budget: a
    // fresh rescue boot while one is left, then the install fails.
    let s = State {
        checksum_mismatches: 0,
        ..writing(2)
    };
    let (s2, a) = next(&p, &s, written(OTHER_SHA), t0);
    assert_eq!((s2.phase, a), (Phase::Ready, Action::RebootRescue));
    let s = State {
        rescue_returns: 1,
        ..s
    };
    let (_, a) = next(&p, &s, written(OTHER_SHA), t0);
    assert_eq!(class(&a), FailureClass::ImageAttempts);
}

#[test]
fn write_output_without_a_byte_count_or_hash_fails_clearly() {
    let p = plan();
    let t0 = Instant::now();
    let (_, a) = next(&p, &writing(1), ok(&format!("{IMAGE_SHA}  -\n")), t0);
    assert_eq!(
        reason(&a),
        "cannot read the result of the image write: no byte count in the output of dd"
    );
    assert_eq!(class(&a), FailureClass::Rescue);
    let empty = Observation::Command(CommandOutput {
        exit_status: 0,
        stdout: format!("{IMAGE_SHA}  -\n"),
        stderr: "0+0 records in\n0+0 records out\n0 bytes copied, 0.1 s, 0 B/s\n".into(),
    });
    let t = advance(&p, &writing(1), empty, t0);
    assert_eq!(t.state.image_attempts, 2);
    assert_eq!(
        events(&t)[0].2,
        "imaging: the image stream was empty; writing the image again"
    );
}

#[test]
fn plan_takes_the_checksum_in_lowercase_and_refuses_a_malformed_one() {
    let mut spec = crate::install::tests_support::spec(URL);
    spec.image_sha256 = Some(IMAGE_SHA.to_uppercase());
    let plan = Plan::new(&spec, &InstallSettings::default()).expect("plan");
    assert_eq!(plan.image_sha256.as_deref(), Some(IMAGE_SHA));
    spec.image_sha256 = Some(String::new());
    let plan = Plan::new(&spec, &InstallSettings::default()).expect("plan");
    assert_eq!(plan.image_sha256, None);
    spec.image_sha256 = Some("abc".into());
    assert_eq!(
        Plan::new(&spec, &InstallSettings::default()),
        Err("the NodeClass image checksum for amd64 is not a sha256 (64 hex digits)".into())
    );
}
