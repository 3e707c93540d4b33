//! The fake follows the real API where the engine's tests will rely on it.

use super::*;
use crate::scaleway::instance::{Arch, ImageState, USER_DATA_KEY};

const ZONE: &str = "fr-par-2";

fn fake() -> FakeInstance {
    let fake = FakeInstance::new();
    fake.set_types(ZONE, recorded_types());
    fake.set_availability(ZONE, recorded_availability());
    fake
}

fn request(ty: &str) -> CreateServerRequest {
    let mut req = CreateServerRequest::new("node-a", ty, "proj").with_sbs_root(20_000_000_000);
    req.tags = vec!["karpenter.sh/nodeclaim=node-a".into()];
    req
}

#[tokio::test]
async fn a_vm_lives_and_leaves_nothing_billed_behind() {
    let fake = fake();
    let s = fake
        .create_server(ZONE, &request("POP2-2C-8G"))
        .await
        .unwrap();
    assert_eq!(s.state, ServerState::Stopped);
    assert_eq!(
        s.allowed_actions,
        [ServerAction::Poweron, ServerAction::Backup]
    );
    let root = s.sbs_volume_ids();
    assert_eq!(root.len(), 1);
    assert_eq!(
        fake.get_volume(ZONE, &root[0]).await.unwrap().size,
        20_000_000_000
    );

    fake.set_user_data(ZONE, &s.id, USER_DATA_KEY, "config")
        .await
        .unwrap();
    fake.server_action(ZONE, &s.id, ServerAction::Poweron)
        .await
        .unwrap();
    assert_eq!(fake.server(&s.id).unwrap().state, ServerState::Starting);
    fake.finish_actions();
    let running = fake.get_server(ZONE, &s.id).await.unwrap();
    assert_eq!(running.state, ServerState::Running);
    assert!(running.ipv4().is_some(), "a dynamic IPv4 once running");
    let ip = fake.attach_flexible_ip(ZONE, &s.id);

    // Still attached: the volume cannot go yet.
    let err = fake.delete_volume(ZONE, &root[0]).await.unwrap_err();
    assert!(matches!(err, ApiError::TransientState(_)), "{err:?}");

    fake.server_action(ZONE, &s.id, ServerAction::Terminate)
        .await
        .unwrap();
    fake.finish_actions();
    let err = fake.get_server(ZONE, &s.id).await.unwrap_err();
    assert!(matches!(err, ApiError::NotFound(_)), "{err:?}");
    assert_eq!(fake.user_data(&s.id, USER_DATA_KEY), None);
    // The SBS root and the flexible IP survive terminate.
    assert_eq!(fake.volumes().len(), 1);
    assert_eq!(fake.flexible_ips(), std::slice::from_ref(&ip));
    fake.delete_volume(ZONE, &root[0]).await.unwrap();
    fake.delete_ip(ZONE, &ip).await.unwrap();
    assert!(fake.volumes().is_empty());
    assert!(fake.flexible_ips().is_empty());
}

#[tokio::test]
async fn a_type_in_shortage_falls_back_to_stopped() {
    let fake = fake();
    let mut types = recorded_types();
    let h100 = types["H100-SXM-2-80G"].clone();
    types.insert("H100-1-80G".into(), h100);
    fake.set_types(ZONE, types);
    fake.set_auto_finish(true);
    let s = fake
        .create_server(ZONE, &request("H100-1-80G"))
        .await
        .unwrap();
    fake.server_action(ZONE, &s.id, ServerAction::Poweron)
        .await
        .unwrap();
    let s = fake.get_server(ZONE, &s.id).await.unwrap();
    assert_eq!(s.state, ServerState::Stopped);
    assert_eq!(s.ipv4(), None);
}

#[tokio::test]
async fn wrong_states_missing_data_and_injected_failures() {
    let fake = fake();
    let s = fake
        .create_server(ZONE, &request("L4-1-24G"))
        .await
        .unwrap();
    let err = fake
        .server_action(ZONE, &s.id, ServerAction::Terminate)
        .await
        .unwrap_err();
    assert_eq!(
        err,
        ApiError::TransientState("server should be running".into())
    );
    let err = fake
        .get_user_data(ZONE, &s.id, USER_DATA_KEY)
        .await
        .unwrap_err();
    assert!(matches!(err, ApiError::NotFound(_)), "{err:?}");

    fake.set_auto_finish(true);
    fake.server_action(ZONE, &s.id, ServerAction::Poweron)
        .await
        .unwrap();
    let err = fake.delete_server(ZONE, &s.id).await.unwrap_err();
    assert_eq!(
        err,
        ApiError::TransientState("server should be stopped".into())
    );
    fake.server_action(ZONE, &s.id, ServerAction::Poweroff)
        .await
        .unwrap();
    fake.delete_server(ZONE, &s.id).await.unwrap();

    let err = fake
        .create_server(ZONE, &request("GP1-L"))
        .await
        .unwrap_err();
    assert!(
        matches!(err, ApiError::Invalid(_)),
        "not in the catalog: {err:?}"
    );
    fake.fail_next(
        Op::CreateServer,
        ApiError::QuotaExceeded("legacy 403".into()),
    );
    let err = fake
        .create_server(ZONE, &request("POP2-2C-8G"))
        .await
        .unwrap_err();
    assert!(err.is_insufficient_capacity());
    assert_eq!(fake.count(Op::CreateServer), 3);
    let filter = ServerFilter {
        name: Some("node-a".into()),
        ..Default::default()
    };
    assert!(fake.list_servers(ZONE, &filter).await.unwrap().is_empty());
}

#[tokio::test]
async fn images_and_security_groups_are_per_zone() {
    let fake = FakeInstance::new();
    let image = |id: &str, zone: &str, arch: Arch| Image {
        id: id.into(),
        name: "talos".into(),
        arch,
        state: ImageState::Available,
        tags: vec!["talos".into()],
        project: "proj".into(),
        public: false,
        zone: zone.into(),
        creation_date: None,
    };
    fake.insert_image(image("a", ZONE, Arch::X86_64));
    fake.insert_image(image("b", ZONE, Arch::Arm64));
    fake.insert_image(image("c", "nl-ams-1", Arch::X86_64));
    let filter = ImageFilter {
        name: Some("talos".into()),
        arch: Some(Arch::X86_64),
        ..ImageFilter::default()
    };
    let ids: Vec<String> = fake
        .list_images(ZONE, &filter)
        .await
        .unwrap()
        .into_iter()
        .map(|i| i.id)
        .collect();
    assert_eq!(ids, ["a"]);
    assert!(matches!(
        fake.get_image("nl-ams-1", "a").await,
        Err(ApiError::NotFound(_))
    ));
    fake.insert_security_group(SecurityGroup {
        id: "sg".into(),
        name: "nodes".into(),
        project: "proj".into(),
        zone: ZONE.into(),
    });
    assert_eq!(
        fake.get_security_group(ZONE, "sg").await.unwrap().name,
        "nodes"
    );
    assert!(matches!(
        fake.get_security_group("fr-par-1", "sg").await,
        Err(ApiError::NotFound(_))
    ));
    fake.fail_next(Op::ListImages, ApiError::Unauthorized("denied".into()));
    assert!(matches!(
        fake.list_images(ZONE, &filter).await,
        Err(ApiError::Unauthorized(_))
    ));
    assert_eq!(fake.count(Op::ListImages), 2);
}

#[tokio::test]
async fn volumes_are_tagged_then_listed_by_tags_and_project_in_their_zone() {
    let fake = fake();
    let s = fake
        .create_server(ZONE, &request("POP2-2C-8G"))
        .await
        .unwrap();
    let root = s.sbs_volume_ids().remove(0);
    let owned = vec![
        "karpenter.scaleway.com/cluster=prod".to_string(),
        "karpenter.sh/nodeclaim=node-a".to_string(),
    ];
    let filter = VolumeFilter {
        tags: owned.clone(),
        project_id: Some("proj".into()),
    };
    assert!(fake.list_volumes(ZONE, &filter).await.unwrap().is_empty());
    let tagged = fake.update_volume_tags(ZONE, &root, &owned).await.unwrap();
    assert_eq!(tagged.tags, owned);
    let listed = fake.list_volumes(ZONE, &filter).await.unwrap();
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].id, root);
    assert!(!listed[0].is_detached(), "attached to its server");
    assert!(listed[0].created_at.is_some());
    // Another zone, another project: not listed.
    assert!(
        fake.list_volumes("nl-ams-1", &filter)
            .await
            .unwrap()
            .is_empty()
    );
    let other_project = VolumeFilter {
        project_id: Some("other".into()),
        ..filter.clone()
    };
    assert!(
        fake.list_volumes(ZONE, &other_project)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(matches!(
        fake.update_volume_tags("nl-ams-1", &root, &owned).await,
        Err(ApiError::NotFound(_))
    ));
    fake.fail_next(Op::ListVolumes, ApiError::Throttled);
    assert!(matches!(
        fake.list_volumes(ZONE, &filter).await,
        Err(ApiError::Throttled)
    ));
    // Once its server is gone the volume is detached, with the time.
    fake.set_auto_finish(true);
    fake.delete_server(ZONE, &s.id).await.unwrap();
    let left = fake.list_volumes(ZONE, &filter).await.unwrap();
    assert!(left[0].is_detached());
    assert!(left[0].last_detached_at.is_some());
}
