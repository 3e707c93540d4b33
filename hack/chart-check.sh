#!/usr/bin/env bash
# Checks of the Helm charts and examples/ (run by `just chart-check`, part of `just test`):
#
#  1. the CRD chart equals its sources (hack/chart-crds.sh check), the values
#     table of charts/karpenter-scaleway/README.md equals values.yaml
#     (hack/chart-values-doc.py --check), and docs/nodeclass-reference.md equals
#     what hack/nodeclass-doc.py generates from `karpenter-scaleway crd`;
#  2. `helm lint --strict` of both charts (karpenter-scaleway with each ci/*-values.yaml);
#  3. `helm template` with each ci/*-values.yaml (the default one runs both images at
#     the chart's appVersion), and the errors the chart must give
#     for a missing cluster name, missing credentials and a malformed zone;
#  4. every environment variable the chart gives the provider container is one
#     `karpenter-scaleway serve` reads (a clap flag's env, or std::env::var), and every
#     one it gives the bridge is read by Karpenter core or the bridge;
#  5. the Grafana dashboard and the PrometheusRule (dashboard.enabled,
#     prometheusRule.enabled): they render to one ConfigMap holding the dashboard file
#     intact and one PrometheusRule; hack/dashboard-check.py finds every metric they
#     query among those the provider and Karpenter core export (and --self-test shows it
#     refuses broken copies); `promtool check rules` accepts the rules and every
#     dashboard expression, and `promtool test rules` runs ci/alerts-test.yaml, a test
#     for every alert;
#  6. `kubectl apply --dry-run=server --validate=strict` of the rendered charts and of
#     examples/ against a throwaway API server (hack/apiserver.sh, built by
#     e2e/kube/build.sh), or against KPS_KUBECONFIG. This creates the CRDs and the
#     release namespace for real (a dry-run of a NodePool needs its CRD), so a
#     KPS_KUBECONFIG must be a test cluster.
#
#  7. on the throwaway API server: the chart's RBAC grants what the provider and core's
#     leader election call and refuses neighbouring permissions (kubectl auth can-i).
#
#   KPS_KUBECONFIG    cluster for step 6 (default: a throwaway API server)
#   KPS_CHART_DRY_RUN 0 skips steps 6 and 7
#   KPS_PROVIDER_METRICS a provider /metrics text for step 5, also run through
#                     `promtool check metrics` (`just chart-check` writes one with
#                     every family from the metrics unit test; default: the names
#                     declared in controller/src, a weaker check)
#   KPS_PROMTOOL      promtool binary (default: built and cached by hack/promtool.sh)
#   KPS_KUBECTL       kubectl binary (default: the kubectl v1.35 built with the
#                     control plane by e2e/kube/build.sh, not the host's)
#   KPS_PROVIDER_BIN  karpenter-scaleway binary (default: cargo run -p karpenter-scaleway)
#   KPS_CHART_OUT     keep the rendered manifests in this directory
set -euo pipefail
# Go toolchain: Karpenter core v1.15 (bridge/go.mod) needs go >= 1.26.9; the go
# command fetches this one as a module (once per machine). Set GOTOOLCHAIN to
# override (e.g. GOTOOLCHAIN=local with a new enough go installed).
export GOTOOLCHAIN="${GOTOOLCHAIN:-go1.27.3}"

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$root"
crd_chart=charts/karpenter-crd
chart=charts/karpenter-scaleway
namespace=karpenter

log() { printf 'chart-check: %s\n' "$*" >&2; }
die() {
	log "FAIL: $*"
	exit 1
}

helm="$(hack/helm.sh | tail -n 1)"
if [[ -n "${KPS_CHART_OUT:-}" ]]; then
	out="$KPS_CHART_OUT"
	mkdir -p "$out"
else
	out="$(mktemp -d)"
	trap 'rm -rf "$out"' EXIT
fi

if [[ -n "${KPS_PROVIDER_BIN:-}" ]]; then
	provider=("$KPS_PROVIDER_BIN")
else
	cargo build --quiet -p karpenter-scaleway --bin karpenter-scaleway
	provider=("$(cargo metadata --format-version 1 --no-deps | python3 -c 'import json,sys; print(json.load(sys.stdin)["target_directory"])')/debug/karpenter-scaleway")
fi
export KPS_PROVIDER_BIN="${provider[0]}"

# 1. CRDs
hack/chart-crds.sh check

# The values table of the chart's README is generated from values.yaml.
python3 -c 'import yaml' 2>/dev/null || die "python3 with PyYAML is needed to read the charts (apt-get install python3-yaml)"
hack/chart-values-doc.py --check
# The NodeClass field reference is generated from the CRD schema (the same
# `karpenter-scaleway crd` output the CRD chart was just checked against).
hack/nodeclass-doc.py --check

# 2. lint
"$helm" lint --strict "$crd_chart" >/dev/null || die "helm lint $crd_chart"
values_files=("$chart"/ci/*-values.yaml)
for values in "${values_files[@]}"; do
	"$helm" lint --strict "$chart" -f "$values" >/dev/null || die "helm lint $chart -f $values"
done
log "helm lint: $crd_chart, $chart with ${#values_files[@]} values files"

# 3. template
"$helm" template karpenter-crd "$crd_chart" >"$out/karpenter-crd.yaml"
for values in "${values_files[@]}"; do
	name="$(basename "$values" .yaml)"
	"$helm" template karpenter-scaleway "$chart" -n "$namespace" -f "$values" >"$out/$name.yaml" ||
		die "helm template $chart -f $values"
done
log "helm template: rendered into $out"
# The release's one version (hack/version-check.py): with no tag set, every container
# runs the default repository at the chart's appVersion.
python3 - "$out/default-values.yaml" "$chart/Chart.yaml" "$chart/values.yaml" <<-'PY' || die "the default images are not the chart's appVersion"
	import sys, yaml
	docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
	app_version = yaml.safe_load(open(sys.argv[2]))["appVersion"]
	defaults = yaml.safe_load(open(sys.argv[3]))["image"]
	want = sorted(f"{defaults[c]['repository']}:{app_version}" for c in ("provider", "bridge"))
	pod = next(d for d in docs if d["kind"] == "Deployment")["spec"]["template"]["spec"]
	got = sorted(c["image"] for c in pod.get("initContainers", []) + pod["containers"])
	if got != want:
	    sys.exit(f"chart-check: the default render runs {got}, expected {want}")
	print(f"chart-check: default images: {', '.join(got)}", file=sys.stderr)
PY

# Renders that must fail, with a message that says what to set.
expect_failure() {
	local what="$1" want="$2"
	shift 2
	local err
	if err="$("$helm" template karpenter-scaleway "$chart" -n "$namespace" "$@" 2>&1 >/dev/null)"; then
		die "$what: rendered, but must fail"
	fi
	grep -qF -- "$want" <<<"$err" || die "$what: error does not mention '$want': $err"
}
expect_failure "no clusterName" "clusterName is required" --set scaleway.existingSecret=s
expect_failure "no credentials" "set scaleway.existingSecret" --set clusterName=c
expect_failure "malformed zone" "/scaleway/zones/0" -f "$chart/ci/default-values.yaml" --set 'scaleway.zones[0]=Paris'
expect_failure "unknown value" "additional properties" -f "$chart/ci/default-values.yaml" --set clustername=typo
expect_failure "two replicas without election" "needs replicas: 1" -f "$chart/ci/default-values.yaml" \
	--set replicas=2 --set settings.leaderElection.enabled=false
expect_failure "alert selector not PromQL matchers" "/prometheusRule/selector" -f "$chart/ci/default-values.yaml" \
	--set prometheusRule.enabled=true --set 'prometheusRule.selector=namespace=karpenter'
expect_failure "unknown dashboard value" "additional properties" -f "$chart/ci/default-values.yaml" --set dashboard.enable=true
log "helm template: refuses a missing cluster name, missing credentials, a bad zone, an unknown key, replicas without election, a malformed alert selector"

# 4. environment variables
provider_env="$("${provider[@]}" serve --help | grep -o '\[env: [A-Z0-9_]*' | cut -d' ' -f2 | sort -u)"
[[ -n "$provider_env" ]] || die "karpenter-scaleway serve --help lists no environment variables"
karpenter_dir="$(cd bridge && go list -m -f '{{.Dir}}' sigs.k8s.io/karpenter)"
for values in "${values_files[@]}"; do
	name="$(basename "$values" .yaml)"
	python3 - "$out/$name.yaml" "$values" >"$out/$name.env" <<-'PY'
		import sys, yaml
		extra = [c["name"] for c in (yaml.safe_load(open(sys.argv[2])) or {}).get("extraContainers", [])]
		for doc in yaml.safe_load_all(open(sys.argv[1])):
		    if not doc or doc.get("kind") != "Deployment":
		        continue
		    pod = doc["spec"]["template"]["spec"]
		    # Karpenter core's e2e suites (and its docs' kubectl lines) read and
		    # patch containers[0] of the Deployment; the chart adds no other, only
		    # the values' extraContainers after it.
		    names = [c["name"] for c in pod["containers"]]
		    if names != ["controller"] + extra:
		        sys.exit(f"chart-check: FAIL: the pod's containers are {names}, expected controller, then extraContainers {extra}")
		    sidecars = [c["name"] for c in pod.get("initContainers", []) if c.get("restartPolicy") == "Always"]
		    if sidecars != ["provider"]:
		        sys.exit(f"chart-check: FAIL: the pod's native sidecars are {sidecars}, expected provider")
		    # The environment of extraContainers is the user's business.
		    for c in pod.get("initContainers", []) + pod["containers"][:1]:
		        for e in c.get("env", []):
		            print(c["name"], e["name"])
	PY
	# The Scaleway settings Scaleway's own tools share (SCW_ACCESS_KEY, SCW_SECRET_KEY,
	# SCW_DEFAULT_PROJECT_ID, ...) are read through the scw profile's table
	# (controller/src/config/profile.rs: `Field::vars`, which Env::from_process reads).
	profile_env="$(sed -n '/fn vars(self)/,/^    }$/p' controller/src/config/profile.rs | grep -o '"[A-Z][A-Z0-9_]*"' | tr -d '"' | sort -u)"
	grep -qx SCW_SECRET_KEY <<<"$profile_env" || die "no SCW_SECRET_KEY among the variables of controller/src/config/profile.rs's Field::vars"
	while read -r container var; do
		# Variables a values file adds through extraEnv are the user's business.
		if grep -qE "^ *- name: $var\$" "$values"; then continue; fi
		case "$container" in
		provider)
			# RUST_LOG is read by the tracing filter, not by clap; a few
			# variables are read directly with std::env::var.
			[[ "$var" == RUST_LOG ]] || grep -qx "$var" <<<"$provider_env" ||
				grep -qx "$var" <<<"$profile_env" ||
				grep -rqF "env::var(\"$var\")" controller/src ||
				die "$name: provider env $var is not read by karpenter-scaleway serve"
			;;
		controller)
			grep -q "\"$var\"" "$karpenter_dir/pkg/operator/options/options.go" bridge/pkg/cloudprovider/options.go ||
				die "$name: bridge env $var is read neither by Karpenter core nor by the bridge"
			;;
		*) die "$name: unexpected container $container" ;;
		esac
	done <"$out/$name.env"
	[[ -s "$out/$name.env" ]] || die "$name: no Deployment with env rendered"
done
log "env: every variable the chart sets is read by the container it is given to"

# 5. dashboard and alerts
"$helm" template karpenter-scaleway "$chart" -n "$namespace" -f "$chart/ci/default-values.yaml" \
	--set dashboard.enabled=true,prometheusRule.enabled=true >"$out/monitoring.yaml" ||
	die "helm template $chart with dashboard.enabled and prometheusRule.enabled"
python3 - "$chart" "$out" <<-'PY'
	import json, sys, yaml
	chart, out = sys.argv[1:]
	def fail(msg):
	    sys.exit(f"chart-check: FAIL: {msg}")
	docs = [d for d in yaml.safe_load_all(open(f"{out}/monitoring.yaml")) if d]
	for name in ("default-values", "full-values"):
	    kinds = [d["kind"] for d in yaml.safe_load_all(open(f"{out}/{name}.yaml")) if d]
	    want = name == "full-values"
	    for kind in ("PrometheusRule", "ConfigMap"):
	        if (kind in kinds) != want:
	            fail(f"{name}: a {kind} {'missing' if want else 'rendered, though off by default'}")
	dashboards = [d for d in docs if d["kind"] == "ConfigMap"]
	rules = [d for d in docs if d["kind"] == "PrometheusRule"]
	if len(dashboards) != 1 or len(rules) != 1:
	    fail(f"want one dashboard ConfigMap and one PrometheusRule, got {len(dashboards)} and {len(rules)}")
	cm = dashboards[0]
	if cm["metadata"]["labels"].get("grafana_dashboard") != "1":
	    fail("the dashboard ConfigMap lacks the sidecar label grafana_dashboard: \"1\"")
	data = cm.get("data", {}).get("karpenter-scaleway.json")
	if data is None or data != open(f"{chart}/dashboards/karpenter-scaleway.json").read().rstrip("\n"):
	    fail("the ConfigMap does not hold dashboards/karpenter-scaleway.json intact")
	if rules[0]["apiVersion"] != "monitoring.coreos.com/v1":
	    fail(f"PrometheusRule apiVersion {rules[0]['apiVersion']}")
	json.dump(docs, open(f"{out}/monitoring.json", "w"))
	# promtool reads a Prometheus rules file: the PrometheusRule's spec. The unit tests
	# get it without annotations (their text is dashboard-check's and check rules').
	spec = rules[0]["spec"]
	yaml.safe_dump(spec, open(f"{out}/rules.yaml", "w"), sort_keys=False)
	bare = {"groups": [{**g, "rules": [{k: v for k, v in r.items() if k != "annotations"} for r in g["rules"]]} for g in spec["groups"]]}
	yaml.safe_dump(bare, open(f"{out}/rules-test.yaml", "w"), sort_keys=False)
	alerts = {r["alert"] for g in spec["groups"] for r in g["rules"]}
	tests = yaml.safe_load(open(f"{chart}/ci/alerts-test.yaml"))
	tested = {a["alertname"] for t in tests["tests"] for a in t.get("alert_rule_test", [])}
	if alerts - tested:
	    fail(f"alerts without a test in {chart}/ci/alerts-test.yaml: {sorted(alerts - tested)}")
	if tested - alerts:
	    fail(f"{chart}/ci/alerts-test.yaml tests alerts the chart does not have: {sorted(tested - alerts)}")
PY
check_args=(--rules "$out/monitoring.json" --karpenter-dir "$karpenter_dir")
if [[ -n "${KPS_PROVIDER_METRICS:-}" ]]; then
	check_args+=(--provider-metrics "$KPS_PROVIDER_METRICS")
fi
hack/dashboard-check.py "${check_args[@]}" --write-promql-rules "$out/dashboard-rules.json" ||
	die "hack/dashboard-check.py: the dashboard or the alerts query unknown metrics or are malformed"
hack/dashboard-check.py --self-test "${check_args[@]}" >"$out/dashboard-self-test.log" ||
	die "hack/dashboard-check.py --self-test (see $out/dashboard-self-test.log)"
log "dashboard-check --self-test: $(grep -c ': refused' "$out/dashboard-self-test.log") broken inputs refused"
promtool="$(hack/promtool.sh | tail -n 1)"
"$promtool" check rules "$out/rules.yaml" >/dev/null || die "promtool check rules: the chart's PrometheusRule"
# Prometheus' own parser on every dashboard expression (as recording rules, Grafana's
# variables replaced by values): the metric check above reads names, not syntax.
"$promtool" check rules "$out/dashboard-rules.json" >/dev/null || die "promtool: a dashboard expression does not parse"
cp "$chart/ci/alerts-test.yaml" "$out/alerts-test.yaml"
"$promtool" test rules "$out/alerts-test.yaml" >"$out/alerts-test.log" 2>&1 ||
	die "promtool test rules $chart/ci/alerts-test.yaml: $(cat "$out/alerts-test.log")"
log "alerts and dashboard: $("$promtool" --version 2>&1 | head -n 1): rules and every dashboard expression parse, $chart/ci/alerts-test.yaml passes"
if [[ -n "${KPS_PROVIDER_METRICS:-}" ]]; then
	# The provider's exposition (every family, one series each) through Prometheus'
	# text parser. Linting is off: the linter reads the classic text format, in which
	# a counter's HELP names its `_total` samples, while OpenMetrics (what
	# prometheus-client writes) names the family; it would call every counter
	# undocumented. Parsing and the cardinality table are what is checked here.
	"$promtool" check metrics --lint=none --extended <"$KPS_PROVIDER_METRICS" >"$out/check-metrics.log" 2>&1 ||
		die "promtool check metrics $KPS_PROVIDER_METRICS: $(cat "$out/check-metrics.log")"
	log "promtool check metrics: the provider's exposition parses ($(grep -c '^# TYPE ' "$KPS_PROVIDER_METRICS") families)"
fi

# 6. server-side dry-run
if [[ "${KPS_CHART_DRY_RUN:-1}" == 0 ]]; then
	log "KPS_CHART_DRY_RUN=0: skipped the server-side dry-run of the manifests and examples/"
	log "PASS"
	exit 0
fi
# kubectl of the control plane's version (v1.35), built and cached with it: the
# host's kubectl may be older and validate differently (--validate=strict).
if [[ -n "${KPS_KUBECTL:-}" ]]; then
	kubectl="$KPS_KUBECTL"
else
	kubectl="$(e2e/kube/build.sh | tail -n 1)/kubectl"
fi
command -v "$kubectl" >/dev/null || die "no kubectl ('$kubectl'): set KPS_KUBECTL, or KPS_CHART_DRY_RUN=0 to skip the dry-run"
log "kubectl: $("$kubectl" version --client 2>/dev/null | head -n 1) ($kubectl)"
kubeconfig="${KPS_KUBECONFIG:-}"
if [[ -z "$kubeconfig" ]]; then
	apiserver_dir="$out/apiserver"
	log "starting a throwaway API server (hack/apiserver.sh) for the dry-run"
	kubeconfig="$(hack/apiserver.sh start "$apiserver_dir" | tail -n 1)"
	trap 'hack/apiserver.sh stop "$apiserver_dir"; [[ -n "${KPS_CHART_OUT:-}" ]] || rm -rf "$out"' EXIT
fi
k() { "$kubectl" --kubeconfig "$kubeconfig" "$@"; }

# CRDs and the namespace for real: the dry-run of anything else needs them.
k apply --server-side --force-conflicts -f "$out/karpenter-crd.yaml" >/dev/null
k wait --for condition=Established --timeout 60s -f "$out/karpenter-crd.yaml" >/dev/null
k create namespace "$namespace" --dry-run=client -o yaml | k apply -f - >/dev/null
# prometheus-operator's kinds the chart can render, dry-run only where their CRD is.
missing_kinds=()
k get crd servicemonitors.monitoring.coreos.com >/dev/null 2>&1 || missing_kinds+=(ServiceMonitor)
k get crd prometheusrules.monitoring.coreos.com >/dev/null 2>&1 || missing_kinds+=(PrometheusRule)

dry_run() {
	local file="$1"
	k apply --dry-run=server --validate=strict -f "$file" >/dev/null || die "server-side dry-run of $file"
}
for values in "${values_files[@]}"; do
	name="$(basename "$values" .yaml)"
	file="$out/$name.yaml"
	if ((${#missing_kinds[@]})); then
		# The cluster has no prometheus-operator: validate everything else.
		python3 - "$file" "${missing_kinds[@]}" >"$out/$name.no-monitoring.yaml" <<-'PY'
			import sys, yaml
			docs = [d for d in yaml.safe_load_all(open(sys.argv[1])) if d]
			kept = [d for d in docs if d.get("kind") not in sys.argv[2:]]
			if len(kept) < len(docs):
			    print(f"chart-check: {sys.argv[1]}: no CRD for {len(docs) - len(kept)} object(s) of {', '.join(sys.argv[2:])} in the cluster, dry-running without them", file=sys.stderr)
			yaml.safe_dump_all(kept, sys.stdout)
		PY
		file="$out/$name.no-monitoring.yaml"
	fi
	dry_run "$file"
done
for example in examples/*.yaml; do
	dry_run "$example"
done
log "server-side dry-run: both values files and $(ls examples/*.yaml | wc -l) examples accepted"

# The NodeClasses' CEL rules, on the API server that enforces them: each broken
# variant of a NodeClass of examples/ (the Instance NodeClass of
# instance-nodeclass.yaml, the standby pools of metal-standby.yaml) is refused with
# its message, and each variant expected to pass (an empty message) is accepted.
cel_dir="$out/nodeclass-cel"
mkdir -p "$cel_dir"
python3 - "$cel_dir" <<-'PY'
	import pathlib, sys, yaml
	out = pathlib.Path(sys.argv[1])
	uuid = "11111111-2222-4333-8444-555555555555"
	ids = lambda *pairs: [{"zone": z, "arch": a, "id": uuid} for z, a in pairs]
	instance_cases = [
	    ({"image": {"ids": ids(("fr-par-2", "amd64"))}}, "exactly one of the two forms"),
	    ({"image": {"name": None, "tags": None}}, "exactly one of the two forms"),
	    ({"image": {"name": None, "tags": None, "ids": ids(("fr-par-2", "amd64"), ("fr-par-2", "amd64"))}},
	     "must not list a (zone, arch) pair twice"),
	    ({"rootVolume": {"sizeBytes": 20000000001}}, "must be a multiple of 512"),
	    ({"rootVolume": {"sizeBytes": 512}}, "must be between 10 GB"),
	    ({"rootVolume": {"type": "l_ssd"}}, "set it only with type sbs_volume"),
	    ({"rootVolume": {"iops": 7000}}, "must be 5000 or 15000"),
	    ({"zones": ["fr-par-2", "fr-par-1"], "securityGroupId": uuid}, "set zones to exactly that zone"),
	    ({"placementGroupId": "x"}, "must be the id (a UUID) of a placement group"),
	    ({"zones": ["par2"]}, "must be a Scaleway zone name"),
	    ({"tags": ["karpenter.sh/nodepool=x"]}, "reserves them for its ownership tags"),
	]
	pool = lambda **kw: {"offer": "EM-A115X-SSD", "zone": "fr-par-2", "min": 1, "max": 2, **kw}
	pools = lambda *p: {"standby": {"pools": list(p)}}
	standby_cases = [
	    (pools(pool(offer="em-a115x-ssd")), "offer must be an Elastic Metal offer name"),
	    (pools(pool(offer="A115X-SSD")), "offer must be an Elastic Metal offer name"),
	    (pools(pool(zone="par2")), "zone must be a Scaleway zone name"),
	    (pools(pool(min=3, max=2)), "max must be at least min"),
	    (pools(pool(max=101)), "should be less than or equal to 100"),
	    (pools(pool(min=-1)), "should be greater than or equal to 0"),
	    (pools({"offer": "EM-A115X-SSD", "zone": "fr-par-2", "min": 1}), "max: Required value"),
	    (pools(pool(idleHourlyKeep="90")), "idleHourlyKeep must be a Go duration"),
	    (pools(pool(idleHourlyKeep="1d")), "idleHourlyKeep must be a Go duration"),
	    (pools(pool(idleHourlyKeep="-1h")), "idleHourlyKeep must be a Go duration"),
	    (pools(pool(idleHourlyKeep="25h")), "idleHourlyKeep must be at most 24h"),
	    (pools(pool(idleHourlyKeep="24h0m1s")), "idleHourlyKeep must be at most 24h"),
	    (pools(pool(planner={"nodePools": []})), "should have at least 1 items"),
	    (pools(pool(planner={})), "nodePools: Required value"),
	    (pools(pool(planner={"nodePools": ["vms"], "window": "2d"})), "planner.window must be a Go duration"),
	    (pools(pool(planner={"nodePools": ["vms"], "window": "169h"})), "planner.window must be at most 168h"),
	    (pools(pool(planner={"nodePools": ["vms"], "hold": "-5m"})), "planner.hold must be a Go duration"),
	    (pools(pool(planner={"nodePools": ["vms"], "atLeast": "12"})), "planner.atLeast must be a Go duration"),
	    (pools(pool(planner={"nodePools": ["vms"], "window": "1h", "atLeast": "2h"})), "must not be longer than planner.window"),
	    (pools(pool(planner={"nodePools": ["vms"], "atLeast": "3h"})), "must not be longer than planner.window"),
	    (pools(pool(planner={"nodePools": ["vms"], "maxServers": 101})), "should be less than or equal to 100"),
	    (pools(pool(), pool(min=0)), "must not list an (offer, zone) pair twice"),
	    (pools(pool(), pool(zone="fr-par-1")), "every standby pool's zone must be one of spec.zones"),
	    # Accepted: the limits, Go's spellings, and any zone when zones is empty.
	    (pools(pool(idleHourlyKeep="24h")), ""),
	    (pools(pool(idleHourlyKeep="1h30m")), ""),
	    (pools(pool(idleHourlyKeep="0")), ""),
	    (pools(pool(idleHourlyKeep="1.5h")), ""),
	    (pools(pool(min=0, max=0), pool(offer="EM-RV1-C4M16S128-A", min=100, max=100)), ""),
	    ({"zones": [], **pools(pool(zone="nl-ams-1"), pool(zone="fr-par-1"))}, ""),
	    ({"zones": ["fr-par-2", "fr-par-1"], **pools(pool(), pool(zone="fr-par-1"), pool(offer="EM-I215E-NVME"))}, ""),
	    ({"standby": {"pools": []}}, ""),
	    ({"standby": {}}, ""),
	    ({"standby": {"pools": [pool(idleHourlyKeep=None)]}}, ""),
	    (pools(pool(planner={"nodePools": ["vms"]})), ""),
	    (pools(pool(planner={"nodePools": ["vms", "gpus"], "window": "24h", "atLeast": "12h", "hold": "1h",
	                         "maxServers": 4, "dryRun": True})), ""),
	    (pools(pool(planner={"nodePools": ["vms"], "atLeast": "2h"})), ""),
	]
	def merge(a, b):
	    for k, v in b.items():
	        if v is None:
	            a.pop(k, None)
	        elif isinstance(v, dict) and isinstance(a.get(k), dict):
	            merge(a[k], v)
	        else:
	            a[k] = v
	for name, example, kind, cases in [
	    ("instance", "examples/instance-nodeclass.yaml", "ScalewayInstanceNodeClass", instance_cases),
	    ("standby", "examples/metal-standby.yaml", "ScalewayElasticMetalNodeClass", standby_cases),
	]:
	    text = open(example).read()
	    for n, (patch, message) in enumerate(cases):
	        doc = next(d for d in yaml.safe_load_all(text) if d and d["kind"] == kind)
	        merge(doc["spec"], patch)
	        (out / f"{name}-{n:02}.yaml").write_text(yaml.safe_dump(doc))
	        (out / f"{name}-{n:02}.expect").write_text(message)
PY
refused_count=0
accepted_count=0
for case in "$cel_dir"/*.yaml; do
	expected="$(cat "${case%.yaml}.expect")"
	if [[ -z "$expected" ]]; then
		answer="$(k apply --dry-run=server -f "$case" 2>&1)" || die "the NodeClass $case was refused; it should be accepted: $answer"
		accepted_count=$((accepted_count + 1))
		continue
	fi
	if refused="$(k apply --dry-run=server -f "$case" 2>&1)"; then
		die "the NodeClass $case was accepted; expected: $expected"
	fi
	grep -qF -- "$expected" <<<"$refused" || die "the NodeClass $case was refused without \"$expected\": $refused"
	refused_count=$((refused_count + 1))
done
log "NodeClass CEL: $refused_count broken variants refused with their messages, $accepted_count valid ones accepted"

# 7. RBAC, on the throwaway API server only (it installs the chart's RBAC for real):
# what the provider calls (docs/configuration.md, "Kubernetes permissions of the
# provider"), Karpenter core's leader election and what core v1.15 added must be
# allowed, and a few
# neighbouring permissions must not be.
if [[ -n "${KPS_KUBECONFIG:-}" ]]; then
	log "PASS (RBAC check skipped: it runs on the throwaway API server only)"
	exit 0
fi
k apply -f "$out/default-values.yaml" >/dev/null
sa="system:serviceaccount:$namespace:karpenter-scaleway"
allowed=(
	"get,list,watch scalewayelasticmetalnodeclasses.karpenter.scaleway.com"
	"patch scalewayelasticmetalnodeclasses.karpenter.scaleway.com --subresource=status"
	"get,list,watch scalewayinstancenodeclasses.karpenter.scaleway.com"
	"patch scalewayinstancenodeclasses.karpenter.scaleway.com --subresource=status"
	"get,list,patch,delete nodeclaims.karpenter.sh"
	"get,list,create,patch nodes"
	"get secrets -n $namespace"
	"list,watch secrets --all-namespaces"
	"list,create,delete secrets -n kube-system"
	"create,patch events.events.k8s.io -n default"
	"create leases.coordination.k8s.io -n $namespace"
	"get,update,patch leases.coordination.k8s.io/karpenter-leader-election -n $namespace"
	"get,list,watch nodepools.karpenter.sh"
	"list pods --all-namespaces"
	"create pods --subresource=eviction -n $namespace"
	# what Karpenter core v1.15 added to its chart's ClusterRole (and its
	# verticalpodautoscalers rule, which kubectl cannot check without VPA's CRD)
	"list,watch services --all-namespaces"
	"patch nodes --subresource=status"
	"patch,update pods -n $namespace"
)
denied=(
	"create,update,patch,delete secrets -n $namespace"
	"create secrets -n default"
	"update leases.coordination.k8s.io/another-lease -n $namespace"
	"patch scalewayelasticmetalnodeclasses.karpenter.scaleway.com"
	"create,delete scalewayelasticmetalnodeclasses.karpenter.scaleway.com"
	"patch scalewayinstancenodeclasses.karpenter.scaleway.com"
	"create,delete scalewayinstancenodeclasses.karpenter.scaleway.com"
	"create,delete nodepools.karpenter.sh"
	"create clusterrolebindings.rbac.authorization.k8s.io"
)
can() {
	local verbs="$1" verb
	shift
	for verb in ${verbs//,/ }; do
		k auth can-i "$verb" "$@" --as="$sa" >/dev/null 2>&1 || return 1
	done
}
for rule in "${allowed[@]}"; do
	# shellcheck disable=SC2086 # the rule is verbs, resource and flags
	can $rule || die "RBAC: the chart does not allow '$rule' to $sa"
done
for rule in "${denied[@]}"; do
	for verb in $(cut -d' ' -f1 <<<"$rule" | tr , ' '); do
		# shellcheck disable=SC2046
		if k auth can-i "$verb" $(cut -d' ' -f2- <<<"$rule") --as="$sa" >/dev/null 2>&1; then
			die "RBAC: the chart allows '$verb $(cut -d' ' -f2- <<<"$rule")' to $sa, which nothing needs"
		fi
	done
done
log "RBAC: ${#allowed[@]} required permissions granted, ${#denied[@]} unneeded ones refused"
log "PASS"
