#!/usr/bin/env python3
"""Checks the chart's Grafana dashboard and PrometheusRule against the metrics that
exist (run by hack/chart-check.sh; Python 3 standard library only).

    hack/dashboard-check.py --rules RULES.json [--dashboard FILE]
                            [--provider-metrics FILE] [--karpenter-dir DIR]
    hack/dashboard-check.py --self-test --rules RULES.json ...

What it checks:

  * the dashboard is JSON with the structure the chart relies on: a `datasource`
    template variable of type prometheus, a fixed uid, schemaVersion >= 39, unique
    panel ids, a gridPos inside the grid on every panel, no two panels overlapping,
    and every panel and target querying
    `${datasource}` (never a hard-coded datasource uid);
  * the PrometheusRule (the rendered chart's document, as JSON: chart-check.sh converts
    the YAML) has groups of rules that each have alert, expr, for, labels.severity,
    annotations.summary and annotations.description;
  * every metric name in every PromQL expression (panel targets, template variable
    queries, alert expressions) is one the provider or Karpenter core exports, and is
    used as its type allows: counters and histogram series only under rate(), irate(),
    increase() and friends, gauges never under them, and histogram_quantile() over
    `_bucket` series grouped by `le`;
  * the labels an expression matches on, groups by, shows in a legend or names in an
    alert's text are on its metrics, where their label names are known: core's (the
    label list after each opts), the provider's from --provider-metrics (not from the
    source fallback), the pending ones' as written below;
  * the values a matcher compares a core label with (`=`, `!=`, and `=~`/`!~` over a
    plain alternation such as "a|b") are among those core documents for that label
    (the Values of its opmetrics.Label, from v1.15.0 on), where it documents them;
  * every `docs/FILE.md#section` an alert or a panel names exists.

Where the names come from:

  * the provider: `--provider-metrics FILE`, the text of a running provider's
    /metrics (Prometheus text or OpenMetrics: `# TYPE` lines and samples). Without it,
    the `"karpenter_scaleway_..."` string literals in controller/src. That fallback is
    weaker: a literal proves a name is written somewhere, not that it is exported;
    its type is guessed from the name and the text around it; a name `x` is also
    taken as a counter `x_total` (prometheus-client registers counters without the
    suffix and adds it on the wire), so a gauge queried with `_total` passes; labels
    are not checked; and a registry prefix would hide names from it (it then fails:
    fewer than MIN_PROVIDER_NAMES found).
  * Karpenter core: the prometheus.*Opts declarations of sigs.k8s.io/karpenter's
    source (the module version the bridge's go.mod requires), Namespace, Subsystem and
    Name resolved through the package constants, and the label list passed with each:
    a []string of label-name constants up to v1.14.x, a []opmetrics.Label (each label's
    name and documented values) from v1.15.0 (hack/metric_names.py reads both). Nothing
    is copied from core by hand: moving the bridge to another core version moves the
    names, labels and values checked with it. It fails when it finds fewer than
    MIN_CORE_NAMES families, or fewer than MIN_CORE_LABELLED whose labels it could
    read, either of which would mean the extraction broke (v1.15.0 changed the label
    argument's form; the old reader then found every name and no label, and the label
    checks went quiet).

Exit status: 0 when everything checks, 1 with the list of problems otherwise.
"""
import argparse
import copy
import json
import pathlib
import re
import sys

sys.dont_write_bytecode = True  # no __pycache__ in hack/
from metric_names import (  # noqa: E402 (hack/ is on sys.path when run as a script)
    core_families,
    karpenter_module_dir,
    parse_exposition,
    provider_from_source,
    sample_names,
)

ROOT = pathlib.Path(__file__).resolve().parent.parent
DASHBOARD = ROOT / "charts" / "karpenter-scaleway" / "dashboards" / "karpenter-scaleway.json"
PROVIDER_SRC = ROOT / "controller" / "src"
MIN_CORE_NAMES = 30
# v1.14.1: 52 of 59 core families with their labels read; v1.15.0: 59 of 66 (the
# others take theirs from a function over the cloud provider's well-known labels).
MIN_CORE_LABELLED = 40
MIN_PROVIDER_NAMES = 30

# Metrics a provider change adds before it exports them, with (type, label names):
# accepted while the provider does not export them yet; once it does, this check fails
# until the entry is removed here, so the list cannot outlive its reason. Empty since
# karpenter_scaleway_reboots_total landed. `--no-pending` refuses them.
PENDING_PROVIDER = {}
# Labels the scrape adds to every series (Prometheus, prometheus-operator), and the
# usual external ones; a query may use them on any metric.
TARGET_LABELS = {"instance", "job", "namespace", "pod", "service", "container", "endpoint", "cluster", "node"}

# Known metrics (hack/metric_names.py): family name -> type (counter, gauge,
# histogram, summary, untyped), and family name -> its label names (None: unknown).


# ---------------------------------------------------------------------------
# PromQL: the metric names an expression selects, and the function around each

KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right", "offset", "bool",
    "and", "or", "unless", "atan2", "inf", "nan", "start", "end",
    # Aggregation operators: `sum by (le) (...)` puts the label list before the
    # parenthesis, so they are not always followed by one.
    "sum", "avg", "min", "max", "count", "group", "stddev", "stdvar", "topk", "bottomk",
    "quantile", "count_values", "limitk", "limit_ratio",
}
# Functions over a range of a counter (or of histogram series, which are counters).
COUNTER_FUNCS = {"rate", "irate", "increase", "resets"}
# Functions that may take any series.
ANY_FUNCS = {"absent", "absent_over_time", "present_over_time", "count_over_time", "timestamp", "changes"}
GAUGE_ONLY_FUNCS = {"deriv", "delta", "idelta", "predict_linear"}


def strip_strings(expr):
    out, i = [], 0
    while i < len(expr):
        c = expr[i]
        if c in "\"'`":
            j = i + 1
            while j < len(expr) and expr[j] != c:
                j += 2 if expr[j] == "\\" and c != "`" else 1
            out.append('""')
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def selectors(expr):
    """[(metric name, the innermost function around it or None)] for each metric a
    PromQL expression selects (aggregations such as sum() do not count as functions:
    `sum(rate(x[5m]))` gives rate). Grafana's `$variables` are taken as opaque values.
    Raises ValueError on what cannot be checked."""
    if re.search(r"__name__\s*=~", expr):
        raise ValueError("a regex on __name__ cannot be checked")
    named = re.findall(r"\{[^}]*__name__\s*=\s*\"([^\"]+)\"", expr)
    text = strip_strings(expr)
    text = re.sub(r"\{[^}]*\}", " ", text)  # label matchers
    text = re.sub(r"\[[^\]]*\]", " ", text)  # ranges and subqueries
    text = re.sub(r"\$\{[^}]*\}|\$\w+", " 1 ", text)  # Grafana variables
    out = [(n, None) for n in named]
    stack = []
    tokens = re.finditer(r"[a-zA-Z_:][a-zA-Z0-9_:]*|\d[\w.]*|\(|\)", text)
    prev = None
    for t in tokens:
        tok = t.group(0)
        if tok == "(":
            stack.append(prev if prev and not prev[0].isdigit() and prev not in KEYWORDS else None)
            if prev in ("by", "without", "on", "ignoring", "group_left", "group_right"):
                stack[-1] = "#labels"
            prev = None
            continue
        if tok == ")":
            if stack:
                stack.pop()
            prev = None
            continue
        nxt = text[t.end() :].lstrip()[:1]
        inside_labels = "#labels" in stack
        if tok[0].isdigit() or tok.lower() in KEYWORDS or inside_labels or nxt == "(":
            prev = tok.lower() if tok.lower() in KEYWORDS else tok
            continue
        func = next((f for f in reversed(stack) if f), None)
        out.append((tok, func))
        prev = tok
    return out


def label_uses(expr):
    """({metric name: label names of its matchers}, label names of the by, without,
    on, ignoring and group_* lists) of a PromQL expression."""
    text = strip_strings(expr)
    text = re.sub(r"\$\{[^}]*\}|\$\w+", "1", text)
    per_metric = {}
    for name, matchers in re.findall(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{([^}]*)\}", text):
        per_metric.setdefault(name, set()).update(
            n for n in re.findall(r"([a-zA-Z_]\w*)\s*(?:=~|!~|!=|=)", matchers) if n != "__name__"
        )
    grouping = set()
    for lst in re.findall(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\(([^)]*)\)", text):
        grouping.update(x.strip() for x in lst.split(",") if x.strip())
    return per_metric, grouping


def grafana_query_exprs(query):
    """PromQL inside a Grafana template variable query (label_values(metric, label),
    query_result(expr), or plain PromQL)."""
    if isinstance(query, dict):
        query = query.get("query", "")
    query = query.strip()
    m = re.fullmatch(r"label_values\((.*)\)", query, re.S)
    if m:
        args = m.group(1)
        if "," not in args:
            return []  # label_values(label): no metric
        return [args.rsplit(",", 1)[0]]
    m = re.fullmatch(r"query_result\((.*)\)", query, re.S)
    if m:
        return [m.group(1)]
    if query.startswith(("label_names(", "metrics(")):
        raise ValueError(f"{query!r} cannot be checked")
    return [query] if query else []


# ---------------------------------------------------------------------------
# The checks


# Grafana's own variables, and a value of each that Prometheus can parse.
GRAFANA_BUILTINS = {"__rate_interval": "5m", "__interval": "1m", "__range": "6h", "__range_s": "21600"}


def variable_values(dash):
    """A value of each variable an expression may use, for promtool to parse it."""
    values = dict(GRAFANA_BUILTINS)
    for v in dash.get("templating", {}).get("list", []):
        if v.get("type") == "custom":
            values[v["name"]] = str(v.get("query", "")).split(",")[0].strip()
        elif v.get("type") == "query":
            values[v["name"]] = ".*"
    return values


def promql_rules(dash):
    """The dashboard's expressions as recording rules, Grafana variables replaced, so
    that `promtool check rules` parses each with Prometheus' own parser."""
    values = variable_values(dash)
    rules = []
    _, exprs = check_dashboard(dash)
    for n, (where, expr, _) in enumerate(exprs):
        text = re.sub(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)", lambda m: values.get(m.group(1) or m.group(2), m.group(0)), expr)
        rules.append({"record": f"dashboard:expr_{n}", "expr": text, "labels": {"where": where}})
    return {"groups": [{"name": "dashboard-expressions", "rules": rules}]}


def walk_panels(panels):
    for p in panels:
        yield p
        yield from walk_panels(p.get("panels", []))


def check_dashboard(dash):
    problems, exprs = [], []
    if not isinstance(dash, dict):
        return ["the dashboard is not a JSON object"], []
    if not dash.get("uid"):
        problems.append("the dashboard has no fixed uid")
    if not isinstance(dash.get("schemaVersion"), int) or dash["schemaVersion"] < 39:
        problems.append(f"schemaVersion {dash.get('schemaVersion')!r} is below 39")
    if "id" in dash and dash["id"] is not None:
        problems.append("the dashboard must have id null (Grafana assigns it)")
    variables = dash.get("templating", {}).get("list", [])
    ds = [v for v in variables if v.get("name") == "datasource"]
    if len(ds) != 1 or ds[0].get("type") != "datasource" or ds[0].get("query") != "prometheus":
        problems.append("there must be one template variable `datasource` of type datasource, query prometheus")
    ds_ok = lambda d: isinstance(d, dict) and d.get("type") == "prometheus" and d.get("uid") == "${datasource}"
    for v in variables:
        if v.get("type") != "query":
            continue
        if not ds_ok(v.get("datasource")):
            problems.append(f"variable {v.get('name')}: datasource must be {{type: prometheus, uid: ${{datasource}}}}")
        try:
            query = v.get("query", "")
            query = query.get("query", "") if isinstance(query, dict) else query
            label = re.fullmatch(r"\s*label_values\(.*,\s*(\w+)\s*\)\s*", query, re.S)
            for e in grafana_query_exprs(query):
                exprs.append((f"variable {v.get('name')}", e, {label.group(1)} if label else set()))
        except ValueError as e:
            problems.append(f"variable {v.get('name')}: {e}")
    ids, placed = {}, []
    panels = list(walk_panels(dash.get("panels", [])))
    if not panels:
        problems.append("the dashboard has no panels")
    for p in panels:
        pid = p.get("id")
        where = f"panel {pid} {p.get('title')!r}"
        if not isinstance(pid, int):
            problems.append(f"{where}: no integer id")
        elif pid in ids:
            problems.append(f"{where}: id {pid} is also panel {ids[pid]!r}")
        else:
            ids[pid] = p.get("title")
        gp = p.get("gridPos")
        if not isinstance(gp, dict) or not all(isinstance(gp.get(k), int) for k in ("x", "y", "w", "h")):
            problems.append(f"{where}: no gridPos with integer x, y, w, h")
        elif gp["x"] < 0 or gp["w"] < 1 or gp["h"] < 1 or gp["x"] + gp["w"] > 24:
            problems.append(f"{where}: gridPos {gp} is outside the 24-column grid")
        else:
            for other, og in placed:
                if (gp["x"] < og["x"] + og["w"] and og["x"] < gp["x"] + gp["w"]
                        and gp["y"] < og["y"] + og["h"] and og["y"] < gp["y"] + gp["h"]):
                    problems.append(f"{where}: overlaps {other}")
            placed.append((where, gp))
        problems += check_doc_links([(where, p.get("description", ""))])
        if p.get("type") == "row":
            continue
        if not ds_ok(p.get("datasource")):
            problems.append(f"{where}: datasource must be {{type: prometheus, uid: ${{datasource}}}}")
        targets = p.get("targets") or []
        if p.get("type") not in ("text",) and not targets:
            problems.append(f"{where}: no targets")
        for t in targets:
            if "datasource" in t and not ds_ok(t["datasource"]):
                problems.append(f"{where} target {t.get('refId')}: datasource must be ${{datasource}}")
            if not t.get("expr"):
                problems.append(f"{where} target {t.get('refId')}: no expr")
                continue
            legend = set(re.findall(r"\{\{\s*(\w+)\s*\}\}", t.get("legendFormat", "")))
            exprs.append((f"{where} target {t.get('refId')}", t["expr"], legend))
    defined = set(variable_values(dash))
    for where, expr, _ in exprs:
        for name in re.findall(r"\$\{(\w+)(?::\w+)?\}|\$(\w+)", expr):
            name = name[0] or name[1]
            if name not in defined:
                problems.append(f"{where}: uses ${name}, which is no variable of the dashboard")
    return problems, exprs


def rule_docs(rendered):
    """The PrometheusRule objects of a converted `helm template` output: a JSON
    object, or a list of them."""
    docs = rendered if isinstance(rendered, list) else [rendered]
    return [d for d in docs if isinstance(d, dict) and d.get("kind") == "PrometheusRule"]


def check_rules(rendered):
    problems, exprs = [], []
    docs = rule_docs(rendered)
    if len(docs) != 1:
        return [f"expected one PrometheusRule, found {len(docs)}"], []
    doc = docs[0]
    if doc.get("apiVersion") != "monitoring.coreos.com/v1":
        problems.append(f"apiVersion {doc.get('apiVersion')!r} is not monitoring.coreos.com/v1")
    groups = (doc.get("spec") or {}).get("groups") or []
    if not groups:
        problems.append("the PrometheusRule has no groups")
    names = set()
    for g in groups:
        if not g.get("name") or not g.get("rules"):
            problems.append(f"group {g.get('name')!r}: needs a name and rules")
        for r in g.get("rules") or []:
            where = f"alert {r.get('alert')!r}"
            if not r.get("alert"):
                problems.append(f"a rule of group {g.get('name')!r} has no alert name (recording rules are not shipped)")
            elif r["alert"] in names:
                problems.append(f"{where}: defined twice")
            names.add(r.get("alert"))
            if not isinstance(r.get("expr"), str) or not r["expr"].strip():
                problems.append(f"{where}: no expr")
            else:
                used = set(re.findall(r"\$labels\.(\w+)", json.dumps(r.get("annotations") or {})))
                exprs.append((where, r["expr"], used))
            if not re.fullmatch(r"(\d+(ms|s|m|h|d|w|y))+", str(r.get("for", ""))):
                problems.append(f"{where}: no `for:` duration")
            if not (r.get("labels") or {}).get("severity"):
                problems.append(f"{where}: no labels.severity")
            ann = r.get("annotations") or {}
            for key in ("summary", "description"):
                if not ann.get(key):
                    problems.append(f"{where}: no annotations.{key}")
            problems += check_doc_links([(where, str(v)) for v in ann.values()])
    return problems, exprs


def heading_anchors(path):
    """GitHub's anchors of a Markdown file's headings."""
    anchors = set()
    for line in path.read_text().splitlines():
        m = re.match(r"#{1,6}\s+(.*)", line)
        if m:
            anchors.add(re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-"))
    return anchors


def check_doc_links(texts):
    """Every `docs/FILE.md#anchor` named in an alert or a panel exists."""
    problems = []
    for where, text in texts:
        for file, anchor in re.findall(r"\bdocs/([\w.-]+\.md)(?:#([\w-]+))?", text):
            path = ROOT / "docs" / file
            if not path.is_file():
                problems.append(f"{where}: links docs/{file}, which does not exist")
            elif anchor and anchor not in heading_anchors(path):
                problems.append(f"{where}: links docs/{file}#{anchor}, which is no heading of it")
    return problems


MATCHER_RE = re.compile(r'\s*([a-zA-Z_]\w*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"\s*,?')


def matcher_values(expr):
    """[(metric name, label, operator, value)] of the quoted matchers of an
    expression's selectors (a value with a Grafana variable is left out)."""
    out = []
    for m in re.finditer(r"([a-zA-Z_:][a-zA-Z0-9_:]*)\s*\{", expr):
        i = m.end()
        while i < len(expr) and expr[i] != "}":
            mm = MATCHER_RE.match(expr, i)
            if not mm:
                break
            if "$" not in mm.group(3):
                out.append((m.group(1), mm.group(1), mm.group(2), mm.group(3)))
            i = mm.end()
    return out


def check_values(where, expr, known, values):
    """The values an expression compares a core label with are ones core documents."""
    problems = []
    for name, label, op, value in matcher_values(expr):
        hit = known.get(name)
        allowed = (values.get(hit[0]) or {}).get(label) if hit else None
        if not allowed or value == "":
            continue
        if op in ("=~", "!~"):
            parts = value.split("|")
            if not all(re.fullmatch(r"[\w.-]+", x) for x in parts):
                continue  # a real regex: not checked
        else:
            parts = [value]
        bad = [x for x in parts if x not in allowed]
        if bad:
            problems.append(
                f"{where}: {name}{{{label}{op}\"{value}\"}}: core documents no {label} value "
                f"{', '.join(bad)} (it has {', '.join(sorted(allowed))})"
            )
    return problems


def check_exprs(exprs, known, pending, labels, values=None):
    """Every selected metric exists, is used as its type allows, and has the labels
    the expression, its legend or its alert text use (where its labels are known), and
    the label values core documents."""
    problems, unknown, used_pending = [], {}, set()
    for where, expr, extra_labels in exprs:
        try:
            sels = selectors(expr)
        except ValueError as e:
            problems.append(f"{where}: {e}")
            continue
        problems += check_values(where, expr, known, values or {})
        per_metric, grouping = label_uses(expr)
        all_known, allowed = True, set(TARGET_LABELS)
        for name, _ in sels:
            hit = known.get(name) or pending.get(name)
            have = labels.get(hit[0]) if hit else None
            if have is None:
                all_known = False
                continue
            extra = {"le"} if name.endswith("_bucket") else {"quantile"} if hit[1] == "summary" and name == hit[0] else set()
            allowed |= have | extra
            bad = per_metric.get(name, set()) - have - extra - TARGET_LABELS
            if bad:
                problems.append(f"{where}: {name} has no label {', '.join(sorted(bad))} (it has {', '.join(sorted(have)) or 'none'})")
        if all_known and sels and (grouping | extra_labels) - allowed:
            bad = sorted((grouping | extra_labels) - allowed)
            problems.append(f"{where}: label {', '.join(bad)} is on none of the metrics it uses")
        if not sels:
            problems.append(f"{where}: selects no metric: {expr}")
        for name, func in sels:
            hit = known.get(name)
            if hit is None and name in pending:
                hit = pending[name]
                used_pending.add(hit[0])
            if hit is None:
                unknown.setdefault(name, []).append(where)
                continue
            kind = hit[1]
            counter_like = kind == "counter" or name.endswith(("_bucket", "_sum", "_count")) and kind in ("histogram", "summary")
            if counter_like and func not in COUNTER_FUNCS | ANY_FUNCS:
                problems.append(f"{where}: {name} is a {kind} series; use it under rate() or increase(), not {func or 'bare'}")
            if not counter_like and kind != "untyped" and func in COUNTER_FUNCS:
                problems.append(f"{where}: {name} is a {kind}; {func}() is for counters")
            if counter_like and func in GAUGE_ONLY_FUNCS:
                problems.append(f"{where}: {func}() of the counter {name}")
        if "histogram_quantile" in expr:
            if not any(n.endswith("_bucket") for n, _ in sels):
                problems.append(f"{where}: histogram_quantile() over no _bucket series")
            if not re.search(r"\bby\s*\([^)]*\ble\b", expr):
                problems.append(f"{where}: histogram_quantile() must keep `le` (sum by (le, ...))")
    for name, wheres in sorted(unknown.items()):
        problems.append(f"unknown metric {name} (exported by neither the provider nor core), in: " + "; ".join(wheres))
    return problems, used_pending


def load_known(args):
    """(sample name -> (family, type), pending sample names, report lines, problems)."""
    report, problems = [], []
    if args.provider_metrics:
        provider, provider_labels = parse_exposition(pathlib.Path(args.provider_metrics).read_text())
        count = len(provider)
        report.append(f"provider: {len(provider)} metric families from {args.provider_metrics}")
    else:
        provider = provider_from_source(PROVIDER_SRC)
        provider_labels = {}  # label sets are not read from the source
        count = sum(1 for n in provider if not (n.endswith("_total") and n[: -len("_total")] in provider))
        report.append(
            f"provider: {count} names declared in controller/src (string literals; "
            "weaker than --provider-metrics with a real /metrics)"
        )
    if count < MIN_PROVIDER_NAMES:
        problems.append(f"found only {count} provider metric names (< {MIN_PROVIDER_NAMES}): the extraction broke")
    provider = {n: k for n, k in provider.items() if n.startswith("karpenter_scaleway_")}
    karpenter_dir = pathlib.Path(args.karpenter_dir) if args.karpenter_dir else karpenter_module_dir()
    core, core_labels, core_values, core_problems = core_families(karpenter_dir)
    problems += [f"core extraction: {p}" for p in core_problems]
    report.append(f"core: {len(core)} metric families declared in {karpenter_dir}")
    if len(core) < MIN_CORE_NAMES:
        problems.append(f"found only {len(core)} core metrics (< {MIN_CORE_NAMES}): the extraction broke")
    labelled = sum(1 for f in core if core_labels.get(f) is not None)
    if labelled < MIN_CORE_LABELLED:
        problems.append(
            f"read the labels of only {labelled} core metrics (< {MIN_CORE_LABELLED}): the extraction of "
            "their label lists broke (hack/metric_names.py)"
        )
    known = sample_names(core)
    known.update(sample_names(provider))
    labels = {**core_labels, **provider_labels}
    pending = {}
    if not args.no_pending:
        pending = sample_names({n: kind for n, (kind, _) in PENDING_PROVIDER.items()})
        labels.update({n: names for n, (_, names) in PENDING_PROVIDER.items() if n not in labels})
    problems += stale_pending(known, pending)
    core_with = sum(1 for f in core if core_labels.get(f) is not None)
    provider_with = sum(1 for f in provider if provider_labels.get(f) is not None)
    report.append(
        f"label names known for {core_with} of {len(core)} core families and {provider_with} provider families "
        "(the labels of the others are not checked); documented values for "
        f"{sum(len(v) for v in core_values.values())} core labels"
    )
    return known, pending, labels, core_values, report, problems


def stale_pending(known, pending):
    """A pending name the provider exports now must leave PENDING_PROVIDER."""
    stale = sorted({fam for n, (fam, _) in pending.items() if n in known})
    return [f"{fam} is exported now: remove it from PENDING_PROVIDER in {pathlib.Path(__file__).name}" for fam in stale]


def run_checks(dash, rules, known, pending, labels, values=None):
    problems, d_exprs = check_dashboard(dash)
    r_problems, r_exprs = check_rules(rules)
    problems += r_problems
    e_problems, used_pending = check_exprs(d_exprs + r_exprs, known, pending, labels, values)
    return problems + e_problems, len(d_exprs), len(r_exprs), used_pending


def self_test(dash, rules, known, pending, labels, values):
    """The check refuses broken copies of the real inputs (and passes the inputs
    themselves, else the mutations prove nothing)."""
    problems, *_ = run_checks(dash, rules, known, pending, labels, values)
    if problems:
        return ["the unmodified inputs do not pass, so the self-test proves nothing:"] + problems

    def first_target(d):
        return next(p for p in walk_panels(d["panels"]) if p.get("targets"))["targets"][0]

    def first_rule(r):
        return rule_docs(r)[0]["spec"]["groups"][0]["rules"][0]

    def panel_ids(d):
        return [p for p in walk_panels(d["panels"]) if p.get("type") != "row"]

    cases = [
        ("unknown metric in a panel", "unknown metric karpenter_scaleway_no_such_metric_total",
         lambda d, r: first_target(d).update(expr="sum(rate(karpenter_scaleway_no_such_metric_total[5m]))")),
        ("unknown metric in an alert", "unknown metric karpenter_nodeclaims_created",
         lambda d, r: first_rule(r).update(expr="rate(karpenter_nodeclaims_created[5m]) > 0")),
        ("duplicate panel id", "is also panel",
         lambda d, r: panel_ids(d)[1].update(id=panel_ids(d)[0]["id"])),
        ("hard-coded datasource", "datasource must be",
         lambda d, r: panel_ids(d)[0].update(datasource={"type": "prometheus", "uid": "P1809F7CD0C75ACF3"})),
        ("no gridPos", "no gridPos",
         lambda d, r: panel_ids(d)[0].pop("gridPos")),
        ("overlapping panels", "overlaps",
         lambda d, r: panel_ids(d)[1].update(gridPos=dict(panel_ids(d)[0]["gridPos"]))),
        ("rate() of a gauge", "is a gauge",
         lambda d, r: first_target(d).update(expr="rate(karpenter_scaleway_catalog_age_seconds[5m])")),
        ("a counter without rate()", "use it under rate()",
         lambda d, r: first_target(d).update(expr="sum(karpenter_nodeclaims_created_total)")),
        ("histogram_quantile without le", "must keep `le`",
         lambda d, r: first_target(d).update(
             expr="histogram_quantile(0.9, sum by (phase) (rate(karpenter_scaleway_install_phase_duration_seconds_bucket[5m])))")),
        ("an undefined variable", "which is no variable of the dashboard",
         lambda d, r: first_target(d).update(expr="sum(increase(karpenter_scaleway_churn_orders_total[$windw]))")),
        ("no datasource variable", "template variable `datasource`",
         lambda d, r: d["templating"].update(list=[v for v in d["templating"]["list"] if v["name"] != "datasource"])),
        ("unknown metric in a template variable", "unknown metric karpenter_nodepool_usage",
         lambda d, r: next(v for v in d["templating"]["list"] if v.get("type") == "query").update(
             query={"query": "label_values(karpenter_nodepool_usage, nodepool)", "refId": "x"})),
        ("alert linking a missing doc section", "which is no heading of it",
         lambda d, r: first_rule(r)["annotations"].update(
             description="see docs/troubleshooting.md#no-such-section")),
        ("a label the metric does not have", "has no label pod_name",
         lambda d, r: first_target(d).update(expr='sum(karpenter_nodeclaims_created_total{pod_name="x"})')),
        ("grouping by a label no metric has", "is on none of the metrics",
         lambda d, r: first_target(d).update(
             expr="sum by (offer) (rate(karpenter_scaleway_api_requests_total[5m]))", legendFormat="{{offer}}")),
        ("alert text naming a label no metric has", "is on none of the metrics",
         lambda d, r: first_rule(r).update(
             expr="sum by (nodepool) (increase(karpenter_nodeclaims_created_total[1h])) > 0",
             annotations={"summary": "{{ $labels.nodeclaim }} created", "description": "x"})),
        ("a core label value core does not document", "core documents no result value failed",
         lambda d, r: first_target(d).update(
             expr='sum(increase(karpenter_nodes_reboots_total{result="failed"}[1h]))')),
        ("a core label value in an alternation", "core documents no decision value restart",
         lambda d, r: first_rule(r).update(
             expr='sum(increase(karpenter_voluntary_disruption_decisions_total{decision=~"reboot|restart"}[1h])) > 0')),
        ("a label v1.15 did not add", "has no label nodepool",
         lambda d, r: first_target(d).update(
             expr='sum by (nodepool) (increase(karpenter_nodes_reboots_total{nodepool="a"}[1h]))')),
        ("alert without for", "no `for:`", lambda d, r: first_rule(r).pop("for")),
        ("alert without severity", "no labels.severity", lambda d, r: first_rule(r)["labels"].pop("severity")),
        ("alert without summary", "no annotations.summary", lambda d, r: first_rule(r)["annotations"].pop("summary")),
    ]
    failures = []
    # The exposition parser, on both text formats.
    prom, prom_labels = parse_exposition(
        "# HELP a_total x\n# TYPE a_total counter\na_total{e=\"GET /s/{id}\"} 1\n"
        "# TYPE h histogram\nh_bucket{le=\"+Inf\"} 0\nh_sum 0\nh_count 0\n# TYPE g gauge\ng 1\nu 2\n"
    )
    om, _ = parse_exposition("# TYPE c counter\nc_total 1\nc_created 1.7e9\n# TYPE s summary\ns_sum 1\ns_count 1\n# EOF\n")
    want_prom = {"a_total": "counter", "h": "histogram", "g": "gauge", "u": "untyped"}
    want_om = {"c": "counter", "s": "summary"}
    want_labels = {"a_total": {"e"}, "h": set(), "g": set(), "u": set()}
    if prom != want_prom or om != want_om or prom_labels != want_labels:
        failures.append(f"self-test: exposition parser: {prom} {prom_labels} != {want_prom} {want_labels} or {om} != {want_om}")
    elif not {"a_total", "h_bucket", "c_total", "s_count"} <= set(sample_names({**prom, **om})):
        failures.append("self-test: sample names of the parsed families are wrong")
    else:
        print("dashboard-check: self-test: Prometheus text and OpenMetrics parsed")
    failures += go_reader_self_test()
    pending_example = {"karpenter_scaleway_installs_in_progress": ("gauge", {"phase"})}
    if not stale_pending(
        sample_names({"karpenter_scaleway_installs_in_progress": "gauge"}),
        sample_names({n: kind for n, (kind, _) in pending_example.items()}),
    ):
        failures.append("self-test: a pending name the provider exports was not reported stale")
    else:
        print("dashboard-check: self-test: a pending name exported by the provider: refused")
    for what, want, mutate in cases:
        d, r = copy.deepcopy(dash), copy.deepcopy(rules)
        mutate(d, r)
        got, *_ = run_checks(d, r, known, pending, labels, values)
        if not any(want in p for p in got):
            failures.append(f"self-test: {what}: not refused with {want!r}; got: {got}")
        else:
            print(f"dashboard-check: self-test: {what}: refused ({next(p for p in got if want in p)[:110]})")
    # The JSON parse itself.
    try:
        json.loads(json.dumps(dash)[:-1])
        failures.append("self-test: a truncated dashboard parsed")
    except json.JSONDecodeError:
        print("dashboard-check: self-test: truncated JSON: refused")
    return failures


GO_V114 = """package metrics
const (
	Namespace = "karpenter"
	NodePoolLabel = "nodepool"
)
var Created = opmetrics.NewPrometheusCounter(
	crmetrics.Registry,
	prometheus.CounterOpts{
		Namespace: Namespace,
		Subsystem: "nodes",
		Name:      "created_total",
		Help:      "x, y {z}",
	},
	[]string{
		NodePoolLabel,
		"zone", // a comment
	},
)
"""
GO_V115 = """package reboot
import (
	opmetrics "github.com/awslabs/operatorpkg/metrics"
	"sigs.k8s.io/karpenter/pkg/metrics"
)
type Decision string
var RebootDecision Decision = "reboot"
const resultLabel = "result"
var Result = opmetrics.Label{
	Name: resultLabel,
	Help: "The outcome, e.g. `a, b`.",
	Values: []opmetrics.Value{
		{Name: string(RebootDecision), Help: "x"},
		{Name: strings.ToLower("Failed")},
	},
}
func labelNames() []opmetrics.Label {
	return []opmetrics.Label{metrics.NodePool, Result, opmetrics.Label{Name: "kind"}}
}
var Reboots = opmetrics.NewPrometheusCounter(
	crmetrics.Registry,
	prometheus.CounterOpts{Namespace: metrics.Namespace, Subsystem: metrics.NodeSubsystem, Name: "reboots_total"},
	labelNames(),
	opmetrics.Beta,
)
var Lifetime = opmetrics.NewPrometheusGauge(
	crmetrics.Registry,
	prometheus.GaugeOpts{Namespace: metrics.Namespace, Name: "lifetime"},
	lo.Map(wellKnown(), toLabel),
	opmetrics.Alpha,
)
"""
GO_V115_METRICS = """package metrics
const (
	Namespace = "karpenter"
	NodeSubsystem = "nodes"
	NodePoolLabel = "nodepool"
)
var (
	NodePool = opmetrics.Label{
		Name: NodePoolLabel,
		Help: "The NodePool.",
	}
)
"""


def go_reader_self_test():
    """hack/metric_names.py reads core's label lists in both forms: v1.14's []string
    of constants and v1.15's []opmetrics.Label (vars, inline Labels, a function
    returning the list, documented values); a list it cannot read stays unknown."""
    import tempfile

    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        root = pathlib.Path(tmp)
        for rel, text in (("v114/pkg/metrics/metrics.go", GO_V114),
                          ("v115/pkg/controllers/reboot/metrics.go", GO_V115),
                          ("v115/pkg/metrics/labels.go", GO_V115_METRICS)):
            (root / rel).parent.mkdir(parents=True, exist_ok=True)
            (root / rel).write_text(text)
        fam, labels, values, problems = core_families(root / "v114")
        want = ({"karpenter_nodes_created_total": "counter"}, {"karpenter_nodes_created_total": {"nodepool", "zone"}})
        if (fam, labels) != want or problems:
            failures.append(f"self-test: Go reader, v1.14 form: {fam} {labels} {problems}")
        fam, labels, values, problems = core_families(root / "v115")
        want = ({"karpenter_nodes_reboots_total": "counter", "karpenter_lifetime": "gauge"},
                {"karpenter_nodes_reboots_total": {"nodepool", "result", "kind"}, "karpenter_lifetime": None},
                {"karpenter_nodes_reboots_total": {"result": {"reboot", "failed"}}, "karpenter_lifetime": {}})
        if (fam, labels, values) != want or problems:
            failures.append(f"self-test: Go reader, v1.15 form: {fam} {labels} {values} {problems}")
    if not failures:
        print("dashboard-check: self-test: core's label lists read in the v1.14 and v1.15 forms")
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dashboard", default=str(DASHBOARD))
    ap.add_argument("--rules", required=True, help="the rendered PrometheusRule as JSON (one object or a list of documents)")
    ap.add_argument("--provider-metrics", help="a provider /metrics text (default: names declared in controller/src)")
    ap.add_argument("--karpenter-dir", help="sigs.k8s.io/karpenter module source (default: go list -m in bridge/)")
    ap.add_argument("--no-pending", action="store_true", help="refuse the PENDING_PROVIDER names too")
    ap.add_argument("--self-test", action="store_true", help="check that broken copies of the inputs are refused")
    ap.add_argument("--write-promql-rules", metavar="FILE",
                    help="also write the dashboard's expressions as a rules file for `promtool check rules`")
    args = ap.parse_args()

    try:
        dash = json.loads(pathlib.Path(args.dashboard).read_text())
    except (OSError, json.JSONDecodeError) as e:
        print(f"dashboard-check: FAIL: {args.dashboard}: {e}", file=sys.stderr)
        return 1
    try:
        rules = json.loads(pathlib.Path(args.rules).read_text())
    except (OSError, json.JSONDecodeError) as e:
        print(f"dashboard-check: FAIL: {args.rules}: {e}", file=sys.stderr)
        return 1
    known, pending, labels, values, report, problems = load_known(args)
    for line in report:
        print(f"dashboard-check: {line}")
    if problems:
        for p in problems:
            print(f"dashboard-check: FAIL: {p}", file=sys.stderr)
        return 1
    if args.self_test:
        failures = self_test(dash, rules, known, pending, labels, values)
        for f in failures:
            print(f"dashboard-check: FAIL: {f}", file=sys.stderr)
        if not failures:
            print("dashboard-check: self-test: every broken input refused")
        return 1 if failures else 0
    problems, n_dash, n_rules, used_pending = run_checks(dash, rules, known, pending, labels, values)
    if args.write_promql_rules:
        pathlib.Path(args.write_promql_rules).write_text(json.dumps(promql_rules(dash), indent=1))
    if problems:
        for p in problems:
            print(f"dashboard-check: FAIL: {p}", file=sys.stderr)
        return 1
    if used_pending:
        print(
            f"dashboard-check: {len(used_pending)} metric(s) not exported yet, accepted as PENDING_PROVIDER "
            f"(see PENDING_PROVIDER in {pathlib.Path(__file__).name}): {', '.join(sorted(used_pending))}"
        )
    print(f"dashboard-check: PASS: {n_dash} dashboard and {n_rules} alert expressions, every metric known")
    return 0


if __name__ == "__main__":
    sys.exit(main())
