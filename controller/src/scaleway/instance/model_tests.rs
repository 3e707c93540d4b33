//! Decoding the bodies recorded against the real API (`testdata/instance/`)
//! and encoding the requests as the facts show them.

use serde_json::json;

use super::*;

use crate::scaleway::instance::fake::{recorded_availability, recorded_types};

const CREATED: &str =
    include_str!("../../../testdata/instance/server-create-L40S-1-48G-fr-par-2.json");

#[derive(serde::Deserialize)]
struct Created {
    server: Server,
}

#[test]
fn decodes_the_recorded_catalog() {
    let types = recorded_types();
    assert_eq!(
        types.keys().collect::<Vec<_>>(),
        ["H100-SXM-2-80G", "L4-1-24G", "POP2-2C-8G"]
    );
    let pop2 = &types["POP2-2C-8G"];
    assert_eq!(pop2.arch, Arch::X86_64);
    assert_eq!(pop2.arch.kubernetes(), Some("amd64"));
    assert_eq!(pop2.ncpus, 2);
    assert_eq!(pop2.ram, 8 * 1024 * 1024 * 1024);
    assert_eq!(pop2.gpu_count(), 0);
    assert_eq!(pop2.gpu_info, None);
    assert_eq!(pop2.hourly_price, 0.0735);
    assert_eq!(pop2.internet_bandwidth(), Some(400_000_000));
    assert_eq!(pop2.scratch_storage_max_size, Some(0));
    assert_eq!(
        pop2.per_volume_constraint.as_ref().unwrap().l_ssd,
        Some(SizeRange::default())
    );
    let caps = pop2.capabilities.as_ref().unwrap();
    assert_eq!(caps.boot_types, ["local", "rescue"]);
    assert_eq!(caps.block_storage, Some(true));
    assert_eq!(caps.private_network, Some(8));
    assert!(!pop2.end_of_service);

    let h100 = &types["H100-SXM-2-80G"];
    assert_eq!(h100.gpu_count(), 2);
    let gpu = h100.gpu_info.as_ref().unwrap();
    assert_eq!(
        (gpu.gpu_manufacturer.as_str(), gpu.gpu_name.as_str()),
        ("NVIDIA", "H100-SXM")
    );
    assert_eq!(gpu.gpu_memory, 80 * 1024 * 1024 * 1024);
    assert_eq!(h100.scratch_storage_max_size, Some(3_200_000_000_000));
    assert_eq!(h100.block_bandwidth, Some(5_242_880_000));
}

#[test]
fn decodes_the_recorded_availability() {
    let a = recorded_availability();
    assert_eq!(a.len(), 6);
    assert_eq!(a["POP2-2C-8G"], Availability::Available);
    assert_eq!(a["L40S-1-48G"], Availability::Scarce);
    assert_eq!(a["H100-1-80G"], Availability::Shortage);
    let unknown: TypeAvailability =
        serde_json::from_value(json!({"availability": "rationed"})).unwrap();
    assert_eq!(unknown.availability, Availability::Unknown);
}

#[test]
fn decodes_the_recorded_created_server() {
    let s = serde_json::from_str::<Created>(CREATED).unwrap().server;
    assert_eq!(s.id, "6bc4b49b-bd60-4d64-8ffc-9346f18ef88b");
    assert_eq!(s.commercial_type, "L40S-1-48G");
    assert_eq!(s.state, ServerState::Stopped, "a new server is stopped");
    assert_eq!(s.state_detail, "");
    assert_eq!(
        s.allowed_actions,
        [ServerAction::Poweron, ServerAction::Backup]
    );
    assert_eq!(s.public_ip, None);
    assert!(s.public_ips.is_empty());
    assert_eq!(s.ipv4(), None);
    assert_eq!(s.zone, "fr-par-2");
    assert_eq!(s.project, "105bdce1-64c0-48ab-899d-868455867ecf");
    assert_eq!(
        s.creation_date.as_deref(),
        Some("2026-07-30T12:53:17.694881+00:00")
    );
    assert_eq!(s.arch, Some(Arch::X86_64));
    assert_eq!(s.tags.len(), 3);
    assert_eq!(
        s.image.as_ref().map(|i| i.id.as_str()),
        Some("8063548b-7ade-4faa-8be1-f48f8d3ba3ea")
    );
    assert_eq!(
        s.security_group.as_ref().unwrap().name,
        "Default security group"
    );
    assert_eq!(s.placement_group, None);
    assert_eq!(s.volumes["0"].volume_type, VolumeType::SbsVolume);
    assert_eq!(s.volumes["0"].size, None, "SBS sizes live in the Block API");
    assert_eq!(s.volumes["1"].volume_type, VolumeType::Scratch);
    assert_eq!(s.volumes["1"].size, Some(1_600_000_000_000));
    // Only the SBS root outlives terminate.
    assert_eq!(s.sbs_volume_ids(), ["84500127-2893-4a3f-8790-dcf9e8e6213f"]);
}

#[test]
fn decodes_states_actions_and_ips() {
    let s: Server = serde_json::from_value(json!({
        "id": "s1", "name": "node-a", "commercial_type": "DEV1-S", "state": "stopped in place",
        "allowed_actions": ["poweron", "terminate_later_maybe"], "zone": "fr-par-1",
        "public_ip": {"id": "ip-d", "address": "51.15.0.1", "dynamic": true, "family": "inet"},
        "public_ips": [
            {"id": "ip-6", "address": "2001:bc8::1", "dynamic": false, "family": "inet6"},
            {"id": "ip-d", "address": "51.15.0.1", "dynamic": true, "family": "inet"},
            {"id": "ip-f", "address": "51.15.0.2", "dynamic": false, "family": "inet"}
        ]
    }))
    .unwrap();
    assert_eq!(s.state, ServerState::StoppedInPlace);
    assert_eq!(
        s.allowed_actions,
        [ServerAction::Poweron, ServerAction::Other]
    );
    assert_eq!(s.ipv4(), Some("51.15.0.1"));
    assert_eq!(s.flexible_ip_ids(), ["ip-6", "ip-f"]);
    let odd: ServerState = serde_json::from_value(json!("hibernating")).unwrap();
    assert_eq!(odd, ServerState::Other);
}

#[test]
fn encodes_a_create_with_an_sbs_root() {
    let mut req =
        CreateServerRequest::new("node-a", "POP2-2C-8G", "proj").with_sbs_root(20_000_000_000);
    req.image = Some("img-1".into());
    req.tags = vec!["karpenter.sh/nodeclaim=node-a".into()];
    req.security_group = Some("sg-1".into());
    req.boot_type = Some("local".into());
    assert_eq!(
        serde_json::to_value(&req).unwrap(),
        json!({
            "name": "node-a", "commercial_type": "POP2-2C-8G", "image": "img-1",
            "volumes": {"0": {"size": 20_000_000_000u64, "volume_type": "sbs_volume"}},
            "dynamic_ip_required": true, "project": "proj",
            "tags": ["karpenter.sh/nodeclaim=node-a"], "security_group": "sg-1",
            "boot_type": "local"
        })
    );
    // Without a root volume and optional ids, nothing of them is sent.
    assert_eq!(
        serde_json::to_value(CreateServerRequest::new("n", "DEV1-S", "p")).unwrap(),
        json!({"name": "n", "commercial_type": "DEV1-S", "dynamic_ip_required": true,
               "project": "p", "tags": []})
    );
}

#[test]
fn encodes_a_patch_of_only_what_changes() {
    let patch = ServerPatch {
        tags: Some(vec!["a".into()]),
        security_group: Some("sg-2".into()),
        ..Default::default()
    };
    assert_eq!(
        serde_json::to_value(&patch).unwrap(),
        json!({"tags": ["a"], "security_group": {"id": "sg-2"}})
    );
    assert_eq!(
        serde_json::to_value(ServerAction::StopInPlace).unwrap(),
        json!("stop_in_place")
    );
}
