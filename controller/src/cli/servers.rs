//! `karpenter-scaleway servers`: the servers this cluster owns in every zone,
//! with the NodeClaim that claims each, its offer, zone, status, install phase
//! and age, and what the orphan sweeper would do with it — computed by the
//! sweeper's own decision function ([`crate::gc::decide`]).
//!
//! Like List(), it fails rather than print a partial list: a zone, a page or
//! the NodeClaims that cannot be read is an error (non-zero exit), since a
//! missing NodeClaim would show its server as an orphan.
//!
//! The command does not see the controller's install engine, so the verdict
//! is computed without its in-flight check; instead, a NodeClaim whose
//! `install.karpenter.scaleway.com/phase` annotation is not terminal marks its
//! server in flight. Nothing secret is printed: only the fields listed here
//! (never the rescue password the API returns).

use std::collections::{HashMap, HashSet};
use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use chrono::{DateTime, Utc};
use clap::{Args, ValueEnum};
use serde_json::{Value, json};

use crate::config::{ScalewayArgs, parse_positive_duration, parse_zone};
use crate::gc::{Decision, SweepPolicy, decide, format_age, list_owned_servers};
use crate::install::{PROGRESS_ANNOTATION_PREFIX, Phase};
use crate::k8s_nodes::NodeClaimList;
use crate::provider::{NodeClaimSource, TAG_NODECLAIM, parse_provider_id, tag_value};
use crate::scaleway::{ClientConfig, ElasticMetal, RetryPolicy, ScalewayClient, SecretKey};

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
    /// Zones to read, comma-separated. Default: `SCW_DEFAULT_ZONE`, else fr-par-2.
    #[arg(long, env = "SCW_ZONES", value_delimiter = ',', value_parser = parse_zone)]
    pub zones: Vec<String>,
    /// Fallback for `--zones`.
    #[arg(long = "default-zone", env = "SCW_DEFAULT_ZONE", default_value = "fr-par-2", value_parser = parse_zone)]
    pub default_zone: String,
    /// The sweeper's grace, as `serve` has it.
    #[arg(long, env = "ORPHAN_GRACE", default_value = "3h", value_parser = parse_positive_duration)]
    pub orphan_grace: Duration,
    /// The sweeper runs in dry-run mode (verdicts say `would_delete`).
    #[arg(long, env = "SWEEP_DRY_RUN")]
    pub sweep_dry_run: bool,
    /// A table, or JSON (every field, plus the sweeper's detail).
    #[arg(short = 'o', long, value_enum, default_value = "table")]
    pub output: Output,
}

impl ServersArgs {
    fn zones(&self) -> Vec<String> {
        crate::config::served_zones(&self.zones, &self.default_zone)
    }
}

pub async fn run(args: ServersArgs) -> anyhow::Result<()> {
    let api: Arc<dyn ElasticMetal> = Arc::new(
        ScalewayClient::new(ClientConfig {
            api_url: args.scaleway.api_url.clone(),
            secret_key: SecretKey::new(args.scaleway.secret_key.clone()),
            request_timeout: args.scaleway.api_timeout,
            retry: RetryPolicy::default(),
        })
        .context("building the Scaleway client")?
        .with_pacing(Some(args.scaleway.api_rate_limit)),
    );
    let client = kube::Client::try_default()
        .await
        .context("connecting to the Kubernetes API")?;
    let claims = NodeClaimList::new(client);
    let policy = SweepPolicy {
        cluster_name: args.cluster_name.clone(),
        project_id: args.scaleway.project_id.clone(),
        grace: args.orphan_grace,
        dry_run: args.sweep_dry_run,
    };
    let report = collect(api.as_ref(), &claims, &args.zones(), &policy, Utc::now()).await?;
    let out = match args.output {
        Output::Table => report.table(),
        Output::Json => serde_json::to_string_pretty(&report.json())? + "\n",
    };
    print!("{out}");
    Ok(())
}

/// One owned server and its verdict.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    pub decision: Decision,
    /// The install phase from the claiming NodeClaim's annotation.
    pub phase: Option<String>,
}

/// What the command prints.
#[derive(Debug, Clone, PartialEq)]
pub struct Report {
    pub policy: SweepPolicy,
    pub zones: Vec<String>,
    pub rows: Vec<Row>,
}

/// Lists the servers (every zone, all pages), then the NodeClaims (the
/// sweeper's order), and decides; any failure is an error.
pub async fn collect(
    api: &dyn ElasticMetal,
    claims: &dyn NodeClaimSource,
    zones: &[String],
    policy: &SweepPolicy,
    now: DateTime<Utc>,
) -> anyhow::Result<Report> {
    let mut servers = list_owned_servers(api, zones, policy)
        .await
        .context("listing the servers (no partial list is printed)")?;
    servers.sort_by(|a, b| (&a.zone, &a.name, &a.id).cmp(&(&b.zone, &b.name, &b.id)));
    let claims = claims
        .list()
        .await
        .context("listing the NodeClaims (without them every server would look orphaned)")?;
    let phases = install_phases(&claims);
    // In flight, as far as the NodeClaims tell: a non-terminal phase.
    let in_flight: HashSet<String> = servers
        .iter()
        .filter(|s| {
            phases
                .claim_of(s)
                .and_then(|c| phases.phase.get(c))
                .and_then(|p| Phase::parse(p))
                .is_some_and(|p| !p.is_terminal())
        })
        .map(|s| s.id.clone())
        .collect();
    let decisions = decide(&servers, &claims, &in_flight, now, policy);
    let rows = decisions
        .into_iter()
        .map(|decision| {
            let phase = phases
                .claim_of(&decision.server)
                .and_then(|c| phases.phase.get(c))
                .cloned();
            Row { decision, phase }
        })
        .collect();
    Ok(Report {
        policy: policy.clone(),
        zones: zones.to_vec(),
        rows,
    })
}

/// Install phases by NodeClaim name, and which NodeClaim points at which
/// server.
struct Phases {
    phase: HashMap<String, String>,
    by_server: HashMap<(String, String), String>,
    names: HashSet<String>,
}

impl Phases {
    fn claim_of(&self, server: &crate::scaleway::Server) -> Option<&String> {
        self.by_server
            .get(&(server.zone.clone(), server.id.clone()))
            .or_else(|| tag_value(server, TAG_NODECLAIM).and_then(|t| self.names.get(t)))
    }
}

fn install_phases(claims: &[Value]) -> Phases {
    let key = format!("{PROGRESS_ANNOTATION_PREFIX}phase");
    let mut phases = Phases {
        phase: HashMap::new(),
        by_server: HashMap::new(),
        names: HashSet::new(),
    };
    for c in claims {
        let Some(name) = c.pointer("/metadata/name").and_then(Value::as_str) else {
            continue;
        };
        phases.names.insert(name.to_string());
        if let Some(p) = c
            .pointer("/metadata/annotations")
            .and_then(|a| a.get(&key))
            .and_then(Value::as_str)
        {
            phases.phase.insert(name.to_string(), p.to_string());
        }
        if let Some((zone, id)) = c
            .pointer("/status/providerID")
            .and_then(Value::as_str)
            .and_then(parse_provider_id)
        {
            phases
                .by_server
                .insert((zone.to_string(), id.to_string()), name.to_string());
        }
    }
    phases
}

fn status(d: &Decision) -> String {
    serde_json::to_value(&d.server.status)
        .ok()
        .and_then(|v| v.as_str().map(str::to_string))
        .unwrap_or_else(|| "unknown".into())
}

/// The claiming NodeClaim, else the tag's name marked as missing.
fn nodeclaim(d: &Decision) -> String {
    match (&d.claim, tag_value(&d.server, TAG_NODECLAIM)) {
        (Some(c), _) => c.clone(),
        (None, Some(t)) if !t.is_empty() => format!("{t} (missing)"),
        _ => "-".into(),
    }
}

const IN_FLIGHT_NOTE: &str = "verdicts computed without the controller's in-flight check: \
NodeClaims whose install phase annotation is not terminal count as in flight";

impl Report {
    pub fn table(&self) -> String {
        let header = [
            "NODECLAIM",
            "SERVER",
            "OFFER",
            "ZONE",
            "STATUS",
            "PHASE",
            "AGE",
            "SWEEPER",
        ];
        let rows: Vec<[String; 8]> = self
            .rows
            .iter()
            .map(|r| {
                let d = &r.decision;
                [
                    nodeclaim(d),
                    d.server.id.clone(),
                    d.server.offer_name.clone(),
                    d.server.zone.clone(),
                    status(d),
                    r.phase.clone().unwrap_or_else(|| "-".into()),
                    d.age.map(format_age).unwrap_or_else(|| "?".into()),
                    format!("{} ({})", d.verdict.as_str(), d.reason.as_str()),
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
        let _ = writeln!(
            out,
            "\n{} server(s) of cluster {:?} in {}; orphan grace {}{}.",
            self.rows.len(),
            self.policy.cluster_name,
            self.zones.join(", "),
            format_age(self.policy.grace),
            if self.policy.dry_run { ", dry run" } else { "" }
        );
        let _ = writeln!(out, "Note: {IN_FLIGHT_NOTE}.");
        out
    }

    pub fn json(&self) -> Value {
        let servers: Vec<Value> = self
            .rows
            .iter()
            .map(|r| {
                let d = &r.decision;
                json!({
                    "id": d.server.id,
                    "name": d.server.name,
                    "zone": d.server.zone,
                    "offer": d.server.offer_name,
                    "status": status(d),
                    "nodeClaim": d.claim,
                    "nodeClaimTag": tag_value(&d.server, TAG_NODECLAIM),
                    "nodeClass": d.nodeclass(),
                    "installPhase": r.phase,
                    "createdAt": d.server.created_at,
                    "ageSeconds": d.age.map(|a| a.as_secs()),
                    "sweeper": {
                        "decision": d.verdict.as_str(),
                        "reason": d.reason.as_str(),
                        "detail": d.detail,
                    },
                })
            })
            .collect();
        json!({
            "cluster": self.policy.cluster_name,
            "projectId": self.policy.project_id,
            "zones": self.zones,
            "orphanGraceSeconds": self.policy.grace.as_secs(),
            "dryRun": self.policy.dry_run,
            "inFlight": IN_FLIGHT_NOTE,
            "servers": servers,
        })
    }
}

#[cfg(test)]
#[path = "servers_tests.rs"]
mod tests;
