//! Issue 25's lost answers: the Elastic Metal API takes an order and the
//! answer never reaches the provider (emsim's `lose_answer` fault: the order
//! is placed, then the response is held until the client gives up).
//!
//! * Core retries the failed Create: the provider finds the server by its
//!   NodeClaim tag and installs it. One order, never two; the node joins.
//! * The NodeClaim is deleted while the answer is lost: core never learnt a
//!   providerID, so it removes the NodeClaim without calling Delete. The
//!   orphan sweeper reads the NodeClaim the server names from the API server,
//!   finds it gone, and releases the server after minutes (reason
//!   `claim_deleted`), not after the orphan grace of hours.
//!
//! The provider's Scaleway request timeout is 10 s here (30 s by default), so
//! that a held answer costs the retry 10 s. The second scenario runs emsim at
//! time scale 1, as the sweeper compares `created_at` with the wall clock
//! (see `orphans.rs`).

use std::time::Duration;

use anyhow::{Result, ensure};
use e2e::scenario::{self, parse_provider_id};
use e2e::stack::{Stack, StackOptions};
use e2e::{kubeutil, wait};
use kube::api::DeleteParams;
use serde_json::json;

const ORDERS: &str = "POST /baremetal/v1/zones/{zone}/servers";
const DELETES: &str = "DELETE /baremetal/v1/zones/{zone}/servers/{server_id}";
/// emsim's counter status of a call that got no answer.
const HELD: &str = "0";

fn options(name: &str) -> Result<StackOptions> {
    let mut opts = StackOptions::for_test(name)?;
    opts.provider_args = vec!["--scw-api-timeout".into(), "10s".into()];
    Ok(opts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lost_order_answer_is_found_by_its_tag_and_never_ordered_twice() -> Result<()> {
    scenario::with_stack(options("lost-answer-retried")?, retried).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_server_of_a_nodeclaim_deleted_while_its_answer_was_lost_is_released() -> Result<()> {
    let mut opts = options("lost-answer-deleted")?;
    opts.time_scale = 1.0;
    opts.provider_args.extend([
        "--orphan-grace".into(),
        "1h".into(),
        "--sweep-interval".into(),
        "3s".into(),
    ]);
    scenario::with_stack(opts, deleted).await
}

async fn setup(stack: &Stack) -> Result<()> {
    stack.create_nodeclass("default").await?;
    kubeutil::apply_yaml(
        &stack.client,
        &Stack::nodepool_yaml("default", "default", ""),
    )
    .await?;
    stack
        .emsim
        .add_fault(json!({"kind": "http", "endpoint": ORDERS, "lose_answer": true, "count": 1}))
        .await?;
    Ok(())
}

/// Calls of `endpoint` answered `status` (`HELD`: never answered).
async fn calls(stack: &Stack, endpoint: &str, status: &str) -> Result<u64> {
    let counters = stack.emsim.counters().await?;
    Ok(counters["endpoints"][endpoint]["by_status"][status]
        .as_u64()
        .unwrap_or(0))
}

async fn wait_held_order(stack: &Stack) -> Result<()> {
    wait::until(
        "the order placed and its answer held",
        Duration::from_secs(120),
        Duration::from_millis(250),
        || async { Ok((calls(stack, ORDERS, HELD).await? == 1).then_some(())) },
    )
    .await
}

async fn retried(stack: &mut Stack) -> Result<()> {
    setup(stack).await?;
    kubeutil::apply_yaml(&stack.client, &scenario::inflate_yaml("inflate", 1, "1")).await?;
    wait_held_order(stack).await?;
    scenario::wait_pods_running(stack, "inflate", 1, Duration::from_secs(300)).await?;

    let claims = scenario::nodeclaims(stack).await?;
    ensure!(claims.len() == 1, "one NodeClaim expected: {claims:?}");
    let (claim, provider_id) = claims.into_iter().next().expect("one claim");
    let (_, server_id) = parse_provider_id(&provider_id)?;
    let ordered = stack.emsim.servers_including_deleted().await?;
    ensure!(
        ordered.len() == 1 && ordered[0]["id"] == server_id.as_str(),
        "the held order's server is the NodeClaim's and the only one ordered: {:?}",
        ordered.iter().map(|s| &s["id"]).collect::<Vec<_>>()
    );
    ensure!(
        scenario::servers_of_claim(stack, &claim).await?.len() == 1,
        "one server tagged for {claim}"
    );
    ensure!(
        scenario::orders_placed(stack).await? == 0,
        "no order answered: the only one is the held one"
    );
    ensure!(
        stack.emsim.faults().await?.is_empty(),
        "the lose_answer fault fired"
    );
    scenario::no_stranded_nodes(stack).await?;
    scenario::scale_to_zero_and_check_clean(stack, &["inflate"], Duration::from_secs(300)).await
}

async fn deleted(stack: &mut Stack) -> Result<()> {
    setup(stack).await?;
    kubeutil::apply_yaml(&stack.client, &scenario::inflate_yaml("inflate", 1, "1")).await?;
    wait_held_order(stack).await?;
    let claims = scenario::nodeclaims(stack).await?;
    ensure!(claims.len() == 1, "one NodeClaim expected: {claims:?}");
    let (claim, provider_id) = claims.into_iter().next().expect("one claim");
    ensure!(
        provider_id.is_empty(),
        "core cannot know the server yet: {provider_id}"
    );
    let server = scenario::servers_of_claim(stack, &claim).await?;
    ensure!(server.len() == 1, "one server ordered for {claim}");
    let server_id = server[0]["id"].as_str().unwrap_or_default().to_string();

    // The pod goes away and the NodeClaim is deleted while Create waits.
    scenario::scale(stack, "inflate", 0).await?;
    kubeutil::nodeclaims(&stack.client)
        .delete(&claim, &DeleteParams::default())
        .await?;
    scenario::wait_nodeclaim_gone(stack, &claim, Duration::from_secs(120)).await?;
    ensure!(
        calls(stack, DELETES, "200").await? == 0,
        "core had no providerID to call Delete with; nothing deleted the server yet"
    );

    // The sweeper: 2 minutes after the order, not the hour of the grace.
    scenario::wait_server_deleted(stack, &server_id, Duration::from_secs(240)).await?;
    let released = scenario::provider_metric(
        stack,
        "karpenter_scaleway_sweeper_decisions_total",
        &[("decision", "deleted"), ("reason", "claim_deleted")],
    )
    .await?;
    ensure!(
        released == 1.0,
        "one claim_deleted release expected, metric says {released}"
    );
    scenario::scale_to_zero_and_check_clean(stack, &["inflate"], Duration::from_secs(120)).await
}
