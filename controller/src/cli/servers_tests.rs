//! `servers` against wiremock for both the Scaleway API and the kube API.

use chrono::TimeZone as _;
use wiremock::matchers::{method, path, query_param};
use wiremock::{Mock, MockServer, ResponseTemplate};

use super::*;

const HOUR: i64 = 3600;

fn now() -> DateTime<Utc> {
    Utc.with_ymd_and_hms(2026, 11, 22, 12, 0, 0).unwrap()
}

fn policy() -> SweepPolicy {
    SweepPolicy {
        cluster_name: "prod".into(),
        project_id: "proj-1".into(),
        grace: Duration::from_secs(2 * 3600),
        dry_run: false,
    }
}

fn server(id: &str, zone: &str, claim: &str, age_s: i64) -> Value {
    json!({
        "id": id, "project_id": "proj-1", "name": claim, "status": "ready",
        "offer_id": "o", "offer_name": "EM-A115X-SSD", "zone": zone,
        "created_at": (now() - chrono::Duration::seconds(age_s)).to_rfc3339(),
        "tags": [
            "karpenter.scaleway.com/cluster=prod",
            format!("karpenter.sh/nodeclaim={claim}"),
            "karpenter.scaleway.com/nodeclass=default"
        ],
        // The API returns the rescue password; it must never be printed.
        "rescue_server": {"user": "root", "password": "hunter2-rescue"}
    })
}

fn page(servers: Vec<Value>, total: usize) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(json!({"servers": servers, "total_count": total}))
}

fn nodeclaim(name: &str, zone: &str, id: &str, phase: Option<&str>) -> Value {
    let mut c = json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": name, "annotations": {}},
        "status": {"providerID": format!("scaleway://baremetal/{zone}/{id}")}
    });
    if let Some(p) = phase {
        c["metadata"]["annotations"]["install.karpenter.scaleway.com/phase"] = json!(p);
    }
    c
}

async fn scaleway(zones: &[(&str, ResponseTemplate)]) -> MockServer {
    let server = MockServer::start().await;
    for (zone, answer) in zones {
        Mock::given(method("GET"))
            .and(path(format!("/baremetal/v1/zones/{zone}/servers")))
            .and(query_param("tags", "karpenter.scaleway.com/cluster=prod"))
            .and(query_param("project_id", "proj-1"))
            .respond_with(answer.clone())
            .mount(&server)
            .await;
    }
    server
}

async fn kube_api(answer: ResponseTemplate) -> MockServer {
    let server = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/apis/karpenter.sh/v1/nodeclaims"))
        .respond_with(answer)
        .mount(&server)
        .await;
    server
}

fn claim_list(items: Vec<Value>) -> ResponseTemplate {
    ResponseTemplate::new(200).set_body_json(json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaimList",
        "metadata": {"resourceVersion": "1"}, "items": items
    }))
}

fn api_for(server: &MockServer) -> ScalewayClient {
    ScalewayClient::new(ClientConfig {
        api_url: server.uri(),
        secret_key: SecretKey::new("scw-secret-key-value"),
        request_timeout: Duration::from_secs(5),
        retry: RetryPolicy {
            max_attempts: 2,
            base_delay: Duration::from_millis(1),
            max_delay: Duration::from_millis(2),
        },
    })
    .unwrap()
}

fn claims_for(server: &MockServer) -> NodeClaimList {
    let config = kube::Config::new(server.uri().parse().unwrap());
    NodeClaimList::new(kube::Client::try_from(config).unwrap())
}

const ZONES: [&str; 2] = ["fr-par-2", "nl-ams-1"];

fn zones() -> Vec<String> {
    ZONES.iter().map(|z| z.to_string()).collect()
}

#[tokio::test]
async fn every_owned_server_is_shown_with_the_sweepers_verdict() {
    let scw = scaleway(&[
        (
            "fr-par-2",
            page(
                vec![
                    server("s-install", "fr-par-2", "np-a", 20 * 60),
                    server("s-orphan", "fr-par-2", "np-gone", 5 * HOUR),
                    server("s-joined", "fr-par-2", "np-c", 30 * HOUR),
                ],
                3,
            ),
        ),
        (
            "nl-ams-1",
            page(vec![server("s-young", "nl-ams-1", "np-old", 600)], 1),
        ),
    ])
    .await;
    let kube = kube_api(claim_list(vec![
        nodeclaim("np-a", "fr-par-2", "s-install", Some("imaging")),
        nodeclaim("np-c", "fr-par-2", "s-joined", Some("joined")),
    ]))
    .await;
    let report = collect(
        &api_for(&scw),
        &claims_for(&kube),
        &zones(),
        &policy(),
        now(),
    )
    .await
    .unwrap();
    let got: Vec<_> = report
        .rows
        .iter()
        .map(|r| {
            (
                r.decision.server.id.as_str(),
                r.phase.as_deref(),
                r.decision.verdict.as_str(),
                r.decision.reason.as_str(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("s-install", Some("imaging"), "spared", "in_flight"),
            ("s-joined", Some("joined"), "spared", "claimed"),
            ("s-orphan", None, "deleted", "orphaned"),
            ("s-young", None, "spared", "within_grace"),
        ]
    );

    let table = report.table();
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("NODECLAIM"), "{table}");
    for cols in [
        [
            "np-a",
            "s-install",
            "EM-A115X-SSD",
            "fr-par-2",
            "ready",
            "imaging",
            "20m0s",
            "spared (in_flight)",
        ],
        [
            "np-gone (missing)",
            "s-orphan",
            "EM-A115X-SSD",
            "fr-par-2",
            "ready",
            "-",
            "5h0m",
            "deleted (orphaned)",
        ],
        [
            "np-old (missing)",
            "s-young",
            "EM-A115X-SSD",
            "nl-ams-1",
            "ready",
            "-",
            "10m0s",
            "spared (within_grace)",
        ],
    ] {
        assert!(
            lines.iter().any(|l| {
                let mut rest = *l;
                cols.iter().all(|c| match rest.find(c) {
                    Some(i) => {
                        rest = &rest[i + c.len()..];
                        true
                    }
                    None => false,
                })
            }),
            "{cols:?} in\n{table}"
        );
    }
    assert!(table.contains("without the controller's in-flight check"));

    let out = report.json();
    assert_eq!(out["servers"].as_array().unwrap().len(), 4);
    assert_eq!(out["servers"][0]["installPhase"], "imaging");
    assert_eq!(out["servers"][0]["nodeClaim"], "np-a");
    assert_eq!(out["servers"][2]["sweeper"]["decision"], "deleted");
    assert_eq!(out["servers"][2]["nodeClaim"], Value::Null);
    assert_eq!(out["servers"][2]["nodeClaimTag"], "np-gone");
    assert_eq!(out["servers"][2]["ageSeconds"], 5 * HOUR);
    assert_eq!(out["orphanGraceSeconds"], 7200);

    for text in [table, serde_json::to_string(&out).unwrap()] {
        assert!(!text.contains("hunter2"), "{text}");
        assert!(!text.contains("scw-secret-key-value"), "{text}");
    }
}

#[tokio::test]
async fn a_zone_that_cannot_be_read_fails_the_command() {
    let scw = scaleway(&[
        (
            "fr-par-2",
            page(vec![server("s1", "fr-par-2", "np-a", 60)], 1),
        ),
        (
            "nl-ams-1",
            ResponseTemplate::new(503).set_body_json(json!({"message": "maintenance"})),
        ),
    ])
    .await;
    let kube = kube_api(claim_list(vec![])).await;
    let err = collect(
        &api_for(&scw),
        &claims_for(&kube),
        &zones(),
        &policy(),
        now(),
    )
    .await
    .unwrap_err();
    let text = format!("{err:#}");
    assert!(text.contains("listing the servers"), "{text}");
    assert!(text.contains("nl-ams-1"), "{text}");
}

#[tokio::test]
async fn a_missing_page_fails_the_command() {
    // total_count says 2, the first page holds 1 and the second none.
    let scw = MockServer::start().await;
    Mock::given(method("GET"))
        .and(path("/baremetal/v1/zones/fr-par-2/servers"))
        .and(query_param("page", "1"))
        .respond_with(page(vec![server("s1", "fr-par-2", "np-a", 60)], 2))
        .mount(&scw)
        .await;
    Mock::given(method("GET"))
        .and(path("/baremetal/v1/zones/fr-par-2/servers"))
        .and(query_param("page", "2"))
        .respond_with(page(vec![], 2))
        .mount(&scw)
        .await;
    let kube = kube_api(claim_list(vec![])).await;
    let err = collect(
        &api_for(&scw),
        &claims_for(&kube),
        &["fr-par-2".to_string()],
        &policy(),
        now(),
    )
    .await
    .unwrap_err();
    assert!(format!("{err:#}").contains("page missing"), "{err:#}");
}

#[tokio::test]
async fn unreadable_nodeclaims_fail_the_command() {
    let scw = scaleway(&[
        (
            "fr-par-2",
            page(vec![server("s1", "fr-par-2", "np-a", 60)], 1),
        ),
        ("nl-ams-1", page(vec![], 0)),
    ])
    .await;
    let kube = kube_api(ResponseTemplate::new(403).set_body_json(json!({
        "kind": "Status", "apiVersion": "v1", "status": "Failure",
        "message": "nodeclaims is forbidden", "reason": "Forbidden", "code": 403
    })))
    .await;
    let err = collect(
        &api_for(&scw),
        &claims_for(&kube),
        &zones(),
        &policy(),
        now(),
    )
    .await
    .unwrap_err();
    assert!(
        format!("{err:#}").contains("listing the NodeClaims"),
        "{err:#}"
    );
}

#[test]
fn flags() {
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: ServersArgs,
    }
    let parse = |extra: &[&str]| {
        let mut argv = vec![
            "servers",
            "--scw-secret-key",
            "k",
            "--scw-project-id",
            "p",
            "--cluster-name",
            "prod",
        ];
        argv.extend_from_slice(extra);
        <Cli as clap::Parser>::try_parse_from(argv).map(|c| c.args)
    };
    let args = parse(&[]).unwrap();
    assert_eq!(args.orphan_grace, Duration::from_secs(3 * 3600));
    assert_eq!(args.output, Output::Table);
    assert_eq!(args.zones(), vec!["fr-par-2".to_string()]);
    let args = parse(&["-o", "json", "--zones", "fr-par-2,nl-ams-1,fr-par-2"]).unwrap();
    assert_eq!(args.output, Output::Json);
    assert_eq!(args.zones(), zones());
    assert!(parse(&["--orphan-grace", "0s"]).is_err());
    assert!(parse(&["--zones", "mars"]).is_err());
}
