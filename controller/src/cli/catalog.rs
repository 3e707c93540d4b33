//! `karpenter-scaleway catalog`: the instance types Karpenter would see, per
//! zone, read from the Scaleway API with the same flags and environment as
//! `serve` and mapped by the same code (`catalog::instance_types` for Elastic
//! Metal offers, `catalog::vm_instance_types` for Instance commercial types):
//! kind, name, architecture, CPU, memory, disk, GPUs, price, stock,
//! availability and why. A zone that cannot be read fails the command: a
//! partial table would silently hide offers.
//!
//! `--kind` chooses the APIs read: `elastic-metal` (the default: what `serve`
//! offers Karpenter today), `instance`, or `all`. Instance types are shown
//! for inspection while the provider learns to order them (issue 12); their
//! disk is the default root volume.
//!
//! `--serve SOCKET` instead keeps the catalog current (background refresh, as
//! `serve` does) and serves the read-only half of the CloudProvider gRPC
//! contract on that socket (Info, GetInstanceTypes, WatchInstanceTypes), so
//! that Karpenter's scheduler can be run against a live catalog without a
//! cluster; the bridge benchmark (`just bench-catalog`) uses it. `--kind`
//! chooses the refreshers it runs: with `all`, the watch stream carries Elastic
//! Metal's catalog and the Instance kind's default (`kind_defaults`); with
//! `instance` alone, Elastic Metal's catalog is served empty. Instances are
//! sold in more zones than Elastic Metal: `--instance-zones` names theirs.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::Context as _;
use clap::{Args, ValueEnum};
use futures::future::join_all;

use crate::catalog::{
    Billing, CatalogStore, ClassKind, ClassView, Excluded, InstanceType, LABEL_INSTANCE_DISK_TYPE,
    LABEL_INSTANCE_GPU_NAME, instance_types, read_zone, run_instance_refresher, run_refresher,
};
use crate::catalog::{ZoneProducts, vm_instance_types};
use crate::config::profile::Env;
use crate::config::{ScalewayArgs, parse_duration, parse_zone};
use crate::grpc::{self, CloudProviderService};
use crate::scaleway::ElasticMetal;
use crate::scaleway::instance::Instance;

/// The root volume an Instance type is shown with (its ephemeral storage):
/// 20 GB, the size the Instance NodeClass examples use.
pub const DEFAULT_VM_ROOT_BYTES: u64 = 20_000_000_000;

/// Which APIs `catalog` reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Kind {
    ElasticMetal,
    Instance,
    All,
}

impl Kind {
    fn elastic_metal(self) -> bool {
        matches!(self, Kind::ElasticMetal | Kind::All)
    }
    fn instance(self) -> bool {
        matches!(self, Kind::Instance | Kind::All)
    }
}

/// The kind column of a type: `instance` when it came from the Instance API.
fn kind_of(it: &InstanceType) -> &'static str {
    if it
        .labels
        .contains_key(crate::catalog::LABEL_INSTANCE_FAMILY)
    {
        "instance"
    } else {
        "elastic-metal"
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BillingArg {
    Hourly,
    Monthly,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Table,
    Json,
}

#[derive(Debug, Clone, Args)]
pub struct CatalogArgs {
    #[command(flatten)]
    pub scaleway: ScalewayArgs,
    /// Zones to read, comma-separated. Default: the default zone
    /// (`--default-zone`).
    #[arg(long, env = "SCW_ZONES", value_delimiter = ',', value_parser = parse_zone)]
    pub zones: Vec<String>,
    /// Zones whose Instance types are read, comma-separated. Default: the
    /// zones of `--zones` (Instances are sold in zones without Elastic Metal).
    #[arg(long = "instance-zones", value_delimiter = ',', value_parser = parse_zone)]
    pub instance_zones: Vec<String>,
    /// Price and availability as a NodeClass with this billing sees them.
    #[arg(long, value_enum, default_value = "hourly")]
    pub billing: BillingArg,
    #[arg(long, value_enum, default_value = "table")]
    pub output: Output,
    /// Which kinds to read: Elastic Metal offers, Instance commercial types, or both.
    #[arg(long, value_enum, default_value = "elastic-metal")]
    pub kind: Kind,
    /// Serve the catalog on this Unix socket (read-only gRPC) instead of
    /// printing it; runs until SIGTERM or Ctrl-C.
    #[arg(long, value_name = "SOCKET")]
    pub serve: Option<PathBuf>,
    /// With `--serve`: interval between two reads of the offers.
    #[arg(long, env = "CATALOG_REFRESH", default_value = "5m", value_parser = parse_duration)]
    pub catalog_refresh: Duration,
}

impl CatalogArgs {
    fn zones(&self, default_zone: &str) -> Vec<String> {
        crate::config::served_zones(&self.zones, default_zone)
    }

    fn instance_zones(&self, default_zone: &str) -> Vec<String> {
        if self.instance_zones.is_empty() {
            self.zones(default_zone)
        } else {
            crate::config::served_zones(&self.instance_zones, default_zone)
        }
    }

    fn billing(&self) -> Billing {
        match self.billing {
            BillingArg::Hourly => Billing::Hourly,
            BillingArg::Monthly => Billing::Monthly,
        }
    }
}

pub async fn run(args: CatalogArgs) -> anyhow::Result<()> {
    run_in(args, &Env::from_process()?).await
}

/// [`run`] with the environment given instead of the process's.
pub async fn run_in(args: CatalogArgs, env: &Env) -> anyhow::Result<()> {
    let scw = args.scaleway.resolve(env)?;
    scw.print_notes();
    let client = Arc::new(scw.client().context("building the Scaleway client")?);
    let api: Arc<dyn ElasticMetal> = client.clone();
    let default_zone = scw.default_zone.as_str();
    match &args.serve {
        Some(socket) => {
            let _ = tracing_subscriber::fmt()
                .with_writer(std::io::stderr)
                .with_env_filter(
                    tracing_subscriber::EnvFilter::try_from_default_env()
                        .unwrap_or_else(|_| "info".into()),
                )
                .try_init();
            serve(&args, default_zone, api, client, socket, terminated()).await
        }
        None => {
            let zones = args.zones(default_zone);
            let (mut types, mut excluded) = (Vec::new(), Vec::new());
            if args.kind.elastic_metal() {
                let (t, e) = read(api.as_ref(), &zones).await?;
                types.extend(t);
                excluded.extend(e);
            }
            if args.kind.instance() {
                let (t, e) = read_vms(client.as_ref(), &args.instance_zones(default_zone)).await?;
                types.extend(t);
                excluded.extend(e);
            }
            let read_at = SystemTime::now();
            for it in &mut types {
                for o in &mut it.offerings {
                    o.bill(args.billing());
                }
            }
            let out = match args.output {
                Output::Table => table(&types, &excluded, read_at),
                Output::Json => serde_json::to_string_pretty(&json(&types, &excluded))? + "\n",
            };
            print!("{out}");
            Ok(())
        }
    }
}

/// Reads every zone's Elastic Metal offers; any failure fails the whole read.
async fn read(
    api: &dyn ElasticMetal,
    zones: &[String],
) -> anyhow::Result<(Vec<InstanceType>, Vec<Excluded>)> {
    let results = join_all(zones.iter().map(|z| read_zone(api, z))).await;
    let mut by_zone = BTreeMap::new();
    for (zone, result) in zones.iter().zip(results) {
        let offers = result.with_context(|| format!("listing the offers of {zone}"))?;
        by_zone.insert(zone.clone(), offers);
    }
    Ok(instance_types(&by_zone))
}

/// Reads every zone's Instance commercial types and their availability; any
/// failure fails the whole read.
async fn read_vms(
    api: &dyn Instance,
    zones: &[String],
) -> anyhow::Result<(Vec<InstanceType>, Vec<Excluded>)> {
    let results = join_all(zones.iter().map(|z| async move {
        let types = api.list_server_types(z).await?;
        let availability = api.list_server_availability(z).await?;
        Ok::<_, crate::scaleway::ApiError>(ZoneProducts {
            types,
            availability,
        })
    }))
    .await;
    let mut by_zone = BTreeMap::new();
    for (zone, result) in zones.iter().zip(results) {
        let products = result.with_context(|| format!("listing the Instance types of {zone}"))?;
        by_zone.insert(zone.clone(), products);
    }
    Ok(vm_instance_types(&by_zone, DEFAULT_VM_ROOT_BYTES))
}

/// Resolves on SIGTERM or Ctrl-C.
async fn terminated() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).ok();
    tokio::select! {
        _ = async { match term.as_mut() { Some(t) => { t.recv().await; } None => std::future::pending().await } } => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

/// `--serve`: the refreshers of the kinds asked for, feeding one store, and
/// the read-only gRPC service over it until `shutdown`.
async fn serve(
    args: &CatalogArgs,
    default_zone: &str,
    api: Arc<dyn ElasticMetal>,
    vms: Arc<dyn Instance>,
    socket: &std::path::Path,
    shutdown: impl std::future::Future<Output = ()> + Send,
) -> anyhow::Result<()> {
    // The unavailable-offerings cache is fed by orders; none happen here.
    let store = CatalogStore::new(Duration::from_secs(1800));
    let mut refreshers = Vec::new();
    if args.kind.elastic_metal() {
        if args.billing() == Billing::Monthly {
            // NodePools of any NodeClass get the default catalog; a monthly
            // view is published under the name `monthly` for tools that ask.
            store.set_node_classes(
                ClassKind::ElasticMetal,
                BTreeMap::from([(
                    "monthly".to_string(),
                    ClassView::from((Vec::new(), Billing::Monthly)),
                )]),
            );
        }
        refreshers.push(tokio::spawn(run_refresher(
            store.clone(),
            api,
            args.zones(default_zone),
            args.catalog_refresh,
        )));
    } else {
        // The stream starts once Elastic Metal's catalog has been read (an
        // unread one would look like every type vanished): none is read here,
        // so it is known to be empty.
        store.set_kind_types(ClassKind::ElasticMetal, Vec::new());
    }
    if args.kind.instance() {
        refreshers.push(tokio::spawn(run_instance_refresher(
            store.clone(),
            vms,
            args.instance_zones(default_zone),
            args.catalog_refresh,
        )));
    }
    let service = CloudProviderService::catalog_only(store);
    let result = grpc::serve(socket, service, shutdown).await;
    for refresher in refreshers {
        refresher.abort();
    }
    result
}

fn gib(bytes: u64) -> String {
    format!("{}Gi", bytes / (1 << 30))
}

fn gb(bytes: u64) -> String {
    format!("{}GB", bytes / 1_000_000_000)
}

/// One block per zone, types cheapest first.
pub fn table(types: &[InstanceType], excluded: &[Excluded], read_at: SystemTime) -> String {
    let mut zones: BTreeMap<&str, Vec<(&InstanceType, &crate::catalog::Offering)>> =
        BTreeMap::new();
    for it in types {
        for o in &it.offerings {
            zones.entry(o.zone.as_str()).or_default().push((it, o));
        }
    }
    let read_at = chrono::DateTime::<chrono::Utc>::from(read_at)
        .to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let mut out = format!("offers read at {read_at}\n");
    for (zone, mut rows) in zones {
        rows.sort_by(|(a, ao), (b, bo)| ao.price.total_cmp(&bo.price).then(a.name.cmp(&b.name)));
        let mut lines = vec![
            [
                "KIND",
                "NAME",
                "ARCH",
                "CPU",
                "MEMORY",
                "DISK",
                "GPUS",
                "EUR/H",
                "STOCK",
                "AVAILABLE",
                "WHY",
            ]
            .map(String::from),
        ];
        for (it, o) in rows {
            let disk = it
                .labels
                .get(LABEL_INSTANCE_DISK_TYPE)
                .map(|t| format!("{} {t}", gb(it.capacity.ephemeral_storage_bytes)))
                .unwrap_or_else(|| gb(it.capacity.ephemeral_storage_bytes));
            let gpus = match it.capacity.nvidia_gpus {
                0 => "-".to_string(),
                n => format!(
                    "{n}x {}",
                    it.labels
                        .get(LABEL_INSTANCE_GPU_NAME)
                        .map_or("", String::as_str)
                ),
            };
            let stock = match &o.monthly {
                Some(m) if o.billing == Billing::Monthly => m.stock.clone(),
                _ => o.stock.clone(),
            };
            lines.push([
                kind_of(it).to_string(),
                it.name.clone(),
                it.arch.clone(),
                (it.capacity.cpu_millis / 1000).to_string(),
                gib(it.capacity.memory_bytes),
                disk,
                gpus,
                format!("{:.4}", o.price),
                stock,
                if o.available { "yes" } else { "no" }.to_string(),
                o.unavailable_reason.clone().unwrap_or_default(),
            ]);
        }
        let widths: Vec<usize> = (0..11)
            .map(|i| lines.iter().map(|l| l[i].len()).max().unwrap_or(0))
            .collect();
        let _ = writeln!(out, "\nzone {zone}");
        for l in &lines {
            let mut line = String::new();
            for (i, cell) in l.iter().enumerate() {
                let _ = write!(line, "{cell:<w$}  ", w = widths[i]);
            }
            let _ = writeln!(out, "{}", line.trim_end());
        }
    }
    if !excluded.is_empty() {
        let _ = writeln!(out, "\nleft out");
        for e in excluded {
            let _ = writeln!(out, "{} ({}): {}", e.offer, e.zone, e.reason);
        }
    }
    out
}

fn json(types: &[InstanceType], excluded: &[Excluded]) -> serde_json::Value {
    let offerings: Vec<serde_json::Value> = types
        .iter()
        .flat_map(|it| {
            it.offerings.iter().map(move |o| {
                serde_json::json!({
                    "zone": o.zone,
                    "kind": kind_of(it),
                    "name": it.name,
                    "arch": it.arch,
                    "cpu": it.capacity.cpu_millis / 1000,
                    "memoryBytes": it.capacity.memory_bytes,
                    "diskBytes": it.capacity.ephemeral_storage_bytes,
                    "diskType": it.labels.get(LABEL_INSTANCE_DISK_TYPE),
                    "gpus": it.capacity.nvidia_gpus,
                    "gpuName": it.labels.get(LABEL_INSTANCE_GPU_NAME),
                    "pricePerHour": o.price,
                    "offerId": o.order_offer_id(o.billing),
                    "stock": o.stock,
                    "available": o.available,
                    "why": o.unavailable_reason,
                    "allocatable": it.allocatable().to_quantities(true),
                })
            })
        })
        .collect();
    let excluded: Vec<serde_json::Value> = excluded
        .iter()
        .map(|e| serde_json::json!({"name": e.offer, "zone": e.zone, "reason": e.reason}))
        .collect();
    serde_json::json!({"offerings": offerings, "excluded": excluded})
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::profile::DEFAULT_ZONE;
    use crate::scaleway::ApiError;
    use crate::scaleway::fake::{FakeElasticMetal, Op, sample_monthly_offers, sample_offers};

    fn api() -> FakeElasticMetal {
        let api = FakeElasticMetal::new();
        for zone in ["fr-par-2", "nl-ams-1"] {
            let mut offers = sample_offers(zone);
            offers.extend(sample_monthly_offers(zone));
            api.set_offers(zone, offers);
        }
        api
    }

    #[tokio::test]
    async fn prints_every_zone_with_stock_and_reasons() {
        let api = api();
        let zones = vec!["fr-par-2".to_string(), "nl-ams-1".to_string()];
        let (types, excluded) = read(&api, &zones).await.unwrap();
        let out = table(&types, &excluded, SystemTime::now());
        assert!(
            out.contains("zone fr-par-2") && out.contains("zone nl-ams-1"),
            "{out}"
        );
        let h100 = out
            .lines()
            .find(|l| l.starts_with("elastic-metal  EM-T620E-H100"))
            .unwrap();
        for cell in [
            "amd64",
            "64",
            "384Gi",
            "3840GB nvme",
            "2x nvidia-h100",
            "9.5890",
            "empty",
            "no",
            "stock empty",
        ] {
            assert!(h100.contains(cell), "{cell} missing in {h100:?}");
        }
        let a115 = out
            .lines()
            .find(|l| l.starts_with("elastic-metal  EM-A115X-SSD"))
            .unwrap();
        assert!(a115.contains("0.0910") && a115.contains(" yes"), "{a115:?}");
        assert!(
            out.contains("EM-RV1-C4M16S128-A (fr-par-2): RISC-V is not supported by Talos"),
            "{out}"
        );
    }

    #[tokio::test]
    async fn a_zone_that_fails_fails_the_command() {
        let api = api();
        api.fail_next(Op::ListOffers, ApiError::Unavailable("HTTP 503".into()));
        let zones = vec!["fr-par-2".to_string(), "nl-ams-1".to_string()];
        let err = read(&api, &zones).await.unwrap_err();
        assert!(format!("{err:#}").contains("fr-par-2"), "{err:#}");
    }

    #[tokio::test]
    async fn monthly_billing_prices_the_twin() {
        let api = api();
        let (mut types, excluded) = read(&api, &["fr-par-2".to_string()]).await.unwrap();
        for it in &mut types {
            for o in &mut it.offerings {
                o.bill(Billing::Monthly);
            }
        }
        let j = json(&types, &excluded);
        let a = j["offerings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|o| o["name"] == "EM-A115X-SSD")
            .unwrap();
        assert_eq!(a["offerId"], "fr-par-2-a115x-monthly");
        assert!((a["pricePerHour"].as_f64().unwrap() - 32.99 / 730.0).abs() < 1e-9);
    }

    #[tokio::test]
    async fn instance_types_show_with_their_kind_and_zone_prices() {
        use crate::scaleway::instance::fake::{
            FakeInstance, recorded_availability, recorded_types,
        };
        let vms = FakeInstance::new();
        vms.set_types("fr-par-2", recorded_types());
        vms.set_availability("fr-par-2", recorded_availability());
        let mut par3 = recorded_types();
        for t in par3.values_mut() {
            t.hourly_price *= 1.5;
        }
        vms.set_types("fr-par-3", par3);
        let zones = vec!["fr-par-2".to_string(), "fr-par-3".to_string()];
        let (mut types, mut excluded) = read_vms(&vms, &zones).await.unwrap();
        let (em, em_excluded) = read(&api(), &["fr-par-2".to_string()]).await.unwrap();
        types.extend(em);
        excluded.extend(em_excluded);
        let out = table(&types, &excluded, SystemTime::now());
        let row = |zone: &str, name: &str| {
            let block = out.split("\nzone ").find(|b| b.starts_with(zone)).unwrap();
            block
                .lines()
                .find(|l| l.split_whitespace().nth(1) == Some(name))
                .unwrap_or_else(|| panic!("{name} missing in {zone}: {out}"))
                .to_string()
        };
        let pop2 = row("fr-par-2", "POP2-2C-8G");
        assert!(pop2.starts_with("instance "), "{pop2}");
        assert!(pop2.contains("0.0735") && pop2.contains("20GB"), "{pop2}");
        let pop2_par3 = row("fr-par-3", "POP2-2C-8G");
        assert!(pop2_par3.contains("0.1102"), "{pop2_par3}"); // 0.0735 × 1.5
        let em = row("fr-par-2", "EM-A115X-SSD");
        assert!(em.starts_with("elastic-metal "), "{em}");
        let j = json(&types, &excluded);
        let kinds: std::collections::BTreeSet<&str> = j["offerings"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(|o| o["kind"].as_str())
            .collect();
        assert_eq!(kinds, ["elastic-metal", "instance"].into());
    }

    #[tokio::test]
    async fn an_instance_zone_that_fails_fails_the_command() {
        use crate::scaleway::instance::fake::{FakeInstance, Op as VmOp, recorded_types};
        let vms = FakeInstance::new();
        vms.set_types("fr-par-2", recorded_types());
        vms.set_types("pl-waw-2", recorded_types());
        vms.fail_next(
            VmOp::ListAvailability,
            ApiError::Unavailable("HTTP 503".into()),
        );
        let err = read_vms(&vms, &["pl-waw-2".to_string()])
            .await
            .map(|_| ())
            .unwrap_err();
        assert!(format!("{err:#}").contains("pl-waw-2"), "{err:#}");
    }

    fn parse_args(extra: &[&str]) -> Result<CatalogArgs, clap::Error> {
        #[derive(clap::Parser)]
        struct Cli {
            #[command(flatten)]
            args: CatalogArgs,
        }
        let mut argv = vec!["catalog", "--scw-secret-key", "k", "--scw-project-id", "p"];
        argv.extend_from_slice(extra);
        <Cli as clap::Parser>::try_parse_from(argv).map(|c| c.args)
    }

    #[test]
    fn kind_and_instance_zones_flags() {
        let args = parse_args(&["--zones", "fr-par-2,nl-ams-1"]).unwrap();
        assert_eq!(args.kind, Kind::ElasticMetal);
        let zone = DEFAULT_ZONE;
        assert_eq!(
            args.instance_zones(zone),
            args.zones(zone),
            "default: --zones"
        );
        let args = parse_args(&[
            "--kind",
            "all",
            "--serve",
            "/run/kps.sock",
            "--zones",
            "fr-par-2",
            "--instance-zones",
            "fr-par-2,fr-par-3,pl-waw-1,fr-par-3",
        ])
        .unwrap();
        assert!(args.kind.elastic_metal() && args.kind.instance());
        assert_eq!(args.zones(zone), ["fr-par-2"]);
        assert_eq!(
            args.instance_zones(zone),
            ["fr-par-2", "fr-par-3", "pl-waw-1"]
        );
        assert_eq!(args.serve, Some(PathBuf::from("/run/kps.sock")));
        let args = parse_args(&["--kind", "instance"]).unwrap();
        assert!(!args.kind.elastic_metal() && args.kind.instance());
        assert!(parse_args(&["--kind", "vm"]).is_err());
        assert!(parse_args(&["--instance-zones", "mars-1"]).is_err());
    }

    /// Runs `serve` on a temporary socket over the fakes and returns the
    /// first watch message that satisfies `done`, with the served kinds' calls.
    async fn first_watched(
        extra: &[&str],
        done: impl Fn(&crate::grpc::pb::WatchInstanceTypesResponse) -> bool,
    ) -> (crate::grpc::pb::WatchInstanceTypesResponse, usize, usize) {
        use crate::grpc::pb::cloud_provider_client::CloudProviderClient;
        use crate::scaleway::fake::Op as EmOp;
        use crate::scaleway::instance::fake::{
            FakeInstance, Op as VmOp, recorded_availability, recorded_types,
        };
        use hyper_util::rt::TokioIo;
        use tokio::net::UnixStream;
        use tonic::transport::{Endpoint, Uri};

        static NEXT: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let socket = std::env::temp_dir().join(format!(
            "kps-catalog-{}-{}.sock",
            std::process::id(),
            NEXT.fetch_add(1, std::sync::atomic::Ordering::SeqCst)
        ));
        let mut argv = vec!["--serve", socket.to_str().unwrap()];
        argv.extend_from_slice(extra);
        let args = parse_args(&argv).unwrap();
        let em = Arc::new(api());
        let vms = Arc::new(FakeInstance::new());
        for zone in ["fr-par-2", "fr-par-3"] {
            let mut types = recorded_types();
            if zone == "fr-par-3" {
                for t in types.values_mut() {
                    t.hourly_price *= 1.5;
                }
            }
            vms.set_types(zone, types);
            vms.set_availability(zone, recorded_availability());
        }
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let server = {
            let (em, vms, socket) = (em.clone(), vms.clone(), socket.clone());
            tokio::spawn(async move {
                serve(&args, DEFAULT_ZONE, em, vms, &socket, async {
                    let _ = stopped.await;
                })
                .await
            })
        };
        for _ in 0..200 {
            if UnixStream::connect(&socket).await.is_ok() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let path = socket.clone();
        let channel = Endpoint::try_from("http://[::]:50051")
            .unwrap()
            .connect_with_connector(tower::service_fn(move |_: Uri| {
                let p = path.clone();
                async move { Ok::<_, std::io::Error>(TokioIo::new(UnixStream::connect(p).await?)) }
            }))
            .await
            .unwrap();
        let mut stream = CloudProviderClient::new(channel)
            .watch_instance_types(crate::grpc::pb::WatchInstanceTypesRequest {})
            .await
            .unwrap()
            .into_inner();
        let msg = tokio::time::timeout(Duration::from_secs(10), async {
            loop {
                let msg = stream.message().await.unwrap().expect("stream open");
                if done(&msg) {
                    return msg;
                }
            }
        })
        .await
        .expect("the awaited catalog within 10 s");
        drop(stream);
        stop.send(()).unwrap();
        server.await.unwrap().unwrap();
        let em_calls = em.count(EmOp::ListOffers);
        let vm_calls = vms.count(VmOp::ListServerTypes);
        (msg, em_calls, vm_calls)
    }

    fn instance_default(msg: &crate::grpc::pb::WatchInstanceTypesResponse) -> Vec<&str> {
        msg.kind_defaults
            .iter()
            .filter(|c| c.node_class_kind == crate::nodeclass::instance::KIND)
            .flat_map(|c| c.instance_types.iter().map(|t| t.name.as_str()))
            .collect()
    }

    #[tokio::test]
    async fn serve_kind_all_streams_both_kinds() {
        let (msg, em_calls, vm_calls) = first_watched(
            &[
                "--kind",
                "all",
                "--zones",
                "fr-par-2",
                "--instance-zones",
                "fr-par-2,fr-par-3",
            ],
            |m| !m.default_catalog.is_empty() && !instance_default(m).is_empty(),
        )
        .await;
        assert!(em_calls > 0 && vm_calls > 0);
        let em: Vec<&str> = msg
            .default_catalog
            .iter()
            .map(|t| t.name.as_str())
            .collect();
        assert!(em.contains(&"EM-A115X-SSD"), "{em:?}");
        assert!(em.iter().all(|n| n.starts_with("EM-")), "{em:?}");
        assert_eq!(
            instance_default(&msg),
            ["H100-SXM-2-80G", "L4-1-24G", "POP2-2C-8G"]
        );
        let pop2 = msg.kind_defaults[0]
            .instance_types
            .iter()
            .find(|t| t.name == "POP2-2C-8G")
            .unwrap();
        let mut prices: Vec<f64> = pop2.offerings.iter().map(|o| o.price).collect();
        prices.sort_by(f64::total_cmp);
        assert_eq!(prices.len(), 2, "one offering per Instance zone");
        assert!((prices[0] - 0.0735).abs() < 1e-9 && (prices[1] - 0.11025).abs() < 1e-9);
    }

    #[tokio::test]
    async fn serve_kind_instance_serves_elastic_metal_empty() {
        let (msg, em_calls, _) =
            first_watched(&["--kind", "instance", "--zones", "fr-par-2"], |m| {
                !instance_default(m).is_empty()
            })
            .await;
        assert!(msg.default_catalog.is_empty());
        assert_eq!(em_calls, 0, "no Elastic Metal call");
    }

    #[tokio::test]
    async fn serve_default_kind_is_elastic_metal_alone() {
        let (msg, _, vm_calls) =
            first_watched(&["--zones", "fr-par-2"], |m| !m.default_catalog.is_empty()).await;
        assert!(instance_default(&msg).is_empty());
        assert_eq!(vm_calls, 0, "no Instance call");
    }
}
