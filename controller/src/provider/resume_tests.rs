use std::sync::Arc;

use serde_json::{Value, json};

use super::*;
use crate::install::Phase;
use crate::provider::tests::{Fixture, RecordingInstaller, ZONE, claim, fixture};
use crate::provider::{ClusterPorts, ProviderSettings};
use crate::scaleway::fake::Op;

/// The same cloud, cluster and catalog seen by a new process: what a restart
/// or a new leader finds.
fn restarted(f: &Fixture) -> (Provider, Arc<RecordingInstaller>) {
    let installer = Arc::new(RecordingInstaller::default());
    let provider = Provider::new(
        f.api.clone(),
        f.catalog.clone(),
        f.classes.clone(),
        installer.clone(),
        ClusterPorts {
            tokens: f.tokens.clone(),
            nodes: f.nodes.clone(),
        },
        ProviderSettings {
            cluster_name: "test".into(),
            project_id: crate::provider::tests::PROJECT.into(),
            zones: vec![ZONE.into(), "nl-ams-1".into()],
            instance_zones: vec![ZONE.into(), "nl-ams-1".into()],
        },
    );
    (provider, installer)
}

/// A NodeClaim Create launched, as Karpenter stored it, with progress.
async fn launched(f: &Fixture, name: &str, phase: Option<&str>) -> Value {
    let mut c = f
        .provider
        .create(claim(name, &["EM-A115X-SSD"]))
        .await
        .unwrap();
    c["metadata"]["uid"] = json!(format!("uid-{name}"));
    if let Some(phase) = phase {
        c["metadata"]["annotations"] = json!({
            "install.karpenter.scaleway.com/phase": phase,
            "install.karpenter.scaleway.com/disk": "sda",
            "install.karpenter.scaleway.com/image-attempts": "1",
        });
    }
    c
}

#[tokio::test]
async fn resumes_in_flight_installs_with_the_spec_create_built() {
    let f = fixture();
    let c = launched(&f, "default-a", Some("imaging")).await;
    let (provider, installer) = restarted(&f);

    let report = provider.resume_installs(std::slice::from_ref(&c)).await;
    assert_eq!(
        report,
        vec![("default-a".to_string(), ResumeOutcome::Resumed)]
    );
    let (spec, progress) = installer.resumed.lock().unwrap()[0].clone();
    assert_eq!(progress.phase, Some(Phase::Imaging));
    assert_eq!(progress.disk.as_deref(), Some("sda"));
    assert_eq!(progress.image_attempts, 1);

    // Same install as Create handed the first process, same token.
    let first = f.installer.started.lock().unwrap()[0].clone();
    assert_eq!(spec.server_id, first.server_id);
    assert_eq!(spec.provider_id, first.provider_id);
    assert_eq!(spec.labels, first.labels);
    assert_eq!(spec.taints, first.taints);
    assert_eq!(spec.image_url, first.image_url);
    assert_eq!(spec.offer_name, first.offer_name);
    assert_eq!(spec.bootstrap_token, first.bootstrap_token);
    assert_eq!(spec.base_machine_config, first.base_machine_config);
    assert!(first.kubelet_reservations.is_some());
    assert_eq!(spec.kubelet_reservations, first.kubelet_reservations);
    assert_eq!(*f.tokens.created.lock().unwrap(), 1);

    // The next pass leaves it to the engine that now runs it.
    let again = provider.resume_installs(&[c]).await;
    assert_eq!(again[0].1, ResumeOutcome::AlreadyKnown);
    assert_eq!(installer.resumed.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn a_claim_without_progress_is_resumed_from_the_start() {
    let f = fixture();
    let c = launched(&f, "default-a", None).await;
    let (provider, installer) = restarted(&f);
    provider.resume_installs(&[c]).await;
    let resumed = installer.resumed.lock().unwrap();
    assert_eq!(resumed[0].1.phase, None);
}

#[tokio::test]
async fn finished_deleting_and_unlaunched_claims_are_left_alone() {
    let f = fixture();
    let mut joined = launched(&f, "default-a", Some("joined")).await;
    joined["status"]["conditions"] =
        json!([{"type": "Initialized", "status": "True", "reason": "Initialized"}]);
    let failed = launched(&f, "default-b", Some("failed")).await;
    let mut deleting = launched(&f, "default-c", Some("booting")).await;
    deleting["metadata"]["deletionTimestamp"] = json!("2026-01-01T00:00:00Z");
    let unlaunched = claim("default-d", &["EM-A115X-SSD"]);
    let (provider, installer) = restarted(&f);

    let report = provider
        .resume_installs(&[joined, failed, deleting, unlaunched])
        .await;
    assert!(
        report.iter().all(|(_, o)| *o == ResumeOutcome::Inactive),
        "{report:?}"
    );
    assert!(installer.resumed.lock().unwrap().is_empty());
}

/// A provider killed after persisting `joined` but before the Node lost its
/// `uninitialized` taint (what older versions did) leaves a NodeClaim that
/// Karpenter never marks Initialized: it is handed to the engine again, which
/// finishes the join. Once Initialized, it is left alone.
#[tokio::test]
async fn a_joined_claim_karpenter_has_not_initialized_is_finished_again() {
    let f = fixture();
    let mut c = launched(&f, "default-a", Some("joined")).await;
    c["status"]["conditions"] = json!([
        {"type": "Registered", "status": "True", "reason": "Registered"},
        {"type": "Initialized", "status": "Unknown", "reason": "NotInitialized"}
    ]);
    let (provider, installer) = restarted(&f);

    let report = provider.resume_installs(std::slice::from_ref(&c)).await;
    assert_eq!(report[0].1, ResumeOutcome::Resumed);
    assert_eq!(
        installer.resumed.lock().unwrap()[0].1.phase,
        Some(Phase::Joined)
    );

    c["status"]["conditions"] =
        json!([{"type": "Initialized", "status": "True", "reason": "Initialized"}]);
    let (provider, installer) = restarted(&f);
    let report = provider.resume_installs(std::slice::from_ref(&c)).await;
    assert_eq!(report[0].1, ResumeOutcome::Inactive);
    assert!(installer.resumed.lock().unwrap().is_empty());

    // Rebooted in place by core (v1.15): not Initialized for a while, yet
    // joined; nothing to finish.
    c["status"]["conditions"] = json!([
        {"type": "Rebooting", "status": "True", "reason": "RebootIssued"},
        {"type": "Initialized", "status": "Unknown", "reason": "Rebooting"}
    ]);
    let (provider, installer) = restarted(&f);
    let report = provider.resume_installs(&[c]).await;
    assert_eq!(report[0].1, ResumeOutcome::Inactive);
    assert!(installer.resumed.lock().unwrap().is_empty());
}

#[tokio::test]
async fn other_providers_and_foreign_servers_are_not_ours() {
    let f = fixture();
    let mut other_kind = launched(&f, "default-a", Some("imaging")).await;
    other_kind["spec"]["nodeClassRef"] =
        json!({"group": "karpenter.k8s.aws", "kind": "EC2NodeClass", "name": "default"});
    let mut other_pid = launched(&f, "default-b", Some("imaging")).await;
    other_pid["status"]["providerID"] = json!("aws:///eu-west-1a/i-0123");

    // A server of another cluster behind a providerID of our format.
    let mut foreign = f.api.servers()[0].clone();
    foreign.id = "foreign".into();
    foreign.tags = vec!["karpenter.scaleway.com/cluster=other".into()];
    f.api.insert_server(foreign);
    let mut foreign_claim = launched(&f, "default-c", Some("imaging")).await;
    foreign_claim["status"]["providerID"] = json!(format!("scaleway://baremetal/{ZONE}/foreign"));

    let (provider, installer) = restarted(&f);
    let report = provider
        .resume_installs(&[other_kind, other_pid, foreign_claim])
        .await;
    assert!(
        report.iter().all(|(_, o)| *o == ResumeOutcome::NotOurs),
        "{report:?}"
    );
    assert!(installer.resumed.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_vanished_server_is_left_to_karpenter() {
    let f = fixture();
    let c = launched(&f, "default-a", Some("delivering")).await;
    f.provider.delete(&c).await.unwrap();
    let (provider, installer) = restarted(&f);
    // Being deleted, then gone: neither is resumed.
    assert_eq!(
        provider.resume_installs(std::slice::from_ref(&c)).await[0].1,
        ResumeOutcome::ServerGone
    );
    f.api.finish_deletions();
    assert_eq!(
        provider.resume_installs(&[c]).await[0].1,
        ResumeOutcome::ServerGone
    );
    assert!(installer.resumed.lock().unwrap().is_empty());
    assert_eq!(f.api.count(Op::CreateServer), 1, "resume never orders");
}

#[tokio::test]
async fn transient_problems_are_retried_next_pass() {
    let f = fixture();
    let c = launched(&f, "default-a", Some("rescue")).await;
    let (provider, installer) = restarted(&f);

    f.api.fail_next(
        Op::GetServer,
        crate::scaleway::ApiError::Unavailable("503".into()),
    );
    assert!(matches!(
        provider.resume_installs(std::slice::from_ref(&c)).await[0].1,
        ResumeOutcome::Retry(_)
    ));

    let secrets = std::mem::take(&mut *f.classes.secrets.lock().unwrap());
    assert!(matches!(
        provider.resume_installs(std::slice::from_ref(&c)).await[0].1,
        ResumeOutcome::Retry(_)
    ));
    *f.classes.secrets.lock().unwrap() = secrets;

    *f.tokens.fail_next.lock().unwrap() =
        Some(crate::provider::KubeError::Unavailable("503".into()));
    assert!(matches!(
        provider.resume_installs(std::slice::from_ref(&c)).await[0].1,
        ResumeOutcome::Retry(_)
    ));
    assert!(installer.resumed.lock().unwrap().is_empty());

    assert_eq!(
        provider.resume_installs(&[c]).await[0].1,
        ResumeOutcome::Resumed
    );
}
