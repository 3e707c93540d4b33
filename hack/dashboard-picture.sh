#!/usr/bin/env bash
# Takes the docs' picture of the dashboard (docs/img/dashboard.png) from a
# real run: builds Prometheus (hack/prometheus.sh), runs one e2e scenario
# with KPS_PROMETHEUS_BIN set (the stack then starts a Prometheus scraping
# the provider and Karpenter core every 2 s, its TSDB kept in
# .work/<scenario>-*/prometheus/), then opens that TSDB with a second
# Prometheus and draws the dashboard's panels from its answers to the
# dashboard's own queries (hack/dashboard-render.py). Nothing is simulated
# in the picture but what the e2e stack simulates (the Scaleway APIs and
# the machines).
#
#   KPS_DASHBOARD        dashboard JSON (default: the chart's)
#   KPS_DASHBOARD_OUT    PNG to write (default: docs/img/dashboard.png)
#   KPS_DASHBOARD_TEST   the scenario, an exact libtest name (default below:
#                        hybrid, which has VMs, metal installs, the planner,
#                        standby adoption and release, and consolidation)
#   KPS_DASHBOARD_DATA   skip the run: render from this kept
#                        .work/<scenario>-*/prometheus directory
#   KPS_BRIDGE_BIN, KPS_KARPENTER_CRDS: as for the e2e (the Justfile sets them)
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
dashboard="${KPS_DASHBOARD:-charts/karpenter-scaleway/dashboards/karpenter-scaleway.json}"
out="${KPS_DASHBOARD_OUT:-docs/img/dashboard.png}"
test_name="${KPS_DASHBOARD_TEST:-hybrid::hybrid_sustained_load_moves_from_vms_to_staged_metal_and_back}"

log() { printf 'dashboard-picture: %s\n' "$*" >&2; }

[[ -f "$dashboard" ]] || { log "no dashboard at $dashboard"; exit 1; }
python3 -c 'import json,sys; json.load(open(sys.argv[1]))' "$dashboard"
KPS_PROMETHEUS_BIN="$(hack/prometheus.sh | tail -n 1)"
export KPS_PROMETHEUS_BIN

dir="${KPS_DASHBOARD_DATA:-}"
if [[ -z "$dir" ]]; then
	# The Rust binaries and the scenarios' test binary, with the feature set
	# of hack/e2e-run.py's build (`--workspace`: no recompile after `just
	# e2e`), but linking no other test binary; their paths come from cargo's
	# own report.
	read -r exe bindir < <(cargo build --workspace --bins --test scenarios --message-format=json |
		python3 -c '
import json, os, sys
exe = bindir = None
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") != "compiler-artifact" or not m.get("executable"):
        continue
    t = m["target"]
    if t["name"] == "scenarios" and m["profile"]["test"]:
        exe = m["executable"]
    if t["name"] == "karpenter-scaleway" and "bin" in t["kind"]:
        bindir = os.path.dirname(m["executable"])
print(exe, bindir)
')
	[[ -x "$exe" && -d "$bindir" ]] || { log "cargo built no scenarios binary"; exit 1; }
	export KPS_RUST_BIN_DIR="$bindir"
	export KPS_KUBE_BIN_DIR="${KPS_KUBE_BIN_DIR:-$(e2e/kube/build.sh | tail -n 1)}"
	mkdir -p .work
	marker="$(mktemp .work/.dashboard-picture.XXXXXX)"
	trap 'rm -f "$marker"' EXIT
	log "running $test_name with Prometheus ($KPS_PROMETHEUS_BIN)"
	(cd e2e && "$exe" --exact "$test_name" --nocapture --test-threads 1)
	run="$(find .work -mindepth 3 -maxdepth 3 -path '*/prometheus/run.json' -newer "$marker" | head -n 1)"
	[[ -n "$run" ]] || { log "the run left no prometheus/run.json in .work"; exit 1; }
	dir="$(dirname "$run")"
fi
log "rendering $dashboard from $dir"
mkdir -p "$(dirname "$out")"
python3 hack/dashboard-render.py --dashboard "$dashboard" --data "$dir/data" --run "$dir/run.json" \
	--out "$out" --report "$dir/render-report.json" \
	--source "${KPS_DASHBOARD_SOURCE:-the e2e scenario ${test_name}, Prometheus TSDB kept in .work/$(basename "$(dirname "$dir")")/prometheus}"
log "wrote $out (what was drawn: $dir/render-report.json)"
