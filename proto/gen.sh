#!/usr/bin/env bash
# Generates the Go code of the provider contract into bridge/gen/ (or into the
# module root given as $1, which check.sh uses to regenerate into a temp dir).
#
# The generator versions are pinned so that the committed code only changes
# when the proto does; protoc itself is Debian's package, whose version is
# written into the header of every generated file.
set -euo pipefail
# Go toolchain: Karpenter core v1.15 (bridge/go.mod) needs go >= 1.26.9; the go
# command fetches this one as a module (once per machine). Set GOTOOLCHAIN to
# override (e.g. GOTOOLCHAIN=local with a new enough go installed).
export GOTOOLCHAIN="${GOTOOLCHAIN:-go1.27.3}"

PROTOC_GEN_GO_VERSION=v1.36.12      # must match google.golang.org/protobuf in bridge/go.mod
PROTOC_GEN_GO_GRPC_VERSION=v1.6.2   # needs google.golang.org/grpc >= 1.64 at run time

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
out=${1:-$root/bridge}
bin=$root/.cache/bin

if ! command -v protoc >/dev/null 2>&1; then
  echo "protoc not found; installing Debian's protobuf-compiler" >&2
  apt-get install -y protobuf-compiler >&2
fi

mkdir -p "$bin"
# `go install` writes into GOBIN; the version file keeps us from reinstalling
# on every run while still picking up a bumped pin.
install_tool() {
  local name=$1 pkg=$2 version=$3
  if [[ ! -x $bin/$name || "$(cat "$bin/$name.version" 2>/dev/null)" != "$version" ]]; then
    GOBIN=$bin go install "$pkg@$version"
    echo "$version" >"$bin/$name.version"
  fi
}
install_tool protoc-gen-go google.golang.org/protobuf/cmd/protoc-gen-go "$PROTOC_GEN_GO_VERSION"
install_tool protoc-gen-go-grpc google.golang.org/grpc/cmd/protoc-gen-go-grpc "$PROTOC_GEN_GO_GRPC_VERSION"

module=github.com/karpenter-provider-scaleway/bridge
mkdir -p "$out"
rm -rf "$out/gen/cloudprovider/v1"
mkdir -p "$out/gen/cloudprovider/v1"
cd "$root/proto"
PATH=$bin:$PATH protoc \
  -I . \
  --go_out="$out" --go_opt=module=$module \
  --go-grpc_out="$out" --go-grpc_opt=module=$module \
  karpenter/cloudprovider/v1/cloudprovider.proto
