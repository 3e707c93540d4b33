#!/usr/bin/env bash
# Builds promtool (the Prometheus release pinned below) from its Go module into a
# per-machine cache and prints the binary's path as the last line of stdout, like
# hack/helm.sh. Needs only Go and the Go module proxy. An unchanged pin and Go
# toolchain return at once.
#
#   KPS_CACHE_DIR   cache root (default: $HOME/.cache/karpenter-provider-scaleway)
#   KPS_PROMTOOL    use this promtool binary instead of building one
set -euo pipefail
# Go toolchain: Karpenter core v1.15 (bridge/go.mod) needs go >= 1.26.9; the go
# command fetches this one as a module (once per machine). Set GOTOOLCHAIN to
# override (e.g. GOTOOLCHAIN=local with a new enough go installed).
export GOTOOLCHAIN="${GOTOOLCHAIN:-go1.27.3}"

# github.com/prometheus/prometheus tags its Go module v0.<major><minor>.<patch>:
# v0.316.0 is Prometheus 3.16.0. Bump deliberately: rule checks gain lints.
prometheus_module_version=v0.316.0

log() { printf 'promtool.sh: %s\n' "$*" >&2; }

if [[ -n "${KPS_PROMTOOL:-}" ]]; then
	[[ -x "$KPS_PROMTOOL" ]] || { log "KPS_PROMTOOL=$KPS_PROMTOOL is not an executable"; exit 1; }
	echo "$KPS_PROMTOOL"
	exit 0
fi

cache_root="${KPS_CACHE_DIR:-${HOME}/.cache/karpenter-provider-scaleway}"
key="$({ printf '%s\n' "$prometheus_module_version"; go version; sha256sum < "${BASH_SOURCE[0]}"; } | sha256sum | cut -c1-12)"
final="$cache_root/promtool-$prometheus_module_version-$key"
if [[ -x "$final/bin/promtool" ]]; then
	echo "$final/bin/promtool"
	exit 0
fi

mkdir -p "$cache_root"
# Serialise concurrent builds of the same key.
exec 9>"$cache_root/.promtool-$key.lock"
flock 9
if [[ -x "$final/bin/promtool" ]]; then
	echo "$final/bin/promtool"
	exit 0
fi

tmp="$(mktemp -d "$cache_root/.promtool-$key.XXXXXX")"
chmod 755 "$tmp"
trap 'rm -rf "$tmp"' EXIT

log "building promtool $prometheus_module_version into $final (a cold build takes several minutes)"
start=$SECONDS
# Outside any module, `go install pkg@version` builds with Prometheus' own go.mod
# (the released dependency set). The ldflags make `promtool --version` name the
# module version instead of an empty one.
ldflags="-s -w -X github.com/prometheus/common/version.Version=$prometheus_module_version"
ldflags+=" -X github.com/prometheus/common/version.Branch=module"
(
	cd "$tmp"
	CGO_ENABLED=0 GOBIN="$tmp/bin" GOFLAGS="-buildvcs=false" \
		go install -trimpath -ldflags "$ldflags" "github.com/prometheus/prometheus/cmd/promtool@$prometheus_module_version"
)
[[ -x "$tmp/bin/promtool" ]] || { log "go install finished but produced no promtool binary"; exit 1; }
log "built in $((SECONDS - start))s"

if ! mv -T "$tmp" "$final" 2>/dev/null; then
	[[ -x "$final/bin/promtool" ]] || { log "cannot move the build into $final"; exit 1; }
fi
echo "$final/bin/promtool"
