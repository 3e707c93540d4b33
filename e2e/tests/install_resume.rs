//! Issue 3: the provider is SIGKILLed once in each install phase and restarted
//! (as a crashed pod is); every install still completes, no server is ordered
//! twice, and scaling to zero leaves no server behind.
//!
//! The phases are made long enough to be hit on purpose, with platform knobs
//! only: a slow delivery (emsim `delivery_seconds`), a time scale at which a
//! reboot lasts about a second, an image served at a fixed bandwidth, a
//! slow ApplyConfiguration, and a Talos install delay between the applied
//! config and the reboot. The kill
//! happens the moment the watch sees the lead NodeClaim enter the phase; what
//! counts is the phase persisted on the NodeClaim when the process died
//! (read after the kill), since that is what the restarted provider resumes.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use e2e::progress::{ClaimWatch, describe};
use e2e::scenario;
use e2e::stack::{Stack, StackOptions};
use e2e::{kubeutil, wait};

/// The install phases in order; a kill target is one or two adjacent ones.
const ORDER: [&str; 9] = [
    "ordered",
    "delivering",
    "ready",
    "rescue",
    "imaging",
    "booting",
    "maintenance",
    "configured",
    "joined",
];

/// One kill per target. `ready` and `rescue` share one: together they last
/// one rescue reboot.
const TARGETS: [&[&str]; 6] = [
    &["delivering"],
    &["ready", "rescue"],
    &["imaging"],
    &["booting"],
    &["maintenance"],
    &["configured"],
];

fn index(phase: &str) -> Option<usize> {
    ORDER.iter().position(|p| *p == phase)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sigkill_in_every_install_phase_then_every_install_completes() -> Result<()> {
    let mut opts = StackOptions::for_test("install-resume")?;
    // A reboot (12 simulated s) lasts 0.6 s; delivery is set below.
    opts.time_scale = 0.05;
    // 8 MiB at 4 MiB/s: imaging lasts about 2 s.
    opts.image_bytes_per_second = Some(4 << 20);
    // The maintenance phase: the ApplyConfiguration call lasts 1.5 s
    // (without it, 20-70 ms: a kill aimed at it could land after it).
    opts.talos_apply_latency = Some(Duration::from_millis(1500));
    // The configured phase: apply -> reboot -> kubelet join lasts > 1.5 s.
    opts.talos_install_delay = Some(Duration::from_millis(1500));
    scenario::with_stack(opts, run).await
}

async fn run(stack: &mut Stack) -> Result<()> {
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
        &scenario::inflate_yaml_on("resume", 2, "1", &[], true),
    )
    .await?;
    let lead = watch
        .wait_for("a NodeClaim", Duration::from_secs(60), |c| {
            c.values()
                .min_by_key(|c| c.first_seen)
                .map(|c| c.name.clone())
        })
        .await?;
    tracing::info!(%lead, "killing the provider in each phase of this NodeClaim's install");

    // phase persisted at the kill -> (target, phases of every claim then)
    let mut kills: Vec<(String, String, BTreeMap<String, Option<String>>)> = Vec::new();
    for target in TARGETS {
        let first = index(target[0]).expect("known phase");
        let seen = watch
            .wait_for(
                &format!("NodeClaim {lead} in phase {}", target.join("/")),
                Duration::from_secs(120),
                |c| {
                    let p = c.get(&lead)?.phase.clone()?;
                    (index(&p).unwrap_or(0) >= first).then_some(p)
                },
            )
            .await?;
        if !target.contains(&seen.as_str()) {
            bail!(
                "NodeClaim {lead} went past {} to {seen} before the provider could be killed",
                target.join("/")
            );
        }
        stack.kill_provider()?;
        // Nothing writes progress any more: this is what the restart resumes.
        let api = kubeutil::nodeclaims(&stack.client);
        let mut at_kill = BTreeMap::new();
        for claim in api.list(&Default::default()).await?.items {
            at_kill.insert(
                kube::ResourceExt::name_any(&claim),
                kubeutil::install_phase(&claim),
            );
        }
        let persisted = at_kill
            .get(&lead)
            .cloned()
            .flatten()
            .with_context(|| format!("NodeClaim {lead} has no phase after the kill"))?;
        tracing::info!(target = %target.join("/"), seen = %seen, %persisted, ?at_kill, "provider killed");
        kills.push((target.join("/"), persisted, at_kill));
        // Down for a moment, as a pod being rescheduled is.
        tokio::time::sleep(Duration::from_millis(500)).await;
        stack.start_provider()?;
    }

    for (target, persisted, all) in &kills {
        println!("kill aimed at {target:<14} lead persisted {persisted:<12} all claims {all:?}");
    }
    let hit: Vec<&str> = kills.iter().map(|(_, p, _)| p.as_str()).collect();
    for target in TARGETS {
        ensure!(
            target.iter().any(|t| hit.contains(t)),
            "no kill landed while the persisted phase was {} (persisted at the kills: {hit:?})",
            target.join("/")
        );
    }

    // Every install completes after the restarts.
    let placed = scenario::wait_pods_running(stack, "resume", 2, Duration::from_secs(300)).await?;
    let nodes: std::collections::BTreeSet<_> = placed.values().cloned().collect();
    ensure!(nodes.len() == 2, "expected 2 nodes, pods on {nodes:?}");
    let claims = watch.snapshot();
    ensure!(
        claims.len() == 2,
        "expected exactly the 2 original NodeClaims (a replacement means an install failed): {:?}",
        claims.values().map(describe).collect::<Vec<_>>()
    );
    wait::until(
        "both NodeClaims Initialized and phase joined",
        Duration::from_secs(60),
        Duration::from_millis(250),
        || async {
            let list = scenario::nodeclaim_objects(stack).await?;
            Ok((list.len() == 2
                && list.iter().all(|c| {
                    kubeutil::condition(c, "Initialized").as_deref() == Some("True")
                        && kubeutil::install_phase(c).as_deref() == Some("joined")
                }))
            .then_some(()))
        },
    )
    .await?;

    // Exactly one order per NodeClaim, whatever the kills interrupted.
    let orders = scenario::orders_placed(stack).await?;
    ensure!(
        orders == 2,
        "emsim accepted {orders} orders for 2 NodeClaims"
    );
    for name in claims.keys() {
        let servers = scenario::servers_of_claim(stack, name).await?;
        ensure!(
            servers.len() == 1,
            "NodeClaim {name} has {} servers in emsim",
            servers.len()
        );
        let s = &servers[0];
        let boots: Vec<&str> = s["boot_history"]
            .as_array()
            .context("boot_history")?
            .iter()
            .filter_map(|b| b["boot_type"].as_str())
            .collect();
        let sim = stack
            .talossim
            .server(s["id"].as_str().unwrap_or(""))
            .await?;
        let sim = sim.context("talos-sim has no record of the server")?;
        ensure!(
            sim["disk"]["image_sha256"] == stack.image_payload_sha256.as_str(),
            "NodeClaim {name}: the disk does not hold the served image"
        );
        println!(
            "{name}: boots {boots:?}, rescue sessions {}, configs applied {}, phases {:?}",
            sim["rescue_sessions"],
            sim["applied_configs"].as_array().map_or(0, Vec::len),
            claims[name]
                .phases
                .iter()
                .map(|(p, _)| p.as_str())
                .collect::<Vec<_>>()
        );
    }

    scenario::scale_to_zero_and_check_clean(stack, &["resume"], Duration::from_secs(180)).await
}
