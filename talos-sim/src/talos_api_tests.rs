use tonic::Code;

use super::*;
use crate::machine_config::tests::WORKER;
use crate::validator::tests::{CONFLICT_MESSAGE, stable_hostname_conflict, talos_config};

fn api(
    dir: &tempfile::TempDir,
    validator: Option<ConfigValidator>,
) -> (MaintenanceApi, mpsc::Receiver<Applied>) {
    let (tx, rx) = mpsc::channel(1);
    let api = MaintenanceApi::new(
        "srv-1",
        Ipv4Addr::new(127, 0, 0, 1),
        "v1.13.9",
        "amd64",
        "00",
        Disk::new(dir.path(), "srv-1", "nvme0n1", 1 << 20),
        Record::new("srv-1"),
        tx,
    )
    .with_validator(validator);
    (api, rx)
}

async fn apply(api: &MaintenanceApi, config: &str) -> Result<ApplyConfigurationResponse, Status> {
    api.apply_configuration(Request::new(ApplyConfigurationRequest {
        data: config.as_bytes().to_vec(),
        mode: Mode::Auto as i32,
        ..Default::default()
    }))
    .await
    .map(Response::into_inner)
}

#[tokio::test]
async fn talos_validation_refuses_with_talos_code_and_message() {
    let dir = tempfile::tempdir().unwrap();
    let (api, _rx) = api(&dir, Some(talos_config()));

    let status = apply(&api, &stable_hostname_conflict()).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert_eq!(status.message(), CONFLICT_MESSAGE);

    // Not loadable: Talos' decoder's message, not talos-sim's (which would
    // be "failed to decode config: ...").
    let status = apply(&api, "machine: [unclosed\n").await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(
        !status.message().starts_with("failed to decode config"),
        "{status:?}"
    );
    let unknown_kind = format!("{WORKER}\n---\napiVersion: v1alpha1\nkind: NoSuchConfig\n");
    let status = apply(&api, &unknown_kind).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument, "{status:?}");
    assert!(status.message().contains("NoSuchConfig"), "{status:?}");

    // Talos accepts a malformed bootstrap token; talos-sim's own contract
    // check still refuses it.
    let bad_token = WORKER.replace(
        "token: k8sabc.0123456789abcdef",
        "token: not-a-bootstrap-token",
    );
    assert_ne!(bad_token, WORKER);
    assert_eq!(
        talos_config().check(bad_token.as_bytes()).await.unwrap(),
        crate::validator::Verdict::Valid { warnings: vec![] }
    );
    let status = apply(&api, &bad_token).await.unwrap_err();
    assert_eq!(status.code(), Code::InvalidArgument);
    assert!(status.message().contains("cluster.token"), "{status:?}");

    // Nothing refused was recorded as applied.
    assert!(api.record.snapshot().applied_configs.is_empty());
}

#[tokio::test]
async fn a_config_talos_accepts_is_applied() {
    let dir = tempfile::tempdir().unwrap();
    let (api, mut rx) = api(&dir, Some(talos_config()));
    let reply = apply(&api, WORKER).await.expect("valid config applied");
    assert_eq!(
        reply.messages[0].mode_details,
        "Applied configuration without a reboot"
    );
    assert!(reply.messages[0].warnings.is_empty());
    let applied = rx.recv().await.expect("sent for install");
    assert_eq!(applied.node.hostname.as_deref(), Some("default-abcde"));
}

#[tokio::test]
async fn without_a_validator_only_talos_sims_checks_apply() {
    let dir = tempfile::tempdir().unwrap();
    let (api, mut rx) = api(&dir, None);
    // Talos refuses a config that does not persist; talos-sim alone does
    // not know that rule: why the e2e always passes the validator.
    let not_persisted = WORKER.replacen("persist: true", "persist: false", 1);
    assert_ne!(not_persisted, WORKER);
    match talos_config()
        .check(not_persisted.as_bytes())
        .await
        .unwrap()
    {
        crate::validator::Verdict::Invalid(m) => {
            assert!(m.contains(".persist should be enabled"), "{m}")
        }
        other => panic!("Talos should refuse it, got {other:?}"),
    }
    apply(&api, &not_persisted)
        .await
        .expect("no machinery, no refusal");
    assert!(rx.recv().await.is_some());
}

#[tokio::test(start_paused = true)]
async fn an_apply_with_latency_does_nothing_until_it_has_passed() {
    let dir = tempfile::tempdir().unwrap();
    let (api, mut rx) = api(&dir, None);
    let latency = Duration::from_millis(1500);
    let api = api.with_apply_latency(latency);

    // A client that gives up within the latency applied nothing.
    let cut = tokio::time::timeout(latency - Duration::from_millis(1), apply(&api, WORKER)).await;
    assert!(cut.is_err(), "answered within the latency: {cut:?}");
    assert!(api.record.snapshot().applied_configs.is_empty());
    assert!(rx.try_recv().is_err());

    // One that waits gets the config applied, no sooner than the latency.
    let started = tokio::time::Instant::now();
    apply(&api, WORKER).await.expect("applied");
    assert!(started.elapsed() >= latency, "{:?}", started.elapsed());
    assert!(rx.recv().await.is_some());
}
