//! Issue 13: a race for the last standby server. The pool has two idle
//! servers and the catalog says so; one of them is deleted behind the
//! provider's back (someone in the console), so core plans two nodes into
//! a reservation that holds one. Exactly one NodeClaim adopts the remaining
//! server; the other Create finds nothing idle, answers insufficient
//! capacity and shows the reservation empty at once, so core stops
//! launching into it: no server is claimed twice, none is ordered for the
//! reservation, and no NodeClaim loop follows.
//!
//! The standby pass runs at start and when a standby server becomes idle
//! (`--standby-interval=1h`): nothing republishes the catalog between the
//! deletion and the Creates but the Creates themselves. The deletion is
//! the injected fault, at a chosen point.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use kube::ResourceExt;

use e2e::stack::{self, Stack, StackOptions};
use e2e::standby::{self, Pool};
use e2e::{kubeutil, scenario, wait};

const OFFER: &str = "EM-A115X-SSD";
const WARM: &str = "warm";
const APP: &str = "race";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn standby_race_for_the_last_server_adopts_once_and_answers_insufficient_capacity()
-> Result<()> {
    let mut opts = StackOptions::for_test("standby-race")?;
    opts.provider_args.push("--standby-interval=1h".to_string());
    scenario::with_stack(opts, run).await
}

async fn run(stack: &mut Stack) -> Result<()> {
    kubeutil::apply_yaml(
        &stack.client,
        &standby::nodeclass_yaml(
            stack,
            WARM,
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
    let idle = standby::wait_idle(stack, WARM, 2, Duration::from_secs(120)).await?;
    // Published: the pass that saw the second one idle has run.
    wait::until(
        "two idle standby servers published",
        Duration::from_secs(30),
        Duration::from_millis(200),
        || async { Ok((standby::idle_metric(stack, WARM).await? == 2.0).then_some(())) },
    )
    .await?;
    let orders_before = scenario::orders_placed(stack).await?;
    let ids: Vec<String> = idle
        .iter()
        .filter_map(|s| s["id"].as_str().map(str::to_string))
        .collect();
    let (gone, kept) = (ids[0].clone(), ids[1].clone());
    stack
        .emsim
        .user_delete_server(stack::SECRET_KEY, stack::ZONE, &gone)
        .await?;

    // Two pods that each need a node of their own, on reserved capacity only.
    kubeutil::apply_yaml(
        &stack.client,
        &standby::reserved_nodepool_yaml("reserved", WARM, 50, &[OFFER]),
    )
    .await?;
    kubeutil::apply_yaml(
        &stack.client,
        &scenario::inflate_yaml_on(APP, 2, "1", &[], true),
    )
    .await?;

    // Every NodeClaim core makes, by name, until one is Initialized and
    // then for 15 s more: a reservation still shown with capacity after
    // the failed Create would make core launch into it again and again.
    let mut seen: BTreeSet<String> = BTreeSet::new();
    let mut adopted: Option<String> = None;
    let start = std::time::Instant::now();
    let mut settled_at: Option<std::time::Instant> = None;
    loop {
        for claim in scenario::nodeclaim_objects(stack).await? {
            seen.insert(claim.name_any());
            if adopted.is_none()
                && kubeutil::condition(&claim, "Initialized").as_deref() == Some("True")
            {
                adopted = Some(claim.name_any());
                settled_at = Some(std::time::Instant::now());
            }
        }
        if settled_at.is_some_and(|t| t.elapsed() > Duration::from_secs(15)) {
            break;
        }
        ensure!(
            start.elapsed() < Duration::from_secs(180),
            "no NodeClaim Initialized within 180 s (seen {seen:?})"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let adopted = adopted.context("no adoption")?;
    println!("NodeClaims seen: {seen:?}; adopted: {adopted}");
    ensure!(
        seen.len() == 2,
        "core should make exactly two NodeClaims (one adopts, one is refused and not retried into the empty reservation): {seen:?}"
    );

    // One adoption, of the server that is left; the deleted one was never
    // claimed; nothing ordered for the reservation.
    let servers = stack.emsim.servers_including_deleted().await?;
    let claimed: Vec<&serde_json::Value> = servers
        .iter()
        .filter(|s| standby::tag(s, "karpenter.sh/nodeclaim").is_some())
        .collect();
    ensure!(
        claimed.len() == 1 && claimed[0]["id"] == kept.as_str(),
        "exactly the remaining standby server should be claimed: {:?}",
        claimed.iter().map(|s| &s["id"]).collect::<Vec<_>>()
    );
    ensure!(
        standby::tag(claimed[0], "karpenter.sh/nodeclaim").as_deref() == Some(adopted.as_str()),
        "the claimed server names NodeClaim {adopted}"
    );
    let deleted = servers
        .iter()
        .find(|s| s["id"] == gone.as_str())
        .context("the deleted server's record")?;
    ensure!(
        standby::tag(deleted, "karpenter.sh/nodeclaim").is_none(),
        "the deleted server was claimed: {}",
        deleted["tags"]
    );
    ensure!(
        scenario::orders_placed(stack).await? == orders_before,
        "a reserved NodeClaim must never order a server"
    );
    for id in [&kept, &gone] {
        let configs = stack
            .talossim
            .server(id)
            .await?
            .map_or(0, |s| s["applied_configs"].as_array().map_or(0, Vec::len));
        let want = usize::from(*id == kept);
        ensure!(
            configs == want,
            "server {id}: {configs} configs applied, expected {want}"
        );
    }
    // The second pod waits: the NodePool has no reserved capacity left and
    // no other capacity type.
    let running = scenario::wait_pods_running(stack, APP, 1, Duration::from_secs(30)).await?;
    ensure!(running.len() == 1, "one pod runs: {running:?}");

    // Teardown: without the NodeClass, its servers go (hourly, at once).
    scenario::scale(stack, APP, 0).await?;
    standby::wait_nodes_gone(stack, Duration::from_secs(120)).await?;
    kubeutil::nodepools(&stack.client)
        .delete("reserved", &Default::default())
        .await?;
    kubeutil::nodeclasses(&stack.client)
        .delete(WARM, &Default::default())
        .await?;
    standby::wait_no_live_servers(stack, Duration::from_secs(120)).await?;
    stack.assert_no_secrets_in_logs()
}
