"""Mutant drivers: the reference driver with one deliberate fault each.

Every suite proves its teeth against one of these (tests/test_mutants.py): run against the
mutant, the suite must fail, in a test that names the requirement the fault breaks.
Select one with ``--driver mutant:NAME``. The process-fault mutants (crash, hang,
burst_death, silent_fence) kill or block their process: run them isolated, as
``service:mutant:crash,op=ADD`` or with ``--isolate``. The hostile mutants (truncates_pools,
grows_pools, corrupts_ring: hostile.py) attack the shared memory of the process they are
hosted for: run them as ``service:mutant:NAME``.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from nncert.drivers.base import (
    Burst,
    Deadline,
    ExecutionCallback,
    FencedExecutionCallback,
    PreparedModel,
    SyncFence,
)
from nncert.drivers.reference import ReferenceDriver, ReferencePreparedModel
from nncert.hal.errors import HalError
from nncert.hal.model import Model, Operand, Operation, OutputShape, Request, Timing
from nncert.hal.request_io import read_inputs, write_outputs
from nncert.hal.types import (
    NO_TIMING,
    ErrorStatus,
    ExecutionPreference,
    MeasureTiming,
    OperationType,
    Priority,
)
from nncert.ops import get
from nncert.ops.base import match
from nncert.ops.interpreter import run_model
from nncert.ops.window import IMPLICIT, PADDING_SAME


class MutantPreparedModel(ReferencePreparedModel):
    """Reference execution with the driver's hooks on the computation and the result."""

    def __init__(self, model: Model, driver: MutantDriver) -> None:
        super().__init__(model)
        self.driver = driver

    def compute(self, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        outputs = self.driver.run(self.model, inputs)
        return [self.driver.mutate_output(self.model, i, o) for i, o in enumerate(outputs)]

    def execute_synchronously(self, request: Request, measure: MeasureTiming = MeasureTiming.NO,
                              deadline: Deadline = None,
                              loop_timeout: int | None = None) -> tuple[list[OutputShape], Timing]:
        if self.driver.validates:
            result = super().execute_synchronously(request, measure, deadline, loop_timeout)
            return self.driver.mutate_result(self.model, result)
        # No validation at all: whatever happens in the kernels is what the caller gets.
        try:
            outputs = self.compute(read_inputs(self.model, request))
            return write_outputs(self.model, request, outputs), Timing()
        except HalError:
            raise
        except Exception as e:
            raise HalError(ErrorStatus.GENERAL_FAILURE, f"{type(e).__name__}: {e}") from None


class MutantDriver(ReferenceDriver):
    """Base of mutants: the reference driver plus hooks, each the identity by default."""

    validates = True  # False: skip every validation step
    prepared_class: type[MutantPreparedModel] = MutantPreparedModel

    def supported_operations(self, model: Model) -> list[bool]:
        if not self.validates:
            return [get(op.type) is not None for op in model.main.operations]
        return super().supported_operations(model)

    def prepare_model(self, model: Model,
                      preference: ExecutionPreference = ExecutionPreference.FAST_SINGLE_ANSWER,
                      priority: Priority = Priority.MEDIUM, deadline: Deadline = None,
                      model_cache: Sequence[int] = (), data_cache: Sequence[int] = (),
                      token: bytes | None = None) -> PreparedModel:
        if self.validates:
            super().prepare_model(model, preference, priority, deadline, model_cache, data_cache, token)
        return self.compiled(model, self.prepared_class(model.copy(), self))

    def compiled(self, model: Model, prepared: PreparedModel) -> PreparedModel:
        """What prepare_model hands back for ``model`` (a driver's hook on compilation)."""
        return prepared

    def import_compiled(self, model_cache: bytes, data_cache: bytes) -> PreparedModel:
        return self.prepared_class(super().import_compiled(model_cache, data_cache).model, self)

    def run(self, model: Model, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        return run_model(model, inputs, self.mutate_operation)

    def mutate_operation(self, n: int, op: Operation, operands: list, inputs: list,
                         outputs: list[Operand], results: list[np.ndarray]) -> list[np.ndarray]:
        """One operation's results, as this driver computes them."""
        return results

    def mutate_output(self, model: Model, i: int, value: np.ndarray) -> np.ndarray:
        return value

    def mutate_result(self, model: Model, result: tuple[list[OutputShape], Timing]
                      ) -> tuple[list[OutputShape], Timing]:
        return result


class QuantOffBy2(MutantDriver):
    """Quantised outputs are two steps too high (saturating)."""

    name = "quant_off_by_2"

    def mutate_output(self, model: Model, i: int, value: np.ndarray) -> np.ndarray:
        t = model.main.operands[model.main.output_indexes[i]].type
        if not t.is_quant:
            return value
        lo, hi = t.quant_range
        return np.clip(value.astype(np.int64) + 2, lo, hi).astype(value.dtype)


class Fp32AsFp16(MutantDriver):
    """Computes float32 in float16 although relaxed computation was not allowed.

    Inputs and results pass through float16."""

    name = "fp32_as_fp16"

    def run(self, model: Model, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        halved = [x.astype(np.float16).astype(np.float32) if x is not None and x.dtype == np.float32 else x
                  for x in inputs]
        return run_model(model, halved)

    def mutate_output(self, model: Model, i: int, value: np.ndarray) -> np.ndarray:
        if value.dtype == np.float32:
            return value.astype(np.float16).astype(np.float32)
        return value


class RareConv(MutantDriver):
    """CONV_2D with SAME padding, a stride of 2 and NCHW layout loses its last output
    column (zeros); every other convolution is right."""

    name = "rare_conv"

    def mutate_operation(self, n, op, operands, inputs, outputs, results):
        if op.type is not OperationType.CONV_2D:
            return results
        m = match(get(op.type), [o and o.type for o in operands], [o.type for o in outputs])

        def scalar(name: str, default: int = 0) -> int:
            pos = [p for p in m.positions.get(name, []) if operands[p] is not None]
            return int(np.asarray(inputs[pos[0]]).item()) if pos else default

        if m.signature.name != IMPLICIT or scalar("padding") != PADDING_SAME or not scalar("layout") \
                or 2 not in (scalar("stride_w"), scalar("stride_h")):
            return results
        out = results[0].copy()
        o = outputs[0]
        out[..., -1] = o.zero_point if o.type.is_quant else 0
        return [out]


class Drift(MutantDriver):
    """A float error that builds up over one execution: the k-th operation run adds
    ``k * 1e-3`` to each float result (relative to its magnitude, at least 1). A model of
    one operation is exact, so the per-operation suite passes; graphs drift."""

    name = "drift"
    STEP = 1e-3

    def mutate_operation(self, n, op, operands, inputs, outputs, results):
        if n == 0:
            return results
        out = []
        for r, o in zip(results, outputs, strict=True):
            if o.type.is_float:
                x = r.astype(np.float64)
                r = (x + n * self.STEP * np.maximum(1.0, np.abs(x))).astype(r.dtype)
            out.append(r)
        return out


class NoValidation(MutantDriver):
    """Never validates models or requests: accepts invalid ones."""

    name = "no_validation"
    validates = False


class TimingInverted(MutantDriver):
    """Reports timeOnDevice greater than timeInDriver."""

    name = "timing_inverted"

    def mutate_result(self, model, result):
        shapes, timing = result
        if timing.time_in_driver != NO_TIMING:
            timing = Timing(timing.time_in_driver + 1000, timing.time_in_driver)
        return shapes, timing


class WrongDynamicShape(MutantDriver):
    """Reports a wrong shape for outputs the model left unknown."""

    name = "wrong_dynamic_shape"

    def mutate_result(self, model, result):
        shapes, timing = result
        out = []
        for idx, shape in zip(model.main.output_indexes, shapes, strict=True):
            if not model.main.operands[idx].fully_specified and shape.dimensions:
                dims = (shape.dimensions[0] + 1, *shape.dimensions[1:])
                shape = dataclasses.replace(shape, dimensions=dims)
            out.append(shape)
        return out, timing


class StaleAsync(MutantDriver):
    """The asynchronous path returns the previous request's results."""

    name = "stale_async"

    class Prepared(MutantPreparedModel):
        previous: list[bytes] | None = None

        def execute(self, request, measure=MeasureTiming.NO, deadline=None, loop_timeout=None):
            callback = ExecutionCallback()
            result = self._run(request, measure, deadline, loop_timeout)
            if result.status is ErrorStatus.NONE:
                # One static result buffer for the whole driver, returned one call late.
                fresh = [_output_bytes(request, i) for i in range(len(request.outputs))]
                for i, data in enumerate((self.previous or [])[:len(request.outputs)]):
                    _write_output_bytes(request, i, data)
                type(self).previous = fresh
            callback.notify(result)
            return callback

    prepared_class = Prepared


class _OnOperation(MutantDriver):
    """Base of the process-fault mutants: misbehave when a model holding operation ``op``
    executes (preparation and the other operations are fine)."""

    def __init__(self, op: str = "CONV_2D", **options: str) -> None:
        super().__init__(**options)
        try:
            self.op = OperationType[op]
        except KeyError:
            raise ValueError(f"op {op!r} is not an operation type name") from None

    def run(self, model: Model, inputs: list[np.ndarray | None]) -> list[np.ndarray]:
        if any(o.type == self.op for o in model.main.operations):
            self.fault()
        return super().run(model, inputs)

    def fault(self) -> None:
        raise NotImplementedError


class CrashOn(_OnOperation):
    """Aborts the process (SIGABRT) when it executes operation ``op`` (default CONV_2D)."""

    name = "crash"

    def fault(self) -> None:
        print(f"mutant:crash: aborting on {self.op.name}", file=sys.stderr, flush=True)
        os.abort()


class HangOn(_OnOperation):
    """Never returns from an execution of operation ``op`` (default CONV_2D)."""

    name = "hang"

    def fault(self) -> None:
        while True:
            time.sleep(3600)


class BurstDeath(MutantDriver):
    """Aborts the process in the middle of a burst: on the burst's second execution."""

    name = "burst_death"

    class Prepared(MutantPreparedModel):
        def configure_execution_burst(self) -> Burst:
            return BurstDeath.DyingBurst(self)

    class DyingBurst(Burst):
        runs = 0

        def execute(self, request, slots, measure=MeasureTiming.NO, deadline=None, loop_timeout=None):
            self.runs += 1
            if self.runs == 2:
                print("mutant:burst_death: aborting in the middle of a burst", file=sys.stderr, flush=True)
                os.abort()
            return super().execute(request, slots, measure, deadline, loop_timeout)

    prepared_class = Prepared


class SilentFence(MutantDriver):
    """Fenced executions return a fence that is never signalled."""

    name = "silent_fence"

    class Prepared(MutantPreparedModel):
        def execute_fenced(self, request, wait_for=(), measure=MeasureTiming.NO, deadline=None,
                           loop_timeout=None, timeout_after_fence=None):
            return SyncFence(), FencedExecutionCallback()

    prepared_class = Prepared


def _output_bytes(request: Request, i: int) -> bytes:
    loc = request.outputs[i].location
    return bytes(request.pools[loc.pool_index].view()[loc.offset:loc.offset + loc.length])


def _write_output_bytes(request: Request, i: int, data: bytes) -> None:
    loc = request.outputs[i].location
    n = min(len(data), loc.length)
    request.pools[loc.pool_index].view()[loc.offset:loc.offset + n] = data[:n]


@dataclass(frozen=True)
class MutantInfo:
    cls: type[MutantDriver]
    breaks: str
    #: How a run against it ends: FAILURE (a wrong answer the suite flags), or CRASH / HANG
    #: (the process dies or stops answering: run it as service:mutant:NAME or with --isolate).
    outcome: str = "FAILURE"
    #: The conformance file whose suite the mutant proves (empty: the whole conformance suite).
    suite: str = ""
    #: Extra pytest arguments of that run (a ``-k`` selection, ``--graphs=50``): the slice of
    #: the suite that CI runs against the mutant, which must still kill it.
    args: tuple[str, ...] = ()


MUTANTS: dict[str, MutantInfo] = {
    m.cls.name: m for m in (
        MutantInfo(QuantOffBy2, "ACC-2", suite="test_operations.py", args=("-k", "quant8 and s0")),
        MutantInfo(Fp32AsFp16, "ACC-1", suite="test_operations.py", args=("-k", "float32 and s0")),
        MutantInfo(NoValidation, "VAL-1", suite="test_validation.py"),
        MutantInfo(RareConv, "ACC-5", suite="test_random_graphs.py", args=("--graphs=50", "-k", "CONV_2D")),
        MutantInfo(Drift, "ACC-5", suite="test_random_graphs.py",
                   args=("--graphs=5", "-k", "small or large")),
        MutantInfo(TimingInverted, "EXE-7", suite="test_execution.py"),
        MutantInfo(WrongDynamicShape, "EXE-4", suite="test_operations.py", args=("-k", "dynamic_output")),
        MutantInfo(StaleAsync, "EXE-3", suite="test_execution.py"),
        MutantInfo(CrashOn, "MLTS-2", "CRASH"),
        MutantInfo(HangOn, "MLTS-2", "HANG"),
        MutantInfo(BurstDeath, "BURST-4", "CRASH"),
        MutantInfo(SilentFence, "EXE-1", "HANG"),
    )
}


def _register_submodules() -> None:
    """Every submodule of this package that defines ``MUTANT_INFO`` (a sequence of MutantInfo)
    adds its mutants: a new family of mutants is one new file."""
    import importlib
    import pkgutil

    for mod in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{__name__}.{mod.name}")
        for info in getattr(module, "MUTANT_INFO", ()):
            if info.cls.name in MUTANTS:
                raise RuntimeError(f"mutant {info.cls.name!r} is registered twice")
            MUTANTS[info.cls.name] = info


_register_submodules()


def create(name: str = "", **options: str) -> MutantDriver:
    """``mutant:NAME``: the mutant driver called NAME."""
    if name not in MUTANTS:
        raise ValueError(f"unknown mutant {name!r}; known: {', '.join(MUTANTS)}")
    driver = MUTANTS[name].cls(**options)
    driver.name = f"mutant:{name}"
    return driver


__all__ = ["MUTANTS", "MutantDriver", "create"]
