//! Issue 3: faults injected in talos-sim and emsim during installs, each on
//! its own NodeClaim (one NodePool and one Deployment per case, all at once):
//!
//! - SSH dropped during `dd` -> re-imaged, joins;
//! - corrupt download, corrupt write -> re-imaged before the reboot (one
//!   normal boot only), the disk holds the right image, joins;
//! - maintenance API never up once -> back to rescue once, joins;
//! - maintenance API never up twice -> NodeClaim deleted with an
//!   `InstallFailed` Event, its server deleted, a replacement joins;
//! - `out_of_stock` after the order -> NodeClaim deleted with an
//!   `InsufficientCapacity` Event, its server deleted, a replacement joins on
//!   another offer.
//!
//! talos-sim faults are armed for the NodeClaim's server as soon as its
//! providerID is known; every order's delivery is slowed (emsim
//! `delivery_seconds`) so that this happens before the server is delivered.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use e2e::progress::{ClaimState, ClaimWatch, describe};
use e2e::scenario;
use e2e::stack::{Stack, StackOptions, ZONE};
use e2e::{kubeutil, wait};
use serde_json::{Value, json};

/// Offer of the talos-sim cases (quota 10, delivered in 5 s below).
const OFFER: &str = "EM-B112X-SSD";
/// The out-of-stock case may use these two; the fault hits the first, the
/// cheaper one, which Karpenter picks first.
const OOS_OFFERS: [&str; 2] = ["EM-A115X-SSD", "EM-A315X-SSD"];

/// The engine's deadline for a normal boot to bring the maintenance API up,
/// shortened so that `maintenance_never_up` is detected in seconds.
const PROVIDER_ARGS: &[&str] = &["--booting-deadline", "4s"];

struct Case {
    pool: &'static str,
    talos_fault: Option<(&'static str, u32)>,
}

const CASES: [Case; 6] = [
    Case {
        pool: "drop",
        talos_fault: Some(("ssh_drop_during_dd", 1)),
    },
    Case {
        pool: "baddl",
        talos_fault: Some(("corrupt_download", 1)),
    },
    Case {
        pool: "badwr",
        talos_fault: Some(("corrupt_write", 1)),
    },
    Case {
        pool: "mnt1",
        talos_fault: Some(("maintenance_never_up", 1)),
    },
    Case {
        pool: "mnt2",
        talos_fault: Some(("maintenance_never_up", 2)),
    },
    Case {
        pool: "oos",
        talos_fault: None,
    },
];

/// The image-write faults and the out-of-stock order: no deadline needs to expire.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn image_faults_and_out_of_stock_are_survived_or_replaced() -> Result<()> {
    let mut opts = StackOptions::for_test("install-faults-image")?;
    opts.time_scale = 0.01;
    scenario::with_stack(opts, async |stack: &mut Stack| {
        run(stack, &["drop", "baddl", "badwr", "oos"]).await
    })
    .await
}

/// The maintenance API that never comes up: detected by the booting deadline
/// (shortened), once -> back to rescue, twice -> the NodeClaim is given up.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn maintenance_never_up_goes_back_to_rescue_once_then_fails() -> Result<()> {
    // Fail with a clear message rather than a provider that exits at start.
    let bins = e2e::stack::Binaries::from_env()?;
    let help = std::process::Command::new(bins.rust_bin_dir.join("karpenter-scaleway"))
        .args(["serve", "--help"])
        .output()?;
    ensure!(
        String::from_utf8_lossy(&help.stdout).contains(PROVIDER_ARGS[0]),
        "karpenter-scaleway serve has no {} flag: the booting deadline (15 min by default) \
         cannot be shortened for this scenario",
        PROVIDER_ARGS[0]
    );
    let mut opts = StackOptions::for_test("install-faults-maintenance")?;
    opts.time_scale = 0.01;
    opts.provider_args = PROVIDER_ARGS.iter().map(|s| s.to_string()).collect();
    scenario::with_stack(opts, async |stack: &mut Stack| {
        run(stack, &["mnt1", "mnt2"]).await
    })
    .await
}

async fn run(stack: &mut Stack, pools: &[&str]) -> Result<()> {
    let cases: Vec<&Case> = CASES.iter().filter(|c| pools.contains(&c.pool)).collect();
    stack.create_nodeclass("default").await?;
    // 500 simulated s = 5 s between an order and its delivery.
    stack
        .emsim
        .add_fault(json!({"kind": "delivery_seconds", "seconds": 500.0}))
        .await?;
    if pools.contains(&"oos") {
        stack
            .emsim
            .add_fault(json!({"kind": "out_of_stock_after_order", "offer": OOS_OFFERS[0], "zone": ZONE, "count": 1}))
            .await?;
    }
    let watch = ClaimWatch::start(&stack.client);
    for case in &cases {
        let offers: &[&str] = if case.pool == "oos" {
            &OOS_OFFERS
        } else {
            &[OFFER]
        };
        kubeutil::apply_yaml(
            &stack.client,
            &Stack::nodepool_yaml(
                case.pool,
                "default",
                &scenario::instance_types_requirement(offers),
            ),
        )
        .await?;
        kubeutil::apply_yaml(
            &stack.client,
            &scenario::inflate_yaml_on(
                case.pool,
                1,
                "1",
                &[("karpenter.sh/nodepool", case.pool)],
                true,
            ),
        )
        .await?;
    }

    // Arm each talos-sim fault on the first server of its pool.
    let mut first_claim: BTreeMap<&str, String> = BTreeMap::new();
    let mut armed: BTreeMap<&str, String> = BTreeMap::new();
    let talos_cases: Vec<&Case> = cases
        .iter()
        .copied()
        .filter(|c| c.talos_fault.is_some())
        .collect();
    while armed.len() < talos_cases.len() {
        let ready: Vec<(&Case, ClaimState)> = watch
            .wait_for(
                "a launched NodeClaim whose fault is not armed yet",
                Duration::from_secs(120),
                |claims| {
                    let found: Vec<(&Case, ClaimState)> = talos_cases
                        .iter()
                        .filter(|c| !armed.contains_key(c.pool))
                        .filter_map(|c| {
                            claims
                                .values()
                                .filter(|s| s.nodepool.as_deref() == Some(c.pool))
                                .min_by_key(|s| s.first_seen)
                                .filter(|s| s.provider_id.is_some())
                                .map(|s| (*c, s.clone()))
                        })
                        .collect();
                    (!found.is_empty()).then_some(found)
                },
            )
            .await?;
        for (case, claim) in ready {
            let (kind, count) = case.talos_fault.expect("talos case");
            let server = claim.server_id().context("server id")?;
            let phase = claim.phase.clone().unwrap_or_default();
            ensure!(
                matches!(phase.as_str(), "" | "ordered" | "delivering"),
                "{}: fault armed too late, install already in phase {phase}",
                case.pool
            );
            let fault = stack
                .talossim
                .add_fault(kind, Some(&server), Some(count))
                .await?;
            tracing::info!(pool = case.pool, %server, %kind, count, %fault, "talos-sim fault armed");
            first_claim.insert(case.pool, claim.name.clone());
            armed.insert(case.pool, server);
        }
    }

    // Every Deployment ends with its pod Running, on a first or replacement node.
    for case in &cases {
        scenario::wait_pods_running(stack, case.pool, 1, Duration::from_secs(300))
            .await
            .with_context(|| format!("case {}", case.pool))?;
    }
    let claims = watch.snapshot();
    for c in claims.values() {
        println!("{}", describe(c));
    }
    let faults = stack.talossim.faults().await?;
    let fired = |server: &str, kind: &str| -> u64 {
        faults
            .iter()
            .filter(|f| f["server_id"] == server && f["kind"] == kind)
            .filter_map(|f| f["fired"].as_u64())
            .sum()
    };
    let pool_claims = |pool: &str| -> Vec<&ClaimState> {
        let mut v: Vec<&ClaimState> = claims
            .values()
            .filter(|c| c.nodepool.as_deref() == Some(pool))
            .collect();
        v.sort_by_key(|c| c.first_seen);
        v
    };

    // Cases that recover on the same server.
    for pool in ["drop", "baddl", "badwr", "mnt1"]
        .into_iter()
        .filter(|p| pools.contains(p))
    {
        let server = &armed[pool];
        let (kind, count) = CASES
            .iter()
            .find(|c| c.pool == pool)
            .and_then(|c| c.talos_fault)
            .expect("talos case");
        let list = pool_claims(pool);
        ensure!(
            list.len() == 1,
            "{pool}: expected the install to recover on its own server, NodeClaims: {:?}",
            list.iter().map(|c| describe(c)).collect::<Vec<_>>()
        );
        ensure!(
            fired(server, kind) == u64::from(count),
            "{pool}: fault {kind} fired {} times, expected {count}",
            fired(server, kind)
        );
        let sim = stack
            .talossim
            .server(server)
            .await?
            .with_context(|| format!("{pool}: no talos-sim record"))?;
        ensure!(
            sim["disk"]["image_sha256"] == stack.image_payload_sha256.as_str(),
            "{pool}: the disk does not hold the served image"
        );
        let boots = boot_types(stack, server).await?;
        let writes = image_writes(&sim);
        let claim = kubeutil::nodeclaims(&stack.client)
            .get(&list[0].name)
            .await?;
        let events = kubeutil::nodeclaim_events(&stack.client, &list[0].name).await?;
        println!(
            "{pool}: boots {boots:?}, image writes {writes}, image-attempts {}, rescue-returns {}, events {:?}",
            kubeutil::install_counter(&claim, "image-attempts"),
            kubeutil::install_counter(&claim, "rescue-returns"),
            events
                .iter()
                .map(|e| format!("{}:{}", e.reason, e.message))
                .collect::<Vec<_>>()
        );
        match pool {
            "drop" => {
                ensure!(writes >= 2, "{pool}: image written {writes} time(s)");
                ensure!(
                    kubeutil::install_counter(&claim, "image-attempts") >= 2,
                    "{pool}: image-attempts annotation < 2"
                );
            }
            "baddl" | "badwr" => {
                ensure!(writes >= 2, "{pool}: image written {writes} time(s)");
                ensure!(
                    boots.iter().filter(|b| *b == "normal").count() == 1,
                    "{pool}: rebooted before re-imaging (boots {boots:?})"
                );
            }
            "mnt1" => {
                ensure!(
                    boots == ["rescue", "normal", "rescue", "normal"],
                    "{pool}: expected exactly one return to rescue, boots {boots:?}"
                );
                ensure!(
                    kubeutil::install_counter(&claim, "rescue-returns") == 1,
                    "{pool}: rescue-returns annotation != 1"
                );
            }
            _ => unreachable!(),
        }
        ensure!(
            events.iter().any(|e| e.reason == "InstallRetry"),
            "{pool}: no InstallRetry Event"
        );
        // `joined` is persisted after the taint that kept the pod off the
        // node is gone (and after the token's deletion), so it may follow the
        // pod's Running by a moment: wait for it rather than read it once.
        let name = list[0].name.clone();
        wait::until(
            &format!("{pool}: install phase joined"),
            Duration::from_secs(30),
            Duration::from_millis(100),
            || async {
                let claim = kubeutil::nodeclaims(&stack.client).get(&name).await?;
                Ok((kubeutil::install_phase(&claim).as_deref() == Some("joined")).then_some(()))
            },
        )
        .await?;
    }

    // Cases that give the NodeClaim up: failed install, out of stock.
    for (pool, reason) in [("mnt2", "InstallFailed"), ("oos", "InsufficientCapacity")]
        .into_iter()
        .filter(|(p, _)| pools.contains(p))
    {
        let list = pool_claims(pool);
        ensure!(
            list.len() == 2,
            "{pool}: expected the first NodeClaim and one replacement, got {:?}",
            list.iter().map(|c| describe(c)).collect::<Vec<_>>()
        );
        let (failed, replacement) = (list[0], list[1]);
        ensure!(
            failed.gone,
            "{pool}: first NodeClaim {} not deleted",
            failed.name
        );
        let events = kubeutil::nodeclaim_events(&stack.client, &failed.name).await?;
        ensure!(
            events
                .iter()
                .any(|e| e.reason == reason && e.type_ == "Warning"),
            "{pool}: no Warning {reason} Event on {}: {events:?}",
            failed.name
        );
        let servers = scenario::servers_of_claim(stack, &failed.name).await?;
        ensure!(
            servers.len() == 1,
            "{pool}: {} servers ordered for {}",
            servers.len(),
            failed.name
        );
        let failed_server = servers[0]["id"].as_str().context("id")?.to_string();
        scenario::wait_server_deleted(stack, &failed_server, Duration::from_secs(30)).await?;
        ensure!(
            replacement.initialized.is_some() || !replacement.gone,
            "{pool}: the replacement did not last"
        );
        let replacement_server = replacement.server_id().context("replacement server")?;
        ensure!(
            replacement_server != failed_server,
            "{pool}: the replacement reuses the failed server"
        );
        println!(
            "{pool}: {} ({}) deleted with {reason}; replacement {} on {} ({})",
            failed.name,
            servers[0]["offer_name"],
            replacement.name,
            replacement.instance_type.as_deref().unwrap_or("-"),
            replacement_server
        );
        if pool == "mnt2" {
            ensure!(
                fired(&armed[pool], "maintenance_never_up") == 2,
                "mnt2: maintenance_never_up fired {} times",
                fired(&armed[pool], "maintenance_never_up")
            );
        } else {
            ensure!(
                servers[0]["offer_name"] == OOS_OFFERS[0],
                "oos: the first order was not on {}",
                OOS_OFFERS[0]
            );
            ensure!(
                replacement.instance_type.as_deref() != Some(OOS_OFFERS[0])
                    || replacement.zone.as_deref() != Some(ZONE),
                "oos: the replacement went to the offering that just ran out"
            );
        }
    }
    wait::until(
        "every remaining NodeClaim Initialized",
        Duration::from_secs(60),
        Duration::from_millis(500),
        || async {
            let list = scenario::nodeclaim_objects(stack).await?;
            Ok((list.len() == cases.len()
                && list
                    .iter()
                    .all(|c| kubeutil::condition(c, "Initialized").as_deref() == Some("True")))
            .then_some(()))
        },
    )
    .await?;
    scenario::scale_to_zero_and_check_clean(stack, pools, Duration::from_secs(240)).await
}

/// emsim's boot history of a server: `rescue`/`normal`, oldest first.
async fn boot_types(stack: &Stack, server: &str) -> Result<Vec<String>> {
    let all = stack.emsim.servers_including_deleted().await?;
    let s = all
        .iter()
        .find(|s| s["id"] == server)
        .with_context(|| format!("server {server} not in emsim"))?;
    Ok(s["boot_history"]
        .as_array()
        .context("boot_history")?
        .iter()
        .filter_map(|b| b["boot_type"].as_str().map(str::to_string))
        .collect())
}

/// How many times the image was streamed to the disk: talos-sim's `disk.writes`
/// when it records it, else the write pipelines among the rescue commands.
fn image_writes(sim: &Value) -> u64 {
    if let Some(n) = sim["disk"]["writes"].as_u64() {
        return n;
    }
    sim["commands"]
        .as_array()
        .map(|cmds| {
            cmds.iter()
                .filter_map(Value::as_str)
                .filter(|c| {
                    c.contains("curl") && (c.contains("tee /dev/") || c.contains("of=/dev/"))
                })
                .count() as u64
        })
        .unwrap_or(0)
}
