"""Drivers that trust their input: in one entry point (VAL-3: conformance/test_robustness.py and
the fuzz campaign, fuzz/test_fuzz.py -k prepare_model, find it), or in the values of operation
parameters (VAL-1: conformance/test_validation.py's invalid parameter values)."""

from __future__ import annotations

from collections.abc import Sequence

from nncert.drivers.base import Deadline, PreparedModel
from nncert.drivers.mutants import MutantDriver, MutantInfo
from nncert.hal.errors import ValidationError
from nncert.hal.model import Model
from nncert.hal.types import ExecutionPreference, Priority
from nncert.hal.validation import validate_model


class ChecksInsteadOfValidating(MutantDriver):
    """Validates in supported_operations, but prepare_model assumes the model was checked
    there and only asserts it (a CHECK): an invalid model given straight to prepare_model
    kills the driver instead of getting INVALID_ARGUMENT (VAL-3)."""

    name = "checks_instead_of_validating"

    def prepare_model(self, model: Model,
                      preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
                      priority: Priority = Priority.MEDIUM, deadline: Deadline = None,
                      model_cache: Sequence[int] = (), data_cache: Sequence[int] = (),
                      token: bytes | None = None) -> PreparedModel:
        try:
            validate_model(model, self.feature_level)
        except ValidationError as e:
            raise AssertionError(f"CHECK failed: {e.message}") from None
        return super().prepare_model(model, preference, priority, deadline, model_cache, data_cache, token)


class LaxParameters(MutantDriver):
    """Validates a model's structure, types and shapes, but not its operations' parameter
    values: a model whose only fault is one of them (a SOFTMAX beta of -1, an LSTM clip of
    NaN, a negative epsilon) is claimed, prepared and run with whatever the kernels make of
    it; one the kernels cannot compute fails at execution (GENERAL_FAILURE)."""

    name = "lax_parameters"
    validates = False  # checked here instead; execution runs the kernels unchecked

    def _check(self, model: Model) -> None:
        try:
            validate_model(model, self.feature_level)
        except ValidationError as e:
            if e.rule != "operation-parameters":
                raise

    def supported_operations(self, model: Model) -> list[bool]:
        self._check(model)
        return super().supported_operations(model)

    def prepare_model(self, model: Model,
                      preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
                      priority: Priority = Priority.MEDIUM, deadline: Deadline = None,
                      model_cache: Sequence[int] = (), data_cache: Sequence[int] = (),
                      token: bytes | None = None) -> PreparedModel:
        self._check(model)
        return super().prepare_model(model, preference, priority, deadline, model_cache, data_cache, token)


MUTANT_INFO = (
    MutantInfo(ChecksInsteadOfValidating, "VAL-3", suite="test_robustness.py", args=("-k", "prepare_model")),
    MutantInfo(LaxParameters, "VAL-1", suite="test_validation.py", args=("-k", "invalid_parameter")),
)
