//! Command-line and environment configuration of `karpenter-scaleway serve`.

pub mod profile;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use clap::Args;

use crate::scaleway::{ApiError, ClientConfig, RetryPolicy, ScalewayClient, SecretKey};
use profile::{Env, Given, ProfileError};

/// `15s`, `200ms`, `5m`, `1h`, or a number of seconds.
pub fn parse_duration(text: &str) -> Result<Duration, String> {
    let text = text.trim();
    let split = text
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(text.len());
    let (number, unit) = text.split_at(split);
    let value: f64 = number
        .parse()
        .map_err(|_| format!("invalid duration {text:?} (expected e.g. 200ms, 15s, 5m, 1h)"))?;
    let seconds = match unit {
        "" | "s" => value,
        "ms" => value / 1000.0,
        "m" => value * 60.0,
        "h" => value * 3600.0,
        _ => return Err(format!("invalid duration unit in {text:?} (ms, s, m, h)")),
    };
    if !seconds.is_finite() || seconds < 0.0 {
        return Err(format!("invalid duration {text:?}"));
    }
    Ok(Duration::from_secs_f64(seconds))
}

/// A duration that is not zero (periods and lifetimes).
pub fn parse_positive_duration(text: &str) -> Result<Duration, String> {
    let d = parse_duration(text)?;
    if d.is_zero() {
        Err(format!("{text:?} must be longer than zero"))
    } else {
        Ok(d)
    }
}

/// Calls per second: a finite number, zero or more.
pub fn parse_rate(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(r) if r.is_finite() && r >= 0.0 => Ok(r),
        _ => Err(format!(
            "{text:?} is not a rate (calls per second, 0 or more)"
        )),
    }
}

/// A Scaleway zone name such as `fr-par-2`.
pub fn parse_zone(text: &str) -> Result<String, String> {
    let parts: Vec<&str> = text.split('-').collect();
    let ok = parts.len() == 3
        && parts[0].len() == 2
        && parts[1].len() == 3
        && parts
            .iter()
            .take(2)
            .all(|p| p.bytes().all(|b| b.is_ascii_lowercase()))
        && !parts[2].is_empty()
        && parts[2].bytes().all(|b| b.is_ascii_digit());
    if ok {
        Ok(text.to_string())
    } else {
        Err(format!("invalid zone {text:?} (expected e.g. fr-par-2)"))
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    Text,
    Json,
}

/// Scaleway API access. The five settings Scaleway's own tools share
/// (access key, secret key, project, API URL, default zone) come from these
/// flags, else the `SCW_*` variables, else the scw config file's profile,
/// with the precedence of the scw CLI and SDKs (`profile`).
#[derive(Debug, Clone, Args)]
pub struct ScalewayArgs {
    /// Access key id; informational only (requests authenticate with the
    /// secret key). Else SCW_ACCESS_KEY, else `access_key` of the scw profile.
    #[arg(long = "scw-access-key")]
    pub access_key: Option<String>,
    /// Secret key, sent as `X-Auth-Token`. Never logged. Else
    /// SCW_SECRET_KEY, else `secret_key` of the scw profile; required.
    #[arg(long = "scw-secret-key", value_parser = parse_secret_key)]
    pub secret_key: Option<SecretKey>,
    /// Project that servers are ordered in and IAM SSH keys are looked up
    /// in. Else SCW_DEFAULT_PROJECT_ID, else `default_project_id` of the scw
    /// profile; required.
    #[arg(long = "scw-project-id")]
    pub project_id: Option<String>,
    /// Base URL of the API (emsim's address in tests). Else SCW_API_URL,
    /// else `api_url` of the scw profile, else https://api.scaleway.com.
    #[arg(long = "scw-api-url")]
    pub api_url: Option<String>,
    /// Zone used when no zones are listed. Else SCW_DEFAULT_ZONE, else
    /// `default_zone` of the scw profile, else fr-par-2.
    #[arg(long = "default-zone", value_parser = parse_zone)]
    pub default_zone: Option<String>,
    /// Timeout of one HTTP request to the API.
    #[arg(long = "scw-api-timeout", env = "SCW_API_TIMEOUT", default_value = "30s", value_parser = parse_duration)]
    pub api_timeout: Duration,
    /// Calls per second per API endpoint (all zones together) the provider
    /// allows itself; a call beyond it waits for its turn. Keep it below
    /// the account's rate limit: unpaced, 100 installs at once made most of
    /// their calls refused ones (429s, each retried); see docs/figures.md,
    /// "Scale". 0 turns pacing off.
    #[arg(long = "scw-api-rate-limit", env = "SCW_API_RATE_LIMIT", default_value_t = 8.0,
        value_parser = parse_rate)]
    pub api_rate_limit: f64,
}

fn parse_secret_key(text: &str) -> Result<SecretKey, String> {
    Ok(SecretKey::new(text))
}

/// Scaleway API access once flags, environment and scw profile are merged.
#[derive(Debug, Clone)]
pub struct ScalewayAccess {
    pub access_key: Option<String>,
    pub secret_key: SecretKey,
    pub project_id: String,
    pub api_url: String,
    pub default_zone: String,
    pub api_timeout: Duration,
    pub api_rate_limit: f64,
    /// The scw profile read (`profile "prod" in PATH`), if a file was.
    pub profile: Option<String>,
    /// Warnings to show: deprecated variables, a config file others may read.
    pub notes: Vec<String>,
}

impl ScalewayArgs {
    /// Merges the flags with `env` and the scw config file it points to.
    pub fn resolve(&self, env: &Env) -> Result<ScalewayAccess, ProfileError> {
        let given = Given {
            access_key: self.access_key.clone(),
            secret_key: self.secret_key.clone(),
            project_id: self.project_id.clone(),
            api_url: self.api_url.clone(),
            default_zone: self.default_zone.clone(),
        };
        let r = profile::resolve(&given, env)?;
        Ok(ScalewayAccess {
            access_key: r.access_key,
            secret_key: r.secret_key,
            project_id: r.project_id,
            api_url: r.api_url,
            default_zone: r.default_zone,
            api_timeout: self.api_timeout,
            api_rate_limit: self.api_rate_limit,
            profile: r.profile,
            notes: r.notes,
        })
    }

    /// [`Self::resolve`] with the process environment.
    pub fn load(&self) -> Result<ScalewayAccess, ProfileError> {
        self.resolve(&Env::from_process()?)
    }
}

impl ScalewayAccess {
    /// The paced client every command uses.
    pub fn client(&self) -> Result<ScalewayClient, ApiError> {
        Ok(ScalewayClient::new(ClientConfig {
            api_url: self.api_url.clone(),
            secret_key: self.secret_key.clone(),
            request_timeout: self.api_timeout,
            retry: RetryPolicy::default(),
        })?
        .with_pacing(Some(self.api_rate_limit)))
    }

    /// Prints the notes on stderr (operator commands; `serve` logs them).
    pub fn print_notes(&self) {
        for note in &self.notes {
            eprintln!("warning: {note}");
        }
    }
}

/// Standby pools (`provider/standby`).
#[derive(Debug, Clone, Args)]
pub struct StandbyArgs {
    /// Period of the standby pass: resuming standby installs, ordering and
    /// releasing standby servers, publishing the reserved offerings.
    #[arg(long, env = "STANDBY_INTERVAL", default_value = "15s", value_parser = parse_positive_duration)]
    pub standby_interval: Duration,
    /// The length of a billed hour: paid hours count from a server's order
    /// in periods of this length. Change it only in simulations.
    #[arg(long, env = "BILLING_HOUR", default_value = "1h", value_parser = parse_positive_duration)]
    pub billing_hour: Duration,
    /// The length of a billed month (730 h: Scaleway's monthly price over
    /// 730 hours is its hourly equivalent). Change it only in simulations.
    #[arg(long, env = "BILLING_MONTH", default_value = "730h", value_parser = parse_positive_duration)]
    pub billing_month: Duration,
    /// An idle standby server is released this long before its paid period
    /// ends, so that the next period is not billed.
    #[arg(long, env = "STANDBY_RELEASE_MARGIN", default_value = "2m", value_parser = parse_positive_duration)]
    pub standby_release_margin: Duration,
}

impl StandbyArgs {
    pub fn periods(&self) -> crate::provider::standby::Periods {
        crate::provider::standby::Periods {
            hour: self.billing_hour,
            month: self.billing_month,
            release_margin: self.standby_release_margin,
        }
    }
}

#[derive(Debug, Clone, Args)]
pub struct ServeArgs {
    #[command(flatten)]
    pub scaleway: ScalewayArgs,
    /// Unix socket the CloudProvider gRPC service listens on (shared with the bridge).
    #[arg(
        long,
        env = "PROVIDER_SOCKET",
        default_value = "/var/run/karpenter/provider.sock"
    )]
    pub socket: PathBuf,
    /// Name of the cluster, written into the ownership tag of every server.
    #[arg(long, env = "CLUSTER_NAME")]
    pub cluster_name: String,
    /// Zones to serve, comma-separated. Default: the default zone
    /// (`--default-zone`).
    #[arg(long, env = "SCW_ZONES", value_delimiter = ',', value_parser = parse_zone)]
    pub zones: Vec<String>,
    /// Zones to serve Scaleway Instances (VMs) in, comma-separated, when the
    /// Instance CRD is installed. Default: the same as `--zones` (Elastic
    /// Metal is not sold in every zone that has VMs: fr-par-3, nl-ams-3,
    /// pl-waw-1, ...).
    #[arg(long, env = "SCW_INSTANCE_ZONES", value_delimiter = ',', value_parser = parse_zone)]
    pub instance_zones: Vec<String>,
    /// Interval between two reads of the offer catalog.
    #[arg(long, env = "CATALOG_REFRESH", default_value = "5m", value_parser = parse_duration)]
    pub catalog_refresh: Duration,
    /// How long an offering refused for lack of stock or quota stays unavailable.
    #[arg(long, env = "UNAVAILABLE_OFFERING_TTL", default_value = "30m", value_parser = parse_duration)]
    pub unavailable_offering_ttl: Duration,
    /// SSH port of the rescue system.
    #[arg(long, env = "RESCUE_SSH_PORT", default_value_t = 22)]
    pub rescue_ssh_port: u16,
    /// Port of the Talos maintenance API.
    #[arg(long, env = "TALOS_API_PORT", default_value_t = 50000)]
    pub talos_api_port: u16,
    /// Pause between two reads of an installing server's status from the
    /// Elastic Metal API. 5 s: noticing a delivery half an interval late on
    /// average is what the controller adds to an install (docs/figures.md:
    /// 3.1 % of the flow at 15 s, 0.8 % at 5 s), while one GET per installing
    /// server every 5 s stays far below any rate limit (429s are retried with
    /// backoff anyway). The SDK's own wait helper uses 15 s.
    #[arg(long, env = "POLL_INTERVAL", default_value = "5s", value_parser = parse_duration)]
    pub poll_interval: Duration,
    /// Install engine timing: local probes, per-phase deadlines.
    #[command(flatten)]
    pub install: InstallArgs,
    /// Address of the HTTP endpoint serving `/healthz` and `/metrics`; off when unset.
    #[arg(long, env = "METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,
    /// Lifetime of each node's bootstrap token. It must outlast the longest
    /// install (delivery, two image writes, one return to rescue, join);
    /// tokens are deleted as soon as their node joins anyway.
    #[arg(long, env = "BOOTSTRAP_TOKEN_TTL", default_value = "4h", value_parser = parse_positive_duration)]
    pub bootstrap_token_ttl: Duration,
    /// Period of the sweep deleting bootstrap tokens whose NodeClaim is gone.
    #[arg(long, env = "BOOTSTRAP_TOKEN_SWEEP_INTERVAL", default_value = "5m", value_parser = parse_positive_duration)]
    pub bootstrap_token_sweep_interval: Duration,
    /// Period of the pass resuming installs this process does not run (also
    /// run at startup and on becoming the leader).
    #[arg(long, env = "RESUME_INTERVAL", default_value = "60s", value_parser = parse_positive_duration)]
    pub resume_interval: Duration,
    /// Period of the churn watch: Elastic Metal NodePools set up to start
    /// consolidation replaces they cannot finish are warned about, and orders
    /// made while a recent sibling of the same NodePool and offer idles are
    /// reported (Events, `karpenter_scaleway_churn_*`).
    #[arg(long, env = "CHURN_INTERVAL", default_value = "15s", value_parser = parse_positive_duration)]
    pub churn_interval: Duration,
    /// How long a node stays unhealthy (`Ready=False`, a kubelet that
    /// stopped posting, node-problem-detector's `KernelDeadlock`) before
    /// Karpenter's node repair reboots it in place (docs/operations.md
    /// "Repair").
    #[arg(long, env = "REPAIR_REBOOT_AFTER", default_value = "10m", value_parser = parse_positive_duration)]
    pub repair_reboot_after: Duration,
    /// How long node-problem-detector's `ReadonlyFilesystem` (a failing
    /// disk) is tolerated before Karpenter's node repair replaces the node.
    #[arg(long, env = "REPAIR_REPLACE_AFTER", default_value = "30m", value_parser = parse_positive_duration)]
    pub repair_replace_after: Duration,
    /// How long a rebooted VM may keep its old boot id before the provider
    /// deletes its NodeClaim so that Karpenter replaces it (core would wait
    /// 20 minutes). Elastic Metal reboots get `--booting-deadline`.
    #[arg(long, env = "INSTANCE_REBOOT_DEADLINE", default_value = "5m", value_parser = parse_positive_duration)]
    pub instance_reboot_deadline: Duration,
    /// Warm metal (docs/standby.md): how standby pools are kept.
    #[command(flatten)]
    pub standby: StandbyArgs,
    /// Orphan sweeper: deleting servers of this cluster that no NodeClaim claims.
    #[command(flatten)]
    pub sweeper: SweeperArgs,
    /// Fault injection for tests: abort the process when an install reaches
    /// this point (see `crashpoint.rs`). Never set in production.
    #[arg(long = "test-crash-at", env = "KPS_TEST_CRASH_AT", hide = true,
        value_parser = crate::crashpoint::CrashPoint::parse)]
    pub test_crash_at: Option<crate::crashpoint::CrashPoint>,
}

/// The orphan sweeper (`gc`); it runs only on the leader.
#[derive(Debug, Clone, Args)]
pub struct SweeperArgs {
    /// Period of the orphan sweeper's passes (the first one an interval after
    /// this replica becomes the leader).
    #[arg(long, env = "SWEEP_INTERVAL", default_value = "5m", value_parser = parse_positive_duration)]
    pub sweep_interval: Duration,
    /// Age under which a server of this cluster that no NodeClaim claims is
    /// left alone. It must exceed the longest possible install
    /// (`provider::longest_install`, 2h52m by default); a shorter grace is
    /// logged as a warning at start.
    #[arg(long, env = "ORPHAN_GRACE", default_value = "3h", value_parser = parse_positive_duration)]
    pub orphan_grace: Duration,
    /// Age under which an Instance (VM) of this cluster that no NodeClaim
    /// claims, or a detached SBS volume of this cluster, is left alone. A VM
    /// boots in about a minute and has no install to outlast; the grace
    /// covers the moments between Create ordering it and the NodeClaim
    /// becoming visible.
    #[arg(long, env = "INSTANCE_ORPHAN_GRACE", default_value = "5m", value_parser = parse_positive_duration)]
    pub instance_orphan_grace: Duration,
    /// Decide and report (Events, metrics, logs) but delete nothing.
    #[arg(long, env = "SWEEP_DRY_RUN")]
    pub sweep_dry_run: bool,
}

/// Install engine timing. The deadline defaults are those of
/// `install::Deadlines::default()` (a test keeps them equal).
#[derive(Debug, Clone, Args)]
pub struct InstallArgs {
    /// Pause between two cheap local probes during an install: SSH to the
    /// rescue system, the Talos maintenance API, the Node's readiness. Capped
    /// by `--poll-interval`.
    #[arg(long, env = "PROBE_INTERVAL", default_value = "2s", value_parser = parse_positive_duration)]
    pub probe_interval: Duration,
    /// Order placed until the server is delivered (`ready`).
    #[arg(long, env = "DELIVERY_DEADLINE", default_value = "30m", value_parser = parse_positive_duration)]
    pub delivery_deadline: Duration,
    /// Rescue reboot requested until an SSH session is open.
    #[arg(long, env = "RESCUE_DEADLINE", default_value = "15m", value_parser = parse_positive_duration)]
    pub rescue_deadline: Duration,
    /// One image write: disk detection, download, write, sync and read-back.
    #[arg(long, env = "IMAGING_DEADLINE", default_value = "20m", value_parser = parse_positive_duration)]
    pub imaging_deadline: Duration,
    /// Normal reboot requested until the Talos maintenance API answers;
    /// passing it sends the server back to rescue once.
    #[arg(long, env = "BOOTING_DEADLINE", default_value = "10m", value_parser = parse_positive_duration)]
    pub booting_deadline: Duration,
    /// Maintenance API up until the machine config is accepted.
    #[arg(long, env = "MAINTENANCE_DEADLINE", default_value = "5m", value_parser = parse_positive_duration)]
    pub maintenance_deadline: Duration,
    /// Machine config applied until the Node is Ready.
    #[arg(long, env = "JOIN_DEADLINE", default_value = "15m", value_parser = parse_positive_duration)]
    pub join_deadline: Duration,
    /// After an ApplyConfiguration whose answer was lost, how long the
    /// maintenance API may stay silent before the config is taken as applied.
    #[arg(long, env = "APPLY_GRACE", default_value = "2m", value_parser = parse_positive_duration)]
    pub apply_grace: Duration,
}

impl InstallArgs {
    /// The per-phase deadlines.
    pub fn deadlines(&self) -> Result<crate::install::Deadlines, String> {
        let mut deadlines = crate::install::Deadlines::default();
        for (name, value) in [
            ("delivery", self.delivery_deadline),
            ("rescue", self.rescue_deadline),
            ("imaging", self.imaging_deadline),
            ("booting", self.booting_deadline),
            ("maintenance", self.maintenance_deadline),
            ("join", self.join_deadline),
        ] {
            deadlines.set(name, value)?;
        }
        Ok(deadlines)
    }
}

/// `--zones`, or the default zone alone when none is given, without
/// duplicates and in the order given (shared by `serve`, `catalog`, `servers`).
pub fn served_zones(zones: &[String], default_zone: &str) -> Vec<String> {
    let source: Vec<&str> = if zones.is_empty() {
        vec![default_zone]
    } else {
        zones.iter().map(String::as_str).collect()
    };
    let mut out: Vec<String> = Vec::new();
    for z in source {
        if !out.iter().any(|o| o == z) {
            out.push(z.to_string());
        }
    }
    out
}

impl ServeArgs {
    /// `--zones`, or the default zone alone, without duplicates.
    pub fn zones(&self, default_zone: &str) -> Vec<String> {
        crate::config::served_zones(&self.zones, default_zone)
    }

    /// `--instance-zones`, else the Elastic Metal zones.
    pub fn instance_zones(&self, default_zone: &str) -> Vec<String> {
        if self.instance_zones.is_empty() {
            self.zones(default_zone)
        } else {
            crate::config::served_zones(&self.instance_zones, default_zone)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations() {
        assert_eq!(parse_duration("200ms"), Ok(Duration::from_millis(200)));
        assert_eq!(parse_duration("15s"), Ok(Duration::from_secs(15)));
        assert_eq!(parse_duration("5m"), Ok(Duration::from_secs(300)));
        assert_eq!(parse_duration("1h"), Ok(Duration::from_secs(3600)));
        assert_eq!(parse_duration("2"), Ok(Duration::from_secs(2)));
        assert_eq!(parse_duration("0.5s"), Ok(Duration::from_millis(500)));
        assert!(parse_duration("5 parsecs").is_err());
        assert!(parse_duration("m").is_err());
        assert_eq!(
            parse_positive_duration("4h"),
            Ok(Duration::from_secs(4 * 3600))
        );
        assert!(parse_positive_duration("0s").is_err());
    }

    #[test]
    fn install_flag_defaults_are_the_engine_defaults() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            install: InstallArgs,
        }
        let cli = <Cli as clap::Parser>::try_parse_from(["test"]).expect("defaults parse");
        let engine = crate::install::InstallSettings::default();
        assert_eq!(cli.install.deadlines(), Ok(engine.deadlines.clone()));
        assert_eq!(cli.install.apply_grace, engine.apply_grace);
        assert_eq!(cli.install.probe_interval, engine.probe_interval);

        let cli = <Cli as clap::Parser>::try_parse_from(["test", "--booting-deadline", "4s"])
            .expect("parses");
        let deadlines = cli.install.deadlines().expect("valid");
        assert_eq!(deadlines.booting, Duration::from_secs(4));
        assert_eq!(deadlines.join, engine.deadlines.join);
        assert!(<Cli as clap::Parser>::try_parse_from(["test", "--join-deadline", "0s"]).is_err());
    }

    #[test]
    fn sweeper_flags() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            sweeper: SweeperArgs,
        }
        let cli = <Cli as clap::Parser>::try_parse_from(["test"]).expect("defaults parse");
        assert_eq!(cli.sweeper.sweep_interval, Duration::from_secs(300));
        assert_eq!(cli.sweeper.orphan_grace, Duration::from_secs(3 * 3600));
        assert_eq!(cli.sweeper.instance_orphan_grace, Duration::from_secs(300));
        assert!(!cli.sweeper.sweep_dry_run);
        let cli = <Cli as clap::Parser>::try_parse_from([
            "test",
            "--sweep-interval",
            "30s",
            "--orphan-grace",
            "3h",
            "--instance-orphan-grace",
            "90s",
            "--sweep-dry-run",
        ])
        .expect("parses");
        assert_eq!(cli.sweeper.instance_orphan_grace, Duration::from_secs(90));
        assert_eq!(cli.sweeper.sweep_interval, Duration::from_secs(30));
        assert_eq!(cli.sweeper.orphan_grace, Duration::from_secs(3 * 3600));
        assert!(cli.sweeper.sweep_dry_run);
        assert!(<Cli as clap::Parser>::try_parse_from(["test", "--orphan-grace", "0s"]).is_err());
        assert!(
            <Cli as clap::Parser>::try_parse_from(["test", "--instance-orphan-grace", "0s"])
                .is_err()
        );
    }

    #[test]
    fn instance_zones_default_to_the_elastic_metal_zones() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            serve: ServeArgs,
        }
        let parse = |extra: &[&str]| {
            let mut argv = vec![
                "test",
                "--cluster-name",
                "prod",
                "--scw-secret-key",
                "k",
                "--scw-project-id",
                "p",
                "--zones",
                "fr-par-2,nl-ams-1",
            ];
            argv.extend(extra);
            <Cli as clap::Parser>::try_parse_from(argv)
                .expect("parses")
                .serve
        };
        let zone = "fr-par-1";
        assert_eq!(parse(&[]).instance_zones(zone), ["fr-par-2", "nl-ams-1"]);
        let own = parse(&["--instance-zones", "fr-par-3,fr-par-2"]);
        assert_eq!(own.instance_zones(zone), ["fr-par-3", "fr-par-2"]);
        assert_eq!(own.zones(zone), ["fr-par-2", "nl-ams-1"]);
        // The VM reboot deadline's default is the provider's.
        assert_eq!(
            parse(&[]).instance_reboot_deadline,
            crate::provider::reboot::DEFAULT_INSTANCE_REBOOT_DEADLINE
        );
        assert_eq!(
            parse(&["--instance-reboot-deadline", "90s"]).instance_reboot_deadline,
            Duration::from_secs(90)
        );
    }

    #[test]
    fn scaleway_flags_win_and_never_show_the_secret() {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            scw: ScalewayArgs,
        }
        let parse = |argv: &[&str]| <Cli as clap::Parser>::try_parse_from(argv).map(|c| c.scw);
        let args = parse(&[
            "test",
            "--scw-secret-key",
            "Sekr1t-flag",
            "--default-zone",
            "nl-ams-1",
        ])
        .expect("parses");
        assert!(!format!("{args:?}").contains("Sekr1t"), "{args:?}");
        // No HOME: no scw config file, only these variables.
        let env: Env = [
            ("SCW_SECRET_KEY", "Sekr1t-env"),
            ("SCW_DEFAULT_PROJECT_ID", "p"),
            ("SCW_DEFAULT_ZONE", "fr-par-1"),
        ]
        .into_iter()
        .collect();
        let access = args.resolve(&env).expect("resolves");
        assert_eq!(access.secret_key, SecretKey::new("Sekr1t-flag"));
        assert_eq!(access.default_zone, "nl-ams-1");
        assert_eq!(access.project_id, "p");
        assert_eq!(access.api_url, profile::DEFAULT_API_URL);
        assert_eq!(access.api_timeout, Duration::from_secs(30));
        assert!(!format!("{access:?}").contains("Sekr1t"), "{access:?}");
        // Nothing is required at parse time any more; `--default-zone` is
        // still checked there.
        assert!(parse(&["test"]).is_ok());
        assert!(parse(&["test", "--default-zone", "paris"]).is_err());
    }

    #[test]
    fn zones() {
        assert!(parse_zone("fr-par-2").is_ok());
        assert!(parse_zone("pl-waw-3").is_ok());
        assert!(parse_zone("fr-par").is_err());
        assert!(parse_zone("FR-PAR-1").is_err());
        assert!(parse_zone("fr-par-1/../x").is_err());
    }
}
