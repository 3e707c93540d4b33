use super::*;
use chrono::{TimeZone, Utc};

use crate::sim::IpRange;
use crate::timings::REAL_VM_BOOT;

const CATALOG: &str = r#"
types:
  - name: CPU-1
    zones: [fr-par-1]
    hourly_price: 0.1
    ncpus: 2
    ram: 4294967296
    bandwidth: 400000000
    l_ssd_max_size: 20000000000
    volumes_max_size: 20000000000
    quota: 2
  - name: GPU-1
    zones: [fr-par-1]
    hourly_price: 1.0
    ncpus: 8
    ram: 51539607552
    gpu: { count: 1, name: L4, memory: 25769803776 }
    bandwidth: 2500000000
    scratch_storage_max_size: 1600000000000
images:
  - { name: talos, arch: x86_64, zones: [fr-par-1] }
  - { name: talos-arm, arch: arm64, zones: [fr-par-1] }
"#;

const ZONE: &str = "fr-par-1";

fn t0() -> SimTime {
    Utc.with_ymd_and_hms(2026, 11, 24, 10, 0, 0).unwrap()
}

fn at(s: f64) -> SimTime {
    t0() + secs(s)
}

struct Fixture {
    world: InstanceWorld,
    pool: IpPool,
    faults: Faults,
}

fn fixture() -> Fixture {
    let catalog = InstanceCatalog::parse(CATALOG).unwrap();
    Fixture {
        world: InstanceWorld::new(catalog, 7, "org", "22222222-2222-4222-8222-222222222222"),
        pool: IpPool::new("127.77.0.0/16".parse::<IpRange>().unwrap()),
        faults: Faults::new(0),
    }
}

fn vm(commercial_type: &str) -> NewVm {
    NewVm {
        name: "node-a".into(),
        commercial_type: commercial_type.into(),
        image: None,
        volumes: BTreeMap::new(),
        dynamic_ip_required: true,
        public_ips: vec![],
        boot_type: "local".into(),
        project: None,
        tags: vec!["owner=test".into()],
        security_group: None,
        placement_group: None,
        protected: false,
    }
}

impl Fixture {
    fn create(&mut self, req: NewVm) -> Result<String, ApiError> {
        self.world.create(t0(), ZONE, req, &mut self.pool)
    }

    fn act(&mut self, now: SimTime, id: &str, action: VmAction) -> Result<(), ApiError> {
        self.world.advance(now, &mut self.pool);
        self.world.act(now, ZONE, id, action, &mut self.faults)
    }

    /// `(state, state_detail)` at `now`, or None once gone.
    fn state(&mut self, now: SimTime, id: &str) -> Option<(VmState, &'static str)> {
        self.world.advance(now, &mut self.pool);
        self.world
            .server(ZONE, id)
            .ok()
            .map(|s| (s.state, s.state_detail))
    }
}

#[test]
fn a_new_server_is_stopped_with_an_sbs_root() {
    let mut f = fixture();
    let id = f.create(vm("CPU-1")).unwrap();
    let server = f.world.server(ZONE, &id).unwrap();
    assert_eq!(server.state, VmState::Stopped);
    let wire = f.world.server_wire(server);
    assert_eq!(wire.allowed_actions, vec!["poweron", "backup"]);
    assert!(wire.public_ip.is_none());
    let root = &server.volumes["0"];
    let volume = f.world.block_volume(ZONE, root).unwrap();
    assert_eq!(volume.size, DEFAULT_ROOT_SIZE);
    assert_eq!(volume.server.as_ref().unwrap().0, id);
}

#[test]
fn poweron_allocates_then_runs_with_a_dynamic_ip() {
    let mut f = fixture();
    let id = f.create(vm("CPU-1")).unwrap();
    f.act(at(1.0), &id, VmAction::Poweron).unwrap();
    assert_eq!(
        f.state(at(10.9), &id),
        Some((VmState::Starting, "allocating node"))
    );
    assert_eq!(
        f.state(at(11.0), &id),
        Some((VmState::Running, "booting kernel"))
    );
    let wire = f.world.server_wire(f.world.server(ZONE, &id).unwrap());
    let ip = wire.public_ip.expect("a dynamic IP while running");
    assert!(ip.dynamic);
    assert_eq!(ip.address, "127.77.0.10");

    f.act(at(20.0), &id, VmAction::Poweroff).unwrap();
    let wire = f.world.server_wire(f.world.server(ZONE, &id).unwrap());
    assert!(wire.public_ip.is_none(), "the dynamic IP dies at poweroff");
    assert_eq!(f.state(at(64.9), &id).unwrap().0, VmState::Stopping);
    assert_eq!(f.state(at(65.0), &id), Some((VmState::Stopped, "")));
}

#[test]
fn gpu_types_provision_for_twenty_seconds() {
    let mut f = fixture();
    let id = f.create(vm("GPU-1")).unwrap();
    f.act(t0(), &id, VmAction::Poweron).unwrap();
    assert_eq!(
        f.state(at(10.0), &id),
        Some((VmState::Starting, "provisioning node"))
    );
    assert_eq!(
        f.state(at(29.9), &id),
        Some((VmState::Starting, "provisioning node"))
    );
    assert_eq!(f.state(at(30.0), &id).unwrap().0, VmState::Running);
}

#[test]
fn shortage_or_a_fault_falls_back_to_stopped() {
    let mut f = fixture();
    assert!(
        f.world
            .set_availability(ZONE, "CPU-1", Availability::Shortage)
    );
    let id = f.create(vm("CPU-1")).unwrap();
    f.act(t0(), &id, VmAction::Poweron).unwrap();
    assert_eq!(f.state(at(5.0), &id).unwrap().0, VmState::Starting);
    assert_eq!(f.state(at(10.0), &id), Some((VmState::Stopped, "")));
    let history: Vec<_> = f.world.server(ZONE, &id).unwrap().history.clone();
    assert_eq!(history.len(), 2, "never ran: {history:?}");

    f.world
        .set_availability(ZONE, "CPU-1", Availability::Available);
    f.faults
        .add(
            crate::faults::FaultSpec::OutOfStockAfterPoweron(crate::faults::PoweronMatch {
                commercial_type: Some("cpu-1".into()),
                zone: None,
                count: Some(1),
            }),
            &[],
            &[],
        )
        .unwrap();
    f.act(at(20.0), &id, VmAction::Poweron).unwrap();
    assert_eq!(f.state(at(30.0), &id), Some((VmState::Stopped, "")));
    assert!(f.faults.list().is_empty(), "the fault is spent");
    f.act(at(40.0), &id, VmAction::Poweron).unwrap();
    assert_eq!(f.state(at(50.0), &id).unwrap().0, VmState::Running);
}

#[test]
fn terminate_detaches_sbs_and_drops_local_volumes() {
    let mut f = fixture();
    let mut req = vm("CPU-1");
    req.volumes.insert(
        "0".into(),
        VolumeRequest {
            kind: VolumeKind::Sbs,
            size: Some(20_000_000_000),
            id: None,
        },
    );
    req.volumes.insert(
        "1".into(),
        VolumeRequest {
            kind: VolumeKind::LSsd,
            size: Some(10_000_000_000),
            id: None,
        },
    );
    let ip = f.world.create_ip(ZONE, None, vec![], &mut f.pool).unwrap();
    req.public_ips = vec![ip.clone()];
    let id = f.create(req).unwrap();
    let volumes = f.world.server(ZONE, &id).unwrap().volumes.clone();
    f.act(t0(), &id, VmAction::Poweron).unwrap();
    f.act(at(20.0), &id, VmAction::Terminate).unwrap();
    assert_eq!(
        f.state(at(20.0), &id),
        Some((VmState::Stopping, "terminating"))
    );
    assert_eq!(f.state(at(35.0), &id), None, "gone within 15 s");
    let root = f.world.block_volume(ZONE, &volumes["0"]).unwrap();
    assert!(root.server.is_none(), "the SBS root stays, detached");
    assert_eq!(root.size, 20_000_000_000);
    assert!(!f.world.volumes.contains_key(&volumes["1"]), "l_ssd dies");
    assert!(f.world.ip(ZONE, &ip).unwrap().server.is_none());
    f.world.delete_block_volume(ZONE, &volumes["0"]).unwrap();
    assert!(f.world.block_volume(ZONE, &volumes["0"]).is_err());
}

#[test]
fn terminate_takes_five_to_fifteen_seconds() {
    let mut f = fixture();
    let mut gone_after = Vec::new();
    for _ in 0..8 {
        let id = f.create(vm("GPU-1")).unwrap();
        f.act(t0(), &id, VmAction::Poweron).unwrap();
        f.act(at(30.0), &id, VmAction::Terminate).unwrap();
        let mut s = 30.0;
        while f.state(at(s), &id).is_some() {
            s += 0.5;
        }
        gone_after.push(s - 30.0);
    }
    assert!(
        gone_after.iter().all(|s| (5.0..=15.5).contains(s)),
        "{gone_after:?}"
    );
    assert!(
        gone_after.windows(2).any(|w| w[0] != w[1]),
        "drawn: {gone_after:?}"
    );
}

#[test]
fn delete_only_when_stopped_and_the_root_survives() {
    let mut f = fixture();
    let id = f.create(vm("CPU-1")).unwrap();
    let root = f.world.server(ZONE, &id).unwrap().volumes["0"].clone();
    f.act(t0(), &id, VmAction::Poweron).unwrap();
    f.world.advance(at(11.0), &mut f.pool);
    let refused = f
        .world
        .delete(at(11.0), ZONE, &id, &mut f.pool)
        .unwrap_err();
    assert_eq!(refused.body().unwrap()["type"], "invalid_request_error");
    f.act(at(12.0), &id, VmAction::Poweroff).unwrap();
    f.world.advance(at(60.0), &mut f.pool);
    f.world.delete(at(60.0), ZONE, &id, &mut f.pool).unwrap();
    assert!(f.world.server(ZONE, &id).is_err());
    assert!(f.world.block_volume(ZONE, &root).unwrap().server.is_none());
    // A deleted block volume is 404; an attached one is refused.
    let other = f.create(vm("CPU-1")).unwrap();
    let attached = f.world.server(ZONE, &other).unwrap().volumes["0"].clone();
    let err = f.world.delete_block_volume(ZONE, &attached).unwrap_err();
    assert_eq!(err.body().unwrap()["precondition"], "resource_still_in_use");
}

#[test]
fn quota_images_and_volume_constraints_are_checked() {
    let mut f = fixture();
    f.create(vm("CPU-1")).unwrap();
    f.create(vm("CPU-1")).unwrap();
    let err = f.create(vm("CPU-1")).unwrap_err();
    assert_eq!(err.status(), axum::http::StatusCode::FORBIDDEN);
    assert_eq!(
        err.body().unwrap()["resource"],
        "compute_servers_type_cpu_1_available"
    );
    assert!(f.world.set_quota("CPU-1", None));
    f.create(vm("CPU-1")).unwrap();

    let err = f.create(vm("NOPE-1")).unwrap_err();
    assert_eq!(err.body().unwrap()["type"], "not_found");
    let mut unknown_image = vm("GPU-1");
    unknown_image.image = Some("00000000-0000-4000-8000-000000000000".into());
    let err = f.create(unknown_image).unwrap_err();
    assert_eq!(err.body().unwrap()["resource"], "instance_image");
    let arm = f
        .world
        .catalog()
        .images
        .iter()
        .find(|i| i.arch == "arm64")
        .unwrap()
        .id
        .clone();
    let mut wrong_arch = vm("GPU-1");
    wrong_arch.image = Some(arm);
    assert_eq!(
        f.create(wrong_arch).unwrap_err().body().unwrap()["type"],
        "invalid_arguments"
    );

    let mut no_local = vm("GPU-1");
    no_local.volumes.insert(
        "1".into(),
        VolumeRequest {
            kind: VolumeKind::LSsd,
            size: Some(1_000_000_000),
            id: None,
        },
    );
    assert!(f.create(no_local).is_err(), "GPU-1 has no local SSD");
    let mut odd = vm("GPU-1");
    odd.volumes.insert(
        "0".into(),
        VolumeRequest {
            kind: VolumeKind::Sbs,
            size: Some(1000),
            id: None,
        },
    );
    assert!(f.create(odd).is_err(), "not a multiple of 512");
}

#[test]
fn user_data_is_kept_per_key_and_dropped_with_the_server() {
    let mut f = fixture();
    let id = f.create(vm("CPU-1")).unwrap();
    f.world
        .set_user_data(t0(), ZONE, &id, "cloud-init", b"machine: {}".to_vec())
        .unwrap();
    let server = f.world.server(ZONE, &id).unwrap();
    assert_eq!(server.user_data["cloud-init"].0, b"machine: {}");
    f.world.delete_user_data(ZONE, &id, "cloud-init").unwrap();
    assert!(f.world.server(ZONE, &id).unwrap().user_data.is_empty());
    f.world
        .set_user_data(t0(), ZONE, &id, "cloud-init", b"x".to_vec())
        .unwrap();
    f.world.delete(t0(), ZONE, &id, &mut f.pool).unwrap();
    let tomb = f.world.all_servers()[0];
    assert!(tomb.deleted_at.is_some());
    assert!(tomb.user_data.is_empty(), "no token kept after deletion");
}

#[test]
fn reset_forgets_everything_and_replays_ids() {
    let mut f = fixture();
    let first = f.create(vm("CPU-1")).unwrap();
    f.world
        .set_availability(ZONE, "CPU-1", Availability::Shortage);
    f.world.reset();
    f.pool = IpPool::new("127.77.0.0/16".parse::<IpRange>().unwrap());
    assert!(f.world.server(ZONE, &first).is_err());
    assert!(f.world.volumes.is_empty());
    let spec = f.world.catalog().find(ZONE, "CPU-1").unwrap().clone();
    assert_eq!(f.world.availability(ZONE, &spec), Availability::Available);
    assert_eq!(f.create(vm("CPU-1")).unwrap(), first);
}

#[test]
fn reboot_passes_through_starting_and_keeps_the_dynamic_ip() {
    let mut f = fixture();
    let id = f.create(vm("CPU-1")).unwrap();
    f.act(t0(), &id, VmAction::Poweron).unwrap();
    f.world.advance(at(10.0), &mut f.pool);
    let ip = f.world.server(ZONE, &id).unwrap().dynamic_ip_id.clone();
    assert!(ip.is_some());
    assert_eq!(f.world.server(ZONE, &id).unwrap().modified_at, at(10.0));
    f.act(at(20.0), &id, VmAction::Reboot).unwrap();
    // As recorded: `stopping`/`rebooting`, then `starting`/`rebooting` for
    // the last second, then running. `modification_date` moves at the call
    // (what a provider compares to learn whether its reboot landed), shows
    // its old value again while `starting`, and moves when the VM runs.
    assert_eq!(f.world.server(ZONE, &id).unwrap().modified_at, at(20.0));
    assert_eq!(
        f.state(at(28.9), &id),
        Some((VmState::Stopping, "rebooting"))
    );
    let wire = f.world.server_wire(f.world.server(ZONE, &id).unwrap());
    assert_eq!(wire.allowed_actions, vec!["stop_in_place", "backup"]);
    assert_eq!(
        f.state(at(29.0), &id),
        Some((VmState::Starting, "rebooting"))
    );
    assert_eq!(f.world.server(ZONE, &id).unwrap().modified_at, at(10.0));
    assert_eq!(
        f.state(at(29.9), &id),
        Some((VmState::Starting, "rebooting"))
    );
    assert_eq!(
        f.state(at(30.0), &id),
        Some((VmState::Running, "booting kernel"))
    );
    let server = f.world.server(ZONE, &id).unwrap();
    assert_eq!(server.modified_at, at(30.0));
    assert_eq!(server.dynamic_ip_id, ip);
    let actions: Vec<&str> = server.history.iter().map(|(_, a)| *a).collect();
    assert_eq!(actions.last(), Some(&"reboot"));
}

/// Seconds from the action at `from` until the VM runs, through every
/// step on the way (a reboot's `stopping`, then `starting`).
fn seconds_to_running(f: &mut Fixture, from: f64, id: &str) -> f64 {
    loop {
        let pending = f
            .world
            .server(ZONE, id)
            .unwrap()
            .pending
            .as_ref()
            .expect("on its way to running")
            .at;
        if f.state(pending, id).unwrap().0 == VmState::Running {
            return (pending - at(from)).as_seconds_f64();
        }
    }
}

#[test]
fn real_vm_boots_take_about_a_minute_and_replay_with_the_seed() {
    let run = || {
        let mut f = fixture();
        f.world.timings = InstanceTimings::default().with_boot(Some(REAL_VM_BOOT));
        let id = f.create(vm("CPU-1")).unwrap();
        f.act(t0(), &id, VmAction::Poweron).unwrap();
        let poweron = seconds_to_running(&mut f, 0.0, &id);
        f.act(at(200.0), &id, VmAction::Reboot).unwrap();
        let reboot = seconds_to_running(&mut f, 200.0, &id);
        (poweron, reboot)
    };
    let (poweron, reboot) = run();
    for s in [poweron, reboot] {
        assert!((45.0..=75.0).contains(&s), "{s} s");
    }
    assert_eq!(run(), (poweron, reboot), "the same seed, the same boots");

    // Without the option: 10 s each, as the suites expect.
    let mut f = fixture();
    let id = f.create(vm("CPU-1")).unwrap();
    f.act(t0(), &id, VmAction::Poweron).unwrap();
    assert_eq!(seconds_to_running(&mut f, 0.0, &id), 10.0);
    f.act(at(20.0), &id, VmAction::Reboot).unwrap();
    assert_eq!(seconds_to_running(&mut f, 20.0, &id), 10.0);
}
