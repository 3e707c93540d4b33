//! Background refresh of the Instance catalog: every zone's commercial types
//! (`/products/servers`) and their stock (`/products/servers/availability`),
//! turned into instance types by `instance_mapping` and handed to the store
//! as [`ClassKind::Instance`]'s types. Like the Elastic Metal refresher, a
//! zone whose listing fails keeps its last good answer (and the catalog's
//! age grows), and until the first success the loop retries every few
//! seconds. The unavailable-offerings marks live in the shared store, whose
//! Elastic Metal refresher expires them.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use futures::future::join_all;
use tracing::{info, warn};

use super::{CatalogStore, ClassKind, DEFAULT_ROOT_BYTES, ZoneProducts, vm_instance_types};
use crate::scaleway::ApiError;
use crate::scaleway::instance::Instance;

/// One zone's types and stock; an error in either fails the zone (a type
/// whose stock is unknown would be offered where it is sold out).
pub async fn read_instance_zone(api: &dyn Instance, zone: &str) -> Result<ZoneProducts, ApiError> {
    let (types, availability) = futures::join!(
        api.list_server_types(zone),
        api.list_server_availability(zone)
    );
    Ok(ZoneProducts {
        types: types?,
        availability: availability?,
    })
}

/// What the refresher remembers between two refreshes.
#[derive(Default)]
pub(crate) struct InstanceRefreshState {
    /// Zone → its last good products and when they were read.
    last_good: BTreeMap<String, (ZoneProducts, SystemTime)>,
    /// Types already logged as left out (once per process).
    logged_exclusions: HashSet<(String, String)>,
}

/// One refresh; true when every zone answered. The kind's default catalog
/// assumes the default root volume; each NodeClass's view sets its own
/// (`ClassView::ephemeral_storage_bytes`).
pub(crate) async fn refresh_instances_once(
    store: &CatalogStore,
    api: &dyn Instance,
    zones: &[String],
    state: &mut InstanceRefreshState,
) -> bool {
    let results = join_all(zones.iter().map(|z| read_instance_zone(api, z))).await;
    let now = SystemTime::now();
    let mut all_ok = true;
    for (zone, result) in zones.iter().zip(results) {
        match result {
            Ok(products) => {
                state.last_good.insert(zone.clone(), (products, now));
            }
            Err(error) => {
                all_ok = false;
                let kept = state
                    .last_good
                    .get(zone)
                    .map(|(_, at)| now.duration_since(*at).unwrap_or_default().as_secs());
                warn!(zone, %error, kept_last_good_age_s = ?kept,
                    "listing Instance types failed; serving the last good types of this zone");
            }
        }
    }
    if state.last_good.is_empty() {
        return false;
    }
    let by_zone: BTreeMap<String, ZoneProducts> = state
        .last_good
        .iter()
        .map(|(z, (p, _))| (z.clone(), p.clone()))
        .collect();
    let oldest = state
        .last_good
        .values()
        .map(|(_, at)| *at)
        .min()
        .unwrap_or(now);
    let (types, excluded) = vm_instance_types(&by_zone, DEFAULT_ROOT_BYTES);
    for e in excluded {
        if state
            .logged_exclusions
            .insert((e.offer.clone(), e.reason.clone()))
        {
            info!(commercial_type = %e.offer, zone = %e.zone, reason = %e.reason,
                "Instance type left out of the catalog");
        }
    }
    store.set_kind_types_read_at(ClassKind::Instance, types, oldest);
    all_ok
}

/// Refreshes the Instance catalog every `interval` (every few seconds until
/// the first success, and after a failed zone).
pub async fn run_instance_refresher(
    store: Arc<CatalogStore>,
    api: Arc<dyn Instance>,
    zones: Vec<String>,
    interval: Duration,
) {
    let mut state = InstanceRefreshState::default();
    let retry = interval.min(Duration::from_secs(5));
    loop {
        let ok = refresh_instances_once(&store, api.as_ref(), &zones, &mut state).await;
        tokio::time::sleep(if ok { interval } else { retry }).await;
    }
}

#[cfg(test)]
#[path = "instance_refresh_tests.rs"]
mod tests;
