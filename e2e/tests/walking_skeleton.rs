//! Issue 2's scenario: a pending pod becomes a Talos node on a simulated Elastic
//! Metal server through real Karpenter core, then scale to zero removes it all.
//! Every step is checked against the simulators' own records, so a skipped or
//! faked step fails the test.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use e2e::scenario::{self, parse_provider_id};
use e2e::stack::{Stack, StackOptions};
use e2e::{kubeutil, wait};
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pending_pods_become_a_talos_node_and_scale_to_zero_removes_it() -> Result<()> {
    e2e::init_tracing();
    let stack = Stack::up(StackOptions::for_test("walking-skeleton")?).await?;
    let result = run(&stack).await;
    if result.is_err() {
        eprintln!("{}", stack.diagnostics());
    }
    stack.stop().await;
    result
}

async fn run(stack: &Stack) -> Result<()> {
    stack.create_nodeclass("default").await?;
    kubeutil::apply_yaml(
        &stack.client,
        &Stack::nodepool_yaml("default", "default", ""),
    )
    .await?;

    // 1. Pods that fit no node -> NodeClaim -> server -> Talos -> Node -> pods Running.
    kubeutil::apply_yaml(&stack.client, &scenario::inflate_yaml("inflate", 3, "1")).await?;
    let placed = scenario::wait_pods_running(stack, "inflate", 3, Duration::from_secs(300)).await?;
    let node_names: std::collections::BTreeSet<_> = placed.values().cloned().collect();
    ensure!(
        node_names.len() == 1,
        "expected the 3 pods on one node, got {placed:?}"
    );
    let node_name = node_names.into_iter().next().unwrap();

    let ncs = scenario::nodeclaims(stack).await?;
    ensure!(ncs.len() == 1, "expected one NodeClaim, got {ncs:?}");
    let (nc_name, provider_id) = ncs.into_iter().next().unwrap();
    ensure!(
        nc_name == node_name,
        "Node {node_name} should be named after NodeClaim {nc_name}"
    );
    let (zone, server_id) = parse_provider_id(&provider_id)?;
    ensure!(zone == e2e::stack::ZONE, "server ordered in {zone}");

    let nodes: Api<Node> = Api::all(stack.client.clone());
    let node = nodes.get(&node_name).await?;
    ensure!(
        node.spec.as_ref().and_then(|s| s.provider_id.as_deref()) == Some(provider_id.as_str()),
        "Node providerID != NodeClaim providerID"
    );
    // Karpenter marks the NodeClaim Initialized shortly after the Node is Ready.
    let nodeclaims = kubeutil::nodeclaims(&stack.client);
    wait::until(
        "NodeClaim Launched, Registered and Initialized",
        Duration::from_secs(60),
        Duration::from_millis(250),
        || {
            let (api, name) = (nodeclaims.clone(), nc_name.clone());
            async move {
                let nc = api.get(&name).await?;
                let all = ["Launched", "Registered", "Initialized"]
                    .iter()
                    .all(|c| kubeutil::condition(&nc, c).as_deref() == Some("True"));
                Ok(all.then_some(()))
            }
        },
    )
    .await?;

    // emsim's records: one order, with ownership tags, rebooted into rescue with our key.
    let servers = stack.owned_servers().await?;
    ensure!(
        servers.len() == 1,
        "expected exactly one owned server, got {}",
        servers.len()
    );
    let server = &servers[0];
    ensure!(
        server["id"] == server_id.as_str(),
        "owned server is not the NodeClaim's"
    );
    let tags: Vec<&str> = server["tags"]
        .as_array()
        .context("tags")?
        .iter()
        .filter_map(|t| t.as_str())
        .collect();
    for want in [
        format!("karpenter.sh/nodeclaim={nc_name}"),
        "karpenter.sh/nodepool=default".into(),
        "karpenter.scaleway.com/nodeclass=default".into(),
    ] {
        ensure!(
            tags.contains(&want.as_str()),
            "server tags {tags:?} lack {want}"
        );
    }
    let boots = server["boot_history"].as_array().context("boot_history")?;
    let rescue = boots
        .iter()
        .find(|b| b["boot_type"] == "rescue")
        .context("no rescue boot in emsim's records")?;
    ensure!(
        rescue["ssh_key_ids"]
            .as_array()
            .is_some_and(|k| k.iter().any(|k| k == stack.ssh_key_id.as_str())),
        "rescue reboot without the NodeClass SSH key: {rescue}"
    );
    ensure!(
        boots.last().is_some_and(|b| b["boot_type"] == "normal"),
        "last boot is not normal: {boots:?}"
    );

    // talos-sim's records: the pipeline ran, the served image is on the disk, the config is right.
    ensure!(
        stack.image.downloads() >= 1,
        "the image server was never asked for the image"
    );
    let sims = stack.talossim.servers().await?;
    let sim = sims
        .iter()
        .find(|s| s["id"] == server_id.as_str())
        .context("talos-sim has no record of the server")?;
    let commands: Vec<&str> = sim["commands"]
        .as_array()
        .context("commands")?
        .iter()
        .filter_map(|c| c.as_str())
        .collect();
    ensure!(
        commands.iter().any(|c| c.contains("lsblk")),
        "no lsblk in rescue: {commands:?}"
    );
    ensure!(
        commands
            .iter()
            .any(|c| c.contains("curl") && c.contains("xz -d") && c.contains("tee /dev/")),
        "no curl | xz -d | ... | tee /dev/<disk> in rescue: {commands:?}"
    );
    // The write is verified by reading the disk back before the reboot.
    ensure!(
        commands.iter().any(|c| c.contains("dd if=/dev/")
            && c.contains("count_bytes")
            && c.contains("sha256sum")),
        "no read-back verification in rescue: {commands:?}"
    );
    ensure!(
        sim["disk"]["image_sha256"] == stack.image_payload_sha256.as_str(),
        "disk does not hold the served image: {} vs {}",
        sim["disk"]["image_sha256"],
        stack.image_payload_sha256
    );
    let configs = sim["applied_configs"]
        .as_array()
        .context("applied_configs")?;
    ensure!(
        configs.len() == 1,
        "expected one applied config, got {}",
        configs.len()
    );
    let yaml = configs[0]["yaml"]
        .as_str()
        .or(configs[0].as_str())
        .context("config yaml")?;
    ensure!(
        yaml.contains(&format!("hostname: {nc_name}")),
        "config does not name the node"
    );
    ensure!(
        yaml.contains(&format!("provider-id: {provider_id}")),
        "config lacks the provider id"
    );
    ensure!(
        yaml.contains("karpenter.sh/unregistered"),
        "config lacks the unregistered taint"
    );
    ensure!(
        yaml.contains("karpenter.sh/nodepool: default"),
        "config lacks the NodeClaim labels"
    );

    // The Node carries what Karpenter expects.
    let labels = node.metadata.labels.clone().unwrap_or_default();
    for key in [
        "node.kubernetes.io/instance-type",
        "topology.kubernetes.io/zone",
        "karpenter.sh/capacity-type",
        "kubernetes.io/arch",
        "karpenter.sh/nodepool",
    ] {
        ensure!(
            labels.contains_key(key),
            "Node lacks label {key}: {labels:?}"
        );
    }
    let taints = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default();
    ensure!(
        !taints.iter().any(|t| t.key == "karpenter.sh/unregistered"),
        "unregistered taint still on the Node"
    );

    // 2. Scale to zero: consolidation drains and deletes the node, the provider deletes the server.
    scenario::scale(stack, "inflate", 0).await?;
    scenario::wait_all_gone(stack, Duration::from_secs(180)).await?;
    let deletes = stack.emsim.counters().await?;
    tracing::info!(%deletes, "emsim counters");
    let all = stack.emsim.servers().await?;
    ensure!(
        all.iter().all(|s| s["id"] != server_id.as_str()
            || s["status"] == "deleted"
            || s["deleted"] == true),
        "server {server_id} still in emsim: {all:?}"
    );
    wait::until(
        "talos-sim to power the server off",
        Duration::from_secs(30),
        Duration::from_millis(500),
        || async {
            let sims = stack.talossim.servers().await?;
            Ok(sims
                .iter()
                .find(|s| s["id"] == server_id.as_str())
                .is_none_or(|s| s["state"] == "off")
                .then_some(()))
        },
    )
    .await?;
    stack.assert_no_secrets_in_logs()?;
    Ok(())
}
