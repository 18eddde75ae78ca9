"""The compiled-driver base (nncert/drivers/compiled.py) and the model rewrites it relies on,
with a test double whose "runtime" is the reference interpreter: whatever fails here is the
base's fault, not a runtime's."""

from __future__ import annotations

import dataclasses
import os
import time

import numpy as np
import pytest

from nncert.drivers import measure
from nncert.drivers.compiled import CompiledDriver, Unmappable
from nncert.hal.builder import ModelBuilder, build_request, read_outputs
from nncert.hal.errors import HalError
from nncert.hal.model import Operation
from nncert.hal.transform import (
    ShapeUnknown,
    fully_specified,
    isolate_operation,
    specialize_shapes,
    widen_float16,
)
from nncert.hal.types import ErrorStatus, OperandLifeTime, OperandType, OperationType
from nncert.ops.interpreter import run_model
from nncert.testing.cases import enumerate_cases, sample_case
from nncert.testing.control_flow_models import dynamic_if_model, if_model
from nncert.testing.harness import check_case

T = OperandType


class _Numpy:
    def __init__(self, model):
        self.model = model

    def run(self, inputs):
        return run_model(self.model, inputs)


class NumpyCompiled(CompiledDriver):
    """Compiles to the reference interpreter; declines what ``refuse`` names, and counts
    compilations so that probing and shape caching can be checked."""

    name = "numpy-compiled"
    runtime = "numpy"
    probe_fork = True  # a fork runs it as well: no fresh interpreter for each test's driver

    def __init__(self, refuse=(), reject_at_compile=()):
        super().__init__()
        self.refuse = set(refuse)
        self.reject_at_compile = set(reject_at_compile)
        self.compiled = []

    def operation_problem(self, model, index):
        op = model.main.operations[index]
        return f"no {op.type.name} here" if op.type in self.refuse else None

    def compile(self, model):
        assert not any(o.type in (T.TENSOR_FLOAT16, T.FLOAT16) for o in model.main.operands)
        assert all(d > 0 for o in model.main.operands for d in o.dimensions)
        for op in model.main.operations:
            if op.type in self.reject_at_compile:
                raise Unmappable(f"kernel rejects {op.type.name}")
        self.compiled.append(model)
        return _Numpy(model)


def _add_model(t=T.TENSOR_FLOAT32, dims=(2, 3)):
    b = ModelBuilder()
    x, y = b.operand(t, dims), b.operand(t, dims)
    out = b.operand(t, dims)
    b.operation(OperationType.ADD, [x, y, b.constant(T.INT32, 0)], [out])
    return b.build([x, y], [out])


# A sample of the per-operation cases: one seed of every type variant of a spread of families.
SAMPLE = [k for k in enumerate_cases((0,)) if k[0].type in {
    OperationType.CONV_2D, OperationType.RESHAPE, OperationType.MEAN, OperationType.CAST,
    OperationType.SQUEEZE, OperationType.SOFTMAX, OperationType.CONCATENATION,
    OperationType.DEQUANTIZE}]


@pytest.mark.parametrize("variation", ["base", "relaxed", "dynamic_output", "all_tensors_as_inputs"])
def test_cases_pass_through_the_base(variation):
    driver = NumpyCompiled()
    ran = 0
    for key in SAMPLE:
        case = sample_case(*key)
        if case.supports(variation) and check_case(driver, case, variation) is None:
            ran += 1
    assert ran > 25, ran


def test_float16_is_computed_in_float32_and_rounded_at_the_output():
    model = _add_model(T.TENSOR_FLOAT16)
    wide = widen_float16(model)
    assert {o.type for o in wide.main.operands} == {T.TENSOR_FLOAT32, T.INT32}
    driver = NumpyCompiled()
    a = np.array([[1.0, 2.0, 3.0], [0.1, 0.2, 40000.0]], np.float16)
    request = build_request(model, [a, a], [(2, 3)])
    driver.prepare_model(model).execute_synchronously(request)
    got = read_outputs(model, request, [(2, 3)])[0]
    assert got.dtype == np.float16
    with np.errstate(over="ignore"):
        want = (a.astype(np.float32) * 2).astype(np.float16)
    np.testing.assert_array_equal(got, want)
    assert np.isinf(got[1, 2])  # beyond float16's range, as a float16 computation gives


def test_an_operation_reading_stored_bytes_is_declined_in_float16():
    """Computing float16 in float32 changes what LSH_PROJECTION hashes: declined with the
    reason, while its float32-input cases are claimed."""
    driver = NumpyCompiled()
    by_input = {}
    for key in enumerate_cases((0,)):
        if key[0].type is OperationType.LSH_PROJECTION:
            case = sample_case(*key)
            by_input.setdefault(case.variant.types["I"], case)
    reasons = driver.decline_reasons(by_input[T.TENSOR_FLOAT16].model()[0])
    assert reasons[0] and "stored bytes" in reasons[0]
    with pytest.raises(HalError, match="stored bytes"):
        driver.prepare_model(by_input[T.TENSOR_FLOAT16].model()[0])
    assert driver.decline_reasons(by_input[T.TENSOR_FLOAT32].model()[0]) == [None]


def test_dynamic_shapes_compile_once_per_input_shape():
    model = _add_model(dims=(0, 3))
    assert not fully_specified(model)
    driver = NumpyCompiled()
    prepared = driver.prepare_model(model)
    for rows in (1, 4, 1, 4, 2):
        a = np.ones((rows, 3), np.float32)
        request = build_request(model, [a, a], [(rows, 3)])
        shapes, _ = prepared.execute_synchronously(request)
        assert shapes[0].dimensions == (rows, 3)
    assert [m.main.operands[0].dimensions for m in driver.compiled] == [(1, 3), (4, 3), (2, 3)]


def test_incompatible_run_time_shapes_are_invalid_argument():
    model = _add_model(dims=(0, 3))
    prepared = NumpyCompiled().prepare_model(model)
    request = build_request(model, [np.ones((2, 3), np.float32), np.ones((5, 3), np.float32)], [(5, 3)])
    with pytest.raises(HalError) as e:
        prepared.execute_synchronously(request)
    assert e.value.status is ErrorStatus.INVALID_ARGUMENT


def test_declines_per_operation_statically_and_by_probe():
    b = ModelBuilder()
    x = b.operand(T.TENSOR_FLOAT32, (2, 2))
    mid, out = b.operand(T.TENSOR_FLOAT32, (2, 2)), b.operand(T.TENSOR_FLOAT32, (2, 2))
    b.operation(OperationType.RELU, [x], [mid])
    b.operation(OperationType.TANH, [mid], [out])
    model = b.build([x], [out])
    assert NumpyCompiled(refuse={OperationType.TANH}).supported_operations(model) == [True, False]
    probing = NumpyCompiled(reject_at_compile={OperationType.RELU})
    assert probing.supported_operations(model) == [False, True]
    assert "kernel rejects RELU" in probing.why_unsupported(model, 0)
    with pytest.raises(HalError) as e:
        probing.prepare_model(model)
    assert e.value.status is ErrorStatus.GENERAL_FAILURE and "RELU" in e.value.message


def test_probe_results_are_cached_by_signature_not_by_weights():
    driver = NumpyCompiled()
    model = _add_model()
    for _ in range(3):
        assert driver.supported_operations(model) == [True]
    # The probe compiles in its child: one request answered there, none compiled here.
    assert len(driver._probes) == 1 and driver._probe_child.served == 1
    assert driver.compiled == []


def test_isolate_operation_makes_temporaries_inputs():
    b = ModelBuilder()
    x = b.operand(T.TENSOR_FLOAT32, (2,))
    mid, out = b.operand(T.TENSOR_FLOAT32, (2,)), b.operand(T.TENSOR_FLOAT32, (2,))
    b.operation(OperationType.RELU, [x], [mid])
    b.operation(OperationType.ADD, [mid, b.constant(T.TENSOR_FLOAT32, [1.0, 2.0]),
                                    b.constant(T.INT32, 0)], [out])
    single = isolate_operation(b.build([x], [out]), 1)
    assert len(single.main.operations) == 1 and len(single.main.input_indexes) == 1
    got = run_model(single, [np.array([1.0, -1.0], np.float32)])
    np.testing.assert_array_equal(got[0], [2.0, 1.0])


def test_specialize_shapes_follows_the_catalogue_rules():
    b = ModelBuilder()
    x = b.operand(T.TENSOR_FLOAT32, (0, 0, 0, 0))
    out = b.operand(T.TENSOR_FLOAT32, (0, 0, 0, 0))
    b.operation(OperationType.TRANSPOSE, [x, b.constant(T.TENSOR_INT32, [0, 3, 1, 2])], [out])
    concrete = specialize_shapes(b.build([x], [out]), [(1, 4, 5, 6)])
    assert concrete.main.operands[out].dimensions == (1, 6, 4, 5)


def test_rewrites_keep_the_subgraphs_an_if_references():
    model = if_model()
    for sg in (model.main, *model.referenced):
        for o in sg.operands:
            if o.type is T.TENSOR_FLOAT32:
                o.type = T.TENSOR_FLOAT16
    wide = widen_float16(model)
    assert len(wide.referenced) == 2
    assert T.TENSOR_FLOAT16 not in {o.type for sg in (wide.main, *wide.referenced) for o in sg.operands}
    single = isolate_operation(wide, 0)
    offsets = [single.main.operands[i].location.offset for i in single.main.operations[0].inputs[1:3]]
    assert offsets == [0, 1] and len(single.referenced) == 2
    a = np.array([[1.0, 2.0, 3.0]] * 2, np.float32)
    got = run_model(single, [np.array([False]), a, a / 4])
    np.testing.assert_array_equal(got[0], a - a / 4)


def test_specialize_shapes_leaves_an_if_output_the_branch_decides():
    model = dynamic_if_model()  # branches of output length 6 and 3
    concrete = specialize_shapes(model, [(1,), (3,)])
    assert concrete.main.operands[concrete.main.output_indexes[0]].dimensions == (0,)
    assert len(concrete.referenced) == 2
    same = if_model(dims=(0, 3))  # branches of equal shapes: known
    for sg in same.referenced:
        for o in sg.operands:
            o.dimensions = (0, 3) if o.type is T.TENSOR_FLOAT32 else o.dimensions
    concrete = specialize_shapes(same, [(1,), (5, 3), (5, 3)])
    assert concrete.main.operands[concrete.main.output_indexes[0]].dimensions == (5, 3)


def test_an_operation_reading_a_shape_the_branch_decides_is_shape_unknown():
    model = dynamic_if_model()
    main = model.main
    out = main.output_indexes[0]
    main.operands.append(dataclasses.replace(main.operands[out]))
    main.operands[out].lifetime = OperandLifeTime.TEMPORARY_VARIABLE
    main.operations.append(Operation(OperationType.RELU, [out], [len(main.operands) - 1]))
    main.output_indexes = [len(main.operands) - 1]
    with pytest.raises(ShapeUnknown, match="decides only when it runs"):
        specialize_shapes(model, [(1,), (3,)])


def test_capabilities_are_measured_once_and_stable(tmp_path, monkeypatch):
    monkeypatch.setenv("NNCERT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(measure, "_memo", {})
    calls = []
    real = measure.measure
    monkeypatch.setattr(measure, "measure", lambda d: calls.append(d) or real(d))
    driver = NumpyCompiled(refuse={OperationType.CONV_2D})
    first = driver.capabilities()
    # The int32 workload is an ADD: measured; the conv workloads are declined: FLT_MAX.
    assert 0 < first.operand_performance[T.TENSOR_INT32].exec_time < 1000
    assert first.operand_performance[T.TENSOR_FLOAT32].exec_time == measure.FLT_MAX
    assert driver.capabilities() == first
    monkeypatch.setattr(measure, "_memo", {})  # another process reads the figures back
    assert NumpyCompiled(refuse={OperationType.CONV_2D}).capabilities() == first
    assert len(calls) == 1 and (tmp_path / "capabilities.json").is_file()


# -- the support probe runs the operation, out of process (DRV-2) --

class _Faulty:
    """An executable that aborts, hangs or raises when it runs, as ``how`` says."""

    def __init__(self, model, how):
        self.model, self.how = model, how

    def run(self, inputs):
        if self.how == "abort":
            os.abort()
        if self.how == "hang":
            time.sleep(3600)
        if self.how == "raise":
            raise RuntimeError("the kernel failed")
        return run_model(self.model, inputs)


class FaultyCompiled(NumpyCompiled):
    """NumpyCompiled whose executables of the operations in ``at_run`` abort, hang or raise
    when they run (``{RELU: "abort"}``), and whose compilation of those in ``at_compile``
    aborts; ``after`` faults only once this process has compiled that many models (state a
    runtime keeps between probes)."""

    name = "faulty-compiled"

    def __init__(self, at_run=None, at_compile=(), after=0):
        super().__init__()
        self.at_run, self.at_compile, self.after = dict(at_run or {}), set(at_compile), after

    def compile(self, model):
        kinds = {op.type for op in model.main.operations}
        faulty = len(self.compiled) >= self.after
        if faulty and kinds & self.at_compile:
            os.abort()
        exe = super().compile(model)
        how = next((self.at_run[k] for k in kinds if k in self.at_run), None)
        return _Faulty(model, how) if how and faulty else exe


def _unary_model(*ops, dims=(2, 2)):
    b = ModelBuilder()
    x = b.operand(T.TENSOR_FLOAT32, dims)
    cur = x
    for op in ops:
        nxt = b.operand(T.TENSOR_FLOAT32, dims)
        b.operation(op, [cur], [nxt])
        cur = nxt
    return b.build([x], [cur])


def test_an_operation_whose_run_aborts_is_declined_and_this_process_lives_on():
    driver = FaultyCompiled(at_run={OperationType.TANH: "abort"})
    model = _unary_model(OperationType.RELU, OperationType.TANH)
    assert driver.supported_operations(model) == [True, False]
    reason = driver.decline_reasons(model)[1]
    assert "killed by SIGABRT when it runs TANH on TENSOR_FLOAT32[2, 2]" in reason
    assert "found by the support probe" in reason
    with pytest.raises(HalError, match="SIGABRT"):
        driver.prepare_model(model)
    # A fresh child answers the next probe; what it claims runs here.
    assert driver.supported_operations(_unary_model(OperationType.LOGISTIC)) == [True]
    x = np.array([[-1.0, 0.5], [2.0, -3.0]], np.float32)
    relu = _unary_model(OperationType.RELU)
    request = build_request(relu, [x], [(2, 2)])
    driver.prepare_model(relu).execute_synchronously(request)
    np.testing.assert_array_equal(read_outputs(relu, request, [(2, 2)])[0], np.maximum(x, 0))


class FreshFaultyCompiled(FaultyCompiled):
    """FaultyCompiled probed in a fresh interpreter, as real drivers are."""

    probe_fork = False


def test_a_fresh_interpreter_probes_a_driver_rebuilt_from_its_arguments():
    driver = FreshFaultyCompiled(at_run={OperationType.TANH: "abort", OperationType.RELU: "raise"})
    model = _unary_model(OperationType.LOGISTIC, OperationType.TANH, OperationType.RELU)
    reasons = driver.decline_reasons(model)
    assert reasons[0] is None and "SIGABRT when it runs TANH" in reasons[1]
    assert "fails to run RELU" in reasons[2] and "the kernel failed" in reasons[2]
    child = driver._probe_child
    assert not child.forked and child.pid != os.getpid() and child.served == 1
    with open(f"/proc/{child.pid}/cmdline", "rb") as f:  # not a fork of this process
        assert b"nncert.drivers.probe" in f.read()


def test_an_abort_while_compiling_is_declined_as_such():
    driver = FaultyCompiled(at_compile={OperationType.TANH})
    (reason,) = driver.decline_reasons(_unary_model(OperationType.TANH))
    assert "killed by SIGABRT when it compiles TANH" in reason


def test_an_operation_whose_run_hangs_is_declined_after_the_deadline():
    driver = FaultyCompiled(at_run={OperationType.TANH: "hang"})
    driver.probe_timeout = 1.0
    start = time.monotonic()
    (reason,) = driver.decline_reasons(_unary_model(OperationType.TANH))
    assert time.monotonic() - start < 20
    assert "no answer within 1 s when it runs TANH" in reason
    assert driver.supported_operations(_unary_model(OperationType.RELU)) == [True]


def test_a_run_that_raises_declines_only_on_data_the_reference_runs():
    driver = FaultyCompiled(at_run={OperationType.TANH: "raise", OperationType.RESHAPE: "raise"})
    (reason,) = driver.decline_reasons(_unary_model(OperationType.TANH))
    assert "fails to run TANH on TENSOR_FLOAT32[2, 2] on data the reference runs" in reason
    assert "the kernel failed" in reason
    # RESHAPE's shape as a model input: the sample (zeros) is no valid shape, the reference
    # refuses it too, so the failure says nothing of the operation.
    b = ModelBuilder()
    x, shape = b.operand(T.TENSOR_FLOAT32, (2, 3)), b.operand(T.TENSOR_INT32, (2,))
    out = b.operand(T.TENSOR_FLOAT32, (3, 2))
    b.operation(OperationType.RESHAPE, [x, shape], [out])
    assert driver.decline_reasons(b.build([x, shape], [out])) == [None]


def test_a_child_broken_by_earlier_probes_is_replaced_before_declining():
    """A runtime whose state an earlier probe broke aborts on the next operation: the probe
    tries that operation again in a fresh child, which runs it."""
    driver = FaultyCompiled(at_compile={OperationType.TANH}, after=1)
    assert driver.supported_operations(_unary_model(OperationType.RELU)) == [True]
    assert driver.supported_operations(_unary_model(OperationType.TANH)) == [True]
    assert driver._probe_child.served == 1  # the fresh child's first answer


def test_a_forked_test_process_starts_a_probe_child_of_its_own():
    from nncert.testing.outcome import Kind, run_isolated

    driver = NumpyCompiled()
    assert driver.supported_operations(_unary_model(OperationType.RELU)) == [True]
    parents = driver._probe_child

    def in_fork():
        ok = driver.supported_operations(_unary_model(OperationType.TANH)) == [True]
        return ok and driver._probe_child is not parents and driver._probe_child.owner == os.getpid()

    outcome = run_isolated(in_fork, timeout=60)
    assert outcome.kind is Kind.SUCCESS and outcome.value is True, outcome
    assert driver._probe_child is parents and parents.usable()
    assert driver.supported_operations(_unary_model(OperationType.LOGISTIC)) == [True]
    assert parents.served == 2


def test_a_quantised_comparison_at_scale_1_is_declined_by_litert():
    """LiteRT's quantised comparisons abort at invoke (every kernel mode) when an input's
    scale is exactly 1; the probe finds it, where compiling alone did not."""
    pytest.importorskip("ai_edge_litert")
    from nncert.drivers import load_driver

    driver = load_driver("litert")

    def compare(op, scale):
        b = ModelBuilder()
        x = b.operand(T.TENSOR_QUANT8_ASYMM, (4,), scale, 3)
        y = b.operand(T.TENSOR_QUANT8_ASYMM, (4,), scale, 3)
        out = b.operand(T.TENSOR_BOOL8, (4,))
        b.operation(op, [x, y], [out])
        return b.build([x, y], [out])

    (reason,) = driver.decline_reasons(compare(OperationType.GREATER, 1.0))
    assert "SIGABRT when it runs GREATER on TENSOR_QUANT8_ASYMM[4] (scale 1, zero point 3)" in reason
    assert driver.supported_operations(compare(OperationType.GREATER, 0.5)) == [True]



def _huge_grouped_conv():
    """The fuzzer's GROUPED_CONV_2D (litert, prepare_model target): a valid model whose input
    and output have a batch of 2^31 - 1, 320 GiB of sample values."""
    batch = 2**31 - 1
    b = ModelBuilder()
    x = b.operand(T.TENSOR_FLOAT32, (batch, 1, 5, 4))
    weights = b.constant(T.TENSOR_FLOAT32, np.ones((2, 3, 3, 2), np.float32))
    bias = b.constant(T.TENSOR_FLOAT32, np.zeros(2, np.float32))
    out = b.operand(T.TENSOR_FLOAT32, (batch, 1, 3, 2))
    params = [b.constant(T.INT32, v) for v in (0, 0, 1, 1, 1, 1, 2, 0)]
    b.operation(OperationType.GROUPED_CONV_2D, [x, weights, bias, *params, b.constant(T.BOOL, False)], [out])
    return b.build([x], [out])


def test_operands_too_large_to_sample_are_declined_before_anything_is_allocated():
    from nncert.drivers.probe import SAMPLE_OPERAND_BYTES, SAMPLE_TOTAL_BYTES, oversized

    driver = NumpyCompiled()
    (reason,) = driver.decline_reasons(_huge_grouped_conv())  # it raised MemoryError (320 GiB)
    assert reason.startswith("operand 0 (TENSOR_FLOAT32[2147483647, 1, 5, 4]) holds 171798691760 bytes, "
                             "more than the 64 MiB per operand of sample data")
    assert "GROUPED_CONV_2D on TENSOR_FLOAT32[2147483647, 1, 5, 4]" in reason
    assert driver.compiled == [] and driver._probe_child is None  # decided from the shapes alone
    # The bounds themselves: an operand of exactly 64 MiB is probed; operands under it that
    # add up to more than 256 MiB in all are not.
    at_bound = SAMPLE_OPERAND_BYTES // 4
    assert oversized(_unary_model(OperationType.RELU, dims=(at_bound,))) is None
    assert "per operand" in oversized(_unary_model(OperationType.RELU, dims=(at_bound + 1,)))
    many = _unary_model(*[OperationType.RELU] * 4, dims=(at_bound,))  # 5 operands of 64 MiB
    assert 5 * SAMPLE_OPERAND_BYTES > SAMPLE_TOTAL_BYTES
    assert oversized(many).startswith(f"its operands hold {5 * SAMPLE_OPERAND_BYTES} bytes, more than "
                                      f"the 256 MiB")


def test_litert_declines_the_fuzzers_huge_grouped_conv_2d_with_a_reason():
    pytest.importorskip("ai_edge_litert")
    from nncert.drivers import load_driver

    driver = load_driver("litert")
    try:
        assert driver.supported_operations(_huge_grouped_conv()) == [False]
        with pytest.raises(HalError, match="more than the 64 MiB per operand"):
            driver.prepare_model(_huge_grouped_conv())
    finally:
        driver.close()



# -- shapes that follow from input values, worked out before the runtime runs (EXE-5) --

def _pad_of_request_paddings():
    """PAD of a [1, 2] input whose paddings are a model input, declared to give [3, 4]
    (paddings [[1, 1], [1, 1]]): the shape follows from a value only the request gives."""
    b = ModelBuilder()
    x, pads = b.operand(T.TENSOR_FLOAT32, (1, 2)), b.operand(T.TENSOR_INT32, (2, 2))
    out = b.operand(T.TENSOR_FLOAT32, (3, 4))
    b.operation(OperationType.PAD, [x, pads], [out])
    return b.build([x, pads], [out])


#: paddings -> what they ask of the PAD above: the declared shape, another shape, 1.7e9 rows
#: (ONNX Runtime set out to allocate them for the fuzzer, whatever the output buffer).
PADDINGS = {"declared": [[1, 1], [1, 1]], "other": [[0, 5], [0, 0]], "huge": [[0, 1_700_000_000], [0, 0]]}


def _pad_statuses(driver, short_buffer=False, messages=None):
    """What ``driver`` answers for each of PADDINGS (and a 24-byte buffer for the declared
    shape's 48 bytes): the status and output shapes of the failure, or the output; each
    failure's message goes into ``messages``."""
    model = _pad_of_request_paddings()
    prepared = driver.prepare_model(model)
    x = np.array([[1.0, 2.0]], np.float32)
    answers = {}
    for name, pads in PADDINGS.items():
        request = build_request(model, [x, np.array(pads, np.int32)], [(3, 4)])
        if short_buffer:
            request.outputs[0].location.length = 24
        try:
            prepared.execute_synchronously(request)
            answers[name] = read_outputs(model, request, [(3, 4)])[0].tolist()
        except HalError as e:
            answers[name] = (e.status.name, [(s.dimensions, s.is_sufficient) for s in e.output_shapes])
            if messages is not None:
                messages[name] = str(e)
    return answers


class CountingCompiled(NumpyCompiled):
    """NumpyCompiled that counts the runs of its executables in this process."""

    def compile(self, model):
        exe = super().compile(model)
        driver = self

        class Counting:
            def run(self, inputs):
                driver.runs += 1
                return exe.run(inputs)

        return Counting()

    runs = 0


def test_shapes_from_input_values_are_answered_before_the_runtime_runs_as_the_reference_answers():
    from nncert.drivers.compiled import value_shaped
    from nncert.drivers.reference import ReferenceDriver

    driver = CountingCompiled()
    answers = _pad_statuses(driver)
    assert answers == _pad_statuses(ReferenceDriver())
    assert answers["declared"] == [[0, 0, 0, 0], [0, 1, 2, 0], [0, 0, 0, 0]]
    assert answers["other"] == ("INVALID_ARGUMENT", [])  # [1, 7] contradicts the declared [3, 4]
    assert answers["huge"] == ("GENERAL_FAILURE", [])  # beyond what the reference computes either
    assert driver.runs == 1  # only the declared paddings reached the runtime
    short = _pad_statuses(driver, short_buffer=True)
    assert short["declared"] == ("OUTPUT_INSUFFICIENT_SIZE", [((3, 4), False)])
    assert short == _pad_statuses(ReferenceDriver(), short_buffer=True) and driver.runs == 1
    assert value_shaped(driver.prepare_model(_pad_of_request_paddings()).wide)
    assert not value_shaped(_add_model())  # an ordinary model: nothing checked at run time


def test_a_huge_pad_of_request_paddings_never_reaches_onnx_runtime():
    """The fuzzer's ONNX Runtime finding, by hand: each compiled driver answers as the reference
    does, in a child whose address space is capped at 8 GiB (before the fix ONNX Runtime set
    out to allocate 1.7e9 x 4 floats)."""
    import resource

    from nncert.drivers import load_driver
    from nncert.drivers.reference import ReferenceDriver
    from nncert.testing.outcome import Kind, run_isolated

    pytest.importorskip("onnxruntime")
    expected = _pad_statuses(ReferenceDriver())

    def on(spec):
        resource.setrlimit(resource.RLIMIT_AS, (8 << 30, 8 << 30))
        driver = load_driver(spec)
        messages = {}
        try:
            return _pad_statuses(driver, messages=messages), messages
        finally:
            driver.close()

    specs = ["onnxruntime"] + (["litert"] if installed_module("ai_edge_litert") else [])
    for spec in specs:
        outcome = run_isolated(on, spec, timeout=120)
        assert outcome.kind is Kind.SUCCESS, (spec, outcome.reason, outcome.stderr_tail)
        answers, messages = outcome.value
        assert answers == expected, spec
        # answered from the shape, not by the runtime failing to allocate it
        assert "output 0 would have shape [1700000001, 2]" in messages["huge"], messages


def installed_module(name):
    import importlib.util

    return importlib.util.find_spec(name) is not None


# -- omitted model inputs (a request argument with no value) --

def _transpose_model():
    """TRANSPOSE of a [2, 3] input whose perm is a model input (omitted: reversed axes)."""
    b = ModelBuilder()
    x, perm = b.operand(T.TENSOR_FLOAT32, (2, 3)), b.operand(T.TENSOR_INT32, (2,))
    out = b.operand(T.TENSOR_FLOAT32, (3, 2))
    b.operation(OperationType.TRANSPOSE, [x, perm], [out])
    return b.build([x, perm], [out])


class NoOmissions(NumpyCompiled):
    """Cannot compile a model with an omitted (NO_VALUE) operand."""

    def compile(self, model):
        if any(o.lifetime is OperandLifeTime.NO_VALUE for o in model.main.operands):
            raise Unmappable("no omitted operands here")
        return super().compile(model)


def test_an_omitted_model_input_runs_as_the_omitted_operand():
    model = _transpose_model()
    driver = NumpyCompiled()
    prepared = driver.prepare_model(model)
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    for _ in range(2):  # the variant is compiled once, then kept
        request = build_request(model, [x, np.zeros(2, np.int32)], [(3, 2)], omitted_inputs=(1,))
        prepared.execute_synchronously(request)
        np.testing.assert_array_equal(read_outputs(model, request, [(3, 2)])[0], x.T)
    given = build_request(model, [x, np.array([0, 1], np.int32)], [(2, 3)])
    with pytest.raises(HalError):  # perm given: [2, 3], which the output's [3, 2] is not
        prepared.execute_synchronously(given)
    assert sum(1 for m in driver.compiled if len(m.main.input_indexes) == 1) == 1


def test_a_driver_that_cannot_compile_the_omission_declines_up_front():
    (reason,) = NoOmissions().decline_reasons(_transpose_model())
    assert reason == "Unmappable: no omitted operands here (with inputs 1 omitted)"
    b = ModelBuilder()  # the same with perm a constant: nothing a request may omit
    x, out = b.operand(T.TENSOR_FLOAT32, (2, 3)), b.operand(T.TENSOR_FLOAT32, (3, 2))
    b.operation(OperationType.TRANSPOSE, [x, b.constant(T.TENSOR_INT32, [1, 0])], [out])
    assert NoOmissions().decline_reasons(b.build([x], [out])) == [None]


def test_an_omitted_input_the_reference_refuses_is_invalid_argument_here_too():
    from nncert.drivers.reference import ReferenceDriver

    model = if_model()  # inputs: the condition, then the branches' two operands
    a = np.ones((2, 3), np.float32)
    statuses = []
    for driver in (ReferenceDriver(), NumpyCompiled()):
        request = build_request(model, [np.array([True]), a, a], [(2, 3)], omitted_inputs=(1,))
        with pytest.raises(HalError) as e:
            driver.prepare_model(model).execute_synchronously(request)
        statuses.append(e.value.status)
    assert statuses == [ErrorStatus.INVALID_ARGUMENT] * 2


def test_too_many_omittable_inputs_are_declined_with_the_reason(monkeypatch):
    from nncert.drivers import probe

    monkeypatch.setattr(probe, "OMISSION_INPUTS", 0)
    (reason,) = NumpyCompiled().decline_reasons(_transpose_model())
    assert "1 of its inputs are model inputs that a request may omit" in reason


@pytest.mark.parametrize("name", ["litert", "onnxruntime"])
def test_real_drivers_run_what_requests_omit(name):
    """Per-operation cases whose optional tensors are model inputs, each run with them
    omitted one at a time as the reference runs them: claimed, then run alike."""
    pytest.importorskip({"litert": "ai_edge_litert", "onnxruntime": "onnxruntime"}[name])
    from nncert.drivers import load_driver
    from nncert.hal.transform import omit_inputs
    from nncert.hal.validation import input_may_be_omitted, validate_model
    from nncert.testing.criteria import output_mismatches

    driver = load_driver(name)
    wanted = {OperationType.TRANSPOSE, OperationType.BIDIRECTIONAL_SEQUENCE_RNN, OperationType.SVDF}
    ran = 0
    for key in enumerate_cases((0,)):
        if key[0].type not in wanted or key[2].types.get("T") is not T.TENSOR_FLOAT32:
            continue
        model, feeds = sample_case(*key).model("all_tensors_as_inputs")
        for p in range(len(feeds)):
            if not input_may_be_omitted(model, p):
                continue
            try:
                validate_model(omit_inputs(model, (p,)))
            except Exception:
                continue
            if not all(driver.supported_operations(model)):
                continue
            given = [None if k == p else f for k, f in enumerate(feeds)]
            expected = run_model(model, given)
            dims = [e.shape for e in expected]
            request = build_request(model, feeds, dims, omitted_inputs=(p,))
            driver.prepare_model(model).execute_synchronously(request)
            assert output_mismatches(model, expected, read_outputs(model, request, dims)) == []
            ran += 1
    assert ran >= 2, ran


@pytest.mark.parametrize("rows", [4, 0])  # the table's rows declared, or given by the request
def test_a_lookup_index_out_of_range_is_refused_before_the_runtime_runs(rows):
    """Runtimes' gathers do not all refuse one (ONNX Gather takes -1 for the last row, OpenVINO's
    gives zeros past either end): the base answers INVALID_ARGUMENT as the reference does, and
    the runtime never sees the index."""
    b = ModelBuilder()
    table = b.operand(T.TENSOR_FLOAT32, (rows, 3))
    indices = b.operand(T.TENSOR_INT32, (2,))
    out = b.operand(T.TENSOR_FLOAT32, (2, 3))
    b.operation(OperationType.GATHER, [table, b.constant(T.INT32, -2), indices], [out])
    model = b.build([table, indices], [out])
    driver = CountingCompiled()
    prepared = driver.prepare_model(model)
    x = np.arange(12, dtype=np.float32).reshape(4, 3)
    for bad in (4, -1):
        request = build_request(model, [x, np.array([0, bad], np.int32)], [(2, 3)])
        with pytest.raises(HalError, match=rf"operation 0 \(GATHER\): index {bad} is outside 0\.\.3") as e:
            prepared.execute_synchronously(request)
        assert e.value.status is ErrorStatus.INVALID_ARGUMENT
    assert driver.runs == 0
    request = build_request(model, [x, np.array([3, 0], np.int32)], [(2, 3)])
    prepared.execute_synchronously(request)
    np.testing.assert_array_equal(read_outputs(model, request, [(2, 3)])[0], x[[3, 0]])
