//! In-memory Kubernetes side of Reboot for tests: NodeClaims with a
//! `resourceVersion` that every write moves (a guarded write on an older one
//! is a conflict, as on the API server), Events and deletions recorded, and
//! Nodes' boot ids.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Mutex;

use async_trait::async_trait;
use serde_json::{Value, json};

use super::NodeBoots;
use super::record::{REBOOT_ANNOTATION, RebootRecord};
use crate::install::{InstallEvent, NodePort, NodePortError, Progress};
use crate::provider::{KubeError, NodeClaimSource};

/// A competing write that lands just before the next guarded one.
type Race = Box<dyn FnOnce(&mut BTreeMap<String, Value>) + Send>;

#[derive(Default)]
pub(crate) struct FakeClaimStore {
    claims: Mutex<BTreeMap<String, Value>>,
    version: Mutex<u64>,
    pub fail_get: Mutex<VecDeque<KubeError>>,
    pub fail_annotate: Mutex<VecDeque<KubeError>>,
    race: Mutex<Option<Race>>,
    /// (name, key, guarded by) of each write that passed.
    pub writes: Mutex<Vec<(String, String, Option<String>)>>,
}

impl FakeClaimStore {
    fn bump(&self, claim: &mut Value) {
        let mut v = self.version.lock().unwrap();
        *v += 1;
        claim["metadata"]["resourceVersion"] = json!(v.to_string());
    }

    pub fn insert(&self, mut claim: Value) {
        self.bump(&mut claim);
        let name = claim["metadata"]["name"].as_str().unwrap().to_string();
        self.claims.lock().unwrap().insert(name, claim);
    }

    pub fn claim(&self, name: &str) -> Option<Value> {
        self.claims.lock().unwrap().get(name).cloned()
    }

    pub fn remove(&self, name: &str) {
        self.claims.lock().unwrap().remove(name);
    }

    /// Sets (or, with `None`, removes) an annotation as another writer would.
    pub fn set_annotation(&self, name: &str, key: &str, value: Option<&str>) {
        let mut claims = self.claims.lock().unwrap();
        let claim = claims.get_mut(name).expect("a NodeClaim of the test");
        match value {
            Some(v) => claim["metadata"]["annotations"][key] = json!(v),
            None => {
                if let Some(a) = claim["metadata"]["annotations"].as_object_mut() {
                    a.remove(key);
                }
            }
        }
        self.bump(claim);
    }

    pub fn record(&self, name: &str) -> Option<RebootRecord> {
        let claim = self.claim(name)?;
        let json = claim
            .pointer(&format!(
                "/metadata/annotations/{}",
                REBOOT_ANNOTATION.replace('/', "~1")
            ))?
            .as_str()?
            .to_string();
        serde_json::from_str(&json).ok()
    }

    /// `race` runs on the NodeClaims just before the next guarded write is
    /// checked: another replica that read the same version wrote first.
    pub fn race_next_write(
        &self,
        race: impl FnOnce(&mut BTreeMap<String, Value>) + Send + 'static,
    ) {
        *self.race.lock().unwrap() = Some(Box::new(race));
    }
}

#[async_trait]
impl NodeClaimSource for FakeClaimStore {
    async fn list(&self) -> Result<Vec<Value>, KubeError> {
        Ok(self.claims.lock().unwrap().values().cloned().collect())
    }

    async fn get(&self, name: &str) -> Result<Option<Value>, KubeError> {
        if let Some(e) = self.fail_get.lock().unwrap().pop_front() {
            return Err(e);
        }
        Ok(self.claim(name))
    }

    async fn annotate(
        &self,
        name: &str,
        key: &str,
        value: &str,
        resource_version: Option<&str>,
    ) -> Result<(), KubeError> {
        if let Some(e) = self.fail_annotate.lock().unwrap().pop_front() {
            return Err(e);
        }
        if resource_version.is_some()
            && let Some(race) = self.race.lock().unwrap().take()
        {
            let mut claims = self.claims.lock().unwrap();
            race(&mut claims);
            if let Some(c) = claims.get_mut(name) {
                self.bump(c);
            }
        }
        let mut claims = self.claims.lock().unwrap();
        let Some(claim) = claims.get_mut(name) else {
            return Err(KubeError::Refused(format!(
                "404 nodeclaims {name} not found"
            )));
        };
        let current = claim["metadata"]["resourceVersion"].as_str().unwrap_or("");
        if let Some(rv) = resource_version
            && rv != current
        {
            return Err(KubeError::Conflict(format!(
                "409 the object has been modified (at {current}, written against {rv})"
            )));
        }
        if !claim["metadata"]["annotations"].is_object() {
            claim["metadata"]["annotations"] = json!({});
        }
        claim["metadata"]["annotations"][key] = json!(value);
        self.bump(claim);
        self.writes.lock().unwrap().push((
            name.to_string(),
            key.to_string(),
            resource_version.map(str::to_string),
        ));
        Ok(())
    }
}

/// Events, deletions and boot ids.
#[derive(Default)]
pub(crate) struct RecordingNodes {
    pub events: Mutex<Vec<(String, InstallEvent)>>,
    pub deleted: Mutex<Vec<(String, String)>>,
    pub fail_delete: Mutex<Option<NodePortError>>,
    /// Node name → boot id (absent: no Node).
    pub boots: Mutex<BTreeMap<String, String>>,
    pub fail_boot: Mutex<Option<KubeError>>,
}

impl RecordingNodes {
    /// The reasons of the Events recorded on `claim`, in order.
    pub fn reasons(&self, claim: &str) -> Vec<String> {
        self.events
            .lock()
            .unwrap()
            .iter()
            .filter(|(c, _)| c == claim)
            .map(|(_, e)| e.reason.clone())
            .collect()
    }

    pub fn last_event(&self) -> Option<InstallEvent> {
        self.events.lock().unwrap().last().map(|(_, e)| e.clone())
    }
}

#[async_trait]
impl NodePort for RecordingNodes {
    async fn node_ready(&self, _: &str) -> Result<Option<bool>, NodePortError> {
        Ok(None)
    }
    async fn delete_node_claim(&self, name: &str, reason: &str) -> Result<(), NodePortError> {
        if let Some(e) = self.fail_delete.lock().unwrap().take() {
            return Err(e);
        }
        self.deleted
            .lock()
            .unwrap()
            .push((name.to_string(), reason.to_string()));
        Ok(())
    }
    async fn save_progress(&self, _: &str, _: &Progress) -> Result<(), NodePortError> {
        Ok(())
    }
    async fn event(&self, claim: &str, event: InstallEvent) {
        self.events.lock().unwrap().push((claim.to_string(), event));
    }
    async fn initialize_node(&self, _: &str) -> Result<(), NodePortError> {
        Ok(())
    }
    async fn release_token(&self, _: &str) -> Result<(), NodePortError> {
        Ok(())
    }
}

#[async_trait]
impl NodeBoots for RecordingNodes {
    async fn boot_id(&self, node: &str) -> Result<Option<String>, KubeError> {
        if let Some(e) = self.fail_boot.lock().unwrap().take() {
            return Err(e);
        }
        Ok(self.boots.lock().unwrap().get(node).cloned())
    }
}

/// A joined Elastic Metal node `name` on server `id` of cluster `test`, in
/// core's reboot episode `boot-a`: the server put in `api`, the NodeClaim in
/// `claims`. Returns the NodeClaim as core would pass it.
pub(crate) fn joined_em_node(
    api: &crate::scaleway::fake::FakeElasticMetal,
    claims: &FakeClaimStore,
    zone: &str,
    name: &str,
    id: &str,
) -> Value {
    api.insert_server(
        serde_json::from_value(json!({
            "id": id, "name": name, "status": "ready", "offer_id": "o",
            "offer_name": "EM-A115X-SSD", "zone": zone, "boot_type": "normal",
            "tags": ["karpenter.scaleway.com/cluster=test", format!("karpenter.sh/nodeclaim={name}")],
            "created_at": "2026-11-22T09:00:00.000000Z",
            "updated_at": "2026-11-22T10:00:10.000000Z"
        }))
        .expect("a server"),
    );
    let claim = json!({
        "apiVersion": "karpenter.sh/v1", "kind": "NodeClaim",
        "metadata": {
            "name": name, "uid": format!("{name}-uid"),
            "annotations": {
                "install.karpenter.scaleway.com/phase": "joined",
                "karpenter.sh/reboot-pre-boot-id": "boot-a"
            }
        },
        "status": {"providerID": format!("scaleway://baremetal/{zone}/{id}")}
    });
    claims.insert(claim.clone());
    claim
}
