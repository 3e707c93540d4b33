//! Serves the Talos test image over HTTP on loopback, like Image Factory or a
//! mirror would, counting downloads so a scenario can prove the image was fetched.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

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
}

pub struct ImageServer {
    pub addr: SocketAddr,
    pub file_name: String,
    downloads: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl ImageServer {
    /// Serves `file` at `/image/{schematic}/{version}/{file_name}` for any schematic/version.
    pub async fn start(file: &Path) -> Result<ImageServer> {
        let bytes = std::fs::read(file).with_context(|| format!("reading {}", file.display()))?;
        let file_name = file
            .file_name()
            .context("image path")?
            .to_string_lossy()
            .to_string();
        let downloads = Arc::new(AtomicU64::new(0));
        let state = Served {
            bytes: Arc::new(bytes),
            file_name: Arc::new(file_name.clone()),
            downloads: downloads.clone(),
        };
        let app = Router::new()
            .route("/image/{schematic}/{version}/{file}", get(serve))
            .with_state(state);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Ok(ImageServer {
            addr,
            file_name,
            downloads,
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
}

impl Drop for ImageServer {
    fn drop(&mut self) {
        self.task.abort();
    }
}

async fn serve(
    State(s): State<Served>,
    UrlPath((_schematic, _version, file)): UrlPath<(String, String, String)>,
) -> impl IntoResponse {
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
    (StatusCode::OK, s.bytes.as_ref().clone()).into_response()
}
