"""Standalone reproducers of fuzz findings (nncert/repro/fuzzed.py, ``nncert repro FINDING
--standalone DIR``): a finding as a campaign writes it (findings/NNN-KEY with ``minimized`` and
``spec.json``) is decoded, minimised on its model and written; the reproducer runs where nncert
cannot be imported and shows the finding's symptom (a LiteRT abort, a LiteRT wrong result);
findings no runtime model file shows, and what is no finding, are one line and exit status 2."""

from __future__ import annotations

import base64
import json
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from nncert.cli import main
from nncert.drivers.compiled import CompiledDriver, StandaloneRunner
from nncert.fuzz import decode as dec
from nncert.fuzz.campaign import finding_dir_name, standalone_command
from nncert.hal.builder import ModelBuilder
from nncert.hal.types import OperandType as T
from nncert.hal.types import OperationType as O
from nncert.repro import standalone
from nncert.repro.fuzzed import Symptom, fewest_operations, write_of_finding

TIMEOUT_S = 240


def run_blocked(path: Path) -> subprocess.CompletedProcess:
    """run.py in a process where ``import nncert`` fails (the writer's own blocker)."""
    return subprocess.run([sys.executable, "-c", standalone.WITHOUT_NNCERT], cwd=path,
                          stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=TIMEOUT_S)


def case_index(case: str) -> int:
    return next(i for i, k in enumerate(dec.cases()) if k.id == case)


def write_finding(root: Path, target: str, data: bytes, key: str, kind: str, signal_name: str | None = None,
                  driver: str = "litert", number: int = 1) -> Path:
    """A finding directory with the files and spec.json fields a campaign writes."""
    where = root / "findings" / finding_dir_name(number, key)
    where.mkdir(parents=True)
    (where / "minimized").write_bytes(data)
    command = f"nncert fuzz replay {target} {where / 'minimized'} --driver {driver}"
    spec = {"target": target, "driver": driver, "key": key, "kind": kind, "message": f"{kind} found",
            "signal": signal_name, "frames": [], "input_base64": base64.b64encode(data).decode(),
            "input_size": len(data), "command": command}
    (where / "spec.json").write_text(json.dumps(spec))
    return where


def scale_one_equal() -> bytes:
    """prepare_model input: the catalogue's quantised EQUAL with one mutation, operand 0's scale
    set to exactly 1.0 (mutation 2, _operand_scale; operand pick 0; interesting float 2, 1.0):
    LiteRT aborts when it runs it (findings/catalogue.toml)."""
    return dec.encode_case(case_index("EQUAL-quant8_asymm-s0/base"))[:4] + bytes([1, 2, 0, 2])


def test_a_litert_abort_found_by_fuzzing_is_minimised_and_aborts_without_nncert(tmp_path, capsys):
    pytest.importorskip("ai_edge_litert")
    data = scale_one_equal()
    assert "operand 0 scale=1.0" in dec.decode_model(data).describe()
    where = write_finding(tmp_path, "prepare_model", data, "CRASH|interpreter.py:invoke|SIGABRT", "CRASH",
                          "SIGABRT")
    # The campaign records the line that writes it; that line, run, writes it.
    command = standalone_command(where, json.loads((where / "spec.json").read_text()))
    assert command == (f"nncert repro {where} --driver litert --standalone {where / 'standalone'}")
    assert main(command.split()[1:]) == 0
    out = where / "standalone"
    assert f"standalone reproducer: {out}\n  crashed (killed by SIGABRT)" in capsys.readouterr().out
    case = standalone.load_case(out)
    assert case["outcome"] == "crashed" and case["signal"] == "SIGABRT" and case["finding"]["shown"]
    assert case["operations"] == ["EQUAL"]
    # Minimised on the decoded model: inputs of 4x3 and 1x4x3 cut to one element each.
    assert [i["shape"] for i in case["inputs"]] == [[1, 1], [1, 1, 1]]
    readme = (out / "README.md").read_text()
    assert "scale=1 zero_point=118" in readme and "operand 0 scale=1.0" in readme
    assert "inputs shrunk from 4x3, 1x4x3 to 1x1, 1x1x1" in readme
    assert "The finding's symptom, which run.py must show to reproduce it: a crash (SIGABRT)" in readme
    got = run_blocked(out)
    assert got.returncode == -signal.SIGABRT, got.stdout + got.stderr


def test_a_wrong_result_of_the_execute_target_keeps_the_requests_values(tmp_path, capsys):
    """The execute target's seed of LiteRT's known NOT_EQUAL defect (scales s and 2s): the
    request's own input values, shrunk to one element that LiteRT still gets wrong."""
    pytest.importorskip("ai_edge_litert")
    data = dec.encode_case(case_index("NOT_EQUAL-quant8_asymm-s0/base"))
    where = write_finding(tmp_path, "execute", data, "wrong-result|NOT_EQUAL|NONE", "FINDING")
    (where / "minimized").unlink()  # the input from spec.json alone
    assert main(["repro", str(where / "spec.json"), "--standalone", str(tmp_path / "out")]) == 0
    case = standalone.load_case(tmp_path / "out")
    assert case["outcome"] == "reproduced" and case["max_abs_diff"] == 1
    request_values = dec.seed_case(case_index("NOT_EQUAL-quant8_asymm-s0/base")).feeds
    assert [i["shape"] for i in case["inputs"]] == [[1, 1, 1, 1]] * 2
    # one element of the request's values each (not the probe's sample values, zero point + 1..3)
    for given, values in zip(case["inputs"], request_values, strict=True):
        assert given["values"][0][0][0][0] in values.ravel()
    got = run_blocked(tmp_path / "out")
    assert got.returncode == 1 and "REPRODUCED: output0: 1 of 1 elements outside" in got.stdout
    capsys.readouterr()


class SleepyCompiled(CompiledDriver):
    """A compiled driver whose standalone run.py never ends, as a runtime that hangs."""

    name = "sleepy"
    runtime = "numpy 0"

    def operation_problem(self, model, index):
        return None

    def translate(self, model):
        return b"a model"

    def standalone_runner(self, wide, content):
        return StandaloneRunner({"model.bin": content}, "def run(inputs):\n    import time\n"
                                "    time.sleep(3600)\n", ["numpy"])


def test_a_hang_is_written_as_a_script_that_runs_past_the_deadline(tmp_path):
    where = write_finding(tmp_path, "prepare_model", dec.encode_case(case_index("ADD-float32-none-s0/base")),
                          "HANG|interpreter.py:invoke|", "HANG", driver="sleepy")
    path = write_of_finding(where, SleepyCompiled(), tmp_path / "out", hang_s=2.0)
    case = standalone.load_case(path)
    assert case["outcome"] == "hung" and case["returncode"] is None
    assert case["ended"] == "still running after 2 s: killed"
    assert case["finding"] == {"target": "prepare_model", "key": "HANG|interpreter.py:invoke|",
                               "kind": "HANG", "symptom": "hang", "signal": None, "shown": True}
    readme = (path / "README.md").read_text()
    assert "must show to reproduce it: a hang" in readme and "not minimised: a hang costs" in readme
    assert "**hung: still running at the deadline (still running after 2 s: killed)**" in readme


def test_each_target_decodes_into_a_model_and_the_values_to_feed_it(tmp_path):
    from nncert.drivers.probe import sample_feeds
    from nncert.repro.fuzzed import decoded, load_finding

    add = case_index("ADD-float32-none-s0/base")
    seed = dec.seed_case(add)
    for target in ("prepare_model", "execute", "prepare_from_cache"):
        where = write_finding(tmp_path / target, target, dec.encode_case(add), "CRASH|x|SIGSEGV", "CRASH",
                              "SIGSEGV")
        model, feeds, how = decoded(load_finding(where / "minimized"))
        assert [op.type for op in model.main.operations] == [O.ADD], target
        given = seed.feeds if target == "execute" else sample_feeds(seed.model)
        assert all(np.array_equal(a, b) for a, b in zip(feeds, given, strict=True)), target
        assert ("request's input values" if target == "execute" else "sample values") in how
    # a request whose input pool the mutations removed gives no values: sample values then
    no_pool = dec.encode_case(add)[:4] + bytes([1, 5, 0, 0, 0])  # mutation 5 (_pool): remove pool 0
    where = write_finding(tmp_path / "no-pool", "execute", no_pool, "CRASH|x|SIGSEGV", "CRASH", "SIGSEGV")
    model, feeds, how = decoded(load_finding(where))
    assert "removed pool 0" in how and "sample values" in how


def test_a_symptom_is_shown_only_by_the_same_ending():
    crashed = {"outcome": "crashed", "signal": "SIGSEGV", "returncode": -11}
    hung = {"outcome": "hung", "returncode": None, "ended": "still running after 25 s: killed"}
    raised = {"outcome": "error", "returncode": 3}
    assert Symptom("crash", "SIGSEGV").shown_by(crashed) and not Symptom("crash", "SIGABRT").shown_by(crashed)
    assert Symptom("crash").shown_by(crashed) and not Symptom("crash").shown_by(raised)
    assert Symptom("hang").shown_by(hung) and not Symptom("hang").shown_by(raised)
    assert Symptom("wrong-result").shown_by({"outcome": "reproduced"})
    assert not Symptom("wrong-result").shown_by(crashed)


def test_fewest_operations_feeds_the_isolated_operation_the_references_values():
    b = ModelBuilder()
    x = b.operand(T.TENSOR_FLOAT32, (2,))
    mid, out = b.operand(T.TENSOR_FLOAT32, (2,)), b.operand(T.TENSOR_FLOAT32, (2,))
    b.operation(O.RELU, [x], [mid])
    b.operation(O.TANH, [mid], [out])
    model = b.build([x], [out])
    tried = []

    def shows(m, feeds):
        tried.append([op.type for op in m.main.operations])
        return [op.type for op in m.main.operations] == [O.TANH]

    small, feeds, steps = fewest_operations(model, [np.array([-1.0, 2.0], np.float32)], shows)
    assert tried == [[O.RELU], [O.TANH]] and steps == ["2 operations cut to operation 1 (TANH) alone"]
    np.testing.assert_array_equal(feeds[0], [0.0, 2.0])  # RELU's result, as the reference computes it
    assert [op.type for op in small.main.operations] == [O.TANH]


@pytest.mark.parametrize(("target", "key", "kind", "message"), [
    ("validate_request", "exception|ADD|", "FINDING", "the validate_request target decodes no model"),
    ("prepare_model", "wrong-acceptance|ADD|NONE", "FINDING",
     "is a wrong-acceptance of nncert's driver layer, not a crash, hang or wrong result of the runtime"),
    ("execute", "EXCEPTION|compiled.py:run|MemoryError", "EXCEPTION", "replay it with: nncert fuzz replay"),
    ("execute", "UNREPRODUCED|crash|", "UNREPRODUCED", "its campaign's replay ran cleanly"),
])
def test_findings_no_runtime_model_file_shows_are_one_line_and_exit_2(tmp_path, capsys, target, key, kind,
                                                                       message):
    where = write_finding(tmp_path, target, dec.encode_case(0), key, kind)
    assert standalone_command(where, json.loads((where / "spec.json").read_text())) is None
    assert main(["repro", str(where), "--standalone", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and message in err, err
    assert not (tmp_path / "out").exists()


def test_what_is_no_finding_is_one_line_and_exit_2(tmp_path, capsys):
    (tmp_path / "empty").mkdir()
    spec_less = tmp_path / "x" / "spec.json"
    spec_less.parent.mkdir()
    spec_less.write_text('{"kind": "CRASH"}')
    reference = write_finding(tmp_path, "prepare_model", scale_one_equal(), "CRASH|x|SIGABRT", "CRASH",
                              "SIGABRT", driver="reference")
    for argv, message in (([str(tmp_path / "empty")], "not a fuzz finding (no spec.json"),
                          ([str(spec_less)], "not a fuzz finding's spec (no target, kind and key)"),
                          ([str(reference)], "--driver reference does not compile for another runtime"),
                          ([str(tmp_path / "empty"), "--standalone", str(reference)], "not empty")):
        standalone_args = [] if "--standalone" in argv else ["--standalone", str(tmp_path / "out")]
        assert main(["repro", *argv, *standalone_args]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and message in err, (argv, err)
    assert standalone_command(reference, json.loads((reference / "spec.json").read_text())) is None
    assert main(["repro", str(reference)]) == 2  # no --standalone: the way to replay it
    assert "is a fuzz finding: replay it with `nncert fuzz replay prepare_model" in capsys.readouterr().err
    assert main(["repro", str(tmp_path / "empty")]) == 2
    assert "not a fuzz finding (no spec.json" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
