#!/usr/bin/env python3
"""Runs the e2e test binaries, several at a time.

Each e2e scenario spends most of its time waiting on (time-scaled) simulated
deliveries and reboots, not on the CPU, and every stack takes its own loopback
address block and work directory, so scenarios can run side by side. Cargo
itself runs test binaries one after another; this runner builds them once
(`cargo test --no-run`), then keeps `--jobs` of them running, longest first
(durations of the previous run are kept in target/e2e-durations.json,
seeded from e2e/durations.json on a fresh clone), and
prints each binary's whole output when it ends so that logs never interleave.

Usage: hack/e2e-run.py [--jobs N] [--only a,b] [-- args for every test binary]
Exit status: 0 when every binary passed, 1 otherwise. The output keeps the
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
    """(name, path) of every e2e integration test binary, built if needed."""
    out = subprocess.run(
        ["cargo", "test", "-p", "e2e", "--tests", "--no-run", "--message-format=json"],
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
        target = msg.get("target", {})
        kinds = target.get("kind", [])
        if msg.get("profile", {}).get("test") and ("test" in kinds or "lib" in kinds):
            found.append((target["name"], msg["executable"]))
    return sorted(set(found))


def run_one(name, exe, extra):
    with tempfile.TemporaryFile(mode="w+") as log:
        start = time.monotonic()
        rc = subprocess.call(
            [exe, "--test-threads=1", "--nocapture", *extra],
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

    binaries = test_binaries()
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
    print(f"e2e: {len(binaries)} test binaries, {args.jobs} at a time", flush=True)

    durations, failed = {}, []
    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(run_one, n, e, args.extra) for n, e in binaries]
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
    print(f"\ne2e: {len(binaries)} binaries in {time.monotonic() - start:.0f} s; "
          + (f"failed: {', '.join(sorted(failed))}" if failed else "all passed"), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
