//! Events of the standby pools (`provider/standby`), recorded on their
//! NodeClass so that `kubectl describe emnc <name>` shows them.

use async_trait::async_trait;
use k8s_openapi::api::core::v1::ObjectReference;
use kube::Client;
use kube::api::Api;
use tracing::warn;

use super::events::{EventRecorder, NewEvent};
use crate::nodeclass::{self, ScalewayElasticMetalNodeClass};
use crate::provider::standby::StandbyEvents;

pub struct KubeStandbyEvents {
    recorder: EventRecorder,
    classes: Api<ScalewayElasticMetalNodeClass>,
}

impl KubeStandbyEvents {
    pub fn new(client: Client) -> Self {
        KubeStandbyEvents {
            recorder: EventRecorder::new(client.clone()),
            classes: Api::all(client),
        }
    }
}

#[async_trait]
impl StandbyEvents for KubeStandbyEvents {
    async fn record(&self, class: &str, warning: bool, reason: &str, note: String) {
        // The uid lets `kubectl describe` match the Event; without it (the
        // NodeClass gone, an API error) the Event is written all the same.
        let uid = match self.classes.get_metadata_opt(class).await {
            Ok(found) => found.and_then(|o| o.metadata.uid),
            Err(error) => {
                warn!(nodeclass = class, %error, "reading the NodeClass for a standby Event");
                None
            }
        };
        let event = NewEvent {
            regarding: ObjectReference {
                api_version: Some(format!("{}/{}", nodeclass::GROUP, nodeclass::VERSION)),
                kind: Some(nodeclass::KIND.into()),
                name: Some(class.to_string()),
                uid,
                ..Default::default()
            },
            warning,
            action: "Standby".into(),
            reason: reason.to_string(),
            series_key: ["standby", class, reason, note.as_str()].join("\u{1f}"),
            note,
        };
        if let Err(error) = self.recorder.record(event).await {
            warn!(nodeclass = class, reason, %error, "could not record the standby Event");
        }
    }
}
