"""The N-way verdict on a failing case (nncert.testing.triage)."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from pathlib import Path
from xml.etree import ElementTree

import background_runs
import numpy as np
import pytest

from nncert.drivers import load_driver
from nncert.hal.types import OperationType
from nncert.pytest_plugin import _triage_cases, _triage_seconds
from nncert.testing import triage
from nncert.testing.cases import enumerate_cases, sample_case
from nncert.testing.harness import CaseError, check_case
from nncert.testing.triage import PeerResult, Verdict

ROOT = Path(__file__).resolve().parent.parent


# -- the summary, from fabricated answers of the peers --

def _fabricated(driver: str, **answers: str) -> Verdict:
    """A verdict from the answers of the peers; "differs:PEER": agrees with neither, but with PEER."""
    return Verdict(driver, [PeerResult(name, answer.partition(":")[0], "boom" if answer == "error" else "",
                                       answer.partition(":")[2]) for name, answer in answers.items()])


@pytest.mark.parametrize(("answers", "summary", "odd"), [
    ({"onnxruntime": "agrees-reference"},
     "onnxruntime agrees with reference -> litert is the odd one out", ["litert"]),
    ({"onnxruntime": "agrees-reference", "openvino": "agrees-reference", "iree": "agrees-driver",
      "tvm": "agrees-reference"},
     "onnxruntime, openvino, tvm agree with reference; iree agrees with litert -> litert and iree are the "
     "odd ones out", ["litert", "iree"]),
    ({"onnxruntime": "agrees-driver", "openvino": "agrees-driver"},
     "onnxruntime, openvino agree with litert -> the reference is the odd one out", ["reference"]),
    ({"onnxruntime": "agrees-reference", "openvino": "agrees-driver", "tvm": "agrees-driver"},
     "onnxruntime agrees with reference; openvino, tvm agree with litert -> the reference and onnxruntime "
     "are the odd ones out", ["reference", "onnxruntime"]),
    # A peer agreeing with neither is a camp of its own, outside the majority too.
    ({"onnxruntime": "agrees-reference", "openvino": "differs", "tvm": "agrees-reference"},
     "onnxruntime, tvm agree with reference; openvino agrees with neither -> litert and openvino are the "
     "odd ones out", ["litert", "openvino"]),
    # ... unless such peers agree with each other: three against the reference and the driver.
    ({"onnxruntime": "differs", "openvino": "differs:onnxruntime", "iree": "differs:onnxruntime"},
     "onnxruntime, openvino, iree agree with neither, but with each other -> the reference and litert are "
     "the odd ones out", ["reference", "litert"]),
    # Camps tie: said so, nobody named.
    ({"onnxruntime": "agrees-reference", "openvino": "agrees-driver"},
     "onnxruntime agrees with reference; openvino agrees with litert -> no clear majority: reference and "
     "onnxruntime against litert and openvino", []),
    ({"onnxruntime": "agrees-reference", "openvino": "differs", "tvm": "differs:openvino"},
     "onnxruntime agrees with reference; openvino, tvm agree with neither, but with each other -> no clear "
     "majority: reference and onnxruntime against litert against openvino and tvm", []),
    ({"onnxruntime": "differs"},
     "onnxruntime agrees with neither -> no clear majority: reference against litert against onnxruntime",
     []),
    # Peers that decline, fail or agree with both judge nothing.
    ({"onnxruntime": "declines", "openvino": "error", "iree": "agrees-both", "tvm": "agrees-reference"},
     "tvm agrees with reference; iree agrees with both; onnxruntime declines the case; "
     "openvino failed (boom) -> litert is the odd one out", ["litert"]),
    ({"onnxruntime": "declines", "openvino": "error", "iree": "agrees-both"},
     "iree agrees with both; onnxruntime declines the case; openvino failed (boom)", []),
])
def test_the_summary_names_the_odd_ones_out_of_n_runtimes(answers, summary, odd):
    verdict = _fabricated("litert", **answers)
    assert verdict.summary == "N-way verdict: " + summary
    assert verdict.odd_ones_out == odd
    record = json.loads(json.dumps(verdict.as_dict()))
    assert record["odd_ones_out"] == odd and record["summary"] == verdict.summary
    assert record["agree_with_reference"] == [n for n, a in answers.items() if a == "agrees-reference"]
    assert record["agree_with_driver"] == [n for n, a in answers.items() if a == "agrees-driver"]
    assert {n: p["verdict"] for n, p in record["peers"].items()} == {n: a.partition(":")[0]
                                                                    for n, a in answers.items()}
    assert not odd or sorted(odd + record["majority"]) == sorted(n for c in record["camps"] for n in c)


def test_a_case_past_the_budget_says_it_was_not_triaged():
    assert Verdict("litert").summary == "N-way verdict: no peer runtime available"
    spent = Verdict("litert", not_triaged="the triage budget of 200 cases a session is spent")
    assert spent.summary == "N-way verdict: not triaged (the triage budget of 200 cases a session is spent)"
    assert spent.as_dict()["not_triaged"] and spent.as_dict()["odd_ones_out"] == []


def test_peer_names_are_checked(monkeypatch):
    monkeypatch.setitem(triage.PEERS, "absent", ("service:absent", ("numpy", "no_such_module_here")))
    assert triage.parse_peers(" onnxruntime,litert,onnxruntime") == ["onnxruntime", "litert"]
    assert triage.parse_peers("all") == [n for n in triage.PEERS if triage.installed(n)]
    # Without a choice, the peers that compile every case (IREE, TVM) are left out.
    fast = [n for n in ("onnxruntime", "openvino") if triage.installed(n)]
    assert triage.Triage("litert").peer_names == fast
    for text, words in (("nope", "'nope' is no peer runtime (known: litert, onnxruntime"),
                        ("litert,absent", "absent is not installed (installed: litert, onnxruntime"),
                        (",", "name at least one peer runtime")):
        with pytest.raises(ValueError, match=r"^--triage-peers: ") as e:
            triage.parse_peers(text)
        assert words in str(e.value) and "\n" not in str(e.value)


# -- peers replaying a real case, in process and out --

def _failing_case():
    for key in enumerate_cases((0,)):
        if key[0].type is OperationType.ADD and key[2].label == "quant8_asymm" and not key[4]:
            return sample_case(*key)
    raise AssertionError("no quantised ADD case")


def _replayed(monkeypatch, peers, times=1, **options):
    """The verdicts of ``times`` replays of a failing case of a mutant (triage of a session
    allowed ``times`` cases): the last one must say the budget is spent."""
    monkeypatch.setattr(triage, "PEERS", {name: (spec, (module,)) for name, (spec, module) in peers.items()})
    case = _failing_case()
    with pytest.raises(CaseError) as e:
        check_case(load_driver("mutant:quant_off_by_2"), case)
    model, feeds = case.model()
    judge = triage.Triage("vendor-npu", budget=times, **options)  # the outputs are the mutant's
    try:
        verdicts = [judge.verdict(model, feeds, case.expected, e.value.outputs) for _ in range(times + 1)]
    finally:
        judge.close()
    assert verdicts[-1].summary == ("N-way verdict: not triaged (the triage budget of "
                                    f"{times} cases a session is spent)")
    assert judge.take() is verdicts[-1] and judge.take() is None
    return verdicts[:-1]


def test_peers_agreeing_with_the_reference_make_the_driver_the_odd_one_out(monkeypatch):
    [verdict] = _replayed(monkeypatch, {"ref-a": ("reference", "numpy"),
                                        "ref-b": ("service:reference", "numpy")})
    assert [p.verdict for p in verdict.peers] == ["agrees-reference", "agrees-reference"]
    assert verdict.summary == ("N-way verdict: ref-a, ref-b agree with reference -> vendor-npu is the "
                               "odd one out")


def test_a_driver_without_outputs_is_judged_by_whether_the_peers_agree_with_the_reference(monkeypatch):
    """A case the driver refused, failed or died on (a finding's crash or refusal): no peer
    can side with it, and the verdict says it gave no outputs."""
    monkeypatch.setattr(triage, "PEERS", {"ref-a": ("reference", ("numpy",)),
                                          "bug": ("mutant:quant_off_by_2", ("numpy",))})
    case = _failing_case()
    model, feeds = case.model()
    judge = triage.Triage("vendor-npu")
    try:
        verdict = judge.verdict(model, feeds, case.expected, None)
    finally:
        judge.close()
    assert [p.verdict for p in verdict.peers] == ["agrees-reference", "differs"]
    assert verdict.no_outputs and verdict.as_dict()["no_outputs"]
    assert verdict.summary == ("N-way verdict: ref-a agrees with reference; bug agrees with neither -> "
                               "vendor-npu and bug are the odd ones out (vendor-npu gave no outputs)")


def test_peers_agreeing_with_the_driver_make_the_reference_the_odd_one_out(monkeypatch):
    [verdict] = _replayed(monkeypatch, {"same-bug": ("mutant:quant_off_by_2", "numpy"),
                                        "ref": ("reference", "numpy"),
                                        "other-bug": ("mutant:quant_off_by_2", "numpy")})
    assert verdict.summary == ("N-way verdict: ref agrees with reference; same-bug, other-bug agree with "
                               "vendor-npu -> the reference and ref are the odd ones out")


def test_missing_failing_and_hung_peers_do_not_change_the_outcome(monkeypatch):
    """A peer that aborts is an error of that peer; one that hangs is killed at its deadline
    and started again for the next case."""
    first, second = _replayed(monkeypatch, {"absent": ("reference", "no_such_module_here"),
                                            "broken": ("service:mutant:crash,op=ADD", "numpy"),
                                            "hung": ("service:mutant:hang,op=ADD", "numpy"),
                                            "ref": ("reference", "numpy")}, times=2, deadline=3.0)
    for verdict in (first, second):
        assert [(p.peer, p.verdict) for p in verdict.peers] == [("broken", "error"), ("hung", "error"),
                                                                ("ref", "agrees-reference")]
        assert "DEVICE_UNAVAILABLE" in verdict.peers[0].detail
        # Killed at its deadline, and started again for the second case (not found dead).
        assert "HANG" in verdict.peers[1].detail and "no answer within 3.0 s" in verdict.peers[1].detail
        assert verdict.summary.endswith("-> vendor-npu is the odd one out")


def test_a_nan_of_the_driver_is_an_answer_no_peer_with_a_number_agrees_with(monkeypatch):
    """The criteria skip non-finite expected values (a NaN of the reference leaves the element
    open); judged against the driver's outputs, its NaN must still be matched."""
    monkeypatch.setattr(triage, "PEERS", {"ref": ("reference", ("numpy",))})
    case = next(sample_case(*key) for key in enumerate_cases((0,))
                if key[0].type is OperationType.ADD and key[2].label == "float32" and not key[4])
    model, feeds = case.model()

    def skipping_non_finite(one, other):  # as compare_graph judges a random graph
        return all(np.allclose(o[np.isfinite(o)], t[np.isfinite(o)]) for o, t in zip(one, other, strict=True))

    judge = triage.Triage("vendor-npu", budget=2)
    try:
        nan = [e.copy() for e in case.expected]
        nan[0].flat[0] = np.nan
        wrong = judge.verdict(model, feeds, case.expected, nan, agree=skipping_non_finite)
        same = judge.verdict(model, feeds, case.expected, case.expected, agree=skipping_non_finite)
    finally:
        judge.close()
    assert [p.verdict for p in wrong.peers] == ["agrees-reference"]
    assert wrong.summary == "N-way verdict: ref agrees with reference -> vendor-npu is the odd one out"
    assert [p.verdict for p in same.peers] == ["agrees-both"]


def test_once_the_triage_time_is_spent_no_more_cases_are_triaged(monkeypatch):
    [verdict] = _replayed(monkeypatch, {"ref": ("service:reference", "numpy"),
                                        "more": ("reference", "numpy")}, times=1, seconds=1e-9)
    # The first peer was asked before the time ran out, the second no more.
    assert [p.verdict for p in verdict.peers] == ["agrees-reference", "skipped"]
    assert verdict.summary == ("N-way verdict: ref agrees with reference; more not asked (the triage time "
                               "of 1e-09 s a session is spent) -> vendor-npu is the odd one out")


# -- the options and the whole path, in a pytest session --

def _pytest(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *args],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)


def test_a_bad_triage_option_is_a_usage_error():
    proc = _pytest("conformance/test_operations.py", "--driver=reference", "--collect-only",
                   "--triage-peers=litert,nope")
    assert proc.returncode == 4 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().startswith(
        "ERROR: --triage-peers: 'nope' is no peer runtime (known: litert, onnxruntime, openvino, iree, tvm; "
        "installed: litert, onnxruntime"), proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    for check, text in ((_triage_seconds, "0"), (_triage_seconds, "inf"), (_triage_cases, "-1"),
                        (_triage_cases, "1.5")):
        with pytest.raises(argparse.ArgumentTypeError, match=f"^'{text}' is not a number of"):
            check(text)
    assert (_triage_seconds("0.5"), _triage_cases("0")) == (0.5, 0)


#: One failing case of a per-operation test, as a test file of its own: collecting the whole
#: per-operation suite would cost a third of this file's time.
CASE_TEST = """
from nncert.hal.types import OperationType
from nncert.testing.cases import enumerate_cases, sample_case
from nncert.testing.harness import run_case


def test_quantised_add(driver):
    key = next(k for k in enumerate_cases((0,)) if k[0].type is OperationType.ADD
               and k[2].label == "quant8_asymm" and not k[4])
    run_case(driver, sample_case(*key))
"""

NOT_EQUAL = "conformance/test_operations.py::test_operation[NOT_EQUAL-quant8_asymm-s0]"


def _argv(which: str) -> list[str]:
    """The pytest run of an end-to-end test below: ``mutant`` (a mutant judged by LiteRT and
    ONNX Runtime) or ``litert`` (LiteRT's known NOT_EQUAL discrepancy, judged by ONNX Runtime
    and OpenVINO where its driver is installed)."""
    where = background_runs.scratch()
    if which == "mutant":
        test = where / "test_triage_case.py"
        if not test.exists():
            test.write_text(CASE_TEST)
        args = [f"{test}::test_quantised_add", f"--rootdir={where}", "--driver=mutant:quant_off_by_2",
                "--triage-peers=litert,onnxruntime"]
    else:
        peers = "onnxruntime,openvino" if triage.installed("openvino") else "onnxruntime"
        args = [NOT_EQUAL, "--driver=litert", "--no-expectations", f"--triage-peers={peers}"]
    return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
            f"--nncert-report={where / f'triage-{which}.json'}", *args]


def runs_to_start(item) -> list[list[str]]:
    """The end-to-end runs, started at collection to run beside the other tests
    (tests/background_runs.py)."""
    which = {"test_a_mutant_is_the_odd_one_out_of_litert_and_onnxruntime": "mutant",
             "test_a_real_discrepancy_of_litert_names_litert_an_odd_one_out": "litert"}.get(item.originalname)
    return [_argv(which)] if which else []


def _verdict_of(which: str) -> tuple[str, dict]:
    """The verdict line the run's report holds for its one failing test, and its as_dict."""
    argv = _argv(which)
    proc = background_runs.run(argv, timeout=600)
    assert proc.returncode == 1, proc.stdout[-2000:] + proc.stderr[-2000:]
    report = next(a for a in argv if a.startswith("--nncert-report=")).partition("=")[2]
    [record] = json.loads(Path(report).read_text())["tests"].values()
    assert record["verdict"] in proc.stdout
    return record["verdict"], record["properties"]["nncert_triage"]


def test_a_mutant_is_the_odd_one_out_of_litert_and_onnxruntime():
    verdict, record = _verdict_of("mutant")
    assert verdict == ("N-way verdict: litert, onnxruntime agree with reference -> mutant:quant_off_by_2 "
                       "is the odd one out")
    assert record["odd_ones_out"] == ["mutant:quant_off_by_2"]
    assert record["majority"] == ["reference", "litert", "onnxruntime"]


def test_a_real_discrepancy_of_litert_names_litert_an_odd_one_out():
    """LiteRT's NOT_EQUAL on quantised inputs of different scales calls equal values unequal
    (its expectations.toml); ONNX Runtime sides with the reference."""
    verdict, record = _verdict_of("litert")
    assert verdict.startswith("N-way verdict: onnxruntime agrees with reference")
    assert record["majority"][:2] == ["reference", "onnxruntime"] and record["odd_ones_out"][0] == "litert"
    if not triage.installed("openvino"):
        assert verdict == "N-way verdict: onnxruntime agrees with reference -> litert is the odd one out"


def test_the_certification_files_show_the_verdict():
    from nncert.certify.html import _three_way
    from nncert.certify.report import junit

    summary = _fabricated("litert", onnxruntime="agrees-reference", iree="agrees-driver",
                          tvm="agrees-reference").as_dict()
    test = {"id": "conformance/test_operations.py::test_operation[X]", "suite": "operations",
            "req": ["ACC-3"], "status": "FAIL", "verdict": summary["summary"],
            "properties": {"nncert_triage": summary}}
    xml = ElementTree.fromstring(junit({"plan": {"name": "smoke"}, "driver": {"spec": "litert"},
                                        "suites": [{"name": "operations", "duration": 1.0}],
                                        "tests": [test]}))
    properties = {p.get("name"): p.get("value") for p in xml.iter("property")}
    assert properties["odd_ones_out"] == "litert,iree" and properties["three_way"] == summary["summary"]
    html = _three_way(summary["summary"])
    assert html.endswith("<span class='odd'>litert and iree are the odd ones out</span></div>"), html
