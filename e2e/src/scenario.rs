//! Building blocks of the scenarios: the workload, and the waits that read the
//! cluster, emsim and talos-sim.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt;
use kube::api::{Api, ListParams, Patch, PatchParams};

use crate::stack::Stack;
use crate::{kubeutil, wait};

pub const APP_NAMESPACE: &str = "default";

/// A Deployment of `replicas` pods that request `cpu` each and fit no existing node.
pub fn inflate_yaml(name: &str, replicas: u32, cpu: &str) -> String {
    format!(
        r#"apiVersion: apps/v1
kind: Deployment
metadata:
  name: {name}
  namespace: {APP_NAMESPACE}
spec:
  replicas: {replicas}
  selector:
    matchLabels: {{app: {name}}}
  template:
    metadata:
      labels: {{app: {name}}}
    spec:
      terminationGracePeriodSeconds: 0
      containers:
        - name: pause
          image: registry.k8s.io/pause:3.10
          resources:
            requests: {{cpu: "{cpu}", memory: 256Mi}}
"#
    )
}

pub async fn scale(stack: &Stack, name: &str, replicas: u32) -> Result<()> {
    let api: Api<Deployment> = Api::namespaced(stack.client.clone(), APP_NAMESPACE);
    api.patch(
        name,
        &PatchParams::default(),
        &Patch::Merge(serde_json::json!({"spec": {"replicas": replicas}})),
    )
    .await?;
    Ok(())
}

/// The pods of app `name` Running on a Ready node, not being deleted: pod -> node.
pub async fn pods_running(stack: &Stack, name: &str) -> Result<BTreeMap<String, String>> {
    let pods: Api<Pod> = Api::namespaced(stack.client.clone(), APP_NAMESPACE);
    let nodes: Api<Node> = Api::all(stack.client.clone());
    let list = pods
        .list(&ListParams::default().labels(&format!("app={name}")))
        .await?;
    let mut placed = BTreeMap::new();
    for p in list
        .items
        .iter()
        .filter(|p| p.metadata.deletion_timestamp.is_none())
    {
        let running = p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running");
        let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.clone()) else {
            continue;
        };
        if running
            && nodes
                .get_opt(&node)
                .await?
                .as_ref()
                .is_some_and(kubeutil::node_ready)
        {
            placed.insert(p.name_any(), node);
        }
    }
    Ok(placed)
}

/// Waits until every pod of app `name` is Running on a Ready node; returns pod -> node.
pub async fn wait_pods_running(
    stack: &Stack,
    name: &str,
    replicas: usize,
    timeout: Duration,
) -> Result<BTreeMap<String, String>> {
    wait::until(
        &format!("{replicas} pods of {name} Running on Ready nodes"),
        timeout,
        Duration::from_millis(500),
        || async {
            let placed = pods_running(stack, name).await?;
            Ok((placed.len() == replicas).then_some(placed))
        },
    )
    .await
}

/// Current NodeClaims (name -> providerID, empty while launching).
pub async fn nodeclaims(stack: &Stack) -> Result<BTreeMap<String, String>> {
    let list = kubeutil::nodeclaims(&stack.client)
        .list(&ListParams::default())
        .await?;
    Ok(list
        .items
        .iter()
        .map(|nc| {
            let pid = nc.data["status"]["providerID"]
                .as_str()
                .unwrap_or_default()
                .to_string();
            (nc.name_any(), pid)
        })
        .collect())
}

/// Waits until the cluster holds no NodeClaim, no Node from this provider and
/// emsim holds no server of this cluster.
/// How many Nodes of this provider (a `scaleway://` providerID) exist.
pub async fn our_nodes(stack: &Stack) -> Result<usize> {
    let nodes: Api<Node> = Api::all(stack.client.clone());
    Ok(nodes
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|n| {
            n.spec
                .as_ref()
                .and_then(|s| s.provider_id.as_deref())
                .is_some_and(|p| p.starts_with("scaleway://"))
        })
        .count())
}

pub async fn wait_all_gone(stack: &Stack, timeout: Duration) -> Result<()> {
    wait::until(
        "NodeClaims, Nodes and servers gone",
        timeout,
        Duration::from_secs(1),
        || async move {
            let ncs = nodeclaims(stack).await?;
            let ours = our_nodes(stack).await?;
            let mut servers = stack.owned_servers().await?.len();
            if stack.opts.instances {
                servers += stack.owned_vms().await?.len();
            }
            tracing::info!(
                nodeclaims = ncs.len(),
                nodes = ours,
                servers,
                "waiting for teardown"
            );
            Ok((ncs.is_empty() && ours == 0 && servers == 0).then_some(()))
        },
    )
    .await
}

/// `scaleway://baremetal/{zone}/{id}` -> (zone, id).
pub fn parse_provider_id(pid: &str) -> Result<(String, String)> {
    let rest = pid
        .strip_prefix("scaleway://baremetal/")
        .context("providerID prefix")?;
    let (zone, id) = rest.split_once('/').context("providerID shape")?;
    Ok((zone.to_string(), id.to_string()))
}

/// Like [`inflate_yaml`], with pods pinned by `nodeSelector` (e.g. to one
/// NodePool: `karpenter.sh/nodepool: <name>`) and, when `one_per_node`, kept
/// apart by a required pod anti-affinity so that every replica needs its own
/// node whatever the offer's size.
pub fn inflate_yaml_on(
    name: &str,
    replicas: u32,
    cpu: &str,
    node_selector: &[(&str, &str)],
    one_per_node: bool,
) -> String {
    let mut out = inflate_yaml(name, replicas, cpu);
    let mut extra = String::new();
    if !node_selector.is_empty() {
        extra.push_str("      nodeSelector:\n");
        for (k, v) in node_selector {
            extra.push_str(&format!("        {k}: \"{v}\"\n"));
        }
    }
    if one_per_node {
        extra.push_str(&format!(
            r#"      affinity:
        podAntiAffinity:
          requiredDuringSchedulingIgnoredDuringExecution:
            - topologyKey: kubernetes.io/hostname
              labelSelector:
                matchLabels: {{app: {name}}}
"#
        ));
    }
    out = out.replace(
        "      terminationGracePeriodSeconds: 0\n",
        &format!("      terminationGracePeriodSeconds: 0\n{extra}"),
    );
    out
}

/// A NodePool requirement (the `extra_requirements` of
/// [`Stack::nodepool_yaml`]) restricting it to these offers.
pub fn instance_types_requirement(offers: &[&str]) -> String {
    let values = offers
        .iter()
        .map(|o| format!("\"{o}\""))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "        - key: node.kubernetes.io/instance-type\n          operator: In\n          values: [{values}]\n"
    )
}

/// A NodePool requirement restricting it to these zones.
pub fn zones_requirement(zones: &[&str]) -> String {
    let values = zones
        .iter()
        .map(|z| format!("\"{z}\""))
        .collect::<Vec<_>>()
        .join(", ");
    format!(
        "        - key: topology.kubernetes.io/zone\n          operator: In\n          values: [{values}]\n"
    )
}

/// The NodeClaims with their full objects.
pub async fn nodeclaim_objects(stack: &Stack) -> Result<Vec<kube::api::DynamicObject>> {
    Ok(kubeutil::nodeclaims(&stack.client)
        .list(&ListParams::default())
        .await?
        .items)
}

/// Waits until NodeClaim `name` is gone from the cluster.
pub async fn wait_nodeclaim_gone(stack: &Stack, name: &str, timeout: Duration) -> Result<()> {
    let api = kubeutil::nodeclaims(&stack.client);
    wait::until(
        &format!("NodeClaim {name} deleted"),
        timeout,
        Duration::from_millis(250),
        || {
            let api = api.clone();
            async move { Ok(api.get_opt(name).await?.is_none().then_some(())) }
        },
    )
    .await
}

/// Waits until the emsim server `id` is deleted (gone from the live list).
pub async fn wait_server_deleted(stack: &Stack, id: &str, timeout: Duration) -> Result<()> {
    wait::until(
        &format!("server {id} deleted in emsim"),
        timeout,
        Duration::from_millis(250),
        || async {
            let all = stack.emsim.servers_including_deleted().await?;
            let s = all.iter().find(|s| s["id"] == id);
            Ok(s.is_none_or(|s| !s["deleted_at"].is_null()).then_some(()))
        },
    )
    .await
}

/// The emsim server a NodeClaim's providerID names, once set.
pub fn claim_server_id(claim: &kube::api::DynamicObject) -> Option<String> {
    let pid = claim.data["status"]["providerID"].as_str()?;
    parse_provider_id(pid).ok().map(|(_, id)| id)
}

/// Orders placed in emsim (2xx answers to `POST /servers`) so far.
pub async fn orders_placed(stack: &Stack) -> Result<u64> {
    stack
        .emsim
        .successful_calls("POST /baremetal/v1/zones/{zone}/servers")
        .await
}

/// Emsim servers carrying the tag `karpenter.sh/nodeclaim=<claim>`, deleted ones included.
pub async fn servers_of_claim(stack: &Stack, claim: &str) -> Result<Vec<serde_json::Value>> {
    let tag = serde_json::json!(format!("karpenter.sh/nodeclaim={claim}"));
    Ok(stack
        .emsim
        .servers_including_deleted()
        .await?
        .into_iter()
        .filter(|s| s["tags"].as_array().is_some_and(|t| t.contains(&tag)))
        .collect())
}

/// The end of every install scenario: scale `deployments` to zero, then
/// everything the provider made must go: NodeClaims, Nodes, every server
/// ever ordered (deleted in emsim, none left running), and every per-node
/// bootstrap token Secret; and no secret of the run may be in any log.
pub async fn scale_to_zero_and_check_clean(
    stack: &Stack,
    deployments: &[&str],
    timeout: Duration,
) -> Result<()> {
    for d in deployments {
        scale(stack, d, 0).await?;
    }
    wait_all_gone(stack, timeout).await?;
    let servers = stack.emsim.servers_including_deleted().await?;
    let leaked: Vec<String> = servers
        .iter()
        .filter(|s| s["deleted_at"].is_null())
        .map(|s| format!("{} ({}, {})", s["id"], s["offer_name"], s["status"]))
        .collect();
    anyhow::ensure!(leaked.is_empty(), "servers left in emsim: {leaked:?}");
    let tokens = bootstrap_token_secrets(stack).await?;
    anyhow::ensure!(
        tokens.is_empty(),
        "per-node bootstrap token Secrets left after every NodeClaim is gone: {tokens:?}"
    );
    stack.assert_no_secrets_in_logs()
}

/// Names of the per-node bootstrap token Secrets (labelled with their NodeClaim).
pub async fn bootstrap_token_secrets(stack: &Stack) -> Result<Vec<String>> {
    use k8s_openapi::api::core::v1::Secret;
    let api: Api<Secret> = Api::namespaced(stack.client.clone(), "kube-system");
    Ok(api
        .list(&ListParams::default().labels("karpenter.scaleway.com/nodeclaim"))
        .await?
        .items
        .iter()
        .map(|s| s.name_any())
        .collect())
}

/// The invariant every scenario ends with: no NodeClaim whose install
/// finished (phase `joined`) has a Node still carrying the `uninitialized`
/// taint (ours to remove) or Karpenter's `unregistered` one. Such a node is
/// billed and never takes a pod, and nothing in core would ever fix it.
///
/// Both taints are removed by controllers that act on watch events (the
/// engine before it persists `joined`; Karpenter's registration right after
/// the Node appears), so a claim is given a few seconds to converge; a
/// stranded one never does.
pub async fn no_stranded_nodes(stack: &Stack) -> Result<()> {
    const TAINTS: [&str; 2] = [
        "node.cloudprovider.kubernetes.io/uninitialized",
        "karpenter.sh/unregistered",
    ];
    let nodes: Api<Node> = Api::all(stack.client.clone());
    let stranded = || async {
        let mut out = Vec::new();
        for claim in nodeclaim_objects(stack).await? {
            if claim.metadata.deletion_timestamp.is_some()
                || kubeutil::install_phase(&claim).as_deref() != Some("joined")
            {
                continue;
            }
            let name = claim.name_any();
            if let Some(node) = nodes.get_opt(&name).await? {
                for taint in TAINTS.iter().filter(|t| node_has_taint(&node, t)) {
                    out.push(format!("{name}: {taint}"));
                }
            }
        }
        anyhow::Ok(out)
    };
    let result = wait::until(
        "no joined NodeClaim whose Node keeps the uninitialized or unregistered taint",
        Duration::from_secs(30),
        Duration::from_millis(500),
        || async { Ok(stranded().await?.is_empty().then_some(())) },
    )
    .await;
    match result {
        Ok(()) => Ok(()),
        Err(_) => anyhow::bail!(
            "stranded nodes (joined, still tainted): {:?}",
            stranded().await?
        ),
    }
}

/// Runs a scenario on a fresh stack, printing every component's log tail
/// when it fails, and always stopping the stack.
pub async fn with_stack<F>(opts: crate::stack::StackOptions, scenario: F) -> Result<()>
where
    F: AsyncFnOnce(&mut Stack) -> Result<()>,
{
    crate::init_tracing();
    let started = std::time::Instant::now();
    let mut stack = Stack::up(opts).await?;
    tracing::info!(
        elapsed_ms = started.elapsed().as_millis() as u64,
        work_dir = %stack.opts.work_dir.display(),
        "stack up"
    );
    let mut result = scenario(&mut stack).await;
    if result.is_ok() {
        result = no_stranded_nodes(&stack).await;
    }
    if result.is_ok() {
        result = metrics_parse(&stack).await;
    }
    if let Err(e) = &result {
        eprintln!("scenario failed: {e:#}\n{}", stack.diagnostics());
    }
    let work_dir = stack.opts.work_dir.clone();
    stack.stop().await;
    if result.is_ok() {
        free_work_dir(&work_dir);
    }
    tracing::info!(
        elapsed_s = started.elapsed().as_secs_f64(),
        ok = result.is_ok(),
        "scenario finished"
    );
    result
}

/// What a passing scenario's work directory no longer needs: etcd's data
/// (its write-ahead log alone preallocates 64 MB) and the served disk images.
/// The logs, the chart values and Prometheus' data (`just dashboard-picture`
/// reads it) stay; a failing scenario keeps everything, and so does every
/// scenario with `KPS_E2E_KEEP_WORK=1`. Without this a full suite leaves
/// about 3 GB behind per run.
pub fn free_work_dir(dir: &std::path::Path) {
    if std::env::var_os("KPS_E2E_KEEP_WORK").is_some_and(|v| v == "1") {
        return;
    }
    let mut doomed = vec![dir.join("controlplane").join("etcd-data")];
    if let Ok(entries) = std::fs::read_dir(dir) {
        for entry in entries.flatten() {
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(".raw.xz") || name.starts_with("image-") {
                doomed.push(entry.path());
            }
        }
    }
    let mut freed = 0u64;
    for path in doomed {
        let size = dir_size(&path);
        let removed = if path.is_dir() {
            std::fs::remove_dir_all(&path)
        } else {
            std::fs::remove_file(&path)
        };
        match removed {
            Ok(()) => freed += size,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => {
                tracing::warn!(path = %path.display(), error = %e, "cannot free the work dir")
            }
        }
    }
    tracing::info!(dir = %dir.display(), freed_mb = freed / (1 << 20), "work dir freed of etcd data and images (KPS_E2E_KEEP_WORK=1 keeps them)");
}

fn dir_size(path: &std::path::Path) -> u64 {
    match std::fs::symlink_metadata(path) {
        Ok(m) if m.is_dir() => std::fs::read_dir(path)
            .map(|entries| entries.flatten().map(|e| dir_size(&e.path())).sum())
            .unwrap_or(0),
        Ok(m) => m.len(),
        Err(_) => 0,
    }
}

/// With `KPS_PROMTOOL` set (`just e2e` sets it), the provider's `/metrics` at
/// the end of the scenario, whatever it counted, must pass Prometheus' text
/// parser (`promtool check metrics`; linting off, see hack/chart-check.sh).
/// A provider that does not answer (a scenario that ends with it stopped) is
/// not checked.
async fn metrics_parse(stack: &Stack) -> Result<()> {
    let Ok(promtool) = std::env::var("KPS_PROMTOOL") else {
        return Ok(());
    };
    let text = match stack.provider_metrics(0).await {
        Ok(t) => t,
        Err(e) => {
            tracing::info!(error = %e, "provider /metrics not reachable at the end; not checked");
            return Ok(());
        }
    };
    let path = stack.opts.work_dir.join("provider-metrics.txt");
    std::fs::write(&path, &text)?;
    let out = std::process::Command::new(&promtool)
        .args(["check", "metrics", "--lint=none", "--extended"])
        .stdin(std::fs::File::open(&path)?)
        .output()
        .with_context(|| format!("running {promtool}"))?;
    anyhow::ensure!(
        out.status.success(),
        "promtool check metrics refused the provider's /metrics ({}): {}",
        path.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    tracing::info!(
        families = text.lines().filter(|l| l.starts_with("# TYPE ")).count(),
        "provider /metrics parsed by promtool check metrics"
    );
    Ok(())
}

/// A NodePool like [`Stack::nodepool_yaml`] whose only disruption is drift
/// (consolidation never runs: `consolidateAfter: Never`), within one budget
/// of `budget_nodes` (a count or a percentage).
pub fn nodepool_yaml_drift_only(
    name: &str,
    nodeclass: &str,
    extra_requirements: &str,
    budget_nodes: &str,
) -> Result<String> {
    let base = Stack::nodepool_yaml(name, nodeclass, extra_requirements);
    let (head, _) = base
        .split_once("  disruption:\n")
        .context("Stack::nodepool_yaml without a disruption block")?;
    Ok(format!(
        "{head}  disruption:\n    consolidationPolicy: WhenEmptyOrUnderutilized\n    consolidateAfter: Never\n    budgets:\n      - nodes: \"{budget_nodes}\"\n"
    ))
}

/// Makes a talos-sim image of Talos `version` (amd64, the stack's image size
/// and compression) in the work dir; returns its path and the payload sha256
/// that talos-sim reports for a disk holding it.
pub fn make_talos_image(stack: &Stack, version: &str) -> Result<(std::path::PathBuf, String)> {
    let dir = stack.opts.work_dir.join(format!("image-{version}"));
    std::fs::create_dir_all(&dir)?;
    let path = dir.join(&stack.image.file_name);
    let status = std::process::Command::new(stack.bins.rust_bin_dir.join("talos-sim"))
        .args(["make-image", "--version", version, "--arch", "amd64"])
        .args(["--size", &stack.opts.image_size])
        .arg("--out")
        .arg(&path)
        .status()
        .context("running talos-sim make-image")?;
    anyhow::ensure!(status.success(), "talos-sim make-image failed: {status}");
    let sha = crate::image::payload_sha256(&path)?;
    Ok((path, sha))
}

/// True when the Node carries a taint with this key.
pub fn node_has_taint(node: &Node, key: &str) -> bool {
    node.spec
        .as_ref()
        .and_then(|s| s.taints.as_ref())
        .is_some_and(|t| t.iter().any(|t| t.key == key))
}

/// The sum of every series of metric `name` (Prometheus or OpenMetrics
/// text) whose labels include all of `labels`; 0 when there is none (a
/// counter that was never incremented is often not exported at all).
pub fn metric_sum(text: &str, name: &str, labels: &[(&str, &str)]) -> f64 {
    text.lines()
        .filter(|l| !l.starts_with('#'))
        .filter_map(|l| {
            let rest = l.strip_prefix(name)?;
            let (series_labels, value) = match rest.strip_prefix('{') {
                Some(inner) => label_pairs(inner)?,
                None if rest.starts_with(' ') => (Vec::new(), rest),
                None => return None,
            };
            let wanted = labels
                .iter()
                .all(|(k, v)| series_labels.iter().any(|(sk, sv)| sk == k && sv == v));
            let value: f64 = value.split_whitespace().next()?.parse().ok()?;
            wanted.then_some(value)
        })
        // A fold from +0.0: `sum` of no f64 is -0.0, printed "-0".
        .fold(0.0, |total, v| total + v)
}

/// The metric families Karpenter core declares at the bridge's version,
/// name to type (`counter`, `gauge`, `histogram`, `summary`), read from the
/// `sigs.k8s.io/karpenter` module's source by `hack/metric_names.py`.
pub fn core_families() -> Result<&'static BTreeMap<String, String>> {
    static FAMILIES: std::sync::OnceLock<std::result::Result<BTreeMap<String, String>, String>> =
        std::sync::OnceLock::new();
    FAMILIES
        .get_or_init(|| {
            let root = crate::stack::repo_root();
            let out = std::process::Command::new("python3")
                .arg(root.join("hack/metric_names.py"))
                .arg("core-families")
                .current_dir(&root)
                .output()
                .map_err(|e| format!("running hack/metric_names.py: {e}"))?;
            if !out.status.success() {
                return Err(format!(
                    "hack/metric_names.py core-families: {}",
                    String::from_utf8_lossy(&out.stderr).trim()
                ));
            }
            Ok(String::from_utf8_lossy(&out.stdout)
                .lines()
                .filter_map(|l| l.split_once(' '))
                .map(|(n, t)| (n.to_string(), t.trim().to_string()))
                .collect())
        })
        .as_ref()
        .map_err(|e| anyhow::anyhow!("{e}"))
}

/// A core counter's total in a scrape: the sum of its series with `labels`.
/// A counter vector with no series yet is not in the exposition at all
/// (client_golang writes no `# HELP` for it), so a family that `declared`
/// (see [`core_families`]) lists as a counter and the scrape does not show
/// reads 0; a name that core does not declare as a counter is an error,
/// whether or not the scrape shows it.
pub fn core_counter(
    text: &str,
    name: &str,
    labels: &[(&str, &str)],
    declared: &BTreeMap<String, String>,
) -> Result<f64> {
    match declared.get(name).map(String::as_str) {
        Some("counter") => Ok(metric_sum(text, name, labels)),
        Some(other) => anyhow::bail!("core declares {name} as a {other}, not a counter"),
        None => anyhow::bail!(
            "core declares no metric {name}: wrong name for this version of sigs.k8s.io/karpenter?"
        ),
    }
}

/// The `key="value"` pairs after a series' `{`, values unescaped (they may
/// hold `{`, `}` or `,`: the provider's `operation="GET /servers/{server_id}"`),
/// and what follows the closing `}`.
fn label_pairs(mut rest: &str) -> Option<(Vec<(String, String)>, &str)> {
    let mut pairs = Vec::new();
    loop {
        rest = rest.trim_start_matches([',', ' ']);
        if let Some(after) = rest.strip_prefix('}') {
            return Some((pairs, after));
        }
        let (key, after) = rest.split_once("=\"")?;
        let mut value = String::new();
        let mut chars = after.char_indices();
        let end = loop {
            match chars.next()? {
                (i, '"') => break i,
                (_, '\\') => match chars.next()?.1 {
                    'n' => value.push('\n'),
                    c => value.push(c),
                },
                (_, c) => value.push(c),
            }
        };
        pairs.push((key.trim().to_string(), value));
        rest = &after[end + 1..];
    }
}

/// Passes of Karpenter core's NodeClaim garbage collector on the first
/// replica's bridge, from controller-runtime's reconcile counter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct GcPasses {
    pub success: f64,
    pub error: f64,
}

pub const GC_CONTROLLER: &str = "nodeclaim.garbagecollection";

pub async fn gc_passes(stack: &Stack) -> Result<GcPasses> {
    let text = stack.bridge_metrics(0).await?;
    let count = |result| {
        metric_sum(
            &text,
            "controller_runtime_reconcile_total",
            &[("controller", GC_CONTROLLER), ("result", result)],
        )
    };
    Ok(GcPasses {
        success: count("success") + count("requeue_after"),
        error: count("error"),
    })
}

/// Waits until the collector has completed at least one more successful
/// pass than `since`; returns the new counts.
pub async fn wait_gc_success(
    stack: &Stack,
    since: GcPasses,
    timeout: Duration,
) -> Result<GcPasses> {
    wait::until(
        "a successful NodeClaim garbage collection pass",
        timeout,
        Duration::from_millis(250),
        || async {
            let now = gc_passes(stack).await?;
            Ok((now.success > since.success).then_some(now))
        },
    )
    .await
}

/// Every series of `name` in the first replica's provider `/metrics`,
/// summed over the series carrying `labels`.
pub async fn provider_metric(stack: &Stack, name: &str, labels: &[(&str, &str)]) -> Result<f64> {
    Ok(metric_sum(&stack.provider_metrics(0).await?, name, labels))
}

/// The events.k8s.io/v1 Events the provider wrote in namespace `default`
/// (reportingController `karpenter-scaleway`) with this reason.
pub async fn provider_events(
    stack: &Stack,
    reason: &str,
) -> Result<Vec<k8s_openapi::api::events::v1::Event>> {
    let api: Api<k8s_openapi::api::events::v1::Event> =
        Api::namespaced(stack.client.clone(), APP_NAMESPACE);
    Ok(api
        .list(&ListParams::default())
        .await?
        .items
        .into_iter()
        .filter(|e| {
            e.reason.as_deref() == Some(reason)
                && e.reporting_controller.as_deref() == Some("karpenter-scaleway")
        })
        .collect())
}

/// The provider's Events with `reason` once `done` holds for them, waited
/// for at most 10 s. The provider records an Event after the API call it
/// reports returns, so the state a test waits on (a server deleted in
/// emsim, a tag written) can come a moment before the Event does.
pub async fn wait_provider_events(
    stack: &Stack,
    reason: &str,
    done: impl Fn(&[k8s_openapi::api::events::v1::Event]) -> bool,
) -> Result<Vec<k8s_openapi::api::events::v1::Event>> {
    crate::wait::until(
        &format!("the provider's {reason} Events"),
        Duration::from_secs(10),
        Duration::from_millis(100),
        || async {
            let events = provider_events(stack, reason).await?;
            Ok(done(&events).then_some(events))
        },
    )
    .await
}

/// Waits for the provider to abort at `point` (its log says so); any other
/// way of dying, or none, fails the scenario.
pub async fn wait_provider_died(stack: &mut Stack, point: &str) -> Result<()> {
    let marker = format!("test crash point {point} reached");
    let start = std::time::Instant::now();
    loop {
        let p = stack
            .proc_mut(crate::stack::PROVIDER)
            .ok_or_else(|| anyhow::anyhow!("no provider process"))?;
        if !p.is_running() {
            let log = std::fs::read_to_string(p.log_path())?;
            anyhow::ensure!(
                log.contains(&marker),
                "the provider exited, but not at crash point {point}:\n{}",
                p.log_tail(40)
            );
            tracing::info!(point, "provider aborted at its crash point");
            return Ok(());
        }
        if start.elapsed() > Duration::from_secs(180) {
            anyhow::bail!(
                "nothing reached crash point {point} within 180 s:\n{}",
                p.log_tail(40)
            );
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

#[cfg(test)]
mod metric_tests {
    use super::{core_counter, metric_sum};

    /// The soak's reader: a counter not yet incremented reads 0, a wrong
    /// name fails whether or not the scrape has samples that look like it.
    #[test]
    fn a_core_counter_not_incremented_reads_zero_and_a_wrong_name_fails() {
        let declared: std::collections::BTreeMap<String, String> = [
            (
                "karpenter_voluntary_disruption_queue_failures_total",
                "counter",
            ),
            ("karpenter_nodes_allocatable", "gauge"),
        ]
        .into_iter()
        .map(|(n, t)| (n.to_string(), t.to_string()))
        .collect();
        let name = "karpenter_voluntary_disruption_queue_failures_total";
        // No command failed: client_golang exposes nothing of the family.
        let quiet =
            "# HELP karpenter_nodes_allocatable x\nkarpenter_nodes_allocatable{node=\"a\"} 2\n";
        assert_eq!(core_counter(quiet, name, &[], &declared).unwrap(), 0.0);
        let failed = format!(
            "# HELP {name} x\n# TYPE {name} counter\n{name}{{decision=\"replace\",reason=\"underutilized\"}} 2\n{name}{{decision=\"delete\",reason=\"empty\"}} 1\n"
        );
        assert_eq!(core_counter(&failed, name, &[], &declared).unwrap(), 3.0);
        assert_eq!(
            core_counter(&failed, name, &[("decision", "delete")], &declared).unwrap(),
            1.0
        );
        // v1.14's name of another family: not declared, an error even when the
        // scrape happens to show it.
        let wrong = "karpenter_disruption_queue_failures_total";
        let with_wrong = format!("{wrong} 0\n");
        let err = core_counter(&with_wrong, wrong, &[], &declared).unwrap_err();
        assert!(err.to_string().contains("wrong name"), "{err}");
        assert!(core_counter(quiet, wrong, &[], &declared).is_err());
        // A gauge is not read as a counter.
        assert!(core_counter(quiet, "karpenter_nodes_allocatable", &[], &declared).is_err());
    }

    #[test]
    fn sums_the_series_with_the_labels() {
        let text = r#"# HELP controller_runtime_reconcile_total x
controller_runtime_reconcile_total{controller="nodeclaim.garbagecollection",result="error"} 4
controller_runtime_reconcile_total{controller="nodeclaim.garbagecollection",result="success"} 2
controller_runtime_reconcile_total{controller="nodeclaim.lifecycle",result="error"} 9
controller_runtime_reconcile_total_other{controller="nodeclaim.garbagecollection",result="error"} 7
karpenter_scaleway_leader 1
"#;
        let gc = [("controller", "nodeclaim.garbagecollection")];
        assert_eq!(
            metric_sum(text, "controller_runtime_reconcile_total", &gc),
            6.0
        );
        assert_eq!(
            metric_sum(
                text,
                "controller_runtime_reconcile_total",
                &[
                    ("controller", "nodeclaim.garbagecollection"),
                    ("result", "error")
                ]
            ),
            4.0
        );
        assert_eq!(
            metric_sum(text, "controller_runtime_reconcile_total", &[]),
            15.0
        );
        assert_eq!(metric_sum(text, "karpenter_scaleway_leader", &[]), 1.0);
        assert_eq!(metric_sum(text, "karpenter_scaleway_lead", &[]), 0.0);
        assert_eq!(metric_sum(text, "missing_total", &gc), 0.0);
    }

    /// Lines of the provider's `/metrics` (prometheus-client's OpenMetrics
    /// text), as a scrape wrote them.
    #[test]
    fn reads_the_providers_openmetrics_text() {
        let text = r#"# HELP karpenter_scaleway_leader 1 when the bridge reported this replica as leader.
# TYPE karpenter_scaleway_leader gauge
karpenter_scaleway_leader 1
# TYPE karpenter_scaleway_api_requests counter
karpenter_scaleway_api_requests_total{api="baremetal",operation="GET /servers/{server_id}",result="throttled"} 1
karpenter_scaleway_api_requests_total{api="baremetal",operation="GET /servers/{server_id}",result="ok"} 3
karpenter_scaleway_api_requests_total{api="iam",operation="GET /iam/v1alpha1/ssh-keys",result="ok"} 1
karpenter_scaleway_api_request_duration_seconds_bucket{le="0.1",api="baremetal",operation="GET /servers/{server_id}"} 2
karpenter_scaleway_api_rate_limit_quota{api="baremetal"} 50.0
karpenter_scaleway_standby_servers{nodeclass="warm",offer="EM-A115X-SSD",zone="fr-par-2",state="idle"} 2
karpenter_scaleway_catalog_unavailable_offerings{offer="a \"quoted\", name",zone="fr-par-2",reason="out_of_stock"} 1
# EOF
"#;
        let requests = "karpenter_scaleway_api_requests_total";
        let get_server = ("operation", "GET /servers/{server_id}");
        assert_eq!(metric_sum(text, requests, &[get_server]), 4.0);
        assert_eq!(
            metric_sum(text, requests, &[get_server, ("result", "ok")]),
            3.0
        );
        assert_eq!(metric_sum(text, requests, &[("result", "ok")]), 4.0);
        assert_eq!(
            metric_sum(
                text,
                "karpenter_scaleway_api_request_duration_seconds_bucket",
                &[("le", "0.1"), get_server]
            ),
            2.0
        );
        assert_eq!(
            metric_sum(text, "karpenter_scaleway_api_rate_limit_quota", &[]),
            50.0
        );
        assert_eq!(
            metric_sum(
                text,
                "karpenter_scaleway_standby_servers",
                &[("nodeclass", "warm"), ("state", "idle")]
            ),
            2.0
        );
        assert_eq!(
            metric_sum(
                text,
                "karpenter_scaleway_catalog_unavailable_offerings",
                &[("offer", "a \"quoted\", name")]
            ),
            1.0
        );
        assert_eq!(metric_sum(text, "karpenter_scaleway_leader", &[]), 1.0);
    }
}
