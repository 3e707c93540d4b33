#![forbid(unsafe_code)]
//! `just demo`: the whole system against the simulators. Brings everything up,
//! asks for 3 pods that fit no node, and shows NodeClaims, servers and install
//! phases live until the pods run on a freshly installed bare-metal node.

use std::time::{Duration, Instant};

use anyhow::Result;
use e2e::scenario;
use e2e::stack::{Stack, StackOptions};
use e2e::{kubeutil, stack};
use kube::ResourceExt;
use kube::api::ListParams;

#[tokio::main]
async fn main() -> Result<()> {
    let keep = std::env::args().any(|a| a == "--keep");
    let replicas: u32 = std::env::var("DEMO_REPLICAS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(3);
    e2e::install_crypto();
    let _ = tracing_subscriber::fmt().with_env_filter("warn").try_init();

    println!("Starting the control plane, emsim, talos-sim, the provider and Karpenter core...");
    let mut opts = StackOptions::for_test("demo")?;
    // Slower than the tests' 0.01 so that each install phase stays on screen
    // for a refresh or two (a 4-minute delivery takes 60 s at 0.25).
    if std::env::var_os("KPS_TIME_SCALE").is_none() {
        opts.time_scale = 0.25;
    }
    println!("emsim time scale: {} (KPS_TIME_SCALE)", opts.time_scale);
    println!("logs: {}", opts.work_dir.join("logs").display());
    let stack = Stack::up(opts).await?;
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
        let view = render(&stack)
            .await
            .unwrap_or_else(|e| format!("(view unavailable: {e:#})"));
        println!("--- t+{:>5.1}s ---\n{view}", start.elapsed().as_secs_f64());
        let done = scenario::wait_pods_running(
            &stack,
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
        if start.elapsed() > Duration::from_secs(600) {
            eprintln!("{}", stack.diagnostics());
            anyhow::bail!("pods not running after 10 minutes");
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    if keep {
        println!(
            "\nKUBECONFIG={} ; emsim at {} ; Ctrl-C to stop.",
            stack.cp.kubeconfig_path().display(),
            stack.emsim_url()
        );
        tokio::signal::ctrl_c().await?;
    } else {
        println!(
            "\nScaling to zero: Karpenter consolidates the empty node and the provider deletes the server..."
        );
        scenario::scale(&stack, "inflate", 0).await?;
        let t = Instant::now();
        scenario::wait_all_gone(&stack, Duration::from_secs(180)).await?;
        println!(
            "Node, NodeClaim and server gone ({:.1}s). emsim holds no server of this cluster.",
            t.elapsed().as_secs_f64()
        );
    }
    stack.stop().await;
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
