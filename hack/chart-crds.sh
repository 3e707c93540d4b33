#!/usr/bin/env bash
# The CRDs of charts/karpenter-crd/templates/ and where they come from:
#
#   * karpenter.sh (and autoscaling.x-k8s.io) CRDs: byte-identical copies of
#     pkg/apis/crds/*.yaml of the sigs.k8s.io/karpenter module pinned in
#     bridge/go.mod (the CRDs the bridge's core was built against);
#   * the provider's NodeClass CRD: the output of `karpenter-scaleway crd`,
#     generated from the Rust types (never edited by hand).
#
#   hack/chart-crds.sh check   fail (listing the differences) when the chart is stale
#   hack/chart-crds.sh sync    rewrite the chart's CRDs from both sources
#
#   KPS_PROVIDER_BIN   a karpenter-scaleway binary to run instead of
#                      `cargo run -p karpenter-scaleway` (which rebuilds it if stale)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
chart_dir="$root/charts/karpenter-crd/templates"
nodeclass_crd="karpenter.scaleway.com_scalewayelasticmetalnodeclasses.yaml"
mode="${1:-check}"

log() { printf 'chart-crds.sh: %s\n' "$*" >&2; }

case "$mode" in
check | sync) ;;
*)
	echo "usage: $0 [check|sync]" >&2
	exit 2
	;;
esac

module_dir="$(cd "$root/bridge" && go list -m -f '{{.Dir}}' sigs.k8s.io/karpenter)"
module_version="$(cd "$root/bridge" && go list -m -f '{{.Version}}' sigs.k8s.io/karpenter)"
[[ -d "$module_dir/pkg/apis/crds" ]] || {
	log "no pkg/apis/crds in $module_dir (run 'go mod download' in bridge/)"
	exit 1
}

generated="$(mktemp)"
trap 'rm -f "$generated"' EXIT
if [[ -n "${KPS_PROVIDER_BIN:-}" ]]; then
	"$KPS_PROVIDER_BIN" crd >"$generated"
else
	(cd "$root" && cargo run --quiet -p karpenter-scaleway --bin karpenter-scaleway -- crd) >"$generated"
fi
[[ -s "$generated" ]] || { log "karpenter-scaleway crd printed nothing"; exit 1; }

failed=0
# Every upstream CRD, and no chart file claiming to be one that upstream lacks.
declare -A expected=()
for src in "$module_dir"/pkg/apis/crds/*.yaml; do
	name="$(basename "$src")"
	expected[$name]=1
	dst="$chart_dir/$name"
	if [[ "$mode" == sync ]]; then
		install -m 0644 "$src" "$dst"
	elif ! cmp -s "$src" "$dst"; then
		log "$name differs from sigs.k8s.io/karpenter@$module_version (run: hack/chart-crds.sh sync)"
		failed=1
	fi
done
for dst in "$chart_dir"/*.yaml; do
	name="$(basename "$dst")"
	[[ "$name" == "$nodeclass_crd" || -n "${expected[$name]:-}" ]] && continue
	if [[ "$mode" == sync ]]; then
		rm -f "$dst"
		log "removed $name (not a CRD of sigs.k8s.io/karpenter@$module_version)"
	else
		log "$name is neither generated nor in sigs.k8s.io/karpenter@$module_version"
		failed=1
	fi
done

if [[ "$mode" == sync ]]; then
	if ! cmp -s "$generated" "$chart_dir/$nodeclass_crd"; then
		install -m 0644 "$generated" "$chart_dir/$nodeclass_crd"
		log "regenerated $nodeclass_crd"
	fi
	log "synced ${#expected[@]} CRDs of sigs.k8s.io/karpenter@$module_version and the generated NodeClass CRD"
elif ! cmp -s "$generated" "$chart_dir/$nodeclass_crd"; then
	log "$nodeclass_crd differs from 'karpenter-scaleway crd' (run: hack/chart-crds.sh sync):"
	diff -u "$chart_dir/$nodeclass_crd" "$generated" | head -40 >&2 || true
	failed=1
fi

if [[ "$failed" != 0 ]]; then
	exit 1
fi
[[ "$mode" == check ]] && log "CRDs match sigs.k8s.io/karpenter@$module_version and karpenter-scaleway crd"
exit 0
