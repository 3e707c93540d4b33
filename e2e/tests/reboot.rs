//! Issue 24: Karpenter core v1.15 repairs an unhealthy Elastic Metal node by
//! rebooting it through the provider's Reboot, before it replaces it.
//!
//! Every scenario runs the chart's defaults (NodeRepair on) with the
//! provider's reboot toleration cut to 5 s (`--repair-reboot-after`; core's
//! repair runs on the wall clock), and reads each step from the
//! simulators' own records: emsim's boot history of the server, the Node's
//! boot id as talos-sim's kubelet posts it, core's `Rebooting` condition.
//!
//! - an unhealthy node (the kubelet reports its runtime down) is rebooted in
//!   place: the same server, one more normal boot in emsim's records, a new
//!   boot id, its pod Running again, no server ordered;
//! - a fault that survives reboots: rebooted twice, then replaced (core's
//!   own escalation);
//! - a reboot that never comes back: the provider's deadline deletes the
//!   NodeClaim and the node is replaced on a new server, long before core's
//!   20-minute window.

use std::time::Duration;

use anyhow::{Result, ensure};

use e2e::reboot::{self, arm};
use e2e::scenario;
use e2e::stack::{Stack, StackOptions};
use e2e::{kubeutil, wait};

const APP: &str = "inflate";

fn opts(name: &str) -> Result<StackOptions> {
    let mut opts = StackOptions::for_test(name)?;
    opts.provider_args.extend(reboot::provider_args());
    Ok(opts)
}

/// A NodeClass, a NodePool and one pod of 1 CPU on one node: (NodeClaim,
/// Node, server id).
async fn one_node(stack: &Stack) -> Result<(String, String, String)> {
    stack.create_nodeclass("default").await?;
    kubeutil::apply_yaml(
        &stack.client,
        &Stack::nodepool_yaml("default", "default", ""),
    )
    .await?;
    kubeutil::apply_yaml(&stack.client, &scenario::inflate_yaml(APP, 1, "1")).await?;
    scenario::wait_pods_running(stack, APP, 1, Duration::from_secs(300)).await?;
    let (claim, node, pid) = reboot::the_initialized_claim(stack).await?;
    let (_, server) = scenario::parse_provider_id(&pid)?;
    Ok((claim, node, server))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reboot_cures_an_unhealthy_metal_node_in_place() -> Result<()> {
    scenario::with_stack(opts("reboot-in-place")?, async |stack: &mut Stack| {
        let (claim, node, server) = one_node(stack).await?;
        let before = reboot::Before::read(stack, &claim, &node, &server).await?;

        arm(stack, "not_ready_until_reboot", &node, None).await?;
        let started = std::time::Instant::now();
        reboot::wait_reboot_succeeded(stack, &claim, Duration::from_secs(180)).await?;
        tracing::info!(
            elapsed_s = started.elapsed().as_secs_f64(),
            "unhealthy node rebooted"
        );

        // The same server, one more normal boot, a new boot id, the pod
        // back on the node, nothing ordered.
        let boots = before.check_rebooted_in_place(stack, APP, 1).await?;
        let ncs = reboot::claims(stack).await?;
        // The provider's account of it: one accepted reboot, its Event, the
        // record on the NodeClaim.
        let accepted = scenario::provider_metric(
            stack,
            "karpenter_scaleway_reboots_total",
            &[("kind", "baremetal"), ("outcome", "accepted")],
        )
        .await?;
        ensure!(accepted == 1.0, "reboots accepted: {accepted}");
        scenario::wait_provider_events(stack, "RebootRequested", |e| e.len() == 1).await?;
        let record =
            kubeutil::annotation(&ncs[0], "karpenter.scaleway.com/reboot").unwrap_or_default();
        ensure!(
            record.contains("\"accepted\""),
            "reboot record on {claim}: {record:?}"
        );
        // Healthy again: no second reboot comes.
        tokio::time::sleep(Duration::from_secs(20)).await;
        let boots_later = reboot::em_boots(stack, &server).await?;
        ensure!(
            boots_later.len() == boots.len(),
            "rebooted again after it was cured: {boots_later:?}"
        );
        scenario::scale_to_zero_and_check_clean(stack, &[APP], Duration::from_secs(180)).await
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reboot_twice_then_replace_when_the_fault_survives_reboots() -> Result<()> {
    scenario::with_stack(opts("reboot-twice")?, async |stack: &mut Stack| {
        let (claim, node, server) = one_node(stack).await?;
        let boot_before = reboot::boot_id(stack, &node).await?;
        // Unhealthy now, and again 20 s after every boot: long enough for
        // core (which polls every 15 s) to see each reboot succeed.
        arm(stack, "unhealthy_after_every_boot", &node, Some(20_000)).await?;
        arm(stack, "not_ready_until_reboot", &node, None).await?;

        let nodeclaims = kubeutil::nodeclaims(&stack.client);
        let boots = reboot::boots_seen_until(stack, &node, Duration::from_secs(420), || {
            let (api, name) = (nodeclaims.clone(), claim.clone());
            async move {
                let gone = match api.get_opt(&name).await? {
                    None => true,
                    Some(nc) => nc.metadata.deletion_timestamp.is_some(),
                };
                Ok(gone)
            }
        })
        .await?;
        let new_boots: Vec<_> = boots.iter().filter(|b| **b != boot_before).collect();
        ensure!(
            new_boots.len() == 2,
            "expected exactly two reboots before the replacement, saw boots {new_boots:?}"
        );
        let normal_reboots = reboot::em_boots(stack, &server)
            .await?
            .iter()
            .filter(|b| *b == "normal")
            .count();
        tracing::info!(normal_reboots, "server boots");

        // Replaced: another NodeClaim on another server, the pod Running there.
        scenario::wait_nodeclaim_gone(stack, &claim, Duration::from_secs(180)).await?;
        let placed = scenario::wait_pods_running(stack, APP, 1, Duration::from_secs(300)).await?;
        ensure!(
            placed.values().all(|n| n != &node),
            "pod still on {node}: {placed:?}"
        );
        let (new_claim, _, pid) = reboot::the_initialized_claim(stack).await?;
        ensure!(new_claim != claim, "the NodeClaim was not replaced");
        let (_, new_server) = scenario::parse_provider_id(&pid)?;
        ensure!(new_server != server, "replaced onto the same server");
        scenario::wait_server_deleted(stack, &server, Duration::from_secs(120)).await?;
        let accepted = scenario::provider_metric(
            stack,
            "karpenter_scaleway_reboots_total",
            &[("kind", "baremetal"), ("outcome", "accepted")],
        )
        .await?;
        ensure!(accepted == 2.0, "reboots accepted: {accepted}");
        scenario::scale_to_zero_and_check_clean(stack, &[APP], Duration::from_secs(180)).await
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reboot_that_never_comes_back_is_replaced() -> Result<()> {
    let mut opts = opts("reboot-never-back")?;
    // The provider's deadline for an Elastic Metal reboot (the booting
    // deadline; an install's normal boot here lasts a few seconds).
    opts.provider_args
        .push("--booting-deadline=30s".to_string());
    scenario::with_stack(opts, async |stack: &mut Stack| {
        let (claim, node, server) = one_node(stack).await?;
        arm(stack, "reboot_never_returns", &node, None).await?;
        arm(stack, "not_ready_until_reboot", &node, None).await?;

        // Core commits the reboot and the provider's Reboot is accepted.
        let nodeclaims = kubeutil::nodeclaims(&stack.client);
        wait::until(
            "the reboot issued",
            Duration::from_secs(120),
            Duration::from_millis(250),
            || async {
                let nc = nodeclaims.get(&claim).await?;
                Ok(
                    (reboot::rebooting(&nc) == Some(("True".into(), "RebootIssued".into())))
                        .then_some(()),
                )
            },
        )
        .await?;
        let issued = std::time::Instant::now();
        // It never comes back: the provider gives up after its deadline,
        // long before core's 20 minutes.
        scenario::wait_nodeclaim_gone(stack, &claim, Duration::from_secs(240)).await?;
        let waited = issued.elapsed();
        tracing::info!(waited_s = waited.as_secs_f64(), "NodeClaim deleted");
        ensure!(
            waited < Duration::from_secs(10 * 60),
            "replaced after {waited:?}: core's window, not the provider's deadline"
        );
        scenario::wait_provider_events(stack, "RebootNotReturned", |e| e.len() == 1).await?;
        let not_returned = scenario::provider_metric(
            stack,
            "karpenter_scaleway_reboots_total",
            &[("kind", "baremetal"), ("outcome", "not_returned")],
        )
        .await?;
        ensure!(not_returned == 1.0, "not_returned: {not_returned}");

        let placed = scenario::wait_pods_running(stack, APP, 1, Duration::from_secs(300)).await?;
        ensure!(
            placed.values().all(|n| n != &node),
            "pod still on {node}: {placed:?}"
        );
        scenario::wait_server_deleted(stack, &server, Duration::from_secs(120)).await?;
        scenario::scale_to_zero_and_check_clean(stack, &[APP], Duration::from_secs(180)).await
    })
    .await
}
