"""The real drivers (LiteRT, ONNX Runtime, OpenVINO, IREE, TVM): options, honest supported
operations, measured capabilities, isolation from a runtime that aborts, and the conformance
suites with their expectations files (the per-operation and validation suites here, the
per-operation suite's first seed on the compilers; the whole conformance suite in every
option set under ``-m slow``)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import background_runs
import numpy as np
import pytest

from nncert.drivers import DriverSpecError, load_driver
from nncert.drivers import measure as measure_mod
from nncert.hal.builder import ModelBuilder, build_request, read_outputs
from nncert.hal.types import OperandType as T
from nncert.hal.types import OperationType as O
from nncert.testing.cases import enumerate_cases, sample_case

pytest.importorskip("ai_edge_litert")
pytest.importorskip("onnxruntime")

ROOT = Path(__file__).resolve().parent.parent
SPECS = ["litert", "litert:kernels=builtin", "litert:kernels=ref", "onnxruntime",
         "onnxruntime:opt_level=disable", "onnxruntime:quant=qlinear", "openvino", "iree", "tvm"]


@pytest.mark.parametrize(("spec", "complaint"), [
    ("litert:kernels=fast", "kernels='fast' is not one of xnnpack, builtin, ref"),
    ("litert:threads=0", "threads='0' must be a positive integer"),
    ("litert:delegate=/no/such/delegate.so", "cannot be loaded"),
    ("litert:colour=red", "colour"),
    ("onnxruntime:provider=NoSuchProvider", "NoSuchProvider"),
    ("onnxruntime:opt_level=max", "opt_level"),
])
def test_bad_options_are_one_line_errors(spec, complaint):
    with pytest.raises(DriverSpecError) as e:
        load_driver(spec)
    assert complaint in str(e.value) and "\n" not in str(e.value)


def test_bad_options_on_the_command_line(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "pytest", "conformance/test_execution.py", "-q",
                           "--driver=litert:kernels=fast"], cwd=ROOT, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 4 and "Traceback" not in proc.stderr
    assert "kernels='fast'" in proc.stderr


@pytest.fixture(scope="module")
def seed0_models():
    return [sample_case(*k).model() for k in enumerate_cases((0,))]


@pytest.mark.req("DRV-2")
@pytest.mark.parametrize("spec", ["litert", "litert:kernels=ref", "onnxruntime"])
def test_at_least_60_operations_are_claimed(spec, seed0_models):
    driver = load_driver(spec)
    claimed, declined = set(), {}
    for model, _ in seed0_models:
        flags = driver.supported_operations(model)
        reasons = driver.decline_reasons(model)
        for op, ok, reason in zip(model.main.operations, flags, reasons, strict=True):
            if ok:
                claimed.add(op.type)
            else:
                declined.setdefault(op.type, reason)
    assert len(claimed) >= 60, f"{spec} claims {len(claimed)} operations"
    # Every decline says why.
    assert all(declined.values()), declined


def _softmax_int8(scale: float):
    b = ModelBuilder()
    x = b.operand(T.TENSOR_QUANT8_ASYMM_SIGNED, (1, 4), scale, 0)
    out = b.operand(T.TENSOR_QUANT8_ASYMM_SIGNED, (1, 4), 1 / 256, -128)
    b.operation(O.SOFTMAX, [x, b.constant(T.FLOAT32, 1.0)], [out])
    return b.build([x], [out])


@pytest.mark.req("DRV-2", "MLTS-2")
@pytest.mark.parametrize("spec", ["litert:kernels=ref", "service:litert:kernels=ref"])
def test_a_runtime_abort_is_found_by_the_probe_and_declined(spec):
    """LiteRT's reference kernels abort the process on an int8 SOFTMAX whose input scale is
    1e-8, when the kernel is prepared. The support probe compiles and runs each operation in a
    child process of its own: the operation is declined with the abort, in this process as in
    a service, and the driver carries on."""
    driver = load_driver(spec)
    try:
        (reason,) = driver.decline_reasons(_softmax_int8(1e-8))
        assert "killed by SIGABRT when it compiles SOFTMAX on TENSOR_QUANT8_ASYMM_SIGNED[1, 4] (scale 1e-08" \
            in reason and "found by the support probe" in reason
        model = _softmax_int8(0.1)
        assert driver.supported_operations(model) == [True]
        request = build_request(model, [np.array([[1, 2, 3, 4]], np.int8)], [(1, 4)])
        driver.prepare_model(model).execute_synchronously(request)
        got = read_outputs(model, request, [(1, 4)])[0]
        assert np.all(np.diff(got.astype(int)) >= 0)
    finally:
        if hasattr(driver, "close"):
            driver.close()
    # The optimised kernels take the same model.
    assert load_driver("litert").supported_operations(_softmax_int8(1e-8)) == [True]


def _softmax_rows(t: T, dims: tuple[int, ...], axis: int | None = None):
    b = ModelBuilder()
    x = b.operand(t, dims, 0.125, 0)
    out = b.operand(t, dims, 1 / 256, 0 if t is T.TENSOR_QUANT8_ASYMM else -128)
    axis_input = [] if axis is None else [b.constant(T.INT32, axis)]
    b.operation(O.SOFTMAX, [x, b.constant(T.FLOAT32, 1.0), *axis_input], [out])
    return b.build([x], [out])


@pytest.mark.req("DRV-2")
def test_reference_softmax_over_512_or_more_is_declined_up_front():
    """LiteRT's reference quantised SOFTMAX aborts at invoke once the sum of exponentials along
    the axis reaches 512 (512 equal values; findings/litert-ref-softmax-long-axis-abort), which
    a probe's sample values may miss: an axis of 512 or more is declined with kernels=ref by a
    static rule, whichever axis it is; 511 is not, nor any length with the optimised kernels."""
    ref = load_driver("litert:kernels=ref")
    for t in (T.TENSOR_QUANT8_ASYMM, T.TENSOR_QUANT8_ASYMM_SIGNED):
        for model in (_softmax_rows(t, (3, 512)), _softmax_rows(t, (4096, 3), axis=0)):
            (reason,) = ref.decline_reasons(model)
            assert reason and "sum of exponentials along the axis reaches 512" in reason, reason
    # Only the softmax axis counts; 511 equal values run (the probe decides the rest).
    assert ref.operation_problem(_softmax_rows(T.TENSOR_QUANT8_ASYMM, (512, 3)), 0) is None
    assert ref.operation_problem(_softmax_rows(T.TENSOR_QUANT8_ASYMM, (3, 511)), 0) is None
    assert load_driver("litert:kernels=builtin").operation_problem(
        _softmax_rows(T.TENSOR_QUANT8_ASYMM, (3, 4096)), 0) is None


@pytest.mark.req("DRV-1")
@pytest.mark.parametrize("spec", ["litert", "onnxruntime"])
def test_capabilities_are_measured_and_stable(spec, tmp_path, monkeypatch):
    monkeypatch.setenv("NNCERT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(measure_mod, "_memo", {})
    driver = load_driver(spec)
    caps = driver.capabilities()
    assert caps == driver.capabilities()
    stored = json.loads((tmp_path / "capabilities.json").read_text())[driver.version_string()]
    assert set(stored) == {"float32", "float16", "int32", "quant8_asymm", "quant8_asymm_signed", "relaxed"}
    assert all(v is not None and 0 < v < 100 for v in stored.values()), stored
    assert caps.operand_performance[T.TENSOR_FLOAT32].exec_time == stored["float32"]


@pytest.mark.req("DRV-2", "MLTS-2")
def test_runtime_aborts_the_probe_finds_cost_no_test_process():
    """The same abort took a plain pytest session down (before the crash guard) or one test
    process (under it) when it happened in the test's own supported_operations. The probe now
    meets it in its child: the cases are declined with the abort, and nothing else dies. The
    reference kernels' abort at run time once the sum of exponentials reaches 512 (512 equal
    values in a row), which depends on the values, is declined up front for an axis of 512 or
    more: the long-reduction edge cases' own values do not reach it, other values would."""
    argv = _aborts_argv()
    proc = background_runs.run(argv, timeout=1500)
    report = Path(argv[-1].partition("=")[2])
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    tests = json.loads(report.read_text())["tests"]
    aborts = {n for n, r in tests.items() if "killed by SIGABRT" in r["message"]}
    edge = {f"{OPS}::test_operation_edge[SOFTMAX-{t}-edge_input_scale_1e_8-s0-sync]"
            for t in ("quant8_asymm", "quant8_asymm_signed")}
    assert edge <= aborts and all(n.startswith(f"{OPS}::test_operation_edge[SOFTMAX-") for n in aborts)
    assert {tests[n]["status"] for n in aborts} == {"DECLINED"}
    assert all("found by the support probe" in tests[n]["message"] for n in aborts)
    for t in ("quant8_asymm", "quant8_asymm_signed"):
        long = tests[f"{OPS}::test_operation_edge[SOFTMAX-{t}-edge_long_reduction-s0-sync]"]
        assert long["status"] == "DECLINED" and "sum of exponentials along the axis reaches 512" \
            in long["message"], long
    assert len(tests) > 30 and all(r["status"] in ("PASS", "DECLINED") for r in tests.values())
    assert "died in this test" not in proc.stderr


def _conformance_argv(spec: str, *args: str) -> list[str]:
    return [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--driver={spec}",
            "--no-three-way", *args]


def _conformance(spec: str, *args: str) -> subprocess.CompletedProcess:
    return background_runs.run(_conformance_argv(spec, *args), timeout=1500)


def _aborts_argv() -> list[str]:
    report = background_runs.scratch() / "litert-ref-softmax.json"
    return _conformance_argv("litert:kernels=ref", OPS, "-k", "SOFTMAX", "-p", "no:randomly",
                             "--no-expectations", f"--nncert-report={report}")


def runs_to_start(item) -> list:
    """The whole-suite runs the suite tests of this module wait on, started at collection
    (tests/background_runs.py), in the order of the tests: one queued only when its test
    runs waits behind every other (past 1,500 s at a load average of 12)."""
    if item.originalname == "test_per_operation_and_validation_suites_have_no_unexpected_failure":
        # Long runs (a whole slice of the suite on a real runtime): at the head of the queue.
        argv = _conformance_argv(item.callspec.params["spec"], *item.callspec.params["suites"])
        return [background_runs.Run(tuple(argv), first=True)]
    if item.originalname == "test_runtime_aborts_the_probe_finds_cost_no_test_process":
        return [_aborts_argv()]
    if item.originalname == "test_a_real_discrepancy_is_a_strict_xfail_of_its_expectations_file":
        return [_conformance_argv("litert", DISCREPANCY)]
    return []


OPS, VAL = "conformance/test_operations.py", "conformance/test_validation.py"
#: The per-operation suite's first seed: every operation, type, parameter variation and edge
#: once (the other seeds draw other values through the same kernels; -m slow runs them).
FIRST_SEED = (OPS, "-k", "not s1 and not s2")
#: Every operation and type once (no variation, edge or other seed).
EVERY_OPERATION = (OPS, "-k", "test_operation and not test_operation_ and s0")
#: Every operation once, in float32: the CI slice of IREE and TVM, whose compilers take 0.2 to
#: 0.6 s of CPU a model (IREE about 0.15 s compiled ahead).
EVERY_FLOAT32 = (OPS, "-k", f"{EVERY_OPERATION[-1]} and float32")
COMPILERS = [name for name, module in (("openvino", "openvino"), ("iree", "iree.compiler"), ("tvm", "tvm"))
             if importlib.util.find_spec(module.split(".")[0]) is not None]


@pytest.mark.req("DRV-2", "ACC-1", "ACC-2", "ACC-3", "VAL-1")
@pytest.mark.parametrize(("spec", "suites"), [
    # The validation suite once: both run the same CompiledDriver validation.
    ("litert", FIRST_SEED),
    ("onnxruntime", (*FIRST_SEED, VAL)),
    # The reference kernels abort on an edge case: out of process (an expected crash).
    ("service:litert:kernels=ref", FIRST_SEED),
    # The compilers (the whole conformance suite on each under -m slow), with an empty compile
    # cache in CI: every operation and type on OpenVINO (1,054 models, 51 s of CPU), every
    # operation in float32 on IREE and TVM (254 models: IREE ~50 s compiled ahead, 148 s one
    # by one; TVM ~50 s).
    *((name, EVERY_OPERATION if name == "openvino" else EVERY_FLOAT32) for name in COMPILERS),
])
def test_per_operation_and_validation_suites_have_no_unexpected_failure(spec, suites):
    proc = _conformance(spec, *suites)
    assert proc.returncode == 0, proc.stdout[-3000:]
    assert " failed" not in proc.stdout.splitlines()[-1]


@pytest.mark.slow
@pytest.mark.parametrize("spec", SPECS)
def test_whole_conformance_suite_has_no_unexpected_failure(spec):
    proc = _conformance(f"service:{spec}", "conformance")
    assert proc.returncode == 0, proc.stdout[-3000:]


#: A known discrepancy of LiteRT (its expectations.toml); its N-way verdict without the file is
#: tests/test_triage.py's.
DISCREPANCY = "conformance/test_operations.py::test_operation[NOT_EQUAL-quant8_asymm-s0]"


@pytest.mark.req("ACC-3")
def test_a_real_discrepancy_is_a_strict_xfail_of_its_expectations_file():
    """LiteRT's NOT_EQUAL on quantised inputs of different scales calls equal values unequal:
    with the driver's expectations file the test is an expected failure, strict (a release
    that fixes it makes the run fail)."""
    proc = _conformance("litert", DISCREPANCY)
    assert proc.returncode == 0 and "1 xfailed" in proc.stdout, proc.stdout[-2000:]
