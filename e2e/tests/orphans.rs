//! Issue 5, the orphan sweeper: servers tagged for this cluster that no
//! NodeClaim claims are deleted only after the grace, never when ownership
//! cannot be proven, never while an install for them is in flight, and not
//! at all in dry-run mode; every decision is an Event and a metric.
//!
//! The sweeper computes a server's age from its `created_at` against the
//! wall clock, as it must against the real API, so these stacks run emsim at
//! time scale 1 (simulated time = real time). The grace is 20 s and a pass
//! runs every 3 s (`--orphan-grace`, `--sweep-interval`).

use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use chrono::{DateTime, Utc};
use e2e::progress::ClaimWatch;
use e2e::scenario;
use e2e::sims::EmsimEvent;
use e2e::stack::{self, Stack, StackOptions};
use e2e::{kubeutil, wait};
use k8s_openapi::api::events::v1::Event;
use serde_json::{Value, json};

const GRACE: Duration = Duration::from_secs(20);
const SWEEP_INTERVAL: Duration = Duration::from_secs(3);
const OFFER: &str = "EM-A115X-SSD";
const DECISIONS: &str = "karpenter_scaleway_sweeper_decisions_total";
const PASSES: &str = "karpenter_scaleway_sweeper_passes_total";
const DELETE: &str = "DELETE /baremetal/v1/zones/{zone}/servers/{server_id}";
/// A project of the same organization that is not the provider's.
const OTHER_PROJECT: &str = "7c1f0d7e-2a4b-4c8e-9f3a-6b5d4e3c2a10";
/// Simulated (= real here) delivery of the install held in flight: longer
/// than the grace, so the sweeper sees it unclaimed-looking-old for passes.
const SLOW_DELIVERY_S: f64 = 45.0;

fn options(name: &str, dry_run: bool) -> Result<StackOptions> {
    let mut opts = StackOptions::for_test(name)?;
    opts.time_scale = 1.0;
    opts.provider_args = vec![
        "--orphan-grace".into(),
        format!("{}s", GRACE.as_secs()),
        "--sweep-interval".into(),
        format!("{}s", SWEEP_INTERVAL.as_secs()),
    ];
    if dry_run {
        opts.provider_args.push("--sweep-dry-run".into());
    }
    Ok(opts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn orphans_deleted_after_grace_foreign_and_in_flight_untouched() -> Result<()> {
    scenario::with_stack(options("orphans", false)?, run).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn orphans_dry_run_reports_and_deletes_nothing() -> Result<()> {
    scenario::with_stack(options("orphans-dry-run", true)?, run_dry).await
}

fn tags(pairs: &[(&str, &str)]) -> Vec<String> {
    pairs.iter().map(|(k, v)| format!("{k}={v}")).collect()
}

/// The tags the provider puts on the servers it orders, for NodeClaim
/// `claim` of this stack's cluster.
fn our_tags(stack: &Stack, claim: &str) -> Vec<String> {
    tags(&[
        ("karpenter.scaleway.com/cluster", &stack.opts.cluster_name),
        ("karpenter.sh/nodeclaim", claim),
        ("karpenter.scaleway.com/nodeclass", "default"),
        ("karpenter.sh/nodepool", "default"),
    ])
}

async fn create(stack: &Stack, name: &str, project: &str, tags: Vec<String>) -> Result<Value> {
    stack
        .emsim
        .user_create_server(stack::SECRET_KEY, stack::ZONE, OFFER, name, project, &tags)
        .await
        .with_context(|| format!("creating {name} behind the provider's back"))
}

fn id(server: &Value) -> String {
    server["id"].as_str().unwrap_or_default().to_string()
}

fn created_at(server: &Value) -> Result<DateTime<Utc>> {
    let t = server["created_at"].as_str().context("created_at")?;
    Ok(DateTime::parse_from_rfc3339(t)?.with_timezone(&Utc))
}

/// The server as emsim has it now (deleted ones included).
async fn server_now(stack: &Stack, id: &str) -> Result<Value> {
    stack
        .emsim
        .servers_including_deleted()
        .await?
        .into_iter()
        .find(|s| s["id"] == id)
        .with_context(|| format!("server {id} unknown to emsim"))
}

/// Alive: not deleted, not being deleted.
async fn alive(stack: &Stack, id: &str) -> Result<bool> {
    let s = server_now(stack, id).await?;
    Ok(s["deleted_at"].is_null() && s["status"] != "deleting")
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

/// Waits for `n` more completed sweeper passes.
async fn wait_passes(stack: &Stack, n: f64) -> Result<()> {
    let from = completed_passes(stack).await?;
    wait::until(
        &format!("{n} more completed sweeper passes"),
        SWEEP_INTERVAL * (n as u32 + 5) + Duration::from_secs(10),
        Duration::from_millis(250),
        || async { Ok((completed_passes(stack).await? >= from + n).then_some(())) },
    )
    .await
}

/// The provider's Events with `reason` whose note names server `id`.
async fn events_about(stack: &Stack, reason: &str, id: &str) -> Result<Vec<Event>> {
    Ok(scenario::provider_events(stack, reason)
        .await?
        .into_iter()
        .filter(|e| e.note.as_deref().is_some_and(|n| n.contains(id)))
        .collect())
}

fn regarding(e: &Event) -> (String, String) {
    let r = e.regarding.clone().unwrap_or_default();
    (r.kind.unwrap_or_default(), r.name.unwrap_or_default())
}

/// The simulated time of the first `kind` event of server `id`.
fn first_event(events: &[EmsimEvent], kind: &str, id: &str) -> Option<DateTime<Utc>> {
    events
        .iter()
        .filter(|e| e.kind == kind && e.server_id == id)
        .map(|e| e.at)
        .min()
}

async fn run(stack: &mut Stack) -> Result<()> {
    let started = Instant::now();
    stack.create_nodeclass("default").await?;
    kubeutil::apply_yaml(
        &stack.client,
        &Stack::nodepool_yaml(
            "default",
            "default",
            &scenario::instance_types_requirement(&[OFFER]),
        ),
    )
    .await?;
    let (emsim_events, follower) = stack.emsim.follow_events();
    let watch = ClaimWatch::start(&stack.client);
    let cluster = stack.opts.cluster_name.clone();

    // (a) Ours in every respect but that no NodeClaim "ghost" exists.
    let ghost = create(stack, "ghost", stack::PROJECT_ID, our_tags(stack, "ghost")).await?;
    // (b) Not provably ours: no tags; another cluster's; our cluster tag in
    // another project; our cluster tag without a nodeclaim tag.
    let untagged = create(
        stack,
        "someone-elses",
        stack::PROJECT_ID,
        tags(&[("team", "data")]),
    )
    .await?;
    let other_cluster = create(
        stack,
        "other-cluster",
        stack::PROJECT_ID,
        tags(&[
            ("karpenter.scaleway.com/cluster", "another-cluster"),
            ("karpenter.sh/nodeclaim", "ghost"),
            ("karpenter.scaleway.com/nodeclass", "default"),
        ]),
    )
    .await?;
    let other_project = create(
        stack,
        "other-project",
        OTHER_PROJECT,
        our_tags(stack, "ghost"),
    )
    .await?;
    let unproven = create(
        stack,
        "no-nodeclaim-tag",
        stack::PROJECT_ID,
        tags(&[("karpenter.scaleway.com/cluster", &cluster)]),
    )
    .await?;
    let foreign = [&untagged, &other_cluster, &other_project];
    let ghost_id = id(&ghost);
    let ghost_created = created_at(&ghost)?;

    // (c) An install held in flight longer than the grace.
    stack
        .emsim
        .add_fault(json!({"kind": "delivery_seconds", "seconds": SLOW_DELIVERY_S, "count": 1}))
        .await?;
    kubeutil::apply_yaml(&stack.client, &scenario::inflate_yaml("slow", 1, "1")).await?;

    // (a) The ghost goes, after the grace.
    wait::until(
        "the ghost server deleted by the sweeper",
        GRACE + SWEEP_INTERVAL * 10 + Duration::from_secs(20),
        Duration::from_millis(250),
        || async { Ok((!alive(stack, &ghost_id).await?).then_some(())) },
    )
    .await?;
    let deleted_at = wait::until(
        "emsim's power_off event of the ghost (its deletion call)",
        Duration::from_secs(10),
        Duration::from_millis(100),
        || async {
            let events = emsim_events
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .clone();
            Ok(first_event(&events, "power_off", &ghost_id))
        },
    )
    .await?;
    let age_at_deletion = (deleted_at - ghost_created).to_std().unwrap_or_default();
    ensure!(
        age_at_deletion >= GRACE,
        "the ghost was deleted {:.1} s after its creation, within the {} s grace",
        age_at_deletion.as_secs_f64(),
        GRACE.as_secs()
    );
    ensure!(
        decisions(stack, "spared", "within_grace").await? >= 1.0,
        "no spared/within_grace decision: the sweeper never saw the ghost young"
    );
    // The sweeper records its Event after the deletion call returns: wait
    // for it rather than read once.
    let deleted_event = wait::until(
        "the sweeper's OrphanDeleted Event about the ghost",
        Duration::from_secs(10),
        Duration::from_millis(100),
        || async {
            let events = events_about(stack, "OrphanDeleted", &ghost_id).await?;
            Ok(events.into_iter().next())
        },
    )
    .await?;
    let e = &deleted_event;
    ensure!(
        e.type_.as_deref() == Some("Warning"),
        "OrphanDeleted is {:?}",
        e.type_
    );
    ensure!(
        regarding(e)
            == (
                "ScalewayElasticMetalNodeClass".to_string(),
                "default".to_string()
            ),
        "OrphanDeleted regards {:?}, not the ghost's NodeClass",
        regarding(e)
    );
    let spared_young = events_about(stack, "OrphanSpared", &ghost_id).await?;
    ensure!(
        spared_young.iter().any(|e| e
            .note
            .as_deref()
            .is_some_and(|n| n.contains("within_grace"))),
        "no OrphanSpared (within_grace) Event for the ghost: {spared_young:?}"
    );
    println!(
        "(a) ghost {ghost_id} deleted {:.1} s after creation (grace {} s); Event: {}",
        age_at_deletion.as_secs_f64(),
        GRACE.as_secs(),
        e.note.clone().unwrap_or_default()
    );

    // (c) The slow install completes, its server never swept.
    scenario::wait_pods_running(stack, "slow", 1, Duration::from_secs(240)).await?;
    let claims = watch.snapshot();
    ensure!(claims.len() == 1, "NodeClaims {:?}", claims.keys());
    let claim = claims.values().next().expect("one claim");
    let slow_id = claim
        .server_id()
        .context("the slow NodeClaim has no providerID")?;
    let slow = server_now(stack, &slow_id).await?;
    let slow_created = created_at(&slow)?;
    let delivered = {
        let events = emsim_events
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone();
        first_event(&events, "power_on", &slow_id).context("no power_on of the slow server")?
    };
    let in_flight_for = (delivered - slow_created).to_std().unwrap_or_default();
    ensure!(
        in_flight_for > GRACE + SWEEP_INTERVAL,
        "the slow server was delivered {:.1} s after its order: not in flight past the grace",
        in_flight_for.as_secs_f64()
    );
    ensure!(
        alive(stack, &slow_id).await? && !claim.deleting,
        "the in-flight server or its NodeClaim was deleted"
    );
    let spared_in_flight = events_about(stack, "OrphanSpared", &slow_id).await?;
    ensure!(
        decisions(stack, "spared", "in_flight").await? >= 1.0
            && spared_in_flight
                .iter()
                .any(|e| e.note.as_deref().is_some_and(|n| n.contains("in_flight"))),
        "no spared/in_flight decision (metric and Event) for the slow install {slow_id}: {spared_in_flight:?}"
    );
    println!(
        "(c) slow install {} (server {slow_id}) in delivery {:.1} s (> grace), spared in flight, joined",
        claim.name,
        in_flight_for.as_secs_f64()
    );

    // (b) A few more passes with the node joined: still nothing else goes.
    wait_passes(stack, 3.0).await?;
    ensure!(
        decisions(stack, "spared", "claimed").await? >= 1.0,
        "the joined node's server was never spared as claimed"
    );
    for s in foreign.iter().chain([&&unproven]) {
        ensure!(
            alive(stack, &id(s)).await?,
            "server {} ({}) was deleted",
            id(s),
            s["name"]
        );
    }
    for s in foreign {
        for reason in [
            "OrphanDeleted",
            "OrphanWouldDelete",
            "OrphanSpared",
            "OrphanRefused",
        ] {
            let about = events_about(stack, reason, &id(s)).await?;
            ensure!(
                about.is_empty(),
                "the sweeper took a decision ({reason}) about {} ({}), which is not this cluster's: {about:?}",
                id(s),
                s["name"]
            );
        }
    }
    let refused = events_about(stack, "OrphanRefused", &id(&unproven)).await?;
    let r = refused
        .first()
        .context("no OrphanRefused Event for the server without a nodeclaim tag")?;
    ensure!(
        r.note
            .as_deref()
            .is_some_and(|n| n.contains("ownership_unproven")),
        "OrphanRefused note {:?}",
        r.note
    );
    ensure!(
        regarding(r) == ("Server".to_string(), id(&unproven)),
        "OrphanRefused regards {:?}, not the server",
        regarding(r)
    );
    ensure!(
        decisions(stack, "refused", "ownership_unproven").await? >= 1.0,
        "no refused/ownership_unproven in the metrics"
    );
    let deleted = decisions(stack, "deleted", "orphaned").await?;
    ensure!(
        deleted == 1.0,
        "{deleted} orphaned deletions, expected the ghost only"
    );
    let deletes = stack.emsim.counters().await?["endpoints"][DELETE]["total"]
        .as_u64()
        .unwrap_or(0);
    ensure!(
        deletes == 1,
        "{deletes} DELETE calls on servers, expected the ghost's only"
    );
    println!(
        "(b) after {:.0} s: untagged, other cluster, other project never decided on; \
         no-nodeclaim-tag refused ({}); one DELETE in all",
        started.elapsed().as_secs_f64(),
        r.note.clone().unwrap_or_default()
    );

    // Clean up what is not ours, then everything of ours must go.
    for s in foreign.iter().chain([&&unproven]) {
        stack
            .emsim
            .user_delete_server(stack::SECRET_KEY, stack::ZONE, &id(s))
            .await?;
    }
    follower.abort();
    scenario::scale_to_zero_and_check_clean(stack, &["slow"], Duration::from_secs(180)).await
}

async fn run_dry(stack: &mut Stack) -> Result<()> {
    stack.create_nodeclass("default").await?;
    let ghost = create(stack, "ghost", stack::PROJECT_ID, our_tags(stack, "ghost")).await?;
    let ghost_id = id(&ghost);
    let ghost_created = created_at(&ghost)?;
    let first = wait::until(
        "an OrphanWouldDelete Event for the ghost",
        GRACE + SWEEP_INTERVAL * 10 + Duration::from_secs(20),
        Duration::from_millis(250),
        || async {
            Ok(events_about(stack, "OrphanWouldDelete", &ghost_id)
                .await?
                .into_iter()
                .next())
        },
    )
    .await?;
    ensure!(
        first.type_.as_deref() == Some("Warning"),
        "type {:?}",
        first.type_
    );
    if let Some(at) = first
        .event_time
        .as_ref()
        .and_then(|t| DateTime::from_timestamp(t.0.as_second(), t.0.subsec_nanosecond() as u32))
    {
        let age = (at - ghost_created).to_std().unwrap_or_default();
        ensure!(
            age >= GRACE,
            "would-delete decided {:.1} s after creation, within the grace",
            age.as_secs_f64()
        );
    }
    // Several more passes: reported each time, deleted never.
    wait_passes(stack, 4.0).await?;
    let would = decisions(stack, "would_delete", "orphaned").await?;
    ensure!(
        would >= 2.0,
        "would_delete/orphaned counted {would} times over 5+ passes"
    );
    ensure!(
        decisions(stack, "deleted", "orphaned").await? == 0.0,
        "a deletion was counted in dry-run"
    );
    let server = server_now(stack, &ghost_id).await?;
    ensure!(
        server["deleted_at"].is_null() && server["status"] == "ready",
        "the ghost is {} in dry-run",
        server["status"]
    );
    let deletes = stack.emsim.counters().await?["endpoints"][DELETE]["total"]
        .as_u64()
        .unwrap_or(0);
    ensure!(deletes == 0, "{deletes} DELETE calls in dry-run");
    ensure!(
        events_about(stack, "OrphanDeleted", &ghost_id)
            .await?
            .is_empty(),
        "an OrphanDeleted Event in dry-run"
    );
    println!(
        "dry-run: ghost {ghost_id} reported {would} times as would_delete, still {}; Event: {}",
        server["status"],
        first.note.clone().unwrap_or_default()
    );
    stack
        .emsim
        .user_delete_server(stack::SECRET_KEY, stack::ZONE, &ghost_id)
        .await?;
    Ok(())
}
