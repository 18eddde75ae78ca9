"""Mutants whose quality-of-service hints change more than speed or power: a priority or an
execution preference that buys a lower precision (ACC-1). conformance/test_qos.py catches
both: it runs the model prepared with every priority and every preference."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from nncert.drivers.base import Deadline, PreparedModel
from nncert.drivers.mutants import MutantDriver, MutantInfo, MutantPreparedModel
from nncert.hal.errors import HalError
from nncert.hal.model import Model
from nncert.hal.types import ErrorStatus, ExecutionPreference, Priority
from nncert.ops.interpreter import run_model


class _HalfPrecisionPrepared(MutantPreparedModel):
    """Computes float32 in float16 (inputs, and results) when ``half`` is set."""

    half = False

    def compute(self, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        if not self.half:
            return super().compute(inputs)
        halved = [x.astype(np.float16).astype(np.float32) if x is not None and x.dtype == np.float32 else x
                  for x in inputs]
        return [o.astype(np.float16).astype(np.float32) if o.dtype == np.float32 else o
                for o in run_model(self.model, halved)]


class _HalfPrecisionWhen(MutantDriver):
    prepared_class = _HalfPrecisionPrepared

    def prepare_model(self, model: Model,
                      preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
                      priority: Priority = Priority.MEDIUM, deadline: Deadline = None,
                      model_cache: Sequence[int] = (), data_cache: Sequence[int] = (),
                      token: bytes | None = None) -> PreparedModel:
        prepared = super().prepare_model(model, preference, priority, deadline, model_cache, data_cache,
                                         token)
        prepared.half = self.lowers(preference, priority)  # type: ignore[attr-defined]
        return prepared

    def lowers(self, preference: ExecutionPreference, priority: Priority) -> bool:
        raise NotImplementedError


class LowPowerHalfPrecision(_HalfPrecisionWhen):
    """Compiles a model prepared for LOW_POWER to float16 kernels, although the model does not
    allow float32 to run as float16 (ACC-1); every other preference is exact."""

    name = "low_power_half_precision"

    def lowers(self, preference: ExecutionPreference, priority: Priority) -> bool:
        return preference == ExecutionPreference.LOW_POWER


class LowPriorityHalfPrecision(_HalfPrecisionWhen):
    """Runs a model prepared with priority LOW on a low-power unit that computes float32 in
    float16 (ACC-1); MEDIUM and HIGH are exact."""

    name = "low_priority_half_precision"

    def lowers(self, preference: ExecutionPreference, priority: Priority) -> bool:
        return priority == Priority.LOW


class RefusedHintsKept(MutantDriver):
    """Programs the device queue with a preparation's priority and preference before checking
    them: a preparation refused for a value out of range (INVALID_ARGUMENT, as it must be)
    leaves the queue holding it, and the next preparation, whatever it asks, fails with
    GENERAL_FAILURE before the queue is reset (VAL-1: a refused call must change nothing)."""

    name = "refused_hints_kept"
    queue_bad = False

    def prepare_model(self, model: Model,
                      preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
                      priority: Priority = Priority.MEDIUM, deadline: Deadline = None,
                      model_cache: Sequence[int] = (), data_cache: Sequence[int] = (),
                      token: bytes | None = None) -> PreparedModel:
        if self.queue_bad:
            self.queue_bad = False
            raise HalError(ErrorStatus.GENERAL_FAILURE, "the device queue holds an invalid hint")
        self.queue_bad = priority not in list(Priority) or preference not in list(ExecutionPreference)
        return super().prepare_model(model, preference, priority, deadline, model_cache, data_cache, token)


MUTANT_INFO = (
    MutantInfo(LowPowerHalfPrecision, "ACC-1", suite="test_qos.py", args=("-k", "every_preference")),
    MutantInfo(LowPriorityHalfPrecision, "ACC-1", suite="test_qos.py", args=("-k", "every_priority")),
    MutantInfo(RefusedHintsKept, "VAL-1", suite="test_validation.py", args=("-k", "bad_priority")),
)
