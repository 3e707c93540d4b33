#!/usr/bin/env bash
# Compiles Karpenter core's own e2e suites (test/suites/{regression,disruption,
# performance} of the sigs.k8s.io/karpenter module at the version bridge/go.mod
# requires) into a per-machine cache, as published: built inside the module's
# own directory with its own go.mod and go.sum, nothing copied or patched.
# Prints the directory (holding <suite>.test and module-dir) as the last line.
# An unchanged version and Go toolchain return at once.
#
#   KPS_CACHE_DIR   cache root (default: $HOME/.cache/karpenter-provider-scaleway)
set -euo pipefail
export GOTOOLCHAIN="${GOTOOLCHAIN:-go1.27.3}"

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
log() { printf 'core-suites.sh: %s\n' "$*" >&2; }

cd "$here/../bridge"
version="$(go list -m -f '{{.Version}}' sigs.k8s.io/karpenter)"
go mod download sigs.k8s.io/karpenter
module_dir="$(go list -m -f '{{.Dir}}' sigs.k8s.io/karpenter)"
[[ -d "$module_dir/test/suites" ]] || { log "no test/suites in $module_dir"; exit 1; }

cache_root="${KPS_CACHE_DIR:-${HOME}/.cache/karpenter-provider-scaleway}"
key="$({ printf '%s\n' "$version"; go version; sha256sum < "$here/core-suites.sh"; } | sha256sum | cut -c1-12)"
final="$cache_root/core-suites-$version-$key"
suites=(regression disruption performance)
complete() { for s in "${suites[@]}"; do [[ -x "$1/$s.test" ]] || return 1; done; [[ -f "$1/module-dir" ]]; }
if complete "$final"; then
	echo "$final"
	exit 0
fi

mkdir -p "$cache_root"
exec 9>"$cache_root/.core-suites-$key.lock"
flock 9
if complete "$final"; then
	echo "$final"
	exit 0
fi
tmp="$(mktemp -d "$cache_root/.core-suites-$key.XXXXXX")"
chmod 755 "$tmp"
trap 'rm -rf "$tmp"' EXIT
log "compiling core $version's e2e suites into $final (a cold build takes a few minutes)"
start=$SECONDS
(
	cd "$module_dir"
	# The module cache is read-only: the build writes only to Go's build cache
	# and to -o. GOFLAGS=-mod=mod would try to write go.sum; readonly refuses
	# any change to the module's requirements instead.
	GOFLAGS=-mod=readonly go test -c -o "$tmp/" "${suites[@]/#/./test/suites/}"
)
printf '%s\n' "$module_dir" >"$tmp/module-dir"
complete "$tmp" || { log "go test -c produced no binary for every suite"; exit 1; }
log "compiled in $((SECONDS - start))s"
if ! mv -T "$tmp" "$final" 2>/dev/null; then
	complete "$final" || { log "cannot move the build into $final"; exit 1; }
fi
echo "$final"
