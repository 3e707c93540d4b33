#![forbid(unsafe_code)]
//! `just demo` (`./dev demo`): the whole system against the simulators,
//! with a live view. By default the project's mission: a burst lands on
//! Scaleway Instances, the demand planner stages Elastic Metal for the load
//! that stays, Karpenter core's consolidation moves the pods onto it and
//! deletes the VMs, and the bill before and after is read from emsim.
//! `--metal-only`: one Elastic Metal server installed through rescue + dd
//! for 3 pods, then scaled to zero.
//!
//! The demo ends on its own or on Ctrl-C, and stops everything it started.

mod demokit;

use std::time::Instant;

use anyhow::Result;
use clap::Parser;
use e2e::stack::{Stack, StackOptions};

/// The whole system against the simulators, with a live view.
#[derive(Parser)]
#[command(name = "kps-demo")]
struct Args {
    /// Bare metal only: one Elastic Metal server installed through rescue +
    /// dd for the pods, then scaled to zero.
    #[arg(long)]
    metal_only: bool,
    /// Leave everything running at the end (KUBECONFIG printed) until Ctrl-C.
    #[arg(long)]
    keep: bool,
    /// Pods of the workload (default: 6, or 3 with --metal-only).
    #[arg(long, env = "DEMO_REPLICAS")]
    replicas: Option<u32>,
}

#[tokio::main]
async fn main() -> Result<()> {
    let args = Args::parse();
    e2e::install_crypto();
    let _ = tracing_subscriber::fmt().with_env_filter("warn").try_init();
    let started = Instant::now();

    let mut opts = StackOptions::for_test("demo")?;
    // Without KPS_TIME_SCALE, slower than the tests' 0.01 so that each step
    // stays on screen for a look or two.
    let scaled = std::env::var_os("KPS_TIME_SCALE").is_some();
    if args.metal_only {
        if !scaled {
            // A 4-minute delivery takes 60 s.
            opts.time_scale = 0.25;
        }
    } else {
        demokit::mission::options(&mut opts, scaled);
    }
    println!("Starting the control plane, emsim, talos-sim, the provider and Karpenter core...");
    println!(
        "emsim time scale: {} (KPS_TIME_SCALE){}",
        opts.time_scale,
        if opts.real_timings {
            "; Scaleway's real delivery and boot durations (emsim --timings real)"
        } else {
            ""
        }
    );
    println!("logs: {}", opts.work_dir.join("logs").display());
    let work_dir = opts.work_dir.clone();
    let stack = tokio::select! {
        stack = Stack::up(opts) => stack?,
        _ = tokio::signal::ctrl_c() => {
            // Dropping the unfinished start stops what it had started.
            println!("\nInterrupted while starting; everything started is stopped.");
            std::process::exit(130);
        }
    };

    let story = async {
        if args.metal_only {
            demokit::metal::run(&stack, args.replicas.unwrap_or(3), args.keep).await
        } else {
            demokit::mission::run(&stack, args.replicas.unwrap_or(6)).await
        }
    };
    let outcome = tokio::select! {
        r = story => Some(r),
        _ = tokio::signal::ctrl_c() => None,
    };
    match &outcome {
        Some(Ok(())) if args.keep => {
            println!(
                "\nKUBECONFIG={} ; emsim at {} ; Ctrl-C to stop.",
                stack.cp.kubeconfig_path().display(),
                stack.emsim_url()
            );
            tokio::signal::ctrl_c().await?;
        }
        Some(Ok(())) => {}
        Some(Err(e)) => eprintln!("\ndemo failed: {e:#}\n{}", stack.diagnostics()),
        None => println!("\nInterrupted (Ctrl-C)."),
    }
    println!("Stopping the control plane, emsim, talos-sim, the provider and Karpenter core...");
    stack.stop().await;
    if matches!(outcome, Some(Ok(()))) {
        e2e::scenario::free_work_dir(&work_dir);
    }
    println!(
        "Everything the demo started is stopped ({:.0} s in all); logs in {}.",
        started.elapsed().as_secs_f64(),
        work_dir.join("logs").display()
    );
    match outcome {
        Some(r) => r,
        None => std::process::exit(130),
    }
}
