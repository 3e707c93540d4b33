//! Issue 5, "List() is all or error": the fault matrix on the server list,
//! held during steady state while Karpenter core's garbage collector runs.
//!
//! Core's collector (`nodeclaim.garbagecollection`) deletes every Registered
//! NodeClaim whose providerID is missing from the provider's List and whose
//! Node is not Ready. The provider registers a Node right after ordering, and
//! that Node stays NotReady for the whole install: an install in flight is
//! exactly what a List that came back shorter would kill. So the steady state
//! here is two joined nodes plus one install held in flight (a slow
//! delivery), and each fault of `GET /baremetal/v1/zones/{zone}/servers` is
//! held for at least three collector periods (the bridge's
//! `KPS_CORE_GC_INTERVAL`, 5 s here instead of core's 2 min) with at least
//! three failed collector passes observed on the bridge's metrics. After
//! each: no NodeClaim deleted or collected, no server deleted, the in-flight
//! install still at risk (Registered, Node not Ready, server delivering), the
//! provider counted the failure with its reason, and a successful pass once
//! the fault is gone.
//!
//! The positive control at the end deletes a joined node's server behind the
//! provider's back: once its Node is no longer Ready the collector must
//! delete its NodeClaim, which proves the harness sees a collection when
//! there is one. (The first run of this test, against a provider whose List
//! did not yet prove absence, failed on the consistent empty list: the
//! collector deleted the in-flight NodeClaim.)

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use e2e::progress::{ClaimWatch, Claims};
use e2e::scenario;
use e2e::stack::{self, Stack, StackOptions};
use e2e::{kubeutil, wait};
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use serde_json::{Value, json};

const LIST: &str = "GET /baremetal/v1/zones/{zone}/servers";
const DELETE: &str = "DELETE /baremetal/v1/zones/{zone}/servers/{server_id}";
/// Core's collector period for this test (bridge `KPS_CORE_GC_INTERVAL`).
const GC_PERIOD: Duration = Duration::from_secs(5);
/// Failed collector passes each fault must cause, at least.
const FAILED_PASSES: f64 = 3.0;
/// Simulated delivery of the in-flight server: 1500 s real at the 0.01 time
/// scale, several times this whole test (even on a loaded CI machine) and
/// within the provider's 30-minute delivery deadline.
const IN_FLIGHT_DELIVERY_S: f64 = 150_000.0;
const OFFER: &str = "EM-A115X-SSD";
const LIST_FAILURES: &str = "karpenter_scaleway_list_failures_total";
const GC_COLLECTED: &str = "karpenter_nodeclaims_disrupted_total";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn list_faults_never_cost_a_nodeclaim_or_a_server() -> Result<()> {
    let mut opts = StackOptions::for_test("list-faults")?;
    // IN_FLIGHT_DELIVERY_S is sized for this scale.
    opts.time_scale = 0.01;
    opts.bridge_env = vec![(
        "KPS_CORE_GC_INTERVAL".to_string(),
        format!("{}s", GC_PERIOD.as_secs()),
    )];
    // A held request fails after 2 s instead of 30 (five attempts per List),
    // so the timeout case also sees several collector passes.
    opts.provider_args = vec!["--scw-api-timeout".into(), "2s".into()];
    scenario::with_stack(opts, run).await
}

/// One row of the matrix: the faults armed together, and the reasons the
/// provider may give for the failed List.
struct Case {
    name: &'static str,
    faults: Vec<Value>,
    reasons: &'static [&'static str],
}

fn matrix() -> Vec<Case> {
    let http = |status: u16, body: Option<Value>| {
        let mut f = json!({"kind": "http", "endpoint": LIST, "status": status});
        if let Some(body) = body {
            f["body"] = body;
        }
        f
    };
    // The client reports broken pagination and undecodable answers as the
    // API being unavailable; absence proven wrong is `inconsistent`.
    let pagination: &'static [&'static str] = &["api_unavailable", "inconsistent"];
    vec![
        Case {
            name: "5xx",
            faults: vec![http(503, Some(json!({"message": "service unavailable"})))],
            reasons: &["api_unavailable"],
        },
        Case {
            name: "429",
            faults: vec![http(
                429,
                Some(json!({"message": "too many requests", "type": "too_many_requests"})),
            )],
            reasons: &["rate_limited"],
        },
        Case {
            name: "timeout",
            faults: vec![json!({"kind": "http", "endpoint": LIST, "timeout": true})],
            reasons: &["timeout", "api_unavailable"],
        },
        Case {
            name: "401",
            faults: vec![http(
                401,
                Some(
                    json!({"message": "authentication is denied", "method": "api_key",
                    "reason": "not_found", "type": "denied_authentication"}),
                ),
            )],
            reasons: &["auth"],
        },
        Case {
            name: "403",
            faults: vec![http(
                403,
                Some(
                    json!({"message": "insufficient permissions", "type": "permissions_denied",
                    "details": [{"resource": "baremetal_server", "action": "read"}]}),
                ),
            )],
            reasons: &["auth"],
        },
        Case {
            name: "empty 200 (no body)",
            faults: vec![http(200, None)],
            reasons: pagination,
        },
        Case {
            name: "empty 200 ({})",
            faults: vec![http(200, Some(json!({})))],
            reasons: pagination,
        },
        Case {
            name: "empty 200 (consistent empty list)",
            faults: vec![http(200, Some(json!({"total_count": 0, "servers": []})))],
            reasons: &["inconsistent"],
        },
        Case {
            name: "missing page (items gone, total_count true)",
            faults: vec![json!({"kind": "list_missing_page", "endpoint": LIST})],
            reasons: pagination,
        },
        Case {
            name: "page one server short (the newest: the install in flight)",
            faults: vec![json!({"kind": "list_missing_page", "endpoint": LIST, "drop": 1})],
            reasons: pagination,
        },
        Case {
            name: "total_count mismatch (one less than the items)",
            faults: vec![json!({"kind": "list_total_count", "endpoint": LIST, "delta": -1})],
            reasons: pagination,
        },
        Case {
            name: "one server short with a matching total_count",
            faults: vec![
                json!({"kind": "list_missing_page", "endpoint": LIST, "drop": 1}),
                json!({"kind": "list_total_count", "endpoint": LIST, "delta": -1}),
            ],
            reasons: &["inconsistent"],
        },
    ]
}

/// The NodeClaim held in flight, with what it must keep being.
struct InFlight {
    claim: String,
    server_id: String,
}

async fn run(stack: &mut Stack) -> Result<()> {
    let started = Instant::now();
    stack.create_nodeclass("default").await?;
    // Budget 0: no voluntary disruption, so any NodeClaim deletion in this
    // test is the collector's (or a bug's).
    let pool = Stack::nodepool_yaml(
        "default",
        "default",
        &scenario::instance_types_requirement(&[OFFER]),
    )
    .replace("nodes: \"100%\"", "nodes: \"0\"");
    kubeutil::apply_yaml(&stack.client, &pool).await?;
    let watch = ClaimWatch::start(&stack.client);

    // Steady state: two joined nodes...
    kubeutil::apply_yaml(
        &stack.client,
        &scenario::inflate_yaml_on("steady", 2, "1", &[], true),
    )
    .await?;
    scenario::wait_pods_running(stack, "steady", 2, Duration::from_secs(240)).await?;
    // ...and a third install held in flight by a slow delivery.
    stack
        .emsim
        .add_fault(json!({"kind": "delivery_seconds", "seconds": IN_FLIGHT_DELIVERY_S, "count": 1}))
        .await?;
    let joined: Vec<String> = watch.snapshot().keys().cloned().collect();
    ensure!(joined.len() == 2, "expected 2 NodeClaims, got {joined:?}");
    scenario::scale(stack, "steady", 3).await?;
    let claim = watch
        .wait_for(
            "a third NodeClaim, Registered",
            Duration::from_secs(90),
            |c| {
                c.values()
                    .find(|c| !joined.contains(&c.name) && c.registered.is_some())
                    .map(|c| c.name.clone())
            },
        )
        .await?;
    let server_id = watch.snapshot()[&claim]
        .server_id()
        .context("Registered NodeClaim without a providerID")?;
    let in_flight = InFlight {
        claim: claim.clone(),
        server_id,
    };
    check_at_risk(stack, &in_flight).await?;
    let baseline = claim_uids(&watch.snapshot());
    ensure!(baseline.len() == 3, "NodeClaims {baseline:?}");

    // The collector runs and, with a complete List, keeps everything.
    let passes = scenario::gc_passes(stack).await?;
    let passes = scenario::wait_gc_success(stack, passes, GC_PERIOD * 6).await?;
    let passes = scenario::wait_gc_success(stack, passes, GC_PERIOD * 6).await?;
    check_nothing_lost(stack, &watch, &baseline, &in_flight).await?;
    println!(
        "steady state after {:.0} s: joined {joined:?}, in flight {} (server {}); collector passes {passes:?}",
        started.elapsed().as_secs_f64(),
        in_flight.claim,
        in_flight.server_id
    );

    let mut report = Vec::new();
    for case in matrix() {
        let line = hold_fault(stack, &case)
            .await
            .with_context(|| format!("fault {:?}", case.name))?;
        check_nothing_lost(stack, &watch, &baseline, &in_flight)
            .await
            .with_context(|| format!("after fault {:?}", case.name))?;
        scenario::wait_gc_success(stack, scenario::gc_passes(stack).await?, GC_PERIOD * 6)
            .await
            .with_context(|| format!("the collector recovering after fault {:?}", case.name))?;
        check_nothing_lost(stack, &watch, &baseline, &in_flight)
            .await
            .with_context(|| format!("after the first complete List following {:?}", case.name))?;
        println!("{line}");
        report.push(line);
    }
    println!(
        "fault matrix done after {:.0} s: {} faults, each held >= {} collector periods",
        started.elapsed().as_secs_f64(),
        report.len(),
        FAILED_PASSES
    );

    // Positive control: a server really disappears (deleted behind the
    // provider's back, as from the console); once its Node stops being
    // Ready the collector must delete its NodeClaim, and this harness must
    // see it. A joined node is used: when an in-flight server vanishes, the
    // install engine notices at its next poll and gives the NodeClaim up
    // itself, before any collector pass. The Node turns Unknown when the
    // controller-manager's node-monitor grace (50 s) passes without the
    // stopped kubelet's heartbeat.
    let victim = joined[0].clone();
    let victim_server = watch.snapshot()[&victim]
        .server_id()
        .context("joined NodeClaim without a providerID")?;
    let collected_before = bridge_collected(stack).await?;
    let deleted_at = Instant::now();
    stack
        .emsim
        .user_delete_server(stack::SECRET_KEY, stack::ZONE, &victim_server)
        .await?;
    watch
        .wait_for(
            &format!("NodeClaim {victim} deleted by the collector"),
            Duration::from_secs(150),
            |c| c.get(&victim).filter(|c| c.deleting).map(|_| ()),
        )
        .await?;
    let collected = wait::until(
        "the collector counting the collected NodeClaim",
        GC_PERIOD * 4,
        Duration::from_millis(250),
        || async {
            let now = bridge_collected(stack).await?;
            Ok((now > collected_before).then_some(now))
        },
    )
    .await?;
    println!(
        "positive control: server {victim_server} deleted behind the provider's back -> NodeClaim \
         {victim} collected {:.1} s later (karpenter_nodeclaims_disrupted_total{{reason=\"garbage_collected\"}} \
         {collected_before} -> {collected})",
        deleted_at.elapsed().as_secs_f64(),
    );
    // Nothing else was touched meanwhile.
    let claims = watch.snapshot();
    for name in [&joined[1], &in_flight.claim] {
        ensure!(
            claims.get(name).is_some_and(|c| !c.deleting),
            "NodeClaim {name} deleted in the positive control"
        );
    }
    check_at_risk(stack, &in_flight).await?;
    println!("total {:.0} s", started.elapsed().as_secs_f64());
    Ok(())
}

/// Arms `case`, holds it for at least three collector periods and three
/// failed passes, checks what the provider reported, and disarms it.
async fn hold_fault(stack: &Stack, case: &Case) -> Result<String> {
    let failures_before = list_failures(stack).await?;
    let collected_before = bridge_collected(stack).await?;
    let before = scenario::gc_passes(stack).await?;
    for f in &case.faults {
        stack.emsim.add_fault(f.clone()).await?;
    }
    let armed = Instant::now();
    let during = wait::until(
        &format!("{FAILED_PASSES} failed collector passes over 3 periods"),
        Duration::from_secs(120),
        Duration::from_millis(250),
        || async {
            let now = scenario::gc_passes(stack).await?;
            let enough =
                now.error - before.error >= FAILED_PASSES && armed.elapsed() >= GC_PERIOD * 3;
            Ok(enough.then_some(now))
        },
    )
    .await?;
    let held = armed.elapsed();
    let fired: Vec<u64> = stack
        .emsim
        .faults()
        .await?
        .iter()
        .map(|f| f["fired"].as_u64().unwrap_or(0))
        .collect();
    let failures_after = list_failures(stack).await?;
    stack.emsim.clear_faults().await?;

    ensure!(
        fired.len() == case.faults.len() && fired.iter().all(|n| *n > 0),
        "the fault did not act on the provider's List calls (fired {fired:?})"
    );
    // A pass already past its List when the fault was armed may succeed;
    // every later one must fail.
    ensure!(
        during.success - before.success <= 1.0,
        "{} collector passes succeeded while the List was faulty: List answered a list",
        during.success - before.success
    );
    let mut increase: BTreeMap<String, f64> = BTreeMap::new();
    for (reason, n) in &failures_after {
        let d = n - failures_before.get(reason).copied().unwrap_or(0.0);
        if d > 0.0 {
            increase.insert(reason.clone(), d);
        }
    }
    let counted: f64 = case
        .reasons
        .iter()
        .map(|r| increase.get(*r).copied().unwrap_or(0.0))
        .sum();
    ensure!(
        counted >= FAILED_PASSES,
        "the provider counted {increase:?} List failures, expected >= {FAILED_PASSES} with reason in {:?}",
        case.reasons
    );
    let collected = bridge_collected(stack).await?;
    ensure!(
        collected == collected_before,
        "the collector collected NodeClaims during the fault ({collected_before} -> {collected})"
    );
    Ok(format!(
        "fault {:<58} held {:>5.1} s: collector passes failed {:>3}, succeeded {}; provider List failures {increase:?}; emsim fired {fired:?}",
        case.name,
        held.as_secs_f64(),
        during.error - before.error,
        during.success - before.success,
    ))
}

/// `karpenter_scaleway_list_failures_total` by reason.
async fn list_failures(stack: &Stack) -> Result<BTreeMap<String, f64>> {
    let text = stack.provider_metrics(0).await?;
    let mut out = BTreeMap::new();
    for reason in [
        "api_unavailable",
        "rate_limited",
        "timeout",
        "auth",
        "inconsistent",
        "kube_unavailable",
    ] {
        out.insert(
            reason.to_string(),
            scenario::metric_sum(&text, LIST_FAILURES, &[("reason", reason)]),
        );
    }
    Ok(out)
}

/// NodeClaims core's collector deleted so far.
async fn bridge_collected(stack: &Stack) -> Result<f64> {
    Ok(scenario::metric_sum(
        &stack.bridge_metrics(0).await?,
        GC_COLLECTED,
        &[("reason", "garbage_collected")],
    ))
}

/// name -> uid of the NodeClaims seen.
fn claim_uids(claims: &Claims) -> BTreeMap<String, String> {
    claims
        .iter()
        .map(|(name, c)| {
            (
                name.clone(),
                c.object.metadata.uid.clone().unwrap_or_default(),
            )
        })
        .collect()
}

/// No NodeClaim deleted or replaced, no server deleted, and the in-flight
/// install still exposed to the collector.
async fn check_nothing_lost(
    stack: &Stack,
    watch: &ClaimWatch,
    baseline: &BTreeMap<String, String>,
    in_flight: &InFlight,
) -> Result<()> {
    let claims = watch.snapshot();
    let deleted: Vec<&String> = claims
        .values()
        .filter(|c| c.deleting || c.gone)
        .map(|c| &c.name)
        .collect();
    ensure!(deleted.is_empty(), "NodeClaims deleted: {deleted:?}");
    let now = claim_uids(&claims);
    ensure!(
        &now == baseline,
        "NodeClaims changed: {baseline:?} -> {now:?}"
    );
    let servers = stack.emsim.servers_including_deleted().await?;
    let gone: Vec<String> = servers
        .iter()
        .filter(|s| !s["deleted_at"].is_null() || s["status"] == "deleting")
        .map(|s| format!("{} ({})", s["id"], s["name"]))
        .collect();
    ensure!(gone.is_empty(), "servers deleted: {gone:?}");
    let deletes = stack.emsim.counters().await?["endpoints"][DELETE]["total"]
        .as_u64()
        .unwrap_or(0);
    ensure!(deletes == 0, "{deletes} DELETE calls on servers");
    check_at_risk(stack, in_flight).await
}

/// The in-flight install is what a short List would cost: its NodeClaim is
/// Registered, its Node exists and is not Ready, its server is delivering.
async fn check_at_risk(stack: &Stack, in_flight: &InFlight) -> Result<()> {
    let nc = kubeutil::nodeclaims(&stack.client)
        .get(&in_flight.claim)
        .await?;
    ensure!(
        kubeutil::condition(&nc, "Registered").as_deref() == Some("True"),
        "in-flight NodeClaim {} not Registered",
        in_flight.claim
    );
    let node_name = nc.data["status"]["nodeName"]
        .as_str()
        .unwrap_or(&in_flight.claim)
        .to_string();
    let nodes: Api<Node> = Api::all(stack.client.clone());
    let node = nodes
        .get_opt(&node_name)
        .await?
        .with_context(|| format!("no Node {node_name} for the in-flight NodeClaim"))?;
    ensure!(
        !kubeutil::node_ready(&node),
        "the in-flight Node {node_name} is Ready: core would spare it whatever List says"
    );
    let server = stack
        .emsim
        .servers()
        .await?
        .into_iter()
        .find(|s| s["id"] == in_flight.server_id.as_str())
        .with_context(|| format!("in-flight server {} gone", in_flight.server_id))?;
    ensure!(
        server["status"] == "delivering",
        "in-flight server {} is {}, no longer delivering",
        in_flight.server_id,
        server["status"]
    );
    Ok(())
}
