"""Every suite has teeth: run against each mutant driver, the conformance suite fails, in
tests that name the requirement the mutant breaks (and the reference passes it: CI runs
``pytest conformance`` on the reference itself)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

import pytest

from nncert.drivers.mutants import MUTANTS

ROOT = Path(__file__).resolve().parent.parent
#: Mutants that answer wrongly; those that crash or hang are tests/test_process_faults.py's.
WRONG_ANSWER = sorted(n for n, m in MUTANTS.items() if m.outcome == "FAILURE")


def run_conformance(driver: str, report: Path, *extra: str, suite: str = "") -> subprocess.CompletedProcess:
    """The conformance suite (or one file of it) against ``driver``; random graphs at 3 per
    cell with a short shrinking budget, and no tracebacks (the report has every failure's
    reason; formatting thousands of tracebacks doubled the run), so that a mutant failing
    every cell stays quick."""
    argv = [sys.executable, "-m", "pytest", str(ROOT / "conformance" / suite), "-q", "-p", "no:cacheprovider",
            "--tb=no", f"--driver={driver}", f"--nncert-report={report}", "--no-three-way", "--graphs=3",
            "--shrink-budget=20", f"--graph-dir={report.parent / 'graphs'}", *extra]
    for attempt in range(3):
        try:
            return subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=1200)
        except OSError:
            # The child never started: exec failed with EFAULT once in CI, two pool threads
            # spawning at once (CPython drops the GIL around vfork). Not a verdict: start again.
            if attempt == 2:
                raise
    raise AssertionError("unreachable")


@pytest.fixture(scope="module")
def mutant_runs(request, tmp_path_factory) -> dict[str, tuple[Future, Path]]:
    """The conformance run of every selected mutant, started at once, as many at a time as
    there are cores."""
    selected = {item.callspec.params["name"] for item in request.session.items
                if item.module is request.module and hasattr(item, "callspec")}
    pool = ThreadPoolExecutor(max_workers=max(1, os.cpu_count() or 1))
    runs = {}
    for name in sorted(selected):
        report = tmp_path_factory.mktemp(name) / "report.json"
        # A mutant of one suite runs that suite alone, on the slice its fault can show in.
        info = MUTANTS[name]
        runs[name] = (pool.submit(run_conformance, f"mutant:{name}", report, *info.args, suite=info.suite),
                      report)
    yield runs
    pool.shutdown(cancel_futures=True)


@pytest.mark.req("ACC-1", "ACC-2", "ACC-5", "VAL-1", "EXE-3", "EXE-4", "EXE-7")
@pytest.mark.parametrize("name", WRONG_ANSWER)
def test_conformance_catches_mutant(name, mutant_runs):
    future, report = mutant_runs[name]
    proc = future.result()
    assert proc.returncode == 1, f"suite did not fail against mutant:{name}:\n{proc.stdout[-2000:]}"
    tests = json.loads(report.read_text())["tests"]
    failed = {nodeid: rec for nodeid, rec in tests.items() if rec["outcome"] == "failed"}
    broken = MUTANTS[name].breaks
    naming = [n for n, rec in failed.items() if broken in rec["req"]]
    assert naming, f"mutant:{name} failed {len(failed)} tests, none naming {broken}: {sorted(failed)[:5]}"
    # The failures are about the broken requirement, not collateral noise.
    assert len(naming) >= 0.5 * len(failed), \
        f"only {len(naming)}/{len(failed)} failures name {broken}"
