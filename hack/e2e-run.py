#!/usr/bin/env python3
"""Runs the e2e scenarios, several at a time.

Each e2e scenario spends most of its time waiting on (time-scaled) simulated
deliveries and reboots, not on the CPU, and every stack takes its own loopback
address block and work directory, so scenarios can run side by side. The
scenarios are the modules of one test binary (e2e/tests/main.rs); this runner
builds it once, then keeps `--jobs` modules running, each in a process of its
own, longest first (durations of the previous run are kept in
target/e2e-durations.json, seeded from e2e/durations.json on a fresh clone),
in one pool of lanes shared with the shards of Karpenter core's regression
suite (a lane that finishes its shard takes scenarios, and the other way round),
and prints each module's whole output when it ends so that logs never
interleave. The e2e crate's own unit tests run as one more job, `e2e`.

A test binary that dies without running its destructors (SIGKILL, the OOM
killer, this runner being stopped) would leave its control plane and
simulators running. The runner is therefore a child subreaper: such orphans
become its children, each carries its job's name in KPS_E2E_JOB, and the runner
kills them when their job ends (saying how many) and when it is itself stopped.

The build is `cargo build --workspace --bins --tests`, the same feature set as
`cargo test --workspace`: a narrower one (`-p e2e`, or bins without tests)
resolves dependency features differently and recompiles half the workspace.

When jobs fail, the runner ends with a digest of why: each failed job's test
errors and panic messages, without the backtraces that RUST_BACKTRACE adds, so
that the last lines of a CI log (often all a CI page keeps) say what broke.

Usage: hack/e2e-run.py [--jobs N] [--only a,b] [-- args for every test binary]
Exit status: 0 when every scenario passed, 1 otherwise. The output keeps the
`test result:` lines of libtest that hack/test-summary.py counts.
"""

import argparse
import ctypes
import json
import os
import signal
import subprocess
import threading
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


# Karpenter core's own regression suite on Elastic Metal (docs/conformance.md),
# split into this many shards, each a job on a stack of its own
# (`kps-conformance --shard K/N`, split by e2e/conformance/durations.json).
CONFORMANCE_SHARDS = int(os.environ.get("KPS_CONFORMANCE_SHARDS", "3"))


def is_conformance(name):
    return name.startswith("conformance-")


def conformance_jobs():
    """(name, argv) of the conformance shards; none without the compiled suites
    (KPS_CORE_SUITES_DIR, set by the Justfile's e2e recipe)."""
    if not os.environ.get("KPS_CORE_SUITES_DIR") or CONFORMANCE_SHARDS < 1:
        return []
    exe = str(ROOT / "target" / "debug" / "kps-conformance")
    n = CONFORMANCE_SHARDS
    return [
        (f"conformance-regression-metal-{k}of{n}",
         [exe, "--suite", "regression", "--kind", "metal", "--shard", f"{k}/{n}"])
        for k in range(1, n + 1)
    ]


def jobs():
    """(name, argv): one job per scenario module, the lib's tests, and the
    shards of core's regression suite."""
    out = []
    for name, exe in test_binaries():
        if name != "scenarios":
            out.append((name, [exe, "--test-threads=1", "--nocapture"]))
            continue
        listed = subprocess.run(
            [exe, "--list", "--format", "terse"], cwd=ROOT / "e2e", check=True,
            stdout=subprocess.PIPE, text=True,
        ).stdout
        # Tests run by hand only (#[ignore]: the soak, the figures) make no
        # job: a module of them alone would start nothing and pass empty.
        ignored = subprocess.run(
            [exe, "--list", "--format", "terse", "--ignored"], cwd=ROOT / "e2e", check=True,
            stdout=subprocess.PIPE, text=True,
        ).stdout.splitlines()
        modules = {}
        for line in listed.splitlines():
            if line.endswith(": test") and line not in ignored:
                test = line[: -len(": test")]
                modules.setdefault(test.split("::")[0], []).append(test)
        for module, tests in sorted(modules.items()):
            out.append((module, [exe, "--test-threads=1", "--nocapture", "--exact", *tests]))
    return out + conformance_jobs()


PR_SET_CHILD_SUBREAPER = 36
JOB_ENV = "KPS_E2E_JOB"
# The test binaries running now, by pid (their own exits are reaped by subprocess).
active = {}
active_lock = threading.Lock()


def become_subreaper():
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def own_children():
    """(pid, state, job) of every direct child of this runner."""
    me, out = os.getpid(), []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        pid = int(entry)
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[1]) != me:
                continue
            job = None
            with open(f"/proc/{pid}/environ", "rb") as f:
                for var in f.read().split(b"\0"):
                    if var.startswith(JOB_ENV.encode() + b"="):
                        job = var.split(b"=", 1)[1].decode()
            out.append((pid, fields[0], job))
        except (OSError, ValueError, IndexError):
            continue
    return out


def kill_strays(job=None):
    """Kills (and reaps) the orphans of `job` (of every job when None) that were
    re-parented to this runner; returns their command names."""
    killed = []
    for _ in range(20):  # a killed orphan's own children are re-parented in turn
        with active_lock:
            running = set(active)
        strays = [(pid, state, j) for pid, state, j in own_children() if pid not in running]
        found = False
        for pid, state, j in strays:
            if state == "Z":
                os.waitpid(pid, os.WNOHANG)
                continue
            if job is not None and j != job:
                continue
            found = True
            try:
                with open(f"/proc/{pid}/comm") as f:
                    killed.append(f.read().strip())
                os.killpg(pid, signal.SIGKILL) if os.getpgid(pid) == pid else os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
            try:
                os.waitpid(pid, 0)
            except ChildProcessError:
                pass
        if not found:
            break
        time.sleep(0.1)
    return killed


# A digest keeps at most this many lines of one failure and of one job.
DIGEST_LINES_PER_FAILURE = 12
DIGEST_LINES_PER_JOB = 40


def failure_digest(output):
    """The lines of a test binary's output that say why a test failed: each
    `Error: …` that a test returned (with anyhow's `Caused by:` chain) and each
    `thread '…' panicked at …` with its message, each ended where the
    backtrace or libtest's note starts. Lines a digest keeps never start like
    the lines hack/test-summary.py counts."""
    lines = output.splitlines()
    out, i = [], 0
    while i < len(lines) and len(out) < DIGEST_LINES_PER_JOB:
        line = lines[i]
        if line.startswith(("• [FAILED]", "• [PANICKED]", "• [TIMEDOUT]", "• [INTERRUPTED]")):
            # A spec of core's suites (kps-conformance prints one line each).
            out.append(line)
            i += 1
            continue
        if line.startswith("Error: ") or " panicked at " in line and line.startswith("thread '"):
            kept = [line]
            i += 1
            while i < len(lines) and len(kept) < DIGEST_LINES_PER_FAILURE:
                nxt = lines[i]
                if nxt.strip().lower().startswith(("stack backtrace:", "note: run with")) or (
                    nxt.startswith("Error: ") or nxt.startswith("thread '")
                ):
                    break
                kept.append(nxt)
                i += 1
            while kept and not kept[-1].strip():
                kept.pop()
            out.extend(kept)
            continue
        i += 1
    return [f"  {l}" for l in out[:DIGEST_LINES_PER_JOB]]


def run_one(name, argv, extra):
    with tempfile.TemporaryFile(mode="w+") as log:
        start = time.monotonic()
        proc = subprocess.Popen(
            # The extra arguments are libtest's: not for kps-conformance.
            [*argv, *([] if is_conformance(name) else extra)],
            cwd=ROOT / "e2e",
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, JOB_ENV: name},
        )
        with active_lock:
            active[proc.pid] = name
        rc = proc.wait()
        with active_lock:
            del active[proc.pid]
        took = time.monotonic() - start
        strays = kill_strays(name)
        log.seek(0)
        output = log.read()
        if strays:
            output += f"\ne2e-run: {name} left {len(strays)} process(es) running; killed: {', '.join(sorted(strays))}\n"
        return name, rc, took, output


def on_stop(signum, _frame):
    """Stopped (CI timeout, Ctrl-C): end the test binaries, then their orphans."""
    with active_lock:
        pids = list(active)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    time.sleep(0.5)
    killed = kill_strays()
    print(f"\ne2e: stopped by signal {signum}; killed {len(pids)} test binaries and {len(killed)} processes they started", flush=True)
    os._exit(128 + signum)


def main():
    parser = argparse.ArgumentParser()
    # Lanes: each job is a stack that spends most of its time waiting on
    # core's timers and the time-scaled simulators, not on the CPU: with four
    # at a time this 2-core machine was 40-60 % busy (vmstat, docs/figures.md
    # run 32); with five it was saturated for about 12 minutes and the whole
    # run still passed, 6 minutes faster (run 33).
    parser.add_argument("--jobs", type=int, default=int(os.environ.get("KPS_E2E_JOBS", "5")))
    parser.add_argument("--only", default="", help="comma-separated binary names to run")
    parser.add_argument("extra", nargs="*", help="arguments passed to every test binary")
    args = parser.parse_args()

    binaries = jobs()
    if not become_subreaper():
        print("e2e: cannot become a child subreaper; a killed test binary may leave processes behind", flush=True)
    signal.signal(signal.SIGTERM, on_stop)
    signal.signal(signal.SIGINT, on_stop)
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
    suites = [b for b in binaries if is_conformance(b[0])]
    print(f"e2e: {len(binaries)} jobs ({len(suites)} of them conformance shards), {args.jobs} at a time",
          flush=True)

    durations, failed, digests = {}, [], {}
    start = time.monotonic()
    with ThreadPoolExecutor(max_workers=max(1, args.jobs)) as pool:
        futures = [pool.submit(run_one, n, argv, args.extra) for n, argv in binaries]
        for fut in as_completed(futures):
            name, rc, took, output = fut.result()
            durations[name] = round(took, 1)
            print(f"\n===== e2e {name}: {'ok' if rc == 0 else f'FAILED (exit {rc})'} in {took:.0f} s =====", flush=True)
            sys.stdout.write(output)
            sys.stdout.flush()
            if rc != 0:
                failed.append(name)
                digests[name] = failure_digest(output)
    if failed:
        print("\ne2e: why the failed jobs failed (their whole output is above):", flush=True)
        for name in sorted(failed):
            print(f"[{name}]")
            print("\n".join(digests[name]) or "  (no test error or panic in its output: see above)")
    DURATIONS.parent.mkdir(exist_ok=True)
    DURATIONS.write_text(json.dumps({**previous, **durations}, indent=1, sort_keys=True))
    print(f"\ne2e: {len(binaries)} jobs in {time.monotonic() - start:.0f} s; "
          + (f"failed: {', '.join(sorted(failed))}" if failed else "all passed"), flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
