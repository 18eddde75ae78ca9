"""The interpreter's IF and WHILE (nncert.ops.control_flow via run_model), the execution
budget, and ModelBuilder's referenced subgraphs."""

from __future__ import annotations

import time

import numpy as np
import pytest

from nncert.hal.errors import HalError
from nncert.hal.types import LOOP_TIMEOUT_DEFAULT_NS, LOOP_TIMEOUT_MAXIMUM_NS, ErrorStatus, OperandLifeTime
from nncert.hal.types import OperationType as Op
from nncert.hal.validation import validate_model
from nncert.ops.interpreter import ExecutionBudget, current_budget, execution_budget, run_model
from nncert.testing import control_flow_models as cf


def test_builder_lays_out_referenced_subgraphs():
    model = cf.counting_while_model(nested_if=True)
    validate_model(model)
    # main + cond + body + the nested IF's two branches
    assert len(model.referenced) == 4
    refs = [o for sg in (model.main, *model.referenced) for o in sg.operands
            if o.lifetime is OperandLifeTime.SUBGRAPH]
    assert sorted(o.location.offset for o in refs) == [0, 1, 2, 3]
    # constants of subgraphs share the model's operandValues
    body = model.referenced[1]
    assert any(body_op.type is Op.IF for body_op in body.operations)
    assert any(o.lifetime is OperandLifeTime.CONSTANT_COPY for o in body.operands)


@pytest.mark.parametrize("condition", [True, False])
def test_if_runs_one_branch(condition):
    a, b = np.ones((2, 3), np.float32), np.full((2, 3), 2, np.float32)
    (out,) = run_model(cf.if_model(), [np.array([condition]), a, b])
    np.testing.assert_array_equal(out, cf.if_golden(condition, a, b))


@pytest.mark.parametrize(("start", "bound"), [(0, 10), (5, 5), (9, 3)])
@pytest.mark.parametrize("nested_if", [False, True])
def test_while_feeds_body_outputs_back(start, bound, nested_if):
    (out,) = run_model(cf.counting_while_model(nested_if), cf.counting_feeds(1, start, bound))
    np.testing.assert_array_equal(out, cf.counting_while_golden(1, start, bound, nested_if))


def test_shapes_come_from_actual_values():
    (out,) = run_model(cf.dynamic_if_model(), [np.array([True]), np.arange(3, dtype=np.float32)])
    assert out.shape == (6,)
    x, n = run_model(cf.doubling_while_model(), [np.ones(2, np.float32), np.array([1], np.int32)])
    assert x.shape == (16,) and n.tolist() == [4]


def test_loop_timeout_stops_an_endless_while():
    started = time.monotonic()
    with pytest.raises(HalError) as info:
        run_model(cf.counting_while_model(infinite=True), cf.counting_feeds(0, 0, 0),
                  budget=ExecutionBudget(loop_timeout=1_000_000))
    assert info.value.status is ErrorStatus.MISSED_DEADLINE_TRANSIENT
    assert time.monotonic() - started < 0.5


def test_deadline_is_checked_between_operations():
    seen = []

    def after(n, op, operands, inputs, outputs, results):
        seen.append(op.type)
        return results

    with pytest.raises(HalError) as info:
        run_model(cf.counting_while_model(), cf.counting_feeds(0, 0, 2**31 - 1), after,
                  ExecutionBudget(deadline=time.monotonic_ns() + 20_000_000))
    assert info.value.status is ErrorStatus.MISSED_DEADLINE_TRANSIENT
    # the hook saw the operations inside the loop's subgraphs
    assert Op.LESS in seen and Op.ADD in seen


def test_budget_for_request_defaults_clamps_and_rejects():
    assert ExecutionBudget.for_request(None, None).loop_timeout == LOOP_TIMEOUT_DEFAULT_NS
    assert ExecutionBudget.for_request(5, 10**12) == ExecutionBudget(5, LOOP_TIMEOUT_MAXIMUM_NS)
    for bad in (-1, 1.5):
        with pytest.raises(HalError) as info:
            ExecutionBudget.for_request(None, bad)
        assert info.value.status is ErrorStatus.INVALID_ARGUMENT


def test_execution_budget_scope_is_what_run_model_applies():
    assert current_budget() == ExecutionBudget()
    with execution_budget(ExecutionBudget(loop_timeout=1_000_000)), pytest.raises(HalError):
        run_model(cf.counting_while_model(infinite=True), cf.counting_feeds(0, 0, 0))
    assert current_budget() == ExecutionBudget()


def test_unbounded_loop_timeout_runs_past_the_default():
    """loop_timeout=None (what the endless_while mutant uses) imposes no limit: a loop that
    ends by itself runs to its end."""
    (out,) = run_model(cf.counting_while_model(), cf.counting_feeds(0, 0, 50),
                       budget=ExecutionBudget(loop_timeout=None))
    np.testing.assert_array_equal(out, cf.counting_while_golden(0, 0, 50))


def test_constants_are_converted_once_per_cache_and_shared_read_only():
    """A prepared model's constants cache keeps each constant's raw array and the value kernels
    see (float64, dequantised), both read-only, also inside IF / WHILE subgraphs; results do not
    change from one run to the next."""
    from nncert.hal.builder import ModelBuilder
    from nncert.hal.types import OperandType as T
    from nncert.ops.base import dequantize

    b = ModelBuilder()
    x = b.operand(T.TENSOR_QUANT8_ASYMM, (2, 2), scale=0.5, zero_point=3)
    c = b.constant(T.TENSOR_QUANT8_ASYMM, np.array([[1, 2], [250, 4]], np.uint8), scale=0.25, zero_point=1)
    act = b.constant(T.INT32, 0)
    y = b.operand(T.TENSOR_QUANT8_ASYMM, (2, 2), scale=1.0, zero_point=0)
    b.operation(Op.ADD, [x, c, act], [y])
    model = b.build([x], [y])
    cache: dict = {}
    feed = np.array([[10, 20], [30, 40]], np.uint8)
    first = run_model(model, [feed], constants=cache)
    real = {k: v for k, v in cache.items() if k[-1] == "real"}
    assert len(real) == 1
    (value,) = real.values()
    assert value.dtype == np.float64 and not value.flags.writeable
    operand = model.main.operands[c]
    np.testing.assert_array_equal(value, dequantize(model.constant_value(operand), operand))
    again = run_model(model, [feed], constants=cache)
    np.testing.assert_array_equal(first[0], again[0])
    np.testing.assert_array_equal(first[0], run_model(model, [feed])[0])  # as without a cache

    cache.clear()
    model = cf.counting_while_model(nested_if=True)
    for _ in range(2):
        (out,) = run_model(model, cf.counting_feeds(1, 0, 4), constants=cache)
        np.testing.assert_array_equal(out, cf.counting_while_golden(1, 0, 4, True))
    assert any(k[-1] == "real" for k in cache)
    assert all(not v.flags.writeable for v in cache.values())
