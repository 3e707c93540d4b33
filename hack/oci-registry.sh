#!/usr/bin/env bash
# An OCI registry on loopback, as a release's charts are consumed: the CNCF
# distribution registry (`registry`, pinned below) built from its Go module into
# a per-machine cache.
#
#   hack/oci-registry.sh bin              build (once) and print the binary's path
#   hack/oci-registry.sh start DIR PORT   serve 127.0.0.1:PORT, storage and pid under
#                                         DIR; returns once it answers /v2/
#   hack/oci-registry.sh stop DIR         stop the registry started with DIR (by PID)
#
#   KPS_CACHE_DIR   cache root (default: $HOME/.cache/karpenter-provider-scaleway)
set -euo pipefail
export GOTOOLCHAIN="${GOTOOLCHAIN:-go1.27.3}"
registry_version=v3.1.2

log() { printf 'oci-registry.sh: %s\n' "$*" >&2; }

bin() {
	local cache_root key final tmp start
	cache_root="${KPS_CACHE_DIR:-${HOME}/.cache/karpenter-provider-scaleway}"
	key="$({ printf '%s\n' "$registry_version"; go version; sha256sum < "${BASH_SOURCE[0]}"; } | sha256sum | cut -c1-12)"
	final="$cache_root/registry-$registry_version-$key"
	if [[ -x "$final/bin/registry" ]]; then echo "$final/bin/registry"; return; fi
	mkdir -p "$cache_root"
	exec 9>"$cache_root/.registry-$key.lock"
	flock 9
	if [[ -x "$final/bin/registry" ]]; then echo "$final/bin/registry"; return; fi
	tmp="$(mktemp -d "$cache_root/.registry-$key.XXXXXX")"
	chmod 755 "$tmp"
	trap 'rm -rf "$tmp"' EXIT
	log "building registry $registry_version into $final"
	start=$SECONDS
	(cd "$tmp" && CGO_ENABLED=0 GOBIN="$tmp/bin" GOFLAGS="-buildvcs=false" \
		go install -trimpath -ldflags "-s -w" "github.com/distribution/distribution/v3/cmd/registry@$registry_version")
	[[ -x "$tmp/bin/registry" ]] || { log "go install produced no registry binary"; exit 1; }
	log "built in $((SECONDS - start))s"
	mv -T "$tmp" "$final" 2>/dev/null || [[ -x "$final/bin/registry" ]]
	trap - EXIT
	echo "$final/bin/registry"
}

start() {
	local dir=$1 port=$2 registry
	registry="$(bin)"
	mkdir -p "$dir/storage"
	# Loopback only, no TLS, no auth: helm talks to it with --plain-http.
	cat >"$dir/config.yml" <<CONF
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: $dir/storage
  delete:
    enabled: true
http:
  addr: 127.0.0.1:$port
CONF
	OTEL_TRACES_EXPORTER=none setsid "$registry" serve "$dir/config.yml" >"$dir/registry.log" 2>&1 </dev/null &
	echo $! >"$dir/registry.pid"
	for _ in $(seq 1 100); do
		if curl -fsS "http://127.0.0.1:$port/v2/" >/dev/null 2>&1; then
			log "registry $(cat "$dir/registry.pid") serves 127.0.0.1:$port"
			return
		fi
		kill -0 "$(cat "$dir/registry.pid")" 2>/dev/null || break
		sleep 0.2
	done
	log "the registry did not answer on 127.0.0.1:$port; its log:"
	tail -n 20 "$dir/registry.log" >&2
	stop "$dir"
	exit 1
}

stop() {
	local dir=$1 pid
	[[ -f "$dir/registry.pid" ]] || return 0
	pid=$(cat "$dir/registry.pid")
	kill "$pid" 2>/dev/null || true
	for _ in $(seq 1 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	kill -9 "$pid" 2>/dev/null || true
	rm -f "$dir/registry.pid"
}

case "${1:-}" in
	bin) bin ;;
	start) [[ $# -eq 3 ]] || { log "usage: $0 start DIR PORT"; exit 2; }; start "$2" "$3" ;;
	stop) [[ $# -eq 2 ]] || { log "usage: $0 stop DIR"; exit 2; }; stop "$2" ;;
	*) log "usage: $0 bin | start DIR PORT | stop DIR"; exit 2 ;;
esac
