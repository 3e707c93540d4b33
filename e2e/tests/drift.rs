//! Issue 5's drift scenario, on three nodes of a NodePool whose only
//! disruption is drift, within a budget of one node:
//!
//! (a) an upgrade of the provider to a new version of its NodeClass hash: the
//!     NodeClaims carry an older hash version (and a hash the new code would
//!     not compute) while the provider restarts. Nothing may drift, nothing
//!     may be deleted, and the provider re-stamps them with the current hash.
//! (b) a new Talos version in the NodeClass: every NodeClaim is marked
//!     `Drifted` with reason `ImageDrift`, Karpenter replaces all of them, at
//!     no instant are more nodes disrupted than the budget allows, and the
//!     replacements run the new image (talos-sim's record of each disk).
//!
//! Disruption is sampled every 250 ms from the API server: a NodeClaim being
//! deleted or a Node carrying `karpenter.sh/disrupted` counts as disrupted,
//! and against the budget until its server's deletion was accepted
//! (`InstanceTerminating=True`), which is where Karpenter stops counting it.
//! Drift marks are also read from Karpenter's own log ("marking drifted"), so
//! a mark that came and went between two samples is still seen.

use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use e2e::scenario;
use e2e::stack::{BRIDGE, Stack, StackOptions};
use e2e::{kubeutil, wait};
use k8s_openapi::api::core::v1::Node;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, ListParams, Patch, PatchParams};

const HASH: &str = "karpenter.scaleway.com/nodeclass-hash";
const HASH_VERSION: &str = "karpenter.scaleway.com/nodeclass-hash-version";
const DISRUPTED_TAINT: &str = "karpenter.sh/disrupted";
const POOL: &str = "drift";
const APP: &str = "drift";
const NODES: usize = 3;
/// The NodePool's disruption budget, in nodes.
const BUDGET: usize = 1;
/// The Talos release the NodeClass moves to (the stack starts on v1.13.9).
const NEW_VERSION: &str = "v1.13.10";
/// Karpenter's disruption controller polls every 10 s; the quiet window
/// after a hash-version upgrade covers a few polls and re-stamp passes.
const QUIET: Duration = Duration::from_secs(30);
const SAMPLE: Duration = Duration::from_millis(250);
/// `serve` arguments: the re-stamp pass runs at start and every
/// `--resume-interval` (default 60 s); every 5 s the quiet window spans
/// several passes.
const PROVIDER_ARGS: &[&str] = &["--resume-interval", "5s"];

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn image_change_replaces_every_node_within_budget_and_hash_upgrade_drifts_nothing()
-> Result<()> {
    let mut opts = StackOptions::for_test("drift")?;
    opts.provider_args = PROVIDER_ARGS.iter().map(|s| s.to_string()).collect();
    scenario::with_stack(opts, run).await
}

async fn run(stack: &mut Stack) -> Result<()> {
    let started = Instant::now();
    stack.create_nodeclass("default").await?;
    kubeutil::apply_yaml(
        &stack.client,
        &scenario::nodepool_yaml_drift_only(POOL, "default", "", &BUDGET.to_string())?,
    )
    .await?;
    kubeutil::apply_yaml(
        &stack.client,
        &scenario::inflate_yaml_on(
            APP,
            NODES as u32,
            "1",
            &[("karpenter.sh/nodepool", POOL)],
            true,
        ),
    )
    .await?;
    scenario::wait_pods_running(stack, APP, NODES, Duration::from_secs(300)).await?;
    let claims = wait_claims_initialized(stack, NODES).await?;
    let first: BTreeSet<String> = claims.iter().map(|c| c.name_any()).collect();
    println!(
        "drift: {NODES} nodes up after {:.1} s",
        started.elapsed().as_secs_f64()
    );

    // Create stamped every NodeClaim with the NodeClass hash, per component.
    let mut stamped = BTreeMap::new();
    for c in &claims {
        let version = kubeutil::annotation(c, HASH_VERSION)
            .with_context(|| format!("NodeClaim {} lacks {HASH_VERSION}", c.name_any()))?;
        let hash = kubeutil::annotation(c, HASH)
            .with_context(|| format!("NodeClaim {} lacks {HASH}", c.name_any()))?;
        let parts = hash_components(&hash)?;
        ensure!(
            parts.keys().map(String::as_str).collect::<Vec<_>>() == ["config", "disk", "image"],
            "hash {hash:?} of {} is not image=,config=,disk=",
            c.name_any()
        );
        stamped.insert(c.name_any(), (version, hash));
    }
    let (version, hash) = stamped.values().next().cloned().context("no NodeClaim")?;
    ensure!(
        stamped
            .values()
            .all(|v| *v == (version.clone(), hash.clone())),
        "NodeClaims of one NodeClass carry different hashes: {stamped:?}"
    );
    ensure!(version != "v0", "the current hash version is already v0");
    println!("drift: NodeClaims stamped {HASH_VERSION}={version} {HASH}={hash}");

    hash_version_upgrade(stack, &first, &version, &hash).await?;
    image_change(stack, &first, &hash).await?;

    // Teardown: let consolidation remove the empty nodes, check nothing leaks.
    let pools = kubeutil::nodepools(&stack.client);
    pools
        .patch(
            POOL,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"spec": {"disruption": {
                "consolidateAfter": "5s", "budgets": [{"nodes": "100%"}]}}})),
        )
        .await?;
    scenario::scale_to_zero_and_check_clean(stack, &[APP], Duration::from_secs(180)).await?;
    println!(
        "drift: scenario done in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    Ok(())
}

/// (a) NodeClaims stamped by an older hash version, with a hash that matches
/// nothing, survive a provider restart undrifted and come out re-stamped.
async fn hash_version_upgrade(
    stack: &mut Stack,
    claims: &BTreeSet<String>,
    version: &str,
    hash: &str,
) -> Result<()> {
    let marks_before = drift_marks(stack)?.len();
    ensure!(marks_before == 0, "drift marked before any change");
    let api = kubeutil::nodeclaims(&stack.client);
    let garbage = "image=00000000,config=00000000,disk=00000000";
    stack.kill_provider()?;
    for name in claims {
        api.patch(
            name,
            &PatchParams::default(),
            &Patch::Merge(serde_json::json!({"metadata": {"annotations": {
                HASH_VERSION: "v0", HASH: garbage}}})),
        )
        .await
        .with_context(|| format!("stamping {name} with hash version v0"))?;
    }
    stack.start_provider()?;
    let restarted = Instant::now();

    // Until every NodeClaim is re-stamped, then for a quiet window: every
    // sample must show the same NodeClaims, none deleting, drifted or tainted.
    let mut restamped_at = None;
    let mut samples = 0u32;
    loop {
        // Nodes first: core taints the next node only once the previous
        // NodeClaim stopped counting (InstanceTerminating), so NodeClaims
        // read after the taints are never older than them; the other order
        // could count a stale NodeClaim next to a fresh taint.
        let nodes = node_taints(stack).await?;
        let list = api.list(&ListParams::default()).await?.items;
        samples += 1;
        let names: BTreeSet<String> = list.iter().map(|c| c.name_any()).collect();
        ensure!(
            names == *claims,
            "NodeClaims changed after the hash-version upgrade: {names:?} (were {claims:?})"
        );
        for c in &list {
            ensure!(
                c.metadata.deletion_timestamp.is_none(),
                "NodeClaim {} deleted after the hash-version upgrade",
                c.name_any()
            );
            ensure!(
                kubeutil::condition(c, "Drifted").as_deref() != Some("True"),
                "NodeClaim {} marked Drifted ({:?}) after the hash-version upgrade",
                c.name_any(),
                condition_reason(c, "Drifted")
            );
            ensure!(
                !disrupted(c, &nodes),
                "NodeClaim {} tainted {DISRUPTED_TAINT} after the hash-version upgrade",
                c.name_any()
            );
        }
        let all_restamped = list.iter().all(|c| {
            kubeutil::annotation(c, HASH_VERSION).as_deref() == Some(version)
                && kubeutil::annotation(c, HASH).as_deref() == Some(hash)
        });
        match restamped_at {
            None if all_restamped => {
                restamped_at = Some(restarted.elapsed());
                println!(
                    "drift: every NodeClaim re-stamped {:.1} s after the provider restart",
                    restarted.elapsed().as_secs_f64()
                );
            }
            None if restarted.elapsed() > Duration::from_secs(120) => {
                let seen: Vec<_> = list
                    .iter()
                    .map(|c| {
                        (
                            c.name_any(),
                            kubeutil::annotation(c, HASH_VERSION),
                            kubeutil::annotation(c, HASH),
                        )
                    })
                    .collect();
                anyhow::bail!(
                    "NodeClaims not re-stamped to {version}/{hash} 120 s after the restart: {seen:?}"
                );
            }
            Some(at) => {
                // Once re-stamped, the stamps must stay (the pass must not
                // flap) and the quiet window runs on.
                ensure!(
                    all_restamped,
                    "a NodeClaim lost its re-stamped hash: {:?}",
                    list.iter()
                        .map(|c| (c.name_any(), kubeutil::annotation(c, HASH_VERSION)))
                        .collect::<Vec<_>>()
                );
                if restarted.elapsed() > at + QUIET {
                    break;
                }
            }
            None => {}
        }
        tokio::time::sleep(SAMPLE).await;
    }
    let marks = drift_marks(stack)?;
    ensure!(
        marks.is_empty(),
        "Karpenter marked NodeClaims drifted during the hash-version upgrade: {marks:?}"
    );
    println!(
        "drift: hash-version upgrade: 0 drifted, 0 deleted over {samples} samples, {:.0} s",
        restarted.elapsed().as_secs_f64()
    );
    Ok(())
}

/// What the sampler knows about one of the first NodeClaims.
#[derive(Debug, Default)]
struct OldClaim {
    server_id: String,
    drifted_reason: Option<String>,
    drifted_after: Option<Duration>,
    disrupted_after: Option<Duration>,
    gone_after: Option<Duration>,
}

/// (b) A new Talos version in the NodeClass replaces every node, one at a
/// time, with nodes installed from the new image.
async fn image_change(stack: &mut Stack, first: &BTreeSet<String>, old_hash: &str) -> Result<()> {
    let (path, new_sha) = scenario::make_talos_image(stack, NEW_VERSION)?;
    stack.image.serve_version(NEW_VERSION, &path)?;
    ensure!(
        new_sha != stack.image_payload_sha256,
        "the {NEW_VERSION} image has the payload of the first one"
    );
    let api = kubeutil::nodeclaims(&stack.client);
    let mut old: BTreeMap<String, OldClaim> = BTreeMap::new();
    for c in api.list(&ListParams::default()).await?.items {
        let server_id = scenario::claim_server_id(&c).context("NodeClaim without providerID")?;
        old.insert(
            c.name_any(),
            OldClaim {
                server_id,
                ..Default::default()
            },
        );
    }
    ensure!(
        old.keys().cloned().collect::<BTreeSet<_>>() == *first,
        "NodeClaims changed before the image change"
    );

    let from = format!("version: {}\n", stack.opts.talos_version);
    let yaml = stack.nodeclass_yaml("default");
    ensure!(yaml.contains(&from), "NodeClass YAML without {from:?}");
    kubeutil::apply_yaml(
        &stack.client,
        &yaml.replace(&from, &format!("version: {NEW_VERSION}\n")),
    )
    .await?;
    let changed = Instant::now();

    let deadline = Duration::from_secs(300);
    let mut max_disrupted = 0usize;
    let mut max_in_deletion = 0usize;
    let mut max_claims = 0usize;
    let mut new_disrupted = BTreeSet::new();
    let mut samples = 0u32;
    let replacements = loop {
        // Nodes first: core taints the next node only once the previous
        // NodeClaim stopped counting (InstanceTerminating), so NodeClaims
        // read after the taints are never older than them; the other order
        // could count a stale NodeClaim next to a fresh taint.
        let nodes = node_taints(stack).await?;
        let list = api.list(&ListParams::default()).await?.items;
        let now = changed.elapsed();
        samples += 1;
        max_claims = max_claims.max(list.len());
        let mut disrupted_now = Vec::new();
        let mut in_deletion = 0usize;
        for c in &list {
            let name = c.name_any();
            let is_disrupted = disrupted(c, &nodes);
            if is_disrupted {
                in_deletion += 1;
            }
            if counts_against_budget(c, &nodes) {
                disrupted_now.push(name.clone());
            }
            match old.get_mut(&name) {
                Some(o) => {
                    if kubeutil::condition(c, "Drifted").as_deref() == Some("True")
                        && o.drifted_reason.is_none()
                    {
                        o.drifted_reason = condition_reason(c, "Drifted");
                        o.drifted_after = Some(now);
                    }
                    if is_disrupted && o.disrupted_after.is_none() {
                        o.disrupted_after = Some(now);
                    }
                }
                None if is_disrupted => {
                    new_disrupted.insert(name);
                }
                None => {}
            }
        }
        max_disrupted = max_disrupted.max(disrupted_now.len());
        max_in_deletion = max_in_deletion.max(in_deletion);
        ensure!(
            disrupted_now.len() <= BUDGET,
            "{} nodes disrupted at once (budget {BUDGET}) {:.1} s after the change: {disrupted_now:?}",
            disrupted_now.len(),
            now.as_secs_f64()
        );
        let present: BTreeSet<String> = list.iter().map(|c| c.name_any()).collect();
        for (name, o) in old.iter_mut() {
            if !present.contains(name) && o.gone_after.is_none() {
                o.gone_after = Some(now);
                println!(
                    "drift: {name} replaced: drifted at {:.1} s, disrupted at {:.1} s, gone at {:.1} s",
                    o.drifted_after.unwrap_or_default().as_secs_f64(),
                    o.disrupted_after.unwrap_or_default().as_secs_f64(),
                    now.as_secs_f64()
                );
            }
        }
        let fresh: Vec<&DynamicObject> = list
            .iter()
            .filter(|c| !old.contains_key(&c.name_any()))
            .collect();
        let done = old.values().all(|o| o.gone_after.is_some())
            && fresh.len() == NODES
            && fresh.iter().all(|c| {
                c.metadata.deletion_timestamp.is_none()
                    && kubeutil::condition(c, "Initialized").as_deref() == Some("True")
            });
        if done {
            break fresh.into_iter().cloned().collect::<Vec<_>>();
        }
        if now > deadline {
            anyhow::bail!(
                "not every node replaced {deadline:?} after the image change: old {old:?}, claims {present:?}"
            );
        }
        tokio::time::sleep(SAMPLE).await;
    };
    let total = changed.elapsed();

    // Every old NodeClaim was marked drifted for its image, then disrupted.
    for (name, o) in &old {
        ensure!(
            o.drifted_reason.as_deref() == Some("ImageDrift"),
            "NodeClaim {name} was replaced without being seen Drifted=True/ImageDrift: {o:?}"
        );
        ensure!(
            o.disrupted_after.is_some(),
            "NodeClaim {name} vanished without being seen disrupted: {o:?}"
        );
    }
    ensure!(
        new_disrupted.is_empty(),
        "replacement NodeClaims were disrupted too: {new_disrupted:?}"
    );
    let marks = drift_marks(stack)?;
    ensure!(
        marks.len() >= NODES && marks.iter().all(|m| m.contains("ImageDrift")),
        "Karpenter's log should mark each of the {NODES} NodeClaims drifted for ImageDrift: {marks:?}"
    );

    // The pods run on the replacements, which hold the new image.
    let placed = scenario::wait_pods_running(stack, APP, NODES, Duration::from_secs(60)).await?;
    let fresh_names: BTreeSet<String> = replacements.iter().map(|c| c.name_any()).collect();
    for (pod, node) in &placed {
        ensure!(
            fresh_names.contains(node),
            "pod {pod} runs on {node}, not a replacement ({fresh_names:?})"
        );
    }
    let old_parts = hash_components(old_hash)?;
    let sims = stack.talossim.servers().await?;
    for c in &replacements {
        let name = c.name_any();
        let hash = kubeutil::annotation(c, HASH).with_context(|| format!("{name} lacks {HASH}"))?;
        let parts = hash_components(&hash)?;
        ensure!(
            parts["image"] != old_parts["image"]
                && parts["config"] == old_parts["config"]
                && parts["disk"] == old_parts["disk"],
            "replacement {name} stamped {hash:?}; before the change {old_hash:?}: only image should differ"
        );
        let server = scenario::claim_server_id(c).context("replacement without providerID")?;
        let sim = sims
            .iter()
            .find(|s| s["id"] == server.as_str())
            .with_context(|| format!("talos-sim has no record of {server}"))?;
        ensure!(
            sim["disk"]["image_version"] == NEW_VERSION
                && sim["disk"]["image_sha256"] == new_sha.as_str(),
            "replacement {name} ({server}) disk holds {} / {}, not {NEW_VERSION} / {new_sha}",
            sim["disk"]["image_version"],
            sim["disk"]["image_sha256"]
        );
    }
    for (name, o) in &old {
        scenario::wait_server_deleted(stack, &o.server_id, Duration::from_secs(60))
            .await
            .with_context(|| format!("server of replaced NodeClaim {name}"))?;
    }

    // The replacements are current: nothing drifts or goes afterwards.
    let settle = Instant::now();
    while settle.elapsed() < Duration::from_secs(15) {
        let list = api.list(&ListParams::default()).await?.items;
        let names: BTreeSet<String> = list.iter().map(|c| c.name_any()).collect();
        ensure!(
            names == fresh_names,
            "NodeClaims changed after the replacement: {names:?}"
        );
        for c in &list {
            ensure!(
                kubeutil::condition(c, "Drifted").as_deref() != Some("True"),
                "replacement {} marked Drifted ({:?})",
                c.name_any(),
                condition_reason(c, "Drifted")
            );
        }
        tokio::time::sleep(Duration::from_secs(1)).await;
    }

    let durations: Vec<String> = old
        .values()
        .filter_map(|o| Some(o.gone_after? - o.disrupted_after?))
        .map(|d| format!("{:.1}", d.as_secs_f64()))
        .collect();
    println!(
        "drift: image change: {NODES} nodes replaced in {:.1} s; max concurrent disruptions {max_disrupted} (budget {BUDGET}); \
         max disrupted incl. servers being released {max_in_deletion}; max NodeClaims {max_claims}; \
         disrupted -> gone per node (s): [{}]; {samples} samples",
        total.as_secs_f64(),
        durations.join(", ")
    );
    ensure!(max_disrupted >= 1, "no disruption was ever sampled");
    Ok(())
}

/// Waits until there are `count` NodeClaims, all Initialized; returns them.
async fn wait_claims_initialized(stack: &Stack, count: usize) -> Result<Vec<DynamicObject>> {
    let api = kubeutil::nodeclaims(&stack.client);
    wait::until(
        &format!("{count} NodeClaims Initialized"),
        Duration::from_secs(60),
        SAMPLE,
        || {
            let api = api.clone();
            async move {
                let list = api.list(&ListParams::default()).await?.items;
                let ok = list.len() == count
                    && list
                        .iter()
                        .all(|c| kubeutil::condition(c, "Initialized").as_deref() == Some("True"));
                Ok(ok.then_some(list))
            }
        },
    )
    .await
}

/// Node name -> carries the disrupted taint.
async fn node_taints(stack: &Stack) -> Result<BTreeMap<String, bool>> {
    let nodes: Api<Node> = Api::all(stack.client.clone());
    Ok(nodes
        .list(&ListParams::default())
        .await?
        .items
        .iter()
        .map(|n| (n.name_any(), scenario::node_has_taint(n, DISRUPTED_TAINT)))
        .collect())
}

/// A NodeClaim is disrupted while it is being deleted or its Node carries
/// Karpenter's disrupted taint.
fn disrupted(claim: &DynamicObject, taints: &BTreeMap<String, bool>) -> bool {
    let tainted = claim.data["status"]["nodeName"]
        .as_str()
        .and_then(|n| taints.get(n))
        .copied()
        .unwrap_or(false);
    claim.metadata.deletion_timestamp.is_some() || tainted
}

/// A disrupted NodeClaim counts against the NodePool's budget until its node
/// is drained and the provider accepted to delete the server: from then on
/// (`InstanceTerminating=True`) Karpenter core no longer counts it
/// (`BuildDisruptionBudgetMapping` in core v1.14.1) and may start the next
/// disruption while the server is still being released.
fn counts_against_budget(claim: &DynamicObject, taints: &BTreeMap<String, bool>) -> bool {
    disrupted(claim, taints)
        && kubeutil::condition(claim, "InstanceTerminating").as_deref() != Some("True")
}

fn condition_reason(obj: &DynamicObject, type_: &str) -> Option<String> {
    obj.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .and_then(|c| c["reason"].as_str().map(str::to_string))
}

/// `image=<h8>,config=<h8>,disk=<h8>` -> component -> h8.
fn hash_components(hash: &str) -> Result<BTreeMap<String, String>> {
    let mut out = BTreeMap::new();
    for part in hash.split(',') {
        let (k, v) = part
            .split_once('=')
            .with_context(|| format!("hash {hash:?}: {part:?} is not key=value"))?;
        ensure!(
            v.len() == 8 && v.bytes().all(|b| b.is_ascii_hexdigit()),
            "hash {hash:?}: {k} is not 8 hex digits"
        );
        out.insert(k.to_string(), v.to_string());
    }
    Ok(out)
}

/// Karpenter's "marking drifted" log lines so far (core logs one each time
/// it sets the Drifted condition, with the reason).
fn drift_marks(stack: &Stack) -> Result<Vec<String>> {
    let path = stack
        .opts
        .work_dir
        .join("logs")
        .join(format!("{BRIDGE}.log"));
    let text = std::fs::read_to_string(&path).with_context(|| path.display().to_string())?;
    Ok(text
        .lines()
        .filter(|l| l.contains("\"marking drifted\""))
        .map(str::to_string)
        .collect())
}
