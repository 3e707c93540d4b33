//! Records to wire objects. A server's JSON needs its volumes, IPs and image,
//! so it is built by the world that holds them all.

use super::catalog::Image;
use super::model::{
    self, BlockReference, BlockSpecs, BlockVolume, FlexibleIp, OrderedMap, Ref, RootVolumeRef,
    ServerIp, ServerVolume,
};
use super::server::VmRecord;
use super::volumes::{FlexIpRecord, VolumeKind, VolumeRecord};
use super::world::InstanceWorld;
use crate::clock::format_time;

/// Scaleway's own project, owner of the public images (as recorded).
const SCALEWAY_PROJECT: &str = "51b656e3-4865-41e8-adbc-0c45bdd780db";

impl InstanceWorld {
    pub fn server_wire(&self, s: &VmRecord) -> model::Server {
        let volumes = s
            .volumes
            .iter()
            .filter_map(|(index, id)| {
                let v = self.volumes.get(id)?;
                Some((index.clone(), volume_in_server(v, s, index == "0")))
            })
            .collect();
        let mut public_ips: Vec<ServerIp> = Vec::new();
        if let Some(id) = &s.dynamic_ip_id {
            public_ips.push(server_ip(id, &s.address.to_string(), true, s.id.as_str()));
        }
        for ip in s.flexible_ips.iter().filter_map(|i| self.ips.get(i)) {
            public_ips.push(server_ip(
                &ip.id,
                &ip.address.to_string(),
                false,
                &ip.ipam_id,
            ));
        }
        let security_group = match &s.security_group {
            Some(id) => Ref {
                id: id.clone(),
                name: String::new(),
            },
            None => Ref {
                id: derived("security-group", &s.zone, &s.project),
                name: "Default security group".into(),
            },
        };
        let image = s
            .image_id
            .as_ref()
            .and_then(|i| self.catalog.image(&s.zone, i))
            .map(|i| self.image_wire(i));
        model::Server {
            id: s.id.clone(),
            name: s.name.clone(),
            arch: s.arch.clone(),
            commercial_type: s.commercial_type.clone(),
            boot_type: s.boot_type.clone(),
            organization: s.organization.clone(),
            project: s.project.clone(),
            hostname: s.name.clone(),
            image,
            volumes: OrderedMap(volumes),
            tags: s.tags.clone(),
            state: s.state.as_str(),
            protected: s.protected,
            state_detail: s.state_detail.into(),
            public_ip: public_ips.first().cloned(),
            public_ips,
            mac_address: s.mac_address.clone(),
            routed_ip_enabled: true,
            ipv6: None,
            extra_networks: vec![],
            dynamic_ip_required: s.dynamic_ip_required,
            enable_ipv6: false,
            private_ip: None,
            creation_date: instance_time(s.created_at),
            modification_date: instance_time(s.modified_at),
            bootscript: None,
            security_group,
            location: None,
            maintenances: vec![],
            allowed_actions: s.state.allowed_actions(),
            placement_group: s.placement_group.as_ref().map(|id| Ref {
                id: id.clone(),
                name: String::new(),
            }),
            private_nics: vec![],
            zone: s.zone.clone(),
            filesystems: vec![],
            end_of_service: self
                .catalog
                .find(&s.zone, &s.commercial_type)
                .is_some_and(|t| t.end_of_service),
            dns: format!("{}.pub.instances.scw.cloud", s.id),
        }
    }

    pub fn image_wire(&self, i: &Image) -> model::Image {
        let owner = if i.public {
            SCALEWAY_PROJECT.to_string()
        } else {
            self.project.clone()
        };
        model::Image {
            id: i.id.clone(),
            name: i.name.clone(),
            organization: owner.clone(),
            project: owner,
            root_volume: RootVolumeRef {
                volume_type: "sbs_snapshot",
                id: i.root_snapshot_id.clone(),
                size: 0,
                name: String::new(),
            },
            extra_volumes: serde_json::Map::new(),
            public: i.public,
            arch: i.arch.clone(),
            creation_date: "2026-05-13T07:00:00.221012+00:00".into(),
            modification_date: "2026-05-13T07:00:00.221012+00:00".into(),
            default_bootscript: None,
            from_server: String::new(),
            state: "available",
            tags: i.tags.clone(),
            zone: i.zone.clone(),
        }
    }
}

fn volume_in_server(v: &VolumeRecord, s: &VmRecord, boot: bool) -> ServerVolume {
    // The recordings show `boot: false` on the root too; emsim says which
    // one boots.
    match v.kind {
        VolumeKind::Sbs => ServerVolume::Sbs {
            boot,
            volume_type: "sbs_volume",
            id: v.id.clone(),
            state: "available",
            zone: v.zone.clone(),
        },
        VolumeKind::LSsd | VolumeKind::Scratch => ServerVolume::Local {
            boot,
            id: v.id.clone(),
            name: v.name.clone(),
            volume_type: v.kind.as_str(),
            export_uri: None,
            organization: v.organization.clone(),
            project: v.project.clone(),
            server: Ref {
                id: s.id.clone(),
                name: s.name.clone(),
            },
            size: v.size,
            state: "available",
            creation_date: instance_time(v.created_at),
            modification_date: instance_time(v.updated_at),
            tags: v.tags.clone(),
            zone: v.zone.clone(),
        },
    }
}

fn server_ip(id: &str, address: &str, dynamic: bool, ipam_seed: &str) -> ServerIp {
    ServerIp {
        id: id.to_string(),
        address: address.to_string(),
        gateway: "62.210.0.1".into(),
        netmask: "32".into(),
        family: "inet",
        dynamic,
        provisioning_mode: "dhcp",
        tags: vec![],
        ipam_id: derived("ipam", ipam_seed, id),
        state: "attached",
    }
}

pub fn flexible_ip_wire(ip: &FlexIpRecord) -> FlexibleIp {
    FlexibleIp {
        id: ip.id.clone(),
        address: ip.address.to_string(),
        reverse: None,
        server: ip.server.as_ref().map(|id| Ref {
            id: id.clone(),
            name: String::new(),
        }),
        organization: ip.organization.clone(),
        tags: ip.tags.clone(),
        project: ip.project.clone(),
        kind: "routed_ipv4",
        state: if ip.server.is_some() {
            "attached"
        } else {
            "detached"
        },
        prefix: format!("{}/32", ip.address),
        ipam_id: ip.ipam_id.clone(),
        zone: ip.zone.clone(),
    }
}

pub fn block_volume_wire(v: &VolumeRecord) -> BlockVolume {
    let references = v
        .server
        .iter()
        .map(|(server, _)| BlockReference {
            id: derived("reference", &v.id, server),
            product_resource_type: "instance_server",
            product_resource_id: server.clone(),
            created_at: format_time(v.updated_at),
            kind: "exclusive",
            status: "attached",
        })
        .collect();
    BlockVolume {
        id: v.id.clone(),
        name: v.name.clone(),
        kind: if v.perf_iops >= 15000 {
            "sbs_15k"
        } else {
            "sbs_5k"
        },
        size: v.size,
        project_id: v.project.clone(),
        created_at: format_time(v.created_at),
        updated_at: format_time(v.updated_at),
        references,
        parent_snapshot_id: v.parent_snapshot_id.clone(),
        status: if v.server.is_some() {
            "in_use"
        } else {
            "available"
        },
        tags: v.tags.clone(),
        zone: v.zone.clone(),
        specs: BlockSpecs {
            perf_iops: v.perf_iops,
            class: "sbs",
        },
        last_detached_at: v.last_detached_at.map(format_time),
        kms_key_id: None,
    }
}

/// The Instance API writes `+00:00` where the other APIs write `Z`.
pub fn instance_time(t: crate::clock::SimTime) -> String {
    t.format("%Y-%m-%dT%H:%M:%S%.6f+00:00").to_string()
}

fn derived(kind: &str, a: &str, b: &str) -> String {
    let digest = md5::compute(format!("emsim-instance-{kind}:{a}:{b}"));
    uuid::Builder::from_md5_bytes(digest.0)
        .into_uuid()
        .to_string()
}
