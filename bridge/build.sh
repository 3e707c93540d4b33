#!/usr/bin/env bash
# Builds karpenter-bridge and prints the binary's path as the last line.
#
#   KPS_BRIDGE_BIN   output path (default: <repo>/.cache/bin/karpenter-bridge,
#                    where the e2e harness and the Justfile look for it)
set -euo pipefail
# Go toolchain: Karpenter core v1.15 (bridge/go.mod) needs go >= 1.26.9; the go
# command fetches this one as a module (once per machine). Set GOTOOLCHAIN to
# override (e.g. GOTOOLCHAIN=local with a new enough go installed).
export GOTOOLCHAIN="${GOTOOLCHAIN:-go1.27.3}"

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
out=${KPS_BRIDGE_BIN:-$here/../.cache/bin/karpenter-bridge}
mkdir -p "$(dirname "$out")"
cd "$here"
# -trimpath only for release builds: without it the build shares Go's cache
# with `go test`/`go vet` of the same packages, which saves a cold CI run the
# second compile of Karpenter core and its dependencies.
flags=()
[ "${KPS_RELEASE:-}" = 1 ] && flags+=(-trimpath)
# Static (no cgo): the same binary runs on the host and in the image
# (hack/images.sh copies it into a base without a libc). The Justfile exports
# CGO_ENABLED=0 to every go command, so `go test`/`go vet` share this cache.
CGO_ENABLED=0 go build "${flags[@]}" -o "$out" ./cmd/karpenter-bridge
echo "$(cd "$(dirname "$out")" && pwd)/$(basename "$out")"
