//! The Private Network calls of [`ScalewayClient`]: a list of requests on the
//! shared machinery of `scaleway/http.rs`. Paths, queries and bodies are the
//! ones scaleway-sdk-go v1.39.0 sends: repeated query keys for lists
//! (`tags`, `private_network_ids`, `ip_ids`), `order_by=created_at_asc` so
//! that pages follow one stable order, `null` for an attach without IPAM
//! ids (a Go nil slice).
//!
//! Creating calls (book an address, attach, add an option, create a NIC)
//! are repeated only when the API certainly did not act (429, 409): a lost
//! answer must not book or attach twice. Deletes are idempotent and a 404
//! means done.

use async_trait::async_trait;
use reqwest::Method;
use serde::Deserialize;
use serde_json::{Value, json};

use super::{
    AttachmentFilter, BookIpRequest, CreatePrivateNicRequest, InstancePrivateNics, IpFilter, Ipam,
    IpamIp, MetalPrivateNetworks, PrivateNetwork, PrivateNetworkFilter, PrivateNic,
    ServerPrivateNetwork, Vpc, gone_is_done,
};
use crate::scaleway::http::{Api, Body, Paging, Patience, Request, segment};
use crate::scaleway::model::nullable;
use crate::scaleway::{ApiError, ScalewayClient, ServerOption};

/// Stable paging: the oldest first, so that an item created while paging
/// lands on the last page (and moves `total_count`, which fails the list).
const ORDER: (&str, &str) = ("order_by", "created_at_asc");

fn vpc_path(region: &str, rest: &str) -> Result<String, ApiError> {
    Ok(format!("/vpc/v2/regions/{}{rest}", segment(region)?))
}

fn ipam_path(region: &str, rest: &str) -> Result<String, ApiError> {
    Ok(format!("/ipam/v1/regions/{}{rest}", segment(region)?))
}

fn bm_server_path(version: &str, zone: &str, id: &str, rest: &str) -> Result<String, ApiError> {
    Ok(format!(
        "/baremetal/{version}/zones/{}/servers/{}{rest}",
        segment(zone)?,
        segment(id)?
    ))
}

fn nic_path(zone: &str, server_id: &str, rest: &str) -> Result<String, ApiError> {
    Ok(format!(
        "/instance/v1/zones/{}/servers/{}/private_nics{rest}",
        segment(zone)?,
        segment(server_id)?
    ))
}

fn order() -> (&'static str, String) {
    (ORDER.0, ORDER.1.to_string())
}

/// The options of a v1 Server answer (the rest of the server is read
/// through `ElasticMetal`).
#[derive(Deserialize)]
struct ServerOptions {
    #[serde(default, deserialize_with = "nullable")]
    options: Vec<ServerOption>,
}

#[derive(Deserialize)]
struct NicEnvelope {
    private_nic: PrivateNic,
}

#[async_trait]
impl Vpc for ScalewayClient {
    async fn list_private_networks(
        &self,
        region: &str,
        filter: &PrivateNetworkFilter,
    ) -> Result<Vec<PrivateNetwork>, ApiError> {
        let path = vpc_path(region, "/private-networks")?;
        let mut query = vec![order()];
        if let Some(name) = &filter.name {
            query.push(("name", name.clone()));
        }
        query.extend(filter.tags.iter().map(|t| ("tags", t.clone())));
        if let Some(project) = &filter.project_id {
            query.push(("project_id", project.clone()));
        }
        query.extend(
            filter
                .ids
                .iter()
                .map(|id| ("private_network_ids", id.clone())),
        );
        let req = Request::new(
            Api::Vpc,
            "GET /vpc/v2/private-networks",
            Patience::Long,
            &Method::GET,
            &path,
        )
        .query(&query);
        let pns: Vec<PrivateNetwork> = self
            .list_all(req, Paging::BodyTotal, "private_networks")
            .await?;
        Ok(pns.into_iter().filter(|pn| filter.matches(pn)).collect())
    }

    async fn get_private_network(
        &self,
        region: &str,
        id: &str,
    ) -> Result<PrivateNetwork, ApiError> {
        let path = vpc_path(region, &format!("/private-networks/{}", segment(id)?))?;
        let req = Request::new(
            Api::Vpc,
            "GET /vpc/v2/private-networks/{private_network_id}",
            Patience::Long,
            &Method::GET,
            &path,
        );
        self.call(&req).await
    }
}

#[async_trait]
impl Ipam for ScalewayClient {
    async fn list_ips(&self, region: &str, filter: &IpFilter) -> Result<Vec<IpamIp>, ApiError> {
        let path = ipam_path(region, "/ips")?;
        let mut query = vec![order()];
        if let Some(project) = &filter.project_id {
            query.push(("project_id", project.clone()));
        }
        if let Some(resource) = &filter.resource_id {
            query.push(("resource_id", resource.clone()));
        }
        if let Some(kind) = filter.resource_type {
            let kind = kind
                .as_str()
                .ok_or_else(|| ApiError::Invalid("unknown IPAM resource type".into()))?;
            query.push(("resource_type", kind.to_string()));
        }
        query.extend(filter.tags.iter().map(|t| ("tags", t.clone())));
        query.extend(filter.ip_ids.iter().map(|id| ("ip_ids", id.clone())));
        if let Some(pn) = &filter.private_network_id {
            query.push(("private_network_id", pn.clone()));
        }
        let req = Request::new(
            Api::Ipam,
            "GET /ipam/v1/ips",
            Patience::Long,
            &Method::GET,
            &path,
        )
        .query(&query);
        let ips: Vec<IpamIp> = self.list_all(req, Paging::BodyTotal, "ips").await?;
        Ok(ips.into_iter().filter(|ip| filter.matches(ip)).collect())
    }

    async fn get_ip(&self, region: &str, id: &str) -> Result<IpamIp, ApiError> {
        let path = ipam_path(region, &format!("/ips/{}", segment(id)?))?;
        let req = Request::new(
            Api::Ipam,
            "GET /ipam/v1/ips/{ip_id}",
            Patience::Long,
            &Method::GET,
            &path,
        );
        self.call(&req).await
    }

    async fn book_ip(&self, region: &str, req: &BookIpRequest) -> Result<IpamIp, ApiError> {
        let path = ipam_path(region, "/ips")?;
        let body = serde_json::to_value(req)
            .map_err(|e| ApiError::Invalid(format!("encoding book request: {e}")))?;
        let req = Request::new(
            Api::Ipam,
            "POST /ipam/v1/ips",
            Patience::Long,
            &Method::POST,
            &path,
        )
        .body(Body::Json(&body))
        .unsafe_to_repeat();
        self.call(&req).await
    }

    async fn release_ip(&self, region: &str, id: &str) -> Result<(), ApiError> {
        let path = ipam_path(region, &format!("/ips/{}", segment(id)?))?;
        let req = Request::new(
            Api::Ipam,
            "DELETE /ipam/v1/ips/{ip_id}",
            Patience::Long,
            &Method::DELETE,
            &path,
        );
        gone_is_done(self.send(&req).await.map(drop))
    }
}

#[async_trait]
impl MetalPrivateNetworks for ScalewayClient {
    async fn add_server_option(
        &self,
        zone: &str,
        server_id: &str,
        option_id: &str,
    ) -> Result<Vec<ServerOption>, ApiError> {
        let rest = format!("/options/{}", segment(option_id)?);
        let path = bm_server_path("v1", zone, server_id, &rest)?;
        // `expires_at` is omitted (the SDK's omitempty): no expiry.
        let body = json!({});
        let req = Request::new(
            Api::ElasticMetal,
            "POST /servers/{server_id}/options/{option_id}",
            Patience::Long,
            &Method::POST,
            &path,
        )
        .body(Body::Json(&body))
        .unsafe_to_repeat();
        self.call::<ServerOptions>(&req).await.map(|s| s.options)
    }

    async fn get_server_options(
        &self,
        zone: &str,
        server_id: &str,
    ) -> Result<Vec<ServerOption>, ApiError> {
        let path = bm_server_path("v1", zone, server_id, "")?;
        // The same endpoint (and pace) as `ElasticMetal::get_server`.
        let req = Request::new(
            Api::ElasticMetal,
            "GET /servers/{server_id}",
            Patience::Long,
            &Method::GET,
            &path,
        );
        self.call::<ServerOptions>(&req).await.map(|s| s.options)
    }

    async fn attach_private_network(
        &self,
        zone: &str,
        server_id: &str,
        private_network_id: &str,
        ipam_ip_ids: &[String],
    ) -> Result<ServerPrivateNetwork, ApiError> {
        let path = bm_server_path("v3", zone, server_id, "/private-networks")?;
        let ids = if ipam_ip_ids.is_empty() {
            Value::Null
        } else {
            json!(ipam_ip_ids)
        };
        let body = json!({ "private_network_id": private_network_id, "ipam_ip_ids": ids });
        let req = Request::new(
            Api::ElasticMetal,
            "POST /baremetal/v3/servers/{server_id}/private-networks",
            Patience::Long,
            &Method::POST,
            &path,
        )
        .body(Body::Json(&body))
        .unsafe_to_repeat();
        self.call(&req).await
    }

    async fn list_server_private_networks(
        &self,
        zone: &str,
        filter: &AttachmentFilter,
    ) -> Result<Vec<ServerPrivateNetwork>, ApiError> {
        let path = format!(
            "/baremetal/v3/zones/{}/server-private-networks",
            segment(zone)?
        );
        let mut query = vec![order()];
        if let Some(server) = &filter.server_id {
            query.push(("server_id", server.clone()));
        }
        if let Some(pn) = &filter.private_network_id {
            query.push(("private_network_id", pn.clone()));
        }
        if let Some(project) = &filter.project_id {
            query.push(("project_id", project.clone()));
        }
        let req = Request::new(
            Api::ElasticMetal,
            "GET /baremetal/v3/server-private-networks",
            Patience::Long,
            &Method::GET,
            &path,
        )
        .query(&query);
        let attachments: Vec<ServerPrivateNetwork> = self
            .list_all(req, Paging::BodyTotal, "server_private_networks")
            .await?;
        Ok(attachments
            .into_iter()
            .filter(|a| filter.matches(a))
            .collect())
    }

    async fn detach_private_network(
        &self,
        zone: &str,
        server_id: &str,
        private_network_id: &str,
    ) -> Result<(), ApiError> {
        let rest = format!("/private-networks/{}", segment(private_network_id)?);
        let path = bm_server_path("v3", zone, server_id, &rest)?;
        let req = Request::new(
            Api::ElasticMetal,
            "DELETE /baremetal/v3/servers/{server_id}/private-networks/{private_network_id}",
            Patience::Long,
            &Method::DELETE,
            &path,
        );
        gone_is_done(self.send(&req).await.map(drop))
    }
}

#[async_trait]
impl InstancePrivateNics for ScalewayClient {
    async fn create_private_nic(
        &self,
        zone: &str,
        server_id: &str,
        req: &CreatePrivateNicRequest,
    ) -> Result<PrivateNic, ApiError> {
        let path = nic_path(zone, server_id, "")?;
        let body = serde_json::to_value(req)
            .map_err(|e| ApiError::Invalid(format!("encoding private NIC request: {e}")))?;
        // Made while answering Create, like the server's own order.
        let req = Request::new(
            Api::Instance,
            "POST /instance/v1/servers/{server_id}/private_nics",
            Patience::Short,
            &Method::POST,
            &path,
        )
        .body(Body::Json(&body))
        .unsafe_to_repeat();
        self.call::<NicEnvelope>(&req).await.map(|e| e.private_nic)
    }

    async fn list_private_nics(
        &self,
        zone: &str,
        server_id: &str,
    ) -> Result<Vec<PrivateNic>, ApiError> {
        let path = nic_path(zone, server_id, "")?;
        let req = Request::new(
            Api::Instance,
            "GET /instance/v1/servers/{server_id}/private_nics",
            Patience::Short,
            &Method::GET,
            &path,
        );
        let nics: Vec<PrivateNic> = self
            .list_all(req, Paging::BodyOrHeader, "private_nics")
            .await?;
        // A NIC of another server would be attached to the wrong node.
        Ok(nics
            .into_iter()
            .filter(|n| n.server_id == server_id)
            .collect())
    }

    async fn get_private_nic(
        &self,
        zone: &str,
        server_id: &str,
        nic_id: &str,
    ) -> Result<PrivateNic, ApiError> {
        let path = nic_path(zone, server_id, &format!("/{}", segment(nic_id)?))?;
        let req = Request::new(
            Api::Instance,
            "GET /instance/v1/servers/{server_id}/private_nics/{private_nic_id}",
            Patience::Long,
            &Method::GET,
            &path,
        );
        self.call::<NicEnvelope>(&req).await.map(|e| e.private_nic)
    }

    async fn delete_private_nic(
        &self,
        zone: &str,
        server_id: &str,
        nic_id: &str,
    ) -> Result<(), ApiError> {
        let path = nic_path(zone, server_id, &format!("/{}", segment(nic_id)?))?;
        let req = Request::new(
            Api::Instance,
            "DELETE /instance/v1/servers/{server_id}/private_nics/{private_nic_id}",
            Patience::Short,
            &Method::DELETE,
            &path,
        );
        gone_is_done(self.send(&req).await.map(drop))
    }
}

#[cfg(test)]
#[path = "client_tests.rs"]
mod tests;
