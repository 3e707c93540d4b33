#!/usr/bin/env bash
# Fails (with a diff) when the committed generated Go code differs from what
# gen.sh produces from the current proto.
set -euo pipefail
# Go toolchain: Karpenter core v1.15 (bridge/go.mod) needs go >= 1.26.9; the go
# command fetches this one as a module (once per machine). Set GOTOOLCHAIN to
# override (e.g. GOTOOLCHAIN=local with a new enough go installed).
export GOTOOLCHAIN="${GOTOOLCHAIN:-go1.27.3}"

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$root/proto/gen.sh" "$tmp"
if ! diff -ru "$root/bridge/gen/cloudprovider/v1" "$tmp/gen/cloudprovider/v1"; then
  echo "generated code is stale: run proto/gen.sh and commit bridge/gen/" >&2
  exit 1
fi
echo "generated code is up to date"
