use serde_json::{Value, json};

use super::*;
use crate::model::BootType;

const ID: &str = "6bc4b49b-bd60-4d64-8ffc-9346f18ef88b";

/// An admin record as emsim lists it (abridged to what a VM shows).
fn record(state: &str, actions: &[&str]) -> Value {
    json!({
        "id": ID, "name": "default-x7k2p", "hostname": "default-x7k2p",
        "arch": "x86_64", "commercial_type": "L4-1-24G", "zone": "fr-par-2",
        "state": state, "state_detail": "booting kernel",
        "image": {"id": "0b5d7a6c-1f4e-4b7a-9d1b-2a8c3e4f5a6b", "name": "talos-v1.11.5-amd64",
                  "arch": "x86_64", "tags": ["talos"]},
        "tags": ["karpenter.sh/nodepool=gpu"],
        "address": "127.77.0.12", "powered_on": state == "running", "pending": null,
        "user_data_keys": ["cloud-init"],
        "actions": actions.iter().map(|a| json!({"at": "2026-11-22T10:00:00.000000Z", "action": a}))
            .collect::<Vec<_>>(),
        "deleted_at": null,
        "hardware": {"ncpus": 8, "ram": 51_539_607_552u64, "gpu": 1,
                     "gpu_info": {"gpu_manufacturer": "NVIDIA", "gpu_name": "L4", "gpu_memory": 25_769_803_776u64},
                     "root_volume_size": 20_000_000_000u64},
    })
}

fn vm(value: Value) -> AdminVm {
    serde_json::from_value(value).unwrap()
}

/// What a listing tells the simulator, as short strings.
fn said(tracker: &mut Tracker, servers: &[Value]) -> Vec<String> {
    let servers: Vec<AdminVm> = servers.iter().cloned().map(vm).collect();
    tracker
        .changes(&servers)
        .into_iter()
        .map(|c| match c {
            Change::Command(Command::PowerOn(on)) => match on.platform {
                Platform::Scaleway(b) => format!("on {} boot {}", on.server_id, b.boot),
                Platform::Metal => panic!("a VM boots the scaleway platform"),
            },
            Change::Command(Command::PowerOff { server_id, .. }) => format!("off {server_id}"),
            Change::Command(Command::Deleted { server_id }) => format!("deleted {server_id}"),
            Change::Unreadable { server_id, error } => format!("unreadable {server_id}: {error}"),
        })
        .collect()
}

#[test]
fn a_running_vm_boots_its_image_on_its_hardware() {
    let on = vm(record("running", &["create", "poweron"]))
        .power_on()
        .unwrap();
    assert_eq!(on.server_id, ID);
    assert_eq!(on.server_name, "default-x7k2p");
    assert_eq!(on.boot_type, BootType::Normal);
    assert_eq!(on.address, Ipv4Addr::new(127, 77, 0, 12));
    assert_eq!(on.machine.threads, 8);
    assert_eq!(on.machine.memory_bytes, 51_539_607_552);
    assert_eq!(on.machine.disk_size, 20_000_000_000);
    assert_eq!(on.machine.gpus, 1);
    assert_eq!(on.machine.uname_arch, "x86_64");
    let Platform::Scaleway(boot) = on.platform else {
        panic!("not a VM boot")
    };
    assert_eq!(boot.zone, "fr-par-2");
    assert_eq!(boot.boot, 1);
    assert_eq!(boot.image.version, "v1.11.5");
    assert_eq!(boot.image.arch, "amd64");
    assert_eq!(
        boot.provider_id(ID),
        format!("scaleway://instance/fr-par-2/{ID}")
    );
}

#[test]
fn arm_vms_and_gpus_of_other_makers() {
    let mut value = record("running", &["create", "poweron"]);
    value["arch"] = json!("arm64");
    value["hardware"]["gpu_info"] = json!({"gpu_manufacturer": "AMD", "gpu_name": "MI300X"});
    let on = vm(value.clone()).power_on().unwrap();
    assert_eq!(on.machine.uname_arch, "aarch64");
    assert_eq!(on.machine.gpus, 0, "only NVIDIA's device plugin is played");
    let Platform::Scaleway(boot) = on.platform else {
        panic!("not a VM boot")
    };
    assert_eq!(boot.image.arch, "arm64");

    value["arch"] = json!("riscv64");
    assert_eq!(
        vm(value).power_on().unwrap_err(),
        VmError::Invalid {
            field: "arch",
            value: "riscv64".into()
        }
    );
}

#[test]
fn talos_versions_come_from_image_names() {
    assert_eq!(talos_version("talos-v1.11.5-amd64"), "v1.11.5");
    assert_eq!(talos_version("talos_v1.13.0_arm64"), "v1.13.0");
    assert_eq!(talos_version("my-image"), "unknown");
    assert_eq!(talos_version("talos-vm-amd64"), "unknown");
}

#[test]
fn the_tracker_boots_running_vms_once_per_boot() {
    let mut t = Tracker::default();
    assert!(said(&mut t, &[record("stopped", &["create"])]).is_empty());
    assert!(said(&mut t, &[record("starting", &["create", "poweron"])]).is_empty());
    let running = record("running", &["create", "poweron"]);
    assert_eq!(
        said(&mut t, std::slice::from_ref(&running)),
        vec![format!("on {ID} boot 1")]
    );
    assert!(said(&mut t, &[running]).is_empty(), "the same boot");

    // A reboot seen in flight, then done.
    assert_eq!(
        said(
            &mut t,
            &[record("starting", &["create", "poweron", "reboot"])]
        ),
        vec![format!("off {ID}")]
    );
    assert_eq!(
        said(
            &mut t,
            &[record("running", &["create", "poweron", "reboot"])]
        ),
        vec![format!("on {ID} boot 2")]
    );
    // A reboot between two polls: running both times, a new boot.
    assert_eq!(
        said(
            &mut t,
            &[record(
                "running",
                &["create", "poweron", "reboot", "reboot"]
            )]
        ),
        vec![format!("on {ID} boot 3")]
    );
    // Terminate: stopping at the call, then gone.
    let terminating = record(
        "stopping",
        &["create", "poweron", "reboot", "reboot", "terminate"],
    );
    assert_eq!(
        said(&mut t, std::slice::from_ref(&terminating)),
        vec![format!("off {ID}")]
    );
    assert!(said(&mut t, &[terminating]).is_empty());
    assert_eq!(said(&mut t, &[]), vec![format!("deleted {ID}")]);
    assert!(said(&mut t, &[]).is_empty());
}

#[test]
fn a_poweron_that_falls_back_to_stopped_never_boots() {
    let mut t = Tracker::default();
    assert!(said(&mut t, &[record("starting", &["create", "poweron"])]).is_empty());
    assert!(said(&mut t, &[record("stopped", &["create", "poweron"])]).is_empty());
    assert_eq!(
        said(
            &mut t,
            &[record("running", &["create", "poweron", "poweron"])]
        ),
        vec![format!("on {ID} boot 2")]
    );
}

#[test]
fn an_unreadable_running_vm_is_reported_once_per_boot() {
    let mut t = Tracker::default();
    let mut value = record("running", &["create", "poweron"]);
    value.as_object_mut().unwrap().remove("hardware");
    assert_eq!(
        said(&mut t, std::slice::from_ref(&value)),
        vec![format!("unreadable {ID}: running VM without hardware")]
    );
    assert!(said(&mut t, &[value]).is_empty());
}
