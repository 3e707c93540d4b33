//! Choosing what to order: the cheapest available offering compatible with a
//! NodeClaim's requirements.

use std::collections::BTreeMap;

use crate::catalog::{InstanceType, Offering, Operator, Requirement, managed_label};

/// Whether a node with `labels` satisfies `req`. Only keys this provider
/// defines on instance types are judged; any other key (the NodePool label,
/// user labels) is a label Karpenter puts on the node itself and constrains
/// nothing here.
pub fn satisfies(req: &Requirement, labels: &BTreeMap<String, String>) -> bool {
    if !managed_label(&req.key) {
        return true;
    }
    let value = labels.get(&req.key);
    let number = |s: &str| s.parse::<i64>().ok();
    match req.operator {
        Operator::In => value.is_some_and(|v| req.values.contains(v)),
        Operator::NotIn => value.is_none_or(|v| !req.values.contains(v)),
        Operator::Exists => value.is_some(),
        Operator::DoesNotExist => value.is_none(),
        Operator::Gt | Operator::Lt => {
            let (Some(v), Some(bound)) = (
                value.and_then(|v| number(v)),
                req.values.first().and_then(|b| number(b)),
            ) else {
                return false;
            };
            if req.operator == Operator::Gt {
                v > bound
            } else {
                v < bound
            }
        }
    }
}

/// Every available offering in `zones` whose labels satisfy all requirements,
/// cheapest first (ties broken by name then zone, so the choice is stable).
pub fn candidates<'a>(
    types: &'a [InstanceType],
    requirements: &[Requirement],
    zones: &[String],
) -> Vec<(&'a InstanceType, &'a Offering)> {
    let mut out: Vec<(&InstanceType, &Offering)> = types
        .iter()
        .flat_map(|it| it.offerings.iter().map(move |o| (it, o)))
        .filter(|(_, o)| o.available && zones.contains(&o.zone))
        .filter(|(it, o)| {
            // A reserved offering's node carries its reservation's labels.
            let labels = match &o.reservation {
                Some(r) => it.reserved_node_labels(&o.zone, &r.id),
                None => it.node_labels(&o.zone),
            };
            requirements.iter().all(|r| satisfies(r, &labels))
        })
        .collect();
    out.sort_by(|(a, ao), (b, bo)| {
        ao.price
            .total_cmp(&bo.price)
            .then_with(|| a.name.cmp(&b.name))
            .then_with(|| ao.zone.cmp(&bo.zone))
    });
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::catalog::{LABEL_INSTANCE_CPU, LABEL_INSTANCE_TYPE, LABEL_ZONE, instance_types};
    use crate::scaleway::fake::sample_offers;

    fn types() -> Vec<InstanceType> {
        let mut ams = sample_offers("nl-ams-1");
        // Cheaper in Amsterdam, to see the zone filter and the price order work.
        for o in &mut ams {
            if let Some(p) = o.price_per_hour.as_mut() {
                p.nanos -= 1_000_000;
            }
        }
        instance_types(&BTreeMap::from([
            ("fr-par-2".to_string(), sample_offers("fr-par-2")),
            ("nl-ams-1".to_string(), ams),
        ]))
        .0
    }

    fn req(key: &str, operator: Operator, values: &[&str]) -> Requirement {
        Requirement {
            key: key.into(),
            operator,
            values: values.iter().map(|v| v.to_string()).collect(),
        }
    }

    fn zones(z: &[&str]) -> Vec<String> {
        z.iter().map(|z| z.to_string()).collect()
    }

    #[test]
    fn picks_the_cheapest_compatible_available_offering() {
        let types = types();
        let reqs = vec![
            req(
                LABEL_INSTANCE_TYPE,
                Operator::In,
                &["EM-I215E-NVME", "EM-A115X-SSD", "EM-T620E-H100"],
            ),
            req("karpenter.sh/capacity-type", Operator::In, &["on-demand"]),
            req("karpenter.sh/nodepool", Operator::In, &["default"]),
        ];
        let c = candidates(&types, &reqs, &zones(&["fr-par-2", "nl-ams-1"]));
        assert_eq!(
            (c[0].0.name.as_str(), c[0].1.zone.as_str()),
            ("EM-A115X-SSD", "nl-ams-1")
        );
        assert_eq!(
            (c[1].0.name.as_str(), c[1].1.zone.as_str()),
            ("EM-A115X-SSD", "fr-par-2")
        );
        // The H100 is sold out everywhere.
        assert!(c.iter().all(|(it, _)| it.name != "EM-T620E-H100"));

        let only_par = candidates(&types, &reqs, &zones(&["fr-par-2"]));
        assert!(only_par.iter().all(|(_, o)| o.zone == "fr-par-2"));
    }

    #[test]
    fn honours_zone_arch_and_numeric_requirements() {
        let types = types();
        let reqs = vec![
            req(LABEL_ZONE, Operator::In, &["fr-par-2"]),
            req(LABEL_INSTANCE_CPU, Operator::Gt, &["8"]),
            req("kubernetes.io/arch", Operator::In, &["amd64"]),
        ];
        let c = candidates(&types, &reqs, &zones(&["fr-par-2", "nl-ams-1"]));
        assert_eq!(c.len(), 1);
        assert_eq!(c[0].0.name, "EM-I215E-NVME");

        let arm = vec![req("kubernetes.io/arch", Operator::In, &["arm64"])];
        assert!(candidates(&types, &arm, &zones(&["fr-par-2"])).is_empty());

        let spot = vec![req("karpenter.sh/capacity-type", Operator::In, &["spot"])];
        assert!(candidates(&types, &spot, &zones(&["fr-par-2"])).is_empty());
    }

    #[test]
    fn requirement_operators() {
        let labels = BTreeMap::from([
            (LABEL_INSTANCE_CPU.to_string(), "32".to_string()),
            ("kubernetes.io/os".to_string(), "linux".to_string()),
        ]);
        assert!(satisfies(
            &req(LABEL_INSTANCE_CPU, Operator::Lt, &["64"]),
            &labels
        ));
        assert!(!satisfies(
            &req(LABEL_INSTANCE_CPU, Operator::Lt, &["32"]),
            &labels
        ));
        assert!(satisfies(
            &req("kubernetes.io/os", Operator::NotIn, &["windows"]),
            &labels
        ));
        assert!(satisfies(
            &req(
                "karpenter.scaleway.com/instance-gpu-name",
                Operator::DoesNotExist,
                &[]
            ),
            &labels
        ));
        assert!(!satisfies(
            &req(
                "karpenter.scaleway.com/instance-gpu-name",
                Operator::Exists,
                &[]
            ),
            &labels
        ));
        assert!(
            satisfies(&req("example.com/team", Operator::In, &["a"]), &labels),
            "unmanaged keys do not constrain"
        );
    }
}
