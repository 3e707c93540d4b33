//! Issue 13: the provider dies at chosen points of warm metal's two risky
//! moves, and the restarted one finishes them with nothing lost and nothing
//! duplicated. The crashes are injected (`--test-crash-at`), not timed:
//!
//! 1. `standby-claimed`: Create has claimed the idle standby (its tags name
//!    the NodeClaim) and done nothing else. The restarted provider's Create
//!    (core calls it again) finds the server by its tag and adopts it: one
//!    server, one config applied, no order.
//! 2. `wipe-tagged`: Delete has retagged the node's server as a standby to
//!    wipe and started nothing. The restarted provider answers core's next
//!    Delete (the server is no longer that NodeClaim's) and its standby pass
//!    resumes the wipe from the tags.
//! 3. `standby-imaged`: that resumed wipe dies again right after writing the
//!    image. The next provider writes it again and the server ends idle in
//!    the pool, never deleted, never ordered again.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use kube::ResourceExt;
use serde_json::Value;

use e2e::stack::{PROVIDER, Stack, StackOptions};
use e2e::standby::{self, Pool};
use e2e::{kubeutil, scenario, wait};

const OFFER: &str = "EM-A115X-SSD";
const WARM: &str = "warm";
const APP: &str = "crashy";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn standby_crashes_during_adoption_and_wipe_lose_and_duplicate_nothing() -> Result<()> {
    let mut opts = StackOptions::for_test("standby-crash")?;
    opts.provider_args.push("--standby-interval=1h".to_string());
    scenario::with_stack(opts, run).await
}

fn class(stack: &Stack, min: u32) -> String {
    standby::nodeclass_yaml(
        stack,
        WARM,
        "hourly",
        &[Pool {
            offer: OFFER,
            min,
            max: 1,
            // An idle server above min stays (a simulated day): the scenario
            // drops min to 0 to stop refills, not to release it.
            idle_hourly_keep: Some("24h"),
        }],
    )
}

async fn server(stack: &Stack, id: &str) -> Result<Value> {
    stack
        .emsim
        .servers_including_deleted()
        .await?
        .into_iter()
        .find(|s| s["id"] == id)
        .with_context(|| format!("emsim has no record of server {id}"))
}

/// Restarts the provider, armed at `point` (or not at all).
fn restart(stack: &mut Stack, base: &[String], point: Option<&str>) -> Result<()> {
    if stack.proc_mut(PROVIDER).is_some_and(|p| p.is_running()) {
        stack.kill_provider()?;
    }
    stack.opts.provider_args = base.to_vec();
    if let Some(point) = point {
        stack
            .opts
            .provider_args
            .push(format!("--test-crash-at={point}"));
    }
    stack.start_provider()
}

async fn run(stack: &mut Stack) -> Result<()> {
    let base = stack.opts.provider_args.clone();
    stack.apply_nodeclass(WARM, &class(stack, 1)).await?;
    let idle = standby::wait_idle(stack, WARM, 1, Duration::from_secs(120)).await?;
    // No refill once it is adopted (min 0), so that what follows is only
    // about this server.
    stack.apply_nodeclass(WARM, &class(stack, 0)).await?;
    let id = idle[0]["id"].as_str().context("id")?.to_string();
    let orders = scenario::orders_placed(stack).await?;
    ensure!(orders == 1, "one standby ordered, got {orders} orders");

    // 1. Crash right after the claim.
    restart(stack, &base, Some("standby-claimed"))?;
    wait::until(
        "the standby published by the restarted provider",
        Duration::from_secs(60),
        Duration::from_millis(250),
        || async {
            Ok((standby::idle_metric(stack, WARM).await.unwrap_or(0.0) == 1.0).then_some(()))
        },
    )
    .await?;
    kubeutil::apply_yaml(
        &stack.client,
        &standby::reserved_nodepool_yaml("reserved", WARM, 50, &[OFFER]),
    )
    .await?;
    kubeutil::apply_yaml(&stack.client, &scenario::inflate_yaml(APP, 1, "1")).await?;
    scenario::wait_provider_died(stack, "standby-claimed").await?;
    let claims = scenario::nodeclaim_objects(stack).await?;
    ensure!(
        claims.len() == 1,
        "one NodeClaim at the crash: {}",
        claims.len()
    );
    let claim = claims[0].name_any();
    let at_crash = server(stack, &id).await?;
    ensure!(
        standby::tag(&at_crash, "karpenter.sh/nodeclaim").as_deref() == Some(claim.as_str())
            && standby::tag(&at_crash, "karpenter.scaleway.com/standby").is_none(),
        "at the crash the server is claimed by {claim} and no longer a standby: {}",
        at_crash["tags"]
    );
    let configs = |sim: &Option<Value>| {
        sim.as_ref()
            .map_or(0, |s| s["applied_configs"].as_array().map_or(0, Vec::len))
    };
    ensure!(
        configs(&stack.talossim.server(&id).await?) == 0,
        "no config applied at the crash"
    );
    restart(stack, &base, None)?;
    scenario::wait_pods_running(stack, APP, 1, Duration::from_secs(120)).await?;
    let claims = scenario::nodeclaim_objects(stack).await?;
    ensure!(
        claims.len() == 1 && claims[0].name_any() == claim,
        "the same NodeClaim runs the pod"
    );
    ensure!(
        scenario::claim_server_id(&claims[0]).as_deref() == Some(id.as_str()),
        "NodeClaim {claim} adopted server {id}"
    );
    ensure!(
        configs(&stack.talossim.server(&id).await?) == 1,
        "one config applied by the restarted adoption"
    );
    ensure!(
        scenario::orders_placed(stack).await? == 1,
        "the restart ordered a server"
    );
    let boots_joined = standby::boots(&server(stack, &id).await?)?;
    let writes = |sim: &Option<Value>| {
        sim.as_ref().map_or(0, |s| {
            s["commands"].as_array().map_or(0, |c| {
                c.iter()
                    .filter(|c| c.as_str().is_some_and(|c| c.contains("tee /dev/")))
                    .count()
            })
        })
    };
    let writes_joined = writes(&stack.talossim.server(&id).await?);

    // 2. Crash right after the recycle's retag.
    restart(stack, &base, Some("wipe-tagged"))?;
    wait::until(
        "the restarted provider serving",
        Duration::from_secs(60),
        Duration::from_millis(250),
        || async {
            Ok(
                scenario::provider_metric(stack, "karpenter_scaleway_leader", &[])
                    .await
                    .ok()
                    .filter(|v| *v == 1.0),
            )
        },
    )
    .await?;
    scenario::scale(stack, APP, 0).await?;
    scenario::wait_provider_died(stack, "wipe-tagged").await?;
    let at_crash = server(stack, &id).await?;
    ensure!(
        at_crash["deleted_at"].is_null()
            && standby::state(&at_crash) == Some("wiping")
            && standby::tag(&at_crash, "install.karpenter.scaleway.com/phase").as_deref()
                == Some("ready"),
        "at the crash the server is a standby to wipe: {}",
        at_crash["tags"]
    );
    ensure!(
        standby::boots(&at_crash)? == boots_joined,
        "nothing rebooted the server before the crash"
    );

    // 3. The resumed wipe dies again once the image is written.
    restart(stack, &base, Some("standby-imaged"))?;
    scenario::wait_provider_died(stack, "standby-imaged").await?;
    let at_crash = server(stack, &id).await?;
    ensure!(
        at_crash["deleted_at"].is_null() && standby::state(&at_crash) == Some("wiping"),
        "during the wipe the server is a standby being wiped: {}",
        at_crash["tags"]
    );
    restart(stack, &base, None)?;
    let idle = standby::wait_idle(stack, WARM, 1, Duration::from_secs(120)).await?;
    ensure!(
        idle[0]["id"] == id.as_str(),
        "the same server is idle again"
    );
    standby::wait_nodes_gone(stack, Duration::from_secs(60)).await?;
    let boots = standby::boots(&idle[0])?;
    ensure!(
        boots[boots_joined.len()..].first().map(String::as_str) == Some("rescue")
            && boots.last().map(String::as_str) == Some("normal"),
        "the wipe boots into rescue, then back into Talos: {boots:?}"
    );
    let written = writes(&stack.talossim.server(&id).await?) - writes_joined;
    ensure!(
        written == 2,
        "the image is written twice by the wipe (once before the crash, once after): {written}"
    );
    ensure!(
        scenario::orders_placed(stack).await? == 1,
        "no server was ordered again"
    );
    // (The StandbyRecycled Event died with the provider at `wipe-tagged`;
    // the NodeClass still tells the server is ready again.)
    scenario::wait_provider_events(stack, "StandbyReady", |e| !e.is_empty())
        .await
        .context("no StandbyReady Event on the NodeClass")?;

    // Teardown: the NodeClass goes, its hourly standby with it.
    kubeutil::nodepools(&stack.client)
        .delete("reserved", &Default::default())
        .await?;
    kubeutil::nodeclasses(&stack.client)
        .delete(WARM, &Default::default())
        .await?;
    standby::wait_no_live_servers(stack, Duration::from_secs(120)).await?;
    stack.assert_no_secrets_in_logs()
}
