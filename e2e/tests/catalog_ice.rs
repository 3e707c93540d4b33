//! Issue 4's scenarios: what Karpenter does when an offer the catalog still
//! lists as in stock is sold out. The stock is emptied in emsim after the
//! provider has read the catalog (refresh period 5 min), so only the refused
//! order can tell the provider — as when a `low` stock runs out between two
//! reads on the real API.
//!
//! * the cheapest offer refuses the order → the NodeClaim is deleted with an
//!   InsufficientCapacityError Event and the next NodeClaim lands on the next
//!   offer; the sold-out offer gets exactly one order per TTL window; once
//!   stock is back and the TTL has passed, the offer is chosen again;
//! * two NodePools with weights, the preferred one's only offer sold out →
//!   the pods land on the other NodePool.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Context, Result, ensure};
use e2e::stack::{Stack, StackOptions, ZONE};
use e2e::{kubeutil, scenario, wait};
use kube::ResourceExt;
use kube::api::ListParams;
use serde_json::json;

const ORDERS: &str = "POST /baremetal/v1/zones/{zone}/servers";
const CHEAP: &str = "EM-A115X-SSD";
const NEXT: &str = "EM-A315X-SSD";
/// Short enough for CI, long enough to hold several scheduling rounds.
const TTL: Duration = Duration::from_secs(30);

/// Pods of `app` that each need a node of their own (hostname anti-affinity)
/// and fit the smallest offer (4 threads).
fn spread_yaml(app: &str, replicas: u32) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: {app}
  namespace: {ns}
spec:
  replicas: {replicas}
  selector:
    matchLabels: {{app: {app}}}
  template:
    metadata:
      labels: {{app: {app}}}
    spec:
      terminationGracePeriodSeconds: 0
      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            - labelSelector:
                matchLabels: {{app: {app}}}
              topologyKey: kubernetes.io/hostname
      containers:
        - name: pause
          image: registry.k8s.io/pause:3.10
          resources:
            requests: {{cpu: "2", memory: 512Mi}}
"#,
        ns = scenario::APP_NAMESPACE
    )
}

/// A NodePool limited to `types`, with a weight.
fn pool_yaml(name: &str, weight: u32, types: &[&str]) -> String {
    let values = types
        .iter()
        .map(|t| format!("\"{t}\""))
        .collect::<Vec<_>>()
        .join(", ");
    Stack::nodepool_yaml(
        name,
        "default",
        &format!(
            "        - key: node.kubernetes.io/instance-type\n          operator: In\n          values: [{values}]"
        ),
    )
    .replace("spec:\n  template:", &format!("spec:\n  weight: {weight}\n  template:"))
}

#[derive(Debug, Clone)]
struct Claim {
    name: String,
    instance_type: String,
    nodepool: String,
    provider_id: String,
}

async fn claims(stack: &Stack) -> Result<Vec<Claim>> {
    let list = kubeutil::nodeclaims(&stack.client)
        .list(&ListParams::default())
        .await?;
    Ok(list
        .items
        .iter()
        .filter(|nc| nc.metadata.deletion_timestamp.is_none())
        .map(|nc| {
            let label = |k: &str| nc.labels().get(k).cloned().unwrap_or_default();
            Claim {
                name: nc.name_any(),
                instance_type: label("node.kubernetes.io/instance-type"),
                nodepool: label("karpenter.sh/nodepool"),
                provider_id: nc.data["status"]["providerID"]
                    .as_str()
                    .unwrap_or_default()
                    .to_string(),
            }
        })
        .collect())
}

/// Waits for `n` launched NodeClaims (providerID set) and returns them.
async fn launched(stack: &Stack, n: usize, timeout: Duration) -> Result<Vec<Claim>> {
    wait::until(
        &format!("{n} launched NodeClaims"),
        timeout,
        Duration::from_millis(250),
        || async {
            let all = claims(stack).await?;
            let done: Vec<Claim> = all
                .into_iter()
                .filter(|c| !c.provider_id.is_empty())
                .collect();
            Ok((done.len() == n).then_some(done))
        },
    )
    .await
}

/// Orders emsim refused with 412 (`out_of_stock`).
async fn refused_orders(stack: &Stack) -> Result<u64> {
    let c = stack.emsim.counters().await?;
    Ok(c["endpoints"][ORDERS]["by_status"]["412"]
        .as_u64()
        .unwrap_or(0))
}

/// Servers emsim delivered per offer name, deleted ones included.
async fn orders_by_offer(stack: &Stack) -> Result<BTreeMap<String, usize>> {
    let mut out = BTreeMap::new();
    for s in stack.emsim.servers_including_deleted().await? {
        *out.entry(s["offer_name"].as_str().unwrap_or("").to_string())
            .or_default() += 1;
    }
    Ok(out)
}

/// Karpenter core's Events for NodeClaims deleted after an insufficient-capacity answer.
async fn ice_events(stack: &Stack) -> Result<Vec<String>> {
    use k8s_openapi::api::core::v1::Event;
    let api: kube::Api<Event> = kube::Api::all(stack.client.clone());
    let list = api
        .list(&ListParams::default().fields("reason=InsufficientCapacityError"))
        .await?;
    Ok(list
        .items
        .into_iter()
        .filter(|e| e.involved_object.kind.as_deref() == Some("NodeClaim"))
        .map(|e| e.message.unwrap_or_default())
        .collect())
}

async fn until_refused(stack: &Stack, n: u64) -> Result<Instant> {
    wait::until(
        &format!("{n} order(s) refused for stock"),
        Duration::from_secs(60),
        Duration::from_millis(100),
        || async { Ok((refused_orders(stack).await? >= n).then(Instant::now)) },
    )
    .await
}

async fn scale_and_wait(stack: &Stack, app: &str, replicas: u32) -> Result<Vec<Claim>> {
    scenario::scale(stack, app, replicas).await?;
    let claims = launched(stack, replicas as usize, Duration::from_secs(90)).await?;
    scenario::wait_pods_running(stack, app, replicas as usize, Duration::from_secs(180)).await?;
    Ok(claims)
}

fn stack_options(name: &str) -> Result<StackOptions> {
    let mut opts = StackOptions::for_test(name)?;
    opts.provider_args = vec![
        "--unavailable-offering-ttl".into(),
        format!("{}s", TTL.as_secs()),
    ];
    Ok(opts)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sold_out_offer_falls_back_and_is_ordered_once_per_ttl() -> Result<()> {
    e2e::init_tracing();
    let stack = Stack::up(stack_options("catalog-ice")?).await?;
    let result = sold_out_offer(&stack).await;
    if result.is_err() {
        eprintln!("{}", stack.diagnostics());
    }
    stack.stop().await;
    result
}

async fn sold_out_offer(stack: &Stack) -> Result<()> {
    {
        stack.create_nodeclass("default").await?;
        kubeutil::apply_yaml(&stack.client, &pool_yaml("default", 10, &[CHEAP, NEXT])).await?;
        // Sold out now, but the catalog read at start-up says available.
        stack.emsim.set_stock(ZONE, CHEAP, json!("empty")).await?;

        // 1. The cheapest offer is refused: NodeClaim deleted with an Event,
        //    the next NodeClaim is on the next offer.
        kubeutil::apply_yaml(&stack.client, &spread_yaml("ice", 1)).await?;
        let t0 = until_refused(stack, 1).await?;
        let first = scale_and_wait(stack, "ice", 1).await?;
        ensure!(first[0].instance_type == NEXT, "landed on {first:?}");
        let events = ice_events(stack).await?;
        ensure!(
            events.len() == 1,
            "InsufficientCapacityError Events: {events:?}"
        );
        ensure!(
            events[0].contains(CHEAP),
            "Event does not name the offer: {events:?}"
        );

        // 2. More demand inside the TTL window: no new order for the sold-out
        //    offer. The choice is made when the NodeClaim is launched, so the
        //    window is checked then, not after its pod runs.
        scenario::scale(stack, "ice", 2).await?;
        let second = launched(stack, 2, Duration::from_secs(90)).await?;
        ensure!(
            t0.elapsed() < TTL,
            "step 2's NodeClaim launched {:.1} s after the refusal, past the {} s TTL; the check proves nothing",
            t0.elapsed().as_secs_f64(),
            TTL.as_secs()
        );
        ensure!(
            second.iter().all(|c| c.instance_type == NEXT),
            "inside the TTL: {second:?}"
        );
        ensure!(
            refused_orders(stack).await? == 1,
            "a second order inside the TTL window"
        );
        scenario::wait_pods_running(stack, "ice", 2, Duration::from_secs(180)).await?;

        // 3. The TTL passes with the stock still empty: exactly one more refused order.
        tokio::time::sleep(
            (t0 + TTL + Duration::from_secs(1)).saturating_duration_since(Instant::now()),
        )
        .await;
        scenario::scale(stack, "ice", 3).await?;
        let t1 = until_refused(stack, 2).await?;
        let third = scale_and_wait(stack, "ice", 3).await?;
        ensure!(
            third.iter().all(|c| c.instance_type == NEXT),
            "after one refusal per window: {third:?}"
        );
        ensure!(
            refused_orders(stack).await? == 2,
            "more than one order in the second window"
        );

        // 4. Stock is back; once the TTL has passed the offer is chosen again.
        stack
            .emsim
            .set_stock(ZONE, CHEAP, json!("available"))
            .await?;
        tokio::time::sleep(
            (t1 + TTL + Duration::from_secs(1)).saturating_duration_since(Instant::now()),
        )
        .await;
        let fourth = scale_and_wait(stack, "ice", 4).await?;
        let cheap: Vec<&Claim> = fourth.iter().filter(|c| c.instance_type == CHEAP).collect();
        ensure!(
            cheap.len() == 1,
            "the restocked offer was not chosen again: {fourth:?}"
        );
        ensure!(
            refused_orders(stack).await? == 2,
            "an order was refused after the restock"
        );
        let delivered = orders_by_offer(stack).await?;
        ensure!(
            delivered.get(CHEAP) == Some(&1) && delivered.get(NEXT) == Some(&3),
            "servers delivered per offer: {delivered:?}"
        );
        tracing::info!(?delivered, "orders per offer");
        stack.assert_no_secrets_in_logs()?;
        Ok(())
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn preferred_nodepool_sold_out_pods_land_on_the_other() -> Result<()> {
    e2e::init_tracing();
    let stack = Stack::up(stack_options("catalog-weights")?).await?;
    let result = weights(&stack).await.context("weights scenario");
    if result.is_err() {
        eprintln!("{}", stack.diagnostics());
    }
    stack.stop().await;
    result
}

async fn weights(stack: &Stack) -> Result<()> {
    {
        stack.create_nodeclass("default").await?;
        kubeutil::apply_yaml(&stack.client, &pool_yaml("preferred", 100, &[NEXT])).await?;
        kubeutil::apply_yaml(&stack.client, &pool_yaml("fallback", 10, &["EM-B112X-SSD"])).await?;
        stack.emsim.set_stock(ZONE, NEXT, json!("empty")).await?;

        kubeutil::apply_yaml(&stack.client, &spread_yaml("weights", 2)).await?;
        until_refused(stack, 1).await?;
        let claims = launched(stack, 2, Duration::from_secs(90)).await?;
        let placed =
            scenario::wait_pods_running(stack, "weights", 2, Duration::from_secs(180)).await?;
        ensure!(
            claims
                .iter()
                .all(|c| c.nodepool == "fallback" && c.instance_type == "EM-B112X-SSD"),
            "NodeClaims: {claims:?}"
        );
        let nodes: std::collections::BTreeSet<&String> = placed.values().collect();
        let claim_names: std::collections::BTreeSet<&String> =
            claims.iter().map(|c| &c.name).collect();
        ensure!(
            nodes == claim_names,
            "pods on {placed:?}, claims {claims:?}"
        );
        ensure!(
            refused_orders(stack).await? == 1,
            "the preferred pool's offer was ordered more than once"
        );
        let events = ice_events(stack).await?;
        ensure!(!events.is_empty(), "no InsufficientCapacityError Event");
        Ok(())
    }
}
