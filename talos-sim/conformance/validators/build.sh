#!/usr/bin/env bash
# Builds talos-validate-<minor>: a Talos machine config validator linked with
# the machinery of an older Talos minor (the module talos-<minor>/ beside this
# script; `talos-config validate` covers the newest minor), and prints the
# binary's path as the last line.
#
#   validators/build.sh v1.11
#
# The build is skipped when the binary was made from the same inputs (the Go
# toolchain, the module's go.mod, go.sum and sources, and this script): the
# conformance test calls this before every use.
#
#   KPS_TALOS_VALIDATORS_DIR   output directory (default: <repo>/.cache/bin)
set -euo pipefail

minor=${1:-}
if [[ ! "$minor" =~ ^v[0-9]+\.[0-9]+$ ]]; then
	echo "usage: validators/build.sh <Talos minor, e.g. v1.11>" >&2
	exit 2
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$here/talos-$minor
if [[ ! -f "$src/go.mod" ]]; then
	echo "no validator module for Talos $minor ($src/go.mod)" >&2
	exit 1
fi
dir=${KPS_TALOS_VALIDATORS_DIR:-$here/../../../.cache/bin}
mkdir -p "$dir"
out="$(cd "$dir" && pwd)/talos-validate-$minor"
cd "$src"

key() {
	{
		go version
		sha256sum go.mod go.sum ../build.sh
		find . -type f -name '*.go' ! -name '*_test.go' -print0 |
			LC_ALL=C sort -z | xargs -0 sha256sum
	} | sha256sum | cut -c1-16
}

k=$(key)
if [[ -x "$out" && "$(cat "$out.key" 2>/dev/null)" == "$k" ]]; then
	echo "$out"
	exit 0
fi

# Concurrent callers wait for one build instead of writing the same file at once.
exec 9>"$out.lock"
flock 9
if [[ -x "$out" && "$(cat "$out.key" 2>/dev/null)" == "$k" ]]; then
	echo "$out"
	exit 0
fi
go build -o "$out.tmp" .
mv -f "$out.tmp" "$out"
echo "$k" >"$out.key"
echo "$out"
