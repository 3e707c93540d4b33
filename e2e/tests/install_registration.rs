//! Issue 3: a delivery slower than Karpenter's 15-minute registration
//! deadline. The provider registers the Node right after ordering, so the
//! NodeClaim is `Registered` within seconds of its creation, long before the
//! server is delivered, and the node still joins when the install ends.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use e2e::progress::ClaimWatch;
use e2e::scenario;
use e2e::stack::{Stack, StackOptions};
use e2e::{kubeutil, wait};
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;

/// Simulated delivery: 20 minutes, beyond the 15-minute registration deadline.
const DELIVERY_S: f64 = 1200.0;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn slow_delivery_nodeclaim_registered_early_and_node_joins() -> Result<()> {
    let mut opts = StackOptions::for_test("install-registration")?;
    // 20 simulated minutes = 24 s: room for the checks below to run while
    // the server is still being delivered, even on a slow CI machine.
    opts.time_scale = 0.02;
    scenario::with_stack(opts, run).await
}

async fn run(stack: &mut Stack) -> Result<()> {
    stack.create_nodeclass("default").await?;
    kubeutil::apply_yaml(
        &stack.client,
        &Stack::nodepool_yaml("default", "default", ""),
    )
    .await?;
    stack
        .emsim
        .add_fault(serde_json::json!({"kind": "delivery_seconds", "seconds": DELIVERY_S}))
        .await?;
    let watch = ClaimWatch::start(&stack.client);
    kubeutil::apply_yaml(&stack.client, &scenario::inflate_yaml("slow", 1, "1")).await?;

    let claim = watch
        .wait_for("a NodeClaim", Duration::from_secs(60), |c| {
            c.values().next().cloned()
        })
        .await?;
    let name = claim.name.clone();
    let registered = watch
        .wait_for(
            &format!("NodeClaim {name} Registered"),
            Duration::from_secs(60),
            |c| {
                c.get(&name)
                    .and_then(|c| c.registered.map(|r| (r, c.clone())))
            },
        )
        .await?;
    let (registered_at, at_registration) = registered;
    let after_creation = registered_at.duration_since(claim.first_seen);

    // The server was still being delivered when the NodeClaim became Registered.
    let server_id = at_registration
        .server_id()
        .context("Registered NodeClaim without a providerID")?;
    let server = stack
        .emsim
        .servers()
        .await?
        .into_iter()
        .find(|s| s["id"] == server_id.as_str())
        .context("the NodeClaim's server is not in emsim")?;
    let (sim_now, scale) = stack.emsim.clock().await?;
    ensure!(
        server["status"] == "delivering",
        "server {server_id} is {} when the NodeClaim is Registered: registration was not early",
        server["status"]
    );
    ensure!(
        kubeutil::condition(&at_registration.object, "Registered").as_deref() == Some("True"),
        "not Registered"
    );
    // The Node object exists already, with the NodeClaim's providerID and
    // the taints that keep pods off it until the install is done.
    let nodes: Api<Node> = Api::all(stack.client.clone());
    let node = nodes
        .get_opt(&name)
        .await?
        .with_context(|| format!("no Node {name} while the NodeClaim is Registered"))?;
    ensure!(
        node.spec.as_ref().and_then(|s| s.provider_id.as_deref())
            == at_registration.provider_id.as_deref(),
        "early Node's providerID differs from the NodeClaim's"
    );
    let taints: Vec<String> = node
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
        .iter()
        .map(|t| format!("{}:{}", t.key, t.effect))
        .collect();
    ensure!(
        !kubeutil::node_ready(&node),
        "the early Node is Ready before the server was delivered"
    );
    ensure!(
        taints
            .iter()
            .any(|t| t == "node.cloudprovider.kubernetes.io/uninitialized:NoSchedule"),
        "the early Node lacks the uninitialized taint that keeps pods off it: {taints:?}"
    );
    let delivery_ends = server["pending"]["at"]
        .as_str()
        .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
        .map(|t| (t.with_timezone(&chrono::Utc) - sim_now).num_milliseconds() as f64 / 1000.0);
    println!(
        "NodeClaim {name} Registered {:.2} s after the watch first saw it; \
         server {server_id} still delivering (about {:.0} simulated s = {:.1} s left); \
         early Node taints {taints:?}",
        after_creation.as_secs_f64(),
        delivery_ends.unwrap_or(f64::NAN),
        delivery_ends.unwrap_or(f64::NAN) * scale,
    );

    // While the server is still being delivered, the early Node must keep
    // pods off (the design's `node.kubernetes.io/not-ready:NoSchedule`): a
    // pod bound now would sit on a machine that does not run yet, and be
    // lost with it if the install fails. Checked a few seconds after
    // registration so that Karpenter and the controller-manager have acted.
    tokio::time::sleep(Duration::from_secs(3)).await;
    let pods: Api<k8s_openapi::api::core::v1::Pod> =
        Api::namespaced(stack.client.clone(), scenario::APP_NAMESPACE);
    let bound: Vec<String> = pods
        .list(&kube::api::ListParams::default().labels("app=slow"))
        .await?
        .items
        .iter()
        .filter_map(|p| p.spec.as_ref().and_then(|s| s.node_name.clone()))
        .collect();
    let early = nodes.get(&name).await?;
    let early_taints: Vec<String> = early
        .spec
        .as_ref()
        .and_then(|s| s.taints.clone())
        .unwrap_or_default()
        .iter()
        .map(|t| format!("{}:{}", t.key, t.effect))
        .collect();
    let still_delivering = stack
        .emsim
        .servers()
        .await?
        .iter()
        .any(|s| s["id"] == server_id.as_str() && s["status"] == "delivering");
    println!(
        "3 s after registration: server still delivering: {still_delivering}; \
         early Node taints {early_taints:?}; pod bound to {bound:?}"
    );
    ensure!(
        !still_delivering || bound.is_empty(),
        "the pod was bound to Node {name} while its server was still being delivered \
         (early Node taints now {early_taints:?})"
    );

    // The install goes on and the node joins.
    let placed = scenario::wait_pods_running(stack, "slow", 1, Duration::from_secs(180)).await?;
    ensure!(
        placed.values().all(|n| n == &name),
        "pod not on the NodeClaim's node: {placed:?}"
    );
    // The pod runs as soon as the engine removed the `uninitialized` taint;
    // `joined` is persisted after that and after the token's deletion (so
    // that it never claims more than was done), so it may come a moment
    // later than the pod: wait for it instead of reading it at once (this
    // read lost that race once on a loaded machine).
    wait::until(
        "install phase joined",
        Duration::from_secs(30),
        Duration::from_millis(100),
        || async {
            Ok(watch
                .snapshot()
                .get(&name)
                .is_some_and(|c| c.saw_phase("joined"))
                .then_some(()))
        },
    )
    .await?;
    let claims = watch.snapshot();
    ensure!(
        claims.len() == 1,
        "a second NodeClaim appeared: the first one was given up"
    );
    let c = &claims[&name];
    for phase in ["delivering", "imaging", "configured", "joined"] {
        ensure!(
            c.saw_phase(phase),
            "phase {phase} never seen: {:?}",
            c.phases
        );
    }
    wait::until(
        "NodeClaim Initialized",
        Duration::from_secs(60),
        Duration::from_millis(250),
        || async {
            let nc = kubeutil::nodeclaims(&stack.client).get(&name).await?;
            Ok((kubeutil::condition(&nc, "Initialized").as_deref() == Some("True")).then_some(()))
        },
    )
    .await?;
    let node = nodes.get(&name).await?;
    ensure!(
        !node
            .spec
            .as_ref()
            .and_then(|s| s.taints.as_ref())
            .is_some_and(|t| t.iter().any(|t| t.key == "karpenter.sh/unregistered")),
        "unregistered taint still on the joined Node"
    );
    ensure!(
        scenario::orders_placed(stack).await? == 1,
        "more than one order"
    );
    scenario::scale_to_zero_and_check_clean(stack, &["slow"], Duration::from_secs(180)).await
}
