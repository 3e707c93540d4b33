//! Builders shared by the engine's tests.

use std::collections::BTreeMap;

use super::{InstallSpec, Secret, Taint};
use crate::catalog::{KubeletReservations, Resources};

pub const BASE_CONFIG: &str = include_str!("../talos/testdata/worker-v1.13.yaml");

/// A realistic spec for server `srv-1` / NodeClaim `default-abc12`.
pub fn spec(image_url: &str) -> InstallSpec {
    InstallSpec {
        zone: "fr-par-2".into(),
        server_id: "srv-1".into(),
        provider_id: "scaleway://baremetal/fr-par-2/srv-1".into(),
        node_name: "default-abc12".into(),
        node_claim_name: "default-abc12".into(),
        labels: BTreeMap::from([
            ("karpenter.sh/nodepool".to_string(), "default".to_string()),
            (
                "node.kubernetes.io/instance-type".to_string(),
                "EM-A115X-SSD".to_string(),
            ),
        ]),
        taints: vec![Taint {
            key: "dedicated".into(),
            value: Some("metal".into()),
            effect: "NoSchedule".into(),
        }],
        startup_taints: vec![Taint {
            key: "cilium.io/agent-not-ready".into(),
            value: None,
            effect: "NoExecute".into(),
        }],
        arch: "amd64".into(),
        image_url: image_url.into(),
        install_disk: None,
        rescue_ssh_key_id: "key-1".into(),
        rescue_private_key: Secret::new(
            "-----BEGIN OPENSSH PRIVATE KEY-----\nnot-a-real-key\n-----END OPENSSH PRIVATE KEY-----\n",
        ),
        base_machine_config: Secret::new(BASE_CONFIG),
        machine_config_patches: vec![],
        offer_name: "EM-A115X-SSD".into(),
        image_sha256: None,
        bootstrap_token: Secret::new("abcdef.0123456789abcdef"),
        kubelet_reservations: Some(KubeletReservations::for_capacity(&Resources {
            cpu_millis: 16_000,
            memory_bytes: 64 << 30,
            ephemeral_storage_bytes: 1_000_000_000_000,
            pods: 110,
            nvidia_gpus: 0,
        })),
        target: super::Target::Node,
        private_network: None,
    }
}
