//! The base worker machine config a user produces with `talosctl gen config`
//! for the cluster under test (the provider renders each node's config from
//! it), and Talos' validation of machine configs.
//!
//! Both come from `talos-config` (talos-sim/conformance/cmd/talos-config),
//! which links Talos' machinery: `gen` runs the `generate` package that
//! `talosctl gen config` runs, so the base has exactly the shape a user of
//! that Talos minor gets; `validate` is what talos-sim runs on every applied
//! config (`--config-validator`).
//!
//! The base's `cluster.token` is deliberately unknown to the cluster (no
//! `bootstrap-token-<id>` Secret is created for it): every node must join with
//! the per-node token the provider renders into its config, so a node that
//! joins proves that path.

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::sync::OnceLock;

use anyhow::{Context, Result, bail};
use serde_yaml_ng::Value;

use crate::stack::repo_root;

pub struct BaseConfig {
    pub yaml: String,
    /// `cluster.token` of the base config, `<token_id>.<token_secret>`; the
    /// cluster does not accept it.
    pub token_id: String,
    pub token_secret: String,
    /// `machine.token`: the Talos machine secret of the cluster.
    pub machine_token: String,
}

/// The `talos-config` binary: built once per process by
/// talos-sim/conformance/build.sh, which returns at once when the cached
/// binary is up to date (`KPS_TALOS_CONFIG_BIN` names another place for it).
pub fn talos_config_bin() -> Result<PathBuf> {
    static BIN: OnceLock<std::result::Result<PathBuf, String>> = OnceLock::new();
    BIN.get_or_init(|| {
        let script = repo_root().join("talos-sim/conformance/build.sh");
        let out = Command::new(&script)
            .stderr(Stdio::inherit())
            .output()
            .map_err(|e| format!("running {}: {e}", script.display()))?;
        if !out.status.success() {
            return Err(format!(
                "{} failed ({}): is Go installed?",
                script.display(),
                out.status
            ));
        }
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .last()
            .map(PathBuf::from)
            .ok_or_else(|| format!("{} printed no path", script.display()))
    })
    .clone()
    .map_err(anyhow::Error::msg)
}

/// A worker.yaml as `talosctl gen config` of `talos_version`'s minor writes it,
/// with fresh secrets, trusting the test cluster's Kubernetes CA.
pub fn worker_config(
    cluster_name: &str,
    endpoint: &str,
    k8s_ca_pem: &str,
    talos_version: &str,
) -> Result<BaseConfig> {
    let mut child = Command::new(talos_config_bin()?)
        .args(["gen", "-cluster-name", cluster_name, "-endpoint", endpoint])
        .args(["-talos-version", talos_version])
        // The kubelet of the e2e control plane's version.
        .args(["-kubernetes-version", "1.35.0"])
        .args([
            "-install-image",
            &format!("ghcr.io/siderolabs/installer:{talos_version}"),
        ])
        .args(["-kubernetes-ca", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting talos-config gen")?;
    child
        .stdin
        .take()
        .context("talos-config stdin")?
        .write_all(k8s_ca_pem.as_bytes())?;
    let out = child.wait_with_output()?;
    if !out.status.success() {
        bail!(
            "talos-config gen failed ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    let yaml = String::from_utf8(out.stdout).context("talos-config gen output")?;
    let (cluster_token, machine_token) = tokens(&yaml)?;
    let (token_id, token_secret) = cluster_token
        .split_once('.')
        .context("cluster.token is not <id>.<secret>")?;
    Ok(BaseConfig {
        token_id: token_id.to_string(),
        token_secret: token_secret.to_string(),
        machine_token,
        yaml,
    })
}

/// `cluster.token` and `machine.token` of the v1alpha1 document. Errors
/// never quote the config.
fn tokens(yaml: &str) -> Result<(String, String)> {
    use serde::Deserialize as _;
    for de in serde_yaml_ng::Deserializer::from_str(yaml) {
        let doc = Value::deserialize(de).context("generated config is not YAML")?;
        if doc.get("version").and_then(Value::as_str) != Some("v1alpha1") {
            continue;
        }
        let field = |section: &str| {
            doc[section]["token"]
                .as_str()
                .map(str::to_string)
                .with_context(|| format!("generated config has no {section}.token"))
        };
        return Ok((field("cluster")?, field("machine")?));
    }
    bail!("generated config has no v1alpha1 document")
}

/// Talos' verdict on a machine config (`talos-config validate`: metal mode,
/// strict). `Err` carries Talos' message.
pub fn validate(config: &str) -> Result<()> {
    let mut child = Command::new(talos_config_bin()?)
        .arg("validate")
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .context("starting talos-config validate")?;
    child
        .stdin
        .take()
        .context("talos-config stdin")?
        .write_all(config.as_bytes())?;
    let out = child.wait_with_output()?;
    if out.status.success() {
        Ok(())
    } else {
        bail!(
            "Talos refuses the config ({}): {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim()
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_base_config_is_what_talosctl_writes_and_talos_accepts_it() {
        let ca = rcgen::generate_simple_self_signed(vec!["kubernetes".to_string()])
            .unwrap()
            .cert
            .pem();
        let base = worker_config("e2e", "https://127.0.0.1:6443", &ca, "v1.13.9").unwrap();
        assert_eq!(base.token_id.len(), 6);
        assert_eq!(base.token_secret.len(), 16);
        assert!(
            base.yaml
                .contains(&format!("token: {}.{}", base.token_id, base.token_secret))
        );
        assert!(
            base.yaml
                .contains(&format!("token: {}\n", base.machine_token))
        );
        // v1.13's shape: a HostnameConfig document, no stableHostname.
        assert!(base.yaml.contains("kind: HostnameConfig\nauto: stable\n"));
        assert!(!base.yaml.contains("stableHostname"));
        // The test cluster's CA, base64 of its PEM as Talos stores it.
        use base64::Engine as _;
        let ca_b64 = base64::engine::general_purpose::STANDARD.encode(&ca);
        assert!(base.yaml.contains(&ca_b64));
        assert!(
            base.yaml
                .contains("image: ghcr.io/siderolabs/installer:v1.13.9\n")
        );
        // The base alone validates (it has an install disk); a broken one
        // is refused with Talos' message.
        validate(&base.yaml).unwrap();
        let err = validate(&base.yaml.replacen("persist: true", "persist: false", 1))
            .unwrap_err()
            .to_string();
        assert!(err.contains(".persist should be enabled"), "{err}");
    }
}
