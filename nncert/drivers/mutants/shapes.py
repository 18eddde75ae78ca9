"""Mutants that get shapes wrong: unknown dimensions at compile time (DRV-3) and at execution
(EXE-6), the output shapes of OUTPUT_INSUFFICIENT_SIZE (EXE-5), and those of a successful run
(EXE-4)."""

from __future__ import annotations

import dataclasses
import math
import threading

from nncert.drivers.base import ExecutionCallback, ExecutionResult, PreparedModel
from nncert.drivers.mutants import MutantDriver, MutantInfo, MutantPreparedModel
from nncert.hal.errors import HalError
from nncert.hal.model import Model, OutputShape, Request, Timing
from nncert.hal.types import ErrorStatus, MeasureTiming


class StaticShapesOnly(MutantDriver):
    """Claims every operation in supported_operations, then refuses to compile a model with an
    operand of unknown dimensions (its compiler plans every tensor's memory up front): a claimed
    model that fails to prepare (DRV-3)."""

    name = "static_shapes_only"

    def compiled(self, model: Model, prepared: PreparedModel) -> PreparedModel:
        for idx, operand in enumerate(model.main.operands):
            if operand.type.is_tensor and not operand.fully_specified:
                raise HalError(ErrorStatus.GENERAL_FAILURE,
                               f"operand {idx}: dimensions {operand.dimensions} must be known to compile")
        return prepared


class FirstShapesKept(MutantDriver):
    """Fixes the unknown dimensions of a prepared model at its first execution (it plans its
    internal buffers for the first request's shapes): a later request whose inputs have other
    dimensions fails with GENERAL_FAILURE (EXE-6)."""

    name = "first_shapes_kept"

    class Prepared(MutantPreparedModel):
        planned: tuple | None = None

        def execute_synchronously(self, request: Request, measure: MeasureTiming = MeasureTiming.NO,
                                  deadline=None, loop_timeout=None) -> tuple[list[OutputShape], Timing]:
            shapes = tuple(tuple(a.dimensions) for a in request.inputs)
            if any(shapes):
                if self.planned is None:
                    self.planned = shapes
                elif shapes != self.planned:
                    raise HalError(ErrorStatus.GENERAL_FAILURE,
                                   f"input dimensions {shapes} differ from the planned {self.planned}")
            return super().execute_synchronously(request, measure, deadline, loop_timeout)

    prepared_class = Prepared


class InsufficientUnmarked(MutantDriver):
    """Fails a too-small output with OUTPUT_INSUFFICIENT_SIZE but marks every output shape
    sufficient: the caller cannot tell which buffer to grow (EXE-5)."""

    name = "insufficient_unmarked"

    class Prepared(MutantPreparedModel):
        def execute_synchronously(self, request: Request, measure: MeasureTiming = MeasureTiming.NO,
                                  deadline=None, loop_timeout=None) -> tuple[list[OutputShape], Timing]:
            try:
                return super().execute_synchronously(request, measure, deadline, loop_timeout)
            except HalError as e:
                if e.status is not ErrorStatus.OUTPUT_INSUFFICIENT_SIZE:
                    raise
                shapes = [dataclasses.replace(s, is_sufficient=True) for s in e.output_shapes]
                raise HalError(e.status, e.message, shapes) from None

    prepared_class = Prepared


class InsufficientOnSuccess(MutantDriver):
    """Marks every output shape it reports as insufficient, whether the run failed or not: the
    values are right, but a caller trusting the flag takes a successful run for a short buffer."""

    name = "insufficient_on_success"

    def mutate_result(self, model: Model, result: tuple[list[OutputShape], Timing]
                      ) -> tuple[list[OutputShape], Timing]:
        shapes, timing = result
        return [dataclasses.replace(s, is_sufficient=False) for s in shapes], timing


class FlattensUnknownRank(MutantDriver):
    """Reports an output the model leaves of unknown rank (dimensions ()) as one dimension of
    its element count after a successful run: the values are right, the rank lost (EXE-4)."""

    name = "flattens_unknown_rank"

    def mutate_result(self, model: Model, result: tuple[list[OutputShape], Timing]
                      ) -> tuple[list[OutputShape], Timing]:
        shapes, timing = result
        sg = model.main
        return [OutputShape((math.prod(s.dimensions),), s.is_sufficient)
                if not sg.operands[idx].dimensions and len(s.dimensions) > 1 else s
                for s, idx in zip(shapes, sg.output_indexes, strict=True)], timing


class AsyncDropsShapes(MutantDriver):
    """The asynchronous path notifies a successful run with no output shapes at all (its
    completion message carries them only on failure): a caller of a model with dynamic outputs
    cannot tell their shapes (EXE-4)."""

    name = "async_drops_shapes"

    class Prepared(MutantPreparedModel):
        def execute(self, request: Request, measure: MeasureTiming = MeasureTiming.NO, deadline=None,
                    loop_timeout=None) -> ExecutionCallback:
            callback = ExecutionCallback()

            def run() -> None:
                result = self._run(request, measure, deadline, loop_timeout)
                if result.status is ErrorStatus.NONE:
                    result = ExecutionResult(result.status, [], result.timing, result.message)
                callback.notify(result)

            threading.Thread(target=run, name="nncert-execute", daemon=True).start()
            return callback

    prepared_class = Prepared


class MarksFirstInsufficient(MutantDriver):
    """Fails with OUTPUT_INSUFFICIENT_SIZE at the first output too small for its result and
    marks that one only: another output also too small is reported sufficient, so a caller
    that grows the marked buffer fails again (EXE-5)."""

    name = "marks_first_insufficient"

    class Prepared(MutantPreparedModel):
        def execute_synchronously(self, request: Request, measure: MeasureTiming = MeasureTiming.NO,
                                  deadline=None, loop_timeout=None) -> tuple[list[OutputShape], Timing]:
            try:
                return super().execute_synchronously(request, measure, deadline, loop_timeout)
            except HalError as e:
                if e.status is not ErrorStatus.OUTPUT_INSUFFICIENT_SIZE:
                    raise
                first = next((i for i, s in enumerate(e.output_shapes) if not s.is_sufficient), None)
                shapes = [dataclasses.replace(s, is_sufficient=s.is_sufficient or i != first)
                          for i, s in enumerate(e.output_shapes)]
                raise HalError(e.status, e.message, shapes) from None

    prepared_class = Prepared


MUTANT_INFO = (
    MutantInfo(StaticShapesOnly, "DRV-3", suite="test_execution.py",
               args=("-k", "unknown_dimensions_at_compile_time")),
    MutantInfo(FirstShapesKept, "EXE-6", suite="test_execution.py",
               args=("-k", "unknown_dimensions_at_compile_time")),
    MutantInfo(InsufficientUnmarked, "EXE-5", suite="test_pools.py", args=("-k", "insufficient")),
    MutantInfo(InsufficientOnSuccess, "EXE-4", suite="test_operations.py", args=("-k", "dynamic_output")),
    MutantInfo(MarksFirstInsufficient, "EXE-5", suite="test_pools.py", args=("-k", "insufficient and both")),
    MutantInfo(FlattensUnknownRank, "EXE-4", suite="test_execution.py",
               args=("-k", "dynamic_output_shapes_on_every_path")),
    MutantInfo(AsyncDropsShapes, "EXE-4", suite="test_execution.py",
               args=("-k", "dynamic_output_shapes_on_every_path")),
)
