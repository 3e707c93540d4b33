//! Helpers of the hybrid scenarios (VMs first, then bare metal staged by the
//! demand planner): prices read from emsim's public API, the cost per hour
//! of the nodes there are, a watch that counts a Deployment's running pods at
//! every change, and the planner's NodeClass status.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::{Context, Result};
use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Node, Pod};
use kube::ResourceExt as _;
use kube::api::{Api, ListParams};
use kube::runtime::watcher;
use serde_json::Value;

use crate::scenario::APP_NAMESPACE;
use crate::stack::{SECRET_KEY, Stack, ZONE};

/// EUR per hour by instance type (Elastic Metal offers and Instance
/// commercial types) in the stack's zone, as emsim's public API answers
/// them: what a user's bill says, not what the provider computed.
pub async fn prices(stack: &Stack) -> Result<BTreeMap<String, f64>> {
    let http = reqwest::Client::new();
    let base = stack.emsim.base();
    let get = |path: String| {
        let http = http.clone();
        async move {
            let v: Value = http
                .get(path)
                .header("X-Auth-Token", SECRET_KEY)
                .send()
                .await?
                .error_for_status()?
                .json()
                .await?;
            anyhow::Ok(v)
        }
    };
    let mut out = BTreeMap::new();
    let offers = get(format!(
        "{base}/baremetal/v1/zones/{ZONE}/offers?subscription_period=hourly"
    ))
    .await?;
    for o in offers["offers"].as_array().context("offers")? {
        let p = &o["price_per_hour"];
        let euros = p["units"].as_f64().unwrap_or(0.0) + p["nanos"].as_f64().unwrap_or(0.0) / 1e9;
        out.insert(o["name"].as_str().context("offer name")?.to_string(), euros);
    }
    for page in 1..=20 {
        let products = get(format!(
            "{base}/instance/v1/zones/{ZONE}/products/servers?per_page=100&page={page}"
        ))
        .await?;
        let servers = products["servers"].as_object().context("servers")?;
        if servers.is_empty() {
            break;
        }
        for (name, p) in servers {
            out.insert(
                name.clone(),
                p["hourly_price"].as_f64().context("hourly_price")?,
            );
        }
    }
    Ok(out)
}

/// The provider's nodes by `karpenter.sh/nodepool`: (node, instance type).
pub async fn nodes_by_pool(stack: &Stack) -> Result<BTreeMap<String, Vec<(String, String)>>> {
    let nodes: Api<Node> = Api::all(stack.client.clone());
    let mut out: BTreeMap<String, Vec<(String, String)>> = BTreeMap::new();
    for n in nodes.list(&ListParams::default()).await?.items {
        let labels = n.labels();
        let (Some(pool), Some(kind)) = (
            labels.get("karpenter.sh/nodepool"),
            labels.get("node.kubernetes.io/instance-type"),
        ) else {
            continue;
        };
        out.entry(pool.clone())
            .or_default()
            .push((n.name_any(), kind.clone()));
    }
    Ok(out)
}

/// Live servers by type (Elastic Metal offer or Instance commercial type)
/// among emsim's records of both kinds (deleted ones are skipped).
pub fn live_by_type(metal: &[Value], vms: &[Value]) -> BTreeMap<String, usize> {
    let mut out = BTreeMap::new();
    let kinds = metal
        .iter()
        .map(|s| (s, "offer_name"))
        .chain(vms.iter().map(|s| (s, "commercial_type")));
    for (s, field) in kinds {
        if s["deleted_at"].is_null() {
            *out.entry(s[field].as_str().unwrap_or_default().to_string())
                .or_default() += 1;
        }
    }
    out
}

/// EUR per hour of `servers` (type → count) at `prices`. A type without a
/// price is an error: it is never billed as free.
pub fn bill(prices: &BTreeMap<String, f64>, servers: &BTreeMap<String, usize>) -> Result<f64> {
    // Not `.sum()`: an empty f64 sum is -0.0, printed "-0.0000".
    servers.iter().try_fold(0.0, |total, (kind, n)| {
        let price = prices
            .get(kind)
            .with_context(|| format!("no price for {kind:?}"))?;
        Ok(total + price * *n as f64)
    })
}

/// EUR per hour of every server billed now (live Elastic Metal servers,
/// standby ones included, and live VMs), at the hourly prices: what the
/// bill would say, read from emsim's records.
pub async fn billed_per_hour(stack: &Stack, prices: &BTreeMap<String, f64>) -> Result<f64> {
    let metal = stack.emsim.servers_including_deleted().await?;
    let vms = stack.emsim.instance_servers_including_deleted().await?;
    bill(prices, &live_by_type(&metal, &vms))
}

/// Running pods of app `app` by the `karpenter.sh/nodepool` of their node
/// (`?` for a node of no NodePool).
pub async fn running_pods_by_pool(stack: &Stack, app: &str) -> Result<BTreeMap<String, usize>> {
    let pods: Api<Pod> = Api::namespaced(stack.client.clone(), APP_NAMESPACE);
    let mut node_pool: BTreeMap<String, String> = BTreeMap::new();
    for (pool, nodes) in nodes_by_pool(stack).await? {
        for (n, _) in nodes {
            node_pool.insert(n, pool.clone());
        }
    }
    let mut by_pool = BTreeMap::new();
    for p in pods
        .list(&ListParams::default().labels(&format!("app={app}")))
        .await?
        .items
        .iter()
        .filter(|p| is_running(p))
    {
        let node = p
            .spec
            .as_ref()
            .and_then(|s| s.node_name.clone())
            .unwrap_or_default();
        let pool = node_pool.get(&node).cloned().unwrap_or_else(|| "?".into());
        *by_pool.entry(pool).or_default() += 1;
    }
    Ok(by_pool)
}

/// Counts the running pods of app `app` at every change the API server
/// reports (a watch, not polling: no change is missed), and keeps the least
/// count seen once armed.
pub struct RunningWatch {
    state: Arc<Mutex<WatchState>>,
    task: tokio::task::JoinHandle<()>,
}

#[derive(Default)]
struct WatchState {
    /// pod → running (phase Running, not being deleted, bound).
    pods: BTreeMap<String, bool>,
    armed: bool,
    least: Option<usize>,
    changes: u64,
}

impl WatchState {
    fn running(&self) -> usize {
        self.pods.values().filter(|r| **r).count()
    }

    fn note(&mut self) {
        self.changes += 1;
        if self.armed {
            let now = self.running();
            self.least = Some(self.least.map_or(now, |l| l.min(now)));
        }
    }
}

fn is_running(p: &Pod) -> bool {
    p.metadata.deletion_timestamp.is_none()
        && p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some()
        && p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
}

impl RunningWatch {
    pub fn start(stack: &Stack, app: &str) -> Self {
        let api: Api<Pod> = Api::namespaced(stack.client.clone(), APP_NAMESPACE);
        let state: Arc<Mutex<WatchState>> = Arc::default();
        let s = state.clone();
        let config = watcher::Config::default().labels(&format!("app={app}"));
        let task = tokio::spawn(async move {
            let mut stream = std::pin::pin!(watcher(api, config));
            while let Some(event) = stream.next().await {
                let mut st = s.lock().unwrap_or_else(|p| p.into_inner());
                match event {
                    Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p)) => {
                        st.pods.insert(p.name_any(), is_running(&p));
                        st.note();
                    }
                    Ok(watcher::Event::Delete(p)) => {
                        st.pods.remove(&p.name_any());
                        st.note();
                    }
                    Ok(watcher::Event::Init | watcher::Event::InitDone) => {}
                    Err(error) => tracing::warn!(%error, "pod watch"),
                }
            }
        });
        RunningWatch { state, task }
    }

    /// Starts keeping the least count from now on.
    pub fn arm(&self) {
        let mut st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        st.armed = true;
        st.least = Some(st.running());
    }

    /// (running now, least since armed, changes seen).
    pub fn read(&self) -> (usize, Option<usize>, u64) {
        let st = self.state.lock().unwrap_or_else(|p| p.into_inner());
        (st.running(), st.least, st.changes)
    }
}

impl Drop for RunningWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The NodeClass's `status.planner` entries.
pub async fn planner_status(stack: &Stack, class: &str) -> Result<Vec<Value>> {
    let nc = crate::kubeutil::nodeclasses(&stack.client)
        .get(class)
        .await?;
    Ok(nc.data["status"]["planner"]
        .as_array()
        .cloned()
        .unwrap_or_default())
}

/// Waits until the first planner entry of `class` satisfies `pred`.
pub async fn wait_planner(
    stack: &Stack,
    class: &str,
    what: &str,
    timeout: Duration,
    pred: impl Fn(&Value) -> bool,
) -> Result<Value> {
    let pred = &pred;
    crate::wait::until(what, timeout, Duration::from_millis(500), || async move {
        let list = planner_status(stack, class).await?;
        Ok(list.first().filter(|s| pred(s)).cloned())
    })
    .await
}

/// One look at the cluster and the bill (for runs by hand: the soak).
#[derive(Debug, Clone, PartialEq)]
pub struct Look {
    /// Running pods of the app by NodePool of their node.
    pub pods: BTreeMap<String, usize>,
    /// NodeClaims by NodePool: (launched, initialized, deleting).
    pub claims: BTreeMap<String, (usize, usize, usize)>,
    pub vms: usize,
    /// Live Elastic Metal servers by what they are: `node`, `standby/<state>`
    /// or `other`.
    pub metal: BTreeMap<String, usize>,
    /// EUR per hour billed ([`billed_per_hour`]).
    pub euros_per_hour: f64,
}

impl Look {
    pub async fn take(stack: &Stack, app: &str, prices: &BTreeMap<String, f64>) -> Result<Look> {
        let by_pool = running_pods_by_pool(stack, app).await?;
        let mut claims: BTreeMap<String, (usize, usize, usize)> = BTreeMap::new();
        for c in crate::scenario::nodeclaim_objects(stack).await? {
            let pool = c
                .labels()
                .get("karpenter.sh/nodepool")
                .cloned()
                .unwrap_or_default();
            let e = claims.entry(pool).or_default();
            let conditions = c.data["status"]["conditions"]
                .as_array()
                .cloned()
                .unwrap_or_default();
            let is = |t: &str| {
                conditions
                    .iter()
                    .any(|x| x["type"] == t && x["status"] == "True")
            };
            if c.metadata.deletion_timestamp.is_some() {
                e.2 += 1;
            } else if is("Initialized") {
                e.1 += 1;
            } else if is("Launched") {
                e.0 += 1;
            }
        }
        let mut metal = BTreeMap::new();
        for s in stack.emsim.servers_including_deleted().await? {
            if !s["deleted_at"].is_null() {
                continue;
            }
            let what = if crate::standby::tag(&s, "karpenter.sh/nodeclaim").is_some() {
                "node".to_string()
            } else if let Some(state) = crate::standby::state(&s) {
                format!("standby/{state}")
            } else {
                "other".to_string()
            };
            *metal.entry(what).or_default() += 1;
        }
        let vms = stack
            .emsim
            .instance_servers_including_deleted()
            .await?
            .iter()
            .filter(|s| s["deleted_at"].is_null())
            .count();
        Ok(Look {
            pods: by_pool,
            claims,
            vms,
            metal,
            euros_per_hour: billed_per_hour(stack, prices).await?,
        })
    }

    /// One Markdown table row, `t` seconds into the run.
    pub fn row(&self, t: f64) -> String {
        let map = |m: &BTreeMap<String, usize>| {
            m.iter()
                .map(|(k, v)| format!("{k}: {v}"))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let claims = self
            .claims
            .iter()
            .map(|(k, (l, i, d))| format!("{k}: {l} launched, {i} initialized, {d} deleting"))
            .collect::<Vec<_>>()
            .join("; ");
        format!(
            "| {:.0} min {:02.0} s | {} | {} | {} | {} | {:.4} |",
            (t / 60.0).floor(),
            t % 60.0,
            map(&self.pods),
            claims,
            self.vms,
            map(&self.metal),
            self.euros_per_hour
        )
    }
}

/// The looks of a run that differ from the one before, with their time
/// (seconds since [`Timeline::new`]); printed as they come.
pub struct Timeline {
    started: std::time::Instant,
    rows: Vec<(f64, Look)>,
}

impl Default for Timeline {
    fn default() -> Self {
        Timeline {
            started: std::time::Instant::now(),
            rows: Vec::new(),
        }
    }
}

impl Timeline {
    pub fn elapsed(&self) -> f64 {
        self.started.elapsed().as_secs_f64()
    }

    /// Looks every 10 s (recording what changed) until `pred` holds of a
    /// look; fails after `timeout`.
    pub async fn until(
        &mut self,
        stack: &Stack,
        app: &str,
        prices: &BTreeMap<String, f64>,
        what: &str,
        timeout: Duration,
        pred: impl Fn(&Look) -> bool,
    ) -> Result<Look> {
        let deadline = std::time::Instant::now() + timeout;
        loop {
            let look = Look::take(stack, app, prices).await?;
            if self.rows.last().is_none_or(|(_, l)| *l != look) {
                let t = self.elapsed();
                println!("{}", look.row(t));
                self.rows.push((t, look.clone()));
            }
            if pred(&look) {
                return Ok(look);
            }
            if std::time::Instant::now() > deadline {
                anyhow::bail!(
                    "timed out after {timeout:?} waiting for {what}; last look: {look:?}"
                );
            }
            tokio::time::sleep(Duration::from_secs(10)).await;
        }
    }

    /// The table so far.
    pub fn table(&self) -> String {
        let mut out = String::from(
            "| time | running pods by NodePool | NodeClaims | VMs | Elastic Metal servers | EUR/h billed |\n|---|---|---|---|---|---|\n",
        );
        for (t, look) in &self.rows {
            out.push_str(&look.row(*t));
            out.push('\n');
        }
        out
    }
}

/// Core's disruption commands from its log: (time, message) of every
/// `disrupting node(s)`, `command succeeded` and failure line.
pub fn disruption_log(stack: &Stack) -> Result<Vec<(String, String)>> {
    let log = std::fs::read_to_string(
        stack
            .opts
            .work_dir
            .join("logs")
            .join(format!("{}.log", crate::stack::BRIDGE)),
    )?;
    let mut out = Vec::new();
    for line in log.lines() {
        let Ok(v) = serde_json::from_str::<Value>(line) else {
            continue;
        };
        let message = v["message"].as_str().unwrap_or_default();
        let text = match message {
            "disrupting node(s)" => v["command"].as_str().unwrap_or_default().to_string(),
            "command succeeded" => format!(
                "command succeeded: {} node(s) disrupted, {} replacement(s)",
                v["disrupted-node-count"], v["replacement-node-count"]
            ),
            "failed terminating nodes while executing a disruption command" => {
                format!(
                    "command failed: {}",
                    v["error"].as_str().unwrap_or_default()
                )
            }
            _ => continue,
        };
        out.push((v["time"].as_str().unwrap_or_default().to_string(), text));
    }
    Ok(out)
}

/// A PodDisruptionBudget for app `app` in the apps' namespace.
pub fn pdb_yaml(app: &str, min_available: u32) -> String {
    format!(
        "apiVersion: policy/v1\nkind: PodDisruptionBudget\nmetadata:\n  name: {app}\n  namespace: {APP_NAMESPACE}\nspec:\n  minAvailable: {min_available}\n  selector:\n    matchLabels: {{app: {app}}}\n"
    )
}

/// The scenarios' hourly NodeClass `name` with one standby pool of `offer`
/// (`min: 0`, `max`), and `planner` (a YAML flow mapping such as
/// `{nodePools: [vms], window: "40s"}`) when given.
pub fn planner_nodeclass_yaml(
    stack: &Stack,
    name: &str,
    offer: &str,
    max: u32,
    planner: Option<&str>,
) -> String {
    let plain = crate::standby::nodeclass_yaml(
        stack,
        name,
        "hourly",
        &[crate::standby::Pool {
            offer,
            min: 0,
            max,
            idle_hourly_keep: None,
        }],
    );
    let Some(planner) = planner else {
        return plain;
    };
    let end = format!("min: 0, max: {max}}}\n");
    assert!(plain.contains(&end), "{plain}");
    plain.replace(&end, &format!("min: 0, max: {max}, planner: {planner}}}\n"))
}

/// The Instance NodeClass `name` and its NodePool `name` (weight `weight`,
/// VMs of `vm_type` only; consolidating under-used VMs when
/// `underutilized`, else only empty ones).
pub async fn vm_pool(
    stack: &Stack,
    name: &str,
    vm_type: &str,
    weight: u32,
    underutilized: bool,
) -> Result<()> {
    let class = stack
        .create_instance_nodeclass(&stack.instance_nodeclass_yaml(name, &stack.opts.talos_version))
        .await?;
    let pool = Stack::instance_nodepool_yaml(
        name,
        &class,
        weight,
        &crate::scenario::instance_types_requirement(&[vm_type]),
        "",
    );
    anyhow::ensure!(pool.contains("consolidationPolicy: WhenEmpty\n"), "{pool}");
    let pool = if underutilized {
        pool.replace(
            "consolidationPolicy: WhenEmpty\n",
            "consolidationPolicy: WhenEmptyOrUnderutilized\n",
        )
    } else {
        pool
    };
    crate::kubeutil::apply_yaml(&stack.client, &pool).await?;
    Ok(())
}

/// The VMs-first setup of docs/planner.md (examples/vm-first-warm-metal.yaml)
/// on a stack: the VM NodePool `vms` (weight 10, VMs of `vm_type`), and
/// the Elastic Metal NodeClass `metal` whose standby pool of `offer`
/// (`min: 0`, `max`) has a planner counting `vms`, with its NodePool of
/// the same name that only adopts standby servers (weight 50).
#[derive(Debug, Clone)]
pub struct VmsFirst<'a> {
    pub vms: &'a str,
    pub vm_type: &'a str,
    pub metal: &'a str,
    pub offer: &'a str,
    pub max: u32,
    /// The planner's `window` and `hold` (cluster time: real seconds).
    pub window: Duration,
    pub hold: Duration,
}

impl VmsFirst<'_> {
    /// The metal NodeClass, its planner a dry run or not.
    pub fn metal_nodeclass_yaml(&self, stack: &Stack, dry_run: bool) -> String {
        planner_nodeclass_yaml(
            stack,
            self.metal,
            self.offer,
            self.max,
            Some(&format!(
                "{{nodePools: [{}], window: \"{}s\", hold: \"{}s\", dryRun: {dry_run}}}",
                self.vms,
                self.window.as_secs(),
                self.hold.as_secs()
            )),
        )
    }

    /// Applies the metal NodeClass (waiting for it to be Ready), its
    /// reserved-only NodePool and the VM NodeClass and NodePool, which
    /// consolidates under-used VMs when `underutilized`, else only empty
    /// ones.
    pub async fn apply(&self, stack: &Stack, underutilized: bool) -> Result<()> {
        stack
            .apply_nodeclass(self.metal, &self.metal_nodeclass_yaml(stack, false))
            .await?;
        crate::kubeutil::apply_yaml(
            &stack.client,
            &crate::standby::reserved_nodepool_yaml(self.metal, self.metal, 50, &[self.offer]),
        )
        .await?;
        vm_pool(stack, self.vms, self.vm_type, 10, underutilized).await
    }
}

impl RunningWatch {
    /// Started, seen `n` running pods, and armed.
    pub async fn armed(stack: &Stack, app: &str, n: usize) -> Result<Self> {
        let watch = RunningWatch::start(stack, app);
        crate::wait::until(
            "the pod watch sees the running pods",
            Duration::from_secs(30),
            Duration::from_millis(100),
            || async { Ok((watch.read().0 == n).then_some(())) },
        )
        .await?;
        watch.arm();
        Ok(watch)
    }
}
