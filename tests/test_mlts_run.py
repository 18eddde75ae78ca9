"""`nncert mlts` (MLTS-1, MLTS-3, ACC-2): real models through a driver and the LiteRT CPU
baseline, judged and reported. The digits classifiers (trained at build time, float and
uint8) keep these fast; the zoo is built once per session in a temporary directory."""

from __future__ import annotations

import json

import numpy as np
import pandas as pd
import pytest

pytest.importorskip("ai_edge_litert")
pytest.importorskip("sklearn")

from nncert.cli import main
from nncert.hal.model import Operand
from nncert.hal.types import OperandType
from nncert.mlts import accuracy
from nncert.mlts.zoo import ZOO, Built, ZooError, ZooModel, load

pytestmark = pytest.mark.req("MLTS-1")

DIGITS = "digits_mlp,digits_mlp_u8"


@pytest.fixture(scope="module")
def zoo(tmp_path_factory):
    return tmp_path_factory.mktemp("zoo")


def _run(zoo, out, driver, models=DIGITS, limit="120", *extra):
    return main(["mlts", "--driver", driver, "--models", models, "--limit", limit, "--runs", "5",
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


def test_a_listed_failure_is_xfail_and_a_listed_pass_is_xpass(zoo, tmp_path, capsys):
    """Strict xfails from an expectations file (ids mlts::MODEL): the quant mutant's failure on
    the uint8 digits model is expected, its pass on the float one is not."""
    listed = tmp_path / "expectations.toml"
    listed.write_text('[[xfail]]\ntest = "mlts::digits_mlp*"\nreason = "off by two, on purpose"\n')
    code = _run(zoo, tmp_path / "out", "mutant:quant_off_by_2", DIGITS, "40", "--expectations", str(listed))
    assert code == 1
    statuses = pd.read_csv(tmp_path / "out" / "summary.csv").set_index("model")["status"].to_dict()
    assert statuses == {"digits_mlp": "XPASS", "digits_mlp_u8": "XFAIL"}
    assert "off by two, on purpose" in capsys.readouterr().out


@pytest.mark.parametrize("argv, message", [
    (["--models", "mobilenet_v9"], "unknown model mobilenet_v9"),
    (["--limit", "0"], "--limit must be at least 1"),
    (["--runs", "0"], "--runs >= 1"),
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

    with pytest.raises(ZooError, match="nncert_no_such_package"):
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
