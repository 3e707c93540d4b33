//! Writing kubeconfigs for the local control plane, and reading the parts of an
//! existing one (kind, a developer's cluster) that the harness needs.

use std::path::{Path, PathBuf};

use anyhow::{Context, Result, anyhow, bail};
use base64::Engine;
use base64::engine::general_purpose::STANDARD as BASE64;
use serde::Deserialize;

use super::pki::CertAndKey;

/// Renders a kubeconfig with everything inline, so the file can be copied
/// around (or handed to a child process) without the PKI directory.
pub fn render(
    cluster_name: &str,
    server_url: &str,
    ca_pem: &str,
    user: &str,
    client: &CertAndKey,
) -> Result<String> {
    let context = format!("{user}@{cluster_name}");
    let doc = serde_json::json!({
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{
            "name": cluster_name,
            "cluster": {
                "server": server_url,
                "certificate-authority-data": BASE64.encode(ca_pem),
            },
        }],
        "users": [{
            "name": user,
            "user": {
                "client-certificate-data": BASE64.encode(&client.cert_pem),
                "client-key-data": BASE64.encode(&client.key_pem),
            },
        }],
        "contexts": [{
            "name": context,
            "context": { "cluster": cluster_name, "user": user },
        }],
        "current-context": context,
    });
    serde_yaml_ng::to_string(&doc).context("serialising the kubeconfig")
}

/// What the harness takes from an existing kubeconfig's current context.
#[derive(Debug, Clone)]
pub struct CurrentContext {
    pub server_url: String,
    pub ca_pem: String,
    /// Absent when the user authenticates otherwise (token, exec plugin).
    pub client: Option<CertAndKey>,
}

#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
struct File {
    #[serde(default)]
    clusters: Vec<Named<ClusterEntry>>,
    #[serde(default)]
    users: Vec<Named<UserEntry>>,
    #[serde(default)]
    contexts: Vec<Named<ContextEntry>>,
    current_context: Option<String>,
}

#[derive(Deserialize)]
struct Named<T> {
    name: String,
    #[serde(alias = "cluster", alias = "user", alias = "context")]
    value: T,
}

#[derive(Deserialize)]
#[serde(rename_all = "kebab-case")]
struct ClusterEntry {
    server: String,
    certificate_authority_data: Option<String>,
    certificate_authority: Option<PathBuf>,
}

#[derive(Deserialize, Default)]
#[serde(rename_all = "kebab-case")]
struct UserEntry {
    client_certificate_data: Option<String>,
    client_certificate: Option<PathBuf>,
    client_key_data: Option<String>,
    client_key: Option<PathBuf>,
}

#[derive(Deserialize)]
struct ContextEntry {
    cluster: String,
    user: Option<String>,
}

/// Reads the current context of the kubeconfig at `path`. Relative file
/// references are resolved against the kubeconfig's directory, as kubectl does.
pub fn read_current(path: &Path) -> Result<CurrentContext> {
    let text = std::fs::read_to_string(path)
        .with_context(|| format!("reading kubeconfig {}", path.display()))?;
    let base = path.parent().unwrap_or(Path::new("."));
    parse_current(&text, base).with_context(|| format!("kubeconfig {}", path.display()))
}

fn parse_current(text: &str, base: &Path) -> Result<CurrentContext> {
    let file: File = serde_yaml_ng::from_str(text).context("parsing YAML")?;
    let context = match &file.current_context {
        Some(name) if !name.is_empty() => file
            .contexts
            .iter()
            .find(|c| &c.name == name)
            .ok_or_else(|| anyhow!("current-context {name:?} is not among the contexts"))?,
        _ => match file.contexts.as_slice() {
            [only] => only,
            _ => bail!("no current-context, and not exactly one context to default to"),
        },
    };
    let cluster = &file
        .clusters
        .iter()
        .find(|c| c.name == context.value.cluster)
        .ok_or_else(|| {
            anyhow!(
                "cluster {:?} of the current context is missing",
                context.value.cluster
            )
        })?
        .value;
    let ca_pem = inline_or_file(
        cluster.certificate_authority_data.as_deref(),
        cluster.certificate_authority.as_deref(),
        base,
    )
    .context("certificate authority")?
    .ok_or_else(|| {
        anyhow!(
            "cluster {:?} has no certificate authority",
            context.value.cluster
        )
    })?;

    let user = context
        .value
        .user
        .as_ref()
        .and_then(|name| file.users.iter().find(|u| &u.name == name))
        .map(|u| &u.value);
    let client = match user {
        None => None,
        Some(user) => {
            let cert = inline_or_file(
                user.client_certificate_data.as_deref(),
                user.client_certificate.as_deref(),
                base,
            )
            .context("client certificate")?;
            let key = inline_or_file(
                user.client_key_data.as_deref(),
                user.client_key.as_deref(),
                base,
            )
            .context("client key")?;
            match (cert, key) {
                (Some(cert_pem), Some(key_pem)) => Some(CertAndKey { cert_pem, key_pem }),
                (None, None) => None,
                _ => bail!("the user has a client certificate or a client key, not both"),
            }
        }
    };
    Ok(CurrentContext {
        server_url: cluster.server.clone(),
        ca_pem,
        client,
    })
}

fn inline_or_file(data: Option<&str>, file: Option<&Path>, base: &Path) -> Result<Option<String>> {
    if let Some(data) = data {
        let bytes = BASE64.decode(data.trim()).context("decoding base64 data")?;
        return String::from_utf8(bytes)
            .context("data is not PEM text")
            .map(Some);
    }
    match file {
        Some(file) => {
            let file = base.join(file);
            std::fs::read_to_string(&file)
                .with_context(|| format!("reading {}", file.display()))
                .map(Some)
        }
        None => Ok(None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pair() -> CertAndKey {
        CertAndKey {
            cert_pem: "-----BEGIN CERTIFICATE-----\nY2VydA==\n-----END CERTIFICATE-----\n".into(),
            key_pem: "-----BEGIN PRIVATE KEY-----\na2V5\n-----END PRIVATE KEY-----\n".into(),
        }
    }

    #[test]
    fn rendered_kubeconfig_reads_back() {
        let text = render(
            "kps",
            "https://127.0.0.1:6443",
            "CA PEM\n",
            "admin",
            &pair(),
        )
        .unwrap();
        let current = parse_current(&text, Path::new("/nonexistent")).unwrap();
        assert_eq!(current.server_url, "https://127.0.0.1:6443");
        assert_eq!(current.ca_pem, "CA PEM\n");
        let client = current.client.unwrap();
        assert_eq!(client.cert_pem, pair().cert_pem);
        assert_eq!(client.key_pem, pair().key_pem);
    }

    #[test]
    fn rendered_kubeconfig_is_accepted_by_kube() {
        let text = render(
            "kps",
            "https://127.0.0.1:6443",
            "CA PEM\n",
            "admin",
            &pair(),
        )
        .unwrap();
        let parsed = kube::config::Kubeconfig::from_yaml(&text).unwrap();
        assert_eq!(parsed.current_context.as_deref(), Some("admin@kps"));
        let cluster = parsed.clusters[0].cluster.as_ref().unwrap();
        assert_eq!(cluster.server.as_deref(), Some("https://127.0.0.1:6443"));
    }

    #[test]
    fn follows_the_current_context_and_relative_files() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("ca.crt"), "FILE CA\n").unwrap();
        let text = r#"
apiVersion: v1
kind: Config
clusters:
- name: other
  cluster: {server: "https://10.0.0.1:6443", certificate-authority-data: T1RIRVI=}
- name: kind-kps
  cluster: {server: "https://127.0.0.1:40123", certificate-authority: ca.crt}
users:
- name: token-user
  user: {token: abc}
contexts:
- name: other
  context: {cluster: other, user: token-user}
- name: kind-kps
  context: {cluster: kind-kps, user: token-user}
current-context: kind-kps
"#;
        let current = parse_current(text, dir.path()).unwrap();
        assert_eq!(current.server_url, "https://127.0.0.1:40123");
        assert_eq!(current.ca_pem, "FILE CA\n");
        assert!(
            current.client.is_none(),
            "a token user has no client certificate"
        );
    }

    #[test]
    fn rejects_a_missing_current_context_or_ca() {
        let no_ctx = "contexts: []\nclusters: []\ncurrent-context: gone\n";
        let err = parse_current(no_ctx, Path::new(".")).unwrap_err();
        assert!(format!("{err:#}").contains("gone"), "{err:#}");

        let no_ca = r#"
clusters: [{name: c, cluster: {server: "https://127.0.0.1:1"}}]
contexts: [{name: x, context: {cluster: c}}]
"#;
        let err = parse_current(no_ca, Path::new(".")).unwrap_err();
        assert!(
            format!("{err:#}").contains("no certificate authority"),
            "{err:#}"
        );
    }
}
