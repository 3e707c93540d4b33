//! Issue 12's scenarios where VMs and bare metal meet, and the safety of
//! the VM path: a sold-out Elastic Metal NodePool (weight 50) sends pods to
//! a VM NodePool (weight 10) with one refused order per TTL, then metal
//! again once stock returns; Instance list faults, orphan and foreign VMs,
//! and an image change that drifts VMs.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use e2e::scenario;
use e2e::stack::{Stack, ZONE};
use e2e::{kubeutil, wait};

use crate::instances::{nothing_billed_left, opts};

/// Launched NodeClaims (providerID set) by NodePool.
async fn launched_by_pool(stack: &Stack) -> Result<Vec<(String, String)>> {
    use kube::ResourceExt as _;
    let list = kubeutil::nodeclaims(&stack.client)
        .list(&Default::default())
        .await?;
    Ok(list
        .items
        .iter()
        .filter(|nc| nc.metadata.deletion_timestamp.is_none())
        .filter(|nc| {
            nc.data["status"]["providerID"]
                .as_str()
                .is_some_and(|p| !p.is_empty())
        })
        .map(|nc| {
            let pool = nc
                .labels()
                .get("karpenter.sh/nodepool")
                .cloned()
                .unwrap_or_default();
            (nc.name_any(), pool)
        })
        .collect())
}

/// Elastic Metal orders emsim refused for stock (412).
async fn refused_em_orders(stack: &Stack) -> Result<u64> {
    let c = stack.emsim.counters().await?;
    Ok(
        c["endpoints"]["POST /baremetal/v1/zones/{zone}/servers"]["by_status"]["412"]
            .as_u64()
            .unwrap_or(0),
    )
}

/// Pods that each need a node of their own, 1 CPU each (fit a POP2-2C-8G).
fn spread(app: &str, replicas: u32) -> String {
    scenario::inflate_yaml_on(app, replicas, "1", &[], true)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn instance_mixed_sold_out_metal_goes_to_vms_until_stock_returns() -> Result<()> {
    const TTL: Duration = Duration::from_secs(30);
    const METAL: &str = "EM-A115X-SSD";
    let mut options = opts("instance-mixed")?;
    options.provider_args = vec![
        "--unavailable-offering-ttl".into(),
        format!("{}s", TTL.as_secs()),
    ];
    scenario::with_stack(options, async |stack: &mut Stack| {
        stack.create_nodeclass("metal").await?;
        let metal_pool = Stack::nodepool_yaml(
            "metal",
            "metal",
            &scenario::instance_types_requirement(&[METAL]),
        )
        .replace("spec:\n  template:", "spec:\n  weight: 50\n  template:");
        kubeutil::apply_yaml(&stack.client, &metal_pool).await?;
        let class = stack
            .create_instance_nodeclass(
                &stack.instance_nodeclass_yaml("vms", &stack.opts.talos_version),
            )
            .await?;
        kubeutil::apply_yaml(
            &stack.client,
            &Stack::instance_nodepool_yaml(
                "vms",
                &class,
                10,
                &scenario::instance_types_requirement(&["POP2-2C-8G"]),
                "",
            ),
        )
        .await?;
        // Sold out after the provider read the catalog: only an order tells.
        stack
            .emsim
            .set_stock(ZONE, METAL, serde_json::json!("empty"))
            .await?;

        // 1. The preferred (metal) pool's order is refused: the pod lands on a VM.
        kubeutil::apply_yaml(&stack.client, &spread("mixed", 1)).await?;
        // The TTL counts from the refusal.
        let t0 = wait::until(
            "the EM order refused for stock",
            Duration::from_secs(120),
            Duration::from_millis(100),
            || async { Ok((refused_em_orders(stack).await? >= 1).then(std::time::Instant::now)) },
        )
        .await?;
        scenario::wait_pods_running(stack, "mixed", 1, Duration::from_secs(240)).await?;
        let claims = launched_by_pool(stack).await?;
        ensure!(claims.iter().all(|(_, p)| p == "vms"), "claims {claims:?}");
        ensure!(
            refused_em_orders(stack).await? == 1,
            "refused EM orders != 1"
        );

        // 2. More pods inside the TTL: VMs again, no second doomed EM order.
        //    The choice is made when the NodeClaim launches: the window is
        //    checked then, not once its pod runs.
        scenario::scale(stack, "mixed", 2).await?;
        let claims = wait::until(
            "2 launched NodeClaims",
            Duration::from_secs(120),
            Duration::from_millis(250),
            || async {
                let claims = launched_by_pool(stack).await?;
                Ok((claims.len() == 2).then_some(claims))
            },
        )
        .await?;
        ensure!(
            t0.elapsed() < TTL,
            "step 2's NodeClaim launched {:.1} s after the refusal, past the {} s TTL; it proves nothing",
            t0.elapsed().as_secs_f64(),
            TTL.as_secs()
        );
        ensure!(
            claims.iter().all(|(_, p)| p == "vms"),
            "claims {claims:?}"
        );
        ensure!(
            refused_em_orders(stack).await? == 1,
            "a second EM order inside the TTL"
        );
        scenario::wait_pods_running(stack, "mixed", 2, Duration::from_secs(240)).await?;

        // 3. Stock is back and the TTL has passed: the next pod goes to metal.
        stack
            .emsim
            .set_stock(ZONE, METAL, serde_json::json!("available"))
            .await?;
        tokio::time::sleep(
            (t0 + TTL + Duration::from_secs(1))
                .saturating_duration_since(std::time::Instant::now()),
        )
        .await;
        scenario::scale(stack, "mixed", 3).await?;
        scenario::wait_pods_running(stack, "mixed", 3, Duration::from_secs(300)).await?;
        let claims = launched_by_pool(stack).await?;
        let metal: Vec<_> = claims.iter().filter(|(_, p)| p == "metal").collect();
        ensure!(metal.len() == 1, "after the restock, claims {claims:?}");
        ensure!(
            refused_em_orders(stack).await? == 1,
            "an EM order refused after the restock"
        );

        scenario::scale(stack, "mixed", 0).await?;
        nothing_billed_left(stack).await?;
        stack.assert_no_secrets_in_logs()
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn instance_safety_list_faults_orphans_and_drift() -> Result<()> {
    const GRACE: Duration = Duration::from_secs(20);
    const LIST: &str = "GET /instance/v1/zones/{zone}/servers";
    let mut options = opts("instance-safety")?;
    // The sweeper ages a VM by its creation date, read on emsim's clock: at
    // time scale 1 that clock is the wall clock (as in `orphans`).
    options.time_scale = 1.0;
    options.provider_args = vec![
        "--instance-orphan-grace".into(),
        format!("{}s", GRACE.as_secs()),
        "--sweep-interval".into(),
        "5s".into(),
    ];
    options.bridge_env = vec![("KPS_CORE_GC_INTERVAL".into(), "5s".into())];
    scenario::with_stack(options, async |stack: &mut Stack| {
        let class = stack
            .create_instance_nodeclass(
                &stack.instance_nodeclass_yaml("vms", &stack.opts.talos_version),
            )
            .await?;
        // Drift only: consolidation would race the checks below.
        let pool = Stack::instance_nodepool_yaml(
            "vms",
            &class,
            0,
            &scenario::instance_types_requirement(&["POP2-2C-8G"]),
            "",
        )
        .replace(
            "consolidationPolicy: WhenEmpty\n    consolidateAfter: 5s",
            "consolidationPolicy: WhenEmpty\n    consolidateAfter: Never",
        );
        kubeutil::apply_yaml(&stack.client, &pool).await?;
        kubeutil::apply_yaml(&stack.client, &spread("safe", 2)).await?;
        scenario::wait_pods_running(stack, "safe", 2, Duration::from_secs(240)).await?;
        let before = scenario::nodeclaims(stack).await?;
        ensure!(before.len() == 2, "claims {before:?}");

        // 1. The VM list loses its page (total_count still right): List must
        //    fail, core's collector must not delete anything, for 3 periods.
        const FAILURES: &str = "karpenter_scaleway_list_failures_total";
        let failed_before = scenario::provider_metric(stack, FAILURES, &[]).await?;
        let gc_before = scenario::gc_passes(stack).await?;
        stack
            .emsim
            .add_fault(serde_json::json!({"kind": "list_missing_page", "endpoint": LIST}))
            .await?;
        wait::until(
            "three failed collector passes under the fault",
            Duration::from_secs(90),
            Duration::from_millis(500),
            || async {
                Ok(
                    (scenario::gc_passes(stack).await?.error >= gc_before.error + 3.0)
                        .then_some(()),
                )
            },
        )
        .await?;
        ensure!(
            scenario::provider_metric(stack, FAILURES, &[]).await? > failed_before,
            "the provider did not count a List failure"
        );
        stack.emsim.clear_faults().await?;
        let under_fault = scenario::gc_passes(stack).await?;
        scenario::wait_gc_success(stack, under_fault, Duration::from_secs(60)).await?;
        ensure!(
            scenario::nodeclaims(stack).await? == before,
            "a NodeClaim changed under the fault"
        );
        ensure!(
            stack.owned_vms().await?.len() == 2,
            "a VM was deleted under the fault"
        );

        // 2. An orphan VM of this cluster (its NodeClaim never existed) is
        //    swept after the grace, with its volume; a foreign VM never is.
        let tags = |cluster: &str| {
            vec![
                format!("karpenter.scaleway.com/cluster={cluster}"),
                "karpenter.sh/nodeclaim=vms-ghost".to_string(),
            ]
        };
        let image = format!("talos-{}-amd64", stack.opts.talos_version);
        let (ours, theirs) = (tags("e2e"), tags("another-cluster"));
        let vm = |name, tags| e2e::sims::UserVm {
            commercial_type: "POP2-2C-8G",
            image: &image,
            name,
            project_id: e2e::stack::PROJECT_ID,
            tags,
        };
        let orphan = stack
            .emsim
            .user_create_vm(e2e::stack::SECRET_KEY, ZONE, &vm("vms-ghost", &ours))
            .await?;
        let foreign = stack
            .emsim
            .user_create_vm(e2e::stack::SECRET_KEY, ZONE, &vm("someone-else", &theirs))
            .await?;
        let orphan_id = orphan["id"].as_str().context("orphan id")?.to_string();
        let orphan_volume = orphan["volumes"]["0"]["id"]
            .as_str()
            .context("orphan volume")?
            .to_string();
        let created = std::time::Instant::now();
        wait::until(
            "the orphan VM and its volume swept",
            Duration::from_secs(120),
            Duration::from_millis(500),
            || async {
                let vm_gone = !stack
                    .emsim
                    .instance_servers()
                    .await?
                    .iter()
                    .any(|s| s["id"] == orphan_id.as_str());
                let volume_gone = !stack
                    .emsim
                    .instance_volumes()
                    .await?
                    .iter()
                    .any(|v| v["id"] == orphan_volume.as_str());
                Ok((vm_gone && volume_gone).then_some(()))
            },
        )
        .await?;
        ensure!(
            created.elapsed() >= GRACE,
            "swept before the grace ({:?})",
            created.elapsed()
        );
        ensure!(
            stack
                .emsim
                .instance_servers()
                .await?
                .iter()
                .any(|s| s["id"] == foreign["id"]),
            "the foreign VM was touched"
        );
        ensure!(
            scenario::nodeclaims(stack).await? == before,
            "sweeping touched a NodeClaim"
        );

        // 3. A newer image for the NodeClass: the VMs drift and are replaced.
        kubeutil::apply_yaml(
            &stack.client,
            &stack.instance_nodeclass_yaml("vms", e2e::stack::NEXT_TALOS_VERSION),
        )
        .await?;
        let old: BTreeSet<String> = before.keys().cloned().collect();
        wait::until(
            "both VMs replaced after the image change",
            Duration::from_secs(300),
            Duration::from_secs(1),
            || async {
                let now = scenario::nodeclaims(stack).await?;
                let replaced = now.len() == 2
                    && now.keys().all(|k| !old.contains(k))
                    && now.values().all(|p| !p.is_empty());
                Ok(replaced.then_some(now))
            },
        )
        .await?;
        scenario::wait_pods_running(stack, "safe", 2, Duration::from_secs(240)).await?;
        let next_image = format!("talos-{}-amd64", e2e::stack::NEXT_TALOS_VERSION);
        for vm in stack.owned_vms().await? {
            ensure!(
                vm["image"]["name"] == next_image.as_str(),
                "VM {} boots {}",
                vm["id"],
                vm["image"]["name"]
            );
        }

        scenario::scale(stack, "safe", 0).await?;
        // consolidateAfter: Never; delete the NodePool's claims by hand.
        kubeutil::nodepools(&stack.client)
            .delete("vms", &Default::default())
            .await?;
        // The foreign VM is not ours to clean: remove it so that the volume check holds.
        let foreign_id = foreign["id"].as_str().context("foreign id")?;
        stack
            .emsim
            .user_delete_vm(e2e::stack::SECRET_KEY, ZONE, foreign_id)
            .await?;
        nothing_billed_left(stack).await?;
        stack.assert_no_secrets_in_logs()
    })
    .await
}
