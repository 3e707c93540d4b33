#!/usr/bin/env bash
# Builds the Prometheus server from its Go module into a per-machine cache and
# prints the binary's path as the last line of stdout. Used to take the docs'
# picture of the dashboard (`just dashboard-picture`): the e2e stack starts it
# when KPS_PROMETHEUS_BIN names it. Nothing in CI needs it.
#
# Built with `remove_all_sd` (file and HTTP discovery only: the stack writes
# static targets) and without the web UI's assets (the HTTP API is all the
# renderer uses), which keeps a cold build to a few minutes on two cores.
# The cache key covers the version, this script and the Go toolchain.
#
#   KPS_PROMETHEUS_VERSION  module version (default below; the Go module proxy
#                           serves github.com/prometheus/prometheus as v0.3xx.y,
#                           the module path of Prometheus 3.x)
#   KPS_CACHE_DIR           cache root (default: $HOME/.cache/karpenter-provider-scaleway)
set -euo pipefail
# Go toolchain: Karpenter core v1.15 (bridge/go.mod) needs go >= 1.26.9; the go
# command fetches this one as a module (once per machine). Set GOTOOLCHAIN to
# override (e.g. GOTOOLCHAIN=local with a new enough go installed).
export GOTOOLCHAIN="${GOTOOLCHAIN:-go1.27.3}"

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
version="${KPS_PROMETHEUS_VERSION:-v0.316.0}"
cache_root="${KPS_CACHE_DIR:-${HOME}/.cache/karpenter-provider-scaleway}"
module=github.com/prometheus/prometheus

log() { printf 'prometheus.sh: %s\n' "$*" >&2; }

cache_key() {
	{
		go version
		echo "$version"
		sha256sum "$here/prometheus.sh"
	} | sha256sum | cut -c1-16
}

# Each use marks its build as used; a build of another key unused for
# KPS_PROMETHEUS_KEEP_DAYS (default 14) days is removed when a new one is made.
used() { touch "$1" 2>/dev/null || true; }
prune() {
	local keep_days="${KPS_PROMETHEUS_KEEP_DAYS:-14}" old
	while IFS= read -r -d '' old; do
		[[ "$old" == "$final" ]] && continue
		log "removing $old (unused for more than $keep_days days)"
		rm -rf "$old"
	done < <(find "$cache_root" -mindepth 1 -maxdepth 1 -type d -name 'prometheus-*' -mtime +"$keep_days" -print0)
}

key="$(cache_key)"
final="$cache_root/prometheus-$version-$key"
if [[ -x "$final/bin/prometheus" ]]; then
	used "$final"
	echo "$final/bin/prometheus"
	exit 0
fi

mkdir -p "$cache_root"
# Serialise builds of the same key: a second caller waits for the first.
exec 9>"$cache_root/.prometheus-$key.lock"
flock 9
if [[ -x "$final/bin/prometheus" ]]; then
	echo "$final/bin/prometheus"
	exit 0
fi

tmp="$(mktemp -d "$cache_root/.prometheus-$key.XXXXXX")"
chmod 755 "$tmp"
# A build cache of its own, deleted afterwards: only the binary is kept.
gocache="$(mktemp -d "$cache_root/.gocache-prometheus-$key.XXXXXX")"
trap 'rm -rf "$tmp"; chmod -R u+w "$gocache" 2>/dev/null; rm -rf "$gocache"' EXIT

# What `prometheus --version` and /api/v1/status/buildinfo report (upstream's
# Makefile sets the same variables through promu): the release number from
# the module's own VERSION file (3.16.0 for v0.316.0: Prometheus 3.x is
# tagged v0.3MM.P for Go).
src="$(cd "$tmp" && go mod download -json "$module@$version" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",$/\1/p')"
ver="$(cat "$src/VERSION" 2>/dev/null || echo "${version#v}")"
ldflags="-s -w -X github.com/prometheus/common/version.Version=$ver"
ldflags+=" -X github.com/prometheus/common/version.Branch=$version"
ldflags+=" -X github.com/prometheus/common/version.BuildUser=karpenter-provider-scaleway"

log "building $module/cmd/prometheus@$version into $final"
start=$SECONDS
# `go install pkg@version` builds the module exactly as its own go.mod pins it.
# Run outside any module so that no go.work or go.mod of ours takes part.
(cd "$tmp" && CGO_ENABLED=0 GOCACHE="$gocache" GOBIN="$tmp/bin" GOFLAGS="-buildvcs=false" \
	go install -trimpath -tags remove_all_sd -ldflags="$ldflags" "$module/cmd/prometheus@$version")
[[ -x "$tmp/bin/prometheus" ]] || {
	log "go install finished but produced no prometheus binary"
	exit 1
}
log "built in $((SECONDS - start))s"
prune

if ! mv -T "$tmp" "$final" 2>/dev/null; then
	[[ -x "$final/bin/prometheus" ]] || {
		log "cannot move the build into $final"
		exit 1
	}
fi
echo "$final/bin/prometheus"
