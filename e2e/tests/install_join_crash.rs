//! Issue 11: the provider dies at a chosen point between two side effects of
//! the engine's last steps (config applied; Node seen Ready; taint removed;
//! token deleted; `joined` persisted), one install per point. The crash is
//! injected, not timed: the provider runs with `--test-crash-at <point>` and
//! aborts the moment an install reaches it, so every run lands in the same
//! window. The restarted provider must finish each join: the Node loses the
//! `uninitialized` taint, the token goes, the NodeClaim is Initialized and
//! `joined`, the pod runs; and what was persisted at the crash never claims
//! more than what was done.

use std::time::Duration;

use anyhow::{Context, Result, ensure};
use k8s_openapi::api::core::v1::{Node, Secret};
use kube::ResourceExt;
use kube::api::{Api, ListParams};

use e2e::stack::{Stack, StackOptions};
use e2e::{kubeutil, scenario, wait};

const UNINITIALIZED: &str = "node.cloudprovider.kubernetes.io/uninitialized";
const APP: &str = "joincrash";

/// One crash point and what must be persisted and visible when the process
/// has died there.
struct Window {
    point: &'static str,
    /// Phase persisted on the NodeClaim at the crash.
    phase: &'static str,
    /// Whether the Node still carries the `uninitialized` taint.
    tainted: bool,
    /// Whether the node's bootstrap token Secret still exists.
    token: bool,
}

const WINDOWS: [Window; 5] = [
    Window {
        point: "config-applied",
        phase: "maintenance",
        tainted: true,
        token: true,
    },
    Window {
        point: "node-ready",
        phase: "configured",
        tainted: true,
        token: true,
    },
    Window {
        point: "node-initialized",
        phase: "configured",
        tainted: false,
        token: true,
    },
    Window {
        point: "token-released",
        phase: "configured",
        tainted: false,
        token: false,
    },
    Window {
        point: "joined-saved",
        phase: "joined",
        tainted: false,
        token: false,
    },
];

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_crash_between_any_two_join_steps_is_finished_by_the_restart() -> Result<()> {
    let opts = StackOptions::for_test("install-join-crash")?;
    scenario::with_stack(opts, run).await
}

async fn run(stack: &mut Stack) -> Result<()> {
    stack.create_nodeclass("default").await?;
    kubeutil::apply_yaml(
        &stack.client,
        &Stack::nodepool_yaml("default", "default", ""),
    )
    .await?;
    // One pod per node: each step of the Deployment needs a new NodeClaim.
    kubeutil::apply_yaml(
        &stack.client,
        &scenario::inflate_yaml_on(APP, 0, "1", &[], true),
    )
    .await?;
    let base_args = stack.opts.provider_args.clone();

    for (i, window) in WINDOWS.iter().enumerate() {
        let before: Vec<String> = scenario::nodeclaims(stack).await?.into_keys().collect();
        stack.opts.provider_args = base_args.clone();
        stack
            .opts
            .provider_args
            .push(format!("--test-crash-at={}", window.point));
        stack.start_provider()?;
        scenario::scale(stack, APP, i as u32 + 1).await?;

        scenario::wait_provider_died(stack, window.point).await?;
        // Nothing writes any more: this is what the restart resumes from.
        let claim = newest_claim(stack, &before).await?;
        let name = claim.name_any();
        let phase = kubeutil::install_phase(&claim);
        let node = Api::<Node>::all(stack.client.clone())
            .get_opt(&name)
            .await?
            .with_context(|| format!("no Node {name} at the crash"))?;
        let tainted = scenario::node_has_taint(&node, UNINITIALIZED);
        let token = !token_secrets_of(stack, &name).await?.is_empty();
        println!(
            "crash at {:<17} NodeClaim {name}: persisted phase {phase:?}, uninitialized taint {tainted}, token {token}",
            window.point
        );
        ensure!(
            phase.as_deref() == Some(window.phase),
            "crash at {}: NodeClaim {name} persisted phase {phase:?}, expected {}",
            window.point,
            window.phase
        );
        ensure!(
            tainted == window.tainted,
            "crash at {}: uninitialized taint present = {tainted}, expected {}",
            window.point,
            window.tainted
        );
        ensure!(
            token == window.token,
            "crash at {}: bootstrap token present = {token}, expected {}",
            window.point,
            window.token
        );

        stack.opts.provider_args = base_args.clone();
        stack.start_provider()?;
        wait_joined(stack, &name).await?;
        scenario::wait_pods_running(stack, APP, i + 1, Duration::from_secs(120)).await?;
    }

    // One order per NodeClaim: no crash made the restart order again.
    let claims = scenario::nodeclaims(stack).await?;
    ensure!(
        claims.len() == WINDOWS.len(),
        "expected {} NodeClaims (a replacement means an install failed): {claims:?}",
        WINDOWS.len()
    );
    let orders = scenario::orders_placed(stack).await?;
    ensure!(
        orders == WINDOWS.len() as u64,
        "emsim accepted {orders} orders for {} NodeClaims",
        WINDOWS.len()
    );
    scenario::scale_to_zero_and_check_clean(stack, &[APP], Duration::from_secs(180)).await
}

/// The NodeClaim created for this round (not among `before`).
async fn newest_claim(stack: &Stack, before: &[String]) -> Result<kube::api::DynamicObject> {
    let mut fresh: Vec<_> = scenario::nodeclaim_objects(stack)
        .await?
        .into_iter()
        .filter(|c| !before.contains(&c.name_any()))
        .collect();
    ensure!(
        fresh.len() == 1,
        "expected exactly one new NodeClaim, found {:?}",
        fresh.iter().map(|c| c.name_any()).collect::<Vec<_>>()
    );
    Ok(fresh.remove(0))
}

async fn token_secrets_of(stack: &Stack, claim: &str) -> Result<Vec<String>> {
    let api: Api<Secret> = Api::namespaced(stack.client.clone(), "kube-system");
    Ok(api
        .list(&ListParams::default().labels(&format!("karpenter.scaleway.com/nodeclaim={claim}")))
        .await?
        .items
        .iter()
        .map(|s| s.name_any())
        .collect())
}

/// The restarted provider finished the join: phase `joined`, Initialized,
/// no `uninitialized` taint, no token.
async fn wait_joined(stack: &Stack, name: &str) -> Result<()> {
    let nodes: Api<Node> = Api::all(stack.client.clone());
    wait::until(
        &format!("NodeClaim {name} joined and Initialized, its Node untainted, its token gone"),
        Duration::from_secs(120),
        Duration::from_millis(250),
        || async {
            let claim = kubeutil::nodeclaims(&stack.client).get(name).await?;
            let node = nodes.get(name).await?;
            Ok(
                (kubeutil::install_phase(&claim).as_deref() == Some("joined")
                    && kubeutil::condition(&claim, "Initialized").as_deref() == Some("True")
                    && !scenario::node_has_taint(&node, UNINITIALIZED)
                    && token_secrets_of(stack, name).await?.is_empty())
                .then_some(()),
            )
        },
    )
    .await
}
