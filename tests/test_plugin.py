"""The pytest plugin: requirement selection and the JSON outcome record."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _pytest(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=600)


def test_req_selects_and_report_traces_requirements(tmp_path):
    report = tmp_path / "r.json"
    proc = _pytest("conformance/test_execution.py", "-q", "--req", "EXE-8", f"--nncert-report={report}")
    assert proc.returncode == 0, proc.stdout[-2000:]
    data = json.loads(report.read_text())
    assert data["driver"] == "reference" and data["version_string"].startswith("nncert-reference")
    assert data["tests"], "no test selected"
    for nodeid, rec in data["tests"].items():
        assert "EXE-8" in rec["req"], nodeid
        assert rec["outcome"] == "passed"
    assert data["requirements"]["EXE-8"]["passed"] == len(data["tests"])
    assert set(data["requirements"]) >= {"VAL-1", "ACC-5", "MLTS-3"}  # every ID, covered or not


def test_failures_are_recorded_with_reason(tmp_path):
    report = tmp_path / "r.json"
    proc = _pytest("conformance/test_execution.py", "-q", "--driver=mutant:timing_inverted", "--req", "EXE-7",
                   f"--nncert-report={report}")
    assert proc.returncode == 1
    tests = json.loads(report.read_text())["tests"]
    failed = [rec for rec in tests.values() if rec["outcome"] == "failed"]
    assert failed and all("EXE-7" in rec["reason"] for rec in failed), failed[:3]




def test_collection_runs_without_the_cycle_collector_and_freezes_what_it_made(tmp_path):
    """The plugin turns the cycle collector off while pytest collects and freezes what
    collection made (the full collections walking the items again were most of a small run's
    CPU): the tests run with the collector on, their own garbage cycles are still collected,
    and at exit the frozen objects are handed back to be finalised (IREE's runtime, imported
    at collection, reports every object of its own left alive at exit, on stderr)."""
    pytest.importorskip("iree.runtime")
    (tmp_path / "test_gc.py").write_text(
        "import gc, weakref\n"
        "import iree.runtime\n"
        "AT_IMPORT = gc.isenabled()\n"
        "class Cycle:\n"
        "    pass\n"
        "def test_it():\n"
        "    assert not AT_IMPORT and gc.isenabled() and gc.get_freeze_count() > 0\n"
        "    a = Cycle()\n"
        "    a.me = a\n"
        "    alive = weakref.ref(a)\n"
        "    del a\n"
        "    gc.collect()\n"
        "    assert alive() is None\n")
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "test_gc.py"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert "leaked" not in proc.stderr, proc.stderr[-2000:]
