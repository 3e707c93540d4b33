# shellcheck shell=bash disable=SC2034  # the scripts that source this use its variables
# Shared by the hack/kind/ scripts (sourced, not run): versions, the cache, the
# Docker client. docs/development.md "Containers and kind" describes the whole.

# sigs.k8s.io/kind, built from the Go module proxy by kind.sh; its base files
# (images/base/files) go into the node image.
KIND_VERSION=v0.33.0
# crictl for the node (kind load and kind export logs call it; Debian bookworm
# has no package). v1.35.0 is not on the module proxy; any CRI v1 client works.
CRICTL_VERSION=v1.34.0
# The node's Debian release and mirror (debootstrap).
DEBIAN_SUITE=bookworm
DEBIAN_MIRROR="${KPS_DEBIAN_MIRROR:-http://deb.debian.org/debian}"

export GOTOOLCHAIN="${GOTOOLCHAIN:-go1.27.3}"
cache_root="${KPS_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/karpenter-provider-scaleway}"
# Debian's client, with BuildKit (hack/docker.sh: another docker earlier in PATH
# may lack buildx).
DOCKER="${KPS_DOCKER:-/usr/bin/docker}"
export DOCKER_BUILDKIT=1

kind_dir="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo_root="$(cd "$kind_dir/../.." && pwd)"

log() { printf '%s: %s\n' "$(basename "$0")" "$*" >&2; }
die() { log "$*"; exit 1; }

# The Kubernetes version both Go modules build (e2e/kube: the control plane;
# hack/kind/kube: the node side).
k8s_version() {
	local e2e node
	e2e="$(awk '$1 == "k8s.io/kubernetes" { print $2; exit }' "$repo_root/e2e/kube/go.mod")"
	node="$(awk '$1 == "k8s.io/kubernetes" { print $2; exit }' "$kind_dir/kube/go.mod")"
	[[ "$e2e" =~ ^v[0-9]+\.[0-9]+\.[0-9]+$ ]] || die "no k8s.io/kubernetes version in e2e/kube/go.mod"
	[[ "$e2e" == "$node" ]] || die "e2e/kube/go.mod has k8s.io/kubernetes $e2e, hack/kind/kube/go.mod $node: make them equal"
	echo "$e2e"
}

# The directory of a module version in the module cache, downloaded if needed.
module_dir() {
	(cd / && GOFLAGS=-mod=mod go mod download -json "$1" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')
}
