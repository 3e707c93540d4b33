//! List proves absence: the NodeClaim cross-check (contracts: "List() safety").

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use async_trait::async_trait;
use serde_json::{Value, json};

use super::super::tests::{FakeNodeClasses, FakeRegistrar, FakeTokens, RecordingInstaller};
use super::super::tests::{PROJECT, ZONE, claim, fixture};
use super::super::*;
use crate::metrics::safety_metrics;
use crate::scaleway::fake::{FakeElasticMetal, Op};
use crate::scaleway::{
    BootType, CreateServerRequest, Offer, ServerFilter, ServerStatus, SshKey, SubscriptionPeriod,
};

/// The unit-test fake, except that `GET /servers` can be made to answer an
/// empty 200 (`{"servers":[],"total_count":0}`): the answer an API in
/// trouble gives that no pagination check can catch.
struct EmptyListing {
    inner: Arc<FakeElasticMetal>,
    empty: AtomicBool,
}

#[async_trait]
impl ElasticMetal for EmptyListing {
    async fn list_offers(&self, z: &str, p: SubscriptionPeriod) -> Result<Vec<Offer>, ApiError> {
        self.inner.list_offers(z, p).await
    }
    async fn create_server(&self, z: &str, r: &CreateServerRequest) -> Result<Server, ApiError> {
        self.inner.create_server(z, r).await
    }
    async fn get_server(&self, z: &str, id: &str) -> Result<Server, ApiError> {
        self.inner.get_server(z, id).await
    }
    async fn list_servers(&self, z: &str, f: &ServerFilter) -> Result<Vec<Server>, ApiError> {
        let listed = self.inner.list_servers(z, f).await?;
        Ok(if self.empty.load(Ordering::SeqCst) {
            Vec::new()
        } else {
            listed
        })
    }
    async fn delete_server(&self, z: &str, id: &str) -> Result<Server, ApiError> {
        self.inner.delete_server(z, id).await
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
        z: &str,
        id: &str,
        b: BootType,
        k: &[String],
    ) -> Result<Server, ApiError> {
        self.inner.reboot_server(z, id, b, k).await
    }
    async fn list_ssh_keys(&self, p: &str) -> Result<Vec<SshKey>, ApiError> {
        self.inner.list_ssh_keys(p).await
    }
}

/// NodeClaims as the API server would list them; the next list can fail.
#[derive(Default)]
struct FakeClaims {
    claims: Mutex<Vec<Value>>,
    fail_next: Mutex<Option<KubeError>>,
}

#[async_trait]
impl NodeClaimSource for FakeClaims {
    async fn list(&self) -> Result<Vec<Value>, KubeError> {
        if let Some(e) = self.fail_next.lock().unwrap().take() {
            return Err(e);
        }
        Ok(self.claims.lock().unwrap().clone())
    }

    async fn annotate(
        &self,
        name: &str,
        _: &str,
        _: &str,
        _: Option<&str>,
    ) -> Result<(), KubeError> {
        Err(KubeError::Refused(format!("read-only fake: {name}")))
    }
}

struct Checked {
    api: Arc<FakeElasticMetal>,
    listing: Arc<EmptyListing>,
    claims: Arc<FakeClaims>,
    provider: Provider,
}

/// A provider whose List cross-checks `claims`, over the fixture's fake
/// (with one server ordered for NodeClaim `default-a`, listed in `claims`).
async fn checked() -> Checked {
    let f = fixture();
    let created = f
        .provider
        .create(claim("default-a", &["EM-A115X-SSD"]))
        .await
        .unwrap();
    let listing = Arc::new(EmptyListing {
        inner: f.api.clone(),
        empty: AtomicBool::new(false),
    });
    let claims = Arc::new(FakeClaims::default());
    claims.claims.lock().unwrap().push(created);
    let provider = Provider::new(
        listing.clone(),
        f.catalog.clone(),
        Arc::new(FakeNodeClasses::default()),
        Arc::new(RecordingInstaller::default()),
        ClusterPorts {
            tokens: Arc::new(FakeTokens::default()),
            nodes: Arc::new(FakeRegistrar::default()),
        },
        ProviderSettings {
            cluster_name: "test".into(),
            project_id: PROJECT.into(),
            zones: vec![ZONE.into(), "nl-ams-1".into()],
            instance_zones: vec![ZONE.into(), "nl-ams-1".into()],
        },
    )
    .with_node_claims(claims.clone());
    Checked {
        api: f.api,
        listing,
        claims,
        provider,
    }
}

fn claim_for(name: &str, zone: &str, id: &str) -> Value {
    let mut c = claim(name, &[]);
    c["status"] = json!({"providerID": provider_id(zone, id)});
    c
}

fn failures(reason: ListFailureReason) -> u64 {
    safety_metrics().list_failures(reason.as_str())
}

fn provider_ids(listed: &[Value]) -> Vec<String> {
    listed
        .iter()
        .map(|c| c["status"]["providerID"].as_str().unwrap().to_string())
        .collect()
}

#[tokio::test]
async fn an_empty_answer_while_nodeclaims_exist_fails_list() {
    let c = checked().await;
    assert_eq!(c.provider.list().await.unwrap().len(), 1);

    let before = failures(ListFailureReason::Inconsistent);
    c.listing.empty.store(true, Ordering::SeqCst);
    match c.provider.list().await {
        Err(ProviderError::Unavailable(m)) => {
            assert!(m.contains("list inconsistent"), "{m}");
            assert!(m.contains("exists but was not listed"), "{m}");
        }
        other => panic!("expected an inconsistent List, got {other:?}"),
    }
    // Other tests count too (the counter is process-wide): it only grows.
    assert!(failures(ListFailureReason::Inconsistent) > before);
}

#[tokio::test]
async fn a_deleted_server_is_proven_gone_and_left_out() {
    let c = checked().await;
    let live = provider_ids(&c.provider.list().await.unwrap());
    c.claims
        .claims
        .lock()
        .unwrap()
        .push(claim_for("default-gone", ZONE, "deleted-long-ago"));
    let listed = c.provider.list().await.unwrap();
    assert_eq!(provider_ids(&listed), live);
    // The missing server was looked up once; the listed one was not.
    let gets: Vec<_> = c
        .api
        .calls()
        .into_iter()
        .filter(|call| call.op == Op::GetServer)
        .collect();
    assert_eq!(gets.len(), 1);
    assert_eq!(gets[0].server_id.as_deref(), Some("deleted-long-ago"));
}

#[tokio::test]
async fn a_failed_lookup_fails_list_with_its_reason() {
    let c = checked().await;
    c.claims
        .claims
        .lock()
        .unwrap()
        .push(claim_for("default-gone", ZONE, "deleted-long-ago"));
    for (err, reason) in [
        (
            ApiError::Unavailable("503".into()),
            ListFailureReason::ApiUnavailable,
        ),
        (ApiError::Throttled, ListFailureReason::RateLimited),
        (
            ApiError::Unauthorized("denied".into()),
            ListFailureReason::Auth,
        ),
    ] {
        let before = failures(reason);
        c.api.fail_next(Op::GetServer, err);
        assert!(matches!(
            c.provider.list().await,
            Err(ProviderError::Unavailable(_))
        ));
        assert!(failures(reason) > before, "{reason:?}");
    }
    assert!(c.provider.list().await.is_ok());
}

#[tokio::test]
async fn a_failed_listing_fails_list_with_its_reason() {
    let c = checked().await;
    let before = failures(ListFailureReason::RateLimited);
    c.api.fail_next(Op::ListServers, ApiError::Throttled);
    assert!(matches!(
        c.provider.list().await,
        Err(ProviderError::Unavailable(_))
    ));
    assert!(failures(ListFailureReason::RateLimited) > before);
}

#[tokio::test]
async fn a_foreign_server_is_treated_as_absent() {
    let c = checked().await;
    let mut foreign = c.api.servers()[0].clone();
    foreign.id = "foreign".into();
    foreign.tags = vec!["karpenter.scaleway.com/cluster=other".into()];
    c.api.insert_server(foreign.clone());
    let mut other_project = foreign.clone();
    other_project.id = "other-project".into();
    other_project.tags = vec!["karpenter.scaleway.com/cluster=test".into()];
    other_project.project_id = "proj-2".into();
    c.api.insert_server(other_project);
    {
        let mut claims = c.claims.claims.lock().unwrap();
        claims.push(claim_for("default-f", ZONE, "foreign"));
        claims.push(claim_for("default-p", ZONE, "other-project"));
    }
    let listed = c.provider.list().await.unwrap();
    assert_eq!(listed.len(), 1);
    assert!(
        !provider_ids(&listed)
            .iter()
            .any(|p| p.ends_with("/foreign"))
    );
}

#[tokio::test]
async fn a_server_in_a_zone_no_longer_served_is_reported() {
    let c = checked().await;
    let mut elsewhere = c.api.servers()[0].clone();
    elsewhere.id = "in-waw".into();
    elsewhere.zone = "pl-waw-3".into();
    elsewhere.status = ServerStatus::Ready;
    c.api.insert_server(elsewhere);
    c.claims
        .claims
        .lock()
        .unwrap()
        .push(claim_for("default-w", "pl-waw-3", "in-waw"));
    let listed = c.provider.list().await.unwrap();
    assert!(
        provider_ids(&listed).contains(&provider_id("pl-waw-3", "in-waw")),
        "{listed:?}"
    );
}

#[tokio::test]
async fn unreadable_nodeclaims_fail_list() {
    let c = checked().await;
    let before = failures(ListFailureReason::KubeUnavailable);
    *c.claims.fail_next.lock().unwrap() = Some(KubeError::Unavailable("503".into()));
    match c.provider.list().await {
        Err(ProviderError::Unavailable(m)) => assert!(m.contains("NodeClaims"), "{m}"),
        other => panic!("expected an error, got {other:?}"),
    }
    assert!(failures(ListFailureReason::KubeUnavailable) > before);
    // NodeClaims without a providerID (still being created) need no proof.
    c.claims
        .claims
        .lock()
        .unwrap()
        .push(claim("default-new", &[]));
    assert_eq!(c.provider.list().await.unwrap().len(), 1);
}

/// A server of cluster `test` in the fixture's zone with `tags`.
fn tagged_server(id: &str, tags: &[&str]) -> Server {
    Server {
        id: id.into(),
        organization_id: PROJECT.into(),
        project_id: PROJECT.into(),
        name: format!("server-{id}"),
        description: String::new(),
        status: ServerStatus::Ready,
        offer_id: format!("{ZONE}-a115x"),
        offer_name: "EM-A115X-SSD".into(),
        tags: tags.iter().map(|t| t.to_string()).collect(),
        ips: vec![],
        boot_type: BootType::Normal,
        zone: ZONE.into(),
        rescue_server: None,
        created_at: "2026-11-24T09:00:00Z".into(),
        updated_at: String::new(),
    }
}

const RESERVATION: &str = "warm.em-a115x-ssd.fr-par-2";

#[tokio::test]
async fn list_leaves_standby_servers_out_and_reports_adopted_ones_as_reserved() {
    let f = fixture();
    f.api.insert_server(tagged_server(
        "idle",
        &[
            "karpenter.scaleway.com/cluster=test",
            "karpenter.scaleway.com/nodeclass=warm",
            "karpenter.scaleway.com/standby=warm",
            "install.karpenter.scaleway.com/phase=standby",
        ],
    ));
    f.api.insert_server(tagged_server(
        "wiping",
        &[
            "karpenter.scaleway.com/cluster=test",
            "karpenter.scaleway.com/standby=warm",
            "karpenter.scaleway.com/recycled=true",
            "install.karpenter.scaleway.com/phase=imaging",
        ],
    ));
    let adopted_tags = [
        "karpenter.scaleway.com/cluster=test",
        "karpenter.sh/nodeclaim=warm-a",
        "karpenter.sh/nodepool=metal-reserved",
        "karpenter.scaleway.com/nodeclass=warm",
        "karpenter.scaleway.com/reservation-id=warm.em-a115x-ssd.fr-par-2",
    ];
    f.api.insert_server(tagged_server("adopted", &adopted_tags));
    f.provider
        .create(claim("default-a", &["EM-A115X-SSD"]))
        .await
        .unwrap();

    let listed = f.provider.list().await.unwrap();
    let mut names: Vec<&str> = listed
        .iter()
        .map(|c| c["metadata"]["name"].as_str().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["default-a", "warm-a"],
        "no standby server: {listed:?}"
    );
    let adopted = listed
        .iter()
        .find(|c| c["metadata"]["name"] == "warm-a")
        .unwrap();
    let labels = &adopted["metadata"]["labels"];
    assert_eq!(labels["karpenter.sh/capacity-type"], "reserved");
    assert_eq!(labels["karpenter.scaleway.com/reservation-id"], RESERVATION);
    assert_eq!(labels["karpenter.sh/nodepool"], "metal-reserved");
    let ordered = listed
        .iter()
        .find(|c| c["metadata"]["name"] == "default-a")
        .unwrap();
    assert_eq!(
        ordered["metadata"]["labels"]["karpenter.sh/capacity-type"],
        "on-demand"
    );
    assert!(
        ordered["metadata"]["labels"]
            .get("karpenter.scaleway.com/reservation-id")
            .is_none()
    );

    // Get says the same of the adopted server.
    let got = f.provider.get(&provider_id(ZONE, "adopted")).await.unwrap();
    assert_eq!(got["metadata"]["labels"], *labels);
}

#[tokio::test]
async fn delete_of_a_stale_nodeclaim_leaves_a_server_now_someone_elses() {
    let f = fixture();
    // Adopted by another NodeClaim since.
    f.api.insert_server(tagged_server(
        "taken",
        &[
            "karpenter.scaleway.com/cluster=test",
            "karpenter.sh/nodeclaim=warm-new",
            "karpenter.scaleway.com/nodeclass=warm",
        ],
    ));
    // Back in standby (recycled).
    f.api.insert_server(tagged_server(
        "recycled",
        &[
            "karpenter.scaleway.com/cluster=test",
            "karpenter.scaleway.com/nodeclass=warm",
            "karpenter.scaleway.com/standby=warm",
            "karpenter.scaleway.com/recycled=true",
            "install.karpenter.scaleway.com/phase=standby",
        ],
    ));
    for id in ["taken", "recycled"] {
        let mut c = claim_for("warm-old", ZONE, id);
        c["status"]["conditions"] = json!([{"type": "Initialized", "status": "True"}]);
        assert!(
            matches!(f.provider.delete(&c).await, Err(ProviderError::NotFound(_))),
            "{id}"
        );
    }
    assert_eq!(f.api.count(Op::DeleteServer), 0);
    assert_eq!(f.api.count(Op::UpdateServerTags), 0);
    assert!(
        f.api
            .servers()
            .iter()
            .all(|s| s.status == ServerStatus::Ready)
    );
}
