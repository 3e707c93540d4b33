#!/usr/bin/env bash
# The CRDs of charts/karpenter-crd/templates/ and where they come from:
#
#   * karpenter.sh (and autoscaling.x-k8s.io) CRDs: byte-identical copies of
#     pkg/apis/crds/*.yaml of the sigs.k8s.io/karpenter module pinned in
#     bridge/go.mod (the CRDs the bridge's core was built against);
#   * the provider's NodeClass CRDs (Elastic Metal and Instance): the output of
#     `karpenter-scaleway crd <Kind>`, generated from the Rust types (never
#     edited by hand).
#
#   hack/chart-crds.sh check   fail (listing the differences) when the chart is stale
#   hack/chart-crds.sh sync    rewrite the chart's CRDs from both sources
#
#   KPS_PROVIDER_BIN   a karpenter-scaleway binary to run instead of
#                      `cargo run -p karpenter-scaleway` (which rebuilds it if stale)
set -euo pipefail
# Go toolchain: Karpenter core v1.15 (bridge/go.mod) needs go >= 1.26.9; the go
# command fetches this one as a module (once per machine). Set GOTOOLCHAIN to
# override (e.g. GOTOOLCHAIN=local with a new enough go installed).
export GOTOOLCHAIN="${GOTOOLCHAIN:-go1.27.3}"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
chart_dir="$root/charts/karpenter-crd/templates"
# Generated CRD file → the kind `karpenter-scaleway crd` prints into it.
declare -A generated_kinds=(
	[karpenter.scaleway.com_scalewayelasticmetalnodeclasses.yaml]=ScalewayElasticMetalNodeClass
	[karpenter.scaleway.com_scalewayinstancenodeclasses.yaml]=ScalewayInstanceNodeClass
)
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

generated_dir="$(mktemp -d)"
trap 'rm -rf "$generated_dir"' EXIT
provider=("${KPS_PROVIDER_BIN:-}")
if [[ -z "${KPS_PROVIDER_BIN:-}" ]]; then
	(cd "$root" && cargo build --quiet -p karpenter-scaleway --bin karpenter-scaleway)
	provider=("$(cd "$root" && cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/debug/karpenter-scaleway")
fi
for name in "${!generated_kinds[@]}"; do
	"${provider[0]}" crd "${generated_kinds[$name]}" >"$generated_dir/$name"
	[[ -s "$generated_dir/$name" ]] || { log "karpenter-scaleway crd ${generated_kinds[$name]} printed nothing"; exit 1; }
done

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
	[[ -n "${generated_kinds[$name]:-}" || -n "${expected[$name]:-}" ]] && continue
	if [[ "$mode" == sync ]]; then
		rm -f "$dst"
		log "removed $name (not a CRD of sigs.k8s.io/karpenter@$module_version)"
	else
		log "$name is neither generated nor in sigs.k8s.io/karpenter@$module_version"
		failed=1
	fi
done

for name in "${!generated_kinds[@]}"; do
	kind="${generated_kinds[$name]}"
	if [[ "$mode" == sync ]]; then
		if ! cmp -s "$generated_dir/$name" "$chart_dir/$name"; then
			install -m 0644 "$generated_dir/$name" "$chart_dir/$name"
			log "regenerated $name"
		fi
	elif ! cmp -s "$generated_dir/$name" "$chart_dir/$name"; then
		log "$name differs from 'karpenter-scaleway crd $kind' (run: hack/chart-crds.sh sync):"
		diff -u "$chart_dir/$name" "$generated_dir/$name" | head -40 >&2 || true
		failed=1
	fi
done
[[ "$mode" == sync ]] && log "synced ${#expected[@]} CRDs of sigs.k8s.io/karpenter@$module_version and the ${#generated_kinds[@]} generated NodeClass CRDs"

if [[ "$failed" != 0 ]]; then
	exit 1
fi
[[ "$mode" == check ]] && log "CRDs match sigs.k8s.io/karpenter@$module_version and karpenter-scaleway crd"
exit 0
