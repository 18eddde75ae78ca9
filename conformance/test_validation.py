"""VTS validation: invalid models and requests get INVALID_ARGUMENT (VAL-1).

Every mutation kind of the notes on VAL-1 (docs/requirements.md) is applied to a valid
single-operation model of every catalogue operation; ``supported_operations`` and
``prepare_model`` must both reject the result with INVALID_ARGUMENT. Requests with an input
or an output removed must be rejected on every execution path.
"""

from __future__ import annotations

import functools

import pytest

from nncert.hal.builder import ModelBuilder, build_request
from nncert.hal.errors import HalError
from nncert.hal.types import ErrorStatus, MeasureTiming, OperandType, OperationType
from nncert.ops import records
from nncert.testing.cases import sample_case
from nncert.testing.harness import PATHS, execute, prepare_or_skip
from nncert.testing.mutations import (
    KINDS,
    bad_preferences,
    bad_priorities,
    model_mutations,
    request_mutations,
)

T = OperandType


def _valid_keys() -> list:
    """One valid case per operation and distinct primary type (first signature, seed 0)."""
    keys = []
    for r in records():
        seen = set()
        for var_ in r.variants:
            if var_.primary in seen:
                continue
            seen.add(var_.primary)
            keys.append((r, r.signatures[0], var_, False if r.layout else None,
                         0 if r.activation else None, 0))
    return keys


@functools.cache
def _case(key):
    return sample_case(*key)


def _kind(label: str) -> str:
    return next(k for k in KINDS if label.startswith(k))


def _model_params():
    """One test per valid model and mutation kind; each runs every instance of the kind."""
    params = []
    for key in _valid_keys():
        model, _ = _case(key).model()
        kinds = dict.fromkeys(_kind(label) for label, _ in model_mutations(model))
        params += [pytest.param(key, kind, id=f"{key[0].name}-{key[2].label}-{kind}") for kind in kinds]
    return params


def _expect_invalid(call, what: str) -> None:
    try:
        result = call()
    except HalError as e:
        if e.status is not ErrorStatus.INVALID_ARGUMENT:
            pytest.fail(f"VAL-1: {what} returned {e.status.name}, expected INVALID_ARGUMENT ({e.message})")
        return
    pytest.fail(f"VAL-1: {what} accepted an invalid argument (returned {type(result).__name__})")


@pytest.mark.req("VAL-1", "DRV-2")
@pytest.mark.parametrize("key,kind", _model_params())
def test_mutated_model_is_rejected(driver, key, kind):
    model, _ = _case(key).model()
    for label, mutated in model_mutations(model):
        if _kind(label) == kind:
            _expect_invalid(lambda m=mutated: driver.supported_operations(m),
                            f"supported_operations ({label})")
            _expect_invalid(lambda m=mutated: driver.prepare_model(m), f"prepare_model ({label})")


@pytest.mark.req("VAL-1")
@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("key", [pytest.param(k, id=f"{k[0].name}-{k[2].label}") for k in _valid_keys()
                                 if k[2].primary is T.TENSOR_FLOAT32 or k[0].name in ("QUANTIZE", "CAST")])
def test_mutated_request_is_rejected(driver, key, path):
    case = _case(key)
    model, feeds = case.model()
    prepared = prepare_or_skip(driver, model)
    for label, request in request_mutations(build_request(model, feeds)):
        _expect_invalid(lambda r=request: execute(prepared, r, path, MeasureTiming.YES),
                        f"{path} execution ({label})")


@pytest.mark.req("VAL-1")
@pytest.mark.parametrize("preference", bad_preferences())
def test_bad_execution_preference_is_rejected(driver, preference):
    key = _valid_keys()[0]
    model, _ = _case(key).model()
    _expect_invalid(lambda: driver.prepare_model(model, preference=preference), f"preference {preference}")


@pytest.mark.req("VAL-1", "EXE-10")
@pytest.mark.parametrize("priority", bad_priorities())
def test_bad_priority_is_rejected(driver, priority):
    key = _valid_keys()[0]
    model, _ = _case(key).model()
    _expect_invalid(lambda: driver.prepare_model(model, priority=priority), f"priority {priority}")


@pytest.mark.req("VAL-1")
def test_cycle_of_three_adds_is_rejected(driver):
    """The VTS CycleTest: ADD -> ADD -> ADD feeding back into the first."""
    b = ModelBuilder()
    dims = (2, 2)
    x = b.operand(T.TENSOR_FLOAT32, dims)
    act = b.constant(T.INT32, 0)
    a, c, d = (b.operand(T.TENSOR_FLOAT32, dims) for _ in range(3))
    b.operation(OperationType.ADD, [x, d], [a])
    b.operation(OperationType.ADD, [a, x], [c])
    b.operation(OperationType.ADD, [c, x], [d])
    for op in b.operations:
        op.inputs.append(act)
    out = b.operand(T.TENSOR_FLOAT32, dims)
    b.operation(OperationType.ADD, [d, x, act], [out])
    model = b.build([x], [out])
    _expect_invalid(lambda: driver.supported_operations(model), "supported_operations (cycle)")
    _expect_invalid(lambda: driver.prepare_model(model), "prepare_model (cycle)")
