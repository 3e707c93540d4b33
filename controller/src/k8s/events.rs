//! Writes Kubernetes Events (`events.k8s.io/v1`) for the install engine and
//! the orphan sweeper. The same Event repeated within a window is counted as
//! an `EventSeries` on the first object instead of being written again, so a
//! retry loop or a periodic pass cannot flood etcd.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use kube::Client;
use kube::api::{Api, ObjectMeta, Patch, PatchParams, PostParams};

/// `reportingController` of our Events (and the `source` kubectl shows).
pub const REPORTING_CONTROLLER: &str = "karpenter-scaleway";
/// Events about cluster-scoped objects go to `default`, as client-go's
/// recorder puts them; `kubectl describe` finds them by `regarding` whatever
/// their namespace.
pub const EVENT_NAMESPACE: &str = "default";
/// The same Event repeated within this window is counted (an `EventSeries`)
/// instead of written again.
const EVENT_SERIES_WINDOW: chrono::TimeDelta = chrono::TimeDelta::minutes(10);
/// `note` is limited to 1 kB by the API server.
const EVENT_NOTE_MAX: usize = 1024;

/// One Event to write.
#[derive(Debug, Clone)]
pub struct NewEvent {
    pub regarding: ObjectReference,
    /// `Warning` when true, else `Normal`.
    pub warning: bool,
    /// e.g. `Install`, `Sweep`.
    pub action: String,
    /// CamelCase reason.
    pub reason: String,
    pub note: String,
    /// What makes two Events "the same": a repeat of this key within the
    /// window is a series count on the first object (its note stays the first
    /// one's).
    pub series_key: String,
}

/// An Event already written, counted again when it repeats.
#[derive(Debug, Clone)]
struct Recorded {
    name: String,
    count: i32,
    last: DateTime<Utc>,
}

/// Writes Events in [`EVENT_NAMESPACE`], remembering recent ones to count
/// their repeats.
#[derive(Clone)]
pub struct EventRecorder {
    events: Api<Event>,
    reporting_instance: String,
    recorded: Arc<Mutex<HashMap<String, Recorded>>>,
}

impl EventRecorder {
    pub fn new(client: Client) -> Self {
        // The pod name when the chart sets POD_NAME, else the host name (a
        // pod's host name is its name).
        let reporting_instance = std::env::var("POD_NAME")
            .or_else(|_| std::env::var("HOSTNAME"))
            .ok()
            .filter(|v| !v.is_empty() && v.len() <= 128)
            .unwrap_or_else(|| REPORTING_CONTROLLER.to_string());
        EventRecorder {
            events: Api::namespaced(client, EVENT_NAMESPACE),
            reporting_instance,
            recorded: Arc::default(),
        }
    }

    /// Writes the Event, or counts it on the Event written for the same
    /// `series_key` less than ten minutes ago.
    pub async fn record(&self, event: NewEvent) -> Result<(), kube::Error> {
        let now = Utc::now();
        let repeat = {
            let mut recorded = self.recorded.lock().unwrap_or_else(|e| e.into_inner());
            recorded.retain(|_, r| now - r.last < EVENT_SERIES_WINDOW);
            recorded.get_mut(&event.series_key).map(|r| {
                r.count += 1;
                r.last = now;
                r.clone()
            })
        };
        if let Some(r) = repeat {
            let patch = serde_json::json!({
                "series": EventSeries { count: r.count, last_observed_time: micro_time(now) }
            });
            match self
                .events
                .patch(&r.name, &PatchParams::default(), &Patch::Merge(&patch))
                .await
            {
                Ok(_) => return Ok(()),
                // Deleted meanwhile (events have a TTL): write a new one.
                Err(kube::Error::Api(s)) if s.code == 404 => {}
                Err(e) => return Err(e),
            }
        }

        let prefix = event.regarding.name.clone().unwrap_or_default();
        let name = format!(
            "{prefix}.{:x}",
            now.timestamp_nanos_opt().unwrap_or_default()
        );
        let object = Event {
            metadata: ObjectMeta {
                name: Some(name.clone()),
                namespace: Some(EVENT_NAMESPACE.into()),
                ..Default::default()
            },
            event_time: Some(micro_time(now)),
            action: Some(event.action),
            reason: Some(event.reason),
            note: Some(truncate(&event.note, EVENT_NOTE_MAX)),
            type_: Some(if event.warning { "Warning" } else { "Normal" }.into()),
            reporting_controller: Some(REPORTING_CONTROLLER.into()),
            reporting_instance: Some(self.reporting_instance.clone()),
            regarding: Some(event.regarding),
            ..Default::default()
        };
        self.events.create(&PostParams::default(), &object).await?;
        self.recorded
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(
                event.series_key,
                Recorded {
                    name,
                    count: 1,
                    last: now,
                },
            );
        Ok(())
    }
}

fn micro_time(t: DateTime<Utc>) -> MicroTime {
    let ts = k8s_openapi::jiff::Timestamp::new(t.timestamp(), t.timestamp_subsec_nanos() as i32)
        .unwrap_or_else(|_| k8s_openapi::jiff::Timestamp::now());
    MicroTime(ts)
}

/// At most `max` bytes, cut on a character boundary.
pub fn truncate(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    let mut end = max;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    text[..end].to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn notes_are_cut_on_a_character_boundary() {
        assert_eq!(truncate("abc", 10), "abc");
        assert_eq!(truncate("ééé", 3), "é");
    }
}
