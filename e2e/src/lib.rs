#![forbid(unsafe_code)]
//! End-to-end harness: a real control plane (local binaries built from the
//! Kubernetes Go modules, or an existing kubeconfig such as kind), the
//! simulators, the provider and upstream Karpenter core through the bridge.

pub mod conformance;
pub mod controlplane;
pub mod hybrid;
pub mod image;
pub mod kubeutil;
pub mod mission;
pub mod netns;
pub mod perf;
pub mod procs;
pub mod progress;
pub mod reboot;
pub mod scenario;
pub mod sims;
pub mod stack;
pub mod standby;
pub mod talosconfig;
pub mod wait;

/// rustls is built with the ring provider only; reqwest needs it installed.
pub fn install_crypto() {
    let _ = rustls::crypto::ring::default_provider().install_default();
}

/// Logs to stderr (captured by the test runner unless `--nocapture`).
pub fn init_tracing() {
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,kube=warn".into()),
        )
        .with_test_writer()
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .try_init();
}
