//! A reboot call slower than the RPC's deadline, or than its own bound.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;

use super::flow_tests::{OP, Rig, em_node, rig};
use super::*;
use crate::provider::tests::ZONE;
use crate::provider::{ClusterPorts, ProviderSettings};
use crate::scaleway::fake::Op;
use crate::scaleway::{ApiError, BootType, Server};

/// The Elastic Metal fake, with a reboot call that takes `delay`.
struct SlowReboot {
    inner: Arc<crate::scaleway::fake::FakeElasticMetal>,
    delay: Duration,
}

#[async_trait]
impl ElasticMetal for SlowReboot {
    async fn list_offers(
        &self,
        zone: &str,
        period: crate::scaleway::SubscriptionPeriod,
    ) -> Result<Vec<crate::scaleway::Offer>, ApiError> {
        self.inner.list_offers(zone, period).await
    }
    async fn create_server(
        &self,
        zone: &str,
        req: &crate::scaleway::CreateServerRequest,
    ) -> Result<Server, ApiError> {
        self.inner.create_server(zone, req).await
    }
    async fn get_server(&self, zone: &str, id: &str) -> Result<Server, ApiError> {
        self.inner.get_server(zone, id).await
    }
    async fn list_servers(
        &self,
        zone: &str,
        filter: &crate::scaleway::ServerFilter,
    ) -> Result<Vec<Server>, ApiError> {
        self.inner.list_servers(zone, filter).await
    }
    async fn delete_server(&self, zone: &str, id: &str) -> Result<Server, ApiError> {
        self.inner.delete_server(zone, id).await
    }
    async fn update_server_tags(
        &self,
        zone: &str,
        id: &str,
        tags: &[String],
    ) -> Result<Server, ApiError> {
        self.inner.update_server_tags(zone, id, tags).await
    }
    async fn reboot_server(
        &self,
        zone: &str,
        id: &str,
        boot_type: BootType,
        keys: &[String],
    ) -> Result<Server, ApiError> {
        tokio::time::sleep(self.delay).await;
        self.inner.reboot_server(zone, id, boot_type, keys).await
    }
    async fn list_ssh_keys(
        &self,
        project_id: &str,
    ) -> Result<Vec<crate::scaleway::SshKey>, ApiError> {
        self.inner.list_ssh_keys(project_id).await
    }
}

fn slow_provider(r: &Rig, delay: Duration) -> Provider {
    let clock = r.clock.clone();
    Provider::new(
        Arc::new(SlowReboot {
            inner: r.f.api.clone(),
            delay,
        }),
        r.f.catalog.clone(),
        r.f.classes.clone(),
        r.f.installer.clone(),
        ClusterPorts {
            tokens: r.f.tokens.clone(),
            nodes: r.f.nodes.clone(),
        },
        ProviderSettings {
            cluster_name: "test".into(),
            project_id: "proj-1".into(),
            zones: vec![ZONE.into()],
            instance_zones: vec![ZONE.into()],
        },
    )
    .with_reboots(RebootPorts {
        claims: r.f.claims.clone(),
        nodes: r.f.reboot_nodes.clone(),
        settings: RebootSettings::default(),
        clock: Arc::new(move || *clock.lock().unwrap()),
    })
}

#[tokio::test(start_paused = true)]
async fn a_call_cut_by_the_rpc_deadline_still_finishes_and_records() {
    let r = rig();
    let claim = em_node(&r);
    let provider = slow_provider(&r, Duration::from_secs(10));
    // The bridge gives up after 5 s; the call goes on in its task.
    let cut = tokio::time::timeout(Duration::from_secs(5), provider.reboot(&claim, OP)).await;
    assert!(cut.is_err());
    assert_eq!(
        r.claims().record("default-a").unwrap().state,
        RebootState::Issuing
    );
    tokio::time::sleep(Duration::from_secs(6)).await;
    assert_eq!(r.f.api.count(Op::RebootServer), 1);
    assert_eq!(
        r.claims().record("default-a").unwrap().state,
        RebootState::Accepted
    );
    assert_eq!(r.nodes().reasons("default-a"), ["RebootRequested"]);
    // Core's next call replays.
    provider.reboot(&claim, OP).await.unwrap();
    assert_eq!(r.f.api.count(Op::RebootServer), 1);
}

#[tokio::test(start_paused = true)]
async fn a_call_without_an_answer_within_its_bound_is_unavailable() {
    let r = rig();
    let claim = em_node(&r);
    let provider = slow_provider(&r, Duration::from_secs(3600));
    let err = provider.reboot(&claim, OP).await.unwrap_err();
    assert!(
        matches!(&err, ProviderError::Unavailable(m) if m.contains("no answer within 60s")),
        "{err}"
    );
    assert_eq!(
        r.claims().record("default-a").unwrap().state,
        RebootState::Issuing
    );
    assert!(r.nodes().reasons("default-a").is_empty());
}
