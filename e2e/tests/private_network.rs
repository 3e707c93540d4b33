//! Issue 27: nodes on the customer's Private Network. Elastic Metal servers
//! are attached (baremetal v3) and bring the VLAN up from their Talos config;
//! VMs get a private NIC; every Node's InternalIP is its private address
//! (talos-sim reports it only when the config names the right VLAN on the
//! right MAC). Checked against emsim's records: attachments, NICs and IPAM
//! addresses, and that nothing is left billed after scale to zero.

use std::net::Ipv4Addr;
use std::time::Duration;

use anyhow::{Context, Result, ensure};
use e2e::stack::{Stack, StackOptions, ZONE};
use e2e::standby::{self, Pool};
use e2e::{kubeutil, scenario, wait};
use k8s_openapi::api::core::v1::Node;
use kube::api::Api;
use serde_json::{Value, json};

const NETWORK: &str = "prod";
const OFFER: &str = "EM-A115X-SSD";

/// The network's subnet: loopback, outside every stack's public block
/// (`127.100-250.0.0/16`, which emsim refuses a network to overlap), one /24
/// per stack's block so that parallel scenarios never share addresses.
/// Nothing listens on it: talos-sim binds nothing once a machine runs its
/// config, so the address is checked as the Node's InternalIP.
fn subnet(stack: &Stack) -> String {
    format!("127.254.{}.0/24", stack.addresses.octet())
}

async fn seed_network(stack: &Stack) -> Result<String> {
    let pn = stack
        .emsim
        .add_private_network(&json!({
            "name": NETWORK,
            "region": "fr-par",
            "subnets": [subnet(stack)],
            "tags": ["env=prod"],
        }))
        .await?;
    pn["id"]
        .as_str()
        .map(str::to_string)
        .context("emsim's private network has no id")
}

const SELECTOR: &str = "  privateNetwork:\n    name: prod\n    tags: [\"env=prod\"]\n";

fn in_subnet(ip: &str, cidr: &str) -> bool {
    let (Some((net, len)), Ok(ip)) = (cidr.split_once('/'), ip.parse::<Ipv4Addr>()) else {
        return false;
    };
    let (Ok(net), Ok(len)) = (net.parse::<Ipv4Addr>(), len.parse::<u32>()) else {
        return false;
    };
    let mask = u32::MAX.checked_shl(32 - len).unwrap_or(0);
    u32::from(ip) & mask == u32::from(net) & mask
}

fn internal_ip(node: &Node) -> Option<String> {
    node.status
        .as_ref()?
        .addresses
        .as_ref()?
        .iter()
        .find(|a| a.type_ == "InternalIP")
        .map(|a| a.address.clone())
}

/// Every Node named in `names` reports an InternalIP in the network's subnet.
async fn wait_private_internal_ips(stack: &Stack, names: &[String]) -> Result<Vec<String>> {
    let nodes: Api<Node> = Api::all(stack.client.clone());
    let cidr = subnet(stack);
    wait::until(
        "every Node's InternalIP in the Private Network",
        Duration::from_secs(60),
        Duration::from_millis(250),
        || async {
            let mut ips = Vec::new();
            for name in names {
                let node = nodes.get(name).await?;
                match internal_ip(&node) {
                    Some(ip) if in_subnet(&ip, &cidr) => ips.push(ip),
                    other => {
                        tracing::info!(node = %name, internal_ip = ?other, "not private yet");
                        return Ok(None);
                    }
                }
            }
            Ok(Some(ips))
        },
    )
    .await
}

/// NodeClass `metal` on the network and its NodePool of [`OFFER`].
async fn metal_class_and_pool(stack: &Stack) -> Result<()> {
    let metal = format!("{}{SELECTOR}", stack.nodeclass_yaml("metal"));
    stack.apply_nodeclass("metal", &metal).await?;
    kubeutil::apply_yaml(
        &stack.client,
        &Stack::nodepool_yaml(
            "metal",
            "metal",
            &scenario::instance_types_requirement(&[OFFER]),
        ),
    )
    .await?;
    Ok(())
}

async fn records(stack: &Stack) -> Result<Value> {
    stack.emsim.private_network_records().await
}

/// After everything is gone: no attachment, no private NIC and no address
/// IPAM allocated for a node is left (booked ones are the customer's).
async fn nothing_on_the_network(stack: &Stack) -> Result<()> {
    let counts = wait::until(
        "no attachment, NIC or allocated address left",
        Duration::from_secs(60),
        Duration::from_millis(250),
        || async {
            let r = records(stack).await?;
            let c = &r["counts"];
            let clean = c["attachments"] == 0 && c["private_nics"] == 0 && c["allocated_ips"] == 0;
            Ok(clean.then(|| c.clone()))
        },
    )
    .await?;
    println!("after scale to zero: {counts}");
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn private_network_metal_and_vms_share_one_network_and_leave_nothing_billed() -> Result<()> {
    let mut opts = StackOptions::for_test("private-network")?;
    opts.instances = true;
    scenario::with_stack(opts, async |stack: &mut Stack| {
        let network_id = seed_network(stack).await?;
        metal_class_and_pool(stack).await?;
        let vms = format!(
            "{}{SELECTOR}",
            stack.instance_nodeclass_yaml("vms", &stack.opts.talos_version)
        );
        let class = stack.create_instance_nodeclass(&vms).await?;
        kubeutil::apply_yaml(
            &stack.client,
            &Stack::instance_nodepool_yaml(
                "vms",
                &class,
                10,
                &scenario::instance_types_requirement(&["POP2-2C-8G"]),
                "",
            ),
        )
        .await?;
        let on = |pool: &'static str| [("karpenter.sh/nodepool", pool)];
        kubeutil::apply_yaml(
            &stack.client,
            &scenario::inflate_yaml_on("on-metal", 1, "1", &on("metal"), false),
        )
        .await?;
        kubeutil::apply_yaml(
            &stack.client,
            &scenario::inflate_yaml_on("on-vms", 1, "1", &on("vms"), false),
        )
        .await?;
        let mut placed =
            scenario::wait_pods_running(stack, "on-metal", 1, Duration::from_secs(300)).await?;
        placed.extend(
            scenario::wait_pods_running(stack, "on-vms", 1, Duration::from_secs(300)).await?,
        );
        let names: Vec<String> = placed.values().cloned().collect();
        let ips = wait_private_internal_ips(stack, &names).await?;
        println!("InternalIPs {ips:?} in {}", subnet(stack));

        // emsim's view: one attachment (attached, with a VLAN) and one NIC,
        // both on the network, each with the address its Node reports.
        let r = records(stack).await?;
        let attachments = r["attachments"].as_array().context("attachments")?;
        let nics = r["private_nics"].as_array().context("private_nics")?;
        ensure!(attachments.len() == 1 && nics.len() == 1, "records {r}");
        ensure!(
            attachments[0]["status"] == "attached"
                && attachments[0]["vlan"].is_u64()
                && attachments[0]["private_network_id"] == network_id.as_str(),
            "attachment {}",
            attachments[0]
        );
        ensure!(
            nics[0]["private_network_id"] == network_id.as_str(),
            "NIC {}",
            nics[0]
        );
        let allocated: Vec<String> = r["ips"]
            .as_array()
            .context("ips")?
            .iter()
            .filter_map(|ip| ip["address"].as_str())
            .map(|a| a.split('/').next().unwrap_or(a).to_string())
            .collect();
        for ip in &ips {
            ensure!(
                allocated.contains(ip),
                "{ip} is not an IPAM address: {allocated:?}"
            );
        }

        scenario::scale_to_zero_and_check_clean(
            stack,
            &["on-metal", "on-vms"],
            Duration::from_secs(240),
        )
        .await?;
        nothing_on_the_network(stack).await
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn private_network_standby_servers_are_attached_while_staged_and_adopted_on_it() -> Result<()>
{
    let mut opts = StackOptions::for_test("private-network-standby")?;
    opts.provider_args.push("--standby-interval=500ms".into());
    scenario::with_stack(opts, async |stack: &mut Stack| {
        let network_id = seed_network(stack).await?;
        let class = format!(
            "{}{SELECTOR}",
            standby::nodeclass_yaml(
                stack,
                "warm",
                "hourly",
                &[Pool {
                    offer: OFFER,
                    min: 1,
                    max: 1,
                    idle_hourly_keep: None,
                }],
            )
        );
        stack.apply_nodeclass("warm", &class).await?;
        let idle = standby::wait_idle(stack, "warm", 1, Duration::from_secs(180)).await?;
        let server_id = idle[0]["id"].as_str().context("id")?.to_string();
        // Staged on the network: attached before anyone asked for a node.
        let r = records(stack).await?;
        let attached = r["attachments"]
            .as_array()
            .context("attachments")?
            .iter()
            .any(|a| {
                a["server_id"] == server_id.as_str()
                    && a["private_network_id"] == network_id.as_str()
                    && a["status"] == "attached"
            });
        ensure!(attached, "the idle standby server is not attached: {r}");

        kubeutil::apply_yaml(
            &stack.client,
            &standby::reserved_nodepool_yaml("warm", "warm", 50, &[OFFER]),
        )
        .await?;
        kubeutil::apply_yaml(
            &stack.client,
            &scenario::inflate_yaml_on(
                "adopted",
                1,
                "1",
                &[("karpenter.sh/nodepool", "warm")],
                false,
            ),
        )
        .await?;
        let placed =
            scenario::wait_pods_running(stack, "adopted", 1, Duration::from_secs(180)).await?;
        let names: Vec<String> = placed.values().cloned().collect();
        let ips = wait_private_internal_ips(stack, &names).await?;
        let claims = scenario::nodeclaims(stack).await?;
        let (_, pid) = claims.iter().next().context("a NodeClaim")?;
        ensure!(
            pid.ends_with(&format!("{ZONE}/{server_id}")),
            "the node {pid} is not the adopted standby server {server_id}"
        );
        let r = records(stack).await?;
        let attachments = r["attachments"].as_array().context("attachments")?;
        ensure!(
            attachments
                .iter()
                .filter(|a| a["server_id"] == server_id.as_str())
                .count()
                == 1,
            "the adoption attached again: {r}"
        );
        println!("adopted standby server {server_id} on the network, InternalIP {ips:?}");
        Ok(())
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn private_network_attach_error_leaves_no_node_and_nothing_leaked() -> Result<()> {
    scenario::with_stack(StackOptions::for_test("private-network-error")?, async |stack: &mut Stack| {
        seed_network(stack).await?;
        stack
            .emsim
            .add_fault(json!({"kind": "private_network_attach_error", "private_network": NETWORK, "count": 1}))
            .await?;
        metal_class_and_pool(stack).await?;
        kubeutil::apply_yaml(&stack.client, &scenario::inflate_yaml("app", 1, "1")).await?;

        // The first server's attachment ends in error: its install fails with
        // the reason, the server is deleted, and Karpenter tries again (the
        // fault fired once, so the second server joins).
        let failed = wait::until(
            "an InstallFailed Event naming the network",
            Duration::from_secs(180),
            Duration::from_millis(250),
            || async {
                let events = scenario::provider_events(stack, "InstallFailed").await?;
                Ok(events
                    .into_iter()
                    .filter_map(|e| e.note)
                    .find(|n| n.contains("could not join Private Network")))
            },
        )
        .await?;
        println!("failed install: {failed}");
        let placed = scenario::wait_pods_running(stack, "app", 1, Duration::from_secs(300)).await?;
        let names: Vec<String> = placed.values().cloned().collect();
        wait_private_internal_ips(stack, &names).await?;
        let servers = stack.emsim.servers_including_deleted().await?;
        ensure!(servers.len() == 2, "{} servers ordered", servers.len());
        ensure!(
            servers.iter().filter(|s| s["deleted_at"].is_null()).count() == 1,
            "the failed server was not deleted"
        );
        scenario::scale_to_zero_and_check_clean(stack, &["app"], Duration::from_secs(240)).await?;
        nothing_on_the_network(stack).await
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn private_network_list_faults_on_the_new_endpoints_never_delete() -> Result<()> {
    scenario::with_stack(StackOptions::for_test("private-network-faults")?, async |stack: &mut Stack| {
        seed_network(stack).await?;
        // The reconciler's lookup of the network fails first: the NodeClass
        // waits (Unknown), then resolves it.
        stack
            .emsim
            .add_fault(json!({"kind": "http", "endpoint": "GET /vpc/v2/regions/{region}/private-networks", "status": 503, "count": 2}))
            .await?;
        metal_class_and_pool(stack).await?;
        // Every read the install makes of the network fails for a while:
        // the attachments list (503s, then pages that come back short) and
        // the address the config is rendered with.
        for fault in [
            json!({"kind": "http", "endpoint": "GET /baremetal/v3/zones/{zone}/server-private-networks", "status": 503, "count": 3}),
            json!({"kind": "list_missing_page", "endpoint": "GET /baremetal/v3/zones/{zone}/server-private-networks", "count": 2}),
            json!({"kind": "http", "endpoint": "GET /ipam/v1/regions/{region}/ips/{ip_id}", "status": 503, "count": 2}),
        ] {
            stack.emsim.add_fault(fault).await?;
        }
        kubeutil::apply_yaml(&stack.client, &scenario::inflate_yaml("app", 1, "1")).await?;
        let placed = scenario::wait_pods_running(stack, "app", 1, Duration::from_secs(300)).await?;
        let names: Vec<String> = placed.values().cloned().collect();
        wait_private_internal_ips(stack, &names).await?;
        // A fault is dropped once it has fired `count` times: none left
        // means every one of them was met.
        let left: Vec<Value> = stack.emsim.faults().await?;
        ensure!(
            left.is_empty(),
            "faults not (fully) fired, the scenario proves less than it says: {left:?}"
        );
        let servers = stack.emsim.servers_including_deleted().await?;
        ensure!(
            servers.len() == 1 && servers[0]["deleted_at"].is_null(),
            "a fault cost a server: {servers:?}"
        );
        let r = records(stack).await?;
        ensure!(r["counts"]["attachments"] == 1, "attached twice or not at all: {r}");
        scenario::scale_to_zero_and_check_clean(stack, &["app"], Duration::from_secs(240)).await?;
        nothing_on_the_network(stack).await
    })
    .await
}
