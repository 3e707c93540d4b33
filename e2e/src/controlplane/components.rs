//! Command lines of the four control-plane components. Pure functions of the
//! file layout and the ports, so the flags that matter are unit-tested.

use std::ffi::OsString;
use std::net::{IpAddr, Ipv4Addr};
use std::path::{Path, PathBuf};

use super::pki::{CertPaths, FRONT_PROXY_CLIENT};

/// Services get addresses from here (kubeadm's default); nothing routes to
/// them on this machine, they only have to be valid and stable.
pub const SERVICE_CLUSTER_IP_RANGE: &str = "10.96.0.0/12";
/// The first address of the range, which the `kubernetes` Service takes.
pub const KUBERNETES_SERVICE_IP: IpAddr = IpAddr::V4(Ipv4Addr::new(10, 96, 0, 1));
pub const SERVICE_ACCOUNT_ISSUER: &str = "https://kubernetes.default.svc.cluster.local";
pub const CLUSTER_NAME: &str = "kps-e2e";

/// Loopback ports, picked free at start.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ports {
    pub etcd_client: u16,
    pub etcd_peer: u16,
    pub apiserver: u16,
    pub controller_manager: u16,
    pub scheduler: u16,
}

impl Ports {
    pub fn all(&self) -> [u16; 5] {
        [
            self.etcd_client,
            self.etcd_peer,
            self.apiserver,
            self.controller_manager,
            self.scheduler,
        ]
    }
}

/// Where every file of a local control plane lives under its work directory.
#[derive(Debug, Clone)]
pub struct Layout {
    pub work_dir: PathBuf,
    pub etcd_data: PathBuf,
    pub ca: CertPaths,
    pub apiserver_serving: CertPaths,
    pub apiserver_kubelet_client: CertPaths,
    pub front_proxy_ca: CertPaths,
    pub front_proxy_client: CertPaths,
    pub controller_manager_serving: CertPaths,
    pub scheduler_serving: CertPaths,
    /// `cert` is the public key, `key` the private one.
    pub service_account: CertPaths,
    pub admin_kubeconfig: PathBuf,
    pub controller_manager_kubeconfig: PathBuf,
    pub scheduler_kubeconfig: PathBuf,
}

impl Layout {
    pub fn new(work_dir: &Path) -> Layout {
        let pki = work_dir.join("pki");
        let pair = |name: &str| CertPaths {
            cert: pki.join(format!("{name}.crt")),
            key: pki.join(format!("{name}.key")),
        };
        Layout {
            work_dir: work_dir.to_path_buf(),
            etcd_data: work_dir.join("etcd-data"),
            ca: pair("ca"),
            apiserver_serving: pair("apiserver"),
            apiserver_kubelet_client: pair("apiserver-kubelet-client"),
            front_proxy_ca: pair("front-proxy-ca"),
            front_proxy_client: pair("front-proxy-client"),
            controller_manager_serving: pair("controller-manager-serving"),
            scheduler_serving: pair("scheduler-serving"),
            service_account: CertPaths {
                cert: pki.join("sa.pub"),
                key: pki.join("sa.key"),
            },
            admin_kubeconfig: work_dir.join("admin.kubeconfig"),
            controller_manager_kubeconfig: work_dir.join("controller-manager.kubeconfig"),
            scheduler_kubeconfig: work_dir.join("scheduler.kubeconfig"),
        }
    }

    pub fn pki_dir(&self) -> PathBuf {
        self.work_dir.join("pki")
    }
}

pub fn server_url(ports: &Ports) -> String {
    format!("https://127.0.0.1:{}", ports.apiserver)
}

fn flag(name: &str, value: impl AsRef<std::ffi::OsStr>) -> OsString {
    let mut s = OsString::from(format!("--{name}="));
    s.push(value);
    s
}

pub fn etcd_args(layout: &Layout, ports: &Ports) -> Vec<OsString> {
    vec![
        flag("name", CLUSTER_NAME),
        flag("data-dir", &layout.etcd_data),
        flag(
            "listen-client-urls",
            format!("http://127.0.0.1:{}", ports.etcd_client),
        ),
        flag(
            "listen-peer-urls",
            format!("http://127.0.0.1:{}", ports.etcd_peer),
        ),
        // The data dies with the test; fsync would only tie API latency to the disk.
        "--unsafe-no-fsync".into(),
    ]
}

pub fn apiserver_args(layout: &Layout, ports: &Ports) -> Vec<OsString> {
    vec![
        flag(
            "etcd-servers",
            format!("http://127.0.0.1:{}", ports.etcd_client),
        ),
        flag("bind-address", "127.0.0.1"),
        flag("advertise-address", "127.0.0.1"),
        flag("secure-port", ports.apiserver.to_string()),
        flag("tls-cert-file", &layout.apiserver_serving.cert),
        flag("tls-private-key-file", &layout.apiserver_serving.key),
        flag("client-ca-file", &layout.ca.cert),
        flag("cert-dir", layout.work_dir.join("apiserver-certs")),
        flag("authorization-mode", "Node,RBAC"),
        // On top of the default plugins, as kubeadm does: kubelets may only
        // touch their own Node and the Pods bound to it.
        flag("enable-admission-plugins", "NodeRestriction"),
        // Nodes join with a bootstrap token, then a CSR that the controller
        // manager signs with the cluster CA.
        flag("enable-bootstrap-token-auth", "true"),
        flag("service-cluster-ip-range", SERVICE_CLUSTER_IP_RANGE),
        flag("service-account-issuer", SERVICE_ACCOUNT_ISSUER),
        flag("service-account-key-file", &layout.service_account.cert),
        flag(
            "service-account-signing-key-file",
            &layout.service_account.key,
        ),
        flag(
            "kubelet-client-certificate",
            &layout.apiserver_kubelet_client.cert,
        ),
        flag("kubelet-client-key", &layout.apiserver_kubelet_client.key),
        // The aggregation layer's request-header authentication. Without it the
        // controller manager and scheduler cannot load their delegated
        // authentication config and log errors while retrying.
        flag("requestheader-client-ca-file", &layout.front_proxy_ca.cert),
        flag("requestheader-allowed-names", FRONT_PROXY_CLIENT),
        flag("requestheader-username-headers", "X-Remote-User"),
        flag("requestheader-group-headers", "X-Remote-Group"),
        flag("requestheader-extra-headers-prefix", "X-Remote-Extra-"),
        flag("proxy-client-cert-file", &layout.front_proxy_client.cert),
        flag("proxy-client-key-file", &layout.front_proxy_client.key),
        flag("allow-privileged", "true"),
        // The endpoints of the `kubernetes` Service would be 127.0.0.1, which
        // validation rejects; without this the reconciler fails forever.
        flag("endpoint-reconciler-type", "none"),
        flag("profiling", "false"),
    ]
}

/// Flags both the controller manager and the scheduler take for their own
/// secure port, authenticating callers against the API server.
fn secure_serving_args(
    kubeconfig: &Path,
    serving: &CertPaths,
    ca: &Path,
    port: u16,
) -> Vec<OsString> {
    vec![
        flag("kubeconfig", kubeconfig),
        flag("authentication-kubeconfig", kubeconfig),
        flag("authorization-kubeconfig", kubeconfig),
        flag("bind-address", "127.0.0.1"),
        flag("secure-port", port.to_string()),
        flag("tls-cert-file", &serving.cert),
        flag("tls-private-key-file", &serving.key),
        flag("client-ca-file", ca),
        // One instance: leader election would only delay the start.
        "--leader-elect=false".into(),
        flag("profiling", "false"),
    ]
}

pub fn controller_manager_args(layout: &Layout, ports: &Ports) -> Vec<OsString> {
    let mut args = secure_serving_args(
        &layout.controller_manager_kubeconfig,
        &layout.controller_manager_serving,
        &layout.ca.cert,
        ports.controller_manager,
    );
    args.extend([
        flag("cluster-name", CLUSTER_NAME),
        flag("root-ca-file", &layout.ca.cert),
        flag(
            "service-account-private-key-file",
            &layout.service_account.key,
        ),
        // Signs kubelet client and serving CSRs with the cluster CA.
        flag("cluster-signing-cert-file", &layout.ca.cert),
        flag("cluster-signing-key-file", &layout.ca.key),
        // bootstrapsigner and tokencleaner are off by default; nodes joining
        // with bootstrap tokens need them, as in a kubeadm cluster.
        flag("controllers", "*,bootstrapsigner,tokencleaner"),
        flag("use-service-account-credentials", "true"),
        // Upstream's defaults, stated so node health behaves as in a real
        // cluster: a node silent for 50 s turns NotReady and gets tainted, and
        // its pods are evicted after the default 300 s toleration.
        flag("node-monitor-period", "5s"),
        flag("node-monitor-grace-period", "50s"),
        flag("node-startup-grace-period", "60s"),
    ]);
    args
}

pub fn scheduler_args(layout: &Layout, ports: &Ports) -> Vec<OsString> {
    secure_serving_args(
        &layout.scheduler_kubeconfig,
        &layout.scheduler_serving,
        &layout.ca.cert,
        ports.scheduler,
    )
}

/// [`scheduler_args`] for a scheduler that reads a KubeSchedulerConfiguration
/// file: its connection and leader election are then the file's
/// ([`scheduler_config`]), so the flags that set them are left out.
pub fn scheduler_args_with_config(layout: &Layout, ports: &Ports, config: &Path) -> Vec<OsString> {
    let mut args: Vec<OsString> = scheduler_args(layout, ports)
        .into_iter()
        .filter(|a| {
            let a = a.to_string_lossy();
            !a.starts_with("--kubeconfig=") && !a.starts_with("--leader-elect=")
        })
        .collect();
    args.push(flag("config", config));
    args
}

/// A KubeSchedulerConfiguration (YAML) with this control plane's connection
/// (`clientConnection.kubeconfig`) and no leader election (one instance), the
/// rest (its profiles) as given.
pub fn scheduler_config(given: &str, kubeconfig: &Path) -> anyhow::Result<String> {
    use anyhow::Context as _;
    let mut doc: serde_yaml_ng::Value =
        serde_yaml_ng::from_str(given).context("parsing the KubeSchedulerConfiguration")?;
    let map = doc
        .as_mapping_mut()
        .context("a KubeSchedulerConfiguration is a mapping")?;
    let mut connection = serde_yaml_ng::Mapping::new();
    connection.insert(
        "kubeconfig".into(),
        kubeconfig.to_string_lossy().into_owned().into(),
    );
    map.insert("clientConnection".into(), connection.into());
    let mut election = serde_yaml_ng::Mapping::new();
    election.insert("leaderElect".into(), false.into());
    map.insert("leaderElection".into(), election.into());
    Ok(serde_yaml_ng::to_string(&doc)?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_scheduler_with_a_config_file_takes_its_connection_from_it() {
        let layout = Layout::new(Path::new("/w"));
        let args = strings(scheduler_args_with_config(
            &layout,
            &ports(),
            Path::new("/w/sched/config.yaml"),
        ));
        assert_eq!(value(&args, "config"), Some("/w/sched/config.yaml"));
        assert_eq!(value(&args, "kubeconfig"), None);
        assert!(!args.iter().any(|a| a.starts_with("--leader-elect=")));
        assert_eq!(value(&args, "secure-port"), Some("1005"));
        assert!(value(&args, "authentication-kubeconfig").is_some());

        let given = "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: /etc/kubernetes/scheduler.conf
profiles:
  - schedulerName: default-scheduler
  - schedulerName: topology-spread-defaults
";
        let out: serde_yaml_ng::Value = serde_yaml_ng::from_str(
            &scheduler_config(given, Path::new("/w/s.kubeconfig")).unwrap(),
        )
        .unwrap();
        assert_eq!(out["clientConnection"]["kubeconfig"], "/w/s.kubeconfig");
        assert_eq!(out["leaderElection"]["leaderElect"], false);
        assert_eq!(
            out["profiles"][1]["schedulerName"],
            "topology-spread-defaults"
        );
        assert!(scheduler_config("- not a mapping", Path::new("/k")).is_err());
    }

    fn ports() -> Ports {
        Ports {
            etcd_client: 1001,
            etcd_peer: 1002,
            apiserver: 1003,
            controller_manager: 1004,
            scheduler: 1005,
        }
    }

    fn strings(args: Vec<OsString>) -> Vec<String> {
        args.into_iter().map(|a| a.into_string().unwrap()).collect()
    }

    fn value<'a>(args: &'a [String], name: &str) -> Option<&'a str> {
        let prefix = format!("--{name}=");
        let mut found = args.iter().filter_map(|a| a.strip_prefix(&prefix));
        let first = found.next();
        assert!(found.next().is_none(), "--{name} given twice");
        first
    }

    #[test]
    fn every_component_talks_to_the_right_port() {
        let layout = Layout::new(Path::new("/w"));
        let etcd = strings(etcd_args(&layout, &ports()));
        assert_eq!(
            value(&etcd, "listen-client-urls"),
            Some("http://127.0.0.1:1001")
        );
        assert_eq!(
            value(&etcd, "listen-peer-urls"),
            Some("http://127.0.0.1:1002")
        );
        assert_eq!(value(&etcd, "data-dir"), Some("/w/etcd-data"));

        let api = strings(apiserver_args(&layout, &ports()));
        assert_eq!(value(&api, "etcd-servers"), Some("http://127.0.0.1:1001"));
        assert_eq!(value(&api, "secure-port"), Some("1003"));
        assert_eq!(server_url(&ports()), "https://127.0.0.1:1003");

        let kcm = strings(controller_manager_args(&layout, &ports()));
        assert_eq!(value(&kcm, "secure-port"), Some("1004"));
        let sched = strings(scheduler_args(&layout, &ports()));
        assert_eq!(value(&sched, "secure-port"), Some("1005"));
        for args in [&api, &kcm, &sched] {
            assert_eq!(
                value(args, "bind-address"),
                Some("127.0.0.1"),
                "only loopback is ours"
            );
        }
    }

    #[test]
    fn apiserver_authorizes_like_a_real_cluster_and_accepts_bootstrap_tokens() {
        let layout = Layout::new(Path::new("/w"));
        let api = strings(apiserver_args(&layout, &ports()));
        assert_eq!(value(&api, "authorization-mode"), Some("Node,RBAC"));
        assert_eq!(value(&api, "enable-bootstrap-token-auth"), Some("true"));
        assert_eq!(value(&api, "client-ca-file"), Some("/w/pki/ca.crt"));
        assert_eq!(
            value(&api, "service-account-key-file"),
            Some("/w/pki/sa.pub")
        );
        assert_eq!(
            value(&api, "service-account-signing-key-file"),
            Some("/w/pki/sa.key")
        );
        assert_eq!(
            value(&api, "service-cluster-ip-range"),
            Some(SERVICE_CLUSTER_IP_RANGE)
        );
        // Admission stays at upstream's defaults plus NodeRestriction: nothing disabled.
        assert!(value(&api, "disable-admission-plugins").is_none());
    }

    #[test]
    fn controller_manager_signs_csrs_with_the_cluster_ca() {
        let layout = Layout::new(Path::new("/w"));
        let kcm = strings(controller_manager_args(&layout, &ports()));
        assert_eq!(
            value(&kcm, "cluster-signing-cert-file"),
            Some("/w/pki/ca.crt")
        );
        assert_eq!(
            value(&kcm, "cluster-signing-key-file"),
            Some("/w/pki/ca.key")
        );
        assert_eq!(
            value(&kcm, "controllers"),
            Some("*,bootstrapsigner,tokencleaner")
        );
        assert_eq!(value(&kcm, "use-service-account-credentials"), Some("true"));
        assert_eq!(
            value(&kcm, "service-account-private-key-file"),
            Some("/w/pki/sa.key")
        );
        assert_eq!(value(&kcm, "node-monitor-grace-period"), Some("50s"));
    }
}
