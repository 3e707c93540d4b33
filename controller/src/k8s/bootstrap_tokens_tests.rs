use base64::Engine as _;
use serde_json::json;
use wiremock::matchers::{body_partial_json, method, path, query_param};
use wiremock::{Mock, MockServer, Request, ResponseTemplate};

use super::*;

const SECRETS: &str = "/api/v1/namespaces/kube-system/secrets";

fn b64(s: &str) -> String {
    base64::engine::general_purpose::STANDARD.encode(s)
}

async fn client_for(server: &MockServer) -> Client {
    let config = kube::Config::new(server.uri().parse().expect("mock server URI"));
    Client::try_from(config).expect("kube client")
}

async fn tokens(server: &MockServer) -> KubeBootstrapTokens {
    KubeBootstrapTokens::new(
        client_for(server).await,
        "test",
        Duration::from_secs(4 * 3600),
    )
    .expect("valid settings")
}

fn token_secret(id: &str, secret: &str, claim: &str, expiration: DateTime<Utc>) -> Value {
    json!({
        "apiVersion": "v1", "kind": "Secret",
        "metadata": {
            "name": format!("bootstrap-token-{id}"), "namespace": "kube-system",
            "creationTimestamp": "2020-01-01T00:00:00Z",
            "labels": {LABEL_CLUSTER: "test", LABEL_NODECLAIM: claim},
            "annotations": {ANNOTATION_NODECLAIM: claim}
        },
        "type": TOKEN_SECRET_TYPE,
        "data": {
            "token-id": b64(id),
            "token-secret": b64(secret),
            "expiration": b64(&expiration.to_rfc3339()),
            "usage-bootstrap-authentication": b64("true")
        }
    })
}

fn list(items: Vec<Value>) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(json!({
        "apiVersion": "v1", "kind": "SecretList", "metadata": {}, "items": items
    }))
}

fn status(code: u16, reason: &str) -> ResponseTemplate {
    ResponseTemplate::new(code).set_body_json(json!({
        "kind": "Status", "apiVersion": "v1", "status": "Failure",
        "message": reason, "reason": reason, "code": code
    }))
}

#[tokio::test]
async fn ensure_creates_a_well_formed_token_secret() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(SECRETS))
        .and(query_param(
            "labelSelector",
            format!("{LABEL_CLUSTER}=test,{LABEL_NODECLAIM}=default-abc12"),
        ))
        .respond_with(list(vec![]))
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(SECRETS))
        .and(body_partial_json(json!({
            "type": "bootstrap.kubernetes.io/token",
            "metadata": {
                "labels": {LABEL_CLUSTER: "test", LABEL_NODECLAIM: "default-abc12"},
                "annotations": {ANNOTATION_NODECLAIM: "default-abc12"}
            },
            "stringData": {
                "usage-bootstrap-authentication": "true",
                "auth-extra-groups": "system:bootstrappers:karpenter-scaleway"
            }
        })))
        .respond_with(|req: &Request| {
            ResponseTemplate::new(201).set_body_raw(req.body.clone(), "application/json")
        })
        .expect(1)
        .mount(&server)
        .await;

    let token = tokens(&server).await.ensure("default-abc12").await.unwrap();
    let (id, secret) = token.expose().split_once('.').expect("<id>.<secret>");
    let charset = |s: &str| {
        s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit())
    };
    assert_eq!(id.len(), 6);
    assert_eq!(secret.len(), 16);
    assert!(charset(id) && charset(secret), "{id}");

    // The Secret carries the same token, its name derives from the id, and
    // it expires after the TTL.
    let posted = server
        .received_requests()
        .await
        .unwrap()
        .into_iter()
        .find(|r| r.method.as_str() == "POST")
        .unwrap();
    let body: Value = serde_json::from_slice(&posted.body).unwrap();
    assert_eq!(body["metadata"]["name"], format!("bootstrap-token-{id}"));
    assert_eq!(body["stringData"]["token-id"], id);
    assert_eq!(body["stringData"]["token-secret"], secret);
    let expiration =
        DateTime::parse_from_rfc3339(body["stringData"]["expiration"].as_str().unwrap())
            .unwrap()
            .with_timezone(&Utc);
    let ttl = expiration - Utc::now();
    assert!(
        ttl > chrono::TimeDelta::minutes(235) && ttl <= chrono::TimeDelta::hours(4),
        "{ttl}"
    );
}

#[tokio::test]
async fn ensure_reuses_the_unexpired_token() {
    let server = MockServer::start().await;
    let later = Utc::now() + chrono::TimeDelta::hours(1);
    Mock::given(method("GET"))
        .and(path(SECRETS))
        .respond_with(list(vec![
            token_secret("abc123", "0123456789abcdef", "default-abc12", later),
            // Another claim's token never matches, whatever the label said.
            token_secret("zzz999", "ffffffffffffffff", "default-other", later),
        ]))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .respond_with(ResponseTemplate::new(500))
        .expect(0)
        .mount(&server)
        .await;
    let token = tokens(&server).await.ensure("default-abc12").await.unwrap();
    assert_eq!(token.expose(), "abc123.0123456789abcdef");
}

#[tokio::test]
async fn ensure_replaces_an_expired_token() {
    let server = MockServer::start().await;
    let past = Utc::now() - chrono::TimeDelta::minutes(1);
    Mock::given(method("GET"))
        .and(path(SECRETS))
        .respond_with(list(vec![token_secret(
            "old111",
            "0123456789abcdef",
            "default-abc12",
            past,
        )]))
        .mount(&server)
        .await;
    Mock::given(method("DELETE"))
        .and(path(format!("{SECRETS}/bootstrap-token-old111")))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(json!({"kind": "Status", "apiVersion": "v1", "status": "Success"})),
        )
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(SECRETS))
        .respond_with(|req: &Request| {
            ResponseTemplate::new(201).set_body_raw(req.body.clone(), "application/json")
        })
        .expect(1)
        .mount(&server)
        .await;
    let token = tokens(&server).await.ensure("default-abc12").await.unwrap();
    assert!(!token.expose().starts_with("old111"));
}

#[tokio::test]
async fn ensure_draws_again_on_an_id_collision_and_classifies_errors() {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(SECRETS))
        .respond_with(list(vec![]))
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(SECRETS))
        .respond_with(status(409, "AlreadyExists"))
        .up_to_n_times(1)
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("POST"))
        .and(path(SECRETS))
        .respond_with(|req: &Request| {
            ResponseTemplate::new(201).set_body_raw(req.body.clone(), "application/json")
        })
        .mount(&server)
        .await;
    assert!(tokens(&server).await.ensure("default-abc12").await.is_ok());

    let forbidden = MockServer::start().await;
    Mock::given(method("GET"))
        .respond_with(status(403, "Forbidden"))
        .mount(&forbidden)
        .await;
    assert!(matches!(
        tokens(&forbidden).await.ensure("default-abc12").await,
        Err(KubeError::Refused(_))
    ));
}

#[tokio::test]
async fn delete_removes_every_token_of_the_claim() {
    let server = MockServer::start().await;
    let later = Utc::now() + chrono::TimeDelta::hours(1);
    Mock::given(method("GET"))
        .and(path(SECRETS))
        .respond_with(list(vec![
            token_secret("aaa111", "0123456789abcdef", "default-abc12", later),
            token_secret("bbb222", "0123456789abcdef", "default-abc12", later),
        ]))
        .mount(&server)
        .await;
    for id in ["aaa111", "bbb222"] {
        Mock::given(method("DELETE"))
            .and(path(format!("{SECRETS}/bootstrap-token-{id}")))
            .respond_with(status(404, "NotFound"))
            .expect(1)
            .mount(&server)
            .await;
    }
    tokens(&server).await.delete("default-abc12").await.unwrap();
}

#[test]
fn invalid_settings_are_refused() {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    runtime.block_on(async {
        let server = MockServer::start().await;
        let client = client_for(&server).await;
        assert!(
            KubeBootstrapTokens::new(client.clone(), "my cluster", Duration::from_secs(60))
                .is_err()
        );
        assert!(KubeBootstrapTokens::new(client.clone(), "", Duration::from_secs(60)).is_err());
        assert!(KubeBootstrapTokens::new(client.clone(), "prod-1", Duration::ZERO).is_err());
        assert!(KubeBootstrapTokens::new(client, "prod-1", Duration::from_secs(60)).is_ok());
    });
    assert!(is_label_value("default-abc12"));
    assert!(!is_label_value(&"a".repeat(64)));
    assert!(!is_label_value("-a"));
}

fn record(id: &str, claim: Option<&str>, age_min: i64, expires_in_min: i64) -> TokenRecord {
    let now = Utc::now();
    TokenRecord {
        name: format!("bootstrap-token-{id}"),
        token_id: id.into(),
        token_secret: Secret::new("0123456789abcdef"),
        claim: claim.map(str::to_string),
        expiration: Some(now + chrono::TimeDelta::minutes(expires_in_min)),
        created: Some(now - chrono::TimeDelta::minutes(age_min)),
    }
}

#[test]
fn sweep_plan_rules() {
    let claims = claim_index(&[
        json!({"metadata": {"name": "live"}}),
        json!({"metadata": {"name": "deleting", "deletionTimestamp": "2026-01-01T00:00:00Z"}}),
        json!({"metadata": {"name": "joined", "annotations": {"install.karpenter.scaleway.com/phase": "joined"}}}),
        json!({"metadata": {"name": "imaging", "annotations": {"install.karpenter.scaleway.com/phase": "imaging"}}}),
    ]);
    let tokens = vec![
        record("live01", Some("live"), 30, 60),
        record("imag01", Some("imaging"), 30, 60),
        record("gone01", Some("gone"), 30, 60),
        record("dele01", Some("deleting"), 30, 60),
        record("join01", Some("joined"), 30, 60),
        record("expi01", Some("live"), 300, -1),
        // Too young to judge, even though its NodeClaim is not listed.
        record("youn01", Some("brand-new"), 0, 60),
    ];
    let plan: Vec<(&str, &str)> = plan_sweep(&tokens, &claims, Utc::now())
        .into_iter()
        .map(|(t, why)| (t.token_id.as_str(), why))
        .collect();
    assert_eq!(
        plan,
        vec![
            ("gone01", "NodeClaim gone"),
            ("dele01", "NodeClaim being deleted"),
            ("join01", "node joined"),
            ("expi01", "expired"),
        ]
    );
}

#[tokio::test]
async fn sweep_deletes_orphans_and_skips_on_a_failed_nodeclaim_list() {
    let later = Utc::now() + chrono::TimeDelta::hours(1);
    let items = vec![
        token_secret("live01", "0123456789abcdef", "live", later),
        token_secret("gone01", "0123456789abcdef", "gone", later),
    ];

    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(SECRETS))
        .respond_with(list(items.clone()))
        .mount(&server)
        .await;
    Mock::given(method("GET"))
        .and(path("/apis/karpenter.sh/v1/nodeclaims"))
        .respond_with(ResponseTemplate::new(200).set_body_json(json!({
            "apiVersion": "karpenter.sh/v1", "kind": "NodeClaimList", "metadata": {},
            "items": [{"apiVersion": "karpenter.sh/v1", "kind": "NodeClaim", "metadata": {"name": "live"}}]
        })))
        .mount(&server)
        .await;
    Mock::given(method("DELETE"))
        .and(path(format!("{SECRETS}/bootstrap-token-gone01")))
        .respond_with(
            ResponseTemplate::new(200)
                .set_body_json(json!({"kind": "Status", "apiVersion": "v1", "status": "Success"})),
        )
        .expect(1)
        .mount(&server)
        .await;
    Mock::given(method("DELETE"))
        .and(path(format!("{SECRETS}/bootstrap-token-live01")))
        .respond_with(ResponseTemplate::new(500))
        .expect(0)
        .mount(&server)
        .await;
    let claims = NodeClaimList::new(client_for(&server).await);
    let report = tokens(&server).await.sweep(&claims).await.unwrap();
    assert_eq!(
        report,
        SweepReport {
            deleted: 1,
            failed: 0,
            kept: 1
        }
    );

    // The NodeClaim list fails: nothing is deleted.
    let failing = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path(SECRETS))
        .respond_with(list(items))
        .mount(&failing)
        .await;
    Mock::given(method("GET"))
        .and(path("/apis/karpenter.sh/v1/nodeclaims"))
        .respond_with(status(500, "InternalError"))
        .mount(&failing)
        .await;
    Mock::given(method("DELETE"))
        .respond_with(ResponseTemplate::new(500))
        .expect(0)
        .mount(&failing)
        .await;
    let claims = NodeClaimList::new(client_for(&failing).await);
    assert!(tokens(&failing).await.sweep(&claims).await.is_err());
}
