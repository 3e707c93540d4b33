//! Server extras of the simulated world: OS images, options, installs and
//! the migration to monthly billing.

use super::*;

impl World {
    pub fn os_list(&self, zone: &str) -> Vec<model::Os> {
        extras::os_list(zone)
    }

    pub fn options(&self, zone: &str) -> Vec<model::OptionInfo> {
        extras::options(zone)
    }

    /// `POST /servers/{id}/install`: only on a delivered, running server, with
    /// an OS of the zone and at least one known SSH key. The install runs on
    /// the API side only (see the README): no power events are emitted.
    pub fn install(
        &mut self,
        now: SimTime,
        zone: &str,
        id: &str,
        req: InstallRequest,
    ) -> Result<model::Server, ApiError> {
        let record = self.server(zone, id)?;
        record.check(Request::Reboot)?;
        if record.status == Status::Stopped {
            return Err(ApiError::message(
                axum::http::StatusCode::BAD_REQUEST,
                "Server must be started to be installed",
            ));
        }
        if record
            .install
            .as_ref()
            .is_some_and(|i| i.status != InstallStatus::Completed)
        {
            return Err(ApiError::TransientState {
                resource: "baremetal_server".into(),
                resource_id: id.into(),
                current_state: "installing".into(),
            });
        }
        let Some(os) = extras::os_list(zone)
            .into_iter()
            .find(|o| o.id == req.os_id)
        else {
            return Err(ApiError::NotFound {
                resource: "baremetal_os".into(),
                resource_id: req.os_id,
            });
        };
        if req.ssh_key_ids.is_empty() {
            return Err(ApiError::invalid(
                "ssh_key_ids",
                "required",
                "at least one SSH key is needed to install an OS",
            ));
        }
        self.resolve_keys(&req.ssh_key_ids)?;
        let user = req
            .user
            .or(os.user.default_value)
            .unwrap_or_else(|| "root".into());
        let server = self.servers.get_mut(id).expect("checked above");
        server.install = Some(InstallRecord {
            os_id: os.id,
            hostname: req.hostname,
            ssh_key_ids: req.ssh_key_ids,
            user,
            started_at: now,
            status: InstallStatus::ToInstall,
        });
        server.actions.push(ActionRecord {
            action: "install",
            at: now,
        });
        server.updated_at = now;
        tracing::info!(server_id = %id, "install requested");
        Ok(server.to_wire())
    }

    /// `POST /servers/{id}/migrate-offer-monthly`: moves a delivered server on an
    /// hourly offer to the offer's monthly twin.
    pub fn migrate_monthly(
        &mut self,
        now: SimTime,
        zone: &str,
        id: &str,
    ) -> Result<model::Server, ApiError> {
        let record = self.server(zone, id)?;
        match record.status {
            Status::Delivering | Status::OutOfStock => return Err(ApiError::not_delivered()),
            Status::Deleting => return Err(record.check(Request::Delete).expect_err("deleting")),
            _ => {}
        }
        let offer = self
            .offer(zone, &record.offer_id)
            .expect("a server's offer stays in the catalog");
        if offer.subscription_period == "monthly" {
            return Err(ApiError::message(
                axum::http::StatusCode::BAD_REQUEST,
                "Server is already billed monthly",
            ));
        }
        let Some(monthly) = offer.monthly_offer_id else {
            return Err(ApiError::message(
                axum::http::StatusCode::BAD_REQUEST,
                "Offer has no monthly subscription",
            ));
        };
        let server = self.servers.get_mut(id).expect("checked above");
        server.offer_id = monthly;
        server.actions.push(ActionRecord {
            action: "migrate_offer_monthly",
            at: now,
        });
        server.updated_at = now;
        tracing::info!(server_id = %id, "server migrated to monthly billing");
        Ok(server.to_wire())
    }

    /// `POST /servers/{id}/options/{option_id}`: enables a manageable option.
    pub fn add_option(
        &mut self,
        now: SimTime,
        zone: &str,
        id: &str,
        option_id: &str,
        expires_at: Option<String>,
    ) -> Result<model::Server, ApiError> {
        let record = self.server(zone, id)?;
        if matches!(record.status, Status::Delivering | Status::OutOfStock) {
            return Err(ApiError::not_delivered());
        }
        let Some(option) = extras::options(zone)
            .into_iter()
            .find(|o| o.id == option_id)
        else {
            return Err(ApiError::NotFound {
                resource: "baremetal_option".into(),
                resource_id: option_id.into(),
            });
        };
        if !option.manageable {
            return Err(ApiError::message(
                axum::http::StatusCode::BAD_REQUEST,
                "Option is not manageable",
            ));
        }
        if record.options.iter().any(|o| o.id == option_id) {
            return Err(ApiError::message(
                axum::http::StatusCode::BAD_REQUEST,
                "Option is already enabled",
            ));
        }
        let server = self.servers.get_mut(id).expect("checked above");
        server.options.push(model::ServerOption {
            id: option.id,
            name: option.name,
            status: "option_status_enable".into(),
            manageable: option.manageable,
            expires_at,
            kind: option.kind,
        });
        server.updated_at = now;
        Ok(server.to_wire())
    }

    /// `DELETE /servers/{id}/options/{option_id}`.
    pub fn delete_option(
        &mut self,
        now: SimTime,
        zone: &str,
        id: &str,
        option_id: &str,
    ) -> Result<model::Server, ApiError> {
        let record = self.server(zone, id)?;
        if !record.options.iter().any(|o| o.id == option_id) {
            return Err(ApiError::NotFound {
                resource: "baremetal_option".into(),
                resource_id: option_id.into(),
            });
        }
        let is_private_network = record
            .options
            .iter()
            .any(|o| o.id == option_id && o.kind.private_network.is_some());
        if is_private_network && !self.pn.attachments_of(id).is_empty() {
            // INFERENCE: the real refusal is not recorded; the option cannot
            // go while the server is on a Private Network.
            return Err(ApiError::message(
                axum::http::StatusCode::BAD_REQUEST,
                "Private Networks are attached to the server",
            ));
        }
        let server = self.servers.get_mut(id).expect("checked above");
        server.options.retain(|o| o.id != option_id);
        server.updated_at = now;
        Ok(server.to_wire())
    }
}
