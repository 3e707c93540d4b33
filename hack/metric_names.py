"""Where metric names come from, for hack/dashboard-check.py: a Prometheus text or
OpenMetrics exposition, the provider's source (the weaker fallback), and Karpenter
core's metric declarations in the module's Go source (names, label names, documented
label values). Python 3 standard library only."""
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


# ---------------------------------------------------------------------------
# Karpenter core: its metric declarations, read from the module's Go source.
#
# Each metric is a call `opmetrics.NewPrometheus<Kind>(registry, prometheus.<Kind>Opts{
# Namespace, Subsystem, Name, ...}, LABELS[, STAGE])`. LABELS was a `[]string{...}` of
# label-name constants up to core v1.14.x; from v1.15.0 it is a `[]opmetrics.Label{...}`
# of Label values (`var NodePool = opmetrics.Label{Name: NodePoolLabel, Help: ...,
# Values: []opmetrics.Value{...}}`, or written inline), each with the label's name and,
# where core documents a closed set, its values; STAGE (opmetrics.Alpha, Beta, GA) is
# new in v1.15.0 too. Both forms are read. This is not a Go parser: it resolves string
# constants (of type string or of a named string type), package-level `var`s holding a
# Label, a Value or a []Value, `append(...)` of those, a same-package function with no
# arguments whose body is one `return`, and the few string functions core applies to
# its constants (string(), strings.ToLower, pretty.ToSnakeCase, strconv.FormatBool).
# What it cannot resolve leaves that family's labels (or a label's values) unknown,
# which the checks then skip; a literal label list it cannot resolve is a problem.
#
# Nothing here is a copy of core's list: it is read from the module the bridge
# requires at every run. Run on v1.14.1 and v1.15.0 when the bridge moved (2026-11):
# v1.14.1, 59 families and 52 label lists (the 51 the []string-only reader before it
# gave, with the same names and labels, and karpenter_pods_state's, now read from its
# labelNames()); v1.15.0, 66 families, 59 label lists and 45 labels with documented
# values. The []string-only reader found v1.15.0's 66 names and not one label list.

OPTS_RE = re.compile(r"prometheus\.(Counter|Gauge|Histogram|Summary)Opts\s*\{")
# A string constant: `X = "v"`, `X string = "v"`, `X Decision = "v"`.
CONST_RE = re.compile(r'^\s*([A-Za-z_]\w*)\s*(?:[A-Za-z_][\w.]*\s*)?=\s*"([^"]*)"', re.M)
FIELD_RE = re.compile(r"\b(Namespace|Subsystem|Name)\s*:\s*(\"[^\"]*\"|[A-Za-z_][\w.]*)\s*(?:,|\Z)")
IMPORT_RE = re.compile(r'^\s*(?:import\s+)?([A-Za-z_]\w*\s+|\.\s+)?"([^"]+)"\s*$', re.M)
KARPENTER_MODULE = "sigs.k8s.io/karpenter/"


class Unresolved(Exception):
    pass


def _skip(text, i):
    """The index after a string, rune or comment starting at i (i itself if none)."""
    c = text[i]
    if c in "\"'":
        j = i + 1
        while j < len(text) and text[j] != c:
            j += 2 if text[j] == "\\" else 1
        return j + 1
    if c == "`":
        return text.index("`", i + 1) + 1
    if text.startswith("//", i):
        j = text.find("\n", i)
        return len(text) if j < 0 else j
    if text.startswith("/*", i):
        return text.index("*/", i + 2) + 2
    return i


def _scan(text, i, stop):
    """From i, the index of the first character of `stop` at bracket depth 0 (outside
    strings and comments), or of the bracket that closes the enclosing one."""
    depth = 0
    while i < len(text):
        j = _skip(text, i)
        if j != i:
            i = j
            continue
        c = text[i]
        if c in "([{":
            depth += 1
        elif c in ")]}":
            if depth == 0:
                return i
            depth -= 1
        elif depth == 0 and c in stop:
            return i
        i += 1
    return i


def _strip_comments(text):
    out, i = [], 0
    while i < len(text):
        j = _skip(text, i)
        if j != i and text[i] == "/":
            out.append(" ")
        else:
            out.append(text[i:j] if j != i else text[i])
        i = max(j, i + 1)
    return "".join(out)


def _items(body, sep=","):
    """The top-level items of a bracketed list's body, comments removed."""
    items, i = [], 0
    while i < len(body):
        j = _scan(body, i, sep)
        item = _strip_comments(body[i:j]).strip()
        if item:
            items.append(item)
        i = j + 1
    return items


def _literal(expr, type_re):
    """The body of a composite literal `TYPE{...}` (TYPE matching type_re, or none:
    `{...}`), else None."""
    m = re.match(r"(?:" + type_re + r")?\s*\{", expr) if type_re else re.match(r"\{", expr)
    if not m:
        return None
    end = _scan(expr, m.end(), "")
    if expr[end + 1 :].strip():
        return None
    return expr[m.end() : end]


def _fields(body):
    out = {}
    for item in _items(body):
        m = re.match(r"([A-Za-z_]\w*)\s*:\s*(.*)\Z", item, re.S)
        if not m:
            raise Unresolved(f"positional field {item[:40]!r}")
        out[m.group(1)] = m.group(2).strip()
    return out


def _snake(s):
    s = re.sub(r"(.)([A-Z][a-z]+)", r"\1_\2", s)
    return re.sub(r"([a-z0-9])([A-Z])", r"\1_\2", s).lower()


class GoSource:
    """String constants, package-level `var`s and argument-less functions of every
    package under karpenter_dir/pkg (test files and pkg/test excluded), and an
    evaluator of the expressions metric declarations are written with."""

    def __init__(self, karpenter_dir):
        self.root = pathlib.Path(karpenter_dir)
        self.files = []  # (path, text, ctx)
        self.consts, self.vars, self.funcs = {}, {}, {}
        for path in sorted((self.root / "pkg").rglob("*.go")):
            if path.name.endswith("_test.go") or "/test/" in str(path):
                continue
            text = path.read_text()
            ctx = (path.parent, self._imports(text))
            self.files.append((path, text, ctx))
            consts = self.consts.setdefault(path.parent, {})
            blocks = [text[m.end() : _scan(text, m.end(), "")] for m in re.finditer(r"^const\s*\(", text, re.M)]
            blocks += re.findall(r"^const\s+(\w+\s*(?:[A-Za-z_][\w.]*\s*)?=\s*\"[^\"]*\")", text, re.M)
            for block in blocks:
                for name, value in CONST_RE.findall(block):
                    consts[name] = value
            pvars = self.vars.setdefault(path.parent, {})
            for m in re.finditer(r"^var\s*(\()?", text, re.M):
                if m.group(1):
                    body = text[m.end() : _scan(text, m.end(), "")]
                    stmts = _items(body, "\n;")
                else:
                    stmts = [_strip_comments(text[m.end() : _scan(text, m.end(), "\n;")]).strip()]
                for stmt in stmts:
                    d = re.match(r"([A-Za-z_]\w*)\s*(?:[^=\s][^=]*)?=\s*(.+)\Z", stmt, re.S)
                    if d:
                        pvars[d.group(1)] = (d.group(2).strip(), ctx)
            pfuncs = self.funcs.setdefault(path.parent, {})
            for m in re.finditer(r"^func\s+([A-Za-z_]\w*)\(\)[^{\n]*\{", text, re.M):
                body = _strip_comments(text[m.end() : _scan(text, m.end(), "")]).strip()
                r = re.match(r"return\s+(.+)\Z", body, re.S)
                if r and _scan(r.group(1), 0, "\n;") >= len(r.group(1).rstrip()):
                    pfuncs[m.group(1)] = (r.group(1).strip(), ctx)

    def _imports(self, text):
        imports = {}
        for block in re.findall(r"^import\s*\((.*?)^\)", text, re.M | re.S) + re.findall(r"^import\s+(.*)$", text, re.M):
            for alias, imp in IMPORT_RE.findall(block):
                alias = alias.strip()
                if imp.startswith(KARPENTER_MODULE):
                    target = self.root / imp[len(KARPENTER_MODULE) :]
                    imports[alias or target.name] = target
                else:
                    imports[alias or imp.rsplit("/", 1)[-1]] = imp
        return imports

    def _ref(self, expr, ctx):
        """(package dir, identifier) of `X` or `pkg.X`, else None."""
        m = re.fullmatch(r"(?:([A-Za-z_]\w*)\.)?([A-Za-z_]\w*)", expr)
        if not m:
            return None
        if m.group(1) is None:
            return ctx[0], m.group(2)
        target = ctx[1].get(m.group(1))
        if not isinstance(target, pathlib.Path):
            return None
        return target, m.group(2)

    def _var(self, expr, ctx):
        ref = self._ref(expr, ctx)
        if ref is None or ref[1] not in self.vars.get(ref[0], {}):
            raise Unresolved(expr)
        return self.vars[ref[0]][ref[1]]

    def string(self, expr, ctx, depth=0):
        expr = expr.strip()
        if depth > 20:
            raise Unresolved(expr)
        if re.fullmatch(r'"(?:[^"\\]|\\.)*"', expr):
            return expr[1:-1].encode().decode("unicode_escape")
        if re.fullmatch(r"`[^`]*`", expr):
            return expr[1:-1]
        m = re.fullmatch(r"([\w.]+)\((.*)\)", expr, re.S)
        if m:
            fn, arg = m.groups()
            if fn == "strconv.FormatBool" and arg.strip() in ("true", "false"):
                return arg.strip()
            inner = self.string(arg, ctx, depth + 1)
            if fn == "string":
                return inner
            if fn == "strings.ToLower":
                return inner.lower()
            if fn.endswith("pretty.ToSnakeCase") or fn == "ToSnakeCase":
                return _snake(inner)
            raise Unresolved(expr)
        m = re.fullmatch(r"(.+)\.Name", expr)
        if m:
            return self.value(m.group(1), ctx, depth + 1)
        ref = self._ref(expr, ctx)
        if ref and ref[1] in self.consts.get(ref[0], {}):
            return self.consts[ref[0]][ref[1]]
        # A package-level var initialised with a string literal (the disruption
        # decisions are `var NoOpDecision Decision = "no-op"`): read for label values
        # only in practice; core's metric names are constants.
        if ref and ref[1] in self.vars.get(ref[0], {}):
            vexpr, vctx = self.vars[ref[0]][ref[1]]
            if re.fullmatch(r'"(?:[^"\\]|\\.)*"', vexpr):
                return self.string(vexpr, vctx, depth + 1)
        raise Unresolved(expr)

    def value(self, expr, ctx, depth=0):
        """The name of an opmetrics.Value (a literal or a var)."""
        body = _literal(expr, r"opmetrics\.Value|docs\.Value")
        if body is None:
            expr, ctx = self._var(expr, ctx)
            return self.value(expr, ctx, depth + 1)
        fields = _fields(body)
        if "Name" not in fields:
            raise Unresolved(expr)
        return self.string(fields["Name"], ctx, depth + 1)

    def values(self, expr, ctx, depth=0):
        """The value names of a []opmetrics.Value expression."""
        if depth > 20:
            raise Unresolved(expr)
        expr = expr.strip()
        body = _literal(expr, r"\[\]opmetrics\.Value|\[\]docs\.Value")
        if body is not None:
            return {self.value(v if not v.startswith("{") else v, ctx, depth + 1) for v in _items(body)}
        m = re.fullmatch(r"append\((.*)\)", expr, re.S)
        if m:
            out = set()
            for part in _items(m.group(1)):
                out |= self.values(part[:-3] if part.endswith("...") else part, ctx, depth + 1)
            return out
        expr, ctx = self._var(expr, ctx)
        return self.values(expr, ctx, depth + 1)

    def label(self, expr, ctx, depth=0):
        """(name, value names or None) of an opmetrics.Label expression, or of a
        label-name string (the v1.14 form)."""
        if depth > 20:
            raise Unresolved(expr)
        body = _literal(expr, r"opmetrics\.Label")
        if body is None:
            try:
                return self.string(expr, ctx, depth + 1), None
            except Unresolved:
                pass
            expr, ctx = self._var(expr, ctx)
            return self.label(expr, ctx, depth + 1)
        fields = _fields(body)
        name = self.string(fields.get("Name", '""'), ctx, depth + 1)
        if not name:
            raise Unresolved(expr)
        values = None
        if "Values" in fields:
            try:
                values = self.values(fields["Values"], ctx, depth + 1)
            except (Unresolved, KeyError):
                values = None
        return name, values

    def label_list(self, expr, ctx, depth=0):
        """{name: value names or None} of a metric's label argument; Unresolved when
        it is not written in a form read here (a literal list that fails raises
        ValueError)."""
        if depth > 20:
            raise Unresolved(expr)
        expr = expr.strip()
        body = _literal(expr, r"\[\]opmetrics\.Label|\[\]string")
        if body is not None:
            out = {}
            for item in _items(body):
                try:
                    name, values = self.label(item, ctx, depth + 1)
                except (Unresolved, KeyError) as e:
                    raise ValueError(f"label {item!r} of a literal list: {e}")
                out[name] = values
            return out
        m = re.fullmatch(r"append\((.*)\)", expr, re.S)
        if m:
            out = {}
            for part in _items(m.group(1)):
                if part.endswith("..."):
                    out.update(self.label_list(part[:-3], ctx, depth + 1))
                else:
                    name, values = self.label(part, ctx, depth + 1)
                    out[name] = values
            return out
        m = re.fullmatch(r"([A-Za-z_]\w*)\(\)", expr)
        if m and m.group(1) in self.funcs.get(ctx[0], {}):
            fexpr, fctx = self.funcs[ctx[0]][m.group(1)]
            return self.label_list(fexpr, fctx, depth + 1)
        raise Unresolved(expr)


def core_metrics(karpenter_dir):
    """Metric families Karpenter core declares: {name: {"type", "labels" (label names,
    or None when not read), "values" ({label: documented value names or None}),
    "stage" (Alpha, Beta, GA; None before v1.15), "where"}}, and the problems met."""
    src = GoSource(karpenter_dir)
    out, problems = {}, []
    for path, text, ctx in src.files:
        where = str(path.relative_to(src.root))
        for m in OPTS_RE.finditer(text):
            end = _scan(text, m.end(), "")
            body = text[m.end() : end]
            fields = {}
            for key, expr in FIELD_RE.findall(body):
                try:
                    fields[key] = src.string(expr, ctx)
                except (Unresolved, KeyError) as e:
                    problems.append(f"{where}: cannot resolve {key}: {expr} ({e})")
            if "Name" not in fields:
                problems.append(f"{where}: a {m.group(1)}Opts without a resolvable Name")
                continue
            # prometheus.BuildFQName: the non-empty parts joined by "_".
            name = "_".join(p for p in (fields.get("Namespace"), fields.get("Subsystem"), fields["Name"]) if p)
            # The arguments after the opts: the labels, then (v1.15) the stage.
            args = []
            i = end + 1
            while i < len(text):
                if not text[i:].lstrip().startswith(","):
                    break
                i = text.index(",", i) + 1
                j = _scan(text, i, ",")
                arg = _strip_comments(text[i:j]).strip()
                if arg:
                    args.append(arg)
                i = j
            family = {"type": m.group(1).lower(), "labels": None, "values": {}, "stage": None, "where": where}
            if args:
                try:
                    labels = src.label_list(args[0], ctx)
                    family["labels"] = set(labels)
                    family["values"] = labels
                except Unresolved:
                    pass
                except ValueError as e:
                    problems.append(f"{where}: {name}: {e}")
            if len(args) > 1:
                family["stage"] = args[1].rsplit(".", 1)[-1]
            if name in out:
                problems.append(f"{where}: {name} is also declared in {out[name]['where']}")
            out[name] = family
    return out, problems


def core_families(karpenter_dir):
    """Metric families Karpenter core declares: {name: type}, {name: label names, or
    None when the list is not written out}, {name: {label: its documented values, or
    None}}, and the problems met."""
    metrics, problems = core_metrics(karpenter_dir)
    families = {n: f["type"] for n, f in metrics.items()}
    labels = {n: f["labels"] for n, f in metrics.items()}
    values = {n: {k: v for k, v in f["values"].items() if v is not None} for n, f in metrics.items()}
    return families, labels, values, problems


def karpenter_module_dir():
    out = subprocess.run(
        ["go", "list", "-m", "-f", "{{.Dir}}", "sigs.k8s.io/karpenter"],
        cwd=ROOT / "bridge", check=True, capture_output=True, text=True,
    ).stdout.strip()
    if not out:
        raise SystemExit("dashboard-check: sigs.k8s.io/karpenter is not in the module cache (cd bridge && go mod download)")
    return pathlib.Path(out)


if __name__ == "__main__":
    # `python3 hack/metric_names.py core-families`: the metric families Karpenter
    # core declares at the bridge's version, "name type" per line (the e2e
    # harness uses it to tell a counter with no sample yet from a wrong name).
    import sys

    if sys.argv[1:] != ["core-families"]:
        raise SystemExit("usage: metric_names.py core-families")
    metrics, problems = core_metrics(karpenter_module_dir())
    if problems:
        raise SystemExit("metric_names: " + "; ".join(problems))
    for name in sorted(metrics):
        print(name, metrics[name]["type"])
