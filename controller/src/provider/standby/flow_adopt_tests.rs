//! Adoption by Create and recycling by Delete, with the helpers of
//! `flow_tests.rs`.

use super::*;

// ---- adoption -------------------------------------------------------------

/// `warm` with one idle standby `a`, after a pass.
async fn one_idle() -> Warm {
    let w = warm(vec![pool(OFFER, 1, 2, None)]);
    w.f.api.insert_server(standby(
        "a",
        "2026-11-24T09:00:00Z",
        "hourly",
        &idle_since("2026-11-24T09:12:00Z"),
    ));
    let report = w
        .provider
        .standby_pass(t("2026-11-24T09:30:00Z"))
        .await
        .unwrap();
    assert_eq!(report.idle[&key()], 1);
    assert!(report.ordered.is_empty());
    assert_eq!(capacity(&w), (1, true));
    w
}

#[tokio::test]
async fn create_into_a_reservation_adopts_an_idle_standby() {
    let w = one_idle().await;
    let out = w
        .provider
        .create(warm_claim("warm-a", &["reserved"], Some(&rid())))
        .await
        .unwrap();

    let s = w.f.api.server("a").unwrap();
    for tag in [
        "karpenter.scaleway.com/cluster=test".to_string(),
        "karpenter.sh/nodeclaim=warm-a".to_string(),
        "karpenter.sh/nodepool=default".to_string(),
        format!("karpenter.scaleway.com/nodeclass={CLASS}"),
        format!("{TAG_RESERVATION}={}", rid()),
        "team=infra".to_string(),
    ] {
        assert!(has(&s, &tag), "missing tag {tag} in {:?}", s.tags);
    }
    assert!(tag_value(&s, TAG_STANDBY).is_none(), "{:?}", s.tags);
    assert_eq!(
        s.tags.iter().filter(|t| t.as_str() == "team=infra").count(),
        1,
        "tags are not doubled"
    );
    assert_eq!(w.f.api.count(Op::CreateServer), 0);
    assert_eq!(w.f.api.count(Op::UpdateServerTags), 1);

    {
        let adopted = w.f.installer.adopted.lock().unwrap();
        assert_eq!(adopted.len(), 1);
        let (spec, disk, mac) = &adopted[0];
        assert_eq!(spec.server_id, "a");
        assert_eq!(spec.node_name, "warm-a");
        assert_eq!(spec.target, Target::Node);
        assert_eq!(spec.labels["karpenter.sh/capacity-type"], "reserved");
        assert_eq!(
            (disk.as_str(), mac.as_str()),
            ("nvme0n1", "52:54:00:aa:bb:01")
        );
    }
    assert!(w.f.installer.started.lock().unwrap().is_empty());

    let labels = &out["metadata"]["labels"];
    assert_eq!(labels["karpenter.sh/capacity-type"], "reserved");
    assert_eq!(labels[TAG_RESERVATION], rid().as_str());
    assert_eq!(labels["node.kubernetes.io/instance-type"], OFFER);
    assert_eq!(
        out["status"]["providerID"],
        crate::provider::provider_id(ZONE, "a").as_str()
    );
    let node = w.f.nodes.nodes.lock().unwrap()["warm-a"].clone();
    assert_eq!(node.labels["karpenter.sh/capacity-type"], "reserved");

    // The catalog shows the pool empty at once, before any pass.
    assert_eq!(capacity(&w), (0, false));
}

#[tokio::test]
async fn two_creates_race_for_the_last_standby_and_one_wins() {
    let w = one_idle().await;
    let (b, c) = tokio::join!(
        w.provider
            .create(warm_claim("warm-b", &["reserved"], Some(&rid()))),
        w.provider
            .create(warm_claim("warm-c", &["reserved"], Some(&rid()))),
    );
    let (winner, loser) = match (&b, &c) {
        (Ok(_), Err(e)) => ("warm-b", e),
        (Err(e), Ok(_)) => ("warm-c", e),
        (b, c) => panic!(
            "exactly one adopts: warm-b {:?}, warm-c {:?}",
            b.as_ref().map(|_| "adopted"),
            c.as_ref().map(|_| "adopted")
        ),
    };
    assert!(
        matches!(loser, ProviderError::InsufficientCapacity(_)),
        "{loser:?}"
    );
    assert_eq!(w.f.api.count(Op::UpdateServerTags), 1, "claimed once");
    assert_eq!(w.f.api.count(Op::CreateServer), 0);
    assert_eq!(w.f.installer.adopted.lock().unwrap().len(), 1);
    let s = w.f.api.server("a").unwrap();
    assert_eq!(tag_value(&s, TAG_NODECLAIM), Some(winner));
    assert_eq!(capacity(&w), (0, false));
}

#[tokio::test]
async fn a_pass_never_releases_a_standby_a_create_claims_meanwhile() {
    // Idle from 09:20, ordered 09:10, min 0: due for release at 10:08. A
    // Create runs alongside the pass that releases it; whichever order
    // their API calls land in (each `k` shifts the pass by one call), a
    // NodeClaim never gets a server being deleted, nor one that then loses
    // its NodeClaim tag.
    let mut outcomes = std::collections::BTreeSet::new();
    for k in 0..8 {
        let w = warm(vec![pool(OFFER, 0, 2, None)]);
        w.f.api.insert_server(standby(
            "a",
            "2026-11-24T09:10:00Z",
            "hourly",
            &idle_since("2026-11-24T09:20:00Z"),
        ));
        let report = w
            .provider
            .standby_pass(t("2026-11-24T09:30:00Z"))
            .await
            .unwrap();
        assert_eq!(report.idle[&key()], 1);
        let pass = async {
            for _ in 0..k {
                tokio::task::yield_now().await;
            }
            w.provider
                .standby_pass(t("2026-11-24T10:08:00Z"))
                .await
                .unwrap()
        };
        let (created, report) = tokio::join!(
            w.provider
                .create(warm_claim("warm-a", &["reserved"], Some(&rid()))),
            pass
        );
        let s = w.f.api.server("a").unwrap();
        match created {
            Ok(_) => {
                outcomes.insert("adopted");
                assert_eq!(s.status, ServerStatus::Ready, "k={k}: {report:?}");
                assert_eq!(tag_value(&s, TAG_NODECLAIM), Some("warm-a"), "k={k}");
                assert!(report.released.is_empty(), "k={k}: {report:?}");
            }
            Err(e) => {
                outcomes.insert("released");
                assert!(
                    matches!(e, ProviderError::InsufficientCapacity(_)),
                    "k={k}: {e:?}"
                );
                assert_eq!(s.status, ServerStatus::Deleting, "k={k}");
                assert_eq!(report.released.len(), 1, "k={k}");
            }
        }
    }
    // The sweep saw both orders (else it tests nothing).
    assert_eq!(outcomes.len(), 2, "{outcomes:?}");
}

#[tokio::test]
async fn a_restart_right_after_the_claim_resumes_the_adoption_from_the_servers_tags() {
    let w = one_idle().await;
    let out = w
        .provider
        .create(warm_claim("warm-a", &["reserved"], Some(&rid())))
        .await
        .unwrap();
    // A new process: its engine knows nothing, and the NodeClaim has no
    // install progress yet.
    let installer = Arc::new(RecordingInstaller::default());
    let restarted = Provider::new(
        Arc::new(Yielding(w.f.api.clone(), StaleList::default())),
        w.f.catalog.clone(),
        w.f.classes.clone(),
        installer.clone(),
        ClusterPorts {
            tokens: w.f.tokens.clone(),
            nodes: w.f.nodes.clone(),
        },
        settings(),
    );
    let report = restarted.resume_installs(&[out]).await;
    assert_eq!(
        report,
        [(
            "warm-a".to_string(),
            crate::provider::ResumeOutcome::Resumed
        )]
    );
    let (spec, progress) = installer.resumed.lock().unwrap()[0].clone();
    assert_eq!(spec.server_id, "a");
    assert_eq!(spec.target, Target::Node);
    assert_eq!(spec.labels["karpenter.sh/capacity-type"], "reserved");
    assert_eq!(spec.labels[TAG_RESERVATION], rid().as_str());
    assert_eq!(progress.phase, Some(Phase::Standby));
    assert_eq!(progress.disk.as_deref(), Some("nvme0n1"));
    assert_eq!(progress.mac.as_deref(), Some("52:54:00:aa:bb:01"));
}

/// The NodeClasses as the pass lists them show `listed` for `warm`, while
/// Create's `get` still reads the former one: a NodeClass update landing
/// between Create's image check and the pass's.
struct UpdatedBetween {
    inner: Arc<crate::provider::tests::FakeNodeClasses>,
    listed: NodeClassRecord,
}

#[async_trait]
impl crate::provider::NodeClasses for UpdatedBetween {
    fn get(&self, name: &str) -> Option<NodeClassRecord> {
        self.inner.get(name)
    }
    fn list(&self) -> Vec<NodeClassRecord> {
        let mut all = self.inner.list();
        for c in &mut all {
            if c.name == self.listed.name {
                *c = self.listed.clone();
            }
        }
        all
    }
    async fn secret(
        &self,
        r: &crate::nodeclass::SecretKeyRef,
    ) -> Result<Option<crate::install::Secret>, String> {
        self.inner.secret(r).await
    }
}

#[tokio::test]
async fn a_pass_never_reimages_a_standby_a_create_claims_meanwhile() {
    let mut outcomes = std::collections::BTreeSet::new();
    for k in 0..8 {
        let w = one_idle().await;
        let mut listed = w.f.classes.classes.lock().unwrap()[CLASS].clone();
        listed.spec.image.version = "v1.14.0".into();
        let provider = Provider::new(
            Arc::new(Yielding(w.f.api.clone(), StaleList::default())),
            w.f.catalog.clone(),
            Arc::new(UpdatedBetween {
                inner: w.f.classes.clone(),
                listed,
            }),
            w.f.installer.clone(),
            ClusterPorts {
                tokens: w.f.tokens.clone(),
                nodes: w.f.nodes.clone(),
            },
            settings(),
        )
        .with_standby(w.provider.standby.clone().unwrap());
        let pass = async {
            for _ in 0..k {
                tokio::task::yield_now().await;
            }
            provider
                .standby_pass(t("2026-11-24T09:31:00Z"))
                .await
                .unwrap()
        };
        let (created, report) = tokio::join!(
            provider.create(warm_claim("warm-a", &["reserved"], Some(&rid()))),
            pass
        );
        let s = w.f.api.server("a").unwrap();
        let rewritten = !w.engine.resumed.lock().unwrap().is_empty();
        match created {
            Ok(_) => {
                outcomes.insert("adopted");
                assert_eq!(tag_value(&s, TAG_NODECLAIM), Some("warm-a"), "k={k}: {s:?}");
                assert!(tag_value(&s, TAG_STANDBY).is_none(), "k={k}: {s:?}");
                assert!(
                    !rewritten,
                    "k={k}: a node's server was re-imaged: {report:?}"
                );
            }
            Err(e) => {
                outcomes.insert("reimaged");
                assert!(
                    matches!(e, ProviderError::InsufficientCapacity(_)),
                    "k={k}: {e:?}"
                );
                assert!(rewritten, "k={k}");
                assert!(tag_value(&s, TAG_NODECLAIM).is_none(), "k={k}");
            }
        }
    }
    assert_eq!(outcomes.len(), 2, "{outcomes:?}");
}

#[tokio::test]
async fn a_claim_that_names_no_reservation_is_ordered_on_demand() {
    let w = one_idle().await;
    let out = w
        .provider
        .create(warm_claim("warm-d", &["reserved", "on-demand"], None))
        .await
        .unwrap();
    assert_eq!(w.f.api.count(Op::CreateServer), 1, "a new server");
    assert_eq!(w.f.api.count(Op::UpdateServerTags), 0);
    let s = w.f.api.server("a").unwrap();
    assert_eq!(
        tag_value(&s, TAG_STANDBY),
        Some(CLASS),
        "the standby is left idle"
    );
    assert!(w.f.installer.adopted.lock().unwrap().is_empty());
    assert_eq!(w.f.installer.started.lock().unwrap().len(), 1);
    assert_eq!(
        out["metadata"]["labels"]["karpenter.sh/capacity-type"],
        "on-demand"
    );
    assert!(out["metadata"]["labels"].get(TAG_RESERVATION).is_none());
    assert_eq!(capacity(&w), (1, true));
}

#[tokio::test]
async fn a_retried_create_after_the_claim_finds_the_server_by_its_tag() {
    let w = one_idle().await;
    // The claim lands, then Create fails (the Node cannot be registered).
    *w.f.nodes.fail_next.lock().unwrap() =
        Some(crate::provider::KubeError::Unavailable("503".into()));
    let err = w
        .provider
        .create(warm_claim("warm-a", &["reserved"], Some(&rid())))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ProviderError::CreateFailed { reason, .. } if reason == "NodeRegistrationFailed"),
        "{err:?}"
    );
    assert_eq!(
        tag_value(&w.f.api.server("a").unwrap(), TAG_NODECLAIM),
        Some("warm-a")
    );
    assert!(w.f.installer.adopted.lock().unwrap().is_empty());

    let out = w
        .provider
        .create(warm_claim("warm-a", &["reserved"], Some(&rid())))
        .await
        .unwrap();
    assert_eq!(w.f.api.count(Op::UpdateServerTags), 1, "no second claim");
    assert_eq!(w.f.api.count(Op::CreateServer), 0, "no second server");
    let adopted = w.f.installer.adopted.lock().unwrap();
    assert_eq!(adopted.len(), 1);
    assert_eq!(adopted[0].0.server_id, "a");
    assert_eq!(
        out["metadata"]["labels"]["karpenter.sh/capacity-type"],
        "reserved"
    );
    assert_eq!(out["metadata"]["labels"][TAG_RESERVATION], rid().as_str());
}

// ---- recycling on Delete --------------------------------------------------

#[tokio::test]
async fn an_hourly_node_goes_back_to_a_pool_with_room() {
    let w = warm(vec![pool(OFFER, 0, 1, None)]);
    w.f.api.insert_server(node_server("n", "warm-n", "hourly"));
    let claim = node_claim("warm-n", "n", true);
    let err = w.provider.delete(&claim).await.unwrap_err();
    assert!(matches!(err, ProviderError::NotFound(_)), "{err:?}");

    let s = w.f.api.server("n").unwrap();
    assert_eq!(s.status, ServerStatus::Ready, "not deleted");
    assert_eq!(w.f.api.count(Op::DeleteServer), 0);
    for tag in [
        format!("{TAG_STANDBY}={CLASS}"),
        format!("{TAG_RECYCLED}=true"),
        "install.karpenter.scaleway.com/phase=ready".to_string(),
        format!("{TAG_IMAGE}={}", image()),
        "karpenter.scaleway.com/cluster=test".to_string(),
    ] {
        assert!(has(&s, &tag), "missing tag {tag} in {:?}", s.tags);
    }
    assert!(tag_value(&s, TAG_NODECLAIM).is_none());
    assert!(tag_value(&s, crate::provider::TAG_NODEPOOL).is_none());
    assert_eq!(StandbyServer::of(&s).unwrap().state, State::Wiping);
    {
        let resumed = w.engine.resumed.lock().unwrap();
        assert_eq!(resumed.len(), 1);
        assert_eq!(resumed[0].0.target, Target::Standby);
        assert_eq!(resumed[0].0.server_id, "n");
        assert_eq!(resumed[0].1.phase, Some(Phase::Ready));
    }
    assert!(w.events.reasons().contains(&"StandbyRecycled".to_string()));

    // Core calls Delete again: the server is a standby now, not its node.
    assert!(matches!(
        w.provider.delete(&claim).await,
        Err(ProviderError::NotFound(_))
    ));
    assert_eq!(w.f.api.count(Op::DeleteServer), 0);
    assert_eq!(w.engine.resumed.lock().unwrap().len(), 1);
}

/// `warm` whose pool (min 1, max 1) is full with one idle standby, and the
/// server `n` of node `warm-n` billed `billing`.
async fn full_pool(billing: &str) -> Warm {
    let w = warm(vec![pool(OFFER, 1, 1, None)]);
    w.f.api.insert_server(standby(
        "a",
        "2026-11-24T09:00:00Z",
        "hourly",
        &idle_since("2026-11-24T09:12:00Z"),
    ));
    let report = w
        .provider
        .standby_pass(t("2026-11-24T09:30:00Z"))
        .await
        .unwrap();
    assert!(report.ordered.is_empty() && report.released.is_empty());
    w.f.api.insert_server(node_server("n", "warm-n", billing));
    w
}

#[tokio::test]
async fn an_hourly_node_is_deleted_when_the_pool_is_full() {
    let w = full_pool("hourly").await;
    w.provider
        .delete(&node_claim("warm-n", "n", true))
        .await
        .unwrap();
    assert_eq!(w.f.api.server("n").unwrap().status, ServerStatus::Deleting);
    assert!(w.engine.resumed.lock().unwrap().is_empty());
}

#[tokio::test]
async fn a_monthly_node_goes_back_even_to_a_full_pool() {
    let w = full_pool("monthly").await;
    let err = w
        .provider
        .delete(&node_claim("warm-n", "n", true))
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::NotFound(_)), "{err:?}");
    let s = w.f.api.server("n").unwrap();
    assert_eq!(s.status, ServerStatus::Ready);
    assert!(has(&s, &format!("{TAG_STANDBY}={CLASS}")));
    assert!(has(&s, "karpenter.scaleway.com/billing=monthly"));
    assert_eq!(w.f.api.count(Op::DeleteServer), 0);
    assert_eq!(w.engine.resumed.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn the_release_annotation_or_a_node_that_never_joined_deletes_the_server() {
    let w = warm(vec![pool(OFFER, 0, 1, None)]);
    w.f.api.insert_server(node_server("n", "warm-n", "monthly"));
    let mut claim = node_claim("warm-n", "n", true);
    claim["metadata"]["annotations"] = json!({RELEASE_ANNOTATION: "true"});
    w.provider.delete(&claim).await.unwrap();
    assert_eq!(w.f.api.server("n").unwrap().status, ServerStatus::Deleting);

    w.f.api.insert_server(node_server("o", "warm-o", "monthly"));
    w.provider
        .delete(&node_claim("warm-o", "o", false))
        .await
        .unwrap();
    assert_eq!(w.f.api.server("o").unwrap().status, ServerStatus::Deleting);

    // Initialized, but an install of it still runs here.
    w.f.api.insert_server(node_server("p", "warm-p", "monthly"));
    w.f.installer
        .phases
        .lock()
        .unwrap()
        .insert("p".into(), Phase::Booting);
    w.provider
        .delete(&node_claim("warm-p", "p", true))
        .await
        .unwrap();
    assert_eq!(w.f.api.server("p").unwrap().status, ServerStatus::Deleting);

    assert!(w.engine.resumed.lock().unwrap().is_empty());
    assert!(!w.events.reasons().contains(&"StandbyRecycled".to_string()));
}

#[tokio::test]
async fn hourly_nodes_go_back_only_while_the_pool_has_room() {
    // Room for one: the first deleted node goes back, the second is deleted.
    let w = warm(vec![pool(OFFER, 0, 1, None)]);
    w.f.api.insert_server(node_server("n", "warm-n", "hourly"));
    w.f.api.insert_server(node_server("o", "warm-o", "hourly"));
    assert!(matches!(
        w.provider.delete(&node_claim("warm-n", "n", true)).await,
        Err(ProviderError::NotFound(_))
    ));
    w.provider
        .delete(&node_claim("warm-o", "o", true))
        .await
        .unwrap();
    assert_eq!(w.f.api.server("n").unwrap().status, ServerStatus::Ready);
    assert_eq!(w.f.api.server("o").unwrap().status, ServerStatus::Deleting);

    // The same when core deletes both at once (emptiness consolidation).
    let w = warm(vec![pool(OFFER, 0, 1, None)]);
    w.f.api.insert_server(node_server("n", "warm-n", "hourly"));
    w.f.api.insert_server(node_server("o", "warm-o", "hourly"));
    let (claim_n, claim_o) = (
        node_claim("warm-n", "n", true),
        node_claim("warm-o", "o", true),
    );
    let (n, o) = tokio::join!(w.provider.delete(&claim_n), w.provider.delete(&claim_o));
    let recycled = [&n, &o]
        .iter()
        .filter(|r| matches!(r, Err(ProviderError::NotFound(_))))
        .count();
    assert_eq!(recycled, 1, "max 1: {n:?} {o:?}");
    assert_eq!(w.f.api.count(Op::DeleteServer), 1);
    assert_eq!(w.engine.resumed.lock().unwrap().len(), 1);
}

#[tokio::test]
async fn a_pass_running_alongside_a_recycle_does_not_forget_it() {
    // min 1, max 2, nothing yet: the pass orders one while node n's server
    // goes back to the pool (each `k` shifts the pass by one API call).
    // Node o deleted next must not take the pool above max, whatever the
    // order was.
    for k in 0..8 {
        let w = warm(vec![pool(OFFER, 1, 2, None)]);
        w.f.api.insert_server(node_server("n", "warm-n", "hourly"));
        w.f.api.insert_server(node_server("o", "warm-o", "hourly"));
        let claim_n = node_claim("warm-n", "n", true);
        // What a real engine says once the wipe runs: the pass leaves it be.
        w.engine
            .phases
            .lock()
            .unwrap()
            .insert("n".into(), Phase::Rescue);
        let pass = async {
            for _ in 0..k {
                tokio::task::yield_now().await;
            }
            w.provider
                .standby_pass(t("2026-11-24T09:30:00Z"))
                .await
                .unwrap()
        };
        let (n, report) = tokio::join!(w.provider.delete(&claim_n), pass);
        assert!(matches!(n, Err(ProviderError::NotFound(_))), "k={k}: {n:?}");
        let _ = w.provider.delete(&node_claim("warm-o", "o", true)).await;
        let pool: Vec<String> = w
            .f
            .api
            .servers()
            .into_iter()
            .filter(|s| s.status != ServerStatus::Deleting && tag_value(s, TAG_STANDBY).is_some())
            .map(|s| s.id)
            .collect();
        assert!(pool.len() <= 2, "k={k}: max 2, pool {pool:?}: {report:?}");
    }
}

#[tokio::test]
async fn an_adopted_standby_whose_nodeclaim_never_launched_goes_back_to_its_pool() {
    let w = one_idle().await;
    // A Create claimed `a`, then the provider died before the Create
    // answered; core deleted the NodeClaim (it never got a providerID).
    let claim = warm_claim("warm-z", &["reserved"], Some(&rid()));
    let mut tags = w.f.api.server("a").unwrap().tags;
    tags.retain(|t| !t.starts_with(TAG_STANDBY));
    tags.push("karpenter.sh/nodeclaim=warm-z".into());
    tags.push(format!("{TAG_RESERVATION}={}", rid()));
    w.f.api.update_server_tags(ZONE, "a", &tags).await.unwrap();
    assert!(claim.pointer("/status/providerID").is_none());

    let err = w.provider.delete(&claim).await.unwrap_err();
    assert!(matches!(err, ProviderError::NotFound(_)), "{err:?}");
    let s = w.f.api.server("a").unwrap();
    assert_eq!(s.status, ServerStatus::Ready, "not deleted");
    assert_eq!(w.f.api.count(Op::DeleteServer), 0);
    assert!(has(&s, &format!("{TAG_STANDBY}={CLASS}")), "{:?}", s.tags);
    assert!(tag_value(&s, TAG_NODECLAIM).is_none());
    assert!(tag_value(&s, TAG_RESERVATION).is_none());
    // Wiped: a config may have been applied by the process that died.
    assert_eq!(
        tag_value(&s, "install.karpenter.scaleway.com/phase"),
        Some("ready")
    );
    {
        let resumed = w.engine.resumed.lock().unwrap();
        assert_eq!(resumed.len(), 1);
        assert_eq!(resumed[0].0.target, Target::Standby);
    }

    // An ordinary server of a never-launched NodeClaim is still deleted.
    w.f.api.insert_server(node_server("n", "warm-n", "hourly"));
    w.provider
        .delete(&warm_claim("warm-n", &["on-demand"], None))
        .await
        .unwrap();
    assert_eq!(w.f.api.server("n").unwrap().status, ServerStatus::Deleting);
}

#[tokio::test]
async fn a_monthly_node_without_a_pool_waits_for_its_month_end_an_hourly_one_goes() {
    // The NodeClass has no pool for the node's offer and zone.
    let w = warm(vec![]);
    w.f.api.insert_server(node_server("m", "warm-m", "monthly"));
    w.f.api.insert_server(node_server("h", "warm-h", "hourly"));

    w.provider
        .delete(&node_claim("warm-h", "h", true))
        .await
        .unwrap();
    assert_eq!(w.f.api.server("h").unwrap().status, ServerStatus::Deleting);

    let err = w
        .provider
        .delete(&node_claim("warm-m", "m", true))
        .await
        .unwrap_err();
    assert!(matches!(err, ProviderError::NotFound(_)), "{err:?}");
    let s = w.f.api.server("m").unwrap();
    assert_eq!(s.status, ServerStatus::Ready, "a monthly server is kept");
    assert!(has(&s, &format!("{TAG_STANDBY}={CLASS}")), "{:?}", s.tags);
    assert_eq!(w.engine.resumed.lock().unwrap().len(), 1, "wiped");

    // Once idle, it waits for the end of its paid month (created 09:00).
    let mut tags = s.tags.clone();
    tags.retain(|t| !t.starts_with("install.karpenter.scaleway.com/phase="));
    tags.push("install.karpenter.scaleway.com/phase=standby".into());
    w.f.api.update_server_tags(ZONE, "m", &tags).await.unwrap();
    let month_end = t("2026-11-24T09:00:00Z") + chrono::Duration::hours(730);
    let before = w
        .provider
        .standby_pass(month_end - chrono::Duration::hours(1))
        .await
        .unwrap();
    assert!(before.released.is_empty(), "{before:?}");
    assert_eq!(w.f.api.server("m").unwrap().status, ServerStatus::Ready);
    let at = w
        .provider
        .standby_pass(month_end - chrono::Duration::minutes(1))
        .await
        .unwrap();
    assert_eq!(at.released.len(), 1, "{at:?}");
    assert_eq!(at.released[0].0, "m");
}
