//! A live view of the NodeClaims (install phase, providerID, conditions) fed
//! by a watch, so a scenario can act the moment an install enters a phase
//! (e.g. SIGKILL the provider) and can tell afterwards which phases every
//! NodeClaim went through, with wall-clock times.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use anyhow::{Result, bail};
use futures::StreamExt;
use kube::api::DynamicObject;
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use tokio::sync::watch;

use crate::kubeutil;

/// What the watch knows about one NodeClaim.
#[derive(Debug, Clone, PartialEq)]
pub struct ClaimState {
    pub name: String,
    /// `install.karpenter.scaleway.com/phase`, as last seen.
    pub phase: Option<String>,
    /// Every distinct phase seen, in order, with when it was first seen.
    pub phases: Vec<(String, Instant)>,
    pub provider_id: Option<String>,
    pub nodepool: Option<String>,
    /// `node.kubernetes.io/instance-type` (the offer) once Launched.
    pub instance_type: Option<String>,
    pub zone: Option<String>,
    /// When the watch first saw the NodeClaim.
    pub first_seen: Instant,
    /// When the watch first saw `Registered=True`.
    pub registered: Option<Instant>,
    /// When the watch first saw `Initialized=True`.
    pub initialized: Option<Instant>,
    /// Has a deletionTimestamp.
    pub deleting: bool,
    /// Gone from the API server.
    pub gone: bool,
    pub object: DynamicObject,
}

impl ClaimState {
    /// The emsim server id, from the providerID.
    pub fn server_id(&self) -> Option<String> {
        self.provider_id
            .as_deref()
            .and_then(|p| crate::scenario::parse_provider_id(p).ok())
            .map(|(_, id)| id)
    }

    pub fn saw_phase(&self, phase: &str) -> bool {
        self.phases.iter().any(|(p, _)| p == phase)
    }
}

/// Every NodeClaim seen since the watch started (deleted ones stay, `gone`).
pub type Claims = BTreeMap<String, ClaimState>;

pub struct ClaimWatch {
    rx: watch::Receiver<Claims>,
    task: tokio::task::JoinHandle<()>,
}

impl ClaimWatch {
    pub fn start(client: &Client) -> ClaimWatch {
        let (tx, rx) = watch::channel(Claims::new());
        let api = kubeutil::nodeclaims(client);
        let task = tokio::spawn(async move {
            let mut stream = std::pin::pin!(watcher(api, watcher::Config::default()));
            while let Some(event) = stream.next().await {
                match event {
                    Ok(watcher::Event::Apply(obj) | watcher::Event::InitApply(obj)) => {
                        tx.send_modify(|claims| observe(claims, obj));
                    }
                    Ok(watcher::Event::Delete(obj)) => tx.send_modify(|claims| {
                        if let Some(c) = claims.get_mut(&obj.name_any()) {
                            c.gone = true;
                            c.deleting = true;
                        }
                    }),
                    Ok(_) => {}
                    Err(e) => {
                        tracing::debug!(error = %e, "NodeClaim watch error (retrying)");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
        });
        ClaimWatch { rx, task }
    }

    /// The current view.
    pub fn snapshot(&self) -> Claims {
        self.rx.borrow().clone()
    }

    /// Waits until `pick` returns `Some` on the view (re-checked on every
    /// change), or fails after `timeout` saying `what`.
    pub async fn wait_for<T>(
        &self,
        what: &str,
        timeout: Duration,
        mut pick: impl FnMut(&Claims) -> Option<T>,
    ) -> Result<T> {
        let mut rx = self.rx.clone();
        let start = Instant::now();
        let found = tokio::time::timeout(timeout, async {
            loop {
                if let Some(v) = pick(&rx.borrow_and_update()) {
                    return Ok(v);
                }
                if rx.changed().await.is_err() {
                    bail!("the NodeClaim watch stopped");
                }
            }
        })
        .await;
        match found {
            Ok(v) => {
                tracing::info!(
                    what,
                    elapsed_ms = start.elapsed().as_millis() as u64,
                    "condition met"
                );
                v
            }
            Err(_) => {
                let view: Vec<String> = self.snapshot().values().map(describe).collect();
                bail!("timed out after {timeout:?} waiting for {what}; NodeClaims: {view:?}")
            }
        }
    }
}

impl Drop for ClaimWatch {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One line per NodeClaim, for failure messages and logs.
pub fn describe(c: &ClaimState) -> String {
    let phases: Vec<&str> = c.phases.iter().map(|(p, _)| p.as_str()).collect();
    format!(
        "{} pool={} offer={} server={} phases={:?}{}{}",
        c.name,
        c.nodepool.as_deref().unwrap_or("-"),
        c.instance_type.as_deref().unwrap_or("-"),
        c.server_id().unwrap_or_else(|| "-".into()),
        phases,
        if c.registered.is_some() {
            " registered"
        } else {
            ""
        },
        if c.gone {
            " gone"
        } else if c.deleting {
            " deleting"
        } else {
            ""
        },
    )
}

fn observe(claims: &mut Claims, obj: DynamicObject) {
    let now = Instant::now();
    let name = obj.name_any();
    let entry = claims.entry(name.clone()).or_insert_with(|| ClaimState {
        name,
        phase: None,
        phases: Vec::new(),
        provider_id: None,
        nodepool: None,
        instance_type: None,
        zone: None,
        first_seen: now,
        registered: None,
        initialized: None,
        deleting: false,
        gone: false,
        object: obj.clone(),
    });
    let phase = kubeutil::install_phase(&obj);
    if let Some(p) = &phase
        && entry.phases.last().map(|(last, _)| last) != Some(p)
    {
        tracing::info!(nodeclaim = %entry.name, phase = %p, "install phase");
        entry.phases.push((p.clone(), now));
    }
    entry.phase = phase;
    entry.provider_id = obj.data["status"]["providerID"]
        .as_str()
        .filter(|s| !s.is_empty())
        .map(str::to_string);
    let labels = obj.labels();
    entry.nodepool = labels.get("karpenter.sh/nodepool").cloned();
    entry.instance_type = labels.get("node.kubernetes.io/instance-type").cloned();
    entry.zone = labels.get("topology.kubernetes.io/zone").cloned();
    if entry.registered.is_none()
        && kubeutil::condition(&obj, "Registered").as_deref() == Some("True")
    {
        entry.registered = Some(now);
    }
    if entry.initialized.is_none()
        && kubeutil::condition(&obj, "Initialized").as_deref() == Some("True")
    {
        entry.initialized = Some(now);
    }
    entry.deleting = obj.metadata.deletion_timestamp.is_some();
    entry.object = obj;
}
