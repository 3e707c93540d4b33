#!/usr/bin/env bash
# Builds helm (v3, pinned below) from its Go module into a per-machine cache and
# prints the binary's path as the last line of stdout. Needs only Go and the Go
# module proxy (no Docker, no download of release tarballs). An unchanged pin
# and Go toolchain return at once.
#
#   KPS_CACHE_DIR   cache root (default: $HOME/.cache/karpenter-provider-scaleway)
#   KPS_HELM        use this helm binary instead of building one
set -euo pipefail
# Go toolchain: Karpenter core v1.15 (bridge/go.mod) needs go >= 1.26.9; the go
# command fetches this one as a module (once per machine). Set GOTOOLCHAIN to
# override (e.g. GOTOOLCHAIN=local with a new enough go installed).
export GOTOOLCHAIN="${GOTOOLCHAIN:-go1.27.3}"

# The helm release the chart checks run with. Bump deliberately: `helm lint`
# gains rules between releases.
helm_version=v3.21.4

log() { printf 'helm.sh: %s\n' "$*" >&2; }

if [[ -n "${KPS_HELM:-}" ]]; then
	[[ -x "$KPS_HELM" ]] || { log "KPS_HELM=$KPS_HELM is not an executable"; exit 1; }
	echo "$KPS_HELM"
	exit 0
fi

cache_root="${KPS_CACHE_DIR:-${HOME}/.cache/karpenter-provider-scaleway}"
key="$({ printf '%s\n' "$helm_version"; go version; sha256sum < "${BASH_SOURCE[0]}"; } | sha256sum | cut -c1-12)"
final="$cache_root/helm-$helm_version-$key"
if [[ -x "$final/bin/helm" ]]; then
	echo "$final/bin/helm"
	exit 0
fi

mkdir -p "$cache_root"
# Serialise concurrent builds of the same key (e.g. two checks started together).
exec 9>"$cache_root/.helm-$key.lock"
flock 9
if [[ -x "$final/bin/helm" ]]; then
	echo "$final/bin/helm"
	exit 0
fi

tmp="$(mktemp -d "$cache_root/.helm-$key.XXXXXX")"
chmod 755 "$tmp"
trap 'rm -rf "$tmp"' EXIT

log "building helm $helm_version into $final (a cold build takes a few minutes)"
start=$SECONDS
# helm's Makefile derives the default Kubernetes version of `helm template` and
# `helm lint` (.Capabilities.KubeVersion) from the client-go it links: v0.X.Y
# means Kubernetes 1.X. Without these ldflags it falls back to v1.20.
gomod="$(cd "$tmp" && go mod download -json "helm.sh/helm/v3@$helm_version" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",\{0,1\}$/\1/p')"
[[ -f "$gomod" ]] || { log "cannot find helm's go.mod in the module cache"; exit 1; }
client_go="$(awk '$1 == "k8s.io/client-go" { print $2; exit }' "$gomod")"
[[ "$client_go" =~ ^v0\.([0-9]+)\. ]] || { log "cannot read k8s.io/client-go from $gomod (got '$client_go')"; exit 1; }
kube_minor="${BASH_REMATCH[1]}"
ldflags="-s -w -X helm.sh/helm/v3/internal/version.version=$helm_version"
for pkg in helm.sh/helm/v3/pkg/chartutil helm.sh/helm/v3/pkg/lint/rules; do
	ldflags+=" -X $pkg.k8sVersionMajor=1 -X $pkg.k8sVersionMinor=$kube_minor"
done
# Outside any module, `go install pkg@version` resolves helm's own go.mod, so the
# result is the released dependency set. The version ldflag makes `helm version`
# report the release instead of a dev build.
(
	cd "$tmp"
	CGO_ENABLED=0 GOBIN="$tmp/bin" GOFLAGS="-buildvcs=false" \
		go install -trimpath -ldflags "$ldflags" "helm.sh/helm/v3/cmd/helm@$helm_version"
)
[[ -x "$tmp/bin/helm" ]] || { log "go install finished but produced no helm binary"; exit 1; }
log "built in $((SECONDS - start))s"

if ! mv -T "$tmp" "$final" 2>/dev/null; then
	[[ -x "$final/bin/helm" ]] || { log "cannot move the build into $final"; exit 1; }
fi
echo "$final/bin/helm"
