#!/usr/bin/env bash
# Creates the kind cluster NAME (default kps-e2e) from kind-config.yaml with the
# locally built node image, and prints the path of its kubeconfig as the last
# line (~/.kube/config is left alone; KPS_KIND_KUBECONFIG chooses another path).
# A cluster that exists is left as it is: its kubeconfig is written again.
#
#   hack/kind/up.sh [NAME]      then: hack/kind/smoke.sh [NAME], hack/kind/down.sh [NAME]
#
# What the cluster gets besides kind's defaults:
# - a static bridge CNI (Debian's containernetworking-plugins) for the node's pod
#   CIDR, written once kube-controller-manager has allocated it: kind's kindnetd
#   would need an image from a registry (disableDefaultCNI in kind-config.yaml);
# - kube-proxy in nftables mode, so Services work (node-image.sh says why nftables);
# - CoreDNS serving cluster.local only: its `forward` to the node's resolver (and
#   `loop`, which probes through it) is removed, so no Pod query leaves the machine.
#
# Host settings, each applied only where detected (docs/development.md
# "Containers and kind" says what each fixed and what proved unnecessary):
# - cgroup v1 (or hybrid) host: KubeletConfiguration failCgroupV1: false;
# - root without CAP_SYS_RESOURCE: containerd restrict_oom_score_adj = true.
#
#   KPS_KIND_KEEP=1   keep a cluster whose creation failed, for inspection
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

name="${1:-kps-e2e}"
state="$cache_root/kind-clusters/$name"
kubeconfig="${KPS_KIND_KUBECONFIG:-$state/kubeconfig}"
"$DOCKER" info >/dev/null 2>&1 || die "no Docker daemon answers: start one with hack/docker.sh up"

kind="$("$kind_dir/kind.sh" | tail -n 1)"
kubectl="$("$repo_root/e2e/kube/build.sh" | tail -n 1)/kubectl"
# kind runs `docker` from PATH: make it the client of lib.sh. Docker, not podman.
kind() { PATH="$(dirname "$DOCKER"):$PATH" KIND_EXPERIMENTAL_PROVIDER=docker "$kind" "$@"; }
k() { "$kubectl" --kubeconfig "$kubeconfig" "$@"; }

mkdir -p "$state" "$(dirname "$kubeconfig")"
if grep -qx "$name" <<<"$(kind get clusters 2>/dev/null)"; then
	kind export kubeconfig --name "$name" --kubeconfig "$kubeconfig" >&2
	log "cluster $name exists"
	echo "$kubeconfig"
	exit 0
fi

image="$("$kind_dir/node-image.sh" | tail -n 1)"
start=$SECONDS

# What kind makes on the host beyond its containers, marked for down.sh, which
# removes it with the last cluster: the `kind` network (and its bridge), and
# /lib/modules, which kind mounts into its nodes (Docker creates a missing source).
"$DOCKER" network inspect kind >/dev/null 2>&1 || touch "$cache_root/kind-clusters/.made-network-kind"
[[ -e /lib/modules ]] || touch "$cache_root/kind-clusters/.made-lib-modules"

flags=()
# No cgroup2 controllers file at the root: cgroup v1 or hybrid (these machines).
# Fixes kubelet 1.35 exiting with "kubelet is configured to not run on a host
# using cgroup v1" (kubeadm init then times out). A stopgap: Kubernetes is
# removing cgroup v1 support.
if [[ ! -f /sys/fs/cgroup/cgroup.controllers ]]; then
	log "cgroup v1 host: failCgroupV1: false"
	flags+=(--cgroup-v1)
fi
# CAP_SYS_RESOURCE (capability 24) missing from root's bounding set. Fixes every
# Pod sandbox failing with runc's "can't get final child's PID from pipe: EOF":
# the CRI asks for oom_score_adj values (-997 for the control plane) below what
# the container inherits, and lowering it needs that capability.
if (((16#$(awk '/^CapBnd:/ { print $2 }' /proc/self/status) >> 24 & 1) == 0)); then
	log "no CAP_SYS_RESOURCE: containerd restrict_oom_score_adj = true"
	flags+=(--restrict-oom-score-adj)
fi
python3 "$kind_dir/config.py" "$repo_root/kind-config.yaml" --name "$name" --image "$image" \
	"${flags[@]}" >"$state/config.yaml"

failed() {
	local rc=$?
	log "creating $name failed (exit $rc)"
	"$DOCKER" exec "$name-control-plane" journalctl --no-pager -n 30 -u kubelet -u containerd >&2 2>/dev/null || true
	if [[ -n "${KPS_KIND_KEEP:-}" ]]; then
		log "kept (KPS_KIND_KEEP): hack/kind/down.sh $name removes it"
	else
		"$kind_dir/down.sh" "$name" >&2 || true
	fi
	exit "$rc"
}
trap failed ERR

log "creating $name from $image (config $state/config.yaml)"
retain=()
[[ -z "${KPS_KIND_KEEP:-}" ]] || retain=(--retain)
kind create cluster --name "$name" --config "$state/config.yaml" --kubeconfig "$kubeconfig" "${retain[@]}" >&2
created=$SECONDS

# CoreDNS without upstream (see the header); changed before its Pods can start,
# which they cannot before the CNI below.
corefile="$(k -n kube-system get configmap coredns -o jsonpath='{.data.Corefile}')"
k -n kube-system patch configmap coredns --type merge -p "$(python3 -c '
import json, re, sys
c = re.sub(r"\n *forward \. /etc/resolv\.conf \{[^}]*\}", "", sys.stdin.read())
c = re.sub(r"\n *loop\n", "\n", c)
print(json.dumps({"data": {"Corefile": c}}))' <<<"$corefile")" >/dev/null

node="$name-control-plane"
for _ in $(seq 1 60); do
	cidr="$(k get node "$node" -o jsonpath='{.spec.podCIDR}')"
	[[ -n "$cidr" ]] && break
	sleep 1
done
[[ -n "$cidr" ]] || die "node $node got no pod CIDR"
# A bridge in the node's network namespace (not the host's). hairpinMode: a Pod
# reaches itself through a Service; ipMasq: Pods reach the node's Docker
# network (the host) as the node.
"$DOCKER" exec -i "$node" sh -c 'cat >/etc/cni/net.d/10-kps-bridge.conflist' <<EOF
{
  "cniVersion": "1.0.0",
  "name": "kps-bridge",
  "plugins": [
    {
      "type": "bridge",
      "bridge": "kps0",
      "isGateway": true,
      "ipMasq": true,
      "hairpinMode": true,
      "ipam": {
        "type": "host-local",
        "ranges": [[{ "subnet": "$cidr" }]],
        "routes": [{ "dst": "0.0.0.0/0" }]
      }
    },
    { "type": "portmap", "capabilities": { "portMappings": true } }
  ]
}
EOF

k wait --for=condition=Ready "node/$node" --timeout=120s >&2
k -n kube-system rollout status daemonset/kube-proxy --timeout=120s >&2
k -n kube-system rollout status deployment/coredns --timeout=120s >&2
trap - ERR
log "cluster $name ready in $((SECONDS - start))s (kind create: $((created - start))s); node image $image"
echo "$kubeconfig"
