//! What a pod's containers would do on a real node, for a kubelet that runs
//! none: whether a readiness probe passes, and how long a deleted pod takes
//! to stop (its preStop hooks, then SIGTERM, bounded by the grace period).
//!
//! The model, with the real behaviour it stands for:
//! - **The `pause` image** (`…/pause:<tag>`, the default image of most test
//!   pods) listens on nothing and has no shell: an HTTP, TCP or gRPC probe
//!   finds no listener and an `exec` probe or hook finds no executable, so
//!   its readiness probes fail and its `exec` hooks end at once; it exits on
//!   SIGTERM at once (it handles the signal).
//! - **Any other image** serves what its probes ask for and runs its `exec`
//!   probes successfully (the probe is the workload's own contract).
//! - **A preStop hook** lasts its `sleep` action's seconds, or `N` for an
//!   `exec` of `sleep N` (directly or through `sh -c`); other hooks end at
//!   once.
//! - **SIGTERM**: a container whose `command` the pod overrides (a shell or
//!   `sleep` running as PID 1 installs no handler, and PID 1 ignores signals
//!   without one) keeps running until the grace period ends and the kubelet
//!   kills it; a container running its image's own entrypoint (nginx, pause)
//!   exits at once.
//!
//! The kubelet runs the hooks and sends SIGTERM from the start of the
//! deletion (`deletionTimestamp - deletionGracePeriodSeconds`) and kills what
//! is left when the grace period ends.

use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, LifecycleHandler, Pod, Probe};
use k8s_openapi::jiff::Timestamp;

/// Whether `image` is the pause image (`registry.k8s.io/pause:3.10`,
/// `public.ecr.aws/eks-distro/kubernetes/pause:3.2`, ...).
pub fn is_pause(image: &str) -> bool {
    let last = image.rsplit('/').next().unwrap_or(image);
    let name = last.split([':', '@']).next().unwrap_or(last);
    name == "pause"
}

fn image(c: &Container) -> &str {
    c.image.as_deref().unwrap_or_default()
}

/// Whether the container's readiness probe passes (no probe: ready).
pub fn ready(c: &Container) -> bool {
    match &c.readiness_probe {
        None => true,
        Some(probe) => probe_passes(c, probe),
    }
}

fn probe_passes(c: &Container, probe: &Probe) -> bool {
    let any_handler = probe.http_get.is_some()
        || probe.tcp_socket.is_some()
        || probe.grpc.is_some()
        || probe.exec.is_some();
    !(any_handler && is_pause(image(c)))
}

/// How long the pod's containers take to stop once its deletion started,
/// given its grace period: the slowest container's preStop hook plus its
/// exit after SIGTERM, at most the grace period.
pub fn shutdown(pod: &Pod, grace: Duration) -> Duration {
    let Some(spec) = pod.spec.as_ref() else {
        return Duration::ZERO;
    };
    spec.containers
        .iter()
        .map(|c| {
            let hook = c
                .lifecycle
                .as_ref()
                .and_then(|l| l.pre_stop.as_ref())
                .map_or(Duration::ZERO, |h| hook_duration(c, h));
            let after_sigterm = if ignores_sigterm(c) {
                grace
            } else {
                Duration::ZERO
            };
            (hook + after_sigterm).min(grace)
        })
        .max()
        .unwrap_or(Duration::ZERO)
}

/// When a deleted pod's containers have stopped: its deletion started
/// `deletionGracePeriodSeconds` before its `deletionTimestamp`, and they take
/// [`shutdown`] from then (a pod not deleted: now).
pub fn stopped_at(pod: &Pod) -> Timestamp {
    let grace = Duration::from_secs(
        pod.metadata
            .deletion_grace_period_seconds
            .unwrap_or(0)
            .max(0) as u64,
    );
    let deadline = pod
        .metadata
        .deletion_timestamp
        .as_ref()
        .map_or_else(Timestamp::now, |t| t.0);
    let started = deadline.checked_sub(grace).unwrap_or(deadline);
    started
        .checked_add(shutdown(pod, grace))
        .unwrap_or(deadline)
}

fn ignores_sigterm(c: &Container) -> bool {
    !is_pause(image(c)) && c.command.as_ref().is_some_and(|cmd| !cmd.is_empty())
}

fn hook_duration(c: &Container, hook: &LifecycleHandler) -> Duration {
    if let Some(sleep) = &hook.sleep {
        return Duration::from_secs(sleep.seconds.max(0) as u64);
    }
    if is_pause(image(c)) {
        return Duration::ZERO;
    }
    let Some(command) = hook.exec.as_ref().and_then(|e| e.command.as_ref()) else {
        return Duration::ZERO;
    };
    sleep_seconds(command).map_or(Duration::ZERO, Duration::from_secs)
}

/// `N` of `sleep N`, `["sleep", "N"]` or `["/bin/sh", "-c", "sleep N"]`.
fn sleep_seconds(command: &[String]) -> Option<u64> {
    let words: Vec<&str> = match command {
        [shell, flag, script] if shell.ends_with("sh") && flag == "-c" => {
            script.split_whitespace().collect()
        }
        _ => command.iter().map(String::as_str).collect(),
    };
    match words.as_slice() {
        [sleep, n] if sleep.rsplit('/').next() == Some("sleep") => n.parse().ok(),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn pod(containers: serde_json::Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {"name": "p"},
            "spec": {"containers": containers},
        }))
        .unwrap()
    }

    const GRACE: Duration = Duration::from_secs(30);

    #[test]
    fn the_pause_image_is_recognised_by_its_name() {
        assert!(is_pause("public.ecr.aws/eks-distro/kubernetes/pause:3.2"));
        assert!(is_pause("registry.k8s.io/pause:3.10"));
        assert!(is_pause("pause@sha256:abc"));
        assert!(!is_pause("nginx"));
        assert!(!is_pause("example.com/pause-exporter:1"));
    }

    #[test]
    fn a_pause_container_never_passes_a_readiness_probe_and_others_do() {
        let probe = json!({"httpGet": {"port": 80}});
        let p = pod(json!([
            {"name": "a", "image": "registry.k8s.io/pause:3.10", "readinessProbe": probe},
            {"name": "b", "image": "nginx", "readinessProbe": probe},
            {"name": "c", "image": "registry.k8s.io/pause:3.10"},
        ]));
        let c = &p.spec.unwrap().containers;
        assert!(!ready(&c[0]));
        assert!(ready(&c[1]));
        assert!(ready(&c[2]));
    }

    #[test]
    fn a_pause_pod_stops_at_once_and_a_shell_waits_for_the_kill() {
        let pause = pod(json!([{"name": "a", "image": "registry.k8s.io/pause:3.10"}]));
        assert_eq!(shutdown(&pause, GRACE), Duration::ZERO);
        let shell = pod(json!([{"name": "a", "image": "alpine:3.20.2",
            "command": ["/bin/sh", "-c", "sleep 3600"]}]));
        assert_eq!(shutdown(&shell, GRACE), GRACE);
        let nginx = pod(json!([{"name": "a", "image": "nginx"}]));
        assert_eq!(shutdown(&nginx, GRACE), Duration::ZERO);
    }

    #[test]
    fn pre_stop_hooks_last_their_sleep_within_the_grace_period() {
        let sleep_action = pod(json!([{"name": "a", "image": "registry.k8s.io/pause:3.10",
            "lifecycle": {"preStop": {"sleep": {"seconds": 10}}}}]));
        assert_eq!(shutdown(&sleep_action, GRACE), Duration::from_secs(10));
        let long = pod(json!([{"name": "a", "image": "registry.k8s.io/pause:3.10",
            "lifecycle": {"preStop": {"sleep": {"seconds": 300}}}}]));
        assert_eq!(shutdown(&long, GRACE), GRACE);
        let exec = pod(json!([{"name": "a", "image": "alpine:3.20.2",
            "lifecycle": {"preStop": {"exec": {"command": ["/bin/sh", "-c", "sleep 12"]}}}}]));
        assert_eq!(shutdown(&exec, GRACE), Duration::from_secs(12));
        // No shell in pause: the exec hook fails at once.
        let exec_on_pause = pod(json!([{"name": "a", "image": "registry.k8s.io/pause:3.10",
            "lifecycle": {"preStop": {"exec": {"command": ["sleep", "12"]}}}}]));
        assert_eq!(shutdown(&exec_on_pause, GRACE), Duration::ZERO);
        // The slowest container decides.
        let two = pod(json!([
            {"name": "a", "image": "registry.k8s.io/pause:3.10"},
            {"name": "b", "image": "busybox", "lifecycle": {"preStop": {"exec": {"command": ["sleep", "5"]}}}},
        ]));
        assert_eq!(shutdown(&two, GRACE), Duration::from_secs(5));
    }

    #[test]
    fn a_deleted_pod_stops_its_hook_after_the_deletion_started() {
        let mut p = pod(json!([{"name": "a", "image": "registry.k8s.io/pause:3.10",
            "lifecycle": {"preStop": {"sleep": {"seconds": 10}}}}]));
        // Deleted at 12:00:00 with 30 s: deletionTimestamp 12:00:30.
        p.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            "2026-11-27T12:00:30Z".parse().unwrap(),
        ));
        p.metadata.deletion_grace_period_seconds = Some(30);
        assert_eq!(stopped_at(&p).to_string(), "2026-11-27T12:00:10Z");
        // Deleted again with no grace (a force delete): now.
        p.metadata.deletion_timestamp = Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(
            "2026-11-27T12:00:05Z".parse().unwrap(),
        ));
        p.metadata.deletion_grace_period_seconds = Some(0);
        assert_eq!(stopped_at(&p).to_string(), "2026-11-27T12:00:05Z");
    }

    #[test]
    fn sleep_commands_are_read_directly_or_through_a_shell() {
        let s = |v: &[&str]| sleep_seconds(&v.iter().map(|x| x.to_string()).collect::<Vec<_>>());
        assert_eq!(s(&["sleep", "7"]), Some(7));
        assert_eq!(s(&["/bin/sleep", "7"]), Some(7));
        assert_eq!(s(&["/bin/sh", "-c", "sleep 7"]), Some(7));
        assert_eq!(s(&["sh", "-c", "echo hi"]), None);
        assert_eq!(s(&["sleep", "forever"]), None);
    }
}
