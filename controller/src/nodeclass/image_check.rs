//! Checks of a NodeClass's Talos image made before any server is ordered: an
//! image that cannot be downloaded, or whose content is not the one the
//! NodeClass pins, would otherwise be found only after a server was ordered
//! (billed), rebooted into rescue and had its disk overwritten.
//!
//! Two checks, of very different cost:
//! - [`probe`]: a `HEAD` (or, when the server does not allow `HEAD`, a
//!   `GET` of the first byte) of the resolved URL, on every reconcile;
//! - [`verify`]: the whole image downloaded, decompressed (`.raw.xz` or
//!   `.raw.zst`, as the install does with `xz -d`/`zstd -d`) and hashed, compared
//!   with `image.sha256`: the same bytes the install writes and hashes. It runs
//!   only when `image.sha256` is set, once per (URL, sha256) for the life of the
//!   process, in the background; nothing is stored (streamed through the hash).

use std::io::Write;
use std::time::Duration;

use reqwest::StatusCode;
use sha2::{Digest, Sha256};

/// What a `HEAD` of the image URL says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Probe {
    Reachable,
    /// 404 or 410: nothing at this URL.
    NotFound(u16),
    /// Another 4xx (401, 403, ...): the server refuses to serve it.
    Refused(u16),
    /// No HTTP answer at all (DNS, connection refused, TLS), twice in a row.
    Unreachable(String),
    /// 5xx, 429 or a timeout: says nothing about the URL.
    Transient(String),
}

/// Per request of [`probe`].
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);
/// A connection error is retried once after this, so that a blip of the
/// controller's own network does not turn a NodeClass not-ready.
const PROBE_RETRY_AFTER: Duration = Duration::from_secs(1);

pub async fn probe(http: &reqwest::Client, url: &str) -> Probe {
    match probe_once(http, url).await {
        Probe::Unreachable(_) => {
            tokio::time::sleep(PROBE_RETRY_AFTER).await;
            probe_once(http, url).await
        }
        other => other,
    }
}

async fn probe_once(http: &reqwest::Client, url: &str) -> Probe {
    let head = http.head(url).timeout(PROBE_TIMEOUT).send().await;
    match head {
        Ok(r) if matches!(r.status().as_u16(), 405 | 501) => {
            // HEAD not allowed: ask for the first byte instead.
            let get = http
                .get(url)
                .header(reqwest::header::RANGE, "bytes=0-0")
                .timeout(PROBE_TIMEOUT)
                .send()
                .await;
            match get {
                Ok(r) => classify_status(r.status()),
                Err(e) => classify_error(&e),
            }
        }
        Ok(r) => classify_status(r.status()),
        Err(e) => classify_error(&e),
    }
}

fn classify_status(status: StatusCode) -> Probe {
    match status.as_u16() {
        200..=299 => Probe::Reachable,
        404 | 410 => Probe::NotFound(status.as_u16()),
        429 => Probe::Transient(format!("HTTP {status}")),
        400..=499 => Probe::Refused(status.as_u16()),
        _ => Probe::Transient(format!("HTTP {status}")),
    }
}

fn classify_error(e: &reqwest::Error) -> Probe {
    // Messages of reqwest errors carry the URL, never a body.
    let text = error_chain(e);
    if e.is_timeout() {
        Probe::Transient(text)
    } else {
        Probe::Unreachable(text)
    }
}

fn error_chain(e: &dyn std::error::Error) -> String {
    let mut text = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        text.push_str(": ");
        text.push_str(&s.to_string());
        source = s.source();
    }
    text
}

/// The outcome of downloading and hashing the whole image.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verification {
    /// The decompressed image hashes to the expected sha256.
    Matches { bytes: u64 },
    /// It hashes to something else.
    Mismatch { actual: String, bytes: u64 },
    /// The download or the decompression failed: says nothing about the
    /// checksum (the reachability probe reports a missing image).
    Failed(String),
}

/// Stops a download that makes no progress for this long.
const VERIFY_READ_TIMEOUT: Duration = Duration::from_secs(60);

/// Downloads `url`, decompresses it by its extension and compares the sha256
/// of the result with `expected` (lowercase hex). Decompression runs on a
/// blocking thread; memory use is a few chunks, whatever the image size.
pub async fn verify(http: &reqwest::Client, url: &str, expected: &str) -> Verification {
    let mut response = match http.get(url).send().await {
        Ok(r) if r.status().is_success() => r,
        Ok(r) => return Verification::Failed(format!("GET {url}: HTTP {}", r.status())),
        Err(e) => return Verification::Failed(format!("GET {url}: {}", error_chain(&e))),
    };
    let format = Format::of(url);
    let (tx, mut rx) = tokio::sync::mpsc::channel::<bytes::Bytes>(8);
    let hasher = tokio::task::spawn_blocking(move || -> std::io::Result<(String, u64)> {
        let mut sink = format.decoder(HashWriter::default());
        while let Some(chunk) = rx.blocking_recv() {
            sink.write_all(&chunk)?;
        }
        let out = sink.finish()?;
        Ok((hex(&out.hasher.finalize()), out.bytes))
    });
    let mut download_error = None;
    loop {
        match tokio::time::timeout(VERIFY_READ_TIMEOUT, response.chunk()).await {
            Ok(Ok(Some(chunk))) => {
                if tx.send(chunk).await.is_err() {
                    // The decoder stopped: its error is reported below.
                    break;
                }
            }
            Ok(Ok(None)) => break,
            Ok(Err(e)) => {
                download_error = Some(format!("downloading {url}: {}", error_chain(&e)));
                break;
            }
            Err(_) => {
                download_error = Some(format!(
                    "downloading {url}: no data for {}s",
                    VERIFY_READ_TIMEOUT.as_secs()
                ));
                break;
            }
        }
    }
    drop(tx);
    let hashed = hasher.await;
    if let Some(e) = download_error {
        return Verification::Failed(e);
    }
    match hashed {
        Ok(Ok((actual, bytes))) if actual == expected => Verification::Matches { bytes },
        Ok(Ok((actual, bytes))) => Verification::Mismatch { actual, bytes },
        Ok(Err(e)) => Verification::Failed(format!("decompressing {url}: {e}")),
        Err(e) => Verification::Failed(format!("hashing {url}: {e}")),
    }
}

/// The compression the install's `curl | xz -d` (or `zstd -d`) undoes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Format {
    Xz,
    Zstd,
    Raw,
}

impl Format {
    fn of(url: &str) -> Self {
        if url.ends_with(".xz") {
            Format::Xz
        } else if url.ends_with(".zst") {
            Format::Zstd
        } else {
            Format::Raw
        }
    }

    fn decoder(self, out: HashWriter) -> Decoder {
        match self {
            // `xz -d` decodes concatenated streams too.
            Format::Xz => Decoder::Xz(liblzma::write::XzDecoder::new_multi_decoder(out)),
            Format::Zstd => match zstd::stream::write::Decoder::new(out) {
                Ok(d) => Decoder::Zstd(d),
                // Only fails when zstd cannot allocate its context.
                Err(e) => Decoder::Broken(e.to_string()),
            },
            Format::Raw => Decoder::Raw(out),
        }
    }
}

enum Decoder {
    Xz(liblzma::write::XzDecoder<HashWriter>),
    Zstd(zstd::stream::write::Decoder<'static, HashWriter>),
    Raw(HashWriter),
    Broken(String),
}

impl Decoder {
    fn write_all(&mut self, buf: &[u8]) -> std::io::Result<()> {
        match self {
            Decoder::Xz(d) => d.write_all(buf),
            Decoder::Zstd(d) => d.write_all(buf),
            Decoder::Raw(w) => w.write_all(buf),
            Decoder::Broken(e) => Err(std::io::Error::other(e.clone())),
        }
    }

    /// Flushes the decoder; an image cut short is an error here.
    fn finish(self) -> std::io::Result<HashWriter> {
        match self {
            Decoder::Xz(d) => d.finish(),
            Decoder::Zstd(mut d) => {
                d.flush()?;
                d.finish()
            }
            Decoder::Raw(w) => Ok(w),
            Decoder::Broken(e) => Err(std::io::Error::other(e)),
        }
    }
}

#[derive(Default)]
struct HashWriter {
    hasher: Sha256,
    bytes: u64,
}

impl Write for HashWriter {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.hasher.update(buf);
        self.bytes += buf.len() as u64;
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use wiremock::matchers::{method, path};
    use wiremock::{Mock, MockServer, ResponseTemplate};

    /// reqwest is built without a default rustls provider: install the one
    /// the binary installs, rather than depend on another test having done
    /// it first in this process.
    fn http_client() -> reqwest::Client {
        let _ = rustls::crypto::ring::default_provider().install_default();
        reqwest::Client::new()
    }

    fn payload() -> Vec<u8> {
        (0..300_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect()
    }

    fn sha(bytes: &[u8]) -> String {
        hex(&Sha256::digest(bytes))
    }

    fn xz(bytes: &[u8]) -> Vec<u8> {
        let mut e = liblzma::write::XzEncoder::new(Vec::new(), 1);
        e.write_all(bytes).unwrap();
        e.finish().unwrap()
    }

    fn zst(bytes: &[u8]) -> Vec<u8> {
        zstd::stream::encode_all(bytes, 1).unwrap()
    }

    async fn serving(file: &str, body: Vec<u8>) -> (MockServer, String) {
        let server = MockServer::start().await;
        Mock::given(path(format!("/{file}")))
            .respond_with(ResponseTemplate::new(200).set_body_bytes(body))
            .mount(&server)
            .await;
        let url = format!("{}/{file}", server.uri());
        (server, url)
    }

    #[tokio::test]
    async fn the_decompressed_image_is_compared_with_the_pinned_sha256() {
        let http = http_client();
        let raw = payload();
        for (file, body) in [("metal.raw.xz", xz(&raw)), ("metal.raw.zst", zst(&raw))] {
            let (_server, url) = serving(file, body).await;
            assert_eq!(
                verify(&http, &url, &sha(&raw)).await,
                Verification::Matches {
                    bytes: raw.len() as u64
                },
                "{file}"
            );
            assert_eq!(
                verify(&http, &url, &"0".repeat(64)).await,
                Verification::Mismatch {
                    actual: sha(&raw),
                    bytes: raw.len() as u64
                },
                "{file}"
            );
        }
    }

    #[tokio::test]
    async fn a_truncated_or_missing_image_is_a_failure_not_a_mismatch() {
        let http = http_client();
        let raw = payload();
        let mut cut = xz(&raw);
        cut.truncate(cut.len() / 2);
        let (_server, url) = serving("cut.raw.xz", cut).await;
        let got = verify(&http, &url, &sha(&raw)).await;
        assert!(matches!(got, Verification::Failed(_)), "{got:?}");

        let got = verify(&http, &format!("{}/missing.raw.xz", _server.uri()), "ab").await;
        assert!(
            matches!(&got, Verification::Failed(e) if e.contains("404")),
            "{got:?}"
        );
    }

    #[tokio::test]
    async fn probe_classifies_answers() {
        let http = http_client();
        let server = MockServer::start().await;
        for (p, status) in [
            ("/ok", 200),
            ("/gone", 410),
            ("/denied", 403),
            ("/busy", 503),
        ] {
            Mock::given(method("HEAD"))
                .and(path(p))
                .respond_with(ResponseTemplate::new(status))
                .mount(&server)
                .await;
        }
        // A server without HEAD: the first byte is asked for instead.
        Mock::given(method("HEAD"))
            .and(path("/nohead"))
            .respond_with(ResponseTemplate::new(405))
            .mount(&server)
            .await;
        Mock::given(method("GET"))
            .and(path("/nohead"))
            .respond_with(ResponseTemplate::new(206))
            .mount(&server)
            .await;
        let at = |p: &str| format!("{}{p}", server.uri());
        assert_eq!(probe(&http, &at("/ok")).await, Probe::Reachable);
        assert_eq!(probe(&http, &at("/nohead")).await, Probe::Reachable);
        assert_eq!(probe(&http, &at("/missing")).await, Probe::NotFound(404));
        assert_eq!(probe(&http, &at("/gone")).await, Probe::NotFound(410));
        assert_eq!(probe(&http, &at("/denied")).await, Probe::Refused(403));
        assert!(matches!(
            probe(&http, &at("/busy")).await,
            Probe::Transient(_)
        ));
        // Nothing listens on port 1 of loopback.
        assert!(matches!(
            probe(&http, "http://127.0.0.1:1/metal.raw.xz").await,
            Probe::Unreachable(_)
        ));
    }
}
