//! IAM SSH keys of the simulated world.

use super::*;

impl World {
    pub fn ssh_keys(&self) -> &[SshKeyRecord] {
        &self.ssh_keys
    }

    pub fn ssh_key(&self, id: &str) -> Result<&SshKeyRecord, ApiError> {
        self.ssh_keys
            .iter()
            .find(|k| k.id == id)
            .ok_or_else(|| ApiError::NotFound {
                resource: "ssh_key".into(),
                resource_id: id.into(),
            })
    }

    pub fn create_ssh_key(
        &mut self,
        now: SimTime,
        name: String,
        key: crate::ssh_key::PublicKey,
        project_id: Option<String>,
    ) -> model::SshKey {
        let record = SshKeyRecord {
            id: self.uuid(),
            name,
            public_key: key.stored,
            fingerprint: key.fingerprint,
            created_at: now,
            updated_at: now,
            project_id: project_id.unwrap_or_else(|| self.config.project_id.clone()),
            organization_id: self.config.organization_id.clone(),
            disabled: false,
        };
        tracing::info!(ssh_key_id = %record.id, project_id = %record.project_id, "ssh key created");
        let wire = record.to_wire();
        self.ssh_keys.push(record);
        wire
    }

    pub fn delete_ssh_key(&mut self, id: &str) -> Result<(), ApiError> {
        self.ssh_key(id)?;
        self.ssh_keys.retain(|k| k.id != id);
        Ok(())
    }

    pub(super) fn resolve_keys(&self, ids: &[String]) -> Result<Vec<String>, ApiError> {
        ids.iter()
            .map(|id| {
                self.ssh_keys
                    .iter()
                    .find(|k| &k.id == id)
                    .map(|k| k.public_key.clone())
                    .ok_or_else(|| {
                        ApiError::invalid(
                            "ssh_key_ids",
                            "constraint",
                            format!("unknown SSH key {id}"),
                        )
                    })
            })
            .collect()
    }

    /// The keys the rescue image trusts: the project's enabled IAM keys plus the
    /// ones named on the call, without duplicates.
    pub(super) fn rescue_keys(
        &self,
        project_id: &str,
        extra: &[String],
    ) -> Result<Vec<String>, ApiError> {
        let mut keys: Vec<String> = self
            .ssh_keys
            .iter()
            .filter(|k| k.project_id == project_id && !k.disabled)
            .map(|k| k.public_key.clone())
            .collect();
        for key in self.resolve_keys(extra)? {
            if !keys.contains(&key) {
                keys.push(key);
            }
        }
        Ok(keys)
    }
}
