//! Clients of the simulators' admin APIs (records that prove what happened).

use anyhow::{Context, Result};
use serde_json::Value;

/// An HTTP client bound to one simulator's base URL.
#[derive(Clone)]
struct Admin {
    base: String,
    http: reqwest::Client,
}

impl Admin {
    fn new(base: &str) -> Result<Self> {
        crate::install_crypto();
        Ok(Self {
            base: base.trim_end_matches('/').to_string(),
            http: reqwest::Client::builder().build()?,
        })
    }

    async fn get(&self, path: &str) -> Result<Value> {
        let resp = self
            .http
            .get(format!("{}{path}", self.base))
            .send()
            .await?
            .error_for_status()?;
        Ok(resp.json().await?)
    }

    /// A list answered either as a JSON array or as `{"servers": [...]}`.
    async fn servers(&self, path: &str) -> Result<Vec<Value>> {
        match self.get(path).await? {
            Value::Array(a) => Ok(a),
            Value::Object(o) if o.contains_key("servers") => {
                Ok(o["servers"].as_array().cloned().unwrap_or_default())
            }
            other => anyhow::bail!("unexpected {path} answer: {other}"),
        }
    }
}

#[derive(Clone)]
pub struct EmsimAdmin(Admin);

impl EmsimAdmin {
    pub fn new(base: &str) -> Result<Self> {
        Ok(Self(Admin::new(base)?))
    }

    pub fn base(&self) -> &str {
        &self.0.base
    }

    /// Every live server with its full state (`boot_history` included).
    pub async fn servers(&self) -> Result<Vec<Value>> {
        self.0.servers("/_emsim/servers").await
    }

    pub async fn counters(&self) -> Result<Value> {
        self.0.get("/_emsim/counters").await
    }

    /// Registers an SSH public key in IAM, as a user would with the console.
    pub async fn create_ssh_key(
        &self,
        token: &str,
        project_id: &str,
        name: &str,
        public_key: &str,
    ) -> Result<String> {
        let resp = self
            .0
            .http
            .post(format!("{}/iam/v1alpha1/ssh-keys", self.0.base))
            .header("X-Auth-Token", token)
            .json(&serde_json::json!({"name": name, "public_key": public_key, "project_id": project_id}))
            .send()
            .await?
            .error_for_status()?;
        let v: Value = resp.json().await?;
        v["id"]
            .as_str()
            .map(str::to_string)
            .context("ssh key without id")
    }
}

#[derive(Clone)]
pub struct TalosSimAdmin(Admin);

impl TalosSimAdmin {
    pub fn new(base: &str) -> Result<Self> {
        Ok(Self(Admin::new(base)?))
    }

    /// Every server talos-sim has played: state, disk, commands, applied configs.
    pub async fn servers(&self) -> Result<Vec<Value>> {
        self.0.servers("/_talossim/servers").await
    }
}
