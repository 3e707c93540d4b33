#!/usr/bin/env python3
"""Tests of hack/version-check.py (one version across the repository) and
hack/release-version.py (setting it in one step), run as a user runs them, on copies of
the repository's own files. `python3 hack/version_check_test.py`."""

import os
import pathlib
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
import unittest

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
CHECK = HERE / "version-check.py"
BUMP = HERE / "release-version.py"
CHARTS = ("charts/karpenter-crd/Chart.yaml", "charts/karpenter-scaleway/Chart.yaml")
BRIDGE = "bridge/cmd/karpenter-bridge/version.go"


def run(script, *args):
    return subprocess.run([sys.executable, str(script), *args], capture_output=True, text=True)


class Tree(unittest.TestCase):
    """A copy of every file the check reads, in a temporary directory."""

    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.root = pathlib.Path(self.tmp.name)
        members = tomllib.loads((ROOT / "Cargo.toml").read_text())["workspace"]["members"]
        for path in ["Cargo.toml", "Cargo.lock", "CHANGELOG.md", BRIDGE, *CHARTS, *(f"{m}/Cargo.toml" for m in members)]:
            (self.root / path).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(ROOT / path, self.root / path)
        self.version = tomllib.loads((ROOT / "Cargo.toml").read_text())["workspace"]["package"]["version"]

    def tearDown(self):
        self.tmp.cleanup()

    def check(self, *args):
        return run(CHECK, "--root", str(self.root), *args)

    def edit(self, path, old, new):
        text = (self.root / path).read_text()
        self.assertIn(old, text, path)
        (self.root / path).write_text(text.replace(old, new, 1))

    def assert_fails_naming(self, path, *args):
        result = self.check(*args)
        self.assertNotEqual(result.returncode, 0, f"the check passed after changing {path}: {result.stdout}")
        self.assertIn(f"version-check: {path}:", result.stderr)
        return result


class Check(Tree):
    def test_the_repository_agrees(self):
        result = run(CHECK)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertIn(f"{self.version} everywhere", result.stdout)

    def test_the_copy_agrees_and_with_its_tag(self):
        self.assertEqual(self.check().returncode, 0, self.check().stderr)
        self.assertEqual(self.check(f"v{self.version}").returncode, 0)

    def test_a_chart_version_or_app_version_that_differs_fails(self):
        for path in CHARTS:
            for key in ("version", "appVersion"):
                with self.subTest(path=path, key=key):
                    before = (self.root / path).read_text()
                    line = next(l for l in before.splitlines() if l.startswith(f"{key}:"))
                    self.edit(path, line, f'{key}: "9.9.9"')
                    result = self.assert_fails_naming(path)
                    self.assertIn(f"{key} is '9.9.9'", result.stderr)
                    (self.root / path).write_text(before)

    def test_the_workspace_version_alone_changed_fails_at_every_other_place(self):
        self.edit("Cargo.toml", f'version = "{self.version}"', 'version = "9.9.9"')
        result = self.check()
        self.assertNotEqual(result.returncode, 0)
        for path in ["Cargo.lock", "CHANGELOG.md", BRIDGE, *CHARTS]:
            self.assertIn(f"version-check: {path}:", result.stderr)

    def test_a_crate_with_its_own_version_fails(self):
        self.edit("emsim/Cargo.toml", "version.workspace = true", f'version = "{self.version}"')
        self.assert_fails_naming("emsim/Cargo.toml")

    def test_a_bridge_of_another_version_fails(self):
        self.edit(BRIDGE, f'const version = "{self.version}"', 'const version = "9.9.9"')
        self.assert_fails_naming(BRIDGE)

    def test_a_stale_lock_entry_fails(self):
        self.edit("Cargo.lock", f'name = "talos-sim"\nversion = "{self.version}"', 'name = "talos-sim"\nversion = "0.0.9"')
        result = self.assert_fails_naming("Cargo.lock")
        self.assertIn("talos-sim is 0.0.9", result.stderr)

    def test_a_changelog_without_this_version_first_fails(self):
        self.edit("CHANGELOG.md", f"## [{self.version}] - ", "## [0.0.9] - ")
        self.assert_fails_naming("CHANGELOG.md")

    def test_a_changelog_heading_without_a_date_fails(self):
        text = (self.root / "CHANGELOG.md").read_text()
        text = re.sub(rf"^## \[{re.escape(self.version)}\] - .*$", f"## [{self.version}]", text, count=1, flags=re.M)
        (self.root / "CHANGELOG.md").write_text(text)
        self.assert_fails_naming("CHANGELOG.md")

    def test_a_changelog_without_unreleased_first_fails(self):
        self.edit("CHANGELOG.md", "## [Unreleased]\n", "")
        self.assert_fails_naming("CHANGELOG.md")

    def test_a_tag_of_another_version_fails(self):
        for tag in ("v9.9.9", self.version, f"v{self.version}-rc.1"):
            with self.subTest(tag=tag):
                result = self.check(tag)
                self.assertNotEqual(result.returncode, 0)
                self.assertIn(f"tag '{tag}'", result.stderr)

    def test_notes_print_the_section_only(self):
        self.edit("CHANGELOG.md", "## [Unreleased]\n", "## [Unreleased]\n\n- not released yet\n")
        result = self.check("--notes", self.version)
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertNotIn("not released yet", result.stdout)
        self.assertFalse([l for l in result.stdout.splitlines() if l.startswith("## ")], "a level-2 heading")
        self.assertTrue(result.stdout.strip())
        self.assertNotEqual(self.check("--notes", "9.9.9").returncode, 0)


class Bump(Tree):
    def bump(self, *args):
        return run(BUMP, "--root", str(self.root), *args)

    def set_unreleased(self, body):
        """Makes the copy's Unreleased section exactly `body`, whatever the
        repository's own Unreleased section holds today."""
        path = self.root / "CHANGELOG.md"
        text = path.read_text()
        start = text.index("## [Unreleased]\n") + len("## [Unreleased]\n")
        end = text.index("\n## [", start) + 1
        path.write_text(text[:start] + body + "\n" + text[end:])

    def test_sets_every_place_and_moves_unreleased_under_the_new_heading(self):
        self.set_unreleased("\n### Fixed\n\n- something\n")
        lock_before = (self.root / "Cargo.lock").read_text()
        result = self.bump("1.2.3-rc.1", "--date", "2030-01-02")
        self.assertEqual(result.returncode, 0, result.stderr)
        self.assertEqual(self.check("v1.2.3-rc.1").returncode, 0, self.check("v1.2.3-rc.1").stderr)
        self.assertNotEqual(self.check(f"v{self.version}").returncode, 0)
        changelog = (self.root / "CHANGELOG.md").read_text()
        self.assertIn("## [Unreleased]\n\n## [1.2.3-rc.1] - 2030-01-02\n\n### Fixed\n\n- something\n", changelog)
        self.assertIn(f"## [{self.version}] - ", changelog)
        notes = self.check("--notes", "1.2.3-rc.1")
        self.assertEqual(notes.stdout.strip(), "### Fixed\n\n- something")
        for path in CHARTS:
            text = (self.root / path).read_text()
            self.assertIn("\nversion: 1.2.3-rc.1\n", text)
            self.assertIn('\nappVersion: "1.2.3-rc.1"\n', text)
        self.assertIn('\nconst version = "1.2.3-rc.1"\n', (self.root / BRIDGE).read_text())
        # Only the workspace's four entries changed in the lock, nothing it pins.
        lock_after = (self.root / "Cargo.lock").read_text()
        changed = [(a, b) for a, b in zip(lock_before.splitlines(), lock_after.splitlines()) if a != b]
        self.assertEqual(len(changed), 4, changed)
        self.assertTrue(all(b == 'version = "1.2.3-rc.1"' for _, b in changed), changed)

    def test_refuses_an_empty_unreleased_section_and_writes_nothing(self):
        text = (self.root / "CHANGELOG.md").read_text()
        start = text.index("## [Unreleased]\n") + len("## [Unreleased]\n")
        (self.root / "CHANGELOG.md").write_text(text[:start] + "\n" + text[text.index("\n## [", start) + 1:])
        before = {p: (self.root / p).read_text() for p in ["Cargo.toml", "Cargo.lock", BRIDGE, *CHARTS]}
        result = self.bump("1.2.3")
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("nothing under [Unreleased]", result.stderr)
        self.assertEqual(before, {p: (self.root / p).read_text() for p in before})

    def test_refuses_a_tag_spelling_and_the_current_version(self):
        self.edit("CHANGELOG.md", "## [Unreleased]\n", "## [Unreleased]\n\n- x\n")
        for version in ("v1.2.3", "1.2", self.version):
            with self.subTest(version=version):
                self.assertNotEqual(self.bump(version).returncode, 0)
        self.assertEqual(self.check().returncode, 0)


if __name__ == "__main__":
    unittest.main(verbosity=2)
