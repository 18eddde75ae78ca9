"""The pytest plugin: requirement selection and the JSON outcome record."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

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
