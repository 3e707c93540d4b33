#!/usr/bin/env python3
"""A planner-replay trace (docs/planner.md "Traces") from a user's Prometheus.

The requests of the running pods on the planner's NodePools, summed, every
STEP over the last DAYS, from kube-state-metrics:

  sum(kube_pod_container_resource_requests{resource="cpu"}
      * on(node) group_left() max by (node) (kube_node_labels{label_karpenter_sh_nodepool=~"NODEPOOLS"})
      unless on(namespace, pod) kube_pod_owner{owner_kind="DaemonSet"})

(the same with resource="memory"). kube-state-metrics exports the NodePool
label only when started with
`--metric-labels-allowlist=nodes=[karpenter.sh/nodepool]`.

  hack/trace-from-prometheus.py --url http://prometheus:9090 --node-pools vm-first,warm-metal > my.csv
  karpenter-scaleway plan replay my.csv

`--from-json CPU MEMORY` converts two saved `query_range` answers instead.
"""
import argparse
import datetime
import json
import sys
import urllib.parse
import urllib.request

QUERY = (
    'sum(kube_pod_container_resource_requests{{resource="{resource}"}}'
    " * on(node) group_left() max by (node) "
    '(kube_node_labels{{label_karpenter_sh_nodepool=~"{pools}"}})'
    ' unless on(namespace, pod) kube_pod_owner{{owner_kind="DaemonSet"}})'
)


def query(resource, pools):
    return QUERY.format(resource=resource, pools="|".join(pools))


def values(answer):
    """The (unix seconds, float) points of a query_range answer's one series."""
    if answer.get("status") != "success":
        raise SystemExit(f"Prometheus answered: {answer.get('error', answer)}")
    result = answer["data"]["result"]
    if len(result) != 1:
        raise SystemExit(f"expected one summed series, got {len(result)}: check the NodePools and labels")
    return [(int(float(t)), float(v)) for t, v in result[0]["values"]]


def to_csv(cpu_answer, memory_answer):
    """The trace CSV: times present in both series, CPU in millicores."""
    memory = dict(values(memory_answer))
    lines = ["# from Prometheus: kube_pod_container_resource_requests summed", "time,cpu,memory"]
    for t, cores in values(cpu_answer):
        if t not in memory:
            continue
        at = datetime.datetime.fromtimestamp(t, datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")
        lines.append(f"{at},{round(cores * 1000)}m,{round(memory[t])}")
    if len(lines) < 4:
        raise SystemExit("fewer than two points in both series")
    return "\n".join(lines) + "\n"


def fetch(url, q, start, end, step):
    params = urllib.parse.urlencode({"query": q, "start": start, "end": end, "step": step})
    with urllib.request.urlopen(f"{url.rstrip('/')}/api/v1/query_range?{params}", timeout=60) as r:
        return json.load(r)


def main(argv):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--url", help="Prometheus base URL")
    p.add_argument("--node-pools", default="", help="comma-separated NodePools (the planner's, and the metal one)")
    p.add_argument("--days", type=float, default=14)
    p.add_argument("--step", default="300", help="seconds between points (default 300)")
    p.add_argument("--from-json", nargs=2, metavar=("CPU", "MEMORY"))
    a = p.parse_args(argv)
    if a.from_json:
        with open(a.from_json[0]) as c, open(a.from_json[1]) as m:
            sys.stdout.write(to_csv(json.load(c), json.load(m)))
        return
    pools = [x for x in a.node_pools.split(",") if x]
    if not a.url or not pools:
        p.error("--url and --node-pools are needed (or --from-json)")
    end = int(datetime.datetime.now(datetime.timezone.utc).timestamp())
    start = end - int(a.days * 86400)
    cpu = fetch(a.url, query("cpu", pools), start, end, a.step)
    memory = fetch(a.url, query("memory", pools), start, end, a.step)
    sys.stdout.write(to_csv(cpu, memory))


if __name__ == "__main__":
    main(sys.argv[1:])
