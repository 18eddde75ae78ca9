"""Per-operation tests (the CTS generated tests): every operation x type variant x layout x
fused activation, three seeded cases each, compared with the reference (ACC-1..4, ACC-6), plus
the CTS variations: relaxed fp32, inputs as internal operands, all tensors as inputs, and
outputs of unknown shape (EXE-4, EXE-6)."""

from __future__ import annotations

import numpy as np
import pytest

from nncert.hal.builder import ModelBuilder, build_request, read_outputs
from nncert.hal.errors import HalError
from nncert.hal.model import dtype_of
from nncert.hal.types import OperandType, OperationType
from nncert.ops.interpreter import run_model
from nncert.testing.cases import SEEDS, case_id, enumerate_cases, sample_case
from nncert.testing.criteria import tolerance
from nncert.testing.harness import check_outputs, execute, prepare_or_skip, run_case


def _key_id(key) -> str:
    return case_id(*key)


def _acc_req(key) -> str:
    _, sig, var_, *_ = key
    return tolerance(sig.outputs[0].resolve(var_.types)).requirement


def _params(keys, *extra):
    return [pytest.param(k, id=_key_id(k), marks=[pytest.mark.req(_acc_req(k), "ACC-6", *extra),
                                                   pytest.mark.operation(k[0].name, k[2].label)])
            for k in keys]


ALL = list(enumerate_cases(SEEDS))
# Variations run on one seed and without fused activation, as CTS varies one thing at a time.
ONE = [k for k in ALL if k[5] == 0 and not k[4]]


def _supporting(variation: str) -> list:
    """The keys whose case the variation applies to (CTS applies each selectively)."""
    return [k for k in ONE if sample_case(*k).supports(variation)]


@pytest.mark.req("DRV-2", "MEM-1", "MEM-2")
@pytest.mark.parametrize("key", _params(ALL))
def test_operation(driver, key):
    run_case(driver, sample_case(*key))


@pytest.mark.req("ACC-1")
@pytest.mark.parametrize("key", _params(_supporting("relaxed")))
def test_operation_relaxed(driver, key):
    run_case(driver, sample_case(*key), "relaxed")


@pytest.mark.parametrize("key", _params(_supporting("inputs_as_internal")))
def test_operation_inputs_as_internal(driver, key):
    run_case(driver, sample_case(*key), "inputs_as_internal")


@pytest.mark.parametrize("key", _params(_supporting("all_tensors_as_inputs")))
def test_operation_all_tensors_as_inputs(driver, key):
    run_case(driver, sample_case(*key), "all_tensors_as_inputs")


@pytest.mark.req("EXE-4", "EXE-6", "DRV-3")
@pytest.mark.parametrize("key", _params(_supporting("dynamic_output")))
def test_operation_dynamic_output_shape(driver, key):
    run_case(driver, sample_case(*key), "dynamic_output")


# Boundary cases the seeded samplers rarely reach: saturating results and extreme scales.
# Each is a hand-made model whose golden is the reference interpreter's.


def _softmax(t: OperandType, in_scale: float, dims: tuple[int, ...]):
    lo, hi = t.quant_range
    zp_out = 0 if t is OperandType.TENSOR_QUANT8_ASYMM else -128
    b = ModelBuilder()
    x = b.operand(t, dims, in_scale, (lo + hi + 1) // 2)
    out = b.operand(t, dims, 1 / 256, zp_out)
    b.operation(OperationType.SOFTMAX, [x, b.constant(OperandType.FLOAT32, 1.0)], [out])
    rng = np.random.default_rng(0)
    feed = rng.integers(lo, hi + 1, dims).astype(dtype_of(t))
    return b.build([x], [out]), [feed]


BOUNDARY = {
    # One element per softmax: probability exactly 1, which saturates to the top code.
    "SOFTMAX-quant8_asymm-axis_of_1": lambda: _softmax(OperandType.TENSOR_QUANT8_ASYMM, 0.1, (2, 1)),
    "SOFTMAX-quant8_asymm_signed-axis_of_1":
        lambda: _softmax(OperandType.TENSOR_QUANT8_ASYMM_SIGNED, 0.1, (2, 1)),
    # A tiny input scale: every input is nearly equal, the output is uniform.
    "SOFTMAX-quant8_asymm_signed-scale_1e-8":
        lambda: _softmax(OperandType.TENSOR_QUANT8_ASYMM_SIGNED, 1e-8, (1, 4)),
    "SOFTMAX-quant8_asymm-scale_1e-8": lambda: _softmax(OperandType.TENSOR_QUANT8_ASYMM, 1e-8, (1, 4)),
}


@pytest.mark.req("ACC-2", "DRV-2")
@pytest.mark.parametrize("name", list(BOUNDARY))
def test_operation_boundary(driver, name):
    model, feeds = BOUNDARY[name]()
    expected = run_model(model, feeds)
    prepared = prepare_or_skip(driver, model)
    dims = [e.shape for e in expected]
    request = build_request(model, feeds, dims)
    try:
        execute(prepared, request)
    except HalError as e:
        pytest.fail(f"DRV-2: claimed every operation, then execution failed: {e}")
    check_outputs(expected, read_outputs(model, request, dims), model, feeds=feeds)
