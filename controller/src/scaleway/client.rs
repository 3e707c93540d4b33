//! The Elastic Metal and IAM calls of [`ScalewayClient`]: a list of requests
//! on the shared machinery of `http.rs` (auth, timeouts, retries, pacing,
//! error classification, paging).

use async_trait::async_trait;
use reqwest::Method;
use serde_json::{Value, json};

use super::http::{Api, Body, Paging, Patience, Request, segment};
#[cfg(test)]
use super::http::{ClientConfig, RetryPolicy, SecretKey};
use super::{
    ApiError, BootType, CreateServerRequest, ElasticMetal, Offer, ScalewayClient, Server,
    ServerFilter, SshKey, SubscriptionPeriod,
};

fn zone_path(zone: &str, rest: &str) -> Result<String, ApiError> {
    Ok(format!("/baremetal/v1/zones/{}{}", segment(zone)?, rest))
}

fn em<'a>(
    endpoint: &'static str,
    patience: Patience,
    method: &'a Method,
    path: &'a str,
) -> Request<'a> {
    Request::new(Api::ElasticMetal, endpoint, patience, method, path)
}

#[async_trait]
impl ElasticMetal for ScalewayClient {
    async fn list_offers(
        &self,
        zone: &str,
        period: SubscriptionPeriod,
    ) -> Result<Vec<Offer>, ApiError> {
        let path = zone_path(zone, "/offers")?;
        let query = [("subscription_period", period.as_str().to_string())];
        let req = em("GET /offers", Patience::Long, &Method::GET, &path).query(&query);
        let offers: Vec<Offer> = self.list_all(req, Paging::BodyTotal, "offers").await?;
        // Filtered again: an offer of the other period would be priced wrong.
        Ok(offers
            .into_iter()
            .filter(|o| period.matches(&o.subscription_period))
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
        let req = em("POST /servers", Patience::Short, &Method::POST, &path)
            .body(Body::Json(&body))
            .unsafe_to_repeat();
        self.call(&req).await
    }

    async fn get_server(&self, zone: &str, id: &str) -> Result<Server, ApiError> {
        let path = zone_path(zone, &format!("/servers/{}", segment(id)?))?;
        let req = em(
            "GET /servers/{server_id}",
            Patience::Long,
            &Method::GET,
            &path,
        );
        self.call(&req).await
    }

    async fn get_server_if_idle(&self, zone: &str, id: &str) -> Result<Option<Server>, ApiError> {
        const ENDPOINT: &str = "GET /servers/{server_id}";
        let path = zone_path(zone, &format!("/servers/{}", segment(id)?))?;
        if !self.idle_turn(ENDPOINT).await {
            return Ok(None);
        }
        let req = em(ENDPOINT, Patience::Taken, &Method::GET, &path);
        self.call(&req).await.map(Some)
    }

    async fn list_servers(
        &self,
        zone: &str,
        filter: &ServerFilter,
    ) -> Result<Vec<Server>, ApiError> {
        let path = zone_path(zone, "/servers")?;
        let mut query: Vec<(&str, String)> =
            filter.tags.iter().map(|t| ("tags", t.clone())).collect();
        if let Some(name) = &filter.name {
            query.push(("name", name.clone()));
        }
        if let Some(project) = &filter.project_id {
            query.push(("project_id", project.clone()));
        }
        let req = em("GET /servers", Patience::Short, &Method::GET, &path).query(&query);
        let servers: Vec<Server> = self.list_all(req, Paging::BodyTotal, "servers").await?;
        Ok(servers.into_iter().filter(|s| filter.matches(s)).collect())
    }

    async fn delete_server(&self, zone: &str, id: &str) -> Result<Server, ApiError> {
        let path = zone_path(zone, &format!("/servers/{}", segment(id)?))?;
        let req = em(
            "DELETE /servers/{server_id}",
            Patience::Short,
            &Method::DELETE,
            &path,
        );
        self.call(&req).await
    }

    async fn update_server_tags(
        &self,
        zone: &str,
        id: &str,
        tags: &[String],
    ) -> Result<Server, ApiError> {
        let path = zone_path(zone, &format!("/servers/{}", segment(id)?))?;
        let body = json!({ "tags": tags });
        // Setting the same tags twice leaves the same server: safe to repeat.
        let req = em(
            "PATCH /servers/{server_id}",
            Patience::Short,
            &Method::PATCH,
            &path,
        )
        .body(Body::Json(&body));
        self.call(&req).await
    }

    async fn reboot_server(
        &self,
        zone: &str,
        id: &str,
        boot_type: BootType,
        ssh_key_ids: &[String],
    ) -> Result<Server, ApiError> {
        let path = zone_path(zone, &format!("/servers/{}/reboot", segment(id)?))?;
        let keys = if ssh_key_ids.is_empty() {
            Value::Null
        } else {
            json!(ssh_key_ids)
        };
        let body = json!({ "boot_type": boot_type, "ssh_key_ids": keys });
        let req = em(
            "POST /servers/{server_id}/reboot",
            Patience::Long,
            &Method::POST,
            &path,
        )
        .body(Body::Json(&body))
        .unsafe_to_repeat();
        self.call(&req).await
    }

    async fn list_ssh_keys(&self, project_id: &str) -> Result<Vec<SshKey>, ApiError> {
        let query = [("project_id", project_id.to_string())];
        let req = Request::new(
            Api::Iam,
            "GET /iam/v1alpha1/ssh-keys",
            Patience::Long,
            &Method::GET,
            "/iam/v1alpha1/ssh-keys",
        )
        .query(&query);
        self.list_all(req, Paging::BodyTotal, "ssh_keys").await
    }
}

#[cfg(test)]
#[path = "client_tests.rs"]
mod tests;
