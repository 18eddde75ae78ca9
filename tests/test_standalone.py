"""Standalone reproducers (nncert/repro/standalone.py, ``nncert repro ... --standalone``): the
directory holds the runtime's model file exactly as the driver ran it and a run.py that runs
without nncert (every script here runs in a process where ``import nncert`` fails), exits 1
on a real discrepancy and 0 where the runtime is right; the pytest plugin's writer keeps a
failing case's reproducer and drops a passing one's; bad input is one line and exit status 2."""

from __future__ import annotations

import importlib.util
import json
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from nncert.cli import main
from nncert.hal.builder import ModelBuilder
from nncert.hal.types import OperandType as T
from nncert.hal.types import OperationType as O
from nncert.repro import standalone
from nncert.repro.standalone import StandaloneError, load_case, write_standalone

#: Runs run.py (cwd: its directory) with nncert unimportable (exit status 99 if it were not):
#: the blocker the writer itself measures reproducers with.
BLOCKED = standalone.WITHOUT_NNCERT

#: Seconds one script may run (an IREE or TVM compile takes one or two on a quiet host).
TIMEOUT_S = 240


def run_blocked(path: Path) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", BLOCKED], cwd=path, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=TIMEOUT_S)


def installed(*modules: str) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in modules)


def driver_of(spec: str):
    from nncert.drivers import load_driver

    runtime = {"litert": ("ai_edge_litert",), "onnxruntime": ("onnxruntime", "onnx"),
               "openvino": ("openvino", "onnx"), "iree": ("iree.compiler", "iree.runtime", "onnx"),
               "tvm": ("tvm", "onnx")}[spec.split(":")[0]]
    if not installed(*runtime):
        pytest.skip(f"{spec}: {', '.join(runtime)} not installed")
    return load_driver(spec)


def not_equal_scales_s_and_2s():
    """NOT_EQUAL of quantised inputs of scales s and 2s whose real values are equal in elements
    0 to 2: LiteRT rescales both in fixed point and calls elements 0 and 2 unequal
    (nncert/drivers/litert/expectations.toml, NOT_EQUAL-quant8_asymm)."""
    s = 0.04144691303372383
    b = ModelBuilder()
    x = b.operand(T.TENSOR_QUANT8_ASYMM, (4,), s, 140)
    y = b.operand(T.TENSOR_QUANT8_ASYMM, (4,), 2 * s, 212)
    out = b.operand(T.TENSOR_BOOL8, (4,))
    b.operation(O.NOT_EQUAL, [x, y], [out])
    feeds = [np.array([136, 140, 144, 150], np.uint8), np.array([210, 212, 214, 215], np.uint8)]
    return b.build([x, y], [out]), feeds


def float_add(dtype=np.float32, type_=T.TENSOR_FLOAT32):
    b = ModelBuilder()
    x, y = b.operand(type_, (2, 3)), b.operand(type_, (2, 3))
    out = b.operand(type_, (2, 3))
    b.operation(O.ADD, [x, y, b.constant(T.INT32, 0)], [out])
    rng = np.random.default_rng(7)
    return b.build([x, y], [out]), [rng.uniform(-2, 2, (2, 3)).astype(dtype) for _ in range(2)]


# -- litert and onnxruntime: right and wrong, run where nncert cannot be imported


@pytest.mark.parametrize("spec", ["litert", "onnxruntime"])
def test_a_case_the_runtime_gets_right_exits_0(tmp_path, spec):
    driver = driver_of(spec)
    model, feeds = float_add()
    try:
        path = write_standalone(driver, model, feeds, tmp_path / "repro", source="unit test")
        prepared = driver.prepare_model(model)
    finally:
        driver.close()
    case = load_case(path)
    assert case["outcome"] == "not_reproduced" and case["returncode"] == 0 and case["max_abs_diff"] == 0
    assert {"outcome", "returncode", "signal", "max_abs_diff", "runtime", "runtime_version", "options",
            "operations"} <= set(case) and case["operations"] == ["ADD"]
    model_file = path / case["model_files"][0]
    assert model_file.read_bytes() == prepared.content  # what the driver itself runs, byte for byte
    got = run_blocked(path)
    assert got.returncode == 0, got.stdout + got.stderr
    assert "not reproduced" in got.stdout and "max abs difference 0" in got.stdout
    readme = (path / "README.md").read_text()
    assert "python run.py" in readme and f"pip install {case['packages'][0]} numpy" in readme
    assert "not reproduced" in readme and "unit test" in readme


def test_litert_not_equal_of_scales_s_and_2s_is_reproduced_without_nncert(tmp_path):
    driver = driver_of("litert")
    model, feeds = not_equal_scales_s_and_2s()
    try:
        path = write_standalone(driver, model, feeds, tmp_path / "repro",
                                verdict="N-way verdict: onnxruntime agrees with reference")
    finally:
        driver.close()
    case = load_case(path)
    assert case["outcome"] == "reproduced" and case["returncode"] == 1 and case["max_abs_diff"] == 1
    assert case["options"]["kernels"] == "xnnpack" and case["runtime"] == "ai-edge-litert"
    got = run_blocked(path)
    assert got.returncode == 1, got.stdout + got.stderr
    assert "REPRODUCED: output0: 2 of 4 elements outside the tolerance" in got.stdout
    assert "[0]: actual True, expected False (outside)" in got.stdout
    readme = (path / "README.md").read_text()
    assert "REPRODUCED" in readme and "onnxruntime agrees with reference" in readme
    assert "NOT_EQUAL(TENSOR_QUANT8_ASYMM [4] scale=0.0414469 zero_point=140" in readme


def test_onnxruntime_gets_the_same_not_equal_right(tmp_path):
    driver = driver_of("onnxruntime")
    model, feeds = not_equal_scales_s_and_2s()
    try:
        path = write_standalone(driver, model, feeds, tmp_path / "repro", run=False)
    finally:
        driver.close()
    assert load_case(path)["outcome"] is None  # not run yet: the README says so
    assert "has not been run yet" in (path / "README.md").read_text()
    got = run_blocked(path)
    assert got.returncode == 0, got.stdout + got.stderr


def test_outputs_outside_the_tolerance_exit_1_and_show_the_worst_elements(tmp_path):
    driver = driver_of("onnxruntime")
    model, feeds = float_add()
    expected = [feeds[0] + feeds[1]]
    expected[0][1, 2] += 0.5  # a reference that disagrees in one element
    try:
        path = write_standalone(driver, model, feeds, tmp_path / "repro", expected=expected)
    finally:
        driver.close()
    case = load_case(path)
    assert case["outcome"] == "reproduced" and case["max_abs_diff"] == pytest.approx(0.5)
    got = run_blocked(path)
    assert got.returncode == 1
    assert "REPRODUCED: output0: 1 of 6 elements outside the tolerance" in got.stdout
    assert "[1, 2]: actual" in got.stdout


def test_float16_is_fed_widened_and_judged_at_float16(tmp_path):
    driver = driver_of("onnxruntime")
    model, feeds = float_add(np.float16, T.TENSOR_FLOAT16)
    try:
        path = write_standalone(driver, model, feeds, tmp_path / "repro", run=False)
    finally:
        driver.close()
    with np.load(path / "inputs.npz", allow_pickle=False) as f:
        assert f["input0"].dtype == np.float32 and np.array_equal(f["input0"], feeds[0].astype(np.float32))
    with np.load(path / "expected.npz", allow_pickle=False) as f:
        assert f["output0"].dtype == np.float16
    assert load_case(path)["outputs"][0]["tolerance"]["atol"] == pytest.approx(5 * 2 ** -10)
    got = run_blocked(path)
    assert got.returncode == 0, got.stdout + got.stderr


# -- the compilers: the script runs (one compile each)


@pytest.mark.parametrize("spec", ["openvino:cache=off", "iree:cache=off", "tvm:cache=off"])
def test_the_compilers_scripts_run_without_nncert(tmp_path, spec):
    driver = driver_of(spec)
    model, feeds = float_add()
    try:
        path = write_standalone(driver, model, feeds, tmp_path / "repro", run=False)
    finally:
        driver.close()
    case = load_case(path)
    if spec.startswith("iree"):
        assert case["model_files"] == ["model.mlir", "model.onnx"]
        assert "--iree-llvmcpu-target-cpu=host" in (path / "run.py").read_text()
    got = run_blocked(path)
    assert got.returncode == 0, got.stdout + got.stderr
    assert "not reproduced" in got.stdout


# -- outcomes: a crash, a missing runtime


def test_a_script_killed_by_a_signal_is_recorded_as_crashed(tmp_path):
    driver = driver_of("onnxruntime")
    model, feeds = float_add()
    try:
        path = write_standalone(driver, model, feeds, tmp_path / "repro", run=False)
    finally:
        driver.close()
    script = (path / "run.py").read_text()
    # as a runtime that dies in its kernel would: the script's own run() replaced
    (path / "run.py").write_text(script.replace("def run(inputs):", "def run(inputs):\n    import os\n"
                                                "    os.kill(os.getpid(), signal.SIGSEGV)\n", 1)
                                 .replace("import json\n", "import json\nimport signal\n", 1))
    case = standalone.measure(path, timeout=60)
    assert case["outcome"] == "crashed" and case["signal"] == "SIGSEGV"
    assert case["returncode"] == -signal.SIGSEGV
    assert "**crashed (killed by SIGSEGV)**" in (path / "README.md").read_text()


def test_a_missing_runtime_is_exit_status_2_and_names_the_package(tmp_path):
    driver = driver_of("onnxruntime")
    model, feeds = float_add()
    try:
        path = write_standalone(driver, model, feeds, tmp_path / "repro", run=False)
    finally:
        driver.close()
    block = BLOCKED.replace('name == "nncert" or name.startswith("nncert.")',
                           'name.split(".")[0] in ("nncert", "onnxruntime")')
    got = subprocess.run([sys.executable, "-c", block], cwd=path, capture_output=True, text=True,
                         timeout=TIMEOUT_S)
    assert got.returncode == 2 and "pip install onnxruntime==" in got.stdout


# -- the writer's checks


def test_refuses_a_non_empty_directory_a_symlink_and_a_driver_that_does_not_compile(tmp_path):
    from nncert.drivers import load_driver

    model, feeds = float_add()
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("mine")
    (tmp_path / "link").symlink_to(tmp_path / "elsewhere")
    driver = driver_of("onnxruntime")
    try:
        with pytest.raises(StandaloneError, match="not empty"):
            write_standalone(driver, model, feeds, tmp_path / "full", run=False)
        with pytest.raises(StandaloneError, match="symlink"):
            write_standalone(driver, model, feeds, tmp_path / "link", run=False)
        with pytest.raises(StandaloneError, match="give an array for each"):
            write_standalone(driver, model, feeds[:1], tmp_path / "new", run=False)
    finally:
        driver.close()
    reference = load_driver("reference")
    with pytest.raises(StandaloneError, match="not a driver that compiles"):
        write_standalone(reference, model, feeds, tmp_path / "new", run=False)
    assert (tmp_path / "full" / "x").read_text() == "mine" and not (tmp_path / "elsewhere").exists()
    assert not (tmp_path / "new").exists()


# -- the pytest plugin's writer: kept for a failure (run then), dropped for a pass


def test_the_session_keeps_a_failing_cases_reproducer_and_drops_a_passing_ones(tmp_path):
    from nncert.testing.cases import case_id, enumerate_cases, sample_case
    from nncert.testing.harness import CaseError, check_case

    driver = driver_of("litert")
    wanted = {case_id(*k): k for k in enumerate_cases((0,))
              if case_id(*k) in ("NOT_EQUAL-quant8_asymm-s0", "ADD-float32-none-s0")}
    session = standalone.Session(tmp_path)
    standalone.set_active(session)
    try:
        session.test_id = "t.py::failing"
        with pytest.raises(CaseError):
            check_case(driver, sample_case(*wanted["NOT_EQUAL-quant8_asymm-s0"]))
        written = tmp_path / "t.py_failing"
        assert load_case(written)["outcome"] is None  # written before the driver ran the case
        session.finish("t.py::failing", True, "N-way verdict: onnxruntime agrees with reference")
        session.test_id = "t.py::passing"
        assert check_case(driver, sample_case(*wanted["ADD-float32-none-s0"])) is None
        assert (tmp_path / "t.py_passing").is_dir()
        session.finish("t.py::passing", False)
    finally:
        standalone.set_active(None)
        driver.close()
    case = load_case(written)
    assert case["outcome"] == "reproduced" and case["source"] == "t.py::failing"
    assert case["verdict"].endswith("onnxruntime agrees with reference")
    assert not (tmp_path / "t.py_passing").exists()


def test_the_session_writes_a_failing_random_graph_with_its_spec_file(tmp_path):
    from nncert.testing.graphs import Cell, seeded

    driver = driver_of("onnxruntime")
    session = standalone.Session(tmp_path)
    session.test_id = "conformance/test_random_graphs.py::test_random_graph[small-float32-rank2]"
    try:
        session.graph_failed(driver, seeded(Cell.parse("small-float32-rank2"), 0, 0), "N-way verdict: v",
                             "g/spec.json")
    finally:
        driver.close()
    path = tmp_path / "conformance_test_random_graphs.py_test_random_graph_small-float32-rank2"
    case = load_case(path)
    assert case["outcome"] == "not_reproduced" and case["verdict"] == "N-way verdict: v"  # ORT is right
    assert case["source"] == f"{session.test_id} (spec file g/spec.json)"
    assert case["outputs"][0]["tolerance"]["requirement"] == "ACC-5"
    session.finish(session.test_id, True)
    assert load_case(path)["outcome"] == "not_reproduced"  # run once, not again


# -- the command line


def test_cli_writes_a_spec_files_reproducer_with_its_graph_criteria(tmp_path, capsys):
    from nncert.testing.graphs import Cell, save_spec, seeded

    driver_of("onnxruntime").close()
    graph = seeded(Cell.parse("small-float32-rank2"), 0, 0)
    spec = tmp_path / "g.json"
    save_spec(spec, graph, seed=0, graph_index=0, verdict={"summary": "N-way verdict: recorded"})
    out = tmp_path / "out"
    assert main(["repro", str(spec), "--driver", "onnxruntime", "--standalone", str(out)]) == 0
    printed = capsys.readouterr().out
    assert f"standalone reproducer: {out}" in printed and "not_reproduced" in printed
    case = load_case(out)
    tolerance = case["outputs"][0]["tolerance"]
    assert tolerance["requirement"] == "ACC-5" and tolerance["ignore_above"] == 1000
    assert "max_mse" in tolerance
    assert case["verdict"] == "N-way verdict: recorded" and "cell small-float32-rank2" in case["source"]
    assert run_blocked(out).returncode == 0


@pytest.mark.parametrize(("argv", "message"), [
    (["--driver", "reference"], "--driver reference does not compile for another runtime"),
    (["--driver", "mutant:fp32_as_fp16"], "does not compile for another runtime"),
    (["--driver", "no_such_driver"], "unknown driver"),
    (["--driver", "onnxruntime", "--cache-dir", "c"], "--standalone and --cache-dir do not mix"),
])
def test_cli_errors_are_one_line(tmp_path, argv, message):
    from nncert.testing.graphs import Cell, save_spec, seeded

    spec = tmp_path / "g.json"
    save_spec(spec, seeded(Cell.parse("small-float32-rank1"), 0, 0))
    proc = subprocess.run([sys.executable, "-m", "nncert.cli", "repro", str(spec), *argv, "--standalone",
                           str(tmp_path / "out")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1 and message in proc.stderr and "Traceback" not in proc.stderr
    assert not (tmp_path / "out").exists()


def test_cli_refuses_an_unreadable_spec_and_an_existing_directory(tmp_path):
    (tmp_path / "bad.json").write_text("{not json")
    (tmp_path / "full").mkdir()
    (tmp_path / "full" / "x").write_text("")
    (tmp_path / "link").symlink_to(tmp_path / "full")
    for spec, out, message in (("bad.json", "out", "bad.json"), ("missing.json", "out", "missing.json"),
                               ("bad.json", "full", "not empty"), ("bad.json", "link", "symlink")):
        proc = subprocess.run([sys.executable, "-m", "nncert.cli", "repro", str(tmp_path / spec), "--driver",
                               "onnxruntime", "--standalone", str(tmp_path / out)],
                              capture_output=True, text=True, timeout=120)
        assert proc.returncode == 2 and proc.stderr.count("\n") == 1 and message in proc.stderr, proc.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.slow
def test_cli_writes_a_failing_test_ids_reproducer(tmp_path):
    """The whole path: pytest on the one id with --standalone-dir (under the crash guard),
    the reproducer moved to OUT, run without nncert."""
    driver_of("litert").close()
    out = tmp_path / "out"
    test_id = "conformance/test_operations.py::test_operation[NOT_EQUAL-quant8_asymm-s0]"
    proc = subprocess.run([sys.executable, "-m", "nncert.cli", "repro", test_id, "--driver", "litert",
                           "--standalone", str(out)], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    case = json.loads((out / "case.json").read_text())
    assert case["outcome"] == "reproduced" and case["source"] == test_id
    assert run_blocked(out).returncode == 1
    assert [p.name for p in tmp_path.iterdir()] == ["out"]  # the staging directory is gone
    proc = subprocess.run([sys.executable, "-m", "nncert.cli", "repro",
                           "conformance/test_operations.py::test_operation[ADD-float32-none-s0]",
                           "--driver", "litert", "--standalone", str(tmp_path / "passing")],
                          capture_output=True, text=True, timeout=900)
    assert proc.returncode == 2 and "does not fail on litert" in proc.stderr


def test_a_certification_failure_on_a_runtime_shows_how_to_hand_it_over():
    import html

    from nncert.certify.html import _standalone

    test_id = "conformance/test_operations.py::test_operation[NOT_EQUAL-quant8_asymm-s0]"
    line = html.unescape(_standalone("litert:kernels=ref", test_id))
    assert "nncert repro 'conformance/test_operations.py::test_operation[NOT_EQUAL-quant8_asymm-s0]' " \
           "--driver litert:kernels=ref --standalone" in line
    assert _standalone("reference", test_id) == ""  # no runtime model file
    assert _standalone("litert", "conformance/test_caching.py::test_cache_roundtrip") == ""  # no case
