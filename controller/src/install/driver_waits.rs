//! The driver's side of the waits the history learns (`history.rs`): the
//! windows it plans with, the fast reads made only on spare turns of the
//! API's pace, and what each observation tells.

use tokio::time::Instant;

use super::{Driver, api_failed, bounded};
use crate::install::history::{self, Wait, Window};
use crate::install::machine::{Observation, Plan, State};
use crate::install::waits::Look;
use crate::scaleway::ApiError;

impl Drop for Driver<'_> {
    /// However the install ends, it no longer reads inside a window.
    fn drop(&mut self) {
        self.engine.set_watching(&self.spec.server_id, false);
    }
}

impl Driver<'_> {
    /// A status read made only if the API's pace has a free turn now
    /// (`None`: skipped).
    pub(super) async fn read_if_idle(&self) -> Option<Observation> {
        let deps = &self.engine.deps;
        let (zone, id) = (self.spec.zone.as_str(), self.spec.server_id.as_str());
        let call = deps.elastic_metal.get_server_if_idle(zone, id);
        match bounded(deps.settings.call_timeout, call).await {
            Ok(Ok(Some(server))) => Some(Observation::Server(Box::new(server))),
            Ok(Ok(None)) => None,
            Ok(Err(err)) => Some(api_failed("get server", err)),
            Err(elapsed) => Some(api_failed("get server", ApiError::Unavailable(elapsed))),
        }
    }

    /// The window where waits of this kind ended lately for this offer in
    /// this zone.
    pub(super) fn expected(&self, wait: Wait, plan: &Plan, state: &State) -> Option<Window> {
        let seen = self
            .engine
            .history
            .recent(wait, &self.spec.offer_name, &self.spec.zone);
        match wait {
            Wait::Delivery => {
                let progress = history::Progress {
                    elapsed: Instant::now().saturating_duration_since(state.since),
                    reads: self.waits.delivery_reads(),
                };
                let window = history::delivery_window(&seen, plan.poll_interval, progress)?;
                let Some(spacing) = self.engine.deps.settings.status_read_spacing else {
                    return Some(window);
                };
                let pace = 1.0 / spacing.as_secs_f64().max(1e-9);
                let watching = self.engine.watching_count();
                let reading = self.engine.reading_status().saturating_sub(watching);
                history::shared(window, pace, reading, watching, plan.poll_interval)
            }
            Wait::Boot => history::boot_window(&seen, plan.probe_interval),
        }
    }
}

/// What an observation tells about the waits the history learns.
pub(super) fn look_of(obs: &Observation) -> Look {
    match obs {
        Observation::Server(_) => Look::Status,
        Observation::Rebooted => Look::Rebooted,
        Observation::TalosDown(_) => Look::TalosDown,
        Observation::TalosUp => Look::TalosUp,
        _ => Look::Other,
    }
}
