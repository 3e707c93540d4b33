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

pub(crate) fn opts(name: &str) -> Result<StackOptions> {
    let mut opts = StackOptions::for_test(name)?;
    opts.instances = true;
    Ok(opts)
}

/// The VM a NodeClaim's providerID names, from emsim's records (deleted
/// ones included).
pub(crate) async fn vm_of(stack: &Stack, provider_id: &str) -> Result<Value> {
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
pub(crate) async fn wait_user_data_gone(stack: &Stack, provider_id: &str) -> Result<()> {
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
pub(crate) async fn nothing_billed_left(stack: &Stack) -> Result<()> {
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

        // Create's duration as core measured it (a figure for docs/figures.md,
        // not a limit: emsim answers on loopback).
        let metrics = stack.bridge_metrics(0).await?;
        let create = [("method", "Create")];
        let sum = scenario::metric_sum(
            &metrics,
            "karpenter_cloudprovider_duration_seconds_sum",
            &create,
        );
        let count = scenario::metric_sum(
            &metrics,
            "karpenter_cloudprovider_duration_seconds_count",
            &create,
        );
        tracing::info!(
            creates = count,
            mean_s = sum / count.max(1.0),
            "VM Create duration (core's karpenter_cloudprovider_duration_seconds)"
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
