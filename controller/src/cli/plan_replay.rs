//! `karpenter-scaleway plan replay`: "what would I save". Replays a load
//! trace (docs/planner.md, "Traces": a CSV a Prometheus range query gives)
//! or the shipped ones through the planner, standby and billing code, offline
//! and in simulated time, and prints the comparison table. Reads no API.

use std::time::Duration;

use anyhow::{Context as _, bail};
use clap::{Args, ValueEnum};

use crate::bench::setup::{self, Setup};
use crate::bench::trace::{self, Scale, Shape, Trace};
use crate::bench::{compare, replay::Minutes, table};
use crate::catalog::Billing;
use crate::nodeclass::go_duration;

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BillingArg {
    Hourly,
    Monthly,
}

#[derive(Debug, Clone, Args)]
pub struct ReplayArgs {
    /// A trace file (`time,cpu,memory`), or the name of a shipped trace
    /// (working-days, weekly, step, spiky, ramp); all shipped ones when
    /// omitted.
    pub trace: Option<String>,
    /// The Elastic Metal offer staged (a recorded one).
    #[arg(long, default_value = "EM-A315X-SSD")]
    pub offer: String,
    /// The VM type the load runs on otherwise.
    #[arg(long, default_value = "POP2-2C-8G")]
    pub vm: String,
    #[arg(long, value_enum, default_value = "hourly")]
    pub billing: BillingArg,
    /// `planner.window` (Go duration).
    #[arg(long, default_value = "2h")]
    pub window: String,
    /// `planner.atLeast` (default: the window).
    #[arg(long)]
    pub at_least: Option<String>,
    /// `planner.hold`.
    #[arg(long, default_value = "30m")]
    pub hold: String,
    /// The pool's `min`: idle standby servers kept whatever the planner's
    /// target (ready for load no history foresees, such as spikes).
    #[arg(long, default_value_t = 0)]
    pub min: u32,
    /// `planner.maxServers` and the pool's `max`.
    #[arg(long, default_value_t = 16)]
    pub max_servers: u32,
    /// `planner.ahead` (Go duration): stage ahead of the load seen at the
    /// same time a day or a week before.
    #[arg(long)]
    pub ahead: Option<String>,
    /// Writes the shipped trace (named by TRACE) as CSV to this file and
    /// stops.
    #[arg(long)]
    pub write_csv: Option<std::path::PathBuf>,
}

fn duration(flag: &str, text: &str) -> anyhow::Result<Duration> {
    go_duration::parse(text).map_err(|e| anyhow::anyhow!("--{flag}: {e}"))
}

/// The setup the flags describe.
pub fn setup_of(args: &ReplayArgs) -> anyhow::Result<Setup> {
    let window = duration("window", &args.window)?;
    let at_least = match &args.at_least {
        Some(t) => duration("at-least", t)?,
        None => window,
    };
    if at_least > window {
        bail!("--at-least is longer than --window");
    }
    Ok(Setup {
        offer: setup::offer(&args.offer).map_err(anyhow::Error::msg)?,
        vm: setup::vm_type(&args.vm).map_err(anyhow::Error::msg)?,
        durations: Default::default(),
        pool: setup::PoolSettings {
            billing: match args.billing {
                BillingArg::Hourly => Billing::Hourly,
                BillingArg::Monthly => Billing::Monthly,
            },
            min: args.min,
            max: args.max_servers.max(args.min),
            max_servers: args.max_servers,
            window,
            at_least,
            hold: duration("hold", &args.hold)?,
            ahead: args
                .ahead
                .as_deref()
                .map(|a| duration("ahead", a))
                .transpose()?,
            ..Default::default()
        },
    })
}

/// The traces named by TRACE.
pub fn traces_of(which: Option<&str>) -> anyhow::Result<Vec<Trace>> {
    let Some(which) = which else {
        return Ok(Shape::ALL
            .iter()
            .map(|s| trace::generate(*s, &Scale::default()))
            .collect());
    };
    if let Some(shape) = Shape::ALL.iter().find(|s| s.name() == which) {
        return Ok(vec![trace::generate(*shape, &Scale::default())]);
    }
    let text = std::fs::read_to_string(which).with_context(|| {
        format!(
            "reading trace {which:?} (not a shipped trace: {})",
            Shape::ALL.map(|s| s.name()).join(", ")
        )
    })?;
    let name = std::path::Path::new(which)
        .file_stem()
        .map_or(which.to_string(), |s| s.to_string_lossy().into_owned());
    let start = chrono::DateTime::<chrono::Utc>::UNIX_EPOCH;
    let trace = Trace::parse(&name, &text, start).with_context(|| format!("trace {which}"))?;
    Ok(vec![trace])
}

/// The longest trace replayed: one billed month (a monthly server's pro rata
/// charge and the optimum's bound assume its month does not end inside it).
pub const MAX_TRACE: chrono::Duration = chrono::Duration::hours(730);

pub fn report(args: &ReplayArgs) -> anyhow::Result<String> {
    let setup = setup_of(args)?;
    let traces = traces_of(args.trace.as_deref())?;
    let mut rows = Vec::new();
    for t in &traces {
        if t.end() - t.start() > MAX_TRACE {
            bail!(
                "trace {} lasts {} h; at most 730 h (one billed month) are replayed: cut it",
                t.name,
                (t.end() - t.start()).num_hours()
            );
        }
        rows.push(compare(&t.name, &Minutes::of(t), &setup));
    }
    let (sc, sm) = setup.server();
    let (vc, vm) = setup.vm_size();
    Ok(format!(
        "{} ({} CPU, {:.1} GiB allocatable) at {:.3} EUR/h, or {:.2} EUR/month + the same setup fee: billed {}; \
         VMs {} ({} CPU, {:.1} GiB) at {:.4} EUR/h per started hour; install {} s, adoption {} s; \
         planner window {} s, hold {} s, at most {} servers, ahead {}\nEUR over each trace\n{}",
        setup.offer.name,
        crate::catalog::cpu_quantity(sc),
        sm as f64 / f64::from(1u32 << 30),
        setup.offer.hourly,
        setup.offer.monthly,
        format!("{:?}", setup.pool.billing).to_lowercase(),
        setup.vm.name,
        crate::catalog::cpu_quantity(vc),
        vm as f64 / f64::from(1u32 << 30),
        setup.vm.hourly,
        setup.durations.install.as_secs(),
        setup.durations.adopt.as_secs(),
        setup.pool.window.as_secs(),
        setup.pool.hold.as_secs(),
        setup.pool.max_servers,
        setup
            .pool
            .ahead
            .map_or("off".to_string(), |a| format!("{} s", a.as_secs())),
        table(&rows)
    ))
}

pub fn run(args: ReplayArgs) -> anyhow::Result<()> {
    if let Some(path) = &args.write_csv {
        let traces = traces_of(args.trace.as_deref())?;
        let [one] = traces.as_slice() else {
            bail!("--write-csv writes one shipped trace: name it");
        };
        std::fs::write(path, one.to_csv())
            .with_context(|| format!("writing {}", path.display()))?;
        return Ok(());
    }
    print!("{}", report(&args)?);
    Ok(())
}
