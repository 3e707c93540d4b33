//! What a standby pool should do now, and whether a deleted node's server goes
//! back to standby: pure functions of the pool, its servers, their billing
//! and the time (no I/O, no clock), so that every rule is unit-tested.

use std::time::Duration;

use chrono::{DateTime, Utc};

use crate::catalog::Billing;

/// A pool as the NodeClass asks for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PoolSpec {
    pub offer: String,
    pub zone: String,
    /// Idle installed servers to keep ready.
    pub min: u32,
    /// Most standby servers (installing, idle, wiping) the pool orders or
    /// takes back by recycling an hourly server.
    pub max: u32,
    /// How long an idle hourly server above `min` is kept.
    pub idle_hourly_keep: Duration,
    /// The NodeClass's billing: what new standby servers are ordered with.
    pub billing: Billing,
}

/// Where a standby server stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum State {
    /// Ordered and being installed.
    Installing,
    /// Installed, in Talos maintenance mode without config: adoptable.
    Idle,
    /// A deleted node's server being written again (rescue + dd).
    Wiping,
}

impl State {
    pub const ALL: [State; 3] = [State::Installing, State::Idle, State::Wiping];

    pub fn as_str(self) -> &'static str {
        match self {
            State::Installing => "installing",
            State::Idle => "idle",
            State::Wiping => "wiping",
        }
    }
}

/// One standby server of a pool.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub id: String,
    pub state: State,
    /// When the server was ordered: paid periods count from here.
    pub created_at: DateTime<Utc>,
    /// When it became idle (its standby install ended).
    pub idle_since: Option<DateTime<Utc>>,
    pub billing: Billing,
}

/// How long a billed hour and a billed month last. Real Scaleway billing is
/// per hour and per month of 730 h (our reading; docs/standby.md says what
/// is assumed); simulations shorten both.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Periods {
    pub hour: Duration,
    pub month: Duration,
    /// Servers are released this long before their paid period ends, so that
    /// the next period is not billed.
    pub release_margin: Duration,
}

impl Default for Periods {
    fn default() -> Self {
        Periods {
            hour: Duration::from_secs(3600),
            month: Duration::from_secs(730 * 3600),
            release_margin: Duration::from_secs(120),
        }
    }
}

impl Periods {
    fn period(&self, billing: Billing) -> Duration {
        match billing {
            Billing::Hourly => self.hour,
            Billing::Monthly => self.month,
        }
    }

    /// The end of the paid period of a server ordered at `created` that
    /// contains `at` (periods count from the order; a moment exactly on a
    /// boundary starts a new period).
    pub fn paid_until(
        &self,
        billing: Billing,
        created: DateTime<Utc>,
        at: DateTime<Utc>,
    ) -> DateTime<Utc> {
        let period = self.period(billing).as_secs().max(1) as i64;
        let elapsed = (at - created).num_seconds().max(0);
        let periods = elapsed / period + 1;
        created + chrono::Duration::seconds(periods * period)
    }
}

/// One thing a pool does now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// Order one more standby server.
    Order { reason: String },
    /// Delete this idle (or, for a pool that no longer exists, any) server.
    Release { id: String, reason: String },
}

/// What `pool` does now with `members`. `orderable`: the offering can be
/// ordered (in the catalog, in stock, not refused lately).
///
/// - Order what is missing for idle + installing + wiping to reach `min`
///   (never more than `max` servers in all), all in one pass: a pool
///   refills as fast as the servers can be delivered.
/// - Release idle servers above `min` when their paid time is up: hourly at
///   the end of the paid hour in which they have been idle for
///   `idle_hourly_keep` (or of the hour being paid now, when that one has
///   passed); monthly at the end of their paid month, never before. Servers
///   being installed or wiped are never released here.
pub fn plan(
    pool: &PoolSpec,
    members: &[Member],
    orderable: bool,
    periods: &Periods,
    now: DateTime<Utc>,
) -> Vec<Step> {
    let mut steps = Vec::new();
    let total = members.len() as u32;
    let wanted = pool.min.min(pool.max);
    if total < wanted {
        if orderable {
            for _ in total..wanted {
                steps.push(Step::Order {
                    reason: format!(
                        "{total} standby server(s) of {} in {} (installing, idle or wiping), min {}",
                        pool.offer, pool.zone, pool.min
                    ),
                });
            }
        }
        return steps;
    }
    let mut excess = total.saturating_sub(pool.min);
    // Those whose paid time ends first go first.
    let mut idle: Vec<(&Member, DateTime<Utc>)> = members
        .iter()
        .filter(|m| m.state == State::Idle)
        .map(|m| (m, release_at(pool, m, periods, now)))
        .collect();
    idle.sort_by(|a, b| a.1.cmp(&b.1).then_with(|| a.0.id.cmp(&b.0.id)));
    for (member, at) in idle {
        if excess == 0 {
            break;
        }
        if now >= at {
            excess -= 1;
            steps.push(Step::Release {
                id: member.id.clone(),
                reason: release_reason(pool, member, total),
            });
        }
    }
    steps
}

/// When an idle server above `min` is released: `margin` before the end of
/// a paid period, never anywhere else in it.
///
/// Hourly: the end of the paid hour in which it has been idle for
/// `idle_hourly_keep`, or, when that hour has already ended (a server idle at
/// `min` for hours, then above it because the pool's min was lowered or a
/// recycled server joined it), the end of the hour being paid now. Releasing
/// it the moment it turned excess would throw away the rest of an hour
/// already billed.
fn release_at(
    pool: &PoolSpec,
    member: &Member,
    periods: &Periods,
    now: DateTime<Utc>,
) -> DateTime<Utc> {
    let margin = chrono::Duration::from_std(periods.release_margin).unwrap_or_default();
    match member.billing {
        Billing::Hourly => {
            let idle = member.idle_since.unwrap_or(now);
            let keep = chrono::Duration::from_std(pool.idle_hourly_keep).unwrap_or_default();
            periods.paid_until(Billing::Hourly, member.created_at, (idle + keep).max(now)) - margin
        }
        Billing::Monthly => periods.paid_until(Billing::Monthly, member.created_at, now) - margin,
    }
}

fn release_reason(pool: &PoolSpec, member: &Member, total: u32) -> String {
    let billing = match member.billing {
        Billing::Hourly => "its paid hour",
        Billing::Monthly => "its paid month",
    };
    format!(
        "{total} standby server(s) of {} in {} for min {}: an idle one is released at the end of {billing}",
        pool.offer, pool.zone, pool.min
    )
}

/// The servers of a pool the NodeClass no longer asks for (pool removed,
/// NodeClass deleted): hourly ones are released at once, monthly ones at the
/// end of their paid month once idle (a server still being installed or
/// wiped finishes first).
pub fn plan_orphaned(members: &[Member], periods: &Periods, now: DateTime<Utc>) -> Vec<Step> {
    let margin = chrono::Duration::from_std(periods.release_margin).unwrap_or_default();
    members
        .iter()
        .filter(|m| match m.billing {
            Billing::Hourly => true,
            Billing::Monthly => {
                m.state == State::Idle
                    && now >= periods.paid_until(Billing::Monthly, m.created_at, now) - margin
            }
        })
        .map(|m| Step::Release {
            id: m.id.clone(),
            reason: match m.billing {
                Billing::Hourly => "no standby pool of this NodeClass asks for it".to_string(),
                Billing::Monthly => {
                    "no standby pool of this NodeClass asks for it and its paid month ends"
                        .to_string()
                }
            },
        })
        .collect()
}

/// What happens to the server of a deleted node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recycle {
    /// Wiped back to standby.
    Recycle { reason: String },
    /// Deleted.
    Delete { reason: String },
}

/// Whether the server of a node Karpenter deletes goes back to standby:
/// a monthly server always (it is paid until its month ends, and is never
/// deleted before: without a pool of its NodeClass for its offer and zone it
/// waits, wiped, for the end of its month), an hourly one only into such a
/// pool while it has fewer than `max` servers.
pub fn recycle(pool: Option<&PoolSpec>, members: usize, billing: Billing) -> Recycle {
    let Some(pool) = pool else {
        return match billing {
            Billing::Monthly => Recycle::Recycle {
                reason: "billed monthly: paid until its month ends, so it waits as a standby \
                         server until then (no standby pool of its NodeClass offers it: it is \
                         released at the end of its month)"
                    .to_string(),
            },
            Billing::Hourly => Recycle::Delete {
                reason: "its NodeClass has no standby pool for this offer and zone".to_string(),
            },
        };
    };
    match billing {
        Billing::Monthly => Recycle::Recycle {
            reason: format!(
                "billed monthly: paid until its month ends, so it goes back to the standby pool of {} in {}",
                pool.offer, pool.zone
            ),
        },
        Billing::Hourly if (members as u32) < pool.max => Recycle::Recycle {
            reason: format!(
                "the standby pool of {} in {} has {members} of at most {} servers",
                pool.offer, pool.zone, pool.max
            ),
        },
        Billing::Hourly => Recycle::Delete {
            reason: format!(
                "the standby pool of {} in {} is full ({members} of at most {} servers)",
                pool.offer, pool.zone, pool.max
            ),
        },
    }
}

/// What adopting a recycled server saved against a fresh order: a monthly
/// order's setup fee (one month's price), or the paid rest of an hourly
/// server's current hour. A server never recycled saved nothing.
pub fn adoption_savings(
    billing: Billing,
    recycled: bool,
    created: DateTime<Utc>,
    now: DateTime<Utc>,
    hourly_price: f64,
    monthly_price: Option<f64>,
    periods: &Periods,
) -> f64 {
    if !recycled {
        return 0.0;
    }
    match billing {
        Billing::Monthly => monthly_price.unwrap_or(0.0),
        Billing::Hourly => {
            let rest = periods.paid_until(Billing::Hourly, created, now) - now;
            let hour = periods.hour.as_secs_f64().max(1.0);
            hourly_price * (rest.num_milliseconds() as f64 / 1000.0) / hour
        }
    }
}

#[cfg(test)]
#[path = "plan_tests.rs"]
mod tests;
