#!/usr/bin/env bash
# Builds the node side of Kubernetes for the kind node image into a per-machine
# cache and prints the bin directory as the last line of stdout:
#
#   kubelet, kubeadm, kube-proxy  the `tool` packages of hack/kind/kube/go.mod, at the
#                                 Kubernetes version of e2e/kube/go.mod (checked equal)
#   etcd                          etcd's own main package (etcdmain): kubeadm's static
#                                 Pod passes flags that e2e/kube's embed wrapper lacks
#   pause                         hack/kind/kube/cmd/pause
#   coredns                       github.com/coredns/coredns at the version kubeadm names
#                                 (its CoreDNSVersion constant), built in its own module
#   crictl                        sigs.k8s.io/cri-tools at CRICTL_VERSION (lib.sh)
#
# All static (CGO_ENABLED=0), as upstream ships them. The control plane
# (kube-apiserver, kube-controller-manager, kube-scheduler, kubectl) comes from
# e2e/kube/build.sh, whose cache this script does not touch. The key covers
# go.mod, go.sum, the sources, this script, the CoreDNS and crictl versions and
# the Go toolchain: an unchanged tree returns at once.
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"
cd "$kind_dir/kube"

binaries=(kubelet kubeadm kube-proxy etcd pause coredns crictl)
version="$(k8s_version)"
go mod download k8s.io/kubernetes
kubernetes_dir="$(go list -m -f '{{.Dir}}' k8s.io/kubernetes)"
coredns_version="$(sed -n 's/^\tCoreDNSVersion = "\(v[0-9.]*\)"$/\1/p' "$kubernetes_dir/cmd/kubeadm/app/constants/constants.go")"
[[ -n "$coredns_version" ]] || die "no CoreDNSVersion in kubeadm's constants ($kubernetes_dir)"

key="$({
	go version
	echo "$coredns_version $CRICTL_VERSION"
	sha256sum go.mod go.sum ../build.sh
	find cmd -type f -name '*.go' -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
} | sha256sum | cut -c1-16)"
final="$cache_root/kind-kube-$version-$key"
complete() {
	local b
	for b in "${binaries[@]}"; do [[ -x "$1/$b" ]] || return 1; done
}
if complete "$final/bin"; then
	touch "$final"
	echo "$final/bin"
	exit 0
fi

mkdir -p "$cache_root"
# A second caller waits for the first, then finds the cache filled.
exec 9>"$cache_root/.kind-kube-$key.lock"
flock 9
if complete "$final/bin"; then
	echo "$final/bin"
	exit 0
fi

[[ "$version" =~ ^v([0-9]+)\.([0-9]+)\. ]]
# Without these the binaries report v0.0.0-master: kubeadm refuses a kubelet of
# another minor, and its own version sets the images it asks for.
ldflags="-s -w"
for pkg in k8s.io/component-base/version k8s.io/client-go/pkg/version; do
	ldflags+=" -X $pkg.gitVersion=$version -X $pkg.gitMajor=${BASH_REMATCH[1]} -X $pkg.gitMinor=${BASH_REMATCH[2]}"
	ldflags+=" -X $pkg.gitTreeState=clean"
done

tmp="$(mktemp -d "$cache_root/.kind-kube-$key.XXXXXX")"
chmod 755 "$tmp"
# A build cache of its own, deleted afterwards (as e2e/kube/build.sh does):
# gigabytes of compiled Kubernetes packages nothing else reuses.
gocache="$(mktemp -d "$cache_root/.gocache-kind-$key.XXXXXX")"
trap 'rm -rf "$tmp"; chmod -R u+w "$gocache" 2>/dev/null; rm -rf "$gocache"' EXIT
export CGO_ENABLED=0 GOCACHE="$gocache"

log "building kubelet, kubeadm, kube-proxy $version, etcd, pause, CoreDNS $coredns_version, crictl $CRICTL_VERSION into $final (a cold build takes several minutes)"
start=$SECONDS
GOFLAGS="-mod=readonly -buildvcs=false" go build -trimpath -ldflags="$ldflags" -o "$tmp/bin/" \
	k8s.io/kubernetes/cmd/kubelet k8s.io/kubernetes/cmd/kubeadm k8s.io/kubernetes/cmd/kube-proxy ./cmd/pause
GOFLAGS="-mod=readonly -buildvcs=false" go build -trimpath -ldflags="-s -w" -o "$tmp/bin/etcd" go.etcd.io/etcd/server/v3
log "Kubernetes and etcd built in $((SECONDS - start))s"
# CoreDNS and crictl build in their own module directories (go.mod and go.sum
# as released, nothing copied); the module cache is read-only, and
# -mod=readonly refuses to change it.
coredns_dir="$(module_dir "github.com/coredns/coredns@$coredns_version")"
[[ -d "$coredns_dir" ]] || die "cannot download github.com/coredns/coredns@$coredns_version"
(cd "$coredns_dir" && GOFLAGS="-mod=readonly -buildvcs=false" go build -trimpath -ldflags="-s -w" -o "$tmp/bin/coredns" .)
crictl_dir="$(module_dir "sigs.k8s.io/cri-tools@$CRICTL_VERSION")"
[[ -d "$crictl_dir" ]] || die "cannot download sigs.k8s.io/cri-tools@$CRICTL_VERSION"
(cd "$crictl_dir" && GOFLAGS="-mod=readonly -buildvcs=false" go build -trimpath \
	-ldflags="-s -w -X sigs.k8s.io/cri-tools/pkg/version.Version=$CRICTL_VERSION" -o "$tmp/bin/crictl" ./cmd/crictl)
complete "$tmp/bin" || die "the build finished but not every binary was produced"
log "built in $((SECONDS - start))s"

# Builds of other keys unused for KPS_KUBE_KEEP_DAYS (14) days go.
while IFS= read -r -d '' old; do
	log "removing $old (unused for more than ${KPS_KUBE_KEEP_DAYS:-14} days)"
	rm -rf "$old"
done < <(find "$cache_root" -mindepth 1 -maxdepth 1 -type d -name 'kind-kube-*' -mtime +"${KPS_KUBE_KEEP_DAYS:-14}" -print0)
# rename(2) is atomic: readers see no directory or a complete one.
if ! mv -T "$tmp" "$final" 2>/dev/null; then
	complete "$final/bin" || die "cannot move the build into $final"
fi
echo "$final/bin"
