//! `servers` and warm metal: standby servers (no NodeClaim; state and phase
//! from their own tags) and the nodes adopted from them, on the in-memory
//! Elastic Metal fake.

use super::*;

const RESERVATION: &str = "metal.em-a115x-ssd.fr-par-2";

/// A standby server of NodeClass `metal` with these extra tags (install
/// progress, recycled, ...).
fn standby(id: &str, extra: &[&str], age_s: i64) -> Value {
    let mut s = server(id, "fr-par-2", "unused", age_s);
    s["name"] = json!(format!("standby-metal-{id}"));
    let mut tags = vec![
        "karpenter.scaleway.com/cluster=prod".to_string(),
        "karpenter.scaleway.com/nodeclass=metal".to_string(),
        "karpenter.scaleway.com/standby=metal".to_string(),
        "karpenter.scaleway.com/billing=hourly".to_string(),
    ];
    tags.extend(extra.iter().map(|t| t.to_string()));
    s["tags"] = json!(tags);
    s
}

fn phase(p: &str) -> String {
    format!("install.karpenter.scaleway.com/phase={p}")
}

/// Every state a standby server can be in, a node adopted from one, and an
/// ordinary node, in one zone.
pub(super) fn pool() -> FakeElasticMetal {
    let em = FakeElasticMetal::new();
    let idle = phase("standby");
    let imaging = phase("imaging");
    let rescue = phase("rescue");
    for s in [
        standby(
            "s-idle",
            &[
                &idle,
                "install.karpenter.scaleway.com/disk=nvme0n1",
                "karpenter.scaleway.com/standby-image=0123456789abcdef",
            ],
            2 * HOUR,
        ),
        standby("s-imaging", &[&imaging], 8 * 60),
        // Just ordered: no progress tag yet.
        standby("s-new", &[], 30),
        standby(
            "s-wiping",
            &[&rescue, "karpenter.scaleway.com/recycled=true"],
            5 * HOUR,
        ),
    ] {
        insert_metal(&em, s);
    }
    let mut adopted = server("s-adopted", "fr-par-2", "np-r", 3 * HOUR);
    adopted["tags"] = json!([
        "karpenter.scaleway.com/cluster=prod",
        "karpenter.sh/nodeclaim=np-r",
        "karpenter.scaleway.com/nodeclass=metal",
        "karpenter.scaleway.com/billing=hourly",
        format!("karpenter.scaleway.com/reservation-id={RESERVATION}"),
    ]);
    insert_metal(&em, adopted);
    insert_metal(&em, server("s-node", "fr-par-2", "np-o", HOUR));
    em
}

pub(super) fn pool_claims() -> FakeClaims {
    FakeClaims {
        claims: vec![
            nodeclaim("np-r", "fr-par-2", "s-adopted", Some("joined")),
            nodeclaim("np-o", "fr-par-2", "s-node", Some("joined")),
        ],
        fail: false,
    }
}

pub(super) async fn pool_report(em: &FakeElasticMetal) -> Report {
    let vms = FakeInstance::new();
    collect(
        &apis(em, &vms),
        Kind::ElasticMetal,
        &pool_claims(),
        &["fr-par-2".to_string()],
        &graces(),
        now(),
    )
    .await
    .unwrap()
}

fn row_of<'a>(table: &'a str, id: &str) -> Vec<&'a str> {
    table
        .lines()
        .find(|l| l.contains(id))
        .unwrap_or_else(|| panic!("{id} in\n{table}"))
        .split_whitespace()
        .collect()
}

#[tokio::test]
async fn standby_servers_show_their_state_nodeclass_and_phase() {
    let em = pool();
    let report = pool_report(&em).await;
    let got: Vec<_> = report
        .rows
        .iter()
        .map(|r| {
            (
                r.id.as_str(),
                r.capacity_cell(),
                r.phase.as_deref(),
                r.nodeclass.as_deref(),
            )
        })
        .collect();
    assert_eq!(
        got,
        vec![
            ("s-node", "-".to_string(), Some("joined"), Some("default")),
            (
                "s-adopted",
                format!("reserved/{RESERVATION}"),
                Some("joined"),
                Some("metal")
            ),
            (
                "s-idle",
                "standby/idle".to_string(),
                Some("standby"),
                Some("metal")
            ),
            (
                "s-imaging",
                "standby/installing".to_string(),
                Some("imaging"),
                Some("metal")
            ),
            (
                "s-new",
                "standby/installing".to_string(),
                None,
                Some("metal")
            ),
            (
                "s-wiping",
                "standby/wiping".to_string(),
                Some("rescue"),
                Some("metal")
            ),
        ]
    );

    let table = report.table();
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    assert_eq!(header[8..10], ["PHASE", "CAPACITY"], "{table}");
    // No NodeClaim, and the sweeper leaves it to its pool.
    assert_eq!(
        row_of(&table, "s-idle"),
        [
            "elastic-metal",
            "-",
            "s-idle",
            "EM-A115X-SSD",
            "fr-par-2",
            "ready",
            "51.15.0.1",
            "metal",
            "standby",
            "standby/idle",
            "2h0m",
            "spared",
            "(standby)"
        ]
    );
    assert_eq!(
        row_of(&table, "s-adopted"),
        [
            "elastic-metal",
            "np-r",
            "s-adopted",
            "EM-A115X-SSD",
            "fr-par-2",
            "ready",
            "51.15.0.1",
            "metal",
            "joined",
            &format!("reserved/{RESERVATION}"),
            "3h0m",
            "spared",
            "(claimed)"
        ]
    );
    assert_eq!(row_of(&table, "s-node")[9], "-");
    assert_eq!(row_of(&table, "s-new")[8..10], ["-", "standby/installing"]);
    assert!(
        table.contains(
            "Standby: 4 server(s) (2 installing, 1 idle, 1 wiping); 1 node(s) adopted from standby."
        ),
        "{table}"
    );

    let out = report.json();
    let servers = out["servers"].as_array().unwrap();
    let by_id = |id: &str| servers.iter().find(|s| s["id"] == id).unwrap().clone();
    assert_eq!(
        by_id("s-idle")["standby"],
        json!({"state": "idle", "recycled": false})
    );
    assert_eq!(
        by_id("s-wiping")["standby"],
        json!({"state": "wiping", "recycled": true})
    );
    assert_eq!(by_id("s-idle")["installPhase"], "standby");
    assert_eq!(by_id("s-idle")["nodeClass"], "metal");
    assert_eq!(by_id("s-idle")["nodeClaim"], Value::Null);
    assert_eq!(by_id("s-idle")["reservationId"], Value::Null);
    assert_eq!(by_id("s-adopted")["standby"], Value::Null);
    assert_eq!(by_id("s-adopted")["reservationId"], RESERVATION);
    assert_eq!(by_id("s-node")["reservationId"], Value::Null);
    assert_eq!(out["standbyOnly"], false);
    // Reading decides; it never acts.
    assert_eq!(em.count(EmOp::DeleteServer), 0);
}

#[tokio::test]
async fn the_standby_filter_keeps_standby_servers_and_adopted_nodes() {
    let report = pool_report(&pool()).await.standby_only();
    let ids: Vec<&str> = report.rows.iter().map(|r| r.id.as_str()).collect();
    assert_eq!(
        ids,
        ["s-adopted", "s-idle", "s-imaging", "s-new", "s-wiping"]
    );
    let table = report.table();
    assert!(!table.contains("s-node"), "{table}");
    assert!(
        table.contains("5 server(s) (Elastic Metal only)"),
        "{table}"
    );
    assert!(
        table.contains("other servers left out (--standby)"),
        "{table}"
    );
    assert_eq!(report.json()["standbyOnly"], true);
}

#[tokio::test]
async fn without_standby_servers_the_table_says_nothing_of_them() {
    let em = FakeElasticMetal::new();
    insert_metal(&em, server("s-node", "fr-par-2", "np-o", HOUR));
    let report = pool_report(&em).await;
    let table = report.table();
    assert!(!table.contains("Standby:"), "{table}");
    assert_eq!(row_of(&table, "s-node")[9], "-");
    // Asked for, the empty answer says so.
    let table = report.standby_only().table();
    assert!(
        table.contains("Standby: 0 server(s) (0 installing, 0 idle, 0 wiping)"),
        "{table}"
    );
}

#[test]
fn the_standby_flag_lists_elastic_metal_only() {
    #[derive(clap::Parser)]
    struct Cli {
        #[command(flatten)]
        args: ServersArgs,
    }
    let parse = |extra: &[&str]| {
        let mut argv = vec![
            "servers",
            "--scw-secret-key",
            "k",
            "--scw-project-id",
            "p",
            "--cluster-name",
            "prod",
        ];
        argv.extend_from_slice(extra);
        <Cli as clap::Parser>::try_parse_from(argv).map(|c| c.args)
    };
    assert!(!parse(&[]).unwrap().standby);
    let args = parse(&["--standby"]).unwrap();
    assert!(args.standby);
    assert_eq!(
        listed_kind(args.kind, args.standby).unwrap(),
        Kind::ElasticMetal
    );
    assert_eq!(
        listed_kind(Kind::ElasticMetal, true).unwrap(),
        Kind::ElasticMetal
    );
    assert_eq!(listed_kind(Kind::Instance, false).unwrap(), Kind::Instance);
    let err = listed_kind(Kind::Instance, true).unwrap_err();
    assert!(err.to_string().contains("--kind instance"), "{err}");
}
