#!/usr/bin/env bash
# Installs kind (sigs.k8s.io/kind at KIND_VERSION, lib.sh) from the Go module
# proxy into a per-machine cache and prints the binary's path as the last line.
# An unchanged version, script and Go toolchain return at once.
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

key="$({ echo "$KIND_VERSION"; go version; sha256sum <"$kind_dir/kind.sh"; } | sha256sum | cut -c1-12)"
final="$cache_root/kind-$KIND_VERSION-$key"
if [[ -x "$final/kind" ]]; then
	echo "$final/kind"
	exit 0
fi
mkdir -p "$cache_root"
exec 9>"$cache_root/.kind-$key.lock"
flock 9
if [[ -x "$final/kind" ]]; then
	echo "$final/kind"
	exit 0
fi
tmp="$(mktemp -d "$cache_root/.kind-$key.XXXXXX")"
chmod 755 "$tmp"
trap 'rm -rf "$tmp"' EXIT
log "installing kind $KIND_VERSION into $final"
(cd / && CGO_ENABLED=0 GOBIN="$tmp" GOFLAGS=-buildvcs=false go install "sigs.k8s.io/kind@$KIND_VERSION")
[[ -x "$tmp/kind" ]] || die "go install produced no kind binary"
if ! mv -T "$tmp" "$final" 2>/dev/null; then
	[[ -x "$final/kind" ]] || die "cannot move kind into $final"
fi
echo "$final/kind"
