//! Issue 5, "Bad input": invalid NodeClass fields are refused by the API server
//! with a message that says what to fix; semantic problems (credentials
//! refused, SSH key not registered, image missing or unreachable, checksum
//! mismatch, machine config Secret missing or invalid, ...) turn the NodeClass
//! `Ready=False` with a reason naming the problem, and while a pod waits for
//! each of them emsim receives no order. Fixing the input makes the NodeClass
//! Ready and the pod gets a node.

use std::collections::BTreeMap;
use std::time::Duration;

use anyhow::{Context, Result, bail, ensure};
use e2e::scenario;
use e2e::stack::{NAMESPACE, Stack, StackOptions};
use e2e::{kubeutil, wait};
use k8s_openapi::api::core::v1::Secret;
use kube::ResourceExt;
use kube::api::{Api, DynamicObject, PostParams};
use serde_json::{Value, json};

/// How long the reconciler may take to reach a verdict (it requeues a
/// not-ready NodeClass every 10 s and reacts to Secret changes at once).
const VERDICT_WITHIN: Duration = Duration::from_secs(45);
/// How long pending pods wait on not-ready NodeClasses before the order
/// counter is read: Karpenter's provisioner batches pods for a few seconds.
const HOLD: Duration = Duration::from_secs(15);
const IAM_LIST: &str = "GET /iam/v1alpha1/ssh-keys";

/// A change to the scenarios' NodeClass spec.
type Mutation = Box<dyn Fn(&mut Value)>;

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_input_is_refused_or_blocks_ordering_until_fixed() -> Result<()> {
    scenario::with_stack(StackOptions::for_test("bad-input")?, async |stack| {
        run(stack).await
    })
    .await
}

async fn run(stack: &mut Stack) -> Result<()> {
    rejected_by_the_api_server(stack).await?;

    // Semantic problems, all at once: one NodeClass, NodePool and pending pod each.
    let worker = secret_value(stack, "talos-worker-config", "worker.yaml").await?;
    create_secret(
        stack,
        "unparseable-config",
        "worker.yaml",
        "version: v1alpha1\nmachine: [\n",
    )
    .await?;
    create_secret(
        stack,
        "controlplane-config",
        "worker.yaml",
        &worker.replacen("type: worker", "type: controlplane", 1),
    )
    .await?;
    create_secret(
        stack,
        "garbage-key",
        "ssh-privatekey",
        "not an OpenSSH key\n",
    )
    .await?;
    let cases: Vec<(&str, &str, &str, Mutation)> = vec![
        (
            "unregistered-key",
            "SSHKeyRegistered",
            "SSHKeyNotFound",
            Box::new(|s| s["rescueSshKey"]["iamKeyId"] = json!(uuid_like(7))),
        ),
        (
            "missing-image",
            "ImageReachable",
            "ImageNotFound",
            Box::new(|s| {
                let t = s["image"]["urlTemplate"].as_str().unwrap_or_default();
                s["image"]["urlTemplate"] = json!(t.replace("metal-{arch}", "missing-{arch}"));
            }),
        ),
        (
            "unreachable-image",
            "ImageReachable",
            "ImageUnreachable",
            // Nothing listens on port 1 of loopback.
            Box::new(|s| {
                s["image"]["urlTemplate"] =
                    json!("http://127.0.0.1:1/image/{schematic}/{version}/metal-{arch}.raw.xz")
            }),
        ),
        (
            "wrong-checksum",
            "ImageVerified",
            "ImageChecksumMismatch",
            Box::new(|s| s["image"]["sha256"] = json!({"amd64": "0".repeat(64)})),
        ),
        (
            "missing-secret",
            "SecretsResolved",
            "SecretNotFound",
            Box::new(|s| s["machineConfigSecretRef"]["name"] = json!("no-such-config")),
        ),
        (
            "unparseable-config",
            "MachineConfigValid",
            "MachineConfigInvalid",
            Box::new(|s| s["machineConfigSecretRef"]["name"] = json!("unparseable-config")),
        ),
        (
            "controlplane-config",
            "MachineConfigValid",
            "MachineConfigNotWorker",
            Box::new(|s| s["machineConfigSecretRef"]["name"] = json!("controlplane-config")),
        ),
        (
            "bad-patch",
            "MachineConfigValid",
            "MachineConfigPatchInvalid",
            Box::new(|s| s["machineConfigPatches"] = json!(["machine:\n  sysctls: [unclosed\n"])),
        ),
        (
            "garbage-key",
            "SecretsResolved",
            "SSHPrivateKeyInvalid",
            Box::new(|s| s["rescueSshKey"]["privateKeySecretRef"]["name"] = json!("garbage-key")),
        ),
        (
            "unknown-network",
            "PrivateNetworkReady",
            "PrivateNetworkNotFound",
            Box::new(|s| s["privateNetwork"] = json!({"name": "no-such-network"})),
        ),
    ];
    for (name, _, _, mutate) in &cases {
        apply_nodeclass(stack, name, mutate.as_ref()).await?;
        pool_with_pending_pod(stack, name).await?;
    }
    for (name, sub, reason, _) in &cases {
        let nc = wait_ready_false(stack, name, reason).await?;
        let c = condition(&nc, sub).with_context(|| format!("{name}: no {sub}"))?;
        ensure!(
            c["status"] == "False" && c["reason"] == *reason,
            "{name}: {sub} is {c}"
        );
        tracing::info!(nodeclass = name, reason, message = %c["message"], "not Ready as expected");
    }
    // The messages say what to fix.
    let msg = |nc: &DynamicObject| {
        condition(nc, "Ready").map(|c| c["message"].as_str().unwrap_or_default().to_string())
    };
    let wrong = kubeutil::nodeclasses(&stack.client)
        .get("wrong-checksum")
        .await?;
    let ready_msg = msg(&wrong).unwrap_or_default();
    ensure!(
        ready_msg.contains(&"0".repeat(64)) && ready_msg.contains("correct image.sha256.amd64"),
        "checksum message: {ready_msg}"
    );
    let key = kubeutil::nodeclasses(&stack.client)
        .get("unregistered-key")
        .await?;
    ensure!(
        msg(&key).unwrap_or_default().contains(&uuid_like(7)),
        "SSH key message: {:?}",
        msg(&key)
    );
    hold_and_expect_no_order(stack).await?;

    // Credentials refused by Scaleway: the IAM call of the check answers 401.
    stack
        .emsim
        .add_fault(json!({"endpoint": IAM_LIST, "status": 401}))
        .await?;
    apply_nodeclass(stack, "refused-credentials", &|_| {}).await?;
    pool_with_pending_pod(stack, "refused-credentials").await?;
    let nc = wait_ready_false(stack, "refused-credentials", "CredentialsRefused").await?;
    let c = condition(&nc, "CredentialsValid").context("no CredentialsValid")?;
    ensure!(c["status"] == "False", "CredentialsValid is {c}");
    hold_and_expect_no_order(stack).await?;

    // Fixed: the credentials are accepted again, and the checksum is set to the
    // image's real one (taken from the mismatch message, then checked by the
    // install itself, which hashes what it writes). Both become Ready, their
    // pods get nodes; every other NodeClass stays not Ready and orders nothing.
    let actual = actual_sha(&wrong)?;
    stack.emsim.clear_faults().await?;
    apply_nodeclass(stack, "wrong-checksum", &|s| {
        s["image"]["sha256"] = json!({"amd64": actual.clone()})
    })
    .await?;
    for name in ["refused-credentials", "wrong-checksum"] {
        wait_ready_true(stack, name).await?;
    }
    let verified = kubeutil::nodeclasses(&stack.client)
        .get("wrong-checksum")
        .await?;
    let v = condition(&verified, "ImageVerified").context("no ImageVerified")?;
    ensure!(
        v["reason"] == "ImageChecksumVerified",
        "ImageVerified is {v}"
    );
    let mut placed = BTreeMap::new();
    for name in ["refused-credentials", "wrong-checksum"] {
        placed.extend(scenario::wait_pods_running(stack, name, 1, Duration::from_secs(150)).await?);
    }
    // Every server ever ordered is for a fixed NodeClass's pool.
    let fixed = ["refused-credentials", "wrong-checksum"];
    let servers = stack.emsim.servers_including_deleted().await?;
    let pools: Vec<String> = servers
        .iter()
        .map(|s| {
            s["tags"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(Value::as_str)
                .find_map(|t| t.strip_prefix("karpenter.sh/nodepool="))
                .unwrap_or("<untagged>")
                .to_string()
        })
        .collect();
    ensure!(
        pools.len() >= 2 && pools.iter().all(|p| fixed.contains(&p.as_str())),
        "servers ordered, by NodePool: {pools:?}"
    );
    let claims = scenario::nodeclaim_objects(stack).await?;
    let claim_pools: Vec<String> = claims
        .iter()
        .map(|c| {
            c.labels()
                .get("karpenter.sh/nodepool")
                .cloned()
                .unwrap_or_default()
        })
        .collect();
    ensure!(
        claim_pools.iter().all(|p| fixed.contains(&p.as_str())),
        "NodeClaims of not-ready NodeClasses: {claim_pools:?}"
    );
    for (name, _, reason, _) in &cases {
        if *name != "wrong-checksum" {
            wait_ready_false(stack, name, reason).await?;
        }
    }
    tracing::info!(?placed, "fixed NodeClasses got their nodes");

    let mut apps: Vec<&str> = cases.iter().map(|c| c.0).collect();
    apps.push("refused-credentials");
    scenario::scale_to_zero_and_check_clean(stack, &apps, Duration::from_secs(120)).await
}

/// Each invalid field is refused at admission, with its message.
async fn rejected_by_the_api_server(stack: &Stack) -> Result<()> {
    let cases: Vec<(&str, Mutation, &str)> = vec![
        (
            "unknown billing",
            Box::new(|s| s["billing"] = json!("weekly")),
            "supported values: \"hourly\", \"monthly\"",
        ),
        (
            "empty zone",
            Box::new(|s| s["zones"] = json!([""])),
            "each zone must be a Scaleway zone name such as fr-par-2",
        ),
        (
            "sha256 not hex",
            Box::new(|s| s["image"]["sha256"] = json!({"amd64": "not-a-checksum"})),
            "image.sha256 values must be 64 lowercase hex digits",
        ),
        (
            "ftp image",
            Box::new(|s| s["image"]["urlTemplate"] = json!("ftp://mirror/metal-{arch}.raw.xz")),
            "urlTemplate must be an http:// or https:// URL",
        ),
        (
            "unknown placeholder",
            Box::new(|s| {
                s["image"]["urlTemplate"] = json!("https://mirror/{flavour}/metal-{arch}.raw.xz")
            }),
            "urlTemplate may only use the placeholders {version}, {schematic} and {arch}",
        ),
        (
            "partition as install disk",
            Box::new(|s| s["installDisk"] = json!({"name": "nvme0n1p1"})),
            "installDisk.name names a partition",
        ),
        (
            "malformed disk name",
            Box::new(|s| s["installDisk"] = json!({"name": "NVMe 0"})),
            "installDisk.name must be a kernel disk name",
        ),
        (
            "ssh key id not a UUID",
            Box::new(|s| s["rescueSshKey"]["iamKeyId"] = json!("my-key")),
            "iamKeyId must be the id (a UUID) of an IAM SSH key",
        ),
        (
            "reserved tag",
            Box::new(|s| s["tags"] = json!(["karpenter.sh/nodeclaim=someone-else"])),
            "the provider reserves them for its ownership tags",
        ),
        (
            "empty patch",
            Box::new(|s| s["machineConfigPatches"] = json!(["  "])),
            "machineConfigPatches must not contain an empty patch",
        ),
        (
            "private network by id and by name",
            Box::new(|s| s["privateNetwork"] = json!({"id": uuid_like(3), "name": "prod"})),
            "set either id (one Private Network) or name and/or tags",
        ),
        (
            "booked addresses without ids",
            Box::new(|s| s["privateNetwork"] = json!({"name": "prod", "addresses": "booked"})),
            "addresses: booked needs ipamIpIds",
        ),
        (
            "booked address not a UUID",
            Box::new(|s| {
                s["privateNetwork"] =
                    json!({"name": "prod", "addresses": "booked", "ipamIpIds": ["10.0.0.7"]})
            }),
            "privateNetwork.ipamIpIds must be ids (UUIDs) of IPAM IPs",
        ),
    ];
    for (what, mutate, expected) in cases {
        match apply_nodeclass(stack, "invalid", mutate.as_ref()).await {
            Ok(()) => bail!("{what}: the API server accepted the NodeClass"),
            Err(e) => {
                let text = format!("{e:#}");
                ensure!(
                    text.contains(expected),
                    "{what}: refused with {text:?}, expected {expected:?}"
                );
                tracing::info!(what, refusal = %text, "refused by the API server as expected");
            }
        }
    }
    ensure!(
        kubeutil::nodeclasses(&stack.client)
            .get_opt("invalid")
            .await?
            .is_none(),
        "an invalid NodeClass exists"
    );
    Ok(())
}

/// Applies the scenarios' NodeClass named `name`, with `mutate` applied to its spec.
async fn apply_nodeclass(stack: &Stack, name: &str, mutate: &dyn Fn(&mut Value)) -> Result<()> {
    let mut obj: Value = serde_yaml_ng::from_str(&stack.nodeclass_yaml(name))?;
    mutate(&mut obj["spec"]);
    let obj: DynamicObject = serde_json::from_value(obj)?;
    kubeutil::apply(&stack.client, obj).await?;
    Ok(())
}

/// A NodePool on NodeClass `name` and a Deployment (also `name`) of one pod
/// that only that NodePool can hold.
async fn pool_with_pending_pod(stack: &Stack, name: &str) -> Result<()> {
    kubeutil::apply_yaml(&stack.client, &Stack::nodepool_yaml(name, name, "")).await?;
    let selector = [("karpenter.sh/nodepool", name)];
    kubeutil::apply_yaml(
        &stack.client,
        &scenario::inflate_yaml_on(name, 1, "1", &selector, false),
    )
    .await?;
    Ok(())
}

fn condition(nc: &DynamicObject, type_: &str) -> Option<Value> {
    nc.data["status"]["conditions"]
        .as_array()?
        .iter()
        .find(|c| c["type"] == type_)
        .cloned()
}

async fn wait_ready_false(stack: &Stack, name: &str, reason: &str) -> Result<DynamicObject> {
    let api = kubeutil::nodeclasses(&stack.client);
    wait::until(
        &format!("NodeClass {name} Ready=False ({reason})"),
        VERDICT_WITHIN,
        Duration::from_millis(500),
        || {
            let api = api.clone();
            async move {
                let nc = api.get(name).await?;
                let hit = condition(&nc, "Ready")
                    .is_some_and(|c| c["status"] == "False" && c["reason"] == reason);
                Ok(hit.then_some(nc))
            }
        },
    )
    .await
}

async fn wait_ready_true(stack: &Stack, name: &str) -> Result<()> {
    let api = kubeutil::nodeclasses(&stack.client);
    wait::until(
        &format!("NodeClass {name} Ready=True"),
        VERDICT_WITHIN,
        Duration::from_millis(500),
        || {
            let api = api.clone();
            async move {
                let nc = api.get(name).await?;
                Ok((kubeutil::condition(&nc, "Ready").as_deref() == Some("True")).then_some(()))
            }
        },
    )
    .await
}

/// Pending pods on not-ready NodeClasses: nothing ordered, no NodeClaim.
async fn hold_and_expect_no_order(stack: &Stack) -> Result<()> {
    tokio::time::sleep(HOLD).await;
    let orders = scenario::orders_placed(stack).await?;
    ensure!(
        orders == 0,
        "{orders} servers ordered for not-ready NodeClasses"
    );
    let claims = scenario::nodeclaims(stack).await?;
    ensure!(
        claims.is_empty(),
        "NodeClaims for not-ready NodeClasses: {claims:?}"
    );
    Ok(())
}

/// The sha256 the provider computed, from the mismatch message.
fn actual_sha(nc: &DynamicObject) -> Result<String> {
    let c = condition(nc, "ImageVerified").context("no ImageVerified")?;
    let message = c["message"].as_str().unwrap_or_default();
    message
        .split_once("with sha256 ")
        .and_then(|(_, rest)| rest.get(..64))
        .filter(|h| h.bytes().all(|b| b.is_ascii_hexdigit()))
        .map(str::to_string)
        .with_context(|| format!("no sha256 in {message:?}"))
}

/// A well-formed IAM key id that emsim never issued.
fn uuid_like(n: u8) -> String {
    format!("{n:08x}-0000-4000-8000-{n:012x}")
}

async fn secret_value(stack: &Stack, name: &str, key: &str) -> Result<String> {
    let api: Api<Secret> = Api::namespaced(stack.client.clone(), NAMESPACE);
    let s = api.get(name).await?;
    let bytes = s
        .data
        .and_then(|mut d| d.remove(key))
        .with_context(|| format!("Secret {name} has no {key}"))?;
    Ok(String::from_utf8(bytes.0)?)
}

async fn create_secret(stack: &Stack, name: &str, key: &str, value: &str) -> Result<()> {
    let api: Api<Secret> = Api::namespaced(stack.client.clone(), NAMESPACE);
    let secret: Secret = serde_json::from_value(json!({
        "metadata": {"name": name, "namespace": NAMESPACE},
        "stringData": {key: value},
    }))?;
    api.create(&PostParams::default(), &secret).await?;
    Ok(())
}
