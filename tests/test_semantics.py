"""Regression tests for places where nncert's catalogue differed from Android's semantics
(issue 20): each breaks the rule Android applies and checks nncert now applies it too."""

from __future__ import annotations

import numpy as np
import pytest

from nncert.hal.builder import ModelBuilder
from nncert.hal.errors import HalError, ValidationError
from nncert.hal.types import ErrorStatus, OperandLifeTime
from nncert.hal.types import OperandType as T
from nncert.hal.types import OperationType as Op
from nncert.hal.validation import input_may_be_omitted, validate_model
from nncert.ops import get
from nncert.ops.interpreter import run_model
from nncert.testing.cases import context_for, enumerate_edge_cases, sample_case
from nncert.testing.control_flow_models import if_model
from nncert.testing.harness import case_problems, own_criterion

# ---------------------------------------------------------------------------------------
# IF without a condition: Android rejects it; nncert took the else branch


def test_if_condition_without_value_is_rejected():
    model = if_model()
    validate_model(model)
    cond = model.main.operations[0].inputs[0]
    model.main.operands[cond].lifetime = OperandLifeTime.NO_VALUE
    model.main.input_indexes.remove(cond)
    with pytest.raises(ValidationError, match=r"condition .* has no value"):
        validate_model(model)


def test_if_condition_omitted_in_a_request_fails():
    model = if_model()
    assert not input_may_be_omitted(model, 0)  # the condition
    assert input_may_be_omitted(model, 1) is True  # left to the run, as before
    a = np.ones((2, 3), np.float32)
    with pytest.raises(HalError) as raised:
        run_model(model, [None, a, a])
    assert raised.value.status is ErrorStatus.INVALID_ARGUMENT


# ---------------------------------------------------------------------------------------
# STRIDED_SLICE shrinking an axis with a negative stride: Android's prepare rejects it


def _strided(end: list[int], strides: list[int], shrink: int):
    b = ModelBuilder()
    x = b.operand(T.TENSOR_FLOAT32, (3, 4))
    out = b.operand(T.TENSOR_FLOAT32, (4,))
    ints = [b.constant(T.TENSOR_INT32, np.array(v, np.int32)) for v in ([1, 0], end, strides)]
    b.operation(Op.STRIDED_SLICE, [x, *ints, b.constant(T.INT32, 0), b.constant(T.INT32, 0),
                                   b.constant(T.INT32, shrink)], [out])
    return b.build([x], [out])


def test_strided_slice_shrink_needs_a_positive_stride():
    validate_model(_strided([2, 4], [1, 1], 1))  # row 1, shrunk
    # begin 1, end 0, stride -1 selects exactly row 1 too: Android still rejects the shrink
    with pytest.raises(ValidationError, match="positive stride"):
        validate_model(_strided([0, 4], [-1, 1], 1))


def test_strided_slice_sampler_and_validator_agree():
    record = get(Op.STRIDED_SLICE)
    for seed in range(40):
        case = sample_case(record, record.signatures[0], record.variants[0], seed=seed)
        validate_model(case.model()[0])  # every drawn case is valid: no negative-stride shrink


# ---------------------------------------------------------------------------------------
# int32 DIV by zero: the execution succeeds, the value is unspecified


def _div_model():
    b = ModelBuilder()
    x, y = b.operand(T.TENSOR_INT32, (4,)), b.operand(T.TENSOR_INT32, (4,))
    out = b.operand(T.TENSOR_INT32, (4,))
    b.operation(Op.DIV, [x, y, b.constant(T.INT32, 0)], [out])
    return b.build([x, y], [out])


def test_int32_div_by_zero_succeeds():
    (got,) = run_model(_div_model(), [np.array([7, -7, 5, 0], np.int32), np.array([2, 2, 0, 0], np.int32)])
    assert got.tolist() == [3, -4, 0, 0]  # floor division; 0 where the divisor is 0 (nncert's choice)


def test_int32_div_by_zero_accepts_any_value_there_only():
    record = get(Op.DIV)
    key = next(k for k in enumerate_edge_cases() if k[0] is record and k[6] == "int32_zero_divisor")
    case = sample_case(*key[:6], edge=key[6])
    ctx = context_for(case)
    divisor = np.broadcast_to(np.asarray(ctx.value("input1")), case.expected[0].shape)
    assert (divisor == 0).any() and (divisor != 0).any()
    other = case.expected[0].copy()
    other[divisor == 0] = 12345  # anything where the divisor is zero
    assert case_problems(case, [other]) == []
    wrong = case.expected[0].copy()
    wrong[divisor != 0] += 1  # but the defined elements must be right
    assert case_problems(case, [wrong])
    # A model holding DIV keeps its element-wise checks in the other suites (caching, control
    # flow): only fuzzing, which draws zero divisors, leaves its values to this criterion.
    model = case.model()[0]
    assert not own_criterion(model) and own_criterion(model, unspecified=True)
