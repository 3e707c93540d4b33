//! The NodeClass kinds the catalog serves. A catalog is keyed by (kind, name):
//! an Elastic Metal NodeClass and an Instance NodeClass may share a name, and
//! each kind has its own default for NodePools whose NodeClass is not known
//! yet. The names are those of the CRDs (`nodeclass::KIND`,
//! `nodeclass::instance::KIND`); they are repeated here so that the catalog
//! does not import the kube types, and a test checks they agree.

/// A NodeClass kind of group `karpenter.scaleway.com`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum ClassKind {
    /// `ScalewayElasticMetalNodeClass`: also the kind of a NodePool whose
    /// `nodeClassRef` names no kind or one the catalog does not know.
    #[default]
    ElasticMetal,
    /// `ScalewayInstanceNodeClass`.
    Instance,
}

impl ClassKind {
    pub const ALL: [ClassKind; 2] = [ClassKind::ElasticMetal, ClassKind::Instance];

    pub const fn name(self) -> &'static str {
        match self {
            ClassKind::ElasticMetal => "ScalewayElasticMetalNodeClass",
            ClassKind::Instance => "ScalewayInstanceNodeClass",
        }
    }

    /// The kind of a `nodeClassRef.kind` (or of a proto `node_class_kind`):
    /// absent, empty or unknown is Elastic Metal, as before there were two
    /// kinds.
    pub fn of(kind: Option<&str>) -> ClassKind {
        match kind {
            Some(k) if k == ClassKind::Instance.name() => ClassKind::Instance,
            _ => ClassKind::ElasticMetal,
        }
    }
}

/// (kind, NodeClass name): the key of a NodeClass's catalog.
pub type ClassKey = (ClassKind, String);

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_read_with_elastic_metal_as_the_fallback() {
        for k in ClassKind::ALL {
            assert_eq!(ClassKind::of(Some(k.name())), k);
        }
        assert_eq!(ClassKind::of(None), ClassKind::ElasticMetal);
        assert_eq!(ClassKind::of(Some("")), ClassKind::ElasticMetal);
        assert_eq!(
            ClassKind::of(Some("SomeOtherNodeClass")),
            ClassKind::ElasticMetal
        );
    }
}
