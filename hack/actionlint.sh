#!/usr/bin/env bash
# Builds actionlint (the release pinned below) from its Go module into a per-machine
# cache and prints the binary's path as the last line of stdout, like hack/helm.sh and
# hack/promtool.sh. Needs only Go and the Go module proxy. An unchanged pin and Go
# toolchain return at once. `just lint` runs it on .github/workflows/.
#
#   KPS_CACHE_DIR    cache root (default: $HOME/.cache/karpenter-provider-scaleway)
#   KPS_ACTIONLINT   use this actionlint binary instead of building one
set -euo pipefail
# Go toolchain: Karpenter core v1.15 (bridge/go.mod) needs go >= 1.26.9; the go
# command fetches this one as a module (once per machine). Set GOTOOLCHAIN to
# override (e.g. GOTOOLCHAIN=local with a new enough go installed).
export GOTOOLCHAIN="${GOTOOLCHAIN:-go1.27.3}"

# Bump deliberately: new releases know new action inputs and add checks.
actionlint_version=v1.7.12

log() { printf 'actionlint.sh: %s\n' "$*" >&2; }

if [[ -n "${KPS_ACTIONLINT:-}" ]]; then
	[[ -x "$KPS_ACTIONLINT" ]] || { log "KPS_ACTIONLINT=$KPS_ACTIONLINT is not an executable"; exit 1; }
	echo "$KPS_ACTIONLINT"
	exit 0
fi

cache_root="${KPS_CACHE_DIR:-${HOME}/.cache/karpenter-provider-scaleway}"
key="$({ printf '%s\n' "$actionlint_version"; go version; sha256sum < "${BASH_SOURCE[0]}"; } | sha256sum | cut -c1-12)"
final="$cache_root/actionlint-$actionlint_version-$key"
if [[ -x "$final/bin/actionlint" ]]; then
	echo "$final/bin/actionlint"
	exit 0
fi

mkdir -p "$cache_root"
# Serialise concurrent builds of the same key.
exec 9>"$cache_root/.actionlint-$key.lock"
flock 9
if [[ -x "$final/bin/actionlint" ]]; then
	echo "$final/bin/actionlint"
	exit 0
fi

tmp="$(mktemp -d "$cache_root/.actionlint-$key.XXXXXX")"
chmod 755 "$tmp"
trap 'rm -rf "$tmp"' EXIT

log "building actionlint $actionlint_version into $final"
start=$SECONDS
# Outside any module, `go install pkg@version` builds with actionlint's own go.mod (the
# released dependency set); the binary reads its version from the module's build info.
(
	cd "$tmp"
	CGO_ENABLED=0 GOBIN="$tmp/bin" GOFLAGS="-buildvcs=false" \
		go install -trimpath -ldflags "-s -w" "github.com/rhysd/actionlint/cmd/actionlint@$actionlint_version"
)
[[ -x "$tmp/bin/actionlint" ]] || { log "go install finished but produced no actionlint binary"; exit 1; }
log "built in $((SECONDS - start))s"

if ! mv -T "$tmp" "$final" 2>/dev/null; then
	[[ -x "$final/bin/actionlint" ]] || { log "cannot move the build into $final"; exit 1; }
fi
echo "$final/bin/actionlint"
