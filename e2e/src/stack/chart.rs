//! Installing the provider from the rendered `karpenter-scaleway` chart, with
//! processes standing in for the Deployment's containers, so that the e2e
//! tests run exactly the chart's settings (environment, arguments, RBAC,
//! leader election) rather than a hand-written copy of them.
//!
//! What a cluster would do and the harness does instead:
//! - `helm install`: `helm template` with `e2e/chart-values.yaml` and the
//!   stack's own values, then every rendered object but the Deployment is
//!   server-side applied (ServiceAccount, RBAC, PDB, Service, ...).
//! - the kubelet starting a pod: one process per container, with the
//!   container's `args` and its `env` resolved as the kubelet resolves them
//!   (`fieldRef`, `resourceFieldRef`, `secretKeyRef` read from the API server),
//!   and no environment inherited from the harness.
//! - the pod's network namespace: each declared container port is moved to a
//!   free loopback port (the env value that sets it is rewritten), so two
//!   replicas on one host do not collide.
//! - `emptyDir` volumes: a per-replica scratch directory replaces the mount
//!   path in env values and arguments (the Unix socket shared by the bridge
//!   and the provider).
//! - the projected ServiceAccount token: a kubeconfig holding a token of the
//!   chart's ServiceAccount (TokenRequest API), so a permission the chart
//!   lacks fails the test as it would fail in a cluster.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Container, PodSpec, Secret};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use kube::Client;
use kube::api::{Api, DynamicObject};
use serde::Deserialize;

use crate::kubeutil;
use crate::procs::free_port;

/// The Helm release name, as in docs/install.md.
pub const RELEASE: &str = "karpenter-scaleway";
/// The Secret the e2e operator creates for the credentials
/// (`scaleway.existingSecret`, the recommended way in docs/install.md).
pub const CREDENTIALS_SECRET: &str = "scaleway-credentials";

/// The chart rendered for one stack.
pub struct Rendered {
    /// The release namespace (the Deployment's).
    pub namespace: String,
    pub deployment: Deployment,
    /// Every other object, in the order rendered.
    pub objects: Vec<DynamicObject>,
}

/// The helm binary: `KPS_HELM`, else the one `hack/helm.sh` builds or finds
/// in its cache (what `just chart-check` uses).
pub fn helm_binary(root: &Path) -> Result<PathBuf> {
    if let Some(p) = std::env::var_os("KPS_HELM") {
        return Ok(PathBuf::from(p));
    }
    let script = root.join("hack/helm.sh");
    let out = Command::new(&script)
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    if !out.status.success() {
        bail!(
            "{} failed ({}): {}",
            script.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let path = String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .map(str::trim)
        .unwrap_or_default()
        .to_string();
    ensure!(
        !path.is_empty(),
        "{} printed no helm path",
        script.display()
    );
    Ok(PathBuf::from(path))
}

/// `helm template` of the chart in `namespace` with `values` (later files
/// win); the output is kept in `out` for whoever reads a failed run.
pub fn render(
    helm: &Path,
    chart: &Path,
    release: &str,
    namespace: &str,
    values: &[PathBuf],
    out: &Path,
) -> Result<Rendered> {
    let mut cmd = Command::new(helm);
    cmd.arg("template")
        .arg(release)
        .arg(chart)
        .args(["--namespace", namespace]);
    for v in values {
        cmd.arg("--values").arg(v);
    }
    let output = cmd
        .output()
        .with_context(|| format!("running {}", helm.display()))?;
    if !output.status.success() {
        bail!(
            "helm template {} failed ({}): {}",
            chart.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
    }
    let text = String::from_utf8(output.stdout).context("helm template printed non-UTF-8")?;
    std::fs::write(out, &text).with_context(|| format!("writing {}", out.display()))?;
    parse(&text)
}

fn parse(text: &str) -> Result<Rendered> {
    let mut deployments = Vec::new();
    let mut objects = Vec::new();
    for doc in serde_yaml_ng::Deserializer::from_str(text) {
        let value = serde_yaml_ng::Value::deserialize(doc)?;
        if value.is_null() {
            continue;
        }
        if value.get("kind").and_then(|k| k.as_str()) == Some("Deployment") {
            deployments.push(
                serde_yaml_ng::from_value::<Deployment>(value)
                    .context("parsing the rendered Deployment")?,
            );
        } else {
            objects.push(
                serde_yaml_ng::from_value::<DynamicObject>(value)
                    .context("parsing a rendered object")?,
            );
        }
    }
    ensure!(
        deployments.len() == 1,
        "the chart rendered {} Deployments, expected one",
        deployments.len()
    );
    let deployment = deployments.remove(0);
    let namespace = deployment
        .metadata
        .namespace
        .clone()
        .context("the rendered Deployment has no namespace")?;
    Ok(Rendered {
        namespace,
        deployment,
        objects,
    })
}

impl Rendered {
    /// Server-side applies every object but the Deployment, as `helm install`
    /// would (the harness runs the Deployment's containers itself).
    pub async fn apply(&self, client: &Client) -> Result<()> {
        for obj in &self.objects {
            kubeutil::apply(client, obj.clone()).await?;
        }
        Ok(())
    }

    /// Server-side applies the Deployment too, for a cluster whose nodes
    /// run its Pods (the system node, a kind cluster).
    pub async fn apply_deployment(&self, client: &Client) -> Result<()> {
        let value = serde_json::to_value(&self.deployment)?;
        kubeutil::apply(client, serde_json::from_value(value)?).await?;
        Ok(())
    }

    pub fn pod_spec(&self) -> Result<&PodSpec> {
        self.deployment
            .spec
            .as_ref()
            .and_then(|s| s.template.spec.as_ref())
            .context("the rendered Deployment has no pod template")
    }

    /// `spec.replicas` (1 when absent, as the API server defaults it).
    pub fn replicas(&self) -> usize {
        self.deployment
            .spec
            .as_ref()
            .and_then(|s| s.replicas)
            .map_or(1, |r| r.max(0) as usize)
    }

    pub fn name(&self) -> String {
        self.deployment.metadata.name.clone().unwrap_or_default()
    }

    pub fn service_account(&self) -> Result<String> {
        let pod = self.pod_spec()?;
        ensure!(
            pod.automount_service_account_token != Some(false),
            "the chart's pod does not mount a ServiceAccount token: the harness cannot tell how it would authenticate"
        );
        Ok(pod
            .service_account_name
            .clone()
            .unwrap_or_else(|| "default".to_string()))
    }
}

/// Writes the Secret named by `scaleway.existingSecret`, as an operator does
/// before `helm install`.
pub async fn apply_credentials(
    client: &Client,
    namespace: &str,
    access_key: &str,
    secret_key: &str,
    project_id: &str,
) -> Result<()> {
    let secret = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": CREDENTIALS_SECRET, "namespace": namespace},
        "type": "Opaque",
        "stringData": {
            "SCW_ACCESS_KEY": access_key,
            "SCW_SECRET_KEY": secret_key,
            "SCW_DEFAULT_PROJECT_ID": project_id,
        },
    });
    kubeutil::apply(client, serde_json::from_value(secret)?).await?;
    Ok(())
}

/// A kubeconfig authenticating with a fresh token of `service_account`
/// (TokenRequest API), standing in for the token Kubernetes projects into
/// the pod; its default namespace is the pod's, as in-cluster. Returns the
/// token too: it is a credential the logs must never show.
pub async fn service_account_kubeconfig(
    client: &Client,
    namespace: &str,
    service_account: &str,
    server_url: &str,
    ca_pem: &str,
    path: &Path,
) -> Result<String> {
    use base64::Engine;
    use k8s_openapi::api::authentication::v1::{TokenRequest, TokenRequestSpec};
    use k8s_openapi::api::core::v1::ServiceAccount;
    ensure!(
        !ca_pem.is_empty(),
        "the control plane's kubeconfig has no CA: cannot write a kubeconfig for the ServiceAccount"
    );
    let api: Api<ServiceAccount> = Api::namespaced(client.clone(), namespace);
    let request = TokenRequest {
        spec: TokenRequestSpec {
            // Longer than any scenario; the audience is the API server's own.
            expiration_seconds: Some(6 * 3600),
            ..Default::default()
        },
        ..Default::default()
    };
    let answer = api
        .create_token_request(service_account, &Default::default(), &request)
        .await
        .with_context(|| {
            format!("TokenRequest for ServiceAccount {namespace}/{service_account}")
        })?;
    let token = answer
        .status
        .map(|s| s.token)
        .filter(|t| !t.is_empty())
        .context("TokenRequest answered without a token")?;
    let user = format!("system:serviceaccount:{namespace}:{service_account}");
    let doc = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "e2e", "cluster": {
            "server": server_url,
            "certificate-authority-data": base64::engine::general_purpose::STANDARD.encode(ca_pem),
        }}],
        "users": [{"name": user, "user": {"token": token}}],
        "contexts": [{"name": "pod", "context": {"cluster": "e2e", "user": user, "namespace": namespace}}],
        "current-context": "pod",
    });
    write_private(path, &serde_yaml_ng::to_string(&doc)?)?;
    Ok(token)
}

fn write_private(path: &Path, text: &str) -> Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::File::options()
        .create(true)
        .write(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .with_context(|| format!("writing {}", path.display()))?;
    f.write_all(text.as_bytes())?;
    Ok(())
}

/// An HTTP probe of a container, on the host port standing in for its
/// container port.
#[derive(Debug, Clone)]
pub struct HttpProbe {
    pub path: String,
    pub port: u16,
    /// How long Kubernetes would wait before giving up on the container
    /// (`initialDelaySeconds + periodSeconds * failureThreshold`).
    pub budget: Duration,
}

/// A container of the Deployment resolved into a host process.
#[derive(Debug, Clone)]
pub struct ContainerProcess {
    pub container: String,
    pub program: PathBuf,
    pub args: Vec<String>,
    /// The whole environment of the process (nothing is inherited).
    pub env: Vec<(String, String)>,
    /// Named container ports -> the loopback port standing in for each.
    pub ports: BTreeMap<String, u16>,
    pub startup_probe: Option<HttpProbe>,
}

impl ContainerProcess {
    pub fn env(&self, name: &str) -> Option<&str> {
        self.env
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }

    /// Sets `name`, replacing an earlier value.
    pub fn set_env(&mut self, name: &str, value: &str) {
        self.env.retain(|(k, _)| k != name);
        self.env.push((name.to_string(), value.to_string()));
    }

    pub fn command(&self) -> Command {
        let mut cmd = Command::new(&self.program);
        cmd.args(&self.args).env_clear();
        // Only what a test run's tooling needs (backtraces, coverage), never
        // the harness's own settings (KUBECONFIG, RUST_LOG, ...).
        for k in ["RUST_BACKTRACE", "LLVM_PROFILE_FILE", "GOCOVERDIR"] {
            if let Some(v) = std::env::var_os(k) {
                cmd.env(k, v);
            }
        }
        cmd.envs(self.env.iter().map(|(k, v)| (k, v)));
        cmd
    }
}

/// What the kubelet would know about the pod a container runs in.
pub struct PodContext<'a> {
    pub client: &'a Client,
    pub namespace: &'a str,
    pub pod_name: &'a str,
    pub spec: &'a PodSpec,
    /// `emptyDir` volume name -> the scratch directory standing in for it.
    pub volume_dirs: &'a BTreeMap<String, PathBuf>,
}

/// Creates a scratch directory under `dir` for every `emptyDir` volume of
/// the pod; other volume kinds get none (a container mounting one fails to
/// resolve).
pub fn empty_dirs(spec: &PodSpec, dir: &Path) -> Result<BTreeMap<String, PathBuf>> {
    let mut out = BTreeMap::new();
    for v in spec.volumes.iter().flatten() {
        if v.empty_dir.is_some() {
            let d = dir.join(&v.name);
            std::fs::create_dir_all(&d).with_context(|| format!("creating {}", d.display()))?;
            out.insert(v.name.clone(), d);
        }
    }
    Ok(out)
}

/// Resolves `container` of the pod into a process running `program`.
pub async fn container_process(
    pod: &PodContext<'_>,
    container: &Container,
    program: PathBuf,
) -> Result<ContainerProcess> {
    let name = &container.name;
    ensure!(
        container.command.is_none(),
        "container {name} overrides the image's command: the harness only knows the entrypoints"
    );
    ensure!(
        container.env_from.is_none(),
        "container {name} uses envFrom, which the harness does not resolve"
    );

    // Ports: the pod has its own network namespace, the processes share the host's.
    let mut port_map: BTreeMap<i32, u16> = BTreeMap::new();
    let mut ports = BTreeMap::new();
    for p in container.ports.iter().flatten() {
        let host = free_port()?;
        port_map.insert(p.container_port, host);
        if let Some(n) = &p.name {
            ports.insert(n.clone(), host);
        }
    }
    // Mounts: only emptyDir volumes have a stand-in.
    let mut mounts: Vec<(String, PathBuf)> = Vec::new();
    for m in container.volume_mounts.iter().flatten() {
        // The ServiceAccount token the API server's admission projects into
        // every pod (`kube-api-access-*`): the harness stands in for it with
        // the KUBECONFIG it gives the process.
        let projected_token = pod.spec.volumes.iter().flatten().any(|v| {
            v.name == m.name
                && v.projected.as_ref().is_some_and(|p| {
                    p.sources
                        .iter()
                        .flatten()
                        .any(|s| s.service_account_token.is_some())
                })
        });
        if projected_token {
            continue;
        }
        ensure!(
            m.sub_path.is_none() && m.sub_path_expr.is_none(),
            "container {name} mounts {} with a subPath, which the harness does not stand in for",
            m.name
        );
        let dir = pod.volume_dirs.get(&m.name).with_context(|| {
            format!(
                "container {name} mounts volume {}, which is not an emptyDir: the harness has no stand-in for it",
                m.name
            )
        })?;
        mounts.push((m.mount_path.trim_end_matches('/').to_string(), dir.clone()));
    }

    let mut used_ports = BTreeSet::new();
    // A bare number is a port only in a variable named like one
    // (`METRICS_PORT=8080`, not `KUBE_CLIENT_QPS=200`); `host:port` anywhere.
    let mut rewrite = |name: Option<&str>, value: String| -> String {
        let value = rewrite_path(&value, &mounts);
        let bare = name.is_some_and(|n| n.contains("PORT"));
        rewrite_port(value, bare, &port_map, &mut used_ports)
    };

    let mut env = Vec::new();
    for e in container.env.iter().flatten() {
        let value = match (&e.value, &e.value_from) {
            (_, Some(from)) => resolve_value_from(pod, container, &e.name, from).await?,
            (Some(v), None) => {
                ensure!(
                    !v.contains("$("),
                    "env {} of container {name} uses $(VAR) expansion, which the harness does not do",
                    e.name
                );
                Some(v.clone())
            }
            (None, None) => Some(String::new()),
        };
        if let Some(v) = value {
            env.push((e.name.clone(), rewrite(Some(&e.name), v)));
        }
    }
    let args: Vec<String> = container
        .args
        .iter()
        .flatten()
        .cloned()
        .map(|a| rewrite(None, a))
        .collect();
    for cport in port_map.keys() {
        ensure!(
            used_ports.contains(cport),
            "container {name} declares port {cport} but no env value or argument sets it: two replicas on one host would both bind it"
        );
    }

    let startup_probe = match container
        .startup_probe
        .as_ref()
        .or(container.readiness_probe.as_ref())
    {
        Some(probe) => match &probe.http_get {
            Some(get) => {
                let port = match &get.port {
                    IntOrString::Int(n) => port_map.get(n).copied(),
                    IntOrString::String(s) => ports.get(s).copied(),
                }
                .with_context(|| {
                    format!(
                        "container {name}: the probe's port {:?} is not a declared port",
                        get.port
                    )
                })?;
                let secs = probe.initial_delay_seconds.unwrap_or(0)
                    + probe.period_seconds.unwrap_or(10) * probe.failure_threshold.unwrap_or(3);
                Some(HttpProbe {
                    path: get.path.clone().unwrap_or_else(|| "/".to_string()),
                    port,
                    budget: Duration::from_secs(secs.max(1) as u64),
                })
            }
            None => None,
        },
        None => None,
    };

    Ok(ContainerProcess {
        container: name.clone(),
        program,
        args,
        env,
        ports,
        startup_probe,
    })
}

/// `value` with a leading mount path replaced by its scratch directory.
fn rewrite_path(value: &str, mounts: &[(String, PathBuf)]) -> String {
    for (mount, dir) in mounts {
        if value == mount {
            return dir.display().to_string();
        }
        if let Some(rest) = value.strip_prefix(mount.as_str())
            && rest.starts_with('/')
        {
            return format!("{}{rest}", dir.display());
        }
    }
    value.to_string()
}

/// `value` with a declared container port (`host:8080`, or `8080` when
/// `bare`) moved to its loopback stand-in; a wildcard host becomes 127.0.0.1
/// so nothing listens beyond loopback.
fn rewrite_port(
    value: String,
    bare: bool,
    port_map: &BTreeMap<i32, u16>,
    used: &mut BTreeSet<i32>,
) -> String {
    for (cport, host) in port_map {
        let p = cport.to_string();
        if bare && value == p {
            used.insert(*cport);
            return host.to_string();
        }
        if let Some(addr) = value.strip_suffix(&format!(":{p}"))
            && matches!(addr, "" | "0.0.0.0" | "[::]" | "127.0.0.1" | "localhost")
        {
            used.insert(*cport);
            return format!("127.0.0.1:{host}");
        }
    }
    value
}

async fn resolve_value_from(
    pod: &PodContext<'_>,
    container: &Container,
    env: &str,
    from: &k8s_openapi::api::core::v1::EnvVarSource,
) -> Result<Option<String>> {
    let name = &container.name;
    if let Some(f) = &from.field_ref {
        let v = match f.field_path.as_str() {
            "metadata.name" => pod.pod_name.to_string(),
            "metadata.namespace" => pod.namespace.to_string(),
            "spec.serviceAccountName" => pod
                .spec
                .service_account_name
                .clone()
                .unwrap_or_else(|| "default".into()),
            "status.podIP" | "status.hostIP" => "127.0.0.1".to_string(),
            other => bail!("env {env} of container {name}: fieldRef {other} has no stand-in"),
        };
        return Ok(Some(v));
    }
    if let Some(r) = &from.resource_field_ref {
        let target = match &r.container_name {
            Some(c) if !c.is_empty() => pod
                .spec
                .containers
                .iter()
                .chain(pod.spec.init_containers.iter().flatten())
                .find(|x| &x.name == c)
                .with_context(|| {
                    format!("env {env}: resourceFieldRef names container {c}, not in the pod")
                })?,
            _ => container,
        };
        let (kind, resource) = r.resource.split_once('.').with_context(|| {
            format!(
                "env {env}: resource {} has no requests./limits. prefix",
                r.resource
            )
        })?;
        let resources = target.resources.as_ref();
        let quantity = match kind {
            "requests" => resources.and_then(|x| x.requests.as_ref()),
            "limits" => resources.and_then(|x| x.limits.as_ref()),
            other => bail!("env {env}: resource kind {other} unknown"),
        }
        .and_then(|m| m.get(resource))
        .with_context(|| {
            format!(
                "env {env}: container {} sets no {}; the kubelet would use the node's allocatable, which the harness does not know",
                target.name, r.resource
            )
        })?;
        let divisor = r.divisor.as_ref().map_or("1", |d| d.0.as_str());
        return Ok(Some(divide_quantity(&quantity.0, divisor)?.to_string()));
    }
    if let Some(s) = &from.secret_key_ref {
        let optional = s.optional.unwrap_or(false);
        let api: Api<Secret> = Api::namespaced(pod.client.clone(), pod.namespace);
        let secret = api.get_opt(&s.name).await?;
        let value = secret
            .as_ref()
            .and_then(|x| x.data.as_ref())
            .and_then(|d| d.get(&s.key))
            .map(|b| String::from_utf8(b.0.clone()))
            .transpose()
            .with_context(|| {
                format!("env {env}: key {} of Secret {} is not UTF-8", s.key, s.name)
            })?;
        return match (value, optional) {
            (Some(v), _) => Ok(Some(v)),
            (None, true) => Ok(None),
            (None, false) => bail!(
                "env {env} of container {name}: Secret {}/{} has no key {} (the pod would not start)",
                pod.namespace,
                s.name,
                s.key
            ),
        };
    }
    bail!("env {env} of container {name}: configMapKeyRef and other sources have no stand-in")
}

/// `ceil(quantity / divisor)` as the kubelet computes a `resourceFieldRef`
/// (a zero divisor counts as 1).
fn divide_quantity(quantity: &str, divisor: &str) -> Result<u128> {
    let q = milli_units(quantity)?;
    let d = milli_units(divisor)?;
    let d = if d == 0 { 1000 } else { d };
    Ok(q.div_ceil(d))
}

/// A Kubernetes quantity in thousandths of its unit, rounded up.
fn milli_units(s: &str) -> Result<u128> {
    let split = s
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(s.len());
    let (number, suffix) = s.split_at(split);
    let factor: u128 = match suffix {
        "m" => 1,
        "" => 1_000,
        "k" => 1_000_000,
        "M" => 1_000_000_000,
        "G" => 1_000_000_000_000,
        "T" => 1_000_000_000_000_000,
        "P" => 1_000_000_000_000_000_000,
        "Ki" => 1_000 << 10,
        "Mi" => 1_000 << 20,
        "Gi" => 1_000 << 30,
        "Ti" => 1_000 << 40,
        "Pi" => 1_000 << 50,
        other => bail!("quantity {s:?}: suffix {other:?} not supported"),
    };
    let (int, frac) = number.split_once('.').unwrap_or((number, ""));
    ensure!(
        !(int.is_empty() && frac.is_empty()),
        "quantity {s:?} has no number"
    );
    let digits = format!("{int}{frac}");
    let mantissa: u128 = digits.parse().with_context(|| format!("quantity {s:?}"))?;
    let scale = 10u128.pow(frac.len() as u32);
    let total = mantissa
        .checked_mul(factor)
        .with_context(|| format!("quantity {s:?} is too large"))?;
    Ok(total.div_ceil(scale))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resource_field_refs_divide_like_the_kubelet() {
        // The chart's CPU_REQUESTS (divisor 1m) and MEMORY_LIMIT (divisor 0).
        assert_eq!(divide_quantity("250m", "1m").unwrap(), 250);
        assert_eq!(divide_quantity("1", "1m").unwrap(), 1000);
        assert_eq!(divide_quantity("1Gi", "0").unwrap(), 1 << 30);
        assert_eq!(divide_quantity("256Mi", "1Mi").unwrap(), 256);
        // Rounded up, as the kubelet does.
        assert_eq!(divide_quantity("250m", "1").unwrap(), 1);
        assert_eq!(divide_quantity("1.5", "1").unwrap(), 2);
        assert_eq!(divide_quantity("0.5Gi", "1Mi").unwrap(), 512);
        assert!(divide_quantity("1e3", "1").is_err());
        assert!(divide_quantity("Mi", "1").is_err());
    }

    #[test]
    fn ports_and_mounts_move_to_their_stand_ins() {
        let ports = BTreeMap::from([(8080, 41000u16), (8082, 41002u16)]);
        let mut used = BTreeSet::new();
        assert_eq!(
            rewrite_port("8080".into(), true, &ports, &mut used),
            "41000"
        );
        assert_eq!(
            rewrite_port("0.0.0.0:8082".into(), false, &ports, &mut used),
            "127.0.0.1:41002"
        );
        // Another number, a bare number outside a port variable, or a
        // remote host, is left alone.
        assert_eq!(
            rewrite_port("18080".into(), true, &ports, &mut used),
            "18080"
        );
        assert_eq!(
            rewrite_port("8080".into(), false, &ports, &mut used),
            "8080"
        );
        assert_eq!(
            rewrite_port("10.0.0.1:8080".into(), true, &ports, &mut used),
            "10.0.0.1:8080"
        );
        assert_eq!(used, BTreeSet::from([8080, 8082]));

        let mounts = vec![(
            "/var/run/karpenter".to_string(),
            PathBuf::from("/tmp/x/sock"),
        )];
        assert_eq!(
            rewrite_path("/var/run/karpenter/provider.sock", &mounts),
            "/tmp/x/sock/provider.sock"
        );
        assert_eq!(rewrite_path("/var/run/karpenter", &mounts), "/tmp/x/sock");
        assert_eq!(
            rewrite_path("/var/run/karpenter-other/x", &mounts),
            "/var/run/karpenter-other/x"
        );
    }
}
