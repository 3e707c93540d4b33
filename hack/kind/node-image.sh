#!/usr/bin/env bash
# Builds the kind node image kps.local/kind-node:<Kubernetes version>-<key> and
# prints its name as the last line. No registry is needed: everything is built
# here, and an image with the key already in Docker is reused at once.
#
#   base        hack/kind/rootfs.sh: debootstrap'd Debian with systemd, containerd,
#               runc, iptables, nftables, the CNI plugins
#   files       kind's own base files (images/base/files of sigs.k8s.io/kind at
#               KIND_VERSION, read from the module cache, not copied into this repo)
#   binaries    kubelet, kubeadm, kubectl in /usr/bin, crictl in /usr/local/bin
#               (hack/kind/build.sh, e2e/kube/build.sh)
#   images      preloaded in the node's containerd (namespace k8s.io) under the names
#               `kubeadm config images list` prints: the control plane, etcd, pause,
#               kube-proxy, CoreDNS; each FROM scratch over its static binary,
#               kube-proxy with nft and its libraries too (see below)
#
# The key covers this script, kind's version, the base image and the binaries'
# cache directories (whose names carry their own source keys).
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

version="$(k8s_version)"
cp_bin="$("$repo_root/e2e/kube/build.sh" | tail -n 1)"
node_bin="$("$kind_dir/build.sh" | tail -n 1)"
rootfs="$("$kind_dir/rootfs.sh" | tail -n 1)"
key="$({
	printf '%s\n' "$version" "$cp_bin" "$node_bin" "$rootfs" "$KIND_VERSION"
	sha256sum <"$kind_dir/node-image.sh"
} | sha256sum | cut -c1-12)"
image="kps.local/kind-node:$version-$key"
exists() { "$DOCKER" image inspect "$image" >/dev/null 2>&1; }
if exists; then
	echo "$image"
	exit 0
fi
exec 9>"$cache_root/.kind-node-$key.lock"
flock 9
if exists; then
	echo "$image"
	exit 0
fi

start=$SECONDS
ctx="$(mktemp -d "$cache_root/.kind-node-$key.XXXXXX")"
built=()
cleanup() {
	# The component images were tagged in Docker only to be saved; untag them.
	((${#built[@]} == 0)) || "$DOCKER" rmi "${built[@]}" >/dev/null 2>&1 || true
	rm -rf "$ctx"
}
trap cleanup EXIT

# 1. The images kubeadm asks for, each checked against the binary it is built from.
component_version() {
	case "$1" in
	kube-apiserver | kube-controller-manager | kube-scheduler | kube-proxy) echo "$version" ;;
	etcd) "$node_bin/etcd" --version | sed -n 's/^etcd Version: \(.*\)$/\1/p' ;;
	coredns) "$node_bin/coredns" -version | sed -n 's/^CoreDNS-\(.*\)$/v\1/p' ;;
	pause) "$node_bin/pause" -v | awk '{ print $2 }' ;;
	esac
}
component_bin() {
	case "$1" in
	kube-apiserver | kube-controller-manager | kube-scheduler) echo "$cp_bin/$1" ;;
	*) echo "$node_bin/$1" ;;
	esac
}
mapfile -t wanted < <("$node_bin/kubeadm" config images list --kubernetes-version "$version")
((${#wanted[@]} > 0)) || die "kubeadm config images list printed nothing"
pause_image=""
for ref in "${wanted[@]}"; do
	name="${ref%:*}" tag="${ref##*:}" component="${name##*/}"
	have="$(component_version "$component")"
	[[ -n "$have" ]] || die "kubeadm wants $ref: no such component here"
	# etcd's tags carry a build suffix (3.6.6-0).
	[[ "$tag" == "$have" || "$tag" == "$have"-* ]] || die "kubeadm wants $ref, the build has $component $have"
	dir="$ctx/images/$component"
	mkdir -p "$dir"
	cp "$(component_bin "$component")" "$dir/$component"
	case "$component" in
	coredns | pause)
		# Where the upstream images keep them (kubeadm's Deployment runs CoreDNS
		# by the image's entrypoint).
		from="FROM scratch" copy="COPY $component /$component" entry="[\"/$component\"]" ;;
	kube-proxy)
		# kube-proxy runs in nftables mode (up.sh): it needs the nft command and
		# nothing else, where the iptables mode would need iptables and a guess of
		# the node's backend (legacy or nft, which kind's entrypoint picks at boot).
		# nft and the libraries it links come from the node's own Debian.
		from="FROM $rootfs AS nft
RUN mkdir /out && for f in /usr/sbin/nft \$(ldd /usr/sbin/nft | awk '\$2 == \"=>\" { print \$3 } \$1 ~ /^\\// { print \$1 }'); do cp --parents -L \"\$f\" /out/; done
FROM scratch
COPY --from=nft /out/ /"
		copy="COPY $component /usr/local/bin/$component" entry="[\"/usr/local/bin/$component\"]" ;;
	*)
		from="FROM scratch" copy="COPY $component /usr/local/bin/$component" entry="[\"/usr/local/bin/$component\"]" ;;
	esac
	# kubeadm's static Pods call the binaries by name.
	"$DOCKER" build -q -t "$ref" -f - "$dir" >/dev/null <<-EOF
		$from
		$copy
		ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
		ENTRYPOINT $entry
	EOF
	built+=("$ref")
	[[ "$component" == pause ]] && pause_image="$ref"
done
[[ -n "$pause_image" ]] || die "kubeadm asks for no pause image"
"$DOCKER" save -o "$ctx/images.tar" "${built[@]}"
log "component images: ${built[*]}"

# 2. The node's files: kind's base files, then ours.
kind_files="$(module_dir "sigs.k8s.io/kind@$KIND_VERSION")/images/base/files"
[[ -d "$kind_files" ]] || die "no images/base/files in sigs.k8s.io/kind@$KIND_VERSION"
root="$ctx/root"
mkdir -p "$root/usr/bin" "$root/usr/local/bin" "$root/kind/manifests"
cp -r "$kind_files/." "$root/"
chmod -R u+w,go-w,a+rX "$root"
find "$root" -type f -exec chmod 0644 {} +
chmod 0755 "$root"/usr/local/bin/* "$root"/kind/bin/*
install -m 0755 "$node_bin/kubelet" "$node_bin/kubeadm" "$cp_bin/kubectl" "$root/usr/bin/"
install -m 0755 "$node_bin/crictl" "$root/usr/local/bin/"
printf '%s' "$version" >"$root/kind/version"
# What kind installs when a node image ships no storage manifest, minus its
# warning: a StorageClass of the in-tree host-path provisioner, no images.
cat >"$root/kind/manifests/default-storage.yaml" <<'EOF'
apiVersion: storage.k8s.io/v1
kind: StorageClass
metadata:
  namespace: kube-system
  name: standard
  annotations:
    storageclass.kubernetes.io/is-default-class: "true"
provisioner: kubernetes.io/host-path
EOF

cat >"$ctx/setup.sh" <<EOF
set -eu
# kind's containerd unit runs /usr/local/bin/containerd; Debian installs /usr/bin.
ln -sf /usr/bin/containerd /usr/local/bin/containerd
# Debian's CNI plugins are in /usr/lib/cni; containerd looks in /opt/cni/bin.
mkdir -p /opt/cni && ln -sfn /usr/lib/cni /opt/cni/bin
# kind's config names pause 3.10; use the one kubeadm asks for (preloaded).
sed -i 's#^\( *sandbox_image = \).*#\1"$pause_image"#' /etc/containerd/config.toml
grep -q 'sandbox_image = "$pause_image"' /etc/containerd/config.toml
# As kind's base image: the runtime spec with kind's createContainer hook.
ctr oci spec \
	| jq '.hooks.createContainer[.hooks.createContainer | length] |= . + {"path": "/kind/bin/mount-product-files.sh"}' \
	| jq 'del(.process.rlimits)' >/etc/containerd/cri-base.json
systemctl enable kubelet.service containerd.service undo-mount-hacks.service
systemctl mask systemd-binfmt.service
mkdir -p /etc/kubernetes/manifests /etc/cni/net.d
EOF

# The images go in with containerd running inside the build step, as kind's
# own node image build does (unpacked by the CRI on first use).
cat >"$ctx/preload.sh" <<'EOF'
set -eu
containerd >/tmp/containerd.log 2>&1 &
pid=$!
i=0
until ctr version >/dev/null 2>&1; do
	i=$((i + 1))
	[ "$i" -lt 100 ] || { cat /tmp/containerd.log; exit 1; }
	sleep 0.1
done
ctr -n k8s.io images import --all-platforms --no-unpack --digests /preload/images.tar >/dev/null
ctr -n k8s.io images ls -q | grep -v 'sha256:'
kill "$pid"
wait "$pid" || true
rm -rf /tmp/* /run/containerd
EOF

"$DOCKER" build -t "$image" -f - "$ctx" <<EOF
FROM $rootfs
COPY root/ /
RUN --mount=type=bind,source=setup.sh,target=/preload/setup.sh sh /preload/setup.sh
RUN --mount=type=bind,source=preload.sh,target=/preload/preload.sh \
    --mount=type=bind,source=images.tar,target=/preload/images.tar sh /preload/preload.sh
ENV container=docker
STOPSIGNAL SIGRTMIN+3
ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]
EOF
log "$image built in $((SECONDS - start))s"
# Node images of other keys weigh about 1 GB each: those (and base images of
# other keys) built more than KPS_KIND_KEEP_DAYS (3) days ago go, unless a
# cluster still runs on them (docker rmi refuses). Younger ones may be another
# checkout's on this machine, which would otherwise rebuild its own in turn.
cutoff=$(($(date +%s) - ${KPS_KIND_KEEP_DAYS:-3} * 86400))
for old in $("$DOCKER" images --format '{{.Repository}}:{{.Tag}}' | grep -E '^kps\.local/kind-(node|rootfs):' || true); do
	[[ "$old" != "$image" && "$old" != "$rootfs" ]] || continue
	created="$(date -d "$("$DOCKER" image inspect -f '{{.Created}}' "$old")" +%s)" || continue
	((created < cutoff)) || continue
	if "$DOCKER" rmi "$old" >/dev/null 2>&1; then log "removed $old"; else log "kept $old (in use)"; fi
done
echo "$image"
