//! `servers` against wiremock for both the Scaleway API and the kube API
//! (Elastic Metal paging and failures), and against the in-memory fakes of
//! both kinds (`scaleway::fake`, `scaleway::instance::fake`).

use async_trait::async_trait;
use chrono::TimeZone as _;
use wiremock::matchers::{method, path, query_param};
use wiremock::{Mock, MockServer, ResponseTemplate};

use super::*;
use crate::provider::KubeError;
use crate::scaleway::ApiError;
use crate::scaleway::fake::{FakeElasticMetal, Op as EmOp};
use crate::scaleway::instance::fake::{FakeInstance, Op as VmOp};
use crate::scaleway::{ClientConfig, RetryPolicy, ScalewayClient, SecretKey};

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

/// Elastic Metal grace 2h, Instance grace 10m.
fn graces() -> Graces {
    Graces {
        policy: policy(),
        instance_grace: Duration::from_secs(600),
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
        "ips": [
            {"id": "ip6", "address": "2001:bc8::1", "version": "IPv6"},
            {"id": "ip4", "address": "51.15.0.1", "version": "IPv4"}
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
    // One NodeClaim read by name (those the list lacks): the API server's
    // NotFound, as for a NodeClaim that was deleted.
    Mock::given(method("GET"))
        .and(wiremock::matchers::path_regex(
            "^/apis/karpenter.sh/v1/nodeclaims/[^/]+$",
        ))
        .respond_with(ResponseTemplate::new(404).set_body_json(json!({
            "kind": "Status", "apiVersion": "v1", "status": "Failure",
            "reason": "NotFound", "code": 404, "message": "nodeclaims not found"
        })))
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

fn apis<'a>(em: &'a dyn ElasticMetal, vms: &'a dyn Instance) -> Apis<'a> {
    Apis {
        elastic_metal: em,
        instance: vms,
        networks: None,
    }
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
            // Younger than CLAIM_DELETED_GRACE: spared although np-old is gone.
            page(vec![server("s-young", "nl-ams-1", "np-old", 60)], 1),
        ),
    ])
    .await;
    let kube = kube_api(claim_list(vec![
        nodeclaim("np-a", "fr-par-2", "s-install", Some("imaging")),
        nodeclaim("np-c", "fr-par-2", "s-joined", Some("joined")),
    ]))
    .await;
    let (api, vms) = (api_for(&scw), FakeInstance::new());
    let report = collect(
        &apis(&api, &vms),
        Kind::ElasticMetal,
        &claims_for(&kube),
        &zones(),
        &graces(),
        now(),
    )
    .await
    .unwrap();
    let got: Vec<_> = report
        .rows
        .iter()
        .map(|r| {
            let sweep = &r.sweeper;
            (
                r.id.as_str(),
                r.phase.as_deref(),
                sweep.verdict.as_str(),
                sweep.reason.as_str(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("s-install", Some("imaging"), "spared", "in_flight"),
            ("s-joined", Some("joined"), "spared", "claimed"),
            // np-gone is read again and found deleted.
            ("s-orphan", None, "deleted", "claim_deleted"),
            ("s-young", None, "spared", "within_grace"),
        ]
    );

    let table = report.table();
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("KIND"), "{table}");
    for cols in [
        [
            "elastic-metal",
            "np-a",
            "s-install",
            "EM-A115X-SSD",
            "fr-par-2",
            "ready",
            "51.15.0.1",
            "default",
            "imaging",
            "20m0s",
            "spared (in_flight)",
        ],
        [
            "elastic-metal",
            "np-gone (missing)",
            "s-orphan",
            "EM-A115X-SSD",
            "fr-par-2",
            "ready",
            "51.15.0.1",
            "default",
            "-",
            "5h0m",
            "deleted (claim_deleted)",
        ],
        [
            "elastic-metal",
            "np-old (missing)",
            "s-young",
            "EM-A115X-SSD",
            "nl-ams-1",
            "ready",
            "51.15.0.1",
            "default",
            "-",
            "1m0s",
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
    assert!(!table.contains("SBS volumes"), "{table}");

    let out = report.json();
    assert_eq!(out["servers"].as_array().unwrap().len(), 4);
    assert_eq!(out["servers"][0]["installPhase"], "imaging");
    assert_eq!(out["servers"][0]["nodeClaim"], "np-a");
    assert_eq!(out["servers"][0]["kind"], "elastic-metal");
    assert_eq!(out["servers"][0]["offer"], "EM-A115X-SSD");
    assert_eq!(out["servers"][0]["type"], "EM-A115X-SSD");
    assert_eq!(out["servers"][0]["ipv4"], "51.15.0.1");
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
    let (api, vms) = (api_for(&scw), FakeInstance::new());
    let err = collect(
        &apis(&api, &vms),
        Kind::ElasticMetal,
        &claims_for(&kube),
        &zones(),
        &graces(),
        now(),
    )
    .await
    .unwrap_err();
    let text = format!("{err:#}");
    assert!(text.contains("listing the Elastic Metal servers"), "{text}");
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
    let (api, vms) = (api_for(&scw), FakeInstance::new());
    let err = collect(
        &apis(&api, &vms),
        Kind::ElasticMetal,
        &claims_for(&kube),
        &["fr-par-2".to_string()],
        &graces(),
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
    let (api, vms) = (api_for(&scw), FakeInstance::new());
    let err = collect(
        &apis(&api, &vms),
        Kind::ElasticMetal,
        &claims_for(&kube),
        &zones(),
        &graces(),
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
    assert_eq!(args.zones("fr-par-2"), vec!["fr-par-2".to_string()]);
    let args = parse(&["-o", "json", "--zones", "fr-par-2,nl-ams-1,fr-par-2"]).unwrap();
    assert_eq!(args.output, Output::Json);
    assert_eq!(args.zones("fr-par-1"), zones());
    assert_eq!(args.kind, Kind::All);
    assert_eq!(args.instance_orphan_grace, Duration::from_secs(300));
    assert_eq!(
        parse(&["--instance-orphan-grace", "90s"])
            .unwrap()
            .instance_orphan_grace,
        Duration::from_secs(90)
    );
    assert!(parse(&["--instance-orphan-grace", "0s"]).is_err());
    assert_eq!(parse(&["--kind", "instance"]).unwrap().kind, Kind::Instance);
    assert_eq!(
        parse(&["--kind", "elastic-metal"]).unwrap().kind,
        Kind::ElasticMetal
    );
    assert!(parse(&["--kind", "vm"]).is_err());
    assert!(parse(&["--orphan-grace", "0s"]).is_err());
    assert!(parse(&["--zones", "mars"]).is_err());
}

// ---- Both kinds, on the in-memory fakes. ----

/// NodeClaims as the API server would list them; the list can fail.
#[derive(Default)]
struct FakeClaims {
    claims: Vec<Value>,
    fail: bool,
}

#[async_trait]
impl NodeClaimSource for FakeClaims {
    async fn list(&self) -> Result<Vec<Value>, KubeError> {
        if self.fail {
            return Err(KubeError::Unavailable("connection refused".into()));
        }
        Ok(self.claims.clone())
    }

    async fn annotate(
        &self,
        name: &str,
        _: &str,
        _: &str,
        _: Option<&str>,
    ) -> Result<(), KubeError> {
        Err(KubeError::Refused(format!("read-only fake: {name}")))
    }
}

fn vm_claim(name: &str, zone: &str, id: &str) -> Value {
    json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {"name": name},
        "status": {"providerID": format!("scaleway://instance/{zone}/{id}")}
    })
}

/// A VM as the Instance API lists it; `tags` besides the cluster's.
fn vm(id: &str, zone: &str, claim: &str, state: &str, detail: &str, age_s: i64) -> Value {
    json!({
        "id": id, "name": claim, "commercial_type": "POP2-2C-8G",
        "state": state, "state_detail": detail, "zone": zone, "project": "proj-1",
        "creation_date": (now() - chrono::Duration::seconds(age_s)).to_rfc3339(),
        "tags": [
            "karpenter.scaleway.com/cluster=prod",
            format!("karpenter.sh/nodeclaim={claim}"),
            "karpenter.scaleway.com/nodeclass=vms"
        ],
        "public_ips": []
    })
}

fn insert_vm(api: &FakeInstance, server: Value) {
    api.insert_server(serde_json::from_value(server).expect("a VM the model reads"));
}

fn insert_metal(api: &FakeElasticMetal, server: Value) {
    api.insert_server(serde_json::from_value(server).expect("a server the model reads"));
}

#[tokio::test]
async fn both_kinds_are_listed_with_their_kind() {
    let em = FakeElasticMetal::new();
    insert_metal(&em, server("s-metal", "fr-par-2", "np-metal", 2 * HOUR));
    let vms = FakeInstance::new();
    let mut running = vm("vm-run", "fr-par-2", "vm-a", "running", "booted", 3 * HOUR);
    running["public_ips"] = json!([
        {"id": "ip6", "address": "2001:bc8::2", "family": "inet6", "dynamic": true},
        {"id": "ip4", "address": "163.172.0.9", "family": "inet", "dynamic": true}
    ]);
    insert_vm(&vms, running);
    // Ordered a moment ago: tagged, its NodeClaim has no providerID yet.
    insert_vm(
        &vms,
        vm(
            "vm-new",
            "nl-ams-1",
            "vm-b",
            "starting",
            "allocating node",
            40,
        ),
    );
    // Its NodeClaim is gone.
    insert_vm(
        &vms,
        vm("vm-lost", "fr-par-2", "vm-gone", "stopped", "", 26 * HOUR),
    );
    // Not this cluster's, not this project's: never listed.
    let mut other = vm("vm-other", "fr-par-2", "x", "running", "", 60);
    other["tags"][0] = json!("karpenter.scaleway.com/cluster=staging");
    insert_vm(&vms, other);
    let mut foreign = vm("vm-foreign", "fr-par-2", "y", "running", "", 60);
    foreign["project"] = json!("proj-2");
    insert_vm(&vms, foreign);
    let claims = FakeClaims {
        claims: vec![
            nodeclaim("np-metal", "fr-par-2", "s-metal", Some("joined")),
            vm_claim("vm-a", "fr-par-2", "vm-run"),
            json!({"metadata": {"name": "vm-b"}, "status": {}}),
        ],
        fail: false,
    };
    let report = collect(
        &apis(&em, &vms),
        Kind::All,
        &claims,
        &zones(),
        &graces(),
        now(),
    )
    .await
    .unwrap();

    let got: Vec<_> = report
        .rows
        .iter()
        .map(|r| {
            (
                kind_name(r.kind),
                r.id.as_str(),
                r.claim.as_deref(),
                r.status.as_str(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("elastic-metal", "s-metal", Some("np-metal"), "ready"),
            ("instance", "vm-run", Some("vm-a"), "running"),
            ("instance", "vm-lost", None, "stopped"),
            (
                "instance",
                "vm-new",
                Some("vm-b"),
                "starting/allocating node"
            ),
        ]
    );
    let vm_run = &report.rows[1];
    assert_eq!(vm_run.server_type, "POP2-2C-8G");
    assert_eq!(vm_run.ipv4.as_deref(), Some("163.172.0.9"));
    assert_eq!(vm_run.nodeclass.as_deref(), Some("vms"));
    assert_eq!(vm_run.age, Some(Duration::from_secs(3 * 3600)));
    assert_eq!(
        (vm_run.sweeper.verdict, vm_run.sweeper.reason),
        (Verdict::Spared, Reason::Claimed)
    );

    let table = report.table();
    let row_of = |id: &str| {
        table
            .lines()
            .find(|l| l.contains(id))
            .unwrap_or_else(|| panic!("{id} in\n{table}"))
            .split_whitespace()
            .collect::<Vec<_>>()
    };
    assert_eq!(
        row_of("vm-run"),
        [
            "instance",
            "vm-a",
            "vm-run",
            "POP2-2C-8G",
            "fr-par-2",
            "running",
            "163.172.0.9",
            "vms",
            "-",
            "-",
            "3h0m",
            "spared",
            "(claimed)"
        ]
    );
    assert_eq!(
        row_of("vm-lost"),
        [
            "instance",
            "vm-gone",
            "(missing)",
            "vm-lost",
            "POP2-2C-8G",
            "fr-par-2",
            "stopped",
            "-",
            "vms",
            "-",
            "-",
            "1d2h",
            "deleted",
            "(orphaned)"
        ]
    );
    assert!(row_of("vm-new").contains(&"starting/allocating"), "{table}");
    assert_eq!(row_of("s-metal")[0], "elastic-metal");
    assert!(!table.contains("vm-other") && !table.contains("vm-foreign"));
    assert!(
        table.contains("4 server(s) (1 Elastic Metal, 3 Instance)"),
        "{table}"
    );
    assert!(
        table.contains("orphan grace 2h0m (Elastic Metal), 10m0s (Instances)"),
        "{table}"
    );
    assert!(table.contains("SBS volumes VMs leave behind"), "{table}");

    let out = report.json();
    let servers = out["servers"].as_array().unwrap();
    assert_eq!(servers.len(), 4);
    assert_eq!(servers[1]["kind"], "instance");
    assert_eq!(servers[1]["type"], "POP2-2C-8G");
    assert_eq!(servers[1]["nodeClaim"], "vm-a");
    assert_eq!(servers[1]["ipv4"], "163.172.0.9");
    assert_eq!(servers[1]["sweeper"]["decision"], "spared");
    assert_eq!(servers[2]["sweeper"]["decision"], "deleted");
    assert!(
        servers[2]["sweeper"]["detail"]
            .as_str()
            .unwrap()
            .contains("delete server"),
        "{}",
        servers[2]
    );
    assert_eq!(out["instanceOrphanGraceSeconds"], 600);
    assert_eq!(servers[1].get("offer"), None);
    assert_eq!(servers[2]["nodeClaim"], Value::Null);
    assert_eq!(servers[2]["nodeClaimTag"], "vm-gone");
    assert_eq!(servers[0]["sweeper"]["reason"], "claimed");
    assert_eq!(out["kind"], "all");

    // One list per zone and kind, each with the cluster's tag and project.
    for zone in ZONES {
        let listed = |calls: Vec<String>| calls.iter().filter(|z| *z == zone).count();
        assert_eq!(
            listed(
                vms.calls()
                    .into_iter()
                    .filter(|c| c.op == VmOp::ListServers)
                    .map(|c| c.zone)
                    .collect()
            ),
            1
        );
        assert_eq!(
            listed(
                em.calls()
                    .into_iter()
                    .filter(|c| c.op == EmOp::ListServers)
                    .map(|c| c.zone)
                    .collect()
            ),
            1
        );
    }
}

#[tokio::test]
async fn the_kind_flag_reads_only_that_api() {
    let em = FakeElasticMetal::new();
    insert_metal(&em, server("s-metal", "fr-par-2", "np-metal", 60));
    let vms = FakeInstance::new();
    insert_vm(&vms, vm("vm-1", "fr-par-2", "vm-a", "running", "", 60));
    let claims = FakeClaims::default();
    let (both, zones, graces) = (apis(&em, &vms), zones(), graces());
    let only = |kind| collect(&both, kind, &claims, &zones, &graces, now());

    let report = only(Kind::Instance).await.unwrap();
    assert_eq!(report.rows.len(), 1);
    assert_eq!(report.rows[0].kind, ClassKind::Instance);
    assert_eq!(em.count(EmOp::ListServers), 0);
    let table = report.table();
    assert!(table.contains("(Instances only)"), "{table}");
    assert!(!table.contains("in-flight check"), "{table}");

    let report = only(Kind::ElasticMetal).await.unwrap();
    assert_eq!(report.rows.len(), 1);
    assert_eq!(report.rows[0].kind, ClassKind::ElasticMetal);
    assert_eq!(
        vms.count(VmOp::ListServers),
        2,
        "only the first run read VMs"
    );
}

#[tokio::test]
async fn an_instance_zone_that_cannot_be_read_fails_the_command() {
    let em = FakeElasticMetal::new();
    let vms = FakeInstance::new();
    insert_vm(&vms, vm("vm-1", "fr-par-2", "vm-a", "running", "", 60));
    vms.fail_next(VmOp::ListServers, ApiError::Unavailable("503".into()));
    let err = collect(
        &apis(&em, &vms),
        Kind::All,
        &FakeClaims::default(),
        &["fr-par-2".to_string()],
        &graces(),
        now(),
    )
    .await
    .unwrap_err();
    let text = format!("{err:#}");
    assert!(
        text.contains("listing the Instance servers in fr-par-2"),
        "{text}"
    );
    // Credentials scoped to Elastic Metal: the error says how to list only that.
    vms.fail_next(VmOp::ListServers, ApiError::Unauthorized("403".into()));
    let err = collect(
        &apis(&em, &vms),
        Kind::All,
        &FakeClaims::default(),
        &["fr-par-2".to_string()],
        &graces(),
        now(),
    )
    .await
    .unwrap_err();
    assert!(
        format!("{err:#}").contains("--kind elastic-metal"),
        "{err:#}"
    );
}

#[tokio::test]
async fn an_elastic_metal_failure_with_all_kinds_hints_at_the_flag() {
    let em = FakeElasticMetal::new();
    em.fail_next(EmOp::ListServers, ApiError::NotFound("zone".into()));
    let vms = FakeInstance::new();
    let err = collect(
        &apis(&em, &vms),
        Kind::All,
        &FakeClaims::default(),
        &["fr-par-3".to_string()],
        &graces(),
        now(),
    )
    .await
    .unwrap_err();
    assert!(format!("{err:#}").contains("--kind instance"), "{err:#}");
}

#[tokio::test]
async fn unreadable_nodeclaims_fail_a_vm_listing_too() {
    let em = FakeElasticMetal::new();
    let vms = FakeInstance::new();
    insert_vm(&vms, vm("vm-1", "fr-par-2", "vm-a", "running", "", 60));
    let claims = FakeClaims {
        claims: vec![],
        fail: true,
    };
    let err = collect(
        &apis(&em, &vms),
        Kind::Instance,
        &claims,
        &zones(),
        &graces(),
        now(),
    )
    .await
    .unwrap_err();
    assert!(
        format!("{err:#}").contains("listing the NodeClaims"),
        "{err:#}"
    );
}

#[tokio::test]
async fn unclaimed_vms_get_the_sweepers_instance_verdicts() {
    let em = FakeElasticMetal::new();
    let vms = FakeInstance::new();
    // Younger than the Instance grace (10m), older than nothing else.
    insert_vm(
        &vms,
        vm("vm-young", "fr-par-2", "np-1", "running", "", 5 * 60),
    );
    // Old enough, but starting: no action is possible until it settles.
    insert_vm(
        &vms,
        vm(
            "vm-busy",
            "fr-par-2",
            "np-2",
            "starting",
            "allocating node",
            HOUR,
        ),
    );
    // Old enough and running: terminate.
    insert_vm(&vms, vm("vm-old", "fr-par-2", "np-3", "running", "", HOUR));
    let verdicts = |report: &Report| {
        report
            .rows
            .iter()
            .map(|r| {
                (
                    r.id.clone(),
                    r.sweeper.verdict.as_str(),
                    r.sweeper.reason.as_str(),
                )
            })
            .collect::<Vec<_>>()
    };
    let mut graces = graces();
    let zones = ["fr-par-2".to_string()];
    let report = collect(
        &apis(&em, &vms),
        Kind::Instance,
        &FakeClaims::default(),
        &zones,
        &graces,
        now(),
    )
    .await
    .unwrap();
    assert_eq!(
        verdicts(&report),
        [
            ("vm-young".to_string(), "spared", "within_grace"),
            ("vm-busy".to_string(), "spared", "transitioning"),
            ("vm-old".to_string(), "deleted", "orphaned"),
        ]
    );
    assert!(report.rows[2].sweeper.detail.contains("terminate"));

    graces.policy.dry_run = true;
    let report = collect(
        &apis(&em, &vms),
        Kind::Instance,
        &FakeClaims::default(),
        &zones,
        &graces,
        now(),
    )
    .await
    .unwrap();
    assert_eq!(verdicts(&report)[2].1, "would_delete");
    assert!(report.table().contains(", dry run."), "{}", report.table());
    // Reading decides; it never acts.
    assert_eq!(vms.count(VmOp::Action), 0);
    assert_eq!(vms.count(VmOp::DeleteServer), 0);
}

#[test]
fn vm_states_read_as_the_api_names_them() {
    assert_eq!(vm_status(&ServerState::Running, "booted"), "running");
    assert_eq!(vm_status(&ServerState::Stopped, ""), "stopped");
    assert_eq!(
        vm_status(&ServerState::Starting, "provisioning node"),
        "starting/provisioning node"
    );
    assert_eq!(
        vm_status(&ServerState::Stopping, "terminating"),
        "stopping/terminating"
    );
    assert_eq!(
        vm_status(&ServerState::StoppedInPlace, ""),
        "stopped in place"
    );
    assert_eq!(vm_status(&ServerState::Other, "x"), "unknown/x");
}

#[path = "servers_standby_tests.rs"]
mod standby;

#[path = "servers_network_tests.rs"]
mod network;
