use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{Value, json};
use wiremock::matchers::{body_json, header, method, path};
use wiremock::{Mock, MockServer, ResponseTemplate};

use super::*;
use crate::provider::tests::{claim, fixture};
use crate::provider::{HASH_ANNOTATION, HASH_VERSION_ANNOTATION, NodeClassHash, NodeClasses};

const CLAIMS: &str = "/apis/karpenter.sh/v1/nodeclaims";

async fn client_for(server: &MockServer) -> Client {
    let config = kube::Config::new(server.uri().parse().expect("mock server URI"));
    Client::try_from(config).expect("kube client")
}

fn launched(name: &str, rv: &str, version: Option<&str>) -> Value {
    let mut c = claim(name, &["EM-A115X-SSD"]);
    c["metadata"]["resourceVersion"] = json!(rv);
    if let Some(v) = version {
        c["metadata"]["annotations"] = json!({
            HASH_ANNOTATION: "image=00000000,config=00000000,disk=00000000",
            HASH_VERSION_ANNOTATION: v,
        });
    }
    c["status"] = json!({"providerID": format!("scaleway://baremetal/fr-par-2/{name}")});
    c
}

fn list_of(items: Vec<Value>) -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaimList",
        "metadata": {"resourceVersion": "100"},
        "items": items,
    })
}

fn status(code: u16, reason: &str) -> ResponseTemplate {
    ResponseTemplate::new(code).set_body_json(json!({
        "kind": "Status", "apiVersion": "v1", "status": "Failure",
        "message": reason, "reason": reason, "code": code
    }))
}

#[tokio::test]
async fn a_pass_restamps_other_versions_with_a_resource_version_precondition() {
    let f = fixture();
    let current = NodeClassHash::of(&f.classes.get("default").unwrap().spec).to_string();
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(CLAIMS))
        .respond_with(ResponseTemplate::new(200).set_body_json(list_of(vec![
            launched("old", "7", Some("v0")),
            launched("current", "8", Some(HASH_VERSION)),
            launched("never", "9", None),
        ])))
        .expect(1)
        .mount(&server)
        .await;
    let expected_patch = |rv: &str| {
        json!({"metadata": {
            "resourceVersion": rv,
            "annotations": {HASH_ANNOTATION: current, HASH_VERSION_ANNOTATION: "v1"},
        }})
    };
    Mock::given(method("PATCH"))
        .and(path(format!("{CLAIMS}/old")))
        .and(header("content-type", "application/merge-patch+json"))
        .and(body_json(expected_patch("7")))
        .respond_with(ResponseTemplate::new(200).set_body_json(launched("old", "10", Some("v1"))))
        .expect(1)
        .mount(&server)
        .await;
    // Changed since it was listed: the precondition fails, nothing is forced.
    Mock::given(method("PATCH"))
        .and(path(format!("{CLAIMS}/never")))
        .and(body_json(expected_patch("9")))
        .respond_with(status(409, "Conflict"))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("PATCH"))
        .and(path(format!("{CLAIMS}/current")))
        .respond_with(ResponseTemplate::new(200))
        .expect(0)
        .mount(&server)
        .await;
    let client = client_for(&server).await;

    let report = restamp_pass(
        &f.provider,
        &NodeClaimList::new(client.clone()),
        &NodeClaimStamper::new(client),
    )
    .await;
    assert_eq!(
        report,
        vec![
            ("old".to_string(), StampOutcome::Stamped),
            ("never".to_string(), StampOutcome::Skipped),
        ]
    );
}

#[tokio::test]
async fn a_failed_list_or_patch_changes_nothing_and_is_reported() {
    let f = fixture();
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(CLAIMS))
        // 500: the kube client retries 503s on its own.
        .respond_with(status(500, "InternalError"))
        .up_to_n_times(1)
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path(CLAIMS))
        .respond_with(
            ResponseTemplate::new(200).set_body_json(list_of(vec![launched(
                "old",
                "7",
                Some("v0"),
            )])),
        )
        .mount(&server)
        .await;
    Mock::given(method("PATCH"))
        .and(path(format!("{CLAIMS}/old")))
        .respond_with(status(403, "Forbidden"))
        .expect(1)
        .mount(&server)
        .await;
    let client = client_for(&server).await;
    let claims = NodeClaimList::new(client.clone());
    let stamper = NodeClaimStamper::new(client);

    assert_eq!(restamp_pass(&f.provider, &claims, &stamper).await, vec![]);
    let report = restamp_pass(&f.provider, &claims, &stamper).await;
    assert_eq!(report.len(), 1);
    assert!(
        matches!(&report[0].1, StampOutcome::Failed(e) if e.contains("Forbidden")),
        "{report:?}"
    );
}

#[tokio::test]
async fn only_the_leader_restamps() {
    let f = fixture();
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(CLAIMS))
        .respond_with(ResponseTemplate::new(200).set_body_json(list_of(vec![])))
        .mount(&server)
        .await;
    let client = client_for(&server).await;
    let leader = Arc::new(AtomicBool::new(false));
    let is_leader: Arc<dyn Fn() -> bool + Send + Sync> = {
        let leader = leader.clone();
        Arc::new(move || leader.load(Ordering::SeqCst))
    };
    let (stop_tx, stop_rx) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(run_restamper(
        f.provider.clone(),
        NodeClaimList::new(client.clone()),
        NodeClaimStamper::new(client),
        Duration::from_secs(3600),
        is_leader,
        async {
            let _ = stop_rx.await;
        },
    ));
    let requests = || async { server.received_requests().await.unwrap_or_default().len() };
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(requests().await, 0, "a follower does not even list");

    leader.store(true, Ordering::SeqCst);
    let mut seen = 0;
    // The loop looks at leadership every second: up to 30 s on a loaded
    // machine, over as soon as the pass came.
    for _ in 0..600 {
        seen = requests().await;
        if seen > 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(seen, 1, "one pass on becoming the leader");
    let _ = stop_tx.send(());
    task.await.expect("the loop stops");
}
