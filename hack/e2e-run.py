#!/usr/bin/env python3
"""Runs the e2e scenarios, several at a time.

Each e2e scenario spends most of its time waiting on (time-scaled) simulated
deliveries and reboots, not on the CPU, and every stack takes its own loopback
address block and work directory, so scenarios can run side by side. The
scenarios are the modules of one test binary (e2e/tests/main.rs); this runner
builds it once, then keeps `--jobs` modules running, each in a process of its
own, longest first (durations of the previous run are kept in
target/e2e-durations.json, seeded from e2e/durations.json on a fresh clone),
and prints each module's whole output when it ends so that logs never
interleave. The e2e crate's own unit tests run as one more job, `e2e`.

The build is `cargo build --workspace --bins --tests`, the same feature set as
`cargo test --workspace`: a narrower one (`-p e2e`, or bins without tests)
resolves dependency features differently and recompiles half the workspace.

Usage: hack/e2e-run.py [--jobs N] [--only a,b] [-- args for every test binary]
Exit status: 0 when every scenario passed, 1 otherwise. The output keeps the
`test result:` lines of libtest that hack/test-summary.py counts.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DURATIONS = ROOT / "target" / "e2e-durations.json"
# Durations measured here, committed so that a fresh clone also starts the
# longest scenarios first (the target/ copy, from the last run, wins).
SEED_DURATIONS = ROOT / "e2e" / "durations.json"


def test_binaries():
    """(name, path) of the e2e package's test binaries, built if needed."""
    out = subprocess.run(
        ["cargo", "build", "--workspace", "--bins", "--tests", "--message-format=json"],
        cwd=ROOT,
        check=True,
        stdout=subprocess.PIPE,
        text=True,
    ).stdout
    found = []
    for line in out.splitlines():
        try:
            msg = json.loads(line)
        except json.JSONDecodeError:
            continue
        if msg.get("reason") != "compiler-artifact" or not msg.get("executable"):
            continue
        if not is_e2e_package(msg.get("package_id", "")):
            continue
        target = msg.get("target", {})
        kinds = target.get("kind", [])
        if msg.get("profile", {}).get("test") and ("test" in kinds or "lib" in kinds):
            found.append((target["name"], msg["executable"]))
    return sorted(set(found))


def is_e2e_package(package_id):
    # "path+file:///…/e2e#0.1.0" (cargo ≥ 1.77) or "e2e 0.1.0 (path+file:///…)".
    return package_id.split("#")[0].rstrip("/").endswith("/e2e") or package_id.startswith("e2e ")


def jobs():
    """(name, exe, filters): one job per scenario module, plus the lib's tests."""
    out = []
    for name, exe in test_binaries():
        if name != "scenarios":
            out.append((name, exe, []))
            continue
        listed = subprocess.run(
            [exe, "--list", "--format", "terse"], cwd=ROOT / "e2e", check=True,
            stdout=subprocess.PIPE, text=True,
        ).stdout
        modules = {}
        for line in listed.splitlines():
            if line.endswith(": test"):
                test = line[: -len(": test")]
                modules.setdefault(test.split("::")[0], []).append(test)
        for module, tests in sorted(modules.items()):
            out.append((module, exe, ["--exact", *tests]))
    return out


def run_one(name, exe, filters, extra):
    with tempfile.TemporaryFile(mode="w+") as log:
        start = time.monotonic()
        rc = subprocess.call(
            [exe, "--test-threads=1", "--nocapture", *filters, *extra],
            cwd=ROOT / "e2e",
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        took = time.monotonic() - start
        log.seek(0)
        return name, rc, took, log.read()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--jobs", type=int, default=int(os.environ.get("KPS_E2E_JOBS", "2")))
    parser.add_argument("--only", default="", help="comma-separated binary names to run")
    parser.add_argument("extra", nargs="*", help="arguments passed to every test binary")
    args = parser.parse_args()

    binaries = jobs()
    if args.only:
        wanted = set(args.only.split(","))
        binaries = [b for b in binaries if b[0] in wanted]
    previous = {}
    for source in (SEED_DURATIONS, DURATIONS):
        try:
            previous.update(json.loads(source.read_text()))
        except (OSError, ValueError):
            pass
    # Longest first: the last lane to finish then holds a short test.
    binaries.sort(key=lambda b: -previous.get(b[0], 1e9))
    print(f"e2e: {len(binaries)} jobs, {args.jobs} at a time", flush=True)

    durations, failed = {}, []
    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(run_one, n, e, f, args.extra) for n, e, f in binaries]
        for fut in as_completed(futures):
            name, rc, took, output = fut.result()
            durations[name] = round(took, 1)
            print(f"\n===== e2e {name}: {'ok' if rc == 0 else f'FAILED (exit {rc})'} in {took:.0f} s =====", flush=True)
            sys.stdout.write(output)
            sys.stdout.flush()
            if rc != 0:
                failed.append(name)
    DURATIONS.parent.mkdir(exist_ok=True)
    DURATIONS.write_text(json.dumps({**previous, **durations}, indent=1, sort_keys=True))
    print(f"\ne2e: {len(binaries)} jobs in {time.monotonic() - start:.0f} s; "
          + (f"failed: {', '.join(sorted(failed))}" if failed else "all passed"), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
