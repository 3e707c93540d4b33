//! Adoption (Create of a NodeClaim core launched into a reservation takes an
//! idle standby server) and recycling (Delete of a node whose server is paid
//! for longer wipes it back to standby).

use std::collections::BTreeMap;

use chrono::{SubsecRound, Utc};
use serde_json::Value;
use tracing::{info, warn};

use super::plan::{self, Recycle};
use super::{
    PoolKey, RELEASE_ANNOTATION, StandbyServer, State, TAG_BILLING, TAG_IDLE_SINCE, TAG_IMAGE,
    TAG_RECYCLED, TAG_RESERVATION, TAG_STANDBY, billing_str, class_billing, created_at, image_tag,
    pools_of, server_billing, with_progress,
};
use crate::catalog::{ClassKind, InstanceType, LABEL_RESERVATION_ID, Operator, Snapshot};
use crate::install::{Phase, Progress};
use crate::metrics::standby_metrics;
use crate::provider::nodeclaim::NodeClaimView;
use crate::provider::{
    NodeClassRecord, Provider, ProviderError, TAG_NODECLAIM, TAG_NODECLASS, TAG_NODEPOOL,
    candidates, provider_id, tag, tag_value,
};
use crate::scaleway::{ApiError, Server, ServerStatus};

/// Whether core launched this NodeClaim into a reservation: it then carries a
/// requirement on the reservation id (core adds it only for reserved
/// offerings it counted; a NodeClaim that merely allows `reserved` without
/// naming a reservation is ordered on demand).
pub fn wants_reservation(view: &NodeClaimView) -> bool {
    view.requirements
        .iter()
        .any(|r| r.key == LABEL_RESERVATION_ID && r.operator == Operator::In)
}

fn create_failed(reason: &str, message: String) -> ProviderError {
    ProviderError::CreateFailed {
        reason: reason.to_string(),
        message,
    }
}

impl Provider {
    /// Takes an idle standby server of a reservation the NodeClaim allows,
    /// cheapest first: under the pool's lock, the server is read again and
    /// claimed with one tag write (the NodeClaim's tags in, the standby tag
    /// out) before anything else, so two Creates never take one server and
    /// a restarted provider finds it by its NodeClaim tag. None left →
    /// insufficient capacity, and the catalog shows the pool empty at once.
    pub(crate) async fn adopt_standby(
        &self,
        view: &NodeClaimView,
        class: &NodeClassRecord,
        snapshot: &Snapshot,
        zones: &[String],
    ) -> Result<(Server, InstanceType), ProviderError> {
        let Some(sb) = self.standby.as_ref() else {
            return Err(ProviderError::InsufficientCapacity(format!(
                "NodeClaim {} asks for a reservation but standby servers are not served",
                view.name
            )));
        };
        let types = snapshot.for_class(ClassKind::ElasticMetal, Some(&class.name));
        let offerings: Vec<(InstanceType, String, String)> =
            candidates(&types, &view.requirements, zones)
                .into_iter()
                .filter_map(|(it, o)| {
                    o.reservation
                        .as_ref()
                        .map(|r| (it.clone(), o.zone.clone(), r.id.clone()))
                })
                .collect();
        for (it, zone, reservation) in offerings {
            let key: PoolKey = (class.name.clone(), it.name.clone(), zone.clone());
            let lock = sb.book.lock_of(&key);
            let _held = lock.lock().await;
            for candidate in sb.book.idle_of(&key) {
                let fresh = match self.api.get_server(&zone, &candidate.id).await {
                    Ok(server) => server,
                    Err(ApiError::NotFound(_)) => {
                        sb.book.mark_taken(&key, &candidate.id);
                        continue;
                    }
                    Err(e) => {
                        return Err(create_failed(
                            "ScalewayAPIUnavailable",
                            format!("reading standby server {}: {e}", candidate.id),
                        ));
                    }
                };
                // Idle, of this NodeClass, up, and installed with the image
                // the NodeClass asks for now.
                let idle = StandbyServer::of(&fresh)
                    .is_some_and(|s| s.state == State::Idle && s.class == class.name)
                    && fresh.status == ServerStatus::Ready
                    && tag_value(&fresh, TAG_IMAGE).is_some()
                    && tag_value(&fresh, TAG_IMAGE).map(str::to_string)
                        == self.expected_image(class, &fresh);
                if !idle {
                    sb.book.mark_taken(&key, &candidate.id);
                    continue;
                }
                let tags = self.claimed_tags(&fresh, view, class, &reservation);
                let claimed = self
                    .api
                    .update_server_tags(&zone, &fresh.id, &tags)
                    .await
                    .map_err(|e| {
                        // A write whose answer was lost may have landed: the
                        // retried Create finds the server by its NodeClaim tag.
                        create_failed(
                            "ScalewayAPIUnavailable",
                            format!("claiming standby server {}: {e}", fresh.id),
                        )
                    })?;
                crate::crashpoint::reached(
                    crate::crashpoint::CrashPoint::StandbyClaimed,
                    &view.name,
                );
                sb.book.mark_taken(&key, &fresh.id);
                self.republish_class(class);
                let billing = server_billing(&fresh, class_billing(&class.spec));
                let (hourly, monthly) = prices(snapshot, &fresh);
                let saved = plan::adoption_savings(
                    billing,
                    tag_value(&fresh, TAG_RECYCLED) == Some("true"),
                    created_at(&fresh),
                    crate::scaleway::api_clock::now(),
                    hourly,
                    monthly,
                    &sb.periods,
                );
                standby_metrics().add_savings(&class.name, saved);
                info!(nodeclaim = %view.name, server_id = %fresh.id, %zone, offer = %it.name,
                    %reservation, saved_eur = saved, "adopted standby server");
                return Ok((claimed, it));
            }
            // This pool is empty now: say so at once.
            self.republish_class(class);
        }
        Err(ProviderError::InsufficientCapacity(format!(
            "no idle standby server left in the reservations NodeClaim {} allows",
            view.name
        )))
    }

    /// The tags of an adopted server: its own, without the standby tag, plus
    /// the NodeClaim's ownership tags and its reservation.
    fn claimed_tags(
        &self,
        server: &Server,
        view: &NodeClaimView,
        class: &NodeClassRecord,
        reservation: &str,
    ) -> Vec<String> {
        let mut tags: Vec<String> = server
            .tags
            .iter()
            .filter(|t| {
                let k = tag_key(t);
                k != TAG_STANDBY && k != TAG_RESERVATION && k != TAG_IDLE_SINCE
            })
            .cloned()
            .collect();
        for t in self.ownership_tags(view, &class.name, &class.spec.tags) {
            if !tags.contains(&t) {
                tags.push(t);
            }
        }
        tags.push(tag(TAG_RESERVATION, reservation));
        tags
    }

    /// The class's reserved offerings from the book's current idle counts.
    fn republish_class(&self, class: &NodeClassRecord) {
        let Some(sb) = self.standby.as_ref() else {
            return;
        };
        let pools: BTreeMap<PoolKey, _> = pools_of(&class.spec)
            .0
            .into_iter()
            .map(|p| ((class.name.clone(), p.offer.clone(), p.zone.clone()), p))
            .collect();
        let classes = BTreeMap::from([(class.name.clone(), class.clone())]);
        self.publish_reservations(&sb.book, &pools, &classes);
    }

    /// Delete of an Elastic Metal node: `Some` when its server goes back to
    /// standby instead (then it is no longer this NodeClaim's: NotFound):
    /// into its NodeClass's pool for its offer and zone, or, billed monthly,
    /// to wait for the end of its paid month even without one. Only a node
    /// that joined (its NodeClaim Initialized, no install of it running
    /// here) is recycled; the user may ask for a plain deletion with the
    /// NodeClaim annotation [`RELEASE_ANNOTATION`].
    pub(crate) async fn recycle_on_delete(
        &self,
        claim: &Value,
        server: &Server,
    ) -> Option<Result<(), ProviderError>> {
        let sb = self.standby.as_ref()?;
        let name = claim.pointer("/metadata/name").and_then(Value::as_str)?;
        if claim
            .pointer(&format!(
                "/metadata/annotations/{}",
                RELEASE_ANNOTATION.replace('/', "~1")
            ))
            .and_then(Value::as_str)
            == Some("true")
        {
            info!(nodeclaim = name, server_id = %server.id, "release-server annotation: deleting, not recycling");
            return None;
        }
        let class = self
            .node_classes
            // Not only a Ready one: a NodeClass that is briefly not Ready
            // (an API blip while its credentials were checked) must not
            // cost a monthly server's setup fee. The wipe starts once the
            // NodeClass can be read; the pass resumes it from the tags.
            .get(tag_value(server, TAG_NODECLASS)?)?;
        let (pools, _) = pools_of(&class.spec);
        let pool = pools
            .iter()
            .find(|p| p.offer == server.offer_name && p.zone == server.zone);
        let billing = server_billing(server, class_billing(&class.spec));
        // An hourly server goes back only into a pool; a monthly one is
        // never deleted before its month ends (see `plan::recycle`).
        if pool.is_none() && billing == crate::catalog::Billing::Hourly {
            return None;
        }
        // A NodeClaim whose Create never returned (core deletes it when the
        // NodeClass is not Ready, a restart came in between...) may hold an
        // adopted standby that never joined: it goes back to the pool too,
        // wiped, since a config may have been applied. Any other node is
        // recycled only once it joined.
        let launched = claim.pointer("/status/providerID").is_some();
        let adopted_unlaunched = !launched && tag_value(server, TAG_RESERVATION).is_some();
        if !(initialized(claim) || adopted_unlaunched)
            || self
                .installer
                .phase(&server.id)
                .is_some_and(|p| !p.is_terminal())
        {
            info!(nodeclaim = name, server_id = %server.id,
                "the node never joined (or its install runs): deleting its server, not recycling it");
            return None;
        }
        let key: PoolKey = (
            class.name.clone(),
            server.offer_name.clone(),
            server.zone.clone(),
        );
        // Counted and taken back under the pool's lock: two nodes deleted at
        // once never both take the pool's last place.
        let lock = sb.book.lock_of(&key);
        let _held = lock.lock().await;
        match plan::recycle(pool, sb.book.member_count(&key), billing) {
            Recycle::Delete { reason } => {
                info!(nodeclaim = name, server_id = %server.id, %reason, "deleting the server, not recycling it");
                standby_metrics().count_recycling(&class.name, "deleted");
                None
            }
            Recycle::Recycle { reason } => Some(self.recycle(name, server, &class, &reason).await),
        }
    }

    /// Retags the server as a standby being wiped and starts the wipe.
    async fn recycle(
        &self,
        claim: &str,
        server: &Server,
        class: &NodeClassRecord,
        reason: &str,
    ) -> Result<(), ProviderError> {
        let sb = self
            .standby
            .as_ref()
            .expect("recycle is only reached with standby served");
        self.wipe(server, class, true).await.map_err(|e| {
            ProviderError::Unavailable(format!("returning server {} to standby: {e}", server.id))
        })?;
        sb.book.add_member(
            &(
                class.name.clone(),
                server.offer_name.clone(),
                server.zone.clone(),
            ),
            &server.id,
        );
        standby_metrics().count_recycling(&class.name, "recycled");
        info!(nodeclaim = claim, server_id = %server.id, %reason, "recycling the server: wiping it back to standby");
        sb.events
            .record(
                &class.name,
                false,
                "StandbyRecycled",
                format!(
                    "server {} ({}, {}) of deleted NodeClaim {claim} goes back to standby (rescue + dd again): {reason}",
                    server.id, server.offer_name, server.zone
                ),
            )
            .await;
        Err(ProviderError::NotFound(provider_id(
            &server.zone,
            &server.id,
        )))
    }

    /// Makes `server` a standby server of `class` written again from a new
    /// rescue boot: its tags first (so that a restart resumes the wipe from
    /// them), then the wipe itself in the standby engine. `recycled`: it was
    /// a node (else it keeps whether it was one before).
    pub(super) async fn wipe(
        &self,
        server: &Server,
        class: &NodeClassRecord,
        recycled: bool,
    ) -> Result<Server, ApiError> {
        let sb = self
            .standby
            .as_ref()
            .expect("wipe is only reached with standby served");
        let now = Utc::now().trunc_subsecs(0);
        let progress = Progress {
            phase: Some(Phase::Ready),
            phase_since: Some(now),
            started: Some(now),
            ..Progress::default()
        };
        let mut tags: Vec<String> = server
            .tags
            .iter()
            .filter(|t| {
                let k = tag_key(t);
                k != TAG_NODECLAIM
                    && k != TAG_NODEPOOL
                    && k != TAG_RESERVATION
                    && k != TAG_STANDBY
                    && k != TAG_RECYCLED
                    && k != TAG_IMAGE
                    && k != TAG_IDLE_SINCE
            })
            .cloned()
            .collect();
        tags.push(tag(TAG_STANDBY, &class.name));
        if recycled || tag_value(server, TAG_RECYCLED) == Some("true") {
            tags.push(tag(TAG_RECYCLED, "true"));
        }
        if tag_value(server, TAG_BILLING).is_none() {
            tags.push(tag(
                TAG_BILLING,
                billing_str(server_billing(server, class_billing(&class.spec))),
            ));
        }
        if let Some(image) = self.expected_image(class, server) {
            tags.push(tag(TAG_IMAGE, &image));
        }
        let tags = with_progress(&tags, &progress);
        let wiped = self
            .api
            .update_server_tags(&server.zone, &server.id, &tags)
            .await?;
        crate::crashpoint::reached(crate::crashpoint::CrashPoint::WipeTagged, &server.id);
        match self.standby_spec(class, &wiped).await {
            Ok(spec) => {
                sb.port.register(&spec.node_claim_name, &class.name);
                sb.engine.resume(spec, progress);
            }
            // The standby pass resumes it from its tags.
            Err(error) => warn!(server_id = %server.id, %error, "cannot start the wipe yet"),
        }
        Ok(wiped)
    }

    /// The [`TAG_IMAGE`] a standby server of `class` on `server`'s offer
    /// must carry to be adopted now.
    pub(super) fn expected_image(
        &self,
        class: &NodeClassRecord,
        server: &Server,
    ) -> Option<String> {
        let snapshot = self.catalog.snapshot();
        let arch = snapshot
            .default
            .iter()
            .find(|t| t.name == server.offer_name)?
            .arch
            .clone();
        image_tag(&class.spec, &arch)
    }
}

/// `key` of a `key=value` tag.
fn tag_key(t: &str) -> &str {
    t.split_once('=').map_or(t, |(k, _)| k)
}

/// The NodeClaim's `Initialized` condition is True: its node joined.
fn initialized(claim: &Value) -> bool {
    claim
        .pointer("/status/conditions")
        .and_then(Value::as_array)
        .is_some_and(|conds| {
            conds.iter().any(|c| {
                c.get("type").and_then(Value::as_str) == Some("Initialized")
                    && c.get("status").and_then(Value::as_str) == Some("True")
            })
        })
}

/// The server's offer's hourly price and monthly price in its zone.
fn prices(snapshot: &Snapshot, server: &Server) -> (f64, Option<f64>) {
    snapshot
        .default
        .iter()
        .find(|t| t.name == server.offer_name)
        .and_then(|t| t.offerings.iter().find(|o| o.zone == server.zone))
        .map_or((0.0, None), |o| {
            (
                o.hourly_price,
                o.monthly.as_ref().map(|m| m.price_per_month),
            )
        })
}
