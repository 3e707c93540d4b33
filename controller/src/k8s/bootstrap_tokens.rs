//! Per-node bootstrap tokens: the kube adapter of the provider's
//! [`BootstrapTokens`] port, and the sweep of tokens whose node will never
//! use them.
//!
//! Each NodeClaim gets its own `bootstrap.kubernetes.io/token` Secret in
//! `kube-system` with an expiration, rendered into its machine config as
//! `cluster.token`. A cluster-wide token shared by every node is the failure
//! mode other providers hit (it expires and nodes silently stop joining, or it
//! never expires and anyone who reads one machine config can join the
//! cluster); one token per node, deleted once that node has joined, bounds
//! both. Kubernetes' own `tokencleaner` controller, which deletes expired
//! tokens, is off by default, so the sweep here deletes ours.
//!
//! The secret half of a token is never logged: logs name the token id only.

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Secret as KubeSecret;
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, ObjectMeta, PostParams};
use rand::Rng as _;
use serde_json::Value;
use tracing::{info, warn};

use crate::install::{Phase, Progress, Secret};
use crate::k8s::nodes::{NodeClaimList, classify_kube};
use crate::provider::{BootstrapTokens, KubeError};

/// Where Kubernetes' bootstrap token authenticator looks for tokens.
pub const TOKEN_NAMESPACE: &str = "kube-system";
pub const TOKEN_SECRET_TYPE: &str = "bootstrap.kubernetes.io/token";
/// Label selecting the tokens of one NodeClaim (when its name fits a label).
pub const LABEL_NODECLAIM: &str = "karpenter.scaleway.com/nodeclaim";
/// Label selecting the tokens of this cluster's provider (the sweep's scope).
pub const LABEL_CLUSTER: &str = "karpenter.scaleway.com/cluster";
/// The NodeClaim a token belongs to, always set (a NodeClaim name may be
/// longer than a label value can be).
pub const ANNOTATION_NODECLAIM: &str = "karpenter.scaleway.com/nodeclaim";
/// Extra group of the token's user, besides `system:bootstrappers`: lets a
/// cluster admin grant or audit exactly what these nodes may do.
pub const AUTH_EXTRA_GROUPS: &str = "system:bootstrappers:karpenter-scaleway";

/// Tokens younger than this are never swept: a token is created before the
/// sweep's NodeClaim list is read only if its NodeClaim already existed, but
/// a margin keeps informer-lagged API servers from racing us.
const SWEEP_MIN_AGE: chrono::TimeDelta = chrono::TimeDelta::minutes(2);

const TOKEN_ALPHABET: &[u8] = b"abcdefghijklmnopqrstuvwxyz0123456789";

/// A random `[a-z0-9]{len}` from the thread-local CSPRNG (ChaCha, seeded by
/// the OS).
fn random_token_part(len: usize) -> String {
    let mut rng = rand::rng();
    (0..len)
        .map(|_| TOKEN_ALPHABET[rng.random_range(0..TOKEN_ALPHABET.len())] as char)
        .collect()
}

/// Whether `value` is a valid Kubernetes label value.
pub fn is_label_value(value: &str) -> bool {
    value.len() <= 63
        && (value.is_empty()
            || (value.starts_with(|c: char| c.is_ascii_alphanumeric())
                && value.ends_with(|c: char| c.is_ascii_alphanumeric())
                && value
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.'))))
}

/// A token Secret of ours, as read back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TokenRecord {
    /// Secret name, `bootstrap-token-<id>`.
    pub name: String,
    pub token_id: String,
    pub token_secret: Secret,
    pub claim: Option<String>,
    pub expiration: Option<DateTime<Utc>>,
    pub created: Option<DateTime<Utc>>,
}

impl TokenRecord {
    fn from_secret(secret: &KubeSecret) -> Option<TokenRecord> {
        if secret.type_.as_deref() != Some(TOKEN_SECRET_TYPE) {
            return None;
        }
        let data = secret.data.as_ref();
        let field = |key: &str| {
            data.and_then(|d| d.get(key))
                .and_then(|b| String::from_utf8(b.0.clone()).ok())
        };
        Some(TokenRecord {
            name: secret.metadata.name.clone()?,
            token_id: field("token-id").unwrap_or_default(),
            token_secret: Secret::new(field("token-secret").unwrap_or_default()),
            claim: secret
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(ANNOTATION_NODECLAIM))
                .cloned(),
            expiration: field("expiration")
                .and_then(|e| DateTime::parse_from_rfc3339(e.trim()).ok())
                .map(|t| t.with_timezone(&Utc)),
            created: secret
                .metadata
                .creation_timestamp
                .as_ref()
                .and_then(|t| DateTime::from_timestamp(t.0.as_second(), 0)),
        })
    }

    /// Usable: well formed and not expired. A token without an expiration is
    /// not one we wrote; it is treated as unusable so that it gets replaced.
    fn usable(&self, now: DateTime<Utc>) -> bool {
        self.token_id.len() == 6
            && self.token_secret.expose().len() == 16
            && self.expiration.is_some_and(|e| e > now)
    }
}

/// The bootstrap tokens of this cluster's NodeClaims.
#[derive(Clone)]
pub struct KubeBootstrapTokens {
    secrets: Api<KubeSecret>,
    cluster_name: String,
    ttl: Duration,
}

impl KubeBootstrapTokens {
    /// `cluster_name` labels every token (the sweep only ever touches tokens
    /// with this label), so it must be a valid label value.
    pub fn new(client: Client, cluster_name: &str, ttl: Duration) -> Result<Self, String> {
        if cluster_name.is_empty() || !is_label_value(cluster_name) {
            return Err(format!(
                "cluster name {cluster_name:?} is not a valid Kubernetes label value \
                 (at most 63 characters: letters, digits, '-', '_', '.')"
            ));
        }
        if ttl.is_zero() {
            return Err("the bootstrap token TTL must be positive".into());
        }
        Ok(KubeBootstrapTokens {
            secrets: Api::namespaced(client, TOKEN_NAMESPACE),
            cluster_name: cluster_name.to_string(),
            ttl,
        })
    }

    fn cluster_selector(&self) -> String {
        format!("{LABEL_CLUSTER}={}", self.cluster_name)
    }

    /// Every token of this cluster (all pages).
    async fn list_all(&self) -> Result<Vec<TokenRecord>, kube::Error> {
        let mut params = ListParams::default()
            .labels(&self.cluster_selector())
            .fields(&format!("type={TOKEN_SECRET_TYPE}"))
            .limit(500);
        let mut out = Vec::new();
        loop {
            let page = self.secrets.list(&params).await?;
            out.extend(page.items.iter().filter_map(TokenRecord::from_secret));
            match page.metadata.continue_.filter(|c| !c.is_empty()) {
                Some(token) => params = params.continue_token(&token),
                None => return Ok(out),
            }
        }
    }

    /// The tokens of one NodeClaim.
    async fn list_for(&self, claim: &str) -> Result<Vec<TokenRecord>, kube::Error> {
        let mut selector = self.cluster_selector();
        if is_label_value(claim) {
            selector.push_str(&format!(",{LABEL_NODECLAIM}={claim}"));
        }
        let list = self
            .secrets
            .list(
                &ListParams::default()
                    .labels(&selector)
                    .fields(&format!("type={TOKEN_SECRET_TYPE}")),
            )
            .await?;
        Ok(list
            .items
            .iter()
            .filter_map(TokenRecord::from_secret)
            .filter(|t| t.claim.as_deref() == Some(claim))
            .collect())
    }

    async fn delete_secret(&self, record: &TokenRecord, reason: &str) -> Result<(), kube::Error> {
        match self
            .secrets
            .delete(&record.name, &DeleteParams::default())
            .await
        {
            Ok(_) => {
                info!(token_id = %record.token_id, nodeclaim = record.claim.as_deref().unwrap_or(""),
                    %reason, "deleted bootstrap token");
                Ok(())
            }
            Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
            Err(e) => Err(e),
        }
    }

    fn token_secret(&self, claim: &str, id: &str, secret: &str) -> KubeSecret {
        let expiration = Utc::now()
            + chrono::TimeDelta::from_std(self.ttl).unwrap_or(chrono::TimeDelta::hours(4));
        let mut labels = BTreeMap::from([(LABEL_CLUSTER.to_string(), self.cluster_name.clone())]);
        if is_label_value(claim) {
            labels.insert(LABEL_NODECLAIM.to_string(), claim.to_string());
        }
        let string_data = BTreeMap::from([
            ("token-id".to_string(), id.to_string()),
            ("token-secret".to_string(), secret.to_string()),
            (
                "expiration".to_string(),
                expiration.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            ),
            ("usage-bootstrap-authentication".to_string(), "true".into()),
            ("auth-extra-groups".to_string(), AUTH_EXTRA_GROUPS.into()),
            (
                "description".to_string(),
                format!("karpenter-scaleway: bootstrap token of NodeClaim {claim}"),
            ),
        ]);
        KubeSecret {
            metadata: ObjectMeta {
                name: Some(format!("bootstrap-token-{id}")),
                namespace: Some(TOKEN_NAMESPACE.into()),
                labels: Some(labels),
                annotations: Some(BTreeMap::from([(
                    ANNOTATION_NODECLAIM.to_string(),
                    claim.to_string(),
                )])),
                ..Default::default()
            },
            type_: Some(TOKEN_SECRET_TYPE.into()),
            string_data: Some(string_data),
            ..Default::default()
        }
    }

    async fn create(&self, claim: &str) -> Result<Secret, KubeError> {
        // Six characters of id leave room for collisions over a cluster's
        // lifetime: a taken id is drawn again.
        for _ in 0..5 {
            let id = random_token_part(6);
            let secret = random_token_part(16);
            match self
                .secrets
                .create(
                    &PostParams::default(),
                    &self.token_secret(claim, &id, &secret),
                )
                .await
            {
                Ok(_) => {
                    info!(nodeclaim = %claim, token_id = %id, ttl_s = self.ttl.as_secs(),
                        "created bootstrap token");
                    return Ok(Secret::new(format!("{id}.{secret}")));
                }
                Err(kube::Error::Api(s)) if s.code == 409 => continue,
                Err(e) => return Err(classify_kube(e)),
            }
        }
        Err(KubeError::Unavailable(
            "no free bootstrap token id after 5 draws".into(),
        ))
    }

    /// Deletes the tokens no node will use: those whose NodeClaim is gone or
    /// being deleted, whose node has joined, or that expired. Tokens are
    /// listed before NodeClaims, so a token created after the NodeClaim list
    /// was read cannot be mistaken for an orphan; the pass is skipped when
    /// either list fails (a partial list would delete live tokens).
    pub async fn sweep(&self, node_claims: &NodeClaimList) -> Result<SweepReport, String> {
        let tokens = self
            .list_all()
            .await
            .map_err(|e| format!("listing bootstrap tokens: {e}"))?;
        if tokens.is_empty() {
            return Ok(SweepReport::default());
        }
        let claims = node_claims
            .list()
            .await
            .map_err(|e| format!("listing NodeClaims: {e}"))?;
        let index = claim_index(&claims);
        let mut report = SweepReport::default();
        for (record, reason) in plan_sweep(&tokens, &index, Utc::now()) {
            match self.delete_secret(record, reason).await {
                Ok(()) => report.deleted += 1,
                Err(e) => {
                    warn!(token_id = %record.token_id, error = %e, "could not delete bootstrap token");
                    report.failed += 1;
                }
            }
        }
        report.kept = tokens.len() - report.deleted - report.failed;
        Ok(report)
    }
}

#[async_trait]
impl BootstrapTokens for KubeBootstrapTokens {
    async fn ensure(&self, claim: &str) -> Result<Secret, KubeError> {
        let now = Utc::now();
        let mut existing = self.list_for(claim).await.map_err(classify_kube)?;
        // The newest usable token: a retried Create or a resume renders the
        // token the node may already have been given.
        existing.sort_by_key(|t| std::cmp::Reverse(t.expiration));
        if let Some(token) = existing.iter().find(|t| t.usable(now)) {
            return Ok(Secret::new(format!(
                "{}.{}",
                token.token_id,
                token.token_secret.expose()
            )));
        }
        for stale in &existing {
            if let Err(e) = self.delete_secret(stale, "expired, replaced").await {
                warn!(token_id = %stale.token_id, error = %e, "could not delete expired bootstrap token");
            }
        }
        self.create(claim).await
    }

    async fn delete(&self, claim: &str) -> Result<(), KubeError> {
        for token in self.list_for(claim).await.map_err(classify_kube)? {
            self.delete_secret(&token, "NodeClaim done with it")
                .await
                .map_err(classify_kube)?;
        }
        Ok(())
    }
}

/// What the sweep knows about a NodeClaim.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimState {
    pub deleting: bool,
    pub phase: Option<Phase>,
}

/// NodeClaims by name, from their Kubernetes JSON.
pub fn claim_index(claims: &[Value]) -> HashMap<String, ClaimState> {
    claims
        .iter()
        .filter_map(|c| {
            let name = c.pointer("/metadata/name")?.as_str()?.to_string();
            let annotations: BTreeMap<String, String> = c
                .pointer("/metadata/annotations")
                .and_then(Value::as_object)
                .map(|m| {
                    m.iter()
                        .filter_map(|(k, v)| Some((k.clone(), v.as_str()?.to_string())))
                        .collect()
                })
                .unwrap_or_default();
            Some((
                name,
                ClaimState {
                    deleting: c.pointer("/metadata/deletionTimestamp").is_some(),
                    phase: Progress::from_annotations(&annotations).phase,
                },
            ))
        })
        .collect()
}

/// The tokens to delete and why. Pure, so that every rule is unit-tested.
pub fn plan_sweep<'a>(
    tokens: &'a [TokenRecord],
    claims: &HashMap<String, ClaimState>,
    now: DateTime<Utc>,
) -> Vec<(&'a TokenRecord, &'static str)> {
    tokens
        .iter()
        .filter_map(|t| {
            if t.expiration.is_some_and(|e| e <= now) {
                return Some((t, "expired"));
            }
            // Young tokens are left alone whatever the list says.
            if t.created.is_none_or(|c| now - c < SWEEP_MIN_AGE) {
                return None;
            }
            let Some(claim) = t.claim.as_deref() else {
                return Some((t, "no NodeClaim annotation"));
            };
            match claims.get(claim) {
                None => Some((t, "NodeClaim gone")),
                Some(state) if state.deleting => Some((t, "NodeClaim being deleted")),
                Some(state) if state.phase == Some(Phase::Joined) => Some((t, "node joined")),
                Some(state) if state.phase == Some(Phase::Failed) => Some((t, "install failed")),
                Some(_) => None,
            }
        })
        .collect()
}

/// What one sweep pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SweepReport {
    pub deleted: usize,
    pub failed: usize,
    pub kept: usize,
}

/// Sweeps every `interval` while `is_leader()` (one replica acts) until
/// `stop` resolves.
pub async fn run_sweeper(
    tokens: KubeBootstrapTokens,
    node_claims: NodeClaimList,
    interval: Duration,
    is_leader: Arc<dyn Fn() -> bool + Send + Sync>,
    stop: impl std::future::Future<Output = ()>,
) {
    let mut ticker = tokio::time::interval(interval);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    tokio::pin!(stop);
    loop {
        tokio::select! {
            _ = &mut stop => return,
            _ = ticker.tick() => {}
        }
        if !is_leader() {
            continue;
        }
        match tokens.sweep(&node_claims).await {
            Ok(report) if report.deleted + report.failed > 0 => info!(
                deleted = report.deleted,
                failed = report.failed,
                kept = report.kept,
                "bootstrap token sweep"
            ),
            Ok(_) => {}
            Err(error) => warn!(%error, "bootstrap token sweep skipped"),
        }
    }
}

#[cfg(test)]
#[path = "bootstrap_tokens_tests.rs"]
mod tests;
