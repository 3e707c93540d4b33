#!/usr/bin/env python3
"""Writes the values table of charts/karpenter-scaleway/README.md from the chart's
values.yaml (defaults and the comments above each key) and values.schema.json (which
keys are objects to descend into), between the README's BEGIN/END markers.

    hack/chart-values-doc.py          rewrite the table
    hack/chart-values-doc.py --check  fail when the table is stale (chart-check runs this)
"""
import json
import pathlib
import re
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent
CHART = ROOT / "charts" / "karpenter-scaleway"
README = CHART / "README.md"
BEGIN = "<!-- BEGIN values (hack/chart-values-doc.py) -->"
END = "<!-- END values -->"


def comments_by_path(lines):
    """Maps each key path (a tuple) to the comment block written just above it."""
    out, stack, pending = {}, [], []
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("#"):
            text = stripped.lstrip("#").strip()
            if text.startswith("--"):
                text = text[2:].strip()
            pending.append(text)
            continue
        m = re.match(r"^( *)([A-Za-z0-9_]+):", line)
        if not m:
            if not stripped:
                pending = []
            continue
        indent = len(m.group(1))
        while stack and stack[-1][0] >= indent:
            stack.pop()
        stack.append((indent, m.group(2)))
        path = tuple(k for _, k in stack)
        if pending:
            out[path] = " ".join(p for p in pending if p)
        pending = []
    return out


def rows(values, schema, comments, path=()):
    """(key, default, doc) per documented value. Objects the schema describes
    field by field are descended into (their own comment, if any, becomes a
    group row with no default); `resources` and free-form objects are one row."""
    for key, default in values.items():
        p = path + (key,)
        sub = (schema.get("properties") or {}).get(key, {})
        if "$ref" in sub:
            sub = SCHEMA["definitions"][sub["$ref"].rsplit("/", 1)[-1]]
        if isinstance(default, dict) and default and sub.get("properties") and key != "resources":
            if p in comments:
                yield ".".join(p), None, comments[p]
            yield from rows(default, sub, comments, p)
        else:
            yield ".".join(p), "`" + json.dumps(default) + "`", comments.get(p, "")


def table():
    text = (CHART / "values.yaml").read_text()
    comments = comments_by_path(text.splitlines())
    out = ["| value | default | meaning |", "|---|---|---|"]
    for key, shown, doc in rows(yaml.safe_load(text), SCHEMA, comments):
        doc = doc.replace("|", "\\|")
        out.append(f"| `{key}` | {shown or ''} | {doc} |")
    return "\n".join(out) + "\n"


SCHEMA = json.loads((CHART / "values.schema.json").read_text())


def main():
    generated = table()
    readme = README.read_text()
    if BEGIN not in readme or END not in readme:
        sys.exit(f"{README}: missing the {BEGIN} / {END} markers")
    head, rest = readme.split(BEGIN, 1)
    _, tail = rest.split(END, 1)
    new = f"{head}{BEGIN}\n{generated}{END}{tail}"
    if "--check" in sys.argv[1:]:
        if new != readme:
            sys.exit(f"{README.relative_to(ROOT)} is stale: run hack/chart-values-doc.py")
        print(f"chart-values-doc: {README.relative_to(ROOT)} matches values.yaml", file=sys.stderr)
    else:
        README.write_text(new)


if __name__ == "__main__":
    main()
