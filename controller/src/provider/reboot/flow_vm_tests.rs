//! Reboot of VMs through the provider, against the Instance fake.

use serde_json::{Value, json};

use super::flow_tests::{OP, Rig, build, issuing, put_record, rig};
use super::*;
use crate::provider::tests::ZONE;
use crate::scaleway::ApiError;
use crate::scaleway::instance::Instance as _;
use crate::scaleway::instance::fake::Op as VmOp;

fn vm_server(state: &str, detail: &str) -> crate::scaleway::instance::Server {
    serde_json::from_value(json!({
        "id": "vm-1", "name": "burst-a", "commercial_type": "POP2-2C-8G",
        "state": state, "state_detail": detail, "zone": ZONE,
        "tags": ["karpenter.scaleway.com/cluster=test", "karpenter.sh/nodeclaim=burst-a"],
        "modification_date": "2026-11-22T10:00:00.000000+00:00"
    }))
    .unwrap()
}

fn vm_node(r: &Rig, initialized: &str) -> Value {
    r.vms.insert_server(vm_server("running", "booted"));
    let c = json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {
            "name": "burst-a", "uid": "vm-uid",
            "annotations": {"karpenter.sh/reboot-pre-boot-id": "boot-v"}
        },
        "status": {
            "providerID": format!("scaleway://instance/{ZONE}/vm-1"),
            "conditions": [{"type": "Initialized", "status": initialized}]
        }
    });
    r.claims().insert(c.clone());
    c
}

#[tokio::test]
async fn a_vm_is_rebooted_once_by_its_reboot_action() {
    let r = rig();
    let claim = vm_node(&r, "True");
    r.provider.reboot(&claim, OP).await.unwrap();
    let actions: Vec<_> = r
        .vms
        .calls()
        .into_iter()
        .filter(|c| c.op == VmOp::Action)
        .map(|c| c.action)
        .collect();
    assert_eq!(actions, [Some(ServerAction::Reboot)]);
    let record = r.claims().record("burst-a").unwrap();
    assert_eq!(record.kind, MachineKind::Instance);
    assert_eq!(record.state, RebootState::Accepted);
    assert_eq!(record.server_stamp, "2026-11-22T10:00:00.000000+00:00");
    let event = r.nodes().last_event().unwrap();
    assert_eq!(event.reason, "RebootRequested");
    assert!(event.message.starts_with("VM vm-1"), "{}", event.message);
    r.provider.reboot(&claim, OP).await.unwrap();
    assert_eq!(r.vms.count(VmOp::Action), 1);
}

#[tokio::test]
async fn a_vm_reboot_that_landed_before_a_crash_is_confirmed_from_its_modification_date() {
    let r = rig();
    let claim = vm_node(&r, "True");
    let mut record = issuing(&r, "2026-11-22T10:00:00.000000+00:00");
    record.kind = MachineKind::Instance;
    record.server_id = "vm-1".into();
    put_record(&r, "burst-a", &record);
    r.vms
        .server_action(ZONE, "vm-1", ServerAction::Reboot)
        .await
        .unwrap();
    r.provider.reboot(&claim, OP).await.unwrap();
    assert_eq!(r.vms.count(VmOp::Action), 1);
    assert_eq!(
        r.claims().record("burst-a").unwrap().state,
        RebootState::Accepted
    );

    // Unchanged and old: it never landed; called now.
    let r = rig();
    let claim = vm_node(&r, "True");
    put_record(&r, "burst-a", &record);
    r.advance(120);
    r.provider.reboot(&claim, OP).await.unwrap();
    assert_eq!(r.vms.count(VmOp::Action), 1);
}

#[tokio::test]
async fn vm_refusals_and_errors() {
    // Not joined yet.
    let r = rig();
    let claim = vm_node(&r, "Unknown");
    assert!(matches!(
        r.provider.reboot(&claim, OP).await,
        Err(ProviderError::NotNow(m)) if m.contains("not joined")
    ));
    // Being terminated.
    let r = rig();
    let claim = vm_node(&r, "True");
    r.vms.insert_server(vm_server("stopping", "terminating"));
    assert!(matches!(
        r.provider.reboot(&claim, OP).await,
        Err(ProviderError::RebootRefused(_))
    ));
    // The action in the wrong state: not now.
    let r = rig();
    let claim = vm_node(&r, "True");
    r.vms.fail_next(
        VmOp::Action,
        ApiError::TransientState("server should be running".into()),
    );
    assert!(matches!(
        r.provider.reboot(&claim, OP).await,
        Err(ProviderError::NotNow(_))
    ));
    // Gone.
    let r = rig();
    let claim = vm_node(&r, "True");
    r.vms.fail_next(
        VmOp::GetServer,
        ApiError::NotFound("instance_server".into()),
    );
    assert!(matches!(
        r.provider.reboot(&claim, OP).await,
        Err(ProviderError::NotFound(_))
    ));
    // A provider that does not serve Instances.
    let r = rig();
    let claim = vm_node(&r, "True");
    let em_only = build(&r.f, &r.vms, &r.clock, false);
    assert!(matches!(
        em_only.reboot(&claim, OP).await,
        Err(ProviderError::RebootRefused(_))
    ));
}
