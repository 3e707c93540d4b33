#!/usr/bin/env bash
# Fails (with a diff) when the committed generated Go code differs from what
# gen.sh produces from the current proto.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

"$root/proto/gen.sh" "$tmp"
if ! diff -ru "$root/bridge/gen/cloudprovider/v1" "$tmp/gen/cloudprovider/v1"; then
  echo "generated code is stale: run proto/gen.sh and commit bridge/gen/" >&2
  exit 1
fi
echo "generated code is up to date"
