#!/usr/bin/env bash
# Builds talos-validate-<minor>: a Talos machine config validator (main.go
# beside this script) linked with the machinery of an older Talos minor, the
# one pinned by the module file talos-<minor>.mod (and .sum) used with
# `go build -modfile` (`talos-config validate` covers the newest minor), and
# prints the binary's path as the last line.
#
#   validators/build.sh v1.11
#
# The build is skipped when the binary was made from the same inputs (the Go
# toolchain, the minor's module files, the sources and this script): the
# conformance test calls this before every use.
#
#   KPS_TALOS_VALIDATORS_DIR   output directory (default: <repo>/.cache/bin)
set -euo pipefail
# Go toolchain: Karpenter core v1.15 (bridge/go.mod) needs go >= 1.26.9; the go
# command fetches this one as a module (once per machine). Set GOTOOLCHAIN to
# override (e.g. GOTOOLCHAIN=local with a new enough go installed).
export GOTOOLCHAIN="${GOTOOLCHAIN:-go1.27.3}"

minor=${1:-}
if [[ ! "$minor" =~ ^v[0-9]+\.[0-9]+$ ]]; then
	echo "usage: validators/build.sh <Talos minor, e.g. v1.11>" >&2
	exit 2
fi
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
modfile=talos-$minor.mod
if [[ ! -f "$here/$modfile" ]]; then
	echo "no validator module file for Talos $minor ($here/$modfile)" >&2
	exit 1
fi
dir=${KPS_TALOS_VALIDATORS_DIR:-$here/../../../.cache/bin}
mkdir -p "$dir"
out="$(cd "$dir" && pwd)/talos-validate-$minor"
cd "$here"

key() {
	{
		go version
		sha256sum go.mod "$modfile" "talos-$minor.sum" build.sh
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
go build -modfile="$modfile" -o "$out.tmp" .
mv -f "$out.tmp" "$out"
echo "$k" >"$out.key"
echo "$out"
