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
