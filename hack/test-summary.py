"""Sums the results of every test runner in a log into one closing line.

cargo test prints `test result: ok. N passed; M failed; ...` per test binary;
`go test` prints `ok  <pkg>` / `FAIL <pkg>` per package and, with -v, a line per
test. We count cargo tests and Go test functions (`--- PASS` / `--- FAIL`, which
`go test -v` prints) and exit non-zero when anything failed or the run failed.
kps-conformance (core's e2e suites) ends with `conformance: N passed, M failed,
S skipped`. Python's unittest (the hack/ scripts' tests) ends with `Ran N tests in …` and
then `OK` or `FAILED (failures=F, errors=E)`, either possibly with skips
(`skipped=S`): N - F - E - S passed, F + E failed.
"""
import re
import sys

text = open(sys.argv[1], encoding="utf-8", errors="replace").read()
rc = int(sys.argv[2])
passed = failed = 0
for m in re.finditer(r"test result: \w+\. (\d+) passed; (\d+) failed", text):
    passed += int(m.group(1))
    failed += int(m.group(2))
passed += len(re.findall(r"^\s*--- PASS: ", text, re.M))
failed += len(re.findall(r"^\s*--- FAIL: ", text, re.M))
for m in re.finditer(r"^Ran (\d+) tests? in [^\n]*\n\n(OK|FAILED)(?: \(([^)]*)\))?", text, re.M):
    counts = {k: int(n) for k, n in re.findall(r"(\w+)=(\d+)", m.group(3) or "")}
    bad = counts.get("failures", 0) + counts.get("errors", 0)
    passed += int(m.group(1)) - bad - counts.get("skipped", 0)
    failed += bad
# kps-conformance (Karpenter core's own e2e suites) ends with one line per run.
for m in re.finditer(r"^conformance: (\d+) passed, (\d+) failed, (\d+) skipped", text, re.M):
    passed += int(m.group(1))
    failed += int(m.group(2))
if rc != 0 and failed == 0:
    failed = 1  # a build or harness failure counts as a failure
print(f"{passed} passed, {failed} failed")
sys.exit(0 if rc == 0 and failed == 0 else 1)
