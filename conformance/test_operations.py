"""Per-operation tests (the CTS generated tests): every operation x type variant x layout x
fused activation, two seeded cases each, compared with the reference (ACC-1..4, ACC-6), plus
the CTS variations: relaxed fp32, inputs as internal operands, all tensors as inputs, and
outputs of unknown shape (EXE-4, EXE-6)."""

from __future__ import annotations

import pytest

from nncert.hal.types import OperandType
from nncert.testing.cases import enumerate_cases, sample_case
from nncert.testing.criteria import tolerance
from nncert.testing.harness import run_case

SEEDS = (0, 1)


def _key_id(key) -> str:
    record, sig, var_, nchw, act, seed = key
    from nncert.testing.cases import case_id
    return case_id(record, sig, var_, nchw, act, seed)


def _acc_req(key) -> str:
    _, sig, var_, *_ = key
    return tolerance(sig.outputs[0].resolve(var_.types)).requirement


def _params(keys, *extra):
    return [pytest.param(k, id=_key_id(k), marks=pytest.mark.req(_acc_req(k), "ACC-6", *extra))
            for k in keys]


ALL = list(enumerate_cases(SEEDS))
# Variations run on one seed and without fused activation, as CTS varies one thing at a time.
ONE = [k for k in ALL if k[5] == 0 and not k[4]]
FP32 = [k for k in ONE if k[2].primary is OperandType.TENSOR_FLOAT32]


@pytest.mark.req("DRV-2", "MEM-1", "MEM-2")
@pytest.mark.parametrize("key", _params(ALL))
def test_operation(driver, key):
    run_case(driver, sample_case(*key))


@pytest.mark.req("ACC-1")
@pytest.mark.parametrize("key", _params(FP32))
def test_operation_relaxed(driver, key):
    run_case(driver, sample_case(*key), "relaxed")


@pytest.mark.parametrize("key", _params(ONE))
def test_operation_inputs_as_internal(driver, key):
    case = sample_case(*key)
    if not case.supports("inputs_as_internal"):
        pytest.skip("no tensor input of a type ADD takes")
    run_case(driver, case, "inputs_as_internal")


@pytest.mark.parametrize("key", _params(ONE))
def test_operation_all_tensors_as_inputs(driver, key):
    case = sample_case(*key)
    if not case.supports("all_tensors_as_inputs"):
        pytest.skip("no constant tensor to turn into an input")
    run_case(driver, case, "all_tensors_as_inputs")


@pytest.mark.req("EXE-4", "EXE-6", "DRV-3")
@pytest.mark.parametrize("key", _params(ONE))
def test_operation_dynamic_output_shape(driver, key):
    run_case(driver, sample_case(*key), "dynamic_output")
