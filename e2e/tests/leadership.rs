//! Issue 5, "one active replica": the chart installed with two replicas; only
//! the one whose bridge holds Karpenter's leader Lease orders and installs.
//! Both processes of that replica are SIGKILLed while three installs are
//! mid-way (delivery and imaging slowed so the kill lands there); the other
//! replica takes the Lease, resumes every install, and nothing is ordered
//! twice or left behind.
//!
//! "The other replica did nothing" is read from its own provider: its
//! `karpenter_scaleway_leader` gauge stays 0 (sampled until the kill), its
//! install metrics record no phase, and its log has no order; the leader's
//! metrics and log, read the same way, show the installs (so the check can
//! fail). emsim counts the orders of both replicas together.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use e2e::progress::{ClaimWatch, describe};
use e2e::scenario;
use e2e::scenario::metric_sum;
use e2e::stack::{Stack, StackOptions, http_get, metric_value};
use e2e::{kubeutil, wait};

const CLAIMS: usize = 3;
const PHASES: &str = "karpenter_scaleway_install_phase_duration_seconds_count";
const OUTCOMES: &str = "karpenter_scaleway_install_outcomes_total";
/// What the provider logs for each server it orders (provider/create.rs).
const ORDER_LINE: &str = "ordered server";

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_the_leader_mid_install_and_the_other_replica_finishes() -> Result<()> {
    let mut opts = StackOptions::for_test("leadership")?;
    opts.replicas = 2;
    // A reboot (12 simulated s) lasts 0.6 s; delivery is set below.
    opts.time_scale = 0.05;
    // 8 MiB at 1 MiB/s: imaging lasts about 8 s.
    opts.image_bytes_per_second = Some(1 << 20);
    opts.talos_install_delay = Some(Duration::from_millis(1500));
    scenario::with_stack(opts, run).await
}

async fn run(stack: &mut Stack) -> Result<()> {
    ensure!(
        stack.replicas().len() == 2,
        "the chart rendered {} replicas",
        stack.replicas().len()
    );
    let leader = stack.wait_leader(Duration::from_secs(90)).await?;
    let follower = 1 - leader;
    let holder = stack
        .lease_holder()
        .await?
        .context("a replica leads but the Lease has no holder")?;
    tracing::info!(leader, follower, %holder, "leader elected");

    // The follower's leader gauge, sampled until the kill.
    let follower_url = stack.replicas()[follower].provider_metrics_url()?;
    let sampling = Arc::new(AtomicBool::new(true));
    let (samples, follower_led) = (
        Arc::new(AtomicU32::new(0)),
        Arc::new(AtomicBool::new(false)),
    );
    let sampler = tokio::spawn({
        let (sampling, samples, follower_led) =
            (sampling.clone(), samples.clone(), follower_led.clone());
        async move {
            while sampling.load(Ordering::SeqCst) {
                if let Ok((200, text)) = http_get(&follower_url).await {
                    samples.fetch_add(1, Ordering::SeqCst);
                    if metric_value(&text, "karpenter_scaleway_leader") != Some(0.0) {
                        follower_led.store(true, Ordering::SeqCst);
                    }
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }
    });

    stack.create_nodeclass("default").await?;
    kubeutil::apply_yaml(
        &stack.client,
        &Stack::nodepool_yaml("default", "default", ""),
    )
    .await?;
    // 160 simulated s = 8 s of delivery for every order.
    stack
        .emsim
        .add_fault(serde_json::json!({"kind": "delivery_seconds", "seconds": 160.0}))
        .await?;
    let watch = ClaimWatch::start(&stack.client);
    kubeutil::apply_yaml(
        &stack.client,
        &scenario::inflate_yaml_on("ha", CLAIMS as u32, "1", &[], true),
    )
    .await?;

    // Kill once every NodeClaim has its server and one of them is imaging:
    // the others are delivering, in rescue or imaging too, none has joined.
    watch
        .wait_for(
            "3 NodeClaims ordered, one imaging",
            Duration::from_secs(180),
            |c| {
                let live: Vec<_> = c.values().filter(|c| !c.gone).collect();
                (live.len() == CLAIMS
                    && live.iter().all(|c| c.provider_id.is_some())
                    && live.iter().any(|c| c.phase.as_deref() == Some("imaging")))
                .then_some(())
            },
        )
        .await?;

    // Before the kill: the leader did everything, the follower nothing.
    let leader_metrics = stack.provider_metrics(leader).await?;
    let follower_metrics = stack.provider_metrics(follower).await?;
    sampling.store(false, Ordering::SeqCst);
    sampler.await?;
    ensure!(
        samples.load(Ordering::SeqCst) > 0,
        "the follower's /metrics never answered"
    );
    ensure!(
        !follower_led.load(Ordering::SeqCst),
        "the follower's provider reported leading while the other replica held the Lease"
    );
    let log_of = |stack: &mut Stack, i: usize| -> Result<std::path::PathBuf> {
        let name = stack.replicas()[i].provider_proc.clone();
        Ok(stack
            .proc_mut(&name)
            .with_context(|| format!("no process {name}"))?
            .log_path()
            .to_path_buf())
    };
    let leader_log = std::fs::read_to_string(log_of(stack, leader)?)?;
    let follower_log_path = log_of(stack, follower)?;
    let follower_log = std::fs::read_to_string(&follower_log_path)?;
    let leader_orders = leader_log.matches(ORDER_LINE).count();
    ensure!(
        leader_orders == CLAIMS,
        "the leader's log shows {leader_orders} orders for {CLAIMS} NodeClaims"
    );
    ensure!(
        !follower_log.contains(ORDER_LINE),
        "the follower ordered a server: {}",
        follower_log
            .lines()
            .find(|l| l.contains(ORDER_LINE))
            .unwrap_or_default()
    );
    ensure!(
        metric_sum(&leader_metrics, PHASES, &[]) > 0.0,
        "the leader's install metrics show no finished phase (the check below would prove nothing)"
    );
    ensure!(
        metric_sum(&follower_metrics, PHASES, &[]) == 0.0
            && metric_sum(&follower_metrics, OUTCOMES, &[]) == 0.0,
        "the follower's provider ran install phases:\n{}",
        follower_metrics
            .lines()
            .filter(|l| l.starts_with("karpenter_scaleway_install"))
            .collect::<Vec<_>>()
            .join("\n")
    );

    // SIGKILL the leader's pod: provider and bridge at once.
    let killed_at = Instant::now();
    stack.kill_replica(leader)?;
    let mut at_kill = BTreeMap::new();
    for claim in kubeutil::nodeclaims(&stack.client)
        .list(&Default::default())
        .await?
        .items
    {
        at_kill.insert(
            kube::ResourceExt::name_any(&claim),
            kubeutil::install_phase(&claim),
        );
    }
    tracing::info!(?at_kill, "leader replica SIGKILLed");
    ensure!(
        at_kill.len() == CLAIMS
            && at_kill
                .values()
                .all(|p| p.as_deref().is_some_and(|p| p != "joined")),
        "the kill did not land mid-install: {at_kill:?}"
    );

    // The follower takes the Lease (the killed one never released it: it
    // expires first) and its provider learns it leads.
    let new_holder = wait::until(
        "the Lease to change hands",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || async { Ok(stack.lease_holder().await?.filter(|h| *h != holder)) },
    )
    .await?;
    let lease_taken = killed_at.elapsed();
    let now_leading = stack.wait_leader(Duration::from_secs(30)).await?;
    let provider_leads = killed_at.elapsed();
    ensure!(
        now_leading == follower,
        "replica {now_leading} leads, expected {follower}"
    );
    println!(
        "fail-over: Lease {holder} -> {new_holder} {:.1} s after the SIGKILL, provider leading after {:.1} s",
        lease_taken.as_secs_f64(),
        provider_leads.as_secs_f64()
    );
    ensure!(
        lease_taken <= Duration::from_secs(40),
        "the Lease changed hands only {lease_taken:?} after the kill (lease duration 15 s)"
    );

    // Every install completes, on the original NodeClaims and servers.
    let placed = scenario::wait_pods_running(stack, "ha", CLAIMS, Duration::from_secs(300)).await?;
    let nodes: std::collections::BTreeSet<_> = placed.values().cloned().collect();
    ensure!(
        nodes.len() == CLAIMS,
        "expected {CLAIMS} nodes, pods on {nodes:?}"
    );
    let claims = watch.snapshot();
    ensure!(
        claims.len() == CLAIMS && claims.keys().all(|k| at_kill.contains_key(k)),
        "expected exactly the {CLAIMS} NodeClaims of before the kill (a new one means an install was given up): {:?}",
        claims.values().map(describe).collect::<Vec<_>>()
    );
    wait::until(
        "every NodeClaim Initialized and phase joined",
        Duration::from_secs(60),
        Duration::from_millis(250),
        || async {
            let list = scenario::nodeclaim_objects(stack).await?;
            Ok((list.len() == CLAIMS
                && list.iter().all(|c| {
                    kubeutil::condition(c, "Initialized").as_deref() == Some("True")
                        && kubeutil::install_phase(c).as_deref() == Some("joined")
                }))
            .then_some(()))
        },
    )
    .await?;
    let orders = scenario::orders_placed(stack).await?;
    ensure!(
        orders == CLAIMS as u64,
        "emsim accepted {orders} orders for {CLAIMS} NodeClaims"
    );
    for name in claims.keys() {
        let servers = scenario::servers_of_claim(stack, name).await?;
        ensure!(
            servers.len() == 1,
            "NodeClaim {name} has {} servers in emsim",
            servers.len()
        );
    }
    // The survivor finished the installs itself (outcomes are counted by
    // the process that saw the join) and ordered nothing.
    let survivor = stack.provider_metrics(follower).await?;
    let joined = metric_sum(&survivor, OUTCOMES, &[("result", "joined")]);
    ensure!(
        joined == CLAIMS as f64,
        "the surviving provider saw {joined} installs join, expected {CLAIMS}"
    );
    let follower_log = std::fs::read_to_string(&follower_log_path)?;
    ensure!(
        !follower_log.contains(ORDER_LINE),
        "the surviving replica ordered a server of its own"
    );
    for (name, phase) in &at_kill {
        println!(
            "{name}: phase at the kill {:<12} phases {:?}",
            phase.as_deref().unwrap_or("-"),
            claims[name]
                .phases
                .iter()
                .map(|(p, _)| p.as_str())
                .collect::<Vec<_>>()
        );
    }

    // Scale to zero: the survivor deletes every server; nothing leaks.
    scenario::scale_to_zero_and_check_clean(stack, &["ha"], Duration::from_secs(180)).await
}
