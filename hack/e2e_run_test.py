#!/usr/bin/env python3
"""Tests of hack/e2e-run.py's failure digest and of hack/test-summary.py's
counts, the two things that decide what the last lines of a CI log say.
`python3 hack/e2e_run_test.py`."""

import importlib.util
import os
import subprocess
import sys
import tempfile
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("e2e_run", os.path.join(HERE, "e2e-run.py"))
runner = importlib.util.module_from_spec(spec)
spec.loader.exec_module(runner)

# What a scenario returning an anyhow error prints with RUST_BACKTRACE=1.
FAILED_SCENARIO = """running 1 test
test standby::adoption ... 2026-11-25T04:04:26Z  INFO e2e::procs: started name=etcd
2026-11-25T04:05:26Z  INFO e2e::wait: waiting what="the adopted server idle"
Error: the adopted server idle in the pool again: not within 180s

Caused by:
    0: last state: wiping

Stack backtrace:
   0: anyhow::error::<impl anyhow::Error>::msg
   1: e2e::wait::until
thread 'standby::adoption' panicked at library/test/src/lib.rs:186:5:
the test returned a termination value with a non-zero status code (1) which indicates a failure
stack backtrace:
  32: <core::panic::unwind_safe::AssertUnwindSafe<F>>::call_once
FAILED

failures:

failures:
    standby::adoption

test result: FAILED. 0 passed; 1 failed; 0 ignored; 0 measured; 31 filtered out; finished in 258.83s
"""


class Digest(unittest.TestCase):
    def test_keeps_the_error_its_causes_and_the_panic_but_no_backtrace(self):
        digest = runner.failure_digest(FAILED_SCENARIO)
        text = "\n".join(digest)
        self.assertIn("Error: the adopted server idle in the pool again: not within 180s", text)
        self.assertIn("0: last state: wiping", text)
        self.assertIn("panicked at library/test/src/lib.rs:186:5:", text)
        self.assertIn("non-zero status code (1)", text)
        self.assertNotIn("anyhow::error", text)
        self.assertNotIn("AssertUnwindSafe", text)
        self.assertNotIn("INFO", text)

    def test_a_plain_assertion_panic_keeps_its_message(self):
        out = (
            "thread 'x::y' panicked at e2e/tests/x.rs:10:5:\n"
            "assertion `left == right` failed\n  left: 1\n right: 2\n"
            "note: run with `RUST_BACKTRACE=1` environment variable to display a backtrace\n"
        )
        self.assertEqual(
            [l.strip() for l in runner.failure_digest(out)],
            ["thread 'x::y' panicked at e2e/tests/x.rs:10:5:", "assertion `left == right` failed",
             "left: 1", "right: 2"],
        )

    def test_is_bounded_per_failure_and_per_job(self):
        long_error = "Error: boom\n" + "".join(f"    {i}: cause\n" for i in range(100))
        digest = runner.failure_digest(long_error)
        self.assertEqual(len(digest), runner.DIGEST_LINES_PER_FAILURE)
        many = "".join(f"thread 't{i}' panicked at a.rs:1:1:\nmsg {i}\n" for i in range(100))
        self.assertEqual(len(runner.failure_digest(many)), runner.DIGEST_LINES_PER_JOB)

    def test_keeps_the_failed_specs_of_core_suites(self):
        out = (
            "• [17.0 seconds] StaticCapacity should scale\n"
            "• [FAILED] [900.1 seconds] NodeClaim should fail\n"
            "  [FAIL] NodeClaim should fail\n"
            "conformance: 1 passed, 1 failed, 0 skipped\n"
        )
        self.assertEqual(
            [l.strip() for l in runner.failure_digest(out)],
            ["• [FAILED] [900.1 seconds] NodeClaim should fail"],
        )

    def test_no_error_no_digest(self):
        self.assertEqual(runner.failure_digest("e2e-run: x left 2 process(es) running\n"), [])

    def test_digest_lines_are_not_counted_as_results(self):
        # hack/test-summary.py counts `test result:` and `--- FAIL:` lines;
        # a digest line is indented, so it never looks like one at a line start.
        out = "Error: --- FAIL: nothing\ntest result: FAILED. 0 passed; 9 failed\n"
        for line in runner.failure_digest(out):
            self.assertTrue(line.startswith("  "), line)


def summary(log, rc=0):
    with tempfile.NamedTemporaryFile("w", suffix=".log", delete=False) as f:
        f.write(log)
    try:
        done = subprocess.run(
            [sys.executable, os.path.join(HERE, "test-summary.py"), f.name, str(rc)],
            capture_output=True, text=True,
        )
    finally:
        os.unlink(f.name)
    return done.stdout.strip(), done.returncode


class Summary(unittest.TestCase):
    def test_counts_cargo_go_and_unittest(self):
        log = (
            "test result: ok. 3 passed; 0 failed; 0 ignored\n"
            "--- PASS: TestA (0.00s)\n    --- PASS: TestA/sub (0.00s)\n"
            "Ran 7 tests in 0.012s\n\nOK (skipped=2)\n"
        )
        self.assertEqual(summary(log), ("10 passed, 0 failed", 0))

    def test_unittest_failures_and_errors_fail_the_run(self):
        log = "Ran 5 tests in 0.2s\n\nFAILED (failures=1, errors=1, skipped=1)\n"
        self.assertEqual(summary(log), ("2 passed, 2 failed", 1))

    def test_a_failed_run_with_nothing_counted_is_one_failure(self):
        self.assertEqual(summary("error: could not compile\n", rc=101), ("0 passed, 1 failed", 1))

    def test_counts_the_specs_of_core_suites(self):
        log = "test result: ok. 3 passed; 0 failed; 0 ignored\nconformance: 70 passed, 1 failed, 4 skipped\n"
        self.assertEqual(summary(log, rc=1), ("73 passed, 1 failed", 1))

    def test_the_failed_scenario_counts_once(self):
        self.assertEqual(summary(FAILED_SCENARIO, rc=1), ("0 passed, 1 failed", 1))


if __name__ == "__main__":
    unittest.main()
