#!/usr/bin/env bash
# Builds the reference side of `kps-perf` into a per-machine cache: Karpenter
# core's own KWOK provider (`sigs.k8s.io/karpenter/kwok` of the module at the
# bridge's version) and the KWOK simulator at the release core's
# hack/install-kwok.sh installs (`KWOK_RELEASE`), each built inside its own
# module directory with its own go.mod and go.sum, nothing copied or patched.
# Prints the directory (karpenter-kwok, kwok, karpenter-dir, kwok-dir) as the
# last line. An unchanged version and Go toolchain return at once.
#
#   KPS_CACHE_DIR   cache root (default: $HOME/.cache/karpenter-provider-scaleway)
set -euo pipefail
export GOTOOLCHAIN="${GOTOOLCHAIN:-go1.27.3}"

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
log() { printf 'kwok.sh: %s\n' "$*" >&2; }

cd "$here/../bridge"
version="$(go list -m -f '{{.Version}}' sigs.k8s.io/karpenter)"
go mod download sigs.k8s.io/karpenter
karpenter_dir="$(go list -m -f '{{.Dir}}' sigs.k8s.io/karpenter)"
kwok_release="$(sed -n 's/^KWOK_RELEASE=\(v[0-9.]*\)$/\1/p' "$karpenter_dir/hack/install-kwok.sh")"
[[ -n "$kwok_release" ]] || { log "no KWOK_RELEASE in $karpenter_dir/hack/install-kwok.sh"; exit 1; }
kwok_dir="$(cd "$(mktemp -d)" && go mod download -json "sigs.k8s.io/kwok@$kwok_release" | sed -n 's/^\t"Dir": "\(.*\)",$/\1/p')"
[[ -d "$kwok_dir" ]] || { log "cannot download sigs.k8s.io/kwok@$kwok_release"; exit 1; }

cache_root="${KPS_CACHE_DIR:-${HOME}/.cache/karpenter-provider-scaleway}"
key="$({ printf '%s %s\n' "$version" "$kwok_release"; go version; sha256sum < "$here/kwok.sh"; } | sha256sum | cut -c1-12)"
final="$cache_root/kwok-$version-$kwok_release-$key"
complete() { [[ -x "$1/karpenter-kwok" && -x "$1/kwok" && -f "$1/karpenter-dir" && -f "$1/kwok-dir" ]]; }
if complete "$final"; then
	echo "$final"
	exit 0
fi

mkdir -p "$cache_root"
exec 9>"$cache_root/.kwok-$key.lock"
flock 9
if complete "$final"; then
	echo "$final"
	exit 0
fi
tmp="$(mktemp -d "$cache_root/.kwok-$key.XXXXXX")"
chmod 755 "$tmp"
trap 'rm -rf "$tmp"' EXIT
log "building core $version's KWOK provider and KWOK $kwok_release into $final (a cold build takes several minutes)"
start=$SECONDS
# The module cache is read-only: -mod=readonly refuses any change to the
# modules' requirements instead of writing go.sum.
(cd "$karpenter_dir" && GOFLAGS=-mod=readonly go build -o "$tmp/karpenter-kwok" ./kwok)
(cd "$kwok_dir" && GOFLAGS=-mod=readonly go build -o "$tmp/kwok" ./cmd/kwok)
printf '%s\n' "$karpenter_dir" >"$tmp/karpenter-dir"
printf '%s\n' "$kwok_dir" >"$tmp/kwok-dir"
complete "$tmp" || { log "the build produced no binary"; exit 1; }
log "built in $((SECONDS - start))s"
if ! mv -T "$tmp" "$final" 2>/dev/null; then
	complete "$final" || { log "cannot move the build into $final"; exit 1; }
fi
echo "$final"
