//! Issue 12's scenarios for Scaleway Instances, through real Karpenter core:
//! a VM joins from its user data and scale to zero leaves nothing billed; a
//! pod asking for a GPU lands on the cheapest GPU type that fits. Every step
//! is checked against the simulators' records.

use std::collections::BTreeSet;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use e2e::scenario;
use e2e::stack::{Stack, StackOptions, ZONE};
use e2e::{kubeutil, wait};
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use serde_json::Value;

fn opts(name: &str) -> Result<StackOptions> {
    let mut opts = StackOptions::for_test(name)?;
    opts.instances = true;
    Ok(opts)
}

/// The VM a NodeClaim's providerID names, from emsim's records (deleted
/// ones included).
async fn vm_of(stack: &Stack, provider_id: &str) -> Result<Value> {
    let id = provider_id
        .strip_prefix(&format!("scaleway://instance/{ZONE}/"))
        .with_context(|| format!("{provider_id} is not a VM in {ZONE}"))?;
    stack
        .emsim
        .instance_servers_including_deleted()
        .await?
        .into_iter()
        .find(|s| s["id"] == id)
        .with_context(|| format!("emsim has no VM {id}"))
}

/// Waits until the NodeClaim's VM has no user data left (the provider
/// deletes it once the Node is Ready: it holds the bootstrap token).
async fn wait_user_data_gone(stack: &Stack, provider_id: &str) -> Result<()> {
    wait::until(
        "the VM's user data deleted after the join",
        Duration::from_secs(60),
        Duration::from_millis(250),
        || async {
            let vm = vm_of(stack, provider_id).await?;
            Ok(vm["user_data_keys"]
                .as_array()
                .is_some_and(|k| k.is_empty())
                .then_some(()))
        },
    )
    .await
}

/// After scale to zero: no VM of this cluster left, no volume left at all
/// (every one was a VM's root), no per-node token left.
async fn nothing_billed_left(stack: &Stack) -> Result<()> {
    scenario::wait_all_gone(stack, Duration::from_secs(180)).await?;
    wait::until(
        "every SBS volume deleted",
        Duration::from_secs(60),
        Duration::from_millis(500),
        || async {
            let volumes = stack.emsim.instance_volumes().await?;
            tracing::info!(volumes = volumes.len(), "waiting for the volumes to go");
            Ok(volumes.is_empty().then_some(()))
        },
    )
    .await?;
    let live: Vec<String> = stack
        .emsim
        .instance_servers_including_deleted()
        .await?
        .iter()
        .filter(|s| s["deleted_at"].is_null())
        .map(|s| format!("{} ({})", s["id"], s["state"]))
        .collect();
    ensure!(live.is_empty(), "VMs left in emsim: {live:?}");
    let tokens = scenario::bootstrap_token_secrets(stack).await?;
    ensure!(
        tokens.is_empty(),
        "bootstrap token Secrets left: {tokens:?}"
    );
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn instance_vms_join_from_user_data_and_leave_nothing_billed() -> Result<()> {
    scenario::with_stack(opts("instance-vms")?, async |stack: &mut Stack| {
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
                0,
                &scenario::instance_types_requirement(&["POP2-2C-8G", "POP2-16C-64G"]),
                "",
            ),
        )
        .await?;
        kubeutil::apply_yaml(
            &stack.client,
            &scenario::inflate_yaml_on(
                "web",
                2,
                "500m",
                &[("karpenter.sh/nodepool", "vms")],
                false,
            ),
        )
        .await?;
        let placed = scenario::wait_pods_running(stack, "web", 2, Duration::from_secs(240)).await?;
        let nodes: BTreeSet<String> = placed.values().cloned().collect();
        ensure!(
            nodes.len() == 1,
            "expected both pods on one VM, got {placed:?}"
        );
        let claims = scenario::nodeclaims(stack).await?;
        ensure!(claims.len() == 1, "expected one NodeClaim, got {claims:?}");
        let (claim, pid) = claims.into_iter().next().unwrap();
        ensure!(
            nodes.contains(&claim),
            "the Node is named after its NodeClaim"
        );

        // emsim: the cheapest type that fits, our tags, one power-on, no rescue.
        let vm = vm_of(stack, &pid).await?;
        ensure!(
            vm["commercial_type"] == "POP2-2C-8G",
            "VM is a {}",
            vm["commercial_type"]
        );
        ensure!(
            vm["name"] == claim.as_str(),
            "VM name {} != NodeClaim {claim}",
            vm["name"]
        );
        let tags: Vec<&str> = vm["tags"]
            .as_array()
            .context("tags")?
            .iter()
            .filter_map(Value::as_str)
            .collect();
        for want in [
            format!("karpenter.sh/nodeclaim={claim}"),
            "karpenter.sh/nodepool=vms".into(),
            format!("karpenter.scaleway.com/nodeclass={class}"),
            "karpenter.scaleway.com/cluster=e2e".into(),
            "team=burst".into(),
        ] {
            ensure!(
                tags.contains(&want.as_str()),
                "VM tags {tags:?} lack {want}"
            );
        }
        let poweron = vm["actions"]
            .as_array()
            .context("actions")?
            .iter()
            .filter(|a| a["action"] == "poweron")
            .count();
        ensure!(poweron == 1, "expected one power-on, got {}", vm["actions"]);

        // The Node: the VM's labels, its providerID, Karpenter's taint gone.
        let node: Node = Api::all(stack.client.clone()).get(&claim).await?;
        ensure!(
            node.spec.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(pid.as_str()),
            "Node providerID != {pid}"
        );
        let labels = node.metadata.labels.clone().unwrap_or_default();
        for (k, v) in [
            ("node.kubernetes.io/instance-type", "POP2-2C-8G"),
            ("karpenter.scaleway.com/instance-family", "POP2"),
            ("topology.kubernetes.io/zone", ZONE),
            ("karpenter.sh/nodepool", "vms"),
        ] {
            ensure!(
                labels.get(k).map(String::as_str) == Some(v),
                "Node label {k}={v} missing: {labels:?}"
            );
        }
        ensure!(
            !scenario::node_has_taint(&node, "karpenter.sh/unregistered"),
            "unregistered taint left"
        );

        // The join cleaned up: user data gone, the node's token revoked.
        wait_user_data_gone(stack, &pid).await?;
        wait::until(
            "the node's bootstrap token revoked",
            Duration::from_secs(60),
            Duration::from_millis(250),
            || async {
                Ok(scenario::bootstrap_token_secrets(stack)
                    .await?
                    .is_empty()
                    .then_some(()))
            },
        )
        .await?;

        // Scale to zero: the VM, its SBS root volume, its IP: nothing billed left.
        scenario::scale(stack, "web", 0).await?;
        nothing_billed_left(stack).await?;
        let gone = vm_of(stack, &pid).await?;
        ensure!(!gone["deleted_at"].is_null(), "VM not deleted: {gone}");
        stack.assert_no_secrets_in_logs()
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn instance_gpu_pod_lands_on_the_cheapest_gpu_type_that_fits() -> Result<()> {
    scenario::with_stack(opts("instance-gpu")?, async |stack: &mut Stack| {
        let class = stack
            .create_instance_nodeclass(&stack.instance_nodeclass_yaml("gpu", &stack.opts.talos_version))
            .await?;
        let gpu_only = "        - key: karpenter.scaleway.com/instance-gpu-count\n          operator: Exists\n";
        let taint = "      taints:\n        - {key: nvidia.com/gpu, value: \"true\", effect: NoSchedule}\n";
        kubeutil::apply_yaml(
            &stack.client,
            &Stack::instance_nodepool_yaml("gpu", &class, 0, gpu_only, taint),
        )
        .await?;
        let pod = scenario::inflate_yaml("trainer", 1, "1")
            .replace(
                "requests: {cpu: \"1\", memory: 256Mi}",
                "requests: {cpu: \"1\", memory: 256Mi, nvidia.com/gpu: 1}\n            limits: {nvidia.com/gpu: 1}",
            )
            .replace(
                "      terminationGracePeriodSeconds: 0\n",
                "      terminationGracePeriodSeconds: 0\n      tolerations:\n        - {key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}\n",
            );
        kubeutil::apply_yaml(&stack.client, &pod).await?;
        let placed = scenario::wait_pods_running(stack, "trainer", 1, Duration::from_secs(240)).await?;
        let node_name = placed.values().next().context("placed")?.clone();
        let node: Node = Api::all(stack.client.clone()).get(&node_name).await?;
        let labels = node.metadata.labels.clone().unwrap_or_default();
        // The seeded fr-par-2 GPU types: L4-1-24G 0.7875 €/h, L40S-1-48G
        // 1.47 €/h (scarce, still sold), H100-1-80G (shortage), H100-SXM-8-80G.
        ensure!(
            labels.get("node.kubernetes.io/instance-type").map(String::as_str) == Some("L4-1-24G"),
            "GPU pod on {:?}, not the cheapest GPU type L4-1-24G",
            labels.get("node.kubernetes.io/instance-type")
        );
        ensure!(labels.get("karpenter.scaleway.com/instance-gpu-name").map(String::as_str) == Some("nvidia-l4"));
        let gpus = node
            .status
            .as_ref()
            .and_then(|s| s.capacity.as_ref())
            .and_then(|c| c.get("nvidia.com/gpu"))
            .map(|q| q.0.clone());
        ensure!(gpus.as_deref() == Some("1"), "Node capacity nvidia.com/gpu = {gpus:?}");
        let (_, pid) = scenario::nodeclaims(stack).await?.into_iter().next().context("claim")?;
        wait_user_data_gone(stack, &pid).await?;

        scenario::scale(stack, "trainer", 0).await?;
        nothing_billed_left(stack).await?;
        stack.assert_no_secrets_in_logs()
    })
    .await
}

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
        scenario::wait_pods_running(stack, "mixed", 1, Duration::from_secs(240)).await?;
        let t0 = std::time::Instant::now();
        let claims = launched_by_pool(stack).await?;
        ensure!(claims.iter().all(|(_, p)| p == "vms"), "claims {claims:?}");
        ensure!(
            refused_em_orders(stack).await? == 1,
            "refused EM orders != 1"
        );

        // 2. More pods inside the TTL: VMs again, no second doomed EM order.
        scenario::scale(stack, "mixed", 2).await?;
        scenario::wait_pods_running(stack, "mixed", 2, Duration::from_secs(240)).await?;
        let claims = launched_by_pool(stack).await?;
        ensure!(
            claims.len() == 2 && claims.iter().all(|(_, p)| p == "vms"),
            "claims {claims:?}"
        );
        ensure!(
            t0.elapsed() < TTL,
            "step 2 outlasted the TTL; it proves nothing"
        );
        ensure!(
            refused_em_orders(stack).await? == 1,
            "a second EM order inside the TTL"
        );

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
