//! Clients of the simulators' admin APIs (records that prove what happened).

use anyhow::{Context, Result};
use serde_json::Value;

#[derive(Clone)]
pub struct EmsimAdmin {
    pub base: String,
    http: reqwest::Client,
}

impl EmsimAdmin {
    pub fn new(base: &str) -> Result<Self> {
        crate::install_crypto();
        Ok(Self {
            base: base.trim_end_matches('/').to_string(),
            http: reqwest::Client::builder().build()?,
        })
    }

    /// Every server with its full state (`boot_history` included).
    pub async fn servers(&self) -> Result<Vec<Value>> {
        let v: Value = self.get("/_emsim/servers").await?;
        Ok(match v {
            Value::Array(a) => a,
            Value::Object(ref o) if o.contains_key("servers") => {
                o["servers"].as_array().cloned().unwrap_or_default()
            }
            other => anyhow::bail!("unexpected /_emsim/servers answer: {other}"),
        })
    }

    pub async fn counters(&self) -> Result<Value> {
        self.get("/_emsim/counters").await
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
            .http
            .post(format!("{}/iam/v1alpha1/ssh-keys", self.base))
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

    async fn get(&self, path: &str) -> Result<Value> {
        let resp = self
            .http
            .get(format!("{}{path}", self.base))
            .send()
            .await?
            .error_for_status()?;
        Ok(resp.json().await?)
    }
}

#[derive(Clone)]
pub struct TalosSimAdmin {
    pub base: String,
    http: reqwest::Client,
}

impl TalosSimAdmin {
    pub fn new(base: &str) -> Result<Self> {
        crate::install_crypto();
        Ok(Self {
            base: base.trim_end_matches('/').to_string(),
            http: reqwest::Client::builder().build()?,
        })
    }

    pub async fn servers(&self) -> Result<Vec<Value>> {
        let v: Value = self
            .http
            .get(format!("{}/_talossim/servers", self.base))
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        Ok(match v {
            Value::Array(a) => a,
            Value::Object(ref o) if o.contains_key("servers") => {
                o["servers"].as_array().cloned().unwrap_or_default()
            }
            other => anyhow::bail!("unexpected /_talossim/servers answer: {other}"),
        })
    }
}
