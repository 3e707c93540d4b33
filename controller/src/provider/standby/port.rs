//! The install engine's Kubernetes port for standby installs. A standby
//! server has no NodeClaim: its progress goes on the server's own tags (the
//! cloud stays the source of truth, and a restarted provider resumes from
//! them), and its Events go to its NodeClass.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use tracing::{debug, warn};

use super::{StandbyEvents, TAG_IDLE_SINCE, TAG_NODECLAIM, with_progress};
use crate::install::{InstallEvent, NodePort, NodePortError, Progress};
use crate::provider::tag_value;
use crate::scaleway::{ApiError, ElasticMetal};

/// The key a standby install is known by (its `node_claim_name`):
/// `<zone>/<server id>`.
pub fn install_key(zone: &str, server_id: &str) -> String {
    format!("{zone}/{server_id}")
}

fn parse_key(key: &str) -> Result<(&str, &str), NodePortError> {
    key.split_once('/')
        .filter(|(z, id)| !z.is_empty() && !id.is_empty())
        .ok_or_else(|| NodePortError::Refused(format!("not a standby install key: {key:?}")))
}

pub struct StandbyNodePort {
    api: Arc<dyn ElasticMetal>,
    events: Arc<dyn StandbyEvents>,
    /// Install key → its NodeClass, for Events.
    classes: Mutex<HashMap<String, String>>,
    /// Woken when a standby install reaches `standby` (an idle server to
    /// publish at once, not at the next pass).
    idle: Arc<tokio::sync::Notify>,
}

impl StandbyNodePort {
    pub fn new(api: Arc<dyn ElasticMetal>, events: Arc<dyn StandbyEvents>) -> Self {
        StandbyNodePort {
            api,
            events,
            classes: Mutex::default(),
            idle: Arc::default(),
        }
    }

    /// Notified each time a standby install ends idle.
    pub fn idle_signal(&self) -> Arc<tokio::sync::Notify> {
        self.idle.clone()
    }

    /// Names the NodeClass of an install before it starts.
    pub fn register(&self, key: &str, class: &str) {
        self.classes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(key.to_string(), class.to_string());
    }

    fn class_of(&self, key: &str) -> Option<String> {
        self.classes
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(key)
            .cloned()
    }
}

fn port_error(err: ApiError) -> NodePortError {
    if err.is_retryable() {
        NodePortError::Unavailable(err.to_string())
    } else {
        NodePortError::Refused(err.to_string())
    }
}

#[async_trait]
impl NodePort for StandbyNodePort {
    /// A standby install never waits for a Node.
    async fn node_ready(&self, _node_name: &str) -> Result<Option<bool>, NodePortError> {
        Ok(None)
    }

    /// There is no NodeClaim: a failed standby install only deletes its server.
    async fn delete_node_claim(&self, _name: &str, _reason: &str) -> Result<(), NodePortError> {
        Ok(())
    }

    /// Rewrites the server's progress tags. A server a node has adopted in
    /// the meantime (its NodeClaim tag) is left alone: its progress is the
    /// NodeClaim's from then on.
    async fn save_progress(&self, key: &str, progress: &Progress) -> Result<(), NodePortError> {
        let (zone, id) = parse_key(key)?;
        let server = self.api.get_server(zone, id).await.map_err(port_error)?;
        if tag_value(&server, TAG_NODECLAIM).is_some() {
            debug!(
                server_id = id,
                "adopted meanwhile; its progress is the NodeClaim's"
            );
            return Ok(());
        }
        let mut tags = with_progress(&server.tags, progress);
        tags.retain(|t| !t.starts_with(&format!("{TAG_IDLE_SINCE}=")));
        if progress.phase == Some(crate::install::Phase::Standby) {
            let since = crate::scaleway::api_clock::now()
                .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
            match tag_value(&server, TAG_IDLE_SINCE) {
                // Saved again (a retry): the first time stands.
                Some(first) => tags.push(format!("{TAG_IDLE_SINCE}={first}")),
                None => tags.push(format!("{TAG_IDLE_SINCE}={since}")),
            }
        }
        if tags == server.tags {
            return Ok(());
        }
        self.api
            .update_server_tags(zone, id, &tags)
            .await
            .map_err(port_error)?;
        if progress.phase == Some(crate::install::Phase::Standby) {
            self.idle.notify_one();
        }
        Ok(())
    }

    /// Warnings and the end of the install go to the NodeClass (as
    /// `Standby…` reasons); the phases of a standby install are only logged.
    async fn event(&self, key: &str, event: InstallEvent) {
        let forward = event.warning || event.reason.starts_with("Standby");
        if !forward {
            return;
        }
        let Some(class) = self.class_of(key) else {
            warn!(key, reason = %event.reason, "no NodeClass known for this standby install's Event");
            return;
        };
        let reason = if event.reason.starts_with("Standby") {
            event.reason.clone()
        } else {
            format!("Standby{}", event.reason)
        };
        let (_, id) = parse_key(key).unwrap_or(("", key));
        self.events
            .record(
                &class,
                event.warning,
                &reason,
                format!("standby server {id}: {}", event.message),
            )
            .await;
    }

    async fn initialize_node(&self, _node_name: &str) -> Result<(), NodePortError> {
        Ok(())
    }

    async fn release_token(&self, _claim: &str) -> Result<(), NodePortError> {
        Ok(())
    }
}
