#!/usr/bin/env python3
"""A release has one version. Its source is the workspace version of Cargo.toml
(`[workspace.package] version`); this check fails, naming the file, wherever the
repository says otherwise:

* every workspace crate takes it (`version.workspace = true`), so the Rust binaries'
  `--version` (clap's `version`), the provider's version in the gRPC Info answer and its
  User-Agent are that version;
* Cargo.lock records it for every workspace crate (the images build with `--locked`);
* both charts' `version` and `appVersion` (the chart's default image tag is its
  appVersion, charts/karpenter-scaleway/templates/_helpers.tpl);
* the latest release heading of CHANGELOG.md (`## [X.Y.Z] - YYYY-MM-DD`, under
  `## [Unreleased]`);
* the bridge's `const version` (bridge/cmd/karpenter-bridge/version.go), which
  `karpenter-bridge --version` prints;
* with a tag argument (the release workflow passes the pushed tag), the tag is `v<version>`.

    hack/version-check.py [TAG]           check (TAG: v0.2.0)
    hack/version-check.py --notes X.Y.Z   print CHANGELOG.md's section of X.Y.Z (a release's body)
    --root DIR                            check another tree (the tests use copies)

Standard library only: the release workflow runs it on a bare runner.
"""
import argparse
import pathlib
import re
import sys
import tomllib

ROOT = pathlib.Path(__file__).resolve().parent.parent
CHARTS = ("charts/karpenter-crd/Chart.yaml", "charts/karpenter-scaleway/Chart.yaml")
CHANGELOG = "CHANGELOG.md"
BRIDGE = "bridge/cmd/karpenter-bridge/version.go"
BRIDGE_CONST = re.compile(r'^const version = "([^"]*)"$', re.MULTILINE)
SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)(-[0-9A-Za-z.-]+)?$")
RELEASE_HEADING = re.compile(r"^## \[([^\]]+)\](?: - (\d{4}-\d{2}-\d{2}))?\s*$")
CHART_KEY = re.compile(r"^(version|appVersion):\s*(.*?)\s*(?:#.*)?$")


class Mismatch(Exception):
    pass


def workspace_version(root):
    data = tomllib.loads((root / "Cargo.toml").read_text())
    try:
        version = data["workspace"]["package"]["version"]
    except KeyError:
        raise Mismatch("Cargo.toml: no [workspace.package] version")
    if not SEMVER.match(version):
        raise Mismatch(f"Cargo.toml: workspace version {version!r} is not X.Y.Z[-pre]")
    return version


def members(root):
    """(path of each member's Cargo.toml, its package name)."""
    out = []
    for member in tomllib.loads((root / "Cargo.toml").read_text())["workspace"]["members"]:
        if any(c in member for c in "*?["):
            raise Mismatch(f"Cargo.toml: member {member!r} is a glob; list members by path")
        path = f"{member}/Cargo.toml"
        out.append((path, tomllib.loads((root / path).read_text())["package"]["name"]))
    return out


def chart_versions(text):
    """The top-level version and appVersion of a Chart.yaml, quotes removed."""
    found = {}
    for line in text.splitlines():
        m = CHART_KEY.match(line)
        if m:
            if m.group(1) in found:
                raise ValueError(f"{m.group(1)} given twice")
            found[m.group(1)] = m.group(2).strip("\"'")
    return found


def changelog_release(text):
    """(first heading, latest release version, its date) of a Keep a Changelog file."""
    headings = [RELEASE_HEADING.match(line) for line in text.splitlines() if line.startswith("## ")]
    if not headings or headings[0] is None or headings[0].group(1) != "Unreleased":
        return False, None, None
    for m in headings[1:]:
        if m is None:
            continue
        return True, m.group(1), m.group(2)
    return True, None, None


def problems(root, tag=None):
    """Every disagreement with Cargo.toml's workspace version, one line each."""
    try:
        version = workspace_version(root)
        crates = members(root)
    except Mismatch as e:
        return None, [str(e)]
    out = []
    for path, _ in crates:
        package = tomllib.loads((root / path).read_text())["package"]
        if package.get("version") != {"workspace": True}:
            out.append(f"{path}: version is {package.get('version')!r}, not `version.workspace = true` "
                       f"(the workspace's {version})")
    lock = tomllib.loads((root / "Cargo.lock").read_text())
    for _, name in crates:
        local = [p for p in lock.get("package", []) if p["name"] == name and "source" not in p]
        if len(local) != 1:
            out.append(f"Cargo.lock: {len(local)} entries of the workspace crate {name}")
        elif local[0]["version"] != version:
            out.append(f"Cargo.lock: {name} is {local[0]['version']}, Cargo.toml's workspace version is "
                       f"{version} (run cargo build, or hack/release-version.py)")
    for path in CHARTS:
        try:
            found = chart_versions((root / path).read_text())
        except (OSError, ValueError) as e:
            out.append(f"{path}: {e}")
            continue
        for key in ("version", "appVersion"):
            if found.get(key) != version:
                out.append(f"{path}: {key} is {found.get(key)!r}, Cargo.toml's workspace version is {version}")
    try:
        consts = BRIDGE_CONST.findall((root / BRIDGE).read_text())
    except OSError as e:
        out.append(f"{BRIDGE}: {e}")
    else:
        if consts != [version]:
            out.append(f"{BRIDGE}: `const version` is {consts}, Cargo.toml's workspace version is {version}")
    try:
        text = (root / CHANGELOG).read_text()
    except OSError as e:
        out.append(f"{CHANGELOG}: {e}")
    else:
        unreleased_first, latest, date = changelog_release(text)
        if not unreleased_first:
            out.append(f"{CHANGELOG}: the first `## ` heading must be `## [Unreleased]`")
        elif latest != version:
            out.append(f"{CHANGELOG}: the latest release heading is {latest!r}, Cargo.toml's workspace "
                       f"version is {version} (expected `## [{version}] - YYYY-MM-DD`)")
        elif date is None:
            out.append(f"{CHANGELOG}: the heading of {version} has no date (`## [{version}] - YYYY-MM-DD`)")
    if tag is not None and tag != f"v{version}":
        out.append(f"tag {tag!r}: Cargo.toml's workspace version is {version}, so the tag must be v{version}")
    return version, out


def notes(root, version):
    """The body of CHANGELOG.md's section of `version`."""
    lines = (root / CHANGELOG).read_text().splitlines()
    start = next((i for i, line in enumerate(lines)
                  if (m := RELEASE_HEADING.match(line)) and m.group(1) == version), None)
    if start is None:
        raise Mismatch(f"{CHANGELOG}: no section `## [{version}]`")
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith("## ")), len(lines))
    body = "\n".join(lines[start + 1:end]).strip()
    if not body:
        raise Mismatch(f"{CHANGELOG}: the section of {version} is empty")
    return body


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("tag", nargs="?", help="a release tag, v<version>")
    parser.add_argument("--notes", metavar="VERSION", help="print the CHANGELOG section of VERSION")
    parser.add_argument("--root", type=pathlib.Path, default=ROOT)
    args = parser.parse_args()
    if args.notes:
        try:
            print(notes(args.root, args.notes))
        except Mismatch as e:
            sys.exit(f"version-check: {e}")
        return
    version, found = problems(args.root, args.tag)
    for line in found:
        print(f"version-check: {line}", file=sys.stderr)
    if found:
        sys.exit(f"version-check: FAIL ({len(found)} disagreement(s))")
    where = f"Cargo.toml, Cargo.lock, {len(members(args.root))} crates, {len(CHARTS)} charts, {BRIDGE}, {CHANGELOG}"
    print(f"version-check: {version} everywhere ({where}{', tag ' + args.tag if args.tag else ''})")


if __name__ == "__main__":
    main()
