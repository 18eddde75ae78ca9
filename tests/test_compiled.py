"""The compiled-driver base (nncert/drivers/compiled.py) and the model rewrites it relies on,
with a test double whose "runtime" is the reference interpreter: whatever fails here is the
base's fault, not a runtime's."""

from __future__ import annotations

import dataclasses

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
    assert len(driver.compiled) == 1


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
