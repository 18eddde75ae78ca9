"""HAL versions (VER-1): a driver of feature level L takes every model that L defines (it may
decline an operation, never call the model invalid), and rejects with INVALID_ARGUMENT, in
``supported_operations`` and in ``prepare_model``, a model that only a newer version defines:
an object valid in a newer version is not valid in an older one.

The models: for each version after 1.0, the catalogue's first operation variant that version
introduced, a HAL 1.0 model that allows relaxed computation (a HAL 1.1 field), one whose output
has unknown dimensions (HAL 1.2), and a WHILE loop (HAL 1.3 control flow). On a driver of the
newest level every model is one it must take."""

from __future__ import annotations

import dataclasses

import pytest

from nncert.hal.errors import HalError, ValidationError
from nncert.hal.model import Model
from nncert.hal.types import Version
from nncert.hal.validation import validate_model
from nncert.ops import records
from nncert.testing.cases import sample_case
from nncert.testing.control_flow_models import counting_while_model
from nncert.testing.harness import add_model, expect_invalid


def _first_of_each_version() -> dict[str, object]:
    """id -> a function building the model."""
    found: dict[Version, tuple] = {}
    for r in records():
        for var_ in r.variants:
            if var_.version > Version.V1_0 and var_.version not in found:
                found[var_.version] = (r, r.signatures[0], var_, False if r.layout else None,
                                       0 if r.activation else None, 0)
    models = {f"{v.label}-{key[0].name}-{key[2].label}": (lambda k=key: sample_case(*k).model()[0])
              for v, key in sorted(found.items())}
    models["1.1-relaxed-ADD"] = _relaxed_add
    models["1.2-dynamic-output-ADD"] = _dynamic_output_add
    models["1.3-WHILE"] = counting_while_model
    return models


def _dynamic_output_add() -> Model:
    """x + y (HAL 1.0) whose output's dimensions are left unknown, which HAL 1.2 introduced
    for model outputs (EXE-6)."""
    model = add_model()
    out = model.main.output_indexes[0]
    model.main.operands[out] = dataclasses.replace(model.main.operands[out], dimensions=(0, 0))
    return model


def _relaxed_add() -> Model:
    """x + y (HAL 1.0) with relaxComputationFloat32toFloat16 set, which HAL 1.1 introduced."""
    model = add_model()
    model.relax_computation_float32_to_float16 = True
    return model


MODELS = _first_of_each_version()


def _needed(model: Model) -> Version:
    """The oldest version in which ``model`` is valid."""
    for version in Version:
        try:
            validate_model(model, version)
        except ValidationError:
            continue
        return version
    raise AssertionError("the sample model is valid in no version")


@pytest.mark.req("VER-1", "VAL-1")
@pytest.mark.parametrize("name", list(MODELS))
def test_model_of_each_version(driver, name):
    model = MODELS[name]()
    needed, level = _needed(model), driver.feature_level
    what = f"a model that needs HAL {needed.label}, on a HAL {level.label} driver"
    if needed > level:
        expect_invalid(lambda: driver.supported_operations(model), f"supported_operations ({what})", "VER-1")
        expect_invalid(lambda: driver.prepare_model(model), f"prepare_model ({what})", "VER-1")
        return
    try:
        flags = driver.supported_operations(model)
    except HalError as e:
        pytest.fail(f"VER-1: supported_operations refused {what}: {e}")
    assert len(flags) == len(model.main.operations), \
        f"DRV-2: {len(flags)} flags for {len(model.main.operations)} operations"
