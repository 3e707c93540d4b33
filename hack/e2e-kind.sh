#!/usr/bin/env bash
# `just e2e-kind`: the provider in a real cluster, installed as a user installs it.
#
# 1. the four images from their Dockerfiles (hack/images.sh: built, checked, run);
# 2. an OCI registry on loopback (hack/oci-registry.sh), the two charts packaged and
#    pushed to it with `helm push`, as the release workflow pushes them;
# 3. per scenario, a fresh kind cluster (hack/kind/up.sh: the node image built
#    locally and cached), the images loaded (`kind load docker-image`), and the e2e
#    scenario run with KPS_IN_CLUSTER=1: the stack installs both charts with
#    `helm install` (e2e/src/stack/in_cluster.rs), from the chart directories for the
#    first scenario and from the OCI registry for the others, checks the release
#    (containers ready, no restart, Lease held, /metrics through the Service), then
#    runs the scenario's own assertions against the in-cluster provider;
# 4. everything it started is removed on success and on failure: the clusters, the
#    registry (by PID), and dockerd if this run started it (hack/docker.sh down).
#
#   KPS_E2E_KIND_SCENARIOS   space-separated `test_path:charts` pairs (charts: dir or
#                            oci); default: the three below
#   KPS_E2E_KIND_KEEP=1      keep the last cluster and the registry (for inspection)
#   KPS_E2E_KIND_IMAGES      release (default) or test: the images of the binaries the
#                            tests built (hack/images.sh KPS_IMAGES_BINARIES=test), for a
#                            quicker run while developing; a release needs `release`
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
export GOTOOLCHAIN="${GOTOOLCHAIN:-go1.27.3}"
DOCKER=/usr/bin/docker
log() { printf 'e2e-kind: %s\n' "$*" >&2; }

scenarios=${KPS_E2E_KIND_SCENARIOS:-"walking_skeleton::pending_pods_become_a_talos_node_and_scale_to_zero_removes_it:dir standby::standby_adoption_joins_fast_refills_recycles_and_releases_at_the_paid_hour:oci instances::instance_vms_join_from_user_data_and_leave_nothing_billed:oci"}
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
work="$root/.work/e2e-kind-$(date -u +%Y%m%dT%H%M%S)-$$"
mkdir -p "$work"

docker_started=0
if ! "$DOCKER" info >/dev/null 2>&1; then docker_started=1; fi
hack/docker.sh up

cluster=""
registry_dir="$work/registry"
cleanup() {
	local rc=$?
	if [[ "${KPS_E2E_KIND_KEEP:-}" = 1 ]]; then
		log "kept: cluster ${cluster:-none}, registry in $registry_dir"
		exit $rc
	fi
	[[ -n "$cluster" ]] && hack/kind/down.sh "$cluster" >&2 || true
	hack/oci-registry.sh stop "$registry_dir" || true
	[[ $docker_started = 1 ]] && hack/docker.sh down || true
	exit $rc
}
trap cleanup EXIT INT TERM

# 1. Images.
images_kind=${KPS_E2E_KIND_IMAGES:-release}
image_tag=$version
if [[ "$images_kind" = test ]]; then
	cargo build --workspace --bins --tests >&2
	just build-bridge >/dev/null
	image_tag="$version-test"
fi
KPS_IMAGES_BINARIES="$images_kind" hack/images.sh "$version" kps.local >"$work/images.txt"
log "images: $(tr '\n' ' ' <"$work/images.txt")"

# 2. The charts in a local OCI registry.
helm="$(hack/helm.sh | tail -n 1)"
port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
hack/oci-registry.sh start "$registry_dir" "$port"
for chart in karpenter-crd karpenter-scaleway; do
	"$helm" package "charts/$chart" -d "$work/charts" >/dev/null
	"$helm" push "$work/charts/$chart-$version.tgz" "oci://127.0.0.1:$port/charts" --plain-http 2>&1 | sed 's/^/e2e-kind: helm push: /' >&2
done

# The harness's binaries (talos-sim makes the served image; the bridge and CRDs are
# what the host stack checks against) and the scenarios.
just build-bridge karpenter-crds >/dev/null
cargo build --workspace --bins --tests >&2
kube_bins="$(e2e/kube/build.sh | tail -n 1)"
kind_bin="$(hack/kind/kind.sh | tail -n 1)"

n=0
failed=0
for spec in $scenarios; do
	test_path=${spec%:*} charts=${spec##*:}
	n=$((n + 1))
	cluster="kps-e2e-$n"
	log "[$n] $test_path (charts from $charts) on a fresh cluster $cluster"
	kubeconfig="$(hack/kind/up.sh "$cluster" | tail -n 1)"
	while read -r image; do
		PATH="$(dirname "$DOCKER"):$PATH" "$kind_bin" load docker-image --name "$cluster" "$image" >&2
	done <"$work/images.txt"
	node_ip=$("$DOCKER" inspect -f '{{(index .NetworkSettings.Networks "kind").IPAddress}}' "$cluster-control-plane")
	host_ip=$("$DOCKER" network inspect kind -f '{{range .IPAM.Config}}{{if .Gateway}}{{.Gateway}} {{end}}{{end}}' | awk '{print $1}')
	case "$charts" in
		dir) chart_src="$root/charts" ;;
		oci) chart_src="oci://127.0.0.1:$port/charts" ;;
		*) log "unknown chart source $charts"; exit 2 ;;
	esac
	start=$SECONDS
	if KPS_IN_CLUSTER=1 KPS_KUBECONFIG="$kubeconfig" KPS_KIND_NODE_IP="$node_ip" KPS_KIND_HOST_IP="$host_ip" \
		KPS_CHARTS="$chart_src" KPS_CHART_VERSION="$version" KPS_IMAGE_REGISTRY=kps.local KPS_IMAGE_TAG="$image_tag" \
		KPS_HELM="$helm" KPS_KUBE_BIN_DIR="$kube_bins" \
		cargo test -q -p e2e --test scenarios -- --exact "$test_path" --nocapture >"$work/$n.log" 2>&1; then
		log "[$n] $test_path: passed in $((SECONDS - start)) s"
	else
		failed=$((failed + 1))
		log "[$n] $test_path: FAILED in $((SECONDS - start)) s; last lines of $work/$n.log:"
		tail -n 60 "$work/$n.log" >&2
	fi
	if [[ "${KPS_E2E_KIND_KEEP:-}" != 1 ]]; then
		hack/kind/down.sh "$cluster" >&2
		cluster=""
	fi
done
echo "$((n - failed)) passed, $failed failed"
[[ $failed = 0 ]]
