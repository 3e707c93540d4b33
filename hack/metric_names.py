"""Where metric names come from, for hack/dashboard-check.py: a Prometheus text or
OpenMetrics exposition, the provider's source (the weaker fallback), and Karpenter
core's prometheus.*Opts declarations. Python 3 standard library only."""
import pathlib
import re
import subprocess

ROOT = pathlib.Path(__file__).resolve().parent.parent


def sample_names(families):
    """Maps each sample name a family exposes to (family, type)."""
    out = {}
    for family, kind in families.items():
        if kind == "histogram":
            names = [family + s for s in ("_bucket", "_sum", "_count")]
        elif kind == "summary":
            names = [family, family + "_sum", family + "_count"]
        elif kind == "counter":
            names = [family if family.endswith("_total") else family + "_total"]
        else:
            names = [family]
        for n in names:
            out[n] = (family, kind)
    return out


LABEL_PAIR_RE = re.compile(r'\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*=\s*"((?:[^"\\]|\\.)*)"\s*,?')


def sample_label_names(rest):
    """Label names of a sample line's `{...}` (values may hold `{`, `}`, `,`)."""
    names, i = set(), 1
    while i < len(rest) and rest[i] != "}":
        m = LABEL_PAIR_RE.match(rest, i)
        if not m:
            raise ValueError(f"unreadable labels: {rest[:80]}")
        names.add(m.group(1))
        i = m.end()
    return names


def parse_exposition(text):
    """Families of a Prometheus text or OpenMetrics exposition: `# TYPE` lines, and
    samples without one (untyped); and the label names their samples carry (None for
    a family with no sample)."""
    families, samples = {}, {}
    for line in text.splitlines():
        line = line.strip()
        if not line:
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            if len(parts) >= 4 and parts[1] == "TYPE":
                families[parts[2]] = parts[3].strip()
            continue
        m = re.match(r"([a-zA-Z_:][a-zA-Z0-9_:]*)", line)
        if m:
            rest = line[m.end() :]
            names = sample_label_names(rest) if rest.startswith("{") else set()
            samples.setdefault(m.group(1), set()).update(names - {"le", "quantile"})
    known = sample_names(families)
    for s in samples:
        if s not in known and not s.endswith("_created"):
            # A sample of an untyped family (or of a family whose TYPE line names
            # it without the suffix it is sent with).
            families.setdefault(s, "untyped")
    known = sample_names(families)
    labels = {f: None for f in families}
    for s, names in samples.items():
        if s in known:
            family = known[s][0]
            labels[family] = (labels[family] or set()) | names
    return families, labels


def provider_from_source(src):
    """The fallback: `"karpenter_scaleway_..."` string literals in the provider's
    source. A name ending in `_total` is a counter; one with "histogram" written
    near it, a histogram; any other is taken as a gauge, and also as a counter of
    that name plus `_total` (prometheus-client registers counters without the suffix
    and adds it on the wire), so this mode cannot tell a gauge from a counter there."""
    families = {}
    for path in sorted(src.rglob("*.rs")):
        text = path.read_text()
        for m in re.finditer(r'"(karpenter_scaleway_[a-z0-9_]+)"', text):
            name = m.group(1)
            if name.endswith(("_bucket", "_sum", "_count")) or name in families:
                continue
            around = text[max(0, m.start() - 300) : m.end() + 300].lower()
            if name.endswith("_total"):
                families[name] = "counter"
            elif "histogram" in around:
                families[name] = "histogram"
            else:
                families[name] = "gauge"
                families.setdefault(name + "_total", "counter")
    return families


OPTS_RE = re.compile(r"prometheus\.(Counter|Gauge|Histogram|Summary)Opts\s*\{")
CONST_RE = re.compile(r'^\s*([A-Za-z_]\w*)\s*(?:string\s*)?=\s*"([^"]*)"', re.M)
FIELD_RE = re.compile(r"\b(Namespace|Subsystem|Name)\s*:\s*(\"[^\"]*\"|[A-Za-z_][\w.]*)\s*,")


def go_consts(pkg_root):
    """String constants of every package: {package dir name: {ident: value}}. Only
    `const` declarations count (a `var` could change)."""
    consts = {}
    for path in pkg_root.rglob("*.go"):
        if path.name.endswith("_test.go"):
            continue
        text = path.read_text()
        blocks = re.findall(r"^const\s*\((.*?)^\)", text, re.M | re.S)
        blocks += re.findall(r"^const\s+(\w+\s*(?:string\s*)?=\s*\"[^\"]*\")", text, re.M)
        table = consts.setdefault(path.parent, {})
        for block in blocks:
            for name, value in CONST_RE.findall(block):
                table[name] = value
    return consts


def resolve(expr, pkg_dir, consts, imports):
    if expr.startswith('"'):
        return expr[1:-1]
    if "." in expr:
        alias, ident = expr.split(".", 1)
        target = imports.get(alias)
        if target is None:
            raise KeyError(f"package {alias} of {expr} is not imported")
        return consts[target][ident]
    return consts[pkg_dir][expr]


def core_families(karpenter_dir):
    """Metric families Karpenter core declares: {name: type}, {name: label names, or
    None when the list is not written out}, and the problems met."""
    pkg_root = karpenter_dir / "pkg"
    consts = go_consts(pkg_root)
    families, labels, problems = {}, {}, []
    for path in sorted(pkg_root.rglob("*.go")):
        if path.name.endswith("_test.go") or "/test/" in str(path):
            continue
        text = path.read_text()
        if not OPTS_RE.search(text):
            continue
        imports = {}
        for alias, imp in re.findall(r'^\s*(\w+\s+)?"sigs\.k8s\.io/karpenter/(pkg/[^"]+)"', text, re.M):
            target = pkg_root.parent / imp
            imports[alias.strip() or target.name] = target
        for m in OPTS_RE.finditer(text):
            depth, i = 1, m.end()
            while depth and i < len(text):
                depth += {"{": 1, "}": -1}.get(text[i], 0)
                i += 1
            body = text[m.end() : i - 1]
            fields = {}
            for key, expr in FIELD_RE.findall(body):
                try:
                    fields[key] = resolve(expr, path.parent, consts, imports)
                except KeyError as e:
                    problems.append(f"{path.relative_to(karpenter_dir)}: cannot resolve {key}: {expr} ({e})")
            if "Name" not in fields:
                problems.append(f"{path.relative_to(karpenter_dir)}: a {m.group(1)}Opts without a resolvable Name")
                continue
            # prometheus.BuildFQName: the non-empty parts joined by "_".
            name = "_".join(p for p in (fields.get("Namespace"), fields.get("Subsystem"), fields["Name"]) if p)
            families[name] = m.group(1).lower()
            # The label names: the []string{...} argument after the opts.
            lm = re.match(r"\s*,(?:\s*//[^\n]*)*\s*\[\]string\s*\{([^}]*)\}", text[i:])
            labels[name] = None
            if lm:
                try:
                    items = [x.strip() for x in lm.group(1).split(",") if x.strip()]
                    labels[name] = {resolve(x, path.parent, consts, imports) for x in items}
                except KeyError:
                    pass
    return families, labels, problems


def karpenter_module_dir():
    out = subprocess.run(
        ["go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/karpenter"],
        cwd=ROOT / "bridge", check=True, capture_output=True, text=True,
    ).stdout.strip()
    if not out:
        raise SystemExit("dashboard-check: sigs.k8s.io/karpenter is not in the module cache (cd bridge && go mod download)")
    return pathlib.Path(out)
