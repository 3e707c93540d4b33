//! Background refresh of the Instance catalog: every zone's commercial types
//! (`/products/servers`) and their stock (`/products/servers/availability`),
//! turned into instance types by `instance_mapping` and handed to the store
//! as [`ClassKind::Instance`]'s types. Like the Elastic Metal refresher, a
//! zone whose listing fails keeps its last good answer (and the catalog's
//! age grows), and until the first success the loop retries every few
//! seconds. The unavailable-offerings marks live in the shared store, whose
//! Elastic Metal refresher expires them.

use std::sync::Arc;
use std::time::Duration;

use futures::future::join_all;

use super::store::RefreshState;
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

/// What the Instance refresher remembers: each zone's last good products.
pub(crate) type InstanceRefreshState = RefreshState<ZoneProducts>;

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
    let all_ok = state.record(zones, results, "Instance types");
    let Some((by_zone, oldest)) = state.current() else {
        return false;
    };
    let (types, excluded) = vm_instance_types(&by_zone, DEFAULT_ROOT_BYTES);
    state.log_exclusions(excluded);
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
