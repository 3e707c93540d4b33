#!/usr/bin/env python3
"""Writes docs/nodeclass-reference.md and docs/instance-nodeclass-reference.md
from the OpenAPI schemas of the ScalewayElasticMetalNodeClass and
ScalewayInstanceNodeClass CRDs, as printed by `karpenter-scaleway crd <Kind>`
(itself generated from controller/src/nodeclass/types.rs and
controller/src/nodeclass/instance/types.rs): one table per object of the
schema, with each field's type, whether it is required, its default, its
description (the Rust doc comment) and its validation (enum, pattern, lengths,
item counts, CEL rules with their messages).

    hack/nodeclass-doc.py                 rewrite both pages
    hack/nodeclass-doc.py --check         fail when a committed page is stale
                                          (hack/chart-check.sh runs this)
    hack/nodeclass-doc.py --crd FILE      read one CRD from FILE instead of the binary
                                          (the page of its kind only)

    KPS_PROVIDER_BIN   karpenter-scaleway binary to run `crd` with (default:
                       `cargo run -p karpenter-scaleway`, which rebuilds it if stale)

Fields without a description are listed on stderr: the fix is a doc comment on
the Rust type, never an edit of the generated page.
"""
import json
import os
import pathlib
import subprocess
import sys

import yaml

ROOT = pathlib.Path(__file__).resolve().parent.parent


class Kind:
    """One NodeClass kind: its page, the Rust file its schema comes from and
    the guide that explains it."""

    def __init__(self, name, page, source, guide):
        self.name, self.page, self.source, self.guide = name, ROOT / "docs" / page, source, guide


KINDS = [
    Kind("ScalewayElasticMetalNodeClass", "nodeclass-reference.md",
         "controller/src/nodeclass/types.rs", "nodeclass.md"),
    Kind("ScalewayInstanceNodeClass", "instance-nodeclass-reference.md",
         "controller/src/nodeclass/instance/types.rs", "instance-nodeclass.md"),
]


def load_crds(argv):
    """(Kind, CRD) of every kind, or of the one CRD given with --crd."""
    if "--crd" in argv:
        i = argv.index("--crd")
        if i + 1 >= len(argv):
            sys.exit("--crd needs a file")
        texts = [pathlib.Path(argv[i + 1]).read_text()]
    else:
        binary = os.environ.get("KPS_PROVIDER_BIN")
        base = [binary, "crd"] if binary else [
            "cargo", "run", "--quiet", "-p", "karpenter-scaleway", "--bin", "karpenter-scaleway", "--", "crd"]
        texts = [subprocess.run(base + [k.name], cwd=ROOT, check=True, capture_output=True, text=True).stdout
                 for k in KINDS]
    out = []
    for text in texts:
        crd = yaml.safe_load(text)
        kind = next((k for k in KINDS if crd and crd.get("kind") == "CustomResourceDefinition"
                     and crd["spec"]["names"]["kind"] == k.name), None)
        if kind is None:
            sys.exit("not the CustomResourceDefinition of " + " or ".join(k.name for k in KINDS))
        out.append((kind, crd))
    return out


def one_line(text):
    """A description as one table cell: paragraphs joined, pipes escaped."""
    return " ".join(line.strip() for line in text.strip().splitlines() if line.strip()).replace("|", "\\|")


def code(value):
    """A value as inline code: strings bare (`hourly`), the empty string and
    everything else as JSON (`""`, `[]`)."""
    return f"`{value}`" if isinstance(value, str) and value else "`" + json.dumps(value) + "`"


def anchor(path):
    """The GitHub anchor of a section titled `path` (backquoted)."""
    return "".join(c for c in path.lower() if c.isalnum() or c in "-_ ").replace(" ", "-")


class Page:
    def __init__(self, kind):
        self.kind = kind
        self.sections = []  # (path, schema), in the order they are met
        self.undocumented = []

    def walk(self, path, schema):
        """Registers the object at `path` and every object below it, depth first."""
        self.sections.append((path, schema))
        for name, sub in (schema.get("properties") or {}).items():
            child = self.object_path(path, name, sub)
            if child:
                self.walk(child[0], child[1])

    @staticmethod
    def object_path(path, name, sub):
        """(path, schema) of the object a field holds directly or as array items."""
        if sub.get("type") == "object" and sub.get("properties"):
            return f"{path}.{name}", sub
        items = sub.get("items") or {}
        if sub.get("type") == "array" and items.get("type") == "object" and items.get("properties"):
            return f"{path}.{name}[]", items
        return None

    def type_of(self, path, name, sub):
        child = self.object_path(path, name, sub)
        if child:
            label = "[]object" if child[0].endswith("[]") else "object"
            return f"[{label}](#{anchor(child[0])})"
        t = sub.get("type", "any")
        if t == "array":
            return "[]" + (sub.get("items") or {}).get("type", "any")
        if t == "object" and isinstance(sub.get("additionalProperties"), dict):
            return "map[string]" + sub["additionalProperties"].get("type", "any")
        if sub.get("format"):
            return f"{t} ({sub['format']})"
        return t

    @staticmethod
    def validation(sub, items=True):
        """Constraints on a value, in words, and those on its array items unless
        `items` is false (items that have their own section)."""
        out = []
        parts = [("", sub)] + ([("each item: ", sub.get("items") or {})] if items else [])
        for where, s in parts:
            if "enum" in s:
                out.append(where + "one of " + ", ".join(code(v) for v in s["enum"]))
            if "pattern" in s:
                out.append(where + f"matches `{s['pattern']}`")
            if "minLength" in s and "maxLength" in s:
                out.append(where + f"{s['minLength']}–{s['maxLength']} characters")
            elif "minLength" in s:
                out.append(where + f"at least {s['minLength']} characters")
            elif "maxLength" in s:
                out.append(where + f"at most {s['maxLength']} characters")
            if "minimum" in s:
                out.append(where + f"≥ {s['minimum']}")
            if "maximum" in s:
                out.append(where + f"≤ {s['maximum']}")
            if "minItems" in s:
                out.append(where + f"at least {s['minItems']} items")
            if "maxItems" in s:
                out.append(where + f"at most {s['maxItems']} items")
            for rule in s.get("x-kubernetes-validations") or []:
                out.append(where + cel(rule))
        return "; ".join(out).replace("|", "\\|")

    def table(self, path, schema):
        required = set(schema.get("required") or [])
        rows = ["| field | type | required | default | description | validation |", "|---|---|---|---|---|---|"]
        for name, sub in (schema.get("properties") or {}).items():
            doc = sub.get("description") or ""
            child = self.object_path(path, name, sub)
            if not doc and child:
                doc = child[1].get("description") or ""
            if not doc:
                self.undocumented.append(f"{path}.{name}")
            req = "yes" if name in required else ""
            default = code(sub["default"]) if "default" in sub else ""
            # An object with its own section lists its rules there.
            if not child:
                checks = self.validation(sub)
            elif child[0].endswith("[]"):
                checks = self.validation(sub, items=False)
            else:
                checks = ""
            rows.append(
                f"| `{name}` | {self.type_of(path, name, sub)} | {req} | {default} | {one_line(doc)} | {checks} |")
        return rows

    def render(self, crd):
        names = crd["spec"]["names"]
        version = next(v for v in crd["spec"]["versions"] if v.get("storage"))
        root = version["schema"]["openAPIV3Schema"]
        out = [
            f"# `{self.kind.name}` field reference",
            "",
            "<!-- Generated by hack/nodeclass-doc.py from `karpenter-scaleway crd`"
            f" ({self.kind.source}). Do not edit: change the doc comments"
            " of the Rust types, then run hack/nodeclass-doc.py. -->",
            "",
            f"`{crd['spec']['group']}/{version['name']}`, {crd['spec']['scope'].lower()}-scoped"
            + (", short name " + ", ".join(f"`{n}`" for n in names.get("shortNames", [])) if names.get("shortNames") else "")
            + (", categories " + ", ".join(f"`{n}`" for n in names.get("categories", [])) if names.get("categories") else "")
            + ". What the fields do together, billing and the status conditions are explained in"
            f" [{self.kind.guide}]({self.kind.guide}); this page is the schema the API server enforces.",
            "",
            "A field marked *required* must be present; a default is what the API server"
            " stores when the field is omitted. Validation is checked by the API server when"
            " the object is written (`kubectl apply` fails with the message shown); semantic"
            " checks (Secrets exist, the SSH key is registered) are the conditions of the"
            f" status, see [{self.kind.guide}]({self.kind.guide}#status).",
            "",
        ]
        columns = version.get("additionalPrinterColumns") or []
        if columns:
            out += ["`kubectl get " + names["plural"] + "` shows: "
                    + ", ".join(f"`{c['name']}` (`{c['jsonPath']}`)" for c in columns) + ".", ""]
        self.walk("", root)
        for path, schema in self.sections:
            title = path.lstrip(".") or self.kind.name
            out.append(f"## `{title}`")
            out.append("")
            if path and schema.get("description"):
                out += [one_line(schema["description"]), ""]
            rules = schema.get("x-kubernetes-validations") or []
            if rules:
                out.append("Rules on the whole object:")
                out.append("")
                out += [f"* {cel(r)}" for r in rules]
                out.append("")
            out += self.table(path, schema)
            out.append("")
        return "\n".join(out)


def cel(rule):
    """A CEL rule as `message` (rule), or the rule alone when it has no message."""
    text = f"`{rule['rule']}`"
    if rule.get("message"):
        text = f"“{rule['message']}” (CEL `{rule['rule']}`)"
    if rule.get("fieldPath"):
        text += f" on `{rule['fieldPath']}`"
    return text


def main():
    argv = sys.argv[1:]
    stale = []
    for kind, crd in load_crds(argv):
        page = Page(kind)
        text = page.render(crd)
        if page.undocumented:
            fields = ", ".join(f.lstrip(".") for f in page.undocumented)
            print(f"nodeclass-doc: {len(page.undocumented)} fields have no description (add doc "
                  f"comments in {kind.source}): {fields}", file=sys.stderr)
        rel = kind.page.relative_to(ROOT)
        if "--check" in argv:
            if not kind.page.exists() or kind.page.read_text() != text:
                stale.append(str(rel))
            else:
                print(f"nodeclass-doc: {rel} matches karpenter-scaleway crd {kind.name}", file=sys.stderr)
        else:
            kind.page.write_text(text)
            print(f"nodeclass-doc: wrote {rel}", file=sys.stderr)
    if stale:
        sys.exit(f"nodeclass-doc: {', '.join(stale)} stale: run hack/nodeclass-doc.py")


if __name__ == "__main__":
    main()
