//! The fixed OS images and options of every zone (`GET /os`, `GET /options`).
//! Names and fields follow the SDK's types; the lists are a realistic subset,
//! not the real catalogue. Ids are derived from zone and name, so they are
//! stable across runs and seeds like offer ids.

use crate::model::{Bandwidth, OptionInfo, OptionKind, Os, OsField};

fn derived_id(kind: &str, zone: &str, name: &str) -> String {
    let digest = md5::compute(format!("emsim-{kind}:{zone}:{name}"));
    uuid::Builder::from_md5_bytes(digest.0)
        .into_uuid()
        .to_string()
}

fn field(editable: bool, required: bool, default: Option<&str>) -> OsField {
    OsField {
        editable,
        required,
        default_value: default.map(str::to_string),
    }
}

/// `(name, version, default user, cloud-init version)`.
const OS: &[(&str, &str, &str, Option<&str>)] = &[
    ("Ubuntu", "24.04 LTS (Noble Numbat)", "ubuntu", Some("24.1")),
    (
        "Ubuntu",
        "22.04 LTS (Jammy Jellyfish)",
        "ubuntu",
        Some("23.1"),
    ),
    ("Debian", "12 (Bookworm)", "debian", Some("22.4")),
    ("Rocky Linux", "9", "rocky", Some("23.1")),
];

pub fn os_list(zone: &str) -> Vec<Os> {
    OS.iter()
        .map(|(name, version, user, cloud_init)| Os {
            id: derived_id("os", zone, &format!("{name} {version}")),
            name: (*name).into(),
            version: (*version).into(),
            logo_url: format!(
                "https://emsim.invalid/logos/{}.svg",
                name.to_lowercase().replace(' ', "-")
            ),
            ssh: field(true, true, None),
            user: field(true, true, Some(user)),
            password: field(true, false, None),
            service_user: field(false, false, None),
            service_password: field(false, false, None),
            enabled: true,
            license_required: false,
            allowed: true,
            custom_partitioning_supported: true,
            cloud_init_supported: cloud_init.is_some(),
            cloud_init_version: cloud_init.map(str::to_string),
            zone: zone.into(),
        })
        .collect()
}

pub fn options(zone: &str) -> Vec<OptionInfo> {
    let option = |name: &str, manageable, kind| OptionInfo {
        id: derived_id("option", zone, name),
        name: name.into(),
        manageable,
        kind,
    };
    vec![
        option(
            "Remote Access",
            true,
            OptionKind {
                remote_access: Some(serde_json::json!({})),
                ..OptionKind::default()
            },
        ),
        option(
            "Private Network",
            true,
            OptionKind {
                private_network: Some(Bandwidth {
                    bandwidth_in_bps: 1_000_000_000,
                }),
                ..OptionKind::default()
            },
        ),
        option(
            "Public Bandwidth 10 Gbps",
            false,
            OptionKind {
                public_bandwidth: Some(Bandwidth {
                    bandwidth_in_bps: 10_000_000_000,
                }),
                ..OptionKind::default()
            },
        ),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_are_per_zone_and_stable() {
        let a = os_list("fr-par-1");
        let b = os_list("fr-par-2");
        assert_eq!(a.len(), b.len());
        assert_ne!(a[0].id, b[0].id);
        assert_eq!(a[0].id, os_list("fr-par-1")[0].id);
        let options = serde_json::to_value(options("fr-par-2")).unwrap();
        assert_eq!(options[0]["remote_access"], serde_json::json!({}));
        assert!(options[0].get("private_network").is_none());
        assert_eq!(
            options[1]["private_network"]["bandwidth_in_bps"],
            1_000_000_000u64
        );
    }
}
