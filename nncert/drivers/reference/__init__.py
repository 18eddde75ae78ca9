"""The reference driver: the catalogue's numpy kernels behind the driver protocol (the golden)."""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from nncert.drivers.base import Deadline, Driver, PreparedModel, check_deadline, check_preparation, timing_for
from nncert.hal.errors import HalError
from nncert.hal.model import Capabilities, Model, OutputShape, PerformanceInfo, Request, Timing
from nncert.hal.request_io import read_inputs, write_outputs
from nncert.hal.types import (
    DeviceType,
    ErrorStatus,
    ExecutionPreference,
    MeasureTiming,
    OperandType,
    Priority,
)
from nncert.hal.validation import validate_model, validate_request
from nncert.ops import get
from nncert.ops.interpreter import run_model


class ReferencePreparedModel(PreparedModel):
    def __init__(self, model: Model) -> None:
        self.model = model

    def compute(self, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        return run_model(self.model, inputs)

    def execute_synchronously(self, request: Request, measure: MeasureTiming = MeasureTiming.NO,
                              deadline: Deadline = None,
                              loop_timeout: int | None = None) -> tuple[list[OutputShape], Timing]:
        start = time.monotonic_ns()
        validate_request(request, self.model)
        check_deadline(deadline, "execution")
        inputs = read_inputs(self.model, request)
        device_start = time.monotonic_ns()
        outputs = self.compute(inputs)
        device_ns = time.monotonic_ns() - device_start
        shapes = write_outputs(self.model, request, outputs)
        return shapes, timing_for(MeasureTiming(measure), start, device_ns)


class ReferenceDriver(Driver):
    name = "reference"
    device_type = DeviceType.CPU

    def capabilities(self) -> Capabilities:
        one = PerformanceInfo(1.0, 1.0)
        return Capabilities(one, one, {t: one for t in OperandType if t.value < 10000}, one, one)

    def version_string(self) -> str:
        from nncert import __version__
        return f"nncert-reference {__version__}"

    def supported_operations(self, model: Model) -> list[bool]:
        validate_model(model, self.feature_level)
        return [get(op.type) is not None for op in model.main.operations]

    def prepare_model(self, model: Model,
                      preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
                      priority: Priority = Priority.MEDIUM, deadline: Deadline = None,
                      model_cache: Sequence[int] = (), data_cache: Sequence[int] = (),
                      token: bytes | None = None) -> PreparedModel:
        check_preparation(model, preference, priority, deadline, self.feature_level)
        for n, op in enumerate(model.main.operations):
            if get(op.type) is None:
                raise HalError(ErrorStatus.GENERAL_FAILURE,
                               f"operation {n} ({op.type.name}) is not supported")
        return ReferencePreparedModel(model.copy())
