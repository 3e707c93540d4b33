//! Issue 3: offers whose install disk is `sda` (SATA HDDs) and offers whose
//! disk is `nvme0n1` both become nodes; the image lands on the right device.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use e2e::kubeutil;
use e2e::progress::ClaimWatch;
use e2e::scenario;
use e2e::stack::{Stack, StackOptions};

/// (NodePool, offer, the disk the rescue system shows first).
const CASES: [(&str, &str, &str); 2] = [
    ("sata", "EM-L105X-SATA", "sda"),
    ("nvme", "EM-I215E-NVME", "nvme0n1"),
];

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sda_and_nvme_offers_both_join_with_the_image_on_their_disk() -> Result<()> {
    let mut opts = StackOptions::for_test("install-disks")?;
    opts.time_scale = 0.01;
    scenario::with_stack(opts, run).await
}

async fn run(stack: &mut Stack) -> Result<()> {
    stack.create_nodeclass("default").await?;
    let watch = ClaimWatch::start(&stack.client);
    for (pool, offer, _) in CASES {
        kubeutil::apply_yaml(
            &stack.client,
            &Stack::nodepool_yaml(
                pool,
                "default",
                &scenario::instance_types_requirement(&[offer]),
            ),
        )
        .await?;
        kubeutil::apply_yaml(
            &stack.client,
            &scenario::inflate_yaml_on(pool, 1, "1", &[("karpenter.sh/nodepool", pool)], true),
        )
        .await?;
    }
    for (pool, _, _) in CASES {
        scenario::wait_pods_running(stack, pool, 1, Duration::from_secs(240))
            .await
            .with_context(|| format!("pool {pool}"))?;
    }
    let claims = watch.snapshot();
    ensure!(
        claims.len() == CASES.len(),
        "expected one NodeClaim per pool: {:?}",
        claims.keys().collect::<Vec<_>>()
    );
    for (pool, offer, disk) in CASES {
        let claim = claims
            .values()
            .find(|c| c.nodepool.as_deref() == Some(pool))
            .with_context(|| format!("no NodeClaim in pool {pool}"))?;
        ensure!(
            claim.instance_type.as_deref() == Some(offer),
            "{pool}: NodeClaim on {:?}, expected {offer}",
            claim.instance_type
        );
        let server = claim.server_id().context("server id")?;
        let sim = stack
            .talossim
            .server(&server)
            .await?
            .with_context(|| format!("{pool}: no talos-sim record of {server}"))?;
        ensure!(
            sim["disk"]["name"] == disk,
            "{pool}: talos-sim's disk is {}, expected {disk}",
            sim["disk"]["name"]
        );
        ensure!(
            sim["disk"]["image_sha256"] == stack.image_payload_sha256.as_str(),
            "{pool}: the disk does not hold the served image"
        );
        let device = format!("/dev/{disk}");
        let commands: Vec<&str> = sim["commands"]
            .as_array()
            .context("commands")?
            .iter()
            .filter_map(|c| c.as_str())
            .collect();
        let writes: Vec<&&str> = commands.iter().filter(|c| c.contains("curl")).collect();
        ensure!(
            !writes.is_empty() && writes.iter().all(|c| c.contains(&device)),
            "{pool}: the image was not written to {device}: {writes:?}"
        );
        // The disk found in rescue is persisted and rendered into the config.
        let obj = kubeutil::nodeclaims(&stack.client).get(&claim.name).await?;
        ensure!(
            kubeutil::annotation(
                &obj,
                &format!("{}disk", kubeutil::INSTALL_ANNOTATION_PREFIX)
            )
            .is_some_and(|d| d.trim_start_matches("/dev/") == disk),
            "{pool}: install disk annotation is not {disk}"
        );
        let config = sim["applied_configs"]
            .as_array()
            .and_then(|c| c.last())
            .and_then(|c| c["yaml"].as_str())
            .context("no applied config")?;
        ensure!(
            config.contains(&format!("disk: {device}")),
            "{pool}: the machine config does not install to {device}"
        );
        println!(
            "{pool}: {offer} -> image on {device}, node {} joined",
            claim.name
        );
    }
    let pools: Vec<&str> = CASES.iter().map(|c| c.0).collect();
    scenario::scale_to_zero_and_check_clean(stack, &pools, Duration::from_secs(180)).await
}
