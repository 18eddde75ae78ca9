"""Mutants that crash or hang their process: a conformance run against them completes, the
affected tests are reported as CRASH / HANG, every other test passes, and nothing waits
past its deadline (MLTS-2, BURST-4, EXE-1). Each fault is run both ways the harness isolates
a driver: hosted as a service, and in process under ``--isolate``."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
from pathlib import Path

import background_runs
import pytest

ROOT = Path(__file__).resolve().parent.parent
CONFORMANCE = ROOT / "conformance"
OP = "LOGICAL_NOT"  # few cases, so that each hang's deadline costs little
SELECT = f"{OP} or LOGICAL_AND or consecutive"

# (driver, extra arguments, -k selection, expected outcome, name fragment of the affected tests)
RUNS = [
    pytest.param(f"service:mutant:crash,op={OP}", [], SELECT, "crash", OP, id="crash-service"),
    pytest.param(f"mutant:crash,op={OP}", ["--isolate"], SELECT, "crash", OP, id="crash-isolate"),
    pytest.param(f"service:mutant:hang,op={OP}", ["--driver-option=timeout=2"], SELECT, "hang", OP,
                 id="hang-service"),
    pytest.param(f"mutant:hang,op={OP}", ["--isolate", "--isolate-timeout=3"], SELECT, "hang", OP,
                 id="hang-isolate"),
    # The warm burst path runs each test's request twice on one burst: every timing test on it
    # would crash, each a restart, to show what the one burst test shows.
    pytest.param("service:mutant:burst_death", [], "(burst or LOGICAL_AND) and not edge and not warm",
                 "crash", "burst", id="burst-death-service"),
    # Every fenced execution hangs, so every_path (which includes one) is left out, and so are
    # the per-operation edge cases and the timing tests, which take every path (a deadline each).
    pytest.param("service:mutant:silent_fence", ["--hang-timeout=1"],
                 "(fenced and not edge and not timing) or (LOGICAL_AND and not every_path and not edge)",
                 "hang", "fence", id="silent-fence-service"),
    # A suite file among the extra arguments joins the run; -k keeps that file's tests only (not
    # the loop timeout on the fast paths: two hangs more, each a deadline and a restart, that show
    # nothing the other paths' do not).
    pytest.param("service:mutant:endless_while",
                 ["--driver-option=timeout=2", "--hang-timeout=2", str(CONFORMANCE / "test_control_flow.py")],
                 "test_control_flow and not burst-warm and not fenced-no-wait", "hang", "loop_timeout",
                 id="endless-while-service"),
]


#: Each crash or hang costs its deadline (1 to 3 s here) and a restart, never the default 600 s.
#: Judged on each faulted test's own recorded duration, not on the run's wall time: the rest of
#: the slice runs as slowly as the host (81 s for one crash at a load average of 12).
CUT_SHORT_S = 60


def _each_cut_short(tests: dict, faulted: list[str]) -> None:
    long = {n: tests[n].get("duration") for n in faulted
            if not tests[n].get("duration", CUT_SHORT_S) < CUT_SHORT_S}
    assert not long, f"faulted tests not cut short at their deadline: {long}"


def _faulty_run(name: str, driver: str, extra: list[str], select: str) -> background_runs.Run:
    """A conformance slice against a faulty driver, its report in the session's scratch
    directory under ``name``: a background run marked idle (it mostly waits out deadlines)."""
    report = background_runs.scratch() / f"faults-{name}.json"
    return background_runs.Run(
        (sys.executable, "-m", "pytest", str(ROOT / "conformance" / "test_operations.py"),
         str(ROOT / "conformance" / "test_execution.py"), "-q", "-p", "no:cacheprovider",
         f"--driver={driver}", f"--nncert-report={report}", "-k", select, *extra), idle=True)


def _guarded_run(name: str, driver: str, extra: list[str]) -> background_runs.Run:
    report = background_runs.scratch() / f"guard-{name}.json"
    return background_runs.Run(
        (sys.executable, "-m", "pytest", str(CONFORMANCE / "test_operations.py"), "-q",
         "-p", "no:cacheprovider", "-p", "no:randomly", f"--driver={driver}", f"--nncert-report={report}",
         "-k", SELECT, *extra), idle=True)


def _report(run: background_runs.Run) -> Path:
    return Path(next(a for a in run.argv if a.startswith("--nncert-report=")).partition("=")[2])


def runs_to_start(item) -> list[background_runs.Run]:
    """The faulty drivers' runs, started beside the other tests (background_runs.py): each
    waits out its hangs' deadlines, which would otherwise hold a test process."""
    if item.originalname == "test_faulty_driver_run_completes_and_classifies":
        p = item.callspec.params
        return [_faulty_run(item.callspec.id, p["driver"], p["extra"], p["select"])]
    if item.originalname == "test_crash_guard_keeps_every_result_and_goes_on":
        p = item.callspec.params
        return [_guarded_run(item.callspec.id, p["driver"], p["extra"])]
    return []


@pytest.mark.req("MLTS-2", "BURST-4", "EXE-1", "EXE-9")
@pytest.mark.parametrize(("driver", "extra", "select", "outcome", "affected"), RUNS)
def test_faulty_driver_run_completes_and_classifies(request, driver, extra, select, outcome, affected):
    run = _faulty_run(request.node.callspec.id, driver, extra, select)
    report = _report(run)
    proc = background_runs.run(run, timeout=900)
    assert proc.returncode == 1, f"exit {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}"
    tests = json.loads(report.read_text())["tests"]
    by_outcome: dict[str, list[str]] = {}
    for nodeid, rec in tests.items():
        by_outcome.setdefault(rec["outcome"], []).append(nodeid)
    faulted = by_outcome.get(outcome, [])
    assert faulted, f"no test reported as {outcome}: {sorted(by_outcome)}"
    assert all(affected.lower() in n.lower() for n in faulted), \
        f"{outcome} outside the affected tests: {[n for n in faulted if affected.lower() not in n.lower()]}"
    assert not by_outcome.get("failed"), f"ordinary failures: {by_outcome['failed'][:5]}"
    others = [n for n in tests if affected.lower() not in n.lower()]
    assert others and all(tests[n]["outcome"] in ("passed", "skipped") for n in others)
    summary = proc.stdout.strip().splitlines()[-1]
    assert {"crash": "crashed", "hang": "hung"}[outcome] in summary, summary
    _each_cut_short(tests, faulted)


# The crash guard (plain pytest, driver in process, no --isolate): the supervising pytest
# records the test its child died or hung in, and a fresh child runs the rest.
GUARDED = [
    pytest.param(f"mutant:crash,op={OP}", ["--crash-guard=on"], "crash", id="crash-guard"),
    pytest.param(f"mutant:hang,op={OP}", ["--crash-guard=on", "--crash-guard-timeout=3"], "hang",
                 id="hang-guard"),
    # Tests in flight on two pytest-xdist workers: each one past the limit is the guard's HANG.
    pytest.param(f"mutant:hang,op={OP}", ["--crash-guard=on", "--crash-guard-timeout=3", "-n", "2"], "hang",
                 id="hang-guard-xdist", marks=pytest.mark.slow),
]


@pytest.mark.req("MLTS-2", "EXE-1")
@pytest.mark.parametrize(("driver", "extra", "outcome"), GUARDED)
def test_crash_guard_keeps_every_result_and_goes_on(request, tmp_path, driver, extra, outcome):
    run = _guarded_run(request.node.callspec.id, driver, extra)
    report = _report(run)
    proc = background_runs.run(run, timeout=900)
    assert proc.returncode == 1, f"exit {proc.returncode}:\n{proc.stdout[-3000:]}\n{proc.stderr[-2000:]}"
    tests = json.loads(report.read_text())["tests"]
    collected = subprocess.run(
        [sys.executable, "-m", "pytest", str(CONFORMANCE / "test_operations.py"), "-q", "--collect-only",
         "-p", "no:cacheprovider", f"--driver={driver}", "-k", SELECT],
        cwd=ROOT, capture_output=True, text=True)
    ids = [line for line in collected.stdout.splitlines() if "::" in line]
    assert sorted(tests) == sorted(ids), "every selected test has exactly one outcome"
    faulted = sorted(n for n, rec in tests.items() if rec["outcome"] == outcome)
    assert faulted and all(OP in n for n in faulted), faulted
    assert all(tests[n]["outcome"] in ("passed", "skipped") for n in tests if OP not in n)
    word = outcome.upper()
    lines = [line for line in proc.stderr.splitlines() if line.startswith(f"nncert: {word}: ")]
    # One line per test the guard caught (after a few crashes the rest run --isolate'd, where
    # each is its child's own CRASH / HANG).
    assert lines and all(line.split(": ")[2] in faulted for line in lines), lines
    assert "Rerun it alone: pytest " in lines[0] and "--isolate" in lines[0]
    assert f"{len(tests)} tests over " in proc.stderr.splitlines()[-1]
    _each_cut_short(tests, faulted)
    # Same verdict alone: the printed command reruns the first crash, isolated, and it crashes again.
    rerun = lines[0].split("Rerun it alone: ")[1]
    alone = tmp_path / "alone.json"
    again = subprocess.run([sys.executable, "-m", *shlex.split(rerun), "-p", "no:cacheprovider",
                            f"--nncert-report={alone}", "--isolate-timeout=3"],
                           cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert again.returncode == 1, again.stdout[-2000:]
    assert [r["outcome"] for r in json.loads(alone.read_text())["tests"].values()] == [outcome]


def test_certification_runner_turns_the_crash_guard_off(tmp_path):
    """The certify runner supervises its suites itself: no second supervisor inside."""
    from nncert.certify import plan as plans
    from nncert.certify.journal import SuiteState
    from nncert.certify.runner import RunSettings, SuiteRun
    suite = plans.load_plan("smoke").suites[0]
    run = SuiteRun(suite, RunSettings("litert", "smoke", "", [suite.name]), tmp_path, SuiteState(), None)
    assert "--crash-guard=off" in run.command()
