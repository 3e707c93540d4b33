//! Reboot through the provider, against the in-memory Elastic Metal fake
//! and the in-memory NodeClaims: what is called, what is recorded, what is
//! answered. The rig is shared with the VM tests (`flow_vm_tests.rs`), the
//! slow calls (`flow_cut_tests.rs`) and the deadline (`watch_tests.rs`).

use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::fakes::{FakeClaimStore, RecordingNodes};
use super::*;
use crate::metrics::reboot_metrics;
use crate::provider::tests::{Fixture, ZONE, fixture};
use crate::provider::vm::{InstanceClassRecord, InstanceClasses};
use crate::provider::{ClusterPorts, ProviderSettings};
use crate::scaleway::fake::Op;
use crate::scaleway::instance::fake::FakeInstance;
use crate::scaleway::{ApiError, BootType, Server};

pub(super) const OP: &str = "0b6f-uid-1763805600000000000-boot-a";
const STAMP: &str = "2026-11-22T10:00:10.000000Z";

struct NoClasses;

impl InstanceClasses for NoClasses {
    fn get(&self, _: &str) -> Option<InstanceClassRecord> {
        None
    }
}

pub(super) struct Rig {
    pub f: Fixture,
    pub vms: Arc<FakeInstance>,
    pub clock: Arc<Mutex<DateTime<Utc>>>,
    pub provider: Arc<Provider>,
}

impl Rig {
    pub fn claims(&self) -> &Arc<FakeClaimStore> {
        &self.f.claims
    }

    pub fn nodes(&self) -> &Arc<RecordingNodes> {
        &self.f.reboot_nodes
    }

    pub fn advance(&self, seconds: i64) {
        *self.clock.lock().unwrap() += chrono::Duration::seconds(seconds);
    }

    pub fn now(&self) -> DateTime<Utc> {
        *self.clock.lock().unwrap()
    }

    /// Another provider on the same cloud and cluster (a second replica).
    pub fn replica(&self) -> Arc<Provider> {
        Arc::new(build(&self.f, &self.vms, &self.clock, true))
    }
}

pub(super) fn build(
    f: &Fixture,
    vms: &Arc<FakeInstance>,
    clock: &Arc<Mutex<DateTime<Utc>>>,
    instances: bool,
) -> Provider {
    let provider = Provider::new(
        f.api.clone(),
        f.catalog.clone(),
        f.classes.clone(),
        f.installer.clone(),
        ClusterPorts {
            tokens: f.tokens.clone(),
            nodes: f.nodes.clone(),
        },
        ProviderSettings {
            cluster_name: "test".into(),
            project_id: "proj-1".into(),
            zones: vec![ZONE.into()],
            instance_zones: vec![ZONE.into()],
        },
    );
    let provider = if instances {
        provider.with_instances(VmPorts {
            api: vms.clone(),
            block: vms.clone(),
            classes: Arc::new(NoClasses),
        })
    } else {
        provider
    };
    let clock = clock.clone();
    provider.with_reboots(RebootPorts {
        claims: f.claims.clone(),
        nodes: f.reboot_nodes.clone(),
        settings: RebootSettings {
            baremetal_deadline: Duration::from_secs(600),
            instance_deadline: Duration::from_secs(300),
            call_timeout: Duration::from_secs(60),
        },
        clock: Arc::new(move || *clock.lock().unwrap()),
    })
}

pub(super) fn rig() -> Rig {
    let f = fixture();
    let vms = Arc::new(FakeInstance::new());
    let clock = Arc::new(Mutex::new(
        "2026-11-22T10:30:00Z".parse::<DateTime<Utc>>().unwrap(),
    ));
    let provider = Arc::new(build(&f, &vms, &clock, true));
    Rig {
        f,
        vms,
        clock,
        provider,
    }
}

pub(super) const NODE_TAGS: [&str; 3] = [
    "karpenter.scaleway.com/cluster=test",
    "karpenter.sh/nodeclaim=default-a",
    "karpenter.scaleway.com/nodeclass=default",
];

pub(super) fn em_server(tags: &[&str]) -> Server {
    serde_json::from_value(json!({
        "id": "srv-1", "name": "default-a", "status": "ready", "offer_id": "o",
        "offer_name": "EM-A115X-SSD", "zone": ZONE, "boot_type": "normal",
        "tags": tags, "created_at": "2026-11-22T09:00:00.000000Z", "updated_at": STAMP
    }))
    .unwrap()
}

/// A joined Elastic Metal node in core's reboot episode `boot-a`.
pub(super) fn em_claim(name: &str) -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {
            "name": name, "uid": "0b6f-uid",
            "annotations": {
                "install.karpenter.scaleway.com/phase": "joined",
                "karpenter.sh/reboot-pre-boot-id": "boot-a"
            }
        },
        "status": {
            "providerID": format!("scaleway://baremetal/{ZONE}/srv-1"),
            "nodeName": name,
            "conditions": [{"type": "Initialized", "status": "True"}]
        }
    })
}

/// A joined EM node `default-a` on server `srv-1`.
pub(super) fn em_node(r: &Rig) -> Value {
    r.f.api.insert_server(em_server(&NODE_TAGS));
    let c = em_claim("default-a");
    r.claims().insert(c.clone());
    c
}

pub(super) fn reboots(r: &Rig) -> Vec<BootType> {
    r.f.api
        .calls()
        .into_iter()
        .filter(|c| c.op == Op::RebootServer)
        .filter_map(|c| c.boot_type)
        .collect()
}

/// Writes `record` on the NodeClaim as an earlier call would have.
pub(super) fn put_record(r: &Rig, name: &str, record: &RebootRecord) {
    r.claims()
        .set_annotation(name, REBOOT_ANNOTATION, Some(&record.to_json()));
}

pub(super) fn issuing(r: &Rig, stamp: &str) -> RebootRecord {
    RebootRecord {
        operation: OP.into(),
        state: RebootState::Issuing,
        kind: MachineKind::Baremetal,
        zone: ZONE.into(),
        server_id: "srv-1".into(),
        server_stamp: stamp.into(),
        pre_boot_id: Some("boot-a".into()),
        issued_at: r.now(),
        accepted_at: None,
    }
}

#[tokio::test]
async fn an_elastic_metal_reboot_is_recorded_called_once_and_replayed() {
    let r = rig();
    let claim = em_node(&r);
    let accepted = reboot_metrics().counted("baremetal", "accepted");
    let replayed = reboot_metrics().counted("baremetal", "replayed");

    r.provider.reboot(&claim, OP).await.unwrap();
    assert_eq!(reboots(&r), [BootType::Normal]);
    let record = r.claims().record("default-a").unwrap();
    assert_eq!(record.state, RebootState::Accepted);
    assert_eq!(record.operation, OP);
    assert_eq!(record.kind, MachineKind::Baremetal);
    assert_eq!(record.server_stamp, STAMP, "read before the call");
    assert_eq!(record.pre_boot_id.as_deref(), Some("boot-a"));
    assert_eq!(record.issued_at, r.now());
    // `issuing` guarded by the version read, `accepted` after the call.
    let writes = r.claims().writes.lock().unwrap().clone();
    assert_eq!(writes.len(), 2);
    assert!(writes[0].2.is_some(), "{writes:?}");
    assert_eq!(writes[1].2, None);
    assert_eq!(r.nodes().reasons("default-a"), ["RebootRequested"]);
    let event = r.nodes().last_event().unwrap();
    assert!(!event.warning);
    assert!(event.message.contains("srv-1"), "{}", event.message);
    assert!(
        event.message.contains("boot type normal"),
        "{}",
        event.message
    );
    assert!(reboot_metrics().counted("baremetal", "accepted") > accepted);

    // Core asks again (a lost answer, a restart): no second reboot.
    r.advance(30);
    r.provider.reboot(&claim, OP).await.unwrap();
    r.replica().reboot(&claim, OP).await.unwrap();
    assert_eq!(reboots(&r).len(), 1);
    assert_eq!(r.f.api.count(Op::GetServer), 1, "a replay reads nothing");
    assert_eq!(r.nodes().reasons("default-a"), ["RebootRequested"]);
    assert!(reboot_metrics().counted("baremetal", "replayed") >= replayed + 2);
}

#[tokio::test]
async fn a_new_operation_replaces_the_record_and_reboots_again() {
    let r = rig();
    let claim = em_node(&r);
    r.provider.reboot(&claim, OP).await.unwrap();
    r.claims()
        .set_annotation("default-a", PRE_BOOT_ID_ANNOTATION, Some("boot-b"));
    let next = "0b6f-uid-1763809200000000000-boot-b";
    r.provider.reboot(&claim, next).await.unwrap();
    assert_eq!(reboots(&r).len(), 2);
    let record = r.claims().record("default-a").unwrap();
    assert_eq!(record.operation, next);
    assert_eq!(record.pre_boot_id.as_deref(), Some("boot-b"));
    assert_eq!(record.state, RebootState::Accepted);
}

#[tokio::test]
async fn a_crash_after_the_issuing_record_calls_once_its_window_has_passed() {
    let r = rig();
    let claim = em_node(&r);
    // The process died right after writing `issuing`: nothing was called.
    put_record(&r, "default-a", &issuing(&r, STAMP));
    r.advance(10);
    let err = r.provider.reboot(&claim, OP).await.unwrap_err();
    assert!(matches!(err, ProviderError::NotNow(_)), "{err}");
    assert!(reboots(&r).is_empty());
    assert_eq!(r.nodes().reasons("default-a"), ["RebootDeferred"]);

    // Past the call bound (60 s) and the margin: it never landed.
    r.advance(56);
    r.provider.reboot(&claim, OP).await.unwrap();
    assert_eq!(reboots(&r).len(), 1);
    let record = r.claims().record("default-a").unwrap();
    assert_eq!(record.state, RebootState::Accepted);
    assert_eq!(
        record.issued_at,
        r.now(),
        "a new issuing record for the new call"
    );
    r.provider.reboot(&claim, OP).await.unwrap();
    assert_eq!(reboots(&r).len(), 1);
}

#[tokio::test]
async fn a_crash_after_the_api_accepted_is_confirmed_without_a_second_call() {
    let r = rig();
    let claim = em_node(&r);
    put_record(&r, "default-a", &issuing(&r, STAMP));
    // The call landed, then the process died before recording `accepted`.
    r.f.api
        .reboot_server(ZONE, "srv-1", BootType::Normal, &[])
        .await
        .unwrap();
    r.f.api
        .set_status("srv-1", crate::scaleway::ServerStatus::Stopping);
    r.advance(3);
    r.provider.reboot(&claim, OP).await.unwrap();
    assert_eq!(reboots(&r).len(), 1, "only the call before the crash");
    let record = r.claims().record("default-a").unwrap();
    assert_eq!(record.state, RebootState::Accepted);
    assert_eq!(record.accepted_at, Some(r.now()));
    let event = r.nodes().last_event().unwrap();
    assert_eq!(event.reason, "RebootRequested");
    assert!(event.message.contains("landed"), "{}", event.message);
}

#[tokio::test]
async fn of_two_replicas_that_read_the_same_version_one_calls() {
    let r = rig();
    let claim = em_node(&r);
    // The other replica writes its `issuing` record first.
    let theirs = issuing(&r, STAMP).to_json();
    r.claims().race_next_write(move |claims| {
        claims.get_mut("default-a").unwrap()["metadata"]["annotations"][REBOOT_ANNOTATION] =
            json!(theirs);
    });
    let err = r.provider.reboot(&claim, OP).await.unwrap_err();
    assert!(matches!(err, ProviderError::NotNow(_)), "{err}");
    assert!(reboots(&r).is_empty(), "the loser does not call");
    // The winner's call lands; the loser's retry confirms it.
    r.f.api
        .reboot_server(ZONE, "srv-1", BootType::Normal, &[])
        .await
        .unwrap();
    r.advance(2);
    r.provider.reboot(&claim, OP).await.unwrap();
    assert_eq!(reboots(&r).len(), 1);

    // Two replicas asked at once: one reboot.
    let r = rig();
    let claim = em_node(&r);
    let other = r.replica();
    let (a, b) = tokio::join!(r.provider.reboot(&claim, OP), other.reboot(&claim, OP));
    assert_eq!(reboots(&r).len(), 1);
    assert!(a.is_ok() || b.is_ok());
    for result in [a, b] {
        assert!(
            matches!(result, Ok(()) | Err(ProviderError::NotNow(_))),
            "{result:?}"
        );
    }
}

/// One way a reboot must not happen: how to set it up, what is answered,
/// and the Event.
struct Case {
    what: &'static str,
    setup: Box<dyn Fn(&Rig)>,
    expected: fn(&ProviderError) -> bool,
    reason: &'static str,
}

fn case(
    what: &'static str,
    setup: impl Fn(&Rig) + 'static,
    expected: fn(&ProviderError) -> bool,
    reason: &'static str,
) -> Case {
    Case {
        what,
        setup: Box::new(setup),
        expected,
        reason,
    }
}

fn phase(r: &Rig, phase: &str) {
    r.claims().set_annotation(
        "default-a",
        "install.karpenter.scaleway.com/phase",
        Some(phase),
    );
}

#[tokio::test]
async fn never_into_an_install_a_standby_a_wipe_or_someone_elses_server() {
    let cases = [
        case(
            "install running",
            |r| phase(r, "imaging"),
            |e| matches!(e, ProviderError::NotNow(m) if m.contains("imaging")),
            "RebootDeferred",
        ),
        case(
            "install runs in this process",
            |r| {
                r.f.installer
                    .phases
                    .lock()
                    .unwrap()
                    .insert("srv-1".into(), crate::install::Phase::Configured);
            },
            |e| matches!(e, ProviderError::NotNow(_)),
            "RebootDeferred",
        ),
        case(
            "install failed",
            |r| phase(r, "failed"),
            |e| matches!(e, ProviderError::RebootRefused(_)),
            "RebootRefused",
        ),
        case(
            "wiped back to standby",
            |r| {
                r.f.api.insert_server(em_server(&[
                    "karpenter.scaleway.com/cluster=test",
                    "karpenter.scaleway.com/standby=default",
                    "karpenter.scaleway.com/recycled=true",
                    "install.karpenter.scaleway.com/phase=ready",
                ]))
            },
            |e| matches!(e, ProviderError::RebootRefused(m) if m.contains("wiping")),
            "RebootRefused",
        ),
        case(
            "another NodeClaim's",
            |r| {
                r.f.api.insert_server(em_server(&[
                    "karpenter.scaleway.com/cluster=test",
                    "karpenter.sh/nodeclaim=default-b",
                ]))
            },
            |e| matches!(e, ProviderError::RebootRefused(m) if m.contains("default-b")),
            "RebootRefused",
        ),
        case(
            "another cluster's",
            |r| {
                r.f.api.insert_server(em_server(&[
                    "karpenter.scaleway.com/cluster=prod",
                    "karpenter.sh/nodeclaim=default-a",
                ]))
            },
            |e| matches!(e, ProviderError::RebootRefused(_)),
            "RebootRefused",
        ),
        case(
            "in rescue",
            |r| {
                let mut s = em_server(&NODE_TAGS);
                s.boot_type = BootType::Rescue;
                r.f.api.insert_server(s);
            },
            |e| matches!(e, ProviderError::RebootRefused(m) if m.contains("rescue")),
            "RebootRefused",
        ),
        case(
            "stopping",
            |r| {
                r.f.api
                    .set_status("srv-1", crate::scaleway::ServerStatus::Stopping)
            },
            |e| matches!(e, ProviderError::NotNow(_)),
            "RebootDeferred",
        ),
        case(
            "being deleted",
            |r| {
                let mut c = r.claims().claim("default-a").unwrap();
                c["metadata"]["deletionTimestamp"] = json!("2026-11-22T10:29:00Z");
                r.claims().insert(c);
            },
            |e| matches!(e, ProviderError::RebootRefused(m) if m.contains("deleted")),
            "RebootRefused",
        ),
    ];
    for c in cases {
        let r = rig();
        let claim = em_node(&r);
        (c.setup)(&r);
        let what = c.what;
        let err = r.provider.reboot(&claim, OP).await.unwrap_err();
        assert!((c.expected)(&err), "{what}: {err}");
        assert!(reboots(&r).is_empty(), "{what}");
        assert_eq!(
            r.claims().record("default-a"),
            None,
            "{what}: nothing recorded"
        );
        assert_eq!(r.nodes().reasons("default-a"), [c.reason], "{what}");
        let event = r.nodes().last_event().unwrap();
        assert_eq!(event.warning, c.reason == "RebootRefused", "{what}");
    }
}

#[tokio::test]
async fn every_api_error_class_of_the_reboot_call() {
    let cases = [
        (
            ApiError::NotFound("server".into()),
            "not found",
            Some("RebootFailed"),
        ),
        (
            ApiError::Unauthorized("403 insufficient permissions".into()),
            "permission denied",
            Some("RebootFailed"),
        ),
        (
            ApiError::TransientState("Server is not delivered".into()),
            "not now",
            Some("RebootDeferred"),
        ),
        (ApiError::Throttled, "unavailable", None),
        (ApiError::Unavailable("502".into()), "unavailable", None),
        (ApiError::Timeout("30s".into()), "unavailable", None),
        (
            ApiError::Invalid("locked".into()),
            "reboot refused",
            Some("RebootRefused"),
        ),
    ];
    for (err, prefix, event) in cases {
        let r = rig();
        let claim = em_node(&r);
        r.f.api.fail_next(Op::RebootServer, err.clone());
        let got = r.provider.reboot(&claim, OP).await.unwrap_err();
        assert!(got.to_string().starts_with(prefix), "{err:?}: {got}");
        // The call was made once; its record stays `issuing` (a later call
        // settles whether it landed).
        assert_eq!(r.f.api.count(Op::RebootServer), 1);
        assert_eq!(
            r.claims().record("default-a").map(|r| r.state),
            Some(RebootState::Issuing)
        );
        assert_eq!(
            r.nodes().reasons("default-a"),
            event.into_iter().map(String::from).collect::<Vec<_>>(),
            "{err:?}"
        );
    }
    // Reading the server: gone is NotFound, forbidden is PermissionDenied,
    // and nothing is recorded.
    for (err, expected) in [
        (ApiError::NotFound("server".into()), "not found"),
        (ApiError::Unauthorized("401".into()), "permission denied"),
        (ApiError::Unavailable("503".into()), "unavailable"),
    ] {
        let r = rig();
        let claim = em_node(&r);
        r.f.api.fail_next(Op::GetServer, err);
        let got = r.provider.reboot(&claim, OP).await.unwrap_err();
        assert!(got.to_string().starts_with(expected), "{got}");
        assert_eq!(r.claims().record("default-a"), None);
        assert_eq!(r.f.api.count(Op::RebootServer), 0);
    }
}

#[tokio::test]
async fn the_nodeclaim_is_read_fresh_and_written_or_nothing_happens() {
    // Gone from the API server.
    let r = rig();
    let claim = em_node(&r);
    r.claims().remove("default-a");
    let err = r.provider.reboot(&claim, OP).await.unwrap_err();
    assert!(matches!(err, ProviderError::NotFound(_)), "{err}");

    // Replaced by another NodeClaim of the same name.
    let r = rig();
    let mut claim = em_node(&r);
    claim["metadata"]["uid"] = json!("older-uid");
    let err = r.provider.reboot(&claim, OP).await.unwrap_err();
    assert!(matches!(err, ProviderError::NotFound(m) if m.contains("replaced")));

    // Not readable, not writable.
    let r = rig();
    let claim = em_node(&r);
    r.claims()
        .fail_get
        .lock()
        .unwrap()
        .push_back(KubeError::Unavailable("503".into()));
    assert!(matches!(
        r.provider.reboot(&claim, OP).await,
        Err(ProviderError::Unavailable(_))
    ));
    r.claims()
        .fail_annotate
        .lock()
        .unwrap()
        .push_back(KubeError::Refused("403 forbidden".into()));
    assert!(matches!(
        r.provider.reboot(&claim, OP).await,
        Err(ProviderError::PermissionDenied(_))
    ));
    assert!(reboots(&r).is_empty(), "no reboot without its record");

    // No providerID, or not one of ours.
    let r = rig();
    let mut claim = em_claim("default-a");
    claim["status"]["providerID"] = json!("aws:///eu-west-1a/i-0");
    r.claims().insert(claim.clone());
    assert!(matches!(
        r.provider.reboot(&claim, OP).await,
        Err(ProviderError::Invalid(_))
    ));

    // A provider started without the ports refuses.
    let f = fixture();
    let bare = Provider::new(
        f.api.clone(),
        f.catalog.clone(),
        f.classes.clone(),
        f.installer.clone(),
        ClusterPorts {
            tokens: f.tokens.clone(),
            nodes: f.nodes.clone(),
        },
        ProviderSettings {
            cluster_name: "test".into(),
            project_id: "proj-1".into(),
            zones: vec![ZONE.into()],
            instance_zones: vec![ZONE.into()],
        },
    );
    assert!(matches!(
        bare.reboot(&em_claim("default-a"), OP).await,
        Err(ProviderError::RebootRefused(_))
    ));
}
