#!/usr/bin/env bash
# Deletes the kind cluster NAME (default kps-e2e) and what up.sh made for it: the
# node containers and their volumes (kind), the cluster's state directory
# (config, kubeconfig); and with the last kind cluster, the `kind` Docker network
# and its bridge, and the /lib/modules directory Docker made for kind's mount,
# each when an up.sh run found it missing. Idempotent.
#
#   hack/kind/down.sh [NAME]
set -euo pipefail
# shellcheck source=lib.sh source-path=SCRIPTDIR
source "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

name="${1:-kps-e2e}"
state="$cache_root/kind-clusters/$name"
kubeconfig="${KPS_KIND_KUBECONFIG:-$state/kubeconfig}"
marks="$cache_root/kind-clusters"

if "$DOCKER" info >/dev/null 2>&1; then
	kind="$("$kind_dir/kind.sh" | tail -n 1)"
	kind() { PATH="$(dirname "$DOCKER"):$PATH" KIND_EXPERIMENTAL_PROVIDER=docker "$kind" "$@"; }
	if grep -qx "$name" <<<"$(kind get clusters 2>/dev/null)"; then
		# --kubeconfig: only this cluster's entries of that file are removed.
		kind delete cluster --name "$name" --kubeconfig "$kubeconfig" >&2
	fi
	# With the last kind cluster gone, what up.sh found missing and kind made.
	if [[ -z "$("$DOCKER" ps -aq --filter label=io.x-k8s.kind.cluster)" ]]; then
		if [[ -f "$marks/.made-network-kind" ]] && "$DOCKER" network inspect kind >/dev/null 2>&1; then
			if [[ "$("$DOCKER" network inspect kind --format '{{len .Containers}}')" == 0 ]]; then
				"$DOCKER" network rm kind >/dev/null
				log "removed the Docker network kind"
			else
				log "the Docker network kind has containers of something else: left"
			fi
		fi
		"$DOCKER" network inspect kind >/dev/null 2>&1 || rm -f "$marks/.made-network-kind"
		# Only while it is empty: something may have put modules there since.
		if [[ -f "$marks/.made-lib-modules" && -d /lib/modules ]] && rmdir /lib/modules 2>/dev/null; then
			log "removed /lib/modules (made by Docker for kind's mount)"
		fi
		rm -f "$marks/.made-lib-modules"
	fi
else
	log "no Docker daemon answers: nothing to delete there"
fi
rm -rf "$state"
log "cluster $name deleted"
