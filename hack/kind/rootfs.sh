#!/usr/bin/env bash
# Makes the base of the kind node image: a debootstrap'd Debian (DEBIAN_SUITE,
# lib.sh) with systemd and the packages a kind node runs (the list below),
# imported into Docker as kps.local/kind-rootfs:<suite>-<key>, and prints that
# name as the last line. The key covers this script, the suite and the mirror:
# an image with the key in Docker is reused.
#
# The packages are Debian's, in place of the ones kind's base image builds from
# source: containerd 1.6 and runc 1.1 (kind's base files keep containerd's v2
# config format, which 1.6 reads), iptables and nftables, the CNI plugins,
# conntrack, ethtool and socat (kubelet and port-forward), jq (kind's
# createContainer hook), curl (checks from inside the node).
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

packages=(
	systemd
	containerd runc containernetworking-plugins
	iptables nftables conntrack iproute2 ethtool socat
	util-linux mount kmod procps libseccomp2
	bash ca-certificates curl jq
)

key="$({ echo "$DEBIAN_SUITE $DEBIAN_MIRROR"; sha256sum <"$kind_dir/rootfs.sh"; } | sha256sum | cut -c1-12)"
image="kps.local/kind-rootfs:$DEBIAN_SUITE-$key"
if "$DOCKER" image inspect "$image" >/dev/null 2>&1; then
	echo "$image"
	exit 0
fi
[[ "$(id -u)" -eq 0 ]] || die "debootstrap needs root"
if ! command -v debootstrap >/dev/null 2>&1; then
	log "installing debootstrap (apt)"
	apt-get update -qq >/dev/null
	DEBIAN_FRONTEND=noninteractive apt-get install -y -qq debootstrap >/dev/null
fi

mkdir -p "$cache_root"
exec 9>"$cache_root/.kind-rootfs-$key.lock"
flock 9
if "$DOCKER" image inspect "$image" >/dev/null 2>&1; then
	echo "$image"
	exit 0
fi
tmp="$(mktemp -d "$cache_root/.kind-rootfs-$key.XXXXXX")"
cleanup() {
	# debootstrap mounts /proc and /sys in the target; a failed run can leave them.
	local m
	awk -v t="$tmp/" 'index($2, t) == 1 { print $2 }' /proc/mounts | sort -r | while read -r m; do
		umount -l "$m" 2>/dev/null || true
	done
	rm -rf "$tmp"
}
trap cleanup EXIT

log "debootstrap $DEBIAN_SUITE from $DEBIAN_MIRROR into $tmp (a few minutes)"
start=$SECONDS
debootstrap --variant=minbase --include="$(IFS=,; echo "${packages[*]}")" \
	"$DEBIAN_SUITE" "$tmp/rootfs" "$DEBIAN_MIRROR" >"$tmp/debootstrap.log" 2>&1 || {
	tail -n 30 "$tmp/debootstrap.log" >&2
	die "debootstrap failed"
}
# What kind's base image does after installing its packages: no services but
# the ones enabled in node-image.sh, no kernel messages in the journal, no
# package caches.
chroot "$tmp/rootfs" /bin/sh -euc '
	apt-get clean
	rm -rf /var/lib/apt/lists/* /var/cache/debconf/*-old /usr/share/doc/* /usr/share/man/* /usr/share/locale/*
	find /lib/systemd/system/sysinit.target.wants/ -name systemd-tmpfiles-setup.service -delete
	rm -f /lib/systemd/system/multi-user.target.wants/* /etc/systemd/system/*.wants/* \
		/lib/systemd/system/local-fs.target.wants/* /lib/systemd/system/sockets.target.wants/*udev* \
		/lib/systemd/system/sockets.target.wants/*initctl* /lib/systemd/system/basic.target.wants/*
	echo ReadKMsg=no >>/etc/systemd/journald.conf
	ln -sf /usr/lib/systemd/systemd /sbin/init
	: >/etc/machine-id
	rm -f /etc/hostname /etc/resolv.conf
'
tar -C "$tmp/rootfs" --numeric-owner -c . | "$DOCKER" import \
	--change 'ENV container=docker' \
	--change 'CMD ["/sbin/init"]' \
	- "$image" >/dev/null
log "$image in $((SECONDS - start))s"
echo "$image"
