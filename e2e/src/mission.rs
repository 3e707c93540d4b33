//! The mission demo's view (`kps-demo`, README "Quick start"): a burst on
//! VMs, metal staged by the planner, core's consolidation onto it. One look
//! at a time ([`Scene`]), the phase of the story it shows ([`Phase`]), the
//! bill before and after ([`Saving`]) and what is left in the simulated
//! cloud at the end ([`Leftovers`]).
//!
//! Every figure is read, never set: pods and NodeClaims from the API
//! server, servers and VMs from emsim's records, prices from emsim's public
//! catalog ([`crate::hybrid::prices`]), the planner's figures from the
//! NodeClass status the provider wrote.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::Result;
use kube::ResourceExt as _;
use kube::api::ListParams;
use serde_json::Value;

use crate::hybrid::{self, VmsFirst};
use crate::stack::Stack;
use crate::standby;

/// Where the bill's figures come from, printed beside them.
pub const BILL_SOURCE: &str = "emsim's records, the live Elastic Metal servers and VMs at emsim's public hourly prices; volumes and IPs not counted";

/// Hours in a month, as Scaleway's monthly prices count them.
pub const HOURS_PER_MONTH: f64 = 730.0;

/// The story's phases, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Phase {
    /// Pods arrive; nothing is reserved, so Karpenter launches VMs.
    Burst,
    /// The load stays; the planner stages Elastic Metal servers.
    Staging,
    /// Core's consolidation moves the pods onto the staged servers.
    Moving,
    /// Every pod on metal, no VM left.
    Done,
}

impl Phase {
    pub fn number(self) -> u8 {
        self as u8 + 1
    }

    pub fn title(self) -> &'static str {
        match self {
            Phase::Burst => "a burst lands on VMs",
            Phase::Staging => "the load stays: the planner stages Elastic Metal",
            Phase::Moving => "Karpenter core consolidates the VMs onto metal",
            Phase::Done => "the sustained load runs on bare metal, the VMs are gone",
        }
    }

    /// The phase `scene` shows, for `replicas` pods on `setup`'s NodePools:
    /// done once every pod runs on metal and no VM is left; moving once a
    /// pod runs on metal or core has a NodeClaim there; staging once a
    /// server is ordered or the planner's target is above zero.
    pub fn of(scene: &Scene, setup: &VmsFirst, replicas: usize) -> Phase {
        let on_metal = scene.pods.get(setup.metal).copied().unwrap_or(0);
        let vms: usize = scene.vms.values().sum();
        let metal_claims = scene.claims.get(setup.metal).map_or(0, |c| c.0 + c.1);
        if on_metal == replicas && replicas > 0 && vms == 0 {
            Phase::Done
        } else if on_metal > 0 || metal_claims > 0 {
            Phase::Moving
        } else if scene.metal.values().sum::<usize>() > 0 || scene.target.is_some_and(|t| t > 0) {
            Phase::Staging
        } else {
            Phase::Burst
        }
    }

    /// The phase after `self` given `scene`: never back (a pod evicted
    /// during the move does not make it a burst again).
    pub fn advance(self, scene: &Scene, setup: &VmsFirst, replicas: usize) -> Phase {
        self.max(Phase::of(scene, setup, replicas))
    }
}

/// What an Elastic Metal server record is, from the tags the provider wrote
/// on it and emsim's status: `node`, `standby` (idle, installed),
/// `wiping`, `installing/<phase>` (a standby install: `delivering`,
/// `rescue`, `imaging`, `booting`...), or `other` (not the provider's).
pub fn metal_role(server: &Value) -> String {
    if standby::tag(server, "karpenter.sh/nodeclaim").is_some() {
        return "node".into();
    }
    match standby::state(server) {
        Some("idle") => "standby".into(),
        Some("wiping") => "wiping".into(),
        Some(_) => {
            let phase = standby::tag(server, "install.karpenter.scaleway.com/phase")
                .or_else(|| server["status"].as_str().map(str::to_string))
                .unwrap_or_default();
            format!("installing/{phase}")
        }
        None => "other".into(),
    }
}

/// One look at the story.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Scene {
    /// Running pods of the app by NodePool of their node.
    pub pods: BTreeMap<String, usize>,
    /// NodeClaims by NodePool: (not being deleted, being deleted).
    pub claims: BTreeMap<String, (usize, usize)>,
    /// Live VMs by emsim state (`starting`, `running`, `stopping`...).
    pub vms: BTreeMap<String, usize>,
    /// Live Elastic Metal servers by [`metal_role`].
    pub metal: BTreeMap<String, usize>,
    /// Live servers and VMs by type: what the bill counts.
    pub billed: BTreeMap<String, usize>,
    /// Block volumes in emsim (every one a VM's root volume here).
    pub volumes: usize,
    /// The planner's target (`status.planner[0].target` of the metal
    /// NodeClass), once written, and why.
    pub target: Option<i64>,
    pub planner_reason: Option<String>,
    /// EUR per hour of `billed` ([`BILL_SOURCE`]).
    pub euros_per_hour: f64,
}

impl Scene {
    pub async fn take(
        stack: &Stack,
        app: &str,
        setup: &VmsFirst<'_>,
        prices: &BTreeMap<String, f64>,
    ) -> Result<Scene> {
        let pods = hybrid::running_pods_by_pool(stack, app).await?;
        let mut claims: BTreeMap<String, (usize, usize)> = BTreeMap::new();
        for c in crate::kubeutil::nodeclaims(&stack.client)
            .list(&ListParams::default())
            .await?
            .items
        {
            let pool = c
                .labels()
                .get("karpenter.sh/nodepool")
                .cloned()
                .unwrap_or_default();
            let e = claims.entry(pool).or_default();
            if c.metadata.deletion_timestamp.is_some() {
                e.1 += 1;
            } else {
                e.0 += 1;
            }
        }
        let metal_records = stack.emsim.servers_including_deleted().await?;
        let vm_records = stack.emsim.instance_servers_including_deleted().await?;
        let mut metal = BTreeMap::new();
        for s in metal_records.iter().filter(|s| s["deleted_at"].is_null()) {
            *metal.entry(metal_role(s)).or_default() += 1;
        }
        let mut vms = BTreeMap::new();
        for s in vm_records.iter().filter(|s| s["deleted_at"].is_null()) {
            let state = s["state"].as_str().unwrap_or("?").to_string();
            *vms.entry(state).or_default() += 1;
        }
        let billed = hybrid::live_by_type(&metal_records, &vm_records);
        let planner = hybrid::planner_status(stack, setup.metal).await?;
        let planner = planner.first();
        let target = planner.and_then(|s| s["target"].as_i64());
        let planner_reason = planner.and_then(|s| s["reason"].as_str().map(str::to_string));
        Ok(Scene {
            pods,
            claims,
            vms,
            metal,
            euros_per_hour: hybrid::bill(prices, &billed)?,
            billed,
            volumes: stack.emsim.instance_volumes().await?.len(),
            target,
            planner_reason,
        })
    }

    /// Running pods on NodePool `pool`.
    pub fn on(&self, pool: &str) -> usize {
        self.pods.get(pool).copied().unwrap_or(0)
    }

    /// Standby servers installed and idle.
    pub fn idle_standby(&self) -> usize {
        self.metal.get("standby").copied().unwrap_or(0)
    }

    /// One line: pods, NodeClaims, VMs, servers, the planner's target and
    /// the bill, for `replicas` pods.
    pub fn line(&self, replicas: usize) -> String {
        let running: usize = self.pods.values().sum();
        let counts = |m: &BTreeMap<String, usize>| {
            if m.is_empty() {
                "none".to_string()
            } else {
                m.iter()
                    .map(|(k, v)| format!("{v} {k}"))
                    .collect::<Vec<_>>()
                    .join(", ")
            }
        };
        let claims = self
            .claims
            .iter()
            .map(|(pool, (live, deleting))| {
                if *deleting > 0 {
                    format!("{pool} {live}+{deleting} deleting")
                } else {
                    format!("{pool} {live}")
                }
            })
            .collect::<Vec<_>>()
            .join(", ");
        let pods_on = self
            .pods
            .iter()
            .map(|(pool, n)| format!("{n} on {pool}"))
            .collect::<Vec<_>>()
            .join(", ");
        format!(
            "pods {running}/{replicas} running{} | NodeClaims {} | VMs {}{} | Elastic Metal {} | planner target {} | {:.4} EUR/h",
            if pods_on.is_empty() {
                String::new()
            } else {
                format!(" ({pods_on})")
            },
            if claims.is_empty() { "none" } else { &claims },
            counts(&self.vms),
            if self.volumes > 0 {
                format!(" ({} volumes)", self.volumes)
            } else {
                String::new()
            },
            counts(&self.metal),
            self.target.map_or("-".to_string(), |t| t.to_string()),
            self.euros_per_hour,
        )
    }
}

/// `6 × POP2-2C-8G at 0.0735` for each type of `billed`, from `prices`.
pub fn breakdown(prices: &BTreeMap<String, f64>, billed: &BTreeMap<String, usize>) -> String {
    if billed.is_empty() {
        return "nothing".into();
    }
    billed
        .iter()
        .map(|(kind, n)| match prices.get(kind) {
            Some(p) => format!("{n} × {kind} at {p:.4}"),
            None => format!("{n} × {kind} (no price)"),
        })
        .collect::<Vec<_>>()
        .join(" + ")
}

/// The bill before and after the move, EUR per hour.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Saving {
    pub before: f64,
    pub after: f64,
}

impl Saving {
    pub fn per_hour(&self) -> f64 {
        self.before - self.after
    }

    /// The saving as a share of the bill before; none when nothing was billed.
    pub fn percent(&self) -> Option<f64> {
        (self.before > 0.0).then(|| 100.0 * self.per_hour() / self.before)
    }

    /// Over a month of [`HOURS_PER_MONTH`] at these rates.
    pub fn per_month(&self) -> f64 {
        self.per_hour() * HOURS_PER_MONTH
    }
}

/// What is left in the simulated cloud: every live Elastic Metal server is
/// either a node of a NodeClaim that exists, a standby server, or an orphan
/// (a leak); VMs and volumes are counted.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct Leftovers {
    /// (server id, offer, NodeClaim) of the servers that are nodes.
    pub nodes: Vec<(String, String, String)>,
    /// Standby servers (idle, installing or wiping).
    pub standby: usize,
    /// Live servers neither a node of an existing NodeClaim nor standby.
    pub orphans: Vec<String>,
    /// Live VMs, and VMs ever created.
    pub vms: usize,
    pub vms_created: usize,
    pub volumes: usize,
    /// Elastic Metal servers ever ordered.
    pub ordered: usize,
}

impl Leftovers {
    /// From emsim's records (deleted ones included) and the names of the
    /// NodeClaims in the cluster.
    pub fn of(
        metal: &[Value],
        vms: &[Value],
        volumes: usize,
        claims: &BTreeSet<String>,
    ) -> Leftovers {
        let mut out = Leftovers {
            vms: vms.iter().filter(|s| s["deleted_at"].is_null()).count(),
            vms_created: vms.len(),
            volumes,
            ordered: metal.len(),
            ..Leftovers::default()
        };
        for s in metal.iter().filter(|s| s["deleted_at"].is_null()) {
            let id = s["id"].as_str().unwrap_or_default().to_string();
            match standby::tag(s, "karpenter.sh/nodeclaim") {
                Some(claim) if claims.contains(&claim) => out.nodes.push((
                    id,
                    s["offer_name"].as_str().unwrap_or_default().to_string(),
                    claim,
                )),
                Some(_) => out.orphans.push(id),
                None if standby::state(s).is_some() => out.standby += 1,
                None => out.orphans.push(id),
            }
        }
        out
    }

    pub async fn take(stack: &Stack) -> Result<Leftovers> {
        let claims = crate::scenario::nodeclaims(stack)
            .await?
            .into_keys()
            .collect();
        Ok(Leftovers::of(
            &stack.emsim.servers_including_deleted().await?,
            &stack.emsim.instance_servers_including_deleted().await?,
            stack.emsim.instance_volumes().await?.len(),
            &claims,
        ))
    }

    /// Nothing billed that does no work: no orphan, no VM, no volume.
    pub fn clean(&self) -> bool {
        self.orphans.is_empty() && self.vms == 0 && self.volumes == 0
    }
}

/// `1 min 38 s` (or `42 s`) for a number of seconds.
pub fn minutes(seconds: f64) -> String {
    let s = seconds.max(0.0).round() as u64;
    if s < 60 {
        format!("{s} s")
    } else {
        format!("{} min {:02} s", s / 60, s % 60)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;
    use std::time::Duration;

    const SETUP: VmsFirst<'static> = VmsFirst {
        vms: "vms",
        vm_type: "POP2-2C-8G",
        metal: "metal",
        offer: "EM-A115X-SSD",
        max: 4,
        window: Duration::from_secs(60),
        hold: Duration::from_secs(300),
    };

    fn map<const N: usize>(entries: [(&str, usize); N]) -> BTreeMap<String, usize> {
        entries.iter().map(|(k, v)| (k.to_string(), *v)).collect()
    }

    fn server(id: &str, tags: &[&str], status: &str, deleted: bool) -> Value {
        json!({
            "id": id,
            "offer_name": "EM-A115X-SSD",
            "status": status,
            "tags": tags,
            "deleted_at": if deleted { json!("2026-11-28T10:00:00Z") } else { Value::Null },
        })
    }

    #[test]
    fn phases_follow_the_story() {
        let mut scene = Scene::default();
        assert_eq!(Phase::of(&scene, &SETUP, 6), Phase::Burst);
        scene.pods = map([("vms", 6)]);
        scene.vms = map([("running", 6)]);
        assert_eq!(Phase::of(&scene, &SETUP, 6), Phase::Burst);
        scene.target = Some(0);
        assert_eq!(Phase::of(&scene, &SETUP, 6), Phase::Burst);
        scene.target = Some(2);
        assert_eq!(Phase::of(&scene, &SETUP, 6), Phase::Staging);
        scene.target = None;
        scene.metal = map([("installing/imaging", 1)]);
        assert_eq!(Phase::of(&scene, &SETUP, 6), Phase::Staging);
        // Core's replacement NodeClaim on metal, before any pod moved.
        scene.claims.insert("metal".into(), (1, 0));
        assert_eq!(Phase::of(&scene, &SETUP, 6), Phase::Moving);
        scene.claims.clear();
        scene.pods = map([("vms", 3), ("metal", 3)]);
        assert_eq!(Phase::of(&scene, &SETUP, 6), Phase::Moving);
        // All on metal, a VM still being deleted: not done yet.
        scene.pods = map([("metal", 6)]);
        scene.vms = map([("stopping", 1)]);
        assert_eq!(Phase::of(&scene, &SETUP, 6), Phase::Moving);
        scene.vms.clear();
        assert_eq!(Phase::of(&scene, &SETUP, 6), Phase::Done);
        assert_eq!(Phase::Done.number(), 4);
    }

    #[test]
    fn a_phase_never_goes_back() {
        // During the move, evicted pods wait and no server shows for a
        // moment: still moving.
        let scene = Scene {
            pods: map([("vms", 5)]),
            ..Scene::default()
        };
        assert_eq!(Phase::Moving.advance(&scene, &SETUP, 6), Phase::Moving);
        let done = Scene {
            pods: map([("metal", 6)]),
            ..Scene::default()
        };
        assert_eq!(Phase::Staging.advance(&done, &SETUP, 6), Phase::Done);
        // No replicas asked for is never "done".
        assert_eq!(Phase::of(&Scene::default(), &SETUP, 0), Phase::Burst);
    }

    #[test]
    fn metal_roles_come_from_the_providers_tags() {
        let node = server(
            "a",
            &[
                "karpenter.scaleway.com/standby=metal",
                "karpenter.sh/nodeclaim=metal-x",
            ],
            "ready",
            false,
        );
        assert_eq!(metal_role(&node), "node");
        let idle = server(
            "b",
            &[
                "karpenter.scaleway.com/standby=metal",
                "install.karpenter.scaleway.com/phase=standby",
            ],
            "ready",
            false,
        );
        assert_eq!(metal_role(&idle), "standby");
        let imaging = server(
            "c",
            &[
                "karpenter.scaleway.com/standby=metal",
                "install.karpenter.scaleway.com/phase=imaging",
            ],
            "ready",
            false,
        );
        assert_eq!(metal_role(&imaging), "installing/imaging");
        let ordered = server(
            "d",
            &["karpenter.scaleway.com/standby=metal"],
            "delivering",
            false,
        );
        assert_eq!(metal_role(&ordered), "installing/delivering");
        let wiping = server(
            "e",
            &[
                "karpenter.scaleway.com/standby=metal",
                "karpenter.scaleway.com/recycled=true",
            ],
            "ready",
            false,
        );
        assert_eq!(metal_role(&wiping), "wiping");
        assert_eq!(
            metal_role(&server("f", &["team=other"], "ready", false)),
            "other"
        );
    }

    #[test]
    fn the_bill_is_counted_servers_at_their_prices() {
        let prices: BTreeMap<String, f64> = [
            ("POP2-2C-8G".to_string(), 0.0735),
            ("EM-A115X-SSD".to_string(), 0.091),
        ]
        .into_iter()
        .collect();
        let metal = [
            server("a", &[], "ready", false),
            server("gone", &[], "ready", true),
        ];
        let vms: Vec<Value> = (0..6)
            .map(|i| json!({"id": i, "commercial_type": "POP2-2C-8G", "deleted_at": null}))
            .collect();
        let billed = hybrid::live_by_type(&metal, &vms);
        assert_eq!(billed, map([("EM-A115X-SSD", 1), ("POP2-2C-8G", 6)]));
        let euros = hybrid::bill(&prices, &billed).unwrap();
        assert!((euros - (6.0 * 0.0735 + 0.091)).abs() < 1e-9, "{euros}");
        assert_eq!(
            breakdown(&prices, &billed),
            "1 × EM-A115X-SSD at 0.0910 + 6 × POP2-2C-8G at 0.0735"
        );
        // Nothing live bills 0 (not -0), and a type without a price fails.
        let none = hybrid::bill(&prices, &BTreeMap::new()).unwrap();
        assert!(none == 0.0 && none.is_sign_positive());
        assert!(hybrid::bill(&prices, &map([("PRO2-XXS", 1)])).is_err());
        assert_eq!(breakdown(&prices, &BTreeMap::new()), "nothing");
    }

    #[test]
    fn saving_per_hour_percent_and_month() {
        let s = Saving {
            before: 0.441,
            after: 0.182,
        };
        assert!((s.per_hour() - 0.259).abs() < 1e-9);
        assert!((s.percent().unwrap() - 58.73).abs() < 0.01);
        assert!((s.per_month() - 189.07).abs() < 1e-9);
        let nothing = Saving {
            before: 0.0,
            after: 0.0,
        };
        assert_eq!(nothing.percent(), None);
    }

    #[test]
    fn leftovers_tell_nodes_standby_and_orphans_apart() {
        let claims: BTreeSet<String> = ["metal-a".to_string()].into_iter().collect();
        let metal = [
            server("n", &["karpenter.sh/nodeclaim=metal-a"], "ready", false),
            server(
                "stale",
                &["karpenter.sh/nodeclaim=metal-gone"],
                "ready",
                false,
            ),
            server(
                "s",
                &[
                    "karpenter.scaleway.com/standby=metal",
                    "install.karpenter.scaleway.com/phase=standby",
                ],
                "ready",
                false,
            ),
            server("x", &["team=other"], "ready", false),
            server("d", &["karpenter.sh/nodeclaim=metal-old"], "ready", true),
        ];
        let vms = [
            json!({"id": "v1", "deleted_at": "2026-11-28T10:00:00Z"}),
            json!({"id": "v2", "deleted_at": null}),
        ];
        let left = Leftovers::of(&metal, &vms, 1, &claims);
        assert_eq!(
            left.nodes,
            [(
                "n".to_string(),
                "EM-A115X-SSD".to_string(),
                "metal-a".to_string()
            )]
        );
        assert_eq!(left.standby, 1);
        assert_eq!(left.orphans, ["stale", "x"]);
        assert_eq!(
            (left.vms, left.vms_created, left.volumes, left.ordered),
            (1, 2, 1, 5)
        );
        assert!(!left.clean());
        let clean = Leftovers::of(&metal[..1], &vms[..1], 0, &claims);
        assert!(clean.clean());
    }

    #[test]
    fn the_line_shows_every_count() {
        let scene = Scene {
            pods: map([("metal", 3), ("vms", 3)]),
            claims: [("metal".to_string(), (1, 0)), ("vms".to_string(), (0, 3))]
                .into_iter()
                .collect(),
            vms: map([("running", 3)]),
            metal: map([("node", 1), ("standby", 1)]),
            billed: map([("EM-A115X-SSD", 2), ("POP2-2C-8G", 3)]),
            volumes: 3,
            target: Some(2),
            planner_reason: Some("sustained load 3300m CPU".into()),
            euros_per_hour: 0.4025,
        };
        assert_eq!(
            scene.line(6),
            "pods 6/6 running (3 on metal, 3 on vms) | NodeClaims metal 1, vms 0+3 deleting | VMs 3 running (3 volumes) | Elastic Metal 1 node, 1 standby | planner target 2 | 0.4025 EUR/h"
        );
        assert_eq!(scene.idle_standby(), 1);
        assert_eq!(scene.on("metal"), 3);
        assert!(
            Scene::default()
                .line(6)
                .contains("VMs none | Elastic Metal none | planner target -")
        );
    }

    #[test]
    fn minutes_read_like_a_clock() {
        assert_eq!(minutes(42.4), "42 s");
        assert_eq!(minutes(98.0), "1 min 38 s");
        assert_eq!(minutes(-1.0), "0 s");
    }
}
