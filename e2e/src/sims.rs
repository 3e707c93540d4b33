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

    async fn post(&self, path: &str, body: &Value) -> Result<Value> {
        let resp = self
            .http
            .post(format!("{}{path}", self.base))
            .json(body)
            .send()
            .await?;
        let status = resp.status();
        let text = resp.text().await?;
        if !status.is_success() {
            anyhow::bail!("POST {path} {body} answered {status}: {text}");
        }
        Ok(serde_json::from_str(&text).unwrap_or(Value::Null))
    }

    async fn delete(&self, path: &str) -> Result<()> {
        let resp = self
            .http
            .delete(format!("{}{path}", self.base))
            .send()
            .await?;
        let status = resp.status();
        if !status.is_success() {
            anyhow::bail!("DELETE {path} answered {status}: {}", resp.text().await?);
        }
        Ok(())
    }

    /// A list answered either as a JSON array or as `{<key>: [...]}`.
    async fn list(&self, path: &str, key: &str) -> Result<Vec<Value>> {
        match self.get(path).await? {
            Value::Array(a) => Ok(a),
            Value::Object(o) if o.contains_key(key) => {
                Ok(o[key].as_array().cloned().unwrap_or_default())
            }
            other => anyhow::bail!("unexpected {path} answer: {other}"),
        }
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

/// A VM created behind the provider's back ([`EmsimAdmin::user_create_vm`]).
pub struct UserVm<'a> {
    pub commercial_type: &'a str,
    /// Name of the image it boots.
    pub image: &'a str,
    pub name: &'a str,
    pub project_id: &'a str,
    pub tags: &'a [String],
}

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

    /// Every server ever ordered, deleted ones included (`deleted_at` set).
    pub async fn servers_including_deleted(&self) -> Result<Vec<Value>> {
        self.0.servers("/_emsim/servers?include_deleted=true").await
    }

    pub async fn counters(&self) -> Result<Value> {
        self.0.get("/_emsim/counters").await
    }

    /// Every live VM (`user_data_keys`, `hardware`, `actions` included).
    pub async fn instance_servers(&self) -> Result<Vec<Value>> {
        self.0.servers("/_emsim/instance/servers").await
    }

    /// Every VM ever created, deleted ones included (`deleted_at` set).
    pub async fn instance_servers_including_deleted(&self) -> Result<Vec<Value>> {
        self.0
            .servers("/_emsim/instance/servers?include_deleted=true")
            .await
    }

    /// Every Block and local volume, attached or not.
    pub async fn instance_volumes(&self) -> Result<Vec<Value>> {
        self.0.list("/_emsim/instance/volumes", "volumes").await
    }

    /// Seeds a Private Network (`{"name", "region", "subnets": [cidr], ...}`,
    /// emsim's `PnSpec`); emsim's answer, with its `id`.
    pub async fn add_private_network(&self, spec: &Value) -> Result<Value> {
        self.0.post("/_emsim/private-networks", spec).await
    }

    /// Every attachment, private NIC and IPAM address, with `counts`
    /// (`attachments`, `private_nics`, `booked_ips`, `allocated_ips`).
    pub async fn private_network_records(&self) -> Result<Value> {
        self.0.get("/_emsim/private-network-records").await
    }

    /// Sets a type's stock in a zone (`available`, `scarce`, `shortage`).
    pub async fn set_instance_availability(
        &self,
        zone: &str,
        commercial_type: &str,
        availability: &str,
    ) -> Result<()> {
        let resp = self
            .0
            .http
            .put(format!("{}/_emsim/instance/availability", self.0.base))
            .json(&serde_json::json!({
                "zone": zone, "commercial_type": commercial_type, "availability": availability
            }))
            .send()
            .await?;
        let status = resp.status();
        anyhow::ensure!(
            status.is_success(),
            "PUT availability answered {status}: {}",
            resp.text().await?
        );
        Ok(())
    }

    /// Calls of one `METHOD /path-template` answered with a 2xx status.
    pub async fn successful_calls(&self, endpoint: &str) -> Result<u64> {
        let c = self.counters().await?;
        let by_status = &c["endpoints"][endpoint]["by_status"];
        Ok(by_status
            .as_object()
            .map(|m| {
                m.iter()
                    .filter(|(k, _)| k.starts_with('2'))
                    .filter_map(|(_, v)| v.as_u64())
                    .sum()
            })
            .unwrap_or(0))
    }

    /// The simulated clock: (now, real seconds per simulated second).
    pub async fn clock(&self) -> Result<(chrono::DateTime<chrono::Utc>, f64)> {
        let v = self.0.get("/_emsim/clock").await?;
        let now = v["now"].as_str().context("clock.now")?;
        let now = chrono::DateTime::parse_from_rfc3339(now)
            .with_context(|| format!("clock.now {now:?}"))?
            .with_timezone(&chrono::Utc);
        let scale = v["time_scale"].as_f64().context("clock.time_scale")?;
        Ok((now, scale))
    }

    /// Arms a fault (`docs/simulator-contracts.md` and the session contracts):
    /// `{"kind": "http"|"out_of_stock_after_order"|"stuck_delivery"|"delivery_seconds"|
    /// "list_missing_page"|"list_total_count", ...}` (emsim/README.md "Faults").
    /// Returns emsim's description of the armed fault.
    pub async fn add_fault(&self, fault: Value) -> Result<Value> {
        self.0.post("/_emsim/faults", &fault).await
    }

    /// Every armed fault with its `fired` count.
    pub async fn faults(&self) -> Result<Vec<Value>> {
        self.0.list("/_emsim/faults", "faults").await
    }

    pub async fn clear_faults(&self) -> Result<()> {
        self.0.delete("/_emsim/faults").await
    }

    /// Sets an offer's stock in a zone (`available`, `low`, `empty` or a count).
    pub async fn set_stock(&self, zone: &str, offer: &str, stock: Value) -> Result<()> {
        self.put(
            "/_emsim/stock",
            &serde_json::json!({"zone": zone, "offer": offer, "stock": stock}),
        )
        .await
    }

    /// PUT of an admin endpoint, any non-2xx an error with the answer.
    async fn put(&self, path: &str, body: &Value) -> Result<()> {
        let resp = self
            .0
            .http
            .put(format!("{}{path}", self.0.base))
            .json(body)
            .send()
            .await?;
        let status = resp.status();
        if !status.is_success() {
            anyhow::bail!("PUT {path} answered {status}: {}", resp.text().await?);
        }
        Ok(())
    }

    /// Sets the quota of an offer's quota name (an offer name or id, or a
    /// quota name); `None` removes it.
    pub async fn set_quota(&self, offer: &str, quota: Option<u64>) -> Result<()> {
        self.put(
            "/_emsim/quota",
            &serde_json::json!({"offer": offer, "quota": quota}),
        )
        .await
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

    /// One server's record, if talos-sim has seen it.
    pub async fn server(&self, id: &str) -> Result<Option<Value>> {
        Ok(self.servers().await?.into_iter().find(|s| s["id"] == id))
    }

    /// Arms a fault: `kind` (`ssh_drop_during_dd`, `corrupt_download`,
    /// `corrupt_write`, `maintenance_never_up`, `never_ready`), for one server
    /// or any, firing `count` times (talos-sim's default: once).
    pub async fn add_fault(
        &self,
        kind: &str,
        server_id: Option<&str>,
        count: Option<u32>,
    ) -> Result<Value> {
        let mut body = serde_json::json!({ "kind": kind });
        if let Some(id) = server_id {
            body["server_id"] = id.into();
        }
        if let Some(n) = count {
            body["count"] = n.into();
        }
        self.0.post("/_talossim/faults", &body).await
    }

    /// Arms a fault given as talos-sim's whole JSON body (`kind`, and any of
    /// `server_id`, `node_name`, `count`, `delay_ms`).
    pub async fn add_fault_spec(&self, body: &Value) -> Result<Value> {
        self.0.post("/_talossim/faults", body).await
    }

    /// Every armed fault with its `fired` count.
    pub async fn faults(&self) -> Result<Vec<Value>> {
        self.0.list("/_talossim/faults", "faults").await
    }

    pub async fn clear_faults(&self) -> Result<()> {
        self.0.delete("/_talossim/faults").await
    }
}

/// One line of emsim's event stream (`GET /_emsim/events`), as the harness
/// uses it: what happened to which server, at which simulated time, and when
/// the harness received it.
#[derive(Debug, Clone)]
pub struct EmsimEvent {
    /// `power_on`, `power_off`, `deleted`.
    pub kind: String,
    pub server_id: String,
    /// `normal`/`rescue` on `power_on`.
    pub boot_type: Option<String>,
    /// Simulated time of the event.
    pub at: chrono::DateTime<chrono::Utc>,
    pub received: chrono::DateTime<chrono::Utc>,
}

impl EmsimAdmin {
    /// Follows the event stream in the background, appending every event to
    /// the returned list (reconnecting if the stream ends; the replayed
    /// `power_on` snapshot is deduplicated by `seq`).
    pub fn follow_events(
        &self,
    ) -> (
        std::sync::Arc<std::sync::Mutex<Vec<EmsimEvent>>>,
        tokio::task::JoinHandle<()>,
    ) {
        let events = std::sync::Arc::new(std::sync::Mutex::new(Vec::<EmsimEvent>::new()));
        let out = events.clone();
        let admin = self.0.clone();
        let task = tokio::spawn(async move {
            use futures::StreamExt;
            let mut last_seq: Option<u64> = None;
            loop {
                let resp = admin
                    .http
                    .get(format!("{}/_emsim/events", admin.base))
                    .send()
                    .await;
                let Ok(resp) = resp else {
                    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                    continue;
                };
                let mut body = resp.bytes_stream();
                let mut buf = Vec::<u8>::new();
                while let Some(Ok(chunk)) = body.next().await {
                    buf.extend_from_slice(&chunk);
                    while let Some(nl) = buf.iter().position(|b| *b == b'\n') {
                        let line: Vec<u8> = buf.drain(..=nl).collect();
                        let Ok(v) = serde_json::from_slice::<Value>(&line) else {
                            continue;
                        };
                        let seq = v["seq"].as_u64();
                        if seq.is_some() && last_seq.is_some() && seq <= last_seq {
                            continue;
                        }
                        last_seq = seq.or(last_seq);
                        let at = v["at"]
                            .as_str()
                            .and_then(|t| chrono::DateTime::parse_from_rfc3339(t).ok())
                            .map(|t| t.with_timezone(&chrono::Utc));
                        let (Some(at), Some(id)) = (at, v["server"]["id"].as_str()) else {
                            continue;
                        };
                        out.lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .push(EmsimEvent {
                                kind: v["type"].as_str().unwrap_or_default().to_string(),
                                server_id: id.to_string(),
                                boot_type: v["boot_type"].as_str().map(str::to_string),
                                at,
                                received: chrono::Utc::now(),
                            });
                    }
                }
                tokio::time::sleep(std::time::Duration::from_millis(100)).await;
            }
        });
        (events, task)
    }
}

/// The public API as someone other than the provider uses it (a person with
/// the console or another tool, same project): what the orphan sweeper and
/// List must tell apart from the provider's own servers.
impl EmsimAdmin {
    /// Orders a server of offer `offer_name` in `zone`, authenticated with
    /// `token`, with these tags; returns the Server JSON.
    pub async fn user_create_server(
        &self,
        token: &str,
        zone: &str,
        offer_name: &str,
        name: &str,
        project_id: &str,
        tags: &[String],
    ) -> Result<Value> {
        let zone_url = format!("{}/baremetal/v1/zones/{zone}", self.0.base);
        let offers: Value = self
            .0
            .http
            .get(format!("{zone_url}/offers"))
            .query(&[("name", offer_name)])
            .header("X-Auth-Token", token)
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        let offer_id = offers["offers"][0]["id"]
            .as_str()
            .with_context(|| format!("no offer {offer_name} in {zone}: {offers}"))?;
        let resp = self
            .0
            .http
            .post(format!("{zone_url}/servers"))
            .header("X-Auth-Token", token)
            .json(&serde_json::json!({
                "offer_id": offer_id, "project_id": project_id, "name": name,
                "description": "created outside the provider by an e2e test",
                "tags": tags, "install": null,
            }))
            .send()
            .await?;
        let status = resp.status();
        let text = resp.text().await?;
        if !status.is_success() {
            anyhow::bail!("ordering {offer_name} in {zone} answered {status}: {text}");
        }
        Ok(serde_json::from_str(&text)?)
    }

    /// Creates and powers on a VM through the public Instance API (as a
    /// user's own tools would).
    pub async fn user_create_vm(&self, token: &str, zone: &str, vm: &UserVm<'_>) -> Result<Value> {
        let UserVm {
            commercial_type,
            image,
            name,
            project_id,
            tags,
        } = vm;
        let zone_url = format!("{}/instance/v1/zones/{zone}", self.0.base);
        let images: Value = self
            .0
            .http
            .get(format!("{zone_url}/images"))
            .query(&[("name", image)])
            .header("X-Auth-Token", token)
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        let image_id = images["images"][0]["id"]
            .as_str()
            .with_context(|| format!("no image {image} in {zone}: {images}"))?;
        let resp = self
            .0
            .http
            .post(format!("{zone_url}/servers"))
            .header("X-Auth-Token", token)
            .json(&serde_json::json!({
                "name": name, "commercial_type": commercial_type, "image": image_id,
                "project": project_id, "tags": tags,
                "volumes": {"0": {"size": 20_000_000_000u64, "volume_type": "sbs_volume"}},
            }))
            .send()
            .await?;
        let status = resp.status();
        let text = resp.text().await?;
        if !status.is_success() {
            anyhow::bail!("creating VM {name} in {zone} answered {status}: {text}");
        }
        let server: Value = serde_json::from_str(&text)?;
        let id = server["server"]["id"].as_str().context("server id")?;
        self.0
            .http
            .post(format!("{zone_url}/servers/{id}/action"))
            .header("X-Auth-Token", token)
            .json(&serde_json::json!({"action": "poweron"}))
            .send()
            .await?
            .error_for_status()?;
        Ok(server["server"].clone())
    }

    /// Terminates a running VM through the public Instance API, waits until
    /// it is gone, then deletes the SBS volumes terminate left behind.
    pub async fn user_delete_vm(&self, token: &str, zone: &str, id: &str) -> Result<()> {
        let zone_url = format!("{}/instance/v1/zones/{zone}", self.0.base);
        let server: Value = self
            .0
            .http
            .get(format!("{zone_url}/servers/{id}"))
            .header("X-Auth-Token", token)
            .send()
            .await?
            .error_for_status()?
            .json()
            .await?;
        let volumes: Vec<String> = server["server"]["volumes"]
            .as_object()
            .map(|m| {
                m.values()
                    .filter_map(|v| v["id"].as_str().map(String::from))
                    .collect()
            })
            .unwrap_or_default();
        self.0
            .http
            .post(format!("{zone_url}/servers/{id}/action"))
            .header("X-Auth-Token", token)
            .json(&serde_json::json!({"action": "terminate"}))
            .send()
            .await?
            .error_for_status()?;
        crate::wait::until(
            "the VM terminated",
            std::time::Duration::from_secs(60),
            std::time::Duration::from_millis(250),
            || async {
                let status = self
                    .0
                    .http
                    .get(format!("{zone_url}/servers/{id}"))
                    .header("X-Auth-Token", token)
                    .send()
                    .await?
                    .status();
                Ok((status == reqwest::StatusCode::NOT_FOUND).then_some(()))
            },
        )
        .await?;
        for volume in volumes {
            self.0
                .http
                .delete(format!(
                    "{}/block/v1/zones/{zone}/volumes/{volume}",
                    self.0.base
                ))
                .header("X-Auth-Token", token)
                .send()
                .await?
                .error_for_status()?;
        }
        Ok(())
    }

    /// Deletes a server through the public API, behind the provider's back.
    pub async fn user_delete_server(&self, token: &str, zone: &str, id: &str) -> Result<()> {
        let resp = self
            .0
            .http
            .delete(format!(
                "{}/baremetal/v1/zones/{zone}/servers/{id}",
                self.0.base
            ))
            .header("X-Auth-Token", token)
            .send()
            .await?;
        let status = resp.status();
        if !status.is_success() {
            anyhow::bail!(
                "deleting server {id} answered {status}: {}",
                resp.text().await?
            );
        }
        Ok(())
    }
}
