#!/usr/bin/env bash
# Builds etcd, kube-apiserver, kube-controller-manager, kube-scheduler and kubectl
# from the Go modules pinned in this directory into a per-machine cache, and prints
# the bin directory as the last line of stdout. kubectl is built here so that the
# repository's scripts (hack/chart-check.sh, hack/apiserver.sh) use the client of
# the control plane's version, not whichever one the host has. The cache key covers
# everything that changes the binaries (go.mod, go.sum, the cmd sources, this
# script, the Go toolchain), so an unchanged tree returns at once and any change
# rebuilds.
#
#   KPS_CACHE_DIR   cache root (default: $HOME/.cache/karpenter-provider-scaleway)
set -euo pipefail
# Go toolchain: Karpenter core v1.15 (bridge/go.mod) needs go >= 1.26.9; the go
# command fetches this one as a module (once per machine). Set GOTOOLCHAIN to
# override (e.g. GOTOOLCHAIN=local with a new enough go installed).
export GOTOOLCHAIN="${GOTOOLCHAIN:-go1.27.3}"

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
cd "$here"

binaries=(etcd kube-apiserver kube-controller-manager kube-scheduler kubectl)
cache_root="${KPS_CACHE_DIR:-${HOME}/.cache/karpenter-provider-scaleway}"

log() { printf 'kube/build.sh: %s\n' "$*" >&2; }

cache_key() {
	{
		go version
		sha256sum go.mod go.sum build.sh
		find cmd -type f -name '*.go' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
	} | sha256sum | cut -c1-16
}

complete() {
	local dir="$1" b
	for b in "${binaries[@]}"; do
		[[ -x "$dir/$b" ]] || return 1
	done
}

# Each use marks its build as used; a build of another key unused for
# KPS_KUBE_KEEP_DAYS (default 14) days is removed when a new one is made.
used() { touch "$1" 2>/dev/null || true; }
prune() {
	local keep_days="${KPS_KUBE_KEEP_DAYS:-14}" old
	while IFS= read -r -d '' old; do
		[[ "$old" == "$final" ]] && continue
		log "removing $old (unused for more than $keep_days days)"
		rm -rf "$old"
	done < <(find "$cache_root" -mindepth 1 -maxdepth 1 -type d -name 'kube-*' -mtime +"$keep_days" -print0)
}

key="$(cache_key)"
final="$cache_root/kube-$key"
if complete "$final/bin"; then
	used "$final"
	echo "$final/bin"
	exit 0
fi

mkdir -p "$cache_root"
# Serialise builds of the same key: a second caller waits for the first and
# then finds the cache filled, instead of compiling everything a second time.
exec 9>"$cache_root/.kube-$key.lock"
flock 9
if complete "$final/bin"; then
	echo "$final/bin"
	exit 0
fi

k8s_version="$(awk '$1 == "k8s.io/kubernetes" { print $2; exit }' go.mod)"
if [[ ! "$k8s_version" =~ ^v([0-9]+)\.([0-9]+)\.[0-9]+$ ]]; then
	log "cannot read the k8s.io/kubernetes version from go.mod (got '$k8s_version')"
	exit 1
fi
major="${BASH_REMATCH[1]}"
minor="${BASH_REMATCH[2]}"

# Without these the binaries report v0.0.0-master, which clients that gate on the
# server version (Karpenter among them) reject.
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags+=" -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=$major -X $pkg.gitMinor=$minor"
	ldflags+=" -X $pkg.gitTreeState=clean"
done

tmp="$(mktemp -d "$cache_root/.kube-$key.XXXXXX")"
chmod 755 "$tmp"
# A build cache of its own, deleted afterwards: the binaries are what is kept,
# and Kubernetes' compiled packages would otherwise stay in Go's shared cache
# (gigabytes that nothing else reuses).
gocache="$(mktemp -d "$cache_root/.gocache-$key.XXXXXX")"
trap 'rm -rf "$tmp"; chmod -R u+w "$gocache" 2>/dev/null; rm -rf "$gocache"' EXIT

log "building Kubernetes $k8s_version into $final (a cold build takes several minutes)"
start=$SECONDS
# Upstream builds these components static; -mod=readonly fails instead of
# silently editing go.mod when it is out of date.
CGO_ENABLED=0 GOCACHE="$gocache" GOFLAGS="-mod=readonly -buildvcs=false" \
	go build -trimpath -ldflags="$ldflags" -o "$tmp/bin/" ./cmd/...
complete "$tmp/bin" || {
	log "go build finished but not every binary was produced"
	exit 1
}
log "built in $((SECONDS - start))s"
prune

# rename(2) is atomic: readers see either no directory or a complete one.
if ! mv -T "$tmp" "$final" 2>/dev/null; then
	complete "$final/bin" || {
		log "cannot move the build into $final"
		exit 1
	}
fi
echo "$final/bin"
