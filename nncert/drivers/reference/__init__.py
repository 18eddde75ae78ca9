"""The reference driver: the catalogue's numpy kernels behind the driver protocol (the golden)."""

from __future__ import annotations

import time
from collections.abc import Sequence

import numpy as np

from nncert.drivers.base import Deadline, Driver, PreparedModel, check_deadline, check_preparation, timing_for
from nncert.drivers.caching import export_model, import_model
from nncert.drivers.memory_domain import DeviceBuffer, MemoryDomain
from nncert.hal.errors import HalError
from nncert.hal.model import (
    BufferDesc,
    BufferRole,
    Capabilities,
    Model,
    OutputShape,
    PerformanceInfo,
    Request,
    Timing,
)
from nncert.hal.request_io import read_inputs, write_outputs
from nncert.hal.types import (
    DeviceType,
    ErrorStatus,
    ExecutionPreference,
    MeasureTiming,
    OperandType,
    OperationType,
    Priority,
)
from nncert.hal.validation import validate_measure, validate_model, validate_request
from nncert.ops import get
from nncert.ops.control_flow import runnable
from nncert.ops.interpreter import ExecutionBudget, execution_budget, run_model


class ReferencePreparedModel(PreparedModel):
    def __init__(self, model: Model) -> None:
        self.model = model
        self._constants: dict = {}  # read from the pools at the first execution, then kept

    def compute(self, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        return run_model(self.model, inputs, constants=self._constants)

    def check_request(self, request: Request) -> None:
        """Every execution path's one validation of a request (VAL-1): paths that build on
        ``execute_synchronously`` (async, fenced, burst) go through it too."""
        validate_request(request, self.model)

    def execute_synchronously(self, request: Request, measure: MeasureTiming = MeasureTiming.NO,
                              deadline: Deadline = None,
                              loop_timeout: int | None = None) -> tuple[list[OutputShape], Timing]:
        start = time.monotonic_ns()
        validate_measure(measure)
        self.check_request(request)
        check_deadline(deadline, "execution")
        inputs = read_inputs(self.model, request)
        device_start = time.monotonic_ns()
        with execution_budget(ExecutionBudget.for_request(deadline, loop_timeout)):  # EXE-9, EXE-10
            outputs = self.compute(inputs)
        device_ns = time.monotonic_ns() - device_start
        shapes = write_outputs(self.model, request, outputs)
        return shapes, timing_for(measure, start, device_ns)


class ReferenceDriver(Driver):
    name = "reference"
    device_type = DeviceType.CPU

    def capabilities(self) -> Capabilities:
        one = PerformanceInfo(1.0, 1.0)
        return Capabilities(one, one, {t: one for t in OperandType if t.value < 10000}, one, one)

    #: Memory domains (MEM-4..7) for this driver's prepared models.
    memory_domain = MemoryDomain(lambda p: p.model if isinstance(p, ReferencePreparedModel) else None)

    def allocate(self, desc: BufferDesc, prepared_models: Sequence[PreparedModel],
                 input_roles: Sequence[BufferRole], output_roles: Sequence[BufferRole]
                 ) -> tuple[DeviceBuffer, int]:
        return self.memory_domain.allocate(desc, prepared_models, input_roles, output_roles)

    def version_string(self) -> str:
        from nncert import __version__
        return f"nncert-reference {__version__}"

    def supported_operations(self, model: Model) -> list[bool]:
        validate_model(model, self.feature_level)
        return [runnable(model, op, _has_kernel) for op in model.main.operations]

    def prepare_model(self, model: Model,
                      preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
                      priority: Priority = Priority.MEDIUM, deadline: Deadline = None,
                      model_cache: Sequence[int] = (), data_cache: Sequence[int] = (),
                      token: bytes | None = None) -> PreparedModel:
        check_preparation(model, preference, priority, deadline, self.feature_level)
        for n, op in enumerate(model.main.operations):
            if not runnable(model, op, _has_kernel):
                raise HalError(ErrorStatus.GENERAL_FAILURE,
                               f"operation {n} ({op.type.name}) is not supported")
        return self.save_to_cache(ReferencePreparedModel(model.copy()), model_cache, data_cache, token)

    # -- compilation caching (CACHE-1..7): model cache = the structure, data cache = constants --
    def export_compiled(self, prepared: PreparedModel) -> tuple[bytes, bytes]:
        return export_model(prepared.model)

    def import_compiled(self, model_cache: bytes, data_cache: bytes) -> PreparedModel:
        model, _ = import_model(model_cache, data_cache, self.feature_level)
        return ReferencePreparedModel(model)


def _has_kernel(op: OperationType) -> bool:
    return get(op) is not None
