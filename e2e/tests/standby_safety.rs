//! Issue 13: the orphan sweeper and List faults never touch standby servers.
//! A pool keeps two standby servers (min 2, max 2). Once they are older than
//! the sweeper's grace they survive its passes (decision `spared`, reason
//! `standby`, and no Event at all), while a true orphan of this cluster (our
//! tags, no NodeClaim) is deleted after the grace. Then the server list is
//! broken in several ways while Karpenter core's NodeClaim garbage collector
//! runs: its passes fail, no standby server is deleted or re-ordered, none
//! appears as a NodeClaim. Once the faults are cleared the pool is what it
//! was (same servers, still idle) and a pod of a reserved NodePool adopts
//! one of them.
//!
//! The sweeper ages a server by its `created_at` against the local clock (as
//! it must against the real API), so emsim runs at time scale 1 as in
//! orphans.rs: simulated time = real time. EM-A115X-SSD is delivered in
//! 5 to 12 s and a reboot takes 12 s, so a standby install (delivery, rescue
//! boot, image, Talos boot) takes about 40 s at this scale.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use chrono::{DateTime, Utc};
use kube::ResourceExt;
use serde_json::{Value, json};

use e2e::stack::{self, Stack, StackOptions};
use e2e::standby::{self, Pool};
use e2e::{kubeutil, scenario, wait};

const OFFER: &str = "EM-A115X-SSD";
const CLASS: &str = "warm";
const NODEPOOL: &str = "reserved";
const APP: &str = "burst";
const GRACE: Duration = Duration::from_secs(15);
const SWEEP_INTERVAL: Duration = Duration::from_secs(2);
/// Core's collector period (the bridge's `KPS_CORE_GC_INTERVAL`).
const GC_PERIOD: Duration = Duration::from_secs(3);
/// Failed collector passes each fault must cause, at least.
const FAILED_PASSES: f64 = 3.0;
const LIST: &str = "GET /baremetal/v1/zones/{zone}/servers";
const DELETE: &str = "DELETE /baremetal/v1/zones/{zone}/servers/{server_id}";
const DECISIONS: &str = "karpenter_scaleway_sweeper_decisions_total";
const PASSES: &str = "karpenter_scaleway_sweeper_passes_total";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn standby_safety_sweeper_and_list_faults_never_touch_standby_servers() -> Result<()> {
    let mut opts = StackOptions::for_test("standby-safety")?;
    opts.time_scale = 1.0;
    opts.provider_args = vec![
        format!("--orphan-grace={}s", GRACE.as_secs()),
        format!("--sweep-interval={}s", SWEEP_INTERVAL.as_secs()),
        "--standby-interval=1s".to_string(),
    ];
    opts.bridge_env = vec![(
        "KPS_CORE_GC_INTERVAL".to_string(),
        format!("{}s", GC_PERIOD.as_secs()),
    )];
    scenario::with_stack(opts, run).await
}

fn id(server: &Value) -> String {
    server["id"].as_str().unwrap_or_default().to_string()
}

fn created_at(server: &Value) -> Result<DateTime<Utc>> {
    let t = server["created_at"].as_str().context("created_at")?;
    Ok(DateTime::parse_from_rfc3339(t)?.with_timezone(&Utc))
}

async fn decisions(stack: &Stack, decision: &str, reason: &str) -> Result<f64> {
    scenario::provider_metric(
        stack,
        DECISIONS,
        &[("decision", decision), ("reason", reason)],
    )
    .await
}

async fn completed_passes(stack: &Stack) -> Result<f64> {
    scenario::provider_metric(stack, PASSES, &[("result", "completed")]).await
}

async fn deletes(stack: &Stack) -> Result<u64> {
    Ok(stack.emsim.counters().await?["endpoints"][DELETE]["total"]
        .as_u64()
        .unwrap_or(0))
}

/// The sweeper's Events (reasons `Orphan…`) that name server `sid`, in
/// their note or as the object they regard.
async fn sweeper_events_about(stack: &Stack, sid: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for reason in [
        "OrphanDeleted",
        "OrphanWouldDelete",
        "OrphanSpared",
        "OrphanRefused",
    ] {
        for e in scenario::provider_events(stack, reason).await? {
            let regards = e
                .regarding
                .as_ref()
                .and_then(|r| r.name.as_deref())
                .is_some_and(|n| n == sid);
            let note = e.note.clone().unwrap_or_default();
            if regards || note.contains(sid) {
                out.push(format!("{reason}: {note}"));
            }
        }
    }
    Ok(out)
}

/// How many times the provider recorded an Event with `reason` (a repeat
/// of the same note within ten minutes is counted on the first one's
/// series).
async fn count(stack: &Stack, reason: &str) -> Result<usize> {
    Ok(scenario::provider_events(stack, reason)
        .await?
        .iter()
        .map(occurrences)
        .sum())
}

fn occurrences(e: &k8s_openapi::api::events::v1::Event) -> usize {
    e.series.as_ref().map_or(1, |s| s.count.max(1) as usize)
}

/// The pool as emsim has it: standby servers of CLASS by id, with their
/// state.
async fn pool(stack: &Stack) -> Result<Vec<(String, &'static str)>> {
    let mut out: Vec<(String, &'static str)> = standby::standby_servers(stack, CLASS)
        .await?
        .iter()
        .map(|s| (id(s), standby::state(s).unwrap_or("?")))
        .collect();
    out.sort();
    Ok(out)
}

async fn run(stack: &mut Stack) -> Result<()> {
    let started = Instant::now();
    kubeutil::apply_yaml(
        &stack.client,
        &standby::nodeclass_yaml(
            stack,
            CLASS,
            "hourly",
            &[Pool {
                offer: OFFER,
                min: 2,
                max: 2,
                idle_hourly_keep: None,
            }],
        ),
    )
    .await?;
    // A true orphan: this cluster's tags and a NodeClaim that does not exist.
    let ghost = stack
        .emsim
        .user_create_server(
            stack::SECRET_KEY,
            stack::ZONE,
            OFFER,
            "ghost",
            stack::PROJECT_ID,
            &[
                format!("karpenter.scaleway.com/cluster={}", stack.opts.cluster_name),
                "karpenter.sh/nodeclaim=ghost".to_string(),
                format!("karpenter.scaleway.com/nodeclass={CLASS}"),
                format!("karpenter.sh/nodepool={NODEPOOL}"),
            ],
        )
        .await?;
    let ghost_id = id(&ghost);
    let ghost_created = created_at(&ghost)?;

    // 1. The pool's two servers, installed and idle.
    let idle = standby::wait_idle(stack, CLASS, 2, Duration::from_secs(150)).await?;
    let standby_ids: BTreeSet<String> = idle.iter().map(id).collect();
    println!(
        "[{:.0} s] standby servers {standby_ids:?} idle",
        started.elapsed().as_secs_f64()
    );

    // 2. The ghost goes after the grace; the standby servers, older than
    //    the grace, stay through several more passes, without an Event.
    wait::until(
        "the ghost server deleted by the sweeper",
        GRACE + SWEEP_INTERVAL * 10,
        Duration::from_millis(250),
        || async {
            let s = stack
                .emsim
                .servers_including_deleted()
                .await?
                .into_iter()
                .find(|s| s["id"] == ghost_id.as_str())
                .context("the ghost is unknown to emsim")?;
            Ok((!s["deleted_at"].is_null() || s["status"] == "deleting").then_some(s))
        },
    )
    .await?;
    // The sweeper records its Event after the deletion call returns: wait
    // for it rather than read once.
    let deleted_note = wait::until(
        "the sweeper's OrphanDeleted Event about the ghost",
        Duration::from_secs(10),
        Duration::from_millis(100),
        || async {
            let events = sweeper_events_about(stack, &ghost_id).await?;
            Ok(events.into_iter().find(|e| e.starts_with("OrphanDeleted")))
        },
    )
    .await?;
    let oldest_standby = idle
        .iter()
        .map(created_at)
        .collect::<Result<Vec<_>>>()?
        .into_iter()
        .max()
        .context("no standby server")?;
    let older_than_grace = oldest_standby + chrono::Duration::from_std(GRACE)?;
    wait::until(
        "both standby servers older than the grace",
        GRACE + Duration::from_secs(5),
        Duration::from_millis(250),
        || async { Ok((Utc::now() > older_than_grace).then_some(())) },
    )
    .await?;
    let spared_before = decisions(stack, "spared", "standby").await?;
    let from = completed_passes(stack).await?;
    let passes = 3.0;
    wait::until(
        "3 more completed sweeper passes",
        SWEEP_INTERVAL * 8 + Duration::from_secs(10),
        Duration::from_millis(250),
        || async { Ok((completed_passes(stack).await? >= from + passes).then_some(())) },
    )
    .await?;
    let spared = decisions(stack, "spared", "standby").await? - spared_before;
    ensure!(
        spared >= 2.0 * passes,
        "the sweeper spared the standby servers {spared} times over {passes} passes"
    );
    ensure!(
        pool(stack)
            .await?
            .iter()
            .map(|(s, _)| s.clone())
            .collect::<BTreeSet<_>>()
            == standby_ids,
        "the pool changed under the sweeper: {:?}",
        pool(stack).await?
    );
    for sid in &standby_ids {
        let about = sweeper_events_about(stack, sid).await?;
        ensure!(
            about.is_empty(),
            "the sweeper wrote Events about standby server {sid}: {about:?}"
        );
    }
    ensure!(
        decisions(stack, "deleted", "orphaned").await? == 1.0 && deletes(stack).await? == 1,
        "the sweeper deleted something besides the ghost"
    );
    println!(
        "[{:.0} s] ghost {ghost_id} deleted (created {ghost_created}); standby servers spared {spared} times in {passes} passes, no Event: {deleted_note}",
        started.elapsed().as_secs_f64()
    );

    // 3. The server list broken while core's collector runs.
    let list_failures_before =
        scenario::provider_metric(stack, "karpenter_scaleway_list_failures_total", &[]).await?;
    let faults = [
        (
            "missing page",
            json!({"kind": "list_missing_page", "endpoint": LIST}),
        ),
        (
            "total_count mismatch",
            json!({"kind": "list_total_count", "endpoint": LIST, "delta": -1}),
        ),
        (
            "503",
            json!({"kind": "http", "endpoint": LIST, "status": 503,
                "body": {"message": "service unavailable"}}),
        ),
    ];
    for (name, fault) in faults {
        let before = scenario::gc_passes(stack).await?;
        stack.emsim.add_fault(fault).await?;
        let armed = Instant::now();
        let during = wait::until(
            &format!("{FAILED_PASSES} failed collector passes under fault {name}"),
            Duration::from_secs(60),
            Duration::from_millis(250),
            || async {
                let now = scenario::gc_passes(stack).await?;
                let enough =
                    now.error - before.error >= FAILED_PASSES && armed.elapsed() >= GC_PERIOD * 3;
                Ok(enough.then_some(now))
            },
        )
        .await?;
        let fired: Vec<u64> = stack
            .emsim
            .faults()
            .await?
            .iter()
            .map(|f| f["fired"].as_u64().unwrap_or(0))
            .collect();
        // Checked while the fault still holds.
        check_untouched(stack, &standby_ids).await?;
        stack.emsim.clear_faults().await?;
        ensure!(
            fired.iter().all(|n| *n > 0),
            "fault {name} did not act on the List calls (fired {fired:?})"
        );
        ensure!(
            during.success - before.success <= 1.0,
            "{} collector passes succeeded under fault {name}",
            during.success - before.success
        );
        scenario::wait_gc_success(stack, scenario::gc_passes(stack).await?, GC_PERIOD * 6)
            .await
            .with_context(|| format!("the collector recovering after fault {name}"))?;
        check_untouched(stack, &standby_ids).await?;
        println!(
            "[{:.0} s] fault {name}: held {:.1} s, collector passes failed {}, emsim fired {fired:?}; standby untouched",
            started.elapsed().as_secs_f64(),
            armed.elapsed().as_secs_f64(),
            during.error - before.error
        );
    }
    let list_failures =
        scenario::provider_metric(stack, "karpenter_scaleway_list_failures_total", &[]).await?;
    ensure!(
        list_failures >= list_failures_before + 3.0 * FAILED_PASSES,
        "the provider counted {} failed Lists",
        list_failures - list_failures_before
    );

    // 4. The pool is unchanged and still serves: a reserved pod adopts one.
    let now = pool(stack).await?;
    ensure!(
        now.iter().map(|(s, _)| s.clone()).collect::<BTreeSet<_>>() == standby_ids
            && now.iter().all(|(_, state)| *state == "idle"),
        "the pool after the faults: {now:?}, was {standby_ids:?} idle"
    );
    kubeutil::apply_yaml(
        &stack.client,
        &standby::reserved_nodepool_yaml(NODEPOOL, CLASS, 50, &[OFFER]),
    )
    .await?;
    kubeutil::apply_yaml(
        &stack.client,
        &scenario::inflate_yaml_on(APP, 1, "1", &[("karpenter.sh/nodepool", NODEPOOL)], false),
    )
    .await?;
    scenario::wait_pods_running(stack, APP, 1, Duration::from_secs(90)).await?;
    let claims = scenario::nodeclaim_objects(stack).await?;
    ensure!(
        claims.len() == 1,
        "expected one NodeClaim, got {}",
        claims.len()
    );
    let claim = &claims[0];
    ensure!(
        claim
            .labels()
            .get("karpenter.sh/capacity-type")
            .map(String::as_str)
            == Some("reserved"),
        "NodeClaim {} is not reserved: {:?}",
        claim.name_any(),
        claim.labels()
    );
    let adopted = scenario::claim_server_id(claim).context("no providerID")?;
    ensure!(
        standby_ids.contains(&adopted),
        "NodeClaim {} runs on {adopted}, not on a standby server {standby_ids:?}",
        claim.name_any()
    );
    println!(
        "[{:.0} s] NodeClaim {} adopted {adopted}",
        started.elapsed().as_secs_f64(),
        claim.name_any()
    );

    // The Events tell the same story: two standby servers ordered and
    // installed (a third, the refill, may be on its way), one adopted, one
    // orphan deleted.
    let ordered = count(stack, "StandbyOrdered").await?;
    ensure!(
        (2..=3).contains(&ordered),
        "{ordered} StandbyOrdered Events"
    );
    ensure!(
        count(stack, "StandbyReady").await? >= 2,
        "fewer than 2 StandbyReady Events"
    );
    ensure!(
        count(stack, "StandbyAdopted").await? == 1,
        "StandbyAdopted Events"
    );
    ensure!(
        count(stack, "OrphanDeleted").await? == 1,
        "OrphanDeleted Events"
    );
    for reason in [
        "StandbyReleased",
        "StandbyInstallFailed",
        "StandbyOrderFailed",
        "StandbyRecycled",
    ] {
        let n = count(stack, reason).await?;
        ensure!(n == 0, "{n} {reason} Events");
    }
    ensure!(
        deletes(stack).await? == 1,
        "servers deleted besides the ghost"
    );
    println!("total {:.0} s", started.elapsed().as_secs_f64());
    stack.assert_no_secrets_in_logs()
}

/// No standby server deleted, re-ordered or turned into a NodeClaim.
async fn check_untouched(stack: &Stack, standby_ids: &BTreeSet<String>) -> Result<()> {
    let now = pool(stack).await?;
    ensure!(
        now.iter().map(|(s, _)| s.clone()).collect::<BTreeSet<_>>() == *standby_ids,
        "the pool changed: {now:?}, was {standby_ids:?}"
    );
    let claims = scenario::nodeclaims(stack).await?;
    ensure!(claims.is_empty(), "NodeClaims appeared: {claims:?}");
    ensure!(
        deletes(stack).await? == 1,
        "a server was deleted besides the ghost"
    );
    let orders = scenario::orders_placed(stack).await?;
    // The ghost's order and the pool's two.
    ensure!(orders == 3, "{orders} orders: the pool ordered again");
    Ok(())
}
