#!/usr/bin/env bash
# Prints, as JSON, how the karpenter-scaleway chart configures each container, so
# someone without a container runtime can start the binaries by hand as processes
# with exactly the chart's settings (the e2e harness does the same in Rust, and
# resolves the references too: e2e/src/stack/chart.rs):
#
#   {"namespace": "...", "serviceAccount": "...",
#    "containers": {"controller": {"args": [...], "env": {"NAME": "literal"},
#                              "fieldRef": {"POD_NAME": "metadata.name"},
#                              "resourceFieldRef": {"CPU_REQUESTS": "requests.cpu"},
#                              "secretKeyRef": {"SCW_SECRET_KEY": {"name": "...", "key": "..."}},
#                              "volumeMounts": {"provider-socket": "/var/run/karpenter"}},
#                   "provider": {...}}}
#
# `provider` is a native sidecar (an init container with restartPolicy Always)
# and `controller` (Karpenter core in the bridge) the pod's one container.
#
# Arguments go to `helm template` (e.g. -f values.yaml, --set clusterName=x);
# the namespace is `karpenter` unless -n is given.
#
#   hack/chart-env.sh -f charts/karpenter-scaleway/ci/default-values.yaml
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
helm="$("$root/hack/helm.sh" | tail -n 1)"
python3 -c 'import yaml' 2>/dev/null || {
	echo "chart-env.sh: python3 with PyYAML is needed (apt-get install python3-yaml)" >&2
	exit 1
}

"$helm" template karpenter-scaleway "$root/charts/karpenter-scaleway" -n karpenter "$@" |
	python3 -c '
import json, sys, yaml

docs = [d for d in yaml.safe_load_all(sys.stdin) if d]
deployments = [d for d in docs if d.get("kind") == "Deployment"]
if len(deployments) != 1:
    sys.exit("chart-env.sh: expected one Deployment, rendered %d" % len(deployments))
dep = deployments[0]
pod = dep["spec"]["template"]["spec"]
out = {
    "namespace": dep["metadata"]["namespace"],
    "serviceAccount": pod["serviceAccountName"],
    "containers": {},
}
sidecars = [c for c in pod.get("initContainers", []) if c.get("restartPolicy") == "Always"]
for c in sidecars + pod["containers"]:
    entry = {"args": c.get("args", []), "env": {}, "fieldRef": {}, "resourceFieldRef": {},
             "secretKeyRef": {}, "volumeMounts": {}}
    for e in c.get("env", []):
        src = e.get("valueFrom")
        if src is None:
            entry["env"][e["name"]] = e.get("value", "")
        elif "fieldRef" in src:
            entry["fieldRef"][e["name"]] = src["fieldRef"]["fieldPath"]
        elif "resourceFieldRef" in src:
            entry["resourceFieldRef"][e["name"]] = src["resourceFieldRef"]["resource"]
        elif "secretKeyRef" in src:
            ref = src["secretKeyRef"]
            entry["secretKeyRef"][e["name"]] = {"name": ref["name"], "key": ref["key"],
                                               "optional": ref.get("optional", False)}
        else:
            sys.exit("chart-env.sh: unsupported valueFrom for %s" % e["name"])
    for m in c.get("volumeMounts", []):
        entry["volumeMounts"][m["name"]] = m["mountPath"]
    out["containers"][c["name"]] = entry
json.dump(out, sys.stdout, indent=2, sort_keys=True)
print()
'
