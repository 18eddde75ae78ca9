"""Every suite has teeth: run against each mutant driver, the conformance suite fails, in
tests that name the requirement the mutant breaks (and the reference passes it: CI runs
``pytest conformance`` on the reference itself)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import background_runs
import pytest

from nncert.drivers.mutants import MUTANTS

ROOT = Path(__file__).resolve().parent.parent
#: Mutants that answer wrongly; those that crash or hang are tests/test_process_faults.py's.
WRONG_ANSWER = sorted(n for n, m in MUTANTS.items() if m.outcome == "FAILURE")
#: Failures after which a mutant's run stops: the verdict needs the suite to fail in tests
#: naming the broken requirement, not all of them (no_validation failed 6,378 tests).
MAXFAIL = 40


def mutant_run(name: str) -> tuple[list[str], Path]:
    """The run of the conformance suite (the file, and the slice of it, where the mutant's
    fault shows: ``MutantInfo.suite`` and ``args``) against ``mutant:name``, and the report it
    writes. Random graphs at 3 per cell with a short shrinking budget, and no tracebacks (the
    report has every failure's reason; formatting thousands of tracebacks doubled the run),
    so that a mutant failing every cell stays quick. A background run (tests/background_runs.py):
    queued at collection, run once however many pytest-xdist workers collect its test."""
    info = MUTANTS[name]
    where = background_runs.scratch() / "mutants" / name
    where.mkdir(parents=True, exist_ok=True)
    report = where / "report.json"
    suite = str(ROOT / "conformance" / info.suite)
    return [sys.executable, "-m", "pytest", suite, "-q", "-p", "no:cacheprovider", "--tb=no",
            f"--maxfail={MAXFAIL}", f"--driver=mutant:{name}", f"--nncert-report={report}",
            "--no-three-way", "--graphs=3", "--shrink-budget=20", f"--graph-dir={where / 'graphs'}",
            *info.args], report


def runs_to_start(item) -> list[list[str]]:
    if item.originalname == "test_conformance_catches_mutant":
        return [mutant_run(item.callspec.params["name"])[0]]
    return []


@pytest.mark.req("ACC-1", "ACC-2", "ACC-5", "VAL-1", "EXE-3", "EXE-4", "EXE-7")
@pytest.mark.parametrize("name", WRONG_ANSWER)
def test_conformance_catches_mutant(name):
    argv, report = mutant_run(name)
    proc = background_runs.run(argv, timeout=1500)
    assert proc.returncode == 1, f"suite did not fail against mutant:{name}:\n{proc.stdout[-2000:]}"
    tests = json.loads(report.read_text())["tests"]
    failed = {nodeid: rec for nodeid, rec in tests.items() if rec["outcome"] == "failed"}
    broken = MUTANTS[name].breaks
    naming = [n for n, rec in failed.items() if broken in rec["req"]]
    assert naming, f"mutant:{name} failed {len(failed)} tests, none naming {broken}: {sorted(failed)[:5]}"
    # The failures are about the broken requirement, not collateral noise.
    assert len(naming) >= 0.5 * len(failed), \
        f"only {len(naming)}/{len(failed)} failures name {broken}"
