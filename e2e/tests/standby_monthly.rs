//! Issue 13: monthly recycling. A NodeClass billed monthly keeps one standby
//! server (min 1, max 1), ordered with the offer's monthly twin. A pod
//! adopts it and the pool orders a monthly refill; when the node goes, its
//! server is never deleted (its month is paid) but wiped back to standby
//! (rescue + dd again) and adopted again by the next pod, which counts as a
//! saving; recycled a second time, the pool holds two idle servers for
//! min 1, and the excess one is released just before the end of its paid
//! month, never earlier, while the kept one outlives its own month's end.
//! Without its NodeClass the last one is released at its month's end too.
//!
//! Adoption takes the oldest idle server first, so the refill's delivery is
//! held long (an emsim `delivery_seconds` fault) for the recycled server to
//! be the only idle one when the second pod comes; the refill then joins
//! the pool as its second idle server.
//!
//! emsim runs at time scale 0.01 (a simulated hour lasts 36 s) and the
//! provider counts paid periods on the API's clock, so `--billing-month=4h`
//! makes a month last 144 real seconds. An idle server above min (one of
//! the pool's two) is released at the end of any month it is idle at, so
//! the month must outlast both recyclings and the second adoption (about
//! 75 s): the first month end of either server then finds both idle.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use chrono::{DateTime, Utc};
use serde_json::{Value, json};

use e2e::stack::{self, Stack, StackOptions};
use e2e::standby::{self, Pool};
use e2e::{kubeutil, scenario, wait};

const OFFER: &str = "EM-A115X-SSD";
const CLASS: &str = "monthly";
const NODEPOOL: &str = "reserved";
const FIRST: &str = "first";
const SECOND: &str = "second";
/// `--billing-month`, in simulated seconds.
const MONTH_S: i64 = 4 * 3600;
/// `--standby-release-margin`, in simulated seconds: 9 s real, room for
/// the provider's view of the API clock to lag (see standby.rs).
const MARGIN_S: i64 = 900;
/// The refill's delivery in simulated seconds (80 s real): longer than the
/// first node's life, its recycling and the second adoption (about 40 s),
/// and over well before the first month ends (144 s).
const REFILL_DELIVERY_S: f64 = 8000.0;
const TIME_SCALE: f64 = 0.01;
/// Simulated seconds between the first standby server's order and its
/// refill's, at least (15 s real).
const SPREAD_S: i64 = 1500;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn standby_monthly_recycled_never_deleted_and_released_at_the_paid_month() -> Result<()> {
    let mut opts = StackOptions::for_test("standby-monthly")?;
    // MONTH_S and REFILL_DELIVERY_S are sized for this scale.
    opts.time_scale = TIME_SCALE;
    opts.provider_args.extend([
        format!("--billing-month={MONTH_S}s"),
        "--standby-interval=500ms".to_string(),
        format!("--standby-release-margin={MARGIN_S}s"),
    ]);
    scenario::with_stack(opts, run).await
}

fn time(v: &Value) -> Result<DateTime<Utc>> {
    let s = v.as_str().with_context(|| format!("not a time: {v}"))?;
    Ok(DateTime::parse_from_rfc3339(s)?.with_timezone(&Utc))
}

fn id(server: &Value) -> String {
    server["id"].as_str().unwrap_or_default().to_string()
}

/// A month in real time at this scale.
fn month_real() -> Duration {
    Duration::from_secs_f64(MONTH_S as f64 * TIME_SCALE)
}

/// The server as emsim has it now, deleted ones included.
async fn record(stack: &Stack, id: &str) -> Result<Value> {
    stack
        .emsim
        .servers_including_deleted()
        .await?
        .into_iter()
        .find(|s| s["id"] == id)
        .with_context(|| format!("server {id} unknown to emsim"))
}

fn is_deleted(s: &Value) -> bool {
    !s["deleted_at"].is_null() || s["status"] == "deleting"
}

/// The offer ids of OFFER in the stack's zone: (hourly, its monthly twin),
/// from the public API as any client reads them.
async fn offer_ids(stack: &Stack) -> Result<(String, String)> {
    let offers: Value = reqwest::Client::new()
        .get(format!(
            "{}/baremetal/v1/zones/{}/offers",
            stack.emsim_url(),
            stack::ZONE
        ))
        .query(&[("name", OFFER)])
        .header("X-Auth-Token", stack::SECRET_KEY)
        .send()
        .await?
        .error_for_status()?
        .json()
        .await?;
    // The hourly offer names its monthly twin.
    let hourly = offers["offers"]
        .as_array()
        .into_iter()
        .flatten()
        .find(|o| o["name"] == OFFER && o["subscription_period"] == "hourly")
        .with_context(|| format!("no hourly offer {OFFER}: {offers}"))?;
    let of = |key: &str| {
        hourly[key]
            .as_str()
            .map(str::to_string)
            .with_context(|| format!("no {key} in offer {OFFER}: {hourly}"))
    };
    Ok((of("id")?, of("monthly_offer_id")?))
}

/// Checks that a standby server was ordered monthly: the monthly twin's
/// offer id, the billing tag, and a `StandbyOrdered` Event saying so.
async fn check_ordered_monthly(stack: &Stack, server: &Value, monthly_id: &str) -> Result<()> {
    let sid = id(server);
    ensure!(
        server["offer_id"] == monthly_id,
        "standby server {sid} ordered with offer {} (offer name {}), not the monthly {monthly_id}",
        server["offer_id"],
        server["offer_name"]
    );
    for (key, want) in [
        ("karpenter.scaleway.com/billing", "monthly"),
        ("karpenter.scaleway.com/standby", CLASS),
        ("karpenter.scaleway.com/nodeclass", CLASS),
        ("karpenter.scaleway.com/cluster", "e2e"),
    ] {
        ensure!(
            standby::tag(server, key).as_deref() == Some(want),
            "standby server {sid}: tag {key} should be {want}: {}",
            server["tags"]
        );
    }
    let ordered = events_naming(stack, "StandbyOrdered", &sid, 1).await?;
    ensure!(
        ordered.len() == 1 && ordered[0].contains("billed monthly"),
        "expected one StandbyOrdered Event (billed monthly) for {sid}: {ordered:?}"
    );
    Ok(())
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

/// Notes of the provider's Events with `reason` that name `id`, once per
/// occurrence.
fn naming(events: &[k8s_openapi::api::events::v1::Event], id: &str) -> Vec<String> {
    events
        .iter()
        .filter(|e| e.note.as_deref().is_some_and(|n| n.contains(id)))
        .flat_map(|e| vec![e.note.clone().unwrap_or_default(); occurrences(e)])
        .collect()
}

/// [`naming`], once there are at least `n` (waited for: the provider
/// records an Event after the API call it reports; then the exact count is
/// the caller's to check).
async fn events_naming(stack: &Stack, reason: &str, id: &str, n: usize) -> Result<Vec<String>> {
    let events = scenario::wait_provider_events(stack, reason, |e| naming(e, id).len() >= n)
        .await
        .with_context(|| format!("fewer than {n} {reason} Event(s) naming {id}"))?;
    Ok(naming(&events, id))
}

/// Where in its paid month (simulated seconds since the month began) a
/// deleted server was deleted; fails unless that is within the release
/// margin before the month's end.
fn check_released_at_month_end(server: &Value) -> Result<i64> {
    let created = time(&server["created_at"])?;
    let deleted = time(&server["deleted_at"])?;
    let into_month = (deleted - created).num_seconds() % MONTH_S;
    println!(
        "server {} deleted {into_month} s into its paid month of {MONTH_S} s (margin {MARGIN_S} s), {} s after its order",
        id(server),
        (deleted - created).num_seconds()
    );
    // The DELETE call comes at or after `end - margin` (emsim writes
    // `deleted_at` 5 simulated s later), well before the end: a deletion after
    // the end shows as the start of the next month.
    ensure!(
        into_month >= MONTH_S / 2,
        "server {} deleted {into_month} s into a new paid month: after its month ended",
        id(server)
    );
    ensure!(
        into_month >= MONTH_S - MARGIN_S,
        "server {} deleted {into_month} s into its paid month: before the release margin ({MARGIN_S} s before the end)",
        id(server)
    );
    Ok(into_month)
}

/// The single reserved NodeClaim (by name) and the server it runs on.
async fn reserved_claim(stack: &Stack) -> Result<(String, String)> {
    use kube::ResourceExt;
    let claims = scenario::nodeclaim_objects(stack).await?;
    ensure!(
        claims.len() == 1,
        "expected one NodeClaim, got {:?}",
        claims.iter().map(|c| c.name_any()).collect::<Vec<_>>()
    );
    let claim = &claims[0];
    let labels = claim.labels();
    ensure!(
        labels.get("karpenter.sh/capacity-type").map(String::as_str) == Some("reserved"),
        "NodeClaim {} is not in reserved capacity: {labels:?}",
        claim.name_any()
    );
    let server = scenario::claim_server_id(claim).context("NodeClaim without a providerID")?;
    Ok((claim.name_any(), server))
}

/// Waits until server `sid` is an idle standby server again after a
/// recycling, checks it was written again from a rescue boot, and returns
/// its record.
async fn wait_recycled_idle(stack: &Stack, sid: &str, boots_before: usize) -> Result<Value> {
    let server = wait::until(
        &format!("server {sid} recycled and idle in the pool again"),
        Duration::from_secs(120),
        Duration::from_millis(250),
        || async {
            let s = record(stack, sid).await?;
            if is_deleted(&s) {
                return Ok(Some(Err(anyhow::anyhow!(
                    "server {sid} was deleted instead of recycled: it is paid until its month ends"
                ))));
            }
            Ok((standby::state(&s) == Some("idle")).then_some(Ok(s)))
        },
    )
    .await??;
    ensure!(
        standby::tag(&server, "karpenter.scaleway.com/recycled").as_deref() == Some("true"),
        "recycled tag: {}",
        server["tags"]
    );
    let boots = standby::boots(&server)?;
    ensure!(
        boots.len() >= boots_before + 2
            && boots[boots_before..].first().map(String::as_str) == Some("rescue"),
        "server {sid} was not written again from rescue: {boots:?} (before: {boots_before} boots)"
    );
    Ok(server)
}

async fn run(stack: &mut Stack) -> Result<()> {
    let started = std::time::Instant::now();
    let (hourly_id, monthly_id) = offer_ids(stack).await?;
    ensure!(hourly_id != monthly_id, "one offer id for both billings");
    kubeutil::apply_yaml(
        &stack.client,
        &standby::nodeclass_yaml(
            stack,
            CLASS,
            "monthly",
            &[Pool {
                offer: OFFER,
                min: 1,
                max: 1,
                idle_hourly_keep: None,
            }],
        ),
    )
    .await?;

    // 1. One standby server, ordered with the monthly offer.
    let s1 = standby::wait_idle(stack, CLASS, 1, Duration::from_secs(120)).await?[0].clone();
    let s1_id = id(&s1);
    check_ordered_monthly(stack, &s1, &monthly_id).await?;
    let boots_idle = standby::boots(&s1)?.len();
    println!(
        "[{:.0} s] standby server {s1_id} idle, ordered monthly (offer {monthly_id})",
        started.elapsed().as_secs_f64()
    );

    // The refill is ordered when the pod adopts S1. Their paid months are
    // spread apart (S1 at least SPREAD_S old first), so that the kept
    // server's month end comes well after the NodeClass is deleted (step 8)
    // and a release at once would show.
    let s1_created = time(&s1["created_at"])?;
    wait::until(
        "the first standby server old enough to spread the months apart",
        Duration::from_secs_f64(SPREAD_S as f64 * TIME_SCALE) + Duration::from_secs(10),
        Duration::from_millis(250),
        || async {
            let (now, _) = stack.emsim.clock().await?;
            Ok(((now - s1_created).num_seconds() >= SPREAD_S).then_some(()))
        },
    )
    .await?;

    // The next order (the refill) is delivered slowly.
    stack
        .emsim
        .add_fault(
            json!({"kind": "delivery_seconds", "seconds": REFILL_DELIVERY_S,
            "offer": OFFER, "count": 1}),
        )
        .await?;

    // 2. A pod of a reserved-only NodePool adopts it.
    kubeutil::apply_yaml(
        &stack.client,
        &standby::reserved_nodepool_yaml(NODEPOOL, CLASS, 50, &[OFFER]),
    )
    .await?;
    let on_pool = [("karpenter.sh/nodepool", NODEPOOL)];
    kubeutil::apply_yaml(
        &stack.client,
        &scenario::inflate_yaml_on(FIRST, 1, "1", &on_pool, false),
    )
    .await?;
    scenario::wait_pods_running(stack, FIRST, 1, Duration::from_secs(120)).await?;
    let (claim1, server) = reserved_claim(stack).await?;
    ensure!(
        server == s1_id,
        "NodeClaim {claim1} runs on {server}, not on standby server {s1_id}"
    );
    println!(
        "[{:.0} s] NodeClaim {claim1} adopted {s1_id}",
        started.elapsed().as_secs_f64()
    );

    // 3. The pool orders a refill (min 1), monthly too.
    let s2 = wait::until(
        "the pool's refill ordered",
        Duration::from_secs(60),
        Duration::from_millis(250),
        || async {
            Ok(standby::standby_servers(stack, CLASS)
                .await?
                .into_iter()
                .find(|s| s["id"] != s1_id.as_str()))
        },
    )
    .await?;
    let s2_id = id(&s2);
    check_ordered_monthly(stack, &s2, &monthly_id).await?;
    ensure!(
        standby::state(&s2) == Some("installing"),
        "the refill {s2_id} is {:?}, not installing",
        standby::state(&s2)
    );

    // 4. The node goes: its server is recycled, never deleted.
    scenario::scale(stack, FIRST, 0).await?;
    standby::wait_nodes_gone(stack, Duration::from_secs(120)).await?;
    let s1_back = wait_recycled_idle(stack, &s1_id, boots_idle).await?;
    let boots_recycled = standby::boots(&s1_back)?.len();
    ensure!(
        events_naming(stack, "StandbyRecycled", &s1_id, 1)
            .await?
            .len()
            == 1,
        "no StandbyRecycled Event for {s1_id}"
    );
    println!(
        "[{:.0} s] {s1_id} recycled and idle again (boots {:?})",
        started.elapsed().as_secs_f64(),
        standby::boots(&s1_back)?
    );

    // 5. The next pod adopts the same server: the refill is still being
    //    delivered, so it is the only idle one.
    let refill = record(stack, &s2_id).await?;
    ensure!(
        standby::state(&refill) == Some("installing"),
        "the refill {s2_id} is {:?} already (status {}): the recycled server would not be the only idle one; raise REFILL_DELIVERY_S",
        standby::state(&refill),
        refill["status"]
    );
    kubeutil::apply_yaml(
        &stack.client,
        &scenario::inflate_yaml_on(SECOND, 1, "1", &on_pool, false),
    )
    .await?;
    scenario::wait_pods_running(stack, SECOND, 1, Duration::from_secs(120)).await?;
    let (claim2, server) = reserved_claim(stack).await?;
    ensure!(
        server == s1_id,
        "NodeClaim {claim2} runs on {server}, not on the recycled server {s1_id}"
    );
    let saved = scenario::provider_metric(
        stack,
        "karpenter_scaleway_standby_savings_euros_total",
        &[("nodeclass", CLASS)],
    )
    .await?;
    ensure!(
        saved > 0.0,
        "adopting a recycled monthly server saved {saved} EUR"
    );
    // The pool counts the refill still installing: no third order.
    ensure!(
        standby::standby_servers(stack, CLASS).await?.len() == 1,
        "the pool ordered again while its refill is installing"
    );
    println!(
        "[{:.0} s] NodeClaim {claim2} adopted the recycled {s1_id}; savings {saved} EUR",
        started.elapsed().as_secs_f64()
    );

    // 6. Recycled again, above max: a monthly server always is.
    scenario::scale(stack, SECOND, 0).await?;
    standby::wait_nodes_gone(stack, Duration::from_secs(120)).await?;
    wait_recycled_idle(stack, &s1_id, boots_recycled).await?;
    ensure!(
        events_naming(stack, "StandbyRecycled", &s1_id, 2)
            .await?
            .len()
            == 2,
        "expected two StandbyRecycled Events for {s1_id}"
    );
    let recycled = scenario::provider_metric(
        stack,
        "karpenter_scaleway_standby_recycling_total",
        &[("nodeclass", CLASS), ("decision", "recycled")],
    )
    .await?;
    ensure!(recycled == 2.0, "recycling_total{{recycled}} is {recycled}");

    // 7. The refill delivered and installed: two idle for min 1. The excess
    //    one goes just before the end of its paid month, never earlier.
    let idle = standby::wait_idle(
        stack,
        CLASS,
        2,
        Duration::from_secs_f64(REFILL_DELIVERY_S * TIME_SCALE) + Duration::from_secs(90),
    )
    .await?;
    ensure!(
        idle.iter().any(|s| id(s) == s1_id) && idle.iter().any(|s| id(s) == s2_id),
        "the idle servers are not {s1_id} and {s2_id}"
    );
    println!(
        "[{:.0} s] {s1_id} and {s2_id} idle for min 1",
        started.elapsed().as_secs_f64()
    );
    let released = wait::until(
        "one of the two idle standby servers released",
        month_real() + Duration::from_secs(60),
        Duration::from_millis(250),
        || async {
            for sid in [&s1_id, &s2_id] {
                let s = record(stack, sid).await?;
                if !s["deleted_at"].is_null() {
                    return Ok(Some(s));
                }
            }
            Ok(None)
        },
    )
    .await?;
    check_released_at_month_end(&released)?;
    let kept_id = if id(&released) == s1_id {
        s2_id.clone()
    } else {
        s1_id.clone()
    };
    let kept = record(stack, &kept_id).await?;
    ensure!(
        !is_deleted(&kept) && standby::state(&kept) == Some("idle"),
        "the kept server {kept_id} is {} ({:?})",
        kept["status"],
        standby::state(&kept)
    );
    let notes = events_naming(stack, "StandbyReleased", &id(&released), 1).await?;
    ensure!(
        notes.len() == 1 && notes[0].contains("paid month"),
        "StandbyReleased Events for {}: {notes:?}",
        id(&released)
    );

    ensure!(
        standby::standby_servers(stack, CLASS).await?.len() == 1,
        "the pool is not back to its one kept server"
    );
    println!(
        "[{:.0} s] {} released at its month's end; {kept_id} kept",
        started.elapsed().as_secs_f64(),
        id(&released)
    );

    // 8. Without the NodeClass, the kept monthly standby goes at the end of
    //    its paid month, not before (the month it is in now, which ends
    //    shortly after the released one's: it was ordered a little later).
    kubeutil::nodepools(&stack.client)
        .delete(NODEPOOL, &Default::default())
        .await?;
    kubeutil::nodeclasses(&stack.client)
        .delete(CLASS, &Default::default())
        .await?;
    let deleted_at = Utc::now();
    let (class_gone, _) = stack.emsim.clock().await?;
    let kept_created = time(&record(stack, &kept_id).await?["created_at"])?;
    println!(
        "NodeClass deleted {} s into the kept server's paid month",
        (class_gone - kept_created).num_seconds() % MONTH_S
    );
    let last = wait::until(
        "the last standby server released once its NodeClass is gone",
        month_real() + Duration::from_secs(60),
        Duration::from_millis(250),
        || async {
            let s = record(stack, &kept_id).await?;
            Ok((!s["deleted_at"].is_null()).then_some(s))
        },
    )
    .await?;
    check_released_at_month_end(&last)?;
    let notes = events_naming(stack, "StandbyReleased", &kept_id, 1).await?;
    ensure!(
        notes.len() == 1 && notes[0].contains("paid month ends"),
        "StandbyReleased Events for {kept_id}: {notes:?}"
    );
    println!(
        "[{:.0} s] {kept_id} released {:.0} s after its NodeClass was deleted",
        started.elapsed().as_secs_f64(),
        (Utc::now() - deleted_at).num_milliseconds() as f64 / 1000.0
    );

    // Nothing left, and the Events and counters tell the same story.
    standby::wait_nodes_gone(stack, Duration::from_secs(30)).await?;
    let live: Vec<String> = stack
        .emsim
        .servers_including_deleted()
        .await?
        .iter()
        .filter(|s| s["deleted_at"].is_null())
        .map(id)
        .collect();
    ensure!(live.is_empty(), "servers left: {live:?}");
    // The last release's Event can trail the deletion seen above.
    for (reason, want) in [("StandbyReleased", 2), ("StandbyReady", 4)] {
        scenario::wait_provider_events(stack, reason, |e| {
            e.iter().map(occurrences).sum::<usize>() >= want
        })
        .await
        .with_context(|| format!("fewer than {want} {reason} Events"))?;
    }
    ensure!(
        count(stack, "StandbyOrdered").await? == 2,
        "StandbyOrdered Events"
    );
    ensure!(
        count(stack, "StandbyRecycled").await? == 2,
        "StandbyRecycled Events"
    );
    ensure!(
        count(stack, "StandbyReleased").await? == 2,
        "StandbyReleased Events"
    );
    ensure!(
        count(stack, "StandbyAdopted").await? == 2,
        "StandbyAdopted Events"
    );
    // The first install, two wipes and the refill's install.
    let ready = count(stack, "StandbyReady").await?;
    ensure!(ready == 4, "{ready} StandbyReady Events, expected 4");
    for reason in [
        "StandbyOrderFailed",
        "StandbyInstallFailed",
        "StandbyInsufficientCapacity",
        "StandbyReimaged",
    ] {
        let n = count(stack, reason).await?;
        ensure!(n == 0, "{n} {reason} Events");
    }
    for (metric, want) in [
        ("karpenter_scaleway_standby_orders_total", 2.0),
        ("karpenter_scaleway_standby_releases_total", 2.0),
    ] {
        let got = scenario::provider_metric(stack, metric, &[("nodeclass", CLASS)]).await?;
        ensure!(got == want, "{metric} is {got}, expected {want}");
    }
    let deletes = stack.emsim.counters().await?["endpoints"]
        ["DELETE /baremetal/v1/zones/{zone}/servers/{server_id}"]["total"]
        .as_u64()
        .unwrap_or(0);
    ensure!(
        deletes == 2,
        "{deletes} DELETE calls: only the two releases should delete"
    );
    println!("total {:.0} s", started.elapsed().as_secs_f64());
    stack.assert_no_secrets_in_logs()
}
