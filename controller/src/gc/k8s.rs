//! kube adapter of [`SweepEvents`]: one Event per decision, about the
//! NodeClass named by the server's tag (so `kubectl describe` of the NodeClass
//! shows it), or about the server itself when it has no such tag.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::api::Api;
use tracing::warn;

use super::{Decision, InstanceDecision, Subject, SweepEvents};
use crate::k8s::events::{EventRecorder, NewEvent};
use crate::nodeclass;
use crate::nodeclass::instance::ScalewayInstanceNodeClass;

/// `regarding` of an Event about a server no NodeClass names: not a
/// Kubernetes object, but the reference still says what it is.
const SERVER_API_VERSION: &str = "baremetal.scaleway.com/v1";
const SERVER_KIND: &str = "Server";
/// The same for a VM and an SBS volume.
const INSTANCE_API_VERSION: &str = "instance.scaleway.com/v1";
const INSTANCE_KIND: &str = "Server";
const VOLUME_API_VERSION: &str = "block.scaleway.com/v1";
const VOLUME_KIND: &str = "Volume";

/// How long a NodeClass's uid is remembered (a deleted and re-created
/// NodeClass gets a new one).
const UID_TTL: std::time::Duration = std::time::Duration::from_secs(600);

/// A NodeClass by (kind, name).
type UidKey = (&'static str, String);

#[derive(Clone)]
pub struct KubeSweepEvents {
    recorder: EventRecorder,
    node_classes: Api<nodeclass::ScalewayElasticMetalNodeClass>,
    instance_classes: Api<ScalewayInstanceNodeClass>,
    uids: Arc<Mutex<HashMap<UidKey, (String, std::time::Instant)>>>,
}

impl KubeSweepEvents {
    pub fn new(client: Client) -> Self {
        KubeSweepEvents {
            recorder: EventRecorder::new(client.clone()),
            node_classes: Api::all(client.clone()),
            instance_classes: Api::all(client),
            uids: Arc::default(),
        }
    }

    /// The NodeClass's uid, so that `kubectl describe` matches the Event;
    /// without it (NodeClass gone, API error) the Event is still written.
    async fn uid(&self, kind: &'static str, name: &str) -> Option<String> {
        let key = (kind, name.to_string());
        if let Some((uid, at)) = self
            .uids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .get(&key)
            .cloned()
            && at.elapsed() < UID_TTL
        {
            return Some(uid);
        }
        let found = if kind == nodeclass::instance::KIND {
            let found = self.instance_classes.get_metadata_opt(name).await;
            found.map(|o| o.and_then(|o| o.metadata.uid))
        } else {
            let found = self.node_classes.get_metadata_opt(name).await;
            found.map(|o| o.and_then(|o| o.metadata.uid))
        };
        let uid = match found {
            Ok(uid) => uid?,
            Err(error) => {
                warn!(nodeclass = %name, %error, "reading the NodeClass for an Event");
                return None;
            }
        };
        self.uids
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(key, (uid.clone(), std::time::Instant::now()));
        Some(uid)
    }

    async fn nodeclass_ref(&self, kind: &'static str, name: &str) -> ObjectReference {
        ObjectReference {
            api_version: Some(format!("{}/{}", nodeclass::GROUP, nodeclass::VERSION)),
            kind: Some(kind.into()),
            name: Some(name.to_string()),
            uid: self.uid(kind, name).await,
            ..Default::default()
        }
    }

    async fn regarding(&self, decision: &Decision) -> ObjectReference {
        match decision.nodeclass().filter(|n| !n.is_empty()) {
            Some(class) => self.nodeclass_ref(nodeclass::KIND, class).await,
            None => ObjectReference {
                api_version: Some(SERVER_API_VERSION.into()),
                kind: Some(SERVER_KIND.into()),
                name: Some(decision.server.id.clone()),
                ..Default::default()
            },
        }
    }

    /// The Instance NodeClass named by the tag (VMs and their volumes are an
    /// Instance NodeClass's), else the VM or volume itself.
    async fn regarding_instance(&self, decision: &InstanceDecision) -> ObjectReference {
        if let Some(class) = decision.nodeclass().filter(|n| !n.is_empty()) {
            return self.nodeclass_ref(nodeclass::instance::KIND, class).await;
        }
        let (api_version, kind) = match decision.subject {
            Subject::Vm(_) => (INSTANCE_API_VERSION, INSTANCE_KIND),
            Subject::Volume(_) => (VOLUME_API_VERSION, VOLUME_KIND),
        };
        ObjectReference {
            api_version: Some(api_version.into()),
            kind: Some(kind.into()),
            name: Some(decision.id().to_string()),
            ..Default::default()
        }
    }
}

#[async_trait]
impl SweepEvents for KubeSweepEvents {
    async fn record(&self, decision: &Decision) {
        let event = NewEvent {
            regarding: self.regarding(decision).await,
            warning: decision.verdict.is_warning(),
            action: "Sweep".into(),
            reason: decision.verdict.event_reason().into(),
            note: decision.note(),
            // (server, decision, reason): the note changes every pass (age).
            series_key: [
                "orphan",
                decision.server.id.as_str(),
                decision.verdict.as_str(),
                decision.reason.as_str(),
            ]
            .join("\u{1f}"),
        };
        let reason = event.reason.clone();
        if let Err(error) = self.recorder.record(event).await {
            warn!(server_id = %decision.server.id, %reason, %error,
                "could not record the sweeper's Event");
        }
    }

    async fn record_instance(&self, decision: &InstanceDecision) {
        let event = NewEvent {
            regarding: self.regarding_instance(decision).await,
            warning: decision.verdict.is_warning(),
            action: "Sweep".into(),
            reason: decision.verdict.event_reason().into(),
            note: decision.note(),
            series_key: [
                "orphan",
                decision.kind(),
                decision.id(),
                decision.verdict.as_str(),
                decision.reason.as_str(),
            ]
            .join("\u{1f}"),
        };
        let reason = event.reason.clone();
        if let Err(error) = self.recorder.record(event).await {
            warn!(kind = decision.kind(), id = %decision.id(), %reason, %error,
                "could not record the sweeper's Event");
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use serde_json::json;
    use wiremock::matchers::{body_partial_json, method, path};
    use wiremock::{Mock, MockServer, Request, ResponseTemplate};

    use super::*;
    use crate::gc::{InstanceDecision, Reason, Subject, Verdict};
    use crate::scaleway::Server;

    const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/default/events";

    fn echo(code: u16) -> impl Fn(&Request) -> ResponseTemplate {
        move |req: &Request| {
            ResponseTemplate::new(code).set_body_raw(req.body.clone(), "application/json")
        }
    }

    fn decision(id: &str, nodeclass: Option<&str>, age_s: u64) -> Decision {
        let mut tags = vec![
            "karpenter.scaleway.com/cluster=prod".to_string(),
            "karpenter.sh/nodeclaim=np-gone".to_string(),
        ];
        if let Some(c) = nodeclass {
            tags.push(format!("karpenter.scaleway.com/nodeclass={c}"));
        }
        let server: Server = serde_json::from_value(json!({
            "id": id, "project_id": "p", "name": "np-gone", "status": "ready",
            "offer_id": "o", "zone": "fr-par-2", "created_at": "2026-01-01T00:00:00Z",
            "tags": tags
        }))
        .unwrap();
        Decision {
            server,
            verdict: Verdict::WouldDelete,
            reason: Reason::Orphaned,
            age: Some(Duration::from_secs(age_s)),
            claim: None,
            detail: "no NodeClaim np-gone".into(),
        }
    }

    #[tokio::test]
    async fn events_regard_the_nodeclass_or_the_server_and_repeats_are_a_series() {
        let server = MockServer::start().await;
        Mock::given(method("GET"))
            .and(path(
                "/apis/karpenter.scaleway.com/v1alpha1/scalewayelasticmetalnodeclasses/default",
            ))
            .respond_with(ResponseTemplate::new(200).set_body_json(json!({
                "apiVersion": "karpenter.scaleway.com/v1alpha1",
                "kind": "ScalewayElasticMetalNodeClass",
                "metadata": {"name": "default", "uid": "nc-uid"},
                "spec": {}
            })))
            .mount(&server)
            .await;
        Mock::given(method("POST"))
            .and(path(EVENTS))
            .and(body_partial_json(json!({
                "reason": "OrphanWouldDelete", "type": "Warning", "action": "Sweep",
                "reportingController": "karpenter-scaleway",
                "regarding": {
                    "apiVersion": "karpenter.scaleway.com/v1alpha1",
                    "kind": "ScalewayElasticMetalNodeClass",
                    "name": "default", "uid": "nc-uid"
                }
            })))
            .respond_with(echo(201))
            .expect(1)
            .mount(&server)
            .await;
        Mock::given(method("POST"))
            .and(path(EVENTS))
            .and(body_partial_json(json!({
                "regarding": {
                    "apiVersion": "baremetal.scaleway.com/v1", "kind": "Server", "name": "s2"
                }
            })))
            .respond_with(echo(201))
            .expect(1)
            .mount(&server)
            .await;
        Mock::given(method("PATCH"))
            .and(body_partial_json(json!({"series": {"count": 2}})))
            .respond_with(echo(200))
            .expect(1)
            .mount(&server)
            .await;
        let config = kube::Config::new(server.uri().parse().unwrap());
        let events = KubeSweepEvents::new(Client::try_from(config).unwrap());
        events.record(&decision("s1", Some("default"), 8000)).await;
        // Next pass: older, same server and reason → a series count.
        events.record(&decision("s1", Some("default"), 8300)).await;
        events.record(&decision("s2", None, 8000)).await;
        let posted = server
            .received_requests()
            .await
            .unwrap()
            .into_iter()
            .find(|r| r.method.as_str() == "POST")
            .unwrap();
        let body: serde_json::Value = serde_json::from_slice(&posted.body).unwrap();
        let note = body["note"].as_str().unwrap();
        for part in [
            "s1",
            "fr-par-2",
            "np-gone",
            "2h13m",
            "would_delete",
            "orphaned",
        ] {
            assert!(note.contains(part), "{part} in {note}");
        }
    }

    fn vm_decision(id: &str, nodeclass: Option<&str>) -> InstanceDecision {
        let mut tags = vec![
            "karpenter.scaleway.com/cluster=prod".to_string(),
            "karpenter.sh/nodeclaim=vm-gone".to_string(),
        ];
        if let Some(c) = nodeclass {
            tags.push(format!("karpenter.scaleway.com/nodeclass={c}"));
        }
        let server: crate::scaleway::instance::Server = serde_json::from_value(json!({
            "id": id, "name": "vm-gone", "commercial_type": "POP2-2C-8G", "state": "running",
            "zone": "fr-par-2", "project": "p", "tags": tags
        }))
        .unwrap();
        InstanceDecision {
            subject: Subject::Vm(Box::new(server)),
            verdict: Verdict::Deleted,
            reason: Reason::Orphaned,
            age: Some(Duration::from_secs(400)),
            claim: None,
            detail: "no NodeClaim vm-gone".into(),
            step: Some(crate::gc::Step::Terminate),
        }
    }

    #[tokio::test]
    async fn instance_events_regard_the_instance_nodeclass_or_the_vm() {
        let server = MockServer::start().await;
        Mock::given(method("GET"))
            .and(path(
                "/apis/karpenter.scaleway.com/v1alpha1/scalewayinstancenodeclasses/gpu",
            ))
            .respond_with(ResponseTemplate::new(200).set_body_json(json!({
                "apiVersion": "karpenter.scaleway.com/v1alpha1",
                "kind": "ScalewayInstanceNodeClass",
                "metadata": {"name": "gpu", "uid": "inc-uid"},
                "spec": {}
            })))
            .expect(1)
            .mount(&server)
            .await;
        Mock::given(method("POST"))
            .and(path(EVENTS))
            .and(body_partial_json(json!({
                "reason": "OrphanDeleted", "type": "Warning",
                "regarding": {
                    "apiVersion": "karpenter.scaleway.com/v1alpha1",
                    "kind": "ScalewayInstanceNodeClass", "name": "gpu", "uid": "inc-uid"
                }
            })))
            .respond_with(echo(201))
            .expect(1)
            .mount(&server)
            .await;
        Mock::given(method("POST"))
            .and(path(EVENTS))
            .and(body_partial_json(json!({
                "regarding": {"apiVersion": "instance.scaleway.com/v1", "kind": "Server", "name": "i2"}
            })))
            .respond_with(echo(201))
            .expect(1)
            .mount(&server)
            .await;
        let config = kube::Config::new(server.uri().parse().unwrap());
        let events = KubeSweepEvents::new(Client::try_from(config).unwrap());
        events
            .record_instance(&vm_decision("i1", Some("gpu")))
            .await;
        events.record_instance(&vm_decision("i2", None)).await;
        let posted = server
            .received_requests()
            .await
            .unwrap()
            .into_iter()
            .find(|r| r.method.as_str() == "POST")
            .unwrap();
        let body: serde_json::Value = serde_json::from_slice(&posted.body).unwrap();
        let note = body["note"].as_str().unwrap();
        for part in ["instance i1", "vm-gone", "fr-par-2", "6m40s", "deleted"] {
            assert!(note.contains(part), "{part} in {note}");
        }
    }
}
