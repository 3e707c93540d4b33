//! Serves the Talos test image over HTTP on loopback, like Image Factory or a
//! mirror would, counting downloads so a scenario can prove the image was fetched.
//! Optionally at a fixed bandwidth, so that the transfer takes the time a
//! real image takes on a real link (and imaging lasts long enough to observe).

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use anyhow::{Context, Result};
use axum::Router;
use axum::extract::{Path as UrlPath, State};
use axum::http::StatusCode;
use axum::response::IntoResponse;
use axum::routing::get;

#[derive(Clone)]
struct Served {
    bytes: Arc<Vec<u8>>,
    file_name: Arc<String>,
    downloads: Arc<AtomicU64>,
    bytes_per_second: Option<u64>,
    transfers: Arc<Mutex<Vec<Transfer>>>,
    /// Images served for one `{version}` only (see [`ImageServer::serve_version`]).
    by_version: VersionImages,
}

/// Version -> file bytes, for the versions that have their own image.
type VersionImages = Arc<Mutex<std::collections::BTreeMap<String, Arc<Vec<u8>>>>>;

/// One download as the server saw it: wall-clock start (request received)
/// and end (last byte handed to the socket, or the client went away).
#[derive(Debug, Clone, PartialEq)]
pub struct Transfer {
    pub started: chrono::DateTime<chrono::Utc>,
    pub finished: Option<chrono::DateTime<chrono::Utc>>,
    /// Bytes handed to the connection.
    pub bytes: u64,
    /// True when every byte was sent.
    pub complete: bool,
}

pub struct ImageServer {
    pub addr: SocketAddr,
    pub file_name: String,
    /// Size of the served (compressed) file.
    pub size: u64,
    pub bytes_per_second: Option<u64>,
    downloads: Arc<AtomicU64>,
    transfers: Arc<Mutex<Vec<Transfer>>>,
    by_version: VersionImages,
    task: tokio::task::JoinHandle<()>,
}

impl ImageServer {
    /// Serves `file` at `/image/{schematic}/{version}/{file_name}` for any schematic/version.
    pub async fn start(file: &Path) -> Result<ImageServer> {
        Self::start_with_rate(file, None).await
    }

    /// Like [`Self::start`], sending at most `bytes_per_second` per download
    /// when given.
    pub async fn start_with_rate(
        file: &Path,
        bytes_per_second: Option<u64>,
    ) -> Result<ImageServer> {
        Self::start_on(file, bytes_per_second, std::net::Ipv4Addr::LOCALHOST.into()).await
    }

    /// Like [`Self::start_with_rate`], listening on `ip` (a stack in a
    /// cluster serves the Pods on this host's address on the cluster's
    /// network).
    pub async fn start_on(
        file: &Path,
        bytes_per_second: Option<u64>,
        ip: std::net::IpAddr,
    ) -> Result<ImageServer> {
        anyhow::ensure!(
            bytes_per_second != Some(0),
            "image bandwidth must be positive"
        );
        let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
        let file_name = file
            .file_name()
            .context("image path")?
            .to_string_lossy()
            .to_string();
        let downloads = Arc::new(AtomicU64::new(0));
        let transfers = Arc::new(Mutex::new(Vec::new()));
        let size = bytes.len() as u64;
        let by_version = VersionImages::default();
        let state = Served {
            bytes: Arc::new(bytes),
            file_name: Arc::new(file_name.clone()),
            downloads: downloads.clone(),
            bytes_per_second,
            transfers: transfers.clone(),
            by_version: by_version.clone(),
        };
        let app = Router::new()
            .route("/image/{schematic}/{version}/{file}", get(serve))
            .with_state(state);
        let listener = tokio::net::TcpListener::bind((ip, 0)).await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(ImageServer {
            addr,
            file_name,
            size,
            bytes_per_second,
            downloads,
            transfers,
            by_version,
            task,
        })
    }

    /// The NodeClass `urlTemplate` pointing at this server.
    pub fn url_template(&self) -> String {
        let ext = if self.file_name.ends_with(".raw.zst") {
            "raw.zst"
        } else {
            "raw.xz"
        };
        format!(
            "http://{}/image/{{schematic}}/{{version}}/metal-{{arch}}.{ext}",
            self.addr
        )
    }

    pub fn downloads(&self) -> u64 {
        self.downloads.load(Ordering::SeqCst)
    }

    /// Every download so far, in order of arrival.
    pub fn transfers(&self) -> Vec<Transfer> {
        self.transfers
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }
}

impl ImageServer {
    /// From now on, serves `file` (rather than the image given at start) for
    /// URLs whose `{version}` is `version`: a second Talos release, so that a
    /// scenario can tell which release a disk holds. The file must have the
    /// compression (extension) of the start image, as one URL template
    /// serves both.
    pub fn serve_version(&self, version: &str, file: &Path) -> Result<()> {
        let name = file
            .file_name()
            .context("image path")?
            .to_string_lossy()
            .to_string();
        let ext = |n: &str| n.ends_with(".raw.zst");
        anyhow::ensure!(
            ext(&name) == ext(&self.file_name),
            "{name} is not compressed like {}",
            self.file_name
        );
        let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
        self.by_version
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .insert(version.to_string(), Arc::new(bytes));
        Ok(())
    }
}

/// The sha256 that the header of a talos-sim `.raw.xz` image announces for
/// its payload: what talos-sim reports for a disk holding that image.
pub fn payload_sha256(path: &Path) -> Result<String> {
    use std::io::Read;
    let f = std::fs::File::open(path).with_context(|| format!("opening {}", path.display()))?;
    let mut dec = liblzma::read::XzDecoder::new(f);
    let mut header = vec![0u8; 4096];
    dec.read_exact(&mut header)?;
    let text = String::from_utf8_lossy(&header);
    text.lines()
        .find_map(|l| {
            l.strip_prefix("payload-sha256: ")
                .map(|s| s.trim_matches('\0').trim().to_string())
        })
        .context("image header without payload-sha256")
}

impl Drop for ImageServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(
    State(s): State<Served>,
    UrlPath((_schematic, version, file)): UrlPath<(String, String, String)>,
) -> impl IntoResponse {
    // A version with its own image (a second Talos release) gets that one.
    let own = s
        .by_version
        .lock()
        .unwrap_or_else(|e| e.into_inner())
        .get(&version)
        .cloned();
    let s = match own {
        Some(bytes) => Served { bytes, ..s },
        None => s,
    };
    // Any metal-<arch> name maps to the one image; the arch check is talos-sim's job.
    let wanted_ext = if s.file_name.ends_with(".raw.zst") {
        ".raw.zst"
    } else {
        ".raw.xz"
    };
    if !file.starts_with("metal-") || !file.ends_with(wanted_ext) {
        return (StatusCode::NOT_FOUND, Vec::new()).into_response();
    }
    s.downloads.fetch_add(1, Ordering::SeqCst);
    let index = {
        let mut t = s.transfers.lock().unwrap_or_else(|e| e.into_inner());
        t.push(Transfer {
            started: chrono::Utc::now(),
            finished: None,
            bytes: 0,
            complete: false,
        });
        t.len() - 1
    };
    let (tx, rx) = tokio::sync::mpsc::channel::<Result<bytes::Bytes, std::io::Error>>(2);
    tokio::spawn(send_paced(s, index, tx));
    let body = axum::body::Body::from_stream(tokio_stream::wrappers::ReceiverStream::new(rx));
    (
        StatusCode::OK,
        [(axum::http::header::CONTENT_TYPE, "application/octet-stream")],
        body,
    )
        .into_response()
}

/// Sends the image in 64 KiB chunks, each no earlier than the configured
/// bandwidth allows (measured from the start, so pauses are not accumulated),
/// and records when the transfer ended.
async fn send_paced(
    s: Served,
    index: usize,
    tx: tokio::sync::mpsc::Sender<Result<bytes::Bytes, std::io::Error>>,
) {
    const CHUNK: usize = 64 * 1024;
    let start = tokio::time::Instant::now();
    let all = bytes::Bytes::from(s.bytes.as_ref().clone());
    let mut sent = 0usize;
    let mut complete = true;
    while sent < all.len() {
        let end = (sent + CHUNK).min(all.len());
        if let Some(rate) = s.bytes_per_second {
            let due = std::time::Duration::from_secs_f64(sent as f64 / rate as f64);
            tokio::time::sleep_until(start + due).await;
        }
        if tx.send(Ok(all.slice(sent..end))).await.is_err() {
            complete = false;
            break;
        }
        sent = end;
    }
    if complete && let Some(rate) = s.bytes_per_second {
        // The last chunk also takes its share of the link.
        let due = std::time::Duration::from_secs_f64(sent as f64 / rate as f64);
        tokio::time::sleep_until(start + due).await;
    }
    let mut t = s.transfers.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(t) = t.get_mut(index) {
        t.finished = Some(chrono::Utc::now());
        t.bytes = sent as u64;
        t.complete = complete;
    }
}
