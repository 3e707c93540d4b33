//! `talos-sim`: the simulated servers' operating system, and `make-image`.
#![forbid(unsafe_code)]

use std::fs::File;
use std::io::BufWriter;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use talos_sim::image::{self, Compression};
use talos_sim::instance::metadata::Metadata;
use talos_sim::manager::Simulator;
use talos_sim::os::Settings;
use talos_sim::private_links::PrivateLinks;
use talos_sim::timings::{Profile, WriteRate};
use talos_sim::validator::ConfigValidator;
use talos_sim::{admin, follower};

/// Plays the OS of the servers emsim simulates: rescue SSH, the boot check
/// of the disk image, Talos' maintenance API and a kubelet stand-in.
#[derive(Parser)]
#[command(name = "talos-sim", version, args_conflicts_with_subcommands = true)]
struct Cli {
    #[command(subcommand)]
    command: Option<Sub>,
    #[command(flatten)]
    run: RunArgs,
}

#[derive(Subcommand)]
enum Sub {
    /// Writes a test image (`.raw`, `.raw.xz` or `.raw.zst`), deterministically.
    MakeImage(MakeImageArgs),
}

#[derive(Args)]
struct RunArgs {
    /// Base URL of emsim; talos-sim follows `<url>/_emsim/events`.
    #[arg(long, env = "TALOS_SIM_EMSIM_URL")]
    emsim_url: Option<String>,
    /// Where the servers' disk files live.
    #[arg(long, default_value = "talos-sim-state")]
    state_dir: PathBuf,
    /// Port of the rescue SSH server on each server's address.
    #[arg(long, default_value_t = 22)]
    ssh_port: u16,
    /// Port of the Talos maintenance API on each server's address.
    #[arg(long, default_value_t = 50000)]
    talos_port: u16,
    /// Listen address of the admin API (`/_talossim/...`).
    #[arg(long, default_value = "127.0.0.1:7090")]
    admin_listen: SocketAddr,
    /// Delay between answering ApplyConfiguration and the reboot that
    /// closes the maintenance API, in milliseconds.
    #[arg(long, default_value_t = 500)]
    install_delay_ms: u64,
    /// How long ApplyConfiguration takes before it reads the request, in
    /// milliseconds (tests use it to hold an install in `maintenance`).
    #[arg(long, default_value_t = 0)]
    apply_latency_ms: u64,
    /// `talos-config` (talos-sim/conformance/build.sh): every applied config
    /// is validated by Talos' machinery with `<path> validate`, and refused
    /// with Talos' message when it fails, before talos-sim's own checks.
    #[arg(long, env = "TALOS_SIM_CONFIG_VALIDATOR")]
    config_validator: Option<PathBuf>,
    /// How often emsim's VMs are read (`<url>/_emsim/instance/servers`),
    /// in milliseconds.
    #[arg(long, default_value_t = 500)]
    instance_poll_ms: u64,
    /// How often a configured machine reads its Private Network links
    /// (`<url>/_emsim/private-links?server=<id>`), in milliseconds.
    #[arg(long, default_value_t = 1000)]
    private_links_poll_ms: u64,
    /// Timings profile. `default`: disk writes as fast as the host allows
    /// (what the test suites expect). `real`: a real machine's, for runs at
    /// emsim's time scale 1 next to `emsim --timings real`: rescue writes to
    /// the disk (`dd of=`, `tee`) at 150 MB/s. `--disk-write-mb-per-s`
    /// overrides it.
    #[arg(long, env = "TALOS_SIM_TIMINGS", default_value = "default", value_parser = str::parse::<Profile>)]
    timings: Profile,
    /// Rate of the rescue system's disk writes in MB/s (10^6 bytes), e.g.
    /// 150 for an SSD or NVMe; default: unpaced.
    #[arg(long, env = "TALOS_SIM_DISK_WRITE_MB_PER_S", value_parser = str::parse::<WriteRate>)]
    disk_write_mb_per_s: Option<WriteRate>,
}

impl RunArgs {
    /// The flag, or else the profile's rate.
    fn disk_write_rate(&self) -> Option<WriteRate> {
        self.disk_write_mb_per_s.or(self.timings.disk_write_rate())
    }
}

#[derive(Args)]
struct MakeImageArgs {
    /// Talos version written in the header (`v1.13.9`).
    #[arg(long)]
    version: String,
    /// Architecture written in the header (`amd64`, `arm64`).
    #[arg(long, default_value = "amd64")]
    arch: String,
    /// Uncompressed size, header included (`8MiB`, `64M`, `1048576`).
    #[arg(long, default_value = "8MiB")]
    size: String,
    /// Output file; `.xz` and `.zst` suffixes select the compression.
    #[arg(long)]
    out: PathBuf,
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Some(Sub::MakeImage(args)) => make_image(&args),
        None => tokio::runtime::Runtime::new()
            .context("starting the runtime")
            .and_then(|rt| rt.block_on(run(cli.run))),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("talos-sim: {e:#}");
            ExitCode::FAILURE
        }
    }
}

fn make_image(args: &MakeImageArgs) -> anyhow::Result<()> {
    let size =
        image::parse_size(&args.size).with_context(|| format!("invalid --size {:?}", args.size))?;
    let file =
        File::create(&args.out).with_context(|| format!("creating {}", args.out.display()))?;
    let header = image::write_image(
        &args.version,
        &args.arch,
        size,
        Compression::from_path(&args.out),
        BufWriter::new(file),
    )
    .with_context(|| format!("writing {}", args.out.display()))?;
    println!(
        "{}: Talos {} {} image, {size} bytes uncompressed, payload sha256 {}",
        args.out.display(),
        header.version,
        header.arch,
        header.payload_sha256
    );
    Ok(())
}

async fn run(args: RunArgs) -> anyhow::Result<()> {
    let disk_write_rate = args.disk_write_rate();
    let emsim_url = args
        .emsim_url
        .context("--emsim-url is required (or use `talos-sim make-image`)")?;
    talos_sim::install_crypto_provider();
    std::fs::create_dir_all(&args.state_dir)
        .with_context(|| format!("creating the state dir {}", args.state_dir.display()))?;
    let config_validator = args
        .config_validator
        .map(ConfigValidator::new)
        .transpose()?;
    let validator_path = config_validator
        .as_ref()
        .map(|v| v.program().display().to_string())
        .unwrap_or_default();
    let sim = Simulator::new(Settings {
        ssh_port: args.ssh_port,
        talos_port: args.talos_port,
        install_delay: Duration::from_millis(args.install_delay_ms),
        apply_latency: Duration::from_millis(args.apply_latency_ms),
        config_validator,
        metadata: Some(Metadata::new(&emsim_url)?),
        private_links: Some(PrivateLinks::new(&emsim_url)?),
        links_poll: Duration::from_millis(args.private_links_poll_ms.max(1)),
        disk_write_rate,
        ..Settings::new(args.state_dir)
    });
    let listener = tokio::net::TcpListener::bind(args.admin_listen)
        .await
        .with_context(|| format!("binding the admin API on {}", args.admin_listen))?;
    tracing::info!(
        admin = %args.admin_listen,
        %emsim_url,
        config_validator = %validator_path,
        timings = ?args.timings,
        disk_write_mb_per_s = disk_write_rate.map(|r| r.bytes_per_s() / 1e6),
        "talos-sim started"
    );
    let app = admin::app(sim.clone());
    tokio::spawn(async move {
        if let Err(e) = axum::serve(listener, app).await {
            tracing::error!(error = %e, "admin API stopped");
        }
    });
    let mut terminate = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())?;
    let instances = talos_sim::instance::follower::follow(
        &emsim_url,
        &*sim,
        Duration::from_millis(args.instance_poll_ms.max(1)),
    );
    tokio::select! {
        _ = follower::follow(&emsim_url, &*sim) => {}
        _ = instances => {}
        _ = tokio::signal::ctrl_c() => tracing::info!("interrupted"),
        _ = terminate.recv() => tracing::info!("terminated"),
    }
    sim.shutdown().await;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rate(args: &[&str]) -> Option<WriteRate> {
        let cli = Cli::try_parse_from(
            ["talos-sim", "--emsim-url", "http://e"]
                .into_iter()
                .chain(args.iter().copied()),
        )
        .expect("valid flags");
        cli.run.disk_write_rate()
    }

    #[test]
    fn the_real_profile_writes_at_150_mb_per_s_unless_told_otherwise() {
        assert_eq!(rate(&[]), None);
        assert_eq!(
            rate(&["--timings", "real"]),
            Some(WriteRate::mb_per_s(150.0))
        );
        assert_eq!(
            rate(&["--timings", "real", "--disk-write-mb-per-s", "40"]),
            Some(WriteRate::mb_per_s(40.0))
        );
        assert!(Cli::try_parse_from(["talos-sim", "--disk-write-mb-per-s", "0"]).is_err());
    }
}
