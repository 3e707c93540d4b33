//! `karpenter-scaleway servers`: the servers this cluster owns in every zone,
//! of both kinds (`--kind`): Elastic Metal servers and Instances (VMs). Each
//! line says its kind, the NodeClaim that claims it (or the tagged name,
//! marked missing), its offer or commercial type, zone, status, IPv4,
//! NodeClass, install phase, capacity (a standby server's state, an adopted
//! node's reservation) and age, and what the orphan sweeper would do with
//! it, computed by the sweeper's own decision functions
//! ([`crate::gc::decide`], [`crate::gc::decide_instances`]) with the graces
//! `serve` has. The SBS volumes VMs leave behind are not listed. Each
//! server's Private Network links (attachment or private NIC, status, VLAN,
//! address) follow the table, read best effort (`servers_network.rs`). `--standby`
//! narrows the list to the standby servers (docs/standby.md) and the nodes
//! adopted from them.
//!
//! Like List(), it fails rather than print a partial list: a zone, a page or
//! the NodeClaims that cannot be read is an error (non-zero exit), since a
//! missing NodeClaim would show its server as an orphan.
//!
//! The command does not see the controller's install engine, so the verdict
//! is computed without its in-flight check; instead, a NodeClaim whose
//! `install.karpenter.scaleway.com/phase` annotation is not terminal marks its
//! server in flight. A standby server has no NodeClaim: its state and install
//! phase come from its own tags ([`StandbyServer::of`]). Nothing secret is
//! printed: only the fields listed here (never the rescue password the API
//! returns, nor a VM's user data, which the command never reads).

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use chrono::{DateTime, Utc};
use clap::{Args, ValueEnum};
use futures::future::join_all;
use serde_json::{Value, json};

pub use super::catalog::Kind;
use crate::catalog::ClassKind;
use crate::config::{ScalewayArgs, parse_positive_duration, parse_zone};
use crate::gc::instance::tag_in;
use crate::gc::{
    Decision, InstanceDecision, Reason, Subject, SweepPolicy, Verdict, decide, decide_instances,
    format_age, list_owned_servers,
};
use crate::install::{PROGRESS_ANNOTATION_PREFIX, Phase};
use crate::k8s::nodes::NodeClaimList;
use crate::provider::standby::{StandbyServer, State as StandbyState, TAG_RESERVATION};
use crate::provider::{
    NodeClaimSource, TAG_CLUSTER, TAG_NODECLAIM, TAG_NODECLASS, parse_provider_id, tag, tag_value,
};
use crate::scaleway::ElasticMetal;
use crate::scaleway::instance::{self, Instance, ServerFilter, ServerState};

#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum Output {
    Table,
    Json,
}

#[derive(Debug, Clone, Args)]
pub struct ServersArgs {
    #[command(flatten)]
    pub scaleway: ScalewayArgs,
    /// Name of the cluster (the value of its ownership tag).
    #[arg(long, env = "CLUSTER_NAME")]
    pub cluster_name: String,
    /// Zones to read, comma-separated. Default: the default zone
    /// (`--default-zone`).
    #[arg(long, env = "SCW_ZONES", value_delimiter = ',', value_parser = parse_zone)]
    pub zones: Vec<String>,
    /// The sweeper's grace, as `serve` has it.
    #[arg(long, env = "ORPHAN_GRACE", default_value = "3h", value_parser = parse_positive_duration)]
    pub orphan_grace: Duration,
    /// The sweeper's grace for Instances, as `serve` has it.
    #[arg(long, env = "INSTANCE_ORPHAN_GRACE", default_value = "5m", value_parser = parse_positive_duration)]
    pub instance_orphan_grace: Duration,
    /// The sweeper runs in dry-run mode (verdicts say `would_delete`).
    #[arg(long, env = "SWEEP_DRY_RUN")]
    pub sweep_dry_run: bool,
    /// Which servers to list: Elastic Metal servers, Instances (VMs), or both.
    #[arg(long, value_enum, default_value = "all")]
    pub kind: Kind,
    /// Only the standby servers and the nodes adopted from them (Elastic
    /// Metal only: Instances have no standby servers).
    #[arg(long)]
    pub standby: bool,
    /// A table, or JSON (every field, plus the sweeper's detail).
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    pub output: Output,
}

impl ServersArgs {
    fn zones(&self, default_zone: &str) -> Vec<String> {
        crate::config::served_zones(&self.zones, default_zone)
    }
}

pub async fn run(args: ServersArgs) -> anyhow::Result<()> {
    let scw = args.scaleway.load()?;
    scw.print_notes();
    let client = Arc::new(scw.client().context("building the Scaleway client")?);
    let kube = kube::Client::try_default()
        .await
        .context("connecting to the Kubernetes API")?;
    let claims = NodeClaimList::new(kube);
    let policy = SweepPolicy {
        cluster_name: args.cluster_name.clone(),
        project_id: scw.project_id.clone(),
        grace: args.orphan_grace,
        dry_run: args.sweep_dry_run,
    };
    let apis = Apis {
        elastic_metal: client.as_ref(),
        instance: client.as_ref(),
        networks: Some(client.as_ref()),
    };
    let kind = listed_kind(args.kind, args.standby)?;
    let report = collect(
        &apis,
        kind,
        &claims,
        &args.zones(&scw.default_zone),
        &Graces {
            policy,
            instance_grace: args.instance_orphan_grace,
        },
        Utc::now(),
    )
    .await?;
    let report = if args.standby {
        report.standby_only()
    } else {
        report
    };
    let out = match args.output {
        Output::Table => report.table(),
        Output::Json => serde_json::to_string_pretty(&report.json())? + "\n",
    };
    print!("{out}");
    Ok(())
}

/// The kind to list: `--standby` reads Elastic Metal only (Instances have
/// no standby servers), and refuses `--kind instance`.
pub fn listed_kind(kind: Kind, standby: bool) -> anyhow::Result<Kind> {
    match (standby, kind) {
        (false, kind) => Ok(kind),
        (true, Kind::Instance) => {
            anyhow::bail!("--standby lists Elastic Metal servers; --kind instance has none")
        }
        (true, _) => Ok(Kind::ElasticMetal),
    }
}

/// The APIs the servers are listed from.
pub struct Apis<'a> {
    pub elastic_metal: &'a dyn ElasticMetal,
    pub instance: &'a dyn Instance,
    /// Where each server's Private Network links are read (best effort,
    /// `servers_network.rs`); `None`: not read.
    pub networks: Option<&'a dyn crate::scaleway::private_network::PrivateNetworks>,
}

/// `elastic-metal` or `instance`, as `catalog --kind` spells them.
pub fn kind_name(kind: ClassKind) -> &'static str {
    match kind {
        ClassKind::ElasticMetal => "elastic-metal",
        ClassKind::Instance => "instance",
    }
}

/// The sweeper's rules: `policy.grace` is the Elastic Metal grace.
#[derive(Debug, Clone, PartialEq)]
pub struct Graces {
    pub policy: SweepPolicy,
    pub instance_grace: Duration,
}

/// The orphan sweeper's verdict on a server.
#[derive(Debug, Clone, PartialEq)]
pub struct Sweep {
    pub verdict: Verdict,
    pub reason: Reason,
    pub detail: String,
}

/// One owned server, of either kind.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub kind: ClassKind,
    pub id: String,
    pub name: String,
    pub zone: String,
    /// The offer (Elastic Metal) or commercial type (Instance).
    pub server_type: String,
    /// `ready`, `delivering`, ... (Elastic Metal); `running`, `stopped`,
    /// `starting/allocating node`, ... (Instance).
    pub status: String,
    pub ipv4: Option<String>,
    /// The NodeClass named by the server's tag.
    pub nodeclass: Option<String>,
    /// The NodeClaim that claims the server (by providerID, or by the name
    /// in its nodeclaim tag), when one exists.
    pub claim: Option<String>,
    /// The name in the server's nodeclaim tag.
    pub claim_tag: Option<String>,
    pub created_at: Option<String>,
    /// `None` when the creation time is absent or unreadable.
    pub age: Option<Duration>,
    /// The install phase: from the claiming NodeClaim's annotation, or, for
    /// a standby server, from its own tags.
    pub phase: Option<String>,
    /// A standby server (standby tag, no NodeClaim tag): its state.
    pub standby: Option<Standby>,
    /// A node adopted from standby: its reservation id (the
    /// `karpenter.scaleway.com/reservation-id` tag).
    pub reservation: Option<String>,
    pub sweeper: Sweep,
    /// Its links to Private Networks (attachments, private NICs).
    pub private_links: Vec<network::LinkCell>,
}

/// Where a standby server stands, as its tags say.
#[derive(Debug, Clone, PartialEq)]
pub struct Standby {
    pub state: StandbyState,
    /// A former node wiped back to standby (`karpenter.scaleway.com/recycled`).
    pub recycled: bool,
}

/// What the command prints.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub graces: Graces,
    pub zones: Vec<String>,
    pub kind: Kind,
    pub rows: Vec<Row>,
    /// Narrowed to standby servers and adopted nodes (`--standby`).
    pub standby_only: bool,
    /// Why the Private Network links were not read, when they were not.
    pub networks_note: Option<String>,
}

fn reads_elastic_metal(kind: Kind) -> bool {
    matches!(kind, Kind::ElasticMetal | Kind::All)
}

fn reads_instances(kind: Kind) -> bool {
    matches!(kind, Kind::Instance | Kind::All)
}

/// Lists the servers of the kinds asked (every zone, all pages), then the
/// NodeClaims (the sweeper's order), and decides; any failure is an error.
pub async fn collect(
    apis: &Apis<'_>,
    kind: Kind,
    claims: &dyn NodeClaimSource,
    zones: &[String],
    graces: &Graces,
    now: DateTime<Utc>,
) -> anyhow::Result<Report> {
    let policy = &graces.policy;
    let mut metal = Vec::new();
    if reads_elastic_metal(kind) {
        metal = list_owned_servers(apis.elastic_metal, zones, policy)
            .await
            .with_context(|| {
                let hint = if kind == Kind::All {
                    "; in zones without Elastic Metal, pass --kind instance"
                } else {
                    ""
                };
                format!("listing the Elastic Metal servers (no partial list is printed{hint})")
            })?;
        metal.sort_by(|a, b| (&a.zone, &a.name, &a.id).cmp(&(&b.zone, &b.name, &b.id)));
    }
    let mut vms = Vec::new();
    if reads_instances(kind) {
        let hint = if kind == Kind::All {
            "; with credentials scoped to Elastic Metal, pass --kind elastic-metal"
        } else {
            ""
        };
        vms = list_owned_vms(apis.instance, zones, policy, hint).await?;
        vms.sort_by(|a, b| (&a.zone, &a.name, &a.id).cmp(&(&b.zone, &b.name, &b.id)));
    }
    let source = claims;
    let claims = source
        .list()
        .await
        .context("listing the NodeClaims (without them every server would look orphaned)")?;
    let index = ClaimIndex::new(&claims);
    // In flight, as far as the NodeClaims tell: a non-terminal phase.
    let in_flight: HashSet<String> = metal
        .iter()
        .filter(|s| {
            index
                .phase_of(index.claim_of_metal(s))
                .and_then(Phase::parse)
                .is_some_and(|p| !p.is_terminal())
        })
        .map(|s| s.id.clone())
        .collect();
    // As a pass does: the NodeClaims servers name but the list lacks, read
    // again; only those confirmed gone count as deleted.
    let mut deleted = HashSet::new();
    for name in crate::gc::unlisted_claims(&metal, &claims, policy) {
        let found = source
            .get(&name)
            .await
            .with_context(|| format!("reading NodeClaim {name}, which a server names"))?;
        if found.is_none() {
            deleted.insert(name);
        }
    }
    let mut rows: Vec<Row> = decide(&metal, &claims, &deleted, &in_flight, now, policy)
        .into_iter()
        .map(|d| metal_row(d, &index))
        .collect();
    // No volumes: a VM's decision does not depend on them.
    rows.extend(
        decide_instances(&vms, &[], &claims, now, policy, graces.instance_grace)
            .into_iter()
            .filter_map(|d| vm_row(d, &index)),
    );
    let mut report = Report {
        graces: graces.clone(),
        zones: zones.to_vec(),
        kind,
        rows,
        standby_only: false,
        networks_note: None,
    };
    if let Some(api) = apis.networks
        && let Err(note) = network::annotate(&mut report, api, &policy.project_id).await
    {
        report.networks_note = Some(note);
    }
    Ok(report)
}

/// Every zone, every page of the VMs carrying this cluster's tag in this
/// project, or the first error.
async fn list_owned_vms(
    api: &dyn Instance,
    zones: &[String],
    policy: &SweepPolicy,
    hint: &str,
) -> anyhow::Result<Vec<instance::Server>> {
    let filter = ServerFilter {
        tags: vec![tag(TAG_CLUSTER, &policy.cluster_name)],
        name: None,
        project: Some(policy.project_id.clone()),
    };
    let results = join_all(zones.iter().map(|z| api.list_servers(z, &filter))).await;
    let mut servers = Vec::new();
    for (zone, result) in zones.iter().zip(results) {
        servers.extend(result.with_context(|| {
            format!("listing the Instance servers in {zone} (no partial list is printed{hint})")
        })?);
    }
    Ok(servers)
}

/// The NodeClaims: their install phases, and which one claims which Elastic
/// Metal server (the sweeper decides about VMs with its own index).
struct ClaimIndex<'a> {
    phase: HashMap<&'a str, &'a str>,
    /// (zone, server id) of a `scaleway://baremetal/` providerID → NodeClaim.
    by_server: HashMap<(&'a str, &'a str), &'a str>,
    names: HashSet<&'a str>,
}

impl<'a> ClaimIndex<'a> {
    fn new(claims: &'a [Value]) -> Self {
        let key = format!("{PROGRESS_ANNOTATION_PREFIX}phase");
        let mut index = ClaimIndex {
            phase: HashMap::new(),
            by_server: HashMap::new(),
            names: HashSet::new(),
        };
        for c in claims {
            let Some(name) = c.pointer("/metadata/name").and_then(Value::as_str) else {
                continue;
            };
            index.names.insert(name);
            if let Some(p) = c
                .pointer("/metadata/annotations")
                .and_then(|a| a.get(&key))
                .and_then(Value::as_str)
            {
                index.phase.insert(name, p);
            }
            if let Some(server) = c
                .pointer("/status/providerID")
                .and_then(Value::as_str)
                .and_then(parse_provider_id)
            {
                index.by_server.insert(server, name);
            }
        }
        index
    }

    /// By providerID, else by the name in the nodeclaim tag (Create tags the
    /// server before the NodeClaim gets its providerID).
    fn claim_of_metal(&self, s: &crate::scaleway::Server) -> Option<&'a str> {
        self.by_server
            .get(&(s.zone.as_str(), s.id.as_str()))
            .copied()
            .or_else(|| tag_value(s, TAG_NODECLAIM).and_then(|t| self.names.get(t).copied()))
    }

    fn phase_of(&self, claim: Option<&str>) -> Option<&'a str> {
        claim.and_then(|c| self.phase.get(c).copied())
    }
}

fn metal_row(d: Decision, index: &ClaimIndex<'_>) -> Row {
    let s = &d.server;
    let status = serde_json::to_value(&s.status)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| "unknown".into());
    let standby = StandbyServer::of(s);
    // A standby server's phase and NodeClass are its own; a node's phase is
    // its NodeClaim's.
    let (nodeclass, phase) = match &standby {
        Some(sb) => (
            Some(sb.class.clone()),
            sb.progress.phase.map(|p| p.as_str().to_string()),
        ),
        None => (
            d.nodeclass().map(str::to_string),
            index.phase_of(index.claim_of_metal(s)).map(str::to_string),
        ),
    };
    Row {
        kind: ClassKind::ElasticMetal,
        id: s.id.clone(),
        name: s.name.clone(),
        zone: s.zone.clone(),
        server_type: s.offer_name.clone(),
        status,
        ipv4: s.ipv4().map(str::to_string),
        nodeclass,
        claim: d.claim.clone(),
        claim_tag: tag_value(s, TAG_NODECLAIM).map(str::to_string),
        created_at: Some(s.created_at.clone()),
        age: d.age,
        phase,
        reservation: standby
            .is_none()
            .then(|| tag_value(s, TAG_RESERVATION).map(str::to_string))
            .flatten(),
        standby: standby.map(|sb| Standby {
            state: sb.state,
            recycled: sb.recycled,
        }),
        sweeper: Sweep {
            verdict: d.verdict,
            reason: d.reason,
            detail: d.detail.clone(),
        },
        private_links: Vec::new(),
    }
}

/// `running`, `stopped`, or a passing state with its detail
/// (`starting/allocating node`, `stopping/terminating`).
pub fn vm_status(state: &ServerState, detail: &str) -> String {
    let name = match serde_json::to_value(state).ok() {
        Some(Value::String(s)) if *state != ServerState::Other => s,
        _ => "unknown".to_string(),
    };
    let settled = matches!(state, ServerState::Running | ServerState::Stopped);
    if settled || detail.is_empty() {
        name
    } else {
        format!("{name}/{detail}")
    }
}

/// A VM's line, from the sweeper's decision about it (`None` for a volume,
/// which `collect` never passes).
fn vm_row(d: InstanceDecision, index: &ClaimIndex<'_>) -> Option<Row> {
    let Subject::Vm(s) = d.subject else {
        return None;
    };
    Some(Row {
        kind: ClassKind::Instance,
        id: s.id.clone(),
        name: s.name.clone(),
        zone: s.zone.clone(),
        server_type: s.commercial_type.clone(),
        status: vm_status(&s.state, &s.state_detail),
        ipv4: s.ipv4().map(str::to_string),
        nodeclass: tag_in(&s.tags, TAG_NODECLASS).map(str::to_string),
        phase: index.phase_of(d.claim.as_deref()).map(str::to_string),
        claim: d.claim,
        claim_tag: tag_in(&s.tags, TAG_NODECLAIM).map(str::to_string),
        created_at: s.creation_date.clone(),
        age: d.age,
        standby: None,
        reservation: None,
        sweeper: Sweep {
            verdict: d.verdict,
            reason: d.reason,
            detail: d.detail,
        },
        private_links: Vec::new(),
    })
}

impl Row {
    /// The claiming NodeClaim, else the tag's name marked as missing.
    fn nodeclaim_cell(&self) -> String {
        match (&self.claim, self.claim_tag.as_deref()) {
            (Some(c), _) => c.clone(),
            (None, Some(t)) if !t.is_empty() => format!("{t} (missing)"),
            _ => "-".into(),
        }
    }

    /// `standby/<state>` for a standby server, `reserved/<reservation id>`
    /// for a node adopted from one, else `-`.
    fn capacity_cell(&self) -> String {
        match (&self.standby, &self.reservation) {
            (Some(sb), _) => format!("standby/{}", sb.state.as_str()),
            (None, Some(id)) => format!("reserved/{id}"),
            (None, None) => "-".into(),
        }
    }

    /// A standby server, or a node adopted from one.
    fn is_standby(&self) -> bool {
        self.standby.is_some() || self.reservation.is_some()
    }

    fn sweeper_cell(&self) -> String {
        format!(
            "{} ({})",
            self.sweeper.verdict.as_str(),
            self.sweeper.reason.as_str()
        )
    }
}

const IN_FLIGHT_NOTE: &str = "verdicts computed without the controller's in-flight check: \
NodeClaims whose install phase annotation is not terminal count as in flight";

const VOLUMES_NOTE: &str = "the SBS volumes VMs leave behind are not listed here; \
the sweeper deletes them once detached and older than the Instance grace";

impl Report {
    /// Only the standby servers and the nodes adopted from them.
    pub fn standby_only(mut self) -> Report {
        self.rows.retain(Row::is_standby);
        self.standby_only = true;
        self
    }

    pub fn table(&self) -> String {
        let header = [
            "KIND",
            "NODECLAIM",
            "SERVER",
            "TYPE",
            "ZONE",
            "STATUS",
            "IP",
            "NODECLASS",
            "PHASE",
            "CAPACITY",
            "AGE",
            "SWEEPER",
        ];
        let dash = |v: &Option<String>| v.clone().unwrap_or_else(|| "-".into());
        let rows: Vec<[String; 12]> = self
            .rows
            .iter()
            .map(|r| {
                [
                    kind_name(r.kind).to_string(),
                    r.nodeclaim_cell(),
                    r.id.clone(),
                    r.server_type.clone(),
                    r.zone.clone(),
                    r.status.clone(),
                    dash(&r.ipv4),
                    dash(&r.nodeclass),
                    dash(&r.phase),
                    r.capacity_cell(),
                    r.age.map(format_age).unwrap_or_else(|| "?".into()),
                    r.sweeper_cell(),
                ]
            })
            .collect();
        let mut widths = header.map(str::len);
        for row in &rows {
            for (w, cell) in widths.iter_mut().zip(row) {
                *w = (*w).max(cell.chars().count());
            }
        }
        let mut out = String::new();
        let line = |out: &mut String, cells: &[&str]| {
            let mut text = String::new();
            for (i, (cell, w)) in cells.iter().zip(widths).enumerate() {
                if i + 1 == cells.len() {
                    text.push_str(cell);
                } else {
                    let _ = write!(text, "{cell:<w$}  ");
                }
            }
            let _ = writeln!(out, "{}", text.trim_end());
        };
        line(&mut out, &header);
        for row in &rows {
            let cells: Vec<&str> = row.iter().map(String::as_str).collect();
            line(&mut out, &cells);
        }
        let count = |k: ClassKind| self.rows.iter().filter(|r| r.kind == k).count();
        let kinds = match self.kind {
            Kind::ElasticMetal => "Elastic Metal only".to_string(),
            Kind::Instance => "Instances only".to_string(),
            Kind::All => format!(
                "{} Elastic Metal, {} Instance",
                count(ClassKind::ElasticMetal),
                count(ClassKind::Instance)
            ),
        };
        let policy = &self.graces.policy;
        let _ = writeln!(
            out,
            "\n{} server(s) ({kinds}) of cluster {:?} in {}; orphan grace {} (Elastic Metal), {} (Instances){}.",
            self.rows.len(),
            policy.cluster_name,
            self.zones.join(", "),
            format_age(policy.grace),
            format_age(self.graces.instance_grace),
            if policy.dry_run { ", dry run" } else { "" }
        );
        if let Some(line) = self.standby_summary() {
            let _ = writeln!(out, "{line}");
        }
        if let Some(section) = network::section(self) {
            let _ = writeln!(out, "{section}");
        }
        if reads_elastic_metal(self.kind) {
            let _ = writeln!(out, "Note: {IN_FLIGHT_NOTE}.");
        }
        if reads_instances(self.kind) {
            let _ = writeln!(out, "Note: {VOLUMES_NOTE}.");
        }
        out
    }

    /// `Standby: 3 server(s) (1 installing, 2 idle, 0 wiping); 1 node adopted
    /// from standby.`, when there is any of either.
    fn standby_summary(&self) -> Option<String> {
        let standby: Vec<StandbyState> = self
            .rows
            .iter()
            .filter_map(|r| r.standby.as_ref().map(|s| s.state))
            .collect();
        let adopted = self
            .rows
            .iter()
            .filter(|r| r.standby.is_none() && r.reservation.is_some())
            .count();
        if standby.is_empty() && adopted == 0 && !self.standby_only {
            return None;
        }
        let states: Vec<String> = StandbyState::ALL
            .iter()
            .map(|s| {
                let n = standby.iter().filter(|x| *x == s).count();
                format!("{n} {}", s.as_str())
            })
            .collect();
        Some(format!(
            "Standby: {} server(s) ({}); {adopted} node(s) adopted from standby{}.",
            standby.len(),
            states.join(", "),
            if self.standby_only {
                "; other servers left out (--standby)"
            } else {
                ""
            }
        ))
    }

    pub fn json(&self) -> Value {
        let servers: Vec<Value> = self
            .rows
            .iter()
            .map(|r| {
                let mut v = json!({
                    "kind": kind_name(r.kind),
                    "id": r.id,
                    "name": r.name,
                    "zone": r.zone,
                    "type": r.server_type,
                    "status": r.status,
                    "ipv4": r.ipv4,
                    "nodeClaim": r.claim,
                    "nodeClaimTag": r.claim_tag,
                    "nodeClass": r.nodeclass,
                    "installPhase": r.phase,
                    "standby": r.standby.as_ref().map(|s| json!({
                        "state": s.state.as_str(),
                        "recycled": s.recycled,
                    })),
                    "reservationId": r.reservation,
                    "createdAt": r.created_at,
                    "ageSeconds": r.age.map(|a| a.as_secs()),
                    "sweeper": {
                        "decision": r.sweeper.verdict.as_str(),
                        "reason": r.sweeper.reason.as_str(),
                        "detail": r.sweeper.detail,
                    },
                });
                // The field name of the Elastic Metal-only output, kept.
                if r.kind == ClassKind::ElasticMetal {
                    v["offer"] = json!(r.server_type);
                }
                if !r.private_links.is_empty() {
                    let links: Vec<Value> = r.private_links.iter().map(|l| l.json()).collect();
                    v["privateNetworks"] = json!(links);
                }
                v
            })
            .collect();
        let policy = &self.graces.policy;
        json!({
            "cluster": policy.cluster_name,
            "projectId": policy.project_id,
            "zones": self.zones,
            "kind": self.kind.to_possible_value().map(|v| v.get_name().to_string()),
            "orphanGraceSeconds": policy.grace.as_secs(),
            "instanceOrphanGraceSeconds": self.graces.instance_grace.as_secs(),
            "dryRun": policy.dry_run,
            "standbyOnly": self.standby_only,
            "inFlight": IN_FLIGHT_NOTE,
            "volumes": VOLUMES_NOTE,
            "servers": servers,
            "privateNetworksNote": self.networks_note,
        })
    }
}

#[path = "servers_network.rs"]
pub mod network;

#[cfg(test)]
#[path = "servers_tests.rs"]
mod tests;
