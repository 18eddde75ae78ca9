"""Per-operation tests (the CTS generated tests): every operation x type variant x layout x
fused activation, three seeded cases each, compared with the reference (ACC-1..4, ACC-6), plus
the CTS variations: relaxed fp32, inputs as internal operands, all tensors as inputs, and
outputs of unknown shape (EXE-4, EXE-6)."""

from __future__ import annotations

import pytest

from nncert.testing.cases import SEEDS, case_id, enumerate_cases, sample_case
from nncert.testing.criteria import tolerance
from nncert.testing.harness import run_case


def _key_id(key) -> str:
    return case_id(*key)


def _acc_req(key) -> str:
    _, sig, var_, *_ = key
    return tolerance(sig.outputs[0].resolve(var_.types)).requirement


def _params(keys, *extra):
    return [pytest.param(k, id=_key_id(k), marks=pytest.mark.req(_acc_req(k), "ACC-6", *extra))
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
