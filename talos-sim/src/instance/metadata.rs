//! The metadata service of a VM (`http://169.254.42.42/user_data/<key>`
//! inside a real one), played by emsim's admin endpoint
//! `GET /_emsim/instance/servers/{id}/user_data/{key}`. The value holds a
//! bootstrap token: it is never printed, only its size.

use std::fmt;
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(10);

/// A user data value. `Debug` shows its size only.
#[derive(Clone, PartialEq, Eq)]
pub struct UserData(Vec<u8>);

impl UserData {
    pub fn new(bytes: impl Into<Vec<u8>>) -> Self {
        Self(bytes.into())
    }

    pub fn bytes(&self) -> &[u8] {
        &self.0
    }

    pub fn len(&self) -> usize {
        self.0.len()
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn is_blank(&self) -> bool {
        self.0.iter().all(u8::is_ascii_whitespace)
    }
}

impl fmt::Debug for UserData {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "<{} bytes>", self.0.len())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum MetadataError {
    #[error("the metadata service is unreachable: {0}")]
    Unreachable(String),
    #[error("the metadata service answered {0}")]
    Status(u16),
}

/// A client of the metadata service for every VM.
#[derive(Debug, Clone)]
pub struct Metadata {
    client: reqwest::Client,
    base: String,
}

impl Metadata {
    pub fn new(emsim_url: &str) -> anyhow::Result<Self> {
        crate::install_crypto_provider();
        let client = reqwest::Client::builder()
            .no_proxy()
            .timeout(TIMEOUT)
            .build()?;
        Ok(Self {
            client,
            base: emsim_url.trim_end_matches('/').to_string(),
        })
    }

    /// The value of `key`; `None` when it is not set (404, as the real
    /// service answers).
    pub async fn user_data(
        &self,
        server_id: &str,
        key: &str,
    ) -> Result<Option<UserData>, MetadataError> {
        let url = format!(
            "{}/_emsim/instance/servers/{server_id}/user_data/{key}",
            self.base
        );
        let response = self
            .client
            .get(&url)
            .send()
            .await
            .map_err(|e| MetadataError::Unreachable(e.to_string()))?;
        match response.status() {
            s if s.is_success() => {
                let body = response
                    .bytes()
                    .await
                    .map_err(|e| MetadataError::Unreachable(e.to_string()))?;
                Ok(Some(UserData::new(body.to_vec())))
            }
            reqwest::StatusCode::NOT_FOUND => Ok(None),
            s => Err(MetadataError::Status(s.as_u16())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_data_debug_shows_the_size_only() {
        let data = UserData::new(b"cluster:\n  token: abc123.0123456789abcdef\n".to_vec());
        let debug = format!("{data:?}");
        assert_eq!(debug, "<42 bytes>");
        assert!(!UserData::new(b"x".to_vec()).is_blank());
        assert!(UserData::new(b" \n\t".to_vec()).is_blank());
        assert!(UserData::new(Vec::new()).is_blank());
    }
}
