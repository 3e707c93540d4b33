#!/usr/bin/env bash
# Builds the four images from their Dockerfiles on a machine that cannot pull public
# images (docs/development.md "Images"), then checks each one; prints the image names,
# one per line.
#
#   hack/images.sh [TAG] [REGISTRY]     default: the workspace version, kps.local
#
#   KPS_IMAGE_ARCHES   space-separated Docker architectures (default: the host's; amd64
#                      and arm64 are supported: arm64 cross-compiles, see below)
#   KPS_IMAGES_CHECK   0 skips hack/images-check.py (default 1)
#   KPS_IMAGES_BINARIES  release (default): the binaries as the Dockerfiles build them
#                      (below); test: the binaries the tests ran (target/debug, linked
#                      with glibc, and the static bridge of bridge/build.sh), on a base
#                      that adds Debian's glibc they link (`ldd`), host architecture
#                      only, tagged TAG-test. `./dev test` (CI) builds these: the same
#                      Dockerfiles, stages, checks and runs without a second compile of
#                      the workspace (a release build takes ~28 CPU-minutes here);
#                      `just images` and `just e2e-kind`, which a release requires,
#                      build the release ones.
#
# The Dockerfiles are the ones a user builds with public bases; three build arguments
# switch them to what this machine has (see controller/Dockerfile):
#   BINARY_FROM=prebuilt  the binaries are built here, as the Dockerfiles' build stages
#                         build them (Rust: release, musl, static; Go: CGO_ENABLED=0,
#                         -s -w), into .work/images/<arch>/. Without -trimpath (which
#                         the Dockerfile's stage uses), the bridge's build shares the
#                         packages the tests compiled: only the link runs again.
#   BASE_IMAGE            kps.local/static:nonroot, the contents of distroless/static
#                         (CA certificates from Debian's ca-certificates, /etc/passwd and
#                         /etc/group with root and nonroot 65532, /tmp, /home/nonroot)
#                         as a FROM scratch image
# Each image is then checked by hack/images-check.py: it runs (--version), as user
# 65532, on a read-only root filesystem, with no shell.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
version=$(sed -n 's/^version = "\(.*\)"/\1/p' Cargo.toml | head -n 1)
tag=${1:-$version}
registry=${2:-kps.local}
host_arch=$(dpkg --print-architecture 2>/dev/null || uname -m)
case "$host_arch" in x86_64) host_arch=amd64 ;; aarch64) host_arch=arm64 ;; esac
arches=${KPS_IMAGE_ARCHES:-$host_arch}
binaries=${KPS_IMAGES_BINARIES:-release}
case "$binaries" in
  release) ;;
  test) arches=$host_arch; tag="$tag-test" ;;
  *) echo "images: KPS_IMAGES_BINARIES is release or test, not $binaries" >&2; exit 2 ;;
esac
export GOTOOLCHAIN="${GOTOOLCHAIN:-go1.27.3}"
export DOCKER_BUILDKIT=1
docker=/usr/bin/docker

hack/docker.sh up

SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO=sudo
apt_install() {
  echo "images: installing $* (apt)" >&2
  $SUDO apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "$@" >/dev/null
}

rust_target() {
  case "$1" in amd64) echo x86_64-unknown-linux-musl ;; arm64) echo aarch64-unknown-linux-musl ;;
    *) echo "images: unsupported architecture $1" >&2; exit 2 ;; esac
}

# The C parts of the dependency graph (ring) need a C compiler for the target: musl-gcc
# (Debian's musl-tools) on amd64; for arm64, Debian's aarch64 GCC, which links the musl
# target with Rust's self-contained musl C library and start files.
rust_env() {
  local arch=$1 t=$2 up
  up=$(echo "$t" | tr 'a-z-' 'A-Z_')
  if [ "$arch" = amd64 ]; then
    command -v musl-gcc >/dev/null 2>&1 || apt_install musl-tools
    echo "CC_${t//-/_}=musl-gcc"
  else
    command -v aarch64-linux-gnu-gcc >/dev/null 2>&1 || apt_install gcc-aarch64-linux-gnu
    echo "CC_${t//-/_}=aarch64-linux-gnu-gcc"
    echo "CARGO_TARGET_${up}_LINKER=aarch64-linux-gnu-gcc"
  fi
}

for arch in $arches; do
  if [ "$binaries" = test ]; then
    out=.work/images/$arch
    rm -rf "$out" && mkdir -p "$out/talos-sim/state"
    for b in target/debug/karpenter-scaleway target/debug/emsim target/debug/talos-sim .cache/bin/karpenter-bridge; do
      [ -x "$b" ] || { echo "images: $b missing: the test binaries are built by the tests (just e2e)" >&2; exit 1; }
    done
    cp target/debug/karpenter-scaleway target/debug/emsim "$out/"
    cp target/debug/talos-sim "$out/talos-sim/"
    cp .cache/bin/karpenter-bridge "$out/"
    continue
  fi
  t=$(rust_target "$arch")
  rustup target list --installed | grep -qx "$t" || rustup target add "$t" >&2
  out=.work/images/$arch
  rm -rf "$out" && mkdir -p "$out/talos-sim/state"
  echo "images: building the binaries for linux/$arch" >&2
  env $(rust_env "$arch" "$t") cargo build --release --locked --target "$t" \
    -p karpenter-scaleway -p emsim -p talos-sim --bins >&2
  cp "target/$t/release/karpenter-scaleway" "target/$t/release/emsim" "$out/"
  cp "target/$t/release/talos-sim" "$out/talos-sim/"
  # The release profile keeps line tables (backtraces on the host); the images drop
  # them, as the Dockerfiles' build stage does (CARGO_PROFILE_RELEASE_STRIP=debuginfo).
  strip_bin=strip; [ "$arch" = arm64 ] && strip_bin=aarch64-linux-gnu-strip
  "$strip_bin" --strip-debug "$out/karpenter-scaleway" "$out/emsim" "$out/talos-sim/talos-sim"
  (cd bridge && CGO_ENABLED=0 GOOS=linux GOARCH=$arch GOFLAGS="-mod=readonly -buildvcs=false" \
    go build -ldflags "-s -w" -o "$root/$out/karpenter-bridge" ./cmd/karpenter-bridge) >&2
done

# The runtime base: what distroless/static ships, from this machine's Debian packages.
base=.work/images/base
rm -rf "$base" && mkdir -p "$base/etc/ssl/certs" "$base/tmp" "$base/home/nonroot"
[ -f /etc/ssl/certs/ca-certificates.crt ] || apt_install ca-certificates
cp /etc/ssl/certs/ca-certificates.crt "$base/etc/ssl/certs/"
printf 'root:x:0:0:root:/root:/sbin/nologin\nnobody:x:65534:65534:nobody:/nonexistent:/sbin/nologin\nnonroot:x:65532:65532:nonroot:/home/nonroot:/sbin/nologin\n' >"$base/etc/passwd"
printf 'root:x:0:\nnobody:x:65534:\nnonroot:x:65532:\n' >"$base/etc/group"
cat >"$base/Dockerfile" <<'EOF'
FROM scratch
COPY etc/ /etc/
COPY --chmod=1777 tmp/ /tmp/
COPY --chown=65532:65532 home/ /home/
EOF
for arch in $arches; do
  $docker build -q --platform "linux/$arch" -t "kps.local/static:nonroot-$arch" "$base" >/dev/null
done
rust_base=""
if [ "$binaries" = test ]; then
  # The static base plus the glibc the test binaries link, from this machine's
  # Debian (libc6, libgcc-s1), at the paths the dynamic loader looks in.
  glibc=.work/images/glibc
  rm -rf "$glibc" && cp -a "$base" "$glibc"
  for lib in $(ldd target/debug/karpenter-scaleway target/debug/emsim target/debug/talos-sim \
      | awk '/=>/ {print $3} /^\t\/[^ ]*ld-linux/ {print $1}' | sort -u); do
    mkdir -p "$glibc$(dirname "$lib")"
    cp -L "$lib" "$glibc$lib"
  done
  printf 'COPY lib/ /lib/\nCOPY lib64/ /lib64/\n' >>"$glibc/Dockerfile"
  $docker build -q -t "kps.local/glibc:nonroot-$host_arch" "$glibc" >/dev/null
  rust_base="kps.local/glibc:nonroot-$host_arch"
fi

# Each image, from its Dockerfile.
images=()
for spec in karpenter-scaleway:controller karpenter-bridge:bridge emsim:emsim talos-sim:talos-sim; do
  name=${spec%%:*} dir=${spec#*:}
  for arch in $arches; do
    image="$registry/$name:$tag"
    [ "$arch" != "$host_arch" ] && image="$image-$arch"
    echo "images: $image (linux/$arch) from $dir/Dockerfile" >&2
    # The static base where the Dockerfile has distroless/static (controller, bridge,
    # talos-sim); emsim keeps scratch. Test binaries: the glibc base for the Rust ones.
    base_args=()
    case "$name" in
      karpenter-scaleway|karpenter-bridge|talos-sim) base_args=(--build-arg "BASE_IMAGE=kps.local/static:nonroot-$arch") ;;
    esac
    if [ -n "$rust_base" ] && [ "$name" != karpenter-bridge ]; then
      base_args=(--build-arg "BASE_IMAGE=$rust_base")
    fi
    $docker build -q --platform "linux/$arch" -f "$dir/Dockerfile" \
      --build-arg BINARY_FROM=prebuilt "${base_args[@]}" \
      -t "$image" . >/dev/null
    images+=("$image")
  done
done

if [ "${KPS_IMAGES_CHECK:-1}" = 1 ]; then
  python3 hack/images-check.py --version "$version" "${images[@]}" >&2
fi
printf '%s\n' "${images[@]}"
