//! `kps-demo --metal-only`: 3 pods that fit no node, NodeClaims, servers
//! and install phases shown live until the pods run on a freshly installed
//! Elastic Metal node; then scaled to zero and the server deleted.

use std::time::{Duration, Instant};

use anyhow::Result;
use e2e::kubeutil;
use e2e::scenario;
use e2e::stack::{self, Stack};
use kube::ResourceExt;
use kube::api::ListParams;

/// The story; with `keep`, it returns once the pods run (nothing scaled down).
pub async fn run(stack: &Stack, replicas: u32, keep: bool) -> Result<()> {
    stack.create_nodeclass("default").await?;
    kubeutil::apply_yaml(
        &stack.client,
        // The policy recommended for on-demand Elastic Metal (docs/install.md):
        // a consolidation replace would outlast Karpenter's 10-minute window.
        &Stack::nodepool_yaml("default", "default", "").replace(
            "consolidationPolicy: WhenEmptyOrUnderutilized",
            "consolidationPolicy: WhenEmpty",
        ),
    )
    .await?;
    println!("NodeClass Ready. Creating Deployment 'inflate' with {replicas} pods of 1 CPU...\n");
    kubeutil::apply_yaml(
        &stack.client,
        &scenario::inflate_yaml("inflate", replicas, "1"),
    )
    .await?;

    let start = Instant::now();
    loop {
        let view = render(stack)
            .await
            .unwrap_or_else(|e| format!("(view unavailable: {e:#})"));
        println!("--- t+{:>5.1}s ---\n{view}", start.elapsed().as_secs_f64());
        let done = scenario::wait_pods_running(
            stack,
            "inflate",
            replicas as usize,
            Duration::from_millis(1),
        )
        .await
        .is_ok();
        if done {
            println!(
                "All {replicas} pods are Running on a bare-metal node installed through rescue + dd ({:.1}s).",
                start.elapsed().as_secs_f64()
            );
            break;
        }
        anyhow::ensure!(
            start.elapsed() < Duration::from_secs(600),
            "pods not running after 10 minutes"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    if keep {
        return Ok(());
    }
    println!(
        "\nScaling to zero: Karpenter consolidates the empty node and the provider deletes the server..."
    );
    scenario::scale(stack, "inflate", 0).await?;
    let t = Instant::now();
    scenario::wait_all_gone(stack, Duration::from_secs(180)).await?;
    println!(
        "Node, NodeClaim and server gone ({:.1}s). emsim holds no server of this cluster.",
        t.elapsed().as_secs_f64()
    );
    Ok(())
}

async fn render(stack: &Stack) -> Result<String> {
    let mut out = String::new();
    let ncs = kubeutil::nodeclaims(&stack.client)
        .list(&ListParams::default())
        .await?;
    out.push_str("NODECLAIM                 TYPE              PROVIDER-ID                                            LAUNCHED REGISTERED INITIALIZED\n");
    for nc in &ncs.items {
        let c = |t| kubeutil::condition(nc, t).unwrap_or_else(|| "-".into());
        out.push_str(&format!(
            "{:<25} {:<17} {:<54} {:<8} {:<10} {}\n",
            nc.name_any(),
            nc.labels()
                .get("node.kubernetes.io/instance-type")
                .cloned()
                .unwrap_or_default(),
            nc.data["status"]["providerID"].as_str().unwrap_or("-"),
            c("Launched"),
            c("Registered"),
            c("Initialized"),
        ));
    }
    let sims = stack.talossim.servers().await.unwrap_or_default();
    out.push_str("SERVER                                OFFER            ZONE      STATUS       BOOT     OS (talos-sim)\n");
    for s in stack.owned_servers().await? {
        let id = s["id"].as_str().unwrap_or_default();
        let os = sims
            .iter()
            .find(|x| x["id"] == id)
            .and_then(|x| x["state"].as_str())
            .unwrap_or("off");
        out.push_str(&format!(
            "{:<37} {:<16} {:<9} {:<12} {:<8} {}\n",
            id,
            s["offer_name"].as_str().unwrap_or_default(),
            s["zone"].as_str().unwrap_or(stack::ZONE),
            s["status"].as_str().unwrap_or_default(),
            s["boot_type"].as_str().unwrap_or_default(),
            os,
        ));
    }
    Ok(out)
}
