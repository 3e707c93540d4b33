//! What a stack puts into the cluster before the provider starts: CRDs and
//! Secrets.

use std::path::Path;
use std::time::Duration;

use anyhow::{Context, Result, bail};
use kube::Client;
use kube::api::{Api, ListParams};

use super::NAMESPACE;
use crate::{kubeutil, wait};

pub(super) async fn apply_secret(
    client: &Client,
    name: &str,
    key: &str,
    value: &str,
) -> Result<()> {
    use base64::Engine;
    let data = base64::engine::general_purpose::STANDARD.encode(value);
    kubeutil::apply_yaml(
        client,
        &format!("apiVersion: v1\nkind: Secret\nmetadata:\n  name: {name}\n  namespace: {NAMESPACE}\ntype: Opaque\ndata:\n  {key}: {data}\n"),
    )
    .await?;
    Ok(())
}

pub(super) async fn install_crds(client: &Client, dir: &Path) -> Result<()> {
    let mut files: Vec<_> = std::fs::read_dir(dir)
        .with_context(|| {
            format!(
                "reading Karpenter CRDs from {} (run `just karpenter-crds`)",
                dir.display()
            )
        })?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "yaml"))
        .collect();
    files.sort();
    if files.is_empty() {
        bail!("no CRDs in {}", dir.display());
    }
    for f in files {
        kubeutil::apply_yaml(client, &std::fs::read_to_string(&f)?).await?;
    }
    Ok(())
}

pub(super) async fn wait_crds_established(client: &Client) -> Result<()> {
    use k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition;
    let api: Api<CustomResourceDefinition> = Api::all(client.clone());
    wait::until(
        "CRDs Established",
        Duration::from_secs(60),
        Duration::from_millis(200),
        || {
            let api = api.clone();
            async move {
                let crds = api.list(&ListParams::default()).await?;
                let all = crds.items.iter().all(|c| {
                    c.status
                        .as_ref()
                        .and_then(|s| s.conditions.as_ref())
                        .is_some_and(|cs| {
                            cs.iter()
                                .any(|c| c.type_ == "Established" && c.status == "True")
                        })
                });
                Ok(all.then_some(()))
            }
        },
    )
    .await
}
