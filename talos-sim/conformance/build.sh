#!/usr/bin/env bash
# Builds talos-config (Talos' machinery as a command: `gen` writes a worker
# config as `talosctl gen config` does, `validate` checks one like a node in
# maintenance mode) and prints the binary's path as the last line.
#
# The build is skipped when the binary was made from the same inputs (the Go
# toolchain, go.mod, go.sum, the command's sources and this script): the e2e
# harness and talos-sim's tests call this before every use.
#
#   KPS_TALOS_CONFIG_BIN   output path (default: <repo>/.cache/bin/talos-config)
set -euo pipefail
# Go toolchain: Karpenter core v1.15 (bridge/go.mod) needs go >= 1.26.9; the go
# command fetches this one as a module (once per machine). Set GOTOOLCHAIN to
# override (e.g. GOTOOLCHAIN=local with a new enough go installed).
export GOTOOLCHAIN="${GOTOOLCHAIN:-go1.27.3}"

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${KPS_TALOS_CONFIG_BIN:-$here/../../.cache/bin/talos-config}
mkdir -p "$(dirname "$out")"
out="$(cd "$(dirname "$out")" && pwd)/$(basename "$out")"
cd "$here"

key() {
	{
		go version
		sha256sum go.mod go.sum build.sh
		find cmd/talos-config talosconfig -type f -name '*.go' ! -name '*_test.go' -print0 |
			LC_ALL=C sort -z | xargs -0 sha256sum
	} | sha256sum | cut -c1-16
}

k=$(key)
if [[ -x "$out" && "$(cat "$out.key" 2>/dev/null)" == "$k" ]]; then
	echo "$out"
	exit 0
fi

# Concurrent callers (parallel e2e stacks) wait for one build instead of
# writing the same file at once.
exec 9>"$out.lock"
flock 9
if [[ -x "$out" && "$(cat "$out.key" 2>/dev/null)" == "$k" ]]; then
	echo "$out"
	exit 0
fi
go build -o "$out.tmp" ./cmd/talos-config
mv -f "$out.tmp" "$out"
echo "$k" >"$out.key"
echo "$out"
