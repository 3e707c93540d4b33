#![forbid(unsafe_code)]
//! `karpenter-scaleway`: the provider process (`serve`) and operator commands.
//! This file only wires the layers together.

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use clap::{Parser, Subcommand};
use tokio::sync::watch;
use tracing::{info, warn};
use tracing_subscriber::EnvFilter;

use karpenter_scaleway::catalog::{CatalogStore, run_refresher};
use karpenter_scaleway::cli::catalog::{self as catalog_cli, CatalogArgs};
use karpenter_scaleway::cli::render_config::{self, RenderConfigArgs};
use karpenter_scaleway::cli::servers::{self as servers_cli, ServersArgs};
use karpenter_scaleway::config::{LogFormat, ServeArgs};
use karpenter_scaleway::gc::{self, KubeSweepEvents, SweepPolicy, Sweeper, run_orphan_sweeper};
use karpenter_scaleway::grpc::{self, CloudProviderService, Leadership};
use karpenter_scaleway::install::{EngineDeps, InstallEngine, InstallSettings};
use karpenter_scaleway::k8s::bootstrap_tokens::{KubeBootstrapTokens, run_sweeper};
use karpenter_scaleway::k8s::drift_stamp::{NodeClaimStamper, run_restamper};
use karpenter_scaleway::k8s::node_registration::KubeNodeRegistrar;
use karpenter_scaleway::k8s::nodes::{KubeNodes, NodeClaimList};
use karpenter_scaleway::k8s::resume::run_resumer;
use karpenter_scaleway::metrics;
use karpenter_scaleway::nodeclass::instance::{
    self as instance_class, InstanceNodeClassController,
};
use karpenter_scaleway::nodeclass::{self, KubeNodeClasses, NodeClassController};
use karpenter_scaleway::provider::vm::{VmJoiner, VmPorts, run_vm_joiner};
use karpenter_scaleway::provider::{
    BootstrapTokens, ClusterPorts, Provider, ProviderSettings, RebootPorts, RebootSettings,
    RebootWatch, RepairTolerations, longest_install, repair_policies, run_reboot_watch,
};
use karpenter_scaleway::rescue::RusshShell;
use karpenter_scaleway::scaleway::ElasticMetal;
use karpenter_scaleway::scaleway::block::Block;
use karpenter_scaleway::scaleway::instance::Instance;
use karpenter_scaleway::talos::GrpcTalos;

#[derive(Parser)]
#[command(
    name = "karpenter-scaleway",
    version,
    about = "Karpenter cloud provider for Scaleway Elastic Metal"
)]
struct Cli {
    /// Log format; the level comes from RUST_LOG (default `info`).
    #[arg(
        long,
        env = "LOG_FORMAT",
        value_enum,
        default_value = "text",
        global = true
    )]
    log_format: LogFormat,
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run the provider: gRPC CloudProvider service, NodeClass reconciler,
    /// catalog refresh and install engine.
    Serve(Box<ServeArgs>),
    /// Print the NodeClass CRDs (YAML): both kinds, or the one named.
    Crd {
        /// `ScalewayElasticMetalNodeClass` or `ScalewayInstanceNodeClass`;
        /// unset = both, as one multi-document stream.
        kind: Option<String>,
    },
    /// Print the machine config a NodeClaim would get with a NodeClass
    /// (secrets redacted unless --show-secrets).
    RenderConfig(Box<RenderConfigArgs>),
    /// Print the instance types Karpenter would see, per zone, with prices,
    /// stock and availability (or serve them read-only with --serve).
    Catalog(Box<CatalogArgs>),
    /// List the servers this cluster owns in every zone: NodeClaim, offer,
    /// zone, status, install phase, age, and what the orphan sweeper would do
    /// with each. Fails rather than print a partial list.
    Servers(Box<ServersArgs>),
    /// What the demand planner of each standby pool decided (the NodeClass
    /// status the leader writes) and what the cluster's load needs now.
    /// Reads the Kubernetes API only.
    Plan(Box<karpenter_scaleway::cli::plan::PlanArgs>),
}

fn init_tracing(format: LogFormat) {
    let filter = EnvFilter::try_from_default_env().unwrap_or_else(|_| EnvFilter::new("info"));
    // Colour only on a terminal: log files and collectors get plain text.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stdout()));
    match format {
        LogFormat::Json => builder.json().flatten_event(true).init(),
        LogFormat::Text => builder.init(),
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    // One TLS crypto provider for every rustls user (reqwest, kube).
    let _ = rustls::crypto::ring::default_provider().install_default();
    match cli.command {
        Command::Crd { kind: None } => {
            print!("{}", nodeclass::all_crds_yaml());
            Ok(())
        }
        Command::Crd { kind: Some(kind) } => {
            let Some(kind) = nodeclass::NodeClassKind::from_kind(&kind) else {
                let known: Vec<&str> = nodeclass::NodeClassKind::ALL
                    .iter()
                    .map(|k| k.kind())
                    .collect();
                anyhow::bail!(
                    "unknown NodeClass kind {kind:?}: one of {}",
                    known.join(", ")
                );
            };
            print!("{}", kind.yaml());
            Ok(())
        }
        Command::Serve(args) => {
            init_tracing(cli.log_format);
            serve(*args).await
        }
        Command::RenderConfig(args) => render_config::run(*args).await,
        Command::Catalog(args) => catalog_cli::run(*args).await,
        Command::Servers(args) => servers_cli::run(*args).await,
        Command::Plan(args) => karpenter_scaleway::cli::plan::run(*args).await,
    }
}

/// Resolves on SIGTERM or Ctrl-C.
async fn termination() {
    let mut term = match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
        Ok(s) => s,
        Err(e) => {
            warn!(error = %e, "cannot listen for SIGTERM; only Ctrl-C stops the process");
            let _ = tokio::signal::ctrl_c().await;
            return;
        }
    };
    tokio::select! {
        _ = term.recv() => {}
        _ = tokio::signal::ctrl_c() => {}
    }
}

/// How long Karpenter core waits for a rebooted node (a constant of its
/// reboot controller): the provider's reboot deadlines must be shorter.
const CORE_REBOOT_WINDOW: Duration = Duration::from_secs(20 * 60);

/// A future that resolves once shutdown has been requested.
async fn stopped(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|stop| *stop).await;
}

async fn serve(args: ServeArgs) -> anyhow::Result<()> {
    let scw = args.scaleway.load()?;
    for note in &scw.notes {
        warn!("{note}");
    }
    let zones = args.zones(&scw.default_zone);
    let instance_zones = args.instance_zones(&scw.default_zone);
    info!(
        cluster = %args.cluster_name,
        zones = %zones.join(","),
        instance_zones = %instance_zones.join(","),
        api_url = %scw.api_url,
        access_key = scw.access_key.as_deref().unwrap_or(""),
        project_id = %scw.project_id,
        scw_profile = scw.profile.as_deref().unwrap_or("none"),
        socket = %args.socket.display(),
        "starting karpenter-scaleway"
    );
    if let Some(point) = args.test_crash_at {
        karpenter_scaleway::crashpoint::arm(point);
    }
    let scaleway = Arc::new(scw.client().context("building the Scaleway client")?);
    let instance_api: Arc<dyn Instance> = scaleway.clone();
    let block_api: Arc<dyn Block> = scaleway.clone();
    let networks_api: Arc<dyn karpenter_scaleway::scaleway::private_network::PrivateNetworks> =
        scaleway.clone();
    let api: Arc<dyn ElasticMetal> = scaleway;
    let client = kube::Client::try_default()
        .await
        .context("connecting to the Kubernetes API")?;
    let tokens =
        KubeBootstrapTokens::new(client.clone(), &args.cluster_name, args.bootstrap_token_ttl)
            .map_err(anyhow::Error::msg)?;
    let token_port: Arc<dyn BootstrapTokens> = Arc::new(tokens.clone());
    let (stop_tx, stop_rx) = watch::channel(false);

    let catalog = CatalogStore::new(args.unavailable_offering_ttl);
    let refresher = tokio::spawn(run_refresher(
        catalog.clone(),
        api.clone(),
        zones.clone(),
        args.catalog_refresh,
    ));
    // Registered Nodes correct the catalog's allocatable (ends with the process).
    tokio::spawn(karpenter_scaleway::k8s::catalog::observe_nodes(
        client.clone(),
        catalog.clone(),
        stopped(stop_rx.clone()),
    ));

    let leadership = Leadership::default();
    // Writing NodeClass status, sweeping tokens and orphans, resuming installs:
    // only the replica holding Karpenter's leader lease acts on the cluster.
    let is_leader: Arc<dyn Fn() -> bool + Send + Sync> = {
        let leadership = leadership.clone();
        Arc::new(move || leadership.is_leader())
    };
    let nodeclasses = NodeClassController::new(
        client.clone(),
        api.clone(),
        networks_api.clone(),
        scw.project_id.clone(),
        zones.clone(),
        catalog.clone(),
        is_leader.clone(),
    );
    let store = nodeclasses.store();
    let reconciler = tokio::spawn(nodeclasses.run(stopped(stop_rx.clone())));
    // Scaleway Instances are served where the cluster has their CRD (read
    // once: installing it later takes a restart). Without it nothing calls
    // the Instance API, so credentials scoped to Elastic Metal keep working
    // and List never fails for lack of Instance permissions.
    let serve_instances = instance_class::probe_served(&client, Default::default()).await;
    let instance_classes = InstanceNodeClassController::new(
        client.clone(),
        instance_api.clone(),
        networks_api.clone(),
        scw.project_id.clone(),
        instance_zones.clone(),
        is_leader.clone(),
        catalog.clone(),
    );
    let instance_cache = instance_classes.cache();
    let instance_reconciler =
        tokio::spawn(instance_classes.run(serve_instances, stopped(stop_rx.clone())));
    let instance_refresher = serve_instances.then(|| {
        tokio::spawn(karpenter_scaleway::catalog::run_instance_refresher(
            catalog.clone(),
            instance_api.clone(),
            instance_zones.clone(),
            args.catalog_refresh,
        ))
    });
    // Serving Create before the NodeClass cache is filled would answer
    // NodeClassNotReady, and core would delete the NodeClaim.
    wait_for_nodeclass_cache(&client, &store).await;

    let install_settings = InstallSettings {
        poll_interval: args.poll_interval,
        probe_interval: args.install.probe_interval,
        ssh_port: args.rescue_ssh_port,
        talos_port: args.talos_api_port,
        deadlines: args.install.deadlines().map_err(anyhow::Error::msg)?,
        apply_grace: args.install.apply_grace,
        // The client's pace (`with_pacing` above): what delivery windows share.
        status_read_spacing: Some(args.scaleway.api_rate_limit)
            .filter(|r| r.is_finite() && *r > 0.0)
            .map(|r| Duration::from_secs_f64(1.0 / r)),
        ..InstallSettings::default()
    };
    // Node repair must never cut an install: the policies follow the deadlines.
    let repair = repair_policies(
        &install_settings,
        RepairTolerations {
            reboot_after: args.repair_reboot_after,
            replace_after: args.repair_replace_after,
        },
    );
    let longest = longest_install(&install_settings);
    if let Some(warning) = gc::grace_warning(args.sweeper.orphan_grace, longest) {
        warn!(
            orphan_grace_s = args.sweeper.orphan_grace.as_secs(),
            longest_install_s = longest.as_secs(),
            "{warning}"
        );
    }
    let engine = Arc::new(InstallEngine::new(EngineDeps {
        elastic_metal: api.clone(),
        capacity: catalog.clone(),
        rescue: Arc::new(RusshShell::default()),
        talos: Arc::new(GrpcTalos::default()),
        nodes: Arc::new(KubeNodes::new(client.clone(), token_port.clone())),
        networks: Some(networks_api.clone()),
        settings: install_settings.clone(),
    }));
    let engine_settings = install_settings;
    // Reboot (core v1.15): an Elastic Metal reboot gets the booting deadline
    // (a normal reboot until Talos answers), a VM its own.
    let reboot_settings = RebootSettings {
        baremetal_deadline: engine_settings.deadlines.booting,
        instance_deadline: args.instance_reboot_deadline,
        call_timeout: engine_settings.call_timeout,
    };
    for (kind, deadline) in [
        ("--booting-deadline", reboot_settings.baremetal_deadline),
        (
            "--instance-reboot-deadline",
            reboot_settings.instance_deadline,
        ),
    ] {
        if deadline >= CORE_REBOOT_WINDOW {
            warn!(
                flag = kind,
                deadline_s = deadline.as_secs(),
                "reboot deadline not shorter than Karpenter's own 20-minute window: a reboot that never returns is ended by core, not earlier"
            );
        }
    }
    let reboot_nodes = Arc::new(KubeNodes::new(client.clone(), token_port.clone()));
    // Standby installs and wipes run in an engine of their own: their
    // progress goes on the server's tags, their Events to the NodeClass.
    let standby_events: Arc<dyn karpenter_scaleway::provider::standby::StandbyEvents> =
        Arc::new(karpenter_scaleway::k8s::standby_events::KubeStandbyEvents::new(client.clone()));
    let standby_port = Arc::new(karpenter_scaleway::provider::standby::StandbyNodePort::new(
        api.clone(),
        standby_events.clone(),
    ));
    let standby_engine = Arc::new(InstallEngine::new(EngineDeps {
        elastic_metal: api.clone(),
        capacity: catalog.clone(),
        rescue: Arc::new(RusshShell::default()),
        talos: Arc::new(GrpcTalos::default()),
        nodes: standby_port.clone(),
        networks: Some(networks_api.clone()),
        settings: engine_settings.clone(),
    }));
    // Installs in progress for /metrics, both engines together.
    let installs: metrics::InstallsByPhase = {
        let (engine, standby_engine) = (engine.clone(), standby_engine.clone());
        Arc::new(move || {
            let mut by_phase = engine.installs_by_phase();
            for (phase, n) in standby_engine.installs_by_phase() {
                *by_phase.entry(phase).or_default() += n;
            }
            by_phase
        })
    };
    let node_claims = NodeClaimList::new(client.clone());
    let class_port = Arc::new(KubeNodeClasses::new(store, client.clone()));
    let churn_watch = tokio::spawn(
        karpenter_scaleway::churn::watch::ChurnWatch::new(
            client.clone(),
            catalog.clone(),
            class_port.clone(),
        )
        .run(
            args.churn_interval,
            is_leader.clone(),
            stopped(stop_rx.clone()),
        ),
    );
    let provider = Arc::new(
        Provider::new(
            api.clone(),
            catalog.clone(),
            class_port,
            engine.clone(),
            ClusterPorts {
                tokens: token_port.clone(),
                nodes: Arc::new(KubeNodeRegistrar::new(client.clone())),
            },
            ProviderSettings {
                cluster_name: args.cluster_name.clone(),
                project_id: scw.project_id.clone(),
                zones: zones.clone(),
                instance_zones: instance_zones.clone(),
            },
        )
        // List proves absence against the NodeClaims (never a partial list).
        .with_node_claims(Arc::new(node_claims.clone()))
        // Attachments, private NICs and their addresses.
        .with_private_networks(networks_api.clone())
        // Orders an idle sibling can take are refused during a disruption.
        .with_churn_guard(Arc::new(
            karpenter_scaleway::churn::hold::KubeSiblingNodes::new(client.clone()),
        ))
        // Reboot: the replay record on the NodeClaim, Events, deadlines.
        .with_reboots(RebootPorts {
            claims: Arc::new(node_claims.clone()),
            nodes: reboot_nodes.clone(),
            settings: reboot_settings,
            clock: Arc::new(chrono::Utc::now),
        })
        .with_standby(karpenter_scaleway::provider::standby::StandbyPorts {
            book: Arc::default(),
            engine: standby_engine,
            port: standby_port,
            events: standby_events,
            periods: args.standby.periods(),
        })
        .with_planner(karpenter_scaleway::provider::standby::PlannerPorts {
            load: Arc::new(karpenter_scaleway::k8s::planner::KubePlannerLoad::new(
                client.clone(),
            )),
            status: Arc::new(karpenter_scaleway::k8s::planner::KubePlannerStatus::new(
                client.clone(),
            )),
            demand: Arc::default(),
            clock: Arc::new(chrono::Utc::now),
        }),
    );
    let provider = if serve_instances {
        Arc::new(
            Arc::into_inner(provider)
                .expect("the provider is not shared yet")
                .with_instances(VmPorts {
                    api: instance_api.clone(),
                    block: block_api.clone(),
                    classes: Arc::new(instance_cache),
                }),
        )
    } else {
        provider
    };
    let standby = tokio::spawn(karpenter_scaleway::provider::standby::run_standby(
        karpenter_scaleway::provider::standby::StandbyController::new(provider.clone()),
        args.standby.standby_interval,
        is_leader.clone(),
        stopped(stop_rx.clone()),
    ));
    let vm_joiner = serve_instances.then(|| {
        tokio::spawn(run_vm_joiner(
            VmJoiner::new(
                provider.clone(),
                Arc::new(node_claims.clone()),
                Arc::new(KubeNodes::new(client.clone(), token_port.clone())),
            ),
            args.poll_interval,
            is_leader.clone(),
            stopped(stop_rx.clone()),
        ))
    });
    // Reboots whose node never comes back end before core's 20 minutes.
    let reboot_watch = tokio::spawn(run_reboot_watch(
        RebootWatch::new(provider.clone(), reboot_nodes),
        args.resume_interval,
        is_leader.clone(),
        stopped(stop_rx.clone()),
    ));
    let orphan_sweeper = tokio::spawn(run_orphan_sweeper(
        Sweeper {
            api,
            claims: Arc::new(node_claims.clone()),
            in_flight: engine,
            release: Some(provider.clone()),
            events: Arc::new(KubeSweepEvents::new(client.clone())),
            policy: SweepPolicy {
                cluster_name: args.cluster_name.clone(),
                project_id: scw.project_id.clone(),
                grace: args.sweeper.orphan_grace,
                dry_run: args.sweeper.sweep_dry_run,
            },
            zones,
            // The Instance side (VMs and the SBS volumes they leave) only
            // where Instances are served.
            instance: serve_instances.then(|| instance_api.clone()),
            instance_zones,
            block: serve_instances.then(|| block_api.clone()),
            instance_grace: args.sweeper.instance_orphan_grace,
            teardowns: gc::Teardowns::default(),
        },
        args.sweeper.sweep_interval,
        is_leader.clone(),
        stopped(stop_rx.clone()),
    ));
    let sweeper = tokio::spawn(run_sweeper(
        tokens,
        node_claims.clone(),
        args.bootstrap_token_sweep_interval,
        is_leader.clone(),
        stopped(stop_rx.clone()),
    ));
    let restamper = tokio::spawn(run_restamper(
        provider.clone(),
        node_claims.clone(),
        NodeClaimStamper::new(client.clone()),
        args.resume_interval,
        is_leader.clone(),
        stopped(stop_rx.clone()),
    ));
    let resumer = tokio::spawn(run_resumer(
        provider.clone(),
        node_claims,
        args.resume_interval,
        is_leader.clone(),
        stopped(stop_rx.clone()),
    ));
    let metrics_server = args.metrics_listen.map(|addr| {
        let sources = metrics::Sources {
            catalog,
            is_leader,
            installs,
        };
        tokio::spawn(metrics::serve(addr, sources, stopped(stop_rx.clone())))
    });

    let stop_tx = Arc::new(stop_tx);
    let on_signal = stop_tx.clone();
    tokio::spawn(async move {
        termination().await;
        info!("termination signal received; shutting down");
        let _ = on_signal.send(true);
    });
    let service = CloudProviderService::new(provider, leadership, repair);
    let served = grpc::serve(&args.socket, service, stopped(stop_rx.clone())).await;
    // The gRPC server also ends on its own errors: stop everything else.
    let _ = stop_tx.send(true);

    refresher.abort();
    if let Some(r) = instance_refresher {
        r.abort();
    }
    if let Some(j) = vm_joiner {
        let _ = j.await;
    }
    let _ = standby.await;
    let _ = reboot_watch.await;
    let _ = reconciler.await;
    let _ = instance_reconciler.await;
    let _ = sweeper.await;
    let _ = orphan_sweeper.await;
    let _ = resumer.await;
    let _ = restamper.await;
    let _ = churn_watch.await;
    if let Some(m) = metrics_server {
        match m.await {
            Ok(Err(e)) => warn!(error = %e, "metrics endpoint failed"),
            Err(e) => warn!(error = %e, "metrics endpoint task failed"),
            Ok(Ok(())) => {}
        }
    }
    info!("stopped");
    served
}

/// Waits (at most 60 s) until the reconciler's cache holds every NodeClass the
/// API lists now. `Store::wait_until_ready` was seen to resolve only a minute
/// after the reconciler had already seen every object, delaying startup by that
/// much; comparing with a direct listing is deterministic.
async fn wait_for_nodeclass_cache(
    client: &kube::Client,
    store: &kube::runtime::reflector::Store<nodeclass::ScalewayElasticMetalNodeClass>,
) {
    use kube::ResourceExt as _;
    let api = kube::Api::<nodeclass::ScalewayElasticMetalNodeClass>::all(client.clone());
    let started = std::time::Instant::now();
    let deadline = started + Duration::from_secs(60);
    loop {
        match api.list_metadata(&Default::default()).await {
            Ok(list) => {
                let cached: std::collections::HashSet<String> =
                    store.state().iter().map(|nc| nc.name_any()).collect();
                if list.items.iter().all(|m| cached.contains(&m.name_any())) {
                    info!(
                        nodeclasses = list.items.len(),
                        waited_ms = started.elapsed().as_millis() as u64,
                        "NodeClass cache filled"
                    );
                    return;
                }
            }
            Err(error) => warn!(%error, "listing NodeClasses"),
        }
        if std::time::Instant::now() > deadline {
            warn!("NodeClass cache not filled after 60s; serving anyway");
            return;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}
