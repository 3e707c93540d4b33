//! The Scaleway API as the benchmarks see it: emsim's knobs they turn (rate
//! limit, quota) and its per-endpoint counters, turned into calls per node.

use std::collections::BTreeMap;

use anyhow::{Result, bail};
use serde_json::{Value, json};

/// Calls of one endpoint by answer status.
pub type ByStatus = BTreeMap<u16, u64>;

/// emsim's counters: `METHOD /path-template` -> status -> calls.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Calls(pub BTreeMap<String, ByStatus>);

impl Calls {
    /// Reads `GET /_emsim/counters`.
    pub async fn read(emsim: &e2e::sims::EmsimAdmin) -> Result<Calls> {
        Ok(Calls::from_counters(&emsim.counters().await?))
    }

    pub fn from_counters(counters: &Value) -> Calls {
        let mut out = BTreeMap::new();
        if let Some(endpoints) = counters["endpoints"].as_object() {
            for (endpoint, count) in endpoints {
                let by_status: ByStatus = count["by_status"]
                    .as_object()
                    .map(|m| {
                        m.iter()
                            .filter_map(|(k, v)| Some((k.parse().ok()?, v.as_u64()?)))
                            .collect()
                    })
                    .unwrap_or_default();
                out.insert(endpoint.clone(), by_status);
            }
        }
        Calls(out)
    }

    /// The calls made since `before` was read.
    pub fn since(&self, before: &Calls) -> Calls {
        let mut out = BTreeMap::new();
        for (endpoint, now) in &self.0 {
            let was = before.0.get(endpoint);
            let diff: ByStatus = now
                .iter()
                .map(|(status, n)| {
                    let old = was.and_then(|w| w.get(status)).copied().unwrap_or(0);
                    (*status, n.saturating_sub(old))
                })
                .filter(|(_, n)| *n > 0)
                .collect();
            if !diff.is_empty() {
                out.insert(endpoint.clone(), diff);
            }
        }
        Calls(out)
    }

    pub fn total(&self) -> u64 {
        self.0.values().flat_map(|s| s.values()).sum()
    }

    /// Calls answered with `status`, all endpoints.
    pub fn with_status(&self, status: u16) -> u64 {
        self.0.values().filter_map(|s| s.get(&status)).sum()
    }

    /// Successful calls of one endpoint.
    pub fn ok(&self, endpoint: &str) -> u64 {
        self.0.get(endpoint).map_or(0, |s| {
            s.iter()
                .filter(|(status, _)| (200..300).contains(*status))
                .map(|(_, n)| n)
                .sum()
        })
    }

    /// One line per endpoint: calls, calls per node, and the answers.
    pub fn table(&self, nodes: usize) -> String {
        let nodes = nodes.max(1) as f64;
        let mut out = format!(
            "{:<62} {:>7} {:>9}  answers\n",
            "endpoint", "calls", "per node"
        );
        for (endpoint, by_status) in &self.0 {
            let total: u64 = by_status.values().sum();
            let answers: Vec<String> = by_status.iter().map(|(s, n)| format!("{s}: {n}")).collect();
            out.push_str(&format!(
                "{:<62} {:>7} {:>9.2}  {}\n",
                short(endpoint),
                total,
                total as f64 / nodes,
                answers.join(", ")
            ));
        }
        out.push_str(&format!(
            "{:<62} {:>7} {:>9.2}  429: {}\n",
            "all",
            self.total(),
            self.total() as f64 / nodes,
            self.with_status(429)
        ));
        out
    }
}

/// `GET /baremetal/v1/zones/{zone}/servers/{server_id}` -> `GET …/servers/{server_id}`.
fn short(endpoint: &str) -> String {
    endpoint.replace("/baremetal/v1/zones/{zone}", " …")
}

/// `PUT /_emsim/rate-limit`: calls per second per endpoint before 429
/// (`None`: no limit).
pub async fn set_rate_limit(emsim: &e2e::sims::EmsimAdmin, per_second: Option<f64>) -> Result<()> {
    put(
        emsim,
        "/_emsim/rate-limit",
        json!({ "per_second": per_second }),
    )
    .await
}

/// `PUT /_emsim/quota`: lifts the offer's quota (`None`) or sets it.
pub async fn set_quota(
    emsim: &e2e::sims::EmsimAdmin,
    offer: &str,
    quota: Option<u64>,
) -> Result<()> {
    put(
        emsim,
        "/_emsim/quota",
        json!({ "offer": offer, "quota": quota }),
    )
    .await
}

async fn put(emsim: &e2e::sims::EmsimAdmin, path: &str, body: Value) -> Result<()> {
    let resp = reqwest::Client::new()
        .put(format!("{}{path}", emsim.base()))
        .json(&body)
        .send()
        .await?;
    let status = resp.status();
    if !status.is_success() {
        bail!(
            "PUT {path} {body} answered {status}: {}",
            resp.text().await?
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn calls_since_a_snapshot_per_endpoint_and_status() {
        let before = Calls::from_counters(&json!({"endpoints": {
            "GET /a": {"total": 3, "by_status": {"200": 3}},
        }}));
        let after = Calls::from_counters(&json!({"endpoints": {
            "GET /a": {"total": 6, "by_status": {"200": 4, "429": 2}},
            "POST /b": {"total": 1, "by_status": {"200": 1}},
        }}));
        let d = after.since(&before);
        assert_eq!(d.total(), 4);
        assert_eq!(d.with_status(429), 2);
        assert_eq!(d.ok("GET /a"), 1);
        assert_eq!(d.ok("POST /b"), 1);
        assert!(d.table(2).contains("all"));
    }
}
