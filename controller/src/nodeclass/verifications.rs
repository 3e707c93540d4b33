//! The whole-image checksum verifications of this process, keyed by (URL,
//! expected sha256): each pair is downloaded once, in the background, however
//! many NodeClasses and reconciles ask for it. A verification that failed
//! (download or decompression error) is retried after [`RETRY_AFTER`].

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tracing::{info, warn};

use super::conditions::VerifyState;
use super::image_check::{self, Verification};

/// A failed verification is started again after this long.
pub const RETRY_AFTER: Duration = Duration::from_secs(60);

#[derive(Debug, Clone)]
enum Entry {
    Running,
    Done(Verification, Instant),
}

#[derive(Clone, Default)]
pub struct Verifications {
    entries: Arc<Mutex<HashMap<(String, String), Entry>>>,
}

impl Verifications {
    /// Where the verification of `url` against `expected` stands, starting it
    /// when needed. `verified_before`: the NodeClass already says this
    /// generation's image matched (a restart): taken as done, not downloaded
    /// again; every install still checks what it wrote.
    pub fn state(
        &self,
        http: &reqwest::Client,
        url: &str,
        expected: &str,
        verified_before: bool,
    ) -> VerifyState {
        let key = (url.to_string(), expected.to_string());
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        match entries.get(&key) {
            Some(Entry::Running) => return VerifyState::Running,
            Some(Entry::Done(Verification::Failed(_), at)) if at.elapsed() >= RETRY_AFTER => {}
            Some(Entry::Done(v, _)) => return VerifyState::Done(v.clone()),
            None if verified_before => {
                // The byte count is not known after a restart.
                let v = Verification::Matches { bytes: 0 };
                entries.insert(key, Entry::Done(v.clone(), Instant::now()));
                return VerifyState::Done(v);
            }
            None => {}
        }
        entries.insert(key.clone(), Entry::Running);
        drop(entries);
        let (http, entries) = (http.clone(), self.entries.clone());
        info!(
            url,
            "verifying the sha256 of the Talos image (whole download)"
        );
        tokio::spawn(async move {
            let started = Instant::now();
            let v = image_check::verify(&http, &key.0, &key.1).await;
            let elapsed_s = started.elapsed().as_secs_f64();
            match &v {
                Verification::Matches { bytes } => {
                    info!(url = %key.0, bytes, elapsed_s, "Talos image sha256 verified")
                }
                Verification::Mismatch { actual, bytes } => {
                    warn!(url = %key.0, expected = %key.1, %actual, bytes, elapsed_s, "Talos image sha256 mismatch")
                }
                Verification::Failed(error) => {
                    warn!(url = %key.0, %error, elapsed_s, "Talos image verification failed; retried later")
                }
            }
            let mut entries = entries.lock().unwrap_or_else(|e| e.into_inner());
            // Dropped meanwhile (no NodeClass pins it any more): not recorded.
            if entries.contains_key(&key) {
                entries.insert(key, Entry::Done(v, Instant::now()));
            }
        });
        VerifyState::Running
    }

    /// Forgets the pairs no NodeClass pins any more.
    pub fn retain(&self, in_use: &[(String, String)]) {
        self.entries
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .retain(|k, _| in_use.contains(k));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use wiremock::matchers::method;
    use wiremock::{Mock, MockServer, ResponseTemplate};

    async fn settle(
        v: &Verifications,
        http: &reqwest::Client,
        url: &str,
        sha: &str,
    ) -> VerifyState {
        // Up to 30 s: the check downloads and hashes on a blocking thread,
        // slow on a loaded machine; a finished one returns at once.
        for _ in 0..3000 {
            match v.state(http, url, sha, false) {
                VerifyState::Running => tokio::time::sleep(Duration::from_millis(10)).await,
                done => return done,
            }
        }
        panic!("verification of {url} never finished");
    }

    #[tokio::test]
    async fn each_pair_is_downloaded_once_and_a_restart_does_not_download_again() {
        let server = MockServer::start().await;
        Mock::given(method("GET"))
            .respond_with(ResponseTemplate::new(200).set_body_bytes(b"raw image".to_vec()))
            .mount(&server)
            .await;
        let http = reqwest::Client::new();
        let v = Verifications::default();
        let url = format!("{}/metal-amd64.raw", server.uri());
        let wrong = "0".repeat(64);
        assert_eq!(v.state(&http, &url, &wrong, false), VerifyState::Running);
        let done = settle(&v, &http, &url, &wrong).await;
        assert!(
            matches!(
                done,
                VerifyState::Done(Verification::Mismatch { bytes: 9, .. })
            ),
            "{done:?}"
        );
        // Asked again (another reconcile, another NodeClass): the cached answer.
        assert_eq!(v.state(&http, &url, &wrong, false), done);
        assert_eq!(server.received_requests().await.unwrap().len(), 1);

        // What a previous process verified is not downloaded again.
        let other = "1".repeat(64);
        assert_eq!(
            v.state(&http, &url, &other, true),
            VerifyState::Done(Verification::Matches { bytes: 0 })
        );
        assert_eq!(server.received_requests().await.unwrap().len(), 1);

        // Pairs no NodeClass pins any more are forgotten.
        v.retain(&[(url.clone(), other.clone())]);
        assert_eq!(v.state(&http, &url, &wrong, false), VerifyState::Running);
    }
}
