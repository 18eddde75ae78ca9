"""The three-way verdict on a failing case (nncert.testing.triage)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from nncert.drivers import load_driver
from nncert.hal.types import OperationType
from nncert.testing import triage
from nncert.testing.cases import enumerate_cases, sample_case
from nncert.testing.harness import CaseError, check_case

ROOT = Path(__file__).resolve().parent.parent


def _failing_case():
    for key in enumerate_cases((0,)):
        if key[0].type is OperationType.ADD and key[2].label == "quant8_asymm" and not key[4]:
            return sample_case(*key)
    raise AssertionError("no quantised ADD case")


def _verdict(monkeypatch, peers):
    monkeypatch.setattr(triage, "PEERS", peers)
    case = _failing_case()
    with pytest.raises(CaseError) as e:
        check_case(load_driver("mutant:quant_off_by_2"), case)
    model, feeds = case.model()
    judge = triage.Triage("vendor-npu", budget=1)  # the outputs are the mutant's
    try:
        verdict = judge.verdict(model, feeds, case.expected, e.value.outputs)
        assert judge.verdict(model, feeds, case.expected, e.value.outputs) is None  # budget spent
    finally:
        judge.close()
    return verdict


def test_peers_agreeing_with_the_reference_make_the_driver_the_odd_one_out(monkeypatch):
    verdict = _verdict(monkeypatch, {"ref-a": ("reference", "numpy"),
                                     "ref-b": ("service:reference", "numpy")})
    assert [p.verdict for p in verdict.peers] == ["agrees-reference", "agrees-reference"]
    assert verdict.summary.endswith("-> vendor-npu is the odd one out"), verdict.summary


def test_peers_agreeing_with_the_driver_make_the_reference_the_odd_one_out(monkeypatch):
    verdict = _verdict(monkeypatch, {"same-bug": ("mutant:quant_off_by_2", "numpy")})
    assert [p.verdict for p in verdict.peers] == ["agrees-driver"]
    assert verdict.summary.endswith("-> the reference is the odd one out"), verdict.summary


def test_missing_or_failing_peers_do_not_change_the_outcome(monkeypatch):
    verdict = _verdict(monkeypatch, {"absent": ("reference", "no_such_module_here"),
                                     "broken": ("service:mutant:crash,op=ADD", "numpy")})
    assert [p.peer for p in verdict.peers] == ["broken"]
    assert verdict.peers[0].verdict == "error" and "DEVICE_UNAVAILABLE" in verdict.peers[0].detail


def test_the_verdict_reaches_the_failure_and_the_report(tmp_path):
    report = tmp_path / "r.json"
    node = "conformance/test_operations.py::test_operation[ADD-quant8_asymm-none-s0]"
    proc = subprocess.run([sys.executable, "-m", "pytest", node, "-q", "-p", "no:cacheprovider",
                           "--driver=mutant:quant_off_by_2", f"--nncert-report={report}"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 1
    assert "three-way verdict:" in proc.stdout
    assert json.loads(report.read_text())["tests"][node]["verdict"].startswith("three-way verdict:")
