"""`nncert mlts` and `pytest mlts` (MLTS-1, MLTS-3, ACC-2): real models through a driver and
the LiteRT CPU baseline, judged and reported. The digits classifiers (trained at build time,
float and uint8) keep these fast; the zoo is built once per module in a temporary directory."""

from __future__ import annotations

import ast
import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("ai_edge_litert")
pytest.importorskip("sklearn")

from nncert.cli import main
from nncert.hal.model import Operand
from nncert.hal.types import OperandType
from nncert.mlts import accuracy
from nncert.mlts.run import expectation_id
from nncert.mlts.zoo import ZOO, Built, MissingPackageError, ZooModel, load
from nncert.testing import expectations

pytestmark = pytest.mark.req("MLTS-1")

DIGITS = "digits_mlp,digits_mlp_u8"


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    return tmp_path_factory.mktemp("zoo")


def _run(zoo, out, driver, models=DIGITS, limit: str | None = "120", *extra):
    limits = ["--limit", limit] if limit else []
    return main(["mlts", "--driver", driver, "--models", models, *limits, "--runs", "5",
                 "--warmup", "1", "--zoo-dir", str(zoo), "--out", str(out), "--quiet", *extra])


@pytest.mark.req("MLTS-3")
@pytest.mark.parametrize("driver", ["litert", "onnxruntime", "reference"])
def test_digits_pass_on_real_drivers_with_a_report(zoo, tmp_path, driver, capsys):
    assert _run(zoo, tmp_path, driver) == 0, capsys.readouterr()
    summary = pd.read_csv(tmp_path / "summary.csv")
    assert list(summary["model"]) == ["digits_mlp", "digits_mlp_u8"]
    assert (summary["status"] == "PASS").all() and (summary["samples"] == 120).all()
    assert (summary["top1"] >= 0.9).all() and (summary["agreement"] >= 0.98).all()
    latency = pd.read_csv(tmp_path / "latency.csv")
    assert set(latency["runtime"]) == {"driver", "baseline"}
    assert (latency["p99_ms"] >= latency["p50_ms"]).all()
    errors = json.loads((tmp_path / "errors.json").read_text())
    quant = [e for e in errors if e["model"] == "digits_mlp_u8"]
    assert quant and all(e["max_steps"] <= 1 for e in quant)
    compilation = pd.read_csv(tmp_path / "compilation.csv")
    if driver != "reference":  # the compiled drivers cache: a hit is timed, and is faster than compiling
        assert {"cache_miss", "cache_hit"} <= set(compilation.columns)
    page = (tmp_path / "report.html").read_text()
    assert "<table>" in page and "data:image/png;base64," in page and "MobileNet" in page


@pytest.mark.req("ACC-2")
def test_the_quant_rounding_mutant_fails_the_accuracy_check(zoo, tmp_path, capsys):
    assert _run(zoo, tmp_path, "mutant:quant_off_by_2", "digits_mlp_u8", "60") == 1
    out = capsys.readouterr().out
    assert "FAIL digits_mlp_u8" in out and "ACC-2" in out
    assert pd.read_csv(tmp_path / "summary.csv")["status"].tolist() == ["FAIL"]


def _listed(tmp_path, glob: str) -> Path:
    listed = tmp_path / "expectations.toml"
    listed.write_text(f'[[xfail]]\ntest = "{glob}"\nreason = "off by two, on purpose"\n')
    return listed


def test_a_listed_failure_is_xfail_and_a_listed_pass_is_xpass(zoo, tmp_path, capsys):
    """Strict xfails from an expectations file, ids the pytest node ids: the quant mutant's
    failure on the uint8 digits model is expected, its pass on the float one (every sample) is not."""
    listed = _listed(tmp_path, "mlts/test_accuracy.py::test_model[digits_mlp*]")
    code = _run(zoo, tmp_path / "out", "mutant:quant_off_by_2", DIGITS, None, "--expectations", str(listed))
    assert code == 1
    statuses = pd.read_csv(tmp_path / "out" / "summary.csv").set_index("model")["status"].to_dict()
    assert statuses == {"digits_mlp": "XPASS", "digits_mlp_u8": "XFAIL"}
    assert "off by two, on purpose" in capsys.readouterr().out


def test_a_listed_model_that_passes_a_limited_run_is_not_refuted(zoo, tmp_path, capsys):
    """The first samples passing say nothing of a failure listed further on: XFAIL, saying so."""
    listed = _listed(tmp_path, expectation_id(ZOO["digits_mlp"]))
    assert _run(zoo, tmp_path / "out", "reference", "digits_mlp", "10", "--expectations", str(listed)) == 0
    assert pd.read_csv(tmp_path / "out" / "summary.csv")["status"].tolist() == ["XFAIL"]
    assert "passed on the first 10 samples only" in capsys.readouterr().out


def test_the_onnxruntime_entry_names_the_model_by_its_node_id():
    """One id for both front ends: the shipped entry covers the pytest test of the model."""
    known = expectations.load("onnxruntime", ())
    model = ZOO["efficientnet_lite0_int8"]
    assert expectation_id(model) == "mlts/test_accuracy.py::test_model[efficientnet_lite0_int8]"
    assert expectations.match(known, expectation_id(model)) is not None


@pytest.mark.parametrize("argv, message", [
    (["--models", "mobilenet_v9"], "unknown model mobilenet_v9"),
    (["--limit", "0"], "limit must be at least 1 sample, not 0"),
    (["--runs", "0"], "runs must be at least 1, not 0"),
    (["--driver", "nosuchdriver"], "nosuchdriver"),
])
def test_bad_input_is_one_line(zoo, tmp_path, capsys, argv, message):
    assert main(["mlts", "--zoo-dir", str(zoo), "--out", str(tmp_path), "--quiet", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1 and "Traceback" not in err


def test_the_zoo_builds_once_and_reports_a_broken_entry(tmp_path):
    calls = []
    entry = ZooModel("counted", "a counted digits model", "test", "classification", False,
                     lambda: calls.append(1) or ZOO["digits_mlp"].build(), ZOO["digits_mlp"].samples)
    first = load(entry, tmp_path)
    again = load(entry, tmp_path)
    assert len(calls) == 1 and again.tflite == first.tflite and again.info["build_s"] >= 0
    assert len(again.model.main.operations) == len(first.model.main.operations)

    def missing() -> Built:
        import nncert_no_such_package  # noqa: F401

    with pytest.raises(MissingPackageError, match="nncert_no_such_package"):
        load(ZooModel("broken", "", "", "classification", False, missing, lambda n: []), tmp_path)


def test_accuracy_statistics():
    q = Operand(OperandType.TENSOR_QUANT8_ASYMM, (4,), 0.5, 10)
    stats = accuracy.OutputStats(0, q, steps=1)
    stats.add(np.array([10, 11, 12, 200], np.uint8), np.array([11, 11, 14, 200], np.uint8))
    assert (stats.max_steps, stats.over_steps) == (2, 1) and stats.max_abs == 1.0
    assert "ACC-2" in stats.failure()
    classes = accuracy.ClassStats()
    for scores, label in (([0.1, 0.9], 1), ([0.8, 0.2], 1)):
        classes.add(np.array(scores), np.array(scores[::-1]), frozenset({label}))
    assert classes.rate(classes.top1, "baseline") == 0.5 and classes.agreement == 0.0
    assert classes.rate(classes.top1, "driver") == 0.5 and classes.failure() is None  # as accurate
    worse = accuracy.ClassStats()
    worse.add(np.array([0.1, 0.9]), np.array([0.9, 0.1]), frozenset({1}))
    assert "top-1 accuracy 0.000 is below the baseline's 1.000" in worse.failure()
    assert accuracy.mark(0.80, 0.90, 0.01) == "worse" and accuracy.mark(2.0, 1.0, 0.1, False) == "worse"


# ---------------------------------------------------------------------------------------
# `pytest mlts`: the same engine as a pytest suite, one test per model

ROOT = Path(__file__).resolve().parent.parent

#: A plugin for the child pytest: per test, how its call ended (a Declined skip told apart from
#: a plain one, as a certification report must), its message and its properties, as JSON.
RECORDER = '''
import json, os
import pytest
from nncert.testing.harness import Declined

RECORDS = {}

@pytest.hookimpl(wrapper=True, tryfirst=True)  # outermost: the report as the other plugins leave it
def pytest_runtest_makereport(item, call):
    report = yield
    if call.when == "call":
        error = call.excinfo
        RECORDS[item.nodeid] = {
            "outcome": "xfailed" if hasattr(report, "wasxfail") else report.outcome,
            "declined": error is not None and error.errisinstance(Declined),
            "message": getattr(report, "wasxfail", "") or (str(error.value) if error else ""),
            "properties": dict(report.user_properties)}
    return report

def pytest_sessionfinish(session):
    with open(os.environ["NNCERT_TEST_RECORDS"], "w") as f:
        json.dump(RECORDS, f)
'''


def _suite(tmp_path: Path, zoo: Path, *args: str) -> tuple[subprocess.CompletedProcess, dict[str, dict]]:
    """``python -m pytest ARGS`` in a child, from the checkout; its result and the records."""
    (tmp_path / "nncert_test_recorder.py").write_text(RECORDER)
    records = tmp_path / "records.json"
    path = os.pathsep.join(filter(None, [str(tmp_path), str(ROOT), os.environ.get("PYTHONPATH")]))
    argv = [sys.executable, "-m", "pytest", "-q", "-p", "nncert_test_recorder", f"--mlts-zoo-dir={zoo}",
            *args]
    proc = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": path, "NNCERT_TEST_RECORDS": str(records)})
    return proc, json.loads(records.read_text()) if records.exists() else {}


def _node(name: str) -> str:
    return expectation_id(ZOO[name])


def test_suite_passes_on_the_reference_and_records_each_model(zoo, tmp_path):
    junit = tmp_path / "junit.xml"
    proc, records = _suite(tmp_path, zoo, "mlts/test_accuracy.py", "--mlts-models", DIGITS, "--mlts-limit=30",
                           f"--junitxml={junit}")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert set(records) == {_node("digits_mlp"), _node("digits_mlp_u8")}  # --mlts-models deselects the rest
    assert records[_node("digits_mlp")]["properties"]["req"] == ["MLTS-1", "ACC-5"]
    record = records[_node("digits_mlp_u8")]
    assert record["outcome"] == "passed" and record["properties"]["req"] == ["MLTS-1", "ACC-2"]
    row = record["properties"]["nncert_mlts"]
    assert (row["model"], row["status"], row["samples"]) == ("digits_mlp_u8", "PASS", 30) and row["quantised"]
    assert row["top1"] >= 0.9 and row["baseline_top1"] >= 0.9 and row["agreement"] >= 0.9
    assert row["outputs"][0]["max_steps"] <= 1 and row["outputs"][0]["verdict"] == "pass"
    for stats in (row["latency"]["driver"], row["latency"]["baseline"]):
        assert stats["runs"] == 3 and stats["p90_ms"] >= stats["p50_ms"] > 0
    assert row["compile_ms"]["plain"] > 0 and row["reasons"] == []
    cases = {c.get("name"): c for c in ET.parse(junit).getroot().iter("testcase")}
    prop = {p.get("name"): p.get("value") for p in cases["test_model[digits_mlp_u8]"].iter("property")}
    assert ast.literal_eval(prop["nncert_mlts"])["top1"] == row["top1"]


def test_suite_fails_a_mutant_naming_the_requirement_and_keeps_a_limited_pass_unrefuted(zoo, tmp_path):
    """quant_off_by_2 fails the uint8 model on ACC-2; the float model, listed as failing, passes
    its first samples: an xfail that says so, not an XPASS."""
    listed = _listed(tmp_path, _node("digits_mlp"))
    proc, records = _suite(tmp_path, zoo, "mlts/test_accuracy.py", "--mlts-models", DIGITS,
                           "--driver=mutant:quant_off_by_2", f"--expectations={listed}")
    assert proc.returncode == 1, proc.stdout[-3000:]
    failed = records[_node("digits_mlp_u8")]
    assert failed["outcome"] == "failed" and failed["message"].startswith("FAIL digits_mlp_u8: output 0:")
    assert "ACC-2" in failed["message"] and failed["properties"]["nncert_mlts"]["status"] == "FAIL"
    assert failed["properties"]["nncert_mlts"]["outputs"][0]["over_steps"] > 0
    listed_pass = records[_node("digits_mlp")]
    assert listed_pass["outcome"] == "xfailed" and "off by two, on purpose" in listed_pass["message"]
    assert "passed on the first 2 samples only" in listed_pass["message"]


def test_every_mlts_test_of_a_declining_driver_is_declined(zoo, tmp_path):
    stress = "mlts/test_stress.py::test_stress[inference]"
    proc, records = _suite(tmp_path, zoo, _node("digits_mlp_u8"), stress,
                           "--driver=tests.test_mlts_stress:DecliningDriver")
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert len(records) == 2 and all(r["outcome"] == "skipped" and r["declined"] for r in records.values())
    assert "declining declines FULLY_CONNECTED" in records[_node("digits_mlp_u8")]["message"]
    assert records[_node("digits_mlp_u8")]["properties"]["nncert_mlts"]["status"] == "UNSUPPORTED"


@pytest.mark.parametrize("option, message", [
    ("--mlts-limit=0", "MLTS options: limit must be at least 1 sample, not 0"),
    ("--mlts-runs=many", "--mlts-runs: 'many' is not a whole number"),
    ("--mlts-models=mobilenet_v9", "--mlts-models: unknown model mobilenet_v9"),
])
def test_bad_suite_options_are_one_line(zoo, tmp_path, option, message):
    proc, _ = _suite(tmp_path, zoo, "mlts/test_accuracy.py", "--collect-only", option)
    err = proc.stderr.strip()
    assert proc.returncode == 4 and err.startswith(f"ERROR: {message}") and "\n" not in err, err
