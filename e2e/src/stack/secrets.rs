//! The per-stack scan for the secrets a run handed to the system: none may
//! appear in a component's log, in an Event, or in a `/metrics` page.

use std::path::Path;

use anyhow::{Context, Result, bail, ensure};
use kube::Client;
use kube::api::{Api, ListParams};

use crate::talosconfig;

/// A text that must hold no secret, and where it came from.
pub struct Source {
    pub what: String,
    pub text: String,
}

/// The strings that must never be shown: the Scaleway secret key, each line
/// of the SSH private key's body, the bootstrap token secret and the Talos
/// machine token of the base config.
pub fn fingerprints(
    scw_secret_key: &str,
    private_key: &str,
    base: &talosconfig::BaseConfig,
) -> Vec<String> {
    let mut out = vec![
        scw_secret_key.to_string(),
        base.token_secret.clone(),
        base.machine_token.clone(),
    ];
    out.extend(
        private_key
            .lines()
            .filter(|l| !l.starts_with("-----") && l.len() >= 16)
            .map(str::to_string),
    );
    out
}

/// Every `*.log` file directly in `dirs` (missing dirs are skipped).
pub fn log_files(dirs: &[&Path]) -> Vec<Source> {
    let mut out = Vec::new();
    for dir in dirs {
        let Ok(entries) = std::fs::read_dir(dir) else {
            continue;
        };
        let mut paths: Vec<_> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|e| e == "log"))
            .collect();
        paths.sort();
        for p in paths {
            out.push(Source {
                what: p.display().to_string(),
                text: std::fs::read_to_string(&p).unwrap_or_default(),
            });
        }
    }
    out
}

/// Every Event in the cluster (events.k8s.io/v1, all namespaces), as JSON:
/// note, reason, the object it regards, series, annotations.
pub async fn events(client: &Client) -> Result<Vec<Source>> {
    use k8s_openapi::api::events::v1::Event;
    let api: Api<Event> = Api::all(client.clone());
    let list = api.list(&ListParams::default()).await?;
    Ok(list
        .items
        .into_iter()
        .map(|e| Source {
            what: format!(
                "Event {}/{}",
                e.metadata.namespace.as_deref().unwrap_or_default(),
                e.metadata.name.as_deref().unwrap_or_default()
            ),
            text: serde_json::to_string(&e).unwrap_or_default(),
        })
        .collect())
}

/// Fails naming the first source that contains a secret (by its index in
/// the list, never its value).
pub fn check(sources: &[Source], secrets: &[String], tokens: &[String]) -> Result<()> {
    for s in sources {
        for (i, secret) in secrets.iter().enumerate() {
            if s.text.contains(secret.as_str()) {
                bail!("secret #{i} of this run appears in {}", s.what);
            }
        }
        for (i, token) in tokens.iter().enumerate() {
            if s.text.contains(token.as_str()) {
                bail!(
                    "bootstrap token secret #{i} (of {} seen) appears in {}",
                    tokens.len(),
                    s.what
                );
            }
        }
    }
    Ok(())
}

impl super::Stack {
    /// Fails if any secret of this run (Scaleway secret key, SSH private
    /// key, Talos secrets, the ServiceAccount tokens of the replicas, every
    /// bootstrap token seen) appears in a component's log (every log file
    /// of the stack, killed processes' included), in any Event of the
    /// cluster, or in the `/metrics` of a running provider or bridge.
    pub async fn assert_no_secrets(&self) -> Result<()> {
        let in_cluster = self.opts.in_cluster.is_some();
        if in_cluster {
            // The containers' logs, as the cluster keeps them.
            super::in_cluster::collect_logs(&self.client, &self.logs).await?;
        }
        let mut sources = log_files(&[
            self.logs.as_path(),
            self.opts.work_dir.join("controlplane").as_path(),
        ]);
        let logs = sources.len();
        let events = events(&self.client).await?;
        let event_count = events.len();
        sources.extend(events);
        let replicas = if in_cluster { 1 } else { self.replicas.len() };
        for i in (0..replicas).filter(|i| !self.down.contains(i)) {
            for (what, text) in [
                ("provider", self.provider_metrics(i).await?),
                ("bridge", self.bridge_metrics(i).await?),
            ] {
                sources.push(Source {
                    what: format!("/metrics of replica {i}'s {what}"),
                    text,
                });
            }
        }
        let tokens = self.seen_bootstrap_tokens();
        let mut secrets = self.secrets.clone();
        if let Some(system) = &self.system {
            secrets.extend(system.tokens());
        }
        check(&sources, &secrets, &tokens)?;
        tracing::info!(
            fixed = self.secrets.len(),
            bootstrap_tokens = tokens.len(),
            logs,
            events = event_count,
            "no secret in any log, Event or /metrics"
        );
        Ok(())
    }

    /// [`Stack::assert_no_secrets`] for synchronous callers; needs the
    /// multi-thread runtime every scenario runs on.
    pub fn assert_no_secrets_in_logs(&self) -> Result<()> {
        use tokio::runtime::{Handle, RuntimeFlavor};
        let handle = Handle::try_current().context("the secret scan needs a tokio runtime")?;
        ensure!(
            handle.runtime_flavor() == RuntimeFlavor::MultiThread,
            "assert_no_secrets_in_logs blocks: call it on a multi-thread runtime, or await assert_no_secrets"
        );
        tokio::task::block_in_place(|| handle.block_on(self.assert_no_secrets()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn check_names_the_source_and_never_the_secret() {
        let sources = vec![
            Source {
                what: "a.log".into(),
                text: "nothing here".into(),
            },
            Source {
                what: "Event default/x".into(),
                text: "token abcdef.0123456789abcdef".into(),
            },
        ];
        let secrets = vec!["s3cr3t-value".to_string()];
        assert!(check(&sources, &secrets, &[]).is_ok());
        let err = check(&sources, &secrets, &["0123456789abcdef".to_string()])
            .unwrap_err()
            .to_string();
        assert!(err.contains("Event default/x"), "{err}");
        assert!(!err.contains("0123456789abcdef"), "{err}");
    }
}
