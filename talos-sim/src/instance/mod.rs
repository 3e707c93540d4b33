//! Scaleway Instances (VMs): talos-sim boots them the way Talos' `scaleway`
//! platform does. No rescue and no disk writes: the VM runs its image, reads
//! its machine config from the user data key `cloud-init` through the
//! metadata service, and stays in maintenance mode when there is none or it
//! is invalid. emsim has no event stream for VMs, so talos-sim follows them
//! by reading emsim's admin list (`listing`, `follower`) and asks emsim's
//! admin API for the user data, as the metadata service would (`metadata`).

pub mod boot;
pub mod follower;
pub mod listing;
pub mod metadata;

use crate::kubelet::node::NodeFacts;
use crate::machine_config::NodeConfig;
use crate::model::VmBoot;

/// The user data key Talos' `scaleway` platform reads.
pub const USER_DATA_KEY: &str = "cloud-init";

/// What Talos takes from the platform's metadata when the config does not
/// say: the providerID (`scaleway://instance/{zone}/{id}`, unless the config
/// sets `machine.kubelet.extraArgs.provider-id`) and the hostname (the
/// server's, unless the config names one).
pub fn platform_identity(
    vm: &VmBoot,
    server_id: &str,
    hostname: &str,
    cfg: &mut NodeConfig,
    facts: &mut NodeFacts,
) {
    if cfg.provider_id.is_none() {
        cfg.provider_id = Some(vm.provider_id(server_id));
    }
    if cfg.hostname.is_none() && !hostname.is_empty() {
        facts.name = hostname.to_string();
    }
}
