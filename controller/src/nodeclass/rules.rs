//! CEL rules and their fix-it messages shared by both NodeClass kinds, so
//! that a zone, a tag or a patch is judged the same way for Elastic Metal and
//! for Instances.

pub const ZONE_FORMAT: &str = "self.matches('^[a-z]{2}-[a-z]{3}-[0-9]+$')";
pub const ZONES_FORMAT: &str = "self.all(z, z.matches('^[a-z]{2}-[a-z]{3}-[0-9]+$'))";
pub const ZONES_FORMAT_MESSAGE: &str = "each zone must be a Scaleway zone name such as fr-par-2 (empty list = every zone the provider serves)";
pub const ZONES_UNIQUE: &str = "self.all(z, self.exists_one(y, y == z))";
pub const ZONES_UNIQUE_MESSAGE: &str = "zones must not repeat a zone";

pub const PATCHES_NOT_EMPTY: &str = "self.all(p, p.trim() != '')";
pub const PATCHES_NOT_EMPTY_MESSAGE: &str = "machineConfigPatches must not contain an empty patch";

pub const TAGS_NOT_EMPTY: &str = "self.all(t, t != '')";
pub const TAGS_NOT_EMPTY_MESSAGE: &str = "tags must not contain an empty tag";
pub const TAGS_NOT_RESERVED: &str =
    "self.all(t, !t.startsWith('karpenter.sh/') && !t.startsWith('karpenter.scaleway.com/'))";
pub const TAGS_NOT_RESERVED_MESSAGE: &str = "tags must not start with karpenter.sh/ or karpenter.scaleway.com/: the provider reserves them for its ownership tags";

/// A lowercase UUID, as Scaleway writes ids.
pub const UUID: &str =
    "self.matches('^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$')";

// Standby pools (`spec.standby`, Elastic Metal only; docs/standby.md).

/// An Elastic Metal offer name as the API writes it: `EM-A115X-SSD`,
/// `EM-RV1-C4M16S128-A`, `EM-I215E-NVME`.
pub const OFFER_FORMAT: &str = "self.matches('^EM-[A-Z0-9-]+$')";
pub const OFFER_FORMAT_MESSAGE: &str = "offer must be an Elastic Metal offer name such as EM-A115X-SSD, in capitals as `karpenter-scaleway catalog` prints it";
pub const POOL_ZONE_FORMAT_MESSAGE: &str = "zone must be a Scaleway zone name such as fr-par-2";

pub const POOL_MAX_AT_LEAST_MIN: &str = "!has(self.min) || self.max >= self.min";
pub const POOL_MAX_AT_LEAST_MIN_MESSAGE: &str = "max must be at least min: raise max or lower min";

/// A Go duration (`time.ParseDuration`) without a sign: `0`, or one or more
/// of a decimal number and a unit. `go_duration::parse` reads the same
/// grammar; CEL's `duration()` is Go's parser.
macro_rules! go_duration_pattern {
    () => {
        "^(0|(([0-9]+([.][0-9]*)?|[.][0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$"
    };
}
pub const GO_DURATION_PATTERN: &str = go_duration_pattern!();
pub const IDLE_KEEP_FORMAT: &str = concat!("self.matches('", go_duration_pattern!(), "')");
pub const IDLE_KEEP_FORMAT_MESSAGE: &str = "idleHourlyKeep must be a Go duration such as 0s, 30m or 1h30m (units h, m, s; no sign, no days)";
/// Judged only once the format holds: `duration()` fails on anything else.
pub const IDLE_KEEP_AT_MOST_A_DAY: &str = concat!(
    "!self.matches('",
    go_duration_pattern!(),
    "') || duration(self) <= duration('24h')"
);
/// The longest `idleHourlyKeep` the API server accepts.
pub const IDLE_KEEP_MAX_SECONDS: u64 = 24 * 3600;
pub const IDLE_KEEP_AT_MOST_A_DAY_MESSAGE: &str =
    "idleHourlyKeep must be at most 24h: to keep servers idle for longer, raise min instead";

/// A planner duration: a Go duration (as `idleHourlyKeep`).
pub const PLANNER_DURATION_FORMAT: &str = concat!("self.matches('", go_duration_pattern!(), "')");
pub const PLANNER_DURATION_AT_MOST_A_WEEK: &str = concat!(
    "!self.matches('",
    go_duration_pattern!(),
    "') || duration(self) <= duration('168h')"
);
/// The longest planner window or hold the API server accepts.
pub const PLANNER_MAX_SECONDS: u64 = 168 * 3600;
pub const PLANNER_WINDOW_FORMAT_MESSAGE: &str =
    "planner.window must be a Go duration such as 2h or 90m (units h, m, s; no sign, no days)";
pub const PLANNER_WINDOW_AT_MOST_A_WEEK_MESSAGE: &str = "planner.window must be at most 168h";
pub const PLANNER_AT_LEAST_FORMAT_MESSAGE: &str =
    "planner.atLeast must be a Go duration such as 12h (units h, m, s; no sign, no days)";
pub const PLANNER_HOLD_FORMAT_MESSAGE: &str =
    "planner.hold must be a Go duration such as 30m (units h, m, s; no sign, no days)";
pub const PLANNER_HOLD_AT_MOST_A_WEEK_MESSAGE: &str = "planner.hold must be at most 168h";
pub const PLANNER_AHEAD_FORMAT_MESSAGE: &str =
    "planner.ahead must be a Go duration such as 20m (units h, m, s; no sign, no days)";
pub const PLANNER_AHEAD_AT_MOST_A_WEEK_MESSAGE: &str = "planner.ahead must be at most 168h";
/// On the planner: `atLeast` is part of `window` (default `2h`). Judged only
/// once both formats hold.
pub const PLANNER_AT_LEAST_WITHIN_WINDOW: &str = concat!(
    "!has(self.atLeast) || !self.atLeast.matches('",
    go_duration_pattern!(),
    "') || (has(self.window) && !self.window.matches('",
    go_duration_pattern!(),
    "')) || duration(self.atLeast) <= duration(has(self.window) ? self.window : '2h')"
);
pub const PLANNER_AT_LEAST_WITHIN_WINDOW_MESSAGE: &str = "planner.atLeast must not be longer than planner.window (default 2h): lengthen window or shorten atLeast";

pub const POOLS_UNIQUE: &str =
    "self.all(p, self.exists_one(q, q.offer == p.offer && q.zone == p.zone))";
pub const POOLS_UNIQUE_MESSAGE: &str =
    "standby.pools must not list an (offer, zone) pair twice: merge the two entries into one";

/// On the spec: a pool's zone must be one the NodeClass orders in.
pub const POOL_ZONES_IN_ZONES: &str = "!has(self.standby) || !has(self.standby.pools) || !has(self.zones) || size(self.zones) == 0 || self.standby.pools.all(p, p.zone in self.zones)";
pub const POOL_ZONES_IN_ZONES_MESSAGE: &str = "every standby pool's zone must be one of spec.zones: add the zone to zones, or move the pool to one of them";
