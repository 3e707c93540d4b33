//! Injected failures (`POST /_emsim/faults`), of two families:
//!
//! - `http` faults act on calls to one endpoint (`METHOD /path-template`, as in
//!   the counters), in the gate before authentication: answer a status, add
//!   latency, or hold the request until the client gives up; each call draws
//!   against `rate` with the simulator's seeded RNG so a scenario replays.
//! - order faults (`out_of_stock_after_order`, `stuck_delivery`,
//!   `delivery_seconds`) act on `POST /servers` orders matching an offer and a
//!   zone: the order is accepted, and its delivery goes wrong later, which is
//!   what a provider must survive without an error at order time.
//! - list faults (`list_missing_page`, `list_total_count`) act on the 200
//!   answer of a `GET` list endpoint after the handler built it: a page that
//!   comes back without (some of) its items, or a `total_count` that does not
//!   match the items. Both are 200s a careless client would take for a
//!   shorter list, which is how a provider's List makes Karpenter's garbage
//!   collector delete live nodes.
//!
//! Every fault fires at most `count` times when given, then is spent and
//! removed; without `count` it fires until `DELETE /_emsim/faults`.

use std::time::Duration;

use axum::http::StatusCode;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::error::ApiError;
use crate::instance::INSTANCE_ZONES;

/// Keeps the fault RNG's stream apart from the world's, so arming a fault does
/// not change the ids or delivery times a scenario gets.
const RNG_SALT: u64 = 0x6661_756c_7473;

/// How long a `timeout` fault holds a request whose client never gives up.
pub const HOLD_LIMIT: Duration = Duration::from_secs(3600);

/// A fault as posted; `kind` defaults to `http` (the only kind that existed
/// before, whose bodies had no `kind`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum FaultSpec {
    Http(HttpFault),
    OutOfStockAfterOrder(OrderMatch),
    StuckDelivery(OrderMatch),
    DeliverySeconds(DeliverySeconds),
    ListMissingPage(ListMissingPage),
    ListTotalCount(ListTotalCount),
    OutOfStockAfterPoweron(PoweronMatch),
    PrivateNetworkAttachError(AttachMatch),
}

/// Which Elastic Metal attachments end in `error`; absent fields match
/// anything.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AttachMatch {
    /// Private Network id or name (case-insensitive).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub private_network: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u32>,
}

/// Which Instance poweron calls a poweron fault applies to; absent fields
/// match anything.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct PoweronMatch {
    /// Commercial type (case-insensitive), e.g. `POP2-2C-8G`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commercial_type: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct HttpFault {
    /// `METHOD /path-template`, e.g. `POST /baremetal/v1/zones/{zone}/servers`.
    pub endpoint: String,
    /// Status to answer. May be absent only for a pure delay (`latency_ms`) or
    /// a `timeout`: the call then reaches the handler after the delay.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub status: Option<u16>,
    /// JSON body to answer; absent means an empty body (as the real 429 once was).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub body: Option<Value>,
    /// How many calls it fires on; absent means every call until cleared.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u32>,
    /// Probability that a matching call fires (drawn with the seeded RNG); absent: 1.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
    /// Real milliseconds to wait before answering (or before passing the call on).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub latency_ms: Option<u64>,
    /// Never answer: hold the request until the client gives up (or an hour passes).
    #[serde(default, skip_serializing_if = "is_false")]
    pub timeout: bool,
    /// The call reaches the handler and takes effect (a server ordered, a
    /// VM created); its answer is then held as `timeout` holds one: a
    /// connection lost after the API committed, the caller left to find out.
    #[serde(default, skip_serializing_if = "is_false")]
    pub lose_answer: bool,
}

fn is_false(b: &bool) -> bool {
    !*b
}

/// Which orders an order fault applies to; absent fields match anything.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OrderMatch {
    /// Offer name (case-insensitive) or id.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u32>,
}

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DeliverySeconds {
    /// Simulated seconds from order to `ready`.
    pub seconds: f64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offer: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub zone: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u32>,
}

/// A page answered 200 with the true `total_count` but without its items (or
/// without its last `drop` items): what a paginated backend answers when one
/// shard or replica it reads a page from lags or fails and it returns what it
/// has instead of an error.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListMissingPage {
    /// `GET /path-template` of a list endpoint, e.g. `GET /baremetal/v1/zones/{zone}/servers`.
    pub endpoint: String,
    /// Only calls asking this page (1-based; a call without `page` asks page
    /// 1); absent: every page.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub page: Option<u64>,
    /// Items removed from the end of the page; absent: all of them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drop: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
}

/// A list answered 200 with its items intact and a `total_count` off by
/// `delta`: the count and the items read from two snapshots.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ListTotalCount {
    /// `GET /path-template` of a list endpoint.
    pub endpoint: String,
    /// Added to the true `total_count` (the result is floored at 0); not 0.
    pub delta: i64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u32>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub rate: Option<f64>,
}

impl FaultSpec {
    /// Parses a posted body, `kind` defaulting to `http`.
    pub fn from_json(mut value: Value) -> Result<Self, ApiError> {
        let Some(object) = value.as_object_mut() else {
            return Err(ApiError::invalid("body", "constraint", "a JSON object"));
        };
        object
            .entry("kind")
            .or_insert_with(|| Value::String("http".into()));
        serde_json::from_value(value)
            .map_err(|e| ApiError::invalid("body", "constraint", e.to_string()))
    }

    fn count(&self) -> Option<u32> {
        match self {
            FaultSpec::Http(h) => h.count,
            FaultSpec::OutOfStockAfterOrder(m) | FaultSpec::StuckDelivery(m) => m.count,
            FaultSpec::DeliverySeconds(d) => d.count,
            FaultSpec::ListMissingPage(l) => l.count,
            FaultSpec::ListTotalCount(l) => l.count,
            FaultSpec::OutOfStockAfterPoweron(p) => p.count,
            FaultSpec::PrivateNetworkAttachError(a) => a.count,
        }
    }

    fn count_mut(&mut self) -> Option<&mut u32> {
        match self {
            FaultSpec::Http(h) => h.count.as_mut(),
            FaultSpec::OutOfStockAfterOrder(m) | FaultSpec::StuckDelivery(m) => m.count.as_mut(),
            FaultSpec::DeliverySeconds(d) => d.count.as_mut(),
            FaultSpec::ListMissingPage(l) => l.count.as_mut(),
            FaultSpec::ListTotalCount(l) => l.count.as_mut(),
            FaultSpec::OutOfStockAfterPoweron(p) => p.count.as_mut(),
            FaultSpec::PrivateNetworkAttachError(a) => a.count.as_mut(),
        }
    }

    /// The offer and zone selector of an order fault.
    fn order_match(&self) -> Option<(Option<&str>, Option<&str>)> {
        match self {
            FaultSpec::Http(_)
            | FaultSpec::ListMissingPage(_)
            | FaultSpec::ListTotalCount(_)
            | FaultSpec::OutOfStockAfterPoweron(_)
            | FaultSpec::PrivateNetworkAttachError(_) => None,
            FaultSpec::OutOfStockAfterOrder(m) | FaultSpec::StuckDelivery(m) => {
                Some((m.offer.as_deref(), m.zone.as_deref()))
            }
            FaultSpec::DeliverySeconds(d) => Some((d.offer.as_deref(), d.zone.as_deref())),
        }
    }
}

#[derive(Debug, Clone, Serialize)]
pub struct Fault {
    #[serde(flatten)]
    pub spec: FaultSpec,
    /// Calls or orders this fault acted on so far.
    pub fired: u64,
}

/// What the gate does with a call an `http` fault fired on.
#[derive(Debug, Clone, PartialEq)]
pub struct HttpAction {
    /// Wait this long first.
    pub delay: Duration,
    pub outcome: HttpOutcome,
}

#[derive(Debug, Clone, PartialEq)]
pub enum HttpOutcome {
    /// Answer this instead of the handler.
    Answer(ApiError),
    /// Let the handler answer (after the delay).
    PassThrough,
    /// Never answer.
    Hold,
    /// Let the handler act, then never answer.
    LoseAnswer,
}

/// What the list faults that fired on one answer change in it.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ListEffects {
    /// Items to remove from the end of the page (`u64::MAX`: all of them).
    pub drop: u64,
    /// Added to `total_count`.
    pub total_delta: i64,
}

impl ListEffects {
    /// Applies the effects to a list answer `{total_count, <items>: [...]}`;
    /// an answer of another shape is left as it is.
    pub fn apply(&self, body: &mut Value) {
        let Some(object) = body.as_object_mut() else {
            return;
        };
        let drop = usize::try_from(self.drop).unwrap_or(usize::MAX);
        if drop > 0 {
            // Items are an array, or (Instance products) a map by type name.
            if let Some(items) = object.values_mut().find_map(Value::as_array_mut) {
                items.truncate(items.len().saturating_sub(drop));
            } else if let Some(items) = object.values_mut().find_map(Value::as_object_mut) {
                let keep = items.len().saturating_sub(drop);
                let dropped: Vec<String> = items.keys().skip(keep).cloned().collect();
                for key in dropped {
                    items.remove(&key);
                }
            }
        }
        if let Some(total) = object.get("total_count").and_then(Value::as_u64) {
            object.insert("total_count".into(), Value::from(self.moved_total(total)));
        }
    }

    /// A total (`total_count` or `X-Total-Count`) moved by `total_delta`,
    /// floored at 0.
    pub fn moved_total(&self, total: u64) -> u64 {
        let total = i64::try_from(total).unwrap_or(i64::MAX);
        total.saturating_add(self.total_delta).max(0) as u64
    }
}

/// What the order faults matching one order change about its delivery.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct OrderEffects {
    /// At delivery time the server becomes `out_of_stock` instead of `ready`.
    pub out_of_stock: bool,
    /// The delivery never completes.
    pub stuck: bool,
    /// Simulated delivery time replacing the offer's.
    pub delivery_seconds: Option<f64>,
}

/// What an order looks like to the order faults.
#[derive(Debug, Clone, Copy)]
pub struct Order<'a> {
    pub offer_id: &'a str,
    pub offer_name: &'a str,
    pub zone: &'a str,
}

#[derive(Debug)]
pub struct Faults {
    active: Vec<Fault>,
    seed: u64,
    rng: StdRng,
}

impl Faults {
    pub fn new(seed: u64) -> Self {
        Self {
            active: Vec::new(),
            seed,
            rng: StdRng::seed_from_u64(seed ^ RNG_SALT),
        }
    }

    /// Validates and arms a fault. `known` lists the endpoints that exist, to
    /// catch typos in tests; `zones` the zones.
    pub fn add(
        &mut self,
        spec: FaultSpec,
        known: &[String],
        zones: &[&str],
    ) -> Result<Fault, ApiError> {
        if spec.count() == Some(0) {
            return Err(ApiError::invalid(
                "count",
                "constraint",
                "at least 1, or absent for no limit",
            ));
        }
        match &spec {
            FaultSpec::Http(h) => validate_http(h, known)?,
            FaultSpec::DeliverySeconds(d) => {
                if !(d.seconds.is_finite() && d.seconds >= 0.0) {
                    return Err(ApiError::invalid(
                        "seconds",
                        "constraint",
                        "a non-negative number of simulated seconds",
                    ));
                }
            }
            FaultSpec::OutOfStockAfterOrder(_) | FaultSpec::StuckDelivery(_) => {}
            FaultSpec::PrivateNetworkAttachError(a) => {
                if let Some(zone) = a.zone.as_deref()
                    && !zones.contains(&zone)
                {
                    return Err(ApiError::invalid(
                        "zone",
                        "constraint",
                        format!("unknown zone {zone}, expected one of {}", zones.join(", ")),
                    ));
                }
            }
            FaultSpec::OutOfStockAfterPoweron(p) => {
                if let Some(zone) = p.zone.as_deref()
                    && !INSTANCE_ZONES.contains(&zone)
                {
                    return Err(ApiError::invalid(
                        "zone",
                        "constraint",
                        format!(
                            "unknown zone {zone}, expected one of {}",
                            INSTANCE_ZONES.join(", ")
                        ),
                    ));
                }
            }
            FaultSpec::ListMissingPage(l) => {
                validate_list(&l.endpoint, l.rate, known)?;
                if l.page == Some(0) {
                    return Err(ApiError::invalid(
                        "page",
                        "constraint",
                        "a page number from 1, or absent for every page",
                    ));
                }
                if l.drop == Some(0) {
                    return Err(ApiError::invalid(
                        "drop",
                        "constraint",
                        "at least 1 item, or absent for the whole page",
                    ));
                }
            }
            FaultSpec::ListTotalCount(l) => {
                validate_list(&l.endpoint, l.rate, known)?;
                if l.delta == 0 {
                    return Err(ApiError::invalid(
                        "delta",
                        "constraint",
                        "a non-zero number added to total_count",
                    ));
                }
            }
        }
        if let Some((_, Some(zone))) = spec.order_match()
            && !zones.contains(&zone)
        {
            return Err(ApiError::invalid(
                "zone",
                "constraint",
                format!("unknown zone {zone}, expected one of {}", zones.join(", ")),
            ));
        }
        let fault = Fault { spec, fired: 0 };
        self.active.push(fault.clone());
        Ok(fault)
    }

    /// What to do with a call to `endpoint`, if an `http` fault fires on it.
    /// Matching faults are tried oldest first; each draws against its rate.
    pub fn take_http(&mut self, endpoint: &str) -> Option<HttpAction> {
        let mut fired = None;
        for (index, fault) in self.active.iter().enumerate() {
            let FaultSpec::Http(h) = &fault.spec else {
                continue;
            };
            if h.endpoint != endpoint {
                continue;
            }
            if let Some(rate) = h.rate {
                // Draw even at rate 1.0 so that the sequence only depends on
                // the calls made, not on the rates chosen.
                let draw: f64 = self.rng.random();
                if draw >= rate {
                    continue;
                }
            }
            fired = Some(index);
            break;
        }
        let index = fired?;
        let FaultSpec::Http(h) = &self.active[index].spec else {
            unreachable!("selected an http fault");
        };
        let outcome = if h.timeout {
            HttpOutcome::Hold
        } else if h.lose_answer {
            HttpOutcome::LoseAnswer
        } else {
            match h.status {
                Some(status) => HttpOutcome::Answer(ApiError::Injected {
                    status: StatusCode::from_u16(status).expect("validated on add"),
                    body: h.body.clone(),
                }),
                None => HttpOutcome::PassThrough,
            }
        };
        let action = HttpAction {
            delay: Duration::from_millis(h.latency_ms.unwrap_or(0)),
            outcome,
        };
        self.fire(index);
        Some(action)
    }

    /// The effects of the order faults matching `order`: the oldest matching
    /// fault of each kind fires once.
    pub fn take_order(&mut self, order: Order<'_>) -> OrderEffects {
        let mut effects = OrderEffects::default();
        let mut fired = Vec::new();
        let mut seen = [false; 3];
        for (index, fault) in self.active.iter().enumerate() {
            let Some((offer, zone)) = fault.spec.order_match() else {
                continue;
            };
            let offer_ok = offer
                .is_none_or(|o| o.eq_ignore_ascii_case(order.offer_name) || o == order.offer_id);
            if !offer_ok || zone.is_some_and(|z| z != order.zone) {
                continue;
            }
            let slot = match &fault.spec {
                FaultSpec::OutOfStockAfterOrder(_) => 0,
                FaultSpec::StuckDelivery(_) => 1,
                FaultSpec::DeliverySeconds(_) => 2,
                FaultSpec::Http(_)
                | FaultSpec::ListMissingPage(_)
                | FaultSpec::ListTotalCount(_)
                | FaultSpec::OutOfStockAfterPoweron(_)
                | FaultSpec::PrivateNetworkAttachError(_) => {
                    unreachable!("order faults only")
                }
            };
            if std::mem::replace(&mut seen[slot], true) {
                continue;
            }
            match &fault.spec {
                FaultSpec::OutOfStockAfterOrder(_) => effects.out_of_stock = true,
                FaultSpec::StuckDelivery(_) => effects.stuck = true,
                FaultSpec::DeliverySeconds(d) => effects.delivery_seconds = Some(d.seconds),
                FaultSpec::Http(_)
                | FaultSpec::ListMissingPage(_)
                | FaultSpec::ListTotalCount(_)
                | FaultSpec::OutOfStockAfterPoweron(_)
                | FaultSpec::PrivateNetworkAttachError(_) => {}
            }
            fired.push(index);
        }
        // Highest index first so that removals keep the other indices valid.
        for index in fired.into_iter().rev() {
            self.fire(index);
        }
        effects
    }

    /// Whether an `out_of_stock_after_poweron` fault fires on an Instance
    /// poweron of `commercial_type` in `zone` (the oldest matching one).
    pub fn take_poweron(&mut self, commercial_type: &str, zone: &str) -> bool {
        let index = self.active.iter().position(|f| match &f.spec {
            FaultSpec::OutOfStockAfterPoweron(p) => {
                p.commercial_type
                    .as_deref()
                    .is_none_or(|t| t.eq_ignore_ascii_case(commercial_type))
                    && p.zone.as_deref().is_none_or(|z| z == zone)
            }
            _ => false,
        });
        match index {
            Some(index) => {
                self.fire(index);
                true
            }
            None => false,
        }
    }

    /// Whether a `private_network_attach_error` fault fires on an attachment
    /// of network `pn_id` (named `pn_name`) in `zone` (the oldest matching one).
    pub fn take_attach(&mut self, pn_id: &str, pn_name: &str, zone: &str) -> bool {
        let index = self.active.iter().position(|f| match &f.spec {
            FaultSpec::PrivateNetworkAttachError(a) => {
                a.private_network
                    .as_deref()
                    .is_none_or(|p| p == pn_id || p.eq_ignore_ascii_case(pn_name))
                    && a.zone.as_deref().is_none_or(|z| z == zone)
            }
            _ => false,
        });
        match index {
            Some(index) => {
                self.fire(index);
                true
            }
            None => false,
        }
    }

    /// What the list faults do to a 200 answer of `endpoint` for `page`: the
    /// oldest matching fault of each list kind fires (each drawing against
    /// its rate), so a missing page and a wrong count can act together.
    pub fn take_list(&mut self, endpoint: &str, page: u64) -> Option<ListEffects> {
        let mut effects = ListEffects::default();
        let mut fired = Vec::new();
        let mut seen = [false; 2];
        for (index, fault) in self.active.iter().enumerate() {
            let (slot, fault_endpoint, rate) = match &fault.spec {
                FaultSpec::ListMissingPage(l) => {
                    if l.page.is_some_and(|p| p != page) {
                        continue;
                    }
                    (0, &l.endpoint, l.rate)
                }
                FaultSpec::ListTotalCount(l) => (1, &l.endpoint, l.rate),
                _ => continue,
            };
            if fault_endpoint != endpoint || seen[slot] {
                continue;
            }
            if let Some(rate) = rate {
                // Drawn even at rate 1.0, as for http faults.
                let draw: f64 = self.rng.random();
                if draw >= rate {
                    continue;
                }
            }
            seen[slot] = true;
            match &fault.spec {
                FaultSpec::ListMissingPage(l) => effects.drop = l.drop.unwrap_or(u64::MAX),
                FaultSpec::ListTotalCount(l) => effects.total_delta = l.delta,
                _ => unreachable!("list faults only"),
            }
            fired.push(index);
        }
        if fired.is_empty() {
            return None;
        }
        for index in fired.into_iter().rev() {
            self.fire(index);
        }
        Some(effects)
    }

    /// Whether a list fault is armed on `endpoint` (the gate then reads the
    /// answer's body, which it otherwise streams untouched).
    pub fn has_list(&self, endpoint: &str) -> bool {
        self.active.iter().any(|f| match &f.spec {
            FaultSpec::ListMissingPage(l) => l.endpoint == endpoint,
            FaultSpec::ListTotalCount(l) => l.endpoint == endpoint,
            _ => false,
        })
    }

    fn fire(&mut self, index: usize) {
        let fault = &mut self.active[index];
        fault.fired += 1;
        if let Some(count) = fault.spec.count_mut() {
            *count -= 1;
            if *count == 0 {
                self.active.remove(index);
            }
        }
    }

    pub fn list(&self) -> &[Fault] {
        &self.active
    }

    /// Disarms everything (the RNG keeps going: clearing is not a replay point).
    pub fn clear(&mut self) {
        self.active.clear();
    }

    /// Disarms everything and re-seeds the RNG, as at start-up.
    pub fn reset(&mut self) {
        *self = Self::new(self.seed);
    }
}

/// A list fault's endpoint must be a known `GET` whose path does not end in a
/// parameter (`GET .../servers`, not `GET .../servers/{server_id}`).
fn validate_list(endpoint: &str, rate: Option<f64>, known: &[String]) -> Result<(), ApiError> {
    let is_list = endpoint.starts_with("GET ")
        && !endpoint.ends_with('}')
        && known.iter().any(|k| k == endpoint);
    if !is_list {
        let lists: Vec<&str> = known
            .iter()
            .map(String::as_str)
            .filter(|k| k.starts_with("GET ") && !k.ends_with('}'))
            .collect();
        return Err(ApiError::invalid(
            "endpoint",
            "constraint",
            format!(
                "{endpoint:?} is not a list endpoint; list endpoints: {}",
                lists.join(", ")
            ),
        ));
    }
    validate_rate(rate)
}

fn validate_rate(rate: Option<f64>) -> Result<(), ApiError> {
    if let Some(rate) = rate
        && !(rate.is_finite() && (0.0..=1.0).contains(&rate))
    {
        return Err(ApiError::invalid(
            "rate",
            "constraint",
            "a probability between 0.0 and 1.0",
        ));
    }
    Ok(())
}

fn validate_http(h: &HttpFault, known: &[String]) -> Result<(), ApiError> {
    if let Some(status) = h.status
        && (StatusCode::from_u16(status).is_err() || status < 200)
    {
        return Err(ApiError::invalid(
            "status",
            "constraint",
            "an HTTP status between 200 and 999",
        ));
    }
    if h.status.is_none() && h.latency_ms.is_none() && !h.timeout && !h.lose_answer {
        return Err(ApiError::invalid(
            "status",
            "required",
            "the status to answer (it may be absent only with latency_ms, timeout or lose_answer)",
        ));
    }
    if h.timeout && (h.status.is_some() || h.body.is_some()) {
        return Err(ApiError::invalid(
            "timeout",
            "constraint",
            "a timeout never answers: give no status or body with it",
        ));
    }
    if h.lose_answer && (h.timeout || h.status.is_some() || h.body.is_some()) {
        return Err(ApiError::invalid(
            "lose_answer",
            "constraint",
            "a lost answer is the handler's, never sent: give no status, body or timeout with it",
        ));
    }
    validate_rate(h.rate)?;
    if !known.iter().any(|k| k == &h.endpoint) {
        return Err(ApiError::invalid(
            "endpoint",
            "constraint",
            format!(
                "unknown endpoint {:?}; known: {}",
                h.endpoint,
                known.join(", ")
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
#[path = "faults_tests.rs"]
mod tests;
