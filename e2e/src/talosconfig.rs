//! The base worker machine config a user would produce with `talosctl gen config`
//! for the cluster under test (the provider renders each node's config from it).
//!
//! Its `cluster.token` is deliberately unknown to the cluster (no
//! `bootstrap-token-<id>` Secret is created for it): every node must join with
//! the per-node token the provider renders into its config, so a node that
//! joins proves that path.

use anyhow::Result;
use base64::Engine;
use base64::engine::general_purpose::STANDARD as B64;
use rand::Rng;
use rand::distr::Alphanumeric;

pub struct BaseConfig {
    pub yaml: String,
    /// `cluster.token` of the base config, `<token_id>.<token_secret>`; the
    /// cluster does not accept it.
    pub token_id: String,
    pub token_secret: String,
    /// `machine.token`: the Talos machine secret of the cluster.
    pub machine_token: String,
}

fn lower_alnum(n: usize) -> String {
    rand::rng()
        .sample_iter(&Alphanumeric)
        .map(|c| (c as char).to_ascii_lowercase())
        .take(n)
        .collect()
}

/// Renders a worker.yaml in the shape `talosctl gen config` (Talos v1.13) writes.
pub fn worker_config(
    cluster_name: &str,
    endpoint: &str,
    k8s_ca_pem: &str,
    talos_version: &str,
) -> Result<BaseConfig> {
    let token_id = lower_alnum(6);
    let token_secret = lower_alnum(16);
    let machine_token = format!("{}.{}", lower_alnum(6), lower_alnum(16));
    let talos_ca = rcgen::generate_simple_self_signed(vec!["talos".to_string()])?;
    let talos_ca_pem = talos_ca.cert.pem();
    let cluster_id = B64.encode(rand::random::<[u8; 32]>());
    let cluster_secret = B64.encode(rand::random::<[u8; 32]>());
    let yaml = format!(
        r#"version: v1alpha1
debug: false
persist: true
machine:
    type: worker
    token: {machine_token}
    ca:
        crt: {talos_ca}
        key: ""
    certSANs: []
    kubelet:
        image: ghcr.io/siderolabs/kubelet:v1.35.0
        defaultRuntimeSeccompProfileEnabled: true
        disableManifestsDirectory: true
    network: {{}}
    install:
        disk: /dev/sda
        image: ghcr.io/siderolabs/installer:{talos_version}
        wipe: false
    features:
        rbac: true
        stableHostname: true
        apidCheckExtKeyUsage: true
        diskQuotaSupport: true
        kubePrism:
            enabled: true
            port: 7445
        hostDNS:
            enabled: true
            forwardKubeDNSToHost: true
cluster:
    id: {cluster_id}
    secret: {cluster_secret}
    controlPlane:
        endpoint: {endpoint}
    clusterName: {cluster_name}
    network:
        dnsDomain: cluster.local
        podSubnets:
            - 10.244.0.0/16
        serviceSubnets:
            - 10.96.0.0/12
    token: {token_id}.{token_secret}
    ca:
        crt: {k8s_ca}
        key: ""
    discovery:
        enabled: true
        registries:
            kubernetes:
                disabled: true
            service: {{}}
"#,
        talos_ca = B64.encode(talos_ca_pem),
        k8s_ca = B64.encode(k8s_ca_pem),
    );
    Ok(BaseConfig {
        yaml,
        token_id,
        token_secret,
        machine_token,
    })
}
