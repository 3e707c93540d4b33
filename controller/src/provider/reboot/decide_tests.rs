//! The pure rules of a Reboot call: replays, refusals, error classes.

use std::time::Duration;

use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use super::decide::*;
use super::record::{MachineKind, RebootRecord, RebootState};
use crate::install::Phase;
use crate::provider::{KubeError, ProviderError};
use crate::scaleway::{ApiError, Server};

const OP: &str = "uid-1-1763805600000000000-boot-a";
const STAMP: &str = "2026-11-22T10:00:10.000000Z";
const IN_FLIGHT: Duration = Duration::from_secs(65);

fn now() -> DateTime<Utc> {
    "2026-11-22T10:30:00Z".parse().unwrap()
}

fn record(operation: &str, state: RebootState, issued_secs_ago: i64) -> RebootRecord {
    RebootRecord {
        operation: operation.into(),
        state,
        kind: MachineKind::Baremetal,
        zone: "fr-par-2".into(),
        server_id: "srv-1".into(),
        server_stamp: STAMP.into(),
        pre_boot_id: Some("boot-a".into()),
        issued_at: now() - chrono::Duration::seconds(issued_secs_ago),
        accepted_at: None,
    }
}

fn machine(owner: Owner, power: Power, stamp: &str) -> Machine {
    Machine {
        kind: MachineKind::Baremetal,
        zone: "fr-par-2".into(),
        server_id: "srv-1".into(),
        owner,
        power,
        stamp: stamp.into(),
    }
}

fn up() -> Machine {
    machine(Owner::Ours, Power::Up, STAMP)
}

fn joined() -> Claim {
    Claim {
        deleting: false,
        install: Install::Joined,
    }
}

fn run(record: Option<&RebootRecord>, claim: &Claim, machine: &Machine) -> Decision {
    decide(OP, record, claim, machine, now(), IN_FLIGHT)
}

#[test]
fn only_an_accepted_record_of_the_same_operation_replays() {
    assert!(replayed(Some(&record(OP, RebootState::Accepted, 30)), OP));
    assert!(!replayed(Some(&record(OP, RebootState::Issuing, 30)), OP));
    assert!(!replayed(
        Some(&record("uid-1-1-boot-z", RebootState::Accepted, 30)),
        OP
    ));
    assert!(!replayed(None, OP));
}

#[test]
fn a_joined_node_on_its_own_ready_server_is_rebooted() {
    assert_eq!(run(None, &joined(), &up()), Decision::Issue);
    // Another operation's record (accepted or not) is replaced.
    for state in [RebootState::Accepted, RebootState::Issuing] {
        let old = record("uid-1-1-boot-z", state, 5);
        assert_eq!(run(Some(&old), &joined(), &up()), Decision::Issue);
    }
}

#[test]
fn an_issuing_call_whose_server_moved_is_confirmed_not_repeated() {
    let r = record(OP, RebootState::Issuing, 5);
    let moved = "2026-11-22T10:29:58.120000Z";
    // The reboot that landed makes the server busy and the install may read
    // as anything: the timestamp settles it first.
    for m in [
        machine(Owner::Ours, Power::Up, moved),
        machine(Owner::Ours, Power::Busy("stopping".into()), moved),
    ] {
        assert_eq!(run(Some(&r), &joined(), &m), Decision::Confirm);
    }
    let running = Claim {
        deleting: false,
        install: Install::Running("x".into()),
    };
    assert_eq!(
        run(Some(&r), &running, &machine(Owner::Ours, Power::Up, moved)),
        Decision::Confirm
    );
}

#[test]
fn an_issuing_call_whose_server_did_not_move_waits_out_its_window_then_calls_again() {
    let young = record(OP, RebootState::Issuing, 20);
    match run(Some(&young), &joined(), &up()) {
        Decision::NotNow(why) => assert!(why.contains("may still land"), "{why}"),
        other => panic!("{other:?}"),
    }
    let old = record(OP, RebootState::Issuing, 66);
    assert_eq!(run(Some(&old), &joined(), &up()), Decision::Issue);
    // No timestamp to compare: never "confirmed", called again once old.
    let mut blind = old.clone();
    blind.server_stamp = String::new();
    assert_eq!(
        run(
            Some(&blind),
            &joined(),
            &machine(Owner::Ours, Power::Up, "")
        ),
        Decision::Issue
    );
    // A record of another server is not this call's.
    let mut elsewhere = record(OP, RebootState::Issuing, 5);
    elsewhere.server_id = "srv-9".into();
    assert_eq!(run(Some(&elsewhere), &joined(), &up()), Decision::Issue);
}

#[test]
fn a_server_no_longer_this_nodeclaims_is_refused_even_when_it_moved() {
    let r = record(OP, RebootState::Issuing, 5);
    let m = machine(
        Owner::Other("server srv-1 is a standby server".into()),
        Power::Up,
        "2026-11-22T10:29:58Z",
    );
    assert_eq!(
        run(Some(&r), &joined(), &m),
        Decision::Refuse("server srv-1 is a standby server".into())
    );
}

#[test]
fn refusals_and_deferrals() {
    let deleting = Claim {
        deleting: true,
        install: Install::Joined,
    };
    assert!(matches!(run(None, &deleting, &up()), Decision::Refuse(_)));
    let running = Claim {
        deleting: false,
        install: Install::Running("phase imaging".into()),
    };
    assert_eq!(
        run(None, &running, &up()),
        Decision::NotNow("phase imaging".into())
    );
    let failed = Claim {
        deleting: false,
        install: Install::Ended("failed".into()),
    };
    assert_eq!(run(None, &failed, &up()), Decision::Refuse("failed".into()));
    let busy = machine(Owner::Ours, Power::Busy("starting".into()), STAMP);
    assert_eq!(
        run(None, &joined(), &busy),
        Decision::NotNow("starting".into())
    );
    let down = machine(Owner::Ours, Power::Down("stopped".into()), STAMP);
    assert_eq!(
        run(None, &joined(), &down),
        Decision::Refuse("stopped".into())
    );
}

fn server(status: &str, boot_type: &str, tags: &[&str]) -> Server {
    serde_json::from_value(json!({
        "id": "srv-1", "name": "n", "status": status, "offer_id": "o",
        "offer_name": "EM-A115X-SSD", "zone": "fr-par-2", "boot_type": boot_type,
        "tags": tags, "created_at": "2026-11-22T09:00:00Z", "updated_at": STAMP
    }))
    .unwrap()
}

const NODE_TAGS: &[&str] = &[
    "karpenter.scaleway.com/cluster=test",
    "karpenter.sh/nodeclaim=default-a",
];

#[test]
fn elastic_metal_ownership_from_the_tags() {
    let m = em_machine(&server("ready", "normal", NODE_TAGS), "test", "default-a");
    assert_eq!(m.owner, Owner::Ours);
    assert_eq!(m.power, Power::Up);
    assert_eq!(m.stamp, STAMP);
    assert_eq!(m.kind, MachineKind::Baremetal);

    // A node adopted from a recycled standby keeps `recycled=true`: still ours.
    let mut adopted = NODE_TAGS.to_vec();
    adopted.push("karpenter.scaleway.com/recycled=true");
    adopted.push("karpenter.scaleway.com/reservation-id=r-1");
    let m = em_machine(&server("ready", "normal", &adopted), "test", "default-a");
    assert_eq!(m.owner, Owner::Ours);

    let refused = |tags: &[&str], needle: &str| {
        let Owner::Other(why) =
            em_machine(&server("ready", "normal", tags), "test", "default-a").owner
        else {
            panic!("{tags:?} is ours");
        };
        assert!(why.contains(needle), "{why}");
    };
    refused(&["karpenter.sh/nodeclaim=default-a"], "cluster's tag");
    refused(
        &[
            "karpenter.scaleway.com/cluster=other",
            "karpenter.sh/nodeclaim=default-a",
        ],
        "cluster's tag",
    );
    refused(
        &[
            "karpenter.scaleway.com/cluster=test",
            "karpenter.sh/nodeclaim=default-b",
        ],
        "NodeClaim default-b",
    );
    refused(&["karpenter.scaleway.com/cluster=test"], "no NodeClaim");
    // Being wiped back to standby (Delete's recycling): the NodeClaim tag
    // is gone, the standby tag is on.
    refused(
        &[
            "karpenter.scaleway.com/cluster=test",
            "karpenter.scaleway.com/standby=default",
            "karpenter.scaleway.com/recycled=true",
            "install.karpenter.scaleway.com/phase=imaging",
        ],
        "standby server of NodeClass default (wiping)",
    );
    refused(
        &[
            "karpenter.scaleway.com/cluster=test",
            "karpenter.scaleway.com/standby=default",
            "install.karpenter.scaleway.com/phase=standby",
        ],
        "(idle)",
    );
}

#[test]
fn elastic_metal_power_from_status_and_boot_type() {
    let power = |status: &str, boot: &str| {
        em_machine(&server(status, boot, NODE_TAGS), "test", "default-a").power
    };
    assert_eq!(power("ready", "normal"), Power::Up);
    assert!(matches!(power("ready", "rescue"), Power::Down(w) if w.contains("rescue")));
    for busy in [
        "stopping",
        "starting",
        "resetting",
        "migrating",
        "delivering",
        "ordered",
    ] {
        assert!(
            matches!(power(busy, "normal"), Power::Busy(w) if w.contains(busy)),
            "{busy}"
        );
    }
    for down in [
        "stopped",
        "error",
        "locked",
        "out_of_stock",
        "deleting",
        "unknown",
    ] {
        assert!(matches!(power(down, "normal"), Power::Down(_)), "{down}");
    }
}

fn vm(state: &str, detail: &str, tags: &[&str]) -> crate::scaleway::instance::Server {
    serde_json::from_value(json!({
        "id": "vm-1", "name": "burst-a", "commercial_type": "POP2-2C-8G",
        "state": state, "state_detail": detail, "zone": "fr-par-2", "tags": tags,
        "modification_date": "2026-11-22T10:00:00.000000+00:00"
    }))
    .unwrap()
}

#[test]
fn vm_ownership_and_power() {
    let tags = &[
        "karpenter.scaleway.com/cluster=test",
        "karpenter.sh/nodeclaim=burst-a",
    ];
    let m = vm_machine(&vm("running", "booted", tags), "test", "burst-a");
    assert_eq!((m.owner, m.power), (Owner::Ours, Power::Up));
    assert_eq!(m.stamp, "2026-11-22T10:00:00.000000+00:00");
    assert_eq!(m.kind, MachineKind::Instance);
    let m = vm_machine(&vm("running", "booted", tags), "test", "burst-b");
    assert!(matches!(m.owner, Owner::Other(_)));
    let m = vm_machine(&vm("running", "booted", &tags[1..]), "test", "burst-a");
    assert!(matches!(m.owner, Owner::Other(_)));
    let power =
        |state: &str, detail: &str| vm_machine(&vm(state, detail, tags), "test", "burst-a").power;
    assert!(matches!(power("stopping", "terminating"), Power::Down(w) if w.contains("terminated")));
    assert!(matches!(power("starting", "rebooting"), Power::Busy(_)));
    assert!(matches!(power("stopping", ""), Power::Busy(_)));
    assert!(matches!(power("stopped", ""), Power::Down(_)));
    assert!(
        matches!(power("stopped in place", ""), Power::Down(w) if w.contains("stopped in place"))
    );
    assert!(matches!(power("locked", ""), Power::Down(_)));
}

fn claim_with(annotations: Value, conditions: Value) -> Value {
    json!({"metadata": {"name": "default-a", "annotations": annotations}, "status": {"conditions": conditions}})
}

#[test]
fn elastic_metal_install_from_the_persisted_phase_and_this_engine() {
    let phase = |p: &str| {
        claim_with(
            json!({"install.karpenter.scaleway.com/phase": p}),
            json!([]),
        )
    };
    assert_eq!(em_install(&phase("joined"), None), Install::Joined);
    assert_eq!(
        em_install(&phase("joined"), Some(Phase::Joined)),
        Install::Joined
    );
    assert!(
        matches!(em_install(&phase("joined"), Some(Phase::Configured)), Install::Running(w) if w.contains("configured"))
    );
    assert!(matches!(
        em_install(&phase("failed"), None),
        Install::Ended(_)
    ));
    assert!(matches!(
        em_install(&phase("standby"), None),
        Install::Ended(_)
    ));
    for p in [
        "ordered",
        "delivering",
        "ready",
        "rescue",
        "imaging",
        "booting",
        "maintenance",
        "configured",
    ] {
        assert!(
            matches!(em_install(&phase(p), None), Install::Running(w) if w.contains(p)),
            "{p}"
        );
    }
    assert!(matches!(
        em_install(&claim_with(json!({}), json!([])), None),
        Install::Running(_)
    ));
}

#[test]
fn a_vm_joined_once_its_nodeclaim_is_initialized() {
    let ready = claim_with(
        json!({}),
        json!([{"type": "Initialized", "status": "True"}]),
    );
    assert_eq!(vm_install(&ready), Install::Joined);
    let booting = claim_with(
        json!({}),
        json!([{"type": "Initialized", "status": "Unknown"}]),
    );
    assert!(matches!(vm_install(&booting), Install::Running(_)));
}

#[test]
fn every_api_error_class_has_its_answer() {
    let cases = [
        (ApiError::NotFound("gone".into()), "failed", "not found"),
        (
            ApiError::Unauthorized("403".into()),
            "failed",
            "permission denied",
        ),
        (ApiError::TransientState("409".into()), "not_now", "not now"),
        (ApiError::Throttled, "unavailable", "unavailable"),
        (
            ApiError::Unavailable("502".into()),
            "unavailable",
            "unavailable",
        ),
        (
            ApiError::Timeout("30s".into()),
            "unavailable",
            "unavailable",
        ),
        (
            ApiError::Inconsistent("x".into()),
            "unavailable",
            "unavailable",
        ),
        (
            ApiError::Invalid("locked".into()),
            "refused",
            "reboot refused",
        ),
        (
            ApiError::OutOfStock("x".into()),
            "refused",
            "reboot refused",
        ),
        (
            ApiError::QuotaExceeded("x".into()),
            "refused",
            "reboot refused",
        ),
    ];
    for (err, outcome_label, prefix) in cases {
        let e = api_error("rebooting server srv-1", err.clone());
        assert_eq!(outcome(&e), outcome_label, "{err:?}");
        assert!(e.to_string().starts_with(prefix), "{e}");
        assert!(e.to_string().contains("rebooting server srv-1"), "{e}");
    }
    assert!(matches!(
        api_error("x", ApiError::NotFound("gone".into())),
        ProviderError::NotFound(_)
    ));
    assert!(matches!(
        api_error("x", ApiError::Unauthorized("401".into())),
        ProviderError::PermissionDenied(_)
    ));
}

#[test]
fn kube_errors_have_their_answer() {
    assert!(matches!(
        kube_error("x", KubeError::Conflict("409".into())),
        ProviderError::NotNow(_)
    ));
    assert!(matches!(
        kube_error("x", KubeError::Unavailable("503".into())),
        ProviderError::Unavailable(_)
    ));
    assert!(matches!(
        kube_error("x", KubeError::Refused("403".into())),
        ProviderError::PermissionDenied(_)
    ));
    assert_eq!(outcome(&ProviderError::Invalid("x".into())), "failed");
}
