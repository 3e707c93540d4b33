//! A VM's boot, in the order Talos acquires its machine config: the STATE
//! partition (a config this VM booted before, so a reboot does not need the
//! user data the provider deletes once the node joined), then the platform
//! (the user data key `cloud-init`), then maintenance mode, whose API
//! answers as on Elastic Metal.

use std::time::Duration;

use crate::image::ImageHeader;
use crate::machine_config;
use crate::model::VmBoot;
use crate::os::Boot;
use crate::records::{OsState, UserDataOutcome, UserDataRead};
use crate::validator::Verdict;

use super::USER_DATA_KEY;
use super::metadata::UserData;

const MIN_RETRY: Duration = Duration::from_millis(500);
const MAX_RETRY: Duration = Duration::from_secs(5);

impl Boot {
    pub(crate) async fn cloud(self, vm: VmBoot) {
        // No image on a disk to check: the VM runs the image it was
        // created from.
        let header = ImageHeader {
            version: vm.image.version.clone(),
            arch: vm.image.arch.clone(),
            payload_length: 0,
            payload_sha256: vm.image.id.replace('-', ""),
        };
        self.record.update(|r| {
            r.disk.image_version = Some(header.version.clone());
            r.disk.image_sha256 = None;
            r.boot_error = None;
        });
        tracing::info!(server_id = %self.server_id(), boot = vm.boot, image = %vm.image.name, "VM booting");
        let installed = self.disk.installed_config().unwrap_or_else(|e| {
            tracing::warn!(server_id = %self.server_id(), error = %e, "cannot read the installed config");
            None
        });
        let yaml = match installed {
            Some(yaml) => yaml,
            None => match self.platform_config().await {
                Some(yaml) => yaml,
                None => match self.maintenance_mode(&header).await {
                    Some(yaml) => yaml,
                    None => return,
                },
            },
        };
        self.record.set_state(OsState::Configured);
        self.settle();
        let cfg = match machine_config::parse(&yaml) {
            Ok(cfg) => cfg,
            Err(e) => return self.fail(format!("the installed machine config is invalid: {e}")),
        };
        self.join_cluster(cfg, &header).await;
    }

    /// The config in the user data, kept on the STATE partition once read;
    /// `None` (and why in `boot_error`) when there is none to boot from.
    async fn platform_config(&self) -> Option<String> {
        let Some(metadata) = self.settings.metadata.clone() else {
            self.maintenance_because("no metadata service (talos-sim was started without emsim)");
            return None;
        };
        let mut retry = MIN_RETRY;
        let data = loop {
            match metadata.user_data(self.server_id(), USER_DATA_KEY).await {
                Ok(data) => break data,
                Err(e) => {
                    // Talos keeps asking until the platform answers.
                    self.read(UserDataOutcome::Unreachable, 0);
                    tracing::warn!(server_id = %self.server_id(), error = %e, "cannot read the user data");
                    self.record
                        .update(|r| r.boot_error = Some(format!("reading the user data: {e}")));
                    self.settle();
                    tokio::time::sleep(retry).await;
                    retry = (retry * 2).min(MAX_RETRY);
                }
            }
        };
        let data = match data {
            None => {
                self.read(UserDataOutcome::Missing, 0);
                self.maintenance_because(&format!(
                    "the user data has no key {USER_DATA_KEY} (the metadata service answered 404)"
                ));
                return None;
            }
            Some(data) if data.is_blank() => {
                self.read(UserDataOutcome::Empty, data.len());
                self.maintenance_because(&format!("the user data key {USER_DATA_KEY} is empty"));
                return None;
            }
            Some(data) => data,
        };
        match self.check(&data).await {
            Ok(yaml) => {
                self.read(UserDataOutcome::Accepted, data.len());
                if let Err(e) = self.disk.install_config(&yaml) {
                    tracing::warn!(server_id = %self.server_id(), error = %e, "cannot keep the machine config on the STATE partition");
                }
                tracing::info!(server_id = %self.server_id(), bytes = data.len(), "machine config read from the user data");
                Some(yaml)
            }
            Err(why) => {
                self.read(UserDataOutcome::Refused, data.len());
                self.maintenance_because(&format!(
                    "the machine config in the user data key {USER_DATA_KEY} is invalid: {why}"
                ));
                None
            }
        }
    }

    /// Talos' machinery when talos-sim has it, then talos-sim's own checks:
    /// the same as a config applied in maintenance mode.
    async fn check(&self, data: &UserData) -> Result<String, String> {
        let yaml = std::str::from_utf8(data.bytes())
            .map_err(|_| "failed to decode config: not valid UTF-8".to_string())?;
        if let Some(validator) = &self.settings.config_validator {
            match validator.check(data.bytes()).await {
                Ok(Verdict::Valid { .. }) => {}
                Ok(Verdict::Invalid(message) | Verdict::Unparsable(message)) => {
                    return Err(message.trim_end().to_string());
                }
                Err(e) => return Err(format!("talos-sim: the config validator failed: {e:#}")),
            }
        }
        machine_config::parse(yaml).map_err(|e| e.to_string().trim_end().to_string())?;
        Ok(yaml.to_string())
    }

    fn read(&self, outcome: UserDataOutcome, bytes: usize) {
        self.record.update(|r| {
            r.user_data_reads.push(UserDataRead {
                at: chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
                key: USER_DATA_KEY.into(),
                outcome,
                bytes,
            })
        });
    }

    fn maintenance_because(&self, why: &str) {
        tracing::info!(server_id = %self.server_id(), reason = %why, "no machine config: maintenance mode");
        self.record
            .update(|r| r.boot_error = Some(format!("maintenance mode: {why}")));
    }
}
