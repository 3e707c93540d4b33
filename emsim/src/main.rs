#![forbid(unsafe_code)]

use std::io::IsTerminal;
use std::net::SocketAddr;
use std::path::PathBuf;

use anyhow::Context;
use clap::Parser;
use emsim::catalog::Catalog;
use emsim::instance::InstanceCatalog;
use emsim::pn::{PnFile, PnTimings};
use emsim::sim::IpRange;
use emsim::state::{DEFAULT_PROJECT_ID, DEFAULT_SECRET_KEY};
use emsim::timings::{Profile, Span, TimingOverrides};
use emsim::{AppState, Config};
use tracing_subscriber::EnvFilter;

/// Simulator of the Scaleway Elastic Metal v1, Instance v1 (subset), Block v1 (volumes) and IAM SSH-key APIs.
#[derive(Debug, Parser)]
#[command(
    name = "emsim",
    version,
    about,
    after_help = "API: /baremetal/v1/zones/{zone}/..., /instance/v1/zones/{zone}/..., \
/block/v1/zones/{zone}/volumes and /iam/v1alpha1/ssh-keys (X-Auth-Token). \
Admin API (no auth): /_emsim/{healthz,events,servers,counters,reset,stock,quota,faults,clock} \
and /_emsim/instance/{servers,volumes,availability,quota}. \
Every endpoint and the fault kinds are documented in emsim/README.md."
)]
struct Args {
    /// Address to listen on.
    #[arg(long, env = "EMSIM_LISTEN", default_value = "127.0.0.1:7080")]
    listen: SocketAddr,
    /// Real seconds per simulated second: 0.01 makes every simulated duration 100x shorter.
    #[arg(long, env = "EMSIM_TIME_SCALE", default_value_t = 1.0)]
    time_scale: f64,
    /// Seed of every random choice (ids, passwords, delivery times, fault rates), so a run replays.
    #[arg(long, env = "EMSIM_SEED", default_value_t = 0)]
    seed: u64,
    /// Catalog file (JSON or YAML) replacing the seeded catalog.
    #[arg(long, env = "EMSIM_CATALOG")]
    catalog: Option<PathBuf>,
    /// Instance catalog file (JSON or YAML) replacing the seeded one.
    #[arg(long, env = "EMSIM_INSTANCE_CATALOG")]
    instance_catalog: Option<PathBuf>,
    /// Accepted X-Auth-Token value; repeat for several (env: comma-separated).
    #[arg(long = "secret-key", env = "EMSIM_SECRET_KEYS", value_delimiter = ',', hide_env_values = true,
          default_value = DEFAULT_SECRET_KEY)]
    secret_keys: Vec<String>,
    /// Project of the orders and SSH keys that name none.
    #[arg(long, env = "EMSIM_PROJECT_ID", default_value = DEFAULT_PROJECT_ID)]
    project_id: String,
    /// Organization owning the project (default: the project id, as for a default project).
    #[arg(long, env = "EMSIM_ORGANIZATION_ID")]
    organization_id: Option<String>,
    /// IPv4 block the servers' addresses come from (first host: .10).
    #[arg(long, env = "EMSIM_IP_RANGE", default_value = "127.77.0.0/16")]
    ip_range: IpRange,
    /// Calls per second allowed per endpoint before answering 429 (default: no limit).
    #[arg(long, env = "EMSIM_RATE_LIMIT")]
    rate_limit: Option<f64>,
    /// Timings profile. `default`: the catalogs' own (what the test suites
    /// expect: EM boots 12 s, VM boots 10 s, each offer's delivery). `real`:
    /// Scaleway's figures for runs at time scale 1: every EM delivery
    /// 225-287 s, EM boots (reboot or start, into rescue or normal) 180-300 s,
    /// VM poweron/reboot to running 45-75 s. The three flags below override it.
    #[arg(long, env = "EMSIM_TIMINGS", default_value = "default", value_parser = str::parse::<Profile>)]
    timings: Profile,
    /// Every Elastic Metal delivery, in simulated seconds (`240` or a range
    /// `180-300`, drawn with the seed), replacing the offers' own.
    #[arg(long, env = "EMSIM_DELIVERY_SECONDS", value_parser = str::parse::<Span>)]
    delivery_seconds: Option<Span>,
    /// Every Elastic Metal reboot or start, in simulated seconds (`180-300`),
    /// replacing the offers' `boot` (default 12).
    #[arg(long, env = "EMSIM_BOOT_SECONDS", value_parser = str::parse::<Span>)]
    boot_seconds: Option<Span>,
    /// An Instance's poweron or reboot until it runs, in simulated seconds
    /// (`45-75`; default 10).
    #[arg(long, env = "EMSIM_VM_BOOT_SECONDS", value_parser = str::parse::<Span>)]
    vm_boot_seconds: Option<Span>,
    /// Private Networks (JSON or YAML `{private_networks: [{name, region,
    /// subnets, ...}]}`) present from the start and after every reset.
    #[arg(long, env = "EMSIM_PRIVATE_NETWORKS")]
    private_networks: Option<PathBuf>,
    /// Simulated seconds an Elastic Metal Private Network attachment stays
    /// `attaching` (default 10).
    #[arg(long, env = "EMSIM_PN_ATTACH_SECONDS", default_value_t = PnTimings::default().attach)]
    pn_attach_seconds: f64,
    /// Simulated seconds an attachment stays `detaching` before it is gone
    /// (default 5).
    #[arg(long, env = "EMSIM_PN_DETACH_SECONDS", default_value_t = PnTimings::default().detach)]
    pn_detach_seconds: f64,
}

impl Args {
    fn timing_overrides(&self) -> TimingOverrides {
        TimingOverrides {
            delivery: self.delivery_seconds,
            boot: self.boot_seconds,
            vm_boot: self.vm_boot_seconds,
        }
        .or(self.timings.overrides())
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
    let args = Args::parse();
    let catalog = match &args.catalog {
        Some(path) => Catalog::load(path)?,
        None => Catalog::seeded(),
    };
    let offers = catalog.offers.len();
    let instance_catalog = match &args.instance_catalog {
        Some(path) => InstanceCatalog::load(path)?,
        None => InstanceCatalog::seeded(),
    };
    let instance_types = instance_catalog.types.len();
    let timings = args.timing_overrides();
    let private_networks = match &args.private_networks {
        Some(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            PnFile::parse(&text).with_context(|| format!("parsing {}", path.display()))?
        }
        None => Vec::new(),
    };
    let pn_timings = PnTimings {
        attach: args.pn_attach_seconds,
        detach: args.pn_detach_seconds,
        ..PnTimings::default()
    };
    let shown = |span: Option<Span>| span.map_or_else(|| "catalog".into(), |s| s.to_string());
    let state = AppState::new(Config {
        time_scale: args.time_scale,
        seed: args.seed,
        secret_keys: args.secret_keys,
        project_id: args.project_id.clone(),
        organization_id: args.organization_id,
        ip_range: args.ip_range,
        rate_limit: args.rate_limit,
        catalog,
        instance_catalog,
        sim_start: None,
        timings,
        private_networks,
        pn_timings,
    })?;
    let listener = tokio::net::TcpListener::bind(args.listen)
        .await
        .with_context(|| format!("binding {}", args.listen))?;
    tracing::info!(
        listen = %args.listen,
        time_scale = args.time_scale,
        seed = args.seed,
        offers,
        instance_types,
        ip_range = %args.ip_range,
        project_id = %args.project_id,
        timings = ?args.timings,
        delivery = %shown(timings.delivery),
        boot = %shown(timings.boot),
        vm_boot = %shown(timings.vm_boot),
        "emsim listening"
    );
    tokio::select! {
        result = emsim::serve(listener, state) => result.context("serving")?,
        _ = tokio::signal::ctrl_c() => tracing::info!("interrupted, exiting"),
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn overrides(args: &[&str]) -> TimingOverrides {
        Args::try_parse_from(std::iter::once("emsim").chain(args.iter().copied()))
            .expect("valid flags")
            .timing_overrides()
    }

    #[test]
    fn timings_flags_override_the_profile() {
        assert_eq!(overrides(&[]), TimingOverrides::default());
        let real = overrides(&["--timings", "real"]);
        assert_eq!(real.delivery, Some(Span::Between(225.0, 287.0)));
        assert_eq!(real.boot, Some(Span::Between(180.0, 300.0)));
        assert_eq!(real.vm_boot, Some(Span::Between(45.0, 75.0)));
        let mixed = overrides(&["--timings", "real", "--boot-seconds", "60"]);
        assert_eq!(mixed.boot, Some(Span::Fixed(60.0)));
        assert_eq!(mixed.vm_boot, real.vm_boot);
        let alone = overrides(&["--vm-boot-seconds", "50-70", "--delivery-seconds", "240"]);
        assert_eq!(alone.vm_boot, Some(Span::Between(50.0, 70.0)));
        assert_eq!(alone.delivery, Some(Span::Fixed(240.0)));
        assert_eq!(alone.boot, None);
        for bad in [["--timings", "fast"], ["--boot-seconds", "300-180"]] {
            let args = std::iter::once("emsim").chain(bad);
            assert!(Args::try_parse_from(args).is_err(), "{bad:?}");
        }
    }
}
