//! The Instance API v1 calls of [`ScalewayClient`]: a list of requests on
//! the shared machinery of `scaleway/http.rs`. Lists are paged by
//! `X-Total-Count` (the bodies carry no `total_count`).

use std::collections::BTreeMap;

use async_trait::async_trait;
use reqwest::Method;
use serde::Deserialize;
use serde_json::json;

use super::{
    Availability, CreateServerRequest, Image, ImageFilter, Instance, SecurityGroup, Server,
    ServerAction, ServerFilter, ServerPatch, ServerType, Task, TypeAvailability,
};
use crate::scaleway::http::{Api, Body, Paging, Patience, Request, segment};
use crate::scaleway::{ApiError, ScalewayClient};

fn zone_path(zone: &str, rest: &str) -> Result<String, ApiError> {
    Ok(format!("/instance/v1/zones/{}{}", segment(zone)?, rest))
}

fn server_path(zone: &str, id: &str, rest: &str) -> Result<String, ApiError> {
    zone_path(zone, &format!("/servers/{}{rest}", segment(id)?))
}

fn instance<'a>(
    endpoint: &'static str,
    patience: Patience,
    method: &'a Method,
    path: &'a str,
) -> Request<'a> {
    Request::new(Api::Instance, endpoint, patience, method, path)
}

/// `{"server": {...}}`, the envelope of every single-server answer.
#[derive(Deserialize)]
struct ServerEnvelope {
    server: Server,
}

#[derive(Deserialize)]
struct TaskEnvelope {
    task: Task,
}

#[derive(Deserialize)]
struct ImageEnvelope {
    image: Image,
}

#[derive(Deserialize)]
struct SecurityGroupEnvelope {
    security_group: SecurityGroup,
}

#[async_trait]
impl Instance for ScalewayClient {
    async fn list_server_types(
        &self,
        zone: &str,
    ) -> Result<BTreeMap<String, ServerType>, ApiError> {
        let path = zone_path(zone, "/products/servers")?;
        let req = instance(
            "GET /instance/v1/products/servers",
            Patience::Long,
            &Method::GET,
            &path,
        );
        self.list_map(req, Paging::HeaderTotal, "servers").await
    }

    async fn list_server_availability(
        &self,
        zone: &str,
    ) -> Result<BTreeMap<String, Availability>, ApiError> {
        let path = zone_path(zone, "/products/servers/availability")?;
        let req = instance(
            "GET /instance/v1/products/servers/availability",
            Patience::Long,
            &Method::GET,
            &path,
        );
        let map: BTreeMap<String, TypeAvailability> =
            self.list_map(req, Paging::HeaderTotal, "servers").await?;
        Ok(map
            .into_iter()
            .map(|(name, a)| (name, a.availability))
            .collect())
    }

    async fn create_server(
        &self,
        zone: &str,
        req: &CreateServerRequest,
    ) -> Result<Server, ApiError> {
        let path = zone_path(zone, "/servers")?;
        let body = serde_json::to_value(req)
            .map_err(|e| ApiError::Invalid(format!("encoding create request: {e}")))?;
        let req = instance(
            "POST /instance/v1/servers",
            Patience::Short,
            &Method::POST,
            &path,
        )
        .body(Body::Json(&body))
        .unsafe_to_repeat();
        self.call::<ServerEnvelope>(&req).await.map(|e| e.server)
    }

    async fn get_server(&self, zone: &str, id: &str) -> Result<Server, ApiError> {
        let path = server_path(zone, id, "")?;
        let req = instance(
            "GET /instance/v1/servers/{server_id}",
            Patience::Long,
            &Method::GET,
            &path,
        );
        self.call::<ServerEnvelope>(&req).await.map(|e| e.server)
    }

    async fn list_servers(
        &self,
        zone: &str,
        filter: &ServerFilter,
    ) -> Result<Vec<Server>, ApiError> {
        let path = zone_path(zone, "/servers")?;
        let mut query: Vec<(&str, String)> = Vec::new();
        if !filter.tags.is_empty() {
            query.push(("tags", filter.tags.join(",")));
        }
        if let Some(name) = &filter.name {
            query.push(("name", name.clone()));
        }
        if let Some(project) = &filter.project {
            query.push(("project", project.clone()));
        }
        let req = instance(
            "GET /instance/v1/servers",
            Patience::Short,
            &Method::GET,
            &path,
        )
        .query(&query);
        let servers: Vec<Server> = self.list_all(req, Paging::HeaderTotal, "servers").await?;
        Ok(servers.into_iter().filter(|s| filter.matches(s)).collect())
    }

    async fn update_server(
        &self,
        zone: &str,
        id: &str,
        patch: &ServerPatch,
    ) -> Result<Server, ApiError> {
        let path = server_path(zone, id, "")?;
        let body = serde_json::to_value(patch)
            .map_err(|e| ApiError::Invalid(format!("encoding server patch: {e}")))?;
        let req = instance(
            "PATCH /instance/v1/servers/{server_id}",
            Patience::Short,
            &Method::PATCH,
            &path,
        )
        .body(Body::Json(&body));
        self.call::<ServerEnvelope>(&req).await.map(|e| e.server)
    }

    async fn delete_server(&self, zone: &str, id: &str) -> Result<(), ApiError> {
        let path = server_path(zone, id, "")?;
        let req = instance(
            "DELETE /instance/v1/servers/{server_id}",
            Patience::Short,
            &Method::DELETE,
            &path,
        );
        self.send(&req).await.map(drop)
    }

    async fn server_action(
        &self,
        zone: &str,
        id: &str,
        action: ServerAction,
    ) -> Result<Task, ApiError> {
        if action == ServerAction::Other {
            return Err(ApiError::Invalid("unknown server action".into()));
        }
        let path = server_path(zone, id, "/action")?;
        let body = json!({ "action": action });
        // A repeated action after a lost answer could, say, power a server
        // back on that a terminate had stopped: retried only when the API
        // certainly did not act.
        let req = instance(
            "POST /instance/v1/servers/{server_id}/action",
            Patience::Short,
            &Method::POST,
            &path,
        )
        .body(Body::Json(&body))
        .unsafe_to_repeat();
        self.call::<TaskEnvelope>(&req).await.map(|e| e.task)
    }

    async fn set_user_data(
        &self,
        zone: &str,
        id: &str,
        key: &str,
        value: &str,
    ) -> Result<(), ApiError> {
        let path = server_path(zone, id, &format!("/user_data/{}", segment(key)?))?;
        let req = instance(
            "PATCH /instance/v1/servers/{server_id}/user_data/{key}",
            Patience::Short,
            &Method::PATCH,
            &path,
        )
        .body(Body::Text(value));
        self.send(&req).await.map(drop)
    }

    async fn get_user_data(&self, zone: &str, id: &str, key: &str) -> Result<String, ApiError> {
        let path = server_path(zone, id, &format!("/user_data/{}", segment(key)?))?;
        let req = instance(
            "GET /instance/v1/servers/{server_id}/user_data/{key}",
            Patience::Long,
            &Method::GET,
            &path,
        );
        let reply = self.send(&req).await?;
        String::from_utf8(reply.bytes.to_vec())
            .map_err(|_| ApiError::Unavailable("user data is not UTF-8".into()))
    }

    async fn delete_user_data(&self, zone: &str, id: &str, key: &str) -> Result<(), ApiError> {
        let path = server_path(zone, id, &format!("/user_data/{}", segment(key)?))?;
        let req = instance(
            "DELETE /instance/v1/servers/{server_id}/user_data/{key}",
            Patience::Long,
            &Method::DELETE,
            &path,
        );
        self.send(&req).await.map(drop)
    }

    async fn delete_ip(&self, zone: &str, id: &str) -> Result<(), ApiError> {
        let path = zone_path(zone, &format!("/ips/{}", segment(id)?))?;
        let req = instance(
            "DELETE /instance/v1/ips/{ip_id}",
            Patience::Short,
            &Method::DELETE,
            &path,
        );
        self.send(&req).await.map(drop)
    }

    async fn list_images(&self, zone: &str, filter: &ImageFilter) -> Result<Vec<Image>, ApiError> {
        let path = zone_path(zone, "/images")?;
        let mut query: Vec<(&str, String)> = Vec::new();
        if let Some(name) = &filter.name {
            query.push(("name", name.clone()));
        }
        if !filter.tags.is_empty() {
            query.push(("tags", filter.tags.join(",")));
        }
        if let Some(project) = &filter.project {
            query.push(("project", project.clone()));
        }
        if let Some(arch) = filter.arch {
            let arch = serde_json::to_value(arch)
                .ok()
                .and_then(|v| v.as_str().map(str::to_string))
                .ok_or_else(|| ApiError::Invalid("unknown image architecture".into()))?;
            query.push(("arch", arch));
        }
        let req = instance(
            "GET /instance/v1/images",
            Patience::Long,
            &Method::GET,
            &path,
        )
        .query(&query);
        let images: Vec<Image> = self.list_all(req, Paging::HeaderTotal, "images").await?;
        Ok(images.into_iter().filter(|i| filter.matches(i)).collect())
    }

    async fn get_image(&self, zone: &str, id: &str) -> Result<Image, ApiError> {
        let path = zone_path(zone, &format!("/images/{}", segment(id)?))?;
        let req = instance(
            "GET /instance/v1/images/{image_id}",
            Patience::Long,
            &Method::GET,
            &path,
        );
        self.call::<ImageEnvelope>(&req).await.map(|e| e.image)
    }

    async fn get_security_group(&self, zone: &str, id: &str) -> Result<SecurityGroup, ApiError> {
        let path = zone_path(zone, &format!("/security_groups/{}", segment(id)?))?;
        let req = instance(
            "GET /instance/v1/security_groups/{security_group_id}",
            Patience::Long,
            &Method::GET,
            &path,
        );
        self.call::<SecurityGroupEnvelope>(&req)
            .await
            .map(|e| e.security_group)
    }
}

#[cfg(test)]
#[path = "client_tests.rs"]
mod tests;
