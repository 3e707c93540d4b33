//! The server side of the Private Network clients: Elastic Metal options
//! and attachments, Instance private NICs.

use super::*;

#[tokio::test]
async fn adds_the_private_network_option_and_reads_server_options() {
    let mock = MockServer::start().await;
    let server = json!({
        "id": "srv", "name": "node-a", "status": "ready", "offer_id": "o", "zone": ZONE,
        "created_at": "2026-10-01T10:00:00Z",
        "options": [{"id": "opt-pn", "name": "Private Network", "status": "option_status_enabling",
                     "manageable": true, "expires_at": null,
                     "private_network": {"bandwidth_in_bps": 1_000_000_000u64}}]
    });
    Mock::given(method("POST"))
        .and(path(format!(
            "/baremetal/v1/zones/{ZONE}/servers/srv/options/opt-pn"
        )))
        .and(body_json(json!({})))
        .respond_with(ResponseTemplate::new(200).set_body_json(server.clone()))
        .expect(1)
        .mount(&mock)
        .await;
    Mock::given(method("GET"))
        .and(path(format!("/baremetal/v1/zones/{ZONE}/servers/srv")))
        .respond_with(ResponseTemplate::new(200).set_body_json(server))
        .expect(1)
        .mount(&mock)
        .await;
    let c = client(&mock);
    let options = c.add_server_option(ZONE, "srv", "opt-pn").await.unwrap();
    assert_eq!(options[0].status, OptionStatus::OptionStatusEnabling);
    assert!(options[0].private_network.is_some());
    let options = c.get_server_options(ZONE, "srv").await.unwrap();
    assert!(options[0].is_on());
}

#[tokio::test]
async fn adding_an_option_is_repeated_on_429_never_on_5xx() {
    let mock = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(502))
        .expect(1)
        .mount(&mock)
        .await;
    let err = client(&mock)
        .add_server_option(ZONE, "srv", "opt-pn")
        .await
        .unwrap_err();
    assert!(matches!(err, ApiError::Unavailable(_)), "{err:?}");

    let mock = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(429))
        .up_to_n_times(1)
        .expect(1)
        .mount(&mock)
        .await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(json!({"id": "srv", "options": null})),
        )
        .expect(1)
        .mount(&mock)
        .await;
    let options = client(&mock)
        .add_server_option(ZONE, "srv", "opt-pn")
        .await
        .unwrap();
    assert!(options.is_empty());
}

#[tokio::test]
async fn attaches_with_a_null_or_a_list_of_ipam_ids() {
    let mock = MockServer::start().await;
    let p = format!("/baremetal/v3/zones/{ZONE}/servers/srv/private-networks");
    Mock::given(method("POST"))
        .and(path(p.clone()))
        .and(body_json(
            json!({"private_network_id": "pn-1", "ipam_ip_ids": null}),
        ))
        .respond_with(ResponseTemplate::new(200).set_body_json(attachment_json(
            "a-1",
            "srv",
            "pn-1",
            "attaching",
            None,
        )))
        .expect(1)
        .mount(&mock)
        .await;
    Mock::given(method("POST"))
        .and(path(p))
        .and(body_json(
            json!({"private_network_id": "pn-2", "ipam_ip_ids": ["ip-7"]}),
        ))
        .respond_with(ResponseTemplate::new(200).set_body_json(attachment_json(
            "a-2",
            "srv",
            "pn-2",
            "attaching",
            None,
        )))
        .expect(1)
        .mount(&mock)
        .await;
    let c = client(&mock);
    let a = c
        .attach_private_network(ZONE, "srv", "pn-1", &[])
        .await
        .unwrap();
    assert_eq!((a.status, a.vlan), (AttachmentStatus::Attaching, None));
    let a = c
        .attach_private_network(ZONE, "srv", "pn-2", &["ip-7".into()])
        .await
        .unwrap();
    assert_eq!(a.id, "a-2");
}

#[tokio::test]
async fn an_attach_is_repeated_on_409_but_never_after_a_5xx() {
    let mock = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(409).set_body_json(json!({
            "type": "transient_state", "message": "resource is in a transient state",
            "resource": "baremetal_server", "resource_id": "srv", "current_state": "locked"})))
        .up_to_n_times(1)
        .expect(1)
        .mount(&mock)
        .await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(503))
        .expect(1)
        .mount(&mock)
        .await;
    let err = client(&mock)
        .attach_private_network(ZONE, "srv", "pn-1", &[])
        .await
        .unwrap_err();
    assert!(matches!(err, ApiError::Unavailable(_)), "{err:?}");
}

#[tokio::test]
async fn lists_attachments_by_server_and_network_across_pages() {
    let mock = MockServer::start().await;
    let p = format!("/baremetal/v3/zones/{ZONE}/server-private-networks");
    let page1: Vec<Value> = (0..100)
        .map(|i| attachment_json(&format!("a{i}"), "srv", "pn-1", "attached", Some(1000)))
        .collect();
    let page2 = vec![
        attachment_json("a100", "srv", "pn-1", "attached", Some(1000)),
        // The API's filter is not trusted: another server's slips in.
        attachment_json("x", "other", "pn-1", "attached", Some(1000)),
    ];
    for (n, items) in [page1, page2].into_iter().enumerate() {
        Mock::given(method("GET"))
            .and(path(p.clone()))
            .and(query_param("page", (n + 1).to_string()))
            .and(query_param("page_size", "100"))
            .and(query_param("order_by", "created_at_asc"))
            .and(query_param("server_id", "srv"))
            .and(query_param("private_network_id", "pn-1"))
            .respond_with(
                ResponseTemplate::new(200)
                    .set_body_json(json!({"server_private_networks": items, "total_count": 102})),
            )
            .expect(1)
            .mount(&mock)
            .await;
    }
    let filter = AttachmentFilter {
        server_id: Some("srv".into()),
        private_network_id: Some("pn-1".into()),
        ..Default::default()
    };
    let got = client(&mock)
        .list_server_private_networks(ZONE, &filter)
        .await
        .unwrap();
    assert_eq!(got.len(), 101);
    assert!(got.iter().all(|a| a.server_id == "srv"));
    assert_eq!(got[0].vlan, Some(1000));
}

#[tokio::test]
async fn a_short_attachment_listing_is_an_error_never_a_shorter_list() {
    let mock = MockServer::start().await;
    Mock::given(method("GET"))
        .and(query_param("page", "1"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "server_private_networks": [attachment_json("a", "srv", "pn-1", "attached", Some(7))],
            "total_count": 2})))
        .mount(&mock)
        .await;
    Mock::given(method("GET"))
        .and(query_param("page", "2"))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(json!({"server_private_networks": [], "total_count": 2})),
        )
        .mount(&mock)
        .await;
    let err = client(&mock)
        .list_server_private_networks(ZONE, &AttachmentFilter::default())
        .await
        .unwrap_err();
    assert!(matches!(err, ApiError::Inconsistent(_)), "{err:?}");
}

#[tokio::test]
async fn detach_deletes_and_a_404_is_already_gone() {
    let mock = MockServer::start().await;
    let p = format!("/baremetal/v3/zones/{ZONE}/servers/srv/private-networks/pn-1");
    Mock::given(method("DELETE"))
        .and(path(p.clone()))
        .respond_with(ResponseTemplate::new(204))
        .up_to_n_times(1)
        .expect(1)
        .mount(&mock)
        .await;
    Mock::given(method("DELETE"))
        .and(path(p))
        .respond_with(ResponseTemplate::new(404).set_body_json(json!({
            "type": "not_found", "message": "resource is not found",
            "resource": "server_private_network", "resource_id": "pn-1"})))
        .expect(1)
        .mount(&mock)
        .await;
    let c = client(&mock);
    c.detach_private_network(ZONE, "srv", "pn-1").await.unwrap();
    c.detach_private_network(ZONE, "srv", "pn-1").await.unwrap();
}

type Check = fn(&ApiError) -> bool;

#[tokio::test]
async fn a_detach_refused_is_reported_by_class() {
    let cases: Vec<(u16, Value, Check)> = vec![
        (
            409,
            json!({"type": "transient_state", "message": "resource is in a transient state",
                   "resource": "server_private_network", "current_state": "attaching"}),
            |e| matches!(e, ApiError::TransientState(_)),
        ),
        (429, json!({}), |e| *e == ApiError::Throttled),
        (500, json!({"message": "internal"}), |e| {
            matches!(e, ApiError::Unavailable(_))
        }),
        (
            403,
            json!({"type": "permissions_denied", "message": "insufficient permissions",
                   "details": [{"resource": "baremetal", "action": "write"}]}),
            |e| matches!(e, ApiError::Unauthorized(_)),
        ),
    ];
    for (status, body, check) in cases {
        let mock = MockServer::start().await;
        Mock::given(method("DELETE"))
            .respond_with(ResponseTemplate::new(status).set_body_json(body.clone()))
            .mount(&mock)
            .await;
        let err = client(&mock)
            .detach_private_network(ZONE, "srv", "pn-1")
            .await
            .unwrap_err();
        assert!(check(&err), "HTTP {status} {body}: {err:?}");
        // Retryable classes were retried up to the policy's bound.
        let sent = mock.received_requests().await.unwrap().len();
        let expected = if err.is_retryable() { 3 } else { 1 };
        assert_eq!(sent, expected, "HTTP {status}");
    }
}

#[tokio::test]
async fn private_nics_are_created_listed_read_and_deleted() {
    let mock = MockServer::start().await;
    let p = format!("/instance/v1/zones/{ZONE}/servers/vm/private_nics");
    Mock::given(method("POST"))
        .and(path(p.clone()))
        .and(body_json(
            json!({"private_network_id": "pn-1", "tags": ["node=a"]}),
        ))
        .respond_with(
            ResponseTemplate::new(201)
                .set_body_json(json!({"private_nic": nic_json("nic-1", "vm", "syncing")})),
        )
        .expect(1)
        .mount(&mock)
        .await;
    Mock::given(method("GET"))
        .and(path(format!("{p}/nic-1")))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(json!({"private_nic": nic_json("nic-1", "vm", "available")})),
        )
        .expect(1)
        .mount(&mock)
        .await;
    Mock::given(method("DELETE"))
        .and(path(format!("{p}/nic-1")))
        .respond_with(ResponseTemplate::new(204))
        .up_to_n_times(1)
        .expect(1)
        .mount(&mock)
        .await;
    Mock::given(method("DELETE"))
        .and(path(format!("{p}/nic-1")))
        .respond_with(ResponseTemplate::new(404).set_body_json(json!({
            "type": "not_found", "message": "resource is not found",
            "resource": "instance_private_nic", "resource_id": "nic-1"})))
        .expect(1)
        .mount(&mock)
        .await;
    let c = client(&mock);
    let req = CreatePrivateNicRequest {
        private_network_id: "pn-1".into(),
        tags: vec!["node=a".into()],
        ipam_ip_ids: Vec::new(),
    };
    let nic = c.create_private_nic(ZONE, "vm", &req).await.unwrap();
    assert_eq!(nic.state, PrivateNicState::Syncing);
    let nic = c.get_private_nic(ZONE, "vm", "nic-1").await.unwrap();
    assert_eq!(
        (nic.state, nic.mac_address.as_str()),
        (PrivateNicState::Available, "02:00:00:00:12:23")
    );
    c.delete_private_nic(ZONE, "vm", "nic-1").await.unwrap();
    c.delete_private_nic(ZONE, "vm", "nic-1").await.unwrap();
}

#[tokio::test]
async fn private_nics_page_by_per_page_and_either_total() {
    // The body's total_count.
    let mock = MockServer::start().await;
    let p = format!("/instance/v1/zones/{ZONE}/servers/vm/private_nics");
    for (n, id) in ["nic-1", "nic-2"].iter().enumerate() {
        Mock::given(method("GET"))
            .and(path(p.clone()))
            .and(query_param("page", (n + 1).to_string()))
            .and(query_param("per_page", "100"))
            .and(query_param_is_missing("page_size"))
            .respond_with(ResponseTemplate::new(200).set_body_json(
                json!({"private_nics": [nic_json(id, "vm", "available")], "total_count": 2}),
            ))
            .expect(1)
            .mount(&mock)
            .await;
    }
    let nics = client(&mock).list_private_nics(ZONE, "vm").await.unwrap();
    assert_eq!(nics.len(), 2);

    // Only the X-Total-Count header, as the other Instance lists.
    let mock = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(
            ResponseTemplate::new(200)
                .insert_header("X-Total-Count", "1")
                .set_body_json(json!({"private_nics": [nic_json("nic-1", "vm", "available")]})),
        )
        .expect(1)
        .mount(&mock)
        .await;
    assert_eq!(
        client(&mock)
            .list_private_nics(ZONE, "vm")
            .await
            .unwrap()
            .len(),
        1
    );

    // Both, disagreeing; or neither.
    let cases = [
        ResponseTemplate::new(200)
            .insert_header("X-Total-Count", "2")
            .set_body_json(
                json!({"private_nics": [nic_json("nic-1", "vm", "available")], "total_count": 1}),
            ),
        ResponseTemplate::new(200)
            .set_body_json(json!({"private_nics": [nic_json("nic-1", "vm", "available")]})),
    ];
    for answer in cases {
        let mock = MockServer::start().await;
        Mock::given(method("GET"))
            .respond_with(answer)
            .mount(&mock)
            .await;
        let err = client(&mock)
            .list_private_nics(ZONE, "vm")
            .await
            .unwrap_err();
        assert!(matches!(err, ApiError::Inconsistent(_)), "{err:?}");
    }
}

#[tokio::test]
async fn a_nic_is_never_created_twice_after_a_timeout() {
    let mock = MockServer::start().await;
    Mock::given(method("POST"))
        .respond_with(
            ResponseTemplate::new(201)
                .set_body_json(json!({"private_nic": nic_json("nic-1", "vm", "syncing")}))
                .set_delay(Duration::from_secs(2)),
        )
        .mount(&mock)
        .await;
    let c = ScalewayClient::new(ClientConfig {
        api_url: mock.uri(),
        secret_key: SecretKey::new("secret-token"),
        request_timeout: Duration::from_millis(200),
        retry: RetryPolicy {
            max_attempts: 3,
            base_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(5),
        },
    })
    .unwrap();
    let req = CreatePrivateNicRequest {
        private_network_id: "pn-1".into(),
        ..Default::default()
    };
    let err = c.create_private_nic(ZONE, "vm", &req).await.unwrap_err();
    assert!(matches!(err, ApiError::Timeout(_)), "{err:?}");
    assert_eq!(mock.received_requests().await.unwrap().len(), 1);
}
