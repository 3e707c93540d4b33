#!/usr/bin/env python3
"""Sets the release version everywhere hack/version-check.py looks, in one step:
Cargo.toml's workspace version, the workspace crates' entries in Cargo.lock, both
charts' `version` and `appVersion`, the bridge's `const version`, and a CHANGELOG.md heading `## [NEW] - DATE` put
under `## [Unreleased]`, so that what was written there becomes NEW's section. Then it
runs the check. It commits and tags nothing.

    hack/release-version.py 0.2.0 [--date YYYY-MM-DD]    (or `just release-version 0.2.0`)

Refuses a version that is not X.Y.Z[-pre], the current version, and an empty
Unreleased section (a release says what changed).
"""
import argparse
import datetime
import importlib.util
import pathlib
import re
import sys

HERE = pathlib.Path(__file__).resolve().parent
spec = importlib.util.spec_from_file_location("version_check", HERE / "version-check.py")
check = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check)


def sub_once(pattern, repl, text, what, flags=re.MULTILINE):
    new, n = re.subn(pattern, repl, text, count=1, flags=flags)
    if n != 1:
        sys.exit(f"release-version: {what}: not found")
    return new


def bump_cargo_toml(text, new):
    # The `version` line inside [workspace.package], whatever follows it.
    return sub_once(r'(^\[workspace\.package\]\n(?:(?!\[).*\n)*?version\s*=\s*)"[^"]*"',
                    rf'\g<1>"{new}"', text, "Cargo.toml: [workspace.package] version")


def bump_cargo_lock(text, names, new):
    # Only the workspace's own crates: entries without a `source` line.
    for name in names:
        text = sub_once(rf'(^\[\[package\]\]\nname = "{re.escape(name)}"\nversion = )"[^"]*"(\n(?!source))',
                        rf'\g<1>"{new}"\g<2>', text, f"Cargo.lock: workspace crate {name}")
    return text


def bump_chart(text, new, path):
    text = sub_once(r"^version:.*$", f"version: {new}", text, f"{path}: version")
    return sub_once(r"^appVersion:.*$", f'appVersion: "{new}"', text, f"{path}: appVersion")


def bump_changelog(text, new, date):
    lines = text.splitlines(keepends=True)
    heads = [i for i, line in enumerate(lines) if line.startswith("## ")]
    if not heads or not lines[heads[0]].startswith("## [Unreleased]"):
        sys.exit(f"release-version: {check.CHANGELOG}: the first `## ` heading must be `## [Unreleased]`")
    end = heads[1] if len(heads) > 1 else len(lines)
    if not "".join(lines[heads[0] + 1:end]).strip():
        sys.exit(f"release-version: {check.CHANGELOG}: nothing under [Unreleased]; write what changed first")
    at = heads[0] + 1
    return "".join(lines[:at] + ["\n", f"## [{new}] - {date}\n"] + lines[at:])


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("version", help="the new version, X.Y.Z[-pre] (no leading v)")
    parser.add_argument("--date", default=datetime.date.today().isoformat(), help="release date (default today)")
    parser.add_argument("--root", type=pathlib.Path, default=check.ROOT)
    args = parser.parse_args()
    root, new = args.root, args.version
    if not check.SEMVER.match(new):
        sys.exit(f"release-version: {new!r} is not X.Y.Z[-pre] (write 0.2.0, not v0.2.0)")
    if not re.fullmatch(r"\d{4}-\d{2}-\d{2}", args.date):
        sys.exit(f"release-version: --date {args.date!r} is not YYYY-MM-DD")
    current, found = check.problems(root)
    if found:
        sys.exit("release-version: the versions disagree already; fix these first:\n  " + "\n  ".join(found))
    if new == current:
        sys.exit(f"release-version: {new} is already the version")

    files = {"Cargo.toml": lambda t: bump_cargo_toml(t, new),
             "Cargo.lock": lambda t: bump_cargo_lock(t, [n for _, n in check.members(root)], new),
             check.CHANGELOG: lambda t: bump_changelog(t, new, args.date)}
    files[check.BRIDGE] = lambda t: sub_once(check.BRIDGE_CONST.pattern, f'const version = "{new}"', t,
                                             f"{check.BRIDGE}: const version")
    for path in check.CHARTS:
        files[path] = lambda t, p=path: bump_chart(t, new, p)
    # Everything computed before anything is written: a refusal leaves the tree as it was.
    written = {path: edit((root / path).read_text()) for path, edit in files.items()}
    for path, text in written.items():
        (root / path).write_text(text)
    version, found = check.problems(root, f"v{new}")
    if found:
        sys.exit("release-version: after the bump the check still fails:\n  " + "\n  ".join(found))
    print(f"release-version: {current} -> {new} in {', '.join(written)}")
    print(f"next: review the diff, commit, then `git tag v{new} && git push origin v{new}` "
          f"(.github/workflows/release.yml publishes on the tag)")


if __name__ == "__main__":
    main()
